//! The lean HTTP/1.1 server: one task per client connection reads each
//! request head, parses it once ([`h1::parse`](crate::h1::parse)), hands the
//! request to the shared request path ([`HttpService::handle`]) with a body
//! that reads the rest from the same connection ([`H1Body`]), and writes
//! the response: head and whatever body is ready in one write.
//!
//! It replaces hyper's HTTP/1.1 server, which keeps a connection state
//! machine, a dispatcher and a header map per message in between; here a
//! request is parsed, forwarded and answered on the task that read it, in
//! order, one at a time — which is what keep-alive and pipelining need
//! (RFC 9112 §9.3.2: responses go out in the order of the requests). A
//! connection that opens with the HTTP/2 preface is handed back (with the
//! bytes read) for hyper to serve, as is every TLS connection that chose h2.
//!
//! Limits, as hyper's server keeps them: a head over `max_header_bytes` or
//! with more than `max_headers` fields is answered 431, a malformed one 400,
//! both with the connection closed; the head must arrive within
//! `header_read_timeout` of its first byte; a connection with no request in
//! flight is closed after `idle_timeout` (waiting for a head, or for a
//! client that does not read its response). Bodies over `max_body_bytes`
//! are refused by the request path (413). A connection is kept for another
//! request only if the client allows it, the response was delimited, and
//! the request body was read to its end; otherwise it closes. One idle for
//! `park_after` after a request ends its task and waits in its worker's
//! parker ([`park`](crate::h1::park)) until its next bytes.
//!
//! Responses: a body of known size gets `Content-Length`, one of unknown
//! size chunked coding (HTTP/1.1) or the connection's close (HTTP/1.0);
//! `HEAD`, 1xx, 204 and 304 have none (RFC 9112 §6.3). After a 101 the
//! connection goes to the request path's tunnel ([`LeanUpgrade`]).

use std::future::{poll_fn, Future, Pending};
use std::io;
use std::pin::{pin, Pin};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::header::{self, HeaderMap};
use http::{Method, Request, Response, StatusCode, Version};
use http_body::Body as _;
use http_body_util::{BodyExt, Either};
use tokio::io::AsyncWriteExt;
use tokio::sync::{oneshot, watch};
use tokio::time::{Instant, Sleep};

use crate::client_io::IdleTimeout;
use crate::h1::conn::{fill, lock, H1Body, Inbound, Io, LeanUpgrade, Shared, Upgraded, Writer};
use crate::h1::park::{Asleep, Parking};
use crate::h1::parse::{parse_request, HeadError, RequestHead};
use crate::http::{HttpService, Peer, ProxyBody};
use crate::local_reply::{LocalReply, CONTENT_TYPE};
use crate::shutdown::{stopping, Stop};

/// What a client sends first on an HTTP/2 connection with prior knowledge
/// (RFC 9113 §3.4).
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Response bytes gathered before they are written even if more are ready.
const WRITE_BATCH: usize = 64 * 1024;

/// The limits one listener sets for its clients.
#[derive(Debug, Clone)]
pub struct ServerLimits {
    /// Largest request head.
    pub max_header_bytes: usize,
    /// Most header fields.
    pub max_headers: usize,
    /// Time from a head's first byte to its end.
    pub header_read_timeout: Duration,
    /// Time without a request in flight.
    pub idle_timeout: Duration,
    /// Idle time after which a connection is parked ([`park`](crate::h1::park)).
    pub park_after: Duration,
    /// Where this worker's connections park.
    pub parking: Arc<Parking>,
}

/// How a connection ended.
pub enum Served {
    /// Closed, or handed to a tunnel.
    Done,
    /// It speaks HTTP/2: serve it with hyper, these bytes first.
    Http2(Box<dyn Io>, BytesMut),
    /// Idle for `park_after`: park it, and serve it again with [`resume`].
    Parked(Asleep),
}

/// What waiting idle came to.
enum Idle {
    Woke,
    Close,
    Park,
}

/// What waiting for the next request head came to.
// Lives on the stack once per request; boxing the head would cost an allocation.
#[allow(clippy::large_enum_variant)]
enum Next {
    Head(RequestHead),
    /// Nothing is left to read: the connection is idle.
    Idle,
    Close,
    Http2,
    Refuse(HeadError),
}

/// What a connection's serving loop owns while it runs, and gives back
/// when everything read is answered (the connection is idle again), with
/// the stop signal.
struct Spell {
    /// The connection: kept for its whole life, so that waking it makes
    /// nothing (its read buffer is taken and released as bytes come).
    conn: Shared,
    service: Arc<HttpService>,
    peer: Arc<Peer>,
    limits: Arc<ServerLimits>,
    timer: Timer,
}

/// Serve HTTP/1.1 requests on `io` from `peer` until the connection ends,
/// or until it has been idle for `park_after` ([`Served::Parked`]).
///
/// An idle connection's task holds only the connection's shared state
/// (socket, no buffer), its timer and, before its first request, the stop
/// signal (this future, until bytes come); the read buffer is taken when
/// bytes arrive, and the
/// serving loop ([`busy`]) runs in a box kept per worker thread
/// ([`spare`]), so that waking a connection allocates nothing.
pub fn serve(
    io: Box<dyn Io>,
    service: Arc<HttpService>,
    peer: Arc<Peer>,
    limits: Arc<ServerLimits>,
    stopped: watch::Receiver<Stop>,
) -> impl Future<Output = Served> + Send {
    let conn = Inbound::open(io, limits.parking.clone());
    let timer = Timer::new(&limits, Instant::now());
    run(Spell { conn, service, peer, limits, timer }, stopped, false)
}

/// Serve a parked connection again, its bytes in its read buffer (its
/// idle time over): as [`serve`] does.
pub fn resume(
    asleep: Asleep,
    service: Arc<HttpService>,
    limits: Arc<ServerLimits>,
    stopped: watch::Receiver<Stop>,
) -> impl Future<Output = Served> + Send {
    let Asleep { conn, peer, since } = asleep;
    let timer = Timer::new(&limits, since);
    run(Spell { conn, service, peer, limits, timer }, stopped, true)
}

/// The connection's life: idle waits and serving spells, from a serving
/// spell if it `woke`.
///
/// A function returning an `async` block rather than an `async fn`, and
/// its arguments used in place: an `async fn` keeps its arguments twice in
/// its state, once as passed and once as moved into its body.
#[allow(clippy::manual_async_fn)]
fn run(mut spell: Spell, mut stopped: watch::Receiver<Stop>, mut woke: bool) -> impl Future<Output = Served> + Send {
    async move {
        loop {
            if !woke {
                let idle = if lock(&spell.conn).first {
                    // The channel changes once, to the stop: `changed` (smaller
                    // than `stopping`) resolves at once if that came before.
                    let mut stop = pin!(stopped.changed());
                    poll_fn(|cx| poll_idle(&mut spell, Some(stop.as_mut()), cx)).await
                } else {
                    // After a request, no stop signal of its own (setting one
                    // up would cost every request): within `park_after` the
                    // connection parks, and a stopped parker closes it.
                    poll_fn(|cx| poll_idle(&mut spell, None::<Pin<&mut Pending<()>>>, cx)).await
                };
                match idle {
                    Idle::Woke => {}
                    Idle::Close => return Served::Done,
                    Idle::Park => {
                        let Spell { conn, peer, timer, .. } = spell;
                        return Served::Parked(Asleep { conn, peer, since: timer.since });
                    }
                }
            }
            woke = false;
            let mut serving = spare::boxed(move || busy(spell, stopped));
            let ended = (&mut serving).await;
            spare::keep(serving);
            (spell, stopped) = match ended {
                Ok(back) => back,
                Err(served) => return served,
            };
        }
    }
}

/// Wait, with no buffer, for a connection's next bytes: up to
/// `idle_timeout` (parking it after `park_after`), or until `stop` if
/// given. (Polled by hand, in the caller's state: a future of its own, or
/// `select!`'s, is larger.)
fn poll_idle<S: Future>(spell: &mut Spell, stop: Option<Pin<&mut S>>, cx: &mut Context<'_>) -> Poll<Idle> {
    if let Poll::Ready(got) = lock(&spell.conn).poll_fill(cx) {
        return Poll::Ready(if matches!(got, Ok(n) if n > 0) { Idle::Woke } else { Idle::Close });
    }
    if stop.is_some_and(|stop| stop.poll(cx).is_ready()) {
        return Poll::Ready(Idle::Close);
    }
    while spell.timer.sleep.as_mut().poll(cx).is_ready() {
        match spell.timer.fired(&spell.limits) {
            Fired::Expired => return Poll::Ready(Idle::Close),
            // Not before its first request: it may still turn out to speak
            // HTTP/2, which hyper serves.
            Fired::Park if !lock(&spell.conn).first => return Poll::Ready(Idle::Park),
            Fired::Park => {}
            Fired::Later => {}
        }
    }
    Poll::Pending
}

/// Boxes for the connections' serving loops, kept per worker thread for
/// the connections that wake next, as the read buffers are: a keep-alive
/// client's every request wakes its connection, and a box taken from here
/// costs no allocation.
mod spare {
    use std::any::Any;
    use std::cell::RefCell;
    use std::pin::Pin;

    /// Boxes kept per thread; more are freed.
    const KEPT: usize = 64;

    thread_local! {
        /// A `Vec<Pin<Box<F>>>` of the one future type `F` kept here.
        static FREE: RefCell<Option<Box<dyn Any>>> = const { RefCell::new(None) };
    }

    /// The future `make` makes, in a box, a kept one if there is one.
    /// (Made here, not passed in: the future is large, and is then moved
    /// once, not twice.)
    #[inline(always)]
    pub(super) fn boxed<F: Any>(make: impl FnOnce() -> F) -> Pin<Box<F>> {
        let kept = FREE.with(|free| {
            let mut free = free.borrow_mut();
            free.as_mut().and_then(|v| v.downcast_mut::<Vec<Pin<Box<F>>>>()).and_then(Vec::pop)
        });
        match kept {
            Some(mut kept) => {
                kept.as_mut().set(make());
                kept
            }
            None => Box::pin(make()),
        }
    }

    /// Keep `done`'s box (its future has ended) for [`boxed`], if there is room.
    pub(super) fn keep<F: Any>(done: Pin<Box<F>>) {
        FREE.with(|free| {
            let mut free = free.borrow_mut();
            let kept = free.get_or_insert_with(|| Box::new(Vec::<Pin<Box<F>>>::with_capacity(KEPT)));
            if let Some(kept) = kept.downcast_mut::<Vec<Pin<Box<F>>>>() {
                if kept.len() < KEPT {
                    kept.push(done);
                }
            }
        });
    }
}

/// Serve the requests in `spell`'s bytes and those that follow them until
/// none is left to read (`Ok`: the connection is idle again), or the
/// connection ends (`Err`).
#[allow(clippy::manual_async_fn)]
fn busy(
    mut spell: Spell,
    mut stop_rx: watch::Receiver<Stop>,
) -> impl Future<Output = Result<(Spell, watch::Receiver<Stop>), Served>> + Send + 'static {
    async move {
        let Spell { conn, service, peer, limits, timer } = &mut spell;
        let stopped = &mut stop_rx;
        loop {
            let head = match next_head(conn, limits, timer, stopped).await {
                Next::Head(head) => head,
                Next::Idle => break,
                Next::Close => return Err(Served::Done),
                Next::Http2 => {
                    let mut inbound = lock(conn);
                    let read = std::mem::take(&mut inbound.read);
                    return Err(match inbound.io.take() {
                        Some(io) => Served::Http2(io, read),
                        None => Served::Done,
                    });
                }
                Next::Refuse(e) => {
                    Box::pin(refuse(conn, service, e, limits.idle_timeout)).await;
                    return Err(Served::Done);
                }
            };
            let (req, upgraded, keep_alive) = request(conn, head);
            let method = req.method().clone();
            let version = req.version();
            let Ok(response) = service.handle(peer, req).await;
            let switched = response.status() == StatusCode::SWITCHING_PROTOCOLS;
            let sent = respond(conn, response, &method, version, keep_alive, limits.idle_timeout).await;
            match (sent, upgraded) {
                (Ok(_), Some(tx)) if switched => {
                    let mut inbound = lock(conn);
                    // Copied out, so that the read buffer goes back to the pool
                    // instead of living as long as the tunnel.
                    let early = Bytes::copy_from_slice(&inbound.read);
                    inbound.read.clear();
                    inbound.release();
                    if let Some(io) = inbound.io.take() {
                        // The tunnel keeps the listener's idle timeout (the
                        // connection's permit travels inside `io`).
                        let io = Box::new(IdleTimeout::new(io, limits.idle_timeout, Arc::default()));
                        let _ = tx.send(Upgraded { io, early });
                    }
                    return Err(Served::Done);
                }
                (Ok(true), _) if lock(conn).body.is_done() && stopped.borrow().is_none() => {
                    lock(conn).release();
                    timer.answered();
                }
                _ => {
                    let _ = tokio::time::timeout(limits.idle_timeout, Writer(conn.clone()).shutdown()).await;
                    return Err(Served::Done);
                }
            }
        }
        Ok((spell, stop_rx))
    }
}

/// The size of [`busy`]'s future, which an idle connection does not hold.
#[cfg(test)]
pub(crate) fn busy_future_size(
    conn: &Shared,
    service: &Arc<HttpService>,
    peer: &Arc<Peer>,
    limits: &Arc<ServerLimits>,
) -> usize {
    let (conn, service, peer, limits) = (conn.clone(), service.clone(), peer.clone(), limits.clone());
    let (timer, (_tx, stopped)) = (Timer::new(&limits, Instant::now()), watch::channel(None));
    std::mem::size_of_val(&busy(Spell { conn, service, peer, limits, timer }, stopped))
}

/// The request of `head`, its body reading from `conn`; the sender for
/// the connection if the request asks to switch protocols; whether the
/// client lets the connection carry another request.
fn request(
    conn: &Shared,
    head: RequestHead,
) -> (Request<crate::body::RequestBody>, Option<oneshot::Sender<Upgraded>>, bool) {
    let RequestHead { len: _, method, uri, version, headers, framing, keep_alive, expect_continue } = head;
    lock(conn).start_body(framing, expect_continue && version == Version::HTTP_11);
    let upgrade = version == Version::HTTP_11 && headers.contains_key(header::UPGRADE);
    let mut req = Request::new(Either::Right(H1Body::new(conn.clone(), framing)));
    *req.method_mut() = method;
    *req.uri_mut() = uri;
    *req.version_mut() = version;
    *req.headers_mut() = headers;
    let upgraded = upgrade.then(|| {
        let (tx, rx) = oneshot::channel();
        req.extensions_mut().insert(LeanUpgrade::new(rx));
        tx
    });
    (req, upgraded, keep_alive)
}

/// The connection's one timer, for both the idle and the header-read limit.
///
/// A timer armed and dropped per request costs clock reads and timer-wheel
/// updates on every request. This one stays armed: a request only notes
/// when it was answered (`since`), and when the timer fires it is moved to
/// the deadline that really applies — `since + idle_timeout`, or, while a
/// head that came in pieces is read, its first byte plus
/// `header_read_timeout` — and closes the connection only if that deadline
/// has passed. An idle connection's timer fires `park_after` into its idle
/// time too, to park it.
struct Timer {
    sleep: Pin<Box<Sleep>>,
    /// When the limit in force began: the last response's end (or the
    /// connection's opening), or the first byte of the head being read.
    since: Instant,
    /// Whether a head that came in pieces is being read.
    reading_head: bool,
}

/// What a timer's firing came to.
enum Fired {
    /// The deadline in force has passed.
    Expired,
    /// Idle for `park_after`: park the connection.
    Park,
    /// Neither yet: the timer is moved to the next.
    Later,
}

impl Timer {
    /// The timer of a connection idle since `since`.
    fn new(limits: &ServerLimits, since: Instant) -> Self {
        let sleep = Box::pin(tokio::time::sleep_until(since + limits.park_after.min(limits.idle_timeout)));
        Timer { sleep, since, reading_head: false }
    }

    /// The deadline in force.
    fn deadline(&self, limits: &ServerLimits) -> Instant {
        match self.reading_head {
            true => self.since + limits.header_read_timeout,
            false => self.since + limits.idle_timeout,
        }
    }

    /// A response went out: the connection is idle from now.
    fn answered(&mut self) {
        self.since = Instant::now();
        self.reading_head = false;
    }

    /// A head began and did not arrive whole: its time starts now.
    fn start_head(&mut self, limits: &ServerLimits) {
        if !self.reading_head {
            self.reading_head = true;
            self.since = Instant::now();
            let deadline = self.deadline(limits);
            if deadline < self.sleep.deadline() {
                self.sleep.as_mut().reset(deadline);
            }
        }
    }

    /// The timer fired: whether the deadline in force has passed, or the
    /// idle connection is to park (if not, the timer is moved to the next
    /// of the two).
    fn fired(&mut self, limits: &ServerLimits) -> Fired {
        let (deadline, now) = (self.deadline(limits), Instant::now());
        if deadline <= now {
            return Fired::Expired;
        }
        let park = self.since + limits.park_after;
        let parks = !self.reading_head && park < deadline;
        self.sleep.as_mut().reset(if parks && park > now { park } else { deadline });
        match parks && park <= now {
            true => Fired::Park,
            false => Fired::Later,
        }
    }
}

/// The next request head in `conn`'s bytes, reading up to
/// `header_read_timeout` (or until the proxy stops) for the rest of it;
/// [`Next::Idle`] if no byte of one has come.
async fn next_head(
    conn: &Shared,
    limits: &ServerLimits,
    timer: &mut Timer,
    stopped: &mut watch::Receiver<Stop>,
) -> Next {
    loop {
        if lock(conn).read.is_empty() {
            // Nothing of a head yet: read what is there (a client that
            // sent its next request already keeps this state), or wait
            // for it idle. Waiting idle costs no read: tokio has noted
            // that the socket is drained.
            match poll_once(fill(conn)).await {
                Some(Ok(n)) if n > 0 => {}
                Some(_) => return Next::Close,
                None => return Next::Idle,
            }
        }
        {
            let mut inbound = lock(conn);
            let (read, first) = (&inbound.read, inbound.first);
            if first && read.len() < H2_PREFACE.len() && H2_PREFACE.starts_with(read) {
                // Maybe the HTTP/2 preface: wait for all of it.
                timer.start_head(limits);
            } else if first && read.starts_with(H2_PREFACE) {
                return Next::Http2;
            } else {
                match parse_request(read, limits.max_header_bytes, limits.max_headers) {
                    Ok(Some(head)) => {
                        bytes::Buf::advance(&mut inbound.read, head.len);
                        inbound.first = false;
                        return Next::Head(head);
                    }
                    Ok(None) => timer.start_head(limits),
                    Err(e) => return Next::Refuse(e),
                }
            }
        }
        tokio::select! {
            biased;
            got = fill(conn) => match got {
                Ok(n) if n > 0 => {}
                // The client left (a head cut short cannot be answered).
                _ => return Next::Close,
            },
            () = timer.sleep.as_mut() => if let Fired::Expired = timer.fired(limits) {
                return Next::Close;
            },
            () = stopping(stopped) => return Next::Close,
        }
    }
}

/// Answer a head that cannot be served, and count it.
async fn refuse(conn: &Shared, service: &HttpService, e: HeadError, idle: Duration) {
    let reply = match e {
        HeadError::TooLarge => LocalReply::HeadTooLarge,
        HeadError::Bad(why) => LocalReply::BadHead(why),
    };
    reply.counter(&service.stats).fetch_add(1, Relaxed);
    let text = reply.message();
    let mut out = status_line(reply.status());
    out.extend_from_slice(b"content-type: ");
    out.extend_from_slice(CONTENT_TYPE.as_bytes());
    out.extend_from_slice(b"\r\nconnection: close\r\ncontent-length: ");
    out.extend_from_slice(text.len().to_string().as_bytes());
    out.extend_from_slice(b"\r\n\r\n");
    out.extend_from_slice(text.as_bytes());
    let mut writer = Writer(conn.clone());
    let _ = send(&mut writer, &out, idle).await;
    let _ = tokio::time::timeout(idle, writer.shutdown()).await;
}

/// `HTTP/1.1 <code> <reason>` and its CRLF.
fn status_line(status: StatusCode) -> Vec<u8> {
    let mut out = Vec::with_capacity(512);
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("Unknown").as_bytes());
    out.extend_from_slice(b"\r\n");
    out
}

/// The current time as an IMF-fixdate (RFC 9110 §5.6.7), formatted once a
/// second per worker thread.
fn date_now() -> [u8; 29] {
    thread_local! {
        static CACHE: std::cell::Cell<(u64, [u8; 29])> = const { std::cell::Cell::new((u64::MAX, [0; 29])) };
    }
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    CACHE.with(|cache| {
        let (at, text) = cache.get();
        if at == secs {
            return text;
        }
        let text = imf_fixdate(secs);
        cache.set((secs, text));
        text
    })
}

/// `secs` after the Unix epoch as `Sun, 06 Nov 1994 08:49:37 GMT`.
fn imf_fixdate(secs: u64) -> [u8; 29] {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let days = secs / 86_400;
    let (h, m, s) = (secs % 86_400 / 3600, secs % 3600 / 60, secs % 60);
    // The civil date of a day count (Howard Hinnant's days_from_civil, inverted).
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    let text = format!(
        "{}, {day:02} {} {year:04} {h:02}:{m:02}:{s:02} GMT",
        DAYS[(days % 7) as usize],
        MONTHS[(month - 1) as usize]
    );
    let mut out = [b' '; 29];
    let n = text.len().min(29);
    out[..n].copy_from_slice(&text.as_bytes()[..n]);
    out
}

/// How a response body is delimited on the client connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Out {
    None,
    Length,
    Chunked,
    UntilClose,
}

/// The response head for a request of `method` and `version`, and how its
/// body goes out.
fn encode_head(
    status: StatusCode,
    headers: &HeaderMap,
    size: Option<u64>,
    method: &Method,
    version: Version,
    keep_alive: bool,
) -> (Vec<u8>, Out) {
    let bodyless = method == Method::HEAD
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED;
    let out = match (bodyless, size) {
        (true, _) => Out::None,
        (false, Some(_)) => Out::Length,
        (false, None) if version == Version::HTTP_11 => Out::Chunked,
        (false, None) => Out::UntilClose,
    };
    let mut head = status_line(status);
    for (name, value) in headers {
        // The framing is this connection's own; HEAD keeps the length it
        // would have had.
        let own = *name == header::TRANSFER_ENCODING || (*name == header::CONTENT_LENGTH && !bodyless);
        if own || *name == header::CONNECTION {
            continue;
        }
        head.extend_from_slice(name.as_str().as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(value.as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    match (out, size) {
        (Out::Length, Some(n)) => {
            head.extend_from_slice(b"content-length: ");
            head.extend_from_slice(n.to_string().as_bytes());
            head.extend_from_slice(b"\r\n");
        }
        (Out::Chunked, _) => head.extend_from_slice(b"transfer-encoding: chunked\r\n"),
        _ => {}
    }
    if !headers.contains_key(header::DATE) {
        // RFC 9110 §6.6.1: a proxy adds the Date an upstream left out.
        head.extend_from_slice(b"date: ");
        head.extend_from_slice(&date_now());
        head.extend_from_slice(b"\r\n");
    }
    if status == StatusCode::SWITCHING_PROTOCOLS {
        head.extend_from_slice(b"connection: upgrade\r\n");
    } else if !keep_alive || out == Out::UntilClose {
        head.extend_from_slice(b"connection: close\r\n");
    } else if version == Version::HTTP_10 {
        head.extend_from_slice(b"connection: keep-alive\r\n");
    }
    head.extend_from_slice(b"\r\n");
    (head, out)
}

/// Write `response` to a request of `method` and `version`; `Ok(true)` if
/// the connection can carry another request.
async fn respond(
    conn: &Shared,
    response: Response<ProxyBody>,
    method: &Method,
    version: Version,
    keep_alive: bool,
    idle: Duration,
) -> io::Result<bool> {
    let (parts, mut body) = response.into_parts();
    let size = body.size_hint().exact();
    let (mut out, framing) = encode_head(parts.status, &parts.headers, size, method, version, keep_alive);
    let mut writer = Writer(conn.clone());
    if framing == Out::None {
        drop(body);
        send(&mut writer, &out, idle).await?;
        return Ok(keep_alive);
    }
    loop {
        // Gather what is ready; write when the body must be waited for.
        let frame = match poll_once(body.frame()).await {
            Some(frame) => frame,
            None if out.is_empty() => match tokio::time::timeout(idle, body.frame()).await {
                Ok(frame) => frame,
                Err(_) => return Err(io::ErrorKind::TimedOut.into()),
            },
            None => {
                send(&mut writer, &out, idle).await?;
                out.clear();
                continue;
            }
        };
        let data = match frame {
            None => break,
            Some(Err(_)) => {
                // The upstream's body broke: the client must see it end
                // short, so the connection closes without the last chunk.
                send(&mut writer, &out, idle).await?;
                return Ok(false);
            }
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) if !data.is_empty() => data,
                _ => continue,
            },
        };
        push_data(&mut out, &data, framing == Out::Chunked);
        if out.len() >= WRITE_BATCH {
            send(&mut writer, &out, idle).await?;
            out.clear();
        }
    }
    if framing == Out::Chunked {
        out.extend_from_slice(b"0\r\n\r\n");
    }
    send(&mut writer, &out, idle).await?;
    Ok(keep_alive && framing != Out::UntilClose)
}

/// Append `data` to `out`, as one chunk if `chunked`.
fn push_data(out: &mut Vec<u8>, data: &Bytes, chunked: bool) {
    if chunked {
        out.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
        out.extend_from_slice(data);
        out.extend_from_slice(b"\r\n");
    } else {
        out.extend_from_slice(data);
    }
}

/// `fut`'s output if it is ready at once.
async fn poll_once<F: Future>(fut: F) -> Option<F::Output> {
    let mut fut = pin!(fut);
    poll_fn(|cx| {
        Poll::Ready(match fut.as_mut().poll(cx) {
            Poll::Ready(v) => Some(v),
            Poll::Pending => None,
        })
    })
    .await
}

/// Write all of `data`; a client that takes none of it for `idle` is gone.
async fn send(writer: &mut Writer, data: &[u8], idle: Duration) -> io::Result<()> {
    if data.is_empty() {
        return Ok(());
    }
    let mut write = pin!(writer.write_all(data));
    // Most writes finish at once: no timer for those.
    if let Some(done) = poll_once(write.as_mut()).await {
        return done;
    }
    tokio::time::timeout(idle, write).await.unwrap_or_else(|_| Err(io::ErrorKind::TimedOut.into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head_of(status: StatusCode, size: Option<u64>, method: Method, version: Version, keep: bool) -> (String, Out) {
        let mut headers = HeaderMap::new();
        headers.insert(header::CONTENT_LENGTH, "7".parse().unwrap());
        headers.insert("x-a", "1".parse().unwrap());
        let (head, out) = encode_head(status, &headers, size, &method, version, keep);
        (String::from_utf8(head).unwrap(), out)
    }

    #[test]
    fn responses_are_delimited_as_rfc_9112_says() {
        let (head, out) = head_of(StatusCode::OK, Some(7), Method::GET, Version::HTTP_11, true);
        assert!(head.starts_with("HTTP/1.1 200 OK\r\nx-a: 1\r\ncontent-length: 7\r\ndate: "), "{head}");
        assert!(head.ends_with(" GMT\r\n\r\n"), "{head}");
        assert_eq!(out, Out::Length);
        let (head, out) = head_of(StatusCode::OK, None, Method::GET, Version::HTTP_11, true);
        assert!(head.starts_with("HTTP/1.1 200 OK\r\nx-a: 1\r\ntransfer-encoding: chunked\r\ndate: "), "{head}");
        assert_eq!(out, Out::Chunked);
        let (head, out) = head_of(StatusCode::OK, None, Method::GET, Version::HTTP_10, true);
        assert!(head.ends_with("connection: close\r\n\r\n"));
        assert_eq!(out, Out::UntilClose);
        // HEAD keeps the length the body would have had; 204 and 304 have none.
        let (head, out) = head_of(StatusCode::OK, Some(0), Method::HEAD, Version::HTTP_11, true);
        assert!(head.contains("content-length: 7\r\n"));
        assert_eq!(out, Out::None);
        assert_eq!(head_of(StatusCode::NO_CONTENT, Some(0), Method::GET, Version::HTTP_11, true).1, Out::None);
        let (head, _) = head_of(StatusCode::OK, Some(7), Method::GET, Version::HTTP_10, true);
        assert!(head.ends_with("connection: keep-alive\r\n\r\n"));
        let (head, _) = head_of(StatusCode::OK, Some(7), Method::GET, Version::HTTP_11, false);
        assert!(head.ends_with("connection: close\r\n\r\n"));
    }

    #[test]
    fn dates_are_imf_fixdates() {
        assert_eq!(&imf_fixdate(784_111_777), b"Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(&imf_fixdate(0), b"Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(&imf_fixdate(951_782_400), b"Tue, 29 Feb 2000 00:00:00 GMT");
        assert_eq!(&imf_fixdate(1_795_478_399), b"Mon, 23 Nov 2026 23:59:59 GMT");
    }

    #[test]
    fn a_kept_box_is_taken_again() {
        let at = |b: &Pin<Box<std::future::Ready<u8>>>| std::ptr::from_ref(&**b) as usize;
        let first = spare::boxed(|| std::future::ready(1));
        let kept = at(&first);
        spare::keep(first);
        let mut again = spare::boxed(|| std::future::ready(2));
        assert_eq!(at(&again), kept, "the kept box was not taken");
        let other = spare::boxed(|| std::future::ready(3));
        assert_ne!(at(&other), kept, "one box given twice");
        let waker = std::task::Waker::noop();
        assert_eq!(again.as_mut().poll(&mut Context::from_waker(waker)), Poll::Ready(2));
    }

    #[test]
    fn chunks_carry_their_size() {
        let mut out = Vec::new();
        push_data(&mut out, &Bytes::from_static(b"0123456789abcdefg"), true);
        push_data(&mut out, &Bytes::from_static(b"x"), false);
        assert_eq!(out, b"11\r\n0123456789abcdefg\r\nx");
    }
}

//! HTTP/1.1 on both sides of the proxy, without hyper: the lean server
//! ([`server`]), the client connection as the request path sees it
//! ([`conn`]), the framing both share ([`parse`]), and here the lean client
//! for upstream connections: the request's own task writes the request and
//! reads the response on the connection it holds.
//!
//! hyper's connection-level client runs every connection as a task of its
//! own and passes requests and responses to it over channels. A proxy holds
//! one exchange per HTTP/1.1 connection anyway, so here the exchange runs
//! inline instead: one write for the head (and the body as it streams), then
//! the response head is parsed with `httparse` from the connection's read
//! buffer, and the [`ResponseBody`] reads the rest from the same socket as
//! the client side asks for it. `bench/proxy-instructions` counts what that
//! saves per request.
//!
//! Framing follows RFC 9112 (the chunked decoder is the lean server's,
//! [`h1::parse::Chunked`](crate::h1::parse::Chunked)). A request keeps the client's `Content-Length`
//! or, when its length is unknown, goes out chunked. A response is delimited
//! (§6.3) by nothing for `HEAD`, 204 and 304; by chunked transfer coding; by
//! `Content-Length` (differing values are an error); or else by the
//! connection's close. 1xx responses other than 101 are skipped; a 101 is
//! an answer only to [`upgrade`], which hands the connection over to a
//! tunnel (WebSockets) and never pools it. A
//! connection is reused only when its response was read to the end, nothing
//! followed it, and neither side asked to close.
//!
//! While a request body streams out, the connection is also watched for
//! the response head: an upstream may answer early (a 413 before it has read
//! a large body) and stop reading, and the client hears that answer at once.

pub mod conn;
pub mod park;
pub mod parse;
pub mod server;

use std::future::poll_fn;
use std::io::{self, Write as _};
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode, Version};
use http_body::{Body, Frame, SizeHint};
use http_body_util::{BodyExt, Either};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::OwnedSemaphorePermit;

use crate::body::{idempotent, LimitedBody, UpstreamBody};
use crate::upstream_tls::UpstreamStream;
use parse::{Chunk, Chunked};

/// A response head larger than this breaks the protocol.
const MAX_HEAD_BYTES: usize = 64 * 1024;
/// More response headers than this break the protocol (hyper's default).
const MAX_HEADERS: usize = 100;
/// Room made in the read buffer before each read.
const READ_CHUNK: usize = 8 * 1024;

/// An open HTTP/1.1 connection to an upstream, between exchanges.
pub struct Connection {
    stream: UpstreamStream,
    /// Bytes read and not yet taken.
    read: BytesMut,
    /// The cluster's connection permit, held while the connection is open.
    _permit: OwnedSemaphorePermit,
}

/// Where a connection goes once a response body has ended with the
/// connection able to carry another exchange: the pool's lease. The client
/// knows no pool; dropped instead, the connection closes.
pub trait GiveBack: Send + Unpin + 'static {
    /// Take `conn` back for the next exchange.
    fn give_back(self, conn: Connection);
}

/// Why an exchange gave no response.
#[derive(Debug)]
pub enum ExchangeError {
    /// The upstream cannot have acted on the request (not all of its head
    /// arrived, or the keep-alive race of [`Connection::exchange`]): here it
    /// is back.
    Unsent(Box<Request<UpstreamBody>>),
    /// The connection broke, or the upstream broke the protocol, after the
    /// request went out.
    Broken,
}

impl Connection {
    /// A connection on `stream`, holding `permit` until it closes.
    pub fn new(stream: UpstreamStream, permit: OwnedSemaphorePermit) -> Self {
        Connection { stream, read: BytesMut::new(), _permit: permit }
    }

    /// Whether the upstream closed the connection (or sent something
    /// unasked) while it was idle. Costs a system call only when the socket
    /// has been readable since it was last read to the end.
    pub fn is_closed(&mut self) -> bool {
        self.stream.is_closed()
    }

    /// Send `req` and read the response head. The response's body reads the
    /// rest and hands the connection to `lease` once it has ended, if the
    /// connection can carry another exchange.
    ///
    /// On a `reused` connection, an idempotent request without a body that
    /// meets the connection's close before a byte of answer comes back
    /// unsent: the upstream closed an idle connection as the request went
    /// out (the keep-alive race), so it did not act on it.
    pub async fn exchange<L: GiveBack>(
        mut self,
        req: Request<UpstreamBody>,
        lease: L,
        reused: bool,
    ) -> Result<Response<ResponseBody<L>>, ExchangeError> {
        let length = req.headers().get(header::CONTENT_LENGTH).is_some();
        let chunked = !length && matches!(req.body(), Either::Left(_));
        let request_head = encode_head(&req, chunked);
        if self.stream.write_all(&request_head).await.is_err() {
            // At most part of a head arrived: the upstream cannot have acted on it.
            return Err(ExchangeError::Unsent(Box::new(req)));
        }
        let (parts, body) = req.into_parts();
        let replayable = matches!(body, Either::Right(_)) && idempotent(&parts.method);
        let (head, body_sent) = match body {
            Either::Right(_) => (read_head(&mut self.stream, &mut self.read, false).await, true),
            Either::Left(body) => self.write_body_and_read_head(body, chunked).await?,
        };
        let head = match head {
            Ok(head) => head,
            Err(NoHead::Silent) if reused && replayable => {
                let unsent = Request::from_parts(parts, Either::Right(http_body_util::Empty::new()));
                return Err(ExchangeError::Unsent(Box::new(unsent)));
            }
            Err(_) => return Err(ExchangeError::Broken),
        };
        let framing = framing(&parts.method, head.status, head.delimiters).ok_or(ExchangeError::Broken)?;
        // The request's own Connection header was stripped on the way in:
        // only the upstream's answer decides. A response with both
        // Transfer-Encoding and Content-Length is read once, then the
        // connection closes (RFC 9112 §6.3).
        let d = head.delimiters;
        let both_lengths = d.chunked.is_some() && d.length.is_some();
        let keep_alive = body_sent
            && head.version == Version::HTTP_11
            && !matches!(framing, BodyState::UntilClose)
            && !d.close
            && !both_lengths;
        let mut body = ResponseBody { conn: Some(self), state: framing, keep_alive, lease: Some(lease) };
        if body.is_end_stream() {
            body.finish();
        }
        let mut response = Response::new(body);
        *response.status_mut() = head.status;
        *response.version_mut() = head.version;
        *response.headers_mut() = head.headers;
        Ok(response)
    }

    /// Stream the request body while watching for the response head: an
    /// upstream may answer before it has read the whole body (a 413, say)
    /// and then stop reading. The head, and whether the whole body went out
    /// (if not, the connection closes after the response).
    async fn write_body_and_read_head(
        &mut self,
        body: LimitedBody,
        chunked: bool,
    ) -> Result<(Result<Head, NoHead>, bool), ExchangeError> {
        match &mut self.stream {
            UpstreamStream::Plain(s) => {
                let (from, to) = s.split();
                body_and_head(from, to, &mut self.read, body, chunked).await
            }
            UpstreamStream::Tls(s) => {
                let (from, to) = tokio::io::split(s.as_mut());
                body_and_head(from, to, &mut self.read, body, chunked).await
            }
        }
    }
}

/// [`Connection::write_body_and_read_head`] on the two halves of a connection.
async fn body_and_head<R, W>(
    mut from: R,
    mut to: W,
    read: &mut BytesMut,
    body: LimitedBody,
    chunked: bool,
) -> Result<(Result<Head, NoHead>, bool), ExchangeError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    {
        let write = write_body(&mut to, body, chunked);
        let read = read_head(&mut from, read, false);
        tokio::pin!(write, read);
        let mut sent = None;
        loop {
            tokio::select! {
                head = &mut read => return Ok((head, sent == Some(true))),
                written = &mut write, if sent.is_none() => match written {
                    Ok(()) => sent = Some(true),
                    // The client's body broke: the upstream would wait for the rest.
                    Err(BodyWriteError::Client) => return Err(ExchangeError::Broken),
                    // The upstream stopped reading: an answer may still be there.
                    Err(BodyWriteError::Upstream) => sent = Some(false),
                },
            }
        }
    }
}

/// Why a request body did not go out whole.
#[derive(Debug, PartialEq, Eq)]
enum BodyWriteError {
    /// The client's body ended in an error (or outgrew `max_body_bytes`).
    Client,
    /// Writing to the upstream failed.
    Upstream,
}

/// Write `body` to `out`, in chunked coding if `chunked`.
async fn write_body<W, B>(out: &mut W, mut body: B, chunked: bool) -> Result<(), BodyWriteError>
where
    W: AsyncWrite + Unpin,
    B: Body<Data = Bytes> + Unpin,
{
    let upstream = |_| BodyWriteError::Upstream;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|_| BodyWriteError::Client)?;
        // Trailers are not forwarded.
        let Ok(data) = frame.into_data() else { continue };
        if data.is_empty() {
            continue;
        }
        if chunked {
            // One write per chunk: size line, data and CRLF together.
            let mut chunk = Vec::with_capacity(data.len() + 20);
            let _ = write!(chunk, "{:x}\r\n", data.len());
            chunk.extend_from_slice(&data);
            chunk.extend_from_slice(b"\r\n");
            out.write_all(&chunk).await.map_err(upstream)?;
        } else {
            out.write_all(&data).await.map_err(upstream)?;
        }
    }
    if chunked {
        out.write_all(b"0\r\n\r\n").await.map_err(upstream)?;
    }
    Ok(())
}

/// Why no response head came.
#[derive(Debug, PartialEq, Eq)]
enum NoHead {
    /// The connection ended before a single byte of an answer.
    Silent,
    /// The connection ended partway, or the head breaks the protocol.
    Broken,
}

/// The response head from `from` (bytes read land in `read`), after any
/// 1xx interim responses; a 101 is an answer only if `upgrade` asked for one.
async fn read_head<R: AsyncRead + Unpin>(from: &mut R, read: &mut BytesMut, upgrade: bool) -> Result<Head, NoHead> {
    let mut heard = false;
    loop {
        if !read.is_empty() {
            heard = true;
            match parse_head(read).ok_or(NoHead::Broken)? {
                Some(head) => {
                    read.advance(head.len);
                    if head.status.is_informational() && !(upgrade && head.status == StatusCode::SWITCHING_PROTOCOLS) {
                        // 100 Continue, 103 Early Hints: the answer follows.
                        // 101 would switch protocols, which nothing here asked for.
                        if head.status == StatusCode::SWITCHING_PROTOCOLS {
                            return Err(NoHead::Broken);
                        }
                        continue;
                    }
                    return Ok(head);
                }
                None if read.len() >= MAX_HEAD_BYTES => return Err(NoHead::Broken),
                None => {}
            }
        }
        match poll_fn(|cx| poll_fill(from, read, cx)).await {
            Ok(0) | Err(_) if heard => return Err(NoHead::Broken),
            Ok(0) | Err(_) => return Err(NoHead::Silent),
            Ok(_) => {}
        }
    }
}

/// Read what `from` has into `read`: the count, 0 at its end.
fn poll_fill<R: AsyncRead + Unpin>(from: &mut R, read: &mut BytesMut, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
    read.reserve(READ_CHUNK);
    // tokio's `poll_read` forgets the socket's readiness when a read
    // leaves room in the buffer, so that `is_closed` costs no system call
    // on a connection whose response was read to the end.
    tokio_util::io::poll_read_buf(Pin::new(from), cx, read)
}

/// The request line and headers, with `Transfer-Encoding: chunked` when the
/// body's length is unknown. Requests go out in origin form (`/path?query`).
fn encode_head(req: &Request<UpstreamBody>, chunked: bool) -> Vec<u8> {
    let target = req.uri().path_and_query().map_or("/", |p| p.as_str());
    let headers = req.headers();
    let size = headers.iter().map(|(n, v)| n.as_str().len() + v.len() + 4).sum::<usize>();
    let mut head = Vec::with_capacity(req.method().as_str().len() + target.len() + size + 64);
    head.extend_from_slice(req.method().as_str().as_bytes());
    head.push(b' ');
    head.extend_from_slice(target.as_bytes());
    head.extend_from_slice(b" HTTP/1.1\r\n");
    for (name, value) in headers {
        head.extend_from_slice(name.as_str().as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(value.as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    if chunked {
        head.extend_from_slice(b"transfer-encoding: chunked\r\n");
    }
    head.extend_from_slice(b"\r\n");
    head
}

/// The upstream's answer to an Upgrade request ([`upgrade`]).
#[derive(Debug)]
pub enum UpgradeAnswer {
    /// 101: the connection now speaks the new protocol; `early` holds what
    /// the upstream sent after the head, for the client.
    Switched {
        /// The 101's headers.
        headers: HeaderMap,
        /// The connection.
        stream: UpstreamStream,
        /// Bytes read past the head.
        early: Bytes,
    },
    /// Any other final status; the connection is dropped (its body is not read).
    Refused {
        /// The status.
        status: StatusCode,
        /// Its headers.
        headers: HeaderMap,
    },
}

/// Send the head of `req`, an Upgrade request without a body, on the new
/// connection `stream` and read the answer (RFC 9110 §7.8). `None` if the
/// connection broke or the answer breaks the protocol.
pub async fn upgrade(mut stream: UpstreamStream, req: &Request<UpstreamBody>) -> Option<UpgradeAnswer> {
    stream.write_all(&encode_head(req, false)).await.ok()?;
    let mut read = BytesMut::new();
    let head = read_head(&mut stream, &mut read, true).await.ok()?;
    Some(if head.status == StatusCode::SWITCHING_PROTOCOLS {
        // Copied: the tunnel would otherwise keep the whole read buffer.
        UpgradeAnswer::Switched { headers: head.headers, stream, early: Bytes::copy_from_slice(&read) }
    } else {
        UpgradeAnswer::Refused { status: head.status, headers: head.headers }
    })
}

/// A parsed response head.
#[derive(Debug)]
struct Head {
    /// Its length in the buffer.
    len: usize,
    status: StatusCode,
    version: Version,
    headers: HeaderMap,
    /// What its headers say about the body and the connection.
    delimiters: Delimiters,
}

/// The headers that delimit a response body or end its connection, read
/// while the head is parsed rather than looked up afterwards.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Delimiters {
    /// `Content-Length`; `Err` if its values disagree or do not parse.
    length: Option<Result<u64, ()>>,
    /// `Transfer-Encoding`: whether its final coding is chunked.
    chunked: Option<bool>,
    /// `Connection` lists `close`.
    close: bool,
}

impl Delimiters {
    fn note(&mut self, name: &str, value: &[u8]) {
        let tokens = || value.split(|&b| b == b',').map(<[u8]>::trim_ascii);
        if name.eq_ignore_ascii_case("content-length") {
            for item in tokens() {
                let n = std::str::from_utf8(item).ok().and_then(|d| d.parse::<u64>().ok()).ok_or(());
                self.length = Some(match (self.length, n) {
                    (None, n) => n,
                    (Some(Ok(seen)), Ok(n)) if seen == n => Ok(n),
                    _ => Err(()),
                });
            }
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            self.chunked = tokens().next_back().map(|coding| coding.eq_ignore_ascii_case(b"chunked"));
        } else if name.eq_ignore_ascii_case("connection") {
            self.close |= tokens().any(|token| token.eq_ignore_ascii_case(b"close"));
        }
    }
}

/// A complete response head at the start of `buf`; `Ok(None)` if more is
/// needed, `None` if it breaks the protocol.
fn parse_head(buf: &[u8]) -> Option<Option<Head>> {
    // Most heads have a few headers: 16 slots are cheaper to set up than
    // the 100 allowed, which are only used when 16 are not enough.
    let mut few = [httparse::EMPTY_HEADER; 16];
    match parse_into(buf, &mut few) {
        Err(httparse::Error::TooManyHeaders) => parse_into(buf, &mut [httparse::EMPTY_HEADER; MAX_HEADERS]).ok(),
        parsed => parsed.ok(),
    }
}

fn parse_into<'b>(buf: &'b [u8], slots: &mut [httparse::Header<'b>]) -> Result<Option<Head>, httparse::Error> {
    let mut parsed = httparse::Response::new(slots);
    let len = match parsed.parse(buf)? {
        httparse::Status::Partial => return Ok(None),
        httparse::Status::Complete(len) => len,
    };
    let status = parsed.code.and_then(|c| StatusCode::from_u16(c).ok()).ok_or(httparse::Error::Status)?;
    let version = if parsed.version == Some(0) { Version::HTTP_10 } else { Version::HTTP_11 };
    let mut headers = HeaderMap::with_capacity(parsed.headers.len());
    let mut delimiters = Delimiters::default();
    for h in parsed.headers.iter() {
        delimiters.note(h.name, h.value);
        let name = HeaderName::from_bytes(h.name.as_bytes()).map_err(|_| httparse::Error::HeaderName)?;
        let value = HeaderValue::from_bytes(h.value).map_err(|_| httparse::Error::HeaderValue)?;
        headers.append(name, value);
    }
    Ok(Some(Head { len, status, version, headers, delimiters }))
}

/// How the response body is delimited (RFC 9112 §6.3), or `None` if its
/// `Content-Length` values disagree or do not parse.
fn framing(method: &Method, status: StatusCode, delimiters: Delimiters) -> Option<BodyState> {
    if method == Method::HEAD || status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED {
        return Some(BodyState::Length(0));
    }
    Some(match (delimiters.chunked, delimiters.length) {
        // Transfer-Encoding wins over Content-Length.
        (Some(true), _) => BodyState::Chunked(Chunked::default()),
        (Some(false), _) | (None, None) => BodyState::UntilClose,
        (None, Some(length)) => BodyState::Length(length.ok()?),
    })
}

/// Where a response body stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BodyState {
    /// This many bytes are still to come.
    Length(u64),
    /// Chunked transfer coding, decoded as it is read.
    Chunked(Chunked),
    /// Everything until the upstream closes.
    UntilClose,
    /// The body has ended.
    Done,
}

/// The error a [`ResponseBody`] ends with.
#[derive(Debug, thiserror::Error)]
pub enum ResponseBodyError {
    /// The connection broke.
    #[error("upstream connection: {0}")]
    Io(#[from] io::Error),
    /// The connection ended before the body did.
    #[error("upstream closed the connection before the body ended")]
    Incomplete,
    /// The chunked coding is malformed.
    #[error("upstream sent malformed chunked coding")]
    Malformed,
}

/// A response body read from its upstream connection as it is polled,
/// which gives the connection back through `L` when it has ended.
pub struct ResponseBody<L> {
    /// `None` once the body has ended or broken.
    conn: Option<Connection>,
    state: BodyState,
    keep_alive: bool,
    lease: Option<L>,
}

impl<L: GiveBack> ResponseBody<L> {
    /// The body has ended: the connection goes back to the pool if it can
    /// carry another exchange.
    fn finish(&mut self) {
        self.state = BodyState::Done;
        let (Some(conn), Some(lease)) = (self.conn.take(), self.lease.take()) else { return };
        if self.keep_alive && conn.read.is_empty() {
            lease.give_back(conn);
        }
    }

    fn fail(&mut self, e: ResponseBodyError) -> Poll<Option<Result<Frame<Bytes>, ResponseBodyError>>> {
        self.state = BodyState::Done;
        self.conn = None;
        Poll::Ready(Some(Err(e)))
    }

    /// Up to `left` bytes from the read buffer as a data frame.
    fn take(&mut self, left: u64) -> Bytes {
        let conn = self.conn.as_mut().expect("a body being read has its connection");
        let n = conn.read.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        conn.read.split_to(n).freeze()
    }

    /// Advance a chunked body over what the buffer holds: a data frame, the
    /// end (`None`), or `Pending` if more must be read first.
    fn step_chunked(&mut self, mut chunked: Chunked) -> Result<Poll<Option<Bytes>>, ResponseBodyError> {
        let read = &mut self.conn.as_mut().expect("a body being read has its connection").read;
        let data = chunked.step(read).map_err(|_| ResponseBodyError::Malformed)?;
        self.state = BodyState::Chunked(chunked);
        Ok(match data {
            Some(data) => Poll::Ready(Some(data)),
            None if chunked.at == Chunk::Done => {
                self.finish();
                Poll::Ready(None)
            }
            None => Poll::Pending,
        })
    }
}

impl<L: GiveBack> Body for ResponseBody<L> {
    type Data = Bytes;
    type Error = ResponseBodyError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        loop {
            let Some(conn) = self.conn.as_mut() else { return Poll::Ready(None) };
            let buffered = !conn.read.is_empty();
            match self.state {
                BodyState::Done => return Poll::Ready(None),
                BodyState::Length(left) if buffered => {
                    let data = self.take(left);
                    let left = left - data.len() as u64;
                    self.state = BodyState::Length(left);
                    if left == 0 {
                        // The last byte: whoever polls may not poll again.
                        self.finish();
                    }
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                BodyState::UntilClose if buffered => {
                    let data = self.take(u64::MAX);
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                BodyState::Chunked(chunk) => match self.step_chunked(chunk) {
                    Err(e) => return self.fail(e),
                    Ok(Poll::Ready(Some(data))) => return Poll::Ready(Some(Ok(Frame::data(data)))),
                    Ok(Poll::Ready(None)) => return Poll::Ready(None),
                    Ok(Poll::Pending) => {}
                },
                BodyState::Length(_) | BodyState::UntilClose => {}
            }
            // The buffer holds too little: read more.
            let conn = self.conn.as_mut().expect("checked above");
            match ready!(poll_fill(&mut conn.stream, &mut conn.read, cx)) {
                Err(e) => return self.fail(e.into()),
                Ok(0) if self.state == BodyState::UntilClose => {
                    self.finish();
                    return Poll::Ready(None);
                }
                Ok(0) => return self.fail(ResponseBodyError::Incomplete),
                Ok(_) => {}
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.state, BodyState::Done | BodyState::Length(0))
    }

    fn size_hint(&self) -> SizeHint {
        match self.state {
            BodyState::Length(left) => SizeHint::with_exact(left),
            BodyState::Done => SizeHint::with_exact(0),
            BodyState::Chunked(_) | BodyState::UntilClose => SizeHint::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The framing of a response with these header lines to `method`.
    fn framing_of(method: Method, head: &str) -> Option<BodyState> {
        let head = parse_head(format!("{head}\r\n\r\n").as_bytes()).unwrap().unwrap();
        framing(&method, head.status, head.delimiters)
    }

    #[test]
    fn framing_follows_rfc_9112() {
        let ok = "HTTP/1.1 200 OK";
        let get = || Method::GET;
        assert_eq!(framing_of(Method::HEAD, &format!("{ok}\r\ncontent-length: 5")), Some(BodyState::Length(0)));
        assert_eq!(framing_of(get(), "HTTP/1.1 204 No Content"), Some(BodyState::Length(0)));
        assert_eq!(framing_of(get(), "HTTP/1.1 304 Not Modified"), Some(BodyState::Length(0)));
        assert_eq!(framing_of(get(), &format!("{ok}\r\nContent-Length: 5")), Some(BodyState::Length(5)));
        assert_eq!(framing_of(get(), &format!("{ok}\r\ncontent-length: 5, 5")), Some(BodyState::Length(5)));
        assert_eq!(framing_of(get(), &format!("{ok}\r\ncontent-length: 5\r\ncontent-length: 6")), None);
        assert_eq!(framing_of(get(), &format!("{ok}\r\ncontent-length: 5, 6")), None);
        assert_eq!(framing_of(get(), &format!("{ok}\r\ncontent-length: -1")), None);
        // Transfer-Encoding wins over Content-Length; chunked must be the final coding.
        let te = format!("{ok}\r\ntransfer-encoding: gzip, Chunked\r\ncontent-length: 5");
        assert_eq!(framing_of(get(), &te), Some(BodyState::Chunked(Chunked::default())));
        let te = format!("{ok}\r\ntransfer-encoding: chunked, gzip");
        assert_eq!(framing_of(get(), &te), Some(BodyState::UntilClose));
        assert_eq!(framing_of(get(), ok), Some(BodyState::UntilClose));
    }

    #[test]
    fn heads_parse_whole_or_wait_for_more() {
        let full = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-A: 1\r\nX-A: 2\r\n\r\nok";
        let head = parse_head(full).unwrap().unwrap();
        assert_eq!((head.len, head.status, head.version), (full.len() - 2, StatusCode::OK, Version::HTTP_11));
        assert_eq!(head.headers.get_all("x-a").iter().count(), 2);
        assert!(parse_head(&full[..20]).unwrap().is_none());
        assert!(parse_head(b"HTTP/1.1 2000 OK\r\n\r\n").is_none());
        assert!(parse_head(b"SMTP ready\r\n\r\n").is_none());
        // Past 16 headers the larger array takes them; past 100 nothing does.
        let lines = |n: usize| (0..n).map(|i| format!("x-{i}: 1\r\n")).collect::<String>();
        let head = parse_head(format!("HTTP/1.0 200 OK\r\n{}\r\n", lines(MAX_HEADERS)).as_bytes()).unwrap().unwrap();
        assert_eq!((head.headers.len(), head.version), (MAX_HEADERS, Version::HTTP_10));
        assert!(parse_head(format!("HTTP/1.1 200 OK\r\n{}\r\n", lines(MAX_HEADERS + 1)).as_bytes()).is_none());
    }

    #[test]
    fn connection_close_is_a_token_in_a_list() {
        let close = |line: &str| {
            parse_head(format!("HTTP/1.1 200 OK\r\n{line}\r\n\r\n").as_bytes()).unwrap().unwrap().delimiters.close
        };
        assert!(close("Connection: keep-alive, Close"));
        assert!(!close("connection: closed"));
        assert!(!close("x-connection: close"));
    }

    /// A body of these data frames, last first.
    struct Frames(Vec<&'static str>);

    impl Body for Frames {
        type Data = Bytes;
        type Error = io::Error;

        fn poll_frame(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<io::Result<Frame<Bytes>>>> {
            Poll::Ready(self.0.pop().map(|d| Ok(Frame::data(Bytes::from(d)))))
        }
    }

    #[tokio::test]
    async fn bodies_of_unknown_length_go_out_chunked() {
        use tokio::io::AsyncReadExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let stream = tokio::net::TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        let stream = UpstreamStream::Plain(stream);
        let (mut upstream, _) = listener.accept().await.unwrap();
        let permit = std::sync::Arc::new(tokio::sync::Semaphore::new(1)).acquire_owned().await.unwrap();
        let mut conn = Connection::new(stream, permit);
        write_body(&mut conn.stream, Frames(vec!["pedia", "", "Wiki"]), true).await.unwrap();
        write_body(&mut conn.stream, Frames(vec!["pedia", "", "Wiki"]), false).await.unwrap();
        drop(conn);
        let mut sent = Vec::new();
        upstream.read_to_end(&mut sent).await.unwrap();
        assert_eq!(sent, b"4\r\nWiki\r\n5\r\npedia\r\n0\r\n\r\nWikipedia");
    }

    #[test]
    fn heads_are_encoded_in_origin_form_with_framing() {
        let req = Request::builder()
            .method(Method::GET)
            .uri("/a?b=c")
            .header("host", "h")
            .body(Either::Right(http_body_util::Empty::new()))
            .unwrap();
        assert_eq!(encode_head(&req, false), b"GET /a?b=c HTTP/1.1\r\nhost: h\r\n\r\n");
        assert!(encode_head(&req, true).ends_with(b"host: h\r\ntransfer-encoding: chunked\r\n\r\n"));
    }
}

//! Pooled upstream connections: one pool per cluster per worker, with the
//! cluster's circuit-breaking limits on connections.
//!
//! HTTP/1.1 carries one exchange at a time, so each endpoint has a stack of
//! idle connections (the most recently used on top, so that the rest can
//! expire): a request takes one or opens one, runs its exchange on it
//! ([`crate::h1`], in the request's own task), and the response body gives it
//! back through its [`Lease`] when it has ended. HTTP/2 multiplexes: the pool
//! keeps each endpoint's open connections (hyper's connection-level client)
//! and every request shares the first that is still up.
//!
//! The pool knows what happened to a request: a pooled connection that
//! closed before taking it hands it back, and it goes out on another
//! connection as if nothing happened.
//!
//! A cluster that sends the PROXY protocol (`proxy_protocol`) writes the
//! client's header first on each new connection. An HTTP/1.1 connection
//! then serves that one request and closes: pooled, it would carry another
//! client's request under the first one's address. HTTP/2 connections are
//! shared only by requests of the same client (source and destination, as
//! HAProxy and Envoy key theirs), and one left unused for `IDLE_TIMEOUT` is
//! dropped from the pool, which closes it once its streams end.
//!
//! Circuit breaking ([`ConnectionLimit`], Envoy's connection and
//! pending-request limits): at most `max_connections` connections open to a
//! cluster's endpoints over all workers, and at most `max_pending` requests
//! waiting for one of them; past that a request fails with
//! [`SendFailure::Overflow`] (a 503). Each connection holds its permit until
//! it closes.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use http_body_util::Either;
use hyper::client::conn::http2;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::body::UpstreamBody;
use crate::config::{ProxyVersion, UpstreamProtocol};
use crate::h1::{self, ExchangeError};
use crate::proxy_protocol::Addresses;
use crate::upstream_tls::{UpstreamStream, UpstreamTls};

/// An upstream response's body: read by [`h1`] or by hyper's HTTP/2 client.
pub type ResponseBody = Either<h1::ResponseBody<Lease>, hyper::body::Incoming>;

/// The connection limits of one cluster, shared by its workers.
#[derive(Debug)]
pub struct ConnectionLimit {
    permits: Arc<Semaphore>,
    waiting: AtomicUsize,
    max_pending: usize,
}

impl ConnectionLimit {
    /// At most `max_connections` open, `max_pending` waiting.
    pub fn new(max_connections: usize, max_pending: usize) -> Arc<Self> {
        Arc::new(ConnectionLimit { permits: Arc::new(Semaphore::new(max_connections)), waiting: 0.into(), max_pending })
    }

    /// Connections open now.
    pub fn open(&self, max_connections: usize) -> usize {
        max_connections - self.permits.available_permits()
    }

    /// A permit for one connection: at once, after a wait, or `None` when
    /// `max_pending` requests already wait.
    pub async fn acquire(&self) -> Option<OwnedSemaphorePermit> {
        if let Ok(p) = self.permits.clone().try_acquire_owned() {
            return Some(p);
        }
        if self.waiting.fetch_add(1, Relaxed) >= self.max_pending {
            self.waiting.fetch_sub(1, Relaxed);
            return None;
        }
        let permit = self.permits.clone().acquire_owned().await;
        self.waiting.fetch_sub(1, Relaxed);
        permit.ok()
    }
}

/// Why a request got no response from upstream.
#[derive(Debug)]
pub enum SendFailure {
    /// No connection could be made (or its handshake failed): the request
    /// was not sent, and here it is back.
    ConnectFailure(Box<Request<UpstreamBody>>),
    /// The cluster's connection limit is reached and `max_pending` requests
    /// already wait.
    Overflow,
    /// The connection broke after the request went out, or the upstream
    /// broke the protocol.
    Reset,
}

/// How long the connection a response came on took to open (TCP, and the
/// HTTP/2 handshake), in the response's extensions when the try opened one.
#[derive(Debug, Clone, Copy)]
pub struct ConnectTime(pub Duration);

/// Why no new connection was made.
enum Refused {
    Connect,
    Overflow,
}

/// An HTTP/1.1 connection that waits for its next request.
struct Idle {
    conn: h1::Connection,
    since: Instant,
}

/// Connections kept per endpoint.
#[derive(Default)]
struct Connections {
    /// HTTP/1.1 connections with no exchange in progress, most recent last.
    idle: HashMap<SocketAddr, Vec<Idle>>,
    /// HTTP/2 connections, shared by all requests (of one client, when the
    /// cluster sends the PROXY protocol).
    shared: HashMap<SharedKey, Vec<Shared>>,
    /// When closed and expired connections were last dropped.
    swept: Option<Instant>,
}

/// An endpoint, and the client its connections' PROXY protocol header names.
type SharedKey = (SocketAddr, Option<Addresses>);

/// An HTTP/2 connection and when a request last took it.
struct Shared {
    sender: http2::SendRequest<UpstreamBody>,
    used: Instant,
}

/// The upstream connections of one cluster on one worker.
pub struct UpstreamPool {
    protocol: UpstreamProtocol,
    /// The PROXY protocol header each connection starts with, if any.
    proxy_protocol: Option<ProxyVersion>,
    /// TLS to the endpoints (after any PROXY protocol header), if the cluster has it.
    tls: Option<Arc<UpstreamTls>>,
    connect_timeout: Duration,
    limit: Arc<ConnectionLimit>,
    connections: Mutex<Connections>,
}

/// An idle HTTP/1.1 connection older than this is closed rather than reused.
const IDLE_TIMEOUT: Duration = Duration::from_secs(90);
/// How often the pool drops closed and expired connections of every endpoint.
const SWEEP_INTERVAL: Duration = Duration::from_secs(10);
/// Idle connections kept per endpoint; more are closed.
const MAX_IDLE_PER_ENDPOINT: usize = 1024;

/// Where an HTTP/1.1 connection lent to one exchange goes back to:
/// [`give_back`](h1::GiveBack::give_back) returns it to the pool once the response body has
/// ended; dropped instead, the connection closes.
pub struct Lease {
    pool: Arc<UpstreamPool>,
    addr: SocketAddr,
}

impl h1::GiveBack for Lease {
    /// The exchange is over: `conn` may carry the next request.
    fn give_back(self, conn: h1::Connection) {
        if self.pool.proxy_protocol.is_some() {
            return; // Its header named the client of the request it served.
        }
        let mut c = self.pool.lock();
        let stack = c.idle.entry(self.addr).or_default();
        if stack.len() < MAX_IDLE_PER_ENDPOINT {
            stack.push(Idle { conn, since: Instant::now() });
        }
    }
}

impl UpstreamPool {
    /// A pool speaking `protocol`, connecting within `connect_timeout`, under
    /// `limit`, sending the `proxy_protocol` header on each connection.
    pub fn new(
        protocol: UpstreamProtocol,
        connect_timeout: Duration,
        limit: Arc<ConnectionLimit>,
        proxy_protocol: Option<ProxyVersion>,
    ) -> Arc<Self> {
        Self::with_tls(protocol, connect_timeout, limit, proxy_protocol, None)
    }

    /// A pool as [`new`](Self::new) makes, with TLS to the endpoints when `tls` is given.
    pub fn with_tls(
        protocol: UpstreamProtocol,
        connect_timeout: Duration,
        limit: Arc<ConnectionLimit>,
        proxy_protocol: Option<ProxyVersion>,
        tls: Option<Arc<UpstreamTls>>,
    ) -> Arc<Self> {
        let connections = Mutex::default();
        Arc::new(UpstreamPool { protocol, proxy_protocol, tls, connect_timeout, limit, connections })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Connections> {
        // The lock guards plain collections: a panic elsewhere cannot leave them inconsistent.
        self.connections.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Send `req` to `addr` on a pooled or new connection. An HTTP/1.1
    /// response's body gives its connection back when it has ended.
    pub async fn send(
        self: &Arc<Self>,
        addr: SocketAddr,
        req: Request<UpstreamBody>,
    ) -> Result<Response<ResponseBody>, SendFailure> {
        match self.protocol {
            UpstreamProtocol::Http1 => self.send_http1(addr, req).await,
            UpstreamProtocol::Http2 => self.send_http2(addr, req).await,
        }
    }

    async fn send_http1(
        self: &Arc<Self>,
        addr: SocketAddr,
        mut req: Request<UpstreamBody>,
    ) -> Result<Response<ResponseBody>, SendFailure> {
        let lease = || Lease { pool: self.clone(), addr };
        // Pooled connections first. One that closed before taking the
        // request gives it back, and the next is tried.
        let header = self.proxy_protocol.map(|v| {
            // Kept on the request: a try that comes back unsent goes out again.
            let client = req.extensions().get::<Addresses>().copied();
            crate::proxy_protocol::encode(v, client)
        });
        while let Some(conn) = header.is_none().then(|| self.pooled_http1(addr)).flatten() {
            match conn.exchange(req, lease(), true).await {
                Ok(response) => return Ok(response.map(Either::Left)),
                Err(ExchangeError::Unsent(unsent)) => req = *unsent,
                Err(ExchangeError::Broken) => return Err(SendFailure::Reset),
            }
        }
        let connecting = Instant::now();
        let (stream, permit) = match self.connect(addr, header.as_deref().unwrap_or_default()).await {
            Ok(connected) => connected,
            Err(Refused::Connect) => return Err(SendFailure::ConnectFailure(Box::new(req))),
            Err(Refused::Overflow) => return Err(SendFailure::Overflow),
        };
        let connected = ConnectTime(connecting.elapsed());
        match h1::Connection::new(stream, permit).exchange(req, lease(), false).await {
            Ok(mut response) => {
                response.extensions_mut().insert(connected);
                Ok(response.map(Either::Left))
            }
            // A new connection that refuses the request never had it.
            Err(ExchangeError::Unsent(unsent)) => Err(SendFailure::ConnectFailure(unsent)),
            Err(ExchangeError::Broken) => Err(SendFailure::Reset),
        }
    }

    async fn send_http2(
        self: &Arc<Self>,
        addr: SocketAddr,
        mut req: Request<UpstreamBody>,
    ) -> Result<Response<ResponseBody>, SendFailure> {
        let client = self.proxy_protocol.and(req.extensions().get::<Addresses>().copied());
        let key = (addr, client);
        // A shared connection that went away (or refused the stream) since
        // it was last used gives the request back; after two, a new one.
        for _ in 0..2 {
            let Some(sender) = self.pooled_http2(key) else { break };
            match Self::try_http2(sender, req).await {
                Ok(response) => return Ok(response),
                Err(Some(unsent)) => req = unsent,
                Err(None) => return Err(SendFailure::Reset),
            }
        }
        let connecting = Instant::now();
        let header = self.proxy_protocol.map(|v| crate::proxy_protocol::encode(v, client));
        let (stream, permit) = match self.connect(addr, header.as_deref().unwrap_or_default()).await {
            Ok(connected) => connected,
            Err(Refused::Connect) => return Err(SendFailure::ConnectFailure(Box::new(req))),
            Err(Refused::Overflow) => return Err(SendFailure::Overflow),
        };
        let Ok((sender, conn)) = http2::handshake(TokioExecutor::new(), TokioIo::new(stream)).await else {
            return Err(SendFailure::ConnectFailure(Box::new(req)));
        };
        let connected = ConnectTime(connecting.elapsed());
        tokio::spawn(async move {
            let _ = conn.await;
            drop(permit);
        });
        self.lock().shared.entry(key).or_default().push(Shared { sender: sender.clone(), used: Instant::now() });
        match Self::try_http2(sender, req).await {
            Ok(mut response) => {
                response.extensions_mut().insert(connected);
                Ok(response)
            }
            // A new connection that refuses the stream never had the request.
            Err(Some(unsent)) => Err(SendFailure::ConnectFailure(Box::new(unsent))),
            Err(None) => Err(SendFailure::Reset),
        }
    }

    /// Send `req` on an HTTP/2 connection: the response, or the request
    /// back if the connection did not take it, or `None` if it broke after.
    async fn try_http2(
        mut sender: http2::SendRequest<UpstreamBody>,
        req: Request<UpstreamBody>,
    ) -> Result<Response<ResponseBody>, Option<Request<UpstreamBody>>> {
        if sender.ready().await.is_err() {
            return Err(Some(req));
        }
        match sender.try_send_request(req).await {
            Ok(response) => Ok(response.map(Either::Right)),
            Err(mut e) => Err(e.take_message()),
        }
    }

    /// Drop closed and expired connections of every endpoint, every
    /// `SWEEP_INTERVAL`.
    fn sweep(c: &mut Connections, now: Instant) {
        if c.swept.is_some_and(|t| now.duration_since(t) < SWEEP_INTERVAL) {
            return;
        }
        c.swept = Some(now);
        c.idle.retain(|_, stack| {
            stack.retain_mut(|i| !i.conn.is_closed() && now.duration_since(i.since) < IDLE_TIMEOUT);
            !stack.is_empty()
        });
        // A client's own connections go when unused; the rest serve everyone.
        c.shared.retain(|(_, client), conns| {
            conns.retain(|s| !s.sender.is_closed() && (client.is_none() || now.duration_since(s.used) < IDLE_TIMEOUT));
            !conns.is_empty()
        });
    }

    /// A pooled HTTP/1.1 connection to `addr` that is still open, if any.
    fn pooled_http1(&self, addr: SocketAddr) -> Option<h1::Connection> {
        let now = Instant::now();
        let mut c = self.lock();
        Self::sweep(&mut c, now);
        let stack = c.idle.get_mut(&addr)?;
        while let Some(mut i) = stack.pop() {
            if now.duration_since(i.since) < IDLE_TIMEOUT && !i.conn.is_closed() {
                return Some(i.conn);
            }
        }
        None
    }

    /// An HTTP/2 connection for `key` that is still open, if any.
    fn pooled_http2(&self, key: SharedKey) -> Option<http2::SendRequest<UpstreamBody>> {
        let now = Instant::now();
        let mut c = self.lock();
        Self::sweep(&mut c, now);
        let conns = c.shared.get_mut(&key)?;
        conns.retain(|s| !s.sender.is_closed());
        let first = conns.first_mut()?;
        first.used = now;
        Some(first.sender.clone())
    }

    /// A new connection to `addr` (TCP, and TLS if the cluster has it)
    /// with its permit, under the cluster's limit.
    async fn connect(
        &self,
        addr: SocketAddr,
        preface: &[u8],
    ) -> Result<(UpstreamStream, OwnedSemaphorePermit), Refused> {
        let permit = self.limit.acquire().await.ok_or(Refused::Overflow)?;
        let stream = connect(addr, self.connect_timeout, preface, self.tls.as_deref()).await.ok_or(Refused::Connect)?;
        Ok((stream, permit))
    }
}

/// A new connection to `addr`: TCP within `timeout`, `preface` (a PROXY
/// protocol header, or nothing) written, then the TLS handshake within
/// `timeout` again when `tls` is given. `None` when any of it failed (a TLS
/// failure is counted and logged by `tls`).
pub async fn connect(
    addr: SocketAddr,
    timeout: Duration,
    preface: &[u8],
    tls: Option<&UpstreamTls>,
) -> Option<UpstreamStream> {
    let mut stream = tokio::time::timeout(timeout, TcpStream::connect(addr)).await.ok()?.ok()?;
    // Requests and responses are small writes that should leave at once.
    let _ = stream.set_nodelay(true);
    if !preface.is_empty() {
        tokio::io::AsyncWriteExt::write_all(&mut stream, preface).await.ok()?;
    }
    match tls {
        None => Some(UpstreamStream::Plain(stream)),
        Some(tls) => tls.handshake(addr, stream, timeout).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{Either, Empty};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    fn get() -> Request<UpstreamBody> {
        Request::builder().uri("/").header("host", "t").body(Either::Right(Empty::new())).unwrap()
    }

    /// An upstream that answers `n` requests on each connection, then
    /// closes it; returns its address and a counter of accepted connections.
    async fn upstream(per_connection: usize) -> (SocketAddr, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                count.fetch_add(1, Relaxed);
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 4096];
                    for i in 0..per_connection {
                        let mut seen = Vec::new();
                        while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                            match s.read(&mut buf).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => seen.extend_from_slice(&buf[..n]),
                            }
                        }
                        let close = if i + 1 == per_connection { "connection: close\r\n" } else { "" };
                        let reply = format!("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n{close}\r\nok");
                        if s.write_all(reply.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        (addr, accepted)
    }

    async fn exchange(pool: &Arc<UpstreamPool>, addr: SocketAddr) -> Result<(), SendFailure> {
        use http_body_util::BodyExt;
        let response = pool.send(addr, get()).await?;
        let body = response.into_body().collect().await.expect("a whole body");
        assert_eq!(body.to_bytes().as_ref(), b"ok");
        Ok(())
    }

    fn pool(max_connections: usize, max_pending: usize) -> Arc<UpstreamPool> {
        let limit = ConnectionLimit::new(max_connections, max_pending);
        UpstreamPool::new(UpstreamProtocol::Http1, Duration::from_secs(1), limit, None)
    }

    /// An upstream that answers each request on one connection with the
    /// next script, written in the pieces given (a short pause between them),
    /// then closes; returns its address and the request heads it read.
    async fn scripted<S>(scripts: Vec<Vec<S>>) -> (SocketAddr, tokio::task::JoinHandle<Vec<String>>)
    where
        S: AsRef<[u8]> + Send + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut heads = Vec::new();
            for pieces in scripts {
                let mut seen = Vec::new();
                let mut buf = [0u8; 4096];
                while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return heads,
                        Ok(n) => seen.extend_from_slice(&buf[..n]),
                    }
                }
                heads.push(String::from_utf8_lossy(&seen).into_owned());
                for piece in pieces {
                    s.write_all(piece.as_ref()).await.unwrap();
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
            heads
        });
        (addr, task)
    }

    fn idle(pool: &UpstreamPool, addr: SocketAddr) -> usize {
        pool.lock().idle.get(&addr).map_or(0, Vec::len)
    }

    async fn body_of(response: Response<ResponseBody>) -> Result<String, String> {
        use http_body_util::BodyExt;
        match response.into_body().collect().await {
            Ok(body) => Ok(String::from_utf8_lossy(&body.to_bytes()).into_owned()),
            Err(e) => Err(e.to_string()),
        }
    }

    #[tokio::test]
    async fn responses_are_delimited_as_rfc_9112_says_and_connections_reused_after_them() {
        let (addr, upstream) = scripted(vec![
            // Chunked, cut mid-size-line, mid-data and mid-trailers.
            vec![
                "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n4\r\nWi",
                "ki\r\n5;ext=1\r",
                "\npedia\r\n0\r\nx-t: 1",
                "\r\n\r\n",
            ],
            // An interim 100 Continue, then a length-delimited body.
            vec!["HTTP/1.1 100 Continue\r\n\r\n", "HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhe", "llo"],
            // 204 carries no body whatever it says.
            vec!["HTTP/1.1 204 No Content\r\ncontent-length: 3\r\n\r\n"],
            // No length: the body runs to the close.
            vec!["HTTP/1.1 200 OK\r\n\r\nuntil ", "close"],
        ])
        .await;
        let pool = pool(10, 10);
        let response = pool.send(addr, get()).await.unwrap();
        assert_eq!(body_of(response).await.unwrap(), "Wikipedia");
        assert_eq!(idle(&pool, addr), 1);
        let response = pool.send(addr, get()).await.unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(http_body::Body::size_hint(response.body()).exact(), Some(5));
        assert_eq!(body_of(response).await.unwrap(), "hello");
        let response = pool.send(addr, get()).await.unwrap();
        assert_eq!(response.status(), 204);
        assert_eq!(body_of(response).await.unwrap(), "");
        assert_eq!(idle(&pool, addr), 1);
        let response = pool.send(addr, get()).await.unwrap();
        assert_eq!(body_of(response).await.unwrap(), "until close");
        assert_eq!(idle(&pool, addr), 0, "a body delimited by the close leaves nothing to reuse");
        let heads = upstream.await.unwrap();
        assert_eq!(heads.len(), 4, "one connection carried all four: {heads:?}");
        assert!(heads[0].starts_with("GET / HTTP/1.1\r\nhost: t\r\n\r\n"), "{heads:?}");
    }

    #[tokio::test]
    async fn a_response_cut_anywhere_reads_the_same() {
        let whole =
            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n4\r\nWiki\r\n5;a=b\r\npedia\r\n0\r\nx-t: 1\r\n\r\n";
        for cut in 1..whole.len() {
            let (addr, _) = scripted(vec![vec![whole[..cut].to_string(), whole[cut..].to_string()]]).await;
            let pool = pool(10, 10);
            let response = pool.send(addr, get()).await.unwrap();
            assert_eq!(body_of(response).await.as_deref(), Ok("Wikipedia"), "cut at {cut}");
            assert_eq!(idle(&pool, addr), 1, "cut at {cut}: the connection went back");
        }
    }

    #[tokio::test]
    async fn a_head_response_has_no_body_and_connection_close_is_honoured() {
        let (addr, upstream) = scripted(vec![
            vec!["HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\n"],
            vec!["HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok"],
        ])
        .await;
        let pool = pool(10, 10);
        let mut head = get();
        *head.method_mut() = http::Method::HEAD;
        let response = pool.send(addr, head).await.unwrap();
        assert_eq!(body_of(response).await.unwrap(), "");
        let response = pool.send(addr, get()).await.unwrap();
        assert_eq!(body_of(response).await.unwrap(), "ok");
        assert_eq!(idle(&pool, addr), 0);
        assert_eq!(upstream.await.unwrap()[0].split_whitespace().next(), Some("HEAD"));
    }

    #[tokio::test]
    async fn broken_responses_are_errors_not_bodies() {
        // Cut short of its length.
        let (addr, _) = scripted(vec![vec!["HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\nshort"]]).await;
        let response = pool(10, 10).send(addr, get()).await.unwrap();
        assert!(body_of(response).await.unwrap_err().contains("before the body ended"));
        // A chunk size that is not hexadecimal.
        let (addr, _) = scripted(vec![vec!["HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n"]]).await;
        let response = pool(10, 10).send(addr, get()).await.unwrap();
        assert!(body_of(response).await.unwrap_err().contains("malformed chunked"));
        // Lengths that disagree, a head that is not HTTP, and no answer at all: resets.
        for script in [
            "HTTP/1.1 200 OK\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\nab",
            "SSH-2.0-OpenSSH\r\n\r\n",
            "HTTP/1.1 200 OK\r\n",
        ] {
            let (addr, _) = scripted(vec![vec![script]]).await;
            assert!(matches!(pool(10, 10).send(addr, get()).await, Err(SendFailure::Reset)), "{script:?}");
        }
    }

    #[tokio::test]
    async fn a_reused_connection_closed_as_a_request_goes_out_hands_it_back() {
        // Every connection answers once, then takes the next request's head
        // and closes without a word (an upstream's idle timeout firing as
        // the request arrives).
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let mut buf = [0u8; 4096];
                if matches!(s.read(&mut buf).await, Ok(0) | Err(_)) {
                    continue;
                }
                s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok").await.unwrap();
                let _ = s.read(&mut buf).await;
            }
        });
        let pool = pool(10, 10);
        exchange(&pool, addr).await.unwrap();
        // The GET goes out on the pooled connection, meets its close, and is
        // sent again on a new one.
        exchange(&pool, addr).await.unwrap();
        // A POST may have been acted on: its caller hears of the reset.
        let mut post = get();
        *post.method_mut() = http::Method::POST;
        assert!(matches!(pool.send(addr, post).await, Err(SendFailure::Reset)));
    }

    #[tokio::test]
    async fn connections_are_reused_and_closed_ones_replaced() {
        let (addr, accepted) = upstream(3).await;
        let pool = pool(10, 10);
        for _ in 0..7 {
            exchange(&pool, addr).await.unwrap();
        }
        // Three exchanges per connection: 7 take three connections, and the
        // ones the upstream closed were never handed a request.
        assert_eq!(accepted.load(Relaxed), 3);
    }

    #[tokio::test]
    async fn a_refused_connection_is_a_connect_failure() {
        let addr = TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap();
        match exchange(&pool(10, 10), addr).await {
            Err(SendFailure::ConnectFailure(unsent)) => assert_eq!(unsent.uri(), "/"),
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn past_the_limits_requests_overflow_and_permits_come_back() {
        let (addr, _) = upstream(2).await;
        let pool = pool(1, 0);
        let response = pool.send(addr, get()).await.unwrap();
        // The only connection is taken and nobody may wait for it.
        assert!(matches!(pool.send(addr, get()).await, Err(SendFailure::Overflow)));
        // Dropped before its body ended, the connection closes, and then its
        // permit is free again.
        drop(response);
        let deadline = Instant::now() + Duration::from_secs(5);
        while pool.limit.open(1) > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        exchange(&pool, addr).await.unwrap();
    }
}

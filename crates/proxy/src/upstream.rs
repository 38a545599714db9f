//! Pooled upstream connections: one pool per cluster per worker, with the
//! cluster's circuit-breaking limits on connections.
//!
//! HTTP/1.1 carries one exchange at a time, so each endpoint has a stack of
//! idle connections (the most recently used on top, so that the rest can
//! expire): a request takes one or opens one, and gets it back through its
//! [`Lease`] when the response body has ended. HTTP/2 multiplexes: the pool
//! keeps each endpoint's open connections and every request shares the first
//! that is still up.
//!
//! The pool is built on hyper's connection-level client rather than
//! hyper-util's pooled `Client` because the request path needs less than that
//! client does per request (no task spawned to watch a returned connection,
//! no pool key hashed from a URI), and because it knows what happened: a
//! pooled connection that closed before taking the request hands the request
//! back, and it goes out on another connection as if nothing happened.
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

use hyper::body::Incoming;
use hyper::client::conn::{http1, http2};
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::config::UpstreamProtocol;
use crate::http::UpstreamBody;

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
    async fn acquire(&self) -> Option<OwnedSemaphorePermit> {
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

/// Why no new connection was made.
enum Refused {
    Connect,
    Overflow,
}

/// One side of an upstream connection that sends requests.
enum Sender {
    Http1(http1::SendRequest<UpstreamBody>),
    Http2(http2::SendRequest<UpstreamBody>),
}

/// A connection that waits for its next request.
struct Idle {
    sender: http1::SendRequest<UpstreamBody>,
    since: Instant,
}

/// Connections kept per endpoint.
#[derive(Default)]
struct Connections {
    /// HTTP/1.1 connections with no exchange in progress, most recent last.
    idle: HashMap<SocketAddr, Vec<Idle>>,
    /// HTTP/2 connections, shared by all requests.
    shared: HashMap<SocketAddr, Vec<http2::SendRequest<UpstreamBody>>>,
    /// When closed and expired connections were last dropped.
    swept: Option<Instant>,
}

/// The upstream connections of one cluster on one worker.
pub struct UpstreamPool {
    protocol: UpstreamProtocol,
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

/// An HTTP/1.1 connection lent to one exchange. [`Lease::give_back`] returns
/// it to the pool once the response body has ended; dropped instead, the
/// connection closes when its exchange does.
pub struct Lease {
    pool: Arc<UpstreamPool>,
    addr: SocketAddr,
    sender: http1::SendRequest<UpstreamBody>,
}

impl Lease {
    /// The exchange is over: the connection may carry the next request.
    pub fn give_back(self) {
        let mut c = self.pool.lock();
        let stack = c.idle.entry(self.addr).or_default();
        if stack.len() < MAX_IDLE_PER_ENDPOINT {
            stack.push(Idle { sender: self.sender, since: Instant::now() });
        }
    }
}

impl UpstreamPool {
    /// A pool speaking `protocol`, connecting within `connect_timeout`, under `limit`.
    pub fn new(protocol: UpstreamProtocol, connect_timeout: Duration, limit: Arc<ConnectionLimit>) -> Arc<Self> {
        Arc::new(UpstreamPool { protocol, connect_timeout, limit, connections: Mutex::default() })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Connections> {
        // The lock guards plain collections: a panic elsewhere cannot leave them inconsistent.
        self.connections.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Send `req` to `addr` on a pooled or new connection. An HTTP/1.1
    /// response comes with the [`Lease`] of its connection.
    pub async fn send(
        self: &Arc<Self>,
        addr: SocketAddr,
        mut req: Request<UpstreamBody>,
    ) -> Result<(Response<Incoming>, Option<Lease>), SendFailure> {
        // Pooled connections first. One that closed before taking the
        // request gives it back, and the next is tried.
        while let Some(mut sender) = self.pooled(addr) {
            if sender.ready().await.is_err() {
                continue;
            }
            match sender.send(req).await {
                Ok(response) => return Ok((response, self.lease(addr, sender))),
                Err(mut e) => match e.take_message() {
                    Some(unsent) => req = unsent,
                    None => return Err(SendFailure::Reset),
                },
            }
        }
        let mut sender = match self.connect(addr).await {
            Ok(sender) => sender,
            Err(Refused::Connect) => return Err(SendFailure::ConnectFailure(Box::new(req))),
            Err(Refused::Overflow) => return Err(SendFailure::Overflow),
        };
        if sender.ready().await.is_err() {
            return Err(SendFailure::ConnectFailure(Box::new(req)));
        }
        match sender.send(req).await {
            Ok(response) => Ok((response, self.lease(addr, sender))),
            // A new connection that refuses the request never sent it.
            Err(mut e) => match e.take_message() {
                Some(unsent) => Err(SendFailure::ConnectFailure(Box::new(unsent))),
                None => Err(SendFailure::Reset),
            },
        }
    }

    fn lease(self: &Arc<Self>, addr: SocketAddr, sender: Sender) -> Option<Lease> {
        match sender {
            Sender::Http1(sender) => Some(Lease { pool: self.clone(), addr, sender }),
            Sender::Http2(_) => None,
        }
    }

    /// A pooled connection to `addr` that is still open, if any.
    fn pooled(&self, addr: SocketAddr) -> Option<Sender> {
        let now = Instant::now();
        let mut c = self.lock();
        if c.swept.is_none_or(|t| now.duration_since(t) >= SWEEP_INTERVAL) {
            c.swept = Some(now);
            c.idle.retain(|_, stack| {
                stack.retain(|i| !i.sender.is_closed() && now.duration_since(i.since) < IDLE_TIMEOUT);
                !stack.is_empty()
            });
            c.shared.retain(|_, conns| {
                conns.retain(|s| !s.is_closed());
                !conns.is_empty()
            });
        }
        match self.protocol {
            UpstreamProtocol::Http1 => {
                let stack = c.idle.get_mut(&addr)?;
                while let Some(i) = stack.pop() {
                    if !i.sender.is_closed() && now.duration_since(i.since) < IDLE_TIMEOUT {
                        return Some(Sender::Http1(i.sender));
                    }
                }
                None
            }
            UpstreamProtocol::Http2 => {
                let conns = c.shared.get_mut(&addr)?;
                conns.retain(|s| !s.is_closed());
                conns.first().map(|s| Sender::Http2(s.clone()))
            }
        }
    }

    /// A new connection to `addr`, under the cluster's limit.
    async fn connect(&self, addr: SocketAddr) -> Result<Sender, Refused> {
        let permit = self.limit.acquire().await.ok_or(Refused::Overflow)?;
        let stream = match tokio::time::timeout(self.connect_timeout, TcpStream::connect(addr)).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(_)) | Err(_) => return Err(Refused::Connect),
        };
        // Requests and responses are small writes that should leave at once.
        let _ = stream.set_nodelay(true);
        let io = TokioIo::new(stream);
        match self.protocol {
            UpstreamProtocol::Http1 => {
                let (sender, conn) = http1::handshake(io).await.map_err(|_| Refused::Connect)?;
                tokio::spawn(async move {
                    let _ = conn.await;
                    drop(permit);
                });
                Ok(Sender::Http1(sender))
            }
            UpstreamProtocol::Http2 => {
                let (sender, conn) = http2::handshake(TokioExecutor::new(), io).await.map_err(|_| Refused::Connect)?;
                tokio::spawn(async move {
                    let _ = conn.await;
                    drop(permit);
                });
                self.lock().shared.entry(addr).or_default().push(sender.clone());
                Ok(Sender::Http2(sender))
            }
        }
    }
}

impl Sender {
    async fn ready(&mut self) -> hyper::Result<()> {
        match self {
            Sender::Http1(s) => s.ready().await,
            Sender::Http2(s) => s.ready().await,
        }
    }

    async fn send(
        &mut self,
        req: Request<UpstreamBody>,
    ) -> Result<Response<Incoming>, hyper::client::conn::TrySendError<Request<UpstreamBody>>> {
        match self {
            Sender::Http1(s) => s.try_send_request(req).await,
            Sender::Http2(s) => s.try_send_request(req).await,
        }
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
        let (response, lease) = pool.send(addr, get()).await?;
        let body = response.into_body().collect().await.expect("a whole body");
        assert_eq!(body.to_bytes().as_ref(), b"ok");
        if let Some(lease) = lease {
            lease.give_back();
        }
        Ok(())
    }

    fn pool(max_connections: usize, max_pending: usize) -> Arc<UpstreamPool> {
        let limit = ConnectionLimit::new(max_connections, max_pending);
        UpstreamPool::new(UpstreamProtocol::Http1, Duration::from_secs(1), limit)
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
        let (response, _lease) = pool.send(addr, get()).await.unwrap();
        // The only connection is taken and nobody may wait for it.
        assert!(matches!(pool.send(addr, get()).await, Err(SendFailure::Overflow)));
        // Dropped before its body ended, the connection closes, and then its
        // permit is free again.
        drop(response);
        drop(_lease);
        let deadline = Instant::now() + Duration::from_secs(5);
        while pool.limit.open(1) > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        exchange(&pool, addr).await.unwrap();
    }
}

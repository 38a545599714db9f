//! The load generator's side of the wire: the [`Target`] every request goes
//! to, and the keep-alive connection a worker sends on ([`Conn`]).
//!
//! hyper's connection-level client is used rather than a pooled client so
//! that the number of connections is exactly what the run asks for: an
//! HTTP/1.1 worker owns one connection and has one request in flight on it;
//! HTTP/2 and HTTP/3 workers share the connections of a [`Pool`], one
//! stream each. `https://` URLs go over TLS (rustls, ALPN `http/1.1` or
//! `h2`); HTTP/3 goes over QUIC (quinn and h3, ALPN `h3`), each connection
//! on a UDP socket of its own as each TCP connection has its own port.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;

use bytes::{Buf, Bytes};
use http::header::{HeaderMap, HeaderName, HeaderValue, HOST};
use http::{Method, Request, Response, Uri};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::Mutex;

use crate::backend::BACKEND_HEADER;
use crate::report::ErrorKind;
use crate::LoadError;

/// The HTTP version a run speaks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Protocol {
    /// HTTP/1.1, one request at a time per connection.
    #[default]
    Http1,
    /// HTTP/2: h2c with prior knowledge for `http://`, ALPN `h2` for
    /// `https://`.
    Http2,
    /// HTTP/3 over QUIC (`https://` only).
    Http3,
}

/// How a run reaches its target beyond TCP: TLS (and its server name), or
/// QUIC.
enum Secure {
    Plain,
    Tls(tokio_rustls::TlsConnector, ServerName<'static>),
    Quic(quinn::ClientConfig, String),
}

impl std::fmt::Debug for Secure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Secure::Plain => "Plain",
            Secure::Tls(..) => "Tls",
            Secure::Quic(..) => "Quic",
        })
    }
}

/// The rustls client configuration of a run: the CA bundle `ca` (PEM) or
/// the built-in roots, ALPN for `protocol`; the same rules as a cluster's
/// upstream TLS.
fn tls_config(ca: Option<&PathBuf>, protocol: Protocol) -> Result<rustls::ClientConfig, LoadError> {
    let tls = fulcrum_proxy::config::UpstreamTls { ca: ca.cloned(), sni: None, verify: true, cert: None, key: None };
    let mut config = fulcrum_proxy::upstream_tls::client_config(&tls, fulcrum_proxy::config::UpstreamProtocol::Http1)
        .map_err(|e| LoadError::Config(format!("CA bundle {}: {}", e.path.display(), e.message)))?;
    config.alpn_protocols = vec![match protocol {
        Protocol::Http1 => b"http/1.1".to_vec(),
        Protocol::Http2 => b"h2".to_vec(),
        Protocol::Http3 => b"h3".to_vec(),
    }];
    Ok(config)
}

/// A byte stream a connection runs on: TCP, or TLS over it.
trait Io: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Io for T {}

/// What every request of a run looks like, and where it goes.
#[derive(Debug)]
pub(crate) struct Target {
    /// `host:port` of the URL, resolved by [`Target::resolve`] into `addr`.
    host_port: String,
    addr: SocketAddr,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
    secure: Secure,
}

impl Target {
    /// Check the URL, method and headers; [`Target::resolve`] looks up the host.
    pub(crate) fn new(
        url: &str,
        method: &str,
        headers: &[(String, String)],
        body_bytes: usize,
        protocol: Protocol,
        ca: Option<&PathBuf>,
    ) -> Result<Target, LoadError> {
        let bad = |why: String| LoadError::Config(why);
        let uri: Uri = url.parse().map_err(|e| bad(format!("{url:?} is not a URL: {e}")))?;
        let tls = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            _ => return Err(bad(format!("{url:?}: only http:// and https:// URLs are supported"))),
        };
        if protocol == Protocol::Http3 && !tls {
            return Err(bad(format!("{url:?}: HTTP/3 needs an https:// URL")));
        }
        if ca.is_some() && !tls {
            return Err(bad(format!("{url:?}: a CA bundle is for https:// URLs")));
        }
        let authority = uri.authority().ok_or_else(|| bad(format!("{url:?} has no host")))?.clone();
        let host_port = format!("{}:{}", authority.host(), authority.port_u16().unwrap_or(if tls { 443 } else { 80 }));
        let name = authority.host().trim_start_matches('[').trim_end_matches(']').to_string();
        let secure = match (tls, protocol) {
            (false, _) => Secure::Plain,
            (true, Protocol::Http3) => {
                let quic = quinn::crypto::rustls::QuicClientConfig::try_from(tls_config(ca, protocol)?)
                    .map_err(|e| bad(format!("QUIC: {e}")))?;
                Secure::Quic(quinn::ClientConfig::new(Arc::new(quic)), name)
            }
            (true, _) => {
                let server = ServerName::try_from(name).map_err(|e| bad(format!("{url:?}: bad host name: {e}")))?;
                Secure::Tls(tokio_rustls::TlsConnector::from(Arc::new(tls_config(ca, protocol)?)), server)
            }
        };
        let method = Method::from_bytes(method.as_bytes()).map_err(|_| bad(format!("{method:?} is not a method")))?;
        let mut map = HeaderMap::new();
        for (k, v) in headers {
            let name =
                HeaderName::from_bytes(k.trim().as_bytes()).map_err(|_| bad(format!("bad header name {k:?}")))?;
            let value = HeaderValue::from_str(v.trim()).map_err(|_| bad(format!("bad value for header {k}: {v:?}")))?;
            map.append(name, value);
        }
        // HTTP/1.1 sends the path with a Host header; HTTP/2 and HTTP/3 need
        // the whole URI for their :scheme and :authority pseudo-headers.
        let uri = if protocol != Protocol::Http1 {
            uri
        } else {
            if !map.contains_key(HOST) {
                let host = HeaderValue::from_str(authority.as_str()).map_err(|_| bad(format!("{url:?}: bad host")))?;
                map.insert(HOST, host);
            }
            uri.path_and_query().map_or_else(|| Uri::from_static("/"), |p| Uri::from(p.clone()))
        };
        Ok(Target {
            host_port,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            method,
            uri,
            headers: map,
            body: Bytes::from(vec![b'x'; body_bytes]),
            secure,
        })
    }

    /// Look the host up once, before the run: a load generator must not
    /// measure its resolver.
    pub(crate) async fn resolve(mut self) -> Result<Target, LoadError> {
        let first = tokio::net::lookup_host(self.host_port.as_str())
            .await
            .map_err(|e| LoadError::Resolve(format!("{}: {e}", self.host_port)))?
            .next();
        self.addr = first.ok_or_else(|| LoadError::Resolve(format!("{}: no address", self.host_port)))?;
        Ok(self)
    }

    fn request(&self) -> Request<Full<Bytes>> {
        let mut req = Request::new(Full::new(self.body.clone()));
        *req.method_mut() = self.method.clone();
        *req.uri_mut() = self.uri.clone();
        *req.headers_mut() = self.headers.clone();
        req
    }

    /// A connection: TCP, with TLS over it for `https://`.
    async fn tcp(&self) -> Result<TokioIo<Box<dyn Io>>, ErrorKind> {
        let stream = TcpStream::connect(self.addr).await.map_err(|_| ErrorKind::Connect)?;
        let _ = stream.set_nodelay(true);
        let io: Box<dyn Io> = match &self.secure {
            Secure::Tls(connector, name) => {
                Box::new(connector.connect(name.clone(), stream).await.map_err(|_| ErrorKind::Connect)?)
            }
            _ => Box::new(stream),
        };
        Ok(TokioIo::new(io))
    }

    /// An HTTP/3 connection on a QUIC endpoint (a UDP socket) of its own.
    async fn connect_h3(&self) -> Result<H3, ErrorKind> {
        let Secure::Quic(config, name) = &self.secure else { return Err(ErrorKind::Connect) };
        let any: SocketAddr = if self.addr.is_ipv4() { ([0, 0, 0, 0], 0).into() } else { ([0u16; 8], 0).into() };
        let endpoint = quinn::Endpoint::client(any).map_err(|_| ErrorKind::Connect)?;
        let connecting = endpoint.connect_with(config.clone(), self.addr, name).map_err(|_| ErrorKind::Connect)?;
        let conn = connecting.await.map_err(|_| ErrorKind::Connect)?;
        let (mut driver, send) =
            h3::client::new(h3_quinn::Connection::new(conn)).await.map_err(|_| ErrorKind::Connect)?;
        let closed = Arc::new(AtomicBool::new(false));
        let flag = closed.clone();
        tokio::spawn(async move {
            let _ = std::future::poll_fn(|cx| driver.poll_close(cx)).await;
            flag.store(true, Relaxed);
            // The endpoint lives as long as its connection.
            drop(endpoint);
        });
        Ok(H3 { send, closed })
    }

    fn h3_request(&self) -> Request<()> {
        let mut req = Request::new(());
        *req.method_mut() = self.method.clone();
        *req.uri_mut() = self.uri.clone();
        *req.headers_mut() = self.headers.clone();
        req
    }

    async fn connect_h1(&self) -> Result<http1::SendRequest<Full<Bytes>>, ErrorKind> {
        let (sender, conn) = http1::handshake(self.tcp().await?).await.map_err(|_| ErrorKind::Connect)?;
        tokio::spawn(conn);
        Ok(sender)
    }

    async fn connect_h2(&self) -> Result<http2::SendRequest<Full<Bytes>>, ErrorKind> {
        let (sender, conn) =
            http2::handshake(TokioExecutor::new(), self.tcp().await?).await.map_err(|_| ErrorKind::Connect)?;
        tokio::spawn(conn);
        Ok(sender)
    }
}

/// An HTTP/3 connection's request sender, and whether its connection has
/// closed.
#[derive(Clone)]
pub(crate) struct H3 {
    send: h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>,
    closed: Arc<AtomicBool>,
}

/// A multiplexed connection's sender, shared by the workers of a pool.
pub(crate) trait Shared: Clone + Send + 'static {
    fn is_closed(&self) -> bool;
}

impl Shared for http2::SendRequest<Full<Bytes>> {
    fn is_closed(&self) -> bool {
        http2::SendRequest::is_closed(self)
    }
}

impl Shared for H3 {
    fn is_closed(&self) -> bool {
        self.closed.load(Relaxed)
    }
}

/// HTTP/2 or HTTP/3 connections shared by the workers of one lane: worker
/// `i` uses slot `i % len`, and whoever finds a slot empty or closed
/// reconnects it.
#[derive(Debug)]
pub(crate) struct Pool<S> {
    slots: Vec<Mutex<Option<S>>>,
}

impl<S: Shared> Pool<S> {
    pub(crate) fn new(connections: usize) -> Pool<S> {
        Pool { slots: (0..connections.max(1)).map(|_| Mutex::new(None)).collect() }
    }

    async fn get<F>(&self, worker: usize, connect: F) -> Result<S, ErrorKind>
    where
        F: std::future::Future<Output = Result<S, ErrorKind>>,
    {
        let mut slot = self.slots[worker % self.slots.len()].lock().await;
        match &*slot {
            Some(s) if !s.is_closed() => Ok(s.clone()),
            _ => {
                let s = connect.await?;
                *slot = Some(s.clone());
                Ok(s)
            }
        }
    }
}

/// The shared connections of a lane, for the protocol of the run.
#[derive(Clone)]
pub(crate) enum Pools {
    None,
    H2(Arc<Pool<http2::SendRequest<Full<Bytes>>>>),
    H3(Arc<Pool<H3>>),
}

impl Pools {
    pub(crate) fn new(protocol: Protocol, connections: usize) -> Pools {
        match protocol {
            Protocol::Http1 => Pools::None,
            Protocol::Http2 => Pools::H2(Arc::new(Pool::new(connections))),
            Protocol::Http3 => Pools::H3(Arc::new(Pool::new(connections))),
        }
    }
}

/// A worker's way to the target: its own HTTP/1.1 connection, or its
/// stream's share of an HTTP/2 one. Connections are opened on first use and
/// again whenever the last one failed or was closed.
pub(crate) enum Conn {
    H1(Option<http1::SendRequest<Full<Bytes>>>),
    H2 {
        pool: Arc<Pool<http2::SendRequest<Full<Bytes>>>>,
        worker: usize,
        sender: Option<http2::SendRequest<Full<Bytes>>>,
    },
    H3 {
        pool: Arc<Pool<H3>>,
        worker: usize,
        sender: Option<H3>,
    },
}

/// What a finished exchange reports: status and `x-fulcrum-backend`.
pub(crate) type Answer = (http::StatusCode, Option<HeaderValue>);

impl Conn {
    pub(crate) fn new(pools: &Pools, worker: usize) -> Conn {
        match pools {
            Pools::None => Conn::H1(None),
            Pools::H2(pool) => Conn::H2 { pool: pool.clone(), worker, sender: None },
            Pools::H3(pool) => Conn::H3 { pool: pool.clone(), worker, sender: None },
        }
    }

    /// Send one request and read its response to the end. On failure the
    /// connection is dropped, so the next request starts on a fresh one.
    pub(crate) async fn exchange(&mut self, target: &Target) -> Result<Answer, ErrorKind> {
        let response = match self {
            Conn::H1(slot) => {
                let mut sender = match slot.take() {
                    Some(s) if !s.is_closed() => s,
                    _ => target.connect_h1().await?,
                };
                // A kept-alive connection the server has just closed is not
                // an error of this request: reconnect once.
                if sender.ready().await.is_err() {
                    sender = target.connect_h1().await?;
                    sender.ready().await.map_err(|_| ErrorKind::Connect)?;
                }
                let response = sender.send_request(target.request()).await.map_err(|_| ErrorKind::Io)?;
                *slot = Some(sender);
                response
            }
            Conn::H2 { pool, worker, sender } => {
                let mut s = match sender.take() {
                    Some(s) if !s.is_closed() => s,
                    _ => pool.get(*worker, target.connect_h2()).await?,
                };
                s.ready().await.map_err(|_| ErrorKind::Io)?;
                let response = s.send_request(target.request()).await.map_err(|_| ErrorKind::Io)?;
                *sender = Some(s);
                response
            }
            Conn::H3 { pool, worker, sender } => {
                let mut s = match sender.take() {
                    Some(s) if !s.is_closed() => s,
                    _ => pool.get(*worker, target.connect_h3()).await?,
                };
                let answer = h3_exchange(&mut s, target).await?;
                *sender = Some(s);
                return Ok(answer);
            }
        };
        match read(response).await {
            Ok(answer) => Ok(answer),
            Err(e) => {
                self.drop_connection();
                Err(e)
            }
        }
    }

    /// Forget the connection (after a timeout, its state is unknown).
    pub(crate) fn drop_connection(&mut self) {
        match self {
            Conn::H1(slot) => *slot = None,
            Conn::H2 { sender, .. } => *sender = None,
            Conn::H3 { sender, .. } => *sender = None,
        }
    }
}

async fn read(response: Response<Incoming>) -> Result<Answer, ErrorKind> {
    let status = response.status();
    let backend = response.headers().get(BACKEND_HEADER).cloned();
    let mut body = response.into_body();
    while let Some(frame) = body.frame().await {
        frame.map_err(|_| ErrorKind::Io)?;
    }
    Ok((status, backend))
}

/// One request and its whole response on a new stream of an HTTP/3
/// connection; a failure leaves the connection to the pool's next check.
async fn h3_exchange(h3: &mut H3, target: &Target) -> Result<Answer, ErrorKind> {
    let mut stream = h3.send.send_request(target.h3_request()).await.map_err(|_| ErrorKind::Io)?;
    if !target.body.is_empty() {
        stream.send_data(target.body.clone()).await.map_err(|_| ErrorKind::Io)?;
    }
    stream.finish().await.map_err(|_| ErrorKind::Io)?;
    let response = stream.recv_response().await.map_err(|_| ErrorKind::Io)?;
    let backend = response.headers().get(BACKEND_HEADER).cloned();
    while let Some(mut chunk) = stream.recv_data().await.map_err(|_| ErrorKind::Io)? {
        chunk.advance(chunk.remaining());
    }
    Ok((response.status(), backend))
}

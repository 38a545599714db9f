//! The load generator's side of the wire: the [`Target`] every request goes
//! to, and the keep-alive connection a worker sends on ([`Conn`]).
//!
//! hyper's connection-level client is used rather than a pooled client so
//! that the number of connections is exactly what the run asks for: an
//! HTTP/1.1 worker owns one connection and has one request in flight on it;
//! HTTP/2 workers share the connections of an [`H2Pool`], one stream each.

use std::net::SocketAddr;

use bytes::Bytes;
use http::header::{HeaderMap, HeaderName, HeaderValue, HOST};
use http::{Method, Request, Response, Uri};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpStream;
use tokio::sync::Mutex;

use crate::backend::BACKEND_HEADER;
use crate::report::ErrorKind;
use crate::LoadError;

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
}

impl Target {
    /// Check the URL, method and headers; [`Target::resolve`] looks up the host.
    pub(crate) fn new(
        url: &str,
        method: &str,
        headers: &[(String, String)],
        body_bytes: usize,
        http2: bool,
    ) -> Result<Target, LoadError> {
        let bad = |why: String| LoadError::Config(why);
        let uri: Uri = url.parse().map_err(|e| bad(format!("{url:?} is not a URL: {e}")))?;
        if uri.scheme_str() != Some("http") {
            return Err(bad(format!("{url:?}: only http:// URLs are supported")));
        }
        let authority = uri.authority().ok_or_else(|| bad(format!("{url:?} has no host")))?.clone();
        let host_port = format!("{}:{}", authority.host(), authority.port_u16().unwrap_or(80));
        let method = Method::from_bytes(method.as_bytes()).map_err(|_| bad(format!("{method:?} is not a method")))?;
        let mut map = HeaderMap::new();
        for (k, v) in headers {
            let name =
                HeaderName::from_bytes(k.trim().as_bytes()).map_err(|_| bad(format!("bad header name {k:?}")))?;
            let value = HeaderValue::from_str(v.trim()).map_err(|_| bad(format!("bad value for header {k}: {v:?}")))?;
            map.append(name, value);
        }
        // HTTP/1.1 sends the path with a Host header; HTTP/2 needs the whole
        // URI for its :scheme and :authority pseudo-headers.
        let uri = if http2 {
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

    async fn tcp(&self) -> Result<TokioIo<TcpStream>, ErrorKind> {
        let stream = TcpStream::connect(self.addr).await.map_err(|_| ErrorKind::Connect)?;
        let _ = stream.set_nodelay(true);
        Ok(TokioIo::new(stream))
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

/// HTTP/2 connections shared by the workers of one lane: worker `i` uses
/// slot `i % len`, and whoever finds a slot empty or closed reconnects it.
#[derive(Debug)]
pub(crate) struct H2Pool {
    slots: Vec<Mutex<Option<http2::SendRequest<Full<Bytes>>>>>,
}

impl H2Pool {
    pub(crate) fn new(connections: usize) -> H2Pool {
        H2Pool { slots: (0..connections.max(1)).map(|_| Mutex::new(None)).collect() }
    }

    async fn get(&self, target: &Target, worker: usize) -> Result<http2::SendRequest<Full<Bytes>>, ErrorKind> {
        let mut slot = self.slots[worker % self.slots.len()].lock().await;
        match &*slot {
            Some(s) if !s.is_closed() => Ok(s.clone()),
            _ => {
                let s = target.connect_h2().await?;
                *slot = Some(s.clone());
                Ok(s)
            }
        }
    }
}

/// A worker's way to the target: its own HTTP/1.1 connection, or its
/// stream's share of an HTTP/2 one. Connections are opened on first use and
/// again whenever the last one failed or was closed.
pub(crate) enum Conn {
    H1(Option<http1::SendRequest<Full<Bytes>>>),
    H2 { pool: std::sync::Arc<H2Pool>, worker: usize, sender: Option<http2::SendRequest<Full<Bytes>>> },
}

/// What a finished exchange reports: status and `x-fulcrum-backend`.
pub(crate) type Answer = (http::StatusCode, Option<HeaderValue>);

impl Conn {
    pub(crate) fn new(pool: Option<std::sync::Arc<H2Pool>>, worker: usize) -> Conn {
        match pool {
            Some(pool) => Conn::H2 { pool, worker, sender: None },
            None => Conn::H1(None),
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
                    _ => pool.get(target, *worker).await?,
                };
                s.ready().await.map_err(|_| ErrorKind::Io)?;
                let response = s.send_request(target.request()).await.map_err(|_| ErrorKind::Io)?;
                *sender = Some(s);
                response
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

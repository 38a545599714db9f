//! HTTP/3 listeners: QUIC ([`quinn`]) with [`h3`], on rustls like the TCP
//! listeners, with the listener's certificate and ALPN `h3` only.
//!
//! Every request enters the same path as HTTP/1.1 and HTTP/2
//! ([`HttpService::handle`]): routing, balancing, retries, the access log.
//! Its body streams upstream as an [`H3Body`]; the response streams back on
//! the request's QUIC stream.
//!
//! Limits: the listener's `max_connections` counts QUIC connections (with
//! the TCP listeners' semaphore semantics: over the limit, a connection is
//! refused at once); `idle_timeout` is QUIC's idle timeout (no packet for
//! that long closes the connection); `header_read_timeout` bounds the
//! handshake and each request's headers; `max_header_bytes` is the largest
//! header section accepted. 0-RTT is never accepted (early data is
//! replayable), so every connection costs a full round trip first.
//!
//! Client certificates: the QUIC configuration is the TLS listener's, so
//! `client_ca` and `client_auth` are verified in the QUIC handshake the same
//! way, and the verified identity goes upstream and into the access log as
//! over TCP.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes};
use h3::server::RequestStream;
use http::{header, Request, Response};
use http_body::{Body, Frame, SizeHint};
use http_body_util::{BodyExt, Either};
use socket2::{Domain, Protocol, Socket, Type};
use tokio::sync::{watch, Semaphore};

use crate::config::{Limits, Listener};
use crate::error::ServeError;
use crate::http::{HttpService, Peer, ProxyBody};
use crate::metrics::ProxyStats;
use crate::shutdown::{stopping, Stop};

/// Bind the UDP socket of an HTTP/3 listener (one per worker, with
/// `SO_REUSEPORT`: the kernel keeps each client's datagrams on one worker).
pub(crate) fn bind_udp(addr: SocketAddr) -> Result<std::net::UdpSocket, ServeError> {
    let err = |source| ServeError::Bind { addr, source };
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP)).map_err(err)?;
    socket.set_reuse_address(true).map_err(err)?;
    socket.set_reuse_port(true).map_err(err)?;
    socket.set_nonblocking(true).map_err(err)?;
    socket.bind(&addr.into()).map_err(err)?;
    Ok(socket.into())
}

/// The QUIC server configuration of `listener`, from the rustls
/// configuration of its TLS listener twin (`tls`): the same certificates,
/// ALPN `h3`, no early data.
pub(crate) fn server_config(
    listener: &Listener,
    tls: &rustls::ServerConfig,
) -> Result<quinn::ServerConfig, ServeError> {
    let path = listener.tls.as_ref().map(|t| t.cert.clone()).unwrap_or_default();
    let bad = |message: String| ServeError::Tls { path: path.clone(), message };
    let mut crypto = tls.clone();
    crypto.alpn_protocols = vec![b"h3".to_vec()];
    crypto.max_early_data_size = 0;
    let quic = quinn::crypto::rustls::QuicServerConfig::try_from(crypto).map_err(|e| bad(e.to_string()))?;
    let mut config = quinn::ServerConfig::with_crypto(Arc::new(quic));
    let mut transport = quinn::TransportConfig::default();
    let idle = quinn::IdleTimeout::try_from(listener.limits.idle_timeout)
        .map_err(|_| bad(format!("idle_timeout {:?} is too long for QUIC", listener.limits.idle_timeout)))?;
    transport.max_idle_timeout(Some(idle));
    config.transport_config(Arc::new(transport));
    Ok(config)
}

/// One HTTP/3 listener's endpoint on one worker.
pub(crate) struct H3Listener {
    endpoint: quinn::Endpoint,
    permits: Arc<Semaphore>,
    stats: Arc<ProxyStats>,
    stopped: watch::Receiver<Stop>,
    /// Held by every connection and request: the worker's drain waits until none is.
    alive: watch::Receiver<()>,
}

/// What a connection needs of its listener.
struct ConnLimits {
    header_read_timeout: Duration,
    max_header_bytes: u64,
}

impl H3Listener {
    /// A QUIC endpoint on `socket` with `config` (from [`server_config`]),
    /// on the current tokio runtime; `permits` are the listener's connections.
    pub fn start(
        socket: std::net::UdpSocket,
        config: Option<quinn::ServerConfig>,
        permits: Arc<Semaphore>,
        stats: Arc<ProxyStats>,
        stopped: watch::Receiver<Stop>,
        alive: watch::Receiver<()>,
    ) -> std::io::Result<H3Listener> {
        let config = config.ok_or_else(|| std::io::Error::other("a UDP socket without a QUIC configuration"))?;
        let runtime = Arc::new(quinn::TokioRuntime);
        let endpoint = quinn::Endpoint::new(quinn::EndpointConfig::default(), Some(config), socket, runtime)?;
        Ok(H3Listener { endpoint, permits, stats, stopped, alive })
    }

    /// Accept connections until the proxy stops; connections over the
    /// listener's `max_connections` are refused.
    pub async fn run(mut self, service: Arc<HttpService>, limits: &Limits, max_header_bytes: usize) {
        let conn_limits = Arc::new(ConnLimits {
            header_read_timeout: limits.header_read_timeout,
            max_header_bytes: max_header_bytes as u64,
        });
        loop {
            let incoming = tokio::select! {
                _ = stopping(&mut self.stopped) => break,
                incoming = self.endpoint.accept() => incoming,
            };
            let Some(incoming) = incoming else { break };
            self.stats.connections.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let Ok(permit) = self.permits.clone().try_acquire_owned() else {
                self.stats.rejected_connections.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                incoming.refuse();
                continue;
            };
            let (service, limits) = (service.clone(), conn_limits.clone());
            let (stopped, alive) = (self.stopped.clone(), self.alive.clone());
            tokio::spawn(async move {
                let _permit = permit;
                serve_connection(incoming, service, &limits, stopped, alive).await;
            });
        }
        // New connections are refused from now on; open ones finish.
        self.endpoint.set_server_config(None);
    }
}

/// Serve one QUIC connection's requests until it closes, or until the proxy
/// stops (then a GOAWAY lets requests in flight finish).
async fn serve_connection(
    incoming: quinn::Incoming,
    service: Arc<HttpService>,
    limits: &ConnLimits,
    mut stopped: watch::Receiver<Stop>,
    alive: watch::Receiver<()>,
) {
    let Ok(Ok(conn)) = tokio::time::timeout(limits.header_read_timeout, incoming).await else { return };
    let mut peer = Peer::new(conn.remote_address());
    peer.client_cert = conn
        .peer_identity()
        .and_then(|id| id.downcast::<Vec<rustls::pki_types::CertificateDer<'static>>>().ok())
        .and_then(|chain| crate::tls::client_cert_of(&chain))
        .map(Box::new);
    let peer = Arc::new(peer);
    let mut builder = h3::server::builder();
    builder.max_field_section_size(limits.max_header_bytes);
    let Ok(mut h3) = builder.build::<_, Bytes>(h3_quinn::Connection::new(conn)).await else { return };
    let mut stopping_now = false;
    loop {
        let accepted = tokio::select! {
            _ = stopping(&mut stopped), if !stopping_now => {
                stopping_now = true;
                let _ = h3.shutdown(0).await;
                continue;
            }
            accepted = h3.accept() => accepted,
        };
        let resolver = match accepted {
            Ok(Some(resolver)) => resolver,
            Ok(None) | Err(_) => return,
        };
        let (service, peer, alive) = (service.clone(), peer.clone(), alive.clone());
        let timeout = limits.header_read_timeout;
        tokio::spawn(async move {
            let _alive = alive;
            let Ok(Ok((req, stream))) = tokio::time::timeout(timeout, resolver.resolve_request()).await else { return };
            serve_request(&service, &peer, req, stream).await;
        });
    }
}

/// Pass one request to the request path and stream its response back.
async fn serve_request(
    service: &HttpService,
    peer: &Peer,
    req: Request<()>,
    stream: RequestStream<h3_quinn::BidiStream<Bytes>, Bytes>,
) {
    let (mut send, recv) = stream.split();
    let length = req.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse().ok());
    let body = H3Body::start(recv, length).await;
    let req = req.map(|()| Either::Left(Either::Right(Box::new(body))));
    let Ok(response) = service.handle(peer, req).await;
    respond(&mut send, response).await;
}

/// Headers HTTP/3 forbids (RFC 9114 §4.2): connection-specific ones.
const CONNECTION_SPECIFIC: [&str; 5] = ["connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade"];

/// Send `response` on `send`: head, body frames, trailers, end. A client
/// that goes away ends it early (the response body's drop records that).
async fn respond(send: &mut RequestStream<h3_quinn::SendStream<Bytes>, Bytes>, response: Response<ProxyBody>) {
    let (mut parts, body) = response.into_parts();
    for name in CONNECTION_SPECIFIC {
        parts.headers.remove(name);
    }
    if send.send_response(Response::from_parts(parts, ())).await.is_err() {
        return;
    }
    let mut body = std::pin::pin!(body);
    while let Some(frame) = body.frame().await {
        let sent = match frame.map(Frame::into_data) {
            Ok(Ok(data)) if data.is_empty() => Ok(()),
            Ok(Ok(data)) => send.send_data(data).await,
            Ok(Err(frame)) => match frame.into_trailers() {
                Ok(trailers) => send.send_trailers(trailers).await,
                Err(_) => Ok(()),
            },
            Err(_) => {
                // The upstream's body broke: so does the client's.
                send.stop_stream(h3::error::Code::H3_INTERNAL_ERROR);
                return;
            }
        };
        if sent.is_err() {
            return;
        }
    }
    let _ = send.finish().await;
}

/// A client's request body on an HTTP/3 stream.
pub struct H3Body {
    recv: RequestStream<h3_quinn::RecvStream, Bytes>,
    state: State,
    /// The size announced by `Content-Length`, for the size hint.
    length: Option<u64>,
    /// A frame read ahead by [`H3Body::start`].
    peeked: Option<Result<Frame<Bytes>, h3::error::StreamError>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Data,
    Trailers,
    Done,
}

impl std::fmt::Debug for H3Body {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("H3Body").field("state", &self.state).field("length", &self.length).finish()
    }
}

impl H3Body {
    /// The body of the request on `recv`. A request without a body usually
    /// ends in the packet of its headers: that is found out here, without
    /// waiting, so that such a request counts as bodiless (and can be sent
    /// again on a retry) as over HTTP/1.1 and HTTP/2.
    pub async fn start(recv: RequestStream<h3_quinn::RecvStream, Bytes>, length: Option<u64>) -> H3Body {
        let mut body = H3Body { recv, state: State::Data, length, peeked: None };
        std::future::poll_fn(|cx| {
            if let Poll::Ready(Some(frame)) = Pin::new(&mut body).poll_frame(cx) {
                body.peeked = Some(frame);
            }
            Poll::Ready(())
        })
        .await;
        body
    }
}

impl Body for H3Body {
    type Data = Bytes;
    type Error = h3::error::StreamError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if let Some(frame) = self.peeked.take() {
            return Poll::Ready(Some(frame));
        }
        loop {
            match self.state {
                State::Data => match std::task::ready!(self.recv.poll_recv_data(cx)) {
                    Ok(Some(mut data)) => {
                        let data = data.copy_to_bytes(data.remaining());
                        if !data.is_empty() {
                            return Poll::Ready(Some(Ok(Frame::data(data))));
                        }
                    }
                    Ok(None) => self.state = State::Trailers,
                    Err(e) => {
                        self.state = State::Done;
                        return Poll::Ready(Some(Err(e)));
                    }
                },
                State::Trailers => {
                    let polled = std::task::ready!(self.recv.poll_recv_trailers(cx));
                    self.state = State::Done;
                    return Poll::Ready(polled.transpose().map(|t| t.map(Frame::trailers)));
                }
                State::Done => return Poll::Ready(None),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.state == State::Done && self.peeked.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        match (self.length, self.is_end_stream()) {
            (_, true) => SizeHint::with_exact(0),
            (Some(n), false) => SizeHint::with_exact(n),
            (None, false) => SizeHint::default(),
        }
    }
}

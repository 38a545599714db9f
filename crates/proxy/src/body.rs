//! What the proxy sends upstream: the client's request body, limited to the
//! listener's `max_body_bytes` while it streams (and, for a request that a
//! gRPC retry may send again, copied as it goes: [`BodyCopy`]), or no body
//! at all; and which requests may be sent again. Shared by the request path ([`http`](crate::http))
//! and the HTTP/1.1 client ([`h1`](crate::h1)), which neither owns.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::Method;
use http_body::{Body, Frame, SizeHint};
use http_body_util::{Either, Empty};
use hyper::body::Incoming;

use crate::h1::conn::H1Body;
use crate::h3::H3Body;

/// A client's request body as a server path reads it: hyper's (HTTP/2, and
/// HTTP/1.1 when hyper's server is chosen), HTTP/3's, or the lean HTTP/1.1
/// server's.
pub type RequestBody = Either<Either<Incoming, Box<H3Body>>, H1Body>;

/// What is sent upstream: the client's streamed body, or nothing (which
/// can be sent again on a retry).
pub type UpstreamBody = Either<LimitedBody, Empty<Bytes>>;

/// How the client's body failed, if it did, and how many bytes of it
/// arrived: the body records both as it streams; the request path reads the
/// fault when a try breaks, so that the client's fault is answered as such
/// (413, 400) rather than as the upstream's (502), and the access log reads
/// the count.
#[derive(Debug, Default)]
pub struct ClientFault {
    fault: AtomicU8,
    received: AtomicU64,
}

/// What [`ClientFault`] holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The body outgrew `max_body_bytes`.
    TooLarge,
    /// The body broke: bad chunked framing (a chunk size that overflows),
    /// or the client went away mid-body.
    Broken,
}

impl ClientFault {
    fn set(&self, fault: Fault) {
        self.fault.store(fault as u8 + 1, Relaxed);
    }

    /// The recorded fault, if any.
    pub fn get(&self) -> Option<Fault> {
        match self.fault.load(Relaxed) {
            0 => None,
            1 => Some(Fault::TooLarge),
            _ => Some(Fault::Broken),
        }
    }

    /// Body bytes received so far.
    pub fn received(&self) -> u64 {
        self.received.load(Relaxed)
    }
}

/// The most request body bytes kept for sending a request again
/// ([`BodyCopy`]); a longer body is sent once.
pub const COPY_LIMIT: usize = 64 * 1024;

/// A copy of a request body made while it streams upstream, so that a
/// request that failed after it was sent (a gRPC UNAVAILABLE) can be sent
/// again, as Envoy buffers bodies for retries. Usable only if the body
/// ended within [`COPY_LIMIT`] bytes and without trailers.
#[derive(Debug, Default)]
pub struct BodyCopy(Mutex<CopyState>);

#[derive(Debug, Default)]
struct CopyState {
    chunks: Vec<Bytes>,
    len: usize,
    complete: bool,
    /// Over the limit, or trailers: no copy.
    given_up: bool,
}

impl BodyCopy {
    fn state(&self) -> std::sync::MutexGuard<'_, CopyState> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Keep `frame` (data only; trailers cannot be replayed).
    fn record(&self, frame: &Frame<Bytes>) {
        let mut s = self.state();
        match frame.data_ref() {
            Some(_) if s.given_up => {}
            Some(data) if s.len + data.len() <= COPY_LIMIT => {
                s.len += data.len();
                s.chunks.push(data.clone());
            }
            _ => {
                s.given_up = true;
                s.chunks = Vec::new();
            }
        }
    }

    /// The whole body, if it ended and was kept.
    pub fn replay(&self) -> Option<Vec<Bytes>> {
        let s = self.state();
        (s.complete && !s.given_up).then(|| s.chunks.clone())
    }
}

/// A client's request body, cut off with an error past the listener's
/// `max_body_bytes` (bodies without a length are only known to be too large
/// while they stream), or a [`BodyCopy`] of one sent again.
#[derive(Debug)]
pub struct LimitedBody {
    source: Source,
    left: u64,
    fault: Arc<ClientFault>,
    /// Where the body is copied as it streams, if it may be sent again.
    copy: Option<Arc<BodyCopy>>,
}

#[derive(Debug)]
enum Source {
    Client(RequestBody),
    /// A copied body's chunks, last first.
    Replay(Vec<Bytes>),
}

impl LimitedBody {
    /// `inner`, cut off past `max` bytes; `fault` records why it ended early.
    pub fn new(inner: RequestBody, max: u64, fault: Arc<ClientFault>) -> Self {
        LimitedBody { source: Source::Client(inner), left: max, fault, copy: None }
    }

    /// Copy the body into `copy` as it streams.
    pub fn copied(mut self, copy: Arc<BodyCopy>) -> Self {
        self.copy = Some(copy);
        self
    }

    /// The body again, from `chunks` (a [`BodyCopy::replay`]).
    pub fn replay(mut chunks: Vec<Bytes>, fault: Arc<ClientFault>) -> Self {
        chunks.reverse();
        LimitedBody { source: Source::Replay(chunks), left: u64::MAX, fault, copy: None }
    }
}

/// The error a [`LimitedBody`] ends with.
#[derive(Debug, thiserror::Error)]
pub enum LimitedBodyError {
    /// The client's body broke.
    #[error("client request body: {0}")]
    Client(Box<dyn std::error::Error + Send + Sync>),
    /// The body outgrew the limit.
    #[error("request body over max_body_bytes")]
    TooLarge,
}

impl Body for LimitedBody {
    type Data = Bytes;
    type Error = LimitedBodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, LimitedBodyError>>> {
        let inner = match &mut self.source {
            Source::Client(inner) => inner,
            Source::Replay(chunks) => return Poll::Ready(chunks.pop().map(|c| Ok(Frame::data(c)))),
        };
        match Pin::new(inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                let len = frame.data_ref().map_or(0, |d| d.len() as u64);
                if len > self.left {
                    self.fault.set(Fault::TooLarge);
                    return Poll::Ready(Some(Err(LimitedBodyError::TooLarge)));
                }
                self.left -= len;
                self.fault.received.fetch_add(len, Relaxed);
                if let Some(copy) = &self.copy {
                    copy.record(&frame);
                    // hyper stops polling a body that says it has ended.
                    if self.is_end_stream() {
                        copy.state().complete = true;
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => {
                self.fault.set(Fault::Broken);
                Poll::Ready(Some(Err(LimitedBodyError::Client(e))))
            }
            Poll::Ready(None) => {
                if let Some(copy) = &self.copy {
                    copy.state().complete = true;
                }
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.source {
            Source::Client(inner) => inner.is_end_stream(),
            Source::Replay(chunks) => chunks.is_empty(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.source {
            Source::Client(inner) => inner.size_hint(),
            Source::Replay(chunks) => SizeHint::with_exact(chunks.iter().map(|c| c.len() as u64).sum()),
        }
    }
}

/// Methods whose requests may be sent again (RFC 9110 §9.2.2).
pub fn idempotent(method: &Method) -> bool {
    matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE)
}

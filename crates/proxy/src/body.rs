//! What the proxy sends upstream: the client's request body, limited to the
//! listener's `max_body_bytes` while it streams, or no body at all; and
//! which requests may be sent again. Shared by the request path ([`http`](crate::http))
//! and the HTTP/1.1 client ([`h1`](crate::h1)), which neither owns.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering::Relaxed};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::Method;
use http_body::{Body, Frame, SizeHint};
use http_body_util::{Either, Empty};
use hyper::body::Incoming;

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

/// A client's request body, cut off with an error past the listener's
/// `max_body_bytes` (bodies without a length are only known to be too large
/// while they stream).
#[derive(Debug)]
pub struct LimitedBody {
    inner: Incoming,
    left: u64,
    fault: Arc<ClientFault>,
}

impl LimitedBody {
    /// `inner`, cut off past `max` bytes; `fault` records why it ended early.
    pub fn new(inner: Incoming, max: u64, fault: Arc<ClientFault>) -> Self {
        LimitedBody { inner, left: max, fault }
    }
}

/// The error a [`LimitedBody`] ends with.
#[derive(Debug, thiserror::Error)]
pub enum LimitedBodyError {
    /// The client's body broke.
    #[error(transparent)]
    Client(#[from] hyper::Error),
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
        match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                let len = frame.data_ref().map_or(0, |d| d.len() as u64);
                if len > self.left {
                    self.fault.set(Fault::TooLarge);
                    return Poll::Ready(Some(Err(LimitedBodyError::TooLarge)));
                }
                self.left -= len;
                self.fault.received.fetch_add(len, Relaxed);
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => {
                self.fault.set(Fault::Broken);
                Poll::Ready(Some(Err(e.into())))
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Methods whose requests may be sent again (RFC 9110 §9.2.2).
pub fn idempotent(method: &Method) -> bool {
    matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE)
}

//! Circuit breaking on upstream connections: at most `max_connections` open
//! to a cluster's endpoints over all workers, and at most `max_pending`
//! requests waiting for one of them (Envoy's connection and pending-request
//! limits). A connector wraps hyper-util's: it takes a permit before
//! connecting and the connection keeps it until closed; when the connection
//! limit is reached a request waits for a permit, unless `max_pending`
//! already wait, in which case it fails with [`Overflow`] (a 503).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::task::{Context, Poll};

use hyper::rt::{Read, ReadBufCursor, Write};
use hyper::Uri;
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The limits of one cluster, shared by its workers.
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
}

/// A request found the connection limit reached and too many waiting.
#[derive(Debug, thiserror::Error)]
#[error("cluster connection limit reached (max_connections, max_pending)")]
pub struct Overflow;

/// hyper-util's connector behind a [`ConnectionLimit`].
#[derive(Clone)]
pub struct LimitedConnector {
    inner: HttpConnector,
    limit: Arc<ConnectionLimit>,
}

impl LimitedConnector {
    /// `inner` limited by `limit`.
    pub fn new(inner: HttpConnector, limit: Arc<ConnectionLimit>) -> Self {
        LimitedConnector { inner, limit }
    }
}

/// A connection holding its permit.
pub struct LimitedConnection {
    io: TokioIo<TcpStream>,
    _permit: OwnedSemaphorePermit,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl tower_service::Service<Uri> for LimitedConnector {
    type Response = LimitedConnection;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<LimitedConnection, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        tower_service::Service::<Uri>::poll_ready(&mut self.inner, cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let limit = self.limit.clone();
        let mut inner = self.inner.clone();
        Box::pin(async move {
            let permit = match limit.permits.clone().try_acquire_owned() {
                Ok(p) => p,
                Err(_) => {
                    if limit.waiting.fetch_add(1, Relaxed) >= limit.max_pending {
                        limit.waiting.fetch_sub(1, Relaxed);
                        return Err(Overflow.into());
                    }
                    let p = limit.permits.clone().acquire_owned().await;
                    limit.waiting.fetch_sub(1, Relaxed);
                    p.map_err(|_| Overflow)?
                }
            };
            let io = tower_service::Service::call(&mut inner, uri).await?;
            Ok(LimitedConnection { io, _permit: permit })
        })
    }
}

impl Connection for LimitedConnection {
    fn connected(&self) -> Connected {
        self.io.connected()
    }
}

impl Read for LimitedConnection {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: ReadBufCursor<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl Write for LimitedConnection {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }
}

/// Whether `error` (from the client) is a connection-limit overflow.
pub fn is_overflow(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut source = Some(error);
    while let Some(e) = source {
        if e.is::<Overflow>() {
            return true;
        }
        source = e.source();
    }
    false
}

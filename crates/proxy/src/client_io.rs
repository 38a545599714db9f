//! Wrappers that stay with a client connection wherever it goes — the
//! server that reads its requests, or, after an `Upgrade`, the tunnel that
//! joins it to an upstream: [`Counted`] holds the connection's [`Slot`] (its
//! place in the listener's `max_connections` and its worker's count of open
//! connections), [`IdleTimeout`] closes it once idle.
//! Because they wrap the connection itself, an upgraded tunnel keeps both
//! until it closes, whichever HTTP/1.1 server handed it over.
//! [`SharedSocket`] lets a plain socket outlive the server that used it.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::{Instant, Sleep};

use crate::h1::conn::Io;
use crate::metrics::ProxyStats;

/// A client connection's place: its `max_connections` permit and one in
/// its worker's count of open connections, both given back on drop.
pub struct Slot {
    _permit: OwnedSemaphorePermit,
    stats: Arc<ProxyStats>,
    worker: usize,
}

impl Slot {
    /// Count a connection open on `worker` while the slot lives.
    pub fn new(permit: OwnedSemaphorePermit, stats: Arc<ProxyStats>, worker: usize) -> Self {
        if let Some(open) = stats.worker_connections.get(worker) {
            open.fetch_add(1, Relaxed);
        }
        Slot { _permit: permit, stats, worker }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(open) = self.stats.worker_connections.get(self.worker) {
            open.fetch_sub(1, Relaxed);
        }
    }
}

/// A client connection with its [`Slot`], given back when the connection
/// is dropped.
pub struct Counted<IO> {
    io: IO,
    _slot: Slot,
}

impl<IO> Counted<IO> {
    /// `io`, holding `slot` while it lives.
    pub fn new(io: IO, slot: Slot) -> Self {
        Counted { io, _slot: slot }
    }

    /// The connection.
    pub fn get_mut(&mut self) -> &mut IO {
        &mut self.io
    }

    /// The connection and its slot, to wrap the connection in another layer.
    pub fn into_parts(self) -> (IO, Slot) {
        (self.io, self._slot)
    }
}

impl<IO: Io> Io for Counted<IO> {
    fn alpn_h2(&self) -> bool {
        self.io.alpn_h2()
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Counted<IO> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Counted<IO> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, data)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

/// A connection that fails its reads once it has been idle — no bytes in
/// either direction and no request in flight — for `limit`, so that hyper
/// closes it. hyper has a header-read timeout but no idle timeout between
/// requests; the lean server has its own timer for requests, and wraps a
/// connection in this one only when it hands it to a tunnel. `active`
/// counts requests in flight (always zero for a tunnel).
pub struct IdleTimeout<IO> {
    io: IO,
    limit: Duration,
    deadline: Pin<Box<Sleep>>,
    active: Arc<AtomicUsize>,
}

impl<IO> IdleTimeout<IO> {
    /// `io`, failing its reads after `limit` idle with `active` at zero.
    pub fn new(io: IO, limit: Duration, active: Arc<AtomicUsize>) -> Self {
        IdleTimeout { io, limit, deadline: Box::pin(tokio::time::sleep(limit)), active }
    }

    fn touch(&mut self) {
        self.deadline.as_mut().reset(Instant::now() + self.limit);
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for IdleTimeout<IO> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.io).poll_read(cx, buf) {
            Poll::Ready(r) => {
                if buf.filled().len() > before {
                    self.touch();
                }
                Poll::Ready(r)
            }
            Poll::Pending => {
                if self.active.load(Relaxed) > 0 {
                    self.touch();
                    return Poll::Pending;
                }
                match self.deadline.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Err(std::io::ErrorKind::TimedOut.into())),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for IdleTimeout<IO> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write(cx, data);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.touch();
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.touch();
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

impl<IO: Io> Io for IdleTimeout<IO> {
    fn alpn_h2(&self) -> bool {
        self.io.alpn_h2()
    }
}

/// A plain client socket that a server reads and writes through one handle
/// while the task that started it keeps another (for a lingering close once
/// the server gives up): one descriptor shared, not a duplicate, so that
/// such a connection costs one file descriptor.
pub struct SharedSocket(pub Arc<tokio::net::TcpStream>);

impl Io for SharedSocket {}

impl AsyncRead for SharedSocket {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        loop {
            std::task::ready!(self.0.poll_read_ready(cx))?;
            // A read that would block clears the readiness, so the next
            // poll waits for more.
            match self.0.try_read_buf(buf) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                read => return Poll::Ready(read.map(drop)),
            }
        }
    }
}

impl AsyncWrite for SharedSocket {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<std::io::Result<usize>> {
        loop {
            std::task::ready!(self.0.poll_write_ready(cx))?;
            match self.0.try_write(data) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                written => return Poll::Ready(written),
            }
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        loop {
            std::task::ready!(self.0.poll_write_ready(cx))?;
            match self.0.try_write_vectored(bufs) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                written => return Poll::Ready(written),
            }
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(socket2::SockRef::from(&*self.0).shutdown(std::net::Shutdown::Write))
    }
}

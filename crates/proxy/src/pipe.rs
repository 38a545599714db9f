//! Joining two connections both ways (a WebSocket or other upgraded
//! tunnel) without a buffer per direction for the tunnel's whole life.
//!
//! `tokio::io::copy_bidirectional` keeps an 8 KiB buffer per direction, 16
//! KiB for a tunnel that is idle most of the time. Here each read lands in
//! a stack buffer and is written on at once; only bytes the other side
//! cannot take yet are copied to the heap, and that buffer is freed once
//! they are written. An idle tunnel holds no buffer.

use std::future::poll_fn;
use std::io;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Bytes read at most at once.
const CHUNK: usize = 8 * 1024;

/// One direction of a tunnel.
#[derive(Default)]
struct Direction {
    /// Bytes read and not yet written, if the writer could not take them all.
    pending: Vec<u8>,
    /// How many of `pending` are written.
    written: usize,
    /// Written since the last flush.
    unflushed: bool,
    /// The reader ended.
    eof: bool,
    /// The reader ended and the writer is shut down.
    done: bool,
    /// Bytes carried.
    total: u64,
}

impl Direction {
    /// Write what is pending; `Ready(Ok)` once nothing is.
    fn poll_pending<W: AsyncWrite + Unpin + ?Sized>(
        &mut self,
        cx: &mut Context<'_>,
        w: &mut W,
    ) -> Poll<io::Result<()>> {
        while self.written < self.pending.len() {
            let n = ready!(Pin::new(&mut *w).poll_write(cx, &self.pending[self.written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.written += n;
            self.total += n as u64;
            self.unflushed = true;
        }
        if !self.pending.is_empty() {
            self.pending = Vec::new();
            self.written = 0;
        }
        Poll::Ready(Ok(()))
    }

    /// Carry bytes from `r` to `w` until `r` ends and `w` is shut down.
    fn poll_carry<R, W>(&mut self, cx: &mut Context<'_>, r: &mut R, w: &mut W) -> Poll<io::Result<()>>
    where
        R: AsyncRead + Unpin + ?Sized,
        W: AsyncWrite + Unpin + ?Sized,
    {
        loop {
            if self.done {
                return Poll::Ready(Ok(()));
            }
            ready!(self.poll_pending(cx, w))?;
            if self.eof {
                ready!(Pin::new(&mut *w).poll_shutdown(cx))?;
                self.done = true;
                continue;
            }
            let mut stack = [MaybeUninit::<u8>::uninit(); CHUNK];
            let mut buf = ReadBuf::uninit(&mut stack);
            match Pin::new(&mut *r).poll_read(cx, &mut buf) {
                Poll::Pending => {
                    // Nothing more to read now: push out what was written.
                    if self.unflushed {
                        ready!(Pin::new(&mut *w).poll_flush(cx))?;
                        self.unflushed = false;
                    }
                    return Poll::Pending;
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(())) => {}
            }
            let data = buf.filled();
            if data.is_empty() {
                self.eof = true;
                continue;
            }
            let n = match Pin::new(&mut *w).poll_write(cx, data) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => n,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => 0,
            };
            self.total += n as u64;
            self.unflushed = true;
            if n < data.len() {
                self.pending = data[n..].to_vec();
            }
        }
    }
}

/// Copy `a` to `b` and `b` to `a` until both have ended, shutting down
/// each writer when its reader ends; the bytes carried each way (a to b,
/// b to a). An error on either side ends both.
pub async fn join<A, B>(a: &mut A, b: &mut B) -> io::Result<(u64, u64)>
where
    A: AsyncRead + AsyncWrite + Unpin + ?Sized,
    B: AsyncRead + AsyncWrite + Unpin + ?Sized,
{
    let (mut ab, mut ba) = (Direction::default(), Direction::default());
    poll_fn(|cx| {
        let forth = ab.poll_carry(cx, a, b)?;
        let back = ba.poll_carry(cx, b, a)?;
        ready!(forth);
        ready!(back);
        Poll::Ready(Ok((ab.total, ba.total)))
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn carries_both_ways_and_passes_on_each_end() {
        // Small pipes, so that writes are partial and bytes wait on the heap.
        let (mut client, mut a) = tokio::io::duplex(1000);
        let (mut b, mut upstream) = tokio::io::duplex(1000);
        let joined = tokio::spawn(async move { join(&mut a, &mut b).await });
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        let sent = data.clone();
        let writer = tokio::spawn(async move {
            client.write_all(&sent).await.unwrap();
            client.shutdown().await.unwrap();
            let mut back = Vec::new();
            client.read_to_end(&mut back).await.unwrap();
            back
        });
        let mut got = Vec::new();
        upstream.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, data, "client to upstream");
        upstream.write_all(b"bye").await.unwrap();
        upstream.shutdown().await.unwrap();
        assert_eq!(writer.await.unwrap(), b"bye");
        assert_eq!(joined.await.unwrap().unwrap(), (100_000, 3));
    }

    #[tokio::test]
    async fn an_idle_tunnel_holds_no_buffer() {
        let (_client, mut a) = tokio::io::duplex(64);
        let (mut b, _upstream) = tokio::io::duplex(64);
        let joined = join(&mut a, &mut b);
        // The future holds the two directions' state, not their buffers.
        assert!(std::mem::size_of_val(&joined) < 512, "{} bytes", std::mem::size_of_val(&joined));
    }

    #[tokio::test]
    async fn one_side_ending_leaves_the_other_direction_open() {
        let (client, mut a) = tokio::io::duplex(64);
        let (mut b, _upstream) = tokio::io::duplex(64);
        drop(client);
        // The client side ends: its direction shuts b down; b's reader is
        // still open, so the tunnel waits for the upstream.
        let res = tokio::time::timeout(std::time::Duration::from_millis(100), join(&mut a, &mut b)).await;
        assert!(res.is_err(), "ended while the upstream was still open");
    }
}

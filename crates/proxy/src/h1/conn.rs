//! A client connection of the lean HTTP/1.1 server as the request path sees
//! it: the request body read from the connection as the upstream side asks
//! for it ([`H1Body`]), and the connection handed over to a tunnel after a
//! 101 ([`ClientUpgrade`]). The server loop itself is in
//! [`h1::server`](crate::h1::server); this file holds only what the request
//! path ([`http`](crate::http), [`body`](crate::body)) needs, so that
//! neither imports the server.
//!
//! A connection holds a read buffer only while bytes are in it: between
//! requests the buffer goes back to a small per-thread pool ([`pool`]), and
//! a read on an idle connection lands in a stack buffer first
//! ([`poll_read_fresh`]), so that an idle keep-alive connection costs no
//! buffer at all (as nginx does it).
//!
//! The connection's socket, read buffer and body state live behind one
//! mutex ([`Shared`]): the request body (polled by the upstream write) and
//! the server loop (which writes the response and reads the next head) take
//! turns on the same task, so it is never contended; it exists because the
//! body must own its way to the socket while the request path holds it.

use std::future::poll_fn;
use std::io;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::oneshot;

use crate::h1::park::Parking;
use crate::h1::parse::{Chunk, Chunked, Framing};

/// Room made in the read buffer before each read.
const READ_CHUNK: usize = 8 * 1024;
/// The interim answer to `Expect: 100-continue` (RFC 9110 §10.1.1).
const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

/// A client connection: TCP, or TLS over TCP.
pub trait Io: AsyncRead + AsyncWrite + Send + Unpin + 'static {
    /// Whether TLS chose HTTP/2 by ALPN.
    fn alpn_h2(&self) -> bool {
        false
    }
}

impl Io for tokio::net::TcpStream {}

impl Io for tokio_rustls::server::TlsStream<tokio::net::TcpStream> {
    fn alpn_h2(&self) -> bool {
        self.get_ref().1.alpn_protocol() == Some(b"h2")
    }
}

impl Io for Rewind {}

impl Io for Box<dyn Io> {
    fn alpn_h2(&self) -> bool {
        (**self).alpn_h2()
    }
}

impl Io for hyper_util::rt::TokioIo<hyper::upgrade::Upgraded> {}

/// Where the current request's body stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyState {
    /// This many bytes are still to come (0: the body is over).
    Length(u64),
    /// Chunked, decoded as it is read.
    Chunked(Chunked),
    /// The body broke: the connection cannot carry another request.
    Broken,
}

impl BodyState {
    /// The state at the start of a body framed by `framing`.
    pub fn new(framing: Framing) -> Self {
        match framing {
            Framing::Length(n) => BodyState::Length(n),
            Framing::Chunked => BodyState::Chunked(Chunked::default()),
        }
    }

    /// Whether the body has been read to its end.
    pub fn is_done(&self) -> bool {
        matches!(self, BodyState::Length(0) | BodyState::Chunked(Chunked { at: Chunk::Done, .. }))
    }
}

/// What the connection's halves share.
pub struct Inbound {
    /// The socket; `None` once handed to a tunnel.
    pub io: Option<Box<dyn Io>>,
    /// Bytes read and not yet taken.
    pub read: BytesMut,
    /// The current request's body.
    pub body: BodyState,
    /// Bytes of the 100 Continue still to write before the body is read.
    pub continue_left: usize,
    /// Whether no request head has been read yet (the first bytes may be
    /// the HTTP/2 preface).
    pub first: bool,
    /// Its place among its worker's parked connections, while parked.
    pub parked_at: u32,
}

/// A connection's state, shared by the server loop and the request body;
/// while the connection is parked it is also its own waker
/// ([`park`](crate::h1::park)), so that parking allocates nothing.
#[derive(Debug)]
pub struct Conn {
    inbound: Mutex<Inbound>,
    /// Where it goes when it wakes while parked: its worker's parker.
    pub(crate) parking: Arc<Parking>,
}

/// A connection's [`Conn`], shared by the server loop and the request body.
pub type Shared = Arc<Conn>;

/// Lock `shared`; a panic elsewhere does not make the state unusable.
pub fn lock(shared: &Shared) -> MutexGuard<'_, Inbound> {
    shared.inbound.lock().unwrap_or_else(|e| e.into_inner())
}

impl std::fmt::Debug for Inbound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inbound").field("read", &self.read.len()).field("body", &self.body).finish()
    }
}

impl Inbound {
    /// A connection on `io`, parked (when idle) by `parking`'s parker; its
    /// read buffer comes with its first bytes.
    pub fn open(io: Box<dyn Io>, parking: Arc<Parking>) -> Shared {
        let read = BytesMut::new();
        let inbound =
            Inbound { io: Some(io), read, body: BodyState::Length(0), continue_left: 0, first: true, parked_at: 0 };
        Arc::new(Conn { inbound: Mutex::new(inbound), parking })
    }

    /// Start the body of a request framed by `framing`; `expect` asks for a
    /// 100 Continue before it is read.
    pub fn start_body(&mut self, framing: Framing, expect: bool) {
        self.body = BodyState::new(framing);
        self.continue_left = if expect && !self.body.is_done() { CONTINUE.len() } else { 0 };
    }

    /// Read what the socket has into the buffer: the count, 0 at its end.
    /// Without a buffer (an idle connection), the read goes to the stack
    /// and a buffer is taken only if bytes came.
    pub fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        let Some(io) = self.io.as_mut() else { return Poll::Ready(Ok(0)) };
        if self.read.capacity() > 0 {
            self.read.reserve(READ_CHUNK);
            return tokio_util::io::poll_read_buf(Pin::new(io), cx, &mut self.read);
        }
        self.read = std::task::ready!(poll_read_fresh(io, cx))?;
        Poll::Ready(Ok(self.read.len()))
    }

    /// Between requests: give the read buffer back if nothing is in it.
    pub fn release(&mut self) {
        if self.read.is_empty() {
            pool::give(std::mem::take(&mut self.read));
        }
    }

    /// Write the rest of a pending 100 Continue.
    fn poll_continue(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.continue_left > 0 {
            let io = self.io.as_mut().ok_or(io::ErrorKind::NotConnected)?;
            let from = CONTINUE.len() - self.continue_left;
            match std::task::ready!(Pin::new(io).poll_write(cx, &CONTINUE[from..]))? {
                0 => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                n => self.continue_left -= n,
            }
        }
        Poll::Ready(Ok(()))
    }

    /// The next piece of the body from the buffer: data, the end (`None`
    /// with the body done), or `None` when more must be read.
    fn step(&mut self) -> io::Result<Option<Bytes>> {
        let malformed = || io::Error::new(io::ErrorKind::InvalidData, "malformed chunked request body");
        match &mut self.body {
            BodyState::Length(0) => Ok(None),
            BodyState::Length(left) if !self.read.is_empty() => {
                let n = self.read.len().min(usize::try_from(*left).unwrap_or(usize::MAX));
                *left -= n as u64;
                Ok(Some(self.read.split_to(n).freeze()))
            }
            BodyState::Length(_) => Ok(None),
            BodyState::Chunked(chunked) => chunked.step(&mut self.read).map_err(|_| malformed()),
            BodyState::Broken => Err(malformed()),
        }
    }
}

/// Read what `io` has into a stack buffer, and only if bytes came into a
/// buffer from the [`pool`]: an empty buffer (no capacity) at the end.
pub fn poll_read_fresh(io: &mut Box<dyn Io>, cx: &mut Context<'_>) -> Poll<io::Result<BytesMut>> {
    let mut stack = [MaybeUninit::<u8>::uninit(); READ_CHUNK];
    let mut buf = ReadBuf::uninit(&mut stack);
    std::task::ready!(Pin::new(io).poll_read(cx, &mut buf))?;
    if buf.filled().is_empty() {
        return Poll::Ready(Ok(BytesMut::new()));
    }
    let mut read = pool::take();
    read.extend_from_slice(buf.filled());
    Poll::Ready(Ok(read))
}

/// Read buffers of the connections between requests, kept per worker
/// thread (a few, for the connections that wake next) instead of each
/// idle connection holding one.
pub mod pool {
    use std::cell::RefCell;

    use bytes::BytesMut;

    use super::READ_CHUNK;

    /// Buffers kept per thread; more are freed.
    const KEPT: usize = 64;

    thread_local! {
        static FREE: RefCell<Vec<BytesMut>> = const { RefCell::new(Vec::new()) };
    }

    /// An empty buffer with room for a read.
    pub fn take() -> BytesMut {
        FREE.with(|f| f.borrow_mut().pop()).unwrap_or_else(|| BytesMut::with_capacity(READ_CHUNK))
    }

    /// Keep `buf` for another connection, if it is all its own (no body
    /// or head still points into it) and there is room.
    pub fn give(mut buf: BytesMut) {
        buf.clear();
        if buf.capacity() == 0 || !buf.try_reclaim(READ_CHUNK) {
            return;
        }
        FREE.with(|f| {
            let mut free = f.borrow_mut();
            if free.len() < KEPT {
                free.push(buf);
            }
        });
    }
}

/// A request body read from the client connection as it is polled.
#[derive(Debug)]
pub struct H1Body {
    conn: Shared,
    /// The size announced by `Content-Length`, for the size hint.
    length: Option<u64>,
}

impl H1Body {
    /// The body of the request just parsed on `conn`.
    pub fn new(conn: Shared, framing: Framing) -> Self {
        let length = match framing {
            Framing::Length(n) => Some(n),
            Framing::Chunked => None,
        };
        H1Body { conn, length }
    }
}

impl Body for H1Body {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<io::Result<Frame<Bytes>>>> {
        let mut conn = lock(&self.conn);
        let fail = |conn: &mut Inbound, e: io::Error| {
            conn.body = BodyState::Broken;
            Poll::Ready(Some(Err(e)))
        };
        if let Err(e) = std::task::ready!(conn.poll_continue(cx)) {
            return fail(&mut conn, e);
        }
        loop {
            match conn.step() {
                Err(e) => return fail(&mut conn, e),
                Ok(Some(data)) => return Poll::Ready(Some(Ok(Frame::data(data)))),
                Ok(None) if conn.body.is_done() => return Poll::Ready(None),
                Ok(None) => {}
            }
            match std::task::ready!(conn.poll_fill(cx)) {
                Err(e) => return fail(&mut conn, e),
                Ok(0) => return fail(&mut conn, io::ErrorKind::UnexpectedEof.into()),
                Ok(_) => {}
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        lock(&self.conn).body.is_done()
    }

    fn size_hint(&self) -> SizeHint {
        match self.length {
            Some(n) => SizeHint::with_exact(n),
            None => SizeHint::default(),
        }
    }
}

/// A client connection handed over after a 101, with what the client sent
/// past its request head.
pub struct Upgraded {
    /// The connection.
    pub io: Box<dyn Io>,
    /// Bytes read past the request head, for the upstream.
    pub early: Bytes,
}

/// Where an Upgrade request's client connection comes from once the 101 is
/// sent: hyper's upgrade, or the lean server, which puts the receiving end
/// in the request's extensions.
pub enum ClientUpgrade {
    /// hyper's server.
    Hyper(hyper::upgrade::OnUpgrade),
    /// The lean server.
    Lean(oneshot::Receiver<Upgraded>),
}

/// The lean server's handover, as a request extension (which must be
/// `Clone`, hence the shared slot).
#[derive(Clone)]
pub struct LeanUpgrade(Arc<Mutex<Option<oneshot::Receiver<Upgraded>>>>);

impl LeanUpgrade {
    /// The extension for `rx`.
    pub fn new(rx: oneshot::Receiver<Upgraded>) -> Self {
        LeanUpgrade(Arc::new(Mutex::new(Some(rx))))
    }

    /// The receiving end, once.
    pub fn take(&self) -> Option<oneshot::Receiver<Upgraded>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

impl ClientUpgrade {
    /// The connection, once the 101 is out; `None` if it never came.
    pub async fn connection(self) -> Option<Upgraded> {
        match self {
            ClientUpgrade::Hyper(on) => {
                let io = hyper_util::rt::TokioIo::new(on.await.ok()?);
                Some(Upgraded { io: Box::new(io), early: Bytes::new() })
            }
            ClientUpgrade::Lean(rx) => rx.await.ok(),
        }
    }
}

/// A connection whose first bytes were already read: they are read again
/// first. The lean server hands an HTTP/2 connection to hyper this way.
pub struct Rewind {
    prefix: BytesMut,
    io: Box<dyn Io>,
}

impl Rewind {
    /// `io`, with `prefix` read first.
    pub fn new(io: Box<dyn Io>, prefix: BytesMut) -> Self {
        Rewind { prefix, io }
    }
}

impl AsyncRead for Rewind {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        if !self.prefix.is_empty() {
            let n = self.prefix.len().min(buf.remaining());
            buf.put_slice(&self.prefix.split_to(n));
            if self.prefix.is_empty() {
                pool::give(std::mem::take(&mut self.prefix));
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for Rewind {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, data)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// Writes to a [`Shared`] connection, locking it for each write.
pub struct Writer(pub Shared);

impl AsyncWrite for Writer {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let mut conn = lock(&self.0);
        let io = conn.io.as_mut().ok_or(io::ErrorKind::NotConnected)?;
        Pin::new(io).poll_write(cx, data)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut conn = lock(&self.0);
        let io = conn.io.as_mut().ok_or(io::ErrorKind::NotConnected)?;
        Pin::new(io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut conn = lock(&self.0);
        let io = conn.io.as_mut().ok_or(io::ErrorKind::NotConnected)?;
        Pin::new(io).poll_shutdown(cx)
    }
}

/// Read more of `conn` into its buffer: the count, 0 at its end.
pub async fn fill(conn: &Shared) -> io::Result<usize> {
    poll_fn(|cx| lock(conn).poll_fill(cx)).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    impl Io for tokio::io::DuplexStream {}

    /// A connection whose client end is returned, with `framing` started.
    fn conn(framing: Framing, expect: bool) -> (Shared, tokio::io::DuplexStream) {
        let (ours, theirs) = tokio::io::duplex(1024);
        let shared = Inbound::open(Box::new(ours), Arc::default());
        lock(&shared).start_body(framing, expect);
        (shared, theirs)
    }

    #[tokio::test]
    async fn bodies_read_their_framing_and_leave_the_next_request() {
        let (shared, mut client) = conn(Framing::Chunked, false);
        client.write_all(b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\nGET /next").await.unwrap();
        let body = H1Body::new(shared.clone(), Framing::Chunked).collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], b"abcde");
        assert!(lock(&shared).body.is_done());
        assert_eq!(&lock(&shared).read[..], b"GET /next");

        let (shared, mut client) = conn(Framing::Length(4), false);
        client.write_all(b"wxyzGET").await.unwrap();
        let body = H1Body::new(shared.clone(), Framing::Length(4));
        assert_eq!(body.size_hint().exact(), Some(4));
        assert_eq!(&body.collect().await.unwrap().to_bytes()[..], b"wxyz");
        assert_eq!(&lock(&shared).read[..], b"GET");
    }

    #[tokio::test]
    async fn a_body_cut_short_or_malformed_breaks_the_connection() {
        let (shared, mut client) = conn(Framing::Length(10), false);
        client.write_all(b"abc").await.unwrap();
        drop(client);
        assert!(H1Body::new(shared.clone(), Framing::Length(10)).collect().await.is_err());
        assert_eq!(lock(&shared).body, BodyState::Broken);
        let (shared, mut client) = conn(Framing::Chunked, false);
        client.write_all(b"zz\r\n").await.unwrap();
        assert!(H1Body::new(shared.clone(), Framing::Chunked).collect().await.is_err());
    }

    #[tokio::test]
    async fn expect_100_continue_is_answered_when_the_body_is_first_read() {
        let (shared, mut client) = conn(Framing::Length(2), true);
        let mut body = H1Body::new(shared.clone(), Framing::Length(2));
        // Nothing is sent before the body is asked for.
        let mut interim = vec![0u8; CONTINUE.len()];
        let read = tokio::time::timeout(std::time::Duration::from_millis(50), client.read(&mut interim)).await;
        assert!(read.is_err(), "sent before the body was read");
        let reader = tokio::spawn(async move { body.frame().await.map(|f| f.map(|f| f.into_data().ok())) });
        client.read_exact(&mut interim).await.unwrap();
        assert_eq!(interim, CONTINUE);
        client.write_all(b"ok").await.unwrap();
        let first = reader.await.unwrap().unwrap().unwrap().unwrap();
        assert_eq!(&first[..], b"ok");
        // A body of no bytes asks for nothing.
        let (shared, _client) = conn(Framing::Length(0), true);
        assert_eq!(lock(&shared).continue_left, 0);
    }
}

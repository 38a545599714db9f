//! An HTTP/2 client for end-to-end tests: hyper's client over a stream
//! that speaks HTTP/2 from its first byte (h2c with prior knowledge, or TLS
//! after ALPN chose h2), its connection driven by a task on the current
//! tokio runtime.

use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::Empty;
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncWrite};

/// The requests' handle of an HTTP/2 connection over `io`.
pub async fn h2_client<T>(io: T) -> SendRequest<Empty<Bytes>>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (send, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(io)).await.unwrap();
    tokio::spawn(conn);
    send
}

/// h2c with prior knowledge to `addr`: no upgrade, the preface goes first.
pub async fn h2c_client(addr: SocketAddr) -> SendRequest<Empty<Bytes>> {
    h2_client(tokio::net::TcpStream::connect(addr).await.unwrap()).await
}

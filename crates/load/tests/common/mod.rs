//! Helpers shared by the integration tests: a plain hyper client to check
//! the backends without going through the load generator.

#![allow(dead_code)] // each test file uses a different part

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

/// What one request saw.
pub struct Answer {
    pub status: u16,
    pub backend: String,
    pub body_len: usize,
    pub took: Duration,
}

/// A keep-alive client, HTTP/1.1 or h2c.
pub fn client(http2: bool) -> Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>> {
    Client::builder(TokioExecutor::new()).http2_only(http2).build_http()
}

/// Send one request and read the whole response.
pub async fn send(
    client: &Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>,
    method: &str,
    addr: SocketAddr,
    body: usize,
) -> Answer {
    let req = http::Request::builder()
        .method(method)
        .uri(format!("http://{addr}/x"))
        .body(Full::new(Bytes::from(vec![1u8; body])))
        .unwrap();
    let start = Instant::now();
    let resp = client.request(req).await.expect("request");
    let status = resp.status().as_u16();
    let backend = resp.headers().get("x-fulcrum-backend").map(|v| v.to_str().unwrap().to_string()).unwrap_or_default();
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    Answer { status, backend, body_len: body.len(), took: start.elapsed() }
}

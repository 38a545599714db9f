//! A client of the runtime API ([`crate::runtime`]), for `fulcrum ctl`:
//! one HTTP/1.1 request to the admin listener per call, the JSON answer
//! back, and a typed error that says whether the proxy could not be
//! reached, refused the change, or answered something that is not the API.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::{header, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};

/// How long one call may take, connect to last byte. A change waits up to
/// 2 s for every worker to apply it, so this leaves room.
const CALL_LIMIT: Duration = Duration::from_secs(10);

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum CtlError {
    /// Nothing answers at the admin address.
    #[error("cannot reach the admin listener at {addr}: {source} (is `fulcrum serve` running with `admin = \"{addr}\"` or --admin {addr}?)")]
    Unreachable {
        /// The admin address tried.
        addr: SocketAddr,
        /// What the connection said.
        source: std::io::Error,
    },
    /// The connection broke or the answer did not come in time.
    #[error("the admin listener at {addr} did not answer: {message}")]
    NoAnswer {
        /// The admin address.
        addr: SocketAddr,
        /// What happened.
        message: String,
    },
    /// The API refused the request (unknown cluster or endpoint, bad weight, …).
    #[error("{message} ({status})")]
    Refused {
        /// The HTTP status, a 4xx.
        status: StatusCode,
        /// The API's error message.
        message: String,
    },
    /// A cluster name that cannot be part of a URL path.
    #[error("{0:?} cannot be part of a request path (is it the cluster's name?)")]
    BadPath(String),
    /// Something answered that is not the runtime API.
    #[error("{addr} answered {status} without the runtime API's JSON (is it a fulcrum admin listener?)")]
    NotTheApi {
        /// The admin address.
        addr: SocketAddr,
        /// What it answered.
        status: StatusCode,
    },
}

impl CtlError {
    /// Whether the user's input was at fault (the API said 4xx).
    pub fn is_refusal(&self) -> bool {
        match self {
            CtlError::Refused { status, .. } => status.is_client_error(),
            CtlError::BadPath(_) => true,
            _ => false,
        }
    }
}

/// `method path` on the admin listener at `admin`, with `body` as JSON;
/// the JSON answer of a 2xx.
pub async fn call(admin: SocketAddr, method: Method, path: &str, body: Option<Value>) -> Result<Value, CtlError> {
    match tokio::time::timeout(CALL_LIMIT, exchange(admin, method, path, body)).await {
        Ok(result) => result,
        Err(_) => Err(CtlError::NoAnswer { addr: admin, message: format!("no answer within {CALL_LIMIT:?}") }),
    }
}

async fn exchange(admin: SocketAddr, method: Method, path: &str, body: Option<Value>) -> Result<Value, CtlError> {
    let no_answer = |e: &dyn std::fmt::Display| CtlError::NoAnswer { addr: admin, message: e.to_string() };
    let uri: http::Uri = path.parse().map_err(|_| CtlError::BadPath(path.to_string()))?;
    let stream =
        tokio::net::TcpStream::connect(admin).await.map_err(|source| CtlError::Unreachable { addr: admin, source })?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.map_err(|e| no_answer(&e))?;
    tokio::spawn(conn);
    let body = body.map_or_else(Bytes::new, |v| Bytes::from(v.to_string()));
    let req = Request::builder()
        .method(method)
        .uri(uri)
        .header(header::HOST, admin.to_string())
        .header(header::CONTENT_TYPE, "application/json")
        .body(Full::new(body))
        .map_err(|e| no_answer(&e))?;
    let response = sender.send_request(req).await.map_err(|e| no_answer(&e))?;
    let status = response.status();
    let bytes = response.into_body().collect().await.map_err(|e| no_answer(&e))?.to_bytes();
    let value: Value = serde_json::from_slice(&bytes).map_err(|_| CtlError::NotTheApi { addr: admin, status })?;
    if status.is_success() {
        return Ok(value);
    }
    match value.get("error").and_then(Value::as_str) {
        Some(message) => Err(CtlError::Refused { status, message: message.to_string() }),
        None => Err(CtlError::NotTheApi { addr: admin, status }),
    }
}

/// The path of an endpoint, its address percent-encoded where a path
/// cannot carry it as is (IPv6 brackets).
fn endpoint_path(cluster: &str, addr: SocketAddr) -> String {
    let addr = addr.to_string().replace('[', "%5B").replace(']', "%5D");
    format!("/clusters/{cluster}/endpoints/{addr}")
}

/// Every cluster with its endpoints: `{"clusters": [...]}`.
pub async fn clusters(admin: SocketAddr) -> Result<Value, CtlError> {
    call(admin, Method::GET, "/clusters", None).await
}

/// One cluster's endpoints: `{"cluster": name, "endpoints": [...]}`.
pub async fn endpoints(admin: SocketAddr, cluster: &str) -> Result<Value, CtlError> {
    call(admin, Method::GET, &format!("/clusters/{cluster}/endpoints"), None).await
}

/// Drain `addr` (`on`) or undrain it.
pub async fn drain(admin: SocketAddr, cluster: &str, addr: SocketAddr, on: bool) -> Result<Value, CtlError> {
    let action = if on { "drain" } else { "undrain" };
    call(admin, Method::POST, &format!("{}/{action}", endpoint_path(cluster, addr)), None).await
}

/// Give `addr` weight `weight`.
pub async fn weight(admin: SocketAddr, cluster: &str, addr: SocketAddr, weight: f64) -> Result<Value, CtlError> {
    let path = format!("{}/weight", endpoint_path(cluster, addr));
    call(admin, Method::PUT, &path, Some(json!({ "weight": weight }))).await
}

/// Add `addr`, with `weight` if given.
pub async fn add(admin: SocketAddr, cluster: &str, addr: SocketAddr, weight: Option<f64>) -> Result<Value, CtlError> {
    let mut body = json!({ "address": addr.to_string() });
    if let Some(w) = weight {
        body["weight"] = json!(w);
    }
    call(admin, Method::POST, &format!("/clusters/{cluster}/endpoints"), Some(body)).await
}

/// Remove `addr`.
pub async fn remove(admin: SocketAddr, cluster: &str, addr: SocketAddr) -> Result<Value, CtlError> {
    call(admin, Method::DELETE, &endpoint_path(cluster, addr), None).await
}

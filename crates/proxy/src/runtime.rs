//! The runtime API on the admin listener: list clusters and endpoints with
//! their state, and drain, undrain, weigh, add and remove endpoints while
//! the proxy runs (what HAProxy's `set server … state drain` and `set
//! server … weight` and Envoy's admin endpoints give operators).
//!
//! There is no login: whoever can reach the admin listener may use it, so
//! bind it to loopback (or a management network). A change goes through the
//! cluster's one endpoint-set path ([`SharedCluster::change`]): the set is
//! published and every worker gives it to its own balancer, as for a DNS
//! change; the answer waits until every worker has it. Changes last until
//! the next reload, which builds the clusters from the file again.
//!
//! | method | path | body |
//! |---|---|---|
//! | GET | `/clusters` | |
//! | GET | `/clusters/{name}` | |
//! | GET | `/clusters/{name}/endpoints` | |
//! | POST | `/clusters/{name}/endpoints` | `{"address": "ip:port", "weight": 1}` |
//! | GET | `/clusters/{name}/endpoints/{addr}` | |
//! | DELETE | `/clusters/{name}/endpoints/{addr}` | |
//! | POST | `/clusters/{name}/endpoints/{addr}/drain` | |
//! | POST | `/clusters/{name}/endpoints/{addr}/undrain` | |
//! | PUT | `/clusters/{name}/endpoints/{addr}/weight` | `{"weight": 2.5}` |
//!
//! Answers are JSON; errors are `{"error": "…"}` with a 4xx status.

use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use fulcrum_balance::{Endpoint, EndpointLoad};
use http::{header, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use serde_json::{json, Value};

use crate::cluster::{Resolved, SharedCluster};
use crate::overrides::ChangeError;

/// How long a change waits for every worker to apply it.
const APPLY_LIMIT: Duration = Duration::from_secs(2);
/// Request bodies are a few bytes of JSON.
const MAX_BODY: usize = 64 * 1024;

/// A JSON answer.
pub fn reply(status: StatusCode, value: &Value) -> Response<Full<Bytes>> {
    let mut body = serde_json::to_string_pretty(value).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
    body.push('\n');
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static("application/json"));
    r
}

fn error(status: StatusCode, message: impl std::fmt::Display) -> Response<Full<Bytes>> {
    reply(status, &json!({ "error": message.to_string() }))
}

/// One endpoint's state: configuration, health, runtime changes, counters,
/// and each worker's balancer view (active requests, latency estimate),
/// where that balancer has the endpoint.
pub fn endpoint_json(c: &SharedCluster, resolved: &Resolved, loads: &[Vec<EndpointLoad>], e: &Endpoint) -> Value {
    let per_worker: Vec<_> = loads
        .iter()
        .map(|w| {
            let l = w.iter().find(|l| l.id == e.id);
            json!({
                "active": l.map_or(0, |l| l.active),
                "latency_estimate_ms": l.and_then(|l| l.latency_estimate).map(|v| v / 1e6),
            })
        })
        .collect();
    let (ejected, healthy) = c.health_of(e.id);
    let routed = resolved.endpoints.iter().find(|r| r.id == e.id);
    let stats = resolved.upstream(e.id).map(|u| &u.stats);
    json!({
        "address": e.name,
        "weight": e.weight,
        "effective_weight": routed.map(|r| r.weight),
        "healthy": healthy,
        "ejected": ejected,
        "draining": c.is_drained(e.id),
        "requests": stats.map_or(0, |s| s.requests.load(Relaxed)),
        "errors": stats.map_or(0, |s| s.errors.load(Relaxed)),
        "in_flight": stats.map_or(0, |s| s.in_flight.load(Relaxed)),
        "workers": per_worker,
    })
}

/// A cluster with its counters and every endpoint's state.
pub fn cluster_json(c: &SharedCluster, now: fulcrum_balance::Nanos) -> Value {
    let resolved = c.current();
    let loads = c.worker_loads(now);
    let endpoints: Vec<_> = resolved.all.iter().map(|e| endpoint_json(c, &resolved, &loads, e)).collect();
    json!({
        "name": c.config.name,
        "algorithm": c.config.algorithm,
        "panic": resolved.panic,
        "ejections": c.counters.ejections.load(Relaxed),
        "retries": c.counters.retries.load(Relaxed),
        "retries_denied": c.counters.retries_denied.load(Relaxed),
        "overflows": c.counters.overflows.load(Relaxed),
        "endpoints": endpoints,
    })
}

/// A refused request: its status and what to tell the caller.
#[derive(Debug)]
struct Refused(StatusCode, String);

impl Refused {
    fn bad(message: impl std::fmt::Display) -> Refused {
        Refused(StatusCode::BAD_REQUEST, message.to_string())
    }
}

impl From<ChangeError> for Refused {
    fn from(e: ChangeError) -> Refused {
        let status = match e {
            ChangeError::UnknownEndpoint(_) => StatusCode::NOT_FOUND,
            ChangeError::AlreadyMember(_) => StatusCode::CONFLICT,
            ChangeError::BadWeight(_) => StatusCode::BAD_REQUEST,
        };
        Refused(status, e.to_string())
    }
}

/// An endpoint address from a path segment: `ip:port`, with IPv6 in
/// brackets, which clients may percent-encode.
fn parse_addr(segment: &str) -> Result<SocketAddr, Refused> {
    let decoded = segment.replace("%5B", "[").replace("%5b", "[").replace("%5D", "]").replace("%5d", "]");
    let decoded = decoded.replace("%3A", ":").replace("%3a", ":");
    decoded.parse().map_err(|_| Refused::bad(format!("{decoded:?} is not an endpoint address (ip:port)")))
}

/// What a request body may say.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Body {
    address: Option<String>,
    weight: Option<f64>,
}

async fn read_body<B>(body: B) -> Result<Body, Refused>
where
    B: hyper::body::Body,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let bytes = match Limited::new(body, MAX_BODY).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return Err(Refused::bad(format!("cannot read the body: {e}"))),
    };
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(Body::default());
    }
    serde_json::from_slice(&bytes).map_err(|e| Refused::bad(format!("bad JSON body: {e}")))
}

fn method_not_allowed(allow: &'static str) -> Response<Full<Bytes>> {
    let mut r = error(StatusCode::METHOD_NOT_ALLOWED, format!("this path takes {allow}"));
    r.headers_mut().insert(header::ALLOW, header::HeaderValue::from_static(allow));
    r
}

/// Answer a request whose path starts with `/clusters`.
pub async fn handle<B>(
    clusters: &[Arc<SharedCluster>],
    now: impl Fn() -> fulcrum_balance::Nanos,
    req: Request<B>,
) -> Response<Full<Bytes>>
where
    B: hyper::body::Body,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    route(clusters, now, req).await.unwrap_or_else(|Refused(status, message)| error(status, message))
}

/// One endpoint of `c` as JSON, if it is a member.
fn one_endpoint(c: &SharedCluster, addr: SocketAddr, now: fulcrum_balance::Nanos) -> Option<Value> {
    let resolved = c.current();
    let e = resolved.all.iter().find(|e| e.name == addr.to_string())?;
    Some(endpoint_json(c, &resolved, &c.worker_loads(now), e))
}

async fn route<B>(
    clusters: &[Arc<SharedCluster>],
    now: impl Fn() -> fulcrum_balance::Nanos,
    req: Request<B>,
) -> Result<Response<Full<Bytes>>, Refused>
where
    B: hyper::body::Body,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let path = req.uri().path().trim_end_matches('/').to_string();
    let segments: Vec<&str> = path.split('/').skip(2).collect();
    let method = req.method().clone();
    let Some((name, rest)) = segments.split_first() else {
        if method != Method::GET {
            return Ok(method_not_allowed("GET"));
        }
        let all: Vec<_> = clusters.iter().map(|c| cluster_json(c, now())).collect();
        return Ok(reply(StatusCode::OK, &json!({ "clusters": all })));
    };
    let c = clusters
        .iter()
        .find(|c| c.config.name == *name)
        .ok_or_else(|| Refused(StatusCode::NOT_FOUND, format!("no cluster {name:?}")))?;
    let no_path = || Refused(StatusCode::NOT_FOUND, format!("no such path: {path}"));
    let (addr, status, result) = match (rest, method) {
        ([], Method::GET) => return Ok(reply(StatusCode::OK, &cluster_json(c, now()))),
        ([], _) => return Ok(method_not_allowed("GET")),
        (["endpoints"], Method::GET) => {
            let resolved = c.current();
            let loads = c.worker_loads(now());
            let all: Vec<_> = resolved.all.iter().map(|e| endpoint_json(c, &resolved, &loads, e)).collect();
            return Ok(reply(StatusCode::OK, &json!({ "cluster": c.config.name, "endpoints": all })));
        }
        (["endpoints"], Method::POST) => {
            let body = read_body(req.into_body()).await?;
            let address = body.address.ok_or_else(|| Refused::bad("the body needs \"address\": \"ip:port\""))?;
            let addr = parse_addr(&address)?;
            (addr, StatusCode::CREATED, c.change(|o, file| o.add(file, addr, body.weight)))
        }
        (["endpoints"], _) => return Ok(method_not_allowed("GET, POST")),
        (["endpoints", addr, action @ ..], method) => {
            let addr = parse_addr(addr)?;
            let change = match (action, method) {
                ([], Method::GET) => {
                    let e = one_endpoint(c, addr, now()).ok_or(ChangeError::UnknownEndpoint(addr))?;
                    return Ok(reply(StatusCode::OK, &e));
                }
                ([], Method::DELETE) => c.change(|o, file| o.remove(file, addr)),
                ([], _) => return Ok(method_not_allowed("GET, DELETE")),
                (["drain"], Method::POST) => c.change(|o, file| o.drain(file, addr, true)),
                (["undrain"], Method::POST) => c.change(|o, file| o.drain(file, addr, false)),
                (["drain" | "undrain"], _) => return Ok(method_not_allowed("POST")),
                (["weight"], Method::PUT) => {
                    let weight = read_body(req.into_body())
                        .await?
                        .weight
                        .ok_or_else(|| Refused::bad("the body needs \"weight\": a number > 0"))?;
                    c.change(|o, file| o.set_weight(file, addr, weight))
                }
                (["weight"], _) => return Ok(method_not_allowed("PUT")),
                _ => return Err(no_path()),
            };
            (addr, StatusCode::OK, change)
        }
        _ => return Err(no_path()),
    };
    result?;
    // The answer waits until every worker's balancer has the change.
    let applied = c.applied(APPLY_LIMIT).await;
    let endpoint =
        one_endpoint(c, addr, now()).unwrap_or_else(|| json!({ "address": addr.to_string(), "removed": true }));
    Ok(reply(status, &json!({ "cluster": c.config.name, "endpoint": endpoint, "applied": applied })))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::Epoch;
    use crate::cluster::WorkerCluster;
    use crate::config::Config;
    use std::path::Path;

    fn cluster() -> Arc<SharedCluster> {
        let text = "[[listener]]\nlisten = \"127.0.0.1:1\"\nroutes = [{ cluster = \"c\" }]\n\n\
             [[cluster]]\nname = \"c\"\nendpoints = [\"127.0.0.1:1\", \"127.0.0.1:2\"]\n";
        let c = Config::parse(Path::new("t.toml"), text).unwrap().clusters.remove(0);
        SharedCluster::new(c, Epoch::new(), None)
    }

    async fn call(c: &Arc<SharedCluster>, method: Method, path: &str, body: &str) -> (StatusCode, Value) {
        let req = Request::builder().method(method).uri(path).body(Full::new(Bytes::from(body.to_string()))).unwrap();
        let r = handle(std::slice::from_ref(c), || 0, req).await;
        let status = r.status();
        let bytes = r.into_body().collect().await.unwrap().to_bytes();
        (status, serde_json::from_slice(&bytes).unwrap())
    }

    #[tokio::test]
    async fn changes_reach_the_worker_balancer_and_bad_input_gets_a_json_4xx() {
        let c = cluster();
        let w = WorkerCluster::new(c.clone(), 1, None);
        tokio::spawn(WorkerCluster::follow_endpoints(Arc::downgrade(&w)));
        let (s, v) = call(&c, Method::POST, "/clusters/c/endpoints/127.0.0.1:1/drain", "").await;
        assert_eq!(s, StatusCode::OK);
        assert_eq!((v["applied"].as_bool(), v["endpoint"]["draining"].as_bool()), (Some(true), Some(true)));
        for _ in 0..20 {
            let p = w.pick(0, None, &[]).unwrap();
            assert_eq!(p.upstream.addr.port(), 2, "a drained endpoint is never picked");
            w.cancel(p);
        }
        let (s, v) =
            call(&c, Method::POST, "/clusters/c/endpoints", r#"{"address": "127.0.0.1:3", "weight": 4}"#).await;
        assert_eq!((s, v["endpoint"]["weight"].as_f64()), (StatusCode::CREATED, Some(4.0)));
        let (s, _) = call(&c, Method::PUT, "/clusters/c/endpoints/127.0.0.1:2/weight", r#"{"weight": 0.5}"#).await;
        assert_eq!(s, StatusCode::OK);
        let (s, _) = call(&c, Method::DELETE, "/clusters/c/endpoints/127.0.0.1:1", "").await;
        assert_eq!(s, StatusCode::OK);
        let (_, v) = call(&c, Method::GET, "/clusters/c/endpoints", "").await;
        let listed: Vec<_> = v["endpoints"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| (e["address"].as_str().unwrap().to_string(), e["weight"].as_f64().unwrap()))
            .collect();
        assert_eq!(listed, vec![("127.0.0.1:2".to_string(), 0.5), ("127.0.0.1:3".to_string(), 4.0)]);

        let bad = [
            (Method::GET, "/clusters/nope", "", StatusCode::NOT_FOUND),
            (Method::POST, "/clusters/c/endpoints/127.0.0.1:9/drain", "", StatusCode::NOT_FOUND),
            (Method::POST, "/clusters/c/endpoints/not-an-addr/drain", "", StatusCode::BAD_REQUEST),
            (Method::POST, "/clusters/c/endpoints", r#"{"address": "127.0.0.1:2"}"#, StatusCode::CONFLICT),
            (Method::POST, "/clusters/c/endpoints", r#"{"weight": 1}"#, StatusCode::BAD_REQUEST),
            (Method::POST, "/clusters/c/endpoints", "{not json", StatusCode::BAD_REQUEST),
            (Method::PUT, "/clusters/c/endpoints/127.0.0.1:2/weight", r#"{"weight": -3}"#, StatusCode::BAD_REQUEST),
            (Method::PUT, "/clusters/c/endpoints/127.0.0.1:2/weight", r#"{"wieght": 3}"#, StatusCode::BAD_REQUEST),
            (Method::GET, "/clusters/c/endpoints/127.0.0.1:2/drain", "", StatusCode::METHOD_NOT_ALLOWED),
            (Method::GET, "/clusters/c/endpoints/127.0.0.1:2/other", "", StatusCode::NOT_FOUND),
        ];
        for (method, path, body, want) in bad {
            let (s, v) = call(&c, method.clone(), path, body).await;
            assert_eq!(s, want, "{method} {path} {body}");
            assert!(v["error"].as_str().is_some_and(|e| !e.is_empty()), "{v}");
        }
    }

    #[test]
    fn endpoint_addresses_in_paths_may_be_percent_encoded_ipv6() {
        assert_eq!(parse_addr("%5B%3A%3A1%5D%3A80").unwrap(), "[::1]:80".parse().unwrap());
        assert_eq!(parse_addr("[::1]:80").unwrap(), "[::1]:80".parse().unwrap());
        assert!(parse_addr("host:80").is_err());
    }
}

//! The HTTP request path: route, pick, forward, stream back, report.
//!
//! A request is matched against its listener's routes (host, then path
//! prefix), the cluster's balancer picks an endpoint (hashing the configured
//! key for hash-based algorithms), and the request is forwarded over the
//! worker's pooled upstream connections with hop-by-hop headers removed and
//! `X-Forwarded-For`, `X-Forwarded-Proto` and `Via` added. Bodies stream both
//! ways; nothing is buffered whole.
//!
//! The balancer hears the outcome when the response body ends
//! ([`TrackedBody`]): the latency it learns is the time to the response
//! headers (as tower's Peak-EWMA measures it), and the request counts as
//! active for least request until its body is done. A 5xx, a connect
//! failure, a timeout or a broken body is a failure.
//!
//! Retries follow the cluster's policy: a connect failure (the request was
//! not sent) is retried on another endpoint whenever the request can be sent
//! again; resets, timeouts and 5xx only for idempotent requests without a
//! body. A gRPC call answered with status 14, UNAVAILABLE, in a
//! trailers-only response is retried when the policy has `grpc-unavailable`
//! (whatever the method: the service owner says the call may be repeated),
//! with its body sent again from a copy kept while it streamed (up to
//! [`COPY_LIMIT`](crate::body::COPY_LIMIT)). Every retry spends a token of
//! the worker's retry budget.
//!
//! Before routing, a listener with `request_id` or `traceparent` stamps the
//! request ([`trace_context`](crate::trace_context)); after it, the route's
//! rate limit (a [`RateLimiter`](fulcrum_resilience::RateLimiter) shared by
//! the workers) may refuse it with 429 and `Retry-After`. A cluster with a
//! `sticky_cookie` gives a request without its cookie a random key to hash
//! and sets it as the cookie on the response.
//!
//! Responses the proxy makes itself are the [`LocalReply`]s: 400 (an
//! HTTP/1.1 request without `Host` or any with two, RFC 9112 §3.2; a
//! request body that broke while streaming, such as a chunk size that
//! overflows), 404 (no route), 413 (a body over `max_body_bytes`), 429 (a
//! route's rate limit), 503 (no endpoint, or the cluster's `max_requests`
//! or `max_connections` reached), 502 (upstream refused, reset or broke
//! the protocol), 504 (no response headers within the cluster's
//! `request_timeout`); hyper answers malformed requests with 400 and
//! oversized heads with 431. All are counted in [`ProxyStats`].

use std::borrow::Cow;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use fulcrum_balance::Nanos;
use fulcrum_resilience::RequestResult;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::uri::PathAndQuery;
use http::{Request, Response, StatusCode, Uri, Version};
use http_body::{Body, Frame, SizeHint};
use http_body_util::{Either, Empty, Full};
use tokio::sync::watch;
use xxhash_rust::xxh64::xxh64;

use crate::access_log::{AccessLog, Flags, Record, Trace};
use crate::body::{idempotent, BodyCopy, ClientFault, Fault, LimitedBody, RequestBody, UpstreamBody};
use crate::clock::Epoch;
use crate::cluster::{Pick, WorkerCluster};
use crate::config::{Cluster, HashKey, LimitKey, Listener, RetryOn, RetryPolicy, UpstreamProtocol};
use crate::h1::conn::{ClientUpgrade, LeanUpgrade};
use crate::h1::UpgradeAnswer;
use crate::local_reply::{Heard, LocalReply, CONTENT_TYPE};
use crate::metrics::ProxyStats;
use crate::proxy_protocol::Addresses;
use crate::route::{Action, Redirect, Respond, Route, Vars, REQUEST_ID};
use crate::routing::Routing;
use crate::trace_context::Stamp;
use crate::upstream::{ConnectTime, ResponseBody, SendFailure, UpstreamPool};

/// The body of every response the proxy sends.
pub type ProxyBody = Either<TrackedBody, Full<Bytes>>;

/// Everything one worker needs to serve one listener.
pub struct HttpService {
    /// Which listener of the routing this serves.
    pub listener: usize,
    /// The worker's routing (replaced on reload; read once per request).
    pub routing: watch::Receiver<Arc<Routing>>,
    /// Shared counters.
    pub stats: Arc<ProxyStats>,
    /// Shared time origin.
    pub epoch: Epoch,
    /// Whether the listener terminates TLS (for `X-Forwarded-Proto`).
    pub tls: bool,
    /// The listener's access log, if it has one.
    pub access_log: Option<AccessLog>,
    /// The listener's `Alt-Svc` header, added to every response.
    pub alt_svc: Option<HeaderValue>,
    /// The worker's generator of request and trace IDs and sticky cookies.
    pub rng: std::sync::Mutex<fulcrum_balance::Rng>,
}

/// The response of a reply the proxy makes itself.
fn local(reply: LocalReply) -> Response<ProxyBody> {
    let body = match reply.message() {
        Cow::Borrowed(text) => Bytes::from_static(text.as_bytes()),
        Cow::Owned(text) => Bytes::from(text),
    };
    let mut response = Response::new(Either::Right(Full::new(body)));
    *response.status_mut() = reply.status();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE));
    if let LocalReply::RateLimited(seconds) = reply {
        response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    response
}

/// Why a request's `Host` makes it one the proxy must refuse (RFC 9112
/// §3.2: an HTTP/1.1 request without one, or any request with two), if it does.
fn bad_host<B>(req: &Request<B>) -> Option<LocalReply> {
    let mut hosts = req.headers().get_all(header::HOST).iter();
    match (hosts.next(), hosts.next()) {
        (None, _) if req.version() == Version::HTTP_11 => Some(LocalReply::MissingHost),
        (Some(_), Some(_)) => Some(LocalReply::TwoHosts),
        _ => None,
    }
}

/// The request's host, lowercased, without port: the request target's
/// authority when it has one (the absolute form, or HTTP/2's `:authority`,
/// which win over a conflicting `Host`: RFC 9112 §3.2.2, RFC 9113 §8.3.1),
/// else the `Host` header.
fn host_of<B>(req: &Request<B>) -> Option<std::borrow::Cow<'_, str>> {
    let raw = match req.uri().host() {
        Some(host) => host,
        None => req.headers().get(header::HOST).and_then(|h| h.to_str().ok())?,
    };
    let host = match raw.rfind(':') {
        // Keep IPv6 literals whole: "[::1]:80" → "[::1]".
        Some(i) if !raw[i..].contains(']') => &raw[..i],
        _ => raw,
    };
    // Most hosts arrive in lower case already: copy only those that do not.
    Some(match host.bytes().any(|b| b.is_ascii_uppercase()) {
        true => host.to_ascii_lowercase().into(),
        false => host.into(),
    })
}

/// The hash a hash-based algorithm uses for this request, if the key is present.
fn hash_key<B>(policy: &HashKey, req: &Request<B>, peer: SocketAddr) -> Option<u64> {
    match policy {
        HashKey::Header(name) => req.headers().get(name.as_str()).map(|v| xxh64(v.as_bytes(), 0)),
        HashKey::Cookie(name) => req
            .headers()
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|kv| kv.trim().split_once('='))
            .find(|(k, _)| k == name)
            .map(|(_, v)| xxh64(v.as_bytes(), 0)),
        HashKey::SourceIp => Some(match peer.ip() {
            std::net::IpAddr::V4(ip) => xxh64(&ip.octets(), 0),
            std::net::IpAddr::V6(ip) => xxh64(&ip.octets(), 0),
        }),
        HashKey::Path => Some(xxh64(req.uri().path().as_bytes(), 0)),
    }
}

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
/// The verified client certificate of a mutual-TLS listener (Envoy's name and format).
const X_FORWARDED_CLIENT_CERT: HeaderName = HeaderName::from_static("x-forwarded-client-cert");

/// Headers that belong to one connection and must not be forwarded (RFC 9110 §7.6.1).
const HOP_BY_HOP: [HeaderName; 7] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::TE,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // Most requests carry none: one pass of cheap name comparisons, no hashing.
    if !headers.keys().any(|k| HOP_BY_HOP.contains(k)) {
        return;
    }
    let listed: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in listed.iter().chain(HOP_BY_HOP.iter()) {
        headers.remove(name);
    }
}

fn via(version: Version) -> HeaderValue {
    HeaderValue::from_static(match version {
        Version::HTTP_2 => "2 fulcrum",
        Version::HTTP_3 => "3 fulcrum",
        Version::HTTP_10 => "1.0 fulcrum",
        _ => "1.1 fulcrum",
    })
}

/// What one try of a request came to.
// Lives on the stack for one try; boxing the response would cost an allocation per request.
#[allow(clippy::large_enum_variant)]
enum Try {
    /// Response headers arrived.
    Response(Response<ResponseBody>),
    /// No connection could be made: the request was not sent.
    ConnectFailure,
    /// The connection broke, or the upstream broke the protocol.
    Reset,
    /// The cluster's connection and pending limits are full.
    Overflow,
    /// The per-try timeout passed.
    Timeout,
}

/// gRPC's status UNAVAILABLE.
const UNAVAILABLE: u32 = 14;

/// A request taken apart for its tries.
struct Prepared {
    parts: http::request::Parts,
    /// The client's body until a try takes it (the pool gives it back if
    /// no connection could be made).
    body: Option<LimitedBody>,
    /// The upstream headers until a try takes them (or copies, if a retry
    /// after sending is possible).
    headers: Option<HeaderMap>,
    path: PathAndQuery,
    /// The hash key, for hash-based algorithms.
    key: Option<u64>,
    /// No body: it can be sent again as it was.
    replayable: bool,
    /// No body and an idempotent method: it may be retried after it was sent.
    resendable: bool,
    /// Tries copy the headers rather than take them.
    copy_headers: bool,
    /// Set if the body outgrew `max_body_bytes` or broke while streaming.
    fault: Arc<ClientFault>,
    /// A gRPC call's `grpc-timeout`, which shortens the request timeout.
    grpc_timeout: Option<Duration>,
    /// A gRPC call the cluster retries on UNAVAILABLE: its body, copied
    /// as it streams, to be sent again.
    copy: Option<Arc<BodyCopy>>,
    /// Retry a gRPC UNAVAILABLE answer (the cluster says so and this is a gRPC call).
    grpc_retry: bool,
    /// The request's `x-request-id`, kept for response header templates.
    request_id: Option<HeaderValue>,
    /// The client's address, for response header templates.
    client: SocketAddr,
    /// The sticky cookie to set on the response (the request had none).
    sticky: Option<HeaderValue>,
}

impl Prepared {
    /// A streamed body goes out once; the pool hands it back (with the
    /// headers) if a connection could not be made.
    fn can_send_again(&self) -> bool {
        (self.replayable || self.body.is_some()) && self.headers.is_some()
    }
}

/// An HTTP/1.1 request to switch protocols (`Connection: upgrade` and an
/// `Upgrade` header, RFC 9110 §7.8), such as a WebSocket handshake.
fn is_upgrade<B>(req: &Request<B>) -> bool {
    req.version() == Version::HTTP_11
        && req.headers().contains_key(header::UPGRADE)
        && req
            .headers()
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
}

/// The request's authority as sent: the target's, else `Host`.
fn authority_of<B>(req: &Request<B>) -> Option<&str> {
    match req.uri().authority() {
        Some(a) => Some(a.as_str()),
        None => req.headers().get(header::HOST).and_then(|h| h.to_str().ok()),
    }
}

/// The timeout and retry policy of a request: the route's, else the cluster's.
fn policy<'a>(route: &'a Route, config: &'a Cluster) -> (Duration, &'a RetryPolicy) {
    (route.timeout.unwrap_or(config.request_timeout), route.retries.as_ref().unwrap_or(&config.retries))
}

/// The header `$request_id` reads: the listener's `request_id.header`, else
/// `x-request-id`.
fn id_header(listener: &Listener) -> &HeaderName {
    listener.request_id.as_ref().map_or(&REQUEST_ID, |r| &r.header)
}

/// Whether the route's rate limit (if any) lets `req` from `peer` through
/// at `now`; the refusal says how long to wait.
fn admit<B>(
    routing: &Routing,
    listener: usize,
    route: usize,
    req: &Request<B>,
    peer: &Peer,
    now: Nanos,
) -> Result<(), LocalReply> {
    let Some(limiter) = &routing.limits[listener][route] else { return Ok(()) };
    let Some(config) = &routing.listeners[listener].routes.routes()[route].rate_limit else { return Ok(()) };
    let key = match &config.key {
        None => None,
        Some(LimitKey::Client) => hash_key(&HashKey::SourceIp, req, peer.addr),
        Some(LimitKey::Header(name)) => Some(req.headers().get(name.as_str()).map_or(0, |v| xxh64(v.as_bytes(), 0))),
    };
    let mut limiter = crate::cluster::lock(limiter);
    let checked = match key {
        Some(key) => limiter.check_key(key, now),
        None => limiter.check(now),
    };
    checked.map_err(|limited| LocalReply::RateLimited(limited.retry_after_secs()))
}

/// Send one try within `timeout`. A request the pool could not send comes
/// back whole: its body and headers go back into `req` for the next try.
async fn send_try(
    pool: &Arc<UpstreamPool>,
    addr: SocketAddr,
    upstream_req: Request<UpstreamBody>,
    deadline: Instant,
    req: &mut Prepared,
) -> Try {
    // The deadline comes from a clock read the caller made anyway, and the
    // send future stays where it is pinned rather than moving into the wrapper.
    let send = std::pin::pin!(pool.send(addr, upstream_req));
    match tokio::time::timeout_at(deadline.into(), send).await {
        Err(_) => Try::Timeout,
        Ok(Err(SendFailure::Overflow)) => Try::Overflow,
        Ok(Err(SendFailure::ConnectFailure(unsent))) => {
            // Nothing left: the body and headers can go out again.
            let (unsent_parts, unsent_body) = unsent.into_parts();
            if req.headers.is_none() {
                req.headers = Some(unsent_parts.headers);
            }
            if let Either::Left(b) = unsent_body {
                req.body = Some(b);
            }
            Try::ConnectFailure
        }
        Ok(Err(SendFailure::Reset)) => Try::Reset,
        Ok(Ok(response)) => Try::Response(response),
    }
}

/// A try's outcome as the retry policy sees it (the failure, `None` for a
/// success) and as the balancer hears it. With `grpc`, a trailers-only gRPC
/// response with a failing `grpc-status` is a failure for the balancer; with
/// `grpc_retry`, one with status 14 (UNAVAILABLE) is a failure the policy
/// may retry (other statuses go back to the client).
fn classify(outcome: &Try, grpc: bool, grpc_retry: bool) -> (Option<RetryOn>, RequestResult) {
    match outcome {
        Try::Response(r) if r.status().is_server_error() => {
            (Some(RetryOn::Status(r.status().as_u16())), RequestResult::ServerError)
        }
        Try::Response(r) if grpc_retry && crate::grpc::status(r.headers()) == Some(UNAVAILABLE) => {
            let result = if grpc { RequestResult::ServerError } else { RequestResult::Success };
            (Some(RetryOn::GrpcUnavailable), result)
        }
        Try::Response(r) if grpc && crate::grpc::failed(r.headers()) => (None, RequestResult::ServerError),
        Try::Response(..) | Try::Overflow => (None, RequestResult::Success),
        Try::ConnectFailure => (Some(RetryOn::ConnectFailure), RequestResult::GatewayFailure),
        Try::Reset => (Some(RetryOn::Reset), RequestResult::GatewayFailure),
        Try::Timeout => (Some(RetryOn::Timeout), RequestResult::GatewayFailure),
    }
}

/// The request ID back to the client, when the listener says so.
fn return_id(listener: &Listener, stamp: &Stamp, response: &mut Response<ProxyBody>) {
    if let (Some(config), Some(id)) = (&listener.request_id, &stamp.request_id) {
        if config.response {
            response.headers_mut().insert(config.header.clone(), id.clone());
        }
    }
}

/// Add `flag` to the request's trace, if it has one (only with an access log).
fn note(trace: &mut Option<&mut Trace>, flag: Flags) {
    if let Some(t) = trace {
        t.flags.set(flag);
    }
}

impl HttpService {
    /// Answer `reply` to a request no endpoint was picked for: count it and
    /// flag the request's log record.
    fn reply(&self, reply: LocalReply, trace: &mut Option<&mut Trace>) -> Response<ProxyBody> {
        reply.counter(&self.stats).fetch_add(1, Relaxed);
        note(trace, reply.flag());
        local(reply)
    }

    /// Answer `reply` to a request `pick` was made for, `latency` after it
    /// was sent: the balancer hears what the reply says ([`Heard`]), then
    /// as [`reply`](Self::reply).
    fn reply_picked(
        &self,
        reply: LocalReply,
        cluster: &WorkerCluster,
        pick: Pick,
        latency: Nanos,
        trace: &mut Option<&mut Trace>,
    ) -> Response<ProxyBody> {
        match reply.heard() {
            Heard::Cancelled => cluster.cancel(pick),
            Heard::Failure => cluster.complete(pick, self.epoch.now(), latency, RequestResult::GatewayFailure),
        }
        if reply.overflows() {
            cluster.shared.counters.overflows.fetch_add(1, Relaxed);
        }
        self.reply(reply, trace)
    }

    /// The client of a connection accepted from `peer`: the socket's, or
    /// the one a PROXY protocol header carries; `None` if the listener's
    /// rule refuses the connection.
    pub async fn peer(&self, stream: &mut tokio::net::TcpStream, peer: SocketAddr) -> Option<Arc<Peer>> {
        let rule = self.routing.borrow().listeners[self.listener].proxy_protocol.clone();
        let client = crate::proxy_protocol::client_of(stream, peer, rule.as_ref(), &self.stats).await?;
        Some(Arc::new(Peer::connected(client)))
    }

    /// Serve one request from `peer`. Never fails: every problem becomes a
    /// response. With an access log, the request's record is sent when its
    /// response body ends (at once for the proxy's own answers).
    pub async fn handle(&self, peer: &Peer, mut req: Request<RequestBody>) -> Result<Response<ProxyBody>, Infallible> {
        // Requests keep the routing they started with, across a reload.
        let routing = self.routing.borrow().clone();
        let listener = &routing.listeners[self.listener];
        let stamp = if listener.request_id.is_some() || listener.traceparent {
            crate::trace_context::stamp(listener, req.headers_mut(), &mut crate::cluster::lock(&self.rng))
        } else {
            Stamp::default()
        };
        let body = Arc::new(ClientFault::default());
        let Some(log) = &self.access_log else {
            let mut response = self.serve(&routing, peer, req, &body, None).await;
            return_id(listener, &stamp, &mut response);
            return Ok(self.advertise(response));
        };
        let arrived = Instant::now();
        let mut record = Box::new(arriving(peer.addr, &req));
        record.client_cert = peer.client_cert.as_ref().map(|c| c.subject.clone());
        record.request_id = stamp.request_id.as_ref().map(|id| String::from_utf8_lossy(id.as_bytes()).into_owned());
        record.trace_id = stamp.trace_id.map(|t| String::from_utf8_lossy(&t).into_owned());
        let mut trace = Trace::default();
        let mut response = self.serve(&routing, peer, req, &body, Some(&mut trace)).await;
        return_id(listener, &stamp, &mut response);
        record.status = response.status().as_u16();
        record.cluster = trace.cluster.map(|i| routing.clusters[i].shared.config.name.clone());
        record.grpc_status = crate::grpc::status(response.headers());
        record.trace = trace;
        let pending = PendingLog { record, arrived, log: log.clone(), body };
        match response.body_mut() {
            Either::Left(tracked) => tracked.log = Some(pending),
            Either::Right(own) => pending.send(own.size_hint().exact().unwrap_or(0), Flags::default()),
        }
        Ok(self.advertise(response))
    }

    /// `response` with the listener's `Alt-Svc`, if it has one.
    fn advertise(&self, mut response: Response<ProxyBody>) -> Response<ProxyBody> {
        if let Some(alt_svc) = &self.alt_svc {
            response.headers_mut().insert(header::ALT_SVC, alt_svc.clone());
        }
        response
    }

    /// [`handle`](Self::handle) without the log: `body` counts the request
    /// body, `trace` (given only when there is a log) learns the route and
    /// the tries.
    async fn serve(
        &self,
        routing: &Routing,
        peer: &Peer,
        req: Request<RequestBody>,
        body: &Arc<ClientFault>,
        mut trace: Option<&mut Trace>,
    ) -> Response<ProxyBody> {
        let listener = &routing.listeners[self.listener];
        if let Some(reply) = bad_host(&req) {
            return self.reply(reply, &mut trace);
        }
        // Most listeners route by path alone: only look at the host if a route asks.
        let host = if listener.routes.needs_host() { host_of(&req) } else { None };
        let Some((route_index, route)) = listener.routes.find(&req, host.as_deref(), peer.client_cert.as_deref())
        else {
            return self.reply(LocalReply::NoRoute, &mut trace);
        };
        if let Some(t) = &mut trace {
            t.route = route.name.clone();
        }
        if let Err(reply) = admit(routing, self.listener, route_index, &req, peer, self.epoch.now()) {
            return self.reply(reply, &mut trace);
        }
        let split = match &route.action {
            Action::Forward(split) => split,
            Action::Redirect(redirect) => return self.redirect(redirect, &req, &mut trace),
            Action::Respond(respond) => return self.respond(respond, &mut trace),
        };
        let index = split.pick(split.key.as_ref().and_then(|k| hash_key(k, &req, peer.addr)));
        if let Some(t) = &mut trace {
            t.cluster = Some(index);
        }
        let cluster = &routing.clusters[index];
        if is_upgrade(&req) || crate::ext_connect::protocol(&req).is_some() {
            return self.upgrade(cluster, route, id_header(listener), peer, req, trace).await;
        }
        match self.prepare(listener, &cluster.shared.config, route, peer, req, body) {
            Ok(prepared) => self.forward(cluster, &routing.pools[index], route, prepared, trace).await,
            Err(reply) => self.reply(reply, &mut trace),
        }
    }

    /// Answer with a route's redirect.
    fn redirect<B>(
        &self,
        redirect: &Redirect,
        req: &Request<B>,
        trace: &mut Option<&mut Trace>,
    ) -> Response<ProxyBody> {
        let root = PathAndQuery::from_static("/");
        let location = redirect.location(req.uri().path_and_query().unwrap_or(&root), authority_of(req), self.tls);
        let mut response = self.reply(LocalReply::Redirect(redirect.status), trace);
        match HeaderValue::from_str(&location) {
            Ok(v) => {
                response.headers_mut().insert(header::LOCATION, v);
                response.headers_mut().remove(header::CONTENT_TYPE);
                response
            }
            Err(_) => self.reply(LocalReply::TargetNotForwardable, trace),
        }
    }

    /// Answer with a route's configured response.
    fn respond(&self, respond: &Respond, trace: &mut Option<&mut Trace>) -> Response<ProxyBody> {
        let reply = LocalReply::Respond(respond.status);
        reply.counter(&self.stats).fetch_add(1, Relaxed);
        note(trace, reply.flag());
        let mut response = Response::new(Either::Right(Full::new(respond.body.clone())));
        *response.status_mut() = respond.status;
        *response.headers_mut() = respond.headers.clone();
        response
    }

    /// Take `req` apart for its tries, or answer it at once: a body
    /// announced over the listener's `max_body_bytes`, or headers that cannot be forwarded.
    fn prepare(
        &self,
        listener: &Listener,
        config: &Cluster,
        route: &Route,
        peer: &Peer,
        req: Request<RequestBody>,
        fault: &Arc<ClientFault>,
    ) -> Result<Prepared, LocalReply> {
        let (_, retries) = policy(route, config);
        let mut key = hash_key(&config.hash_key, &req, peer.addr);
        let sticky = match (&config.sticky_cookie, &config.hash_key) {
            (Some(cookie), HashKey::Cookie(name)) if key.is_none() => {
                let (value, hash) = self.sticky_value();
                key = Some(hash);
                HeaderValue::from_str(&cookie.set_cookie(name, &value)).ok()
            }
            _ => None,
        };
        let max_body = listener.limits.max_body_bytes;
        let grpc_timeout = crate::grpc::timeout(req.headers());
        if req.body().size_hint().lower() > max_body {
            return Err(LocalReply::BodyTooLarge);
        }
        let (mut parts, body) = req.into_parts();
        let fault = fault.clone();
        // A request without a body can be sent again as it was; one with a
        // body streams once, so it is only retried if it never left.
        let replayable = body.is_end_stream();
        let resendable = replayable && idempotent(&parts.method);
        let grpc_retry =
            retries.attempts > 1 && retries.retries(RetryOn::GrpcUnavailable) && crate::grpc::is_call(&parts.headers);
        let copy = (grpc_retry && !replayable).then(|| Arc::new(BodyCopy::default()));
        let body = match &copy {
            _ if replayable => None,
            Some(copy) => Some(LimitedBody::new(body, max_body, fault.clone()).copied(copy.clone())),
            None => Some(LimitedBody::new(body, max_body, fault.clone())),
        };
        let id_header = id_header(listener);
        let reads_id = route.response_headers.reads_request_id();
        let request_id = if reads_id { parts.headers.get(id_header).cloned() } else { None };
        if config.proxy_protocol.is_some() {
            parts.extensions.insert(peer.addresses());
        }
        let Some(headers) = self.upstream_headers(&mut parts, peer, config.upstream, route, id_header) else {
            return Err(LocalReply::HeadersNotForwardable);
        };
        let path = upstream_path(&parts, route).ok_or(LocalReply::TargetNotForwardable)?;
        // A request that was not sent comes back from the pool whole, so the
        // headers are copied for a try only if a retry after sending is possible.
        let copy_headers = grpc_retry
            || resendable
                && retries.attempts > 1
                && retries.conditions.iter().any(|on| !matches!(on, RetryOn::ConnectFailure));
        let headers = Some(headers);
        Ok(Prepared {
            parts,
            body,
            headers,
            path,
            key,
            replayable,
            resendable,
            copy_headers,
            fault,
            grpc_timeout,
            copy,
            grpc_retry,
            request_id,
            client: peer.addr,
            sticky,
        })
    }

    /// A new sticky cookie's value, and its hash: random, so that the first
    /// pick spreads as the algorithm spreads keys, and the cookie sent back
    /// hashes to the endpoint that pick chose.
    fn sticky_value(&self) -> (String, u64) {
        let bits = crate::cluster::lock(&self.rng).next_u64();
        let value = format!("{bits:016x}");
        let hash = xxh64(value.as_bytes(), 0);
        (value, hash)
    }

    /// Try endpoints of `cluster` until one answers or the retry policy
    /// (conditions, attempts, the request timeout, the budget) says stop.
    async fn forward(
        &self,
        cluster: &Arc<WorkerCluster>,
        pool: &Arc<UpstreamPool>,
        route: &Route,
        mut req: Prepared,
        mut trace: Option<&mut Trace>,
    ) -> Response<ProxyBody> {
        let config = &cluster.shared.config;
        let (timeout, retries) = policy(route, config);
        let timeout = req.grpc_timeout.map_or(timeout, |t| t.min(timeout));
        let per_try = retries.per_try_timeout.unwrap_or(timeout).min(timeout);
        // One clock read serves the deadline, the budget, the pick and the
        // first try's send time; a retry reads the clock again.
        let mut sent = Instant::now();
        let deadline = sent + timeout;
        let mut tried = Vec::new();
        cluster.deposit(self.epoch.at(sent));
        loop {
            let pick = match cluster.pick(self.epoch.at(sent), req.key, &tried) {
                Ok(p) => p,
                Err(no) => return self.reply(no.into(), &mut trace),
            };
            if let Some(t) = &mut trace {
                t.retries = tried.len() as u32;
                t.picked(pick.upstream.addr, pick.ticket.endpoint().0);
            }
            tried.push(pick.ticket.endpoint());
            let upstream_req = match try_request(&mut req, &pick, config.upstream) {
                Ok(r) => r,
                Err(reply) => return self.reply_picked(reply, cluster, pick, 0, &mut trace),
            };
            let outcome =
                send_try(pool, pick.upstream.addr, upstream_req, (sent + per_try).min(deadline), &mut req).await;
            let elapsed = sent.elapsed();
            let latency = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
            if let Some(t) = &mut trace {
                t.response = Some(elapsed);
                t.connect = match &outcome {
                    Try::Response(r) => r.extensions().get::<ConnectTime>().map(|c| c.0),
                    _ => None,
                };
            }
            let (failure, result) = classify(&outcome, config.grpc_status_failure, req.grpc_retry);
            // The policy says which failures it retries; a request that was
            // sent may go again only if resending it is safe, or the server
            // said UNAVAILABLE and the body was copied.
            if failure == Some(RetryOn::GrpcUnavailable) && req.body.is_none() {
                req.body =
                    req.copy.as_ref().and_then(|c| c.replay()).map(|c| LimitedBody::replay(c, req.fault.clone()));
            }
            let retry = failure.is_some_and(|f| {
                retries.retries(f) && (req.resendable || f == RetryOn::ConnectFailure || f == RetryOn::GrpcUnavailable)
            }) && req.can_send_again()
                && (tried.len() as u32) < retries.attempts
                && Instant::now() < deadline
                && cluster.may_retry(self.epoch.now());
            if retry {
                cluster.complete(pick, self.epoch.now(), latency, result);
                sent = Instant::now();
                continue;
            }
            if failure.is_some_and(|f| retries.retries(f)) {
                note(&mut trace, Flags::RETRIES_EXHAUSTED);
            }
            let upstream = pick.upstream.addr;
            let sticky = req.sticky.take().filter(|_| matches!(outcome, Try::Response(_)));
            let mut response = self.answer(cluster, pick, outcome, (latency, result), &req.fault, trace);
            if !route.response_headers.is_empty() {
                response_headers(route, &req, upstream, &mut response);
            }
            if let Some(cookie) = sticky {
                response.headers_mut().append(header::SET_COOKIE, cookie);
            }
            return response;
        }
    }

    /// The answer after the last try: the upstream's response, streamed
    /// back and reported to the balancer when its body ends, or the
    /// proxy's own, reported (or cancelled) now.
    fn answer(
        &self,
        cluster: &Arc<WorkerCluster>,
        pick: Pick,
        outcome: Try,
        (latency, result): (Nanos, RequestResult),
        fault: &ClientFault,
        mut trace: Option<&mut Trace>,
    ) -> Response<ProxyBody> {
        match outcome {
            Try::Response(response) => {
                let (mut parts, body) = response.into_parts();
                strip_hop_by_hop(&mut parts.headers);
                parts.headers.append(header::VIA, via(parts.version));
                let completion = Completion { cluster: cluster.clone(), pick, epoch: self.epoch, latency, result };
                let grpc = cluster.shared.config.grpc_status_failure;
                let body = TrackedBody { inner: body, completion: Some(completion), grpc, log: None };
                Response::from_parts(parts, Either::Left(body))
            }
            Try::Timeout => self.reply_picked(LocalReply::Timeout, cluster, pick, latency, &mut trace),
            Try::Overflow => self.reply_picked(LocalReply::MaxConnections, cluster, pick, latency, &mut trace),
            // The body outgrew the limit or broke while streaming: the
            // client's fault, not the upstream's.
            Try::Reset if fault.get() == Some(Fault::TooLarge) => {
                self.reply_picked(LocalReply::BodyTooLarge, cluster, pick, latency, &mut trace)
            }
            Try::Reset if fault.get() == Some(Fault::Broken) => {
                self.reply_picked(LocalReply::MalformedBody, cluster, pick, latency, &mut trace)
            }
            Try::ConnectFailure => self.reply_picked(LocalReply::ConnectFailure, cluster, pick, latency, &mut trace),
            Try::Reset => self.reply_picked(LocalReply::UpstreamReset, cluster, pick, latency, &mut trace),
        }
    }

    /// Proxy an Upgrade request (a WebSocket handshake) to one endpoint on
    /// a connection of its own. On a 101 the client gets the 101 and both
    /// connections are joined until either side closes; the balancer counts
    /// the request active all that time and learns the latency to the 101.
    /// Any other answer is passed on by status and headers, without its body.
    /// Upgrades are not retried (the client retries its handshake).
    async fn upgrade(
        &self,
        cluster: &Arc<WorkerCluster>,
        route: &Route,
        id_header: &HeaderName,
        peer: &Peer,
        mut req: Request<RequestBody>,
        mut trace: Option<&mut Trace>,
    ) -> Response<ProxyBody> {
        let config = &cluster.shared.config;
        let key = hash_key(&config.hash_key, &req, peer.addr);
        let pick = match cluster.pick(self.epoch.now(), key, &[]) {
            Ok(p) => p,
            Err(no) => return self.reply(no.into(), &mut trace),
        };
        if let Some(t) = &mut trace {
            t.picked(pick.upstream.addr, pick.ticket.endpoint().0);
        }
        let client = match req.extensions_mut().remove::<LeanUpgrade>().and_then(|u| u.take()) {
            Some(lean) => ClientUpgrade::Lean(lean),
            None => ClientUpgrade::Hyper(hyper::upgrade::on(&mut req)),
        };
        let (mut parts, _) = req.into_parts();
        // An HTTP/2 extended CONNECT goes upstream as an HTTP/1.1 Upgrade (see `ext_connect`).
        let h2 = parts.extensions.remove::<hyper::ext::Protocol>();
        let protocol = match &h2 {
            Some(p) => {
                parts.method = http::Method::GET;
                HeaderValue::from_str(p.as_str()).ok()
            }
            None => parts.headers.get(header::UPGRADE).cloned(),
        };
        let websocket_key = h2
            .as_ref()
            .filter(|p| p.as_str().eq_ignore_ascii_case("websocket"))
            .map(|_| crate::ext_connect::websocket_key());
        let path = upstream_path(&parts, route);
        let headers = self.upstream_headers(&mut parts, peer, UpstreamProtocol::Http1, route, id_header);
        let upstream_req = headers.zip(protocol).zip(path).and_then(|((mut headers, protocol), path)| {
            headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
            headers.insert(header::UPGRADE, protocol);
            if let Some(key) = websocket_key {
                headers.insert(header::SEC_WEBSOCKET_KEY, key);
            }
            let body = Either::Right(Empty::new());
            rewrite(&parts, headers, &path, body, &pick.upstream, UpstreamProtocol::Http1)
        });
        let Some(upstream_req) = upstream_req else {
            return self.reply_picked(LocalReply::HeadersNotForwardable, cluster, pick, 0, &mut trace);
        };
        // The tunnel's upstream connection is not pooled, but it counts
        // against the cluster's `max_connections` like any other.
        let (request_timeout, _) = policy(route, config);
        let slot = tokio::time::timeout(request_timeout, cluster.shared.connections.acquire()).await;
        let Ok(Some(slot)) = slot else {
            return self.reply_picked(LocalReply::MaxConnections, cluster, pick, 0, &mut trace);
        };
        let sent = Instant::now();
        let addr = pick.upstream.addr;
        let answer = async {
            let header = config.proxy_protocol.map(|v| crate::proxy_protocol::encode(v, Some(peer.addresses())));
            let (preface, tls) = (header.as_deref().unwrap_or_default(), cluster.shared.tls.as_deref());
            let stream = crate::upstream::connect(addr, config.connect_timeout, preface, tls).await?;
            crate::h1::upgrade(stream, &upstream_req).await
        };
        let answer = tokio::time::timeout(request_timeout, answer).await;
        if let Some(t) = &mut trace {
            t.response = Some(sent.elapsed());
        }
        let latency = u64::try_from(sent.elapsed().as_nanos()).unwrap_or(u64::MAX);
        match answer {
            Ok(Some(UpgradeAnswer::Switched { headers, stream, early })) => {
                let completion = Completion {
                    cluster: cluster.clone(),
                    pick,
                    epoch: self.epoch,
                    latency,
                    result: RequestResult::Success,
                };
                tokio::spawn(tunnel(client, stream, early, completion, slot));
                note(&mut trace, Flags::UPGRADED);
                let mut response = Response::new(Either::Right(Full::new(Bytes::new())));
                *response.headers_mut() = headers;
                if h2.is_some() {
                    // HTTP/2 has no 101 nor connection headers; the accept answered our key.
                    strip_hop_by_hop(response.headers_mut());
                    response.headers_mut().remove(header::SEC_WEBSOCKET_ACCEPT);
                } else {
                    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
                }
                response.headers_mut().append(header::VIA, via(Version::HTTP_11));
                response
            }
            Ok(Some(UpgradeAnswer::Refused { status, mut headers })) => {
                let result = if status.is_server_error() { RequestResult::ServerError } else { RequestResult::Success };
                cluster.complete(pick, self.epoch.now(), latency, result);
                strip_hop_by_hop(&mut headers);
                headers.remove(header::CONTENT_LENGTH);
                let mut response = Response::new(Either::Right(Full::new(Bytes::new())));
                *response.status_mut() = status;
                *response.headers_mut() = headers;
                response
            }
            Ok(None) => self.reply_picked(LocalReply::ConnectFailure, cluster, pick, latency, &mut trace),
            Err(_) => self.reply_picked(LocalReply::Timeout, cluster, pick, latency, &mut trace),
        }
    }

    /// The request headers as sent upstream (every attempt): hop-by-hop
    /// headers removed, `Host` kept, forwarding headers added.
    fn upstream_headers(
        &self,
        parts: &mut http::request::Parts,
        peer: &Peer,
        protocol: UpstreamProtocol,
        route: &Route,
        id_header: &HeaderName,
    ) -> Option<HeaderMap> {
        let mut headers = std::mem::take(&mut parts.headers);
        // `TE: trailers` is hop-by-hop, but says the next hop passes
        // trailers on, which an HTTP/2 upstream connection does (gRPC
        // servers refuse a call without it), so it is said again there.
        let te_trailers = protocol == UpstreamProtocol::Http2
            && headers
                .get_all(header::TE)
                .iter()
                .any(|v| v.to_str().is_ok_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case("trailers"))));
        // HTTP/2 carries the host in :authority, an absolute-form target in
        // the target: either replaces Host (RFC 9112 §3.2.2), which is how
        // HTTP/1.1 upstreams need it.
        if let Some(host) = parts.uri.host() {
            let value = match parts.uri.port_u16() {
                Some(port) => HeaderValue::from_str(&format!("{host}:{port}")),
                None => HeaderValue::from_str(host),
            };
            headers.insert(header::HOST, value.ok()?);
        }
        strip_hop_by_hop(&mut headers);
        if te_trailers {
            headers.insert(header::TE, HeaderValue::from_static("trailers"));
        }
        // The map is sized for the headers parsed: make room for ours and
        // the route's in one step.
        headers.reserve(4 + route.request_headers.adds());
        let forwarded_for = match headers.get(&X_FORWARDED_FOR).and_then(|v| v.to_str().ok()) {
            Some(prior) => HeaderValue::from_str(&format!("{prior}, {}", peer.ip.to_str().ok()?)).ok()?,
            None => peer.ip.clone(),
        };
        headers.insert(X_FORWARDED_FOR, forwarded_for);
        headers.insert(X_FORWARDED_PROTO, HeaderValue::from_static(if self.tls { "https" } else { "http" }));
        // Only the listener says who the client is: a copy the client sent is dropped.
        match &peer.client_cert {
            Some(cert) => headers.insert(X_FORWARDED_CLIENT_CERT, cert.header.clone()),
            None => headers.remove(X_FORWARDED_CLIENT_CERT),
        };
        headers.append(header::VIA, via(parts.version));
        if let Some(host) = route.rewrite.as_ref().and_then(|w| w.host.clone()) {
            headers.insert(header::HOST, host);
        }
        if !route.request_headers.is_empty() {
            let reads_id = route.request_headers.reads_request_id();
            let request_id = if reads_id { headers.get(id_header).cloned() } else { None };
            let name = route.name.as_deref();
            let (client, client_ip) = (peer.addr, Some(&peer.ip));
            let vars = Vars { client, client_ip, request_id: request_id.as_ref(), route: name, upstream: None };
            route.request_headers.apply(&mut headers, &vars);
        }
        Some(headers)
    }
}

/// The client of a connection, as requests need it.
pub struct Peer {
    /// Its address (carried by a PROXY protocol header if its listener
    /// accepted one).
    pub addr: SocketAddr,
    /// Its IP address as a header value, formatted once per connection.
    pub ip: HeaderValue,
    /// The address it connected to, when known (sent on in PROXY protocol
    /// headers).
    pub destination: Option<SocketAddr>,
    /// The client certificate it presented and the listener verified
    /// (mutual TLS).
    pub client_cert: Option<Box<crate::tls::ClientCert>>,
}

impl Peer {
    /// The peer at `addr`.
    pub fn new(addr: SocketAddr) -> Peer {
        let ip = HeaderValue::from_str(&addr.ip().to_string()).expect("an IP address is a valid header value");
        Peer { addr, ip, destination: None, client_cert: None }
    }

    /// The peer of a connection with `addresses`.
    pub fn connected(addresses: Addresses) -> Peer {
        Peer { destination: Some(addresses.destination), ..Peer::new(addresses.source) }
    }

    /// Its addresses for a PROXY protocol header (the destination unknown:
    /// the unspecified address, port 0).
    pub fn addresses(&self) -> Addresses {
        let unspecified = SocketAddr::new(std::net::Ipv4Addr::UNSPECIFIED.into(), 0);
        Addresses { source: self.addr, destination: self.destination.unwrap_or(unspecified) }
    }
}

/// The route's changes to the headers of an upstream's response (not to the
/// proxy's own answers).
fn response_headers(route: &Route, req: &Prepared, upstream: SocketAddr, response: &mut Response<ProxyBody>) {
    if let Either::Left(_) = response.body() {
        let name = route.name.as_deref();
        let (client, request_id) = (req.client, req.request_id.as_ref());
        let vars = Vars { client, client_ip: None, request_id, route: name, upstream: Some(upstream) };
        route.response_headers.apply(response.headers_mut(), &vars);
    }
}

/// The path and query sent upstream: the request's, rewritten if the route
/// says so; `None` if the rewrite made no valid target.
fn upstream_path(parts: &http::request::Parts, route: &Route) -> Option<PathAndQuery> {
    let path = parts.uri.path_and_query().cloned().unwrap_or_else(|| PathAndQuery::from_static("/"));
    match &route.rewrite {
        Some(w) => w.path(path),
        None => Some(path),
    }
}

/// The request for one try to `pick`, or the answer when there is none
/// (headers already spent, or a target the upstream cannot be sent).
fn try_request(
    req: &mut Prepared,
    pick: &Pick,
    protocol: UpstreamProtocol,
) -> Result<Request<UpstreamBody>, LocalReply> {
    let body = match req.body.take() {
        Some(b) => Either::Left(b),
        None => Either::Right(Empty::new()),
    };
    // A retry needs the headers (above), so a try always has them.
    let Some(headers) = (if req.copy_headers { req.headers.clone() } else { req.headers.take() }) else {
        return Err(LocalReply::CannotResend);
    };
    rewrite(&req.parts, headers, &req.path, body, &pick.upstream, protocol).ok_or(LocalReply::TargetNotForwardable)
}

/// One attempt's request to `upstream`, or `None` if its target cannot be
/// forwarded. HTTP/1.1 upstreams get the origin form (`/path?query`), as a
/// client sends it; HTTP/2 needs scheme and authority for its pseudo-headers.
fn rewrite(
    parts: &http::request::Parts,
    headers: HeaderMap,
    path: &PathAndQuery,
    body: UpstreamBody,
    upstream: &crate::cluster::Upstream,
    protocol: UpstreamProtocol,
) -> Option<Request<UpstreamBody>> {
    let (uri, version) = match protocol {
        UpstreamProtocol::Http1 => (Uri::from(path.clone()), Version::HTTP_11),
        UpstreamProtocol::Http2 => {
            let uri = Uri::builder()
                .scheme(http::uri::Scheme::HTTP)
                .authority(upstream.authority.clone())
                .path_and_query(path.clone())
                .build()
                .ok()?;
            (uri, Version::HTTP_2)
        }
    };
    let mut req = Request::new(body);
    *req.method_mut() = parts.method.clone();
    *req.uri_mut() = uri;
    *req.headers_mut() = headers;
    *req.version_mut() = version;
    if let Some(addresses) = parts.extensions.get::<Addresses>() {
        req.extensions_mut().insert(*addresses);
    }
    Some(req)
}

/// Join the client's upgraded connection and the upstream's until either
/// side closes (each direction's end is passed on as a half-close), then
/// report the pick. The client side keeps the listener's idle timeout and
/// connection permit; `slot` is the upstream connection's place in the
/// cluster's `max_connections`, given back when the tunnel closes.
async fn tunnel(
    client: ClientUpgrade,
    mut upstream: crate::upstream_tls::UpstreamStream,
    early: Bytes,
    done: Completion,
    slot: tokio::sync::OwnedSemaphorePermit,
) {
    use tokio::io::AsyncWriteExt;
    // Each side's early bytes are dropped once written, not kept as long
    // as the tunnel.
    let joined = async move {
        let crate::h1::conn::Upgraded { io: mut client, early: client_early } = client.connection().await?;
        upstream.write_all(&client_early).await.ok()?;
        drop(client_early);
        client.write_all(&early).await.ok()?;
        drop(early);
        crate::pipe::join(&mut client, &mut upstream).await.ok()
    };
    // A tunnel that ends in a reset is still a tunnel the upstream served.
    let _ = joined.await;
    drop(slot);
    done.finish(true);
}

/// Reports a pick's outcome once, when the response body ends or is dropped.
struct Completion {
    cluster: Arc<WorkerCluster>,
    pick: Pick,
    epoch: Epoch,
    latency: Nanos,
    result: RequestResult,
}

impl Completion {
    fn finish(self, body_ok: bool) {
        let result = if body_ok { self.result } else { RequestResult::GatewayFailure };
        self.cluster.complete(self.pick, self.epoch.now(), self.latency, result);
    }
}

/// An upstream response body that tells the balancer when it is done.
pub struct TrackedBody {
    inner: ResponseBody,
    completion: Option<Completion>,
    /// Trailers with a failing `grpc-status` make the outcome a failure.
    grpc: bool,
    /// The request's access log record, sent when the body ends.
    log: Option<PendingLog>,
}

impl TrackedBody {
    /// The body is over: report the outcome, and log the request with `flags`.
    fn end(&mut self, ok: bool, flags: Flags) {
        if let Some(c) = self.completion.take() {
            c.finish(ok);
        }
        if let Some(log) = self.log.take() {
            let sent = log.record.bytes_out;
            log.send(sent, flags);
        }
    }
}

/// A request's record waiting for its response to end.
struct PendingLog {
    record: Box<Record>,
    arrived: Instant,
    log: AccessLog,
    /// Counts the request body.
    body: Arc<ClientFault>,
}

impl PendingLog {
    /// Complete the record (`bytes_out` sent, `flags` added) and queue it.
    fn send(mut self, bytes_out: u64, flags: Flags) {
        self.record.duration = self.arrived.elapsed();
        self.record.bytes_in = self.body.received();
        self.record.bytes_out = bytes_out;
        self.record.trace.flags.set(flags);
        self.log.log(self.record);
    }
}

/// A request's record as it arrives: what the request says of itself.
fn arriving<B>(client: SocketAddr, req: &Request<B>) -> Record {
    let authority = match req.uri().authority() {
        Some(a) => Some(a.as_str().to_string()),
        None => req.headers().get(header::HOST).map(|h| String::from_utf8_lossy(h.as_bytes()).into_owned()),
    };
    Record {
        time: std::time::SystemTime::now(),
        client,
        method: req.method().clone(),
        authority,
        path: req.uri().path_and_query().map_or_else(|| req.uri().path().to_string(), |p| p.as_str().to_string()),
        protocol: req.version(),
        status: 0,
        bytes_in: 0,
        bytes_out: 0,
        duration: Duration::ZERO,
        cluster: None,
        trace: Trace::default(),
        grpc_status: None,
        client_cert: None,
        request_id: None,
        trace_id: None,
    }
}

impl Body for TrackedBody {
    type Data = Bytes;
    type Error = <ResponseBody as Body>::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled {
            if self.grpc && frame.trailers_ref().is_some_and(crate::grpc::failed) {
                if let Some(c) = self.completion.as_mut() {
                    c.result = RequestResult::ServerError;
                }
            }
            if let Some(log) = self.log.as_mut() {
                log.record.bytes_out += frame.data_ref().map_or(0, |d| d.len() as u64);
                if let Some(status) = frame.trailers_ref().and_then(crate::grpc::status) {
                    log.record.grpc_status = Some(status);
                }
            }
        }
        match &polled {
            // hyper stops polling a body of known length after its last
            // byte, so the end is seen there rather than at `None`.
            Poll::Ready(None) => self.end(true, Flags::default()),
            Poll::Ready(Some(Ok(_))) if self.inner.is_end_stream() => self.end(true, Flags::default()),
            Poll::Ready(Some(Err(_))) => self.end(false, Flags::UPSTREAM_RESET),
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for TrackedBody {
    fn drop(&mut self) {
        // The body was empty and never polled, or the client went away: the
        // upstream did its part.
        let flags = if self.inner.is_end_stream() { Flags::default() } else { Flags::DOWNSTREAM_CLOSED };
        self.end(true, flags);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(host: Option<&str>, uri: &str) -> Request<()> {
        let mut b = Request::builder().uri(uri);
        if let Some(h) = host {
            b = b.header(header::HOST, h);
        }
        b.body(()).unwrap()
    }

    #[test]
    fn host_drops_the_port_but_not_ipv6_brackets() {
        assert_eq!(host_of(&req(Some("Example.COM:8080"), "/")), Some("example.com".into()));
        assert_eq!(host_of(&req(Some("[::1]"), "/")), Some("[::1]".into()));
        assert_eq!(host_of(&req(Some("[::1]:80"), "/")), Some("[::1]".into()));
        assert_eq!(host_of(&req(None, "http://h2.example:443/x")), Some("h2.example".into()));
        // The absolute form's authority wins over a conflicting Host.
        assert_eq!(host_of(&req(Some("public.test"), "http://admin.test/x")), Some("admin.test".into()));
    }

    #[test]
    fn http11_needs_exactly_one_host_and_http10_none() {
        assert!(bad_host(&req(Some("a.test"), "/")).is_none());
        assert!(bad_host(&req(None, "/")).is_some());
        assert!(bad_host(&req(None, "http://a.test/")).is_some());
        let mut old = req(None, "/");
        *old.version_mut() = Version::HTTP_10;
        assert!(bad_host(&old).is_none());
        let mut two = req(Some("a.test"), "/");
        two.headers_mut().append(header::HOST, HeaderValue::from_static("b.test"));
        assert!(bad_host(&two).is_some());
        let mut h2 = req(None, "http://a.test/");
        *h2.version_mut() = Version::HTTP_2;
        assert!(bad_host(&h2).is_none());
    }

    #[test]
    fn hash_keys_read_the_configured_property() {
        let peer: SocketAddr = "10.0.0.7:5555".parse().unwrap();
        let mut r = req(Some("a"), "/users/1?x=2");
        r.headers_mut().insert("x-user", HeaderValue::from_static("alice"));
        r.headers_mut().insert(header::COOKIE, HeaderValue::from_static("a=1; session=s3cr3t"));
        assert_eq!(hash_key(&HashKey::Header("x-user".into()), &r, peer), Some(xxh64(b"alice", 0)));
        assert_eq!(hash_key(&HashKey::Header("x-none".into()), &r, peer), None);
        assert_eq!(hash_key(&HashKey::Cookie("session".into()), &r, peer), Some(xxh64(b"s3cr3t", 0)));
        assert_eq!(hash_key(&HashKey::Path, &r, peer), Some(xxh64(b"/users/1", 0)));
        let other: SocketAddr = "10.0.0.7:6666".parse().unwrap();
        assert_eq!(hash_key(&HashKey::SourceIp, &r, peer), hash_key(&HashKey::SourceIp, &r, other));
    }

    #[test]
    fn hop_by_hop_headers_are_removed_with_those_connection_names() {
        let mut h = HeaderMap::new();
        h.insert(header::CONNECTION, HeaderValue::from_static("keep-alive, x-secret"));
        h.insert("x-secret", HeaderValue::from_static("1"));
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert("x-kept", HeaderValue::from_static("1"));
        strip_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1);
        assert!(h.contains_key("x-kept"));
    }
}

//! The proxy's configuration file: listeners, routes and clusters.
//!
//! TOML, typed with serde (`deny_unknown_fields`) and validated when loaded,
//! so that a bad file is rejected with an error naming the file, line,
//! column and field ([`ConfigError`], the error of every configuration
//! file and scenario: `fulcrum_config`) before anything listens. Durations
//! (`"250ms"`) and sizes (`65536`, `"64KiB"`) have the syntax of
//! `fulcrum_config::units`. A cluster's `algorithm`
//! table is the same [`AlgorithmConfig`] the simulator's scenarios use.
//!
//! ```toml
//! [[listener]]
//! listen = "127.0.0.1:8080"          # protocol = "http" (HTTP/1.1 + h2c) by default
//! routes = [{ path_prefix = "/", cluster = "web" }]
//!
//! [[cluster]]
//! name = "web"
//! endpoints = ["127.0.0.1:9001", { address = "127.0.0.1:9002", weight = 2 }]
//! algorithm = { kind = "peak-ewma" }
//! ```

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use fulcrum_balance::{AlgorithmConfig, AlgorithmKind};
use fulcrum_config::Source;
pub use fulcrum_resilience::{LimitKey, RateLimitConfig};
use fulcrum_resilience::{OutlierConfig, SlowStart, SlowStartConfig};
pub use fulcrum_resilience::{RetryOn, RetryPolicy};
use serde::Deserialize;
use toml::Spanned;

use crate::access_log::{AccessLogConfig, Format, Target, DEFAULT_FORMAT};
pub use crate::passthrough::SniRoute;
pub use crate::proxy_protocol::{ProxyProtocolListener, Version as ProxyVersion};
use crate::route::RouteTable;

/// A configuration the proxy rejects, located in its file (`<command
/// line>` for quick mode): `file:line:column: field: message`, the field a
/// dotted path such as `cluster[0].endpoints[1].weight`.
pub type ConfigError = fulcrum_config::Error;

/// The whole proxy configuration, validated.
#[derive(Debug, Clone)]
pub struct Config {
    /// Worker threads, each with its own accept loop, connection pools and
    /// balancer state (default: one per core).
    pub workers: usize,
    /// Admin listener for `/metrics`, `/status`, `/healthz`.
    pub admin: Option<SocketAddr>,
    /// Seed of the balancers' RNGs (worker `i` uses `seed + i`).
    pub seed: u64,
    /// Listeners, in file order.
    pub listeners: Vec<Listener>,
    /// Clusters, in file order; routes refer to them by index.
    pub clusters: Vec<Cluster>,
}

/// One listening socket.
#[derive(Debug, Clone)]
pub struct Listener {
    /// Address to bind.
    pub listen: SocketAddr,
    /// What it speaks.
    pub protocol: ListenerProtocol,
    /// TLS certificate and key (PEM) for HTTP listeners; ALPN offers h2 and
    /// http/1.1 (only h2 on an `http2` listener).
    pub tls: Option<Tls>,
    /// HTTP: routes tried in order; the first match wins (compiled once,
    /// shared by the workers).
    pub routes: Arc<RouteTable>,
    /// TCP: the cluster every connection goes to.
    pub cluster: Option<usize>,
    /// Largest request head (request line and headers) accepted; larger gets 431.
    pub max_header_bytes: usize,
    /// Protection against slow or greedy clients.
    pub limits: Limits,
    /// Where and how HTTP requests are logged (not logged by default).
    pub access_log: Option<AccessLogConfig>,
    /// Which server speaks HTTP/1.1 to clients.
    pub http1_server: Http1Server,
    /// The `Alt-Svc` header value added to every response of a TLS
    /// HTTP/1.1 or HTTP/2 listener, e.g. `h3=":8443"` for an `http3` listener.
    pub alt_svc: Option<String>,
    /// Who may send a PROXY protocol header, and whether one is required.
    pub proxy_protocol: Option<ProxyProtocolListener>,
    /// TLS passthrough: clusters by server name (`cluster` is the default).
    pub sni_routes: Vec<SniRoute>,
    /// Request IDs: made when a request has none, sent upstream, logged.
    pub request_id: Option<RequestId>,
    /// W3C trace context: `traceparent` passed on with a new parent ID, or a
    /// trace started.
    pub traceparent: bool,
}

/// A listener's request IDs, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestId {
    /// The header that carries the ID (lowercase).
    pub header: http::HeaderName,
    /// Return the ID to the client in that header too.
    pub response: bool,
}

/// `request_id = { header = "x-request-id", response = false }`.
#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct RawRequestId {
    header: String,
    response: bool,
}

impl Default for RawRequestId {
    fn default() -> Self {
        RawRequestId { header: "x-request-id".into(), response: false }
    }
}

/// The cookie a sticky cluster sets on a response to a request without it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StickyCookie {
    /// The cookie's lifetime (`Max-Age`); without it, a session cookie.
    #[serde(with = "fulcrum_config::duration")]
    pub ttl: Option<Duration>,
    /// The cookie's `Path`.
    pub path: String,
    /// Sent only over HTTPS (`Secure`).
    pub secure: bool,
    /// Hidden from scripts (`HttpOnly`).
    pub http_only: bool,
    /// `SameSite`: `strict`, `lax` or `none` (not set by default).
    pub same_site: Option<SameSite>,
}

impl Default for StickyCookie {
    fn default() -> Self {
        StickyCookie { ttl: None, path: "/".into(), secure: false, http_only: true, same_site: None }
    }
}

/// A cookie's `SameSite` attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SameSite {
    /// `SameSite=Strict`.
    Strict,
    /// `SameSite=Lax`.
    Lax,
    /// `SameSite=None` (browsers require `Secure` with it).
    None,
}

impl StickyCookie {
    /// The `Set-Cookie` value for cookie `name` with `value`.
    pub fn set_cookie(&self, name: &str, value: &str) -> String {
        let mut out = format!("{name}={value}; Path={}", self.path);
        if let Some(ttl) = self.ttl {
            out.push_str(&format!("; Max-Age={}", ttl.as_secs()));
        }
        if self.secure {
            out.push_str("; Secure");
        }
        if self.http_only {
            out.push_str("; HttpOnly");
        }
        match self.same_site {
            Some(SameSite::Strict) => out.push_str("; SameSite=Strict"),
            Some(SameSite::Lax) => out.push_str("; SameSite=Lax"),
            Some(SameSite::None) => out.push_str("; SameSite=None"),
            None => {}
        }
        out
    }
}

/// Which server speaks HTTP/1.1 to an HTTP listener's clients (HTTP/2 is
/// always hyper's).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Http1Server {
    /// The lean server of `h1::server`: one parse per head, one write per response.
    #[default]
    Lean,
    /// hyper's server, as before the lean one (kept for one release, to compare).
    Hyper,
}

/// Limits a listener enforces on its clients.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// A request head must arrive within this long (slow-loris defence); the
    /// connection is closed otherwise.
    #[serde(with = "fulcrum_config::duration")]
    pub header_read_timeout: Duration,
    /// A connection with no request in flight is closed after this long.
    #[serde(with = "fulcrum_config::duration")]
    pub idle_timeout: Duration,
    /// An HTTP/1.1 connection idle this long gives up its task (parks).
    #[serde(with = "fulcrum_config::duration")]
    pub park_after: Duration,
    /// Most header fields in a request (431 beyond).
    pub max_headers: usize,
    /// Most client connections open at once, over all workers; more are
    /// closed on accept.
    pub max_connections: usize,
    /// Largest request body (413 beyond); a size.
    #[serde(with = "fulcrum_config::size")]
    pub max_body_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            park_after: Duration::from_secs(1),
            max_headers: HYPER_MAX_HEADERS,
            max_connections: 10_000,
            max_body_bytes: 100 * 1024 * 1024,
        }
    }
}

/// What a listener speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ListenerProtocol {
    /// HTTP/1.1 and HTTP/2 (prior knowledge, or ALPN with TLS).
    Http,
    /// HTTP/2 only: prior knowledge (h2c), or TLS with ALPN offering only
    /// h2. Anything else is answered as HTTP/2 would answer it (a
    /// connection error), never as HTTP/1.1.
    Http2,
    /// Plain TCP, balanced per connection.
    Tcp,
    /// HTTP/3 over QUIC (UDP); needs `tls`, ALPN offers only h3.
    Http3,
    /// TLS left to the endpoints: TCP routed by the ClientHello's server name.
    TlsPassthrough,
}

/// TLS on an HTTP listener: the default certificate, more chosen by SNI,
/// and the handshake's settings.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tls {
    /// Certificate chain of the default certificate (no SNI, or a name no
    /// other certificate has).
    pub cert: PathBuf,
    /// Private key of the default certificate.
    pub key: PathBuf,
    /// A DER OCSP response stapled with the default certificate.
    #[serde(default)]
    pub ocsp: Option<PathBuf>,
    /// Further certificates, each for the server names it lists.
    #[serde(default)]
    pub certificates: Vec<NamedCert>,
    /// The oldest TLS version accepted.
    #[serde(default)]
    pub min_version: TlsVersion,
    /// ALPN protocols offered, in order of preference (default: `h2`, then
    /// `http/1.1` unless the listener is HTTP/2 only).
    #[serde(default)]
    pub alpn: Option<Vec<String>>,
    /// CA bundle (PEM) that client certificates are verified against
    /// (mutual TLS); none: no client certificate is asked for.
    #[serde(default)]
    pub client_ca: Option<PathBuf>,
    /// Whether a client certificate is required (default) or only verified
    /// when given.
    #[serde(default)]
    pub client_auth: Option<ClientAuth>,
    /// How often the certificate, key and OCSP files are read again; a
    /// change replaces the certificates for new handshakes.
    #[serde(default = "default_tls_reload", with = "fulcrum_config::duration")]
    pub reload_interval: Duration,
}

fn default_tls_reload() -> Duration {
    Duration::from_secs(5)
}

/// A certificate served to clients that ask for one of its names by SNI.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamedCert {
    /// Server names, exact (`api.example.com`) or wildcard (`*.example.com`,
    /// one label); exact names win over wildcards.
    pub names: Vec<String>,
    /// Certificate chain (PEM).
    pub cert: PathBuf,
    /// Private key (PEM).
    pub key: PathBuf,
    /// A DER OCSP response to staple.
    #[serde(default)]
    pub ocsp: Option<PathBuf>,
}

/// The oldest TLS version a listener accepts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub enum TlsVersion {
    /// TLS 1.2 and 1.3.
    #[default]
    #[serde(rename = "1.2")]
    V12,
    /// TLS 1.3 only.
    #[serde(rename = "1.3")]
    V13,
}

/// Whether a mutual-TLS listener requires a client certificate.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClientAuth {
    /// No certificate, no connection.
    #[default]
    Required,
    /// Clients without a certificate are served; one given must verify.
    Optional,
}

/// TLS to a cluster's endpoints.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamTls {
    /// CA bundle (PEM) the endpoints' certificates are verified against
    /// (default: the Mozilla root programme's CAs, built in).
    #[serde(default)]
    pub ca: Option<PathBuf>,
    /// Server name sent by SNI and verified (default: the endpoint's host
    /// name; an IP endpoint is verified against its address).
    #[serde(default)]
    pub sni: Option<String>,
    /// Verify the endpoints' certificates (default true).
    #[serde(default = "default_true")]
    pub verify: bool,
    /// Client certificate chain (PEM) for endpoints that require one.
    #[serde(default)]
    pub cert: Option<PathBuf>,
    /// Its private key (PEM).
    #[serde(default)]
    pub key: Option<PathBuf>,
}

/// A set of endpoints with the algorithm that balances over them.
#[derive(Debug, Clone)]
pub struct Cluster {
    /// Name used by routes and metrics.
    pub name: String,
    /// Endpoints as configured (names are resolved by the proxy).
    pub endpoints: Vec<EndpointConfig>,
    /// The load-balancing algorithm.
    pub algorithm: AlgorithmConfig,
    /// What hash-based algorithms hash.
    pub hash_key: HashKey,
    /// With `hash_key` a cookie: set it on responses to requests without it.
    pub sticky_cookie: Option<StickyCookie>,
    /// Protocol spoken to the endpoints.
    pub upstream: UpstreamProtocol,
    /// Give up connecting after this long (502).
    pub connect_timeout: Duration,
    /// Give up waiting for response headers after this long (504).
    pub request_timeout: Duration,
    /// How often endpoint host names are resolved again.
    pub resolve_interval: Duration,
    /// Active health checking (none by default).
    pub health_check: Option<HealthCheck>,
    /// Passive outlier detection (none by default).
    pub outlier_detection: Option<OutlierConfig>,
    /// Below this percentage of healthy endpoints, balance over all of them.
    pub panic_threshold: f64,
    /// Ramp the weight of endpoints that join or return (none by default).
    pub slow_start: Option<SlowStartConfig>,
    /// When and how often to try another endpoint.
    pub retries: RetryPolicy,
    /// Circuit breaking: most requests in flight to the cluster (503 beyond).
    pub max_requests: u64,
    /// Circuit breaking: most upstream connections open, over all workers.
    pub max_connections: usize,
    /// Circuit breaking: most requests waiting for a connection (503 beyond).
    pub max_pending: usize,
    /// A gRPC response whose `grpc-status` is not 0 (OK), in its trailers or
    /// a trailers-only head, counts as a failure for outlier detection and
    /// Peak-EWMA's penalty (default true).
    pub grpc_status_failure: bool,
    /// TLS to the endpoints (clear text when `None`).
    pub tls: Option<UpstreamTls>,
    /// The PROXY protocol header sent on each new upstream connection.
    pub proxy_protocol: Option<ProxyVersion>,
}

/// Active health checks of every endpoint of a cluster.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HealthCheck {
    /// `http` (GET `path`, expect a status in `expected_status`) or `tcp` (connect).
    pub kind: HealthCheckKind,
    /// Path of the HTTP check.
    pub path: String,
    /// Inclusive range of statuses that count as healthy.
    pub expected_status: [u16; 2],
    /// Time between checks of one endpoint.
    #[serde(with = "fulcrum_config::duration")]
    pub interval: Duration,
    /// A random extra delay up to this much before each check, so checks of
    /// many proxies do not arrive together.
    #[serde(with = "fulcrum_config::duration")]
    pub jitter: Duration,
    /// A check that takes longer fails.
    #[serde(with = "fulcrum_config::duration")]
    pub timeout: Duration,
    /// Passing checks in a row to become healthy again.
    pub healthy_threshold: u32,
    /// Failing checks in a row to become unhealthy.
    pub unhealthy_threshold: u32,
}

impl Default for HealthCheck {
    fn default() -> Self {
        HealthCheck {
            kind: HealthCheckKind::Http,
            path: "/healthz".into(),
            expected_status: [200, 399],
            interval: Duration::from_secs(5),
            jitter: Duration::from_millis(500),
            timeout: Duration::from_secs(1),
            healthy_threshold: 2,
            unhealthy_threshold: 3,
        }
    }
}

/// What an active health check does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HealthCheckKind {
    /// An HTTP GET.
    Http,
    /// A TCP connect.
    Tcp,
}

/// One configured endpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct EndpointConfig {
    /// `host:port`; a host name is resolved and every address becomes an endpoint.
    pub address: String,
    /// Relative weight (> 0).
    pub weight: f64,
}

/// The request property a hash-based algorithm hashes.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub enum HashKey {
    /// A request header (missing: a random pick).
    Header(String),
    /// A cookie (missing: a random pick).
    Cookie(String),
    /// The client's IP address.
    SourceIp,
    /// The request path (without query).
    Path,
}

/// How the proxy talks to a cluster's endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum UpstreamProtocol {
    /// HTTP/1.1 with keep-alive.
    Http1,
    /// HTTP/2 with prior knowledge (h2c).
    Http2,
}

// ---- The file as written -------------------------------------------------

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    workers: Option<Spanned<usize>>,
    admin: Option<Spanned<String>>,
    #[serde(default)]
    seed: u64,
    #[serde(default, rename = "listener")]
    listeners: Vec<RawListener>,
    #[serde(default, rename = "cluster")]
    clusters: Vec<RawCluster>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawListener {
    listen: Spanned<String>,
    #[serde(default = "default_protocol")]
    protocol: ListenerProtocol,
    tls: Option<Spanned<Tls>>,
    #[serde(default)]
    routes: Vec<RawRoute>,
    cluster: Option<Spanned<String>>,
    #[serde(default, with = "fulcrum_config::size")]
    max_header_bytes: Option<usize>,
    limits: Option<Spanned<Limits>>,
    #[serde(default)]
    http1_server: Http1Server,
    access_log: Option<Spanned<RawAccessLog>>,
    alt_svc: Option<Spanned<String>>,
    request_id: Option<Spanned<RawRequestId>>,
    #[serde(default)]
    traceparent: bool,
    proxy_protocol: Option<Spanned<RawProxyProtocol>>,
    #[serde(default)]
    sni_routes: Vec<RawSniRoute>,
}

/// `proxy_protocol = { trusted = ["10.0.0.0/8"], required = true, timeout = "3s" }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProxyProtocol {
    trusted: Vec<Spanned<String>>,
    #[serde(default = "default_true")]
    required: bool,
    #[serde(default, with = "fulcrum_config::duration")]
    timeout: Option<Duration>,
}

/// How long a PROXY protocol header may take to arrive, unless configured.
const DEFAULT_PROXY_PROTOCOL_TIMEOUT: Duration = Duration::from_secs(3);

impl RawProxyProtocol {
    fn validate(
        self,
        span: std::ops::Range<usize>,
        src: &Source,
        at: FieldName,
    ) -> Result<ProxyProtocolListener, ConfigError> {
        if self.trusted.is_empty() {
            return Err(src.error(
                span,
                at("proxy_protocol.trusted"),
                "list the address ranges allowed to send a header",
            ));
        }
        let mut trusted = Vec::with_capacity(self.trusted.len());
        for (i, t) in self.trusted.iter().enumerate() {
            let range =
                t.get_ref().parse().map_err(|m| src.error(t.span(), at(&format!("proxy_protocol.trusted[{i}]")), m))?;
            trusted.push(range);
        }
        let timeout = match self.timeout {
            Some(t) if t.is_zero() => {
                return Err(src.error(span, at("proxy_protocol.timeout"), "must be greater than 0"))
            }
            Some(t) => t,
            None => DEFAULT_PROXY_PROTOCOL_TIMEOUT,
        };
        Ok(ProxyProtocolListener { trusted, required: self.required, timeout })
    }
}

/// `sni_routes = [{ server_name = "a.example.com" | "*.example.com", alpn = ["h2"], cluster = "a" }]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSniRoute {
    server_name: Spanned<String>,
    #[serde(default)]
    alpn: Vec<Spanned<String>>,
    cluster: Spanned<String>,
}

/// `access_log = { path = "…" | "stdout", format = "…" | json = true }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAccessLog {
    path: Spanned<String>,
    format: Option<Spanned<String>>,
    #[serde(default)]
    json: bool,
}

impl RawAccessLog {
    /// A target and a format that parses; `format` and `json` exclude each other.
    fn validate(
        self,
        span: std::ops::Range<usize>,
        src: &Source,
        at: FieldName,
    ) -> Result<AccessLogConfig, ConfigError> {
        let target = match self.path.get_ref().as_str() {
            "" => return Err(src.error(self.path.span(), at("access_log.path"), "give a file or \"stdout\"")),
            "stdout" => Target::Stdout,
            path => Target::File(path.into()),
        };
        let format = match (self.format, self.json) {
            (Some(f), true) => {
                return Err(src.error(f.span(), at("access_log.format"), "give `format` or `json = true`, not both"))
            }
            (None, true) => Format::Json,
            (Some(f), false) => {
                Format::parse(f.get_ref()).map_err(|m| src.error(f.span(), at("access_log.format"), m))?
            }
            (None, false) => Format::parse(DEFAULT_FORMAT).map_err(|m| src.error(span, at("access_log"), m))?,
        };
        Ok(AccessLogConfig { target, format })
    }
}

fn default_protocol() -> ListenerProtocol {
    ListenerProtocol::Http
}

/// A route as written: what it matches (every condition given must hold),
/// then what it does. Compiled by [`crate::route`].
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRoute {
    pub(crate) name: Option<String>,
    pub(crate) host: Option<String>,
    pub(crate) path_prefix: Option<String>,
    pub(crate) path: Option<String>,
    pub(crate) path_regex: Option<String>,
    pub(crate) methods: Option<Vec<String>>,
    #[serde(default)]
    pub(crate) headers: Vec<RawCondition>,
    #[serde(default)]
    pub(crate) query: Vec<RawCondition>,
    #[serde(default)]
    pub(crate) client_cert: Vec<RawCondition>,
    pub(crate) cluster: Option<String>,
    pub(crate) clusters: Option<Vec<RawWeighted>>,
    pub(crate) hash_key: Option<HashKey>,
    pub(crate) redirect: Option<RawRedirect>,
    pub(crate) respond: Option<RawRespond>,
    pub(crate) rewrite: Option<RawRewrite>,
    pub(crate) request_headers: Option<RawHeaderOps>,
    pub(crate) response_headers: Option<RawHeaderOps>,
    #[serde(default, with = "fulcrum_config::duration")]
    pub(crate) timeout: Option<Duration>,
    pub(crate) retries: Option<RetryPolicy>,
    pub(crate) rate_limit: Option<Spanned<RateLimitConfig>>,
}

/// A header, query parameter or client certificate condition: `present`
/// (the default; `false`: absent), or a value `exact` or matching `regex`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawCondition {
    pub(crate) name: String,
    pub(crate) present: Option<bool>,
    pub(crate) exact: Option<String>,
    pub(crate) regex: Option<String>,
}

/// One side of a weighted split.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawWeighted {
    pub(crate) cluster: String,
    pub(crate) weight: u32,
}

/// A redirect: the parts of the request's URL to replace.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRedirect {
    pub(crate) status: Option<u16>,
    pub(crate) scheme: Option<String>,
    pub(crate) host: Option<String>,
    pub(crate) port: Option<u16>,
    pub(crate) path: Option<String>,
    pub(crate) prefix: Option<String>,
    #[serde(default)]
    pub(crate) drop_query: bool,
}

/// A response the proxy makes itself.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRespond {
    pub(crate) status: u16,
    #[serde(default)]
    pub(crate) body: String,
    #[serde(default)]
    pub(crate) headers: std::collections::BTreeMap<String, String>,
}

/// The path and host sent upstream.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRewrite {
    pub(crate) prefix: Option<String>,
    pub(crate) regex: Option<String>,
    pub(crate) replace: Option<String>,
    pub(crate) host: Option<String>,
}

/// Headers removed, then set (replacing), then added (appended).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawHeaderOps {
    #[serde(default)]
    pub(crate) remove: Vec<String>,
    #[serde(default)]
    pub(crate) set: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    pub(crate) add: std::collections::BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCluster {
    name: Spanned<String>,
    endpoints: Spanned<Vec<RawEndpoint>>,
    algorithm: Option<Spanned<AlgorithmConfig>>,
    hash_key: Option<HashKey>,
    sticky_cookie: Option<Spanned<StickyCookie>>,
    #[serde(default = "default_upstream")]
    upstream: UpstreamProtocol,
    #[serde(default, with = "fulcrum_config::duration")]
    connect_timeout: Option<Duration>,
    #[serde(default, with = "fulcrum_config::duration")]
    request_timeout: Option<Duration>,
    #[serde(default, with = "fulcrum_config::duration")]
    resolve_interval: Option<Duration>,
    health_check: Option<Spanned<HealthCheck>>,
    outlier_detection: Option<Spanned<OutlierConfig>>,
    panic_threshold: Option<Spanned<f64>>,
    slow_start: Option<Spanned<SlowStartConfig>>,
    retries: Option<Spanned<RetryPolicy>>,
    max_requests: Option<Spanned<u64>>,
    max_connections: Option<Spanned<usize>>,
    max_pending: Option<Spanned<usize>>,
    #[serde(default = "default_true")]
    grpc_status_failure: bool,
    tls: Option<Spanned<UpstreamTls>>,
    proxy_protocol: Option<Spanned<ProxyVersion>>,
}

fn default_true() -> bool {
    true
}

fn default_upstream() -> UpstreamProtocol {
    UpstreamProtocol::Http1
}

/// An endpoint is `"host:port"` or `{ address = "host:port", weight = 2 }`.
/// Read as a plain value (serde's untagged enums lose spans) and checked by hand.
type RawEndpoint = Spanned<toml::Value>;

fn read_endpoint(e: &RawEndpoint, src: &Source, field: &str) -> Result<EndpointConfig, ConfigError> {
    let fail = |f: &str, m: String| Err(src.error(e.span(), format!("{field}{f}"), m));
    let (address, weight) = match e.get_ref() {
        toml::Value::String(a) => (a.clone(), 1.0),
        toml::Value::Table(t) => {
            if let Some(k) = t.keys().find(|k| *k != "address" && *k != "weight") {
                return fail("", format!("unknown field `{k}`, expected `address` or `weight`"));
            }
            let address = match t.get("address") {
                Some(toml::Value::String(a)) => a.clone(),
                _ => return fail(".address", "missing: expected address = \"host:port\"".into()),
            };
            let weight = match t.get("weight") {
                None => 1.0,
                Some(toml::Value::Integer(w)) => *w as f64,
                Some(toml::Value::Float(w)) => *w,
                Some(other) => return fail(".weight", format!("{other} is not a number")),
            };
            (address, weight)
        }
        other => return fail("", format!("{other} is not \"host:port\" or {{ address, weight }}")),
    };
    if let Err(m) = check_address(&address) {
        return fail(".address", m);
    }
    if !(weight.is_finite() && weight > 0.0) {
        return fail(".weight", format!("{weight} is not a weight > 0"));
    }
    Ok(EndpointConfig { address, weight })
}

/// Defaults shared by the file and the quick mode.
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(15);
const DEFAULT_RESOLVE_INTERVAL: Duration = Duration::from_secs(5);
/// Default circuit-breaker limit on requests in flight, connections and
/// pending requests per cluster (Envoy's default for each).
const DEFAULT_MAX_REQUESTS: u64 = 1024;
/// Default largest request head, as nginx's `large_client_header_buffers`-ish 64 KiB.
pub const DEFAULT_MAX_HEADER_BYTES: usize = 64 * 1024;
/// The default `max_headers`: hyper's own limit, which it keeps on an
/// inline array (the server sets a limit only when it differs).
pub const HYPER_MAX_HEADERS: usize = 100;

impl Config {
    /// Read and validate the file at `path`, and the TLS files it names.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text =
            std::fs::read_to_string(path).map_err(|e| ConfigError::new(path, "(file)", format!("cannot read: {e}")))?;
        Config::parse_with_files(path, &text)
    }

    /// Validate `text` as if read from `file`, and read the TLS files it
    /// names ([`Config::check_tls_files`]).
    pub fn parse_with_files(file: &Path, text: &str) -> Result<Config, ConfigError> {
        let (raw, src): (RawConfig, Source) = fulcrum_config::parse(file, text, &[])?;
        let config = raw.validate(&src)?;
        config.check_tls_files(&src)?;
        Ok(config)
    }

    /// Validate `text` as if read from `file`.
    pub fn parse(file: &Path, text: &str) -> Result<Config, ConfigError> {
        let (raw, src): (RawConfig, Source) = fulcrum_config::parse(file, text, &[])?;
        raw.validate(&src)
    }

    /// The quick mode: one HTTP listener in front of one cluster.
    pub fn quick(listen: SocketAddr, backends: &[String], algorithm: AlgorithmKind) -> Result<Config, ConfigError> {
        let src = Source::new(Path::new("<command line>"), "");
        if backends.is_empty() {
            return Err(src.error(0..0, "--backends", "give at least one backend address (host:port)"));
        }
        let endpoints = backends
            .iter()
            .enumerate()
            .map(|(i, b)| {
                check_address(b).map_err(|m| src.error(0..0, format!("--backends[{i}]"), m))?;
                Ok(EndpointConfig { address: b.clone(), weight: 1.0 })
            })
            .collect::<Result<Vec<_>, ConfigError>>()?;
        Ok(Config {
            workers: default_workers(),
            admin: None,
            seed: 0,
            listeners: vec![Listener {
                listen,
                protocol: ListenerProtocol::Http,
                tls: None,
                routes: Arc::new(RouteTable::to_cluster(0)),
                cluster: None,
                max_header_bytes: DEFAULT_MAX_HEADER_BYTES,
                limits: Limits::default(),
                http1_server: Http1Server::default(),
                access_log: None,
                alt_svc: None,
                proxy_protocol: None,
                sni_routes: Vec::new(),
                request_id: None,
                traceparent: false,
            }],
            clusters: vec![Cluster {
                name: "default".into(),
                endpoints,
                algorithm: algorithm.default_config(),
                hash_key: HashKey::SourceIp,
                sticky_cookie: None,
                upstream: UpstreamProtocol::Http1,
                connect_timeout: DEFAULT_CONNECT_TIMEOUT,
                request_timeout: DEFAULT_REQUEST_TIMEOUT,
                resolve_interval: DEFAULT_RESOLVE_INTERVAL,
                health_check: None,
                outlier_detection: None,
                panic_threshold: 50.0,
                slow_start: None,
                retries: RetryPolicy::default(),
                max_requests: DEFAULT_MAX_REQUESTS,
                max_connections: DEFAULT_MAX_REQUESTS as usize,
                max_pending: DEFAULT_MAX_REQUESTS as usize,
                grpc_status_failure: true,
                tls: None,
                proxy_protocol: None,
            }],
        })
    }
}

/// One worker per core.
pub fn default_workers() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn check_address(address: &str) -> Result<(), String> {
    match address.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0) => Ok(()),
        _ => Err(format!("{address:?} is not host:port (e.g. 127.0.0.1:9001 or backend.internal:80)")),
    }
}

impl RawConfig {
    /// Check the whole file; every error names the file, line and field.
    fn validate(self, src: &Source) -> Result<Config, ConfigError> {
        let workers = match self.workers {
            Some(w) if *w.get_ref() == 0 || *w.get_ref() > 256 => {
                return Err(src.error(w.span(), "workers", "must be between 1 and 256"));
            }
            Some(w) => w.into_inner(),
            None => default_workers(),
        };
        let admin = self
            .admin
            .map(|a| a.get_ref().parse().map_err(|_| src.error(a.span(), "admin", "expected ip:port")))
            .transpose()?;
        let clusters = Self::clusters(self.clusters, src)?;
        let mut listeners = Vec::with_capacity(self.listeners.len());
        for (li, l) in self.listeners.into_iter().enumerate() {
            let listener = l.validate(src, &|f: &str| format!("listener[{li}].{f}"), &clusters, &listeners)?;
            listeners.push(listener);
        }
        if listeners.is_empty() {
            return Err(src.error(0..0, "listener", "no [[listener]] defined"));
        }
        Ok(Config { workers, admin, seed: self.seed, listeners, clusters })
    }

    /// The clusters, each checked, with names unique.
    fn clusters(raw: Vec<RawCluster>, src: &Source) -> Result<Vec<Cluster>, ConfigError> {
        let mut clusters = Vec::with_capacity(raw.len());
        for (ci, c) in raw.into_iter().enumerate() {
            let at = |f: &str| format!("cluster[{ci}].{f}");
            unique_name(&clusters, &c.name, src, &at)?;
            let endpoints = endpoints(&c.endpoints, src, &at)?;
            let algorithm = algorithm(c.algorithm, src, &at)?;
            let health_check = c.health_check.map(|h| health_check(h, src, &at)).transpose()?;
            let outlier_detection = c.outlier_detection.map(|o| outlier_detection(o, src, &at)).transpose()?;
            let panic_threshold = panic_threshold(c.panic_threshold, src, &at)?;
            let slow_start = match c.slow_start {
                Some(s) => {
                    SlowStart::new(s.get_ref()).map_err(|m| src.error_from(&at("slow_start"), &m))?;
                    Some(s.into_inner())
                }
                None => None,
            };
            let retries = match c.retries {
                Some(r) => {
                    r.get_ref()
                        .validate()
                        .map_err(|e| src.error(r.span(), at(&format!("retries.{}", e.field)), e.message.clone()))?;
                    r.into_inner()
                }
                None => RetryPolicy::default(),
            };
            let max_requests = match c.max_requests {
                Some(m) if *m.get_ref() == 0 => {
                    return Err(src.error(m.span(), at("max_requests"), "must be at least 1"));
                }
                Some(m) => m.into_inner(),
                None => DEFAULT_MAX_REQUESTS,
            };
            let (max_connections, max_pending) = connection_limits(c.max_connections, c.max_pending, src, &at)?;
            let proxy_protocol = c.proxy_protocol.map(Spanned::into_inner);
            let hash_key = c.hash_key.unwrap_or(HashKey::SourceIp);
            let sticky_cookie =
                c.sticky_cookie.map(|s| sticky_cookie(s, &hash_key, &algorithm, src, &at)).transpose()?;
            // Checked last: errors come in the order they always did.
            let timeouts = [c.connect_timeout, c.request_timeout, c.resolve_interval];
            let [connect_timeout, request_timeout, resolve_interval] = timeouts_or_defaults(timeouts, src, &at)?;
            clusters.push(Cluster {
                max_connections,
                max_pending,
                health_check,
                outlier_detection,
                panic_threshold,
                slow_start,
                retries,
                max_requests,
                connect_timeout,
                request_timeout,
                resolve_interval,
                name: c.name.into_inner(),
                endpoints,
                algorithm,
                hash_key,
                sticky_cookie,
                upstream: c.upstream,
                grpc_status_failure: c.grpc_status_failure,
                tls: c.tls.map(|t| upstream_tls(t, src, &at)).transpose()?,
                proxy_protocol,
            });
        }
        Ok(clusters)
    }
}

/// How a field of the item being checked is named in errors, e.g.
/// `cluster[0].health_check`.
type FieldName<'a> = &'a dyn Fn(&str) -> String;

/// A cluster name no earlier cluster has.
fn unique_name(earlier: &[Cluster], name: &Spanned<String>, src: &Source, at: FieldName) -> Result<(), ConfigError> {
    if earlier.iter().any(|k| k.name == *name.get_ref()) {
        return Err(src.error(name.span(), at("name"), format!("cluster {:?} is defined twice", name.get_ref())));
    }
    Ok(())
}

/// A cluster's endpoints: at least one, each an address with a weight.
fn endpoints(raw: &Spanned<Vec<RawEndpoint>>, src: &Source, at: FieldName) -> Result<Vec<EndpointConfig>, ConfigError> {
    let mut endpoints = Vec::with_capacity(raw.get_ref().len());
    for (ei, e) in raw.get_ref().iter().enumerate() {
        endpoints.push(read_endpoint(e, src, &at(&format!("endpoints[{ei}]")))?);
    }
    if endpoints.is_empty() {
        return Err(src.error(raw.span(), at("endpoints"), "a cluster needs at least one endpoint"));
    }
    Ok(endpoints)
}

/// The algorithm as configured, round robin if none is.
fn algorithm(
    raw: Option<Spanned<AlgorithmConfig>>,
    src: &Source,
    at: FieldName,
) -> Result<AlgorithmConfig, ConfigError> {
    match raw {
        Some(a) => {
            a.get_ref().validate().map_err(|e| src.error(a.span(), at("algorithm"), e.to_string()))?;
            Ok(a.into_inner())
        }
        None => Ok(AlgorithmKind::ROUND_ROBIN.default_config()),
    }
}

/// `connect_timeout`, `request_timeout` and `resolve_interval`: greater
/// than 0 when given, else the defaults.
fn timeouts_or_defaults(
    given: [Option<Duration>; 3],
    src: &Source,
    at: FieldName,
) -> Result<[Duration; 3], ConfigError> {
    let names = ["connect_timeout", "request_timeout", "resolve_interval"];
    let defaults = [DEFAULT_CONNECT_TIMEOUT, DEFAULT_REQUEST_TIMEOUT, DEFAULT_RESOLVE_INTERVAL];
    let mut out = defaults;
    for i in 0..3 {
        match given[i] {
            Some(d) if d.is_zero() => return Err(src.error_in(&at(names[i]), "must be greater than 0")),
            Some(d) => out[i] = d,
            None => {}
        }
    }
    Ok(out)
}

/// An active health check with positive intervals, thresholds of at least
/// one, a range of statuses and an absolute path.
fn health_check(h: Spanned<HealthCheck>, src: &Source, at: FieldName) -> Result<HealthCheck, ConfigError> {
    let v = h.get_ref();
    let bad = if v.interval.is_zero() || v.timeout.is_zero() {
        Some("interval and timeout must be greater than 0")
    } else if v.healthy_threshold == 0 || v.unhealthy_threshold == 0 {
        Some("thresholds must be at least 1")
    } else if v.expected_status[0] > v.expected_status[1] || v.expected_status[0] < 100 {
        Some("expected_status must be a range [low, high] of HTTP statuses")
    } else if !v.path.starts_with('/') {
        Some("path must start with /")
    } else {
        None
    };
    match bad {
        Some(m) => Err(src.error(h.span(), at("health_check"), m)),
        None => Ok(h.into_inner()),
    }
}

/// Outlier detection, checked by its own rules (`fulcrum-resilience`).
fn outlier_detection(o: Spanned<OutlierConfig>, src: &Source, at: FieldName) -> Result<OutlierConfig, ConfigError> {
    o.get_ref().validate().map_err(|m| src.error_from(&at("outlier_detection"), &m))?;
    Ok(o.into_inner())
}

/// A sticky cookie: the cluster hashes a cookie with an algorithm that
/// hashes, and the path is one a `Set-Cookie` can carry.
fn sticky_cookie(
    s: Spanned<StickyCookie>,
    hash_key: &HashKey,
    algorithm: &AlgorithmConfig,
    src: &Source,
    at: FieldName,
) -> Result<StickyCookie, ConfigError> {
    let hashes =
        [AlgorithmKind::RING_HASH, AlgorithmKind::MAGLEV, AlgorithmKind::RENDEZVOUS].contains(&algorithm.kind());
    let bad = if !matches!(hash_key, HashKey::Cookie(_)) {
        Some("needs hash_key = { cookie = \"NAME\" }: the cookie set is the one hashed")
    } else if !hashes {
        Some("needs an algorithm that hashes the key: ring-hash, maglev or rendezvous")
    } else if !s.get_ref().path.starts_with('/') || s.get_ref().path.bytes().any(|b| b == b';' || !b.is_ascii_graphic())
    {
        Some("path must start with / and have no `;`, spaces or control characters")
    } else {
        None
    };
    match bad {
        Some(m) => Err(src.error(s.span(), at("sticky_cookie"), m)),
        None => Ok(s.into_inner()),
    }
}

/// The panic threshold, a percentage (50 when not given).
fn panic_threshold(p: Option<Spanned<f64>>, src: &Source, at: FieldName) -> Result<f64, ConfigError> {
    match p {
        Some(p) if !(0.0..=100.0).contains(p.get_ref()) => {
            Err(src.error(p.span(), at("panic_threshold"), "must be a percentage in 0..=100"))
        }
        Some(p) => Ok(p.into_inner()),
        None => Ok(50.0),
    }
}

/// `max_connections` (at least one) and `max_pending` (0 allowed: no
/// waiting), both `DEFAULT_MAX_REQUESTS` when not given.
fn connection_limits(
    max_connections: Option<Spanned<usize>>,
    max_pending: Option<Spanned<usize>>,
    src: &Source,
    at: FieldName,
) -> Result<(usize, usize), ConfigError> {
    let max_connections = match max_connections {
        Some(m) if *m.get_ref() == 0 => return Err(src.error(m.span(), at("max_connections"), "must be at least 1")),
        Some(m) => m.into_inner(),
        None => DEFAULT_MAX_REQUESTS as usize,
    };
    let max_pending = max_pending.map_or(DEFAULT_MAX_REQUESTS as usize, Spanned::into_inner);
    Ok((max_connections, max_pending))
}

/// A listener's TLS: server names that are DNS names or one-label
/// wildcards, each served by one certificate; ALPN protocols the listener
/// speaks; `client_auth` only with `client_ca`.
fn listener_tls(t: Spanned<Tls>, protocol: ListenerProtocol, src: &Source, at: FieldName) -> Result<Tls, ConfigError> {
    let span = t.span();
    let tls = t.into_inner();
    let mut seen: Vec<&str> = Vec::new();
    for (ci, c) in tls.certificates.iter().enumerate() {
        let field = at(&format!("tls.certificates[{ci}].names"));
        if c.names.is_empty() {
            return Err(src.error_in(&field, "list at least one server name"));
        }
        for name in &c.names {
            check_server_name(name).map_err(|m| src.error_in(&field, m))?;
            if seen.iter().any(|n| n.eq_ignore_ascii_case(name)) {
                return Err(src.error_in(&field, format!("{name:?} is listed for two certificates")));
            }
            seen.push(name);
        }
    }
    if let Some(alpn) = &tls.alpn {
        let allowed: &[&str] = if protocol == ListenerProtocol::Http2 { &["h2"] } else { &["h2", "http/1.1"] };
        if alpn.is_empty() {
            return Err(src.error_in(&at("tls.alpn"), "list at least one protocol"));
        }
        if let Some(p) = alpn.iter().find(|p| !allowed.contains(&p.as_str())) {
            return Err(src.error_in(&at("tls.alpn"), format!("{p:?} is not one of {allowed:?}")));
        }
    }
    if tls.reload_interval.is_zero() {
        return Err(src.error_in(&at("tls.reload_interval"), "must be greater than 0"));
    }
    if tls.client_auth.is_some() && tls.client_ca.is_none() {
        return Err(src.error(span, at("tls.client_auth"), "needs `client_ca`, the CA bundle to verify clients"));
    }
    Ok(tls)
}

/// A DNS name, or `*.` followed by one (a wildcard for one label).
fn check_server_name(name: &str) -> Result<(), String> {
    let dns = name.strip_prefix("*.").unwrap_or(name);
    let valid = !dns.contains('*')
        && rustls::pki_types::DnsName::try_from(dns).is_ok()
        && dns.parse::<std::net::IpAddr>().is_err();
    if valid {
        Ok(())
    } else {
        Err(format!("{name:?} is not a server name (a DNS name, or `*.` and one)"))
    }
}

/// A cluster's TLS: `cert` with `key`, an SNI name that is a DNS name, and
/// no `ca` when nothing is verified.
fn upstream_tls(t: Spanned<UpstreamTls>, src: &Source, at: FieldName) -> Result<UpstreamTls, ConfigError> {
    let span = t.span();
    let tls = t.into_inner();
    if tls.cert.is_some() != tls.key.is_some() {
        let missing = if tls.cert.is_some() { "tls.key" } else { "tls.cert" };
        return Err(src.error(span, at(missing), "a client certificate needs both `cert` and `key`"));
    }
    if let Some(sni) = &tls.sni {
        if rustls::pki_types::ServerName::try_from(sni.as_str()).is_err() {
            return Err(src.error_in(&at("tls.sni"), format!("{sni:?} is not a DNS name or an IP address")));
        }
    }
    if !tls.verify && tls.ca.is_some() {
        return Err(src.error_in(&at("tls.ca"), "has no use with `verify = false`"));
    }
    Ok(tls)
}

impl Config {
    /// Read every TLS file the configuration names (certificates, keys,
    /// OCSP responses, CA bundles) and check that each can be used: a
    /// certificate and key that match, a CA bundle of certificates. An
    /// error names the field and the file.
    pub fn check_tls_files(&self, src: &Source) -> Result<(), ConfigError> {
        use crate::tls_files::{roots, KeyPairFiles};
        let fail = |prefix: String| {
            move |e: crate::tls_files::FileError| src.error_in(&format!("{prefix}.{}", e.field), e.to_string())
        };
        for (li, l) in self.listeners.iter().enumerate() {
            let Some(tls) = &l.tls else { continue };
            let at = format!("listener[{li}].tls");
            let default = KeyPairFiles {
                cert: &tls.cert,
                key: &tls.key,
                ocsp: tls.ocsp.as_deref(),
                fields: ["cert", "key", "ocsp"],
            };
            default.load().map_err(fail(at.clone()))?;
            for (ci, c) in tls.certificates.iter().enumerate() {
                let files = KeyPairFiles {
                    cert: &c.cert,
                    key: &c.key,
                    ocsp: c.ocsp.as_deref(),
                    fields: ["cert", "key", "ocsp"],
                };
                files.load().map_err(fail(format!("{at}.certificates[{ci}]")))?;
            }
            if let Some(ca) = &tls.client_ca {
                roots("client_ca", ca).map_err(fail(at.clone()))?;
            }
        }
        for (ci, c) in self.clusters.iter().enumerate() {
            let Some(tls) = &c.tls else { continue };
            let at = format!("cluster[{ci}].tls");
            if let Some(ca) = &tls.ca {
                roots("ca", ca).map_err(fail(at.clone()))?;
            }
            if let (Some(cert), Some(key)) = (&tls.cert, &tls.key) {
                KeyPairFiles { cert, key, ocsp: None, fields: ["cert", "key", "ocsp"] }
                    .load()
                    .map_err(fail(at.clone()))?;
            }
        }
        Ok(())
    }
}

/// The cluster called `name`, by index, or an error listing those defined.
fn find_cluster(
    clusters: &[Cluster],
    name: &Spanned<String>,
    src: &Source,
    field: String,
) -> Result<usize, ConfigError> {
    clusters.iter().position(|c| c.name == *name.get_ref()).ok_or_else(|| {
        let known: Vec<&str> = clusters.iter().map(|c| c.name.as_str()).collect();
        src.error(name.span(), field, format!("no cluster named {:?} (defined: {known:?})", name.get_ref()))
    })
}

/// A route's rate limit, checked by its own rules (`fulcrum-resilience`),
/// with a header key that is a header name (kept lowercase).
fn rate_limit(l: &Spanned<RateLimitConfig>, src: &Source, field: &str) -> Result<RateLimitConfig, ConfigError> {
    l.get_ref().validate().map_err(|m| src.error(l.span(), field.to_string(), m))?;
    let mut limit = l.get_ref().clone();
    if let Some(LimitKey::Header(name)) = &mut limit.key {
        if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
            return Err(src.error(l.span(), format!("{field}.key.header"), format!("{name:?} is not a header name")));
        }
        name.make_ascii_lowercase();
    }
    Ok(limit)
}

impl RawListener {
    /// One listener: an address no earlier listener uses, a head limit,
    /// routes or a cluster by protocol, and limits.
    fn validate(
        self,
        src: &Source,
        at: FieldName,
        clusters: &[Cluster],
        earlier: &[Listener],
    ) -> Result<Listener, ConfigError> {
        let listen: SocketAddr = self
            .listen
            .get_ref()
            .parse()
            .map_err(|_| src.error(self.listen.span(), at("listen"), "expected ip:port, e.g. 127.0.0.1:8080"))?;
        // HTTP/3 listens on UDP: it may share its address with a TCP listener.
        let udp = self.protocol == ListenerProtocol::Http3;
        if listen.port() != 0
            && earlier.iter().any(|k| k.listen == listen && (k.protocol == ListenerProtocol::Http3) == udp)
        {
            return Err(src.error(self.listen.span(), at("listen"), format!("{listen} is used by two listeners")));
        }
        let max_header_bytes = match self.max_header_bytes {
            Some(m) if m < 8192 => return Err(src.error_in(&at("max_header_bytes"), "must be at least 8192")),
            Some(m) => m,
            None => DEFAULT_MAX_HEADER_BYTES,
        };
        let (routes, cluster) = match self.protocol {
            ListenerProtocol::Http | ListenerProtocol::Http2 => (self.http_routes(src, at, clusters)?, None),
            ListenerProtocol::Http3 => {
                if self.tls.is_none() {
                    return Err(src.error(
                        self.listen.span(),
                        at("tls"),
                        "an http3 listener needs `tls` (QUIC is TLS 1.3)",
                    ));
                }
                (self.http_routes(src, at, clusters)?, None)
            }
            ListenerProtocol::Tcp => (Arc::new(RouteTable::default()), Some(self.tcp_cluster(src, at, clusters)?)),
            ListenerProtocol::TlsPassthrough => {
                (Arc::new(RouteTable::default()), self.default_cluster(src, at, clusters)?)
            }
        };
        let alt_svc = self.alt_svc(src, at)?;
        let sni_routes = self.sni_routes(src, at, clusters)?;
        let proxy_protocol = match self.proxy_protocol {
            Some(p) if self.protocol == ListenerProtocol::Http3 => {
                return Err(src.error(p.span(), at("proxy_protocol"), "the PROXY protocol is for TCP listeners"));
            }
            Some(p) => {
                let span = p.span();
                Some(p.into_inner().validate(span, src, at)?)
            }
            None => None,
        };
        let limits = match self.limits {
            Some(lim) => {
                let v = lim.get_ref();
                if v.header_read_timeout.is_zero() || v.idle_timeout.is_zero() || v.park_after.is_zero() {
                    return Err(src.error(lim.span(), at("limits"), "timeouts and park_after must be greater than 0"));
                }
                if v.max_headers == 0 || v.max_connections == 0 {
                    return Err(src.error(lim.span(), at("limits"), "max_headers and max_connections must be ≥ 1"));
                }
                lim.into_inner()
            }
            None => Limits::default(),
        };
        let http1_server = self.http1_server;
        let access_log = match self.access_log {
            Some(a) if matches!(self.protocol, ListenerProtocol::Tcp | ListenerProtocol::TlsPassthrough) => {
                return Err(src.error(a.span(), at("access_log"), "access logs are for HTTP listeners"));
            }
            Some(a) => {
                let span = a.span();
                Some(a.into_inner().validate(span, src, at)?)
            }
            None => None,
        };
        let tls = self.tls.map(|t| listener_tls(t, self.protocol, src, at)).transpose()?;
        let request_id = match self.request_id {
            Some(r) if self.protocol == ListenerProtocol::Tcp => {
                return Err(src.error(r.span(), at("request_id"), "request IDs are for HTTP listeners"));
            }
            Some(r) => {
                let span = r.span();
                let header = http::HeaderName::from_bytes(r.get_ref().header.as_bytes())
                    .map_err(|_| src.error(span.clone(), at("request_id.header"), "not a valid header name"))?;
                Some(RequestId { header, response: r.get_ref().response })
            }
            None => None,
        };
        Ok(Listener {
            alt_svc,
            request_id,
            traceparent: self.traceparent,
            listen,
            protocol: self.protocol,
            tls,
            routes,
            cluster,
            max_header_bytes,
            limits,
            http1_server,
            access_log,
            proxy_protocol,
            sni_routes,
        })
    }

    /// A passthrough listener's default cluster (none: unmatched names are
    /// refused); no routes, no TLS.
    fn default_cluster(&self, src: &Source, at: FieldName, clusters: &[Cluster]) -> Result<Option<usize>, ConfigError> {
        if self.tls.is_some() || !self.routes.is_empty() {
            return Err(src.error(
                self.listen.span(),
                at("sni_routes"),
                "TLS passthrough routes with `sni_routes` and `cluster`, and has no `tls`",
            ));
        }
        if self.sni_routes.is_empty() && self.cluster.is_none() {
            return Err(src.error(
                self.listen.span(),
                at("sni_routes"),
                "TLS passthrough needs `sni_routes` or `cluster`",
            ));
        }
        self.cluster.as_ref().map(|c| find_cluster(clusters, c, src, at("cluster"))).transpose()
    }

    /// `sni_routes` (passthrough listeners only): names lower-cased, each a
    /// DNS name or `*.` and one, ALPN protocols of 1 to 255 bytes, with a
    /// defined cluster.
    fn sni_routes(&self, src: &Source, at: FieldName, clusters: &[Cluster]) -> Result<Vec<SniRoute>, ConfigError> {
        let mut routes = Vec::with_capacity(self.sni_routes.len());
        for (i, r) in self.sni_routes.iter().enumerate() {
            let field = |f: &str| at(&format!("sni_routes[{i}].{f}"));
            if self.protocol != ListenerProtocol::TlsPassthrough {
                return Err(src.error(
                    r.server_name.span(),
                    at("sni_routes"),
                    "only for protocol = \"tls-passthrough\"",
                ));
            }
            let name = r.server_name.get_ref().to_ascii_lowercase();
            let bare = name.strip_prefix("*.").unwrap_or(&name);
            let valid = !bare.is_empty()
                && bare
                    .split('.')
                    .all(|l| !l.is_empty() && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
            if !valid {
                return Err(src.error(r.server_name.span(), field("server_name"), "expected a DNS name or *.name"));
            }
            for (j, p) in r.alpn.iter().enumerate() {
                if p.get_ref().is_empty() || p.get_ref().len() > 255 {
                    return Err(src.error(p.span(), field(&format!("alpn[{j}]")), "expected 1 to 255 bytes"));
                }
            }
            let alpn: Vec<String> = r.alpn.iter().map(|p| p.get_ref().clone()).collect();
            if routes.iter().any(|o: &SniRoute| o.server_name == name && o.alpn == alpn) {
                let also = if alpn.is_empty() { String::new() } else { format!(" with alpn {alpn:?}") };
                return Err(src.error(
                    r.server_name.span(),
                    field("server_name"),
                    format!("{name} is routed twice{also}"),
                ));
            }
            let cluster = find_cluster(clusters, &r.cluster, src, field("cluster"))?;
            routes.push(SniRoute { server_name: name, alpn, cluster });
        }
        Ok(routes)
    }

    /// An HTTP listener's routes, compiled ([`crate::route::compile`]): at
    /// least one; no `cluster` of its own.
    fn http_routes(&self, src: &Source, at: FieldName, clusters: &[Cluster]) -> Result<Arc<RouteTable>, ConfigError> {
        if let Some(c) = &self.cluster {
            return Err(src.error(c.span(), at("cluster"), "HTTP listeners route with `routes`"));
        }
        if self.routes.is_empty() {
            return Err(src.error(self.listen.span(), at("routes"), "an HTTP listener needs routes"));
        }
        let mut table =
            crate::route::compile(&self.routes, clusters).map_err(|e| src.error_in(&at(&e.field), e.message))?;
        let verifies = self.tls.as_ref().is_some_and(|t| t.get_ref().client_ca.is_some());
        if let Some(ri) = self.routes.iter().position(|r| !r.client_cert.is_empty()).filter(|_| !verifies) {
            let field = at(&format!("routes[{ri}].client_cert"));
            return Err(
                src.error_in(&field, "matches a verified client certificate: the listener needs `tls.client_ca`")
            );
        }
        for (ri, r) in self.routes.iter().enumerate() {
            if let Some(l) = &r.rate_limit {
                table.routes[ri].rate_limit = Some(rate_limit(l, src, &at(&format!("routes[{ri}].rate_limit")))?);
            }
        }
        Ok(Arc::new(table))
    }

    /// `alt_svc`: a header value, on a TLS HTTP/1.1 or HTTP/2 listener only
    /// (clients ignore `Alt-Svc` over clear text).
    fn alt_svc(&self, src: &Source, at: FieldName) -> Result<Option<String>, ConfigError> {
        let Some(a) = &self.alt_svc else { return Ok(None) };
        let bad = if !matches!(self.protocol, ListenerProtocol::Http | ListenerProtocol::Http2) || self.tls.is_none() {
            Some("`alt_svc` is for http and http2 listeners with `tls`")
        } else if a.get_ref().is_empty() || http::HeaderValue::from_str(a.get_ref()).is_err() {
            Some("not a header value, e.g. alt_svc = 'h3=\":8443\"; ma=86400'")
        } else {
            None
        };
        match bad {
            Some(m) => Err(src.error(a.span(), at("alt_svc"), m)),
            None => Ok(Some(a.get_ref().clone())),
        }
    }

    /// A TCP listener's one cluster: no routes, no TLS.
    fn tcp_cluster(&self, src: &Source, at: FieldName, clusters: &[Cluster]) -> Result<usize, ConfigError> {
        if self.tls.is_some() {
            return Err(src.error(self.listen.span(), at("tls"), "TLS is for HTTP listeners"));
        }
        match &self.cluster {
            Some(c) if self.routes.is_empty() => {
                let index = find_cluster(clusters, c, src, at("cluster"))?;
                if clusters[index].tls.is_some() {
                    return Err(src.error(c.span(), at("cluster"), "a TCP listener's cluster cannot have `tls`"));
                }
                Ok(index)
            }
            _ => Err(src.error(self.listen.span(), at("cluster"), "a TCP listener needs `cluster` (and no routes)")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(Path::new("test.toml"), text)
    }

    const GOOD: &str = r#"
workers = 2
admin = "127.0.0.1:9901"

[[listener]]
listen = "127.0.0.1:8080"
routes = [
  { host = "API.example.com", path_prefix = "/v1", cluster = "api" },
  { cluster = "web" },
]

[[listener]]
listen = "127.0.0.1:5432"
protocol = "tcp"
cluster = "web"

[[cluster]]
name = "web"
endpoints = ["127.0.0.1:9001", { address = "localhost:9002", weight = 3 }]

[[cluster]]
name = "api"
endpoints = ["127.0.0.1:9003"]
algorithm = { kind = "maglev", table_size = 251 }
hash_key = { header = "x-user" }
upstream = "http2"
connect_timeout = "250ms"
"#;

    #[test]
    fn a_full_file_loads() {
        let c = parse(GOOD).unwrap();
        assert_eq!(c.workers, 2);
        let routes = c.listeners[0].routes.routes();
        assert_eq!(routes[0].host, Some(crate::route::matcher::Host::Exact("api.example.com".into())));
        assert_eq!((routes[0].path_prefix(), routes[0].cluster()), (Some("/v1"), Some(1)));
        assert_eq!(routes[1].path_prefix(), Some("/"));
        assert_eq!(c.listeners[1].cluster, Some(0));
        assert_eq!(c.clusters[0].endpoints[1], EndpointConfig { address: "localhost:9002".into(), weight: 3.0 });
        assert_eq!(c.clusters[1].hash_key, HashKey::Header("x-user".into()));
        assert_eq!(c.clusters[1].connect_timeout, Duration::from_millis(250));
        assert_eq!(c.clusters[1].upstream, UpstreamProtocol::Http2);
    }

    fn error(text: &str) -> ConfigError {
        parse(text).unwrap_err()
    }

    #[test]
    fn errors_name_file_line_and_field() {
        let e = error(&GOOD.replace("weight = 3", "weight = -1"));
        assert_eq!((e.line, e.field.as_str()), (19, "cluster[0].endpoints[1].weight"), "{e}");
        assert!(e.to_string().starts_with("test.toml:19:"), "{e}");

        let e = error(&GOOD.replace("table_size = 251", "table_size = 250"));
        assert_eq!((e.line, e.field.as_str()), (24, "cluster[1].algorithm"), "{e}");
        assert!(e.message.contains("250"), "{e}");

        let e = error(&GOOD.replace("cluster = \"api\"", "cluster = \"apj\""));
        assert_eq!((e.line, e.field.as_str()), (8, "listener[0].routes[0].cluster"), "{e}");

        let e = error(&GOOD.replace("\"127.0.0.1:9003\"", "\"127.0.0.1\""));
        assert_eq!((e.line, e.field.as_str()), (23, "cluster[1].endpoints[0].address"), "{e}");

        let e = error(&GOOD.replace("upstream = \"http2\"", "upstream = \"http3\""));
        assert_eq!(e.line, 26, "{e}");
        assert!(e.message.contains("http3"), "{e}");

        let e = error(&GOOD.replace("connect_timeout", "connect_timeuot"));
        assert_eq!(e.line, 27, "{e}");
        assert!(e.message.contains("connect_timeuot"), "{e}");
    }

    #[test]
    fn sizes_and_durations_have_one_syntax_and_errors_point_at_the_value() {
        let text = GOOD.replace(
            "listen = \"127.0.0.1:8080\"",
            "listen = \"127.0.0.1:8080\"\nmax_header_bytes = \"16KiB\"\n\
             limits = { max_body_bytes = \"1MiB\", idle_timeout = \"1m 30s\" }",
        );
        let c = parse(&text).unwrap();
        assert_eq!(c.listeners[0].max_header_bytes, 16_384);
        assert_eq!(c.listeners[0].limits.max_body_bytes, 1 << 20);
        assert_eq!(c.listeners[0].limits.idle_timeout, Duration::from_secs(90));
        assert_eq!(c.listeners[0].limits.park_after, Duration::from_secs(1), "the default");
        let parks = parse(&text.replace("idle_timeout", "park_after = \"250ms\", idle_timeout")).unwrap();
        assert_eq!(parks.listeners[0].limits.park_after, Duration::from_millis(250));
        let e = error(&text.replace("idle_timeout", "park_after = \"0s\", idle_timeout"));
        assert_eq!(e.field, "listener[0].limits", "{e}");
        assert!(e.message.contains("park_after"), "{e}");
        let e = error(&text.replace("\"16KiB\"", "\"4KiB\""));
        assert_eq!((e.line, e.column, e.field.as_str()), (7, 20, "listener[0].max_header_bytes"), "{e}");
        let e = error(&text.replace("\"1MiB\"", "\"1 megabyte\""));
        assert_eq!((e.line, e.column, e.field.as_str()), (8, 29, "listener[0].limits.max_body_bytes"), "{e}");
        assert!(e.message.contains("megabyte"), "{e}");
        let e = error(&GOOD.replace("connect_timeout = \"250ms\"", "connect_timeout = \"0s\""));
        assert_eq!((e.line, e.column, e.field.as_str()), (27, 19, "cluster[1].connect_timeout"), "{e}");
        let e = error(&GOOD.replace("\"250ms\"", "\"250 parsecs\""));
        assert!(e.to_string().starts_with("test.toml:27:19: cluster[1].connect_timeout: "), "{e}");
    }

    #[test]
    fn structural_mistakes_are_caught() {
        assert!(error("").message.contains("no [[listener]]"));
        let e = error("[[listener]]\nlisten = \"127.0.0.1:1\"\nprotocol = \"tcp\"\n");
        assert_eq!(e.field, "listener[0].cluster");
        let e = error("[[listener]]\nlisten = \"localhost:1\"\nroutes = []\n");
        assert_eq!((e.line, e.field.as_str()), (2, "listener[0].listen"));
        let e = error("[[cluster]]\nname = \"a\"\nendpoints = []\n");
        assert_eq!(e.field, "cluster[0].endpoints");
    }

    #[test]
    fn the_examples_are_valid() {
        let load = |name: &str, text: &str| parse(text).unwrap_or_else(|e| panic!("{name}: {e}"));
        let minimal = load("minimal.toml", include_str!("../../../examples/proxy/minimal.toml"));
        assert_eq!((minimal.listeners.len(), minimal.clusters[0].endpoints.len()), (1, 2));
        let tls = load("tls.toml", include_str!("../../../examples/proxy/tls.toml"));
        assert!(tls.listeners[0].tls.is_some());
        let h3 = load("http3.toml", include_str!("../../../examples/proxy/http3.toml"));
        assert_eq!(h3.listeners[0].protocol, ListenerProtocol::Http3);
        assert_eq!(h3.listeners[0].listen, h3.listeners[1].listen);
        assert!(h3.listeners[1].alt_svc.is_some());
        let resilience = load("resilience.toml", include_str!("../../../examples/proxy/resilience.toml"));
        let app = &resilience.clusters[0];
        assert!(app.health_check.is_some() && app.outlier_detection.is_some() && app.slow_start.is_some());
        assert_eq!(app.retries.attempts, 3);
    }

    #[test]
    fn nested_tables_load_without_their_parent() {
        // TOML lets `[cluster.retries.budget]` create `retries` implicitly;
        // the parent's defaults then apply.
        let text = format!("{GOOD}\n[cluster.retries.budget]\nratio = 0.5\n");
        let c = parse(&text).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.clusters[1].retries.attempts, RetryPolicy::default().attempts);
        assert_eq!(c.clusters[1].retries.budget.as_ref().unwrap().ratio, 0.5);
    }

    #[test]
    fn access_logs_parse_and_their_errors_name_the_field() {
        let with = |log: &str| {
            GOOD.replace("listen = \"127.0.0.1:8080\"", &format!("listen = \"127.0.0.1:8080\"\naccess_log = {log}"))
        };
        let c = parse(&with(r#"{ path = "stdout", json = true }"#)).unwrap();
        assert_eq!(c.listeners[0].access_log, Some(AccessLogConfig { target: Target::Stdout, format: Format::Json }));
        let c = parse(&with(r#"{ path = "/tmp/a.log" }"#)).unwrap();
        let log = c.listeners[0].access_log.clone().unwrap();
        assert_eq!(
            (log.target, log.format),
            (Target::File("/tmp/a.log".into()), Format::parse(DEFAULT_FORMAT).unwrap())
        );
        let e = error(&with(r#"{ path = "stdout", format = "$status $stauts" }"#));
        assert_eq!((e.line, e.field.as_str()), (7, "listener[0].access_log.format"), "{e}");
        assert!(e.message.contains("stauts"), "{e}");
        let e = error(&with(r#"{ path = "stdout", format = "$status", json = true }"#));
        assert_eq!(e.field, "listener[0].access_log.format", "{e}");
        let e = error(&with(r#"{ path = "" }"#));
        assert_eq!((e.line, e.field.as_str()), (7, "listener[0].access_log.path"), "{e}");
        let e = error(&with(r#"{ file = "x" }"#));
        assert_eq!(e.line, 7, "{e}");
        assert!(e.message.contains("file"), "{e}");
    }

    #[test]
    fn http3_needs_tls_and_alt_svc_needs_a_tls_http_listener() {
        let tls = "tls = { cert = \"c.pem\", key = \"k.pem\" }";
        let h3 =
            |extra: &str| GOOD.replace("listen = \"127.0.0.1:8080\"", &format!("listen = \"127.0.0.1:8080\"\n{extra}"));
        let c = parse(&h3(&format!("protocol = \"http3\"\n{tls}"))).unwrap();
        assert_eq!(c.listeners[0].protocol, ListenerProtocol::Http3);
        let e = error(&h3("protocol = \"http3\""));
        assert_eq!((e.line, e.field.as_str()), (6, "listener[0].tls"), "{e}");
        let c = parse(&h3(&format!("{tls}\nalt_svc = 'h3=\":8443\"'"))).unwrap();
        assert_eq!(c.listeners[0].alt_svc.as_deref(), Some("h3=\":8443\""));
        let e = error(&h3("alt_svc = 'h3=\":8443\"'"));
        assert_eq!((e.line, e.field.as_str()), (7, "listener[0].alt_svc"), "{e}");
        let e = error(&h3(&format!("protocol = \"http3\"\n{tls}\nproxy_protocol = {{ trusted = [\"::1\"] }}")));
        assert_eq!((e.line, e.field.as_str()), (9, "listener[0].proxy_protocol"), "{e}");
        let e = error(&h3(&format!("{tls}\nalt_svc = \"a\\u0001\"")));
        assert_eq!((e.line, e.field.as_str()), (8, "listener[0].alt_svc"), "{e}");
    }

    #[test]
    fn tls_keys_are_checked_and_files_errors_name_the_field_and_the_file() {
        let certs = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/proxy/certs");
        let text = format!(
            "[[listener]]\nlisten = \"127.0.0.1:1\"\nroutes = [{{ cluster = \"c\" }}]\n\
             [listener.tls]\ncert = \"{certs}/default.pem\"\nkey = \"{certs}/default.key\"\n\
             client_ca = \"{certs}/ca.pem\"\nalpn = [\"http/1.1\"]\n\
             [[listener.tls.certificates]]\nnames = [\"api.example.test\", \"*.example.test\"]\n\
             cert = \"{certs}/api.pem\"\nkey = \"{certs}/api.key\"\n\
             [[cluster]]\nname = \"c\"\nendpoints = [\"127.0.0.1:2\"]\n\
             tls = {{ ca = \"{certs}/ca.pem\", cert = \"{certs}/client.pem\", key = \"{certs}/client.key\" }}\n"
        );
        let checked = |text: &str| Config::parse_with_files(Path::new("test.toml"), text);
        let c = checked(&text).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.listeners[0].tls.as_ref().unwrap().certificates[0].names.len(), 2);
        assert!(c.clusters[0].tls.as_ref().unwrap().verify);
        // A missing file: the field and the path.
        let e = checked(&text.replace("api.key", "nope.key")).unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (12, "listener[0].tls.certificates[0].key"), "{e}");
        assert!(e.message.contains("nope.key") && e.message.contains("cannot read"), "{e}");
        // A key that is not the certificate's.
        let e = checked(&text.replacen("default.key", "wildcard.key", 1)).unwrap_err();
        assert_eq!(e.field, "listener[0].tls.key", "{e}");
        assert!(e.message.contains("does not match"), "{e}");
        let e = checked(&text.replace("client.key", "api.key")).unwrap_err();
        assert_eq!(e.field, "cluster[0].tls.key", "{e}");
        // Not a certificate at all, and a CA bundle that is not one.
        let e = checked(&text.replace("api.pem", "api.key")).unwrap_err();
        assert_eq!(e.field, "listener[0].tls.certificates[0].cert", "{e}");
        assert!(e.message.contains("no PEM certificate"), "{e}");
        let e = checked(&text.replacen("ca.pem", "default.key", 1)).unwrap_err();
        assert_eq!(e.field, "listener[0].tls.client_ca", "{e}");
        // Settings, checked without reading files.
        let e = error(&text.replace("\"*.example.test\"", "\"a.*.test\""));
        assert_eq!(e.field, "listener[0].tls.certificates[0].names", "{e}");
        let e = error(&text.replace("\"*.example.test\"", "\"API.example.test\""));
        assert!(e.message.contains("two certificates"), "{e}");
        let e = error(&text.replace("\"http/1.1\"]", "\"h3\"]"));
        assert_eq!(e.field, "listener[0].tls.alpn", "{e}");
        let e = error(&text.replace(&format!("client_ca = \"{certs}/ca.pem\""), "client_auth = \"optional\""));
        assert_eq!(e.field, "listener[0].tls.client_auth", "{e}");
        let e = error(&text.replace("alpn = ", "reload_interval = \"0s\"\nalpn = "));
        assert_eq!(e.field, "listener[0].tls.reload_interval", "{e}");
        let e = error(&text.replace(", cert = \"", ", sni = \"not a name\", cert = \""));
        assert_eq!(e.field, "cluster[0].tls.sni", "{e}");
        let e = error(&text.replace(", key = \"{certs}/client.key\"".replace("{certs}", certs).as_str(), ""));
        assert_eq!(e.field, "cluster[0].tls.key", "{e}");
        let e = error(&text.replace("tls = { ca", "tls = { verify = false, ca"));
        assert_eq!(e.field, "cluster[0].tls.ca", "{e}");
        let e = error(&text.replace("client_ca = ", "client_auth = \"optional\"\nclient_cx = "));
        assert!(e.message.contains("client_cx"), "{e}");
    }

    #[test]
    fn passthrough_and_proxy_protocol_keys() {
        let text = format!(
            "{GOOD}\n[[listener]]\nlisten = \"127.0.0.1:8443\"\nprotocol = \"tls-passthrough\"\n\
             sni_routes = [{{ server_name = \"A.example.com\", cluster = \"api\" }}, \
             {{ server_name = \"*.example.org\", cluster = \"web\" }}]\n\
             proxy_protocol = {{ trusted = [\"10.0.0.0/8\", \"::1\"], required = false }}\n"
        );
        let c = parse(&text).unwrap_or_else(|e| panic!("{e}"));
        let l = &c.listeners[2];
        let names: Vec<_> = l.sni_routes.iter().map(|r| (r.server_name.as_str(), r.cluster)).collect();
        assert_eq!(names, vec![("a.example.com", 1), ("*.example.org", 0)]);
        let alpn = text.replace(
            "\"A.example.com\", cluster = \"api\" }",
            "\"A.example.com\", alpn = [\"h2\"], cluster = \"api\" }, { server_name = \"a.example.com\", cluster = \"web\" }",
        );
        let c = parse(&alpn).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.listeners[2].sni_routes[0].alpn, vec!["h2".to_string()]);
        assert_eq!(c.listeners[2].sni_routes[1].alpn, Vec::<String>::new());
        let e = error(&alpn.replace("[\"h2\"]", "[\"h2\", \"\"]"));
        assert_eq!(e.field, "listener[2].sni_routes[0].alpn[1]", "{e}");
        let e = error(&alpn.replace("alpn = [\"h2\"], ", ""));
        assert_eq!(e.field, "listener[2].sni_routes[1].server_name", "{e}");
        assert!(e.message.contains("routed twice"), "{e}");
        assert_eq!(l.cluster, None);
        let rule = l.proxy_protocol.as_ref().unwrap();
        assert!(!rule.required && rule.trusted.len() == 2 && rule.timeout == Duration::from_secs(3));
        let e = error(&text.replace("\"::1\"", "\"::1/200\""));
        assert_eq!(e.field, "listener[2].proxy_protocol.trusted[1]", "{e}");
        let e = error(&text.replace("[\"10.0.0.0/8\", \"::1\"]", "[]"));
        assert_eq!(e.field, "listener[2].proxy_protocol.trusted", "{e}");
        let e = error(&text.replace("*.example.org", "*.exa mple.org"));
        assert_eq!(e.field, "listener[2].sni_routes[1].server_name", "{e}");
        let e = error(&text.replace("\"*.example.org\", cluster = \"web\"", "\"*.example.org\", cluster = \"nope\""));
        assert_eq!(e.field, "listener[2].sni_routes[1].cluster", "{e}");
        let e = error(&text.replace("protocol = \"tls-passthrough\"", "protocol = \"tcp\"\ncluster = \"web\""));
        assert_eq!(e.field, "listener[2].sni_routes", "{e}");
        let bare = "\n[[listener]]\nlisten = \"127.0.0.1:8444\"\nprotocol = \"tls-passthrough\"\n";
        assert_eq!(error(&format!("{GOOD}{bare}")).field, "listener[2].sni_routes");
        let c = parse(
            &GOOD
                .replace("connect_timeout = \"250ms\"", "upstream = \"http1\"\nproxy_protocol = \"v1\"")
                .replace("upstream = \"http2\"\n", ""),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.clusters[1].proxy_protocol, Some(ProxyVersion::V1));
        // An HTTP/2 cluster sends it too (its connections are kept per client).
        let c = parse(&GOOD.replace("connect_timeout = \"250ms\"", "proxy_protocol = \"v2\"")).unwrap();
        assert_eq!(
            (c.clusters[1].upstream, c.clusters[1].proxy_protocol),
            (UpstreamProtocol::Http2, Some(ProxyVersion::V2))
        );
        assert!(error(&GOOD.replace("connect_timeout = \"250ms\"", "proxy_protocol = \"v3\"")).message.contains("v3"));
    }

    #[test]
    fn limits_ids_and_sticky_cookies_parse_and_their_errors_name_the_field() {
        let limited = GOOD.replace(
            "{ cluster = \"web\" },",
            "{ cluster = \"web\", rate_limit = { rate = 5, key = { header = \"X-Key\" } } },",
        );
        let c = parse(&limited).unwrap();
        let limit = c.listeners[0].routes.routes()[1].rate_limit.clone().unwrap();
        assert_eq!((limit.burst(), limit.key), (5, Some(LimitKey::Header("x-key".into()))));
        let e = error(&limited.replace("rate = 5", "rate = 0"));
        assert_eq!((e.line, e.field.as_str()), (9, "listener[0].routes[1].rate_limit"), "{e}");
        assert!(e.message.contains("rate"), "{e}");
        let e = error(&limited.replace("X-Key", "X Key"));
        assert_eq!(e.field, "listener[0].routes[1].rate_limit.key.header", "{e}");
        let e = error(&limited.replace("rate = 5", "rate = 5, brust = 2"));
        assert!(e.message.contains("brust"), "{e}");

        let ids = GOOD.replace(
            "listen = \"127.0.0.1:8080\"",
            "listen = \"127.0.0.1:8080\"\nrequest_id = { response = true }\ntraceparent = true",
        );
        let c = parse(&ids).unwrap();
        let id = c.listeners[0].request_id.clone().unwrap();
        assert_eq!((id.header.as_str(), id.response, c.listeners[0].traceparent), ("x-request-id", true, true));
        let e = error(&ids.replace("{ response = true }", "{ header = \"a b\" }"));
        assert_eq!((e.line, e.field.as_str()), (7, "listener[0].request_id.header"), "{e}");

        let sticky = GOOD.replace(
            "hash_key = { header = \"x-user\" }",
            "hash_key = { cookie = \"sid\" }\nsticky_cookie = { ttl = \"1h\", secure = true, same_site = \"strict\" }",
        );
        let c = parse(&sticky).unwrap();
        let cookie = c.clusters[1].sticky_cookie.clone().unwrap();
        assert_eq!(cookie.set_cookie("sid", "v"), "sid=v; Path=/; Max-Age=3600; Secure; HttpOnly; SameSite=Strict");
        let e = error(&sticky.replace("{ cookie = \"sid\" }", "{ header = \"sid\" }"));
        assert_eq!((e.line, e.field.as_str()), (26, "cluster[1].sticky_cookie"), "{e}");
        assert!(e.message.contains("cookie"), "{e}");
        let e = error(&sticky.replace("maglev\", table_size = 251", "round-robin\""));
        assert!(e.message.contains("ring-hash"), "{e}");
        let e = error(&sticky.replace("ttl = \"1h\"", "path = \"/a;b\""));
        assert_eq!(e.field, "cluster[1].sticky_cookie", "{e}");
    }

    #[test]
    fn quick_mode_checks_backends() {
        let listen = "127.0.0.1:8080".parse().unwrap();
        let c = Config::quick(listen, &["127.0.0.1:1".into()], AlgorithmKind::PEAK_EWMA).unwrap();
        assert_eq!(c.clusters[0].algorithm.kind(), AlgorithmKind::PEAK_EWMA);
        let e = Config::quick(listen, &["nonsense".into()], AlgorithmKind::PEAK_EWMA).unwrap_err();
        assert_eq!(e.field, "--backends[0]");
    }
}

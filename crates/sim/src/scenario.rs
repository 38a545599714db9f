//! Scenario files: what is simulated, read from TOML and validated on load.
//!
//! A [`Scenario`] names its clients ([`Clients`]), servers ([`Server`]), the
//! network between them ([`Network`]), the balancer instances
//! ([`Balancers`]), where latency is measured ([`Metrics`]), timed
//! [`Event`]s (a server slows down, fails, recovers, joins, leaves), and the
//! algorithms to compare. The file is read into raw types (its TOML form)
//! and each section is then validated into its type, so a mistake is
//! reported with the file, the line, the column and the field (the error
//! and the `--set KEY=VALUE` overrides of every configuration format:
//! `fulcrum_config`):
//!
//! ```text
//! scenarios/x.toml:7:11: servers[0].service: uniform: max (5ms) is below min (10ms)
//! ```
//!
//! `docs/reference/sim-scenario.md` is the reference of every field.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use fulcrum_balance::{AlgorithmConfig, AlgorithmKind, Endpoint, Nanos};
use fulcrum_config::Source;
use fulcrum_resilience::{LimitKey, OutlierConfig, RateLimitConfig, RetryOn, RetryPolicy, SlowStart, SlowStartConfig};
use serde::Deserialize;

use crate::resilience::Resilience;
use crate::trace::Trace;
use fulcrum_workload::dist::{nanos, with_base_dir, Dist};

/// A scenario that failed to load: `file:line:column: field: message`.
pub type ScenarioError = fulcrum_config::Error;

/// A validated scenario.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// Short name for reports (defaults to the file's stem).
    pub name: String,
    /// What the scenario shows.
    pub description: String,
    /// Seed used when the command line gives none.
    pub seed: u64,
    /// The algorithms compared by default, with their parameters.
    pub algorithms: Vec<AlgorithmConfig>,
    /// Parameters for algorithms named on the command line, by kind.
    pub overrides: Vec<AlgorithmConfig>,
    /// The workload.
    pub clients: Clients,
    /// Latencies between nodes.
    pub network: Network,
    /// The servers, one entry per server (`count` expanded).
    pub servers: Vec<Server>,
    /// The balancer instances.
    pub balancers: Balancers,
    /// What is measured.
    pub metrics: Metrics,
    /// Timed changes, in time order.
    pub events: Vec<Event>,
    /// Outlier detection, slow start, retries and the panic threshold (all
    /// off unless the scenario turns them on).
    pub resilience: Resilience,
    /// The files it named (trace, empirical samples), for the results'
    /// provenance.
    pub inputs: fulcrum_config::Inputs,
}

/// How clients send.
#[derive(Debug, Clone, PartialEq)]
pub enum Arrivals {
    /// Open loop: one request every `interval`.
    Fixed(Nanos),
    /// Open loop: Poisson arrivals with this mean gap.
    Poisson(f64),
    /// Closed loop: this many requests in flight per client.
    Closed(u32),
    /// Open loop: the requests of a trace, at its times (line *i* sent by
    /// client *i* mod the client count).
    Trace(Arc<Trace>),
}

/// Which key each request carries for hash-based algorithms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Keys {
    /// A fresh random 64-bit key per request (the seed-000 L7 id).
    Random,
    /// One key per client (sticky sessions).
    Client,
    /// No key: hash-based balancers draw their own.
    None,
    /// The key of each line of the trace.
    Trace,
}

/// The clients section.
#[derive(Debug, Clone, PartialEq)]
pub struct Clients {
    /// Number of clients.
    pub count: u32,
    /// Open or closed loop.
    pub arrivals: Arrivals,
    /// Requests each client sends (`None`: until `duration`).
    pub requests: Option<u64>,
    /// How long each client sends after its start (`None`: until `requests`).
    pub duration: Option<Nanos>,
    /// When client 0 starts.
    pub start: Nanos,
    /// Client i starts at `start + i·stagger`.
    pub stagger: Nanos,
    /// Open a connection (one round trip to the balancer) before the first
    /// request, so first-contact delays on that hop are paid outside the
    /// measurement.
    pub connect: bool,
    /// Request keys.
    pub keys: Keys,
}

/// Network latencies. Each hop's latency is drawn per message, one way.
#[derive(Debug, Clone, PartialEq)]
pub struct Network {
    /// Client ↔ balancer, each direction.
    pub client_lb: Dist,
    /// Balancer ↔ server, each direction.
    pub lb_server: Dist,
    /// Extra delay the first time a node sends to another (address
    /// resolution); later messages between the same pair, in the same
    /// direction, wait until it has passed.
    pub first_contact: Dist,
}

/// One server.
#[derive(Debug, Clone, PartialEq)]
pub struct Server {
    /// Name used by hash-based algorithms and in reports.
    pub name: String,
    /// Balancing weight.
    pub weight: f64,
    /// Service time of a request.
    pub service: Dist,
    /// Requests served at once (`None`: unlimited, a pure delay); more wait
    /// in a FIFO queue.
    pub concurrency: Option<u32>,
    /// Whether the server is in the balancers' sets at the start.
    pub joined: bool,
    /// Share of served tries answered with a server error (a 5xx) at the
    /// end of their service time, in `[0, 1)`.
    pub errors: f64,
    /// A cold start: service times are longer for a while after joining.
    pub cold: Option<Cold>,
}

/// A server's warm-up penalty: service times are multiplied by `factor` when
/// it joins (at the start, or at its `join` event), falling linearly to 1
/// over `duration` (a cold cache, a JIT warming up).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cold {
    /// Service-time multiplier at the moment of joining (≥ 1).
    pub factor: f64,
    /// How long the penalty takes to wear off.
    pub duration: Nanos,
}

impl Cold {
    /// The multiplier `age` after joining.
    pub fn multiplier(&self, age: Nanos) -> f64 {
        if age >= self.duration {
            1.0
        } else {
            1.0 + (self.factor - 1.0) * (1.0 - age as f64 / self.duration as f64)
        }
    }
}

/// The balancers section.
#[derive(Debug, Clone, PartialEq)]
pub struct Balancers {
    /// Instances, each with its own algorithm state; client i uses instance
    /// `i % count`.
    pub count: u32,
    /// A request without a response after this long fails (`None`: wait forever).
    pub timeout: Option<Nanos>,
    /// Tries in flight allowed over all balancers together, as the proxy's
    /// cluster `max_requests` (its workers share one count); more are
    /// refused at once. `None`: no limit.
    pub max_requests: Option<u64>,
}

/// Where latency is measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MeasureAt {
    /// From the client's send to its receipt of the response.
    Client,
    /// From the balancer forwarding the request to it receiving the
    /// response (the tower demo's measurement).
    Balancer,
}

/// The metrics section.
#[derive(Debug, Clone, PartialEq)]
pub struct Metrics {
    /// Where latency is measured.
    pub latency_at: MeasureAt,
    /// Requests sent before this time are left out of every figure.
    pub warmup: Nanos,
    /// Width of a bucket in the share-over-time series.
    pub share_interval: Nanos,
    /// Keep every latency sample (`exact = true`, or `fulcrum sim --exact`)
    /// instead of switching to an HDR histogram past
    /// [`fulcrum_workload::EXACT_LIMIT`] samples per run.
    pub exact: bool,
}

/// What happens to a server at an event.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Service times come from this distribution from now on.
    Slow(Dist),
    /// Requests fail: with an error after `after`, or (`None`) by never being
    /// answered, so that the balancer's timeout fires.
    Fail(Option<Dist>),
    /// Healthy again, with the service time it started with.
    Recover,
    /// Requests fail at once: the server refuses connections.
    Refuse,
    /// Enter the balancers' endpoint sets.
    Join,
    /// Leave the balancers' endpoint sets (requests in flight still finish).
    Leave,
}

/// A timed change to one server.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// When.
    pub at: Nanos,
    /// Which server (index into [`Scenario::servers`]).
    pub server: usize,
    /// What happens.
    pub action: Action,
}

// ---- the TOML form: raw sections, each validated into its type ----

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScenario {
    name: Option<String>,
    #[serde(default)]
    description: String,
    #[serde(default = "default_seed")]
    seed: u64,
    #[serde(default = "default_algorithms")]
    algorithms: Vec<KindName>,
    #[serde(default)]
    algorithm: Vec<AlgorithmConfig>,
    clients: RawClients,
    #[serde(default)]
    network: RawNetwork,
    servers: Vec<RawServer>,
    #[serde(default)]
    balancers: RawBalancers,
    #[serde(default)]
    metrics: RawMetrics,
    #[serde(default)]
    events: Vec<RawEvent>,
    outlier_detection: Option<OutlierConfig>,
    slow_start: Option<SlowStartConfig>,
    retries: Option<RetryPolicy>,
    panic_threshold: Option<f64>,
    rate_limit: Option<RateLimitConfig>,
}

fn default_seed() -> u64 {
    1
}

fn default_algorithms() -> Vec<KindName> {
    [AlgorithmKind::ROUND_ROBIN, AlgorithmKind::LEAST_REQUEST, AlgorithmKind::PEAK_EWMA].map(KindName).to_vec()
}

#[derive(Clone, Copy)]
struct KindName(AlgorithmKind);

impl<'de> Deserialize<'de> for KindName {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map(KindName).map_err(|e: fulcrum_balance::UnknownAlgorithm| serde::de::Error::custom(e))
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
enum LoopKind {
    Open,
    Closed,
    Trace,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawClients {
    #[serde(default = "one")]
    count: u32,
    #[serde(rename = "loop")]
    loop_kind: LoopKind,
    #[serde(default, with = "fulcrum_config::duration")]
    interval: Option<Duration>,
    rate: Option<f64>,
    in_flight: Option<u32>,
    requests: Option<u64>,
    #[serde(default, with = "fulcrum_config::duration")]
    duration: Option<Duration>,
    #[serde(default, with = "fulcrum_config::duration")]
    start: Duration,
    #[serde(default, with = "fulcrum_config::duration")]
    stagger: Duration,
    #[serde(default)]
    connect: bool,
    keys: Option<Keys>,
    trace: Option<String>,
}

fn one() -> u32 {
    1
}

impl RawClients {
    /// An open loop with one interval or rate, or a closed loop with a
    /// count in flight; a request count or a duration. Or a trace (read
    /// from `base_dir` when relative), which may be cut short by either.
    fn validate(self, src: &Source, base_dir: &Path) -> Result<Clients, ScenarioError> {
        if self.count == 0 {
            return Err(src.error_in("clients.count", "must be at least 1"));
        }
        if matches!(self.loop_kind, LoopKind::Trace) {
            return self.validate_trace(src, base_dir);
        }
        if self.trace.is_some() {
            return Err(src.error_in("clients.trace", "needs `loop = \"trace\"`"));
        }
        if self.keys == Some(Keys::Trace) {
            return Err(src.error_in("clients.keys", "\"trace\" needs `loop = \"trace\"`"));
        }
        let arrivals = match (self.loop_kind, self.interval, self.rate, self.in_flight) {
            (LoopKind::Open, Some(i), None, None) if !i.is_zero() => Arrivals::Fixed(nanos(i)),
            (LoopKind::Open, None, Some(rate), None) if rate.is_finite() && rate > 0.0 => Arrivals::Poisson(1e9 / rate),
            (LoopKind::Open, ..) => {
                return Err(src.error_in(
                    "clients.loop",
                    "an open loop needs exactly one of `interval` (a duration > 0) or `rate` \
                     (requests per second per client, > 0), and no `in_flight`",
                ))
            }
            (LoopKind::Closed, None, None, Some(n)) if n > 0 => Arrivals::Closed(n),
            (LoopKind::Closed, ..) => {
                return Err(src.error_in(
                    "clients.loop",
                    "a closed loop needs `in_flight` (requests each client keeps in flight, ≥ 1) \
                     and no `interval` or `rate`",
                ))
            }
            (LoopKind::Trace, ..) => unreachable!("validated by validate_trace"),
        };
        match (self.requests, self.duration) {
            (None, None) => return Err(src.error_in("clients", "give `requests` (per client) or `duration`")),
            (Some(0), _) => return Err(src.error_in("clients.requests", "must be at least 1")),
            (_, Some(d)) if d.is_zero() => return Err(src.error_in("clients.duration", "must be above 0")),
            _ => {}
        }
        Ok(Clients {
            count: self.count,
            arrivals,
            requests: self.requests,
            duration: self.duration.map(nanos),
            start: nanos(self.start),
            stagger: nanos(self.stagger),
            connect: self.connect,
            keys: self.keys.unwrap_or(Keys::Random),
        })
    }

    /// `loop = "trace"`: the trace's times replace `interval`, `rate` and
    /// `stagger`; its keys are the default keys.
    fn validate_trace(self, src: &Source, base_dir: &Path) -> Result<Clients, ScenarioError> {
        let Some(file) = &self.trace else {
            return Err(src.error_in("clients.loop", "a trace loop needs `trace` (the CSV file of requests)"));
        };
        if self.interval.is_some() || self.rate.is_some() || self.in_flight.is_some() || !self.stagger.is_zero() {
            return Err(src.error_in(
                "clients.loop",
                "a trace gives the request times: no `interval`, `rate`, `in_flight` or `stagger`",
            ));
        }
        match (self.requests, self.duration) {
            (Some(0), _) => return Err(src.error_in("clients.requests", "must be at least 1")),
            (_, Some(d)) if d.is_zero() => return Err(src.error_in("clients.duration", "must be above 0")),
            _ => {}
        }
        let path = base_dir.join(file);
        let trace = Trace::load(&path).map_err(|e| match e.line {
            // The file itself (missing, empty): the scenario's field is at fault.
            0 => src.error_in("clients.trace", format!("{}: {}", path.display(), e.message)),
            _ => e,
        })?;
        Ok(Clients {
            count: self.count,
            arrivals: Arrivals::Trace(Arc::new(trace)),
            requests: self.requests,
            duration: self.duration.map(nanos),
            start: nanos(self.start),
            stagger: 0,
            connect: self.connect,
            keys: self.keys.unwrap_or(Keys::Trace),
        })
    }
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNetwork {
    client_lb: Option<Dist>,
    lb_server: Option<Dist>,
    first_contact: Option<Dist>,
}

impl Default for Network {
    fn default() -> Self {
        RawNetwork::default().validate()
    }
}

impl RawNetwork {
    /// Hops left out take no time (each distribution checked itself as it was read).
    fn validate(self) -> Network {
        let zero = || Dist::Fixed(0);
        Network {
            client_lb: self.client_lb.unwrap_or_else(zero),
            lb_server: self.lb_server.unwrap_or_else(zero),
            first_contact: self.first_contact.unwrap_or_else(zero),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawServer {
    count: Option<u32>,
    name: Option<String>,
    names: Option<Vec<String>>,
    #[serde(default = "unit_weight")]
    weight: f64,
    service: Dist,
    concurrency: Option<u32>,
    #[serde(default = "yes")]
    joined: bool,
    cold: Option<RawCold>,
    #[serde(default)]
    errors: f64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCold {
    factor: f64,
    #[serde(with = "fulcrum_config::duration")]
    duration: Duration,
}

fn unit_weight() -> f64 {
    1.0
}

fn yes() -> bool {
    true
}

impl RawServer {
    /// The servers this entry stands for (`count` of them, named by `name`
    /// or `names`, or by address), appended to `servers`; `at` names the
    /// entry (`servers[i]`).
    fn expand(&self, at: &str, src: &Source, servers: &mut Vec<Server>) -> Result<(), ScenarioError> {
        let field = |f: &str| format!("{at}.{f}");
        if !(self.weight.is_finite() && self.weight > 0.0) {
            return Err(src.error_in(&field("weight"), format!("{} must be a finite number above 0", self.weight)));
        }
        let count = match (&self.names, self.count) {
            (Some(_), _) if self.name.is_some() => {
                return Err(src.error_in(&field("names"), "give `name` or `names`, not both"))
            }
            (Some(names), None) if !names.is_empty() => names.len() as u32,
            (Some(names), Some(c)) if names.len() == c as usize && c > 0 => c,
            (Some(names), _) => {
                return Err(src.error_in(
                    &field("names"),
                    format!("has {} names; it needs one per server (count) and at least one", names.len()),
                ))
            }
            (None, Some(0)) => return Err(src.error_in(&field("count"), "must be at least 1")),
            (None, c) => c.unwrap_or(1),
        };
        if !(0.0..1.0).contains(&self.errors) {
            return Err(src.error_in(&field("errors"), format!("{} must be in [0, 1)", self.errors)));
        }
        if self.concurrency == Some(0) {
            return Err(src.error_in(&field("concurrency"), "must be at least 1 (leave it out for unlimited)"));
        }
        let cold = match &self.cold {
            Some(c) if !(c.factor.is_finite() && c.factor >= 1.0) => {
                return Err(src.error_in(&field("cold.factor"), format!("{} must be a finite number ≥ 1", c.factor)))
            }
            Some(c) if c.duration.is_zero() => return Err(src.error_in(&field("cold.duration"), "must be above 0")),
            Some(c) => Some(Cold { factor: c.factor, duration: nanos(c.duration) }),
            None => None,
        };
        for k in 0..count {
            let n = servers.len();
            let name = match (&self.name, &self.names) {
                (_, Some(names)) => names[k as usize].clone(),
                (Some(name), _) if count == 1 => name.clone(),
                (Some(name), _) => format!("{name}-{k}"),
                (None, None) => format!("10.0.{}.{}:80", n / 250, n % 250 + 1),
            };
            servers.push(Server {
                name,
                weight: self.weight,
                service: self.service.clone(),
                concurrency: self.concurrency,
                joined: self.joined,
                errors: self.errors,
                cold,
            });
        }
        Ok(())
    }
}

/// Every `[[servers]]` entry expanded, with names unique.
fn servers(raw: &[RawServer], src: &Source) -> Result<Vec<Server>, ScenarioError> {
    let mut servers = Vec::new();
    let mut entry_of = Vec::new();
    for (i, spec) in raw.iter().enumerate() {
        spec.expand(&format!("servers[{i}]"), src, &mut servers)?;
        entry_of.resize(servers.len(), i);
    }
    if servers.is_empty() {
        return Err(src.error_in("servers", "at least one [[servers]] entry is needed"));
    }
    for (i, a) in servers.iter().enumerate() {
        if let Some(j) = servers[..i].iter().position(|b| b.name == a.name) {
            return Err(src.error_in(
                &format!("servers[{}]", entry_of[i]),
                format!("servers {j} and {i} are both named {:?}; names must be unique", a.name),
            ));
        }
    }
    Ok(servers)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBalancers {
    #[serde(default = "one")]
    count: u32,
    #[serde(default, with = "fulcrum_config::duration")]
    timeout: Option<Duration>,
    #[serde(default)]
    max_requests: Option<u64>,
}

impl Default for RawBalancers {
    fn default() -> Self {
        RawBalancers { count: 1, timeout: None, max_requests: None }
    }
}

impl Default for Balancers {
    fn default() -> Self {
        Balancers { count: 1, timeout: None, max_requests: None }
    }
}

impl RawBalancers {
    fn validate(self, src: &Source) -> Result<Balancers, ScenarioError> {
        if self.count == 0 {
            return Err(src.error_in("balancers.count", "must be at least 1"));
        }
        if self.timeout.is_some_and(|t| t.is_zero()) {
            return Err(src.error_in("balancers.timeout", "must be above 0 (leave it out for no timeout)"));
        }
        if self.max_requests == Some(0) {
            return Err(src.error_in("balancers.max_requests", "must be at least 1 (leave it out for no limit)"));
        }
        Ok(Balancers { count: self.count, timeout: self.timeout.map(nanos), max_requests: self.max_requests })
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMetrics {
    #[serde(default = "client_side")]
    latency: MeasureAt,
    #[serde(default, with = "fulcrum_config::duration")]
    warmup: Duration,
    #[serde(default = "one_second", with = "fulcrum_config::duration")]
    share_interval: Duration,
    #[serde(default)]
    exact: bool,
}

fn client_side() -> MeasureAt {
    MeasureAt::Client
}

fn one_second() -> Duration {
    Duration::from_secs(1)
}

impl Default for RawMetrics {
    fn default() -> Self {
        RawMetrics { latency: MeasureAt::Client, warmup: Duration::ZERO, share_interval: one_second(), exact: false }
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics { latency_at: MeasureAt::Client, warmup: 0, share_interval: fulcrum_balance::SECOND, exact: false }
    }
}

impl RawMetrics {
    fn validate(self, src: &Source) -> Result<Metrics, ScenarioError> {
        if self.share_interval.is_zero() {
            return Err(src.error_in("metrics.share_interval", "must be above 0"));
        }
        Ok(Metrics {
            latency_at: self.latency,
            warmup: nanos(self.warmup),
            share_interval: nanos(self.share_interval),
            exact: self.exact,
        })
    }
}

#[derive(Deserialize)]
#[serde(untagged)]
enum ServerRef {
    Index(usize),
    Name(String),
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
enum FailMode {
    Error,
    Timeout,
    Refuse,
}

#[derive(Deserialize)]
#[serde(tag = "action", rename_all = "kebab-case", deny_unknown_fields)]
enum RawEvent {
    Slow {
        #[serde(with = "fulcrum_config::duration")]
        at: Duration,
        server: ServerRef,
        service: Dist,
    },
    Fail {
        #[serde(with = "fulcrum_config::duration")]
        at: Duration,
        server: ServerRef,
        #[serde(default = "error_mode")]
        mode: FailMode,
        after: Option<Dist>,
    },
    Recover {
        #[serde(with = "fulcrum_config::duration")]
        at: Duration,
        server: ServerRef,
    },
    Join {
        #[serde(with = "fulcrum_config::duration")]
        at: Duration,
        server: ServerRef,
    },
    Leave {
        #[serde(with = "fulcrum_config::duration")]
        at: Duration,
        server: ServerRef,
    },
}

fn error_mode() -> FailMode {
    FailMode::Error
}

impl RawEvent {
    /// The event, its server found among `servers`; `at` names it
    /// (`events[i]`). A timeout needs the balancers' timeout.
    fn validate(
        &self,
        at: &str,
        servers: &[Server],
        balancers: &Balancers,
        src: &Source,
    ) -> Result<Event, ScenarioError> {
        let field = |f: &str| format!("{at}.{f}");
        let (time, server, action) = match self {
            RawEvent::Slow { at, server, service } => (at, server, Action::Slow(service.clone())),
            RawEvent::Fail { at, server, mode, after } => {
                let action = match mode {
                    FailMode::Error => Action::Fail(Some(after.clone().unwrap_or(Dist::Fixed(0)))),
                    FailMode::Timeout | FailMode::Refuse if after.is_some() => {
                        return Err(src.error_in(&field("after"), "applies to mode = \"error\" only"))
                    }
                    FailMode::Timeout if balancers.timeout.is_none() => {
                        return Err(src.error_in(
                            &field("mode"),
                            "a failure by timeout needs balancers.timeout (else nothing ends the request)",
                        ))
                    }
                    FailMode::Timeout => Action::Fail(None),
                    FailMode::Refuse => Action::Refuse,
                };
                (at, server, action)
            }
            RawEvent::Recover { at, server } => (at, server, Action::Recover),
            RawEvent::Join { at, server } => (at, server, Action::Join),
            RawEvent::Leave { at, server } => (at, server, Action::Leave),
        };
        let index = match server {
            ServerRef::Index(k) if *k < servers.len() => *k,
            ServerRef::Index(k) => {
                return Err(src.error_in(
                    &field("server"),
                    format!("{k} is out of range (there are {} servers, 0..{})", servers.len(), servers.len() - 1),
                ))
            }
            ServerRef::Name(name) => servers
                .iter()
                .position(|s| &s.name == name)
                .ok_or_else(|| src.error_in(&field("server"), format!("{name:?} names no server")))?,
        };
        Ok(Event { at: nanos(*time), server: index, action })
    }
}

/// The `[[algorithm]]` tables: one per kind, each buildable over the servers.
fn algorithm_tables(raw: &[AlgorithmConfig], servers: &[Server], src: &Source) -> Result<(), ScenarioError> {
    let endpoints: Vec<Endpoint> = servers
        .iter()
        .enumerate()
        .map(|(i, s)| Endpoint::new(i as u64, s.name.clone()).with_weight(s.weight))
        .collect();
    for (i, config) in raw.iter().enumerate() {
        let at = format!("algorithm[{i}]");
        if raw[..i].iter().any(|c| c.kind() == config.kind()) {
            return Err(src.error_in(&at, format!("a second [[algorithm]] of kind {}", config.kind())));
        }
        fulcrum_balance::build(config, &endpoints, 0)
            .map_err(|e| src.error_in(&at, format!("{}: {e}", config.kind())))?;
    }
    Ok(())
}

/// Outlier detection, slow start and retries, each checked by its own
/// rules (those of `fulcrum_resilience`, as in the proxy), and the panic threshold.
fn resilience(
    outlier_detection: Option<OutlierConfig>,
    slow_start: Option<SlowStartConfig>,
    retries: Option<RetryPolicy>,
    panic_threshold: Option<f64>,
    src: &Source,
) -> Result<Resilience, ScenarioError> {
    if let Some(o) = &outlier_detection {
        o.validate().map_err(|m| src.error_from("outlier_detection", &m))?;
    }
    if let Some(s) = &slow_start {
        SlowStart::new(s).map_err(|m| src.error_from("slow_start", &m))?;
    }
    if let Some(r) = &retries {
        r.validate().map_err(|e| src.error_in(&format!("retries.{}", e.field), e.message))?;
        // Without a per-try timeout a try ends only at the request's
        // deadline, which ends the request too: nothing left to retry.
        if r.conditions.contains(&RetryOn::Timeout) && r.per_try_timeout.is_none() {
            return Err(src.error_in("retries.on", "has \"timeout\", which needs retries.per_try_timeout"));
        }
    }
    let panic_threshold = match panic_threshold {
        None => 50.0,
        Some(p) if (0.0..=100.0).contains(&p) => p,
        Some(p) => return Err(src.error_in("panic_threshold", format!("{p} must be a percentage in 0..=100"))),
    };
    Ok(Resilience { outlier_detection, slow_start, retries, panic_threshold, health_check: None, rate_limit: None })
}

/// The rate limit in front of the cluster, by the proxy's rules; simulated
/// requests carry no headers, so a limit is for all or per client.
fn rate_limit(limit: Option<RateLimitConfig>, src: &Source) -> Result<Option<RateLimitConfig>, ScenarioError> {
    if let Some(l) = &limit {
        l.validate().map_err(|m| src.error_in("rate_limit", m))?;
        if let Some(LimitKey::Header(_)) = l.key {
            return Err(src.error_in("rate_limit.key", "simulated requests have no headers: use key = \"client\""));
        }
    }
    Ok(limit)
}

impl Scenario {
    /// Read and validate the scenario at `path`. Relative `empirical` files
    /// are resolved against the scenario's directory.
    pub fn load(path: &Path) -> Result<Scenario, ScenarioError> {
        Scenario::load_with(path, &[])
    }

    /// [`Scenario::load`] with `sets` (`KEY=VALUE`, the `--set` of
    /// `fulcrum sim`) applied to the file's document before it is read:
    /// see `fulcrum_config::document`.
    pub fn load_with(path: &Path, sets: &[String]) -> Result<Scenario, ScenarioError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ScenarioError::new(path, "(file)", format!("cannot read scenario: {e}")))?;
        let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "scenario".into());
        let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
        Scenario::read(&text, path, sets, &stem, &base)
    }

    /// Parse scenario `text`; `origin` names it in errors, `default_name`
    /// is used when the file has no `name`, relative `empirical` files are
    /// resolved against `base_dir`.
    pub fn parse(text: &str, origin: &str, default_name: &str, base_dir: &Path) -> Result<Scenario, ScenarioError> {
        Scenario::read(text, Path::new(origin), &[], default_name, base_dir)
    }

    /// [`Scenario::parse`] with `sets` applied to the document first, as
    /// [`Scenario::load_with`] does for a file.
    pub fn parse_with(
        text: &str,
        origin: &Path,
        sets: &[String],
        default_name: &str,
        base_dir: &Path,
    ) -> Result<Scenario, ScenarioError> {
        Scenario::read(text, origin, sets, default_name, base_dir)
    }

    fn read(
        text: &str,
        file: &Path,
        sets: &[String],
        default_name: &str,
        base_dir: &Path,
    ) -> Result<Scenario, ScenarioError> {
        let (scenario, inputs) =
            fulcrum_config::Inputs::record(|| Scenario::resolve(text, file, sets, default_name, base_dir));
        Ok(Scenario { inputs, ..scenario? })
    }

    fn resolve(
        text: &str,
        file: &Path,
        sets: &[String],
        default_name: &str,
        base_dir: &Path,
    ) -> Result<Scenario, ScenarioError> {
        let (raw, src): (RawScenario, Source) = with_base_dir(base_dir, || fulcrum_config::parse(file, text, sets))?;
        let clients = raw.clients.validate(&src, base_dir)?;
        let network = raw.network.validate();
        let servers = servers(&raw.servers, &src)?;
        let balancers = raw.balancers.validate(&src)?;
        let metrics = raw.metrics.validate(&src)?;
        let mut events = Vec::with_capacity(raw.events.len());
        for (i, e) in raw.events.iter().enumerate() {
            events.push(e.validate(&format!("events[{i}]"), &servers, &balancers, &src)?);
        }
        // Stable: events at the same time keep file order.
        events.sort_by_key(|e| e.at);
        algorithm_tables(&raw.algorithm, &servers, &src)?;
        let mut resilience = resilience(raw.outlier_detection, raw.slow_start, raw.retries, raw.panic_threshold, &src)?;
        resilience.rate_limit = rate_limit(raw.rate_limit, &src)?;
        if raw.algorithms.is_empty() {
            return Err(src.error_in("algorithms", "the list is empty"));
        }
        let mut scenario = Scenario {
            name: raw.name.unwrap_or_else(|| default_name.to_string()),
            description: raw.description,
            seed: raw.seed,
            algorithms: Vec::new(),
            overrides: raw.algorithm,
            clients,
            network,
            servers,
            balancers,
            metrics,
            events,
            resilience,
            inputs: fulcrum_config::Inputs::default(),
        };
        scenario.algorithms = raw.algorithms.iter().map(|k| scenario.config_for(k.0)).collect();
        Ok(scenario)
    }

    /// The configuration of `kind` in this scenario: its `[[algorithm]]`
    /// table if it has one, the defaults otherwise.
    pub fn config_for(&self, kind: AlgorithmKind) -> AlgorithmConfig {
        self.overrides.iter().find(|c| c.kind() == kind).cloned().unwrap_or_else(|| kind.default_config())
    }

    /// Requests the clients will send in all, when that is fixed by counts.
    pub fn total_requests(&self) -> Option<u64> {
        let c = &self.clients;
        match (&c.arrivals, c.requests, c.duration) {
            (Arrivals::Trace(t), n, None) => {
                // Client i sends lines i, i + count, …, up to n of them.
                let (rows, count) = (t.len() as u64, u64::from(c.count));
                Some((0..count.min(rows)).map(|i| ((rows - i).div_ceil(count)).min(n.unwrap_or(u64::MAX))).sum())
            }
            (_, Some(n), None) => Some(n * c.count as u64),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
[clients]
loop = "open"
interval = "100ms"
requests = 10

[[servers]]
count = 3
service = "5ms"
"#;

    fn parse(text: &str) -> Result<Scenario, String> {
        Scenario::parse(text, "t.toml", "t", Path::new(".")).map_err(|e| e.to_string())
    }

    #[test]
    fn minimal_scenario_has_defaults() {
        let s = parse(MINIMAL).unwrap();
        assert_eq!(s.name, "t");
        assert_eq!(s.servers.len(), 3);
        assert_eq!(s.servers[2].name, "10.0.0.3:80");
        assert_eq!(s.clients.arrivals, Arrivals::Fixed(100_000_000));
        assert_eq!(s.algorithms.len(), 3);
        assert_eq!(s.balancers.count, 1);
        assert_eq!(s.total_requests(), Some(10));
        assert!(!s.metrics.exact, "bounded latency memory unless asked");
        let exact = parse(&format!("{MINIMAL}\n[metrics]\nexact = true\n")).unwrap();
        assert!(exact.metrics.exact);
    }

    fn error(text: &str, sets: &[&str]) -> ScenarioError {
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        Scenario::read(text, Path::new("t.toml"), &sets, "t", Path::new(".")).map(|_| ()).unwrap_err()
    }

    /// (line, column, field) of the error `text` (with `sets`) gets.
    fn located(text: &str, sets: &[&str]) -> (usize, usize, String) {
        let e = error(text, sets);
        assert!(e.to_string().starts_with(&format!("t.toml:{}:{}: {}: ", e.line, e.column, e.field)), "{e}");
        (e.line, e.column, e.field)
    }

    #[test]
    fn a_rate_limit_is_checked_by_the_proxys_rules() {
        let limited = format!("{MINIMAL}\n[rate_limit]\nrate = 100\nkey = \"client\"\n");
        let s = parse(&limited).unwrap();
        assert_eq!(s.resilience.rate_limit.as_ref().map(|l| l.burst()), Some(100));
        assert!(s.resilience.enabled());
        assert_eq!(error(&limited.replace("rate = 100", "rate = -1"), &[]).field, "rate_limit");
        let header = limited.replace("\"client\"", "{ header = \"x\" }");
        assert_eq!(error(&header, &[]).field, "rate_limit.key");
    }

    #[test]
    fn errors_name_file_line_column_and_field() {
        let at = |l: usize, c: usize, f: &str| (l, c, f.to_string());
        assert_eq!(
            located(&MINIMAL.replace("requests = 10", "requests = 10\nburst = 3"), &[]),
            at(6, 1, "clients.burst")
        );
        let uniform = MINIMAL.replace("\"5ms\"", "{ dist = \"uniform\", min = \"9ms\", max = \"1ms\" }");
        assert_eq!(located(&uniform, &[]), at(9, 11, "servers[0].service"));
        assert!(error(&uniform, &[]).message.contains("below min"));
        assert_eq!(located(&MINIMAL.replace("\"100ms\"", "\"100 parsecs\""), &[]), at(4, 12, "clients.interval"));
        let closed = MINIMAL.replace("interval = \"100ms\"", "in_flight = 4");
        assert_eq!(located(&closed, &[]), at(3, 8, "clients.loop"));
        assert!(error(&closed, &[]).message.contains("open loop"));
        assert_eq!(located(&format!("algorithms = [\"fastest\"]\n{MINIMAL}"), &[]), at(1, 14, "algorithms"));
        let event = format!("{MINIMAL}\n[[events]]\nat = \"1s\"\nserver = 7\naction = \"leave\"\n");
        assert_eq!(located(&event, &[]), at(13, 10, "events[0].server"));
        let timeout =
            format!("{MINIMAL}\n[[events]]\nat = \"1s\"\nserver = 0\naction = \"fail\"\nmode = \"timeout\"\n");
        assert_eq!(located(&timeout, &[]), at(15, 8, "events[0].mode"));
        assert!(error(&timeout, &[]).message.contains("balancers.timeout"));
        let maglev = format!("{MINIMAL}\n[[algorithm]]\nkind = \"maglev\"\ntable_size = 100\n");
        assert_eq!(located(&maglev, &[]).2, "algorithm[0]");
        assert!(error(&maglev, &[]).message.contains("prime"));
        assert_eq!(
            located(&MINIMAL.replace("count = 3", "count = 3\nweight = -1"), &[]),
            at(9, 10, "servers[0].weight")
        );
        assert_eq!(located(&MINIMAL.replace("count = 3", "count = 0"), &[]), at(8, 9, "servers[0].count"));
        // Inline and array tables: each value on its own line.
        let inline = "clients = { loop = \"open\", interval = \"1s\",\n  requests = 0 }\n\
                      servers = [\n  { service = \"1ms\" },\n  { service = \"2ms\", concurrency = 0 },\n]\n";
        assert_eq!(located(inline, &[]), at(2, 14, "clients.requests"));
        assert_eq!(located(&inline.replace("requests = 0", "requests = 1"), &[]), at(5, 36, "servers[1].concurrency"));
        let missing = error("[[servers]]\nservice = \"1ms\"\n", &[]);
        assert_eq!(missing.to_string(), "t.toml: missing field `clients`");
    }

    #[test]
    fn set_overrides_fields_and_names_itself_in_errors() {
        let sets = ["clients.requests=20", "servers[0].count=5", "balancers.timeout=250ms", "algorithms=[\"maglev\"]"];
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        let s = Scenario::read(MINIMAL, Path::new("t.toml"), &sets, "t", Path::new(".")).unwrap();
        assert_eq!((s.clients.requests, s.servers.len(), s.balancers.timeout), (Some(20), 5, Some(250_000_000)));
        assert_eq!(s.algorithms, [AlgorithmKind::MAGLEV.default_config()]);
        let e = error(MINIMAL, &["clients.requests=0"]);
        assert_eq!(e.to_string(), "--set clients.requests=0: clients.requests: must be at least 1");
        let e = error(MINIMAL, &["clients.requets=5"]);
        assert!(e.to_string().starts_with("--set clients.requets=5: clients.requets: unknown field `requets`"), "{e}");
        let e = error(MINIMAL, &["servers[0].service=5 parsecs"]);
        assert!(e.to_string().starts_with("--set servers[0].service=5 parsecs: servers[0].service: "), "{e}");
        let e = error(MINIMAL, &["servers.count=5"]);
        assert_eq!((e.set.as_deref(), e.field.as_str()), (Some("servers.count=5"), "servers"), "{e}");
        assert_eq!(error(MINIMAL, &["seed"]).to_string(), "--set seed: (syntax): expected KEY=VALUE");
    }

    #[test]
    fn events_resolve_names_and_sort_by_time() {
        let text = format!(
            "{MINIMAL}\n[[servers]]\nname = \"slow\"\nservice = \"50ms\"\njoined = false\n\
             [[events]]\nat = \"2s\"\nserver = \"slow\"\naction = \"join\"\n\
             [[events]]\nat = \"1s\"\nserver = 0\naction = \"slow\"\nservice = \"20ms\"\n"
        );
        let s = parse(&text).unwrap();
        assert_eq!(s.events[0], Event { at: 1_000_000_000, server: 0, action: Action::Slow(Dist::Fixed(20_000_000)) });
        assert_eq!(s.events[1].server, 3);
        assert!(!s.servers[3].joined);
    }

    #[test]
    fn a_trace_loop_reads_its_file_and_names_it_in_errors() {
        let dir = std::env::temp_dir().join(format!("fulcrum-trace-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("t.csv"), "time,key,size\n0,a,1\n1ms,b,2\n2ms,c,3\n").unwrap();
        std::fs::write(dir.join("bad.csv"), "0,a,1\n1ms,b,2kB\n0,c,3\n").unwrap();
        let text = MINIMAL.replace(
            "loop = \"open\"\ninterval = \"100ms\"\nrequests = 10",
            "count = 2\nloop = \"trace\"\ntrace = \"t.csv\"",
        );
        let read = |text: &str| Scenario::parse(text, "t.toml", "t", &dir).map_err(|e| e.to_string());
        let s = read(&text).unwrap();
        let Arrivals::Trace(t) = &s.clients.arrivals else { panic!("a trace") };
        assert_eq!((t.len(), s.clients.keys, s.total_requests()), (3, Keys::Trace, Some(3)));
        let capped = read(&text.replace("count = 2", "count = 2\nrequests = 1")).unwrap();
        assert_eq!(capped.total_requests(), Some(2));
        let e = read(&text.replace("t.csv", "bad.csv")).unwrap_err();
        assert_eq!(
            e,
            format!(
                "{}:3:1: time: 0 is before the line above (1000000 ns): sort the trace by time",
                dir.join("bad.csv").display()
            )
        );
        let e = read(&text.replace("t.csv", "none.csv")).unwrap_err();
        assert!(e.starts_with("t.toml:5:9: clients.trace: ") && e.contains("none.csv"), "{e}");
        let e = read(&text.replace("count = 2", "count = 2\nrate = 5")).unwrap_err();
        assert!(e.starts_with("t.toml:5:8: clients.loop: a trace gives the request times"), "{e}");
        let e = read(&text.replace("trace = \"t.csv\"", "")).unwrap_err();
        assert!(e.contains("clients.loop: a trace loop needs `trace`"), "{e}");
        let e = read(&MINIMAL.replace("requests = 10", "requests = 10\nkeys = \"trace\"")).unwrap_err();
        assert!(e.contains("clients.keys: \"trace\" needs `loop = \"trace\"`"), "{e}");
        let e = read(&MINIMAL.replace("requests = 10", "requests = 10\ntrace = \"t.csv\"")).unwrap_err();
        assert!(e.contains("clients.trace: needs `loop = \"trace\"`"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn algorithm_tables_override_defaults() {
        let s = parse(&format!(
            "algorithms = [\"PeakEWMA\", \"wrr\"]\n{MINIMAL}\n[[algorithm]]\nkind = \"peak-ewma\"\ndefault_rtt = \"0s\"\n"
        ))
        .unwrap();
        let c = s.algorithms[0].params::<fulcrum_balance::PeakEwmaConfig>().unwrap();
        assert_eq!(c.default_rtt, Duration::ZERO);
        assert_eq!(s.algorithms[1].kind(), AlgorithmKind::ROUND_ROBIN);
    }
}

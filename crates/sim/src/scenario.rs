//! Scenario files: what is simulated, read from TOML and validated on load.
//!
//! A [`Scenario`] names its clients ([`Clients`]), servers ([`Server`]), the
//! network between them ([`Network`]), the balancer instances
//! ([`Balancers`]), where latency is measured ([`Metrics`]), timed
//! [`Event`]s (a server slows down, fails, recovers, joins, leaves), and the
//! algorithms to compare. Every section checks itself while it is read, so a
//! mistake is reported with the file, the line and the field:
//!
//! ```text
//! scenarios/x.toml: TOML parse error at line 7, column 11
//!   |
//! 7 | service = { dist = "uniform", min = "10ms", max = "5ms" }
//!   |           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
//! uniform: max (5ms) is below min (10ms)
//! ```
//!
//! `docs/reference/sim-scenario.md` is the reference of every field.

use std::path::Path;
use std::time::Duration;

use fulcrum_balance::{AlgorithmConfig, AlgorithmKind, Endpoint, Nanos};
use serde::Deserialize;

use crate::resilience::{OutlierSpec, Resilience, RetriesSpec, SlowStartSpec};
use fulcrum_workload::dist::{nanos, with_base_dir, Dist};

/// A scenario that failed to load: the message names the file and the field.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct ScenarioError(pub String);

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

// ---- the TOML form ----

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
    clients: Clients,
    #[serde(default)]
    network: Network,
    servers: Vec<ServerSpec>,
    #[serde(default)]
    balancers: Balancers,
    #[serde(default)]
    metrics: Metrics,
    #[serde(default)]
    events: Vec<toml::Spanned<EventSpec>>,
    outlier_detection: Option<OutlierSpec>,
    slow_start: Option<SlowStartSpec>,
    retries: Option<RetriesSpec>,
    panic_threshold: Option<f64>,
}

fn default_seed() -> u64 {
    1
}

fn default_algorithms() -> Vec<KindName> {
    [AlgorithmKind::RoundRobin, AlgorithmKind::LeastRequest, AlgorithmKind::PeakEwma].map(KindName).to_vec()
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
    #[serde(default = "random_keys")]
    keys: Keys,
}

fn one() -> u32 {
    1
}

fn random_keys() -> Keys {
    Keys::Random
}

impl<'de> Deserialize<'de> for Clients {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let r = RawClients::deserialize(d)?;
        if r.count == 0 {
            return Err(D::Error::custom("clients.count must be at least 1"));
        }
        let arrivals = match (r.loop_kind, r.interval, r.rate, r.in_flight) {
            (LoopKind::Open, Some(i), None, None) if !i.is_zero() => Arrivals::Fixed(nanos(i)),
            (LoopKind::Open, None, Some(rate), None) if rate.is_finite() && rate > 0.0 => Arrivals::Poisson(1e9 / rate),
            (LoopKind::Open, ..) => {
                return Err(D::Error::custom(
                    "clients: an open loop needs exactly one of `interval` (a duration > 0) or `rate` \
                     (requests per second per client, > 0), and no `in_flight`",
                ))
            }
            (LoopKind::Closed, None, None, Some(n)) if n > 0 => Arrivals::Closed(n),
            (LoopKind::Closed, ..) => {
                return Err(D::Error::custom(
                    "clients: a closed loop needs `in_flight` (requests each client keeps in flight, ≥ 1) \
                     and no `interval` or `rate`",
                ))
            }
        };
        match (r.requests, r.duration) {
            (None, None) => return Err(D::Error::custom("clients: give `requests` (per client) or `duration`")),
            (Some(0), _) => return Err(D::Error::custom("clients.requests must be at least 1")),
            (_, Some(d)) if d.is_zero() => return Err(D::Error::custom("clients.duration must be above 0")),
            _ => {}
        }
        Ok(Clients {
            count: r.count,
            arrivals,
            requests: r.requests,
            duration: r.duration.map(nanos),
            start: nanos(r.start),
            stagger: nanos(r.stagger),
            connect: r.connect,
            keys: r.keys,
        })
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNetwork {
    client_lb: Option<Dist>,
    lb_server: Option<Dist>,
    first_contact: Option<Dist>,
}

impl Default for Network {
    fn default() -> Self {
        Network { client_lb: Dist::Fixed(0), lb_server: Dist::Fixed(0), first_contact: Dist::Fixed(0) }
    }
}

impl<'de> Deserialize<'de> for Network {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let r = RawNetwork::deserialize(d)?;
        let zero = || Dist::Fixed(0);
        Ok(Network {
            client_lb: r.client_lb.unwrap_or_else(zero),
            lb_server: r.lb_server.unwrap_or_else(zero),
            first_contact: r.first_contact.unwrap_or_else(zero),
        })
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ServerSpec {
    count: Option<u32>,
    name: Option<String>,
    names: Option<Vec<String>>,
    #[serde(default = "unit_weight")]
    weight: f64,
    service: Dist,
    concurrency: Option<u32>,
    #[serde(default = "yes")]
    joined: bool,
    cold: Option<ColdSpec>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCold {
    factor: f64,
    #[serde(with = "fulcrum_config::duration")]
    duration: Duration,
}

struct ColdSpec(Cold);

impl<'de> Deserialize<'de> for ColdSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let r = RawCold::deserialize(d)?;
        if !(r.factor.is_finite() && r.factor >= 1.0) {
            return Err(D::Error::custom(format!("cold.factor = {} must be a finite number ≥ 1", r.factor)));
        }
        if r.duration.is_zero() {
            return Err(D::Error::custom("cold.duration must be above 0"));
        }
        Ok(ColdSpec(Cold { factor: r.factor, duration: nanos(r.duration) }))
    }
}

fn unit_weight() -> f64 {
    1.0
}

fn yes() -> bool {
    true
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBalancers {
    #[serde(default = "one")]
    count: u32,
    #[serde(default, with = "fulcrum_config::duration")]
    timeout: Option<Duration>,
}

impl Default for Balancers {
    fn default() -> Self {
        Balancers { count: 1, timeout: None }
    }
}

impl<'de> Deserialize<'de> for Balancers {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let r = RawBalancers::deserialize(d)?;
        if r.count == 0 {
            return Err(D::Error::custom("balancers.count must be at least 1"));
        }
        if r.timeout.is_some_and(|t| t.is_zero()) {
            return Err(D::Error::custom("balancers.timeout must be above 0 (leave it out for no timeout)"));
        }
        Ok(Balancers { count: r.count, timeout: r.timeout.map(nanos) })
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

impl Default for Metrics {
    fn default() -> Self {
        Metrics { latency_at: MeasureAt::Client, warmup: 0, share_interval: fulcrum_balance::SECOND, exact: false }
    }
}

impl<'de> Deserialize<'de> for Metrics {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let r = RawMetrics::deserialize(d)?;
        if r.share_interval.is_zero() {
            return Err(serde::de::Error::custom("metrics.share_interval must be above 0"));
        }
        Ok(Metrics {
            latency_at: r.latency,
            warmup: nanos(r.warmup),
            share_interval: nanos(r.share_interval),
            exact: r.exact,
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
enum EventSpec {
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

/// Line (1-based) of byte `offset` in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].bytes().filter(|&b| b == b'\n').count() + 1
}

impl Scenario {
    /// Read and validate the scenario at `path`. Relative `empirical` files
    /// are resolved against the scenario's directory.
    pub fn load(path: &Path) -> Result<Scenario, ScenarioError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ScenarioError(format!("{}: cannot read scenario: {e}", path.display())))?;
        let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "scenario".into());
        let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
        Scenario::parse(&text, &path.display().to_string(), &stem, &base)
    }

    /// Parse scenario `text`; `origin` prefixes error messages, `default_name`
    /// is used when the file has no `name`.
    pub fn parse(text: &str, origin: &str, default_name: &str, base_dir: &Path) -> Result<Scenario, ScenarioError> {
        let fail = |msg: String| ScenarioError(format!("{origin}: {msg}"));
        let raw: RawScenario =
            with_base_dir(base_dir, || toml::from_str(text)).map_err(|e| fail(e.to_string().trim_end().to_string()))?;

        let mut servers = Vec::new();
        for (i, spec) in raw.servers.iter().enumerate() {
            if !(spec.weight.is_finite() && spec.weight > 0.0) {
                return Err(fail(format!("servers[{i}].weight = {} must be a finite number above 0", spec.weight)));
            }
            let count = match (&spec.names, spec.count) {
                (Some(_), _) if spec.name.is_some() => {
                    return Err(fail(format!("servers[{i}]: give `name` or `names`, not both")))
                }
                (Some(names), None) if !names.is_empty() => names.len() as u32,
                (Some(names), Some(c)) if names.len() == c as usize && c > 0 => c,
                (Some(names), _) => {
                    return Err(fail(format!(
                        "servers[{i}].names has {} names; it needs one per server (count) and at least one",
                        names.len()
                    )))
                }
                (None, Some(0)) => return Err(fail(format!("servers[{i}].count must be at least 1"))),
                (None, c) => c.unwrap_or(1),
            };
            if spec.concurrency == Some(0) {
                return Err(fail(format!("servers[{i}].concurrency must be at least 1 (leave it out for unlimited)")));
            }
            for k in 0..count {
                let n = servers.len();
                let name = match (&spec.name, &spec.names) {
                    (_, Some(names)) => names[k as usize].clone(),
                    (Some(name), _) if count == 1 => name.clone(),
                    (Some(name), _) => format!("{name}-{k}"),
                    (None, None) => format!("10.0.{}.{}:80", n / 250, n % 250 + 1),
                };
                servers.push(Server {
                    name,
                    weight: spec.weight,
                    service: spec.service.clone(),
                    concurrency: spec.concurrency,
                    joined: spec.joined,
                    cold: spec.cold.as_ref().map(|c| c.0),
                });
            }
        }
        if servers.is_empty() {
            return Err(fail("servers: at least one [[servers]] entry is needed".into()));
        }
        for (i, a) in servers.iter().enumerate() {
            if let Some(j) = servers[..i].iter().position(|b| b.name == a.name) {
                return Err(fail(format!("servers {j} and {i} are both named {:?}; names must be unique", a.name)));
            }
        }

        let mut events = Vec::new();
        for (i, spanned) in raw.events.iter().enumerate() {
            let line = line_of(text, spanned.span().start);
            let (at, server, action) = match spanned.get_ref() {
                EventSpec::Slow { at, server, service } => (at, server, Action::Slow(service.clone())),
                EventSpec::Fail { at, server, mode, after } => {
                    let action = match mode {
                        FailMode::Error => Action::Fail(Some(after.clone().unwrap_or(Dist::Fixed(0)))),
                        FailMode::Timeout => {
                            if after.is_some() {
                                return Err(fail(format!(
                                    "line {line}: events[{i}].after applies to mode = \"error\" only"
                                )));
                            }
                            if raw.balancers.timeout.is_none() {
                                return Err(fail(format!(
                                    "line {line}: events[{i}] fails with mode = \"timeout\", which needs \
                                     balancers.timeout"
                                )));
                            }
                            Action::Fail(None)
                        }
                        FailMode::Refuse => {
                            if after.is_some() {
                                return Err(fail(format!(
                                    "line {line}: events[{i}].after applies to mode = \"error\" only"
                                )));
                            }
                            Action::Refuse
                        }
                    };
                    (at, server, action)
                }
                EventSpec::Recover { at, server } => (at, server, Action::Recover),
                EventSpec::Join { at, server } => (at, server, Action::Join),
                EventSpec::Leave { at, server } => (at, server, Action::Leave),
            };
            let index = match server {
                ServerRef::Index(k) if *k < servers.len() => *k,
                ServerRef::Index(k) => {
                    return Err(fail(format!(
                        "line {line}: events[{i}].server = {k} is out of range (there are {} servers, 0..{})",
                        servers.len(),
                        servers.len() - 1
                    )))
                }
                ServerRef::Name(name) => servers
                    .iter()
                    .position(|s| &s.name == name)
                    .ok_or_else(|| fail(format!("line {line}: events[{i}].server = {name:?} names no server")))?,
            };
            events.push(Event { at: nanos(*at), server: index, action });
        }
        // Stable: events at the same time keep file order.
        events.sort_by_key(|e| e.at);

        let endpoints: Vec<Endpoint> = servers
            .iter()
            .enumerate()
            .map(|(i, s)| Endpoint::new(i as u64, s.name.clone()).with_weight(s.weight))
            .collect();
        for (i, config) in raw.algorithm.iter().enumerate() {
            if raw.algorithm[..i].iter().any(|c| c.kind() == config.kind()) {
                return Err(fail(format!("algorithm[{i}]: a second [[algorithm]] of kind {}", config.kind())));
            }
            fulcrum_balance::build(config, &endpoints, 0)
                .map_err(|e| fail(format!("algorithm[{i}] ({}): {e}", config.kind())))?;
        }
        let resilience = Resilience {
            outlier_detection: raw.outlier_detection.map(|o| o.0),
            slow_start: raw.slow_start.map(|s| s.0),
            retries: raw.retries.map(|r| r.0),
            panic_threshold: match raw.panic_threshold {
                None => 50.0,
                Some(p) if (0.0..=100.0).contains(&p) => p,
                Some(p) => return Err(fail(format!("panic_threshold = {p} must be a percentage in 0..=100"))),
            },
            health_check: None,
        };
        let mut scenario = Scenario {
            name: raw.name.unwrap_or_else(|| default_name.to_string()),
            description: raw.description,
            seed: raw.seed,
            algorithms: Vec::new(),
            overrides: raw.algorithm,
            clients: raw.clients,
            network: raw.network,
            servers,
            balancers: raw.balancers,
            metrics: raw.metrics,
            events,
            resilience,
        };
        if raw.algorithms.is_empty() {
            return Err(fail("algorithms: the list is empty".into()));
        }
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
        match (self.clients.requests, self.clients.duration) {
            (Some(n), None) => Some(n * self.clients.count as u64),
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
        Scenario::parse(text, "t.toml", "t", Path::new(".")).map_err(|e| e.0)
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

    #[test]
    fn errors_name_file_line_and_field() {
        let err = parse(&MINIMAL.replace("requests = 10", "requests = 10\nburst = 3")).unwrap_err();
        assert!(err.starts_with("t.toml:") && err.contains("burst") && err.contains("line"), "{err}");
        let err =
            parse(&MINIMAL.replace("\"5ms\"", "{ dist = \"uniform\", min = \"9ms\", max = \"1ms\" }")).unwrap_err();
        assert!(err.contains("line 9") && err.contains("below min"), "{err}");
        let err = parse(&MINIMAL.replace("interval = \"100ms\"", "in_flight = 4")).unwrap_err();
        assert!(err.contains("open loop") && err.contains("line"), "{err}");
        let err = parse(&format!("algorithms = [\"fastest\"]\n{MINIMAL}")).unwrap_err();
        assert!(err.contains("fastest") && err.contains("line 1"), "{err}");
        let err = parse(&format!("{MINIMAL}\n[[events]]\nat = \"1s\"\nserver = 7\naction = \"leave\"\n")).unwrap_err();
        assert!(err.contains("line 11") && err.contains("events[0].server = 7"), "{err}");
        let err =
            parse(&format!("{MINIMAL}\n[[events]]\nat = \"1s\"\nserver = 0\naction = \"fail\"\nmode = \"timeout\"\n"))
                .unwrap_err();
        assert!(err.contains("balancers.timeout"), "{err}");
        let err = parse(&format!("{MINIMAL}\n[[algorithm]]\nkind = \"maglev\"\ntable_size = 100\n")).unwrap_err();
        assert!(err.contains("algorithm[0]") && err.contains("prime"), "{err}");
        let err = parse(&MINIMAL.replace("count = 3", "count = 3\nweight = -1")).unwrap_err();
        assert!(err.contains("servers[0].weight"), "{err}");
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
    fn algorithm_tables_override_defaults() {
        let s = parse(&format!(
            "algorithms = [\"PeakEWMA\", \"wrr\"]\n{MINIMAL}\n[[algorithm]]\nkind = \"peak-ewma\"\ndefault_rtt = \"0s\"\n"
        ))
        .unwrap();
        let fulcrum_balance::AlgorithmConfig::PeakEwma(c) = &s.algorithms[0] else { panic!() };
        assert_eq!(c.default_rtt, Duration::ZERO);
        assert_eq!(s.algorithms[1].kind(), AlgorithmKind::RoundRobin);
    }
}

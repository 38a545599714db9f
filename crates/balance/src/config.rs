//! Algorithm configuration shared by the proxy's clusters and the
//! simulator's scenarios, and [`build`], which turns it into a balancer.
//!
//! In TOML an algorithm is a table with a `kind` and that kind's parameters,
//! all optional with Envoy/Linkerd defaults:
//!
//! ```toml
//! [algorithm]
//! kind = "peak-ewma"
//! decay = "10s"
//! default_rtt = "30ms"
//! cold_start = "first-sample"   # or "default-rtt" (tower's start)
//! ```
//!
//! Names are case-insensitive on the command line ([`AlgorithmKind`]'s
//! `FromStr`) and accept the aliases users know: `wrr`, `rr`, `lr`,
//! `p2c`, `peakewma`, `ewma`, `ringhash`, `ketama`, `hrw`.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::registry::{self, Algorithm, AlgorithmFactory, Balancing};
use fulcrum_config::registry::{Config, Typed};

use fulcrum_base::nanos;
use serde::{Deserialize, Serialize};

use crate::maglev::DEFAULT_TABLE_SIZE;
use crate::ring_hash::{DEFAULT_MIN_RING_SIZE, MAX_RING_SIZE};
use crate::{
    Balancer, BuildError, ColdStart, Endpoint, HashFunction, LeastRequest, Maglev, PeakEwma, Random, Rendezvous,
    RingHash, RoundRobin,
};

/// The parameters of an algorithm that has none.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Empty {}

/// Least-request parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LeastRequestConfig {
    /// Candidates drawn per pick (≥ 1; default 2).
    pub choices: usize,
    /// Exponent of `(active + 1)` for unequal weights (≥ 0; default 1.0).
    pub active_request_bias: f64,
}

impl Default for LeastRequestConfig {
    fn default() -> Self {
        LeastRequestConfig { choices: 2, active_request_bias: 1.0 }
    }
}

/// Peak-EWMA parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PeakEwmaConfig {
    /// Decay time constant τ (default 10 s).
    #[serde(with = "fulcrum_config::duration")]
    pub decay: Duration,
    /// Initial estimate of a new endpoint (default 30 ms, as Linkerd).
    #[serde(with = "fulcrum_config::duration")]
    pub default_rtt: Duration,
    /// Smallest latency a failed request counts as (default 250 ms).
    #[serde(with = "fulcrum_config::duration")]
    pub failure_penalty: Duration,
    /// Finagle's start: an endpoint with requests pending but no response
    /// yet costs a huge penalty (default false).
    pub unmeasured_penalty: bool,
    /// Where an estimate starts: `"first-sample"` (default: the first
    /// response's latency replaces `default_rtt`) or `"default-rtt"`
    /// (tower's and Finagle's: samples below `default_rtt` blend in with τ).
    pub cold_start: ColdStart,
}

impl Default for PeakEwmaConfig {
    fn default() -> Self {
        PeakEwmaConfig {
            decay: Duration::from_secs(10),
            default_rtt: Duration::from_millis(30),
            failure_penalty: Duration::from_millis(250),
            unmeasured_penalty: false,
            cold_start: ColdStart::FirstSample,
        }
    }
}

/// Ring-hash parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RingHashConfig {
    /// Smallest ring (default 1024).
    pub min_ring_size: u64,
    /// Largest ring (default and maximum 8,388,608).
    pub max_ring_size: u64,
    /// Hash of the ring points (default xxhash).
    pub hash: HashFunction,
    /// Bounded-load factor ≥ 1.0 (default none).
    pub bounded_load: Option<f64>,
}

impl Default for RingHashConfig {
    fn default() -> Self {
        RingHashConfig {
            min_ring_size: DEFAULT_MIN_RING_SIZE,
            max_ring_size: MAX_RING_SIZE,
            hash: HashFunction::Xxhash,
            bounded_load: None,
        }
    }
}

/// Maglev parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MaglevConfig {
    /// Prime table size (default 65537).
    pub table_size: u64,
    /// Bounded-load factor ≥ 1.0 (default none).
    pub bounded_load: Option<f64>,
}

impl Default for MaglevConfig {
    fn default() -> Self {
        MaglevConfig { table_size: DEFAULT_TABLE_SIZE, bounded_load: None }
    }
}

/// Rendezvous parameters.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RendezvousConfig {
    /// Hash of key and endpoint (default xxhash).
    pub hash: HashFunction,
    /// Bounded-load factor ≥ 1.0 (default none).
    pub bounded_load: Option<f64>,
}

/// The built-in algorithms, in the order reports list them.
pub(crate) const BUILT_IN: [&AlgorithmFactory; 7] = [
    &Typed::<Balancing, RoundRobin>::NEW,
    &Typed::<Balancing, LeastRequest>::NEW,
    &Typed::<Balancing, Random>::NEW,
    &Typed::<Balancing, RingHash>::NEW,
    &Typed::<Balancing, Maglev>::NEW,
    &Typed::<Balancing, Rendezvous>::NEW,
    &Typed::<Balancing, PeakEwma>::NEW,
];

impl Algorithm for RoundRobin {
    const NAME: &'static str = "round-robin";
    const ALIASES: &'static [&'static str] = &["wrr", "rr", "weighted-round-robin"];
    type Config = Empty;
    fn build(_: &Empty, endpoints: &[Endpoint], seed: u64) -> Result<Box<dyn Balancer>, BuildError> {
        Ok(Box::new(RoundRobin::new(endpoints, seed)?))
    }
}

impl Algorithm for Random {
    const NAME: &'static str = "random";
    type Config = Empty;
    fn build(_: &Empty, endpoints: &[Endpoint], seed: u64) -> Result<Box<dyn Balancer>, BuildError> {
        Ok(Box::new(Random::new(endpoints, seed)?))
    }
}

impl Algorithm for LeastRequest {
    const NAME: &'static str = "least-request";
    const ALIASES: &'static [&'static str] = &["lr", "least-loaded", "p2c"];
    type Config = LeastRequestConfig;
    fn build(c: &LeastRequestConfig, endpoints: &[Endpoint], seed: u64) -> Result<Box<dyn Balancer>, BuildError> {
        Ok(Box::new(LeastRequest::new(endpoints, c.choices, c.active_request_bias, seed)?))
    }
}

impl Algorithm for PeakEwma {
    const NAME: &'static str = "peak-ewma";
    const ALIASES: &'static [&'static str] = &["ewma"];
    type Config = PeakEwmaConfig;
    fn build(c: &PeakEwmaConfig, endpoints: &[Endpoint], seed: u64) -> Result<Box<dyn Balancer>, BuildError> {
        Ok(Box::new(PeakEwma::new(
            endpoints,
            nanos(c.decay),
            nanos(c.default_rtt),
            nanos(c.failure_penalty),
            c.unmeasured_penalty,
            c.cold_start,
            seed,
        )?))
    }
}

impl Algorithm for RingHash {
    const NAME: &'static str = "ring-hash";
    const ALIASES: &'static [&'static str] = &["ketama"];
    type Config = RingHashConfig;
    fn build(c: &RingHashConfig, endpoints: &[Endpoint], seed: u64) -> Result<Box<dyn Balancer>, BuildError> {
        Ok(Box::new(RingHash::new(endpoints, c.min_ring_size, c.max_ring_size, c.hash, c.bounded_load, seed)?))
    }
}

impl Algorithm for Maglev {
    const NAME: &'static str = "maglev";
    type Config = MaglevConfig;
    fn build(c: &MaglevConfig, endpoints: &[Endpoint], seed: u64) -> Result<Box<dyn Balancer>, BuildError> {
        Ok(Box::new(Maglev::new(endpoints, c.table_size, c.bounded_load, seed)?))
    }
}

impl Algorithm for Rendezvous {
    const NAME: &'static str = "rendezvous";
    const ALIASES: &'static [&'static str] = &["hrw"];
    type Config = RendezvousConfig;
    fn build(c: &RendezvousConfig, endpoints: &[Endpoint], seed: u64) -> Result<Box<dyn Balancer>, BuildError> {
        Ok(Box::new(Rendezvous::new(endpoints, c.hash, c.bounded_load, seed)?))
    }
}

/// A registered algorithm, by name, without parameters.
#[derive(Clone, Copy)]
pub struct AlgorithmKind(&'static AlgorithmFactory);

impl AlgorithmKind {
    /// `round-robin`
    pub const ROUND_ROBIN: AlgorithmKind = AlgorithmKind(BUILT_IN[0]);
    /// `least-request`
    pub const LEAST_REQUEST: AlgorithmKind = AlgorithmKind(BUILT_IN[1]);
    /// `random`
    pub const RANDOM: AlgorithmKind = AlgorithmKind(BUILT_IN[2]);
    /// `ring-hash`
    pub const RING_HASH: AlgorithmKind = AlgorithmKind(BUILT_IN[3]);
    /// `maglev`
    pub const MAGLEV: AlgorithmKind = AlgorithmKind(BUILT_IN[4]);
    /// `rendezvous`
    pub const RENDEZVOUS: AlgorithmKind = AlgorithmKind(BUILT_IN[5]);
    /// `peak-ewma`
    pub const PEAK_EWMA: AlgorithmKind = AlgorithmKind(BUILT_IN[6]);

    /// Every registered algorithm: the built-ins in the order reports list
    /// them, then those registered from outside.
    pub fn all() -> Vec<AlgorithmKind> {
        registry::algorithms().into_iter().map(AlgorithmKind).collect()
    }

    /// The canonical configuration name.
    pub fn name(self) -> &'static str {
        self.0.name()
    }

    /// The algorithm with default parameters.
    pub fn default_config(self) -> AlgorithmConfig {
        // Every algorithm's `Config` has a `Default`.
        let params = Config::with_defaults(self.0);
        AlgorithmConfig(params.unwrap_or_else(|| unreachable!("{} has default parameters", self.name())))
    }
}

impl PartialEq for AlgorithmKind {
    fn eq(&self, other: &Self) -> bool {
        self.name() == other.name()
    }
}

impl Eq for AlgorithmKind {}

impl std::hash::Hash for AlgorithmKind {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.name().hash(state)
    }
}

impl fmt::Debug for AlgorithmKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AlgorithmKind({:?})", self.name())
    }
}

impl fmt::Display for AlgorithmKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An algorithm name that is not registered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown algorithm {name:?} (expected one of: {known})")]
pub struct UnknownAlgorithm {
    /// The name as given.
    pub name: String,
    /// The registered names, each with its first alias.
    pub known: String,
}

impl UnknownAlgorithm {
    fn new(name: &str) -> Self {
        UnknownAlgorithm { name: name.to_string(), known: registry::ALGORITHMS.known() }
    }
}

impl FromStr for AlgorithmKind {
    type Err = UnknownAlgorithm;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        registry::lookup(s).map(AlgorithmKind).ok_or_else(|| UnknownAlgorithm::new(s))
    }
}

/// One algorithm with its parameters: in TOML, a table with its `kind`
/// and the parameters that kind's [`Algorithm::Config`] reads.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct AlgorithmConfig(pub(crate) Config<Balancing>);

impl AlgorithmConfig {
    /// `A` with `config` (`A` need not be registered).
    pub fn new<A: Algorithm>(config: A::Config) -> Self {
        // An algorithm checks its parameters when built ([`Self::validate`]).
        AlgorithmConfig(Config::new::<A>(config).unwrap_or_else(|_| unreachable!("algorithms have no separate check")))
    }

    /// Which algorithm this configures.
    pub fn kind(&self) -> AlgorithmKind {
        AlgorithmKind(self.0.factory())
    }

    /// The parameters, when they are a `T` (the algorithm's `Config`).
    pub fn params<T: 'static>(&self) -> Option<&T> {
        self.0.params()
    }

    /// The parameters to change, when they are a `T`.
    pub fn params_mut<T: 'static>(&mut self) -> Option<&mut T> {
        self.0.params_mut()
    }

    /// Build the balancer once to check every parameter.
    pub fn validate(&self) -> Result<(), BuildError> {
        build(self, &[], 0).map(|_| ())
    }
}

/// Build the balancer `config` describes over `endpoints`, its RNG seeded
/// with `seed`.
pub fn build(config: &AlgorithmConfig, endpoints: &[Endpoint], seed: u64) -> Result<Box<dyn Balancer>, BuildError> {
    config.0.build((endpoints, seed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{EndpointLoad, EndpointTable};

    #[derive(Deserialize)]
    struct Doc {
        algorithm: AlgorithmConfig,
    }

    fn parse(s: &str) -> Result<AlgorithmConfig, toml::de::Error> {
        toml::from_str::<Doc>(s).map(|d| d.algorithm)
    }

    #[test]
    fn toml_with_defaults_and_parameters() {
        assert_eq!(parse("[algorithm]\nkind = \"maglev\"").unwrap(), AlgorithmKind::MAGLEV.default_config());
        let pe = parse("[algorithm]\nkind = \"peak-ewma\"\ndecay = \"5s\"\ndefault_rtt = \"0ms\"").unwrap();
        let c = pe.params::<PeakEwmaConfig>().unwrap();
        assert_eq!((c.decay, c.default_rtt), (Duration::from_secs(5), Duration::ZERO));
        assert_eq!(parse("[algorithm]\nkind = \"wrr\"").unwrap().kind(), AlgorithmKind::ROUND_ROBIN);
    }

    #[test]
    fn toml_errors_name_the_field() {
        let err = parse("[algorithm]\nkind = \"maglev\"\ntable_sise = 7").unwrap_err().to_string();
        assert!(err.contains("table_sise"), "{err}");
        let err = parse("[algorithm]\nkind = \"fastest\"").unwrap_err().to_string();
        assert!(err.contains("fastest"), "{err}");
        let err = parse("[algorithm]\nkind = \"round-robin\"\nchoices = 3").unwrap_err().to_string();
        assert!(err.contains("choices"), "{err}");
    }

    #[test]
    fn names_and_aliases_are_case_insensitive() {
        for (s, k) in [
            ("WRR", AlgorithmKind::ROUND_ROBIN),
            ("LR", AlgorithmKind::LEAST_REQUEST),
            ("PeakEWMA", AlgorithmKind::PEAK_EWMA),
            ("RingHash", AlgorithmKind::RING_HASH),
            ("Maglev", AlgorithmKind::MAGLEV),
            ("rendezvous", AlgorithmKind::RENDEZVOUS),
            ("Random", AlgorithmKind::RANDOM),
        ] {
            assert_eq!(s.parse::<AlgorithmKind>(), Ok(k), "{s}");
        }
        for k in AlgorithmKind::all() {
            assert_eq!(k.name().parse::<AlgorithmKind>(), Ok(k));
            assert_eq!(k.default_config().kind(), k);
            assert_eq!(build(&k.default_config(), &[], 0).unwrap().name(), k.name());
        }
        assert!("fastest".parse::<AlgorithmKind>().unwrap_err().to_string().contains("fastest"));
    }

    #[test]
    fn validate_reports_bad_parameters() {
        let bad = AlgorithmConfig::new::<Maglev>(MaglevConfig { table_size: 100, bounded_load: None });
        assert_eq!(bad.validate(), Err(BuildError::TableSizeNotPrime(100)));
    }

    #[test]
    fn serializes_kind_first_then_parameters_in_order() {
        let mut c = AlgorithmKind::PEAK_EWMA.default_config();
        c.params_mut::<PeakEwmaConfig>().unwrap().decay = Duration::from_secs(5);
        let text = toml::to_string(&c).unwrap();
        assert!(text.starts_with("kind = \"peak-ewma\"\ndecay = \"5s\"\ndefault_rtt"), "{text}");
        assert_eq!(toml::from_str::<AlgorithmConfig>(&text).unwrap(), c);
    }

    /// An algorithm from outside the crate: registered once, then known
    /// by name and alias, with its own parameters.
    #[derive(Debug)]
    struct First(EndpointTable<()>);

    #[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct FirstConfig {
        offset: usize,
    }

    impl Algorithm for First {
        const NAME: &'static str = "first-test";
        const ALIASES: &'static [&'static str] = &["ft"];
        type Config = FirstConfig;
        fn build(_: &FirstConfig, endpoints: &[Endpoint], _: u64) -> Result<Box<dyn Balancer>, BuildError> {
            Ok(Box::new(First(EndpointTable::new(endpoints, |_| ())?)))
        }
    }

    impl Balancer for First {
        fn name(&self) -> &'static str {
            "first-test"
        }
        fn pick(&mut self, _: crate::Nanos, _: Option<u64>) -> Option<crate::Ticket> {
            (!self.0.is_empty()).then(|| self.0.issue(0))
        }
        fn on_complete(&mut self, ticket: crate::Ticket, _: crate::Nanos, _: crate::Outcome) {
            self.0.settle(&ticket);
        }
        fn on_cancel(&mut self, ticket: crate::Ticket) {
            self.0.settle(&ticket);
        }
        fn set_endpoints(&mut self, endpoints: &[Endpoint]) -> Result<(), BuildError> {
            self.0.replace(endpoints, |_| ())
        }
        fn endpoints(&self) -> &[Endpoint] {
            self.0.endpoints()
        }
        fn loads(&self, _: crate::Nanos) -> Vec<EndpointLoad> {
            self.0.loads()
        }
    }

    #[test]
    fn an_outside_algorithm_registers_by_name() {
        crate::register::<First>().unwrap();
        assert_eq!(crate::register::<First>(), Err(crate::NameTaken("first-test".into())));
        let c = parse("[algorithm]\nkind = \"FT\"\noffset = 3").unwrap();
        assert_eq!(c.kind(), "first-test".parse().unwrap());
        assert_eq!(c.params::<FirstConfig>(), Some(&FirstConfig { offset: 3 }));
        let err = parse("[algorithm]\nkind = \"ft\"\noffst = 3").unwrap_err().to_string();
        assert!(err.contains("first-test: unknown field `offst`"), "{err}");
        let mut b = build(&c, &[Endpoint::new(7, "a")], 0).unwrap();
        let t = b.pick(0, None).unwrap();
        assert_eq!((t.endpoint(), b.loads(0)[0].active), (crate::EndpointId(7), 1));
        b.on_cancel(t);
        assert!(AlgorithmKind::all().contains(&c.kind()));
        let err = "nope".parse::<AlgorithmKind>().unwrap_err().to_string();
        assert!(err.contains("round-robin (wrr)") && err.contains("first-test (ft)"), "{err}");
        assert!(crate::registry::register_factory(BUILT_IN[4]).is_err());
    }
}

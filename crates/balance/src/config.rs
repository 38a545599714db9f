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

use fulcrum_base::nanos;
use serde::{Deserialize, Serialize};

use crate::endpoints::EndpointTable;
use crate::maglev::DEFAULT_TABLE_SIZE;
use crate::ring_hash::{DEFAULT_MIN_RING_SIZE, MAX_RING_SIZE};
use crate::{
    Balancer, BuildError, ColdStart, Endpoint, EndpointLoad, HashFunction, LeastRequest, Maglev, PeakEwma, Random,
    Rendezvous, RingHash, RoundRobin,
};

/// One algorithm with its parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum AlgorithmConfig {
    /// Round robin, EDF-weighted when weights differ.
    #[serde(alias = "wrr", alias = "rr", alias = "weighted-round-robin")]
    RoundRobin(Empty),
    /// Uniform or weighted random.
    Random(Empty),
    /// Power of *d* choices on active requests.
    #[serde(alias = "lr", alias = "least-loaded", alias = "p2c")]
    LeastRequest(LeastRequestConfig),
    /// Peak-EWMA latency with power of two choices.
    #[serde(alias = "peakewma", alias = "ewma")]
    PeakEwma(PeakEwmaConfig),
    /// Ketama ring hash.
    #[serde(alias = "ringhash", alias = "ketama")]
    RingHash(RingHashConfig),
    /// Maglev table.
    Maglev(MaglevConfig),
    /// Highest random weight.
    #[serde(alias = "hrw")]
    Rendezvous(RendezvousConfig),
}

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

/// The algorithms by name, without parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AlgorithmKind {
    /// `round-robin`
    RoundRobin,
    /// `random`
    Random,
    /// `least-request`
    LeastRequest,
    /// `peak-ewma`
    PeakEwma,
    /// `ring-hash`
    RingHash,
    /// `maglev`
    Maglev,
    /// `rendezvous`
    Rendezvous,
}

impl AlgorithmKind {
    /// Every algorithm, in the order reports list them.
    pub const ALL: [AlgorithmKind; 7] = [
        AlgorithmKind::RoundRobin,
        AlgorithmKind::LeastRequest,
        AlgorithmKind::Random,
        AlgorithmKind::RingHash,
        AlgorithmKind::Maglev,
        AlgorithmKind::Rendezvous,
        AlgorithmKind::PeakEwma,
    ];

    /// The canonical configuration name.
    pub fn name(self) -> &'static str {
        match self {
            AlgorithmKind::RoundRobin => "round-robin",
            AlgorithmKind::Random => "random",
            AlgorithmKind::LeastRequest => "least-request",
            AlgorithmKind::PeakEwma => "peak-ewma",
            AlgorithmKind::RingHash => "ring-hash",
            AlgorithmKind::Maglev => "maglev",
            AlgorithmKind::Rendezvous => "rendezvous",
        }
    }

    /// The algorithm with default parameters.
    pub fn default_config(self) -> AlgorithmConfig {
        match self {
            AlgorithmKind::RoundRobin => AlgorithmConfig::RoundRobin(Empty {}),
            AlgorithmKind::Random => AlgorithmConfig::Random(Empty {}),
            AlgorithmKind::LeastRequest => AlgorithmConfig::LeastRequest(LeastRequestConfig::default()),
            AlgorithmKind::PeakEwma => AlgorithmConfig::PeakEwma(PeakEwmaConfig::default()),
            AlgorithmKind::RingHash => AlgorithmConfig::RingHash(RingHashConfig::default()),
            AlgorithmKind::Maglev => AlgorithmConfig::Maglev(MaglevConfig::default()),
            AlgorithmKind::Rendezvous => AlgorithmConfig::Rendezvous(RendezvousConfig::default()),
        }
    }
}

impl fmt::Display for AlgorithmKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An algorithm name that is not one of ours.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown algorithm {0:?} (expected one of: round-robin (wrr), random, least-request (lr), peak-ewma, ring-hash, maglev, rendezvous)")]
pub struct UnknownAlgorithm(pub String);

impl FromStr for AlgorithmKind {
    type Err = UnknownAlgorithm;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let lower = s.trim().to_ascii_lowercase().replace('_', "-");
        Ok(match lower.as_str() {
            "round-robin" | "roundrobin" | "rr" | "wrr" | "weighted-round-robin" => AlgorithmKind::RoundRobin,
            "random" => AlgorithmKind::Random,
            "least-request" | "leastrequest" | "lr" | "least-loaded" | "p2c" => AlgorithmKind::LeastRequest,
            "peak-ewma" | "peakewma" | "ewma" => AlgorithmKind::PeakEwma,
            "ring-hash" | "ringhash" | "ketama" => AlgorithmKind::RingHash,
            "maglev" => AlgorithmKind::Maglev,
            "rendezvous" | "hrw" => AlgorithmKind::Rendezvous,
            _ => return Err(UnknownAlgorithm(s.to_string())),
        })
    }
}

impl AlgorithmConfig {
    /// Which algorithm this configures.
    pub fn kind(&self) -> AlgorithmKind {
        match self {
            AlgorithmConfig::RoundRobin(_) => AlgorithmKind::RoundRobin,
            AlgorithmConfig::Random(_) => AlgorithmKind::Random,
            AlgorithmConfig::LeastRequest(_) => AlgorithmKind::LeastRequest,
            AlgorithmConfig::PeakEwma(_) => AlgorithmKind::PeakEwma,
            AlgorithmConfig::RingHash(_) => AlgorithmKind::RingHash,
            AlgorithmConfig::Maglev(_) => AlgorithmKind::Maglev,
            AlgorithmConfig::Rendezvous(_) => AlgorithmKind::Rendezvous,
        }
    }

    /// Build the balancer once to check every parameter.
    pub fn validate(&self) -> Result<(), BuildError> {
        build(self, &[], 0).map(|_| ())
    }
}

/// Build the balancer `config` describes over `endpoints`, its RNG seeded
/// with `seed`.
pub fn build(config: &AlgorithmConfig, endpoints: &[Endpoint], seed: u64) -> Result<Box<dyn Balancer>, BuildError> {
    Ok(match config {
        AlgorithmConfig::RoundRobin(_) => Box::new(RoundRobin::new(endpoints, seed)?),
        AlgorithmConfig::Random(_) => Box::new(Random::new(endpoints, seed)?),
        AlgorithmConfig::LeastRequest(c) => {
            Box::new(LeastRequest::new(endpoints, c.choices, c.active_request_bias, seed)?)
        }
        AlgorithmConfig::PeakEwma(c) => Box::new(PeakEwma::new(
            endpoints,
            nanos(c.decay),
            nanos(c.default_rtt),
            nanos(c.failure_penalty),
            c.unmeasured_penalty,
            c.cold_start,
            seed,
        )?),
        AlgorithmConfig::RingHash(c) => {
            Box::new(RingHash::new(endpoints, c.min_ring_size, c.max_ring_size, c.hash, c.bounded_load, seed)?)
        }
        AlgorithmConfig::Maglev(c) => Box::new(Maglev::new(endpoints, c.table_size, c.bounded_load, seed)?),
        AlgorithmConfig::Rendezvous(c) => Box::new(Rendezvous::new(endpoints, c.hash, c.bounded_load, seed)?),
    })
}

/// Loads of an algorithm that keeps no latency estimate.
pub(crate) fn plain_loads<S>(table: &EndpointTable<S>) -> Vec<EndpointLoad> {
    table
        .endpoints()
        .iter()
        .zip(table.slots())
        .map(|(e, s)| EndpointLoad { id: e.id, active: s.active, latency_estimate: None })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize)]
    struct Doc {
        algorithm: AlgorithmConfig,
    }

    fn parse(s: &str) -> Result<AlgorithmConfig, toml::de::Error> {
        toml::from_str::<Doc>(s).map(|d| d.algorithm)
    }

    #[test]
    fn toml_with_defaults_and_parameters() {
        assert_eq!(parse("[algorithm]\nkind = \"maglev\"").unwrap(), AlgorithmKind::Maglev.default_config());
        let pe = parse("[algorithm]\nkind = \"peak-ewma\"\ndecay = \"5s\"\ndefault_rtt = \"0ms\"").unwrap();
        let AlgorithmConfig::PeakEwma(c) = pe else { panic!("{pe:?}") };
        assert_eq!((c.decay, c.default_rtt), (Duration::from_secs(5), Duration::ZERO));
        assert_eq!(parse("[algorithm]\nkind = \"wrr\"").unwrap().kind(), AlgorithmKind::RoundRobin);
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
            ("WRR", AlgorithmKind::RoundRobin),
            ("LR", AlgorithmKind::LeastRequest),
            ("PeakEWMA", AlgorithmKind::PeakEwma),
            ("RingHash", AlgorithmKind::RingHash),
            ("Maglev", AlgorithmKind::Maglev),
            ("rendezvous", AlgorithmKind::Rendezvous),
            ("Random", AlgorithmKind::Random),
        ] {
            assert_eq!(s.parse::<AlgorithmKind>(), Ok(k), "{s}");
        }
        for k in AlgorithmKind::ALL {
            assert_eq!(k.name().parse::<AlgorithmKind>(), Ok(k));
            assert_eq!(k.default_config().kind(), k);
            assert_eq!(build(&k.default_config(), &[], 0).unwrap().name(), k.name());
        }
        assert!("fastest".parse::<AlgorithmKind>().unwrap_err().to_string().contains("fastest"));
    }

    #[test]
    fn validate_reports_bad_parameters() {
        let bad = AlgorithmConfig::Maglev(MaglevConfig { table_size: 100, bounded_load: None });
        assert_eq!(bad.validate(), Err(BuildError::TableSizeNotPrime(100)));
    }
}

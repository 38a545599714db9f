//! Load-balancing algorithms as pure state machines.
//!
//! Every algorithm implements [`Balancer`]: [`Balancer::pick`] chooses an
//! endpoint for a request and returns a [`Ticket`]; the driver hands the ticket
//! back through [`Balancer::on_complete`] (with the observed [`Outcome`]) or
//! [`Balancer::on_cancel`]. Time is a value ([`Nanos`]) passed in by the driver
//! and every balancer owns a seeded [`Rng`], so the same code runs in the
//! discrete-event simulator and on real sockets, and the same seed always gives
//! the same picks.
//!
//! Balancers are built from an [`AlgorithmConfig`] with [`build`]; every
//! algorithm, built-in or from another crate ([`register`]), is an
//! [`Algorithm`] known by name ([`registry`]), and an outside balancer keeps
//! its endpoints and makes its tickets with the public [`EndpointTable`]. Hash-based
//! algorithms ([`RingHash`], [`Maglev`], [`Rendezvous`]) do their expensive
//! work once per endpoint change; picking is cheap. Changing the endpoint set
//! with [`Balancer::set_endpoints`] keeps the state (in-flight counts, latency
//! estimates) of endpoints that remain, and a ticket for an endpoint that has
//! left is ignored.
//!
//! Health checking, outlier ejection and retries live around the algorithm,
//! not inside it, and statistics are kept by the driver.

#![forbid(unsafe_code)]

mod bounded_load;
mod config;
mod edf;
mod endpoints;
mod error;
pub mod hash;
mod least_request;
mod maglev;
mod peak_ewma;
mod random;
pub mod registry;
mod rendezvous;
mod retry;
mod ring_hash;
mod round_robin;

pub use config::{
    build, AlgorithmConfig, AlgorithmKind, Empty, LeastRequestConfig, MaglevConfig, PeakEwmaConfig, RendezvousConfig,
    RingHashConfig, UnknownAlgorithm,
};
pub use endpoints::{EndpointTable, Slot};
pub use error::BuildError;
/// The shared machinery of named extension points.
pub use fulcrum_config::registry::Named;
pub use hash::HashFunction;
pub use least_request::LeastRequest;
pub use maglev::Maglev;
pub use peak_ewma::{ColdStart, PeakEwma};
pub use random::Random;
pub use registry::{register, Algorithm, AlgorithmFactory, NameTaken};
pub use rendezvous::Rendezvous;
pub use retry::{pick_avoiding, retry_key, RETRY_PICKS};
pub use ring_hash::RingHash;
pub use round_robin::RoundRobin;

/// Time, the seeded generator and endpoint ids come from the base crate.
pub use fulcrum_base::{EndpointId, Nanos, Rng, MILLISECOND, SECOND};

/// One upstream the balancer may pick.
#[derive(Clone, Debug, PartialEq)]
pub struct Endpoint {
    /// Stable identity: state follows the id when the set changes.
    pub id: EndpointId,
    /// Relative weight; must be finite and greater than zero.
    pub weight: f64,
    /// The name consistent-hashing algorithms hash (e.g. `10.0.0.1:80`), so
    /// that every node that knows the same names builds the same table.
    pub name: String,
}

impl Endpoint {
    /// An endpoint of weight 1.
    pub fn new(id: u64, name: impl Into<String>) -> Self {
        Endpoint { id: EndpointId(id), weight: 1.0, name: name.into() }
    }

    /// The same endpoint with another weight.
    pub fn with_weight(mut self, weight: f64) -> Self {
        self.weight = weight;
        self
    }
}

/// Proof of a pick, handed back on completion or cancellation.
///
/// It is deliberately neither `Clone` nor `Copy`: a request completes once.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a ticket must be completed or cancelled, or the endpoint's in-flight count leaks"]
pub struct Ticket {
    endpoint: EndpointId,
    slot: u32,
    /// Never zero, so that an `Option<Ticket>` takes no more room than a
    /// ticket (the simulator keeps one per request in flight).
    incarnation: std::num::NonZeroU64,
}

impl Ticket {
    /// The endpoint that was picked.
    pub fn endpoint(&self) -> EndpointId {
        self.endpoint
    }
}

/// What became of a picked request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A response that counts as success, after `latency` nanoseconds.
    Success {
        /// Time from sending the request to the response (headers).
        latency: Nanos,
    },
    /// An error (connect failure, reset, 5xx), after `latency` nanoseconds.
    Failure {
        /// Time from sending the request to the failure.
        latency: Nanos,
    },
}

/// A view of one endpoint's load, for metrics and tests.
#[derive(Clone, Debug, PartialEq)]
pub struct EndpointLoad {
    /// Which endpoint.
    pub id: EndpointId,
    /// Requests picked and not yet completed or cancelled.
    pub active: u32,
    /// The latency estimate in nanoseconds, for algorithms that keep one.
    pub latency_estimate: Option<f64>,
}

/// The interface every algorithm implements.
pub trait Balancer: Send + std::fmt::Debug {
    /// The algorithm's name as used in configuration (`"maglev"`, …).
    fn name(&self) -> &'static str;

    /// Choose an endpoint for a request at time `now`.
    ///
    /// `key` is the request's hash (header, cookie, source address, …) for
    /// hash-based algorithms; they draw a random key when it is `None`. Other
    /// algorithms ignore it. Returns `None` only when there is no endpoint.
    fn pick(&mut self, now: Nanos, key: Option<u64>) -> Option<Ticket>;

    /// The request behind `ticket` finished at `now` with `outcome`.
    fn on_complete(&mut self, ticket: Ticket, now: Nanos, outcome: Outcome);

    /// The request behind `ticket` was abandoned before it produced an outcome.
    fn on_cancel(&mut self, ticket: Ticket);

    /// Replace the endpoint set. Endpoints whose id remains keep their state;
    /// on error nothing changes.
    fn set_endpoints(&mut self, endpoints: &[Endpoint]) -> Result<(), BuildError>;

    /// The current endpoint set, in the order it was given.
    fn endpoints(&self) -> &[Endpoint];

    /// Per-endpoint load as of `now`, in endpoint order.
    fn loads(&self, now: Nanos) -> Vec<EndpointLoad>;
}

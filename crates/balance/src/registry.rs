//! The algorithms by name: every algorithm, built-in or from another crate,
//! is an [`Algorithm`] registered under its name.
//!
//! An algorithm brings its name, its aliases, its own typed parameters
//! ([`Algorithm::Config`], read with serde from its `[algorithm]` table) and
//! a constructor. [`register`] adds one to the process-wide registry, after
//! which an `[algorithm]` table with its `kind` configures it in the proxy's
//! configuration and in the simulator's scenarios alike, and
//! [`crate::AlgorithmKind`]'s `FromStr` finds it. The built-ins are
//! registered the same way.

use std::fmt;

use fulcrum_config::registry::{Config, Extends, Factory, Kind, Registry, Typed};
pub use fulcrum_config::registry::{NameTaken, Params};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::{Balancer, BuildError, Endpoint};

/// An algorithm that can be configured by name.
pub trait Algorithm: 'static {
    /// The canonical name, as `kind` in configuration (`"least-request"`).
    const NAME: &'static str;
    /// Other names accepted for it (`"lr"`); the name without its hyphens
    /// is always accepted, and matching ignores case and `_`/`-`.
    const ALIASES: &'static [&'static str] = &[];
    /// The parameters, as the `[algorithm]` table gives them besides
    /// `kind`; `Default` gives the value of a table with `kind` alone.
    /// Reject unknown fields (`#[serde(deny_unknown_fields)]`).
    type Config: Serialize + DeserializeOwned + Default + Clone + PartialEq + fmt::Debug + Send + Sync + 'static;

    /// A balancer over `endpoints` with its RNG seeded with `seed`. With no
    /// endpoints, it checks the parameters (see
    /// [`crate::AlgorithmConfig::validate`]).
    fn build(config: &Self::Config, endpoints: &[Endpoint], seed: u64) -> Result<Box<dyn Balancer>, BuildError>;
}

/// The kind of the algorithms: an [`Algorithm`] configured by an
/// `[algorithm]` table builds a [`Balancer`] over endpoints with a seed.
pub struct Balancing;

impl Kind for Balancing {
    type Output = Result<Box<dyn Balancer>, BuildError>;
    type Context<'a> = (&'a [Endpoint], u64);
    const KEY: &'static str = "kind";
    const WHAT: &'static str = "algorithm";

    fn registry() -> &'static Registry<dyn Factory<Balancing>> {
        &ALGORITHMS
    }

    /// Round robin.
    fn default_config() -> Config<Balancing> {
        crate::AlgorithmKind::ROUND_ROBIN.default_config().0
    }
}

impl<A: Algorithm> Extends<A> for Balancing {
    const NAME: &'static str = A::NAME;
    const ALIASES: &'static [&'static str] = A::ALIASES;
    type Params = A::Config;

    fn default_params() -> Option<A::Config> {
        Some(A::Config::default())
    }

    fn build(config: &A::Config, (endpoints, seed): (&[Endpoint], u64)) -> Result<Box<dyn Balancer>, BuildError> {
        A::build(config, endpoints, seed)
    }
}

/// An algorithm's entry in the registry.
pub type AlgorithmFactory = dyn Factory<Balancing>;

pub(crate) static ALGORITHMS: Registry<AlgorithmFactory> = Registry::new(&crate::config::BUILT_IN);

/// Add `A` to the registry, by its name and aliases.
pub fn register<A: Algorithm>() -> Result<(), NameTaken> {
    Typed::<Balancing, A>::register()
}

/// Add a factory to the registry.
pub fn register_factory(factory: &'static AlgorithmFactory) -> Result<(), NameTaken> {
    ALGORITHMS.register(factory)
}

/// Every registered algorithm: the built-ins in report order, then the
/// others in the order they were registered.
pub fn algorithms() -> Vec<&'static AlgorithmFactory> {
    ALGORITHMS.all()
}

/// The algorithm named `name` (or an alias; case, `_` and hyphens aside).
pub fn lookup(name: &str) -> Option<&'static AlgorithmFactory> {
    ALGORITHMS.lookup(name)
}

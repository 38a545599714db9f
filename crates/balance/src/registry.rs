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
use std::marker::PhantomData;

use fulcrum_config::registry::{parse_params, Named, Registry};
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

/// An algorithm's entry in the registry (implemented for every
/// [`Algorithm`] by [`Typed`]; object safe).
pub trait AlgorithmFactory: Named + Send + Sync + 'static {
    /// The parameters from an `[algorithm]` table without its `kind`.
    fn parse(&self, params: toml::Table) -> Result<Box<dyn Params>, String>;
    /// The default parameters.
    fn default_params(&self) -> Box<dyn Params>;
    /// A balancer configured by `params` (parameters this factory made).
    fn build(&self, params: &dyn Params, endpoints: &[Endpoint], seed: u64) -> Result<Box<dyn Balancer>, BuildError>;
}

/// The [`AlgorithmFactory`] of an [`Algorithm`].
pub struct Typed<A>(PhantomData<fn() -> A>);

impl<A: Algorithm> Typed<A> {
    /// The factory of `A`.
    pub const NEW: Typed<A> = Typed(PhantomData);
}

impl<A: Algorithm> Named for Typed<A> {
    fn name(&self) -> &'static str {
        A::NAME
    }

    fn aliases(&self) -> &'static [&'static str] {
        A::ALIASES
    }
}

impl<A: Algorithm> AlgorithmFactory for Typed<A> {
    fn parse(&self, params: toml::Table) -> Result<Box<dyn Params>, String> {
        parse_params::<A::Config>(params)
    }

    fn default_params(&self) -> Box<dyn Params> {
        Box::new(A::Config::default())
    }

    fn build(&self, params: &dyn Params, endpoints: &[Endpoint], seed: u64) -> Result<Box<dyn Balancer>, BuildError> {
        match params.as_any().downcast_ref::<A::Config>() {
            Some(c) => A::build(c, endpoints, seed),
            None => A::build(&A::Config::default(), endpoints, seed),
        }
    }
}

pub(crate) static ALGORITHMS: Registry<dyn AlgorithmFactory> = Registry::new(&crate::config::BUILT_IN);

/// Add `A` to the registry, by its name and aliases.
pub fn register<A: Algorithm>() -> Result<(), NameTaken> {
    ALGORITHMS.register(Box::leak(Box::new(Typed::<A>::NEW)))
}

/// Add a factory to the registry.
pub fn register_factory(factory: &'static dyn AlgorithmFactory) -> Result<(), NameTaken> {
    ALGORITHMS.register(factory)
}

/// Every registered algorithm: the built-ins in report order, then the
/// others in the order they were registered.
pub fn algorithms() -> Vec<&'static dyn AlgorithmFactory> {
    ALGORITHMS.all()
}

/// The algorithm named `name` (or an alias; case, `_` and hyphens aside).
pub fn lookup(name: &str) -> Option<&'static dyn AlgorithmFactory> {
    ALGORITHMS.lookup(name)
}

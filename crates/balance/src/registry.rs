//! The algorithms by name: every algorithm, built-in or from another crate,
//! is an [`Algorithm`] registered under its name.
//!
//! An algorithm brings its name, its aliases, its own typed parameters
//! ([`Algorithm::Config`], read with serde from its `[algorithm]` table) and
//! a constructor. [`register`] adds one to the process-wide registry, after
//! which an `[algorithm]` table with its `kind` configures it in the proxy's
//! configuration and in the simulator's scenarios alike, and
//! [`AlgorithmKind`]'s `FromStr` finds it. The built-ins are registered the
//! same way, before anything else.

use std::any::Any;
use std::fmt;
use std::marker::PhantomData;
use std::sync::{LazyLock, RwLock};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

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
    /// endpoints, it checks the parameters (see [`AlgorithmConfig::validate`]).
    fn build(config: &Self::Config, endpoints: &[Endpoint], seed: u64) -> Result<Box<dyn Balancer>, BuildError>;
}

/// An algorithm's entry in the registry (implemented for every
/// [`Algorithm`]; object safe).
pub trait AlgorithmFactory: Send + Sync + 'static {
    /// The canonical name.
    fn name(&self) -> &'static str;
    /// The other names.
    fn aliases(&self) -> &'static [&'static str];
    /// The parameters from an `[algorithm]` table without its `kind`.
    fn parse(&self, params: toml::Table) -> Result<Box<dyn Params>, String>;
    /// The default parameters.
    fn default_params(&self) -> Box<dyn Params>;
    /// A balancer configured by `params` (parameters this factory made).
    fn build(&self, params: &dyn Params, endpoints: &[Endpoint], seed: u64) -> Result<Box<dyn Balancer>, BuildError>;
}

/// Type-erased parameters of one algorithm.
pub trait Params: Any + fmt::Debug + Send + Sync {
    /// As `&dyn Any`, to get the typed parameters back.
    fn as_any(&self) -> &dyn Any;
    /// As `&mut dyn Any`.
    fn as_any_mut(&mut self) -> &mut dyn Any;
    /// A copy.
    fn clone_box(&self) -> Box<dyn Params>;
    /// Equal to `other` (same type, same values).
    fn eq_dyn(&self, other: &dyn Params) -> bool;
    /// The parameters as TOML values, in declaration order.
    fn fields(&self) -> Vec<(String, toml::Value)>;
}

impl<T: Serialize + Clone + PartialEq + fmt::Debug + Send + Sync + 'static> Params for T {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }

    fn clone_box(&self) -> Box<dyn Params> {
        Box::new(self.clone())
    }

    fn eq_dyn(&self, other: &dyn Params) -> bool {
        other.as_any().downcast_ref::<T>() == Some(self)
    }

    fn fields(&self) -> Vec<(String, toml::Value)> {
        // A `toml::Table` sorts its keys; the text keeps the struct's order.
        let text = format!("\n{}", toml::to_string(self).unwrap_or_default());
        let Ok(table) = text.parse::<toml::Table>() else { return Vec::new() };
        let at = |k: &str| text.find(&format!("\n{k} =")).or_else(|| text.find(&format!("\n[{k}]")));
        let mut fields: Vec<(String, toml::Value)> = table.into_iter().collect();
        fields.sort_by_key(|(k, _)| at(k));
        fields
    }
}

/// The [`AlgorithmFactory`] of an [`Algorithm`].
pub struct Typed<A>(PhantomData<fn() -> A>);

impl<A: Algorithm> Typed<A> {
    /// The factory of `A`.
    pub const NEW: Typed<A> = Typed(PhantomData);
}

impl<A: Algorithm> AlgorithmFactory for Typed<A> {
    fn name(&self) -> &'static str {
        A::NAME
    }

    fn aliases(&self) -> &'static [&'static str] {
        A::ALIASES
    }

    fn parse(&self, params: toml::Table) -> Result<Box<dyn Params>, String> {
        A::Config::deserialize(toml::Value::Table(params))
            .map(|c| Box::new(c) as Box<dyn Params>)
            .map_err(|e| e.message().to_string())
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

/// A name already taken, by an algorithm's name or one of its aliases.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("algorithm name {0:?} is already registered")]
pub struct NameTaken(pub String);

static REGISTRY: LazyLock<RwLock<Vec<&'static dyn AlgorithmFactory>>> =
    LazyLock::new(|| RwLock::new(crate::config::BUILT_IN.to_vec()));

/// Add `A` to the registry, by its name and aliases.
pub fn register<A: Algorithm>() -> Result<(), NameTaken> {
    register_factory(Box::leak(Box::new(Typed::<A>::NEW)))
}

/// Add a factory to the registry.
pub fn register_factory(factory: &'static dyn AlgorithmFactory) -> Result<(), NameTaken> {
    let mut all = REGISTRY.write().unwrap_or_else(|e| e.into_inner());
    for name in std::iter::once(factory.name()).chain(factory.aliases().iter().copied()) {
        if find(&all, name).is_some() {
            return Err(NameTaken(name.to_string()));
        }
    }
    all.push(factory);
    Ok(())
}

/// Every registered algorithm: the built-ins in report order, then the
/// others in the order they were registered.
pub fn algorithms() -> Vec<&'static dyn AlgorithmFactory> {
    REGISTRY.read().unwrap_or_else(|e| e.into_inner()).clone()
}

/// The algorithm named `name` (or an alias; case, `_` and hyphens aside).
pub fn lookup(name: &str) -> Option<&'static dyn AlgorithmFactory> {
    find(&REGISTRY.read().unwrap_or_else(|e| e.into_inner()), name)
}

fn find(all: &[&'static dyn AlgorithmFactory], name: &str) -> Option<&'static dyn AlgorithmFactory> {
    let wanted = name.trim().to_ascii_lowercase().replace('_', "-");
    let squashed = |s: &str| s.replace('-', "");
    all.iter().copied().find(|f| {
        f.name() == wanted
            || squashed(f.name()) == wanted
            || f.aliases().iter().any(|a| a.eq_ignore_ascii_case(&wanted))
    })
}

/// The names in an error message: `round-robin (wrr), random, …`.
pub(crate) fn known_names() -> String {
    algorithms()
        .iter()
        .map(|f| match f.aliases().first() {
            Some(a) => format!("{} ({a})", f.name()),
            None => f.name().to_string(),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

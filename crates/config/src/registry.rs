//! Extension points by name: a [`Registry`] of factories (algorithms,
//! fabric schemes, …), the built-ins first, then those another crate
//! adds with [`Registry::register`], and [`Params`], one factory's typed
//! parameters behind a trait object.
//!
//! A name matches ignoring case, `_` for `-`, and with its hyphens
//! dropped (`RingHash` is `ring-hash`); aliases match ignoring case.

use std::any::Any;
use std::fmt;
use std::sync::RwLock;

use serde::Serialize;

/// What a registry holds: something with a name.
pub trait Named {
    /// The canonical name, as written in configuration.
    fn name(&self) -> &'static str;
    /// Other names accepted for it.
    fn aliases(&self) -> &'static [&'static str] {
        &[]
    }
}

/// A name already taken, by a name or an alias.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameTaken(pub String);

impl fmt::Display for NameTaken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the name {:?} is already registered", self.0)
    }
}

impl std::error::Error for NameTaken {}

/// Factories by name: a fixed list of built-ins, then the registered ones.
pub struct Registry<F: ?Sized + 'static> {
    built_in: &'static [&'static F],
    added: RwLock<Vec<&'static F>>,
}

impl<F: ?Sized + Named + 'static> Registry<F> {
    /// A registry of `built_in`, in that order.
    pub const fn new(built_in: &'static [&'static F]) -> Self {
        Registry { built_in, added: RwLock::new(Vec::new()) }
    }

    /// Add `factory`, unless its name or an alias is taken.
    pub fn register(&self, factory: &'static F) -> Result<(), NameTaken> {
        let mut added = self.added.write().unwrap_or_else(|e| e.into_inner());
        for name in std::iter::once(factory.name()).chain(factory.aliases().iter().copied()) {
            if find(self.built_in.iter().chain(added.iter()).copied(), name).is_some() {
                return Err(NameTaken(name.to_string()));
            }
        }
        added.push(factory);
        Ok(())
    }

    /// Every factory: the built-ins, then the others in registration order.
    pub fn all(&self) -> Vec<&'static F> {
        let added = self.added.read().unwrap_or_else(|e| e.into_inner());
        self.built_in.iter().chain(added.iter()).copied().collect()
    }

    /// The factory called `name` (or an alias of it).
    pub fn lookup(&self, name: &str) -> Option<&'static F> {
        find(self.all().into_iter(), name)
    }

    /// The names for an error message: `round-robin (wrr), random, …`,
    /// each with its first alias.
    pub fn known(&self) -> String {
        let names: Vec<String> = self
            .all()
            .iter()
            .map(|f| match f.aliases().first() {
                Some(a) => format!("{} ({a})", f.name()),
                None => f.name().to_string(),
            })
            .collect();
        names.join(", ")
    }
}

fn find<F: ?Sized + Named + 'static>(mut all: impl Iterator<Item = &'static F>, name: &str) -> Option<&'static F> {
    let wanted = name.trim().to_ascii_lowercase().replace('_', "-");
    all.find(|f| {
        f.name() == wanted
            || f.name().replace('-', "") == wanted
            || f.aliases().iter().any(|a| a.eq_ignore_ascii_case(&wanted))
    })
}

/// One factory's typed parameters behind a trait object (implemented for
/// every serializable, comparable parameter type).
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

/// Typed parameters read from a table (the keys besides the name's): the
/// message of the first error, as serde words it.
pub fn parse_params<T: serde::de::DeserializeOwned + Params>(table: toml::Table) -> Result<Box<dyn Params>, String> {
    T::deserialize(toml::Value::Table(table))
        .map(|c| Box::new(c) as Box<dyn Params>)
        .map_err(|e| e.message().to_string())
}

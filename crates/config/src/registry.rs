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

/// A parameter that fails its factory's check: its key and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamError {
    /// The key in the table (empty: the table as a whole).
    pub field: String,
    /// What is wrong and what would be accepted.
    pub message: String,
}

impl ParamError {
    /// A failed check of `field`.
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        ParamError { field: field.into(), message: message.into() }
    }

    /// `field` must be finite and above 0.
    pub fn positive(field: &str, v: f64) -> Result<(), ParamError> {
        if v > 0.0 && v.is_finite() {
            Ok(())
        } else {
            Err(ParamError::new(field, format!("must be above 0 (found {v})")))
        }
    }

    /// `field` must be strictly between 0 and 1.
    pub fn fraction(field: &str, v: f64) -> Result<(), ParamError> {
        if v > 0.0 && v < 1.0 {
            Ok(())
        } else {
            Err(ParamError::new(field, format!("must be between 0 and 1, exclusive (found {v})")))
        }
    }

    /// This error inside the table at `path` (`aqm`, `routing`, …): its
    /// field as a dotted path, and its message.
    pub fn within(self, path: &str) -> (String, String) {
        let field = if self.field.is_empty() { path.to_string() } else { format!("{path}.{}", self.field) };
        (field, self.message)
    }
}

/// The factory a table names under `key` (which is taken out of it, the
/// rest being the factory's parameters), and those parameters read by
/// `parse`; `what` words the kind of factory in errors ("scheme").
pub fn from_table<F: ?Sized + Named + 'static, P>(
    registry: &Registry<F>,
    table: &mut toml::Table,
    key: &str,
    what: &str,
    parse: impl FnOnce(&'static F, toml::Table) -> Result<P, String>,
) -> Result<(&'static F, P), ParamError> {
    let name = match table.remove(key) {
        Some(toml::Value::String(name)) => name,
        Some(other) => return Err(ParamError::new(key, format!("must be a string, not {other}"))),
        None => return Err(ParamError::new(key, format!("missing: name a {what}"))),
    };
    let Some(factory) = registry.lookup(&name) else {
        return Err(ParamError::new(key, format!("unknown {what} {name:?} (expected one of: {})", registry.known())));
    };
    let keys = table.clone();
    let params = parse(factory, std::mem::take(table)).map_err(|message| {
        // serde names an unknown key first: "unknown field `x`, …".
        let field = match message.strip_prefix("unknown field `").and_then(|r| r.split('`').next()) {
            Some(field) => field,
            None => key_quoted_in(&keys, &message).unwrap_or(""),
        };
        ParamError::new(field, format!("{}: {message}", factory.name()))
    })?;
    Ok((factory, params))
}

/// The one key of `table` whose value serde's `message` quotes ("\"3
/// parsecs\" is not a duration", "invalid type: integer `5`"), if one.
fn key_quoted_in<'a>(table: &'a toml::Table, message: &str) -> Option<&'a str> {
    let quoted = |v: &toml::Value| match v {
        toml::Value::String(s) => message.contains(&format!("{s:?}")),
        toml::Value::Integer(_) | toml::Value::Float(_) | toml::Value::Boolean(_) => {
            message.contains(&format!("`{v}`"))
        }
        _ => false,
    };
    let mut keys = table.iter().filter(|(_, v)| quoted(v)).map(|(k, _)| k.as_str());
    let key = keys.next()?;
    keys.next().is_none().then_some(key)
}

//! Extension points by name: a [`Registry`] of factories (algorithms,
//! fabric schemes, …), the built-ins first, then those another crate
//! adds with [`Registry::register`], and [`Params`], one factory's typed
//! parameters behind a trait object.
//!
//! Every extension point is a [`Kind`] (what its factories build and from
//! what); the kind implements [`Extends`] for each type of its own trait
//! (`SchemeType`, `AqmType`, …), [`Typed`] makes that type a [`Factory`],
//! and a [`Config`] is one factory with its parameters, read from a table
//! that names it.
//!
//! A name matches ignoring case, `_` for `-`, and with its hyphens
//! dropped (`RingHash` is `ring-hash`); aliases match ignoring case.

use std::any::Any;
use std::fmt;
use std::marker::PhantomData;
use std::sync::RwLock;

use serde::de::DeserializeOwned;
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

/// An extension point: what its factories build, and from what.
pub trait Kind: Sized + 'static {
    /// What a factory builds (`Box<dyn Scheme>`, …).
    type Output;
    /// What a build is given besides the parameters (`()` for nothing).
    type Context<'a>;
    /// The key that names the factory in a table (`"kind"`).
    const KEY: &'static str;
    /// The word for one factory in errors (`"queue discipline"`).
    const WHAT: &'static str;
    /// The registry of this kind.
    fn registry() -> &'static Registry<dyn Factory<Self>>;
    /// The configuration of a table that names nothing.
    fn default_config() -> Config<Self>;
}

/// How a kind configures and builds `T`, one of its types: implemented by
/// each kind once, for every type of its own trait.
pub trait Extends<T: 'static>: Kind {
    /// The name, as the kind's key gives it.
    const NAME: &'static str;
    /// Other names accepted for it.
    const ALIASES: &'static [&'static str] = &[];
    /// The parameters: the table's other keys.
    type Params: Serialize + DeserializeOwned + Clone + PartialEq + fmt::Debug + Send + Sync + 'static;
    /// The parameters of a table with the name alone, if `T` has them.
    fn default_params() -> Option<Self::Params> {
        None
    }
    /// Check the parameters (the first bad one, named by its key).
    fn check(_params: &Self::Params) -> Result<(), ParamError> {
        Ok(())
    }
    /// `T` configured by `params`.
    fn build(params: &Self::Params, ctx: Self::Context<'_>) -> Self::Output;
}

/// A factory of kind `K` in its registry (object safe; [`Typed`]
/// implements it for every type the kind extends).
pub trait Factory<K: Kind>: Named + Send + Sync + 'static {
    /// The parameters from a table without the kind's key.
    fn parse(&self, params: toml::Table) -> Result<Box<dyn Params>, String>;
    /// The parameters of a table with the name alone, if there are.
    fn default_params(&self) -> Option<Box<dyn Params>>;
    /// Check parameters this factory made.
    fn check(&self, params: &dyn Params) -> Result<(), ParamError>;
    /// Build from parameters this factory made ([`Config`] keeps them
    /// together).
    fn build(&self, params: &dyn Params, ctx: K::Context<'_>) -> K::Output;
}

/// The [`Factory`] of `T` in kind `K`.
pub struct Typed<K, T>(PhantomData<fn() -> (K, T)>);

impl<K: Extends<T>, T: 'static> Typed<K, T> {
    /// The factory.
    pub const NEW: Typed<K, T> = Typed(PhantomData);

    fn typed(params: &dyn Params) -> &K::Params {
        params.as_any().downcast_ref().expect("a factory is only given the parameters it made")
    }

    /// Add `T` to the kind's registry, by its name and aliases.
    pub fn register() -> Result<(), NameTaken> {
        K::registry().register(Box::leak(Box::new(Self::NEW)))
    }
}

impl<K: Extends<T>, T: 'static> Named for Typed<K, T> {
    fn name(&self) -> &'static str {
        K::NAME
    }

    fn aliases(&self) -> &'static [&'static str] {
        K::ALIASES
    }
}

impl<K: Extends<T>, T: 'static> Factory<K> for Typed<K, T> {
    fn parse(&self, params: toml::Table) -> Result<Box<dyn Params>, String> {
        parse_params::<K::Params>(params)
    }

    fn default_params(&self) -> Option<Box<dyn Params>> {
        K::default_params().map(|p| Box::new(p) as Box<dyn Params>)
    }

    fn check(&self, params: &dyn Params) -> Result<(), ParamError> {
        K::check(Self::typed(params))
    }

    fn build(&self, params: &dyn Params, ctx: K::Context<'_>) -> K::Output {
        K::build(Self::typed(params), ctx)
    }
}

/// One factory of kind `K` and its parameters, as a table gives them.
pub struct Config<K: Kind> {
    factory: &'static dyn Factory<K>,
    params: Box<dyn Params>,
}

impl<K: Kind> Config<K> {
    /// `T` with `params`, checked (`T` need not be registered).
    pub fn new<T: 'static>(params: <K as Extends<T>>::Params) -> Result<Self, ParamError>
    where
        K: Extends<T>,
    {
        K::check(&params)?;
        Ok(Config { factory: Box::leak(Box::new(Typed::<K, T>::NEW)), params: Box::new(params) })
    }

    /// `factory` with the parameters of a table naming it alone, if it has
    /// them.
    pub fn with_defaults(factory: &'static dyn Factory<K>) -> Option<Self> {
        factory.default_params().map(|params| Config { factory, params })
    }

    /// The factory and parameters a table names under the kind's key (the
    /// rest of the table being the parameters), checked.
    pub fn from_table(mut table: toml::Table) -> Result<Self, ParamError> {
        let (factory, params) = from_table(K::registry(), &mut table, K::KEY, K::WHAT, |f, t| f.parse(t))?;
        factory.check(&*params)?;
        Ok(Config { factory, params })
    }

    /// The factory.
    pub fn factory(&self) -> &'static dyn Factory<K> {
        self.factory
    }

    /// The factory's name.
    pub fn name(&self) -> &'static str {
        self.factory.name()
    }

    /// The parameters, when they are a `T`.
    pub fn params<T: 'static>(&self) -> Option<&T> {
        self.params.as_any().downcast_ref()
    }

    /// The parameters to change, when they are a `T`.
    pub fn params_mut<T: 'static>(&mut self) -> Option<&mut T> {
        self.params.as_any_mut().downcast_mut()
    }

    /// The parameters as TOML values, in declaration order.
    pub fn fields(&self) -> Vec<(String, toml::Value)> {
        self.params.fields()
    }

    /// What the factory builds from these parameters.
    pub fn build(&self, ctx: K::Context<'_>) -> K::Output {
        self.factory.build(&*self.params, ctx)
    }
}

impl<K: Kind> Default for Config<K> {
    fn default() -> Self {
        K::default_config()
    }
}

impl<K: Kind> Clone for Config<K> {
    fn clone(&self) -> Self {
        Config { factory: self.factory, params: self.params.clone_box() }
    }
}

impl<K: Kind> PartialEq for Config<K> {
    fn eq(&self, other: &Self) -> bool {
        self.name() == other.name() && self.params.eq_dyn(&*other.params)
    }
}

impl<K: Kind> fmt::Debug for Config<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config").field(K::KEY, &self.name()).field("params", &self.params).finish()
    }
}

/// As a table: the kind's key with the name, then the parameters.
impl<K: Kind> Serialize for Config<K> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let fields = self.fields();
        let mut map = s.serialize_map(Some(fields.len() + 1))?;
        map.serialize_entry(K::KEY, self.name())?;
        for (k, v) in &fields {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

/// From a table, as [`Config::from_table`] reads it.
impl<'de, K: Kind> serde::Deserialize<'de> for Config<K> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let table = toml::Table::deserialize(d)?;
        Config::from_table(table).map_err(|e| {
            let named = e.field.is_empty() || e.message.contains(&format!("`{}`", e.field));
            serde::de::Error::custom(if named { e.message } else { format!("{}: {}", e.field, e.message) })
        })
    }
}

/// The factory a table names under `key` (which is taken out of it, the
/// rest being the factory's parameters), and those parameters read by
/// `parse`; `what` words the kind of factory in errors ("scheme").
fn from_table<F: ?Sized + Named + 'static, P>(
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
/// parsecs\" is not a duration", "unknown variant `sometimes`", "invalid
/// type: integer `5`"), if one.
fn key_quoted_in<'a>(table: &'a toml::Table, message: &str) -> Option<&'a str> {
    let quoted = |v: &toml::Value| match v {
        // A duration's parser quotes "3 parsecs"; serde quotes an unknown
        // variant as `sometimes`.
        toml::Value::String(s) => message.contains(&format!("{s:?}")) || message.contains(&format!("`{s}`")),
        toml::Value::Integer(_) | toml::Value::Float(_) | toml::Value::Boolean(_) => {
            message.contains(&format!("`{v}`"))
        }
        _ => false,
    };
    let mut keys = table.iter().filter(|(_, v)| quoted(v)).map(|(k, _)| k.as_str());
    let key = keys.next()?;
    keys.next().is_none().then_some(key)
}

//! Reading a TOML document, with `--set KEY=VALUE` overrides, into a raw
//! (deserialized, not yet validated) type, keeping where every value was
//! written.
//!
//! [`parse`] parses the file with toml's own parser (every key and value
//! carries its byte span: [`toml::Spanned`]), applies each `--set` to that
//! document before anything is deserialized, and deserializes the result.
//! The text of each `--set` follows the file's in one buffer, so a span
//! says by itself whether a value came from the file or from the command
//! line. The returned [`Source`] turns a span into a position, finds the
//! span of a field by its dotted path (`workload.incast.receiver`,
//! `servers[1].service`) and the field at a span; validation reports
//! through it, so every error reads `file:line:column: field: message`
//! (or `--set KEY=VALUE: field: message`).
//!
//! `--set` syntax: `KEY=VALUE`. `KEY` is the dotted path of a field, with
//! `[i]` to name the element of an array (`servers[0].count`, or
//! `events[1].at`); tables on the way that do not exist are created.
//! `VALUE` is a TOML value (`0.4`, `true`, `"last-byte"`, `[1, 2]`,
//! `{ kind = "red", k = 40 }`), or else taken as a bare string (`30us`,
//! `drill`). A `--set` replaces the value the file gives, whole.

use std::borrow::Cow;
use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use toml::de::{DeTable, DeValue};
use toml::Spanned;

use crate::Error;

/// Positions in one document: its file, its text and its `--set`s.
#[derive(Debug, Clone)]
pub struct Source {
    file: PathBuf,
    /// The file's text, then each `--set` on a line of its own.
    text: String,
    file_len: usize,
    sets: Vec<Range<usize>>,
    /// Every key of the document (after the `--set`s), with its path.
    fields: Vec<Field>,
}

#[derive(Debug, Clone)]
struct Field {
    path: String,
    /// Array elements have no key.
    key: Option<Range<usize>>,
    value: Range<usize>,
    /// The value, when it is a string.
    string: Option<String>,
}

/// The field an error is about when the text is not TOML, or a `--set` is
/// not `KEY=VALUE`.
pub const SYNTAX: &str = "(syntax)";

impl Source {
    /// Positions in `text`, read from `file`, with no `--set`; spans index
    /// `text`. For documents deserialized some other way (and for errors
    /// about a command line, with an empty text: every position unknown).
    pub fn new(file: &Path, text: &str) -> Source {
        Source {
            file: file.to_path_buf(),
            text: text.to_string(),
            file_len: text.len(),
            sets: Vec::new(),
            fields: Vec::new(),
        }
    }

    /// The file.
    pub fn file(&self) -> &Path {
        &self.file
    }

    /// An error about the value at `span` (an empty span at 0: no known
    /// position), in `field`.
    pub fn error(&self, span: Range<usize>, field: impl Into<String>, message: impl Into<String>) -> Error {
        let mut e = Error::new(&self.file, field, message);
        if span.start == 0 && span.end == 0 {
            return e;
        }
        if span.start >= self.file_len {
            if let Some(set) = self.sets.iter().find(|s| s.start <= span.start && span.start <= s.end) {
                e.set = Some(self.text[set.clone()].to_string());
            }
            return e;
        }
        let before = &self.text[..span.start];
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        e.line = before.matches('\n').count() + 1;
        e.column = before[line_start..].chars().count() + 1;
        e
    }

    /// An error in `field` (a dotted path), located at its value, or at the
    /// nearest enclosing table that was written when the field itself was
    /// not (a default).
    pub fn error_in(&self, field: &str, message: impl Into<String>) -> Error {
        self.error(self.span_of(field).unwrap_or(0..0), field, message)
    }

    /// An error from a check of the table `section` (`cluster[0].slow_start`)
    /// whose message starts with the field it is about, named from the
    /// table (`"slow_start.window must be greater than 0"`): located at that
    /// field, else at the table.
    pub fn error_from(&self, section: &str, message: &str) -> Error {
        let table = section.rsplit('.').next().unwrap_or(section);
        let named = message
            .split_once(' ')
            .and_then(|(first, rest)| Some((first.strip_prefix(table)?.strip_prefix('.')?, rest)));
        match named {
            Some((key, rest)) => self.error_in(&format!("{section}.{key}"), rest),
            None => self.error_in(section, message),
        }
    }

    /// The span of `field`'s value, or of the nearest enclosing table written.
    pub fn span_of(&self, field: &str) -> Option<Range<usize>> {
        let mut path = field;
        loop {
            if let Some(f) = self.fields.iter().find(|f| f.path == path) {
                return Some(f.value.clone());
            }
            let cut = path.rfind(['.', '['])?;
            path = &path[..cut];
        }
    }

    /// Whether `field`'s value (or the table holding it) came from a `--set`.
    pub fn is_set(&self, field: &str) -> bool {
        self.span_of(field).is_some_and(|s| s.start >= self.file_len)
    }

    /// The field inside the table `table` that an error reported at the
    /// table is about, when the message names it: serde reads an
    /// internally tagged enum (`kind = "…"` and its fields) from a copy
    /// without positions, so toml reports its errors at the table. An
    /// unknown key is found by its name, a bad string by its quoted value.
    fn inner_field(&self, table: &str, message: &str) -> Option<(Range<usize>, &str)> {
        let inside = |f: &&Field| table.is_empty() || f.path.strip_prefix(table).is_some_and(|r| r.starts_with('.'));
        if let Some(key) = message.strip_prefix("unknown field `").and_then(|m| m.split_once('`')).map(|(k, _)| k) {
            let path = if table.is_empty() { key.to_string() } else { format!("{table}.{key}") };
            let f = self.fields.iter().find(|f| f.path == path)?;
            return Some((f.key.clone().unwrap_or(f.value.clone()), &f.path));
        }
        let mut quoted = self.fields.iter().filter(inside).filter(|f| {
            f.string
                .as_ref()
                .is_some_and(|s| message.contains(&format!("{s:?}")) || message.contains(&format!("`{s}`")))
        });
        match (quoted.next(), quoted.next()) {
            (Some(f), None) => Some((f.value.clone(), &f.path)),
            _ => None,
        }
    }

    /// The path of the innermost field whose key or value holds `offset`.
    pub fn field_at(&self, offset: usize) -> Option<&str> {
        self.fields
            .iter()
            .filter_map(|f| {
                let holds = |r: &Range<usize>| r.start <= offset && offset < r.end.max(r.start + 1);
                if f.key.as_ref().is_some_and(holds) {
                    Some((0, f))
                } else if holds(&f.value) {
                    Some((f.value.len(), f))
                } else {
                    None
                }
            })
            .min_by_key(|&(len, f)| (len, std::cmp::Reverse(f.path.len())))
            .map(|(_, f)| f.path.as_str())
    }
}

/// Parse `text` (read from `file`), apply `sets` (`KEY=VALUE`, see the
/// module documentation) and deserialize the result as `T`.
pub fn parse<T: DeserializeOwned>(file: &Path, text: &str, sets: &[String]) -> Result<(T, Source), Error> {
    let mut combined = String::with_capacity(text.len() + sets.iter().map(|s| s.len() + 1).sum::<usize>());
    combined.push_str(text);
    let mut ranges = Vec::with_capacity(sets.len());
    for set in sets {
        combined.push('\n');
        ranges.push(combined.len()..combined.len() + set.len());
        combined.push_str(set);
    }
    let mut source = Source {
        file: file.to_path_buf(),
        text: String::new(),
        file_len: text.len(),
        sets: ranges,
        fields: Vec::new(),
    };
    let result = read(&combined, &mut source);
    source.text = combined;
    match result {
        Ok(value) => Ok((value, source)),
        Err(Fail(span, Some(field), message)) => Err(source.error(span, field, message)),
        Err(Fail(span, None, message)) => Err(source.with_context(source.located(span, message))),
    }
}

/// The digest of the document `text` (read from `file`) after `sets`: the
/// xxh64 of its canonical form (keys sorted at every level, one spelling
/// per value), so that comments, layout, key order and the spelling of
/// numbers do not change it, and a scenario given as a file or built from
/// a dictionary with the same values digests alike. Files the document
/// names (CDFs, flow lists) are not read here: see [`Inputs`].
pub fn digest(file: &Path, text: &str, sets: &[String]) -> Result<u64, Error> {
    let (table, _): (toml::Table, Source) = parse(file, text, sets)?;
    let mut canonical = String::new();
    canonical_form(&toml::Value::Table(table), &mut canonical);
    Ok(xxhash_rust::xxh64::xxh64(canonical.as_bytes(), 0))
}

thread_local! {
    // The hashes of the files read by `read_input` while `Inputs::record` runs.
    static INPUTS: std::cell::RefCell<Option<Vec<u64>>> = const { std::cell::RefCell::new(None) };
}

/// Read a file a document names (a CDF, a flow list, a trace): its text,
/// its contents' hash kept when the document is read under
/// [`Inputs::record`].
pub fn read_input(path: &Path) -> std::io::Result<String> {
    let text = std::fs::read_to_string(path)?;
    INPUTS.with(|i| {
        if let Some(hashes) = i.borrow_mut().as_mut() {
            hashes.push(xxhash_rust::xxh64::xxh64(text.as_bytes(), 0));
        }
    });
    Ok(text)
}

/// The files a document named, as their contents' hashes in the order
/// they were read, so that a result's provenance covers them too.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Inputs(Vec<u64>);

impl Inputs {
    /// Run `f`, which reads a document, and keep the hashes of the files
    /// it reads with [`read_input`].
    pub fn record<R>(f: impl FnOnce() -> R) -> (R, Inputs) {
        let outer = INPUTS.with(|i| i.replace(Some(Vec::new())));
        let result = f();
        let hashes = INPUTS.with(|i| i.replace(outer)).unwrap_or_default();
        (result, Inputs(hashes))
    }

    /// `document` (its [`digest`]) with the files' contents folded in; the
    /// same when it names none.
    pub fn digest(&self, document: u64) -> u64 {
        if self.0.is_empty() {
            return document;
        }
        let bytes: Vec<u8> =
            std::iter::once(document).chain(self.0.iter().copied()).flat_map(u64::to_le_bytes).collect();
        xxhash_rust::xxh64::xxh64(&bytes, 0)
    }
}

/// `value` written out with its tables' keys sorted.
fn canonical_form(value: &toml::Value, out: &mut String) {
    use std::fmt::Write as _;
    match value {
        toml::Value::String(s) => {
            let _ = write!(out, "{s:?}");
        }
        toml::Value::Integer(i) => {
            let _ = write!(out, "{i}");
        }
        toml::Value::Float(f) => {
            let _ = write!(out, "{f:?}");
        }
        toml::Value::Boolean(b) => {
            let _ = write!(out, "{b}");
        }
        toml::Value::Datetime(d) => {
            let _ = write!(out, "{d}");
        }
        toml::Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical_form(item, out);
            }
            out.push(']');
        }
        toml::Value::Table(table) => {
            let mut keys: Vec<&String> = table.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                let _ = write!(out, "{key:?}=");
                canonical_form(&table[key], out);
            }
            out.push('}');
        }
    }
}

impl Source {
    /// A deserialization error at `span`, with its field found from there.
    fn located(&self, span: Range<usize>, message: String) -> Error {
        let mut field = match span.end {
            0 => String::new(),
            _ => self.field_at(span.start).unwrap_or_default().to_string(),
        };
        let mut span = span;
        if let Some((at, f)) = self.inner_field(&field, &message) {
            (span, field) = (at, f.to_string());
        }
        self.error(span, field, message)
    }

    /// `e`, located in the file, noting the `--set`s that changed the
    /// table it is in (a `--set kind=…` can make the file's other keys wrong).
    fn with_context(&self, mut e: Error) -> Error {
        if e.set.is_some() {
            return e;
        }
        let changed: Vec<&str> = self
            .sets
            .iter()
            .map(|r| &self.text[r.clone()])
            .filter(|set| {
                let key = set.split('=').next().unwrap_or_default().trim();
                let table = key.rsplit_once('.').map_or("", |(t, _)| t);
                e.field == key || !table.is_empty() && (e.field == table || e.field.starts_with(&format!("{table}.")))
            })
            .collect();
        if !changed.is_empty() {
            e.message = format!("{} (with --set {})", e.message, changed.join(", --set "));
        }
        e
    }
}

/// An error before positions are known: its span, its field when known
/// (else found from the span), its message.
struct Fail(Range<usize>, Option<String>, String);

fn read<T: DeserializeOwned>(combined: &str, source: &mut Source) -> Result<T, Fail> {
    let file = &combined[..source.file_len];
    let mut root =
        DeTable::parse(file).map_err(|e| Fail(e.span().unwrap_or(0..0), Some(SYNTAX.into()), e.message().into()))?;
    for range in &source.sets {
        apply(root.get_mut(), combined, range.clone())?;
    }
    let whole = root.span();
    index(root.get_ref(), "", &mut source.fields);
    T::deserialize(toml::de::Deserializer::from(root)).map_err(|e| {
        // The root's span means no particular place (a missing top-level field).
        let span = e.span().filter(|s| *s != whole).unwrap_or(0..0);
        Fail(span, None, e.message().to_string())
    })
}

/// One step of a `--set` key: a name, and the element of an array.
struct Step<'a> {
    name: &'a str,
    index: Option<usize>,
}

/// Apply the `--set` at `range` of `combined` to `root`.
fn apply<'i>(root: &mut DeTable<'i>, combined: &'i str, range: Range<usize>) -> Result<(), Fail> {
    let set = &combined[range.clone()];
    let syntax = |m: &str| Fail(range.clone(), Some(SYNTAX.into()), m.to_string());
    let Some(eq) = set.find('=') else { return Err(syntax("expected KEY=VALUE")) };
    let trimmed = |r: Range<usize>| {
        let s = &combined[r.clone()];
        let start = r.start + (s.len() - s.trim_start().len());
        start..start + s.trim().len()
    };
    let key_span = trimmed(range.start..range.start + eq);
    let value_span = trimmed(range.start + eq + 1..range.end);
    let key = &combined[key_span.clone()];
    let mut steps = Vec::new();
    for part in key.split('.') {
        let part = part.trim();
        let (name, index) = match part.strip_suffix(']').and_then(|p| p.split_once('[')) {
            Some((name, i)) => {
                let i = i
                    .trim()
                    .parse()
                    .map_err(|_| syntax(&format!("{part:?}: an index is a number, e.g. servers[0]")))?;
                (name.trim(), Some(i))
            }
            None => (part, None),
        };
        if name.is_empty() {
            return Err(syntax(&format!("{key:?} is not a dotted key such as workload.load or servers[0].count")));
        }
        steps.push(Step { name, index });
    }
    let text = &combined[value_span.clone()];
    let value = match DeValue::parse(text) {
        Ok(v) => shift(v, value_span.start),
        Err(_) => Spanned::new(value_span.clone(), DeValue::String(Cow::Borrowed(text))),
    };
    let fail = |path: &str, m: String| Fail(key_span.clone(), Some(path.to_string()), m);
    let mut table = root;
    let mut path = String::new();
    let last = steps.len() - 1;
    for (k, step) in steps.iter().enumerate() {
        if !path.is_empty() {
            path.push('.');
        }
        path.push_str(step.name);
        if k == last && step.index.is_none() {
            table.insert(Spanned::new(key_span.clone(), Cow::Borrowed(step.name)), value);
            return Ok(());
        }
        if step.index.is_some() && !table.contains_key(step.name) {
            return Err(fail(&path, "is not in the file: --set can name an existing element only".into()));
        }
        let key = Spanned::new(key_span.clone(), Cow::Borrowed(step.name));
        let slot = table.entry(key).or_insert_with(|| Spanned::new(key_span.clone(), DeValue::Table(DeTable::new())));
        let slot = match step.index {
            Some(i) => {
                let kind = slot.get_ref().type_str();
                let DeValue::Array(items) = slot.get_mut() else {
                    return Err(fail(&path, format!("is a {kind}, not an array")));
                };
                let n = items.len();
                path.push_str(&format!("[{i}]"));
                let Some(item) = items.get_mut(i) else {
                    return Err(fail(&path, format!("out of range: the array has {n} element(s)")));
                };
                if k == last {
                    *item = value;
                    return Ok(());
                }
                item
            }
            None if matches!(slot.get_ref(), DeValue::Array(_)) => {
                return Err(fail(&path, format!("is an array: name an element, e.g. {path}[0]")));
            }
            None => slot,
        };
        table = match slot.get_mut() {
            DeValue::Table(t) => t,
            other => return Err(fail(&path, format!("is a {}, not a table", other.type_str()))),
        };
    }
    unreachable!("the last step returns")
}

/// `v` with every span moved `by` bytes on (a value parsed alone, placed
/// where its text sits in the combined buffer).
fn shift(v: Spanned<DeValue<'_>>, by: usize) -> Spanned<DeValue<'_>> {
    let at = |r: Range<usize>| r.start + by..r.end + by;
    let span = at(v.span());
    let value = match v.into_inner() {
        DeValue::Array(items) => DeValue::Array(items.into_iter().map(|x| shift(x, by)).collect()),
        DeValue::Table(t) => DeValue::Table(
            t.into_iter().map(|(k, x)| (Spanned::new(at(k.span()), k.into_inner()), shift(x, by))).collect(),
        ),
        other => other,
    };
    Spanned::new(span, value)
}

/// Record every key under `table` (named `prefix`) in `out`.
fn index(table: &DeTable<'_>, prefix: &str, out: &mut Vec<Field>) {
    for (key, value) in table {
        let path = if prefix.is_empty() { key.get_ref().to_string() } else { format!("{prefix}.{}", key.get_ref()) };
        let string = value.get_ref().as_str().map(str::to_string);
        out.push(Field { path: path.clone(), key: Some(key.span()), value: value.span(), string });
        walk(value, &path, out);
    }
}

fn walk(value: &Spanned<DeValue<'_>>, path: &str, out: &mut Vec<Field>) {
    match value.get_ref() {
        DeValue::Table(t) => index(t, path, out),
        DeValue::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                let path = format!("{path}[{i}]");
                let string = item.get_ref().as_str().map(str::to_string);
                out.push(Field { path: path.clone(), key: None, value: item.span(), string });
                walk(item, &path, out);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;
    use crate::Dur;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Doc {
        #[serde(default)]
        name: String,
        #[serde(default)]
        servers: Vec<Server>,
        #[serde(default)]
        net: Option<Net>,
        #[serde(default)]
        routing: Option<Routing>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Server {
        count: u32,
        #[serde(default)]
        service: Option<Dur>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Net {
        delay: Dur,
        #[serde(default)]
        hops: Vec<Hop>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Hop {
        gbps: f64,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields, tag = "scheme", rename_all = "kebab-case")]
    enum Routing {
        Ecmp {},
        Drill { d: u32 },
    }

    const TEXT: &str = "name = \"t\"\n\
                        servers = [{ count = 1 }, { count = 2, service = \"5ms\" }]\n\
                        \n\
                        [net]\n\
                        delay = \"1us\"\n\
                        hops = [\n  { gbps = 10 },\n  { gbps = 40 },\n]\n";

    fn load(text: &str, sets: &[&str]) -> Result<(Doc, Source), Error> {
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        parse(Path::new("t.toml"), text, &sets)
    }

    fn err(text: &str, sets: &[&str]) -> Error {
        load(text, sets).unwrap_err()
    }

    #[test]
    fn fields_of_inline_and_array_tables_have_their_own_lines() {
        let (doc, src) = load(TEXT, &[]).unwrap();
        assert_eq!(doc.servers[1].service, Some(Dur(5_000_000)));
        assert_eq!(doc.net.as_ref().map(|n| n.hops[1].gbps), Some(40.0));
        let at = |field: &str| {
            let e = src.error_in(field, "x");
            (e.line, e.column)
        };
        assert_eq!(at("name"), (1, 8));
        assert_eq!(at("servers[1].service"), (2, 50));
        assert_eq!(at("servers[0].count"), (2, 22));
        assert_eq!(at("net.delay"), (5, 9));
        assert_eq!(at("net.hops[1].gbps"), (8, 12));
        // A field left out is located at the table that holds it.
        assert_eq!(at("servers[0].service"), (2, 12));
        assert_eq!(at("routing.d"), (0, 0));
    }

    #[test]
    fn bad_values_name_file_line_column_and_field() {
        let e = err(&TEXT.replace("{ gbps = 40 }", "{ gbps = \"fast\" }"), &[]);
        assert_eq!((e.line, e.column, e.field.as_str()), (8, 12, "net.hops[1].gbps"), "{e}");
        assert!(e.to_string().starts_with("t.toml:8:12: net.hops[1].gbps: "), "{e}");
        let e = err(&TEXT.replace("service = \"5ms\"", "service = \"5 parsecs\""), &[]);
        assert_eq!((e.line, e.field.as_str()), (2, "servers[1].service"), "{e}");
        assert!(e.message.contains("parsecs"), "{e}");
        let e = err(&TEXT.replace("delay = ", "dleay = "), &[]);
        assert_eq!((e.line, e.column, e.field.as_str()), (5, 1, "net.dleay"), "{e}");
        let e = err(&TEXT.replace("{ count = 1 }", "{ count = 1, cuont = 2 }"), &[]);
        assert_eq!((e.line, e.field.as_str()), (2, "servers[0].cuont"), "{e}");
        let e = err("name = \"t\"\n[net]\n", &[]);
        assert_eq!((e.line, e.field.as_str()), (2, "net"), "{e}");
        assert!(e.message.contains("missing field `delay`"), "{e}");
        let e = err("name = 't\n", &[]);
        assert_eq!((e.line, e.field.as_str()), (1, SYNTAX), "{e}");
    }

    #[test]
    fn checks_that_name_their_field_are_located_there() {
        let (_, src) = load(TEXT, &[]).unwrap();
        let e = src.error_from("net", "net.delay must be greater than 0");
        assert_eq!((e.line, e.field.as_str(), e.message.as_str()), (5, "net.delay", "must be greater than 0"));
        let e = src.error_from("servers[1]", "is wrong");
        assert_eq!((e.line, e.column, e.field.as_str()), (2, 27, "servers[1]"));
    }

    #[test]
    fn sets_override_values_and_errors_name_them() {
        let (doc, src) =
            load(TEXT, &["net.delay=30us", "servers[0].count=7", "routing.scheme=drill", "routing.d=4"]).unwrap();
        assert_eq!(doc.net.as_ref().unwrap().delay, Dur(30_000));
        assert_eq!(doc.servers[0].count, 7);
        assert!(matches!(doc.routing, Some(Routing::Drill { d: 4 })));
        assert!(src.is_set("net.delay") && !src.is_set("name"));
        assert_eq!(src.error_in("routing.d", "too many").to_string(), "--set routing.d=4: routing.d: too many");
        let (doc, _) = load(TEXT, &["net = { delay = \"2us\", hops = [{ gbps = 1 }] }", "name = 'x'"]).unwrap();
        assert_eq!((doc.net.unwrap().hops.len(), doc.name.as_str()), (1, "x"));

        let e = err(TEXT, &["net.delay=30 parsecs"]);
        assert_eq!((e.set.as_deref(), e.field.as_str()), (Some("net.delay=30 parsecs"), "net.delay"), "{e}");
        let e = err(TEXT, &["net.dleay=3us"]);
        assert_eq!(e.to_string().split(": ").take(2).collect::<Vec<_>>(), ["--set net.dleay=3us", "net.dleay"], "{e}");
        let e = err(TEXT, &["net = { delay = \"2us\", hops = [{ gbps = 1, mtu = 9000 }] }"]);
        assert_eq!(e.field, "net.hops[0].mtu", "{e}");
        let e = err(TEXT, &["servers.count=3"]);
        assert!(e.to_string().starts_with("--set servers.count=3: servers: is an array"), "{e}");
        let e = err(TEXT, &["servers[5].count=3"]);
        assert_eq!(e.field, "servers[5]", "{e}");
        assert!(e.message.contains("2 element"), "{e}");
        let e = err(TEXT, &["name.first=3"]);
        assert!(e.message.contains("is a string"), "{e}");
        // A --set that makes the file's other keys wrong is named with them.
        let text = format!("{TEXT}[routing]\nscheme = \"drill\"\nd = 3\n");
        let e = err(&text, &["routing.scheme=ecmp", "name=x"]);
        assert_eq!((e.line, e.field.as_str()), (12, "routing.d"), "{e}");
        assert!(e.message.ends_with("(with --set routing.scheme=ecmp)"), "{e}");
        let e = err(TEXT, &["nonsense"]);
        assert_eq!(e.to_string(), "--set nonsense: (syntax): expected KEY=VALUE");
        let e = err(TEXT, &["a..b=1"]);
        assert_eq!(e.field, SYNTAX, "{e}");
    }

    #[test]
    fn the_digest_ignores_layout_and_key_order_and_follows_sets() {
        let file = Path::new("s.toml");
        let a = digest(file, "# a comment\nname = \"x\"\n[net]\nrate = 1_000\nloss = 0.5\n", &[]).unwrap();
        let b = digest(file, "net = { loss = 0.50, rate = 1000 }\nname = 'x'\n", &[]).unwrap();
        assert_eq!(a, b);
        let c = digest(file, "name = \"x\"\nnet = { loss = 0.5, rate = 1000 }\n", &["net.rate=2000".into()]).unwrap();
        assert_ne!(a, c);
        let d = digest(file, "name = \"x\"\nnet = { loss = 0.5, rate = 2000 }\n", &[]).unwrap();
        assert_eq!(c, d);
        let e = digest(file, "name = \"x\"\n", &["net.rate=oops=".into()]);
        assert!(e.is_ok(), "a bare string is a value");
        let bad = digest(file, "name = \n", &[]).unwrap_err();
        assert!(bad.to_string().starts_with("s.toml:1:"), "{bad}");
    }

    #[test]
    fn the_files_a_document_names_are_in_its_digest() {
        let dir = std::env::temp_dir().join(format!("fulcrum-inputs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (a, b) = (dir.join("a.csv"), dir.join("b.csv"));
        std::fs::write(&a, "1,2\n").unwrap();
        std::fs::write(&b, "3,4\n").unwrap();
        let read =
            |files: &[&Path]| Inputs::record(|| files.iter().map(|f| read_input(f).unwrap()).collect::<Vec<_>>());
        let (texts, ab) = read(&[&a, &b]);
        assert_eq!(texts, ["1,2\n", "3,4\n"]);
        assert_eq!(read(&[]).1.digest(7), 7, "no file: the document's digest");
        assert_ne!(ab.digest(7), 7);
        assert_eq!(read(&[&a, &b]).1.digest(7), ab.digest(7));
        assert_ne!(read(&[&b, &a]).1.digest(7), ab.digest(7), "order counts");
        std::fs::write(&b, "3,5\n").unwrap();
        assert_ne!(read(&[&a, &b]).1.digest(7), ab.digest(7), "contents count");
        // Outside `record` nothing is kept.
        read_input(&a).unwrap();
        assert_eq!(read(&[]).1, Inputs::default());
        assert!(read_input(&dir.join("none.csv")).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

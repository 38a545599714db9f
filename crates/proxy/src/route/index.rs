//! A table's conditions, indexed so that one request is checked against
//! all its routes at once.
//!
//! Each subject a condition reads (the host, the method, the path, a header,
//! a query parameter, a certificate field) is a [`Column`]. A column knows,
//! for each value a condition wants, the set of routes ([`Bits`], one bit
//! per route in order) that want it: exact values by their hash, prefixes
//! and suffixes in a list, regular expressions by their pattern in the
//! subject's set. A request's candidates start as every route and are
//! intersected with each column's routes that hold; the lowest bit left is
//! the first route that matches. A route with two conditions on one subject
//! (two headers of the same name) has them in two columns, so that a column
//! holds at most one condition per route.

use http::Method;
use xxhash_rust::xxh64::xxh64;

use super::matcher::{CertField, Host, PathMatch, Route, Value};

/// A set of routes: bit `i` of word `i / 64` is route `i`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Bits(Box<[u64]>);

impl Bits {
    /// No route of a table of `words` words.
    pub(crate) fn none(words: usize) -> Bits {
        Bits(vec![0; words].into_boxed_slice())
    }

    /// Every route of a table of `n`.
    pub(crate) fn all(n: usize) -> Bits {
        let mut b = Bits::none(n.div_ceil(64));
        (0..n).for_each(|i| b.set(i));
        b
    }

    pub(crate) fn set(&mut self, i: usize) {
        if let Some(w) = self.0.get_mut(i / 64) {
            *w |= 1 << (i % 64);
        }
    }

    pub(crate) fn words(&self) -> &[u64] {
        &self.0
    }
}

/// `into |= b`.
pub(crate) fn or(into: &mut [u64], b: &Bits) {
    into.iter_mut().zip(b.words()).for_each(|(x, y)| *x |= y);
}

/// `into &= b`.
pub(crate) fn and(into: &mut [u64], b: &[u64]) {
    into.iter_mut().zip(b).for_each(|(x, y)| *x &= y);
}

/// `into &= !b`.
pub(crate) fn and_not(into: &mut [u64], b: &Bits) {
    into.iter_mut().zip(b.words()).for_each(|(x, y)| *x &= !y);
}

/// Whether `a` has a route that `b` lacks.
pub(crate) fn any_not_in(a: &[u64], b: &Bits) -> bool {
    a.iter().zip(b.words()).any(|(x, y)| x & !y != 0)
}

/// Whether `a` and `b` share a route.
pub(crate) fn meet(a: &[u64], b: &Bits) -> bool {
    a.iter().zip(b.words()).any(|(x, y)| x & y != 0)
}

/// The lowest route of `a`.
pub(crate) fn first(a: &[u64]) -> Option<usize> {
    a.iter().enumerate().find(|(_, w)| **w != 0).map(|(i, w)| i * 64 + w.trailing_zeros() as usize)
}

/// What a column's conditions read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum On {
    Host,
    Method,
    Path,
    /// A header, by its index in the table's header names.
    Header(usize),
    Query(Box<str>),
    Cert(CertField),
}

impl On {
    /// Cheap subjects first: a column is only read while candidates need it.
    fn rank(&self) -> u8 {
        match self {
            On::Host => 0,
            On::Method => 1,
            On::Path => 2,
            On::Header(_) => 3,
            On::Query(_) => 4,
            On::Cert(_) => 5,
        }
    }
}

/// One subject's conditions, at most one per route, by the value they want.
#[derive(Debug)]
pub(crate) struct Column {
    pub(crate) on: On,
    /// Which of a route's conditions on `on` this column holds (0: its first).
    nth: usize,
    /// Routes without a condition here.
    pub(crate) always: Bits,
    /// Routes wanting the subject present, or absent.
    pub(crate) present: Bits,
    pub(crate) absent: Bits,
    /// Routes wanting one exact value (host, path, header, parameter, name).
    pub(crate) exact: Exact,
    /// Host suffixes (`.example.com`) or path prefixes, with their routes.
    pub(crate) affixes: Vec<(Box<str>, Bits)>,
    pub(crate) methods: Vec<(Method, Bits)>,
    /// The regex set of the subject, and per pattern of it the routes
    /// (indexed by pattern; empty for a pattern no route here uses).
    pub(crate) set: usize,
    pub(crate) regex: Vec<Bits>,
    /// Every route of `regex`: the set need only run if one is a candidate.
    pub(crate) regex_routes: Bits,
}

impl Column {
    fn new(on: On, nth: usize, words: usize) -> Column {
        Column {
            on,
            nth,
            always: Bits::none(words),
            present: Bits::none(words),
            absent: Bits::none(words),
            exact: Exact::default(),
            affixes: Vec::new(),
            methods: Vec::new(),
            set: 0,
            regex: Vec::new(),
            regex_routes: Bits::none(words),
        }
    }

    /// `into |=` the routes wanting exactly `value`.
    pub(crate) fn or_exact(&self, into: &mut [u64], value: &[u8]) {
        if let Some(b) = self.exact.get(value) {
            or(into, b);
        }
    }

    /// `into |=` the routes whose present/absent/exact condition `value`
    /// (`None`: absent) meets.
    pub(crate) fn or_value(&self, into: &mut [u64], value: Option<&[u8]>) {
        match value {
            None => or(into, &self.absent),
            Some(v) => {
                or(into, &self.present);
                self.or_exact(into, v);
            }
        }
    }
}

/// Routes by the exact value they want. Values are found by their hash
/// (the project's xxh64), kept sorted; a few are compared directly.
#[derive(Debug, Default)]
pub(crate) struct Exact(Vec<(u64, Box<[u8]>, Bits)>);

/// Up to this many values, a lookup compares them all rather than hashing.
const COMPARE_ALL: usize = 4;

impl Exact {
    /// The routes wanting `value`, added if new.
    fn entry(&mut self, value: &str, words: usize) -> &mut Bits {
        let (hash, value) = (xxh64(value.as_bytes(), 0), value.as_bytes());
        let i = match self.0.iter().position(|e| e.0 == hash && *e.1 == *value) {
            Some(i) => i,
            None => {
                let at = self.0.partition_point(|e| e.0 <= hash);
                self.0.insert(at, (hash, value.into(), Bits::none(words)));
                at
            }
        };
        &mut self.0[i].2
    }

    /// The routes wanting exactly `value`.
    pub(crate) fn get(&self, value: &[u8]) -> Option<&Bits> {
        if self.0.len() <= COMPARE_ALL {
            return self.0.iter().find(|e| *e.1 == *value).map(|e| &e.2);
        }
        let hash = xxh64(value, 0);
        let from = self.0.partition_point(|e| e.0 < hash);
        self.0[from..].iter().take_while(|e| e.0 == hash).find(|e| *e.1 == *value).map(|e| &e.2)
    }
}

/// The entry of `key` in `list`, added if new.
fn entry<K: PartialEq>(list: &mut Vec<(K, Bits)>, key: K, words: usize) -> &mut Bits {
    let i = list.iter().position(|(k, _)| *k == key).unwrap_or_else(|| {
        list.push((key, Bits::none(words)));
        list.len() - 1
    });
    &mut list[i].1
}

/// A table's index: its columns, cheap subjects first.
#[derive(Debug, Default)]
pub(crate) struct Index {
    /// Every route.
    pub(crate) all: Bits,
    /// Routes whose only path condition is the default prefix `/`, which a
    /// path not starting with `/` (`*`) fails.
    pub(crate) slash: Bits,
    pub(crate) columns: Vec<Column>,
    /// Per route, the number of columns to read before it is known to match
    /// (one past its last column with a condition).
    pub(crate) done_after: Vec<usize>,
}

impl Default for Bits {
    fn default() -> Self {
        Bits::none(0)
    }
}

/// One condition of a route, for the column of its subject.
enum Cond<'r> {
    Host(&'r Host),
    Methods(&'r [Method]),
    Path(&'r PathMatch),
    Value(&'r Value),
}

impl Index {
    /// The index of `routes`' conditions.
    pub(crate) fn new(routes: &[Route]) -> Index {
        let n = routes.len();
        let words = n.div_ceil(64);
        let mut columns: Vec<Column> = Vec::new();
        let mut slash = Bits::none(words);
        for (i, r) in routes.iter().enumerate() {
            let mut conds: Vec<(On, Cond)> = Vec::new();
            if let Some(h) = &r.host {
                conds.push((On::Host, Cond::Host(h)));
            }
            if !r.methods.is_empty() {
                conds.push((On::Method, Cond::Methods(&r.methods)));
            }
            match &r.path {
                PathMatch::Prefix(p) if p == "/" => slash.set(i),
                p => conds.push((On::Path, Cond::Path(p))),
            }
            conds.extend(r.headers.iter().map(|(h, v)| (On::Header(*h), Cond::Value(v))));
            conds.extend(r.query.iter().map(|(q, v)| (On::Query(q.as_str().into()), Cond::Value(v))));
            conds.extend(r.client_cert.iter().map(|(f, v)| (On::Cert(*f), Cond::Value(v))));
            for (k, (on, cond)) in conds.iter().enumerate() {
                let nth = conds[..k].iter().filter(|(o, _)| o == on).count();
                let c = match columns.iter().position(|c| c.on == *on && c.nth == nth) {
                    Some(c) => c,
                    None => {
                        columns.push(Column::new(on.clone(), nth, words));
                        columns.len() - 1
                    }
                };
                add(&mut columns[c], i, cond, words);
            }
        }
        columns.sort_by_key(|c| (c.on.rank(), c.nth));
        let all = Bits::all(n);
        let mut done_after = vec![0; n];
        for (c, column) in columns.iter_mut().enumerate() {
            // `always` has been each route with a condition here: invert it.
            let mut always = all.clone();
            and_not(&mut always.0, &column.always);
            column.always = always;
            for (i, done) in done_after.iter_mut().enumerate() {
                if column.always.0[i / 64] & (1 << (i % 64)) == 0 {
                    *done = c + 1;
                }
            }
        }
        Index { all, slash, columns, done_after }
    }
}

/// Add route `i`'s condition `cond` to `column` (whose `always` holds,
/// while building, the routes with a condition).
fn add(column: &mut Column, i: usize, cond: &Cond, words: usize) {
    column.always.set(i);
    match cond {
        Cond::Host(Host::Exact(h)) => column.exact.entry(h, words).set(i),
        Cond::Host(Host::Suffix(s)) => entry(&mut column.affixes, s.as_str().into(), words).set(i),
        Cond::Methods(methods) => methods.iter().for_each(|m| entry(&mut column.methods, m.clone(), words).set(i)),
        Cond::Path(PathMatch::Prefix(p)) => entry(&mut column.affixes, p.as_str().into(), words).set(i),
        Cond::Path(PathMatch::Exact(p)) => column.exact.entry(p, words).set(i),
        Cond::Path(PathMatch::Regex(p)) => add_regex(column, i, 0, *p, words),
        Cond::Value(Value::Present) => column.present.set(i),
        Cond::Value(Value::Absent) => column.absent.set(i),
        Cond::Value(Value::Exact(v)) => column.exact.entry(v, words).set(i),
        Cond::Value(Value::Regex(set, p)) => add_regex(column, i, *set, *p, words),
    }
}

fn add_regex(column: &mut Column, i: usize, set: usize, pattern: usize, words: usize) {
    column.set = set;
    if column.regex.len() <= pattern {
        column.regex.resize(pattern + 1, Bits::default());
    }
    if column.regex[pattern].0.is_empty() {
        column.regex[pattern] = Bits::none(words);
    }
    column.regex[pattern].set(i);
    column.regex_routes.set(i);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_values_are_found_by_hash_or_by_comparing_them_all() {
        for n in [1, COMPARE_ALL, COMPARE_ALL + 1, 100] {
            let mut exact = Exact::default();
            for i in 0..n {
                exact.entry(&format!("t{i}"), 2).set(i);
                // A value wanted twice keeps one entry, with both routes.
                exact.entry(&format!("t{i}"), 2).set(127 - i % 64);
            }
            assert_eq!(exact.0.len(), n);
            for i in 0..n {
                let routes = exact.get(format!("t{i}").as_bytes()).unwrap_or_else(|| panic!("t{i} of {n}"));
                assert_eq!(routes.words()[i / 64] & (1 << (i % 64)), 1 << (i % 64));
                assert_ne!(routes.words()[1] & (1 << (63 - i % 64)), 0);
            }
            assert!(exact.get(b"t").is_none() && exact.get(format!("t{n}").as_bytes()).is_none());
        }
    }
}

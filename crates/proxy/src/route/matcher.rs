//! Matching a request against a listener's compiled routes.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use fulcrum_resilience::{RateLimitConfig, RetryPolicy};
use http::header::{HeaderMap, HeaderName};
use http::{Method, Request};

use super::action::{Action, HeaderOps, Rewrite, Split};
use super::index::{and, and_not, any_not_in, first, meet, or, Column, Index, On};
use super::regexes::Regexes;
use crate::tls::ClientCert;

/// A host condition, lowercased: the whole host, or a `*.` wildcard kept as
/// its suffix (`.example.com`: any name under it, not the name itself).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Host {
    Exact(String),
    Suffix(String),
}

/// A path condition; `Regex` is a pattern of the path's set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PathMatch {
    Prefix(String),
    Exact(String),
    Regex(usize),
}

/// A header or query parameter condition; `Regex(set, pattern)` names a
/// pattern of one of the table's sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Value {
    Present,
    Absent,
    Exact(String),
    Regex(usize, usize),
}

/// What a regex set is run on: the path, a header (by its index in the
/// table's header names), a query parameter, a client certificate's field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Subject {
    Path,
    Header(usize),
    Query(String),
    ClientCert(CertField),
}

/// The part of a verified client certificate a condition reads: its
/// subject, or its subject alternative names (any one of them may match).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CertField {
    Subject,
    San,
}

impl CertField {
    /// The field's values in `cert` (none without a certificate).
    fn values(self, cert: Option<&ClientCert>) -> impl Iterator<Item = &str> {
        let (subject, names): (Option<&str>, &[Box<str>]) = match (self, cert) {
            (_, None) => (None, &[]),
            (CertField::Subject, Some(c)) => (Some(&c.subject), &[]),
            (CertField::San, Some(c)) => (None, &c.names),
        };
        subject.into_iter().chain(names.iter().map(|n| &**n))
    }
}

/// One compiled route: its conditions (all must hold) and what it does.
#[derive(Debug)]
pub struct Route {
    /// The route's `name`, for `$route` and the access log.
    pub name: Option<Arc<str>>,
    pub(crate) host: Option<Host>,
    pub(crate) path: PathMatch,
    pub(crate) methods: Vec<Method>,
    /// Conditions on headers, by index in the table's header names.
    pub(crate) headers: Vec<(usize, Value)>,
    pub(crate) query: Vec<(String, Value)>,
    /// Conditions on the verified client certificate.
    pub(crate) client_cert: Vec<(CertField, Value)>,
    /// Forward, redirect or answer.
    pub action: Action,
    /// The path and host sent upstream.
    pub rewrite: Option<Rewrite>,
    /// Applied to the request sent upstream.
    pub request_headers: HeaderOps,
    /// Applied to the upstream's response.
    pub response_headers: HeaderOps,
    /// Overrides the cluster's `request_timeout`.
    pub timeout: Option<Duration>,
    /// Overrides the cluster's retry policy.
    pub retries: Option<RetryPolicy>,
    /// A local rate limit on the route's requests (429 beyond it).
    pub rate_limit: Option<RateLimitConfig>,
}

impl Route {
    /// A route taking every request to `cluster`, unchanged.
    pub fn to_cluster(cluster: usize) -> Route {
        Route {
            name: None,
            host: None,
            path: PathMatch::Prefix("/".into()),
            methods: Vec::new(),
            headers: Vec::new(),
            query: Vec::new(),
            client_cert: Vec::new(),
            action: Action::Forward(Split::one(cluster)),
            rewrite: None,
            request_headers: HeaderOps::default(),
            response_headers: HeaderOps::default(),
            timeout: None,
            retries: None,
            rate_limit: None,
        }
    }

    /// The path prefix the route matches by, if it matches by one.
    pub fn path_prefix(&self) -> Option<&str> {
        match &self.path {
            PathMatch::Prefix(p) => Some(p),
            _ => None,
        }
    }

    /// The cluster every request of the route goes to, if it forwards to one.
    pub fn cluster(&self) -> Option<usize> {
        match &self.action {
            Action::Forward(split) => split.only(),
            _ => None,
        }
    }
}

/// A listener's routes, compiled: tried in order, the first match wins.
#[derive(Debug, Default)]
pub struct RouteTable {
    pub(crate) routes: Vec<Route>,
    /// Every header name a condition reads, each once.
    pub(crate) header_names: Vec<HeaderName>,
    /// One set per subject that has regular expressions.
    pub(crate) sets: Vec<(Subject, Regexes)>,
    /// The routes' conditions by subject, to check them all at once.
    index: Index,
}

/// What every column of one request reads: its path and host, and the
/// client's verified certificate.
struct Subjects<'r> {
    path: &'r str,
    /// The host, lowercased and without port (if a route reads it).
    host: Option<&'r str>,
    client: Option<&'r ClientCert>,
}

/// Words of candidate routes kept on the stack (tables up to 256 routes).
const INLINE_WORDS: usize = 4;

impl RouteTable {
    /// One route taking everything to `cluster` (the quick mode's).
    pub fn to_cluster(cluster: usize) -> RouteTable {
        RouteTable::new(vec![Route::to_cluster(cluster)], Vec::new(), Vec::new())
    }

    /// The table of `routes`, whose conditions read `header_names` and
    /// run `sets`, indexed by subject.
    pub(crate) fn new(routes: Vec<Route>, header_names: Vec<HeaderName>, sets: Vec<(Subject, Regexes)>) -> Self {
        let index = Index::new(&routes);
        RouteTable { routes, header_names, sets, index }
    }

    /// The routes, in order.
    pub fn routes(&self) -> &[Route] {
        &self.routes
    }

    /// Whether a route reads the host: only then need the caller find it.
    pub fn needs_host(&self) -> bool {
        self.index.columns.first().is_some_and(|c| c.on == On::Host)
    }

    /// The first route `req` (whose host, lowercased and without port, is
    /// `host`; from a client that presented `client`) matches, and its
    /// index (the key of its rate limiter).
    ///
    /// Every route starts as a candidate; each subject some candidate has a
    /// condition on removes the candidates whose condition fails, until the
    /// first candidate has no condition left to check.
    pub fn find<'t, B>(
        &'t self,
        req: &Request<B>,
        host: Option<&str>,
        client: Option<&ClientCert>,
    ) -> Option<(usize, &'t Route)> {
        let words = self.index.all.words().len();
        let (mut inline, mut heap) = ([0; 2 * INLINE_WORDS], Vec::new());
        let buffer = if words <= INLINE_WORDS {
            &mut inline[..2 * words]
        } else {
            heap.resize(2 * words, 0);
            &mut heap[..]
        };
        let (candidates, column) = buffer.split_at_mut(words);
        candidates.copy_from_slice(self.index.all.words());
        let path = req.uri().path();
        if !path.starts_with('/') {
            and_not(candidates, &self.index.slash);
        }
        let subjects = Subjects { path, host, client };
        for (c, col) in self.index.columns.iter().enumerate() {
            let lowest = first(candidates)?;
            if self.index.done_after.get(lowest).is_some_and(|d| *d <= c) {
                break;
            }
            if any_not_in(candidates, &col.always) {
                self.holds(col, candidates, column, req, &subjects);
                and(candidates, column);
            }
        }
        let i = first(candidates)?;
        Some((i, self.routes.get(i)?))
    }

    /// Into `out`, the routes of `col` whose condition `req` meets (and
    /// those without one); the subject's regexes run only if a route of
    /// them is among the `candidates`.
    fn holds<B>(&self, col: &Column, candidates: &[u64], out: &mut [u64], req: &Request<B>, s: &Subjects) {
        out.copy_from_slice(col.always.words());
        let regex = !col.regex.is_empty() && meet(candidates, &col.regex_routes);
        match &col.on {
            On::Host => {
                if let Some(h) = s.host {
                    col.or_exact(out, h.as_bytes());
                    for (suffix, routes) in &col.affixes {
                        if h.len() > suffix.len() && h.ends_with(&**suffix) {
                            or(out, routes);
                        }
                    }
                }
            }
            On::Method => {
                if let Some((_, routes)) = col.methods.iter().find(|(m, _)| m == req.method()) {
                    or(out, routes);
                }
            }
            On::Path => {
                col.or_exact(out, s.path.as_bytes());
                for (prefix, routes) in &col.affixes {
                    if s.path.starts_with(&**prefix) {
                        or(out, routes);
                    }
                }
                if regex {
                    self.or_regex(col, out, s.path.as_bytes());
                }
            }
            On::Header(name) => {
                let value = header(req.headers(), &self.header_names[*name]);
                col.or_value(out, value.as_deref());
                if let (true, Some(v)) = (regex, &value) {
                    self.or_regex(col, out, v);
                }
            }
            On::Query(name) => {
                let value = param(req.uri().query(), name);
                col.or_value(out, value.map(str::as_bytes));
                if let (true, Some(v)) = (regex, value) {
                    self.or_regex(col, out, v.as_bytes());
                }
            }
            On::Cert(field) => {
                let mut values = field.values(s.client).peekable();
                if values.peek().is_none() {
                    or(out, &col.absent);
                }
                for v in values {
                    or(out, &col.present);
                    col.or_exact(out, v.as_bytes());
                    if regex {
                        self.or_regex(col, out, v.as_bytes());
                    }
                }
            }
        }
    }

    /// `out |=` the routes of `col` whose pattern matches `text`.
    fn or_regex(&self, col: &Column, out: &mut [u64], text: &[u8]) {
        if let Some((_, regexes)) = self.sets.get(col.set) {
            regexes.each_match(text, |p| {
                if let Some(routes) = col.regex.get(p) {
                    or(out, routes);
                }
            });
        }
    }
}

/// A header's value as conditions see it: its values joined with `,`
/// (none: absent), as bytes.
fn header<'r>(headers: &'r HeaderMap, name: &HeaderName) -> Option<Cow<'r, [u8]>> {
    let mut values = headers.get_all(name).iter();
    let first = values.next()?.as_bytes();
    let Some(second) = values.next() else { return Some(Cow::Borrowed(first)) };
    let mut joined = first.to_vec();
    for more in std::iter::once(second).chain(values) {
        joined.push(b',');
        joined.extend_from_slice(more.as_bytes());
    }
    Some(Cow::Owned(joined))
}

/// The first value of parameter `name` in `query` as sent (not
/// percent-decoded; `""` for a bare `?name`).
fn param<'r>(query: Option<&'r str>, name: &str) -> Option<&'r str> {
    let pairs = query?.split('&').filter(|p| !p.is_empty());
    pairs.map(|p| p.split_once('=').unwrap_or((p, ""))).find(|(k, _)| *k == name).map(|(_, v)| v)
}

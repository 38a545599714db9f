//! Matching a request against a listener's compiled routes.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use fulcrum_resilience::{RateLimitConfig, RetryPolicy};
use http::header::{HeaderMap, HeaderName};
use http::{Method, Request};
use regex::{RegexSet, SetMatches};

use super::action::{Action, HeaderOps, Rewrite, Split};
use super::index::{and, and_not, any_not_in, first, meet, or, Column, Index, On};
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
    pub(crate) sets: Vec<(Subject, RegexSet)>,
    /// The routes' conditions by subject, to check them all at once.
    index: Index,
}

/// A set's matches for one request, found when first needed.
enum Seen {
    NotYet,
    /// The subject (a header, a parameter) is not in the request.
    Absent,
    Found(SetMatches),
    /// A subject with several values (a certificate's names): any may match.
    FoundAny(Vec<SetMatches>),
}

/// What one request has found so far: its path and host, the sets' matches, the headers
/// conditions read (each looked up once) and its query's parameters; and
/// the client's verified certificate.
struct Scratch<'r> {
    path: &'r str,
    /// The host, lowercased and without port (if a route reads it).
    host: Option<&'r str>,
    client: Option<&'r ClientCert>,
    seen: Vec<Seen>,
    headers: Vec<Option<Option<Cow<'r, str>>>>,
    query: Option<Vec<(&'r str, &'r str)>>,
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
    pub(crate) fn new(routes: Vec<Route>, header_names: Vec<HeaderName>, sets: Vec<(Subject, RegexSet)>) -> Self {
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
        let mut scratch = Scratch { path, host, client, seen: Vec::new(), headers: Vec::new(), query: None };
        for (c, col) in self.index.columns.iter().enumerate() {
            let lowest = first(candidates)?;
            if self.index.done_after.get(lowest).is_some_and(|d| *d <= c) {
                break;
            }
            if any_not_in(candidates, &col.always) {
                self.holds(col, candidates, column, req, &mut scratch);
                and(candidates, column);
            }
        }
        let i = first(candidates)?;
        Some((i, self.routes.get(i)?))
    }

    /// Into `out`, the routes of `col` whose condition `req` meets (and
    /// those without one); the regex set runs only if a route of it is
    /// among the `candidates`.
    fn holds<'r, B>(
        &self,
        col: &Column,
        candidates: &[u64],
        out: &mut [u64],
        req: &'r Request<B>,
        s: &mut Scratch<'r>,
    ) {
        out.copy_from_slice(col.always.words());
        match &col.on {
            On::Host => {
                if let Some(h) = s.host {
                    col.or_exact(out, h);
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
                col.or_exact(out, s.path);
                for (prefix, routes) in &col.affixes {
                    if s.path.starts_with(&**prefix) {
                        or(out, routes);
                    }
                }
            }
            On::Header(name) => col.or_value(out, self.header(*name, req, s)),
            On::Query(name) => col.or_value(out, param(query(req, s), name)),
            On::Cert(field) => {
                let mut values = field.values(s.client).peekable();
                if values.peek().is_none() {
                    or(out, &col.absent);
                } else {
                    or(out, &col.present);
                    values.for_each(|v| col.or_exact(out, v));
                }
            }
        }
        if !col.regex.is_empty() && meet(candidates, &col.regex_routes) {
            match self.run(col.set, req, s) {
                Some(Seen::Found(m)) => {
                    for (pattern, routes) in &col.regex {
                        if m.matched(*pattern) {
                            or(out, routes);
                        }
                    }
                }
                Some(Seen::FoundAny(all)) => {
                    for (pattern, routes) in &col.regex {
                        if all.iter().any(|m| m.matched(*pattern)) {
                            or(out, routes);
                        }
                    }
                }
                _ => {}
            }
        }
    }

    /// What set `set` finds in its subject in `req`; the set runs once per
    /// request.
    fn run<'s, 'r, B>(&self, set: usize, req: &'r Request<B>, s: &'s mut Scratch<'r>) -> Option<&'s Seen> {
        if s.seen.is_empty() {
            s.seen.resize_with(self.sets.len(), || Seen::NotYet);
        }
        let (subject, regexes) = self.sets.get(set)?;
        if matches!(s.seen.get(set), Some(Seen::NotYet)) {
            let found = |text: Option<&str>| text.map_or(Seen::Absent, |t| Seen::Found(regexes.matches(t)));
            let seen = match subject {
                Subject::Path => found(Some(s.path)),
                Subject::Header(name) => found(self.header(*name, req, s)),
                Subject::Query(name) => found(param(query(req, s), name)),
                Subject::ClientCert(field) => {
                    Seen::FoundAny(field.values(s.client).map(|v| regexes.matches(v)).collect())
                }
            };
            s.seen[set] = seen;
        }
        s.seen.get(set)
    }
}

impl RouteTable {
    /// The value of header `name` (an index into `header_names`) as
    /// conditions see it, looked up once per request.
    fn header<'s, 'r, B>(&self, name: usize, req: &'r Request<B>, s: &'s mut Scratch<'r>) -> Option<&'s str> {
        if s.headers.is_empty() {
            s.headers.resize(self.header_names.len(), None);
        }
        let slot = s.headers.get_mut(name)?;
        slot.get_or_insert_with(|| header(req.headers(), &self.header_names[name])).as_deref()
    }
}

/// A header's value as conditions see it: its values joined with `,`
/// (none: absent; not UTF-8: read lossily).
fn header<'r>(headers: &'r HeaderMap, name: &HeaderName) -> Option<Cow<'r, str>> {
    let mut values = headers.get_all(name).iter();
    let first = values.next()?;
    let mut text = String::from_utf8_lossy(first.as_bytes());
    for more in values {
        let t = text.to_mut();
        t.push(',');
        t.push_str(&String::from_utf8_lossy(more.as_bytes()));
    }
    Some(text)
}

/// The request's query parameters as sent (not percent-decoded), split once.
fn query<'r, 's, B>(req: &'r Request<B>, s: &'s mut Scratch<'r>) -> &'s [(&'r str, &'r str)] {
    s.query.get_or_insert_with(|| {
        req.uri()
            .query()
            .unwrap_or("")
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|p| p.split_once('=').unwrap_or((p, "")))
            .collect()
    })
}

/// The first value of parameter `name` (`""` for a bare `?name`).
fn param<'r>(pairs: &[(&'r str, &'r str)], name: &str) -> Option<&'r str> {
    pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| *v)
}

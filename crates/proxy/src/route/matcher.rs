//! Matching a request against a listener's compiled routes.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use fulcrum_resilience::{RateLimitConfig, RetryPolicy};
use http::header::{HeaderMap, HeaderName};
use http::{Method, Request};
use regex::{RegexSet, SetMatches};

use super::action::{Action, HeaderOps, Rewrite, Split};
use crate::tls::ClientCert;

/// A host condition, lowercased: the whole host, or a `*.` wildcard kept as
/// its suffix (`.example.com`: any name under it, not the name itself).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Host {
    Exact(String),
    Suffix(String),
}

impl Host {
    fn matches(&self, host: &str) -> bool {
        match self {
            Host::Exact(h) => h == host,
            Host::Suffix(s) => host.len() > s.len() && host.ends_with(s.as_str()),
        }
    }
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
    /// Whether any route has a host condition (else the host is not read).
    pub(crate) needs_host: bool,
    /// Every header name a condition reads, each once.
    pub(crate) header_names: Vec<HeaderName>,
    /// One set per subject that has regular expressions.
    pub(crate) sets: Vec<(Subject, RegexSet)>,
    /// The routes with an exact host, by that host, in order: a request
    /// only tries those of its own host.
    by_host: HashMap<Box<str>, Vec<usize>>,
    /// The routes without an exact host (any host, or a wildcard), in order.
    any_host: Vec<usize>,
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

/// What one request has found so far: the sets' matches, the headers
/// conditions read (each looked up once) and its query's parameters; and
/// the client's verified certificate.
struct Scratch<'r> {
    client: Option<&'r ClientCert>,
    seen: Vec<Seen>,
    headers: Vec<Option<Option<Cow<'r, str>>>>,
    query: Option<Vec<(&'r str, &'r str)>>,
}

impl RouteTable {
    /// One route taking everything to `cluster` (the quick mode's).
    pub fn to_cluster(cluster: usize) -> RouteTable {
        RouteTable::new(vec![Route::to_cluster(cluster)], Vec::new(), Vec::new())
    }

    /// The table of `routes`, whose conditions read `header_names` and
    /// run `sets`, indexed by exact host.
    pub(crate) fn new(routes: Vec<Route>, header_names: Vec<HeaderName>, sets: Vec<(Subject, RegexSet)>) -> Self {
        let mut by_host: HashMap<Box<str>, Vec<usize>> = HashMap::new();
        let mut any_host = Vec::new();
        for (i, r) in routes.iter().enumerate() {
            match &r.host {
                Some(Host::Exact(h)) => by_host.entry(h.as_str().into()).or_default().push(i),
                _ => any_host.push(i),
            }
        }
        let needs_host = routes.iter().any(|r| r.host.is_some());
        RouteTable { routes, needs_host, header_names, sets, by_host, any_host }
    }

    /// The routes, in order.
    pub fn routes(&self) -> &[Route] {
        &self.routes
    }

    /// Whether a route reads the host: only then need the caller find it.
    pub fn needs_host(&self) -> bool {
        self.needs_host
    }

    /// The first route `req` (whose host, lowercased and without port, is
    /// `host`; from a client that presented `client`) matches, and its
    /// index (the key of its rate limiter).
    pub fn find<'t, B>(
        &'t self,
        req: &Request<B>,
        host: Option<&str>,
        client: Option<&ClientCert>,
    ) -> Option<(usize, &'t Route)> {
        let mut scratch = Scratch { client, seen: Vec::new(), headers: Vec::new(), query: None };
        let path = req.uri().path();
        // The routes of the request's exact host and those for any host,
        // merged in order: the first that matches wins.
        let exact = host.and_then(|h| self.by_host.get(h)).map_or(&[][..], Vec::as_slice);
        let (mut e, mut a) = (0, 0);
        loop {
            let i = match (exact.get(e), self.any_host.get(a)) {
                (Some(&x), Some(&y)) if x < y => {
                    e += 1;
                    x
                }
                (_, Some(&y)) => {
                    a += 1;
                    y
                }
                (Some(&x), None) => {
                    e += 1;
                    x
                }
                (None, None) => return None,
            };
            let route = self.routes.get(i)?;
            if self.matches(route, req, path, host, &mut scratch) {
                return Some((i, route));
            }
        }
    }

    /// Whether `route` takes `req` (to `path`): cheap conditions first. An
    /// exact host was matched by the index that led here.
    fn matches<'r, B>(
        &self,
        route: &Route,
        req: &'r Request<B>,
        path: &str,
        host: Option<&str>,
        s: &mut Scratch<'r>,
    ) -> bool {
        if let Some(h @ Host::Suffix(_)) = &route.host {
            if !host.is_some_and(|host| h.matches(host)) {
                return false;
            }
        }
        let path_ok = match &route.path {
            PathMatch::Prefix(p) => path.starts_with(p.as_str()),
            PathMatch::Exact(p) => path == p,
            PathMatch::Regex(i) => self.regex(0, *i, req, s),
        };
        path_ok
            && (route.methods.is_empty() || route.methods.contains(req.method()))
            && route.headers.iter().all(|(name, v)| match v {
                Value::Regex(set, i) => self.regex(*set, *i, req, s),
                _ => value_matches(v, self.header(*name, req, s)),
            })
            && route.query.iter().all(|(name, v)| match v {
                Value::Regex(set, i) => self.regex(*set, *i, req, s),
                _ => value_matches(v, param(query(req, s), name)),
            })
            && route.client_cert.iter().all(|(field, v)| match v {
                Value::Regex(set, i) => self.regex(*set, *i, req, s),
                Value::Exact(want) => field.values(s.client).any(|x| x == want),
                _ => value_matches(v, field.values(s.client).next()),
            })
    }

    /// Whether pattern `i` of set `set` matches its subject in `req`; the
    /// set runs once per request.
    fn regex<'r, B>(&self, set: usize, i: usize, req: &'r Request<B>, s: &mut Scratch<'r>) -> bool {
        if s.seen.is_empty() {
            s.seen.resize_with(self.sets.len(), || Seen::NotYet);
        }
        let Some((subject, regexes)) = self.sets.get(set) else { return false };
        if matches!(s.seen.get(set), Some(Seen::NotYet)) {
            let found = |text: Option<&str>| text.map_or(Seen::Absent, |t| Seen::Found(regexes.matches(t)));
            let seen = match subject {
                Subject::Path => found(Some(req.uri().path())),
                Subject::Header(name) => found(self.header(*name, req, s)),
                Subject::Query(name) => found(param(query(req, s), name)),
                Subject::ClientCert(field) => {
                    Seen::FoundAny(field.values(s.client).map(|v| regexes.matches(v)).collect())
                }
            };
            s.seen[set] = seen;
        }
        match s.seen.get(set) {
            Some(Seen::Found(m)) => m.matched(i),
            Some(Seen::FoundAny(all)) => all.iter().any(|m| m.matched(i)),
            _ => false,
        }
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

/// A condition other than a regex on a subject's value (`None`: absent).
fn value_matches(v: &Value, value: Option<&str>) -> bool {
    match v {
        Value::Present => value.is_some(),
        Value::Absent => value.is_none(),
        Value::Exact(want) => value == Some(want.as_str()),
        Value::Regex(..) => false,
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

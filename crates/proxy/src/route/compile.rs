//! From the routes as written ([`RawRoute`]) to a [`RouteTable`], checking
//! every pattern, name and value; an error names the field it is about.

use std::sync::Arc;

use bytes::Bytes;
use http::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE};
use http::{Method, StatusCode};

use super::action::{Action, HeaderOps, PathRewrite, Redirect, RegexRewrite, Respond, Rewrite, Split, Template};
use super::matcher::{CertField, Host, PathMatch, Route, RouteTable, Subject, Value};
use super::regexes::Regexes;
use crate::config::{Cluster, RawCondition, RawHeaderOps, RawRedirect, RawRespond, RawRewrite, RawRoute};

/// A route the configuration cannot have: the field (under the listener,
/// e.g. `routes[2].headers[0].regex`) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteError {
    /// The field, from the listener's `routes`.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

/// Largest compiled size of one regular expression (the whole set of a
/// subject gets ten times as much).
const REGEX_SIZE: usize = 1 << 20;

/// The regular expressions of one subject, gathered for its set.
struct Patterns {
    subject: Subject,
    patterns: Vec<String>,
}

/// Compile a listener's routes (at least one) against the defined `clusters`.
pub(crate) fn compile(raw: &[RawRoute], clusters: &[Cluster]) -> Result<RouteTable, RouteError> {
    let mut subjects = vec![Patterns { subject: Subject::Path, patterns: Vec::new() }];
    let mut header_names = Vec::new();
    let mut routes = Vec::with_capacity(raw.len());
    for (i, r) in raw.iter().enumerate() {
        let at = |f: &str| format!("routes[{i}].{f}");
        routes.push(route(r, clusters, &mut subjects, &mut header_names, &at)?);
    }
    let mut sets = Vec::with_capacity(subjects.len());
    for p in subjects {
        let set = Regexes::new(p.patterns, REGEX_SIZE * 10)
            .map_err(|e| RouteError { field: "routes".into(), message: format!("the listener's patterns: {e}") })?;
        sets.push((p.subject, set));
    }
    Ok(RouteTable::new(routes, header_names, sets))
}

type At<'a> = &'a dyn Fn(&str) -> String;

fn fail<T>(field: String, message: impl Into<String>) -> Result<T, RouteError> {
    Err(RouteError { field, message: message.into() })
}

/// Check one pattern on its own (so its error names its field) and add it
/// to `subject`'s set (once: routes that repeat it share it); the pattern's
/// place in that set.
fn pattern(
    subjects: &mut Vec<Patterns>,
    subject: Subject,
    text: &str,
    field: String,
) -> Result<(usize, usize), RouteError> {
    if let Err(e) = super::regexes::compile(&[text.to_string()], REGEX_SIZE, false) {
        return fail(field, format!("not a valid regular expression: {e}"));
    }
    let set = match subjects.iter().position(|p| p.subject == subject) {
        Some(s) => s,
        None => {
            subjects.push(Patterns { subject, patterns: Vec::new() });
            subjects.len() - 1
        }
    };
    let patterns = &mut subjects[set].patterns;
    let i = patterns.iter().position(|p| p == text).unwrap_or_else(|| {
        patterns.push(text.to_string());
        patterns.len() - 1
    });
    Ok((set, i))
}

fn route(
    r: &RawRoute,
    clusters: &[Cluster],
    subjects: &mut Vec<Patterns>,
    names: &mut Vec<HeaderName>,
    at: At,
) -> Result<Route, RouteError> {
    let host = r.host.as_deref().map(|h| host(h, at)).transpose()?;
    let path = path(r, subjects, at)?;
    let mut methods = Vec::new();
    for (i, m) in r.methods.iter().flatten().enumerate() {
        match Method::from_bytes(m.as_bytes()) {
            Ok(method) if !m.is_empty() && m.bytes().all(|b| b.is_ascii_uppercase()) => methods.push(method),
            _ => return fail(at(&format!("methods[{i}]")), format!("{m:?} is not a method in capitals, e.g. \"GET\"")),
        }
    }
    let mut headers = Vec::with_capacity(r.headers.len());
    for (i, c) in r.headers.iter().enumerate() {
        let field = at(&format!("headers[{i}]"));
        let name = header_name(&c.name, format!("{field}.name"))?;
        let index = names.iter().position(|n| *n == name).unwrap_or_else(|| {
            names.push(name);
            names.len() - 1
        });
        headers.push((index, condition(c, subjects, Subject::Header(index), &field)?));
    }
    let mut query = Vec::with_capacity(r.query.len());
    for (i, c) in r.query.iter().enumerate() {
        let field = at(&format!("query[{i}]"));
        if c.name.is_empty() {
            return fail(format!("{field}.name"), "give the parameter's name");
        }
        query.push((c.name.clone(), condition(c, subjects, Subject::Query(c.name.clone()), &field)?));
    }
    let mut client_cert = Vec::with_capacity(r.client_cert.len());
    for (i, c) in r.client_cert.iter().enumerate() {
        let field = at(&format!("client_cert[{i}]"));
        let part = match c.name.as_str() {
            "subject" => CertField::Subject,
            "san" => CertField::San,
            other => return fail(format!("{field}.name"), format!("{other:?} is not \"subject\" or \"san\"")),
        };
        client_cert.push((part, condition(c, subjects, Subject::ClientCert(part), &field)?));
    }
    let action = action(r, clusters, &path, at)?;
    let forwards = matches!(action, Action::Forward(_));
    let only_forward = |given: bool, key: &str| {
        if given && !forwards {
            return fail(at(key), "only a route that forwards (with `cluster` or `clusters`) can have it");
        }
        Ok(())
    };
    only_forward(r.rewrite.is_some(), "rewrite")?;
    only_forward(r.request_headers.is_some(), "request_headers")?;
    only_forward(r.response_headers.is_some(), "response_headers")?;
    only_forward(r.timeout.is_some(), "timeout")?;
    only_forward(r.retries.is_some(), "retries")?;
    if r.timeout.is_some_and(|t| t.is_zero()) {
        return fail(at("timeout"), "must be greater than 0");
    }
    if let Some(p) = &r.retries {
        p.validate().map_err(|e| RouteError { field: at(&format!("retries.{}", e.field)), message: e.message })?;
    }
    Ok(Route {
        name: r.name.as_deref().map(Arc::from),
        host,
        methods,
        headers,
        query,
        client_cert,
        rewrite: r.rewrite.as_ref().map(|w| rewrite(w, &path, at)).transpose()?,
        request_headers: header_ops(r.request_headers.as_ref(), false, &at("request_headers"))?,
        response_headers: header_ops(r.response_headers.as_ref(), true, &at("response_headers"))?,
        path,
        action,
        timeout: r.timeout,
        retries: r.retries.clone(),
        rate_limit: None, // set by the configuration, which checks it with its span
    })
}

/// `example.com` or `*.example.com`, without a port.
fn host(h: &str, at: At) -> Result<Host, RouteError> {
    let h = h.to_ascii_lowercase();
    let name = h.strip_prefix("*.").unwrap_or(&h);
    let ok = !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-' || b == b'_')
        || name.starts_with('[') && name.ends_with(']');
    if !ok {
        return fail(at("host"), format!("{h:?} is not a host name or `*.` followed by one (no port)"));
    }
    Ok(match h.strip_prefix('*') {
        Some(suffix) => Host::Suffix(suffix.to_string()),
        None => Host::Exact(h),
    })
}

/// At most one of `path_prefix`, `path` and `path_regex` (none: prefix `/`).
fn path(r: &RawRoute, subjects: &mut Vec<Patterns>, at: At) -> Result<PathMatch, RouteError> {
    let absolute = |p: &str, key: &str| if p.starts_with('/') { Ok(()) } else { fail(at(key), "must start with /") };
    match (&r.path_prefix, &r.path, &r.path_regex) {
        (Some(p), None, None) => absolute(p, "path_prefix").map(|_| PathMatch::Prefix(p.clone())),
        (None, Some(p), None) => absolute(p, "path").map(|_| PathMatch::Exact(p.clone())),
        (None, None, Some(re)) => Ok(PathMatch::Regex(pattern(subjects, Subject::Path, re, at("path_regex"))?.1)),
        (None, None, None) => Ok(PathMatch::Prefix("/".into())),
        _ => fail(at("path"), "give one of `path_prefix`, `path` and `path_regex`"),
    }
}

/// A header's name, checked.
fn header_name(name: &str, field: String) -> Result<HeaderName, RouteError> {
    HeaderName::from_bytes(name.as_bytes())
        .map_err(|_| RouteError { field, message: format!("{name:?} is not a header name") })
}

/// `present` (true: the default, false: absent), `exact` or `regex`: one.
fn condition(
    c: &RawCondition,
    subjects: &mut Vec<Patterns>,
    subject: Subject,
    field: &str,
) -> Result<Value, RouteError> {
    match (c.present, &c.exact, &c.regex) {
        (None | Some(true), None, None) => Ok(Value::Present),
        (Some(false), None, None) => Ok(Value::Absent),
        (None, Some(v), None) => Ok(Value::Exact(v.clone())),
        (None, None, Some(re)) => {
            let (set, i) = pattern(subjects, subject, re, format!("{field}.regex"))?;
            Ok(Value::Regex(set, i))
        }
        _ => fail(field.to_string(), "give one of `present`, `exact` and `regex`"),
    }
}

/// Exactly one of `cluster`, `clusters`, `redirect` and `respond`.
fn action(r: &RawRoute, clusters: &[Cluster], path: &PathMatch, at: At) -> Result<Action, RouteError> {
    let given = [r.cluster.is_some(), r.clusters.is_some(), r.redirect.is_some(), r.respond.is_some()];
    if given.iter().filter(|g| **g).count() != 1 {
        return fail(at("cluster"), "give one of `cluster`, `clusters`, `redirect` and `respond`");
    }
    if r.hash_key.is_some() && r.clusters.is_none() {
        return fail(at("hash_key"), "only a split (`clusters`) has a hash key");
    }
    let find = |name: &str, field: String| {
        clusters.iter().position(|c| c.name == name).ok_or_else(|| {
            let known: Vec<&str> = clusters.iter().map(|c| c.name.as_str()).collect();
            RouteError { field, message: format!("no cluster named {name:?} (defined: {known:?})") }
        })
    };
    if let Some(c) = &r.cluster {
        return Ok(Action::Forward(Split::one(find(c, at("cluster"))?)));
    }
    if let Some(sides) = &r.clusters {
        let mut weighted = Vec::with_capacity(sides.len());
        for (i, s) in sides.iter().enumerate() {
            weighted.push((find(&s.cluster, at(&format!("clusters[{i}].cluster")))?, s.weight));
        }
        if weighted.iter().map(|w| u64::from(w.1)).sum::<u64>() == 0 {
            return fail(at("clusters"), "give at least one cluster a weight above 0");
        }
        return Ok(Action::Forward(Split::weighted(&weighted, r.hash_key.clone())));
    }
    if let Some(d) = &r.redirect {
        return redirect(d, path, at).map(Action::Redirect);
    }
    match &r.respond {
        Some(d) => respond(d, at).map(Action::Respond),
        None => fail(at("cluster"), "give one of `cluster`, `clusters`, `redirect` and `respond`"),
    }
}

fn redirect(d: &RawRedirect, path: &PathMatch, at: At) -> Result<Redirect, RouteError> {
    let status = d.status.unwrap_or(302);
    if ![301, 302, 303, 307, 308].contains(&status) {
        return fail(at("redirect.status"), format!("{status} is not 301, 302, 303, 307 or 308"));
    }
    if let Some(s) = &d.scheme {
        if s != "http" && s != "https" {
            return fail(at("redirect.scheme"), format!("{s:?} is not \"http\" or \"https\""));
        }
    }
    if let Some(h) = &d.host {
        if h.is_empty() || h.contains(['/', '?', '#', ' ', '@']) {
            return fail(at("redirect.host"), format!("{h:?} is not a host"));
        }
    }
    if d.port == Some(0) {
        return fail(at("redirect.port"), "must be 1–65535");
    }
    let prefix = match (&d.path, &d.prefix, path) {
        (Some(_), Some(_), _) => return fail(at("redirect.prefix"), "give `path` or `prefix`, not both"),
        (_, Some(to), PathMatch::Prefix(from)) => Some((from.clone(), to.clone())),
        (_, Some(_), _) => return fail(at("redirect.prefix"), "replaces a `path_prefix`: the route has none"),
        _ => None,
    };
    for (key, p) in [("redirect.path", &d.path), ("redirect.prefix", &d.prefix)] {
        if p.as_ref().is_some_and(|p| !p.starts_with('/') || p.contains(['?', '#', ' '])) {
            return fail(at(key), "must start with / and have no query");
        }
    }
    Ok(Redirect {
        status: StatusCode::from_u16(status).expect("checked above"),
        scheme: d.scheme.clone(),
        host: d.host.clone(),
        port: d.port,
        path: d.path.clone(),
        prefix,
        drop_query: d.drop_query,
    })
}

fn respond(d: &RawRespond, at: At) -> Result<Respond, RouteError> {
    let status = match StatusCode::from_u16(d.status) {
        Ok(s) if (200..=599).contains(&d.status) => s,
        _ => return fail(at("respond.status"), format!("{} is not a status in 200–599", d.status)),
    };
    let mut headers = HeaderMap::new();
    for (name, value) in &d.headers {
        let field = at(&format!("respond.headers.{name}"));
        let name = header_name(name, field.clone())?;
        let value = HeaderValue::from_str(value)
            .map_err(|_| RouteError { field, message: format!("{value:?} is not a valid header value") })?;
        headers.append(name, value);
    }
    if !d.body.is_empty() && !headers.contains_key(CONTENT_TYPE) {
        headers.insert(CONTENT_TYPE, HeaderValue::from_static(crate::local_reply::CONTENT_TYPE));
    }
    Ok(Respond { status, body: Bytes::from(d.body.clone()), headers })
}

fn rewrite(w: &RawRewrite, path: &PathMatch, at: At) -> Result<Rewrite, RouteError> {
    let path = match (&w.prefix, &w.regex, &w.replace) {
        (None, None, None) => PathRewrite::None,
        (Some(to), None, None) => match path {
            _ if !to.starts_with('/') => return fail(at("rewrite.prefix"), "must start with /"),
            PathMatch::Prefix(from) => PathRewrite::Prefix { from: from.clone(), to: to.clone() },
            _ => return fail(at("rewrite.prefix"), "replaces a `path_prefix`: the route has none"),
        },
        (None, Some(re), Some(replace)) => RegexRewrite::new(re, replace, REGEX_SIZE)
            .map(PathRewrite::Regex)
            .map_err(|(key, message)| RouteError { field: at(&format!("rewrite.{key}")), message })?,
        (None, Some(_), None) => return fail(at("rewrite.replace"), "a `regex` needs its `replace`"),
        (None, None, Some(_)) => return fail(at("rewrite.regex"), "a `replace` needs its `regex`"),
        _ => return fail(at("rewrite.prefix"), "give `prefix`, or `regex` and `replace`, not both"),
    };
    let host = match &w.host {
        Some(h) if h.is_empty() || h.contains(['/', ' ', '@']) || HeaderValue::from_str(h).is_err() => {
            return fail(at("rewrite.host"), format!("{h:?} is not host or host:port"))
        }
        Some(h) => Some(HeaderValue::from_str(h).expect("checked above")),
        None => None,
    };
    Ok(Rewrite { path, host })
}

/// `remove`, `set` and `add`, with names and templates checked.
fn header_ops(raw: Option<&RawHeaderOps>, response: bool, field: &str) -> Result<HeaderOps, RouteError> {
    let Some(raw) = raw else { return Ok(HeaderOps::default()) };
    let mut ops = HeaderOps::default();
    for (i, name) in raw.remove.iter().enumerate() {
        ops.remove.push(header_name(name, format!("{field}.remove[{i}]"))?);
    }
    for (key, map, into) in [("set", &raw.set, &mut ops.set), ("add", &raw.add, &mut ops.add)] {
        for (name, value) in map {
            let at = format!("{field}.{key}.{name}");
            let template =
                Template::parse(value, response).map_err(|m| RouteError { field: at.clone(), message: m })?;
            into.push((header_name(name, at)?, template));
        }
    }
    Ok(ops)
}

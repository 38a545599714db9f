//! What a matched route does: forward (to one cluster or a weighted split),
//! redirect or answer; and what it changes on the way.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use bytes::Bytes;
use http::header::{HeaderMap, HeaderName, HeaderValue};
use http::uri::PathAndQuery;
use http::StatusCode;
use regex_automata::meta::Regex;
use regex_automata::util::primitives::NonMaxUsize;
use regex_automata::Input;
use xxhash_rust::xxh64::xxh64;

use crate::access_log::{field_char, tokens, Token};
use crate::config::HashKey;

/// What a route does with a request it matched.
#[derive(Debug)]
pub enum Action {
    /// Forward to a cluster of the split.
    Forward(Split),
    /// Answer with a redirect.
    Redirect(Redirect),
    /// Answer with a configured response.
    Respond(Respond),
}

/// Seed of the split's hash, so that the side a key lands on does not
/// follow from where a hash-based balancer puts it.
const SPLIT_SEED: u64 = 0x5917;

/// Clusters weighted: each request goes to one of them.
#[derive(Debug)]
pub struct Split {
    /// Cluster indexes with the running total of weights up to and including each.
    targets: Vec<(usize, u64)>,
    /// What keeps one user on one side (none: each request is drawn).
    pub key: Option<HashKey>,
    /// Counts draws; its hash is the draw.
    draws: AtomicU64,
}

impl Split {
    /// All requests to `cluster`.
    pub fn one(cluster: usize) -> Split {
        Split { targets: vec![(cluster, 1)], key: None, draws: AtomicU64::new(0) }
    }

    /// `(cluster, weight)` pairs, the total weight above zero.
    pub(crate) fn weighted(sides: &[(usize, u32)], key: Option<HashKey>) -> Split {
        let mut total = 0;
        let targets = sides
            .iter()
            .map(|&(c, w)| {
                total += u64::from(w);
                (c, total)
            })
            .collect();
        Split { targets, key, draws: AtomicU64::new(0) }
    }

    /// The cluster when there is only one.
    pub fn only(&self) -> Option<usize> {
        match self.targets.as_slice() {
            [(c, _)] => Some(*c),
            _ => None,
        }
    }

    /// The cluster for a request whose split key hashes to `key` (none, or
    /// no key configured: the next draw). The draws are the project's hash
    /// of a counter: as even as weighted round robin over many requests,
    /// without its pattern.
    pub fn pick(&self, key: Option<u64>) -> usize {
        if let Some(c) = self.only() {
            return c;
        }
        let total = self.targets.last().map_or(1, |t| t.1).max(1);
        let seed = key.unwrap_or_else(|| self.draws.fetch_add(1, Relaxed));
        let at = xxh64(&seed.to_le_bytes(), SPLIT_SEED) % total;
        self.targets.iter().find(|t| at < t.1).map_or(self.targets[0].0, |t| t.0)
    }
}

/// A redirect: the request's URL with some parts replaced.
#[derive(Debug)]
pub struct Redirect {
    /// 301, 302, 303, 307 or 308.
    pub status: StatusCode,
    pub(crate) scheme: Option<String>,
    pub(crate) host: Option<String>,
    pub(crate) port: Option<u16>,
    pub(crate) path: Option<String>,
    /// The route's path prefix and what replaces it.
    pub(crate) prefix: Option<(String, String)>,
    pub(crate) drop_query: bool,
}

impl Redirect {
    /// The `Location` for a request to `path_and_query` at `authority`
    /// (`host[:port]`, if the request said) over TLS or not. Without a
    /// host to send the client to, the location is the path alone.
    pub fn location(&self, path_and_query: &PathAndQuery, authority: Option<&str>, tls: bool) -> String {
        let (req_host, req_port) = match authority {
            Some(a) => split_port(a),
            None => (None, None),
        };
        let scheme = self.scheme.as_deref().unwrap_or(if tls { "https" } else { "http" });
        // The request's port only stays when neither scheme nor host change.
        let keep = self.scheme.is_none() && self.host.is_none();
        let port = self.port.or(if keep { req_port } else { None });
        let path = path_and_query.path();
        let path = match (&self.path, &self.prefix) {
            (Some(p), _) => p.clone(),
            (None, Some((from, to))) => match path.strip_prefix(from.as_str()) {
                Some(rest) => format!("{to}{rest}"),
                None => path.to_string(),
            },
            (None, None) => path.to_string(),
        };
        let mut out = match self.host.as_deref().or(req_host) {
            Some(host) => match port {
                Some(p) if !(scheme == "http" && p == 80 || scheme == "https" && p == 443) => {
                    format!("{scheme}://{host}:{p}{path}")
                }
                _ => format!("{scheme}://{host}{path}"),
            },
            None => path,
        };
        if let (false, Some(q)) = (self.drop_query, path_and_query.query()) {
            out.push('?');
            out.push_str(q);
        }
        out
    }
}

/// `host:port` apart (IPv6 literals keep their brackets).
fn split_port(authority: &str) -> (Option<&str>, Option<u16>) {
    match authority.rfind(':') {
        Some(i) if !authority[i..].contains(']') => (Some(&authority[..i]), authority[i + 1..].parse().ok()),
        _ => (Some(authority), None),
    }
}

/// A response the route answers with, whole.
#[derive(Debug)]
pub struct Respond {
    /// Its status.
    pub status: StatusCode,
    /// Its body.
    pub body: Bytes,
    /// Its headers (`content-type` added for a body when not given).
    pub headers: HeaderMap,
}

/// How the path sent upstream is rewritten.
#[derive(Debug)]
pub(crate) enum PathRewrite {
    None,
    /// The route's path prefix replaced.
    Prefix {
        from: String,
        to: String,
    },
    /// The first match of a regex in the path replaced.
    Regex(RegexRewrite),
}

/// A regex and its replacement (`$1`, `${name}`, `$$`), read once into
/// text and group numbers.
#[derive(Debug)]
pub(crate) struct RegexRewrite {
    regex: Regex,
    replace: Vec<Part>,
}

#[derive(Debug, PartialEq, Eq)]
enum Part {
    Text(String),
    Group(usize),
}

/// Groups whose positions a rewrite keeps on the stack (more: on the heap).
const INLINE_GROUPS: usize = 8;

impl RegexRewrite {
    /// `regex` (compiled within `size_limit` bytes) with `replace`; an
    /// error says which of the two is wrong and why.
    pub(crate) fn new(regex: &str, replace: &str, size_limit: usize) -> Result<RegexRewrite, (&'static str, String)> {
        let regex = super::regexes::compile(&[regex.to_string()], size_limit, false)
            .map_err(|e| ("regex", format!("not a valid regular expression: {e}")))?;
        let replace = parts(&regex, replace).map_err(|e| ("replace", e))?;
        Ok(RegexRewrite { regex, replace })
    }

    /// `path` with the first match replaced (`None`: no match), with room
    /// for `extra` bytes more.
    fn apply<'a>(&'a self, path: &'a str, extra: usize) -> Option<String> {
        let groups = self.regex.group_info().group_len(regex_automata::PatternID::ZERO);
        let (mut inline, mut heap) = ([None; 2 * INLINE_GROUPS], Vec::new());
        let slots: &mut [Option<NonMaxUsize>] = if groups <= INLINE_GROUPS {
            &mut inline[..2 * groups]
        } else {
            heap.resize(2 * groups, None);
            &mut heap
        };
        self.regex.search_slots(&Input::new(path), slots)?;
        let span = |g: usize| match (slots.get(2 * g).copied().flatten(), slots.get(2 * g + 1).copied().flatten()) {
            (Some(a), Some(b)) => a.get()..b.get(),
            _ => 0..0,
        };
        let whole = span(0);
        let text = |p: &'a Part| -> &'a str {
            match p {
                Part::Text(t) => t,
                Part::Group(g) => path.get(span(*g)).unwrap_or(""),
            }
        };
        let len = path.len() - whole.len() + self.replace.iter().map(|p| text(p).len()).sum::<usize>();
        let mut new = String::with_capacity(len + extra);
        new.push_str(&path[..whole.start]);
        self.replace.iter().for_each(|p| new.push_str(text(p)));
        new.push_str(&path[whole.end..]);
        Some(new)
    }
}

/// `replace` as text and the groups of `regex` it names (by number or
/// name; the longest name after `$`); an error for a group `regex` lacks.
fn parts(regex: &Regex, replace: &str) -> Result<Vec<Part>, String> {
    let info = regex.group_info();
    let pid = regex_automata::PatternID::ZERO;
    let group_char = |c: char| c.is_ascii_alphanumeric() || c == '_';
    tokens(replace, group_char)?
        .into_iter()
        .map(|token| match token {
            Token::Literal(text) => Ok(Part::Text(text)),
            Token::Name(name) => {
                let group = match name.parse::<usize>() {
                    Ok(n) => (n < info.group_len(pid)).then_some(n),
                    Err(_) => info.to_index(pid, name),
                };
                group
                    .map(Part::Group)
                    .ok_or_else(|| format!("`${name}` is not a group of the regex (write `$$` for a dollar sign)"))
            }
        })
        .collect()
}

/// The path and `Host` sent upstream.
#[derive(Debug)]
pub struct Rewrite {
    pub(crate) path: PathRewrite,
    /// The `Host` sent upstream instead of the client's.
    pub host: Option<HeaderValue>,
}

impl Rewrite {
    /// The rewritten path with the query kept, unchanged without a path
    /// rewrite, or `None` if the result is not a valid request target.
    pub fn path(&self, pq: PathAndQuery) -> Option<PathAndQuery> {
        let path = pq.path();
        // The new target is written once, with room for a `/` and the query.
        let extra = 1 + pq.query().map_or(0, |q| 1 + q.len());
        let mut new = match &self.path {
            PathRewrite::None => return Some(pq),
            PathRewrite::Prefix { from, to } => match path.strip_prefix(from.as_str()) {
                Some(rest) => {
                    let rest = if to.ends_with('/') { rest.strip_prefix('/').unwrap_or(rest) } else { rest };
                    let mut new = String::with_capacity(to.len() + rest.len() + extra);
                    new.push_str(to);
                    new.push_str(rest);
                    new
                }
                None => return Some(pq),
            },
            PathRewrite::Regex(r) => match r.apply(path, extra) {
                Some(new) => new,
                None => return Some(pq),
            },
        };
        if !new.starts_with('/') {
            new.insert(0, '/');
        }
        if let Some(q) = pq.query() {
            new.push('?');
            new.push_str(q);
        }
        PathAndQuery::from_maybe_shared(Bytes::from(new)).ok()
    }
}

/// A header value with variables: `$client_ip`, `$client` (address and
/// port), `$request_id`, `$route`, `$upstream` (responses only); `${name}`
/// may be followed by name characters; `$$` is a `$`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    pieces: Vec<Piece>,
    /// The value when there is no variable.
    constant: Option<HeaderValue>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Literal(String),
    Var(Var),
}

/// A template's variables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Var {
    ClientIp,
    Client,
    RequestId,
    Route,
    Upstream,
}

const VARS: [(&str, Var); 5] = [
    ("client_ip", Var::ClientIp),
    ("client", Var::Client),
    ("request_id", Var::RequestId),
    ("route", Var::Route),
    ("upstream", Var::Upstream),
];

/// What a template's variables stand for, for one request.
#[derive(Debug, Clone, Copy)]
pub struct Vars<'a> {
    /// The client's address.
    pub client: SocketAddr,
    /// Its IP address as a header value, if formatted already.
    pub client_ip: Option<&'a HeaderValue>,
    /// The request ID (the listener's `request_id.header`, else `x-request-id`), if any.
    pub request_id: Option<&'a HeaderValue>,
    /// The matched route's name.
    pub route: Option<&'a str>,
    /// The endpoint that answered.
    pub upstream: Option<SocketAddr>,
}

impl Template {
    /// Parse `text`; `upstream` says whether `$upstream` is known where it is used.
    pub(crate) fn parse(text: &str, upstream: bool) -> Result<Template, String> {
        let mut pieces = Vec::new();
        for token in tokens(text, field_char)? {
            match token {
                Token::Literal(literal) => {
                    HeaderValue::from_str(&literal).map_err(|_| format!("{literal:?} is not a valid header value"))?;
                    pieces.push(Piece::Literal(literal));
                }
                Token::Name(name) => {
                    let known: Vec<&str> = VARS.iter().map(|v| v.0).collect();
                    let var = VARS.iter().find(|v| v.0 == name).map(|v| v.1).ok_or_else(|| {
                        format!("unknown variable `${name}` (known: {}; `$$` is a dollar sign)", known.join(", "))
                    })?;
                    if var == Var::Upstream && !upstream {
                        return Err("`$upstream` is only known in response headers".into());
                    }
                    pieces.push(Piece::Var(var));
                }
            }
        }
        // Without variables the value is the same for every request.
        let constant = match pieces.as_slice() {
            [] => HeaderValue::from_str("").ok(),
            [Piece::Literal(literal)] => HeaderValue::from_str(literal).ok(),
            _ => None,
        };
        if constant.is_some() {
            pieces.clear();
        }
        Ok(Template { pieces, constant })
    }

    /// Whether the value reads `var`.
    pub(crate) fn reads(&self, var: Var) -> bool {
        self.pieces.contains(&Piece::Var(var))
    }

    /// The value for one request (`None` if a variable made it invalid).
    pub fn render(&self, vars: &Vars) -> Option<HeaderValue> {
        if let Some(c) = &self.constant {
            return Some(c.clone());
        }
        if let ([Piece::Var(Var::ClientIp)], Some(ip)) = (self.pieces.as_slice(), vars.client_ip) {
            return Some(ip.clone());
        }
        let mut out = String::new();
        for piece in &self.pieces {
            match piece {
                Piece::Literal(l) => out.push_str(l),
                Piece::Var(Var::ClientIp) => out.push_str(&vars.client.ip().to_string()),
                Piece::Var(Var::Client) => out.push_str(&vars.client.to_string()),
                Piece::Var(Var::RequestId) => {
                    out.push_str(vars.request_id.and_then(|v| v.to_str().ok()).unwrap_or(""));
                }
                Piece::Var(Var::Route) => out.push_str(vars.route.unwrap_or("")),
                Piece::Var(Var::Upstream) => {
                    if let Some(u) = vars.upstream {
                        out.push_str(&u.to_string());
                    }
                }
            }
        }
        HeaderValue::from_str(&out).ok()
    }
}

/// Header changes: names removed, then set (replacing any value), then added.
#[derive(Debug, Default)]
pub struct HeaderOps {
    pub(crate) remove: Vec<HeaderName>,
    pub(crate) set: Vec<(HeaderName, Template)>,
    pub(crate) add: Vec<(HeaderName, Template)>,
}

impl HeaderOps {
    /// Whether a value reads the request ID (which is then looked up).
    pub fn reads_request_id(&self) -> bool {
        self.set.iter().chain(&self.add).any(|(_, t)| t.reads(Var::RequestId))
    }

    /// Whether there is nothing to do.
    pub fn is_empty(&self) -> bool {
        self.remove.is_empty() && self.set.is_empty() && self.add.is_empty()
    }

    /// How many headers it may add at most.
    pub fn adds(&self) -> usize {
        self.set.len() + self.add.len()
    }

    /// Change `headers`; a value a variable made invalid is left out.
    pub fn apply(&self, headers: &mut HeaderMap, vars: &Vars) {
        for name in &self.remove {
            headers.remove(name);
        }
        for (name, value) in &self.set {
            match value.render(vars) {
                Some(v) => headers.insert(name.clone(), v),
                None => headers.remove(name),
            };
        }
        for (name, value) in &self.add {
            if let Some(v) = value.render(vars) {
                headers.append(name.clone(), v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars() -> Vars<'static> {
        let client = "10.0.0.7:5555".parse().unwrap();
        Vars { client, client_ip: None, request_id: None, route: Some("api"), upstream: None }
    }

    #[test]
    fn templates_read_their_variables_and_refuse_unknown_ones() {
        let t = Template::parse("$client_ip via ${route}s $$1", false).unwrap();
        assert_eq!(t.render(&vars()).unwrap(), "10.0.0.7 via apis $1");
        assert_eq!(Template::parse("plain", false).unwrap().render(&vars()).unwrap(), "plain");
        let id = HeaderValue::from_static("abc");
        let with_id = Vars { request_id: Some(&id), ..vars() };
        assert_eq!(Template::parse("$request_id", false).unwrap().render(&with_id).unwrap(), "abc");
        assert!(Template::parse("$nope", false).unwrap_err().contains("nope"));
        assert!(Template::parse("${client", false).is_err());
        assert!(Template::parse("$upstream", false).unwrap_err().contains("response"));
        assert!(Template::parse("a\nb", false).is_err());
        let up = Vars { upstream: Some("127.0.0.1:9".parse().unwrap()), ..vars() };
        assert_eq!(Template::parse("$upstream", true).unwrap().render(&up).unwrap(), "127.0.0.1:9");
    }

    #[test]
    fn a_split_follows_its_weights_and_its_key() {
        let split = Split::weighted(&[(3, 90), (4, 10)], None);
        let n = 100_000;
        let fourth = (0..n).filter(|_| split.pick(None) == 4).count();
        assert!((9_000..11_000).contains(&fourth), "{fourth}");
        let keyed: Vec<usize> = (0..10).map(|_| split.pick(Some(42))).collect();
        assert!(keyed.iter().all(|c| *c == keyed[0]), "{keyed:?}");
        assert_eq!(Split::one(7).pick(None), 7);
    }

    #[test]
    fn redirects_replace_what_they_say() {
        let r = |scheme: Option<&str>, host: Option<&str>, port, path: Option<&str>, drop_query| Redirect {
            status: StatusCode::MOVED_PERMANENTLY,
            scheme: scheme.map(String::from),
            host: host.map(String::from),
            port,
            path: path.map(String::from),
            prefix: None,
            drop_query,
        };
        let pq = PathAndQuery::from_static("/a/b?x=1");
        assert_eq!(
            r(Some("https"), None, None, None, false).location(&pq, Some("h.test:8080"), false),
            "https://h.test/a/b?x=1"
        );
        assert_eq!(r(None, None, None, None, true).location(&pq, Some("h.test:8080"), false), "http://h.test:8080/a/b");
        assert_eq!(
            r(None, Some("n.test"), Some(8443), Some("/z"), false).location(&pq, None, true),
            "https://n.test:8443/z?x=1"
        );
        assert_eq!(r(None, None, None, Some("/z"), true).location(&pq, None, false), "/z");
        let mut p = r(None, None, None, None, false);
        p.prefix = Some(("/a".into(), "/new".into()));
        assert_eq!(p.location(&pq, Some("[::1]:81"), false), "http://[::1]:81/new/b?x=1");
    }

    #[test]
    fn rewrites_keep_the_query() {
        let prefix = Rewrite { path: PathRewrite::Prefix { from: "/api/".into(), to: "/".into() }, host: None };
        assert_eq!(prefix.path(PathAndQuery::from_static("/api/users?x=1")).unwrap(), "/users?x=1");
        let re = |re: &str, to: &str| Rewrite {
            path: PathRewrite::Regex(RegexRewrite::new(re, to, 1 << 20).unwrap()),
            host: None,
        };
        let regex = re("^/u/([0-9]+)$", "/users/$1/profile");
        assert_eq!(regex.path(PathAndQuery::from_static("/u/42?a")).unwrap(), "/users/42/profile?a");
        assert_eq!(regex.path(PathAndQuery::from_static("/v/42")).unwrap(), "/v/42");
        // The first match is replaced where it is; a target made relative gets its `/` back.
        assert_eq!(re("v[0-9]", "v2").path(PathAndQuery::from_static("/api/v1/v1?q")).unwrap(), "/api/v2/v1?q");
        assert_eq!(re("^/(.*)$", "$1").path(PathAndQuery::from_static("/abc")).unwrap(), "/abc");
        // Names, braces, `$$`, a group that took no part, and more groups than kept on the stack.
        let named = re("^/(?P<a>[a-z]+)/(x)?([0-9]+)$", "/${a}_$3$$$2/$a");
        assert_eq!(named.path(PathAndQuery::from_static("/ab/12")).unwrap(), "/ab_12$/ab");
        let many = format!("^/{}$", "([a-z])".repeat(10));
        assert_eq!(re(&many, "/$10$9$1").path(PathAndQuery::from_static("/abcdefghij")).unwrap(), "/jia");
        let keep_slash = Rewrite { path: PathRewrite::Prefix { from: "/api".into(), to: "/v2/".into() }, host: None };
        assert_eq!(keep_slash.path(PathAndQuery::from_static("/api/x")).unwrap(), "/v2/x");
        assert_eq!(keep_slash.path(PathAndQuery::from_static("/apix")).unwrap(), "/v2/x");
    }
}

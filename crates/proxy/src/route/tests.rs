//! Routes from configuration text: what they match, and errors that name
//! the file, line and field; random route tables never panic.

use std::path::Path;

use http::{HeaderValue, Request};
use proptest::prelude::*;

use crate::config::{Config, ConfigError};

const CLUSTERS: &str = r#"
[[cluster]]
name = "a"
endpoints = ["127.0.0.1:9001"]

[[cluster]]
name = "b"
endpoints = ["127.0.0.1:9002"]
"#;

fn parse(routes: &str) -> Result<Config, ConfigError> {
    let text = format!("[[listener]]\nlisten = \"127.0.0.1:8080\"\nroutes = [\n{routes}\n]\n{CLUSTERS}");
    Config::parse(Path::new("test.toml"), &text)
}

/// The cluster (or `"redirect"` / `"respond"`) each request goes to.
fn route(routes: &str, reqs: &[Request<()>]) -> Vec<String> {
    let config = parse(routes).unwrap_or_else(|e| panic!("{e}"));
    let table = &config.listeners[0].routes;
    reqs.iter()
        .map(|req| {
            let host = req.headers().get("host").map(|h| h.to_str().unwrap().split(':').next().unwrap().to_string());
            match table.find(req, host.as_deref(), None).map(|(_, r)| &r.action) {
                None => "none".into(),
                Some(super::Action::Forward(s)) => config.clusters[s.pick(None)].name.clone(),
                Some(super::Action::Redirect(_)) => "redirect".into(),
                Some(super::Action::Respond(_)) => "respond".into(),
            }
        })
        .collect()
}

fn req(method: &str, host: &str, uri: &str, headers: &[(&str, &str)]) -> Request<()> {
    let mut b = Request::builder().method(method).uri(uri).header("host", host);
    for (k, v) in headers {
        b = b.header(*k, HeaderValue::from_str(v).unwrap());
    }
    b.body(()).unwrap()
}

#[test]
fn every_condition_must_hold_and_the_first_match_wins() {
    let routes = r#"
  { host = "*.example.com", path_regex = "^/users/[0-9]+$", methods = ["GET"], cluster = "b" },
  { host = "api.test", path = "/exact", cluster = "b" },
  { headers = [{ name = "x-canary", exact = "1" }, { name = "x-debug", present = false }], cluster = "b" },
  { headers = [{ name = "user-agent", regex = "(?i)curl" }], query = [{ name = "v", regex = "^2" }], cluster = "b" },
  { query = [{ name = "beta" }], respond = { status = 200, body = "beta" } },
  { path_prefix = "/old", redirect = { prefix = "/new" } },
  { cluster = "a" },
"#;
    let cases = [
        (req("GET", "x.example.com:81", "/users/12", &[]), "b"),
        (req("POST", "x.example.com", "/users/12", &[]), "a"),
        (req("GET", "example.com", "/users/12", &[]), "a"),
        (req("GET", "x.example.com", "/users/12/x", &[]), "a"),
        (req("GET", "api.test", "/exact", &[]), "b"),
        (req("GET", "api.test", "/exact/", &[]), "a"),
        (req("GET", "h", "/", &[("x-canary", "1")]), "b"),
        (req("GET", "h", "/", &[("x-canary", "1"), ("x-debug", "")]), "a"),
        (req("GET", "h", "/?v=2.1", &[("user-agent", "CURL/8")]), "b"),
        (req("GET", "h", "/?v=1", &[("user-agent", "curl/8")]), "a"),
        (req("GET", "h", "/?a=1&beta", &[]), "respond"),
        (req("GET", "h", "/old/x", &[]), "redirect"),
        (req("GET", "h", "/other", &[]), "a"),
    ];
    let (reqs, want): (Vec<_>, Vec<_>) = cases.into_iter().unzip();
    assert_eq!(route(routes, &reqs), want);
}

/// A verified client certificate with `subject` and `names`.
fn cert(subject: &str, names: &[&str]) -> crate::tls::ClientCert {
    crate::tls::ClientCert {
        subject: subject.into(),
        header: HeaderValue::from_static("Subject=\"x\""),
        names: names.iter().map(|n| Box::from(*n)).collect(),
    }
}

#[test]
fn routes_match_the_verified_client_certificate() {
    let text = format!(
        "[[listener]]\nlisten = \"127.0.0.1:8443\"\ntls = {{ cert = \"c.pem\", key = \"k.pem\", client_ca = \"ca.pem\", \
         client_auth = \"optional\" }}\nroutes = [\n{}\n]\n{CLUSTERS}",
        r#"  { client_cert = [{ name = "subject", exact = "CN=admin,O=Example" }], respond = { status = 200 } },
  { client_cert = [{ name = "san", regex = "^spiffe://example\\.org/ns/prod/" }], cluster = "b" },
  { client_cert = [{ name = "san", exact = "ops.example.org" }, { name = "subject", regex = "O=Ops" }], redirect = { path = "/ops" } },
  { client_cert = [{ name = "subject", present = false }], path_prefix = "/public", cluster = "a" },"#
    );
    let config = Config::parse(Path::new("test.toml"), &text).unwrap_or_else(|e| panic!("{e}"));
    let table = &config.listeners[0].routes;
    let pick = |client: Option<&crate::tls::ClientCert>, path: &str| match table
        .find(&req("GET", "h", path, &[]), None, client)
        .map(|(_, r)| &r.action)
    {
        None => "none".to_string(),
        Some(super::Action::Forward(s)) => config.clusters[s.pick(None)].name.clone(),
        Some(super::Action::Redirect(_)) => "redirect".into(),
        Some(super::Action::Respond(_)) => "respond".into(),
    };
    let admin = cert("CN=admin,O=Example", &[]);
    let prod = cert("CN=svc", &["svc.internal", "spiffe://example.org/ns/prod/sa/web"]);
    let staging = cert("CN=svc", &["spiffe://example.org/ns/staging/sa/web"]);
    let ops = cert("CN=o,O=Ops", &["10.0.0.1", "ops.example.org"]);
    let ops_wrong_org = cert("CN=o,O=Dev", &["ops.example.org"]);
    assert_eq!(pick(Some(&admin), "/"), "respond");
    assert_eq!(pick(Some(&prod), "/"), "b", "any name may match");
    assert_eq!(pick(Some(&staging), "/"), "none");
    assert_eq!(pick(Some(&ops), "/"), "redirect");
    assert_eq!(pick(Some(&ops_wrong_org), "/"), "none", "every condition must hold");
    assert_eq!(pick(None, "/public/x"), "a");
    assert_eq!(pick(Some(&admin), "/public/x"), "respond");
    assert_eq!(pick(Some(&staging), "/public/x"), "none", "a certificate is present");

    // Without `client_ca` nothing is verified: such a route is an error.
    let e = parse(r#"{ client_cert = [{ name = "subject" }], cluster = "a" }"#).unwrap_err();
    assert_eq!(e.field, "listener[0].routes[0].client_cert", "{e}");
    assert!(e.message.contains("client_ca"), "{e}");
    let e = Config::parse(Path::new("test.toml"), &text.replace("name = \"san\", exact", "name = \"issuer\", exact"))
        .unwrap_err();
    assert_eq!(e.field, "listener[0].routes[2].client_cert[0].name", "{e}");
}

#[test]
fn routes_of_the_exact_host_and_of_any_host_keep_their_order() {
    // Exact-host routes are found by host; the rest are tried in between.
    let routes = r#"
  { host = "a.test", path = "/1", respond = { status = 200 } },
  { path = "/2", redirect = { path = "/" } },
  { host = "*.test", path = "/3", cluster = "b" },
  { host = "a.test", path_prefix = "/", cluster = "b" },
  { host = "b.test", path = "/2", cluster = "b" },
  { cluster = "a" },
"#;
    let hosts_and_paths = [
        ("a.test", "/1", "respond"),
        ("a.test", "/2", "redirect"),
        ("a.test", "/3", "b"),
        ("a.test", "/4", "b"),
        ("b.test", "/1", "a"),
        ("b.test", "/2", "redirect"),
        ("c.test", "/3", "b"),
        ("c.other", "/3", "a"),
    ];
    let reqs: Vec<_> = hosts_and_paths.iter().map(|(h, p, _)| req("GET", h, p, &[])).collect();
    let want: Vec<_> = hosts_and_paths.iter().map(|c| c.2).collect();
    assert_eq!(route(routes, &reqs), want);
}

#[test]
fn the_old_keys_still_route() {
    let got = route(
        r#"{ host = "API.test", path_prefix = "/v1", cluster = "b" }, { cluster = "a" }"#,
        &[req("GET", "api.test", "/v1/x", &[]), req("GET", "web.test", "/v1/x", &[])],
    );
    assert_eq!(got, ["b", "a"]);
}

#[test]
fn bad_routes_are_errors_naming_file_line_and_field() {
    let cases = [
        (r#"{ path_regex = "^/(", cluster = "a" }"#, "listener[0].routes[0].path_regex", "regular expression"),
        (
            r#"{ headers = [{ name = "x", regex = "[" }], cluster = "a" }"#,
            "listener[0].routes[0].headers[0].regex",
            "regular",
        ),
        (
            r#"{ query = [{ name = "q", exact = "1", regex = "1" }], cluster = "a" }"#,
            "listener[0].routes[0].query[0]",
            "one of",
        ),
        (
            r#"{ headers = [{ name = "bad name" }], cluster = "a" }"#,
            "listener[0].routes[0].headers[0].name",
            "header name",
        ),
        (r#"{ host = "a.test:80", cluster = "a" }"#, "listener[0].routes[0].host", "no port"),
        (r#"{ methods = ["get"], cluster = "a" }"#, "listener[0].routes[0].methods[0]", "capitals"),
        (r#"{ path = "x", cluster = "a" }"#, "listener[0].routes[0].path", "start with /"),
        (r#"{ cluster = "a", respond = { status = 200 } }"#, "listener[0].routes[0].cluster", "one of"),
        (r#"{ clusters = [{ cluster = "a", weight = 0 }] }"#, "listener[0].routes[0].clusters", "weight"),
        (
            r#"{ clusters = [{ cluster = "c", weight = 1 }] }"#,
            "listener[0].routes[0].clusters[0].cluster",
            "no cluster",
        ),
        (r#"{ redirect = { status = 200 } }"#, "listener[0].routes[0].redirect.status", "301"),
        (r#"{ path = "/a", redirect = { prefix = "/b" } }"#, "listener[0].routes[0].redirect.prefix", "path_prefix"),
        (r#"{ respond = { status = 200 }, rewrite = { host = "x" } }"#, "listener[0].routes[0].rewrite", "forwards"),
        (
            r#"{ cluster = "a", rewrite = { regex = "^/(a)", replace = "/$2" } }"#,
            "listener[0].routes[0].rewrite.replace",
            "$2",
        ),
        (
            r#"{ cluster = "a", request_headers = { set = { x-up = "$upstream" } } }"#,
            "listener[0].routes[0].request_headers.set.x-up",
            "response",
        ),
        (
            r#"{ cluster = "a", response_headers = { add = { x-a = "$nope" } } }"#,
            "listener[0].routes[0].response_headers.add.x-a",
            "nope",
        ),
        (r#"{ cluster = "a", timeout = "0s" }"#, "listener[0].routes[0].timeout", "greater than 0"),
        (r#"{ cluster = "a", retries = { attempts = 0 } }"#, "listener[0].routes[0].retries.attempts", "between"),
    ];
    for (route, field, message) in cases {
        let e = parse(route).err().unwrap_or_else(|| panic!("{route} loaded"));
        assert_eq!((e.field.as_str(), e.line), (field, 4), "{route}: {e}");
        assert!(e.message.contains(message), "{route}: {e}");
        assert!(e.to_string().starts_with("test.toml:4:"), "{e}");
    }
}

/// A route as TOML from random pieces, valid or not.
fn arb_route() -> impl Strategy<Value = String> {
    let text = "[ -~]{0,12}".prop_map(|s| format!("{s:?}"));
    let pieces = prop::collection::vec(
        prop_oneof![
            text.clone().prop_map(|t| format!("host = {t}")),
            text.clone().prop_map(|t| format!("path = {t}")),
            text.clone().prop_map(|t| format!("path_prefix = {t}")),
            text.clone().prop_map(|t| format!("path_regex = {t}")),
            text.clone().prop_map(|t| format!("methods = [{t}]")),
            (text.clone(), text.clone()).prop_map(|(n, r)| format!("headers = [{{ name = {n}, regex = {r} }}]")),
            (text.clone(), text.clone()).prop_map(|(n, r)| format!("query = [{{ name = {n}, exact = {r} }}]")),
            (text.clone(), text.clone()).prop_map(|(r, w)| format!("rewrite = {{ regex = {r}, replace = {w} }}")),
            text.clone().prop_map(|t| format!("rewrite = {{ prefix = {t}, host = {t} }}")),
            (text.clone(), text.clone()).prop_map(|(n, v)| format!("request_headers = {{ set = {{ {n} = {v} }} }}")),
            (text.clone(), text.clone()).prop_map(|(n, v)| format!("response_headers = {{ add = {{ {n} = {v} }} }}")),
            (300u16..310, text.clone()).prop_map(|(s, p)| format!("redirect = {{ status = {s}, path = {p} }}")),
            (0u16..700).prop_map(|s| format!("respond = {{ status = {s} }}")),
            (0u32..3, 0u32..3).prop_map(|(x, y)| format!(
                "clusters = [{{ cluster = \"a\", weight = {x} }}, {{ cluster = \"b\", weight = {y} }}]"
            )),
            Just("cluster = \"a\"".to_string()),
        ],
        0..5,
    );
    pieces.prop_map(|p| format!("{{ {} }}", p.join(", ")))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_route_tables_compile_or_name_a_field(routes in prop::collection::vec(arb_route(), 1..4)) {
        let text = routes.join(",\n");
        match parse(&text) {
            // A table that compiles routes requests without panicking.
            Ok(config) => {
                let table = &config.listeners[0].routes;
                for uri in ["/", "/a/b?x=1&y", "/%ff?%"] {
                    let r = req("GET", "h.test", uri, &[("x-a", "1")]);
                    let _ = table.find(&r, Some("h.test"), None);
                }
            }
            // Duplicate keys are TOML's own error, at the table.
            Err(e) => prop_assert!(
                e.field.starts_with("listener[0].routes") || e.message.contains("duplicate key"),
                "{text}\n{e}"
            ),
        }
    }
}

/// The routes one at a time, as the table's index must agree with: the
/// first route whose every condition holds.
mod reference {
    use http::Request;
    use regex::Regex;

    use crate::route::matcher::{Host, PathMatch, RouteTable, Value};
    use crate::tls::ClientCert;

    /// The pattern `i` of set `set`, on its own.
    fn pattern(table: &RouteTable, set: usize, i: usize) -> Regex {
        Regex::new(&table.sets[set].1.patterns()[i]).unwrap()
    }

    /// A header's values joined with `,`, as conditions see them.
    fn header(req: &Request<()>, name: &http::HeaderName) -> Option<String> {
        let values: Vec<_> =
            req.headers().get_all(name).iter().map(|v| String::from_utf8_lossy(v.as_bytes())).collect();
        (!values.is_empty()).then(|| values.join(","))
    }

    fn param(req: &Request<()>, name: &str) -> Option<String> {
        let query = req.uri().query().unwrap_or("");
        let mut pairs = query.split('&').filter(|p| !p.is_empty()).map(|p| p.split_once('=').unwrap_or((p, "")));
        pairs.find(|(k, _)| *k == name).map(|(_, v)| v.to_string())
    }

    /// Whether `v` holds of a subject with `values` (none: absent; any one may match).
    fn holds(table: &RouteTable, v: &Value, values: &[String]) -> bool {
        match v {
            Value::Present => !values.is_empty(),
            Value::Absent => values.is_empty(),
            Value::Exact(want) => values.iter().any(|x| x == want),
            Value::Regex(set, i) => values.iter().any(|x| pattern(table, *set, *i).is_match(x)),
        }
    }

    pub(super) fn find(
        table: &RouteTable,
        req: &Request<()>,
        host: Option<&str>,
        client: Option<&ClientCert>,
    ) -> Option<usize> {
        let path = req.uri().path();
        let cert = |subject: bool| -> Vec<String> {
            match client {
                None => Vec::new(),
                Some(c) if subject => vec![c.subject.to_string()],
                Some(c) => c.names.iter().map(|n| n.to_string()).collect(),
            }
        };
        table.routes.iter().position(|r| {
            let host_ok = match &r.host {
                None => true,
                Some(Host::Exact(h)) => host == Some(h.as_str()),
                Some(Host::Suffix(s)) => host.is_some_and(|h| h.len() > s.len() && h.ends_with(s.as_str())),
            };
            let path_ok = match &r.path {
                PathMatch::Prefix(p) => path.starts_with(p.as_str()),
                PathMatch::Exact(p) => path == p,
                PathMatch::Regex(i) => pattern(table, 0, *i).is_match(path),
            };
            host_ok
                && path_ok
                && (r.methods.is_empty() || r.methods.contains(req.method()))
                && r.headers.iter().all(|(n, v)| {
                    holds(table, v, &header(req, &table.header_names[*n]).into_iter().collect::<Vec<_>>())
                })
                && r.query.iter().all(|(n, v)| holds(table, v, &param(req, n).into_iter().collect::<Vec<_>>()))
                && r.client_cert
                    .iter()
                    .all(|(f, v)| holds(table, v, &cert(matches!(f, crate::route::matcher::CertField::Subject))))
        })
    }
}

/// A route from a small vocabulary, so that random requests often match it.
fn arb_matching_route() -> impl Strategy<Value = String> {
    let word = prop::sample::select(vec!["a", "b", "ab", "a-b"]);
    let value = prop_oneof![
        Just("present = true".to_string()),
        Just("present = false".to_string()),
        word.clone().prop_map(|w| format!("exact = {w:?}")),
        prop::sample::select(vec!["^a", "b$", "^a.*b$", "-"]).prop_map(|r| format!("regex = {r:?}")),
    ];
    let condition = prop_oneof![
        prop::sample::select(vec!["a.test", "b.test", "*.test", "*.a.test"]).prop_map(|h| format!("host = {h:?}")),
        prop::sample::select(vec!["/", "/a", "/a/b", "/b"]).prop_map(|p| format!("path_prefix = {p:?}")),
        prop::sample::select(vec!["/", "/a", "/a/b"]).prop_map(|p| format!("path = {p:?}")),
        prop::sample::select(vec!["^/a", "/b$", "^/[ab]+$"]).prop_map(|p| format!("path_regex = {p:?}")),
        prop::sample::subsequence(vec!["GET", "POST", "PUT"], 1..3).prop_map(|m| format!("methods = {m:?}")),
        prop::collection::vec((prop::sample::select(vec!["x-a", "x-b"]), value.clone()), 1..3).prop_map(|hs| {
            let hs: Vec<_> = hs.iter().map(|(n, v)| format!("{{ name = {n:?}, {v} }}")).collect();
            format!("headers = [{}]", hs.join(", "))
        }),
        prop::collection::vec((prop::sample::select(vec!["p", "q"]), value.clone()), 1..3).prop_map(|qs| {
            let qs: Vec<_> = qs.iter().map(|(n, v)| format!("{{ name = {n:?}, {v} }}")).collect();
            format!("query = [{}]", qs.join(", "))
        }),
        (prop::sample::select(vec!["subject", "san"]), value)
            .prop_map(|(n, v)| format!("client_cert = [{{ name = {n:?}, {v} }}]")),
    ];
    // At most one condition of each kind per route (TOML has no duplicate keys).
    prop::collection::vec(condition, 0..5).prop_map(|cs| {
        let mut seen = Vec::new();
        let mut kept: Vec<String> = Vec::new();
        for c in cs {
            let key = c.split(' ').next().unwrap_or_default().to_string();
            let key = if key == "path_prefix" || key == "path_regex" { "path".to_string() } else { key };
            if !seen.contains(&key) {
                seen.push(key);
                kept.push(c);
            }
        }
        kept.push("cluster = \"a\"".into());
        format!("{{ {} }}", kept.join(", "))
    })
}

/// A request from the same vocabulary: (method, host, uri, headers, certificate).
type Case =
    (&'static str, Option<&'static str>, String, Vec<(&'static str, &'static str)>, Option<(String, Vec<String>)>);

fn arb_request() -> impl Strategy<Value = Case> {
    let word = prop::sample::select(vec!["a", "b", "ab", "a-b", "ba"]);
    (
        prop::sample::select(vec!["GET", "POST", "DELETE"]),
        prop::option::of(prop::sample::select(vec!["a.test", "b.test", "x.a.test", "test", "a.other"])),
        (
            prop::sample::select(vec!["/", "/a", "/a/b", "/b", "/ab", "/a/b/c"]),
            prop::collection::vec((prop::sample::select(vec!["p", "q", "r"]), word.clone()), 0..3),
        )
            .prop_map(|(p, q)| {
                let q: Vec<_> = q.iter().map(|(k, v)| format!("{k}={v}")).collect();
                if q.is_empty() {
                    p.to_string()
                } else {
                    format!("{p}?{}", q.join("&"))
                }
            }),
        prop::collection::vec((prop::sample::select(vec!["x-a", "x-b", "x-c"]), word.clone()), 0..4),
        prop::option::of((word.clone(), prop::collection::vec(word, 0..3)))
            .prop_map(|c| c.map(|(s, n)| (s.to_string(), n.iter().map(|x| x.to_string()).collect()))),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// The indexed table picks the same route as trying the routes in order.
    #[test]
    fn the_index_finds_the_route_the_routes_in_order_find(
        routes in prop::collection::vec(arb_matching_route(), 1..80),
        reqs in prop::collection::vec(arb_request(), 1..12),
    ) {
        let text = format!(
            "[[listener]]\nlisten = \"127.0.0.1:8443\"\ntls = {{ cert = \"c.pem\", key = \"k.pem\", client_ca = \"ca.pem\", \
             client_auth = \"optional\" }}\nroutes = [\n{}\n]\n{CLUSTERS}",
            routes.join(",\n")
        );
        let config = Config::parse(Path::new("test.toml"), &text).unwrap_or_else(|e| panic!("{text}\n{e}"));
        let table = &config.listeners[0].routes;
        for (method, host, uri, headers, client) in reqs {
            let r = req(method, host.unwrap_or("h"), &uri, &headers);
            let host = host.map(|h| h.to_string());
            let client = client.map(|(s, names)| cert(&s, &names.iter().map(String::as_str).collect::<Vec<_>>()));
            let got = table.find(&r, host.as_deref(), client.as_ref()).map(|(i, _)| i);
            let want = reference::find(table, &r, host.as_deref(), client.as_ref());
            prop_assert_eq!(got, want, "{} {:?} {} {:?} {:?}\n{}", method, host, uri, headers, client, text);
        }
    }
}

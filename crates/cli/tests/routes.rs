//! Route matching and actions through the real binary: echo backends show
//! what was sent upstream (rewritten paths, hosts and headers); redirects,
//! direct responses and weighted splits; a reload that changes the routes
//! under an open connection; curl and Python `requests` as clients.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::Duration;

use common::{eventually, get, Fulcrum};
use fulcrum_load::{BackendSpec, Backends, BackendsConfig};

/// Echo backends named `names`, one each.
fn echoes(names: &[&str]) -> Backends {
    let backends =
        names.iter().map(|n| BackendSpec { echo: true, name: Some(n.to_string()), ..BackendSpec::default() }).collect();
    Backends::start(BackendsConfig { backends, seed: 0, threads: 1 }).unwrap()
}

/// A configuration of `routes` (the body of the TOML list) over one
/// cluster per backend, named as the backend.
fn config(routes: &str, backends: &Backends) -> String {
    let mut text = format!(
        "workers = 2\nadmin = \"127.0.0.1:0\"\n\n[[listener]]\nlisten = \"127.0.0.1:0\"\nroutes = [\n{routes}\n]\n"
    );
    for b in backends.backends() {
        text.push_str(&format!("\n[[cluster]]\nname = \"{}\"\nendpoints = [\"{}\"]\n", b.name(), b.addr()));
    }
    text
}

const POLICY: &str = r#"
  { name = "api", path_prefix = "/api/", cluster = "echo", rewrite = { prefix = "/", host = "internal.test" },
    request_headers = { set = { x-route = "$route" }, add = { x-client = "$client_ip" }, remove = ["x-secret"] },
    response_headers = { set = { x-upstream = "$upstream", x-id = "$request_id" }, remove = ["x-fulcrum-backend"] } },
  { path_regex = "^/u/[0-9]+$", cluster = "echo", rewrite = { regex = "^/u/([0-9]+)$", replace = "/users/$1" } },
  { host = "*.old.test", redirect = { status = 301, scheme = "https", host = "new.test" } },
  { path_prefix = "/old/", redirect = { status = 308, prefix = "/api/" } },
  { path = "/health", methods = ["GET", "HEAD"], respond = { status = 200, body = "ok\n", headers = { x-served-by = "fulcrum" } } },
  { headers = [{ name = "x-canary", exact = "1" }], query = [{ name = "debug", present = false }], cluster = "canary" },
  { cluster = "echo" },
"#;

fn json(body: &[u8]) -> serde_json::Value {
    serde_json::from_slice(body).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(body)))
}

#[test]
fn routes_match_rewrite_redirect_and_answer() {
    let b = echoes(&["echo", "canary"]);
    let f = Fulcrum::serve("routes-policy", &config(POLICY, &b));
    let at = f.listen[0];

    let r = get(at, "app.test", "/api/v1/items?x=1", "X-Secret: s\r\nX-Request-Id: req-7\r\n");
    assert_eq!(r.status, 200, "{r:?}");
    let sent = json(&r.body);
    assert_eq!(sent["path"], "/v1/items?x=1");
    assert_eq!(sent["headers"]["host"], "internal.test");
    assert_eq!(sent["headers"]["x-route"], "api");
    assert_eq!(sent["headers"]["x-client"], "127.0.0.1");
    assert!(sent["headers"].get("x-secret").is_none(), "{sent}");
    assert_eq!(r.header("x-upstream"), Some(b.addrs()[0].to_string().as_str()));
    assert_eq!(r.header("x-id"), Some("req-7"));
    assert_eq!(r.header("x-fulcrum-backend"), None);

    let sent = json(&get(at, "app.test", "/u/42?a=b", "").body);
    assert_eq!((sent["path"].as_str(), sent["backend"].as_str()), (Some("/users/42?a=b"), Some("echo")));
    // A path the regex does not match goes on to the next routes, unchanged.
    assert_eq!(json(&get(at, "app.test", "/u/x", "").body)["path"], "/u/x");

    let r = get(at, "www.old.test:8080", "/a?q=1", "");
    assert_eq!((r.status, r.header("location")), (301, Some("https://new.test/a?q=1")));
    let r = get(at, "app.test:8080", "/old/z?q=1", "");
    assert_eq!((r.status, r.header("location")), (308, Some("http://app.test:8080/api/z?q=1")));

    let r = get(at, "app.test", "/health", "");
    assert_eq!((r.status, r.body.as_slice(), r.header("x-served-by")), (200, &b"ok\n"[..], Some("fulcrum")));
    let r = common::send(at, b"POST /health HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    assert_eq!(json(&r.body)["path"], "/health", "POST is not in the route's methods");

    assert_eq!(json(&get(at, "a", "/", "X-Canary: 1\r\n").body)["backend"], "canary");
    assert_eq!(json(&get(at, "a", "/?debug", "X-Canary: 1\r\n").body)["backend"], "echo");
    assert_eq!(json(&get(at, "a", "/", "X-Canary: 2\r\n").body)["backend"], "echo");

    let metrics = get(f.admin.unwrap(), "admin", "/metrics", "");
    let text = String::from_utf8_lossy(&metrics.body);
    assert!(text.contains("fulcrum_route_responses_total 3"), "{text}");
}

/// A keep-alive HTTP/1.1 connection sending GETs and reading whole answers.
struct Conn(BufReader<TcpStream>);

impl Conn {
    fn open(addr: SocketAddr) -> Conn {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.set_nodelay(true).unwrap();
        Conn(BufReader::new(s))
    }

    /// The status, the `x-fulcrum-backend` header and the body of `GET path`.
    fn get(&mut self, path: &str, extra: &str) -> (u16, String, Vec<u8>) {
        let head = format!("GET {path} HTTP/1.1\r\nHost: app\r\n{extra}\r\n");
        self.0.get_mut().write_all(head.as_bytes()).unwrap();
        let (mut status, mut backend, mut length) = (0, String::new(), 0);
        loop {
            let mut line = String::new();
            assert!(self.0.read_line(&mut line).unwrap() > 0, "closed");
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if status == 0 {
                status = line.split_whitespace().nth(1).unwrap().parse().unwrap();
            } else if let Some((k, v)) = line.split_once(':') {
                match k.to_ascii_lowercase().as_str() {
                    "x-fulcrum-backend" => backend = v.trim().to_string(),
                    "content-length" => length = v.trim().parse().unwrap(),
                    _ => {}
                }
            }
        }
        let mut body = vec![0; length];
        self.0.read_exact(&mut body).unwrap();
        (status, backend, body)
    }
}

#[test]
fn a_weighted_split_holds_within_two_points_and_a_key_keeps_its_side() {
    let b = Backends::start(BackendsConfig {
        backends: ["stable", "canary"]
            .iter()
            .map(|n| BackendSpec { name: Some(n.to_string()), ..BackendSpec::default() })
            .collect(),
        seed: 0,
        threads: 1,
    })
    .unwrap();
    let routes = r#"
  { path_prefix = "/sticky", clusters = [{ cluster = "stable", weight = 90 }, { cluster = "canary", weight = 10 }], hash_key = { header = "x-user" } },
  { clusters = [{ cluster = "stable", weight = 90 }, { cluster = "canary", weight = 10 }] },
"#;
    let f = Fulcrum::serve("routes-split", &config(routes, &b));
    let at = f.listen[0];
    let threads: Vec<_> = (0..4)
        .map(|_| {
            std::thread::spawn(move || {
                let mut c = Conn::open(at);
                (0..2_500).filter(|_| c.get("/", "").1 == "canary").count()
            })
        })
        .collect();
    let canary: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    let share = canary as f64 / 10_000.0 * 100.0;
    assert!((8.0..=12.0).contains(&share), "canary got {share:.2}% of 10,000 requests, not 10 ± 2");
    assert_eq!(b.served().iter().sum::<u64>(), 10_000);

    let mut c = Conn::open(at);
    let mut sides = std::collections::HashSet::new();
    for user in 0..200 {
        let header = format!("X-User: u{user}\r\n");
        let first = c.get("/sticky", &header).1;
        for _ in 0..3 {
            assert_eq!(c.get("/sticky", &header).1, first, "user {user} changed sides");
        }
        sides.insert(first);
    }
    assert_eq!(sides.len(), 2, "200 users all on one side: {sides:?}");
}

/// `fulcrum reload` for `f`, then wait until `check` holds (the workers
/// pick the new routing up at their next request).
fn reload_until(f: &Fulcrum, text: &str, check: impl FnMut() -> bool) {
    std::fs::write(f.dir.join("fulcrum.toml"), text).unwrap();
    let status = Command::new(env!("CARGO_BIN_EXE_fulcrum")).args(["reload", "--pid", &f.pid().to_string()]).status();
    assert!(status.unwrap().success());
    eventually("the reload applied", check);
}

#[test]
fn a_reload_changes_matchers_rewrites_and_splits_without_dropping_a_connection() {
    let b = echoes(&["one", "two"]);
    let before = r#"{ path_prefix = "/v1/", cluster = "one", rewrite = { prefix = "/old/" } }, { cluster = "one" }"#;
    let f = Fulcrum::serve("routes-reload", &config(before, &b));
    let mut kept = Conn::open(f.listen[0]);
    let (status, backend, body) = kept.get("/v1/x", "X-Env: beta\r\n");
    assert_eq!((status, backend.as_str(), json(&body)["path"].as_str()), (200, "one", Some("/old/x")));

    let after = r#"
  { headers = [{ name = "x-env", regex = "^beta$" }], path_regex = "^/v1/", cluster = "two", rewrite = { regex = "^/v1/(.*)", replace = "/new/$1" } },
  { clusters = [{ cluster = "one", weight = 1 }, { cluster = "two", weight = 1 }] },
"#;
    // The connection opened before the reload is still served, by the new
    // routes (polled on that connection: the reload signal is asynchronous).
    reload_until(&f, &config(after, &b), || json(&kept.get("/v1/x", "X-Env: beta\r\n").2)["path"] == "/new/x");
    let (status, backend, body) = kept.get("/v1/x", "X-Env: beta\r\n");
    assert_eq!((status, backend.as_str(), json(&body)["path"].as_str()), (200, "two", Some("/new/x")));
    let fresh = get(f.listen[0], "a", "/v1/x", "X-Env: beta\r\n");
    assert_eq!(json(&fresh.body)["path"], "/new/x", "a new connection sees the new routes too");
    let sides: std::collections::HashSet<String> = (0..50).map(|_| kept.get("/", "").1).collect();
    assert_eq!(sides.len(), 2, "the new split sends to both: {sides:?}");

    // A bad pattern is refused whole: the routes stay as they were.
    std::fs::write(f.dir.join("fulcrum.toml"), config(r#"{ path_regex = "(", cluster = "one" }"#, &b)).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_fulcrum"))
        .args(["serve", "--check", "-c"])
        .arg(f.dir.join("fulcrum.toml"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("listener[0].routes[0].path_regex"), "{stderr}");
    Command::new(env!("CARGO_BIN_EXE_fulcrum")).args(["reload", "--pid", &f.pid().to_string()]).status().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(json(&kept.get("/v1/x", "X-Env: beta\r\n").2)["path"], "/new/x");
}

#[test]
#[ignore = "needs curl (scripts/test installs it)"]
fn curl_follows_a_redirect_to_a_rewritten_route_and_shows_the_headers() {
    let b = echoes(&["echo", "canary"]);
    let f = Fulcrum::serve("routes-curl", &config(POLICY, &b));
    let url = format!("http://{}/old/items?x=1", f.listen[0]);
    let out = Command::new("curl")
        .args([
            "--silent",
            "--show-error",
            "--max-time",
            "20",
            "--location",
            "--include",
            "-H",
            "X-Request-Id: abc",
            &url,
        ])
        .output()
        .expect("curl (scripts/test installs it)");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let lower = text.to_ascii_lowercase();
    assert!(text.starts_with("HTTP/1.1 308"), "{text}");
    assert!(lower.contains(&format!("location: http://{}/api/items?x=1", f.listen[0])), "{text}");
    assert!(lower.contains("x-id: abc") && lower.contains("x-upstream: "), "{text}");
    let body = &text[text.rfind("\r\n\r\n").unwrap() + 4..];
    let sent = json(body.as_bytes());
    assert_eq!((sent["path"].as_str(), sent["headers"]["x-route"].as_str()), (Some("/items?x=1"), Some("api")));
}

#[test]
#[ignore = "needs python requests (scripts/test installs it)"]
fn python_requests_sees_rewrites_redirects_and_direct_responses() {
    let b = echoes(&["echo", "canary"]);
    let f = Fulcrum::serve("routes-python", &config(POLICY, &b));
    let script = r#"
import sys, requests
base = "http://" + sys.argv[1]
r = requests.get(base + "/api/a?b=1", headers={"X-Secret": "s"})
sent = r.json()
assert sent["path"] == "/a?b=1", sent
assert sent["headers"]["host"] == "internal.test", sent
assert "x-secret" not in sent["headers"], sent
assert r.headers["x-upstream"], r.headers
r = requests.get(base + "/old/z", allow_redirects=True)
assert [h.status_code for h in r.history] == [308], r.history
assert r.json()["path"] == "/z", r.text
r = requests.get(base + "/health", headers={"Host": "x.old.test"}, allow_redirects=False)
assert r.status_code == 301 and r.headers["location"] == "https://new.test/health", r.headers
r = requests.head(base + "/health")
assert r.status_code == 200 and r.headers["x-served-by"] == "fulcrum", r.headers
assert requests.get(base + "/", headers={"X-Canary": "1"}).json()["backend"] == "canary"
print("ok")
"#;
    let out = Command::new("python3").args(["-c", script, &f.listen[0].to_string()]).output().expect("python3");
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).trim() == "ok",
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_backend_command_echoes_what_the_proxy_sent() {
    let (_backend, addrs) = common::fulcrum_backend(&["--echo"]);
    let addr = addrs[0];
    let text = format!(
        "admin = \"127.0.0.1:0\"\n[[listener]]\nlisten = \"127.0.0.1:0\"\n\
         routes = [{{ cluster = \"app\", request_headers = {{ set = {{ x-tag = \"t\" }} }} }}]\n\
         [[cluster]]\nname = \"app\"\nendpoints = [\"{addr}\"]\n"
    );
    let f = Fulcrum::serve("routes-echo-cli", &text);
    let sent = json(&get(f.listen[0], "a.test", "/p?q", "").body);
    assert_eq!((sent["path"].as_str(), sent["headers"]["x-tag"].as_str()), (Some("/p?q"), Some("t")));
    assert_eq!(sent["headers"]["x-forwarded-for"], "127.0.0.1");
}

#[test]
fn the_matched_route_keys_the_rate_limit_and_request_id_reads_the_listeners_header() {
    let b = echoes(&["echo"]);
    let routes = r#"
  { headers = [{ name = "x-free" }], cluster = "echo" },
  { path_regex = "^/limited", cluster = "echo", rate_limit = { rate = 0.001, burst = 1 },
    request_headers = { set = { x-id = "$request_id" } }, response_headers = { set = { x-id = "$request_id" } } },
  { cluster = "echo" },
"#;
    let text = config(routes, &b).replace("routes = [", "request_id = { header = \"x-corr\" }\nroutes = [");
    let f = Fulcrum::serve("routes-limit-id", &text);
    let at = f.listen[0];

    let r = get(at, "a", "/limited", "X-Corr: c-1\r\n");
    assert_eq!((r.status, r.header("x-id")), (200, Some("c-1")), "{r:?}");
    assert_eq!(json(&r.body)["headers"]["x-id"], "c-1");
    let r = get(at, "a", "/limited", "");
    assert_eq!(r.status, 429, "the second route's bucket holds one request: {r:?}");
    assert!(r.header("retry-after").is_some(), "{r:?}");
    assert_eq!(get(at, "a", "/limited", "X-Free: 1\r\n").status, 200, "the first route has no limit");
    assert_eq!(get(at, "a", "/other", "").status, 200, "the last route has no limit");
}

//! Request IDs, W3C trace context, route rate limits and sticky cookies
//! through the real `fulcrum serve`: a rate limit of R req/s under
//! `fulcrum load` at 2R refuses about half with 429 and `Retry-After`; IDs
//! reach the upstream, the access log and the client; a `traceparent`
//! keeps its trace and gets a new parent; a sticky cookie is set once and
//! keeps a client on one endpoint; and all of these change with a reload.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{app_config, eventually, get, toml_list, Fulcrum, Reply};

const GOOD_TRACE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// An upstream on a free port that answers every request (keep-alive, no
/// bodies) with 200 and the request head it received as the body.
fn head_echo() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            std::thread::spawn(move || echo_heads(conn));
        }
    });
    addr
}

fn echo_heads(conn: TcpStream) {
    let mut writer = conn.try_clone().unwrap();
    let mut reader = BufReader::new(conn);
    loop {
        let mut head = String::new();
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            if line == "\r\n" {
                break;
            }
            head.push_str(&line.to_ascii_lowercase());
        }
        let answer = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{head}", head.len());
        if writer.write_all(answer.as_bytes()).is_err() {
            return;
        }
    }
}

/// The value of header `name` (lowercase) in an echoed request head.
fn echoed<'a>(reply: &'a Reply, name: &str) -> Option<&'a str> {
    let body = std::str::from_utf8(&reply.body).unwrap();
    body.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(':').map(str::trim))
}

fn metric(admin: SocketAddr, name: &str) -> u64 {
    let text = String::from_utf8(get(admin, "admin", "/metrics", "").body).unwrap();
    let line = text.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("no {name} in {text}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

fn reload(f: &Fulcrum, config: &str) {
    std::fs::write(f.dir.join("fulcrum.toml"), config).unwrap();
    let status = Command::new(env!("CARGO_BIN_EXE_fulcrum")).args(["reload", "--pid", &f.pid().to_string()]).status();
    assert!(status.unwrap().success());
}

#[test]
fn a_limit_of_r_under_load_at_2r_refuses_half_with_retry_after() {
    let b = fulcrum_load::Backends::start(fulcrum_load::BackendsConfig::fixed_delays(&[Duration::ZERO])).unwrap();
    let config = format!(
        "workers = 2\nadmin = \"127.0.0.1:0\"\n\n[[listener]]\nlisten = \"127.0.0.1:0\"\n\
         routes = [{{ cluster = \"app\", rate_limit = {{ rate = 100, burst = 5 }} }}]\n\n\
         [[cluster]]\nname = \"app\"\nendpoints = [{}]\n",
        toml_list(&b.addrs())
    );
    let f = Fulcrum::serve("rate-limit", &config);
    let url = format!("http://{}/", f.listen[0]);
    let out = Command::new(env!("CARGO_BIN_EXE_fulcrum"))
        .args(["load", &url, "--rate", "200", "--duration", "4s", "--json", "--threads", "1"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let requests = v["requests"].as_u64().unwrap();
    let refused = v["errors_by_kind"]["status_4xx"].as_u64().unwrap();
    assert_eq!(v["errors"].as_u64(), Some(refused), "only 4xx: {v}");
    let share = refused as f64 / requests as f64;
    eprintln!("rate limit 100/s, load 200/s for 4 s: {refused} of {requests} refused ({share:.3})");
    assert!((share - 0.5).abs() <= 0.05, "{refused} of {requests} refused ({share:.3}), expected 0.50 ± 0.05");
    let admin = f.admin.unwrap();
    assert_eq!(metric(admin, "fulcrum_local_responses_total{code=\"429\"}"), refused);
    // Every refusal says when to come back: 30 requests at once, far over
    // the burst of 5. A token comes back every 10 ms, so a machine slow to
    // send them lets through more; the bound follows the time they took.
    let listen = f.listen[0];
    let start = Arc::new(std::sync::Barrier::new(30));
    let began = Instant::now();
    let burst: Vec<_> = (0..30)
        .map(|_| {
            let start = Arc::clone(&start);
            std::thread::spawn(move || {
                start.wait();
                get(listen, "app", "/", "")
            })
        })
        .collect();
    let replies: Vec<Reply> = burst.into_iter().map(|h| h.join().unwrap()).collect();
    let took = began.elapsed().as_secs_f64();
    let mut limited: u64 = 0;
    for r in &replies {
        if r.status == 429 {
            limited += 1;
            let after: u64 = r.header("retry-after").expect("a 429 has Retry-After").parse().unwrap();
            assert_eq!(after, 1, "a token comes back within 10 ms: rounded up to 1 s");
            assert_eq!(r.body, b"fulcrum: rate limit exceeded\n");
        } else {
            assert_eq!(r.status, 200);
        }
    }
    let allowed = 30 - limited;
    let most = 5 + (100.0 * took).ceil() as u64 + 1;
    assert!(allowed <= most, "{allowed} of 30 passed in {took:.3} s: at most {most} tokens");
    assert!(limited >= 1, "none of 30 refused in {took:.3} s");
    assert_eq!(metric(admin, "fulcrum_local_responses_total{code=\"429\"}"), refused + limited);
}

#[test]
fn a_limit_per_header_value_gives_each_value_its_own_bucket() {
    let upstream = head_echo();
    let config = format!(
        "admin = \"127.0.0.1:0\"\n\n[[listener]]\nlisten = \"127.0.0.1:0\"\n\
         routes = [{{ cluster = \"app\", rate_limit = {{ rate = 0.5, burst = 2, key = {{ header = \"X-Api-Key\" }} }} }}]\n\n\
         [[cluster]]\nname = \"app\"\nendpoints = [\"{upstream}\"]\n"
    );
    let f = Fulcrum::serve("rate-limit-key", &config);
    let status = |key: &str| get(f.listen[0], "app", "/", &format!("x-api-key: {key}\r\n")).status;
    assert_eq!([status("a"), status("a"), status("a")], [200, 200, 429]);
    assert_eq!([status("b"), status("b"), status("b")], [200, 200, 429]);
    let r = get(f.listen[0], "app", "/", "x-api-key: a\r\n");
    assert_eq!(r.header("retry-after"), Some("2"), "a token every 2 s");
}

#[test]
fn request_ids_reach_the_upstream_the_log_and_the_client() {
    let upstream = head_echo();
    let dir = common::temp_dir("request-id-log");
    let log = dir.join("access.log");
    let listener = format!(
        "request_id = {{ response = true }}\ntraceparent = true\n\
         access_log = {{ path = \"{}\", format = \"$request_id $trace_id $status\" }}",
        log.display()
    );
    let f = Fulcrum::serve("request-id", &app_config(&format!("\"{upstream}\""), "", &listener, ""));
    let made = get(f.listen[0], "app", "/", "");
    let id = made.header("x-request-id").expect("the ID goes back to the client").to_string();
    assert_eq!(id.len(), 36, "a UUID: {id}");
    assert_eq!(echoed(&made, "x-request-id"), Some(id.as_str()), "the upstream got the same ID");
    let started = echoed(&made, "traceparent").expect("a trace is started").to_string();
    let given = get(
        f.listen[0],
        "app",
        "/",
        &format!("X-Request-Id: given-1\r\ntraceparent: {GOOD_TRACE}\r\ntracestate: v=1\r\n"),
    );
    assert_eq!(given.header("x-request-id"), Some("given-1"));
    assert_eq!(echoed(&given, "x-request-id"), Some("given-1"));
    let passed = echoed(&given, "traceparent").unwrap();
    assert_eq!(&passed[..36], &GOOD_TRACE[..36], "same version and trace ID");
    assert_eq!(&passed[52..], &GOOD_TRACE[52..], "same flags");
    assert_ne!(&passed[36..52], &GOOD_TRACE[36..52], "a new parent ID");
    assert_eq!(echoed(&given, "tracestate"), Some("v=1"));
    let invalid = get(f.listen[0], "app", "/", "traceparent: 00-xyz\r\ntracestate: v=1\r\n");
    assert_ne!(echoed(&invalid, "traceparent"), Some("00-xyz"));
    assert_eq!(echoed(&invalid, "tracestate"), None, "the state of an invalid trace is dropped");
    eventually("three log lines", || std::fs::read_to_string(&log).is_ok_and(|t| t.lines().count() == 3));
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], format!("{id} {} 200", &started[3..35]));
    assert_eq!(lines[1], "given-1 4bf92f3577b34da6a3ce929d0e0e4736 200");
    let _ = std::fs::remove_dir_all(dir);
}

const STICKY: &str = "algorithm = { kind = \"ring-hash\" }\nhash_key = { cookie = \"fsid\" }\n\
                      sticky_cookie = { ttl = \"1h\", same_site = \"lax\" }";

fn backend_of(r: &Reply) -> String {
    assert_eq!(r.status, 200, "{r:?}");
    r.header(fulcrum_load::BACKEND_HEADER).unwrap().to_string()
}

#[test]
fn a_sticky_cookie_is_set_once_and_the_requests_that_carry_it_stick() {
    let b = fulcrum_load::Backends::start(fulcrum_load::BackendsConfig::fixed_delays(&[Duration::ZERO; 4])).unwrap();
    let f = Fulcrum::serve("sticky", &app_config(&toml_list(&b.addrs()), "", "", STICKY));
    let mut seen = std::collections::HashSet::new();
    for _ in 0..12 {
        let first = get(f.listen[0], "app", "/", "");
        let set = first.header("set-cookie").expect("a request without the cookie gets it").to_string();
        let (pair, attributes) = set.split_once("; ").unwrap();
        assert_eq!(attributes, "Path=/; Max-Age=3600; HttpOnly; SameSite=Lax");
        let value = pair.strip_prefix("fsid=").unwrap();
        assert_eq!(value.len(), 16);
        let backend = backend_of(&first);
        for _ in 0..5 {
            let next = get(f.listen[0], "app", "/", &format!("Cookie: a=b; fsid={value}\r\n"));
            assert_eq!(backend_of(&next), backend, "the cookie keeps the client on its endpoint");
            assert_eq!(next.header("set-cookie"), None, "set once");
        }
        seen.insert(backend);
    }
    assert!(seen.len() >= 2, "new sessions spread over the endpoints: {seen:?}");
}

#[test]
fn limits_ids_and_sticky_cookies_change_with_a_reload() {
    let upstream = head_echo();
    let plain = app_config(&format!("\"{upstream}\""), "", "", "");
    let f = Fulcrum::serve("policy-reload", &plain);
    let r = get(f.listen[0], "app", "/", "");
    assert_eq!((r.status, r.header("x-request-id"), echoed(&r, "traceparent")), (200, None, None));
    let limited = plain.replace(
        "routes = [{ cluster = \"app\" }]",
        "routes = [{ cluster = \"app\", rate_limit = { rate = 0.05, burst = 1 } }]\n\
         request_id = { header = \"x-trace-me\", response = true }\ntraceparent = true",
    ) + "algorithm = { kind = \"maglev\" }\nhash_key = { cookie = \"s\" }\nsticky_cookie = {}\n";
    reload(&f, &limited);
    eventually("the reloaded limit", || get(f.listen[0], "app", "/", "").status == 429);
    let r = get(f.listen[0], "app", "/", "");
    assert_eq!(r.status, 429);
    assert_eq!(r.header("retry-after").map(|s| s.parse::<u64>().unwrap() <= 20), Some(true));
    assert!(r.header("x-trace-me").is_some(), "local replies carry the ID too");
    // A reload that keeps the route's limit keeps its (empty) bucket; a
    // token every 20 s, so a slow reload does not refill it.
    reload(&f, &limited.replace("response = true", "response = false"));
    eventually("the reload applied", || get(f.listen[0], "app", "/", "").header("x-trace-me").is_none());
    assert_eq!(get(f.listen[0], "app", "/", "").status, 429, "the bucket survived the reload");
    // The limit goes with the next reload; IDs and cookies stay.
    reload(
        &f,
        &limited
            .replace(", rate_limit = { rate = 0.05, burst = 1 }", "")
            .replace("response = true", "response = false"),
    );
    eventually("the limit lifted", || get(f.listen[0], "app", "/", "").status == 200);
    let r = get(f.listen[0], "app", "/", "");
    assert!(echoed(&r, "x-trace-me").is_some() && echoed(&r, "traceparent").is_some(), "{r:?}");
    assert_eq!(r.header("x-trace-me"), None, "response = false");
    assert!(r.header("set-cookie").is_some_and(|c| c.starts_with("s=")), "{r:?}");
    reload(&f, &plain);
    eventually("IDs and cookies gone", || {
        let r = get(f.listen[0], "app", "/", "");
        r.header("x-trace-me").is_none() && r.header("set-cookie").is_none() && echoed(&r, "traceparent").is_none()
    });
}

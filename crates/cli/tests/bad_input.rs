//! End-to-end: every kind of bad input gets its status from the real
//! binary, quickly, and none takes the proxy down.

mod common;

use std::net::TcpListener;
use std::time::{Duration, Instant};

use common::{app_config, closed_port, get, send, Fulcrum};

/// A listener that accepts connections and never answers.
fn silent_upstream() -> (TcpListener, std::thread::JoinHandle<()>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let clone = l.try_clone().unwrap();
    let t = std::thread::spawn(move || {
        let mut held = Vec::new();
        while let Ok((s, _)) = clone.accept() {
            held.push(s);
            if held.len() > 16 {
                break;
            }
        }
    });
    (l, t)
}

fn config(cluster_endpoints: &str, request_timeout: &str) -> String {
    let timeouts = format!("connect_timeout = \"300ms\"\nrequest_timeout = \"{request_timeout}\"");
    app_config(cluster_endpoints, "workers = 1", "max_header_bytes = 8192", &timeouts)
        .replace("routes = [{ cluster = \"app\" }]", "routes = [{ host = \"app.test\", cluster = \"app\" }]")
}

#[test]
fn refused_upstream_is_502_and_missing_route_404_and_bad_requests_400_431() {
    let dead = closed_port();
    // A refused connect is answered at once, not after the 30 s request
    // timeout; 10 s leaves a loaded machine a wide margin.
    let f = Fulcrum::serve("bad-input", &config(&format!("\"{dead}\""), "30s"));
    let addr = f.listen[0];

    let started = Instant::now();
    let r = get(addr, "app.test", "/", "");
    assert_eq!(r.status, 502, "{r:?}");
    assert!(started.elapsed() < Duration::from_secs(10), "502 took {:?}", started.elapsed());

    assert_eq!(get(addr, "other.test", "/", "").status, 404);
    assert_eq!(send(addr, b"GARBAGE\r\n\r\n").status, 400);
    assert_eq!(send(addr, b"GET / HTTP/1.1\r\nHost: app.test\r\nBad Header\r\n\r\n").status, 400);
    let huge = format!("GET / HTTP/1.1\r\nHost: app.test\r\nX-Big: {}\r\n\r\n", "a".repeat(20_000));
    assert_eq!(send(addr, huge.as_bytes()).status, 431);
    // The default limit: 100 header fields pass (to the dead upstream), 101 do not.
    assert_eq!(send(addr, with_headers(100).as_bytes()).status, 502);
    assert_eq!(send(addr, with_headers(101).as_bytes()).status, 431);

    // Still serving after all that, and counted.
    assert_eq!(get(addr, "other.test", "/", "").status, 404);
    let metrics = get(f.admin.unwrap(), "admin", "/metrics", "");
    let text = String::from_utf8_lossy(&metrics.body);
    assert!(text.contains("fulcrum_local_responses_total{code=\"502\"} 2"), "{text}");
    assert!(text.contains("fulcrum_local_responses_total{code=\"404\"} 2"), "{text}");
    assert!(f.terminate().success());
}

/// The 400s and 431s that hyper's parser sends for the proxy are counted
/// in `fulcrum_local_responses_total`, as the proxy's own 400s are.
#[test]
fn malformed_and_oversized_request_heads_are_counted() {
    let f = Fulcrum::serve("bad-head-metrics", &config(&format!("\"{}\"", closed_port()), "30s"));
    let addr = f.listen[0];
    let count = |code: u16| -> u64 {
        let metrics = get(f.admin.unwrap(), "admin", "/metrics", "");
        let text = String::from_utf8_lossy(&metrics.body).into_owned();
        let prefix = format!("fulcrum_local_responses_total{{code=\"{code}\"}} ");
        let line = text.lines().find(|l| l.starts_with(&prefix)).unwrap_or_else(|| panic!("no {prefix}: {text}"));
        line[prefix.len()..].parse().unwrap()
    };
    assert_eq!((count(400), count(431)), (0, 0));
    assert_eq!(send(addr, b"GARBAGE\r\n\r\n").status, 400);
    assert_eq!(send(addr, b"GET / HTTP/1.1\r\nHost: app.test\r\nBad Header\r\n\r\n").status, 400);
    assert_eq!(send(addr, b"GET / HTTP/1.1\r\nHost: app.test\r\nContent-Length: x\r\n\r\n").status, 400);
    let huge = format!("GET / HTTP/1.1\r\nHost: app.test\r\nX-Big: {}\r\n\r\n", "a".repeat(20_000));
    assert_eq!(send(addr, huge.as_bytes()).status, 431);
    assert_eq!(send(addr, with_headers(101).as_bytes()).status, 431);
    // The connection ends after the answer; the count follows at once, but
    // on the server's side of the socket: wait for it rather than race it.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while (count(400), count(431)) != (3, 2) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!((count(400), count(431)), (3, 2));
    assert!(f.terminate().success());
}

/// A request for app.test with `n` header fields in all.
fn with_headers(n: usize) -> String {
    let extra: String = (1..n).map(|i| format!("X-H{i}: v\r\n")).collect();
    format!("GET / HTTP/1.1\r\nHost: app.test\r\n{extra}\r\n")
}

#[test]
fn a_configured_header_count_limit_gives_431() {
    let dead = closed_port();
    let cfg = config(&format!("\"{dead}\""), "2s")
        .replace("max_header_bytes = 8192", "max_header_bytes = 8192\nlimits = { max_headers = 5 }");
    let f = Fulcrum::serve("max-headers", &cfg);
    assert_eq!(send(f.listen[0], with_headers(5).as_bytes()).status, 502);
    assert_eq!(send(f.listen[0], with_headers(6).as_bytes()).status, 431);
    assert!(f.terminate().success());
}

#[test]
fn bodies_over_max_body_bytes_get_413_whether_announced_or_streamed() {
    // The backend reads a body to its end (or its break) before it
    // answers, so a body cut off on its way there is not answered first.
    let b = fulcrum_load::Backends::start(fulcrum_load::BackendsConfig::fixed_delays(&[Duration::ZERO])).unwrap();
    let cfg = config(&format!("\"{}\"", b.addrs()[0]), "2s")
        .replace("max_header_bytes = 8192", "max_header_bytes = 8192\nlimits = { max_body_bytes = 1000 }");
    let f = Fulcrum::serve("max-body", &cfg);
    let post = |framing: &str, body: &str| {
        let raw = format!("POST /upload HTTP/1.1\r\nHost: app.test\r\nConnection: close\r\n{framing}\r\n\r\n{body}");
        send(f.listen[0], raw.as_bytes()).status
    };
    let chunk = format!("258\r\n{}\r\n", "x".repeat(600));
    // Within the limit, with a length and chunked (sent upstream chunked).
    assert_eq!(post("Content-Length: 10", "0123456789"), 200);
    assert_eq!(post("Transfer-Encoding: chunked", &format!("{chunk}0\r\n\r\n")), 200);
    // A length over the limit is refused before anything goes upstream.
    assert_eq!(post("Content-Length: 5000", ""), 413);
    // A chunked body is cut off once it passes the limit.
    assert_eq!(post("Transfer-Encoding: chunked", &format!("{chunk}{chunk}0\r\n\r\n")), 413);
    assert!(f.terminate().success());
}

#[test]
fn silent_upstream_is_504_after_the_request_timeout() {
    let (upstream, _t) = silent_upstream();
    let f = Fulcrum::serve("timeout", &config(&format!("\"{}\"", upstream.local_addr().unwrap()), "400ms"));
    let started = Instant::now();
    let r = get(f.listen[0], "app.test", "/", "");
    let took = started.elapsed();
    assert_eq!(r.status, 504, "{r:?}");
    // Not before the timeout; after it, soon (10 s: a wide margin for a
    // loaded machine, still far from never).
    assert!(took >= Duration::from_millis(400) && took < Duration::from_secs(10), "504 after {took:?}");
}

#[test]
fn unresolvable_endpoints_leave_no_endpoint_so_503() {
    // At once, not after the 30 s request timeout.
    let f = Fulcrum::serve("no-endpoint", &config("\"no-such-host.invalid:80\"", "30s"));
    let started = Instant::now();
    assert_eq!(get(f.listen[0], "app.test", "/", "").status, 503);
    assert!(started.elapsed() < Duration::from_secs(10), "503 took {:?}", started.elapsed());
}

#[test]
fn bad_config_names_file_line_and_field_and_exits_2() {
    let dir = common::temp_dir("bad-config");
    let path = dir.join("bad.toml");
    let text = config("\"127.0.0.1:1\", { address = \"127.0.0.1:2\", weight = 0 }", "1s");
    let line = 1 + text.lines().position(|l| l.starts_with("endpoints = [")).unwrap();
    std::fs::write(&path, &text).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_fulcrum"))
        .args(["serve", "--config", path.to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(&format!("{}:{line}:", path.display())), "{err}");
    assert!(err.contains("cluster[0].endpoints[1].weight"), "{err}");
    let _ = std::fs::remove_dir_all(dir);
}

/// A listener whose accept queue is full, so new connections hang in SYN.
fn full_backlog() -> (socket2::Socket, Vec<std::net::TcpStream>) {
    use socket2::{Domain, Socket, Type};
    let s = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    s.bind(&"127.0.0.1:0".parse::<std::net::SocketAddr>().unwrap().into()).unwrap();
    s.listen(0).unwrap();
    let addr = s.local_addr().unwrap().as_socket().unwrap();
    // Fill the queue; connects past it are never answered.
    let fillers =
        (0..4).filter_map(|_| std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(100)).ok()).collect();
    (s, fillers)
}

#[test]
fn connect_timeout_is_502_within_the_configured_time() {
    let (upstream, _fillers) = full_backlog();
    let addr = upstream.local_addr().unwrap().as_socket().unwrap();
    let f = Fulcrum::serve("connect-timeout", &config(&format!("\"{addr}\""), "30s"));
    let started = Instant::now();
    let r = get(f.listen[0], "app.test", "/", "");
    let took = started.elapsed();
    assert_eq!(r.status, 502, "{r:?}");
    // After the 300 ms connect timeout, well before the 30 s request timeout.
    assert!(took >= Duration::from_millis(250) && took < Duration::from_secs(10), "502 after {took:?}");
}

/// RFC 9112 §3.2 and §3.2.2: an HTTP/1.1 request without `Host` (or with
/// two) is refused; an absolute-form target routes by its own authority,
/// not by a conflicting `Host` (else a host route could be bypassed); a
/// chunk size that overflows is the client's error (400), not the
/// upstream's (502).
#[test]
fn host_rules_absolute_form_routing_and_overflowing_chunk_sizes() {
    let b = fulcrum_load::Backends::start(fulcrum_load::BackendsConfig::fixed_delays(&[Duration::ZERO])).unwrap();
    let f = Fulcrum::serve("host-rules", &config(&format!("\"{}\"", b.addrs()[0]), "2s"));
    let addr = f.listen[0];
    assert_eq!(get(addr, "app.test", "/", "").status, 200);
    let no_host = send(addr, b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n");
    assert_eq!(no_host.status, 400, "{no_host:?}");
    assert_eq!(send(addr, b"GET http://app.test/ HTTP/1.1\r\nConnection: close\r\n\r\n").status, 400);
    assert_eq!(get(addr, "app.test", "/", "Host: other.test\r\n").status, 400);
    // The target's authority wins, whichever way the Host conflicts.
    let absolute = |target: &str, host: &str| {
        send(addr, format!("GET {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes()).status
    };
    assert_eq!(absolute("http://other.test/x", "app.test"), 404);
    assert_eq!(absolute("http://app.test/x", "other.test"), 200);
    assert_eq!(absolute("http://APP.test:8080/x", "other.test"), 200);
    let overflow = "POST /upload HTTP/1.1\r\nHost: app.test\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n\
                    fffffffffffffffffffffffff\r\nx\r\n0\r\n\r\n";
    let r = send(addr, overflow.as_bytes());
    assert_eq!(r.status, 400, "{r:?}");
    // Still serving, and the backend was not blamed for any of it.
    assert_eq!(get(addr, "app.test", "/", "").status, 200);
    let metrics = String::from_utf8_lossy(&get(f.admin.unwrap(), "admin", "/metrics", "").body).into_owned();
    assert!(metrics.contains("fulcrum_local_responses_total{code=\"502\"} 0"), "{metrics}");
    assert!(f.terminate().success());
}

//! Parked HTTP/1.1 connections (idle for `limits.park_after`, held by their
//! worker's parker without a task): each serves its next request, is
//! closed by the idle timeout and by a graceful stop, and after a reload
//! uses the new routes. Every condition is polled for, up to a deadline;
//! `fulcrum_parked_connections` (scraped from the admin listener) says
//! when a connection has parked.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use fulcrum_proxy::config::Config;
use fulcrum_proxy::server::Proxy;

/// How long any condition is waited for.
const DEADLINE: Duration = Duration::from_secs(20);

/// An upstream answering every request with `body`, keep-alive.
fn upstream(body: &'static str) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for mut conn in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let answer = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}", body.len());
                while read_head(&mut conn).is_some() {
                    if conn.write_all(answer.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// A head read from `s` (to its blank line), or `None` at its end.
fn read_head(s: &mut TcpStream) -> Option<String> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match s.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => return None,
        }
    }
    Some(String::from_utf8_lossy(&head).into_owned())
}

/// The configuration text: one worker, an admin listener, `limits` on
/// the listener, and its route to the cluster of upstream `to` (of `a` and `b`).
fn config(limits: &str, to: &str, a: SocketAddr, b: SocketAddr) -> Config {
    let text = format!(
        "workers = 1\nadmin = \"127.0.0.1:0\"\n\
         [[listener]]\nlisten = \"127.0.0.1:0\"\nroutes = [{{ cluster = \"{to}\" }}]\nlimits = {{ {limits} }}\n\
         [[cluster]]\nname = \"a\"\nendpoints = [\"{a}\"]\n\
         [[cluster]]\nname = \"b\"\nendpoints = [\"{b}\"]\n"
    );
    Config::parse(std::path::Path::new("parking.toml"), &text).unwrap()
}

/// One request on `s` and its answer's body (one byte), or `None` if the
/// connection closed.
fn get(s: &mut TcpStream) -> Option<String> {
    s.write_all(b"GET / HTTP/1.1\r\nhost: a\r\n\r\n").ok()?;
    let head = read_head(s)?;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let mut body = [0u8; 1];
    s.read_exact(&mut body).ok()?;
    Some(String::from_utf8_lossy(&body).into_owned())
}

/// A gauge's value from the admin listener's `/metrics`.
fn gauge(admin: SocketAddr, name: &str) -> u64 {
    let mut s = TcpStream::connect(admin).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nhost: a\r\nconnection: close\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let prefix = format!("{name} ");
    let line = text.lines().find_map(|l| l.strip_prefix(&prefix));
    line.unwrap_or_else(|| panic!("no {name} in /metrics")).trim().parse().unwrap()
}

/// Wait until `cond` holds; fail with `what` at the deadline.
fn until(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < DEADLINE, "not within {DEADLINE:?}: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether the proxy has closed `s` (end of stream or reset).
fn closed(s: &mut TcpStream) -> bool {
    s.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
    let mut byte = [0u8; 1];
    match s.read(&mut byte) {
        Ok(0) => true,
        Ok(_) => panic!("unexpected bytes from the proxy"),
        Err(e) => !matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut),
    }
}

/// A proxy with `limits`, routing to upstream "a", and a connection that
/// made one request and is now parked.
fn parked_connection(limits: &str) -> (Proxy, TcpStream, SocketAddr, SocketAddr) {
    let (a, b) = (upstream("a"), upstream("b"));
    let proxy = Proxy::start(config(limits, "a", a, b)).unwrap();
    let admin = proxy.admin_addr().unwrap();
    let mut s = TcpStream::connect(proxy.listen_addrs()[0]).unwrap();
    assert_eq!(get(&mut s).as_deref(), Some("a"));
    until("the idle connection parks", || gauge(admin, "fulcrum_parked_connections") == 1);
    (proxy, s, a, b)
}

#[test]
fn a_parked_connection_serves_its_next_request_and_parks_again() {
    let (proxy, mut s, _, _) = parked_connection("park_after = \"50ms\"");
    let admin = proxy.admin_addr().unwrap();
    for _ in 0..3 {
        assert_eq!(get(&mut s).as_deref(), Some("a"), "a parked connection did not answer");
        until("it parks again", || gauge(admin, "fulcrum_parked_connections") == 1);
    }
    drop(s);
    until("a closed parked connection leaves the parker", || gauge(admin, "fulcrum_parked_connections") == 0);
    let open = || gauge(admin, "fulcrum_worker_connections{worker=\"0\"}");
    until("its slot is given back", || open() == 0);
    proxy.shutdown(Duration::from_secs(1));
}

#[test]
fn a_parked_connection_is_closed_by_the_idle_timeout() {
    let (proxy, mut s, _, _) = parked_connection("park_after = \"50ms\", idle_timeout = \"500ms\"");
    let admin = proxy.admin_addr().unwrap();
    until("the idle timeout closes it", || closed(&mut s));
    assert_eq!(gauge(admin, "fulcrum_parked_connections"), 0);
    until("its slot is given back", || gauge(admin, "fulcrum_worker_connections{worker=\"0\"}") == 0);
    proxy.shutdown(Duration::from_secs(1));
}

#[test]
fn a_graceful_stop_closes_parked_connections_at_once() {
    let (proxy, mut s, _, _) = parked_connection("park_after = \"50ms\"");
    let drain = Duration::from_secs(60);
    let start = Instant::now();
    let stop = std::thread::spawn(move || proxy.shutdown(drain));
    until("the stop closes the parked connection", || closed(&mut s));
    stop.join().unwrap();
    // A parked connection left open would hold the worker's drain to its end.
    assert!(start.elapsed() < drain / 2, "the stop took {:?}", start.elapsed());
}

#[test]
fn a_parked_connection_uses_the_routes_of_a_reload() {
    let limits = "park_after = \"50ms\"";
    let (proxy, mut s, a, b) = parked_connection(limits);
    proxy.reload(config(limits, "b", a, b)).unwrap();
    assert_eq!(get(&mut s).as_deref(), Some("b"), "the woken connection kept the old routes");
    proxy.shutdown(Duration::from_secs(1));
}

#[test]
fn a_graceful_stop_closes_idle_connections_that_have_not_parked() {
    // One connection between requests (it parks within `park_after`, and a
    // stopped parker closes it), one before its first request (its wait
    // watches the stop itself).
    let (a, b) = (upstream("a"), upstream("b"));
    let proxy = Proxy::start(config("park_after = \"1s\"", "a", a, b)).unwrap();
    let mut served = TcpStream::connect(proxy.listen_addrs()[0]).unwrap();
    assert_eq!(get(&mut served).as_deref(), Some("a"));
    let mut fresh = TcpStream::connect(proxy.listen_addrs()[0]).unwrap();
    let drain = Duration::from_secs(60);
    let start = Instant::now();
    let stop = std::thread::spawn(move || proxy.shutdown(drain));
    until("the stop closes the connection between requests", || closed(&mut served));
    until("the stop closes the connection before its first request", || closed(&mut fresh));
    stop.join().unwrap();
    assert!(start.elapsed() < drain / 2, "the stop took {:?}", start.elapsed());
}

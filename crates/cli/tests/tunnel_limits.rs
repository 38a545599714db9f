//! End-to-end: an upgraded connection (an HTTP/1.1 `Upgrade` tunnel, as a
//! WebSocket is) through the real binary counts against the listener's
//! `max_connections` and its upstream connection against the cluster's
//! while it is open, is closed by the listener's
//! `idle_timeout` when nothing crosses it, and counts as active in the
//! balancer for as long as it lasts.
//!
//! The upstream (`common::echo_upstream`) answers an upgrade with 101 and
//! then echoes, and a plain request with 200.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::{app_config, echo_upstream, get, open_tunnel, Fulcrum};

fn echo(s: &mut TcpStream, message: &[u8]) {
    s.write_all(message).unwrap();
    let mut back = vec![0u8; message.len()];
    s.read_exact(&mut back).unwrap();
    assert_eq!(back, message);
}

/// A metric's value from the admin listener (the first series of `name`).
fn metric(f: &Fulcrum, name: &str) -> u64 {
    let text = String::from_utf8(get(f.admin.unwrap(), "admin", "/metrics", "").body).unwrap();
    let line = text.lines().find(|l| l.starts_with(name) && !l.starts_with('#')).unwrap_or_else(|| panic!("{text}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

/// The status of an upgrade request that is refused (not switched).
fn refused_upgrade(proxy: SocketAddr) -> u16 {
    let r = common::send(proxy, &common::upgrade("/t"));
    r.status
}

/// Whether a new client connection is served (not closed at accept).
fn served(proxy: SocketAddr) -> bool {
    let mut s = TcpStream::connect(proxy).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let _ = s.write_all(b"GET / HTTP/1.1\r\nHost: app\r\nConnection: close\r\n\r\n");
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    out.starts_with(b"HTTP/1.1 200")
}

#[test]
fn a_tunnel_holds_its_connection_slot_and_counts_active_until_it_closes() {
    let upstream = echo_upstream();
    let listener = "limits = { max_connections = 1 }";
    let f = Fulcrum::serve("tunnel-slot", &app_config(&format!("\"{upstream}\""), "workers = 1", listener, ""));
    let proxy = f.listen[0];
    assert!(served(proxy), "a plain request is served");

    let mut tunnel = open_tunnel(proxy, "/t");
    echo(&mut tunnel, b"hello");
    assert_eq!(metric(&f, "fulcrum_balancer_active{"), 1, "the open tunnel is an active request");
    let rejected = metric(&f, "fulcrum_downstream_rejected_total");
    assert!(!served(proxy), "the tunnel holds the only connection slot");
    assert_eq!(metric(&f, "fulcrum_downstream_rejected_total"), rejected + 1);
    echo(&mut tunnel, b"still open");

    drop(tunnel);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !served(proxy) {
        assert!(Instant::now() < deadline, "the slot never came back after the tunnel closed");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(metric(&f, "fulcrum_balancer_active{"), 0);
}

#[test]
fn the_idle_timeout_closes_a_quiet_tunnel_and_traffic_keeps_it_open() {
    let upstream = echo_upstream();
    let listener = "limits = { idle_timeout = \"2s\" }";
    let f = Fulcrum::serve("tunnel-idle", &app_config(&format!("\"{upstream}\""), "workers = 1", listener, ""));
    let mut tunnel = open_tunnel(f.listen[0], "/t");
    // Messages every 200 ms for 3 s: longer than the idle timeout in all.
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(3) {
        echo(&mut tunnel, b"tick");
        std::thread::sleep(Duration::from_millis(200));
    }
    // Then silence: the proxy closes the tunnel (read returns end of
    // stream), and the balancer stops counting it.
    let mut buf = [0u8; 16];
    let quiet = Instant::now();
    let n = tunnel.read(&mut buf).expect("the proxy closes the tunnel rather than leaving it open");
    assert_eq!(n, 0, "closed, with nothing more sent");
    assert!(
        quiet.elapsed() >= Duration::from_millis(1500),
        "closed after {:?}, before the idle timeout",
        quiet.elapsed()
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while metric(&f, "fulcrum_balancer_active{") != 0 {
        assert!(Instant::now() < deadline, "the closed tunnel still counts active");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_tunnel_counts_against_the_clusters_upstream_connection_limit() {
    let upstream = echo_upstream();
    let cluster = "max_connections = 1\nmax_pending = 0";
    let f = Fulcrum::serve("tunnel-cluster", &app_config(&format!("\"{upstream}\""), "workers = 1", "", cluster));
    let proxy = f.listen[0];
    let mut tunnel = open_tunnel(proxy, "/t");
    echo(&mut tunnel, b"hello");
    assert_eq!(metric(&f, "fulcrum_cluster_upstream_connections"), 1);
    let overflows = metric(&f, "fulcrum_cluster_overflow_total");
    assert_eq!(refused_upgrade(proxy), 503, "a second tunnel finds the cluster's one connection taken");
    assert_eq!(metric(&f, "fulcrum_cluster_overflow_total"), overflows + 1);
    echo(&mut tunnel, b"still open");
    drop(tunnel);
    let deadline = Instant::now() + Duration::from_secs(20);
    while metric(&f, "fulcrum_cluster_upstream_connections") != 0 {
        assert!(Instant::now() < deadline, "the tunnel's upstream connection is still counted after it closed");
        std::thread::sleep(Duration::from_millis(20));
    }
    echo(&mut open_tunnel(proxy, "/t"), b"again");
}

//! End-to-end: the proxy's own answers to a cluster overload read the same
//! on the upgrade path (a WebSocket-style `Upgrade` tunnel) as on the plain
//! request path — the same status and message naming the limit, the same
//! access log flag (`UO`), the same counters — for the cluster's
//! `max_connections` and its `max_requests`.
//!
//! The upstream (`common::echo_upstream`) answers an upgrade with 101 and
//! then echoes, and a plain request with 200.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use common::{echo_upstream, get, open_tunnel, send, temp_dir, upgrade, Fulcrum, Reply};

/// A client tunnel through the proxy at `proxy`, past its 101, checked to
/// echo.
fn open_checked_tunnel(proxy: SocketAddr) -> TcpStream {
    let mut s = open_tunnel(proxy, "/tunnel");
    s.write_all(b"hello").unwrap();
    let mut back = [0u8; 5];
    s.read_exact(&mut back).unwrap();
    assert_eq!(&back, b"hello");
    s
}

/// A metric's value from the admin listener (the first series of `name`).
fn metric(f: &Fulcrum, name: &str) -> u64 {
    let text = String::from_utf8(get(f.admin.unwrap(), "admin", "/metrics", "").body).unwrap();
    let line = text.lines().find(|l| l.starts_with(name) && !l.starts_with('#')).unwrap_or_else(|| panic!("{text}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

/// The access log's JSON records, once there are `n`.
fn records(path: &Path, n: usize) -> Vec<serde_json::Value> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.lines().count() >= n {
            return text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        }
        assert!(Instant::now() < deadline, "{} has fewer than {n} records:\n{text}", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One worker, a JSON access log in `dir`, everything routed to `app` at
/// `upstream` with the cluster settings `cluster`.
fn config(dir: &Path, upstream: SocketAddr, cluster: &str) -> String {
    format!(
        "admin = \"127.0.0.1:0\"\nworkers = 1\n\n[[listener]]\nlisten = \"127.0.0.1:0\"\n\
         routes = [{{ cluster = \"app\" }}]\naccess_log = {{ path = \"{log}\", json = true }}\n\n\
         [[cluster]]\nname = \"app\"\nendpoints = [\"{upstream}\"]\n{cluster}\n",
        log = dir.join("access.json").display()
    )
}

/// With a tunnel holding the cluster to its limit, an upgrade and a plain
/// request are both refused; returns the two replies and their log records.
fn refused_both_ways(name: &str, cluster: &str) -> [(Reply, serde_json::Value); 2] {
    let dir = temp_dir(name);
    let f = Fulcrum::serve(name, &config(&dir, echo_upstream(), cluster));
    let proxy = f.listen[0];
    let tunnel = open_checked_tunnel(proxy);
    let overflows = metric(&f, "fulcrum_cluster_overflow_total");
    let unavailable = metric(&f, "fulcrum_local_responses_total{code=\"503\"}");
    let refused = send(proxy, &upgrade("/upgrade"));
    let plain = get(proxy, "app", "/plain", "");
    assert_eq!(metric(&f, "fulcrum_cluster_overflow_total"), overflows + 2, "each refusal is an overflow");
    assert_eq!(metric(&f, "fulcrum_local_responses_total{code=\"503\"}"), unavailable + 2);
    // The tunnel's 101, then the two refusals.
    let logged = records(&dir.join("access.json"), 3);
    let record =
        |path: &str| logged.iter().find(|r| r["path"] == path).unwrap_or_else(|| panic!("{logged:#?}")).clone();
    assert_eq!(record("/tunnel")["flags"].as_str(), Some("UP"));
    let out = [(refused, record("/upgrade")), (plain, record("/plain"))];
    drop(tunnel);
    drop(f);
    let _ = std::fs::remove_dir_all(&dir);
    out
}

fn assert_same_overload(name: &str, cluster: &str, limit: &str) {
    let [(upgrade, upgrade_log), (plain, plain_log)] = refused_both_ways(name, cluster);
    for (reply, log) in [(&upgrade, &upgrade_log), (&plain, &plain_log)] {
        assert_eq!(reply.status, 503, "{reply:?}");
        let body = String::from_utf8_lossy(&reply.body);
        assert_eq!(body, format!("fulcrum: cluster overloaded ({limit})\n"), "{reply:?}");
        assert_eq!(reply.header("content-type"), Some("text/plain; charset=utf-8"), "{reply:?}");
        assert_eq!((log["status"].as_u64(), log["flags"].as_str()), (Some(503), Some("UO")), "{log}");
        assert_eq!(log["cluster"].as_str(), Some("app"), "{log}");
    }
    assert_eq!(upgrade.body, plain.body);
}

#[test]
fn an_upgrade_refused_at_max_connections_is_flagged_as_the_plain_request_is() {
    assert_same_overload("local-max-connections", "max_connections = 1\nmax_pending = 0", "max_connections");
}

#[test]
fn an_upgrade_refused_at_max_requests_says_so_as_the_plain_request_does() {
    assert_same_overload("local-max-requests", "max_requests = 1", "max_requests");
}

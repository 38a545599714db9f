//! End-to-end: the runtime API on the real binary's admin listener drains,
//! undrains, weighs, adds and removes endpoints of a two-worker proxy, and
//! the requests that follow show it; a reload restores the file's view.

mod common;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use common::{app_config, get, send, toml_list, Fulcrum, Reply};
use fulcrum_load::{Backends, BackendsConfig, BACKEND_HEADER};
use serde_json::Value;

/// `method path` on the admin listener with a JSON `body`.
fn api(admin: SocketAddr, method: &str, path: &str, body: &str) -> (u16, Value) {
    let raw = format!(
        "{method} {path} HTTP/1.1\r\nHost: admin\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
    let r: Reply = send(admin, raw.as_bytes());
    let v = serde_json::from_slice(&r.body).unwrap_or_else(|e| panic!("{method} {path}: not JSON ({e}): {r:?}"));
    (r.status, v)
}

/// Which backend answered each of `n` requests (from 4 threads).
fn spread(addr: SocketAddr, n: usize) -> HashMap<String, usize> {
    common::spread(addr, n, 4, "")
}

fn count(spread: &HashMap<String, usize>, name: &str) -> usize {
    spread.get(name).copied().unwrap_or(0)
}

/// The endpoints `GET /clusters/app/endpoints` lists: address, weight, draining.
fn listed(admin: SocketAddr) -> Vec<(String, f64, bool)> {
    let (status, v) = api(admin, "GET", "/clusters/app/endpoints", "");
    assert_eq!(status, 200, "{v}");
    v["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (e["address"].as_str().unwrap().into(), e["weight"].as_f64().unwrap(), e["draining"].as_bool().unwrap())
        })
        .collect()
}

#[test]
fn drain_weight_add_and_remove_change_where_requests_go_until_a_reload() {
    // Backend "4" answers after 2 s, so a request to it can be caught in
    // flight; it is only added for that.
    let delays = [0, 0, 0, 0, 2000].map(Duration::from_millis);
    let b = Backends::start(BackendsConfig::fixed_delays(&delays)).unwrap();
    let addrs = b.addrs();
    let (a0, a1, a2, a3, a4) = (addrs[0], addrs[1], addrs[2], addrs[3], addrs[4]);
    // Two workers, each with its own balancer: every change must reach both.
    let config = app_config(&toml_list(&addrs[..3]), "workers = 2", "", "algorithm = { kind = \"round-robin\" }");
    let f = Fulcrum::serve("runtime-api", &config);
    let (admin, proxy) = (f.admin.unwrap(), f.listen[0]);

    let before = spread(proxy, 60);
    assert!(["0", "1", "2"].iter().all(|n| count(&before, n) > 0), "{before:?}");

    // Drain "1": no new request reaches it.
    let (status, v) = api(admin, "POST", &format!("/clusters/app/endpoints/{a1}/drain"), "");
    assert_eq!(status, 200, "{v}");
    assert_eq!((v["endpoint"]["draining"].as_bool(), v["applied"].as_bool()), (Some(true), Some(true)), "{v}");
    let drained = spread(proxy, 60);
    assert_eq!(count(&drained, "1"), 0, "{drained:?}");
    assert!(count(&drained, "0") > 0 && count(&drained, "2") > 0, "{drained:?}");

    // With the file's three drained and the slow "4" added, it takes the
    // next request; drained while that request is in flight, it still
    // answers it, and then nothing is left: 503.
    for a in [a0, a2] {
        assert_eq!(api(admin, "POST", &format!("/clusters/app/endpoints/{a}/drain"), "").0, 200);
    }
    assert_eq!(api(admin, "POST", "/clusters/app/endpoints", &format!(r#"{{"address": "{a4}"}}"#)).0, 201);
    let in_flight = std::thread::spawn(move || get(proxy, "app", "/", ""));
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while api(admin, "GET", &format!("/clusters/app/endpoints/{a4}"), "").1["in_flight"] != 1 {
        assert!(!in_flight.is_finished() && std::time::Instant::now() < deadline, "never seen in flight to 4");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(api(admin, "POST", &format!("/clusters/app/endpoints/{a4}/drain"), "").0, 200);
    let finished = in_flight.join().unwrap();
    assert_eq!((finished.status, finished.header(BACKEND_HEADER)), (200, Some("4")), "{finished:?}");
    assert_eq!(get(proxy, "app", "/", "").status, 503, "every endpoint draining");
    assert_eq!(api(admin, "DELETE", &format!("/clusters/app/endpoints/{a4}"), "").0, 200);
    for a in [a0, a1, a2] {
        assert_eq!(api(admin, "POST", &format!("/clusters/app/endpoints/{a}/undrain"), "").0, 200);
    }

    // Weight 6 on "2" against 1 and 1: it takes most requests.
    let (status, v) = api(admin, "PUT", &format!("/clusters/app/endpoints/{a2}/weight"), r#"{"weight": 6}"#);
    assert_eq!((status, v["endpoint"]["weight"].as_f64()), (200, Some(6.0)), "{v}");
    let weighed = spread(proxy, 80);
    assert!(count(&weighed, "2") >= 3 * count(&weighed, "1").max(count(&weighed, "0")), "{weighed:?}");

    // Add "3" (not in the file) and remove "2": "3" gets requests, "2" none.
    let (status, v) = api(admin, "POST", "/clusters/app/endpoints", &format!(r#"{{"address": "{a3}"}}"#));
    assert_eq!(status, 201, "{v}");
    let (status, v) = api(admin, "DELETE", &format!("/clusters/app/endpoints/{a2}"), "");
    assert_eq!((status, v["endpoint"]["removed"].as_bool()), (200, Some(true)), "{v}");
    let changed = spread(proxy, 60);
    assert!(count(&changed, "3") > 0, "{changed:?}");
    assert_eq!(count(&changed, "2"), 0, "{changed:?}");
    assert_eq!(listed(admin).len(), 3);

    // Bad input: a JSON error with a 4xx, and the proxy keeps serving.
    for (method, path, body, want) in [
        ("POST", "/clusters/nope/endpoints/127.0.0.1:1/drain".to_string(), "", 404),
        ("POST", format!("/clusters/app/endpoints/{a2}/drain"), "", 404),
        ("PUT", format!("/clusters/app/endpoints/{a1}/weight"), r#"{"weight": 0}"#, 400),
        ("POST", "/clusters/app/endpoints".to_string(), r#"{"address": "nowhere"}"#, 400),
        ("POST", "/clusters/app/endpoints".to_string(), &format!(r#"{{"address": "{a3}"}}"#), 409),
        ("DELETE", "/clusters/app".to_string(), "", 405),
    ] {
        let (status, v) = api(admin, method, &path, body);
        assert_eq!(status, want, "{method} {path}: {v}");
        assert!(v["error"].is_string(), "{v}");
    }

    // A reload restores the file's endpoints and weights.
    let reload = std::process::Command::new(env!("CARGO_BIN_EXE_fulcrum"))
        .args(["reload", "--pid", &f.pid().to_string()])
        .status()
        .unwrap();
    assert!(reload.success());
    let want: Vec<_> = addrs[..3].iter().map(|a| (a.to_string(), 1.0, false)).collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while listed(admin) != want {
        assert!(std::time::Instant::now() < deadline, "{:?}", listed(admin));
        std::thread::sleep(Duration::from_millis(20));
    }
    let after = spread(proxy, 60);
    assert_eq!(count(&after, "3"), 0, "{after:?}");
    assert!(count(&after, "2") > 0, "{after:?}");
}

//! End-to-end: a real gRPC server and client (the `grpcio` package from
//! PyPI, which `scripts/test` installs) through `fulcrum serve` with an
//! HTTP/2 upstream: a unary call, a failing status carried in the trailers
//! and counted as the endpoint's failure, `grpc-timeout` as the proxy's
//! deadline, and a call answered UNAVAILABLE retried when the cluster's
//! retry policy says `grpc-unavailable`. A plain `cargo test` ignores them
//! (they need grpcio); `scripts/test` installs it and runs them, and run
//! without it they fail, never skip.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::{app_config, get, send, Fulcrum, KillOnDrop};

fn peer() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/tools/grpc_peer.py")
}

/// One call through `target`: "ok <reply>" or "status <CODE> <details>".
fn call(target: &str, method: &str, request: &str) -> String {
    let out = Command::new("python3")
        .arg(peer())
        .args(["client", target, method, request])
        .output()
        .expect("python3 (with the grpcio package: scripts/test installs it)");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A counter or gauge of the proxy's metrics for the only endpoint or cluster.
fn metric(f: &Fulcrum, name: &str) -> u64 {
    let text = String::from_utf8_lossy(&get(f.admin.unwrap(), "admin", "/metrics", "").body).into_owned();
    let line = text.lines().find(|l| l.starts_with(&format!("{name}{{"))).unwrap_or_else(|| panic!("{text}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

/// The gRPC server of `grpc_peer.py`, and its port.
fn server() -> (KillOnDrop, u16) {
    let (server, lines) = common::spawn_printing(Command::new("python3").arg(peer()).arg("server"), 1);
    let first = lines.first().map_or("", String::as_str);
    let port: u16 = first
        .trim()
        .strip_prefix("port ")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("the gRPC server did not start (is the grpcio package installed?): {first:?}"));
    (server, port)
}

#[test]
#[ignore = "needs python3 with the grpcio package (scripts/test installs it)"]
fn grpc_calls_keep_their_trailers_status_and_deadline_through_the_proxy() {
    let (server, port) = server();
    let cluster = "upstream = \"http2\"\nrequest_timeout = \"30s\"";
    let f = Fulcrum::serve("grpc", &app_config(&format!("\"127.0.0.1:{port}\""), "workers = 1", "", cluster));
    let target = f.listen[0].to_string();

    assert_eq!(call(&target, "Unary", "hello"), "ok hello");
    assert_eq!(metric(&f, "fulcrum_upstream_errors_total"), 0);
    // The status travels in the trailers (or a trailers-only head), and
    // counts as the endpoint's failure.
    assert_eq!(call(&target, "Fail", "NOT_FOUND"), "status NOT_FOUND failing on purpose");
    assert_eq!(call(&target, "Fail", "UNAVAILABLE"), "status UNAVAILABLE failing on purpose");
    assert_eq!(metric(&f, "fulcrum_upstream_errors_total"), 2);
    assert_eq!(call(&target, "Unary", "again"), "ok again");
    assert_eq!(metric(&f, "fulcrum_upstream_errors_total"), 2);

    // grpc-timeout is the proxy's deadline: Slow answers after 2 s, the
    // cluster would wait 30 s, the call allows 300 ms, so only the
    // deadline can give this 504. (Sent by hand over HTTP/1.1 so that no
    // client deadline races the proxy's.)
    let frame = [0u8, 0, 0, 0, 1, b'x'];
    let mut raw = format!(
        "POST /test.Echo/Slow HTTP/1.1\r\nHost: grpc\r\nContent-Type: application/grpc\r\nTE: trailers\r\n\
         grpc-timeout: 300m\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        frame.len()
    )
    .into_bytes();
    raw.extend_from_slice(&frame);
    let r = send(f.listen[0], &raw);
    assert_eq!(r.status, 504, "{r:?}");
    drop(server);
    assert!(f.terminate().success());
}

#[test]
#[ignore = "needs python3 with the grpcio package (scripts/test installs it)"]
fn a_grpc_call_answered_unavailable_is_retried_when_configured() {
    // Flaky answers every other call UNAVAILABLE, starting with the first.
    let (server, port) = server();
    let endpoints = format!("\"127.0.0.1:{port}\"");
    let retrying = "upstream = \"http2\"\nretries = { attempts = 2, on = [\"grpc-unavailable\"], budget = false, \
                    different_endpoint = false }";
    let f = Fulcrum::serve("grpc-retry", &app_config(&endpoints, "workers = 1", "", retrying));
    let target = f.listen[0].to_string();
    // Call 1 fails, its retry (call 2, with the request body sent again) succeeds.
    assert_eq!(call(&target, "Flaky", "hello"), "ok hello");
    assert_eq!(metric(&f, "fulcrum_cluster_retries_total"), 1);
    // Other statuses are not retried.
    assert_eq!(call(&target, "Fail", "NOT_FOUND"), "status NOT_FOUND failing on purpose");
    assert_eq!(metric(&f, "fulcrum_cluster_retries_total"), 1);
    assert!(f.terminate().success());

    // Without the condition the client sees UNAVAILABLE (call 3).
    let plain = "upstream = \"http2\"\nretries = { attempts = 2, on = [\"5xx\"], budget = false }";
    let f = Fulcrum::serve("grpc-no-retry", &app_config(&endpoints, "workers = 1", "", plain));
    let target = f.listen[0].to_string();
    assert_eq!(call(&target, "Flaky", "again"), "status UNAVAILABLE call 3 is unavailable on purpose");
    assert_eq!(metric(&f, "fulcrum_cluster_retries_total"), 0);
    drop(server);
    assert!(f.terminate().success());
}

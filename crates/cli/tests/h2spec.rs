//! End-to-end: h2spec, the public HTTP/2 conformance suite (the Go module
//! `github.com/summerwind/h2spec`, which `scripts/test` installs), against
//! an HTTP/2-only listener (`protocol = "http2"`, prior-knowledge h2c) of
//! the real `fulcrum serve`: every case must pass. A plain `cargo test`
//! ignores it; `scripts/test` installs h2spec and runs it, and run without
//! h2spec it fails, never skips.

mod common;

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use common::{app_config, Fulcrum};
use fulcrum_load::{Backends, BackendsConfig};

/// h2spec on the PATH, else where `go install` puts it.
fn h2spec() -> PathBuf {
    let gopath = std::env::var_os("GOPATH").map(PathBuf::from);
    let home = std::env::var_os("HOME").map(|h| PathBuf::from(h).join("go"));
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .chain(gopath.into_iter().chain(home).map(|g| g.join("bin")))
        .map(|dir| dir.join("h2spec"))
        .find(|p| p.is_file())
        .expect("h2spec (go install github.com/summerwind/h2spec/cmd/h2spec@latest; scripts/test installs it)")
}

#[test]
#[ignore = "needs h2spec (scripts/test installs it with go install)"]
fn h2spec_passes_every_case_on_an_http2_only_listener() {
    // Some cases expect a response body (DATA frames) from the server.
    let mut spec = BackendsConfig::fixed_delays(&[Duration::ZERO]);
    spec.backends[0].body_bytes = 64;
    let backends = Backends::start(spec).unwrap();
    let endpoints = format!("\"{}\"", backends.addrs()[0]);
    let f = Fulcrum::serve("h2spec", &app_config(&endpoints, "workers = 1", "protocol = \"http2\"", ""));
    let addr = f.listen[0];

    let out = Command::new(h2spec())
        .args(["-h", "127.0.0.1", "-p", &addr.port().to_string(), "-o", "5"])
        .output()
        .expect("run h2spec");
    let report = String::from_utf8_lossy(&out.stdout);
    let summary = report.lines().rev().find(|l| l.contains(" tests, ")).unwrap_or_default().to_string();
    assert!(out.status.success(), "h2spec failed: {summary}\n{report}");
    assert!(summary.contains(" 0 skipped, 0 failed"), "{summary}\n{report}");

    // HTTP/1.1 gets no HTTP/1.1 answer there: the listener speaks HTTP/2 only.
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
    let mut reply = Vec::new();
    let _ = s.read_to_end(&mut reply);
    assert!(!reply.starts_with(b"HTTP/1"), "{:?}", String::from_utf8_lossy(&reply));

    assert!(f.terminate().success());
    backends.shutdown();
}

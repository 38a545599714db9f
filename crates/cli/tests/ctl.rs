//! End-to-end: `fulcrum ctl` against a running `fulcrum serve`: tables,
//! `--json`, a drain that requests then obey, and clear errors (exit 2 for
//! what the API refuses, 1 when the proxy cannot be reached).

mod common;

use std::net::SocketAddr;
use std::process::{Command, Output};
use std::time::Duration;

use common::{app_config, closed_port, get, toml_list, Fulcrum};
use fulcrum_load::{Backends, BackendsConfig, BACKEND_HEADER};

fn ctl(admin: SocketAddr, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fulcrum"))
        .args(["ctl", "--admin", &admin.to_string()])
        .args(args)
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    assert!(o.status.success(), "{o:?}");
    String::from_utf8(o.stdout.clone()).unwrap()
}

#[test]
fn ctl_lists_drains_and_reports_errors() {
    let b = Backends::start(BackendsConfig::fixed_delays(&[Duration::ZERO; 3])).unwrap();
    let addrs = b.addrs();
    let config = app_config(&toml_list(&addrs[..2]), "workers = 2", "", "algorithm = { kind = \"least-request\" }");
    let f = Fulcrum::serve("ctl", &config);
    let admin = f.admin.unwrap();

    let clusters = stdout(&ctl(admin, &["clusters"]));
    let lines: Vec<Vec<&str>> = clusters.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(lines[0][..4], ["CLUSTER", "ALGORITHM", "ENDPOINTS", "ROUTABLE"], "{clusters}");
    assert_eq!(lines[1][..4], ["app", "least-request", "2", "2"], "{clusters}");

    let endpoints = stdout(&ctl(admin, &["endpoints", "app"]));
    assert!(endpoints.starts_with("ADDRESS"), "{endpoints}");
    for a in &addrs[..2] {
        let row = endpoints.lines().find(|l| l.starts_with(&a.to_string())).unwrap_or_else(|| panic!("{endpoints}"));
        // Address, weight, effective weight, state, in flight, one active count per worker.
        assert_eq!(row.split_whitespace().take(6).skip(1).collect::<Vec<_>>(), ["1", "1", "up", "0", "0/0"], "{row}");
    }

    // Drain the first endpoint: the command returns once every worker has
    // it, and no request reaches it after.
    let (a0, a1) = (addrs[0].to_string(), addrs[1].to_string());
    let drained = stdout(&ctl(admin, &["drain", "app", &a0]));
    assert!(drained.starts_with(&format!("app {a0}: draining (every worker's balancer has it)")), "{drained}");
    for _ in 0..20 {
        let r = get(f.listen[0], "app", "/", "");
        assert_eq!((r.status, r.header(BACKEND_HEADER)), (200, Some("1")), "{r:?}");
    }

    // --json is the API's answer.
    let json: serde_json::Value = serde_json::from_str(&stdout(&ctl(admin, &["--json", "endpoints", "app"]))).unwrap();
    let states: Vec<_> = json["endpoints"].as_array().unwrap().iter().map(|e| e["draining"].clone()).collect();
    assert_eq!(states, [true, false]);
    // The older spelling `-o json`, after the subcommand, still gives JSON.
    let added = stdout(&ctl(admin, &["add", "app", &addrs[2].to_string(), "--weight", "2", "-o", "json"]));
    let added: serde_json::Value = serde_json::from_str(&added).unwrap();
    assert_eq!((added["endpoint"]["weight"].as_f64(), added["applied"].as_bool()), (Some(2.0), Some(true)));
    assert!(stdout(&ctl(admin, &["weight", "app", &a1, "3"])).contains("weight set"));
    assert!(stdout(&ctl(admin, &["undrain", "app", &a0])).contains("undrained"));
    assert!(stdout(&ctl(admin, &["remove", "app", &addrs[2].to_string()])).contains("removed"));

    // What the API refuses: exit 2 and its message.
    for (args, message) in [
        (vec!["drain", "app", "127.0.0.1:1"], "no endpoint 127.0.0.1:1 in this cluster"),
        (vec!["endpoints", "nope"], "no cluster \"nope\""),
        (vec!["weight", "app", &a1, "0"], "0 is not a weight > 0"),
        (vec!["add", "app", &a1], "is already an endpoint"),
        (vec!["endpoints", "a b"], "\"/clusters/a b/endpoints\" cannot be part of a request path"),
    ] {
        let o = ctl(admin, &args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(message), "{args:?}: {err}");
    }
    // Bad arguments are clap's exit 2, before any call.
    assert_eq!(ctl(admin, &["drain", "app", "not-an-address"]).status.code(), Some(2));

    // No proxy there: exit 1, saying so.
    let nowhere = closed_port();
    let o = ctl(nowhere, &["clusters"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains(&format!("cannot reach the admin listener at {nowhere}")), "{err}");
}

#[test]
fn ctl_help_teaches_with_examples() {
    let o = Command::new(env!("CARGO_BIN_EXE_fulcrum")).args(["ctl", "--help"]).output().unwrap();
    // Wrapped to the width of a terminal: compare words, not lines.
    let help = String::from_utf8(o.stdout).unwrap().split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(o.status.success());
    for needle in ["drain", "undrain", "weight", "add", "remove", "--json", "--admin", "next `fulcrum reload`"] {
        assert!(help.contains(needle), "{needle} missing from:\n{help}");
    }
    assert!(help.contains("fulcrum ctl drain web 127.0.0.1:9001"), "{help}");
}

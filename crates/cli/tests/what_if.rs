//! End-to-end: `fulcrum sim --from` against a running `fulcrum serve`
//! (round robin over three `fulcrum backend`s of 2, 6 and 20 ms) under
//! `fulcrum load` in open loop. The scenario it builds has the three
//! endpoints with their service times in the right order and ratio, the
//! offered rate, and a prediction of the present within 10 % of the
//! measured p50 and p90; unknown clusters and unreachable proxies get clear
//! errors.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use common::{app_config, closed_port, temp_dir, toml_list, Fulcrum};
use serde_json::Value;

/// A child process killed by PID when dropped.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn fulcrum() -> Command {
    Command::new(env!("CARGO_BIN_EXE_fulcrum"))
}

fn sim(args: &[&str]) -> Output {
    fulcrum().arg("sim").args(args).output().unwrap()
}

/// Mean of an empirical latency file (ms).
fn mean_ms(path: &std::path::Path) -> f64 {
    let text = std::fs::read_to_string(path).unwrap();
    let v: Vec<f64> = text.lines().map(|l| l.parse().unwrap()).collect();
    v.iter().sum::<f64>() / v.len() as f64
}

#[test]
fn a_scenario_from_a_running_proxy_predicts_its_present() {
    let mut backend = Process(
        fulcrum()
            .args(["backend", "--listen", "127.0.0.1:0", "--count", "3", "--delays", "2ms,6ms,20ms"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut lines = BufReader::new(backend.0.stdout.take().unwrap()).lines();
    let addrs: Vec<String> = (0..3).map(|_| lines.next().unwrap().unwrap()).collect();
    let config = app_config(&toml_list(&addrs), "workers = 1", "", "algorithm = { kind = \"round-robin\" }");
    let f = Fulcrum::serve("what-if", &config);
    let (admin, listen) = (f.admin.unwrap(), f.listen[0]);
    let _load = Process(
        fulcrum()
            .args(["load", &format!("http://{listen}/"), "--rate", "200", "-d", "10s", "--threads", "1"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    std::thread::sleep(Duration::from_millis(1500));

    let dir = temp_dir("what-if-scenario");
    let file = dir.join("app.toml");
    let from = format!("http://{admin}");
    let o = sim(&["--from", &from, "--cluster", "app", "--window", "5s", "--json", "--write-scenario"]
        .iter()
        .copied()
        .chain([file.to_str().unwrap()])
        .collect::<Vec<_>>());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let current = &v["current_state"];
    assert_eq!(current["algorithm"], "round-robin", "{current}");
    let rate = current["rate"].as_f64().unwrap();
    assert!((170.0..230.0).contains(&rate), "offered 200/s, modelled {rate}/s");
    for f in current["figures"].as_array().unwrap().iter().take(2) {
        let d = f["distance_percent"].as_f64().unwrap();
        assert!(d.abs() < 10.0, "prediction of the present off by {d:.1} %: {f}");
    }

    // Three endpoints, service times in the backends' order and ratio
    // (the proxy-endpoint overhead is inside them, so the ratio is below 10).
    let means: Vec<f64> = (0..3).map(|i| mean_ms(&dir.join(format!("app.endpoint-{i}.txt")))).collect();
    assert!(means[0] >= 2.0 && means[0] < means[1] && means[1] < means[2], "{means:?}");
    assert!((4.0..10.5).contains(&(means[2] / means[0])), "{means:?}");
    let scenario = std::fs::read_to_string(&file).unwrap();
    assert_eq!(scenario.matches("[[servers]]").count(), 3, "{scenario}");

    // Every algorithm side by side; those that see load beat round robin
    // on the median with one endpoint ten times slower.
    let results = v["report"]["results"].as_array().unwrap();
    let p50 = |name: &str| {
        let r = results.iter().find(|r| r["algorithm"] == name).unwrap_or_else(|| panic!("{name}: {results:?}"));
        r["latency_ms"]["p50"].as_f64().unwrap()
    };
    assert!(p50("peak-ewma") < p50("round-robin"), "{results:?}");

    // The written scenario runs on its own.
    let again = sim(&[file.to_str().unwrap(), "--algorithms", "least-request"]);
    assert!(again.status.success(), "{}", String::from_utf8_lossy(&again.stderr));

    // Clear errors: an unknown cluster (exit 2), no proxy at all (exit 1).
    let o = sim(&["--from", &from, "--cluster", "nope", "--window", "10ms"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("no cluster named \"nope\""), "{err}");
    let o = sim(&["--from", &format!("http://{}", closed_port()), "--cluster", "app", "--window", "10ms"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("cannot reach the admin listener"), "{err}");
}

//! Reproduction targets: the shipped seed scenarios must give
//! the published and rerun figures of seed 000 (the ns-3 model of
//! `rroblak/envoy-peak-ewma`) and seed 004 (the demo of tower pull request
//! #76) within the stated bounds. Which setup produced each of those tables
//! is told in `docs/results/seed-000.md` and `docs/results/seed-004.md`.

use std::path::PathBuf;

use fulcrum_sim::{simulate, AlgorithmReport, Plan, Report, Scenario};

fn scenario(name: &str) -> Scenario {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scenarios").join(name);
    Scenario::load(&path).unwrap_or_else(|e| panic!("{e}"))
}

fn run(name: &str, runs: u32) -> Report {
    let s = scenario(name);
    let mut plan = Plan::for_scenario(&s);
    plan.runs = runs;
    simulate(&s, &plan, None).unwrap()
}

fn result<'a>(report: &'a Report, algorithm: &str) -> &'a AlgorithmReport {
    report.results.iter().find(|a| a.algorithm == algorithm).unwrap_or_else(|| panic!("no {algorithm}"))
}

fn within(value: f64, lo: f64, hi: f64, what: &str) {
    assert!((lo..=hi).contains(&value), "{what} = {value:.3}, expected {lo}..={hi}");
}

/// Within `pct` % of `target`, or within `abs` of it.
fn near(value: f64, target: f64, pct: f64, abs: f64, what: &str) {
    let ok = (value - target).abs() <= (target * pct / 100.0).max(abs);
    assert!(ok, "{what} = {value:.3}, expected {target} ± {pct} % (or ± {abs})");
}

#[test]
fn seed_000_mean_over_20_seeds() {
    let report = run("seed-000.toml", 20);
    let slow = report.servers.len() - 1;
    for a in &report.results {
        let name = &a.algorithm;
        assert_eq!(a.requests, 1000.0, "{name}");
        near(a.latency.p50, 5.0, 0.0, 1e-6, &format!("{name} p50"));
        if name == "peak-ewma" {
            near(a.latency.p95, 5.0, 0.0, 1e-6, "peak-ewma p95");
            within(a.latency.p99, 0.0, 10.0, "peak-ewma p99");
            within(a.latency.avg, 0.0, 5.3, "peak-ewma avg");
            within(a.share_of(slow) * 100.0, 0.0, 0.5, "peak-ewma % to the 50 ms server");
        } else {
            near(a.latency.p95, 50.0, 0.0, 1e-6, &format!("{name} p95"));
            let (lo, hi) = match name.as_str() {
                "round-robin" | "random" => (9.2, 10.0),
                "least-request" => (8.5, 9.6),
                _ => (9.0, 10.2),
            };
            within(a.latency.avg, lo, hi, &format!("{name} avg"));
            let (lo, hi) = if name == "least-request" { (6.0, 10.0) } else { (9.0, 11.0) };
            within(a.share_of(slow) * 100.0, lo, hi, &format!("{name} % to the 50 ms server"));
        }
    }
    assert_eq!(report.results.len(), 6);
}

/// Rerun figures of the reference: p50, p90, p95, p99 (ms).
fn check_rerun(a: &AlgorithmReport, rerun: [f64; 4], abs: f64) {
    let got = [a.latency.p50, a.latency.p90, a.latency.p95, a.latency.p99];
    for ((name, g), r) in ["p50", "p90", "p95", "p99"].iter().zip(got).zip(rerun) {
        near(g, r, 10.0, abs, &format!("{} {name}", a.algorithm));
    }
}

/// Run a seed-004 configuration and check each algorithm's p50…p99 against
/// the reference rerun (within 10 %, or `abs` ms) and its p999 bounds.
fn seed_004(name: &str, abs: f64, expected: [(&str, [f64; 4], (f64, f64)); 3]) -> Report {
    let report = run(name, 1);
    for (algorithm, rerun, (lo, hi)) in expected {
        let a = result(&report, algorithm);
        check_rerun(a, rerun, abs);
        within(a.latency.p999, lo, hi, &format!("{algorithm} p999"));
    }
    report
}

#[test]
fn seed_004_1m() {
    let report = seed_004(
        "seed-004-1m.toml",
        0.0,
        [
            ("peak-ewma", [30.0, 46.0, 48.0, 50.0], (0.0, 80.0)),
            ("least-request", [30.0, 46.0, 48.0, 50.0], (1200.0, 1600.0)),
            ("round-robin", [32.0, 50.0, 1003.0, 1799.0], (1900.0, 2000.0)),
        ],
    );
    // Shares to the slow endpoint: PE ≈ 0 %, LL 0.3–0.4 %, RR 10 %.
    let share = |a: &str| result(&report, a).share_of(9) * 100.0;
    within(share("peak-ewma"), 0.0, 0.1, "peak-ewma % to the slow endpoint");
    within(share("least-request"), 0.25, 0.45, "least-request % to the slow endpoint");
    within(share("round-robin"), 9.99, 10.01, "round-robin % to the slow endpoint");
    assert_eq!(report.simulated_requests, 3_000_000);
}

#[test]
fn seed_004_50k() {
    // Round robin's p999 has no target; 988 ms was measured.
    seed_004(
        "seed-004-50k.toml",
        2.0,
        [
            ("peak-ewma", [5.0, 55.0, 78.0, 96.0], (0.0, 150.0)),
            ("least-request", [5.0, 57.0, 80.0, 98.0], (700.0, 950.0)),
            ("round-robin", [9.0, 98.0, 488.0, 902.0], (0.0, 1000.0)),
        ],
    );
}

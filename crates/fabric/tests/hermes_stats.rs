//! What Hermes does on the 4 × 4 × 8 symmetric fabric: where it
//! places flows, how often it judges a flow's path bad and moves the flow,
//! and how much data is in flight when it does: the counters the scheme
//! returns into the run's outcome (`Outcome::routing_stats`), in every
//! build; `--nocapture` prints them.
//!
//! Finding (docs/results/fabric-lb.md): with the experiment program's 40 µs
//! good-path threshold no path is ever good, so every flow is placed on a
//! gray path (fewest of the host's own flows), and the flows that move do so
//! because their path read bad (one-way delay ≥ 180 µs), with tens of
//! segments in flight on the old path. The new path delivers first; the
//! receiver's duplicate ACKs start a fast retransmit, and partial ACKs of
//! NewReno's recovery (as in ns-3) resend segments still on their way. The
//! late copies arrive stale and go unanswered (as in ns-3), so a move costs
//! one recovery: 0.5 % of the bytes resent in seed 1 at load 0.8, against
//! 0.01 % without rerouting. (When the receiver still answered stale
//! copies, their duplicate ACKs chained recoveries and over 3 % was
//! resent.)

use std::path::Path;

use fulcrum_fabric::lb::hermes::Stats;
use fulcrum_fabric::lb::SchemeStats;
use fulcrum_fabric::report::Report;
use fulcrum_fabric::{Outcome, Scenario};

/// Share of the completed flows' IP bytes sent more than once.
fn resent(o: &Outcome) -> f64 {
    let wire = |bytes: u64| bytes + bytes.div_ceil(1400).max(1) * 52;
    let done = || o.flows.iter().filter(|f| f.complete);
    let extra: u64 = done().map(|f| f.tx_bytes.saturating_sub(wire(f.bytes))).sum();
    extra as f64 / done().map(|f| wire(f.bytes)).sum::<u64>() as f64
}

fn run(extra: &[&str]) -> (Outcome, Stats) {
    let path = format!("{}/../../scenarios/fabric/lb-4x4x8-symmetric.toml", env!("CARGO_MANIFEST_DIR"));
    let sets: Vec<String> =
        ["end=\"60ms\"", "workload.launch_end=\"40ms\"", "workload.load=0.8", "routing.scheme=\"hermes\""]
            .iter()
            .chain(extra)
            .map(|s| s.to_string())
            .collect();
    let scenario = Scenario::load(Path::new(&path), &sets).unwrap();
    let out = fulcrum_fabric::run(&scenario, 1, None);
    let Some(SchemeStats::Hermes(stats)) = out.routing_stats.clone() else {
        panic!("a Hermes run returns its counters: {:?}", out.routing_stats)
    };
    eprintln!(
        "{extra:?}: avg {:.3} ms, small p99 {:.3} ms, resent {:.2} %\n{stats:?}",
        out.fct.avg,
        out.fct.small_p99,
        100.0 * resent(&out)
    );
    (out, stats)
}

#[test]
fn hermes_places_on_gray_paths_and_moves_off_bad_ones() {
    let (moving, s) = run(&[]);
    let placed: u64 = s.placed.iter().sum();
    assert!(placed > 200, "{s:?}");
    assert_eq!(s.placed[0], 0, "no path is ever good under the 40 µs threshold: {s:?}");
    assert_eq!(s.judged[0], 0, "{s:?}");
    assert!(s.judged[2] > 0, "some packets find their path bad: {s:?}");
    // Every path gets flows (no bias towards the first one).
    let (lo, hi) = (s.per_path.iter().min().unwrap(), s.per_path.iter().max().unwrap());
    assert!(*lo * 2 > *hi, "{s:?}");
    // Moves: only bad paths and pauses trigger them (failure is off), the
    // bad path far more often; each leaves segments in flight behind.
    assert_eq!(s.moved_failed, 0, "{s:?}");
    assert!(s.moved_bad > 10 * s.moved_idle.max(1), "{s:?}");
    assert!(s.in_flight_at_move > 10 * s.moved_bad, "{s:?}");
    // Without rerouting no flow moves (only a flow forgotten after 1 ms
    // without an ACK chooses afresh).
    let (staying, still) = run(&["routing.reroute_probability=0"]);
    assert_eq!(still.moved_bad + still.moved_idle + still.moved_failed, 0, "{still:?}");
    assert!(still.in_flight_at_move * 100 < s.in_flight_at_move, "{still:?}");
    // The moves cost retransmissions: ten times what the same flows resend
    // when they stay put.
    assert!(resent(&moving) > 10.0 * resent(&staying), "{} vs {}", resent(&moving), resent(&staying));
}

#[test]
fn other_schemes_count_nothing_and_the_report_carries_hermes_counters() {
    let path = format!("{}/../../scenarios/fabric/lb-4x4x8-symmetric.toml", env!("CARGO_MANIFEST_DIR"));
    let load = |scheme: &str| {
        let sets = ["end=\"10ms\"".to_string(), format!("routing.scheme=\"{scheme}\"")];
        (Scenario::load(Path::new(&path), &sets).unwrap(), sets)
    };
    let (ecmp, _) = load("ecmp");
    assert_eq!(fulcrum_fabric::run(&ecmp, 1, None).routing_stats, None);
    let (hermes, sets) = load("hermes");
    let outcomes = fulcrum_fabric::run_many(&hermes, 1, 2, 1, None).unwrap();
    let json = |outcomes: &[Outcome]| -> serde_json::Value {
        let report = Report { provenance: None, scenario: &hermes.name, sets: &sets, outcomes, wall_seconds: 0.0 };
        serde_json::from_str(&report.json()).unwrap()
    };
    let counters = |o: &Outcome| match &o.routing_stats {
        Some(SchemeStats::Hermes(s)) => s.clone(),
        other => panic!("{other:?}"),
    };
    let (a, b) = (counters(&outcomes[0]), counters(&outcomes[1]));
    assert!(a.placed.iter().sum::<u64>() > 0, "{a:?}");
    // One run: the counters as they are.
    let one = json(&outcomes[..1]);
    assert_eq!(one["routing_stats"]["hermes"]["restarted"], a.restarted, "{one}");
    assert_eq!(one["routing_stats"]["hermes"]["placed"][1], a.placed[1], "{one}");
    // Two runs: each counter's mean.
    let two = json(&outcomes);
    let mean = (a.placed[1] + b.placed[1]) as f64 / 2.0;
    assert_eq!(two["routing_stats"]["hermes"]["placed"][1].as_f64(), Some(mean), "{two}");
    let per_path = two["routing_stats"]["hermes"]["per_path"].as_array().unwrap();
    assert_eq!(per_path.len(), a.per_path.len());
    // ECMP's report has no such key.
    let ecmp_outcomes = fulcrum_fabric::run_many(&ecmp, 1, 1, 1, None).unwrap();
    let report =
        Report { provenance: None, scenario: &ecmp.name, sets: &[], outcomes: &ecmp_outcomes, wall_seconds: 0.0 };
    assert!(!report.json().contains("routing_stats"));
}

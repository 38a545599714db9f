//! The same scenario and seed give byte-identical output; another seed
//! gives another run.

use std::path::Path;

use fulcrum_fabric::report::Report;
use fulcrum_fabric::Scenario;

fn scenario() -> Scenario {
    let path = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../scenarios/fabric/large-scale-ecnsharp.toml"));
    // A short run keeps the test quick; it still has hundreds of flows.
    let sets = ["end=\"60ms\"".to_string(), "workload.launch_end=\"40ms\"".to_string()];
    Scenario::load(path, &sets).unwrap()
}

fn json(s: &Scenario, seed: u64, threads: usize) -> String {
    let outcomes = fulcrum_fabric::run_many(s, seed, 2, threads, None);
    let report = Report { scenario: &s.name, sets: &[], outcomes: &outcomes, wall_seconds: 0.0 };
    report.json()
}

#[test]
fn same_seed_same_bytes_whatever_the_threads() {
    let s = scenario();
    let a = json(&s, 7, 1);
    let b = json(&s, 7, 2);
    assert_eq!(a, b);
    let one = fulcrum_fabric::run(&s, 7, None);
    let again = fulcrum_fabric::run(&s, 7, None);
    assert_eq!(one.flows, again.flows, "per-flow records identical");
    assert!(one.flows.len() > 200, "{} flows", one.flows.len());
    assert_ne!(json(&s, 8, 1), a, "another seed, another run");
}

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
    let outcomes = fulcrum_fabric::run_many(s, seed, 2, threads, None).unwrap();
    let report = Report { provenance: None, scenario: &s.name, sets: &[], outcomes: &outcomes, wall_seconds: 0.0 };
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

#[test]
fn seeds_past_the_largest_are_an_error() {
    let s = scenario();
    let e = fulcrum_fabric::run_many(&s, u64::MAX, 2, 1, None).unwrap_err();
    assert_eq!((e.first, e.runs), (u64::MAX, 2));
    assert_eq!(fulcrum_fabric::run_many(&s, u64::MAX - 1, 0, 1, None).map(|o| o.len()), Ok(0));
}

#[test]
fn csv_has_a_row_per_flow() {
    let s = scenario();
    let outcomes = fulcrum_fabric::run_many(&s, 3, 1, 1, None).unwrap();
    let report = Report { provenance: None, scenario: &s.name, sets: &[], outcomes: &outcomes, wall_seconds: 0.0 };
    let dir = std::env::temp_dir().join(format!("fulcrum-fabric-csv-{}", std::process::id()));
    report.write_csv(&dir).unwrap();
    let flows = std::fs::read_to_string(dir.join("flows.csv")).unwrap();
    let queues = std::fs::read_to_string(dir.join("queues.csv")).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(flows.lines().count(), outcomes[0].flows.len() + 1);
    assert!(flows.starts_with("seed,flow,src,dst,bytes,"));
    assert_eq!(queues.lines().count(), outcomes[0].queues.len() + 1);
    let svg = report.plot_svg();
    assert!(svg.starts_with("<svg") && svg.contains("10K-100K B") && svg.contains("<polyline"), "{svg}");
}

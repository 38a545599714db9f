//! The outside fabric scheme gives the built-in's report byte for byte on
//! a shipped scenario, and a bad key in its table is named.

use std::path::{Path, PathBuf};

use fulcrum_fabric::report::Report;
use fulcrum_fabric::Scenario;

fn scenario(scheme: &str, extra: &[&str]) -> Result<Scenario, String> {
    fulcrum_extend_example::register();
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/fabric/lb-4x4x8-symmetric.toml");
    let mut sets = vec!["end=\"30ms\"".to_string(), "workload.launch_end=\"20ms\"".to_string()];
    sets.push(format!("routing.scheme=\"{scheme}\""));
    sets.extend(extra.iter().map(|s| s.to_string()));
    Scenario::load(Path::new(&path), &sets).map_err(|e| e.to_string())
}

/// The JSON report of a run with `scheme` (the `--set`s left out).
fn run(scheme: &str) -> String {
    let s = scenario(scheme, &[]).unwrap();
    assert_eq!(s.routing().name(), scheme);
    let outcomes = fulcrum_fabric::run_many(&s, s.seed, 1, 1, None).unwrap();
    assert!(outcomes[0].data_packets > 10_000, "{} data packets", outcomes[0].data_packets);
    Report { scenario: &s.name, sets: &[], outcomes: &outcomes, wall_seconds: 0.0, provenance: None }.json()
}

#[test]
fn hashed_paths_gives_ecmps_report_byte_for_byte() {
    assert_eq!(run("hashed-paths"), run("ecmp"));
}

#[test]
fn a_bad_key_is_named_with_its_scheme() {
    let err = scenario("hashed-paths", &["routing.flowcell=3"]).unwrap_err();
    assert!(err.contains("routing.flowcell: hashed-paths: unknown field `flowcell`"), "{err}");
}

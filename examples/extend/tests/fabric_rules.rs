//! The outside queue discipline and congestion control give the built-ins'
//! reports byte for byte on shipped scenarios, and bad keys are named.

use std::path::{Path, PathBuf};

use fulcrum_fabric::report::Report;
use fulcrum_fabric::Scenario;

fn scenario(file: &str, sets: &[&str]) -> Result<Scenario, String> {
    fulcrum_extend_example::register();
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/fabric").join(file);
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    Scenario::load(Path::new(&path), &sets).map_err(|e| e.to_string())
}

/// The JSON report of a run (the `--set`s left out) and its marks.
fn run(file: &str, sets: &[&str]) -> (String, u64) {
    let s = scenario(file, sets).unwrap();
    let outcomes = fulcrum_fabric::run_many(&s, s.seed, 1, 1, None).unwrap();
    assert!(outcomes[0].data_packets > 1_000, "{} data packets", outcomes[0].data_packets);
    let marks = outcomes[0].queues.iter().map(|q| q.marks).sum();
    (Report { scenario: &s.name, sets: &[], outcomes: &outcomes, wall_seconds: 0.0, provenance: None }.json(), marks)
}

#[test]
fn queue_threshold_gives_reds_report_byte_for_byte() {
    let short = ["end=\"300ms\"", "workload.launch_end=\"250ms\""];
    let ours = [&short[..], &["aqm={kind=\"queue-threshold\", k=40}"]].concat();
    let theirs = [&short[..], &["aqm={kind=\"red\", k=40}"]].concat();
    assert_eq!(scenario("queue-track-red.toml", &ours).unwrap().aqm.name(), "queue-threshold");
    let (ours, marks) = run("queue-track-red.toml", &ours);
    assert!(marks > 100, "{marks} marks: the rule is exercised");
    assert_eq!(ours, run("queue-track-red.toml", &theirs).0);
    // Another threshold marks differently: the comparison can fail.
    let lower = [&short[..], &["aqm={kind=\"red\", k=20}"]].concat();
    assert_ne!(ours, run("queue-track-red.toml", &lower).0);
}

#[test]
fn ecn_fraction_gives_dctcps_report_byte_for_byte() {
    let short = ["end=\"30ms\"", "workload.launch_end=\"20ms\""];
    let ours = [&short[..], &["tcp.congestion={kind=\"ecn-fraction\", g=0.0625}"]].concat();
    assert_eq!(scenario("lb-4x4x8-symmetric.toml", &ours).unwrap().congestion.name(), "ecn-fraction");
    let (ours, marks) = run("lb-4x4x8-symmetric.toml", &ours);
    assert!(marks > 100, "{marks} marks: the windows are cut");
    assert_eq!(ours, run("lb-4x4x8-symmetric.toml", &short).0);
    // NewReno reacts to the same marks differently: the comparison can fail.
    let newreno = [&short[..], &["tcp.congestion={kind=\"new-reno\"}"]].concat();
    assert_ne!(ours, run("lb-4x4x8-symmetric.toml", &newreno).0);
}

#[test]
fn bad_keys_are_named_with_their_rule() {
    let err = scenario("queue-track-red.toml", &["aqm={kind=\"queue-threshold\", k=0}"]).unwrap_err();
    assert!(err.contains("aqm.k: must be above 0 (found 0)"), "{err}");
    let err = scenario("lb-4x4x8-symmetric.toml", &["tcp.congestion={kind=\"ecn-fraction\", gain=1}"]).unwrap_err();
    assert!(err.contains("tcp.congestion.gain: ecn-fraction: unknown field `gain`"), "{err}");
}

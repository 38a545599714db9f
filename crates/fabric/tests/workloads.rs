//! The permutation, flow-list and incast workloads run end to end:
//! `scenarios/fabric/permutation.toml` and `flow-list.toml`, and the example
//! with its own CDF, `examples/fabric/own-cdf.toml`.

use std::path::Path;

use fulcrum_fabric::Scenario;

fn load(file: &str, sets: &[&str]) -> Result<Scenario, String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/fabric").join(file);
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    Scenario::load(&path, &sets).map_err(|e| e.to_string())
}

#[test]
fn a_flow_list_and_incast_bursts_run_to_completion() {
    let s = load("flow-list.toml", &[]).unwrap();
    let o = fulcrum_fabric::run(&s, 1, None);
    // Five listed flows, then 5 bursts of 3 senders.
    assert_eq!(o.flows.len(), 5 + 15);
    let listed: Vec<(u32, u32, u64, u64)> = o.flows[..5].iter().map(|f| (f.src, f.dst, f.bytes, f.start_ns)).collect();
    assert_eq!(
        listed,
        [
            (0, 3, 20_000_000, 0),
            (1, 3, 20_000_000, 1_000_000),
            (2, 3, 30_000, 2_000_000),
            (3, 0, 30_000, 2_500_000),
            (2, 3, 100_000, 3_000_000)
        ]
    );
    let bursts: Vec<u64> = o.flows[5..].iter().map(|f| f.start_ns).collect();
    assert_eq!(bursts[..4], [5_000_000, 5_000_000, 5_000_000, 10_000_000]);
    assert!(o.flows.iter().all(|f| f.complete), "everything finishes in 50 ms");
    // The two large transfers share host 3's link: the queue toward it builds.
    assert!(o.queues.iter().any(|q| q.port == "switch 0 -> host 3" && q.max_packets > 20));
}

#[test]
fn flow_list_errors_name_the_csv_line_and_column() {
    let dir = std::env::temp_dir().join(format!("fulcrum-flowlist-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let csv = dir.join("bad.csv");
    std::fs::write(&csv, "start,src,dst,bytes\n0,0,3,1000\n1ms,0,7,1000\n").unwrap();
    let set = format!("workload.file=\"{}\"", csv.display());
    let err = load("flow-list.toml", &[&set]).unwrap_err();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(err.ends_with("bad.csv:3:7: dst: there is no host 7 (hosts are 0 to 3)"), "{err}");
    let err = load("flow-list.toml", &["workload.file=\"missing.csv\""]).unwrap_err();
    assert!(
        err.starts_with("--set workload.file=\"missing.csv\": workload.file: ") && err.contains("missing.csv"),
        "{err}"
    );
}

#[test]
fn a_permutation_pairs_every_host_and_samples_every_flow() {
    let s = load("permutation.toml", &["end=\"30ms\""]).unwrap();
    let o = fulcrum_fabric::run(&s, 1, None);
    assert_eq!(o.flows.len(), 32);
    let mut dsts: Vec<u32> = o.flows.iter().map(|f| f.dst).collect();
    assert!(o.flows.iter().all(|f| f.src != f.dst));
    dsts.sort_unstable();
    assert_eq!(dsts, (0..32).collect::<Vec<_>>());
    // Samples at 0, 10, 20 and 30 ms, one figure per host.
    assert_eq!(o.throughput.len(), 4);
    assert!(o.throughput.iter().all(|(_, g)| g.len() == 32));
    let total: f64 = o.throughput[3].1.iter().sum();
    // 16 uplinks of 10 Gb/s carry the cross-rack flows; nothing beats the
    // hosts' 32 × 10 Gb/s.
    assert!(total > 50.0 && total < 320.0, "{total} Gb/s");
    let fixed = load("permutation.toml", &["end=\"30ms\"", "workload.bytes=100000"]).unwrap();
    let o = fulcrum_fabric::run(&fixed, 1, None);
    assert!(o.throughput.is_empty() && o.flows.iter().all(|f| f.complete && f.bytes == 100_000));
    assert!(load("permutation.toml", &["workload.bytes=0"]).unwrap_err().contains("workload.bytes"));
}

#[test]
fn the_example_with_its_own_cdf_runs() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/fabric/own-cdf.toml");
    let s = Scenario::load(&path, &[]).unwrap_or_else(|e| panic!("{e}"));
    let o = fulcrum_fabric::run(&s, 1, None);
    assert!(o.flows.len() > 10_000, "{} flows", o.flows.len());
    assert!(o.flows.iter().all(|f| (1..=1_000_000).contains(&f.bytes)), "sizes come from my-sizes.cdf");
    let at_most_4k = o.flows.iter().filter(|f| f.bytes <= 4000).count() as f64 / o.flows.len() as f64;
    assert!((at_most_4k - 0.70).abs() < 0.02, "my-sizes.cdf puts 70 % at or below 4000 bytes: {at_most_4k}");
    assert!(o.flows.iter().all(|f| f.complete), "every flow finishes within the run");
}

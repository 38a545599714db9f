//! The seed's mq experiment (scenarios/fabric/mq-*.toml): DWRR 2:1:1 over
//! three TCN or ECN# class queues, long flows joining at 0, 100 and 200 ms,
//! 100 short flows of 28 KB.
//!
//! What holds, asserted here:
//! - With the senders' NIC queues as the original sizes them (600 packets),
//!   ECN#'s small-flow average FCT is below TCN's.
//! - With unlimited sender NIC queues (no slow-start losses at the
//!   senders), ECN# splits the line by the quanta in both shared phases and
//!   both its small-flow average and p99 are below TCN's.
//!
//! What does not (docs/fabric.md, "Reproduction: the mq experiment", has
//! the figures): with 600-packet NIC
//! queues a long flow's slow start overflows its NIC and NewReno recovery
//! of the burst of losses leaves it near zero for tens of milliseconds, so
//! neither shared phase splits by the quanta under either discipline for
//! this seed.

use std::path::Path;

use fulcrum_fabric::{Outcome, Scenario};

fn run(name: &str, sets: &[&str]) -> Outcome {
    let path = format!("{}/../../scenarios/fabric/{name}.toml", env!("CARGO_MANIFEST_DIR"));
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    let s = Scenario::load(Path::new(&path), &sets).unwrap();
    fulcrum_fabric::run(&s, s.seed, None)
}

/// Mean Gb/s of each long flow over the samples taken in (from, to]
/// seconds, leaving out the phase's first sample.
fn phase_means(o: &Outcome, from: f64, to: f64) -> Vec<f64> {
    let samples: Vec<&Vec<f64>> = o
        .throughput
        .iter()
        .filter(|(t, _)| {
            let t = *t as f64 / 1e9;
            t > from + 0.020 + 1e-9 && t <= to + 1e-9
        })
        .map(|(_, g)| g)
        .collect();
    assert!(!samples.is_empty());
    (0..3).map(|f| samples.iter().map(|g| g[f]).sum::<f64>() / samples.len() as f64).collect()
}

/// Each mean within 5 % of its share of the line's goodput.
fn splits(means: &[f64], shares: &[f64]) -> bool {
    means.iter().zip(shares).all(|(m, s)| (m - s).abs() <= 0.05 * s)
}

const TWO: [f64; 3] = [6.4, 3.2, 0.0];
const THREE: [f64; 3] = [4.8, 2.4, 2.4];

#[test]
fn with_the_original_nic_queues() {
    let tcn = run("mq-tcn", &[]);
    let sharp = run("mq-ecnsharp", &[]);
    assert_eq!(tcn.throughput.len(), 21, "a sample every 20 ms from 0 to 400 ms");
    assert!(sharp.fct.small_avg < tcn.fct.small_avg, "{:?} vs {:?}", sharp.fct, tcn.fct);
}

#[test]
fn with_unlimited_nic_queues() {
    let unlimited = ["buffers.host_packets=100000000"];
    let tcn = run("mq-tcn", &unlimited);
    let sharp = run("mq-ecnsharp", &unlimited);
    assert!(sharp.fct.small_avg < tcn.fct.small_avg, "{:?} vs {:?}", sharp.fct, tcn.fct);
    assert!(sharp.fct.small_p99 < tcn.fct.small_p99, "{:?} vs {:?}", sharp.fct, tcn.fct);
    let two = phase_means(&sharp, 0.1, 0.2);
    assert!(splits(&two[..2], &TWO[..2]) && two[2] == 0.0, "{two:?}");
    let three = phase_means(&sharp, 0.2, 0.4);
    assert!(splits(&three, &THREE), "{three:?}");
}

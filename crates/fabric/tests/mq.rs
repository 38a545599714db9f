//! The seed's mq experiment (scenarios/fabric/mq-*.toml): DWRR 2:1:1 over
//! three TCN or ECN# class queues, long flows joining at 0, 100 and 200 ms,
//! 100 short flows of 28 KB.
//!
//! With the senders' NIC queues as the original sizes them (600 packets),
//! over seeds 1–6, compared with ns-3's own seeds 1–6 of the same program:
//! - ECN#'s long flows split the line by the quanta (±5 %) in both shared
//!   phases in every seed, as ns-3's do; TCN's split it in the three-flow
//!   phase in every seed;
//! - ECN#'s small flows finish sooner than TCN's (6-seed means of the
//!   average and of the p99);
//! - each AQM's 6-seed mean small-flow average is within 15 % of ns-3's,
//!   and its mean p99 within 25 %.
//!
//! TCN's two-flow phase is not asserted to split 2:1, because ns-3's own
//! does not reliably do so: it splits in 2 of seeds 1–6 (in the others one
//! flow's overflow → recovery → timeout cycle goes on to the phase's end,
//! and where it stops depends on the short flows sharing the bottleneck).
//! The test prints in how many seeds Fulcrum's splits and asserts only
//! that, as in ns-3, not all do. (Before the receiver dropped stale
//! segments unanswered, as ns-3's does, Fulcrum's split in all six and its
//! TCN small-flow p99 was a third below ns-3's.)
//!
//! With unlimited sender NIC queues (seed 1), ECN# splits the line by the
//! quanta in both shared phases and both its small-flow average and p99 are
//! below TCN's. What does not hold there: TCN's two-flow phase does not split
//! 2:1 (the lone flow's window grows unmarked in its own NIC queue and the
//! second flow's arrival overflows the class queue).

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

/// Within `tolerance` (a fraction) of the ns-3 figure.
fn near(ours: f64, ns3: f64, tolerance: f64) -> bool {
    (ours - ns3).abs() <= tolerance * ns3
}

/// ns-3's mq program over seeds 1–6: the means over the six seeds of the
/// small-flow average and of the small-flow p99 (ms), (TCN, ECN#). Made
/// with the program of `bench/ns3/mq-trace.patch` (built as
/// `bench/ns3/build` does), for S in 1..=6 and A in TCN, ECNSharp:
/// `mq-trace0 --AQM=A --id=sS --randomSeed=S --endTime=0.4`, then
/// `bench/ns3/compare summary MQ_A_sS_Flow_Monitor.xml`. Per seed: TCN
/// 1.916/3.03, 1.843/6.22, 2.031/5.91, 1.971/4.87, 1.869/5.27, 1.762/7.18;
/// ECN# 1.304/1.69, 1.337/1.99, 1.339/2.26, 1.344/1.79, 1.317/1.80,
/// 1.292/1.56.
const NS3_TCN: (f64, f64) = (1.899, 5.41);
const NS3_ECNSHARP: (f64, f64) = (1.322, 1.85);
const SEEDS: usize = 6;

/// Seeds 1..=SEEDS of scenario `name`.
fn seeds(name: &str) -> Vec<Outcome> {
    let path = format!("{}/../../scenarios/fabric/{name}.toml", env!("CARGO_MANIFEST_DIR"));
    let s = Scenario::load(Path::new(&path), &[]).unwrap();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    fulcrum_fabric::run_many(&s, 1, SEEDS, threads, None).unwrap()
}

/// The means over the outcomes of the small-flow average and p99.
fn small_means(outcomes: &[Outcome]) -> (f64, f64) {
    let n = outcomes.len() as f64;
    (
        outcomes.iter().map(|o| o.fct.small_avg).sum::<f64>() / n,
        outcomes.iter().map(|o| o.fct.small_p99).sum::<f64>() / n,
    )
}

/// Whether the two-flow phase splits the line 2:1 (flows 0 and 1).
fn two_flow_split(o: &Outcome) -> bool {
    let two = phase_means(o, 0.1, 0.2);
    splits(&two[..2], &TWO[..2]) && two[2] == 0.0
}

#[test]
fn with_the_original_nic_queues_over_six_seeds() {
    let tcn = seeds("mq-tcn");
    let sharp = seeds("mq-ecnsharp");
    for (seed, o) in tcn.iter().chain(&sharp).enumerate() {
        let seed = seed % SEEDS + 1;
        assert_eq!(o.throughput.len(), 21, "a sample every 20 ms from 0 to 400 ms");
        let three = phase_means(o, 0.2, 0.4);
        assert!(splits(&three, &THREE), "seed {seed}: three-flow phase {three:?}");
    }
    for (seed, o) in sharp.iter().enumerate() {
        let two = phase_means(o, 0.1, 0.2);
        assert!(two_flow_split(o), "ECN# seed {}: two-flow phase {two:?}", seed + 1);
    }
    let tcn_splits = tcn.iter().filter(|o| two_flow_split(o)).count();
    eprintln!("TCN's two-flow phase splits 2:1 in {tcn_splits} of {SEEDS} seeds (ns-3: 2 of 6)");
    for (seed, o) in tcn.iter().enumerate() {
        eprintln!("TCN seed {}: two-flow phase {:?}, FCT {:?}", seed + 1, phase_means(o, 0.1, 0.2), o.fct);
    }
    assert!(tcn_splits < SEEDS, "as in ns-3, TCN's two-flow phase does not split 2:1 in every seed");
    let (tcn_avg, tcn_p99) = small_means(&tcn);
    let (sharp_avg, sharp_p99) = small_means(&sharp);
    eprintln!("small-flow avg / p99 over {SEEDS} seeds: TCN {tcn_avg:.3} / {tcn_p99:.2} (ns-3 {NS3_TCN:?}), ECN# {sharp_avg:.3} / {sharp_p99:.2} (ns-3 {NS3_ECNSHARP:?})");
    assert!(sharp_avg < tcn_avg && sharp_p99 < tcn_p99, "ECN# {sharp_avg} / {sharp_p99} vs TCN {tcn_avg} / {tcn_p99}");
    for (name, (avg, p99), (ns3_avg, ns3_p99)) in
        [("TCN", (tcn_avg, tcn_p99), NS3_TCN), ("ECN#", (sharp_avg, sharp_p99), NS3_ECNSHARP)]
    {
        assert!(near(avg, ns3_avg, 0.15), "{name}: small avg {avg} vs ns-3 {ns3_avg}");
        assert!(near(p99, ns3_p99, 0.25), "{name}: small p99 {p99} vs ns-3 {ns3_p99}");
    }
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

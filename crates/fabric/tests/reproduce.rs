//! Reproduction of the seed's large-scale experiment (ECN# against TCN with
//! a 70 µs and a 30 µs threshold) over five seeds, against the ns-3 model's
//! own mean over five seeds (ns3-ecn-sharp at commit a917e53, seeds 1–4
//! and 233; avg / large avg / small avg / small p99 FCT in ms):
//!
//! | AQM       | avg    | large avg | small avg | small p99 |
//! |-----------|--------|-----------|-----------|-----------|
//! | ECN#      | 10.139 | 83.26     | 1.744     | 10.07     |
//! | TCN 70 µs | 10.822 | 86.49     | 1.995     | 10.53     |
//! | TCN 30 µs |  9.951 | 79.06     | 1.540     | 10.31     |
//!
//! `orderings_and_magnitudes_hold_over_five_seeds` checks what the ns-3
//! model shows on average: ECN#'s small flows finish sooner than TCN-high's,
//! and TCN-high has the highest average FCT of the three. It also checks all
//! four figures against the table, within the bounds issue #14 sets: the
//! average and the small-flow average within ±15 %, the large-flow average
//! and the small-flow p99 within ±25 %. (The large-flow average was met
//! once the receiver stopped answering segments after its FIN, as ns-3's
//! does: the timeout chains this causes at the end of flows are what made
//! ns-3's large flows slower; `bench/ns3/` runs the original to compare.)

use std::path::Path;

use fulcrum_fabric::report::Report;
use fulcrum_fabric::{FctSummary, Scenario};

const SEEDS: usize = 5;

fn mean_of(name: &str) -> FctSummary {
    let path = format!("{}/../../scenarios/fabric/{name}.toml", env!("CARGO_MANIFEST_DIR"));
    let scenario = Scenario::load(Path::new(&path), &[]).unwrap();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let outcomes = fulcrum_fabric::run_many(&scenario, 1, SEEDS, threads, None);
    let report = Report { scenario: &scenario.name, sets: &[], outcomes: &outcomes, wall_seconds: 0.0 };
    let (mean, _) = report.fct();
    eprintln!("{name}: {mean:?}");
    mean
}

/// ns-3's 5-seed means (ms): average, large-flow average, small-flow
/// average and p99.
const NS3: [(&str, f64, f64, f64, f64); 3] = [
    ("large-scale-ecnsharp", 10.139, 83.26, 1.744, 10.07),
    ("large-scale-tcn-high", 10.822, 86.49, 1.995, 10.53),
    ("large-scale-tcn-low", 9.951, 79.06, 1.540, 10.31),
];

/// Within `tolerance` (a fraction) of the ns-3 figure.
fn near(ours: f64, ns3: f64, tolerance: f64) -> bool {
    (ours - ns3).abs() <= tolerance * ns3
}

#[test]
fn orderings_and_magnitudes_hold_over_five_seeds() {
    let ecn_sharp = mean_of("large-scale-ecnsharp");
    let tcn_high = mean_of("large-scale-tcn-high");
    let tcn_low = mean_of("large-scale-tcn-low");
    for ((name, avg, large, small, p99), ours) in NS3.iter().zip([&ecn_sharp, &tcn_high, &tcn_low]) {
        assert!(near(ours.avg, *avg, 0.15), "{name}: avg {ours:?} vs ns-3 {avg}");
        assert!(near(ours.large_avg, *large, 0.25), "{name}: large avg {ours:?} vs ns-3 {large}");
        assert!(near(ours.small_avg, *small, 0.15), "{name}: small avg {ours:?} vs ns-3 {small}");
        assert!(near(ours.small_p99, *p99, 0.25), "{name}: small p99 {ours:?} vs ns-3 {p99}");
    }
    assert!(ecn_sharp.small_avg < tcn_high.small_avg, "ECN# small {ecn_sharp:?} vs TCN-high {tcn_high:?}");
    assert!(tcn_high.avg > ecn_sharp.avg && tcn_high.avg > tcn_low.avg, "{ecn_sharp:?} {tcn_high:?} {tcn_low:?}");
}

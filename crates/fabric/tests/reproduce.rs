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
//! `orderings_and_small_flow_magnitudes_hold_over_five_seeds` checks what the ns-3 model shows on
//! average: ECN#'s small flows finish sooner than TCN-high's, and TCN-high
//! has the highest average FCT of the three. It also checks the small-flow
//! magnitudes against the table, within the bounds issue #14 sets: the
//! small-flow average within ±15 % and the small-flow p99 within ±25 %.
//! The average and the large-flow average are not met yet — large flows
//! finish about 30 % sooner than in ns-3, which pulls the average 20–25 %
//! below — so they are not asserted here; the figures are compared in the
//! documentation (fabric simulator, reproduction table).

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

/// ns-3's 5-seed means: small-flow average and p99 (ms).
const NS3_SMALL: [(&str, f64, f64); 3] = [
    ("large-scale-ecnsharp", 1.744, 10.07),
    ("large-scale-tcn-high", 1.995, 10.53),
    ("large-scale-tcn-low", 1.540, 10.31),
];

#[test]
fn orderings_and_small_flow_magnitudes_hold_over_five_seeds() {
    let ecn_sharp = mean_of("large-scale-ecnsharp");
    let tcn_high = mean_of("large-scale-tcn-high");
    let tcn_low = mean_of("large-scale-tcn-low");
    for ((name, avg, p99), ours) in NS3_SMALL.iter().zip([&ecn_sharp, &tcn_high, &tcn_low]) {
        assert!((ours.small_avg - avg).abs() <= 0.15 * avg, "{name}: small avg {ours:?} vs ns-3 {avg}");
        assert!((ours.small_p99 - p99).abs() <= 0.25 * p99, "{name}: small p99 {ours:?} vs ns-3 {p99}");
    }
    assert!(ecn_sharp.small_avg < tcn_high.small_avg, "ECN# small {ecn_sharp:?} vs TCN-high {tcn_high:?}");
    assert!(tcn_high.avg > ecn_sharp.avg && tcn_high.avg > tcn_low.avg, "{ecn_sharp:?} {tcn_high:?} {tcn_low:?}");
}

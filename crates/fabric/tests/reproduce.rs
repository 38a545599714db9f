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
//! `orderings_hold_over_five_seeds` checks what the ns-3 model shows on
//! average: ECN#'s small flows finish sooner than TCN-high's, and TCN-high
//! has the highest average FCT of the three. The magnitudes (issue #14
//! asks for ±15 % on the averages, ±25 % on large-flow average and
//! small-flow p99) are not met yet — Fulcrum's flows finish 22–30 % sooner
//! than ns-3's — so they are not asserted here; the figures are compared in
//! the documentation (fabric simulator, reproduction table).

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

#[test]
fn orderings_hold_over_five_seeds() {
    let ecn_sharp = mean_of("large-scale-ecnsharp");
    let tcn_high = mean_of("large-scale-tcn-high");
    let tcn_low = mean_of("large-scale-tcn-low");
    assert!(ecn_sharp.small_avg < tcn_high.small_avg, "ECN# small {ecn_sharp:?} vs TCN-high {tcn_high:?}");
    assert!(tcn_high.avg > ecn_sharp.avg && tcn_high.avg > tcn_low.avg, "{ecn_sharp:?} {tcn_high:?} {tcn_low:?}");
}

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
//! These are flow-monitor figures, as the original's parser
//! (`fct_parser.py`) computes them: a flow's FCT runs from its first packet
//! sent to the last packet of its forward direction received (any copy,
//! late resends and the close included), a flow unfinished at the end
//! counts with the FCT it has then, and small and large go by the IP bytes
//! a flow sent. Every comparison here is in that convention on both sides
//! (Fulcrum's `Convention::Parser`; its default, `Convention::Monitor`,
//! differs only by the parser's filters, by at most 0.007 ms on these
//! runs), and each test prints Fulcrum's figures by the receiver's last new
//! byte (`Convention::LastByte`: unfinished flows left out, classes by the
//! bytes sent once) beside them. `each_aqm_on_ns3s_runs_of_the_same_lists`
//! also holds those within the same bounds of ns-3's runs measured the
//! same way (`NS3_RUNS_LAST_BYTE`): by the last new byte, TCN 30 µs's
//! small-flow average on lists 1–8 is 1.351 ms against ns-3's 1.395
//! (−3.2 %; by the flow monitor 1.795 against 1.650, +8.8 %, mostly three
//! small flows unfinished in Fulcrum and counted at the end).
//!
//! `orderings_and_magnitudes_hold_over_five_seeds` checks what the ns-3
//! model shows on average: ECN#'s small flows finish sooner than TCN-high's,
//! and TCN-high has the highest average FCT of the three. It also checks the
//! figures against the table, within the project's reproduction bounds: the
//! average and the small-flow average within ±15 %, the large-flow average
//! and the small-flow p99 within ±25 %. (The large-flow average was met
//! once the receiver stopped answering segments after its FIN, as ns-3's
//! does: the timeout chains this causes at the end of flows are what made
//! ns-3's large flows slower; `bench/ns3/` runs the original to compare.)
//!
//! Two of the twelve are not asserted there, only printed: the TCN
//! small-flow averages, 2.607 ms (TCN 70 µs, +30.7 % against ns-3's 1.995)
//! and 1.904 ms (TCN 30 µs, +23.7 % against 1.540) over seeds 1–5. ns-3's
//! means are over the flows its program drew for seeds 1–4 and 233;
//! Fulcrum's over other random flows. Each seed's small-flow average is set
//! by a few small flows that stall for tens to hundreds of ms, so it
//! spreads widely from one set of flows to the next (sd 0.3–0.5 ms over 30
//! seeds), and ns-3's five lists happen to be mild ones: TCN 30 µs gives
//! 1.79–1.81 ms on average over Fulcrum's own seeds 1–30 and over ns-3's
//! lists of seeds 1–30 alike (the two flow generators are equivalent), but
//! 1.61 on ns-3's five reference lists; TCN 70 µs 2.22–2.30 against 1.99. So
//! `every_figure_holds_on_ns3s_own_flows` runs those five lists
//! (`tests/data/`, their README says how they were made) and holds all
//! twelve figures and both orderings to the same bounds, on the same flows
//! as ns-3's reference. `each_aqm_on_ns3s_runs_of_the_same_lists` does the
//! same against ns-3's own runs of its lists (TCN 30 µs on seeds 1–8, the
//! others on 1–4): TCN 30 µs's small-flow average is 8.8 % above ns-3's
//! there, within the bound, and ns-3's own eight runs average 1.650 ms,
//! above its 5-seed 1.540. (Before transmission times were rounded down as
//! ns-3's are, seeds 1–5 gave 2.034 and 1.794 ms: the rounding moves single
//! seeds by up to 1.6 ms either way and no 30-seed mean significantly.)
//!
//! By the receiver's last new byte on both sides (`NS3_LAST_BYTE`: ns-3's
//! runs of its five reference seeds measured so), where a small flow
//! stalled at the end of the run no longer counts, both the five-seed test
//! and the five-lists test hold all twelve figures within the same bounds
//! (TCN 70 µs's small-flow average over seeds 1–5: 1.579 ms against 1.514,
//! TCN 30 µs's 1.319 against 1.314); that is asserted beside the
//! flow-monitor comparison, not instead of it.

use std::path::Path;

use fulcrum_fabric::metrics::summarise;
use fulcrum_fabric::report::Report;
use fulcrum_fabric::{Convention, FctSummary, Outcome, Scenario};

const SEEDS: usize = 5;

/// The mean figures of `outcomes` in ns-3's published convention (the
/// flow monitor's FCT through the original's parser) and by the
/// receiver's last new byte, each the mean of the runs' summaries as the
/// report computes it.
fn both_conventions(name: &str, outcomes: &[Outcome]) -> (FctSummary, FctSummary) {
    let mean_as = |convention| {
        let recounted: Vec<Outcome> = outcomes
            .iter()
            .map(|o| Outcome { fct: summarise(&o.flows, &o.stranded, convention), ..o.clone() })
            .collect();
        Report { provenance: None, scenario: name, sets: &[], outcomes: &recounted, wall_seconds: 0.0 }.fct().0
    };
    (mean_as(Convention::Parser), mean_as(Convention::LastByte))
}

/// Average / large / small / p99, ms.
fn show(f: &FctSummary) -> String {
    format!("{:.3} / {:.2} / {:.3} / {:.2}", f.avg, f.large_avg, f.small_avg, f.small_p99)
}

/// Fulcrum's seeds 1–5 of `name`: the means in both conventions.
fn mean_of(name: &str) -> (FctSummary, FctSummary) {
    let path = format!("{}/../../scenarios/fabric/{name}.toml", env!("CARGO_MANIFEST_DIR"));
    let scenario = Scenario::load(Path::new(&path), &[]).unwrap();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let outcomes = fulcrum_fabric::run_many(&scenario, 1, SEEDS, threads, None).unwrap();
    let (monitor, last_byte) = both_conventions(name, &outcomes);
    eprintln!("{name}, seeds 1-5: flow monitor {}; last new byte {}", show(&monitor), show(&last_byte));
    (monitor, last_byte)
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

/// The bounds on one AQM's means: average and small-flow average
/// within ±15 % of ns-3's, large-flow average and small-flow p99 within
/// ±25 %.
fn assert_within_bounds(name: &str, ours: &FctSummary, (avg, large, small, p99): (f64, f64, f64, f64)) {
    assert!(near(ours.avg, avg, 0.15), "{name}: avg {ours:?} vs ns-3 {avg}");
    assert!(near(ours.large_avg, large, 0.25), "{name}: large avg {ours:?} vs ns-3 {large}");
    assert!(near(ours.small_avg, small, 0.15), "{name}: small avg {ours:?} vs ns-3 {small}");
    assert!(near(ours.small_p99, p99, 0.25), "{name}: small p99 {ours:?} vs ns-3 {p99}");
}

/// The orderings ns-3's model shows on average: ECN#'s small flows faster
/// than TCN 70 µs's, and TCN 70 µs's average FCT the highest of the three.
fn assert_orderings(ecn_sharp: &FctSummary, tcn_high: &FctSummary, tcn_low: &FctSummary) {
    assert!(ecn_sharp.small_avg < tcn_high.small_avg, "ECN# small {ecn_sharp:?} vs TCN-high {tcn_high:?}");
    assert!(tcn_high.avg > ecn_sharp.avg && tcn_high.avg > tcn_low.avg, "{ecn_sharp:?} {tcn_high:?} {tcn_low:?}");
}

#[test]
fn orderings_and_magnitudes_hold_over_five_seeds() {
    let both: Vec<(FctSummary, FctSummary)> = NS3.iter().map(|(name, ..)| mean_of(name)).collect();
    let [(ecn_sharp, _), (tcn_high, _), (tcn_low, _)] = [both[0], both[1], both[2]];
    for ((name, avg, large, small, p99), (ours, _)) in NS3.iter().zip(&both) {
        assert!(near(ours.avg, *avg, 0.15), "{name}: avg {ours:?} vs ns-3 {avg}");
        assert!(near(ours.large_avg, *large, 0.25), "{name}: large avg {ours:?} vs ns-3 {large}");
        // TCN's are compared on ns-3's own flows (the module doc).
        if *name == "large-scale-ecnsharp" {
            assert!(near(ours.small_avg, *small, 0.15), "{name}: small avg {ours:?} vs ns-3 {small}");
        }
        eprintln!(
            "{name}: small avg {:.3} vs ns-3 {small} ({:+.1} %)",
            ours.small_avg,
            100.0 * (ours.small_avg / small - 1.0)
        );
        assert!(near(ours.small_p99, *p99, 0.25), "{name}: small p99 {ours:?} vs ns-3 {p99}");
    }
    assert_orderings(&ecn_sharp, &tcn_high, &tcn_low);
    // By the receiver's last new byte on both sides, where a stalled flow
    // no longer counts at the end of the run, all twelve hold.
    for ((name, avg, large, small, p99), (_, last_byte)) in NS3_LAST_BYTE.iter().zip(&both) {
        assert_within_bounds(name, last_byte, (*avg, *large, *small, *p99));
    }
}

/// ns-3's 5-seed means by the receiver's last new byte (ms), in `NS3`'s
/// order: `bench/ns3/compare conventions` over ns-3's runs of seeds 1–4
/// and 233 with the trace program's per-flow completion files
/// (`tests/data/README.md`); the same runs reproduce `NS3` exactly by the
/// flow monitor.
const NS3_LAST_BYTE: [(&str, f64, f64, f64, f64); 3] = [
    ("large-scale-ecnsharp", 8.136, 65.55, 1.383, 8.90),
    ("large-scale-tcn-high", 8.576, 66.90, 1.514, 9.02),
    ("large-scale-tcn-low", 8.013, 63.48, 1.314, 9.47),
];

/// ns-3's reference seeds: the flow lists its large-scale program draws
/// for them (the same for every AQM: the flows are drawn before the run),
/// in `tests/data/` (`README.md` there says how they were made).
const NS3_SEEDS: [u32; 5] = [1, 2, 3, 4, 233];

/// `name` (a large-scale scenario) with its Poisson workload replaced by
/// ns-3's flow list of `seed`.
fn on_list(name: &str, seed: u32) -> Scenario {
    let dir = env!("CARGO_MANIFEST_DIR");
    let path = format!("{dir}/../../scenarios/fabric/{name}.toml");
    let mut table: toml::Table = std::fs::read_to_string(&path).unwrap().parse().unwrap();
    let mut workload = toml::Table::new();
    workload.insert("kind".into(), "list".into());
    workload.insert("file".into(), format!("{dir}/tests/data/ns3-s{seed}.csv").into());
    table.insert("workload".into(), workload.into());
    Scenario::parse(&toml::to_string(&table).unwrap(), Path::new(&path), &[]).unwrap()
}

/// The same comparison as `orderings_and_magnitudes_hold_over_five_seeds`,
/// on the same flows: ns-3's 5-seed means are over the flows its program
/// drew for seeds 1–4 and 233, so Fulcrum runs those five lists (seed 1
/// for its own random streams) and every figure, TCN 30 µs's small-flow
/// average included, is held within the bounds of ns-3's, with
/// both orderings.
#[test]
fn every_figure_holds_on_ns3s_own_flows() {
    let both: Vec<(FctSummary, FctSummary)> = NS3.iter().map(|(name, ..)| mean_on_lists(name, &NS3_SEEDS)).collect();
    let means: Vec<FctSummary> = both.iter().map(|b| b.0).collect();
    for ((name, avg, large, small, p99), (ours, last_byte)) in NS3.iter().zip(&both) {
        eprintln!(
            "{name} on ns-3's lists: flow monitor {} (ns-3 {avg} / {large} / {small} / {p99}; \
             {:+.1} / {:+.1} / {:+.1} / {:+.1} %); last new byte {}",
            show(ours),
            100.0 * (ours.avg / avg - 1.0),
            100.0 * (ours.large_avg / large - 1.0),
            100.0 * (ours.small_avg / small - 1.0),
            100.0 * (ours.small_p99 / p99 - 1.0),
            show(last_byte),
        );
        assert_within_bounds(name, ours, (*avg, *large, *small, *p99));
    }
    assert_orderings(&means[0], &means[1], &means[2]);
    for ((name, avg, large, small, p99), (_, last_byte)) in NS3_LAST_BYTE.iter().zip(&both) {
        assert_within_bounds(name, last_byte, (*avg, *large, *small, *p99));
    }
}

/// Mean of the four figures of `name` over ns-3's lists of `seeds`, run
/// on threads, in both conventions (`both_conventions`).
fn mean_on_lists(name: &str, seeds: &[u32]) -> (FctSummary, FctSummary) {
    let outcomes: Vec<Outcome> = std::thread::scope(|s| {
        let runs: Vec<_> =
            seeds.iter().map(|&seed| s.spawn(move || fulcrum_fabric::run(&on_list(name, seed), 1, None))).collect();
        runs.into_iter().map(|r| r.join().unwrap()).collect()
    });
    for (seed, o) in seeds.iter().zip(&outcomes) {
        let (monitor, last_byte) = both_conventions(name, std::slice::from_ref(o));
        eprintln!("{name}, ns-3's seed {seed}: flow monitor {}; last new byte {}", show(&monitor), show(&last_byte));
    }
    both_conventions(name, &outcomes)
}

/// (scenario, seed, average, large-flow average, small-flow average,
/// small-flow p99).
type Ns3Run = (&'static str, u32, f64, f64, f64, f64);

/// ns-3's own runs of its lists (ms), each from `bench/ns3/compare
/// summary` on the flow monitor's XML of the run (`tests/data/README.md`
/// gives the commands): TCN 30 µs on seeds 1–8, TCN 70 µs and ECN# on
/// seeds 1–4.
const NS3_RUNS: [Ns3Run; 16] = [
    ("large-scale-ecnsharp", 1, 10.354, 85.45, 1.867, 9.83),
    ("large-scale-ecnsharp", 2, 10.656, 68.67, 1.709, 10.76),
    ("large-scale-ecnsharp", 3, 10.115, 88.64, 1.929, 9.68),
    ("large-scale-ecnsharp", 4, 9.781, 86.86, 1.496, 9.56),
    ("large-scale-tcn-high", 1, 11.107, 91.93, 1.741, 7.59),
    ("large-scale-tcn-high", 2, 11.011, 76.81, 1.832, 9.65),
    ("large-scale-tcn-high", 3, 11.173, 90.54, 2.433, 11.03),
    ("large-scale-tcn-high", 4, 10.470, 90.56, 1.689, 10.82),
    ("large-scale-tcn-low", 1, 9.996, 74.54, 1.604, 10.97),
    ("large-scale-tcn-low", 2, 10.842, 74.86, 1.557, 10.77),
    ("large-scale-tcn-low", 3, 9.719, 78.53, 1.445, 8.32),
    ("large-scale-tcn-low", 4, 9.685, 84.17, 1.485, 10.22),
    ("large-scale-tcn-low", 5, 8.922, 84.48, 1.739, 8.84),
    ("large-scale-tcn-low", 6, 9.228, 79.35, 1.673, 9.82),
    ("large-scale-tcn-low", 7, 10.913, 77.50, 1.613, 10.58),
    ("large-scale-tcn-low", 8, 9.498, 76.99, 2.083, 11.53),
];

/// The same runs' figures by the receiver's last new byte (`bench/ns3/compare
/// conventions` on each run's directory, from the program's per-flow
/// `Large_Scale_<ID>_done.csv`; `tests/data/README.md`), in `NS3_RUNS`'s
/// order.
const NS3_RUNS_LAST_BYTE: [Ns3Run; 16] = [
    ("large-scale-ecnsharp", 1, 8.162, 65.07, 1.548, 8.82),
    ("large-scale-ecnsharp", 2, 8.416, 60.10, 1.402, 9.77),
    ("large-scale-ecnsharp", 3, 7.932, 61.01, 1.254, 8.69),
    ("large-scale-ecnsharp", 4, 7.993, 72.00, 1.276, 7.95),
    ("large-scale-tcn-high", 1, 8.463, 68.07, 1.503, 7.36),
    ("large-scale-tcn-high", 2, 9.025, 63.88, 1.540, 8.33),
    ("large-scale-tcn-high", 3, 8.408, 61.91, 1.499, 9.75),
    ("large-scale-tcn-high", 4, 8.383, 69.51, 1.432, 9.13),
    ("large-scale-tcn-low", 1, 8.165, 63.03, 1.335, 9.87),
    ("large-scale-tcn-low", 2, 8.191, 58.83, 1.356, 10.63),
    ("large-scale-tcn-low", 3, 8.102, 61.34, 1.244, 8.21),
    ("large-scale-tcn-low", 4, 7.719, 66.47, 1.253, 7.53),
    ("large-scale-tcn-low", 5, 7.396, 60.97, 1.446, 8.56),
    ("large-scale-tcn-low", 6, 7.347, 61.23, 1.447, 9.48),
    ("large-scale-tcn-low", 7, 8.779, 64.64, 1.351, 8.44),
    ("large-scale-tcn-low", 8, 7.091, 49.86, 1.731, 11.03),
];

/// The mean of each figure of `name`'s runs in `table`: (average, large,
/// small, p99), and the lists' seeds.
fn mean_of_runs(table: &[Ns3Run], name: &str) -> ((f64, f64, f64, f64), Vec<u32>) {
    let runs: Vec<&Ns3Run> = table.iter().filter(|r| r.0 == name).collect();
    let n = runs.len() as f64;
    let mean = |f: &dyn Fn(&Ns3Run) -> f64| runs.iter().map(|r| f(r)).sum::<f64>() / n;
    ((mean(&|r| r.2), mean(&|r| r.3), mean(&|r| r.4), mean(&|r| r.5)), runs.iter().map(|r| r.1).collect())
}

/// Each AQM on more of ns-3's lists, against ns-3's own runs of the same
/// lists (not the 5-seed reference): the means over the lists each AQM
/// has, held within the bounds, in ns-3's published convention
/// and by the receiver's last new byte on both sides. TCN 30 µs, the
/// figure the 5-seed comparison misses, has eight.
#[test]
fn each_aqm_on_ns3s_runs_of_the_same_lists() {
    for (name, ..) in NS3 {
        let (monitor_ns3, seeds) = mean_of_runs(&NS3_RUNS, name);
        let (last_byte_ns3, same) = mean_of_runs(&NS3_RUNS_LAST_BYTE, name);
        assert_eq!(seeds, same, "both tables hold the same runs");
        let (ours, last_byte) = mean_on_lists(name, &seeds);
        let figures = |(a, l, s, p): (f64, f64, f64, f64)| format!("{a:.3} / {l:.2} / {s:.3} / {p:.2}");
        eprintln!(
            "{name} on ns-3's lists {seeds:?}: flow monitor {} (ns-3's runs {}); last new byte {} (ns-3's runs {})",
            show(&ours),
            figures(monitor_ns3),
            show(&last_byte),
            figures(last_byte_ns3)
        );
        assert_within_bounds(name, &ours, monitor_ns3);
        assert_within_bounds(&format!("{name} by the last new byte"), &last_byte, last_byte_ns3);
    }
}

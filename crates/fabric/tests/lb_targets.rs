//! The load-balancing targets on the 4 × 4 × 8 leaf-spine (the Hermes paper's
//! claims), measured on shortened runs of the shipped `lb-4x4x8-*`
//! scenarios: flows launched over 100 ms, the run ending at 150 ms, seeds 1
//! and 2 pooled (the figures are the mean over the two runs).
//!
//! Each test prints every figure it compares (`--nocapture`) and asserts
//! each part of a target that holds in this model, as the issue states it.
//! The parts that do not hold are printed with their ratio and listed here;
//! no scheme was tuned to meet a target. The figures are those of the model
//! whose receiver drops stale segments unanswered, as ns-3's does (before
//! that, Hermes's moves cost it chains of fast recoveries, and it lost to
//! ECMP on the symmetric fabric and to CLOVE on the asymmetric one).
//!
//! Presto and DRB run with the receiver's resequencing buffer, as the
//! original's experiment scripts run them.
//!
//! - symmetric: Hermes, CONGA and Presto each beat ECMP at load 0.8
//!   (asserted; 0.962, 0.784 and 0.896 × ECMP's average FCT). They are not
//!   within 10 % of each other: the largest average is 1.30 × the smallest
//!   at load 0.6 and 1.23 × at 0.8 (CONGA is the fastest, Hermes the
//!   slowest).
//! - asymmetric (a fifth of the leaf–spine links at 1/5 of their rate, load
//!   0.7): Hermes's average FCT is ≤ 0.85 × CLOVE's (asserted; 0.820), and
//!   Hermes and CONGA beat ECMP (asserted). Hermes is not ≤ CONGA (1.16 ×),
//!   and ECMP is not the worst: Presto and DRB spray packets over the slow
//!   links too, and are slower.
//! - random drop (0.5 % at spine 0) and black hole (spine 0, leaf 0 → leaf
//!   1), load 0.6: Hermes's small-flow p99 is not 30 % below every other
//!   scheme's (0.98 × the best other's, FlowBender's, under random drop;
//!   4.8 × LetFlow's under the black hole). Under the black hole the ACKs
//!   of flows from leaf 1 to leaf 0 cross spine 0 too and no sender-side
//!   scheme moves them; what is asserted is that ECMP strands flows (its
//!   small-flow p99 is the stranded flows' age) and that LetFlow, which
//!   moves ACKs too, keeps its tail below half of ECMP's: its flowlets
//!   leave the black hole, so it strands few flows.

use std::path::Path;

use fulcrum_fabric::report::Report;
use fulcrum_fabric::{FctSummary, Scenario};

const SEEDS: usize = 2;

/// Mean FCT figures (ms) of `scheme` on scenario `name` at `load`.
fn fct(name: &str, scheme: &str, load: f64) -> FctSummary {
    let path = format!("{}/../../scenarios/fabric/{name}.toml", env!("CARGO_MANIFEST_DIR"));
    let mut sets = vec![
        "end=\"150ms\"".to_string(),
        "workload.launch_end=\"100ms\"".to_string(),
        format!("workload.load={load}"),
        format!("routing.scheme=\"{scheme}\""),
    ];
    // The per-packet schemes run with the receiver's resequencing buffer,
    // as the original's experiment scripts run Presto and DRB.
    if scheme == "presto" || scheme == "drb" {
        sets.push("resequence.enabled=true".to_string());
    }
    let scenario = Scenario::load(Path::new(&path), &sets).unwrap();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(SEEDS);
    let outcomes = fulcrum_fabric::run_many(&scenario, 1, SEEDS, threads, None).unwrap();
    let report =
        Report { provenance: None, scenario: &scenario.name, sets: &[], outcomes: &outcomes, wall_seconds: 0.0 };
    let (mean, _) = report.fct();
    let stranded = outcomes.iter().map(|o| o.stranded.len()).sum::<usize>() as f64 / SEEDS as f64;
    eprintln!(
        "{name} {scheme:10} load {load}: avg {:.3} small avg {:.3} small p99 {:.3} large avg {:.3} \
         stranded {stranded:.1} small p99 censored {:.3}",
        mean.avg, mean.small_avg, mean.small_p99, mean.large_avg, mean.small_p99_censored
    );
    mean
}

const ALL: [&str; 9] = ["ecmp", "drb", "presto", "letflow", "drill", "conga", "clove", "flowbender", "hermes"];

#[test]
fn symmetric_hermes_conga_and_presto_beat_ecmp_at_high_load() {
    for load in [0.6, 0.8] {
        let [ecmp, presto, conga, hermes] =
            ["ecmp", "presto", "conga", "hermes"].map(|s| fct("lb-4x4x8-symmetric", s, load));
        let avgs = [hermes.avg, conga.avg, presto.avg];
        let spread = avgs.iter().cloned().fold(f64::MIN, f64::max) / avgs.iter().cloned().fold(f64::MAX, f64::min);
        eprintln!("load {load}: largest/smallest average of Hermes, CONGA, Presto = {spread:.3} (target ≤ 1.10)");
        eprintln!(
            "load {load}: against ECMP: Hermes {:.3}, CONGA {:.3}, Presto {:.3} (target < 1 at 0.8)",
            hermes.avg / ecmp.avg,
            conga.avg / ecmp.avg,
            presto.avg / ecmp.avg
        );
        if load == 0.8 {
            assert!(hermes.avg < ecmp.avg, "Hermes {hermes:?} ECMP {ecmp:?}");
            assert!(conga.avg < ecmp.avg, "CONGA {conga:?} ECMP {ecmp:?}");
            assert!(presto.avg < ecmp.avg, "Presto {presto:?} ECMP {ecmp:?}");
        }
    }
}

#[test]
fn asymmetric_hermes_beats_clove_and_with_conga_beats_ecmp() {
    let figures: Vec<(&str, FctSummary)> = ALL.iter().map(|&s| (s, fct("lb-4x4x8-asymmetric", s, 0.7))).collect();
    let avg = |name: &str| figures.iter().find(|(s, _)| *s == name).unwrap().1.avg;
    let (hermes, conga, clove, ecmp) = (avg("hermes"), avg("conga"), avg("clove"), avg("ecmp"));
    let worst = figures.iter().max_by(|a, b| a.1.avg.total_cmp(&b.1.avg)).unwrap().0;
    eprintln!(
        "Hermes/CONGA {:.3} (target ≤ 1), Hermes/CLOVE {:.3} (target ≤ 0.85), worst {worst} (target ecmp)",
        hermes / conga,
        hermes / clove
    );
    assert!(hermes <= 0.85 * clove, "Hermes {hermes} CLOVE {clove}");
    assert!(hermes < ecmp, "Hermes {hermes} ECMP {ecmp}");
    assert!(conga < ecmp, "CONGA {conga} ECMP {ecmp}");
}

/// Hermes's small-flow p99 against the best of the other schemes, with
/// stranded flows (nothing of theirs arrived) counted at their age when the
/// run ended (`small_p99_censored`), so that a scheme does not gain by
/// stranding flows.
fn tail_ratio(name: &str) -> Vec<(&'static str, FctSummary)> {
    let figures: Vec<(&str, FctSummary)> = ALL.iter().map(|&s| (s, fct(name, s, 0.6))).collect();
    let hermes = figures.iter().find(|(s, _)| *s == "hermes").unwrap().1.small_p99_censored;
    let (best, other) = figures
        .iter()
        .filter(|(s, _)| *s != "hermes")
        .map(|(s, f)| (*s, f.small_p99_censored))
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .unwrap();
    eprintln!("{name}: Hermes small p99 / best other ({best}) = {:.3} (target ≤ 0.70)", hermes / other);
    figures
}

#[test]
fn random_drop_small_flow_tails() {
    let figures = tail_ratio("lb-4x4x8-random-drop");
    // Every scheme still completes its small flows within the run.
    for (s, f) in &figures {
        assert!(f.small_p99_censored < 50.0, "{s}: {f:?}");
    }
}

#[test]
fn black_hole_strands_ecmp_flows_and_letflow_mostly_leaves_it() {
    let figures = tail_ratio("lb-4x4x8-black-hole");
    let p99 = |name: &str| figures.iter().find(|(s, _)| *s == name).unwrap().1.small_p99_censored;
    assert!(p99("ecmp") > 40.0, "ECMP's stranded small flows: {}", p99("ecmp"));
    assert!(p99("letflow") < p99("ecmp") / 2.0, "LetFlow {} ECMP {}", p99("letflow"), p99("ecmp"));
}

#[test]
fn sensing_schemes_are_deterministic() {
    let path = format!("{}/../../scenarios/fabric/lb-4x4x8-asymmetric.toml", env!("CARGO_MANIFEST_DIR"));
    for scheme in ["conga", "clove", "flowbender", "hermes"] {
        let sets = [
            "end=\"30ms\"".to_string(),
            "workload.launch_end=\"20ms\"".to_string(),
            format!("routing.scheme={scheme}"),
        ];
        let s = Scenario::load(Path::new(&path), &sets).unwrap();
        let a = fulcrum_fabric::run(&s, 3, None);
        let b = fulcrum_fabric::run(&s, 3, None);
        assert!(a.flows.len() > 50, "{scheme}: {} flows", a.flows.len());
        assert_eq!(a.flows, b.flows, "{scheme}: same scenario and seed, same flows");
    }
}

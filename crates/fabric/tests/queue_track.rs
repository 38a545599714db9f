//! The seed's queue-track experiment (`scenarios/fabric/queue-track-*.toml`):
//! sixteen DCTCP senders with five path lengths share one 10 Gb/s port
//! toward a receiver, under data-mining Poisson flows at load 0.9 plus an
//! incast every 100 ms; the bottleneck's queue is sampled every 10 µs.
//!
//! The target: over ten seeds (the bottleneck's load varies a lot
//! from draw to draw, with a few flows of up to 1 GB), ECN#'s mean queue is
//! at most 0.6 × RED's (K = 40), with a small-flow average FCT no worse.

use std::path::Path;

use fulcrum_fabric::{Outcome, Scenario};

const SEEDS: usize = 10;
const PORT: &str = "switch 0 -> host 16";

fn runs(file: &str) -> Vec<Outcome> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/fabric").join(file);
    let s = Scenario::load(&path, &[]).unwrap();
    fulcrum_fabric::run_many(&s, 1, SEEDS, 2, None).unwrap()
}

/// The bottleneck's mean sampled queue (packets in the discipline).
fn mean_queue(o: &Outcome) -> f64 {
    o.queues.iter().find(|q| q.port == PORT).expect("the bottleneck is watched").mean_packets
}

fn mean(v: impl Iterator<Item = f64>) -> f64 {
    let v: Vec<f64> = v.collect();
    v.iter().sum::<f64>() / v.len() as f64
}

#[test]
fn ecn_sharp_keeps_the_queue_shorter_than_red_without_slowing_small_flows() {
    let ecn = runs("queue-track-ecnsharp.toml");
    let red = runs("queue-track-red.toml");
    eprintln!("seed  ECN# queue  RED queue  ECN# small avg  RED small avg (ms)");
    for (e, r) in ecn.iter().zip(&red) {
        eprintln!(
            "{:>4}  {:>10.2}  {:>9.2}  {:>14.3}  {:>13.3}",
            e.seed,
            mean_queue(e),
            mean_queue(r),
            e.fct.small_avg,
            r.fct.small_avg
        );
    }
    let (eq, rq) = (mean(ecn.iter().map(mean_queue)), mean(red.iter().map(mean_queue)));
    let (es, rs) = (mean(ecn.iter().map(|o| o.fct.small_avg)), mean(red.iter().map(|o| o.fct.small_avg)));
    eprintln!("mean  {eq:>10.2}  {rq:>9.2}  {es:>14.3}  {rs:>13.3}");
    // Samples at 0, 10 µs, …, 2 s.
    assert_eq!(ecn[0].queue_series[0].packets.len(), 200_001);
    assert!(rq > 1.0, "the bottleneck does queue under RED: {rq}");
    assert!(eq <= 0.6 * rq, "ECN# mean queue {eq:.2} against RED's {rq:.2}");
    assert!(es <= rs, "ECN# small-flow average {es:.3} ms against RED's {rs:.3} ms");
}

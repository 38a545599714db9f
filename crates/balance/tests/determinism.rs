//! Determinism: the same seed gives the same pick sequence, for every
//! algorithm, under the same sequence of completions.

mod common;

use common::{balancer, closed_loop, endpoints, weighted};
use fulcrum_balance::{AlgorithmKind, MILLISECOND, SECOND};

fn run(kind: AlgorithmKind, seed: u64) -> Vec<u64> {
    let eps = weighted(&[1.0, 1.0, 2.0, 3.0, 1.0, 1.0, 5.0, 1.0]);
    let mut b = balancer(kind, &eps, seed);
    // Latencies vary by endpoint and time so that stateful algorithms diverge
    // quickly if anything about them is not determined by the seed.
    closed_loop(b.as_mut(), 6, 0, SECOND, |id, now| (1 + id.0 * 3 + (now / MILLISECOND) % 7) * MILLISECOND)
        .into_iter()
        .map(|(_, id)| id.0)
        .collect()
}

#[test]
fn same_seed_same_picks() {
    for kind in AlgorithmKind::all() {
        let a = run(kind, 42);
        assert!(a.len() > 200, "{kind}: only {} picks", a.len());
        assert_eq!(a, run(kind, 42), "{kind}");
    }
}

#[test]
fn different_seeds_differ() {
    // Hash-based algorithms draw random keys when a request has none, so the
    // seed matters for every algorithm.
    for kind in AlgorithmKind::all() {
        assert_ne!(run(kind, 1), run(kind, 2), "{kind}");
    }
}

#[test]
fn round_robin_instances_start_at_different_points() {
    let eps = endpoints(10);
    let firsts: std::collections::HashSet<u64> = (0..50)
        .map(|seed| {
            let mut b = balancer(AlgorithmKind::ROUND_ROBIN, &eps, seed);
            let t = b.pick(0, None).unwrap();
            let id = t.endpoint().0;
            b.on_cancel(t);
            id
        })
        .collect();
    assert!(firsts.len() >= 6, "50 balancers started on only {} endpoints", firsts.len());
}

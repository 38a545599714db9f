//! Minimal disruption: when one of N endpoints leaves (or one joins), only
//! the keys that must move do. Bounds: ring hash and rendezvous move at most
//! 1/N + 1 % of keys, Maglev at most 2/N (its table is rebuilt and a few
//! entries of surviving endpoints shift, per §3.4 of the paper).

mod common;

use common::{assign, endpoints, from_toml, key};
use fulcrum_balance::EndpointId;

const KEYS: u64 = 100_000;

fn moved(before: &[EndpointId], after: &[EndpointId]) -> f64 {
    before.iter().zip(after).filter(|(a, b)| a != b).count() as f64 / before.len() as f64
}

/// Fraction of keys that move when endpoint `gone` leaves a set of `n`, and
/// when it comes back.
fn churn(config: &str, n: u64, gone: u64) -> (f64, f64) {
    let all = endpoints(n);
    let rest: Vec<_> = all.iter().filter(|e| e.id.0 != gone).cloned().collect();
    let mut b = from_toml(config, &all, 0);
    let before = assign(b.as_mut(), (0..KEYS).map(key));
    b.set_endpoints(&rest).unwrap();
    let during = assign(b.as_mut(), (0..KEYS).map(key));
    b.set_endpoints(&all).unwrap();
    let after = assign(b.as_mut(), (0..KEYS).map(key));
    // Keys that were not on the removed endpoint should mostly stay put.
    (moved(&before, &during), moved(&during, &after))
}

fn check(config: &str, bound_remove: impl Fn(f64) -> f64, bound_add: impl Fn(f64) -> f64) {
    for n in [5u64, 10, 50] {
        let (removed, added) = churn(config, n, n / 2);
        let n = n as f64;
        assert!(removed <= bound_remove(n), "{config}, N={n}: removing one moved {removed:.4} of keys");
        assert!(added <= bound_add(n), "{config}, N={n}: adding one moved {added:.4} of keys");
        // And the keys that had to move did: the removed endpoint's share.
        assert!(removed >= 0.5 / n, "{config}, N={n}: only {removed:.4} moved");
    }
}

#[test]
fn ring_hash_moves_at_most_one_nth_plus_one_percent() {
    check("kind = \"ring-hash\"", |n| 1.0 / n + 0.01, |n| 1.0 / n + 0.01);
}

#[test]
fn rendezvous_moves_at_most_one_nth_plus_one_percent() {
    check("kind = \"rendezvous\"", |n| 1.0 / n + 0.01, |n| 1.0 / n + 0.01);
    check("kind = \"rendezvous\"\nhash = \"murmur3\"", |n| 1.0 / n + 0.01, |n| 1.0 / n + 0.01);
}

#[test]
fn maglev_moves_at_most_two_nths() {
    check("kind = \"maglev\"", |n| 2.0 / n, |n| 2.0 / n);
}

#[test]
fn rendezvous_moves_only_the_removed_endpoints_keys() {
    let all = endpoints(10);
    let mut b = from_toml("kind = \"rendezvous\"", &all, 0);
    let before = assign(b.as_mut(), (0..KEYS).map(key));
    b.set_endpoints(&all[1..]).unwrap();
    let after = assign(b.as_mut(), (0..KEYS).map(key));
    for (x, y) in before.iter().zip(&after) {
        assert!(x == y || x.0 == 0, "a key moved from {x:?} to {y:?}");
    }
}

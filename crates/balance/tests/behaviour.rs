//! Behaviour the algorithms promise under load.

mod common;

use common::{balancer, closed_loop, endpoints, from_toml, key};
use fulcrum_balance::{AlgorithmKind, Balancer, EndpointId, Nanos, Outcome, MILLISECOND, SECOND};

/// Peak-EWMA with τ = 1 s over five endpoints of 10 ms; endpoint 0 takes
/// 100 ms from 10 s to 20 s.
fn peak_ewma_slowdown() -> Vec<(Nanos, EndpointId)> {
    let mut b = from_toml("kind = \"peak-ewma\"\ndecay = \"1s\"\ndefault_rtt = \"10ms\"", &endpoints(5), 7);
    closed_loop(b.as_mut(), 4, 0, 30 * SECOND, |id, now| {
        let slow = id.0 == 0 && (10 * SECOND..20 * SECOND).contains(&now);
        if slow {
            100 * MILLISECOND
        } else {
            10 * MILLISECOND
        }
    })
}

fn share_of_zero(log: &[(Nanos, EndpointId)]) -> f64 {
    log.iter().filter(|(_, id)| id.0 == 0).count() as f64 / log.len() as f64
}

#[test]
fn peak_ewma_stops_sending_to_a_slow_endpoint_within_a_few_dozen_requests() {
    let log = peak_ewma_slowdown();
    let after: Vec<_> = log.iter().filter(|(t, _)| *t >= 10 * SECOND).cloned().collect();
    // Requests picked before the first slow response (100 ms later) cannot
    // know; after that the estimate jumps to the peak at once. Allow 60
    // requests (~150 ms at four in flight), then none for the next 300.
    let late: Vec<_> = after[60..360].iter().filter(|(_, id)| id.0 == 0).collect();
    assert!(late.is_empty(), "endpoint 0 still got {} of 300 requests after the first 60", late.len());
    let during: Vec<_> = log.iter().filter(|(t, _)| (10 * SECOND..20 * SECOND).contains(t)).cloned().collect();
    // It is probed again whenever its decayed estimate falls to the others'
    // cost, so a trickle remains: well under the fair 20 %.
    assert!(share_of_zero(&during) < 0.03, "share while slow {:.4}", share_of_zero(&during));
}

#[test]
fn peak_ewma_recovers_after_the_endpoint_turns_fast() {
    let log = peak_ewma_slowdown();
    let before: Vec<_> = log.iter().filter(|(t, _)| *t < 10 * SECOND).cloned().collect();
    // Within a few τ of turning fast again it takes its fair share back.
    let recovered: Vec<_> = log.iter().filter(|(t, _)| *t >= 25 * SECOND).cloned().collect();
    for (name, part) in [("before", &before), ("recovered", &recovered)] {
        let s = share_of_zero(part);
        assert!((0.15..0.25).contains(&s), "{name}: endpoint 0 share {s:.4}, want ~0.2");
    }
}

#[test]
fn peak_ewma_fast_failures_do_not_attract_traffic() {
    // Endpoint 0 fails in 1 ms; the others succeed in 10 ms. Counting the
    // failure as the 250 ms penalty keeps traffic away from it.
    let mut b = balancer(AlgorithmKind::PEAK_EWMA, &endpoints(5), 3);
    let mut to_zero = 0;
    let mut now = 0;
    for _ in 0..2000 {
        let t = b.pick(now, None).unwrap();
        let outcome = if t.endpoint().0 == 0 {
            to_zero += 1;
            Outcome::Failure { latency: MILLISECOND }
        } else {
            Outcome::Success { latency: 10 * MILLISECOND }
        };
        now += MILLISECOND;
        b.on_complete(t, now, outcome);
    }
    assert!(to_zero < 100, "the failing endpoint got {to_zero} of 2000 requests");
}

#[test]
fn least_request_prefers_the_endpoint_with_fewer_active() {
    let mut b = balancer(AlgorithmKind::LEAST_REQUEST, &endpoints(1), 5);
    let held: Vec<_> = (0..5).map(|_| b.pick(0, None).unwrap()).collect();
    b.set_endpoints(&endpoints(3)).unwrap();
    // Every pair drawn holds an idle endpoint, which beats endpoint 0.
    for _ in 0..1000 {
        let t = b.pick(0, None).unwrap();
        assert_ne!(t.endpoint().0, 0);
        b.on_cancel(t);
    }
    for t in held {
        b.on_cancel(t);
    }
    assert!(b.loads(0).iter().all(|l| l.active == 0));
}

#[test]
fn least_request_with_d_equal_to_n_is_least_loaded() {
    let mut b = from_toml("kind = \"least-request\"\nchoices = 4", &endpoints(4), 5);
    let held: Vec<_> = (0..400).map(|_| b.pick(0, None).unwrap()).collect();
    let active: Vec<u32> = b.loads(0).iter().map(|l| l.active).collect();
    assert_eq!(active, vec![100; 4], "full choice keeps loads level");
    held.into_iter().for_each(|t| b.on_cancel(t));
}

fn bounded_loads(config: &str, hot_keys: u64) -> (Vec<u32>, u32) {
    let n = 8;
    let mut b = from_toml(config, &endpoints(n), 9);
    let mut held = Vec::new();
    let mut worst_excess = 0;
    for i in 0..2000u64 {
        let t = b.pick(0, Some(key(i % hot_keys))).unwrap();
        held.push(t);
        // Cap after this pick: ceil(1.25 × total / n).
        let cap = (1.25 * held.len() as f64 / n as f64).ceil() as u32;
        let max = b.loads(0).iter().map(|l| l.active).max().unwrap();
        worst_excess = worst_excess.max(max.saturating_sub(cap));
    }
    let active = b.loads(0).iter().map(|l| l.active).collect();
    held.into_iter().for_each(|t| b.on_cancel(t));
    (active, worst_excess)
}

#[test]
fn bounded_load_caps_every_endpoint_at_factor_times_mean() {
    for kind in ["ring-hash", "maglev", "rendezvous"] {
        let config = format!("kind = \"{kind}\"\nbounded_load = 1.25");
        // A handful of hot keys would pile on one or two endpoints unbounded.
        for hot_keys in [1, 3, 1000] {
            let (active, excess) = bounded_loads(&config, hot_keys);
            assert_eq!(excess, 0, "{kind}, {hot_keys} keys: an endpoint exceeded 1.25 × mean ({active:?})");
        }
        let (unbounded, _) = bounded_loads(&format!("kind = \"{kind}\""), 1);
        assert_eq!(unbounded.iter().max(), Some(&2000), "{kind}: without a bound one key stays on one endpoint");
    }
}

#[test]
fn removed_endpoints_tickets_are_ignored() {
    for kind in AlgorithmKind::all() {
        let mut b: Box<dyn Balancer> = balancer(kind, &endpoints(3), 1);
        let tickets: Vec<_> = (0..30).map(|_| b.pick(0, None).unwrap()).collect();
        b.set_endpoints(&endpoints(2)).unwrap();
        b.set_endpoints(&endpoints(3)).unwrap();
        // Endpoint 2 came back fresh: its old tickets must not touch the new count.
        for t in tickets {
            b.on_complete(t, MILLISECOND, Outcome::Success { latency: MILLISECOND });
        }
        let active: Vec<u32> = b.loads(MILLISECOND).iter().map(|l| l.active).collect();
        assert_eq!(active, vec![0, 0, 0], "{kind}");
    }
}

//! Helpers shared by the integration tests: endpoint sets, one balancer of
//! every kind, and a tiny closed-loop driver.

#![allow(dead_code)] // each test binary uses a different subset

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use fulcrum_balance::hash::xxh64;
use fulcrum_balance::{build, AlgorithmConfig, AlgorithmKind, Balancer, Endpoint, EndpointId, Nanos, Outcome};

/// `n` endpoints of weight 1 named like real upstreams.
pub fn endpoints(n: u64) -> Vec<Endpoint> {
    (0..n).map(|i| Endpoint::new(i, format!("10.0.{}.{}:8080", i / 250, i % 250 + 1))).collect()
}

/// Endpoints with the given weights.
pub fn weighted(weights: &[f64]) -> Vec<Endpoint> {
    endpoints(weights.len() as u64).into_iter().zip(weights).map(|(e, &w)| e.with_weight(w)).collect()
}

/// A balancer of `kind` with default parameters.
pub fn balancer(kind: AlgorithmKind, eps: &[Endpoint], seed: u64) -> Box<dyn Balancer> {
    build(&kind.default_config(), eps, seed).unwrap()
}

/// A balancer from a TOML algorithm table, e.g. `kind = "maglev"\nbounded_load = 1.25`.
pub fn from_toml(text: &str, eps: &[Endpoint], seed: u64) -> Box<dyn Balancer> {
    let config: AlgorithmConfig = toml::from_str(text).unwrap();
    build(&config, eps, seed).unwrap()
}

/// The hash a proxy would compute for request key `i` (e.g. a header value).
pub fn key(i: u64) -> u64 {
    xxh64(format!("user-{i}").as_bytes(), 0)
}

/// Pick once per key, completing at once, and return the endpoint of each.
pub fn assign(b: &mut dyn Balancer, keys: impl Iterator<Item = u64>) -> Vec<EndpointId> {
    keys.map(|k| {
        let t = b.pick(0, Some(k)).unwrap();
        let id = t.endpoint();
        b.on_complete(t, 0, Outcome::Success { latency: 0 });
        id
    })
    .collect()
}

/// Shares of `n` endpoints (by id) among `picks`.
pub fn shares(picks: &[EndpointId], n: usize) -> Vec<f64> {
    let mut counts = vec![0u64; n];
    for p in picks {
        counts[p.0 as usize] += 1;
    }
    counts.iter().map(|&c| c as f64 / picks.len() as f64).collect()
}

/// Drive `b` with `concurrency` requests always in flight from `start` until
/// `end`; `latency(endpoint, now)` says how long a request picked at `now`
/// takes. Returns every pick as (time, endpoint) in order.
pub fn closed_loop(
    b: &mut dyn Balancer,
    concurrency: usize,
    start: Nanos,
    end: Nanos,
    mut latency: impl FnMut(EndpointId, Nanos) -> Nanos,
) -> Vec<(Nanos, EndpointId)> {
    let mut log = Vec::new();
    let mut in_flight = BinaryHeap::new();
    let mut tickets = Vec::new();
    let mut issue = |b: &mut dyn Balancer, now: Nanos, in_flight: &mut BinaryHeap<_>, tickets: &mut Vec<_>| {
        let t = b.pick(now, None).unwrap();
        let done = now + latency(t.endpoint(), now);
        log.push((now, t.endpoint()));
        in_flight.push(Reverse((done, tickets.len())));
        tickets.push(Some((t, now)));
    };
    for _ in 0..concurrency {
        issue(b, start, &mut in_flight, &mut tickets);
    }
    while let Some(Reverse((now, i))) = in_flight.pop() {
        let (t, sent) = tickets[i].take().unwrap();
        b.on_complete(t, now, Outcome::Success { latency: now - sent });
        if now < end {
            issue(b, now, &mut in_flight, &mut tickets);
        }
    }
    log
}

//! The one rule for picking an endpoint for a retry: "another endpoint,
//! avoiding these". The simulator and the proxy both call [`pick_avoiding`],
//! so a retry lands on the same endpoint in a scenario as behind the proxy.
//!
//! The rule (after Envoy's `retry_host_predicate` with
//! `previous_hosts`, which re-draws a bounded number of times):
//!
//! - Pick up to [`RETRY_PICKS`] times; the first pick whose endpoint is not in
//!   `avoid` wins. If every pick hits an avoided endpoint, the last one is
//!   taken: a retry on an endpoint already tried beats no retry.
//! - Rejected picks are held until the search ends and then cancelled, so a
//!   load-aware algorithm (least request, Peak-EWMA) sees those endpoints as
//!   busier for the next draw instead of drawing the same one again.
//! - Hash-based algorithms would answer the same key with the same endpoint,
//!   so each draw gets its own key from [`retry_key`]: the request's key for
//!   the first draw of the first try, a key derived from it, the try number
//!   and the draw number otherwise. A request without a key stays without one
//!   (the balancer draws a random key).

use crate::{Balancer, EndpointId, Nanos, Ticket};
use fulcrum_base::splitmix64;

/// Draws made for one try before settling for an endpoint already tried.
/// Draws stop at the first acceptable endpoint, so this bound only costs
/// anything when most endpoints were already tried: with a share `f` of the
/// endpoints to avoid and independent draws, all 16 miss with probability
/// `f^16` (under 1 % up to `f` = 3/4).
pub const RETRY_PICKS: u32 = 16;

/// The key for draw `draw` (from 0) of try `attempt` (0 = the first try) of a
/// request with hash `key`.
pub fn retry_key(key: Option<u64>, attempt: u32, draw: u32) -> Option<u64> {
    if attempt == 0 && draw == 0 {
        return key;
    }
    let salt = (u64::from(attempt) << 32 | u64::from(draw)).wrapping_add(1);
    // SplitMix64's step adds φ·2^64 before mixing: start one step back, so the
    // key is the mix of `key ^ salt·φ`.
    let mut state = (key? ^ salt.wrapping_mul(GOLDEN)).wrapping_sub(GOLDEN);
    Some(splitmix64(&mut state))
}

/// φ·2^64, SplitMix64's increment.
const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;

/// Pick an endpoint for try `attempt` of a request with hash `key` at `now`,
/// avoiding the endpoints in `avoid` when another can be had (see the module
/// documentation). `None` only when the balancer has no endpoint.
pub fn pick_avoiding(
    balancer: &mut dyn Balancer,
    now: Nanos,
    key: Option<u64>,
    attempt: u32,
    avoid: &[EndpointId],
) -> Option<Ticket> {
    let mut rejected = Vec::new();
    let mut chosen = None;
    for draw in 0..RETRY_PICKS {
        // `None` means no endpoint at all: no later draw can do better.
        let Some(ticket) = balancer.pick(now, retry_key(key, attempt, draw)) else { break };
        if draw + 1 == RETRY_PICKS || !avoid.contains(&ticket.endpoint()) {
            chosen = Some(ticket);
            break;
        }
        rejected.push(ticket);
    }
    for t in rejected {
        balancer.on_cancel(t);
    }
    chosen
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{build, AlgorithmKind, Endpoint};

    fn endpoints(n: u64) -> Vec<Endpoint> {
        (0..n).map(|i| Endpoint::new(i, format!("e{i}"))).collect()
    }

    #[test]
    fn the_first_draw_of_the_first_try_keeps_the_key() {
        assert_eq!(retry_key(Some(7), 0, 0), Some(7));
        assert_eq!(retry_key(None, 1, 0), None);
        let keys: Vec<_> = (0..4).flat_map(|a| (0..4).map(move |d| retry_key(Some(7), a, d))).collect();
        let mut unique = keys.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), keys.len(), "every (try, draw) gets its own key");
    }

    #[test]
    fn a_hash_balancer_retries_elsewhere() {
        let mut b = build(&AlgorithmKind::RING_HASH.default_config(), &endpoints(3), 1).unwrap();
        for key in 0..200u64 {
            let first = pick_avoiding(b.as_mut(), 0, Some(key), 0, &[]).unwrap();
            let avoid = [first.endpoint()];
            b.on_cancel(first);
            let retry = pick_avoiding(b.as_mut(), 0, Some(key), 1, &avoid).unwrap();
            assert_ne!(retry.endpoint(), avoid[0], "key {key}");
            b.on_cancel(retry);
        }
    }

    #[test]
    fn rejected_draws_are_cancelled_and_the_last_is_taken_when_all_are_avoided() {
        let mut b = build(&AlgorithmKind::LEAST_REQUEST.default_config(), &endpoints(2), 1).unwrap();
        let t = pick_avoiding(b.as_mut(), 0, None, 1, &[EndpointId(0), EndpointId(1)]).unwrap();
        let active: u32 = b.loads(0).iter().map(|l| l.active).sum();
        assert_eq!(active, 1, "only the ticket handed out is in flight");
        b.on_cancel(t);
        for _ in 0..50 {
            let t = pick_avoiding(b.as_mut(), 0, None, 1, &[EndpointId(0)]).unwrap();
            assert_eq!(t.endpoint(), EndpointId(1));
            b.on_cancel(t);
        }
    }
}

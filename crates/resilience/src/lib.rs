//! What keeps a cluster healthy around the load-balancing algorithm: passive
//! outlier detection ([`OutlierDetector`]), slow start ([`SlowStart`]), the
//! panic threshold, active health-check streaks, all combined by
//! [`ClusterHealth`], and the retry policy ([`RetryPolicy`]) with its
//! budget ([`RetryBudget`]), local rate limits ([`RateLimiter`]) and the
//! circuit breaker on requests in flight ([`RequestLimit`]).
//!
//! Like the algorithms, these are pure state machines: no clock, no I/O,
//! time passed in. The proxy and the simulator drive the same code, so a
//! scenario can show at scale what the proxy will do: each feeds its
//! [`ClusterHealth`] the same kinds of events and asks it for the endpoint
//! set to give its balancers (ejected and unhealthy endpoints dropped unless
//! too few would remain, weights scaled by slow start: [`routable`], which
//! the fuzzer also drives directly).

#![forbid(unsafe_code)]

mod health;
mod outlier;
mod rate_limit;
mod request_limit;
mod retry_budget;
mod retry_policy;
mod slow_start;

pub use health::{CheckThresholds, ClusterHealth, HealthConfig, Snapshot, STEP};
pub use outlier::{Change, EjectionReason, OutlierConfig, OutlierDetector, RequestResult};
pub use rate_limit::{LimitKey, Limited, RateLimitConfig, RateLimiter, TokenBucket, DEFAULT_MAX_KEYS};
pub use request_limit::{ramped, RequestLimit};
pub use retry_budget::{RetryBudget, RetryBudgetConfig};
pub use retry_policy::{PolicyError, RetryOn, RetryPolicy};
pub use slow_start::{SlowStart, SlowStartConfig};

use fulcrum_balance::Endpoint;

/// The endpoints a balancer should use, and whether the cluster is in panic.
#[derive(Clone, Debug, PartialEq)]
pub struct Routable {
    /// The set to hand to `Balancer::set_endpoints`.
    pub endpoints: Vec<Endpoint>,
    /// Too few endpoints were healthy, so all of them are used (report it).
    pub panic: bool,
}

/// The endpoints to balance over: the healthy ones (`healthy(endpoint)`),
/// unless fewer than `panic_threshold_percent` of all are healthy, in which
/// case all of them (Envoy's panic mode: better to spread load over some
/// bad hosts than to crush the few good ones). `weight_factor` scales each
/// weight (slow start); factors are clamped to at least 1e-3 so a weight
/// stays valid.
pub fn routable(
    all: &[Endpoint],
    healthy: impl Fn(&Endpoint) -> bool,
    weight_factor: impl Fn(&Endpoint) -> f64,
    panic_threshold_percent: f64,
) -> Routable {
    let healthy_count = all.iter().filter(|e| healthy(e)).count();
    let panic = !all.is_empty() && (healthy_count as f64) < all.len() as f64 * panic_threshold_percent / 100.0;
    let endpoints = all
        .iter()
        .filter(|e| panic || healthy(e))
        .map(|e| {
            let mut e = e.clone();
            let scaled = e.weight * weight_factor(&e).clamp(1e-3, 1.0);
            // A tiny (subnormal) weight scaled down can round to 0, which no
            // balancer accepts: keep it unscaled then.
            if scaled > 0.0 {
                e.weight = scaled;
            }
            e
        })
        .collect();
    Routable { endpoints, panic }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eps(n: u64) -> Vec<Endpoint> {
        (0..n).map(|i| Endpoint::new(i, format!("e{i}"))).collect()
    }

    #[test]
    fn unhealthy_endpoints_are_dropped_until_panic() {
        let all = eps(4);
        let r = routable(&all, |e| e.id.0 != 0, |_| 1.0, 50.0);
        assert_eq!((r.endpoints.len(), r.panic), (3, false));
        let r = routable(&all, |e| e.id.0 == 0, |_| 1.0, 50.0);
        assert_eq!((r.endpoints.len(), r.panic), (4, true), "one healthy of four is under 50 %");
        let r = routable(&all, |e| e.id.0 == 0, |_| 1.0, 0.0);
        assert_eq!((r.endpoints.len(), r.panic), (1, false), "threshold 0 disables panic");
    }

    #[test]
    fn weights_are_scaled_and_stay_valid() {
        let r = routable(&eps(2), |_| true, |e| if e.id.0 == 0 { 0.0 } else { 0.5 }, 50.0);
        assert_eq!(r.endpoints[0].weight, 1e-3);
        assert_eq!(r.endpoints[1].weight, 0.5);
    }

    #[test]
    fn a_tiny_weight_scaled_down_stays_above_zero() {
        let all = vec![Endpoint::new(0, "e0").with_weight(5e-324), Endpoint::new(1, "e1")];
        let r = routable(&all, |_| true, |_| 0.1, 50.0);
        assert!(r.endpoints.iter().all(|e| e.weight > 0.0), "{:?}", r.endpoints);
    }
}

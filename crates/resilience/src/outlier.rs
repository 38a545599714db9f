//! Passive outlier detection, after Envoy's `outlier_detection`.
//!
//! The detector watches every request's result per endpoint and ejects an
//! endpoint (takes it out of the balancer's set for a while) when:
//!
//! - it returns `consecutive_5xx` server errors in a row (gateway failures
//!   count as server errors too), or `consecutive_gateway_failure` connect
//!   failures, resets or timeouts in a row — at once;
//! - at the end of an `interval`, its success rate is below
//!   `mean − success_rate_stdev_factor × stdev` of the endpoints that saw at
//!   least `success_rate_request_volume` requests (when at least
//!   `success_rate_minimum_hosts` did);
//! - at the end of an `interval`, its failure percentage is at least
//!   `failure_percentage_threshold` (same volume rules).
//!
//! An ejection lasts `base_ejection_time × times ejected`, at most
//! `max_ejection_time`; every interval an endpoint spends un-ejected lowers
//! its count by one. At most `max_ejection_percent` of the endpoints are
//! ejected at once, but **at least one** may always be: Envoy's 10 % cap
//! ejects nothing on a cluster of fewer than ten hosts, which is where a bad
//! host hurts most.
//!
//! Time is passed in, as everywhere in Fulcrum; the proxy and the simulator
//! call [`OutlierDetector::record`] per result and [`OutlierDetector::tick`]
//! on a timer.

use std::collections::HashMap;
use std::time::Duration;

use fulcrum_balance::{EndpointId, Nanos};
use fulcrum_base::nanos;
use serde::{Deserialize, Serialize};

/// What became of one request, as the detector classifies it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestResult {
    /// Any response that is not a server error.
    Success,
    /// A 5xx response from the endpoint.
    ServerError,
    /// The endpoint could not be reached or broke off: connect failure,
    /// reset, timeout. Also counts as a server error.
    GatewayFailure,
}

/// Outlier-detection parameters (Envoy's names and defaults).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OutlierConfig {
    /// Server errors in a row that eject (0 disables the rule).
    pub consecutive_5xx: u32,
    /// Gateway failures in a row that eject (0 disables the rule).
    pub consecutive_gateway_failure: u32,
    /// How often the success-rate and failure-percentage rules run.
    #[serde(with = "fulcrum_config::duration")]
    pub interval: Duration,
    /// Ejection time per ejection so far.
    #[serde(with = "fulcrum_config::duration")]
    pub base_ejection_time: Duration,
    /// Longest ejection.
    #[serde(with = "fulcrum_config::duration")]
    pub max_ejection_time: Duration,
    /// Largest share of endpoints ejected at once, in percent (at least one endpoint).
    pub max_ejection_percent: f64,
    /// Endpoints with enough volume needed before the success-rate rule runs.
    pub success_rate_minimum_hosts: usize,
    /// Requests in an interval for an endpoint to count in the success-rate rule.
    pub success_rate_request_volume: u64,
    /// Ejection below mean − factor × stdev of success rates (0 disables the rule).
    pub success_rate_stdev_factor: f64,
    /// Failure percentage that ejects (above 100 disables the rule).
    pub failure_percentage_threshold: f64,
    /// Endpoints with enough volume needed before the failure-percentage rule runs.
    pub failure_percentage_minimum_hosts: usize,
    /// Requests in an interval for an endpoint to count in the failure-percentage rule.
    pub failure_percentage_request_volume: u64,
}

impl Default for OutlierConfig {
    fn default() -> Self {
        OutlierConfig {
            consecutive_5xx: 5,
            consecutive_gateway_failure: 5,
            interval: Duration::from_secs(10),
            base_ejection_time: Duration::from_secs(30),
            max_ejection_time: Duration::from_secs(300),
            max_ejection_percent: 10.0,
            success_rate_minimum_hosts: 5,
            success_rate_request_volume: 100,
            success_rate_stdev_factor: 1.9,
            failure_percentage_threshold: 85.0,
            failure_percentage_minimum_hosts: 5,
            failure_percentage_request_volume: 50,
        }
    }
}

impl OutlierConfig {
    /// Check every value; the error names the field.
    pub fn validate(&self) -> Result<(), String> {
        if self.interval.is_zero() {
            return Err("outlier_detection.interval must be greater than 0".into());
        }
        if self.base_ejection_time.is_zero() || self.max_ejection_time < self.base_ejection_time {
            return Err("outlier_detection: need 0 < base_ejection_time ≤ max_ejection_time".into());
        }
        if !(0.0..=100.0).contains(&self.max_ejection_percent) {
            return Err(format!(
                "outlier_detection.max_ejection_percent = {} is not in 0..=100",
                self.max_ejection_percent
            ));
        }
        if !(self.success_rate_stdev_factor >= 0.0 && self.success_rate_stdev_factor.is_finite()) {
            return Err("outlier_detection.success_rate_stdev_factor must be ≥ 0".into());
        }
        if self.failure_percentage_threshold.is_nan() || self.failure_percentage_threshold < 0.0 {
            return Err("outlier_detection.failure_percentage_threshold must be ≥ 0".into());
        }
        Ok(())
    }
}

/// Why an endpoint was ejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EjectionReason {
    /// `consecutive_5xx` server errors in a row.
    Consecutive5xx,
    /// `consecutive_gateway_failure` gateway failures in a row.
    ConsecutiveGatewayFailure,
    /// Success rate below the cluster's mean − k·stdev.
    SuccessRate,
    /// Failure percentage at or above the threshold.
    FailurePercentage,
}

/// A change of an endpoint's ejection state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// Ejected until `until`.
    Ejected {
        /// Which endpoint.
        id: EndpointId,
        /// Why.
        reason: EjectionReason,
        /// When it returns.
        until: Nanos,
    },
    /// Back in the set.
    Returned {
        /// Which endpoint.
        id: EndpointId,
    },
}

#[derive(Clone, Debug, Default)]
struct Host {
    consecutive_5xx: u32,
    consecutive_gateway: u32,
    /// Results in the current interval.
    successes: u64,
    failures: u64,
    times_ejected: u32,
    ejected_until: Option<Nanos>,
}

/// Outlier detection over one cluster's endpoints.
#[derive(Clone, Debug)]
pub struct OutlierDetector {
    config: OutlierConfig,
    hosts: HashMap<EndpointId, Host>,
    /// Endpoint order, for deterministic iteration.
    order: Vec<EndpointId>,
    next_interval: Nanos,
}

impl OutlierDetector {
    /// A detector for `endpoints`, starting its first interval at `now`.
    pub fn new(config: OutlierConfig, endpoints: &[EndpointId], now: Nanos) -> Self {
        let next_interval = now.saturating_add(nanos(config.interval));
        let mut d = OutlierDetector { config, hosts: HashMap::new(), order: Vec::new(), next_interval };
        d.set_endpoints(endpoints);
        d
    }

    /// The parameters.
    pub fn config(&self) -> &OutlierConfig {
        &self.config
    }

    /// Follow an endpoint-set change: endpoints that remain keep their state.
    pub fn set_endpoints(&mut self, endpoints: &[EndpointId]) {
        self.hosts.retain(|id, _| endpoints.contains(id));
        for id in endpoints {
            self.hosts.entry(*id).or_default();
        }
        self.order = endpoints.to_vec();
    }

    /// Whether `id` is ejected now.
    pub fn is_ejected(&self, id: EndpointId) -> bool {
        self.hosts.get(&id).is_some_and(|h| h.ejected_until.is_some())
    }

    /// How many endpoints are ejected.
    pub fn ejected_count(&self) -> usize {
        self.hosts.values().filter(|h| h.ejected_until.is_some()).count()
    }

    /// How many endpoints may be ejected at once: the percentage of the
    /// set, rounded down, but never less than one.
    pub fn max_ejections(&self) -> usize {
        let by_percent = (self.order.len() as f64 * self.config.max_ejection_percent / 100.0).floor() as usize;
        if self.config.max_ejection_percent > 0.0 {
            by_percent.max(1)
        } else {
            0
        }
    }

    fn try_eject(&mut self, id: EndpointId, now: Nanos, reason: EjectionReason) -> Option<Change> {
        if self.is_ejected(id) || self.ejected_count() >= self.max_ejections() {
            return None;
        }
        let base = nanos(self.config.base_ejection_time);
        let max = nanos(self.config.max_ejection_time);
        let host = self.hosts.get_mut(&id)?;
        host.times_ejected = host.times_ejected.saturating_add(1);
        let until = now.saturating_add(base.saturating_mul(u64::from(host.times_ejected)).min(max));
        host.ejected_until = Some(until);
        host.consecutive_5xx = 0;
        host.consecutive_gateway = 0;
        Some(Change::Ejected { id, reason, until })
    }

    /// Record one result of `id` at `now`; the consecutive rules may eject it at once.
    pub fn record(&mut self, id: EndpointId, now: Nanos, result: RequestResult) -> Option<Change> {
        let host = self.hosts.get_mut(&id)?;
        match result {
            RequestResult::Success => {
                host.successes += 1;
                host.consecutive_5xx = 0;
                host.consecutive_gateway = 0;
                None
            }
            RequestResult::ServerError | RequestResult::GatewayFailure => {
                host.failures += 1;
                host.consecutive_5xx += 1;
                if result == RequestResult::GatewayFailure {
                    host.consecutive_gateway += 1;
                } else {
                    host.consecutive_gateway = 0;
                }
                let gateway = self.config.consecutive_gateway_failure;
                let five = self.config.consecutive_5xx;
                if gateway > 0 && host.consecutive_gateway >= gateway {
                    self.try_eject(id, now, EjectionReason::ConsecutiveGatewayFailure)
                } else if five > 0 && host.consecutive_5xx >= five {
                    self.try_eject(id, now, EjectionReason::Consecutive5xx)
                } else {
                    None
                }
            }
        }
    }

    /// Return endpoints whose ejection has ended and, when an interval has
    /// passed, run the interval rules. Call it often (every few hundred
    /// milliseconds): returns are only as punctual as the calls.
    pub fn tick(&mut self, now: Nanos) -> Vec<Change> {
        let mut changes = Vec::new();
        for id in &self.order {
            if let Some(host) = self.hosts.get_mut(id) {
                if host.ejected_until.is_some_and(|until| until <= now) {
                    host.ejected_until = None;
                    changes.push(Change::Returned { id: *id });
                }
            }
        }
        if now >= self.next_interval {
            self.next_interval = now.saturating_add(nanos(self.config.interval));
            changes.extend(self.interval_rules(now));
            for host in self.hosts.values_mut() {
                if host.ejected_until.is_none() {
                    host.times_ejected = host.times_ejected.saturating_sub(1);
                }
                host.successes = 0;
                host.failures = 0;
            }
        }
        changes
    }

    fn interval_rules(&mut self, now: Nanos) -> Vec<Change> {
        let mut changes = Vec::new();
        let c = self.config.clone();
        // (id, success rate) of un-ejected endpoints with enough volume.
        let volume = |d: &Self, min: u64| -> Vec<(EndpointId, f64)> {
            d.order
                .iter()
                .filter_map(|id| {
                    let h = &d.hosts[id];
                    let total = h.successes + h.failures;
                    (h.ejected_until.is_none() && total >= min && total > 0)
                        .then(|| (*id, h.successes as f64 / total as f64))
                })
                .collect()
        };
        if c.success_rate_stdev_factor > 0.0 {
            let rates = volume(self, c.success_rate_request_volume);
            if rates.len() >= c.success_rate_minimum_hosts && !rates.is_empty() {
                let n = rates.len() as f64;
                let mean = rates.iter().map(|r| r.1).sum::<f64>() / n;
                let var = rates.iter().map(|r| (r.1 - mean).powi(2)).sum::<f64>() / n;
                let threshold = mean - c.success_rate_stdev_factor * var.sqrt();
                for (id, rate) in rates {
                    if rate < threshold {
                        changes.extend(self.try_eject(id, now, EjectionReason::SuccessRate));
                    }
                }
            }
        }
        if c.failure_percentage_threshold <= 100.0 {
            let rates = volume(self, c.failure_percentage_request_volume);
            if rates.len() >= c.failure_percentage_minimum_hosts {
                for (id, rate) in rates {
                    if (1.0 - rate) * 100.0 >= c.failure_percentage_threshold {
                        changes.extend(self.try_eject(id, now, EjectionReason::FailurePercentage));
                    }
                }
            }
        }
        changes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Nanos = 1_000_000_000;

    fn ids(n: u64) -> Vec<EndpointId> {
        (0..n).map(EndpointId).collect()
    }

    #[test]
    fn five_consecutive_5xx_eject_even_on_a_small_cluster() {
        let mut d = OutlierDetector::new(OutlierConfig::default(), &ids(3), 0);
        assert_eq!(d.max_ejections(), 1, "10 % of 3 rounds to 0; one is still allowed");
        for _ in 0..4 {
            assert_eq!(d.record(EndpointId(0), S, RequestResult::ServerError), None);
        }
        let change = d.record(EndpointId(0), S, RequestResult::ServerError);
        assert_eq!(
            change,
            Some(Change::Ejected { id: EndpointId(0), reason: EjectionReason::Consecutive5xx, until: 31 * S })
        );
        assert!(d.is_ejected(EndpointId(0)));
        // The cap holds: a second bad endpoint stays in.
        for _ in 0..10 {
            d.record(EndpointId(1), S, RequestResult::GatewayFailure);
        }
        assert!(!d.is_ejected(EndpointId(1)));
    }

    #[test]
    fn a_success_resets_the_streak() {
        let mut d = OutlierDetector::new(OutlierConfig::default(), &ids(3), 0);
        for _ in 0..4 {
            d.record(EndpointId(0), 0, RequestResult::ServerError);
        }
        d.record(EndpointId(0), 0, RequestResult::Success);
        for _ in 0..4 {
            assert_eq!(d.record(EndpointId(0), 0, RequestResult::ServerError), None);
        }
    }

    #[test]
    fn ejection_time_grows_with_repeats_up_to_the_maximum_and_returns() {
        let config = OutlierConfig { max_ejection_time: Duration::from_secs(70), ..OutlierConfig::default() };
        let mut d = OutlierDetector::new(config, &ids(3), 0);
        let mut now = 0;
        let mut lengths = Vec::new();
        for _ in 0..3 {
            let mut change = None;
            for _ in 0..5 {
                change = d.record(EndpointId(2), now, RequestResult::GatewayFailure);
            }
            let Some(Change::Ejected { until, .. }) = change else { panic!("not ejected: {change:?}") };
            lengths.push((until - now) / S);
            // Not back before `until`, back at it.
            assert!(d.tick(until - 1).iter().all(|c| !matches!(c, Change::Returned { .. })));
            now = until;
            let back = d.tick(now);
            assert!(back.contains(&Change::Returned { id: EndpointId(2) }), "{back:?}");
        }
        assert_eq!(lengths, vec![30, 60, 70]);
    }

    #[test]
    fn success_rate_rule_ejects_the_outlier_at_the_interval() {
        let mut d = OutlierDetector::new(OutlierConfig::default(), &ids(6), 0);
        for id in 0..6 {
            for i in 0..200 {
                // Endpoint 5 fails one request in four, scattered (no streak of 5).
                let bad = id == 5 && i % 4 == 0;
                d.record(EndpointId(id), 0, if bad { RequestResult::ServerError } else { RequestResult::Success });
            }
        }
        assert!(!d.is_ejected(EndpointId(5)));
        assert!(d.tick(9 * S).is_empty(), "not before the interval");
        let changes = d.tick(10 * S);
        assert_eq!(changes.len(), 1, "{changes:?}");
        assert!(matches!(changes[0], Change::Ejected { id: EndpointId(5), reason: EjectionReason::SuccessRate, .. }));
    }

    /// Feeds `per_host` results to each of `n` endpoints; endpoint 0 fails
    /// `bad_in_ten` of every ten, scattered so no streak reaches five.
    fn feed(d: &mut OutlierDetector, n: u64, per_host: u64, bad_in_ten: u64) {
        for id in 0..n {
            for i in 0..per_host {
                let bad = id == 0 && i % 10 < bad_in_ten && i % 5 != 4;
                d.record(EndpointId(id), 0, if bad { RequestResult::ServerError } else { RequestResult::Success });
            }
        }
    }

    #[test]
    fn success_rate_rule_needs_volume() {
        // Only the success-rate rule is on; the volume is 100 requests.
        let config = OutlierConfig {
            consecutive_5xx: 0,
            consecutive_gateway_failure: 0,
            failure_percentage_threshold: 101.0,
            ..OutlierConfig::default()
        };
        assert_eq!(config.success_rate_request_volume, 100);
        // 99 requests each, endpoint 0 failing 40 % of them: below the
        // volume no endpoint counts, so nothing is ejected.
        let mut below = OutlierDetector::new(config.clone(), &ids(6), 0);
        feed(&mut below, 6, 99, 5);
        assert_eq!(below.tick(10 * S), vec![], "below the volume");
        assert!(!below.is_ejected(EndpointId(0)));
        // The same failure rate at exactly the volume ejects endpoint 0.
        let mut at = OutlierDetector::new(config, &ids(6), 0);
        feed(&mut at, 6, 100, 5);
        let changes = at.tick(10 * S);
        assert!(
            matches!(changes[..], [Change::Ejected { id: EndpointId(0), reason: EjectionReason::SuccessRate, .. }]),
            "{changes:?}"
        );
    }

    #[test]
    fn failure_percentage_rule_needs_volume() {
        let config = OutlierConfig { success_rate_stdev_factor: 0.0, ..OutlierConfig::default() };
        let mut d = OutlierDetector::new(config, &ids(5), 0);
        for id in 0..5 {
            for i in 0..60 {
                let bad = id == 0 && i % 10 != 0; // 90 % failures, streaks broken
                d.record(EndpointId(id), 0, if bad { RequestResult::ServerError } else { RequestResult::Success });
            }
        }
        // Endpoint 0's streaks of 9 would eject via consecutive_5xx first.
        assert!(d.is_ejected(EndpointId(0)));
        let config = OutlierConfig { consecutive_5xx: 0, success_rate_stdev_factor: 0.0, ..OutlierConfig::default() };
        assert_eq!(config.failure_percentage_request_volume, 50);
        // A 30 % threshold, so that endpoint 0's 40 % failures eject unless
        // the volume (50 requests) stops the rule: 49 each do not count.
        let config = OutlierConfig { failure_percentage_threshold: 30.0, ..config };
        let mut below = OutlierDetector::new(config.clone(), &ids(5), 0);
        feed(&mut below, 5, 49, 5);
        assert_eq!(below.tick(10 * S), vec![], "below the volume");
        let mut at = OutlierDetector::new(config, &ids(5), 0);
        feed(&mut at, 5, 50, 5);
        let changes = at.tick(10 * S);
        assert!(
            matches!(
                changes[..],
                [Change::Ejected { id: EndpointId(0), reason: EjectionReason::FailurePercentage, .. }]
            ),
            "{changes:?}"
        );
    }

    #[test]
    fn endpoint_changes_keep_remaining_state() {
        let mut d = OutlierDetector::new(OutlierConfig::default(), &ids(3), 0);
        for _ in 0..5 {
            d.record(EndpointId(1), 0, RequestResult::ServerError);
        }
        d.set_endpoints(&[EndpointId(1), EndpointId(7)]);
        assert!(d.is_ejected(EndpointId(1)));
        assert!(!d.is_ejected(EndpointId(7)));
        assert_eq!(d.record(EndpointId(0), 0, RequestResult::ServerError), None, "removed endpoints are ignored");
    }
}

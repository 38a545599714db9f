//! One cluster's health as a single state machine: which endpoints are
//! members, what active health checks say of them, whom outlier detection
//! has ejected, how far each is in its slow start, and whether the cluster is
//! in panic. Both drivers (the simulator's `Guard`, the proxy's `Membership`)
//! feed it events and ask [`ClusterHealth::routable`] for the set to give
//! their balancers, so a scenario and the proxy route alike (Envoy keeps the
//! same pieces in its cluster's host set: health flags per host, outlier
//! ejection, slow start, panic routing).
//!
//! Time is passed in. Slow-start weights change continuously; they are
//! evaluated at the start of the current [`STEP`] (time rounded down to a
//! multiple of it), so the answer depends only on the events and the step,
//! not on when a driver happens to ask. A driver that asks at every step
//! and after every event sees every change; [`Snapshot::version`] tells it
//! when to rebuild its balancers.

use std::collections::HashMap;

use fulcrum_balance::{Endpoint, EndpointId, Nanos};

use crate::{routable, Change, OutlierConfig, OutlierDetector, RequestResult, SlowStart, SlowStartConfig};

/// The slow-start step, shared by every driver: weights are those of the
/// start of the current 100 ms. A tenth of a second is what the outlier
/// detector's timer already runs at (returns from ejection are late by less
/// than that), it keeps a short window smooth (a 2 s ramp still has 20
/// steps) and costs a 30 s ramp 300 balancer rebuilds, only while ramping.
pub const STEP: Nanos = 100_000_000;

/// Active health-check thresholds (Envoy's `healthy_threshold` and
/// `unhealthy_threshold`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckThresholds {
    /// Passing checks in a row that make an unhealthy endpoint healthy.
    pub healthy: u32,
    /// Failing checks in a row that make a healthy endpoint unhealthy.
    pub unhealthy: u32,
}

/// What a cluster's health is made of; `None` turns a mechanism off.
#[derive(Clone, Debug, PartialEq)]
pub struct HealthConfig {
    /// Passive outlier detection.
    pub outlier_detection: Option<OutlierConfig>,
    /// Slow start of endpoints that join or return.
    pub slow_start: Option<SlowStartConfig>,
    /// Active health checks (without them every member is healthy).
    pub health_check: Option<CheckThresholds>,
    /// Below this percentage of healthy endpoints, route to all of them.
    pub panic_threshold: f64,
}

/// The answer to "where may requests go now".
#[derive(Clone, Debug, PartialEq)]
pub struct Snapshot {
    /// The endpoints to give the balancers, weights scaled by slow start.
    pub endpoints: Vec<Endpoint>,
    /// Too few endpoints are healthy, so all are routable.
    pub panic: bool,
    /// Factor in (0, 1] for the cluster's limit on requests in flight: the
    /// mean slow-start factor while *every* member is ramping (weights are
    /// relative, so ramping them all alike would change nothing), else 1.
    pub request_limit_factor: f64,
    /// Bumped whenever any of the above changes.
    pub version: u64,
}

#[derive(Clone, Debug)]
struct Member {
    endpoint: Endpoint,
    /// The active checks' verdict.
    healthy: bool,
    /// Checks in a row that disagreed with `healthy`.
    streak: u32,
    /// When it joined or last came back (slow start's clock); `None` for
    /// members that were there from the start.
    ramp_from: Option<Nanos>,
}

/// Membership, health checks, outlier ejection, slow start and panic of one
/// cluster (see the module documentation).
#[derive(Clone, Debug)]
pub struct ClusterHealth {
    config: HealthConfig,
    members: Vec<Member>,
    detector: Option<OutlierDetector>,
    slow_start: Option<SlowStart>,
    snapshot: Snapshot,
    /// An event changed the state since the snapshot was computed.
    stale: bool,
    /// The step the snapshot was computed for.
    step: Nanos,
    /// Some member was still ramping at that step.
    ramping: bool,
}

impl ClusterHealth {
    /// A cluster whose members at `now` are `established`: they take their
    /// full share at once. The error names a bad slow-start field.
    pub fn new(config: HealthConfig, established: &[Endpoint], now: Nanos) -> Result<ClusterHealth, String> {
        let slow_start = config.slow_start.as_ref().map(SlowStart::new).transpose()?;
        let ids: Vec<EndpointId> = established.iter().map(|e| e.id).collect();
        let detector = config.outlier_detection.clone().map(|c| OutlierDetector::new(c, &ids, now));
        let members = established
            .iter()
            .map(|e| Member { endpoint: e.clone(), healthy: true, streak: 0, ramp_from: None })
            .collect();
        let snapshot = Snapshot { endpoints: Vec::new(), panic: false, request_limit_factor: 1.0, version: 0 };
        Ok(ClusterHealth { config, members, detector, slow_start, snapshot, stale: true, step: 0, ramping: false })
    }

    /// The same members with their health, ejections and ramps, under a new
    /// `config` (a reload): the detector's state is kept if its parameters
    /// are the same, and without health checks every member is healthy.
    pub fn reconfigured(&self, config: HealthConfig, now: Nanos) -> Result<ClusterHealth, String> {
        let mut next = ClusterHealth::new(config, &[], now)?;
        next.members = self.members.clone();
        let ids: Vec<EndpointId> = next.members.iter().map(|m| m.endpoint.id).collect();
        match (&mut next.detector, &self.detector) {
            (Some(new), Some(old)) if new.config() == old.config() => *new = old.clone(),
            (Some(new), _) => new.set_endpoints(&ids),
            (None, _) => {}
        }
        if next.config.health_check.is_none() {
            next.members.iter_mut().for_each(|m| (m.healthy, m.streak) = (true, 0));
        }
        Ok(next)
    }

    /// The configuration in force.
    pub fn config(&self) -> &HealthConfig {
        &self.config
    }

    /// Make the members exactly `endpoints` at `now`, in that order. Those
    /// that remain keep their state (and take the new weight and name);
    /// newcomers are healthy and start their slow start.
    pub fn set_members(&mut self, endpoints: &[Endpoint], now: Nanos) {
        let mut old: HashMap<EndpointId, Member> =
            std::mem::take(&mut self.members).into_iter().map(|m| (m.endpoint.id, m)).collect();
        self.members = endpoints
            .iter()
            .map(|e| match old.remove(&e.id) {
                Some(m) => Member { endpoint: e.clone(), ..m },
                None => Member { endpoint: e.clone(), healthy: true, streak: 0, ramp_from: Some(now) },
            })
            .collect();
        if let Some(d) = &mut self.detector {
            let ids: Vec<EndpointId> = endpoints.iter().map(|e| e.id).collect();
            d.set_endpoints(&ids);
        }
        self.stale = true;
    }

    /// Every member, routable or not, with its configured weight.
    pub fn members(&self) -> impl Iterator<Item = &Endpoint> {
        self.members.iter().map(|m| &m.endpoint)
    }

    /// A request to `id` ended at `now` with `result`; returns the ejection
    /// it caused, if any.
    pub fn record(&mut self, id: EndpointId, now: Nanos, result: RequestResult) -> Option<Change> {
        let change = self.detector.as_mut()?.record(id, now, result);
        self.stale |= change.is_some();
        change
    }

    /// Run the detector's timer at `now`: interval rules and returns from
    /// ejection (a returning endpoint starts its slow start again).
    pub fn tick(&mut self, now: Nanos) -> Vec<Change> {
        let Some(d) = &mut self.detector else { return Vec::new() };
        let changes = d.tick(now);
        for change in &changes {
            if let Change::Returned { id } = change {
                if let Some(m) = self.members.iter_mut().find(|m| m.endpoint.id == *id) {
                    m.ramp_from = Some(now);
                }
            }
        }
        self.stale |= !changes.is_empty();
        changes
    }

    /// An active health check of `id` at `now` `passed` or not. Returns the
    /// new verdict when the thresholds flip it (an endpoint that becomes
    /// healthy starts its slow start); checks are ignored when the
    /// configuration has none.
    pub fn record_check(&mut self, id: EndpointId, passed: bool, now: Nanos) -> Option<bool> {
        let thresholds = self.config.health_check?;
        let m = self.members.iter_mut().find(|m| m.endpoint.id == id)?;
        if passed == m.healthy {
            m.streak = 0;
            return None;
        }
        m.streak += 1;
        if m.streak < if passed { thresholds.healthy } else { thresholds.unhealthy } {
            return None;
        }
        (m.healthy, m.streak) = (passed, 0);
        if passed {
            m.ramp_from = Some(now);
        }
        self.stale = true;
        Some(passed)
    }

    /// Whether outlier detection has `id` ejected now.
    pub fn is_ejected(&self, id: EndpointId) -> bool {
        self.detector.as_ref().is_some_and(|d| d.is_ejected(id))
    }

    /// Whether active checks call `id` healthy (an unknown id is).
    pub fn is_healthy(&self, id: EndpointId) -> bool {
        self.members.iter().find(|m| m.endpoint.id == id).is_none_or(|m| m.healthy)
    }

    /// Members that are healthy and not ejected.
    pub fn healthy_count(&self) -> usize {
        self.members.iter().filter(|m| m.healthy && !self.is_ejected(m.endpoint.id)).count()
    }

    /// The routable set at `now` (see [`Snapshot`]); computed again only
    /// after an event or, while some member ramps, in a new step.
    pub fn routable(&mut self, now: Nanos) -> &Snapshot {
        let step = now - now % STEP;
        if !self.stale && (step == self.step || !self.ramping) {
            return &self.snapshot;
        }
        let factors: Vec<f64> = self
            .members
            .iter()
            .map(|m| match (&self.slow_start, m.ramp_from) {
                (Some(s), Some(from)) => s.factor(step.saturating_sub(from)),
                _ => 1.0,
            })
            .collect();
        let all: Vec<Endpoint> = self.members.iter().map(|m| m.endpoint.clone()).collect();
        // Per member, by id: whether it is healthy and not ejected, and its factor.
        let state: HashMap<EndpointId, (bool, f64)> = self
            .members
            .iter()
            .zip(&factors)
            .map(|(m, &f)| (m.endpoint.id, (m.healthy && !self.is_ejected(m.endpoint.id), f)))
            .collect();
        let set = routable(
            &all,
            |e| state.get(&e.id).is_some_and(|s| s.0),
            |e| state.get(&e.id).map_or(1.0, |s| s.1),
            self.config.panic_threshold,
        );
        let all_ramping = self.slow_start.is_some() && !factors.is_empty() && factors.iter().all(|&f| f < 1.0);
        let request_limit_factor = if all_ramping { factors.iter().sum::<f64>() / factors.len() as f64 } else { 1.0 };
        let s = &mut self.snapshot;
        if s.endpoints != set.endpoints || s.panic != set.panic || s.request_limit_factor != request_limit_factor {
            *s = Snapshot { endpoints: set.endpoints, panic: set.panic, request_limit_factor, version: s.version + 1 };
        }
        self.stale = false;
        self.step = step;
        self.ramping = factors.iter().any(|&f| f < 1.0);
        &self.snapshot
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Nanos = 1_000_000_000;

    fn eps(ids: &[u64]) -> Vec<Endpoint> {
        ids.iter().map(|&i| Endpoint::new(i, format!("e{i}"))).collect()
    }

    fn config() -> HealthConfig {
        HealthConfig {
            outlier_detection: Some(OutlierConfig::default()),
            slow_start: Some(SlowStartConfig::default()),
            health_check: Some(CheckThresholds { healthy: 2, unhealthy: 2 }),
            panic_threshold: 50.0,
        }
    }

    fn weights(h: &mut ClusterHealth, now: Nanos) -> Vec<(u64, f64)> {
        h.routable(now).endpoints.iter().map(|e| (e.id.0, e.weight)).collect()
    }

    #[test]
    fn a_joiner_ramps_in_steps_and_the_version_follows_changes() {
        let mut h = ClusterHealth::new(config(), &eps(&[0, 1]), 0).unwrap();
        assert_eq!(weights(&mut h, 0), vec![(0, 1.0), (1, 1.0)]);
        let v = h.routable(0).version;
        assert_eq!(h.routable(S).version, v, "nothing ramps: nothing changes");
        h.set_members(&eps(&[0, 1, 2]), 10 * S + 50_000_000);
        // Weights are those of the step's start: 24.9 s until 25 s.
        let before = h.routable(25 * S - 1).endpoints[2].weight;
        assert!((before - (24.9 - 10.05) / 30.0).abs() < 1e-12, "{before}");
        let at = h.routable(25 * S).endpoints[2].weight;
        assert!((at - (25.0 - 10.05) / 30.0).abs() < 1e-12, "{at}");
        assert!(h.routable(41 * S).endpoints[2].weight == 1.0);
        let v = h.routable(41 * S).version;
        assert_eq!(h.routable(50 * S).version, v, "ramp over: no more versions");
        assert_eq!(h.routable(50 * S).request_limit_factor, 1.0, "established members were there");
    }

    #[test]
    fn checks_flip_after_thresholds_and_panic_brings_all_back() {
        let mut h = ClusterHealth::new(config(), &eps(&[0, 1, 2]), 0).unwrap();
        assert_eq!(h.record_check(EndpointId(0), false, 0), None);
        assert_eq!(h.record_check(EndpointId(0), false, 0), Some(false));
        assert_eq!(h.routable(0).endpoints.len(), 2);
        h.record_check(EndpointId(1), false, 0);
        h.record_check(EndpointId(1), false, 0);
        let s = h.routable(0);
        assert!(s.panic && s.endpoints.len() == 3, "one of three healthy is under 50 %");
        h.record_check(EndpointId(0), true, S);
        assert_eq!(h.record_check(EndpointId(0), true, S), Some(true));
        let s = h.routable(S);
        assert!(!s.panic);
        assert_eq!(s.endpoints.iter().map(|e| e.id.0).collect::<Vec<_>>(), vec![0, 2]);
        assert_eq!(s.endpoints[0].weight, 0.1, "back from unhealthy: slow start again");
    }

    #[test]
    fn an_all_new_set_ramps_the_request_limit() {
        let mut h = ClusterHealth::new(config(), &[], 0).unwrap();
        h.set_members(&eps(&[0, 1]), 0);
        assert_eq!(h.routable(0).request_limit_factor, 0.1);
        assert!((h.routable(15 * S).request_limit_factor - 0.5).abs() < 1e-12);
        assert_eq!(h.routable(30 * S).request_limit_factor, 1.0);
    }

    #[test]
    fn a_reload_keeps_health_and_ejections() {
        let mut h = ClusterHealth::new(config(), &eps(&[0, 1, 2]), 0).unwrap();
        h.record_check(EndpointId(0), false, 0);
        h.record_check(EndpointId(0), false, 0);
        for _ in 0..5 {
            h.record(EndpointId(1), 0, RequestResult::ServerError);
        }
        assert!(h.is_ejected(EndpointId(1)));
        let next = h.reconfigured(config(), S).unwrap();
        assert!(!next.is_healthy(EndpointId(0)) && next.is_ejected(EndpointId(1)));
        let without_checks = HealthConfig { health_check: None, ..config() };
        assert!(h.reconfigured(without_checks, S).unwrap().is_healthy(EndpointId(0)));
    }
}

//! Outlier ejection, slow start, the panic threshold and retries in the
//! simulator, driven by the very state machines of `fulcrum_resilience` that
//! the proxy uses.
//!
//! A scenario turns each mechanism on with its own section
//! ([`Resilience`]: `[outlier_detection]`, `[slow_start]`, `[retries]`,
//! `panic_threshold`); all are off by default, so older scenarios run exactly
//! as before. Each balancer instance gets a [`Guard`]: its own
//! [`ClusterHealth`] (the state machine the proxy's membership is made of)
//! and [`RetryBudget`], as each proxy process would have. The guard asks it
//! for the endpoint set the balancer sees and hands it over with
//! `set_endpoints` only when its version changed: on an ejection, a return, a
//! join or leave, and at each slow-start step (every [`TICK`] of simulated
//! time, when the detector is also ticked).

use std::str::FromStr;

use fulcrum_balance::{Balancer, Endpoint, EndpointId, Nanos};
use fulcrum_resilience::{
    Change, CheckThresholds, ClusterHealth, HealthConfig, LimitKey, OutlierConfig, RateLimitConfig, RateLimiter,
    RetryBudget, RetryOn, RetryPolicy, SlowStartConfig, Snapshot, STEP,
};

use crate::dist::nanos;

/// How often the detector is ticked and slow-start weights are stepped, in
/// simulated time: the step every driver uses ([`fulcrum_resilience::STEP`]);
/// returns from ejection are late by less than this.
pub const TICK: Nanos = STEP;

/// The resilience settings of a scenario. Everything is off by default.
#[derive(Debug, Clone, PartialEq)]
pub struct Resilience {
    /// Passive outlier detection (`[outlier_detection]`).
    pub outlier_detection: Option<OutlierConfig>,
    /// Slow start for endpoints that join or return (`[slow_start]`).
    pub slow_start: Option<SlowStartConfig>,
    /// Retries (`[retries]`).
    pub retries: Option<RetryPolicy>,
    /// Below this percentage of healthy endpoints, balance over all of them.
    pub panic_threshold: f64,
    /// Active health-check thresholds. Scenario files cannot set them (no
    /// simulated component sends checks yet); a driver that feeds
    /// [`Guard::record_check`] does.
    pub health_check: Option<CheckThresholds>,
    /// A rate limit in front of the cluster, at each balancer (`rate_limit`):
    /// the proxy's limiter.
    pub rate_limit: Option<RateLimitConfig>,
}

impl Default for Resilience {
    fn default() -> Self {
        Resilience {
            outlier_detection: None,
            slow_start: None,
            retries: None,
            panic_threshold: 50.0,
            health_check: None,
            rate_limit: None,
        }
    }
}

impl Resilience {
    /// The per-try timeout of retries, if any.
    pub fn per_try_timeout(&self) -> Option<Nanos> {
        self.retries.as_ref().and_then(|r| r.per_try_timeout).map(nanos)
    }

    /// What each balancer's [`ClusterHealth`] is made of.
    pub fn health_config(&self) -> HealthConfig {
        HealthConfig {
            outlier_detection: self.outlier_detection.clone(),
            slow_start: self.slow_start.clone(),
            health_check: self.health_check,
            panic_threshold: self.panic_threshold,
        }
    }

    /// Whether any mechanism is on (the report then has a resilience part).
    pub fn enabled(&self) -> bool {
        self.outlier_detection.is_some()
            || self.slow_start.is_some()
            || self.retries.is_some()
            || self.rate_limit.is_some()
    }

    /// Whether the balancers' endpoint sets are managed (ejection or slow start).
    pub fn manages_endpoints(&self) -> bool {
        self.outlier_detection.is_some() || self.slow_start.is_some()
    }

    /// Turn `mechanism` off (the command line's `--without`).
    pub fn disable(&mut self, mechanism: Mechanism) {
        match mechanism {
            Mechanism::OutlierDetection => self.outlier_detection = None,
            Mechanism::SlowStart => self.slow_start = None,
            Mechanism::Retries => self.retries = None,
            Mechanism::RetryBudget => {
                if let Some(r) = &mut self.retries {
                    r.budget = None;
                }
            }
            Mechanism::RateLimit => self.rate_limit = None,
        }
    }
}

/// One mechanism, as named on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mechanism {
    /// `outlier-detection`.
    OutlierDetection,
    /// `slow-start`.
    SlowStart,
    /// `retries`.
    Retries,
    /// `retry-budget`: retries stay on, without their budget.
    RetryBudget,
    /// `rate-limit`.
    RateLimit,
}

impl FromStr for Mechanism {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().replace('_', "-").as_str() {
            "outlier-detection" | "outlier" | "ejection" => Ok(Mechanism::OutlierDetection),
            "slow-start" => Ok(Mechanism::SlowStart),
            "retries" | "retry" => Ok(Mechanism::Retries),
            "retry-budget" | "budget" => Ok(Mechanism::RetryBudget),
            "rate-limit" => Ok(Mechanism::RateLimit),
            other => Err(format!(
                "unknown mechanism {other:?} (outlier-detection, slow-start, retries, retry-budget, rate-limit)"
            )),
        }
    }
}

/// How a try ended, as the balancer sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TryResult {
    /// A good response.
    Ok,
    /// An error response (a 5xx).
    ServerError,
    /// No response in time.
    Timeout,
    /// The connection was refused.
    Refused,
}

impl TryResult {
    fn for_detector(self) -> fulcrum_resilience::RequestResult {
        use fulcrum_resilience::RequestResult;
        match self {
            TryResult::Ok => RequestResult::Success,
            TryResult::ServerError => RequestResult::ServerError,
            TryResult::Timeout | TryResult::Refused => RequestResult::GatewayFailure,
        }
    }

    /// Whether `retries` retries a try that ended like this.
    pub fn retried_by(self, retries: &RetryPolicy) -> bool {
        match self {
            TryResult::Ok => false,
            TryResult::ServerError => retries.retries(RetryOn::ServerError),
            TryResult::Timeout => retries.retries(RetryOn::Timeout),
            TryResult::Refused => retries.retries(RetryOn::ConnectFailure),
        }
    }
}

/// What a run counts of the mechanisms.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ResilienceStats {
    /// Retries made for measured requests.
    pub retries: u64,
    /// Retries of measured requests that the budget refused.
    pub retries_denied: u64,
    /// Ejections, all balancers together.
    pub ejections: u64,
    /// Per server: when a balancer first ejected it.
    pub first_ejection: Vec<Option<Nanos>>,
    /// Per server: time from the event that made it fail (or slow down) to
    /// its first ejection after it, if it was failing then.
    pub time_to_ejection: Vec<Option<Nanos>>,
    /// Time spent in panic, mean over the balancers.
    pub panic: Nanos,
    /// Measured requests the rate limit refused (`None` without one).
    pub rate_limited: Option<u64>,
    /// Measured requests refused because `balancers.max_requests` tries
    /// were in flight (`None` without that limit).
    pub overflows: Option<u64>,
}

/// One balancer's resilience state: a thin adapter over
/// [`ClusterHealth`], the state machine the proxy's `Membership` drives too
/// (`crates/proxy/tests/conformance.rs` feeds both the same events and
/// checks that they route alike). It adds what only the simulator needs:
/// server indices as endpoint ids, the retry budget and the time in panic.
pub struct Guard {
    health: ClusterHealth,
    /// Every server as an endpoint (id = index).
    all: Vec<Endpoint>,
    /// Per server: whether it is in the balancer's membership (joined).
    member: Vec<bool>,
    /// The snapshot version the balancer was last given.
    applied: u64,
    /// The retry budget, when the scenario has one.
    pub budget: Option<RetryBudget>,
    panic_since: Option<Nanos>,
    /// Time spent in panic so far.
    pub panic_total: Nanos,
    /// The rate limit, and whether it keeps a bucket per client.
    limiter: Option<(RateLimiter, bool)>,
}

impl Guard {
    /// The state of one balancer over `all` servers (ids are indices), of
    /// which `member` are joined at `now` (and established: no slow start).
    pub fn new(r: &Resilience, all: &[Endpoint], member: Vec<bool>, now: Nanos) -> Guard {
        let joined: Vec<Endpoint> = all.iter().zip(&member).filter(|(_, &m)| m).map(|(e, _)| e.clone()).collect();
        let mut health =
            ClusterHealth::new(r.health_config(), &joined, now).expect("validated when the scenario was read");
        let applied = health.routable(now).version;
        Guard {
            health,
            all: all.to_vec(),
            member,
            applied,
            budget: r.retries.as_ref().and_then(|x| x.budget.clone()).map(|b| RetryBudget::new(b).expect("validated")),
            panic_since: None,
            panic_total: 0,
            limiter: r
                .rate_limit
                .as_ref()
                .map(|l| (RateLimiter::new(l).expect("validated"), l.key == Some(LimitKey::Client))),
        }
    }

    /// Whether the rate limit (if any) lets a request of `client` through at `now`.
    pub fn admit(&mut self, client: u32, now: Nanos) -> bool {
        match &mut self.limiter {
            None => true,
            Some((limiter, true)) => limiter.check_key(u64::from(client), now).is_ok(),
            Some((limiter, false)) => limiter.check(now).is_ok(),
        }
    }

    /// Follow a membership change at `now`: a server that joins starts its
    /// slow start.
    pub fn set_member(&mut self, server: usize, member: bool, now: Nanos) {
        self.member[server] = member;
        let joined: Vec<Endpoint> =
            self.all.iter().zip(&self.member).filter(|(_, &m)| m).map(|(e, _)| e.clone()).collect();
        self.health.set_members(&joined, now);
    }

    /// Record a try's result; returns the server ejected by it, if any.
    pub fn record(&mut self, server: u32, now: Nanos, result: TryResult) -> Option<u32> {
        match self.health.record(EndpointId(u64::from(server)), now, result.for_detector()) {
            Some(Change::Ejected { id, .. }) => Some(id.0 as u32),
            _ => None,
        }
    }

    /// An active health check of `server` at `now`. Scenarios have no
    /// checks yet (nothing in the simulator produces them); the conformance
    /// test feeds them so both adapters take the same events.
    pub fn record_check(&mut self, server: u32, passed: bool, now: Nanos) {
        self.health.record_check(EndpointId(u64::from(server)), passed, now);
    }

    /// Tick the detector at `now`; returns the servers it ejected.
    pub fn tick(&mut self, now: Nanos) -> Vec<u32> {
        let changes = self.health.tick(now);
        changes
            .into_iter()
            .filter_map(|c| if let Change::Ejected { id, .. } = c { Some(id.0 as u32) } else { None })
            .collect()
    }

    /// The routable set at `now`, as [`Guard::apply`] gives it.
    pub fn routable(&mut self, now: Nanos) -> &Snapshot {
        self.health.routable(now)
    }

    /// Compute the routable set at `now` and give it to `balancer` if it
    /// changed since the last time; count time in panic.
    pub fn apply(&mut self, balancer: &mut dyn Balancer, now: Nanos) {
        let snapshot = self.health.routable(now);
        match (snapshot.panic, self.panic_since) {
            (true, None) => self.panic_since = Some(now),
            (false, Some(t)) => {
                self.panic_total += now - t;
                self.panic_since = None;
            }
            _ => {}
        }
        if snapshot.version != self.applied {
            // Weights are scaled by factors in (0, 1] of valid weights and
            // ids are unique, so the set is valid.
            balancer.set_endpoints(&snapshot.endpoints).expect("a routable set of valid endpoints is valid");
            self.applied = snapshot.version;
        }
    }

    /// Close the books at the end of the run.
    pub fn finish(&mut self, now: Nanos) {
        if let Some(t) = self.panic_since.take() {
            self.panic_total += now.saturating_sub(t);
        }
    }
}

//! Peak-EWMA with power of two choices (Finagle's `PeakEwma`, tower's
//! `load::PeakEwma` and Linkerd's balancer).
//!
//! Each endpoint keeps a latency estimate. A sample above the estimate
//! replaces it at once (peaks are taken immediately); a sample below it is
//! blended in with weight `1 − exp(−elapsed/τ)`, where `elapsed` is the time
//! since the estimate was last touched. Reading the estimate applies a zero
//! sample, so an endpoint that is not used decays towards zero and gets
//! probed again. A pick draws two distinct endpoints and keeps the one with
//! the lower cost `estimate × (pending + 1) ÷ weight`.
//!
//! Beyond tower:
//! - weights divide the cost;
//! - a failed request counts as at least `failure_penalty`, so an endpoint
//!   that fails fast does not look fast;
//! - with `unmeasured_penalty`, an endpoint that has requests pending but no
//!   sample yet costs a huge constant plus its pending count (Finagle's start,
//!   used with `default_rtt = 0`, as the seed-000 model does);
//! - the first sample of an endpoint replaces `default_rtt` outright
//!   ([`ColdStart::FirstSample`], the default). In tower and Finagle a first
//!   sample below the default is blended in like any other, so a fast
//!   endpoint keeps most of the default for about τ (10 s): meanwhile one
//!   request in flight (default × 2) makes it look worse than a slow endpoint
//!   that is idle, and a start or a reload costs seconds of tail latency.
//!   With that start an endpoint without a sample and without a request in
//!   flight costs nothing, so it is probed at once: otherwise, once the
//!   others are measured fast, the last endpoints to be measured (and any a
//!   reload adds) would look like `default_rtt` and get no request until
//!   that decayed below the others' latency, tens of seconds.
//!   [`ColdStart::DefaultRtt`] keeps tower's behaviour (the seed-004
//!   reproduction of tower's demo uses it). With `default_rtt = 0` the two
//!   agree: any sample is a peak above zero, and an unmeasured idle endpoint
//!   costs 0 either way.
//!
//! Unlike tower, time is passed in rather than read from a clock, which is
//! what lets the simulator run this code at full speed.

use serde::{Deserialize, Serialize};

use crate::endpoints::EndpointTable;
use crate::least_request::two_distinct;
use crate::{Balancer, BuildError, Endpoint, EndpointLoad, Nanos, Outcome, Rng, Ticket};

/// Cost of an endpoint with pending requests and no sample (Finagle's penalty).
const UNMEASURED_COST: f64 = 1e15;

/// Where an endpoint's estimate starts from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ColdStart {
    /// `default_rtt` until the first sample, which then replaces it.
    #[default]
    FirstSample,
    /// `default_rtt`, which samples below it blend away with τ (tower, Finagle).
    DefaultRtt,
}

/// The latency estimate of one endpoint.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct RttEstimate {
    /// Estimate in nanoseconds.
    rtt: f64,
    /// When the estimate was last updated or decayed; `None` before first use.
    stamp: Option<Nanos>,
    measured: bool,
}

impl RttEstimate {
    fn new(default_rtt: Nanos) -> Self {
        RttEstimate { rtt: default_rtt as f64, stamp: None, measured: false }
    }

    /// Weight of the old estimate after `now − stamp` has passed.
    #[inline]
    fn decay(&self, now: Nanos, tau: f64) -> f64 {
        match self.stamp {
            Some(stamp) if now > stamp => (-((now - stamp) as f64) / tau).exp(),
            _ => 1.0,
        }
    }

    /// Take a sample `rtt` observed at `now` (the tower/Finagle update rule,
    /// except that with [`ColdStart::FirstSample`] the first one replaces the default).
    fn update(&mut self, now: Nanos, rtt: f64, tau: f64, cold_start: ColdStart) {
        if rtt > self.rtt || (!self.measured && cold_start == ColdStart::FirstSample) {
            self.rtt = rtt;
        } else {
            let w = self.decay(now, tau);
            self.rtt = self.rtt * w + rtt * (1.0 - w);
        }
        self.stamp = Some(self.stamp.map_or(now, |s| s.max(now)));
        self.measured = true;
    }

    /// The estimate as of `now`, decayed towards zero since the last touch.
    fn read(&mut self, now: Nanos, tau: f64) -> f64 {
        self.rtt *= self.decay(now, tau);
        self.stamp = Some(self.stamp.map_or(now, |s| s.max(now)));
        self.rtt
    }
}

/// Cost of an endpoint: `estimate × (pending + 1) ÷ weight`, or Finagle's
/// penalty for an unmeasured endpoint that is busy.
#[inline]
pub(crate) fn cost(estimate: f64, pending: u32, weight: f64, measured: bool, unmeasured_penalty: bool) -> f64 {
    if unmeasured_penalty && !measured && pending > 0 {
        return UNMEASURED_COST + pending as f64;
    }
    estimate * (pending as f64 + 1.0) / weight
}

/// Peak-EWMA latency estimates with a power-of-two-choices pick.
#[derive(Debug, Clone)]
pub struct PeakEwma {
    table: EndpointTable<RttEstimate>,
    tau: f64,
    default_rtt: Nanos,
    failure_penalty: Nanos,
    unmeasured_penalty: bool,
    cold_start: ColdStart,
    rng: Rng,
}

impl PeakEwma {
    /// A balancer with decay time constant `decay`, initial estimate
    /// `default_rtt` (left at the first sample per `cold_start`),
    /// `failure_penalty` for failed requests, and Finagle's penalty for busy
    /// unmeasured endpoints when `unmeasured_penalty`.
    pub fn new(
        endpoints: &[Endpoint],
        decay: Nanos,
        default_rtt: Nanos,
        failure_penalty: Nanos,
        unmeasured_penalty: bool,
        cold_start: ColdStart,
        seed: u64,
    ) -> Result<Self, BuildError> {
        if decay == 0 {
            return Err(BuildError::InvalidParameter {
                field: "decay",
                value: "0s".into(),
                expected: "a duration greater than zero (10s is the default)",
            });
        }
        let table = EndpointTable::new(endpoints, |_| RttEstimate::new(default_rtt))?;
        let tau = decay as f64;
        Ok(PeakEwma { table, tau, default_rtt, failure_penalty, unmeasured_penalty, cold_start, rng: Rng::new(seed) })
    }

    #[inline]
    fn cost_of(&mut self, slot: usize, now: Nanos) -> f64 {
        let cold_start = self.cold_start;
        let penalty = self.unmeasured_penalty;
        let s = self.table.slot_mut(slot);
        let estimate = s.state.read(now, self.tau);
        if cold_start == ColdStart::FirstSample && !s.state.measured && s.active == 0 {
            // Probe it: its first sample will say what it costs.
            return 0.0;
        }
        cost(estimate, s.active, s.weight, s.state.measured, penalty)
    }
}

impl Balancer for PeakEwma {
    fn name(&self) -> &'static str {
        "peak-ewma"
    }

    fn pick(&mut self, now: Nanos, _key: Option<u64>) -> Option<Ticket> {
        let slot = match self.table.len() {
            0 => return None,
            1 => 0,
            n => {
                let (a, b) = two_distinct(&mut self.rng, n);
                // The draw order is random, so `<=` breaks ties fairly.
                if self.cost_of(a, now) <= self.cost_of(b, now) {
                    a
                } else {
                    b
                }
            }
        };
        Some(self.table.issue(slot))
    }

    fn on_complete(&mut self, ticket: Ticket, now: Nanos, outcome: Outcome) {
        let Some(slot) = self.table.settle(&ticket) else { return };
        let sample = match outcome {
            Outcome::Success { latency } => latency,
            Outcome::Failure { latency } => latency.max(self.failure_penalty),
        };
        let (tau, cold_start) = (self.tau, self.cold_start);
        self.table.slot_mut(slot).state.update(now, sample as f64, tau, cold_start);
    }

    fn on_cancel(&mut self, ticket: Ticket) {
        self.table.settle(&ticket);
    }

    fn set_endpoints(&mut self, endpoints: &[Endpoint]) -> Result<(), BuildError> {
        let default_rtt = self.default_rtt;
        self.table.replace(endpoints, |_| RttEstimate::new(default_rtt))
    }

    fn endpoints(&self) -> &[Endpoint] {
        self.table.endpoints()
    }

    fn loads(&self, now: Nanos) -> Vec<EndpointLoad> {
        (self.table.endpoints().iter().zip(self.table.slots()))
            .map(|(e, s)| EndpointLoad {
                id: e.id,
                active: s.active,
                latency_estimate: Some(s.state.rtt * s.state.decay(now, self.tau)),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{EndpointId, MILLISECOND, SECOND};

    const TAU: f64 = 10.0 * SECOND as f64;

    #[test]
    fn peaks_are_taken_at_once_and_lows_blend_with_time() {
        let mut e = RttEstimate::new(30 * MILLISECOND);
        e.update(SECOND, 100e6, TAU, ColdStart::DefaultRtt);
        assert_eq!(e.rtt, 100e6);
        // One τ later a 0-latency sample keeps e^-1 of the old estimate.
        e.update(SECOND + 10 * SECOND, 0.0, TAU, ColdStart::DefaultRtt);
        assert!((e.rtt - 100e6 * (-1.0f64).exp()).abs() < 1.0, "{}", e.rtt);
    }

    #[test]
    fn reading_decays_toward_zero() {
        let mut e = RttEstimate::new(30 * MILLISECOND);
        assert_eq!(e.read(5 * SECOND, TAU), 30e6, "first touch only stamps");
        let later = e.read(15 * SECOND, TAU);
        assert!((later - 30e6 * (-1.0f64).exp()).abs() < 1.0, "{later}");
    }

    #[test]
    fn cost_rule() {
        assert_eq!(cost(10.0, 0, 1.0, true, false), 10.0);
        assert_eq!(cost(10.0, 3, 2.0, true, false), 20.0);
        assert_eq!(cost(0.0, 2, 1.0, false, true), UNMEASURED_COST + 2.0);
        assert_eq!(cost(0.0, 0, 1.0, false, true), 0.0, "an idle unmeasured endpoint is free to probe");
        assert_eq!(cost(0.0, 2, 1.0, false, false), 0.0);
    }

    #[test]
    fn failures_count_as_the_penalty() {
        let eps = [Endpoint::new(0, "a")];
        let mut pe =
            PeakEwma::new(&eps, 10 * SECOND, 30 * MILLISECOND, 250 * MILLISECOND, false, ColdStart::default(), 1)
                .unwrap();
        let t = pe.pick(0, None).unwrap();
        pe.on_complete(t, MILLISECOND, Outcome::Failure { latency: MILLISECOND });
        assert_eq!(pe.loads(MILLISECOND)[0].latency_estimate, Some(250e6));
    }

    /// A 5 ms endpoint and a 50 ms one, both learnt from one sample each a
    /// millisecond after start, with `default_rtt` 30 ms.
    fn after_one_sample_each(cold_start: ColdStart) -> PeakEwma {
        let eps = [Endpoint::new(0, "fast"), Endpoint::new(1, "slow")];
        let mut pe =
            PeakEwma::new(&eps, 10 * SECOND, 30 * MILLISECOND, 250 * MILLISECOND, false, cold_start, 1).unwrap();
        // Two picks before any answer go to both endpoints (the second
        // sees the first one busy).
        let tickets = [pe.pick(0, None).unwrap(), pe.pick(0, None).unwrap()];
        for t in tickets {
            let latency = if t.endpoint() == EndpointId(0) { 5 * MILLISECOND } else { 50 * MILLISECOND };
            pe.on_complete(t, MILLISECOND, Outcome::Success { latency });
        }
        pe
    }

    #[test]
    fn the_first_sample_replaces_the_default_unless_tower_behaviour_is_asked() {
        let estimate = |pe: &PeakEwma, i: usize| pe.loads(MILLISECOND)[i].latency_estimate.unwrap();
        let pe = after_one_sample_each(ColdStart::FirstSample);
        assert_eq!((estimate(&pe, 0), estimate(&pe, 1)), (5e6, 50e6));
        // Later samples blend as before: one below the estimate moves it a little.
        let mut e = RttEstimate::new(30 * MILLISECOND);
        e.update(SECOND, 5e6, TAU, ColdStart::FirstSample);
        e.update(SECOND + 100 * MILLISECOND, 1e6, TAU, ColdStart::FirstSample);
        assert!(e.rtt > 4.9e6 && e.rtt < 5e6, "{}", e.rtt);

        // tower's: the fast endpoint keeps almost all of the 30 ms default
        // (1 ms after start the sample's weight is 1 − e^(−0.1 ms/10 s) ≈ 0).
        let tower = after_one_sample_each(ColdStart::DefaultRtt);
        assert!(estimate(&tower, 0) > 29e6, "{}", estimate(&tower, 0));
        // So with one request in flight the fast endpoint costs more than
        // the idle slow one (60 ms against 50 ms), where the first-sample
        // start costs it 10 ms.
        let in_flight = |pe: &PeakEwma| cost(estimate(pe, 0), 1, 1.0, true, false);
        assert!(in_flight(&tower) > 50e6 && in_flight(&pe) == 10e6);
    }

    #[test]
    fn an_endpoint_added_by_a_reload_starts_from_its_first_sample_too() {
        let mut pe = after_one_sample_each(ColdStart::FirstSample);
        let eps = [Endpoint::new(0, "fast"), Endpoint::new(1, "slow"), Endpoint::new(2, "new")];
        pe.set_endpoints(&eps).unwrap();
        let now = 2 * MILLISECOND;
        // The kept endpoints keep their estimates; the new one starts at the default.
        let estimates: Vec<f64> = pe.loads(now).iter().map(|l| l.latency_estimate.unwrap()).collect();
        assert!((estimates[0] - 5e6).abs() < 1e3 && (estimates[1] - 50e6).abs() < 1e4, "{estimates:?}");
        assert!((estimates[2] - 30e6).abs() < 1e4, "{estimates:?}");
        // Unmeasured and idle, it is probed at once: both draws that include it pick it.
        let t = loop {
            let t = pe.pick(now, None).unwrap();
            if t.endpoint() == EndpointId(2) {
                break t;
            }
            pe.on_cancel(t);
        };
        pe.on_complete(t, 3 * MILLISECOND, Outcome::Success { latency: 4 * MILLISECOND });
        assert_eq!(pe.loads(3 * MILLISECOND)[2].latency_estimate, Some(4e6));
    }
}

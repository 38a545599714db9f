//! PIE (`kind = "pie"`; "Proportional Integral controller Enhanced",
//! RFC 8033): drops (or marks) arriving packets with a probability that a
//! controller moves every `update_interval` toward keeping the queueing
//! delay at `target`.
//!
//! - **Queueing delay**: the sojourn time of the last packet to leave (0
//!   once the queue is empty), RFC 8033 §4.3's time-stamp estimate.
//! - **Update** (§4.2), every `update_interval` from time 0: `p = alpha ×
//!   (delay − target) + beta × (delay − previous delay)`, delays in
//!   seconds; divided by 2048, 512, 128, 32, 8 or 2 while the probability
//!   is below 10⁻⁶, 10⁻⁵, … 10⁻¹; capped at 0.02 once it is 0.1 or more
//!   (§5.5); added to the probability, which decays by 2 % when both
//!   delays are zero and stays within [0, 1]. The burst allowance falls by
//!   one interval, and is reset to `max_burst` when the probability is
//!   zero and both delays are below half the target (§4.4).
//! - **Arrival** (§4.1): nothing happens while burst allowance is left, or
//!   while the previous delay is below half the target and the probability
//!   below 0.2, or while the queue holds two mean packets (3 000 bytes) or
//!   less; otherwise the packet is signalled with the drop probability
//!   (one draw from the queue's random stream, no derandomisation). The
//!   signal is a mark for an ECN-capable packet while the probability is
//!   at most `ecn_threshold` (§5.1), else a drop.
//!
//! Updates are made when the rule is next called, for every interval that
//! ended since, as a timer would have made them.

use serde::{Deserialize, Serialize};

use super::{Aqm, AqmHooks, AqmType, Arrival, ParamError, Rng, Verdict};
use crate::packet::Nanos;

/// RFC 8033's mean packet size (bytes), for the safeguard.
const MEAN_PACKET: u64 = 1500;

/// PIE's parameters.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PieParams {
    /// The queueing delay aimed at (RFC 8033's `QDELAY_REF`).
    #[serde(with = "fulcrum_config::nanos")]
    pub target: Nanos,
    /// Time between updates of the probability (`T_UPDATE`).
    #[serde(with = "fulcrum_config::nanos")]
    pub update_interval: Nanos,
    /// Weight of the delay's distance from target, per second.
    #[serde(default = "alpha")]
    pub alpha: f64,
    /// Weight of the delay's change since the last update, per second.
    #[serde(default = "beta")]
    pub beta: f64,
    /// Time after a quiet spell during which nothing is dropped.
    #[serde(with = "fulcrum_config::nanos", default = "max_burst")]
    pub max_burst: Nanos,
    /// Mark ECN-capable packets instead of dropping them while the
    /// probability is at most this; absent: drop every packet signalled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ecn_threshold: Option<f64>,
}

fn alpha() -> f64 {
    0.125
}

fn beta() -> f64 {
    1.25
}

fn max_burst() -> Nanos {
    150_000_000
}

/// One queue's PIE: its parameters, random stream and controller state.
#[derive(Clone, Debug)]
pub struct Pie {
    params: PieParams,
    rng: Rng,
    /// The drop probability.
    prob: f64,
    /// The last departure's queueing delay, and the one the last update saw.
    delay: Nanos,
    old_delay: Nanos,
    burst_left: Nanos,
    /// When the next update is due.
    next_update: Nanos,
}

fn secs(ns: Nanos) -> f64 {
    ns as f64 * 1e-9
}

impl Pie {
    pub fn new(params: PieParams, rng: Rng) -> Self {
        Pie {
            params,
            rng,
            prob: 0.0,
            delay: 0,
            old_delay: 0,
            burst_left: params.max_burst,
            next_update: params.update_interval,
        }
    }

    /// The drop probability.
    pub fn probability(&self) -> f64 {
        self.prob
    }

    /// One update of the probability and burst allowance (RFC 8033 §4.2, §4.4).
    fn update(&mut self) {
        let PieParams { target, alpha, beta, update_interval, max_burst, .. } = self.params;
        let mut p = alpha * (secs(self.delay) - secs(target)) + beta * (secs(self.delay) - secs(self.old_delay));
        p /= match self.prob {
            x if x < 1e-6 => 2048.0,
            x if x < 1e-5 => 512.0,
            x if x < 1e-4 => 128.0,
            x if x < 1e-3 => 32.0,
            x if x < 1e-2 => 8.0,
            x if x < 1e-1 => 2.0,
            _ => 1.0,
        };
        if self.prob >= 0.1 && p > 0.02 {
            p = 0.02;
        }
        self.prob += p;
        if self.delay == 0 && self.old_delay == 0 {
            self.prob *= 0.98;
        }
        self.prob = self.prob.clamp(0.0, 1.0);
        self.burst_left = self.burst_left.saturating_sub(update_interval);
        if self.prob == 0.0 && self.delay < target / 2 && self.old_delay < target / 2 {
            self.burst_left = max_burst;
        }
        self.old_delay = self.delay;
    }

    /// Make the updates due by `now`.
    #[inline]
    fn catch_up(&mut self, now: Nanos) {
        let every = self.params.update_interval;
        while now >= self.next_update {
            let before = (self.prob, self.old_delay, self.burst_left);
            self.update();
            self.next_update += every;
            if (self.prob, self.old_delay, self.burst_left) == before && now >= self.next_update {
                // The same inputs again: the updates left change nothing.
                self.next_update += (now - self.next_update) / every * every + every;
            }
        }
    }
}

impl AqmType for Pie {
    const NAME: &'static str = "pie";
    type Params = PieParams;

    fn check(p: &PieParams) -> Result<(), ParamError> {
        ParamError::positive("update_interval", p.update_interval as f64)?;
        for (key, value) in [("alpha", p.alpha), ("beta", p.beta)] {
            if !(value.is_finite() && value >= 0.0) {
                return Err(ParamError::new(key, format!("must be a number at or above 0 (found {value})")));
            }
        }
        match p.ecn_threshold {
            Some(t) if !(0.0..=1.0).contains(&t) => {
                Err(ParamError::new("ecn_threshold", format!("must be a probability, from 0 to 1 (found {t})")))
            }
            _ => Ok(()),
        }
    }

    fn build(p: &PieParams, rng: Rng) -> Box<dyn Aqm> {
        Box::new(Pie::new(*p, rng))
    }
}

impl Aqm for Pie {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    fn hooks(&self) -> AqmHooks {
        AqmHooks { arrival: true, empty: false, requiet: true }
    }

    fn on_arrival(&mut self, a: &Arrival) -> Verdict {
        self.catch_up(a.now);
        let calm = self.old_delay < self.params.target / 2 && self.prob < 0.2;
        if self.burst_left > 0 || calm || a.bytes <= 2 * MEAN_PACKET || self.rng.unit() >= self.prob {
            return Verdict::Pass;
        }
        match self.params.ecn_threshold {
            Some(t) if a.ect && self.prob <= t => Verdict::Mark,
            _ => Verdict::Drop,
        }
    }

    fn on_departure(&mut self, now: Nanos, sojourn: Nanos, queued: u32, _bytes: u64, _ect: bool) -> Verdict {
        self.catch_up(now);
        self.delay = if queued == 0 { 0 } else { sojourn };
        Verdict::Pass
    }

    /// A packet passing the empty queue sets the delay to zero and is
    /// never signalled (the queue is short): nothing changes if the delay
    /// is zero already (the updates it would make are made later alike).
    fn quiet(&self) -> bool {
        self.delay == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 8033's defaults, with no burst allowance.
    fn params() -> PieParams {
        PieParams {
            target: 15_000_000,
            update_interval: 15_000_000,
            alpha: 0.125,
            beta: 1.25,
            max_burst: 0,
            ecn_threshold: None,
        }
    }

    const MS: Nanos = 1_000_000;

    #[test]
    fn the_probability_follows_the_update_rule() {
        // A standing 30 ms delay from the start; one departure a
        // millisecond. Each update adds alpha × 15 ms + beta × the change,
        // divided by the step its probability calls for.
        let mut pie = Pie::new(params(), Rng::new(1));
        let mut probs = Vec::new();
        for t in 0..=60 {
            pie.on_departure(t * MS, 30 * MS, 5, 7500, true);
            if t % 15 == 0 && t > 0 {
                probs.push(pie.probability());
            }
        }
        let first = (0.125 * 0.015 + 1.25 * 0.030) / 2048.0; // below 10⁻⁶ before
        let second = first + 0.125 * 0.015 / 128.0; // first ≈ 1.9e-5
        let third = second + 0.125 * 0.015 / 128.0; // ≈ 3.4e-5
        let fourth = third + 0.125 * 0.015 / 128.0;
        let want = [first, second, third, fourth];
        for (got, want) in probs.iter().zip(want) {
            assert!((got - want).abs() < 1e-15, "{probs:?} against {want}");
        }
        assert_eq!(probs.len(), 4);
        // The delay gone, the probability falls and then decays to zero.
        for t in 61..=200 {
            pie.on_departure(t * MS, 0, 0, 0, true);
        }
        assert_eq!(pie.probability(), 0.0);
    }

    #[test]
    fn large_probabilities_move_by_at_most_two_percent() {
        let mut pie = Pie::new(params(), Rng::new(1));
        pie.prob = 0.5;
        pie.old_delay = 30 * MS;
        pie.delay = 300 * MS;
        pie.catch_up(15 * MS);
        assert!((pie.probability() - 0.52).abs() < 1e-12, "{}", pie.probability());
    }

    #[test]
    fn updates_missed_while_idle_are_made_as_a_timer_would() {
        // The same departures, one rule called every millisecond, the other
        // only at each departure a second apart: the same probabilities.
        let (mut busy, mut idle) = (Pie::new(params(), Rng::new(1)), Pie::new(params(), Rng::new(1)));
        for t in 0..5_000u64 {
            let delay = if t % 1000 < 300 { 40 * MS } else { 0 };
            let queued = u32::from(delay > 0);
            busy.on_departure(t * MS, delay, queued, 1500, true);
            if t % 100 == 0 || t % 1000 == 299 {
                idle.on_departure(t * MS, delay, queued, 1500, true);
            }
            if t % 100 == 0 {
                assert_eq!(busy.probability(), idle.probability(), "at {t} ms");
            }
        }
    }

    /// The verdicts of `n` arrivals to a queue of 10 packets at a fixed
    /// probability, once the burst allowance is spent.
    fn verdicts(pie: &mut Pie, n: u64, ect: bool) -> [u32; 3] {
        let mut counts = [0; 3];
        pie.next_update = Nanos::MAX; // no update: the probability stays
        for _ in 0..n {
            counts[pie.on_arrival(&Arrival { now: MS, queued: 10, bytes: 15_000, ect }) as usize] += 1;
        }
        counts
    }

    #[test]
    fn arrivals_are_signalled_with_the_drop_probability() {
        let mut pie = Pie::new(params(), Rng::new(7));
        pie.prob = 0.3;
        pie.old_delay = 30 * MS;
        let [pass, mark, drop] = verdicts(&mut pie, 20_000, true);
        assert_eq!(mark, 0);
        assert_eq!(pass + drop, 20_000);
        assert!((drop as f64 / 20_000.0 - 0.3).abs() < 0.02, "{drop} drops");
        // ECN: marks below the threshold, drops above it.
        let ecn = PieParams { ecn_threshold: Some(0.1), ..params() };
        let mut pie = Pie::new(ecn, Rng::new(7));
        (pie.prob, pie.old_delay) = (0.05, 30 * MS);
        let [_, mark, drop] = verdicts(&mut pie, 20_000, true);
        assert!(drop == 0 && mark > 0, "{mark} marks, {drop} drops");
        let [_, mark, drop] = verdicts(&mut pie, 2_000, false);
        assert!(mark == 0 && drop > 0, "not ECN-capable: {mark} marks, {drop} drops");
        pie.prob = 0.3;
        let [_, mark, drop] = verdicts(&mut pie, 2_000, true);
        assert!(mark == 0 && drop > 0, "above the threshold: {mark} marks, {drop} drops");
    }

    #[test]
    fn nothing_is_dropped_in_a_burst_calm_or_short_queue() {
        let mut pie = Pie::new(PieParams { max_burst: 30 * MS, ..params() }, Rng::new(3));
        (pie.prob, pie.old_delay) = (1.0, 30 * MS);
        let a = |now, bytes| Arrival { now, queued: 10, bytes, ect: false };
        assert_eq!(pie.on_arrival(&a(MS, 15_000)), Verdict::Pass, "burst allowance left");
        pie.burst_left = 0;
        assert_eq!(pie.on_arrival(&a(MS, 3_000)), Verdict::Pass, "two packets queued");
        assert_eq!(pie.on_arrival(&a(MS, 3_001)), Verdict::Drop);
        (pie.prob, pie.old_delay) = (0.19, 7 * MS);
        assert!((0..100).all(|_| pie.on_arrival(&a(MS, 15_000)) == Verdict::Pass), "calm");
    }

    #[test]
    fn bad_parameters_are_named() {
        let err = Pie::check(&PieParams { alpha: -1.0, ..params() }).unwrap_err();
        assert_eq!(err.field, "alpha");
        let err = Pie::check(&PieParams { ecn_threshold: Some(1.5), ..params() }).unwrap_err();
        assert_eq!(err.field, "ecn_threshold");
        let err = Pie::check(&PieParams { update_interval: 0, ..params() }).unwrap_err();
        assert_eq!(err.field, "update_interval");
    }
}

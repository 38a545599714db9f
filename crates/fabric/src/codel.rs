//! CoDel ("Controlled Delay", RFC 8289; Nichols and Jacobson, "Controlling
//! queue delay", ACM Queue 2012), as ns-3's `CoDelQueueDisc` implements it
//! in the ns3-ecn-sharp fork (`src/traffic-control/model/codel-queue-disc.cc`),
//! which the seed's queue-track program offers as its third scheme. Its
//! signal (below: a mark) depends on the `mode`:
//!
//! - `mark` (the default; the fork's `MarkingMode`): ECN-capable packets
//!   are marked; any other is never signalled and changes nothing.
//! - `ecn` (RFC 8289 with ECN): ECN-capable packets are marked, others
//!   dropped.
//! - `drop` (RFC 8289): every signalled packet is dropped; the queue then
//!   hands out the next one, checked in turn (so several may go at once).
//!
//! At each dequeue the packet's sojourn time is checked:
//!
//! - It is "ok to mark" once the sojourn time has stayed at or above
//!   `target` for longer than `interval`: the first packet at or above
//!   target arms a deadline `now + interval`, a later one strictly past it
//!   is ok; a packet below target — or one that leaves fewer than
//!   `min_bytes` behind it in the queue — disarms it.
//! - Outside the marking state, an ok packet is marked and the state is
//!   entered (unless the queue is now empty): the count restarts at 1, or,
//!   when the state was left less than 16 intervals ago and more than one
//!   mark was made since, at the number of marks made then; the next mark
//!   is due `interval / √count` after now.
//! - Inside it, a packet that is not ok leaves the state; an ok packet at
//!   or after the due time is marked, the count grows by one and the next
//!   mark is due `interval / √count` after the previous due time (the state
//!   ends instead when the queue is now empty).
//! - Dequeuing from an empty queue leaves the state.
//!
//! The arithmetic is ns-3's (and Linux's): times in units of 1024 ns in
//! wrapping 32-bit integers, 1/√count as a 16-bit fixed-point number kept
//! by one Newton step per change of count, and `interval × (1/√count)` as a
//! 32 × 32 → 64-bit multiply. So the marks fall on the same nanosecond
//! boundaries as the original's.

use serde::{Deserialize, Serialize};

use crate::aqm::{Aqm, AqmHooks, AqmType, ParamError, Rng, Verdict};
use crate::packet::Nanos;

/// ns-3's CoDel time unit: nanoseconds shifted right by 10.
const SHIFT: u32 = 10;
/// The 16-bit 1/√count is kept in the top half of a 32-bit word.
const REC_SHIFT: u32 = 16;

/// A time in CoDel units.
fn units(ns: Nanos) -> u32 {
    (ns >> SHIFT) as u32
}

/// `a` strictly after `b`, on the wrapping clock.
fn after(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

/// `a` strictly before `b`, on the wrapping clock.
fn before(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

/// CoDel's parameters (`kind = "codel"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    #[serde(with = "fulcrum_config::nanos")]
    pub target: Nanos,
    /// At least 1024 ns (CoDel counts time in 1024 ns units).
    #[serde(with = "fulcrum_config::nanos")]
    pub interval: Nanos,
    /// A packet leaving fewer bytes than this behind it is never marked
    /// (ns-3's `MinBytes`, 1500 by default).
    #[serde(default = "mtu")]
    pub min_bytes: u64,
    /// What a signal does (module documentation).
    #[serde(default)]
    pub mode: Mode,
}

/// What CoDel's signal does to a packet.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Mark ECN-capable packets; leave the others alone.
    #[default]
    Mark,
    /// Mark ECN-capable packets; drop the others.
    Ecn,
    /// Drop.
    Drop,
}

impl Mode {
    /// The signal for a packet (`ect`: ECN-capable); None: it takes none.
    fn signal(self, ect: bool) -> Option<Verdict> {
        match self {
            Mode::Mark => ect.then_some(Verdict::Mark),
            Mode::Ecn if ect => Some(Verdict::Mark),
            Mode::Ecn | Mode::Drop => Some(Verdict::Drop),
        }
    }
}

fn mtu() -> u64 {
    1500
}

/// CoDel as a queue's marking rule: its parameters and state.
#[derive(Clone, Copy, Debug)]
pub struct CoDelRule {
    pub params: Params,
    pub state: CoDel,
}

impl AqmType for CoDelRule {
    const NAME: &'static str = "codel";
    type Params = Params;

    fn check(p: &Params) -> Result<(), ParamError> {
        if p.interval < 1 << SHIFT {
            return Err(ParamError::new("interval", "CoDel's interval must be at least 1024ns"));
        }
        Ok(())
    }

    fn build(p: &Params, _: Rng) -> Box<dyn Aqm> {
        Box::new(CoDelRule { params: *p, state: CoDel::default() })
    }
}

impl Aqm for CoDelRule {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    fn hooks(&self) -> AqmHooks {
        AqmHooks { arrival: false, empty: true, requiet: false }
    }

    fn on_departure(&mut self, now: Nanos, sojourn: Nanos, _queued: u32, bytes: u64, ect: bool) -> Verdict {
        self.state.on_dequeue(&self.params, now, sojourn, bytes, ect)
    }

    fn on_empty(&mut self) {
        self.state.on_empty();
    }
}

/// One queue's CoDel state.
#[derive(Clone, Copy, Debug)]
pub struct CoDel {
    first_above: u32,
    marking: bool,
    next_mark: u32,
    count: u32,
    last_count: u32,
    rec_inv_sqrt: u16,
}

impl Default for CoDel {
    fn default() -> Self {
        CoDel { first_above: 0, marking: false, next_mark: 0, count: 0, last_count: 0, rec_inv_sqrt: u16::MAX }
    }
}

impl CoDel {
    /// Marks made in the current (or last) marking state.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// One Newton step toward 1/√count (ns-3's `NewtonStep`).
    fn newton_step(&mut self) {
        let invsqrt = (self.rec_inv_sqrt as u32) << REC_SHIFT;
        let invsqrt2 = ((invsqrt as u64 * invsqrt as u64) >> 32) as u32;
        let mut val = (3u64 << 32).wrapping_sub(self.count as u64 * invsqrt2 as u64);
        val >>= 2;
        val = val.wrapping_mul(invsqrt as u64) >> (32 - 2 + 1);
        self.rec_inv_sqrt = (val >> REC_SHIFT) as u16;
    }

    /// `t + interval / √count` in CoDel units (ns-3's `ControlLaw`).
    fn control_law(&self, t: u32, interval: u32) -> u32 {
        let rec = (self.rec_inv_sqrt as u32) << REC_SHIFT;
        t.wrapping_add(((interval as u64 * rec as u64) >> 32) as u32)
    }

    /// Whether the packet being dequeued is ok to mark (ns-3's `OkToDrop`).
    fn ok_to_mark(&mut self, p: &Params, now: u32, sojourn: Nanos, bytes_left: u64) -> bool {
        if before(units(sojourn), units(p.target)) || bytes_left < p.min_bytes {
            self.first_above = 0;
            return false;
        }
        if self.first_above == 0 {
            self.first_above = now.wrapping_add(units(p.interval));
            false
        } else {
            after(now, self.first_above)
        }
    }

    /// The queue was found empty at a dequeue.
    pub fn on_empty(&mut self) {
        self.marking = false;
        self.first_above = 0;
    }

    /// What becomes of the packet dequeued at `now` after `sojourn` in the
    /// queue; `bytes_left` is what it leaves queued, `ect` whether it can
    /// be marked.
    pub fn on_dequeue(&mut self, p: &Params, now_ns: Nanos, sojourn: Nanos, bytes_left: u64, ect: bool) -> Verdict {
        let now = units(now_ns);
        let interval = units(p.interval);
        let ok = self.ok_to_mark(p, now, sojourn, bytes_left);
        if self.marking {
            if !ok {
                self.marking = false;
                return Verdict::Pass;
            }
            let Some(signal) = p.mode.signal(ect).filter(|_| !after(self.next_mark, now)) else {
                return Verdict::Pass;
            };
            self.count = self.count.wrapping_add(1);
            self.newton_step();
            if bytes_left == 0 {
                self.marking = false;
            } else {
                self.next_mark = self.control_law(self.next_mark, interval);
            }
            return signal;
        }
        let Some(signal) = p.mode.signal(ect).filter(|_| ok) else {
            return Verdict::Pass;
        };
        if bytes_left == 0 {
            return signal;
        }
        self.marking = true;
        let delta = self.count.wrapping_sub(self.last_count) as i32;
        if delta > 1 && before(now.wrapping_sub(self.next_mark), 16u32.wrapping_mul(interval)) {
            self.count = delta as u32;
            self.newton_step();
        } else {
            self.count = 1;
            self.rec_inv_sqrt = u16::MAX;
        }
        self.last_count = self.count;
        self.next_mark = self.control_law(now, interval);
        signal
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 1/√count after `steps` Newton steps from count 1, as 16-bit fixed point.
    fn rec_after(counts: &[u32]) -> u16 {
        let mut c = CoDel::default();
        for &n in counts {
            c.count = n;
            c.newton_step();
        }
        c.rec_inv_sqrt
    }

    #[test]
    fn newton_steps_match_the_fixed_point_golden_values() {
        // From ns-3's integer formula, worked separately: one step per
        // count from 1.0, so it trails 1/√n × 65536 (46341, 37837, 32768,
        // 29309): from 1.0 a single step gives exactly one half for n = 2.
        assert_eq!(rec_after(&[2]), 32769);
        assert_eq!(rec_after(&[2, 3]), 36864);
        assert_eq!(rec_after(&[2, 3, 4]), 31968);
        assert_eq!(rec_after(&[2, 3, 4, 5]), 28935);
        // interval 100 µs = 97 units; ×1.0 (0xFFFF) → 96 units after t.
        let c = CoDel::default();
        assert_eq!(c.control_law(1000, 97), 1096);
    }

    const P: Params = Params { target: 10_240, interval: 102_400, min_bytes: 1500, mode: Mode::Mark };

    /// Whether the packet is marked.
    fn mark(c: &mut CoDel, now: Nanos, sojourn: Nanos, bytes_left: u64, ect: bool) -> bool {
        c.on_dequeue(&P, now, sojourn, bytes_left, ect) == Verdict::Mark
    }

    /// Dequeue one packet every 1024 ns whose sojourn is `sojourn`, with
    /// 3000 bytes left behind; the CoDel-unit times of the marks.
    fn marks(c: &mut CoDel, from: u64, to: u64, sojourn: Nanos) -> Vec<u64> {
        (from..to).filter(|&t| mark(c, t * 1024, sojourn, 3000, true)).collect()
    }

    #[test]
    fn marks_follow_the_control_law() {
        // Target 10 units, interval 100 units; every packet waits 20 units.
        let mut c = CoDel::default();
        let m = marks(&mut c, 0, 400, 20 * 1024);
        // Armed at 0 (deadline 100); first ok at 101 → mark, next due
        // 101 + 99 (100 × 0xFFFF / 2^16); then 100 × 32769 / 2^16 = 50
        // later, 100 × 36864 / 2^16 = 56, 48 and 44 later.
        assert_eq!(m, [101, 200, 250, 306, 354, 398]);
        assert_eq!(c.count(), 6);
        // Below target: the state ends, nothing is marked for an interval.
        assert!(!mark(&mut c, 400 * 1024, 5 * 1024, 3000, true));
        let again = marks(&mut c, 401, 700, 20 * 1024);
        // Re-armed at 401 (ok after 501). The state was left less than 16
        // intervals ago, 6 − 1 = 5 marks after it began: the count resumes
        // at 5, not 1, so the marks come 44, 40, 37, … units apart.
        assert_eq!(again, [502, 546, 586, 623, 658, 691]);
        assert_eq!(c.count(), 10);
    }

    #[test]
    fn short_queues_and_unmarkable_packets_are_not_marked() {
        let mut c = CoDel::default();
        // Fewer than min_bytes left behind: never ok.
        assert!((0..300).all(|t| !mark(&mut c, t * 1024, 20 * 1024, 1000, true)));
        // Not ECN-capable: not marked, and the first ECN-capable one is.
        let mut c = CoDel::default();
        assert!((0..150).all(|t| !mark(&mut c, t * 1024, 20 * 1024, 3000, false)));
        assert!(mark(&mut c, 150 * 1024, 20 * 1024, 3000, true));
        // An empty queue ends the state: the next ok packet needs a new
        // interval above target.
        c.on_empty();
        assert!(!mark(&mut c, 151 * 1024, 20 * 1024, 3000, true));
    }

    /// The drops of a standing queue whose every packet waits `sojourn`,
    /// one dequeue every 1024 ns from `from` to `to`, in `mode`; `ect`:
    /// which packets are ECN-capable. The CoDel-unit times of the drops.
    fn drops(c: &mut CoDel, mode: Mode, range: std::ops::Range<u64>, ect: fn(u64) -> bool) -> Vec<u64> {
        let p = Params { mode, ..P };
        range.filter(|&t| c.on_dequeue(&p, t * 1024, 20 * 1024, 3000, ect(t)) == Verdict::Drop).collect()
    }

    #[test]
    fn drop_mode_drops_when_marking_mode_marks() {
        // The same control law: drop mode drops where marking mode marks,
        // ECN mode marks ECN-capable packets and drops the others.
        let mut c = CoDel::default();
        assert_eq!(drops(&mut c, Mode::Drop, 0..400, |_| true), [101, 200, 250, 306, 354, 398]);
        let mut c = CoDel::default();
        assert_eq!(drops(&mut c, Mode::Drop, 0..400, |_| false), [101, 200, 250, 306, 354, 398]);
        let mut c = CoDel::default();
        assert!(drops(&mut c, Mode::Ecn, 0..400, |_| true).is_empty());
        assert_eq!(c.count(), 6);
        // Every other packet ECN-capable: the signals fall at the same
        // times, and only the ones on packets that are not are drops.
        let mut c = CoDel::default();
        assert_eq!(drops(&mut c, Mode::Ecn, 0..400, |t| t % 2 == 1), [200, 250, 306, 354, 398]);
        // Marking mode signals nothing to those: it waits for the next
        // ECN-capable packet (so never drops).
        let mut c = CoDel::default();
        assert!(drops(&mut c, Mode::Mark, 0..400, |t| t % 2 == 1).is_empty());
    }

    #[test]
    fn drops_of_a_standing_queue_follow_interval_over_root_count() {
        // Interval 1000 units, target 10; every packet waits 20 units, one
        // dequeue per unit: the n-th gap between drops is interval/√n,
        // within the rounding of the 16-bit fixed-point 1/√count that one
        // Newton step per drop keeps (trailing it by up to 12 % at the
        // second drop, then closing in).
        let p = Params { target: 10 * 1024, interval: 1000 * 1024, min_bytes: 0, mode: Mode::Drop };
        let mut c = CoDel::default();
        let times: Vec<u64> =
            (0..30_000u64).filter(|&t| c.on_dequeue(&p, t * 1024, 20 * 1024, 3000, true) == Verdict::Drop).collect();
        assert_eq!(times[..4], [1001, 2000, 2500, 3062]);
        assert!(times.len() > 100, "{}", times.len());
        for (n, gap) in times.windows(2).map(|w| w[1] - w[0]).enumerate() {
            let count = n as f64 + 1.0;
            let law = 1000.0 / count.sqrt();
            let slack = if count < 3.0 {
                0.3
            } else if count < 20.0 {
                0.1
            } else {
                0.03
            };
            assert!((gap as f64 - law).abs() <= law * slack + 1.0, "drop {count}: gap {gap}, law {law:.1}");
        }
    }
}

//! Queue disciplines of a switch output port: a bounded FIFO that drops at
//! the tail and may set Congestion Experienced on ECN-capable packets.
//!
//! The marking rules follow the ns3-ecn-sharp simulator (snowzjx/ns3-ecn-sharp,
//! `src/traffic-control/model/{tcn,ecn-sharp}-queue-disc.cc`), which the seed
//! experiments use:
//!
//! - **Drop-tail**: never marks.
//! - **RED with ECN, DCTCP style**: one threshold K in packets; a packet that
//!   arrives to find K or more packets queued is marked (instantaneous queue,
//!   min = max threshold, as DCTCP configures RED).
//! - **TCN**: marks at dequeue when the packet's sojourn time (dequeue time
//!   minus enqueue time) is strictly above the threshold.
//! - **ECN#**: marks at dequeue when either
//!   1. the sojourn time is strictly above the instantaneous threshold, or
//!   2. CoDel-style persistent marking says so: a packet is "ok to mark" once
//!      sojourn has stayed at or above `target` (not below it) for longer than
//!      one `interval` — the first packet at or above target arms a deadline
//!      `now + interval`, a later one past that deadline is ok to mark, and
//!      any packet below target disarms it. On entering the marking state the
//!      packet is marked, the count is 1 and the next mark is due one
//!      interval later; while marking, a packet that is not ok to mark leaves
//!      the state, and one at or after the due time is marked, the count grows
//!      by one and the next mark is due `interval / √count` later.
//!
//! - **CoDel** with ECN marking (RFC 8289, as ns-3 implements it): see
//!   [`crate::codel`].
//!
//! Packets that are not ECN-capable (handshakes and pure ACKs) are never
//! marked and never dropped for marking, only for lack of room, as in the
//! original. The limit counts packets.

use std::collections::VecDeque;

use crate::codel::{self, CoDel};
use crate::packet::{Nanos, Packet};
use crate::ring;

/// The marking rule of one queue.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Marking {
    DropTail,
    /// DCTCP's RED: mark on arrival when `k` or more packets are queued.
    Red {
        k: u32,
    },
    /// Mark at dequeue when sojourn > `threshold`.
    Tcn {
        threshold: Nanos,
    },
    /// ECN#: instantaneous sojourn threshold plus persistent marking.
    EcnSharp {
        threshold: Nanos,
        target: Nanos,
        interval: Nanos,
    },
    /// CoDel marking instead of dropping.
    CoDel(codel::Params),
}

/// ECN#'s persistent-marking state (`repr(C)`: what every dequeue reads
/// first, the next mark's time, read only while marking, last).
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
struct Persistent {
    /// Deadline after which a packet above target is ok to mark (0: unarmed).
    first_above: Nanos,
    marking: bool,
    count: u32,
    next_mark: Nanos,
}

/// Counters of one queue (`repr(C)`: the two every packet may move first).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct QueueStats {
    pub enqueued: u64,
    pub marks: u64,
    pub drops: u64,
}

/// A bounded FIFO with one marking rule.
///
/// `repr(C)`, in the order a packet's visit reads the fields: a one-class
/// port holds its discipline 56 bytes (`START_IN_LINE`) into its second cache
/// line (`world::Port`, after the link's fields and the scheduler's tag),
/// so all of the FIFO's header but its first 8 bytes, the limit, the two
/// flags, the counters and the byte count share the third line, and the
/// rule and its state the fourth; CoDel's state, which only CoDel queues
/// touch, comes last. (In Rust's own order the limit and the counters sat
/// two lines apart: a packet through a cold port missed both.) The layout
/// is asserted below.
/// The flags answer the two questions most packets ask of the rule, so
/// that a packet passing an empty discipline and the empty dequeue ending
/// a refill do not read the rule's line.
#[derive(Debug)]
#[repr(C)]
pub struct Qdisc {
    fifo: VecDeque<Packet>,
    limit: u32,
    /// A packet passing the empty discipline ([`Qdisc::pass`]) is not
    /// marked and leaves the rule's state as it is: drop-tail and TCN
    /// always, RED with `k` above 0, ECN# with a target above 0 while its
    /// persistent state is idle (unarmed, not marking); never CoDel. Kept
    /// by [`Qdisc::leave`] whenever ECN#'s state moves.
    quiet: bool,
    /// The rule is CoDel (an empty dequeue ends its marking state).
    codel_rule: bool,
    pub stats: QueueStats,
    /// Wire bytes queued (CoDel's `min_bytes` rule reads it).
    bytes: u64,
    marking: Marking,
    state: Persistent,
    codel: CoDel,
}

/// Where a one-class port's discipline begins within a cache line
/// (asserted with `world::Port`'s layout).
// Read only by compile-time assertions, which the dead-code lint of the
// oldest Rust the workspace supports does not count as uses.
#[allow(dead_code)]
pub(crate) const START_IN_LINE: usize = 56;

/// The cache line, counted from the one a port's discipline begins in, of
/// the byte at `offset` in the discipline.
#[allow(dead_code)]
const fn line(offset: usize) -> usize {
    (START_IN_LINE + offset) / 64
}

// The lines of `Qdisc`'s documentation.
const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(line(offset_of!(Qdisc, fifo) + 8) == 1);
    assert!(line(offset_of!(Qdisc, limit)) == 1);
    assert!(line(offset_of!(Qdisc, bytes) + size_of::<u64>() - 1) == 1);
    assert!(line(offset_of!(Qdisc, marking)) == 2);
    assert!(line(offset_of!(Qdisc, state) + size_of::<Persistent>() - 1) == 2);
    assert!(offset_of!(Qdisc, codel) > offset_of!(Qdisc, state));
};

impl Qdisc {
    /// A queue holding at most `limit` packets.
    pub fn new(limit: u32, marking: Marking) -> Self {
        let mut q = Qdisc {
            fifo: VecDeque::new(),
            limit,
            quiet: false,
            codel_rule: matches!(marking, Marking::CoDel(_)),
            marking,
            state: Persistent::default(),
            codel: CoDel::default(),
            bytes: 0,
            stats: QueueStats::default(),
        };
        q.quiet = q.passes_quietly();
        q
    }

    /// What [`Qdisc::quiet`] says, from the rule and its state.
    fn passes_quietly(&self) -> bool {
        match self.marking {
            Marking::DropTail | Marking::Tcn { .. } => true,
            Marking::Red { k } => k > 0,
            Marking::EcnSharp { target, .. } => target > 0 && self.state.first_above == 0 && !self.state.marking,
            Marking::CoDel(_) => false,
        }
    }

    /// Packets waiting.
    pub fn len(&self) -> usize {
        self.fifo.len()
    }

    pub fn is_empty(&self) -> bool {
        self.fifo.is_empty()
    }

    /// Wire bytes of the head packet (what a scheduler charges for it).
    pub fn head_wire(&self) -> Option<u32> {
        self.fifo.front().map(|p| u32::from(p.wire))
    }

    /// Offer a packet; false when it was dropped for lack of room.
    pub fn enqueue(&mut self, now: Nanos, p: Packet) -> bool {
        let Some(p) = self.admit(now, p) else { return false };
        self.bytes += p.wire as u64;
        self.fifo.push_back(p);
        true
    }

    /// Everything [`Qdisc::enqueue`] does but the queueing: the limit, the
    /// arrival's mark, the time stamp and the count; None when dropped.
    #[inline]
    fn admit(&mut self, now: Nanos, mut p: Packet) -> Option<Packet> {
        let len = self.fifo.len() as u32;
        if len >= self.limit {
            self.stats.drops += 1;
            return None;
        }
        if let Marking::Red { k } = self.marking {
            if len >= k && p.ect() {
                p.set_ce(true);
                self.stats.marks += 1;
            }
        }
        p.enqueued = now;
        self.stats.enqueued += 1;
        Some(p)
    }

    /// A packet offered to an empty discipline whose device queue takes it
    /// at once: the same as [`Qdisc::enqueue`], then [`Qdisc::dequeue`] (a
    /// sojourn of zero, so the marking rule's state moves as it would),
    /// then, if `drained`, the empty dequeue that ends a refill whose
    /// device queue still has room, without the FIFO's round trip. None
    /// when dropped (no empty dequeue then: the caller services the port).
    #[inline]
    pub fn pass(&mut self, now: Nanos, p: Packet, drained: bool) -> Option<Packet> {
        debug_assert!(self.fifo.is_empty());
        if self.quiet {
            // The rule neither marks nor moves (see `quiet`), and the empty
            // dequeue only concerns CoDel: the limit, the stamp, the count.
            if self.limit == 0 {
                self.stats.drops += 1;
                return None;
            }
            let mut p = p;
            p.enqueued = now;
            self.stats.enqueued += 1;
            return Some(p);
        }
        let p = self.admit(now, p)?;
        let p = self.leave(now, p);
        if drained {
            self.on_empty();
        }
        Some(p)
    }

    /// An empty dequeue ends CoDel's marking state (only CoDel queues
    /// read it, so the others leave its line alone).
    #[inline]
    fn on_empty(&mut self) {
        if self.codel_rule {
            self.codel.on_empty();
        }
    }

    /// Take the head packet, marking it if the rule says so.
    #[inline]
    pub fn dequeue(&mut self, now: Nanos) -> Option<Packet> {
        // Every refill of a device queue that drains the discipline ends
        // with this empty case: answered here, inlined, without the call.
        if self.fifo.is_empty() {
            self.on_empty();
            return None;
        }
        self.dequeue_head(now)
    }

    /// [`Qdisc::dequeue`] of a discipline holding packets.
    fn dequeue_head(&mut self, now: Nanos) -> Option<Packet> {
        let p = ring::pop_front(&mut self.fifo)?;
        self.bytes -= p.wire as u64;
        Some(self.leave(now, p))
    }

    /// The dequeue's marking rule for `p`, just taken off the FIFO.
    #[inline]
    fn leave(&mut self, now: Nanos, mut p: Packet) -> Packet {
        let sojourn = now - p.enqueued;
        let mark = match self.marking {
            Marking::CoDel(params) => self.codel.on_dequeue(&params, now, sojourn, self.bytes, p.ect()),
            Marking::DropTail | Marking::Red { .. } => false,
            Marking::Tcn { threshold } => sojourn > threshold,
            Marking::EcnSharp { threshold, target, interval } => {
                let persistent = self.persistent(now, sojourn, target, interval);
                self.quiet = self.passes_quietly();
                sojourn > threshold || persistent
            }
        };
        if mark && p.ect() && !p.ce() {
            p.set_ce(true);
            self.stats.marks += 1;
        }
        p
    }

    /// ECN#'s persistent rule: whether this dequeue marks.
    fn persistent(&mut self, now: Nanos, sojourn: Nanos, target: Nanos, interval: Nanos) -> bool {
        let s = &mut self.state;
        let ok = if sojourn < target {
            s.first_above = 0;
            false
        } else if s.first_above == 0 {
            s.first_above = now + interval;
            false
        } else {
            now > s.first_above
        };
        if s.marking {
            if !ok {
                s.marking = false;
                false
            } else if now >= s.next_mark {
                s.count += 1;
                s.next_mark = now + (interval as f64 / (s.count as f64).sqrt()) as Nanos;
                true
            } else {
                false
            }
        } else if ok {
            s.marking = true;
            s.count = 1;
            s.next_mark = now + interval;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A full-sized data segment of flow 0.
    fn data(seq: u32) -> Packet {
        crate::lb::testing::data(0, seq, 0)
    }

    #[test]
    fn drop_tail_drops_beyond_the_limit() {
        let mut q = Qdisc::new(2, Marking::DropTail);
        assert!(q.enqueue(0, data(0)) && q.enqueue(0, data(1)));
        assert!(!q.enqueue(0, data(2)));
        assert_eq!(q.stats.drops, 1);
        assert_eq!(q.dequeue(5).map(|p| p.seq), Some(0));
    }

    #[test]
    fn red_marks_arrivals_at_or_above_k() {
        let mut q = Qdisc::new(10, Marking::Red { k: 2 });
        for i in 0..4 {
            q.enqueue(0, data(i));
        }
        let ce: Vec<bool> = (0..4).map(|_| q.dequeue(0).unwrap().ce()).collect();
        assert_eq!(ce, [false, false, true, true]);
    }

    #[test]
    fn tcn_marks_strictly_above_the_threshold() {
        let mut q = Qdisc::new(10, Marking::Tcn { threshold: 100 });
        q.enqueue(0, data(0));
        q.enqueue(0, data(1));
        assert!(!q.dequeue(100).unwrap().ce());
        assert!(q.dequeue(101).unwrap().ce());
        assert_eq!(q.stats.marks, 1);
    }

    #[test]
    fn non_ect_packets_are_never_marked() {
        let mut q = Qdisc::new(10, Marking::Tcn { threshold: 0 });
        let mut ack = data(0);
        ack.set_ect(false);
        q.enqueue(0, ack);
        assert!(!q.dequeue(50).unwrap().ce());
    }

    #[test]
    fn ecn_sharp_persistent_marking_follows_the_control_law() {
        // Instantaneous threshold out of reach: only persistent marks.
        let (target, interval) = (10, 1000);
        let mut q = Qdisc::new(1000, Marking::EcnSharp { threshold: u64::MAX, target, interval });
        // Every packet waits 20 ns (above target); one dequeue every 100 ns.
        let mut marked = Vec::new();
        for i in 0..40u64 {
            let now = 100 * i + 20;
            q.enqueue(now - 20, data(i as u32));
            if q.dequeue(now).unwrap().ce() {
                marked.push(now);
            }
        }
        // Armed at 20 (deadline 1020); first ok at 1120 → mark; next due one
        // interval later (2120), then interval/√2 = 707 later (2827 → 2920).
        assert_eq!(marked, [1120, 2120, 2920, 3520]);
        // A packet below target ends the marking state.
        q.enqueue(4000, data(99));
        assert!(!q.dequeue(4005).unwrap().ce());
        q.enqueue(4100, data(100));
        assert!(!q.dequeue(4120).unwrap().ce(), "re-armed, not yet ok");
    }

    #[test]
    fn ecn_sharp_marks_instantly_above_its_threshold() {
        let mut q = Qdisc::new(10, Marking::EcnSharp { threshold: 70, target: 10, interval: 1_000_000 });
        q.enqueue(0, data(0));
        q.enqueue(0, data(1));
        assert!(!q.dequeue(70).unwrap().ce());
        assert!(q.dequeue(71).unwrap().ce());
    }

    #[test]
    fn a_packet_passing_an_empty_discipline_leaves_it_as_the_fifo_would() {
        // `pass` against enqueue, dequeue and the empty dequeue after it,
        // under every rule, with standing queues in between so that the
        // rules' states are armed or marking when a packet passes; the
        // whole discipline (state, counters, bytes) must agree each time.
        let codel = codel::Params { target: 1_000, interval: 5_000, min_bytes: 0 };
        let rules = [
            Marking::DropTail,
            Marking::Red { k: 0 },
            Marking::Red { k: 2 },
            Marking::Tcn { threshold: 0 },
            Marking::EcnSharp { threshold: 50_000, target: 0, interval: 3_000 },
            Marking::EcnSharp { threshold: 4_000, target: 1_000, interval: 3_000 },
            Marking::CoDel(codel),
        ];
        for rule in rules {
            let (mut fifo, mut pass) = (Qdisc::new(5, rule), Qdisc::new(5, rule));
            let (mut passed, mut quiet) = (0, 0);
            for t in 0..600u64 {
                let now = t * 700;
                let p = data(t as u32);
                if t % 40 < 25 {
                    // A queue builds (up to the limit, then drops).
                    for q in [&mut fifo, &mut pass] {
                        q.enqueue(now, p);
                        q.enqueue(now, p);
                        q.dequeue(now);
                    }
                } else if !pass.is_empty() {
                    for q in [&mut fifo, &mut pass] {
                        q.dequeue(now);
                    }
                } else {
                    // Whether the device queue has room left after it
                    // (then the refill's empty dequeue follows).
                    let drained = t % 3 != 0;
                    assert!(fifo.enqueue(now, p));
                    let through = fifo.dequeue(now);
                    if drained {
                        assert!(fifo.dequeue(now).is_none());
                    }
                    quiet += pass.quiet as u32;
                    assert_eq!(pass.pass(now, p, drained), through, "{rule:?} at {now}");
                    passed += 1;
                }
                assert_eq!(format!("{fifo:?}"), format!("{pass:?}"), "{rule:?} at {now}");
            }
            assert!(passed > 50 && pass.stats.drops > 0, "{rule:?}: {passed} passed");
            // Both ways through `pass` are taken: the quiet one wherever the
            // rule allows it, the full one after ECN#'s state was armed.
            let can_be_quiet =
                !matches!(rule, Marking::Red { k: 0 } | Marking::EcnSharp { target: 0, .. } | Marking::CoDel(_));
            assert_eq!(quiet > 0, can_be_quiet, "{rule:?}: {quiet} quiet passes");
            if let Marking::EcnSharp { target: 1_000, .. } = rule {
                assert!(quiet < passed, "{rule:?}: {quiet} of {passed} passes quiet");
            }
        }
    }

    #[test]
    fn codel_marks_a_standing_queue_but_not_its_last_packet() {
        let params = codel::Params { target: 10_240, interval: 102_400, min_bytes: 1500 };
        let mut q = Qdisc::new(1000, Marking::CoDel(params));
        // A standing queue of 20 packets, one in and one out every 1024 ns,
        // so each waits 20 units; the marks are the state machine's own.
        let mut alone = CoDel::default();
        let mut marked = Vec::new();
        for t in 0..20u64 {
            q.enqueue(t * 1024, data(t as u32));
        }
        for t in 20..420u64 {
            let now = t * 1024;
            q.enqueue(now, data(t as u32));
            let p = q.dequeue(now).unwrap();
            assert_eq!(now - p.enqueued, 20 * 1024);
            // What it leaves behind: 20 packets of 1454 wire bytes.
            assert_eq!(alone.on_dequeue(&params, now, 20 * 1024, 20 * 1454, true), p.ce());
            if p.ce() {
                marked.push(t);
            }
        }
        assert_eq!(marked.len() as u64, q.stats.marks);
        assert!(marked.len() >= 5, "{marked:?}");
        // Drain it: the last packets leave fewer than 1500 bytes behind.
        let mut q = Qdisc::new(10, Marking::CoDel(params));
        q.enqueue(0, data(0));
        assert!((1..300).all(|t| {
            let ok = !q.dequeue(t * 1024).unwrap().ce();
            q.enqueue(t * 1024, data(t as u32));
            ok
        }));
        while q.dequeue(400 * 1024).is_some() {}
        assert!(q.dequeue(401 * 1024).is_none(), "an empty queue ends the marking state");
    }
}

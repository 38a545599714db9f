//! Queue disciplines of a switch output port: a bounded FIFO that drops at
//! the tail, with a rule ([`crate::aqm`]) that may set Congestion
//! Experienced on ECN-capable packets or drop packets. The limit counts
//! packets.

use std::collections::VecDeque;

use crate::aqm::{Aqm, Arrival, Verdict};
use crate::packet::{Nanos, Packet};
use crate::ring;

/// Counters of one queue (`repr(C)`: the two every packet may move first).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct QueueStats {
    pub enqueued: u64,
    pub marks: u64,
    /// Packets dropped: for lack of room, or by the rule (on arrival or
    /// at departure).
    pub drops: u64,
}

/// A bounded FIFO with one marking rule.
///
/// `repr(C)`, in the order a packet's visit reads the fields: a one-class
/// port holds its discipline 56 bytes (`START_IN_LINE`) into its second cache
/// line (`world::Port`, after the link's fields and the scheduler's tag),
/// so all of the FIFO's header but its first 8 bytes, the limit, the
/// flags, the counters and the byte count share the third line, and the
/// rule (a pointer to its own state) the fourth. The layout is asserted
/// below.
/// The flags answer the questions most packets ask of the rule, so that a
/// packet passing an empty discipline and the empty dequeue ending a
/// refill do not call it.
#[derive(Debug)]
#[repr(C)]
pub struct Qdisc {
    fifo: VecDeque<Packet>,
    limit: u32,
    /// A packet passing the empty discipline ([`Qdisc::pass`]) is not
    /// marked and leaves the rule's state as it is ([`Aqm::quiet`]).
    quiet: bool,
    /// The rule's hooks ([`crate::aqm::AqmHooks`]).
    arrival: bool,
    empty: bool,
    requiet: bool,
    pub stats: QueueStats,
    /// Wire bytes queued (CoDel's `min_bytes` rule reads it).
    bytes: u64,
    rule: Box<dyn Aqm>,
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
    assert!(line(offset_of!(Qdisc, rule)) == 2);
};

impl Qdisc {
    /// A queue holding at most `limit` packets, marking by `rule`.
    pub fn new(limit: u32, rule: Box<dyn Aqm>) -> Self {
        let hooks = rule.hooks();
        Qdisc {
            fifo: VecDeque::new(),
            limit,
            quiet: rule.quiet(),
            arrival: hooks.arrival,
            empty: hooks.empty,
            requiet: hooks.requiet,
            rule,
            bytes: 0,
            stats: QueueStats::default(),
        }
    }

    /// The marking rule.
    pub fn rule(&self) -> &dyn Aqm {
        &*self.rule
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
        if self.arrival {
            match self.rule.on_arrival(&Arrival { now, queued: len, bytes: self.bytes, ect: p.ect() }) {
                Verdict::Pass => {}
                Verdict::Mark => {
                    if p.ect() {
                        p.set_ce(true);
                        self.stats.marks += 1;
                    }
                }
                Verdict::Drop => {
                    self.stats.drops += 1;
                    return None;
                }
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
    /// when dropped, on arrival or at departure (no empty dequeue then:
    /// the caller services the port, which makes it).
    #[inline]
    pub fn pass(&mut self, now: Nanos, p: Packet, drained: bool) -> Option<Packet> {
        debug_assert!(self.fifo.is_empty());
        if self.quiet {
            // The rule neither marks nor moves (see `quiet`), and the empty
            // dequeue only concerns rules that ask for it: the limit, the
            // stamp, the count.
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
        let p = self.leave(now, p)?;
        if drained {
            self.on_empty();
        }
        Some(p)
    }

    /// An empty dequeue, told to the rules that ask for it (the others'
    /// state is not read).
    #[inline]
    fn on_empty(&mut self) {
        if self.empty {
            self.rule.on_empty();
        }
    }

    /// Take the head packet, marking it if the rule says so; the packets
    /// the rule drops at departure are skipped (and an empty dequeue told
    /// when they were the last).
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
        loop {
            let p = ring::pop_front(&mut self.fifo)?;
            self.bytes -= p.wire as u64;
            if let Some(p) = self.leave(now, p) {
                return Some(p);
            }
            if self.fifo.is_empty() {
                self.on_empty();
                return None;
            }
        }
    }

    /// The dequeue's rule for `p`, just taken off the FIFO; None: dropped.
    #[inline]
    fn leave(&mut self, now: Nanos, mut p: Packet) -> Option<Packet> {
        let verdict = self.rule.on_departure(now, now - p.enqueued, self.fifo.len() as u32, self.bytes, p.ect());
        if self.requiet {
            self.quiet = self.rule.quiet();
        }
        match verdict {
            Verdict::Pass => {}
            Verdict::Mark => {
                if p.ect() && !p.ce() {
                    p.set_ce(true);
                    self.stats.marks += 1;
                }
            }
            Verdict::Drop => {
                self.stats.drops += 1;
                // The queue does not know its port: the trace says where.
                #[cfg(debug_assertions)]
                crate::trace::note(p.flow as usize, now, format_args!("drop,{},{:?},departure", p.seq, p.kind));
                return None;
            }
        }
        Some(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aqm::ecn_sharp::EcnSharpParams;
    use crate::aqm::{DropTail, EcnSharp, Red, Tcn};
    use crate::codel::{self, CoDel, CoDelRule};

    fn ecn_sharp(threshold: Nanos, target: Nanos, interval: Nanos) -> Box<dyn Aqm> {
        Box::new(EcnSharp::new(EcnSharpParams { threshold, target, interval }))
    }

    fn codel(params: codel::Params) -> Box<dyn Aqm> {
        Box::new(CoDelRule { params, state: CoDel::default() })
    }

    /// A full-sized data segment of flow 0.
    fn data(seq: u32) -> Packet {
        crate::lb::testing::data(0, seq, 0)
    }

    #[test]
    fn drop_tail_drops_beyond_the_limit() {
        let mut q = Qdisc::new(2, Box::new(DropTail));
        assert!(q.enqueue(0, data(0)) && q.enqueue(0, data(1)));
        assert!(!q.enqueue(0, data(2)));
        assert_eq!(q.stats.drops, 1);
        assert_eq!(q.dequeue(5).map(|p| p.seq), Some(0));
    }

    #[test]
    fn red_marks_arrivals_at_or_above_k() {
        let mut q = Qdisc::new(10, Box::new(Red { k: 2 }));
        for i in 0..4 {
            q.enqueue(0, data(i));
        }
        let ce: Vec<bool> = (0..4).map(|_| q.dequeue(0).unwrap().ce()).collect();
        assert_eq!(ce, [false, false, true, true]);
    }

    #[test]
    fn tcn_marks_strictly_above_the_threshold() {
        let mut q = Qdisc::new(10, Box::new(Tcn { threshold: 100 }));
        q.enqueue(0, data(0));
        q.enqueue(0, data(1));
        assert!(!q.dequeue(100).unwrap().ce());
        assert!(q.dequeue(101).unwrap().ce());
        assert_eq!(q.stats.marks, 1);
    }

    #[test]
    fn non_ect_packets_are_never_marked() {
        let mut q = Qdisc::new(10, Box::new(Tcn { threshold: 0 }));
        let mut ack = data(0);
        ack.set_ect(false);
        q.enqueue(0, ack);
        assert!(!q.dequeue(50).unwrap().ce());
    }

    #[test]
    fn ecn_sharp_persistent_marking_follows_the_control_law() {
        // Instantaneous threshold out of reach: only persistent marks.
        let (target, interval) = (10, 1000);
        let mut q = Qdisc::new(1000, ecn_sharp(u64::MAX, target, interval));
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
        let mut q = Qdisc::new(10, ecn_sharp(70, 10, 1_000_000));
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
        let params = codel::Params { target: 1_000, interval: 5_000, min_bytes: 0, mode: codel::Mode::Mark };
        // Each rule, whether a pass can be quiet, and whether some are not.
        type Rule = (&'static str, fn(codel::Params) -> Box<dyn Aqm>, bool, bool);
        let rules: [Rule; 7] = [
            ("drop-tail", |_| Box::new(DropTail), true, false),
            ("red 0", |_| Box::new(Red { k: 0 }), false, true),
            ("red 2", |_| Box::new(Red { k: 2 }), true, false),
            ("tcn 0", |_| Box::new(Tcn { threshold: 0 }), true, false),
            ("ecn# target 0", |_| ecn_sharp(50_000, 0, 3_000), false, true),
            ("ecn# target 1us", |_| ecn_sharp(4_000, 1_000, 3_000), true, true),
            ("codel", codel, false, true),
        ];
        for (rule, make, can_be_quiet, some_loud) in rules {
            let (mut fifo, mut pass) = (Qdisc::new(5, make(params)), Qdisc::new(5, make(params)));
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
                    assert_eq!(pass.pass(now, p, drained), through, "{rule} at {now}");
                    passed += 1;
                }
                assert_eq!(format!("{fifo:?}"), format!("{pass:?}"), "{rule} at {now}");
            }
            assert!(passed > 50 && pass.stats.drops > 0, "{rule}: {passed} passed");
            // Both ways through `pass` are taken: the quiet one wherever the
            // rule allows it, the full one after ECN#'s state was armed.
            assert_eq!(quiet > 0, can_be_quiet, "{rule}: {quiet} quiet passes");
            assert_eq!(quiet < passed, some_loud, "{rule}: {quiet} of {passed} passes quiet");
        }
    }

    #[test]
    fn codel_marks_a_standing_queue_but_not_its_last_packet() {
        let params = codel::Params { target: 10_240, interval: 102_400, min_bytes: 1500, mode: codel::Mode::Mark };
        let mut q = Qdisc::new(1000, codel(params));
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
            assert_eq!(alone.on_dequeue(&params, now, 20 * 1024, 20 * 1454, true) == Verdict::Mark, p.ce());
            if p.ce() {
                marked.push(t);
            }
        }
        assert_eq!(marked.len() as u64, q.stats.marks);
        assert!(marked.len() >= 5, "{marked:?}");
        // Drain it: the last packets leave fewer than 1500 bytes behind.
        let mut q = Qdisc::new(10, codel(params));
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

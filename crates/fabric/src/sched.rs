//! Schedulers of a multi-queue switch port: several classes, each with its
//! own queue discipline ([`Qdisc`], so its own limit and marking rule), and
//! a rule choosing which class sends next.
//!
//! The seed's mq experiment (ns3-ecn-sharp,
//! `examples/rtt-variations/mq.cc`) puts a DWRR scheduler with quanta
//! 2:1:1 on the bottleneck port and a TCN or ECN# queue under each class.
//! The rules follow the textbook definitions:
//!
//! - **DWRR** (Shreedhar and Varghese, "Efficient fair queueing using
//!   deficit round robin", SIGCOMM 1995): backlogged classes take turns in
//!   the order they became backlogged; a class at the head of the round
//!   whose deficit does not cover its head packet gets its quantum added
//!   and goes to the back; otherwise it sends and pays the packet's bytes.
//!   A class that empties loses its deficit. Under backlog each class gets
//!   bytes in proportion to its quantum.
//! - **Strict priority**: the lowest-numbered backlogged class sends.
//! - **WFQ**, as self-clocked fair queueing (Golestani, INFOCOM 1994): a
//!   packet's finish tag is `max(V, last tag of its class) + bytes ÷
//!   weight`, where V is the tag of the packet last sent; the smallest head
//!   tag sends (ties to the lower class). Under backlog each class gets
//!   bytes in proportion to its weight.
//!
//! Tags are integers (bytes × 2^32 ÷ weight), so runs stay deterministic.

use std::collections::VecDeque;

use crate::packet::{Nanos, Packet};
use crate::qdisc::{Qdisc, QueueStats};

/// The rule choosing the next class.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Policy {
    /// Quantum (bytes) of each class.
    Dwrr { quanta: Vec<u32> },
    /// Class 0 first, then 1, …
    Strict,
    /// Weight of each class.
    Wfq { weights: Vec<u32> },
}

/// Per-policy state.
#[derive(Debug)]
enum State {
    Dwrr { quanta: Vec<u32>, deficit: Vec<u64>, active: VecDeque<usize>, listed: Vec<bool> },
    Strict,
    Wfq { weights: Vec<u32>, tags: Vec<VecDeque<u128>>, last: Vec<u128>, virtual_time: u128 },
}

/// A port's classes and the scheduler between them.
#[derive(Debug)]
pub struct Scheduler(Classes);

/// Where a one-class scheduler holds its discipline: after the enum's tag
/// (an enum's layout cannot be asserted at compile time; a test checks it).
#[allow(dead_code)] // read by `world`'s compile-time assertions (see `qdisc::START_IN_LINE`)
pub(crate) const FIFO_AT: usize = 8;

#[derive(Debug)]
enum Classes {
    /// One class and no choice (most ports): the discipline is held inline,
    /// which saves a pointer to follow (and often a cache miss) on every
    /// packet the port enqueues, dequeues or counts.
    Fifo(Qdisc),
    /// Several classes and the rule between them.
    Several { classes: Vec<Qdisc>, state: State },
}

impl Scheduler {
    /// One class per child discipline. `policy` lists one quantum or weight
    /// per class (each above 0); the scenario checks this before.
    pub fn new(policy: Policy, classes: Vec<Qdisc>) -> Scheduler {
        let n = classes.len();
        let state = match policy {
            Policy::Dwrr { quanta } => {
                State::Dwrr { quanta, deficit: vec![0; n], active: VecDeque::new(), listed: vec![false; n] }
            }
            Policy::Strict => State::Strict,
            Policy::Wfq { weights } => {
                State::Wfq { weights, tags: vec![VecDeque::new(); n], last: vec![0; n], virtual_time: 0 }
            }
        };
        match (state, classes.len()) {
            // One strict class is a plain discipline (the ports without a
            // scheduler).
            (State::Strict, 1) => Scheduler::fifo(classes.into_iter().next().expect("one class")),
            (state, _) => Scheduler(Classes::Several { classes, state }),
        }
    }

    /// A single class: the port behaves as its one discipline.
    pub fn fifo(q: Qdisc) -> Scheduler {
        Scheduler(Classes::Fifo(q))
    }

    /// The classes' disciplines, in class order.
    fn all(&self) -> &[Qdisc] {
        match &self.0 {
            Classes::Fifo(q) => std::slice::from_ref(q),
            Classes::Several { classes, .. } => classes,
        }
    }

    /// Number of classes.
    pub fn classes(&self) -> usize {
        self.all().len()
    }

    /// Marking and drop counters summed over the classes.
    pub fn stats(&self) -> QueueStats {
        self.all().iter().fold(QueueStats::default(), |a, q| QueueStats {
            marks: a.marks + q.stats.marks,
            drops: a.drops + q.stats.drops,
            enqueued: a.enqueued + q.stats.enqueued,
        })
    }

    /// The child discipline of `class`.
    pub fn class(&self, class: usize) -> &Qdisc {
        &self.all()[class]
    }

    /// Packets waiting in every class.
    #[inline]
    pub fn len(&self) -> usize {
        match &self.0 {
            Classes::Fifo(q) => q.len(),
            Classes::Several { classes, .. } => classes.iter().map(Qdisc::len).sum(),
        }
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        match &self.0 {
            Classes::Fifo(q) => q.is_empty(),
            Classes::Several { classes, .. } => classes.iter().all(Qdisc::is_empty),
        }
    }

    /// The discipline of a single-class port when it holds no packet (a
    /// packet offered to it may pass straight through, [`Qdisc::pass`]).
    #[inline]
    pub fn idle_fifo(&mut self) -> Option<&mut Qdisc> {
        match &mut self.0 {
            Classes::Fifo(q) if q.is_empty() => Some(q),
            _ => None,
        }
    }

    /// Offer a packet to `class` (clamped to the last class); false when
    /// that class's discipline dropped it.
    #[inline]
    pub fn enqueue(&mut self, now: Nanos, class: usize, p: Packet) -> bool {
        let (classes, state) = match &mut self.0 {
            Classes::Fifo(q) => return q.enqueue(now, p),
            Classes::Several { classes, state } => (classes, state),
        };
        let c = class.min(classes.len() - 1);
        let wire = p.wire;
        if !classes[c].enqueue(now, p) {
            return false;
        }
        match state {
            State::Dwrr { active, listed, .. } => {
                if !listed[c] {
                    listed[c] = true;
                    active.push_back(c);
                }
            }
            State::Strict => {}
            State::Wfq { weights, tags, last, virtual_time } => {
                let tag = (*virtual_time).max(last[c]) + ((wire as u128) << 32) / weights[c] as u128;
                last[c] = tag;
                tags[c].push_back(tag);
            }
        }
        true
    }

    /// The class that sends next, or None when every class is empty.
    fn pick(classes: &[Qdisc], state: &mut State) -> Option<usize> {
        match state {
            State::Dwrr { quanta, deficit, active, .. } => loop {
                let &c = active.front()?;
                let head = classes[c].head_wire().expect("listed classes are backlogged") as u64;
                if deficit[c] >= head {
                    deficit[c] -= head;
                    return Some(c);
                }
                deficit[c] += quanta[c] as u64;
                active.rotate_left(1);
            },
            State::Strict => classes.iter().position(|q| !q.is_empty()),
            State::Wfq { tags, virtual_time, .. } => {
                let (c, tag) = tags
                    .iter()
                    .enumerate()
                    .filter_map(|(c, t)| t.front().map(|&t| (c, t)))
                    .min_by_key(|&(c, t)| (t, c))?;
                *virtual_time = tag;
                tags[c].pop_front();
                Some(c)
            }
        }
    }

    /// Take the next packet (marked by its class's rule if it says so;
    /// packets the rule drops are skipped).
    #[inline]
    pub fn dequeue(&mut self, now: Nanos) -> Option<(usize, Packet)> {
        let (classes, state) = match &mut self.0 {
            // The common single-class port (`fifo`): no choice to make.
            Classes::Fifo(q) => return q.dequeue(now).map(|p| (0, p)),
            Classes::Several { classes, state } => (classes, state),
        };
        loop {
            let c = Scheduler::pick(classes, state)?;
            // The class's rule may drop packets at departure (the head the
            // class was picked for among them): their tags go with them,
            // and a class left empty gives up its turn.
            let drops = classes[c].stats.drops;
            let p = classes[c].dequeue(now);
            let dropped = classes[c].stats.drops - drops;
            match state {
                State::Dwrr { deficit, active, listed, .. } if classes[c].is_empty() => {
                    deficit[c] = 0;
                    listed[c] = false;
                    active.retain(|&x| x != c);
                }
                State::Wfq { tags, .. } => {
                    let taken = dropped + u64::from(p.is_some());
                    tags[c].drain(..(taken - 1) as usize);
                }
                _ => {}
            }
            if let Some(p) = p {
                return Some((c, p));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aqm::{Aqm, DropTail, Tcn, Verdict};

    fn pkt(flow: u32, wire: u16) -> Packet {
        let mut p = crate::lb::testing::data(flow, 0, 0);
        p.wire = wire;
        p
    }

    #[test]
    fn a_one_class_scheduler_holds_its_discipline_after_the_tag() {
        let s = Scheduler::fifo(Qdisc::new(10, Box::new(DropTail)));
        let at = std::ptr::from_ref(s.class(0)) as usize - std::ptr::from_ref(&s) as usize;
        assert_eq!(at, FIFO_AT);
    }

    fn three(policy: Policy) -> Scheduler {
        Scheduler::new(policy, (0..3).map(|_| Qdisc::new(10_000, Box::new(DropTail))).collect())
    }

    /// Keep every class backlogged with `wire`-byte packets and return the
    /// classes of the first `n` dequeues.
    fn backlogged(s: &mut Scheduler, wires: [u16; 3], n: usize) -> Vec<usize> {
        for _ in 0..n {
            for (c, &w) in wires.iter().enumerate() {
                s.enqueue(0, c, pkt(c as u32, w));
            }
        }
        (0..n).map(|_| s.dequeue(0).unwrap().0).collect()
    }

    fn bytes_by_class(order: &[usize], wires: [u16; 3]) -> [u64; 3] {
        let mut b = [0u64; 3];
        for &c in order {
            b[c] += wires[c] as u64;
        }
        b
    }

    #[test]
    fn dwrr_2_1_1_golden_order_and_byte_ratio() {
        let mut s = three(Policy::Dwrr { quanta: vec![3000, 1500, 1500] });
        let order = backlogged(&mut s, [1500; 3], 400);
        assert_eq!(order[..8], [0, 0, 1, 2, 0, 0, 1, 2]);
        assert_eq!(bytes_by_class(&order, [1500; 3]), [300_000, 150_000, 150_000]);
    }

    #[test]
    fn dwrr_shares_bytes_not_packets() {
        // Class 0 sends 500-byte packets, the others 1500: with equal quanta
        // the bytes still split evenly.
        let wires = [500, 1500, 1500];
        let mut s = three(Policy::Dwrr { quanta: vec![1500; 3] });
        let order = backlogged(&mut s, wires, 500);
        let b = bytes_by_class(&order, wires);
        assert!(b[0].abs_diff(b[1]) <= 1500 && b[1] == b[2], "{b:?}");
    }

    #[test]
    fn dwrr_forgets_the_deficit_of_a_class_that_empties() {
        let mut s = three(Policy::Dwrr { quanta: vec![3000, 1500, 1500] });
        s.enqueue(0, 0, pkt(0, 1000));
        s.enqueue(0, 1, pkt(1, 1500));
        assert_eq!(s.dequeue(0).unwrap().0, 0);
        // Class 0 left with 2000 bytes of deficit, now dropped: a new
        // packet waits for its turn behind class 1.
        s.enqueue(0, 0, pkt(0, 1000));
        let order: Vec<usize> = (0..2).map(|_| s.dequeue(0).unwrap().0).collect();
        assert_eq!(order, [1, 0]);
        assert!(s.dequeue(0).is_none() && s.is_empty());
    }

    #[test]
    fn strict_priority_serves_lower_classes_first() {
        let mut s = three(Policy::Strict);
        for c in [2, 1, 2, 0, 1] {
            s.enqueue(0, c, pkt(c as u32, 1500));
        }
        let order: Vec<usize> = (0..5).map(|_| s.dequeue(0).unwrap().0).collect();
        assert_eq!(order, [0, 1, 1, 2, 2]);
    }

    #[test]
    fn wfq_2_1_1_golden_order_and_byte_ratio() {
        let mut s = three(Policy::Wfq { weights: vec![2, 1, 1] });
        let order = backlogged(&mut s, [1500; 3], 400);
        assert_eq!(order[..8], [0, 0, 1, 2, 0, 0, 1, 2]);
        assert_eq!(bytes_by_class(&order, [1500; 3]), [300_000, 150_000, 150_000]);
    }

    #[test]
    fn wfq_does_not_bank_credit_for_an_idle_class() {
        let mut s = three(Policy::Wfq { weights: vec![1, 1, 1] });
        for _ in 0..10 {
            s.enqueue(0, 1, pkt(1, 1500));
        }
        for _ in 0..5 {
            s.dequeue(0);
        }
        // Class 0 arrives late: it starts from the current virtual time,
        // so it alternates with class 1 instead of sending a burst.
        for _ in 0..3 {
            s.enqueue(0, 0, pkt(0, 1500));
        }
        let order: Vec<usize> = (0..6).map(|_| s.dequeue(0).unwrap().0).collect();
        assert_eq!(order, [0, 1, 0, 1, 0, 1]);
    }

    #[test]
    fn each_class_keeps_its_own_limit_and_marking() {
        let classes = vec![Qdisc::new(1, Box::new(DropTail)), Qdisc::new(10, Box::new(Tcn { threshold: 10 }))];
        let mut s = Scheduler::new(Policy::Strict, classes);
        assert!(s.enqueue(0, 0, pkt(0, 1500)));
        assert!(!s.enqueue(0, 0, pkt(0, 1500)), "class 0 holds one packet");
        assert!(s.enqueue(0, 1, pkt(1, 1500)));
        assert!(!s.dequeue(100).unwrap().1.ce());
        assert!(s.dequeue(100).unwrap().1.ce(), "class 1's TCN marks after 10 ns");
        assert_eq!(s.class(0).stats.drops, 1);
    }

    /// Drops every packet leaving at an odd count of departures (all
    /// when `all`).
    #[derive(Debug)]
    struct DropAlternate {
        departures: u32,
        all: bool,
    }

    impl Aqm for DropAlternate {
        fn name(&self) -> &'static str {
            "drop-alternate"
        }

        fn on_departure(&mut self, _: Nanos, _: Nanos, _: u32, _: u64, _: bool) -> Verdict {
            self.departures += 1;
            if self.all || self.departures % 2 == 1 {
                Verdict::Drop
            } else {
                Verdict::Pass
            }
        }
    }

    #[test]
    fn packets_a_class_drops_at_departure_give_up_their_turn() {
        for policy in [Policy::Dwrr { quanta: vec![1500; 2] }, Policy::Wfq { weights: vec![1, 1] }, Policy::Strict] {
            for all in [false, true] {
                let rule = Box::new(DropAlternate { departures: 0, all });
                let classes = vec![Qdisc::new(10, rule), Qdisc::new(10, Box::new(DropTail))];
                let mut s = Scheduler::new(policy.clone(), classes);
                for _ in 0..4 {
                    s.enqueue(0, 0, pkt(0, 1500));
                    s.enqueue(0, 1, pkt(1, 1500));
                }
                let order: Vec<usize> = std::iter::from_fn(|| s.dequeue(0).map(|(c, _)| c)).collect();
                let from_0 = order.iter().filter(|&&c| c == 0).count();
                let want = if all { 0 } else { 2 };
                assert_eq!((from_0, order.len()), (want, want + 4), "{policy:?}, all {all}: {order:?}");
                assert_eq!(s.class(0).stats.drops, 4 - want as u64);
                assert!(s.is_empty());
                if let (Policy::Wfq { .. }, false) = (&policy, all) {
                    // A dropped packet's tag leaves with it: class 0's
                    // second packet sent has tag 2, after class 1's 1 and 2.
                    assert_eq!(order, [0, 1, 1, 0, 1, 1], "{order:?}");
                }
            }
        }
    }
}

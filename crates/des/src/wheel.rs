//! A timing wheel in front of the radix heap, for models whose events are
//! nearly all due within a bounded time after they are scheduled.
//!
//! The packet-level fabric schedules about twelve events per data packet,
//! and almost all of them (a transmitter freeing up, a packet reaching the
//! end of a link) a few microseconds ahead; the request simulator's random
//! delays (a Poisson client's next request, a server's end of service) are
//! due a few milliseconds ahead. In [`Queue`] such an event is filed in a
//! bucket and moved one or more times before it pops. Here it is filed
//! once in the slot of its time on a wheel (Varghese and Lauck, "Hashed and
//! hierarchical timing wheels", SOSP 1987): a ring of slots of a fixed
//! width (both powers of two, chosen by the model: [`Wheel::new`] has the
//! fabric's [`SLOTS`] slots of [`SLOT_NS`], [`Wheel::with_slots`] any
//! other), covering the horizon from the clock's slot on. An event is
//! appended to its slot; a slot is sorted by time (a stable sort) when the
//! clock reaches it, and an event filed into the clock's own slot goes
//! after every event there due at or before it. Either way events at the
//! same time leave in the order they were scheduled, as in [`Queue`].
//! Events due beyond the horizon (timeouts, flow starts, samples) wait in
//! a [`Queue`], the overflow.
//!
//! Lanes, as in [`Queue`]: a wheel whose entries carry a sequence number
//! (`Wheel<E, u64>`) also has FIFO lanes for events due a constant delay
//! after they are scheduled (a network hop of fixed latency), filed once at
//! the back of the lane's ring and merged with the wheel at pop time by
//! (time, sequence number). A wheel without lanes (`Wheel<E>`, the
//! fabric's) keeps no sequence number: its entries stay (time, event).
//!
//! The order is exactly [`Queue`]'s, (time, order of scheduling), also
//! between the wheel and the overflow: an overflow event was due beyond
//! the horizon when it was scheduled, so it moves to its slot when the
//! horizon first reaches that slot — the clock's slot advancing — before
//! any event can be scheduled straight into it, and the overflow hands
//! its events over in (time, scheduling) order. A slot therefore holds its
//! events from the overflow first, then those scheduled into it, each
//! group in scheduling order, and the stable sort and the sorted insertion
//! keep equal times in that order. Between the wheel and the lanes the
//! sequence numbers decide, as between [`Queue`]'s heap and its lanes. The
//! clock's slot moves to a later slot only when no lane event is due
//! before that slot begins, so the clock (the time of the last event
//! popped) never falls behind the clock's slot, and no event can be
//! scheduled into a slot already passed. The property tests below check
//! the pop order against [`Queue`] (and its lanes) for random
//! interleavings, at the fabric's slots and at other widths and counts.
//!
//! As with [`Queue`], no event may be scheduled before the time of the last
//! event popped.

use std::collections::VecDeque;

use fulcrum_balance::Nanos;

use crate::queue::{Lane, Queue};

/// Nanoseconds per slot of [`Wheel::new`], as a power of two.
const SLOT_BITS: u32 = 6;
/// Nanoseconds per slot of [`Wheel::new`] (the fabric's wheel).
pub const SLOT_NS: Nanos = 1 << SLOT_BITS;
/// Slots of [`Wheel::new`].
pub const SLOTS: usize = 256;
/// How far ahead of the clock's slot [`Wheel::new`] reaches; later events
/// wait in the overflow.
pub const HORIZON: Nanos = SLOTS as Nanos * SLOT_NS;

/// What a wheel's entries carry to order equal times between the wheel
/// and its lanes: nothing (`()`, a wheel without lanes) or a sequence
/// number (`u64`, a wheel with lanes). Sealed: only these two.
pub trait Order: Copy + private::Sealed {
    /// Whether entries carry a sequence number (and the wheel has lanes).
    const COUNTED: bool;
    /// The stamp of the `n`-th event scheduled.
    fn nth(n: u64) -> Self;
    /// The sequence number (0 when not counted).
    fn seq(self) -> u64;
}

impl Order for () {
    const COUNTED: bool = false;
    #[inline]
    fn nth(_: u64) -> Self {}
    #[inline]
    fn seq(self) -> u64 {
        0
    }
}

impl Order for u64 {
    const COUNTED: bool = true;
    #[inline]
    fn nth(n: u64) -> Self {
        n
    }
    #[inline]
    fn seq(self) -> u64 {
        self
    }
}

mod private {
    pub trait Sealed {}
    impl Sealed for () {}
    impl Sealed for u64 {}
}

/// A pending event: its time, its stamp ([`Order`]) and itself.
#[derive(Clone, Copy)]
struct Entry<E, S> {
    at: Nanos,
    seq: S,
    ev: E,
}

/// One lane's events, due in the order they were scheduled.
struct LaneEvents<E, S> {
    delay: Nanos,
    events: VecDeque<Entry<E, S>>,
}

/// Pending events of type `E`, popped in (time, scheduling order), like
/// [`Queue`]; cheaper than it when most events are due within the
/// horizon. `S` is `()` for a wheel without lanes, `u64` for one with
/// ([`Order`]).
pub struct Wheel<E, S: Order = ()> {
    /// Slot `s & mask` holds the events due in slot `s` (times
    /// `s << slot_bits …`) for `s` from `cur` to `cur + slots − 1`, in the
    /// order they were filed; the clock's slot sorted by time, equal times
    /// in scheduling order.
    slots: Vec<Vec<Entry<E, S>>>,
    /// Bit `i` (of word `i / 64`) set when slot `i` holds events not yet
    /// popped.
    occupied: Vec<u64>,
    /// Nanoseconds per slot, as a power of two.
    slot_bits: u32,
    /// Slots − 1 (slots are a power of two).
    mask: u64,
    /// The clock's slot (absolute: time >> `slot_bits`).
    cur: u64,
    /// Events of the clock's slot already popped (its front ones).
    head: usize,
    /// The time of the last event popped (0 before the first).
    last: Nanos,
    /// The stamp of the next event scheduled (counted only with lanes).
    seq: u64,
    /// Events due at or after the horizon, `(cur + slots) << slot_bits`,
    /// when they were scheduled, with their stamps.
    overflow: Queue<(S, E)>,
    /// The earliest time in the overflow (`Nanos::MAX` when empty).
    overflow_next: Nanos,
    /// No event on the wheel or in the overflow is due before this time
    /// (`Nanos::MAX` when there is none), and while the clock's slot has
    /// events left it is the time of the first: a lane's front before it
    /// is handed over with no look at the slots. Kept only on a wheel
    /// with lanes.
    floor: Nanos,
    /// The lanes (none unless `S` counts).
    lanes: Vec<LaneEvents<E, S>>,
    /// Events pending on the wheel and the lanes (the overflow counts its
    /// own).
    len: usize,
}

impl<E: Copy, S: Order> Default for Wheel<E, S> {
    fn default() -> Self {
        Self::new()
    }
}

impl<E: Copy, S: Order> Wheel<E, S> {
    /// An empty wheel of [`SLOTS`] slots of [`SLOT_NS`] (the fabric's)
    /// whose clock is at time 0.
    pub fn new() -> Self {
        Self::with_slots(SLOT_BITS, SLOTS)
    }

    /// An empty wheel of `slots` slots of `2^slot_bits` ns each, whose
    /// clock is at time 0: it files events due within `slots << slot_bits`
    /// ns of the clock's slot once, later ones go through the overflow.
    ///
    /// # Panics
    /// If `slots` is not a power of two of at least 64, or the horizon
    /// overflows 64 bits.
    pub fn with_slots(slot_bits: u32, slots: usize) -> Self {
        assert!(slots.is_power_of_two() && slots >= 64, "a wheel has a power of two of at least 64 slots");
        assert!(slot_bits + slots.trailing_zeros() < 63, "the horizon fits 63 bits");
        Wheel {
            slots: (0..slots).map(|_| Vec::new()).collect(),
            occupied: vec![0; slots / 64],
            slot_bits,
            mask: slots as u64 - 1,
            cur: 0,
            head: 0,
            last: 0,
            seq: 0,
            overflow: Queue::new(),
            overflow_next: Nanos::MAX,
            floor: Nanos::MAX,
            lanes: Vec::new(),
            len: 0,
        }
    }

    /// How far ahead of the clock's slot the wheel reaches.
    pub fn horizon(&self) -> Nanos {
        (self.mask + 1) << self.slot_bits
    }

    /// Schedule `ev` at time `at`.
    ///
    /// # Panics
    /// If `at` is earlier than the last event popped: time cannot go back.
    #[inline(always)]
    pub fn schedule(&mut self, at: Nanos, ev: E) {
        // The common case, an event for a later slot within the horizon
        // whose vector has room, has no call in it (so it needs no saved
        // registers where it is inlined); everything else is
        // `schedule_slow`. `at >> slot_bits` is at least `cur` when `at`
        // is not in the past: the clock is never before the clock's slot
        // (see the module's notes).
        let s = at >> self.slot_bits;
        if at >= self.last && s != self.cur && s - self.cur <= self.mask {
            let i = (s & self.mask) as usize;
            let slot = &mut self.slots[i];
            if slot.len() < slot.capacity() {
                slot.push(Entry { at, seq: S::nth(self.seq), ev });
                if S::COUNTED {
                    self.seq += 1;
                }
                self.occupied[i / 64] |= 1 << (i % 64);
                self.len += 1;
                if S::COUNTED {
                    self.floor = self.floor.min(at);
                }
                return;
            }
        }
        self.schedule_slow(at, ev);
    }

    /// [`Wheel::schedule`] into the clock's slot, a full vector, the
    /// overflow, or the past (a panic).
    #[inline(never)]
    fn schedule_slow(&mut self, at: Nanos, ev: E) {
        assert!(at >= self.last, "event scheduled at {at} ns, before the last event popped ({} ns)", self.last);
        let seq = S::nth(self.seq);
        if S::COUNTED {
            self.seq += 1;
        }
        if (at >> self.slot_bits) - self.cur <= self.mask {
            self.file(Entry { at, seq, ev });
        } else {
            self.overflow.schedule(at, (seq, ev));
            self.overflow_next = self.overflow_next.min(at);
            if S::COUNTED {
                self.floor = self.floor.min(at);
            }
        }
    }

    /// Put an event due within the horizon in its slot: at the end, or in
    /// the clock's slot (sorted, being popped) after every event due at or
    /// before it. Other slots are sorted when the clock reaches them.
    #[inline]
    fn file(&mut self, e: Entry<E, S>) {
        let s = e.at >> self.slot_bits;
        let i = (s & self.mask) as usize;
        let slot = &mut self.slots[i];
        slot.push(e);
        if s == self.cur {
            // Moved down past the later events, one step of an insertion
            // sort; never past the popped ones, which are due by now.
            let mut k = slot.len() - 1;
            while k > 0 && slot[k - 1].at > e.at {
                slot[k] = slot[k - 1];
                k -= 1;
            }
            slot[k] = e;
        }
        self.occupied[i / 64] |= 1 << (i % 64);
        self.len += 1;
        if S::COUNTED {
            self.floor = self.floor.min(e.at);
        }
    }

    /// The earliest event if it is due at or before `until`; otherwise
    /// `None`, and the queue is unchanged.
    #[inline]
    pub fn pop_until(&mut self, until: Nanos) -> Option<(Nanos, E)> {
        loop {
            let lane = if S::COUNTED { self.lane_front() } else { None };
            if let Some((lane, l_at, _)) = lane {
                // Before anything on the wheel (the common case): no look
                // at the slots.
                if l_at < self.floor {
                    return self.pop_lane(lane, l_at, until);
                }
            }
            let i = (self.cur & self.mask) as usize;
            if let Some(&Entry { at, seq, ev }) = self.slots[i].get(self.head) {
                debug_assert!(!S::COUNTED || at == self.floor, "the floor is the clock's slot's first event");
                if let Some((lane, l_at, l_seq)) = lane {
                    if l_at == at && l_seq < seq.seq() {
                        return self.pop_lane(lane, l_at, until);
                    }
                }
                if at > until {
                    return None;
                }
                self.head += 1;
                self.last = at;
                self.len -= 1;
                match self.slots[i].get(self.head) {
                    Some(e) => {
                        if S::COUNTED {
                            self.floor = e.at;
                        }
                    }
                    None => {
                        self.slots[i].clear();
                        self.head = 0;
                        self.occupied[i / 64] &= !(1 << (i % 64));
                        if S::COUNTED {
                            self.floor = self.next_start();
                        }
                    }
                }
                return Some((at, ev));
            }
            // The clock's slot is spent: the next occupied one, or with the
            // wheel empty the overflow's earliest.
            let next = match self.next_slot() {
                Some(s) => Some(s),
                None if self.overflow_next < Nanos::MAX => Some(self.overflow_next >> self.slot_bits),
                None => None,
            };
            if let Some((lane, l_at, _)) = lane {
                // A lane's event before that slot begins goes first, and the
                // clock's slot stays.
                if next.is_none_or(|s| l_at < s << self.slot_bits) {
                    return self.pop_lane(lane, l_at, until);
                }
            }
            if !self.enter(next?, until) {
                // Nothing on the wheel is due by `until`; a lane's event at
                // or after the slot's start may be (the clock's slot stays).
                return lane.and_then(|(lane, l_at, _)| self.pop_lane(lane, l_at, until));
            }
        }
    }

    /// The start of the next occupied slot after the clock's (spent), or
    /// with none the overflow's earliest time (`Nanos::MAX` if none): a
    /// floor for the events on the wheel.
    #[inline(never)]
    fn next_start(&self) -> Nanos {
        match self.next_slot() {
            Some(s) => s << self.slot_bits,
            None => self.overflow_next,
        }
    }

    /// Make `s`, the next slot holding events (or, the wheel empty, the
    /// overflow's earliest's), the clock's slot, sorted, unless its
    /// earliest event is after `until`: then `false`, nothing moved. Either
    /// way the floor becomes that slot's earliest time.
    #[inline]
    fn enter(&mut self, s: u64, until: Nanos) -> bool {
        let slot = &mut self.slots[(s & self.mask) as usize];
        if slot.is_empty() {
            // From the overflow, which hands its events over in order.
            self.floor = self.overflow_next;
        } else {
            // A stable sort by time keeps equal times in the order they
            // were filed, which is their scheduling order.
            slot.sort_by_key(|e| e.at);
            self.floor = slot[0].at;
        }
        if self.floor > until {
            return false;
        }
        self.cur = s;
        self.head = 0;
        let end = (s + self.mask + 1) << self.slot_bits;
        if self.overflow_next < end {
            self.migrate(end);
        }
        true
    }

    /// The first occupied slot after the clock's (absolute), if any.
    #[inline]
    fn next_slot(&self) -> Option<u64> {
        let words = self.occupied.len();
        let from = (self.cur & self.mask) as usize;
        // Slots after `from` in its own word, then the other words round
        // the ring, then the slots up to `from` in its word.
        let (w0, b0) = (from / 64, from % 64);
        let above = if b0 == 63 { 0 } else { self.occupied[w0] & (!0u64 << (b0 + 1)) };
        if above != 0 {
            return Some(self.cur + (above.trailing_zeros() as usize - b0) as u64);
        }
        for k in 1..=words {
            let w = (w0 + k) % words;
            let bits = if k == words { self.occupied[w] & ((1u64 << b0) - 1) } else { self.occupied[w] };
            if bits != 0 {
                let i = w * 64 + bits.trailing_zeros() as usize;
                return Some(self.cur + ((i + words * 64 - from) % (words * 64)) as u64);
            }
        }
        None
    }

    /// Move the overflow's events due before `end` to their slots, in
    /// (time, scheduling) order: each slot they go to is empty, since it
    /// has only just come within the horizon.
    fn migrate(&mut self, end: Nanos) {
        while let Some((at, (seq, ev))) = self.overflow.pop_until(end - 1) {
            self.file(Entry { at, seq, ev });
        }
        self.overflow_next = self.overflow.peek_time().unwrap_or(Nanos::MAX);
    }

    /// The front first in (time, sequence) order among the lanes': lane,
    /// time, sequence.
    #[inline]
    fn lane_front(&self) -> Option<(usize, Nanos, u64)> {
        if let [lane] = &self.lanes[..] {
            // One lane (all hops of one latency): no loop.
            return lane.events.front().map(|e| (0, e.at, e.seq.seq()));
        }
        let mut best: Option<(usize, Nanos, u64)> = None;
        for (i, lane) in self.lanes.iter().enumerate() {
            if let Some(e) = lane.events.front() {
                if best.is_none_or(|(_, at, seq)| (e.at, e.seq.seq()) < (at, seq)) {
                    best = Some((i, e.at, e.seq.seq()));
                }
            }
        }
        best
    }

    /// Hand over the front of `lane`, due at `at`, if that is by `until`.
    #[inline]
    fn pop_lane(&mut self, lane: usize, at: Nanos, until: Nanos) -> Option<(Nanos, E)> {
        if at > until {
            return None;
        }
        let e = self.lanes[lane].events.pop_front().expect("a front");
        self.last = at;
        self.len -= 1;
        Some((at, e.ev))
    }

    /// The earliest event, if any.
    #[inline]
    pub fn pop(&mut self) -> Option<(Nanos, E)> {
        self.pop_until(Nanos::MAX)
    }

    /// Pending events.
    #[inline]
    pub fn len(&self) -> usize {
        self.len + self.overflow.len()
    }

    /// Whether no event is pending.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<E: Copy> Wheel<E, u64> {
    /// The lane for events due `delay` after they are scheduled, made on
    /// first use: every call with the same delay returns the same lane.
    pub fn lane(&mut self, delay: Nanos) -> Lane {
        let i = match self.lanes.iter().position(|l| l.delay == delay) {
            Some(i) => i,
            None => {
                self.lanes.push(LaneEvents { delay, events: VecDeque::new() });
                self.lanes.len() - 1
            }
        };
        Lane(u32::try_from(i).expect("fewer than 2^32 lanes"))
    }

    /// The delay `lane` was made with.
    pub fn lane_delay(&self, lane: Lane) -> Nanos {
        self.lanes[lane.0 as usize].delay
    }

    /// Schedule `ev` on `lane`: at the time of the last event popped plus
    /// the lane's delay, in the same order as [`Wheel::schedule`] at that
    /// time would put it, but filed once in a FIFO.
    ///
    /// # Panics
    /// If the time overflows, or `lane` is beyond this wheel's lanes.
    #[inline]
    pub fn schedule_lane(&mut self, lane: Lane, ev: E) {
        let seq = self.seq;
        self.seq += 1;
        let lane = &mut self.lanes[lane.0 as usize];
        let at = self.last.checked_add(lane.delay).expect("a lane's event is due before the end of time");
        lane.events.push_back(Entry { at, seq, ev });
        self.len += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn equal_times_leave_in_scheduling_order_across_the_horizon() {
        let mut w: Wheel<i32> = Wheel::new();
        // Due at 3 × HORIZON: the first two go to the overflow, the next
        // two straight to the wheel once the clock is close.
        w.schedule(3 * HORIZON, 0);
        w.schedule(3 * HORIZON, 1);
        w.schedule(3 * HORIZON - 10, 9);
        assert_eq!(w.pop(), Some((3 * HORIZON - 10, 9)));
        w.schedule(3 * HORIZON, 2);
        w.schedule(3 * HORIZON - 5, 8);
        w.schedule(3 * HORIZON, 3);
        let rest: Vec<_> = std::iter::from_fn(|| w.pop()).collect();
        assert_eq!(
            rest,
            [(3 * HORIZON - 5, 8), (3 * HORIZON, 0), (3 * HORIZON, 1), (3 * HORIZON, 2), (3 * HORIZON, 3)]
        );
        assert!(w.is_empty());
    }

    #[test]
    fn pop_until_leaves_later_events() {
        let mut w: Wheel<i32> = Wheel::new();
        w.schedule(100, 1);
        w.schedule(HORIZON * 5, 2);
        assert_eq!(w.pop_until(99), None);
        assert_eq!(w.pop_until(100), Some((100, 1)));
        assert_eq!(w.pop_until(HORIZON * 5 - 1), None);
        // The clock is still at 100: an event before the far one is fine.
        w.schedule(200, 3);
        assert_eq!(w.len(), 2);
        assert_eq!(w.pop_until(Nanos::MAX), Some((200, 3)));
        assert_eq!(w.pop_until(Nanos::MAX), Some((HORIZON * 5, 2)));
        assert_eq!(w.pop(), None);
    }

    #[test]
    #[should_panic(expected = "before the last event popped")]
    fn scheduling_in_the_past_panics() {
        let mut w: Wheel<()> = Wheel::new();
        w.schedule(10, ());
        w.pop();
        w.schedule(9, ());
    }

    #[test]
    fn a_wheel_without_lanes_keeps_entries_of_time_and_event() {
        assert_eq!(std::mem::size_of::<Entry<u64, ()>>(), 16);
        assert_eq!(std::mem::size_of::<Entry<u64, u64>>(), 24);
    }

    #[test]
    fn lane_events_merge_with_the_slots_by_scheduling_order() {
        // 4 µs slots, 64 of them: a 100 µs lane, and slot events at the
        // same times as lane events, before and after them.
        let mut w: Wheel<char, u64> = Wheel::with_slots(12, 64);
        assert_eq!(w.horizon(), 64 << 12);
        let hop = w.lane(100_000);
        assert_eq!(w.lane(100_000), hop, "one lane per delay");
        assert_eq!(w.lane_delay(hop), 100_000);
        w.schedule(100_000, 'a');
        w.schedule_lane(hop, 'b'); // 100 µs: after 'a'
        w.schedule(100_000, 'c'); // after 'b'
        w.schedule(50_000, 'd');
        w.schedule(1_000_000, 'e'); // beyond the horizon
        assert_eq!(w.pop(), Some((50_000, 'd')));
        w.schedule_lane(hop, 'f'); // 150 µs
        w.schedule(150_000, 'g'); // after 'f'
        assert_eq!(w.pop_until(99_999), None);
        assert_eq!(w.len(), 6);
        let got: Vec<_> = std::iter::from_fn(|| w.pop()).collect();
        assert_eq!(
            got,
            [(100_000, 'a'), (100_000, 'b'), (100_000, 'c'), (150_000, 'f'), (150_000, 'g'), (1_000_000, 'e')]
        );
    }

    #[test]
    fn a_lane_event_due_by_until_goes_before_a_later_slot() {
        let mut w: Wheel<u8, u64> = Wheel::with_slots(10, 64);
        let lane = w.lane(1_030);
        w.schedule(1_040, 1); // slot 1 (1,024 …)
        w.schedule_lane(lane, 2); // 1,030: in slot 1, before 1,040
        assert_eq!(w.pop_until(1_035), Some((1_030, 2)));
        assert_eq!(w.pop_until(1_035), None);
        w.schedule(1_031, 3);
        assert_eq!(w.pop(), Some((1_031, 3)));
        assert_eq!(w.pop(), Some((1_040, 1)));
        assert_eq!(w.pop(), None);
    }

    #[derive(Clone, Debug)]
    enum Op {
        /// Schedule an event this far after the clock.
        Schedule(Nanos),
        /// Schedule on lane `i` of [`DELAYS`].
        Lane(usize),
        /// Pop up to this far after the clock.
        PopUntil(Nanos),
    }

    /// Lane delays: zero, short ones that collide with slot events, one
    /// near the horizons of the wheels below, one far beyond them.
    const DELAYS: [Nanos; 4] = [0, 3, 5_000, 1 << 30];

    /// Operations on a wheel of `2^bits` ns slots and `slots` of them;
    /// lane events among them if `lanes`.
    fn ops(bits: u32, slots: usize, lanes: bool) -> impl Strategy<Value = Vec<Op>> {
        let (width, horizon) = (1 << bits, (slots as Nanos) << bits);
        let delay = prop_oneof![
            4 => 0..2 * width,
            4 => 0..horizon + 2 * width,
            1 => 0..20 * horizon,
        ];
        let lane = if lanes { 2 } else { 0 };
        let op = prop_oneof![
            3 => delay.prop_map(Op::Schedule),
            lane => (0..DELAYS.len()).prop_map(Op::Lane),
            2 => (0..2 * horizon).prop_map(Op::PopUntil),
        ];
        proptest::collection::vec(op, 0..600)
    }

    /// Run `ops` on `wheel` and on a [`Queue`] (itself checked against a
    /// binary heap keyed by (time, sequence number)), asserting they pop
    /// the same events.
    fn check<S: Order>(
        mut wheel: Wheel<usize, S>,
        ops: Vec<Op>,
        mut lane: impl FnMut(&mut Wheel<usize, S>, Nanos, usize),
    ) -> Result<(), TestCaseError> {
        let mut queue = Queue::new();
        let lanes: Vec<Lane> = DELAYS.iter().map(|&d| queue.lane(d)).collect();
        let mut clock = 0;
        for (n, op) in ops.into_iter().enumerate() {
            match op {
                Op::Schedule(d) => {
                    wheel.schedule(clock + d, n);
                    queue.schedule(clock + d, n);
                }
                Op::Lane(i) => {
                    lane(&mut wheel, DELAYS[i], n);
                    queue.schedule_lane(lanes[i], n);
                }
                Op::PopUntil(d) => {
                    let got = wheel.pop_until(clock + d);
                    prop_assert_eq!(got, queue.pop_until(clock + d));
                    if let Some((at, _)) = got {
                        clock = at;
                    }
                }
            }
            prop_assert_eq!(wheel.len(), queue.len());
        }
        while let Some(got) = wheel.pop() {
            prop_assert_eq!(Some(got), queue.pop());
        }
        prop_assert!(queue.is_empty());
        Ok(())
    }

    /// The shapes tested: the fabric's, and narrower and wider slots, fewer
    /// and more of them.
    fn shape() -> impl Strategy<Value = (u32, usize)> {
        prop_oneof![Just((SLOT_BITS, SLOTS)), (0u32..13, prop_oneof![Just(64usize), Just(128), Just(1024)])]
    }

    proptest! {
        #[test]
        fn pops_in_the_order_of_the_radix_heap(((bits, slots), ops) in shape().prop_flat_map(|s| (Just(s), ops(s.0, s.1, false)))) {
            let never = |_: &mut Wheel<usize>, _, _| unreachable!("no lane events");
            check(Wheel::<usize>::with_slots(bits, slots), ops, never)?;
        }

        #[test]
        fn lanes_pop_in_the_order_of_the_radix_heaps(((bits, slots), ops) in shape().prop_flat_map(|s| (Just(s), ops(s.0, s.1, true)))) {
            let mut wheel = Wheel::<usize, u64>::with_slots(bits, slots);
            let lanes: Vec<Lane> = DELAYS.iter().map(|&d| wheel.lane(d)).collect();
            let lane = move |w: &mut Wheel<usize, u64>, d: Nanos, n| {
                let i = DELAYS.iter().position(|&x| x == d).expect("a lane delay");
                w.schedule_lane(lanes[i], n);
            };
            check(wheel, ops, lane)?;
        }
    }
}

//! A timing wheel in front of the radix heap, for models whose events are
//! nearly all due a short time after they are scheduled.
//!
//! The packet-level fabric schedules about twelve events per data packet,
//! and almost all of them (a transmitter freeing up, a packet reaching the
//! end of a link) a few microseconds ahead: within one link's propagation
//! delay plus a device queue's transmissions. In [`Queue`] such an event is
//! filed in a bucket and moved at least once more before it pops. Here it
//! is filed once in the slot of its time on a wheel (Varghese and Lauck,
//! "Hashed and hierarchical timing wheels", SOSP 1987): [`SLOTS`] slots of
//! [`SLOT_NS`] nanoseconds each, a ring covering the [`HORIZON`] from the
//! clock's slot on. An event is appended to its slot; a slot is sorted by
//! time (a stable sort) when the clock reaches it, and an event filed into
//! the clock's own slot goes after every event there due at or before it.
//! Either way events at the same time leave in the order they were
//! scheduled, as in [`Queue`].
//! Events due beyond the horizon (timeouts, flow starts, samples) wait in
//! a [`Queue`], the overflow.
//!
//! The order is exactly [`Queue`]'s, (time, order of scheduling), also
//! between the wheel and the overflow: an overflow event was due beyond
//! the horizon when it was scheduled, so it moves to its slot when the
//! horizon first reaches that slot — the clock's slot advancing — before
//! any event can be scheduled straight into it, and the overflow hands
//! its events over in (time, scheduling) order. A slot therefore holds its
//! events from the overflow first, then those scheduled into it, each
//! group in scheduling order, and the stable sort and the sorted insertion
//! keep equal times in that order. The property test below checks the pop order against
//! [`Queue`] for random interleavings.
//!
//! As with [`Queue`], no event may be scheduled before the time of the last
//! event popped.

use fulcrum_base::Nanos;

use crate::queue::Queue;

/// Nanoseconds per slot, as a power of two.
const SLOT_BITS: u32 = 6;
/// Nanoseconds per slot.
pub const SLOT_NS: Nanos = 1 << SLOT_BITS;
/// Slots on the wheel (a multiple of 64: one occupancy bit each).
pub const SLOTS: usize = 256;
/// How far ahead of the clock's slot the wheel reaches; later events wait
/// in the overflow.
pub const HORIZON: Nanos = SLOTS as Nanos * SLOT_NS;
/// Words of the occupancy bitmap.
const WORDS: usize = SLOTS / 64;

/// Pending events of type `E`, popped in (time, scheduling order), like
/// [`Queue`]; cheaper than it when most events are due within [`HORIZON`].
pub struct Wheel<E> {
    /// Slot `s % SLOTS` holds the events due in slot `s` (times
    /// `s · SLOT_NS …`) for `s` from `cur` to `cur + SLOTS − 1`, in the
    /// order they were filed; the clock's slot sorted by time, equal times
    /// in scheduling order.
    slots: Vec<Vec<(Nanos, E)>>,
    /// Bit `i` set when slot `i` holds events not yet popped.
    occupied: [u64; WORDS],
    /// The clock's slot (absolute: time / `SLOT_NS`).
    cur: u64,
    /// Events of the clock's slot already popped (its front ones).
    head: usize,
    /// The time of the last event popped (0 before the first).
    last: Nanos,
    /// Events due at or after the horizon, `(cur + SLOTS) · SLOT_NS`, when
    /// they were scheduled.
    overflow: Queue<E>,
    /// The earliest time in the overflow (`Nanos::MAX` when empty).
    overflow_next: Nanos,
    /// Events pending on the wheel (the overflow counts its own).
    len: usize,
}

impl<E: Copy> Default for Wheel<E> {
    fn default() -> Self {
        Self::new()
    }
}

impl<E: Copy> Wheel<E> {
    /// An empty wheel whose clock is at time 0.
    pub fn new() -> Self {
        Wheel {
            slots: (0..SLOTS).map(|_| Vec::new()).collect(),
            occupied: [0; WORDS],
            cur: 0,
            head: 0,
            last: 0,
            overflow: Queue::new(),
            overflow_next: Nanos::MAX,
            len: 0,
        }
    }

    /// Schedule `ev` at time `at`.
    ///
    /// # Panics
    /// If `at` is earlier than the last event popped: time cannot go back.
    #[inline]
    pub fn schedule(&mut self, at: Nanos, ev: E) {
        assert!(at >= self.last, "event scheduled at {at} ns, before the last event popped ({} ns)", self.last);
        if (at >> SLOT_BITS) - self.cur < SLOTS as u64 {
            self.file(at, ev);
        } else {
            self.overflow.schedule(at, ev);
            self.overflow_next = self.overflow_next.min(at);
        }
    }

    /// Put an event due within the horizon in its slot: at the end, or in
    /// the clock's slot (sorted, being popped) after every event due at or
    /// before it. Other slots are sorted when the clock reaches them.
    #[inline(always)]
    fn file(&mut self, at: Nanos, ev: E) {
        let s = at >> SLOT_BITS;
        let i = s as usize % SLOTS;
        let slot = &mut self.slots[i];
        slot.push((at, ev));
        if s == self.cur {
            // Moved down past the later events, one step of an insertion
            // sort; never past the popped ones, which are due by now.
            let mut k = slot.len() - 1;
            while k > 0 && slot[k - 1].0 > at {
                slot[k] = slot[k - 1];
                k -= 1;
            }
            slot[k] = (at, ev);
        }
        self.occupied[i / 64] |= 1 << (i % 64);
        self.len += 1;
    }

    /// The earliest event if it is due at or before `until`; otherwise
    /// `None`, and the queue is unchanged.
    #[inline]
    pub fn pop_until(&mut self, until: Nanos) -> Option<(Nanos, E)> {
        loop {
            let i = self.cur as usize % SLOTS;
            let slot = &mut self.slots[i];
            if let Some(&(at, ev)) = slot.get(self.head) {
                if at > until {
                    return None;
                }
                self.head += 1;
                if self.head == slot.len() {
                    slot.clear();
                    self.head = 0;
                    self.occupied[i / 64] &= !(1 << (i % 64));
                }
                self.last = at;
                self.len -= 1;
                return Some((at, ev));
            }
            match self.next_slot() {
                Some(s) => {
                    // A stable sort by time keeps equal times in the order
                    // they were filed, which is their scheduling order.
                    let slot = &mut self.slots[s as usize % SLOTS];
                    slot.sort_by_key(|&(at, _)| at);
                    if slot[0].0 > until {
                        return None;
                    }
                    self.advance(s);
                }
                None => return self.pop_overflow(until),
            }
        }
    }

    /// The first occupied slot after the clock's (absolute), if any.
    #[inline]
    fn next_slot(&self) -> Option<u64> {
        let from = self.cur as usize % SLOTS;
        // Slots after `from` in its own word, then the other words round
        // the ring, then the slots up to `from` in its word.
        let (w0, b0) = (from / 64, from % 64);
        let above = if b0 == 63 { 0 } else { self.occupied[w0] & (!0u64 << (b0 + 1)) };
        if above != 0 {
            return Some(self.cur + (above.trailing_zeros() as usize - b0) as u64);
        }
        for k in 1..=WORDS {
            let w = (w0 + k) % WORDS;
            let bits = if k == WORDS { self.occupied[w] & ((1u64 << b0) - 1) } else { self.occupied[w] };
            if bits != 0 {
                let i = w * 64 + bits.trailing_zeros() as usize;
                return Some(self.cur + ((i + SLOTS - from) % SLOTS) as u64);
            }
        }
        None
    }

    /// Move the clock's slot to `s` (the clock's old slot is empty) and
    /// bring the overflow's events now within the horizon onto the wheel.
    #[inline]
    fn advance(&mut self, s: u64) {
        self.cur = s;
        self.head = 0;
        let end = (s + SLOTS as u64) << SLOT_BITS;
        if self.overflow_next < end {
            self.migrate(end);
        }
    }

    /// Move the overflow's events due before `end` to their slots, in
    /// (time, scheduling) order: each slot they go to is empty, since it
    /// has only just come within the horizon.
    fn migrate(&mut self, end: Nanos) {
        while let Some((at, ev)) = self.overflow.pop_until(end - 1) {
            self.file(at, ev);
        }
        self.overflow_next = self.overflow.peek_time().unwrap_or(Nanos::MAX);
    }

    /// With the wheel empty: the overflow's earliest event if it is due at
    /// or before `until`, the clock's slot moved to its time.
    fn pop_overflow(&mut self, until: Nanos) -> Option<(Nanos, E)> {
        let (at, ev) = self.overflow.pop_until(until)?;
        self.cur = at >> SLOT_BITS;
        self.head = 0;
        self.last = at;
        self.migrate((self.cur + SLOTS as u64) << SLOT_BITS);
        Some((at, ev))
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn equal_times_leave_in_scheduling_order_across_the_horizon() {
        let mut w = Wheel::new();
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
        let mut w = Wheel::new();
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
        let mut w = Wheel::new();
        w.schedule(10, ());
        w.pop();
        w.schedule(9, ());
    }

    #[derive(Clone, Debug)]
    enum Op {
        /// Schedule an event this far after the clock.
        Schedule(Nanos),
        /// Pop up to this far after the clock.
        PopUntil(Nanos),
    }

    fn op() -> impl Strategy<Value = Op> {
        let delay = prop_oneof![
            4 => 0..2 * SLOT_NS,
            4 => 0..HORIZON + 2 * SLOT_NS,
            1 => 0..20 * HORIZON,
        ];
        prop_oneof![3 => delay.prop_map(Op::Schedule), 2 => (0..2 * HORIZON).prop_map(Op::PopUntil)]
    }

    proptest! {
        #[test]
        fn pops_in_the_order_of_the_radix_heap(ops in proptest::collection::vec(op(), 0..600)) {
            let (mut wheel, mut queue) = (Wheel::new(), Queue::new());
            let mut clock = 0;
            for (n, op) in ops.into_iter().enumerate() {
                match op {
                    Op::Schedule(d) => {
                        wheel.schedule(clock + d, n);
                        queue.schedule(clock + d, n);
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
        }
    }
}

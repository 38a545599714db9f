//! The pending-event set: a radix heap over integer nanoseconds with
//! first-in, first-out order among events at the same time.
//!
//! A radix heap (Ahuja, Mehlhorn, Orlin and Tarjan, J. ACM 1990) keeps the
//! last key popped, `last`, and files every pending key `k > last` in bucket
//! `63 − lzcnt(k ⊕ last)`: the position of the highest bit where `k` and
//! `last` differ; events due exactly at `last` wait in a separate FIFO,
//! `due`. Keys in a higher bucket are all larger than keys in a lower one,
//! so the smallest pending key is in the lowest non-empty bucket. When `due`
//! runs dry, that bucket is emptied: its smallest key becomes `last` and
//! each of its events moves to `due` or to a strictly lower bucket. An event
//! therefore moves at most 64 times, and in practice a few times, since a
//! simulator schedules most events a short time ahead of its clock; each
//! move is a sequential append instead of a binary heap's `log n` scattered
//! swaps (figures in `DOCNOTES-des.md`, from `benches/queue.rs`).
//!
//! Order among equal times: every bucket is appended to and emptied in
//! order, and all events with the same key always sit in the same bucket
//! (their bucket depends only on the key and `last`), so events due at the
//! same time leave in the order they were scheduled: the order a sequence
//! number tie-break gives, without storing one.
//!
//! The price is the radix heap's precondition: an event may not be
//! scheduled before the time of the last event popped. A simulator's clock
//! satisfies it by construction; breaking it is a bug in the model, and
//! [`Queue::schedule`] panics rather than reorder time.

use std::collections::VecDeque;

use fulcrum_balance::Nanos;

/// One bucket per bit position where a key can first differ from `last`.
const BUCKETS: usize = 64;

/// Pending events of type `E`, popped in (time, scheduling order).
pub struct Queue<E> {
    /// The time of the last event popped (0 before the first).
    last: Nanos,
    /// Events due exactly at `last`, in scheduling order.
    due: VecDeque<E>,
    /// `buckets[i]` holds events whose time first differs from `last` at bit `i`.
    buckets: Vec<Vec<(Nanos, E)>>,
    /// Bit `i` set when `buckets[i]` is not empty.
    occupied: u64,
    len: usize,
}

impl<E> Default for Queue<E> {
    fn default() -> Self {
        Self::new()
    }
}

impl<E> Queue<E> {
    /// An empty queue whose clock is at time 0.
    pub fn new() -> Self {
        Queue {
            last: 0,
            due: VecDeque::new(),
            buckets: (0..BUCKETS).map(|_| Vec::new()).collect(),
            occupied: 0,
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
        self.len += 1;
        if at == self.last {
            self.due.push_back(ev);
        } else {
            let b = bucket(at, self.last);
            self.buckets[b].push((at, ev));
            self.occupied |= 1 << b;
        }
    }

    /// The earliest event, if any: events at the same time in the order
    /// they were scheduled.
    #[inline]
    pub fn pop(&mut self) -> Option<(Nanos, E)> {
        self.pop_until(Nanos::MAX)
    }

    /// The earliest event if it is due at or before `until`; otherwise
    /// `None`, and the queue is unchanged.
    #[inline]
    pub fn pop_until(&mut self, until: Nanos) -> Option<(Nanos, E)> {
        if self.due.is_empty() && !self.refill(until) {
            return None;
        }
        if self.last > until {
            return None;
        }
        let ev = self.due.pop_front()?;
        self.len -= 1;
        Some((self.last, ev))
    }

    /// The time of the earliest pending event. It takes `&mut self` because
    /// finding it may advance the heap's internal origin to that time (the
    /// work the next [`Queue::pop`] would do anyway); events may still be
    /// scheduled at any time not before the last one popped.
    pub fn peek_time(&mut self) -> Option<Nanos> {
        if self.due.is_empty() && !self.refill(Nanos::MAX) {
            return None;
        }
        Some(self.last)
    }

    /// Pending events.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no event is pending.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Move the events of the lowest non-empty bucket down, making its
    /// smallest time the new `last`, unless that time is after `until`.
    /// Returns whether events are now due at `last`. Only called with
    /// `due` empty, so the events moved there keep their order.
    #[cold]
    fn refill(&mut self, until: Nanos) -> bool {
        if self.occupied == 0 {
            return false;
        }
        let b = self.occupied.trailing_zeros() as usize;
        let mut events = std::mem::take(&mut self.buckets[b]);
        let min = events.iter().map(|&(t, _)| t).min().expect("an occupied bucket has events");
        if min > until {
            self.buckets[b] = events;
            return false;
        }
        self.occupied &= !(1 << b);
        self.last = min;
        for (t, ev) in events.drain(..) {
            if t == min {
                self.due.push_back(ev);
            } else {
                let to = bucket(t, min);
                self.buckets[to].push((t, ev));
                self.occupied |= 1 << to;
            }
        }
        // Keep the allocation for the next time this bucket fills.
        self.buckets[b] = events;
        true
    }
}

/// The bucket of `at > last`: the position of the highest differing bit.
#[inline]
fn bucket(at: Nanos, last: Nanos) -> usize {
    63 - (at ^ last).leading_zeros() as usize
}

#[cfg(test)]
mod tests {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;

    use proptest::prelude::*;

    use super::*;

    #[test]
    fn equal_times_leave_in_scheduling_order() {
        let mut q = Queue::new();
        // Interleave two instants, scheduled from two different origins.
        for i in 0..10u32 {
            q.schedule(100 + u64::from(i % 2) * 50, i);
        }
        q.schedule(5, 99);
        assert_eq!(q.pop(), Some((5, 99)));
        for i in 10..20u32 {
            q.schedule(100 + u64::from(i % 2) * 50, i);
        }
        let got: Vec<(Nanos, u32)> = std::iter::from_fn(|| q.pop()).collect();
        let mut want: Vec<(Nanos, u32)> = (0..20).map(|i| (100 + u64::from(i % 2) * 50, i)).collect();
        want.sort_by_key(|&(t, _)| t); // stable: scheduling order within a time
        assert_eq!(got, want);
        assert!(q.is_empty());
    }

    #[test]
    fn events_at_the_current_time_go_after_those_already_due() {
        let mut q = Queue::new();
        q.schedule(7, 'a');
        q.schedule(7, 'b');
        assert_eq!(q.pop(), Some((7, 'a')));
        q.schedule(7, 'c');
        assert_eq!(q.pop(), Some((7, 'b')));
        assert_eq!(q.pop(), Some((7, 'c')));
        assert_eq!(q.pop(), None);
    }

    #[test]
    fn pop_until_leaves_later_events() {
        let mut q = Queue::new();
        q.schedule(10, 1);
        q.schedule(20, 2);
        q.schedule(30, 3);
        assert_eq!(q.pop_until(20), Some((10, 1)));
        assert_eq!(q.pop_until(20), Some((20, 2)));
        assert_eq!(q.pop_until(20), None);
        assert_eq!(q.len(), 1);
        // An event between the stop and the pending one still comes first.
        q.schedule(25, 4);
        assert_eq!(q.peek_time(), Some(25));
        assert_eq!(q.pop(), Some((25, 4)));
        assert_eq!(q.pop(), Some((30, 3)));
        assert_eq!(q.peek_time(), None);
    }

    #[test]
    #[should_panic(expected = "before the last event popped")]
    fn scheduling_in_the_past_panics() {
        let mut q = Queue::new();
        q.schedule(10, ());
        q.pop();
        q.schedule(9, ());
    }

    #[derive(Debug, Clone)]
    enum Op {
        /// Schedule at now + delta.
        Schedule(u64),
        Pop,
        PopUntil(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            // Small deltas make many equal times; large ones exercise high buckets.
            3 => (0u64..4).prop_map(Op::Schedule),
            2 => (0u64..1 << 20).prop_map(Op::Schedule),
            1 => any::<u32>().prop_map(|d| Op::Schedule(u64::from(d) << 20)),
            3 => Just(Op::Pop),
            1 => (0u64..1 << 21).prop_map(Op::PopUntil),
        ]
    }

    proptest! {
        /// The radix heap pops exactly what a binary heap keyed by
        /// (time, sequence number) pops, for any sequence of operations.
        #[test]
        fn matches_a_binary_heap(ops in proptest::collection::vec(op(), 0..400)) {
            let mut q = Queue::new();
            let mut reference = BinaryHeap::new();
            let (mut now, mut seq) = (0u64, 0u64);
            for op in ops {
                match op {
                    Op::Schedule(d) => {
                        seq += 1;
                        q.schedule(now + d, seq);
                        reference.push(Reverse((now + d, seq)));
                    }
                    Op::Pop => {
                        let want = reference.pop().map(|Reverse(x)| x);
                        prop_assert_eq!(q.pop(), want);
                        if let Some((t, _)) = want { now = t; }
                    }
                    Op::PopUntil(d) => {
                        let until = now + d;
                        let want = match reference.peek() {
                            Some(&Reverse((t, _))) if t <= until => reference.pop().map(|Reverse(x)| x),
                            _ => None,
                        };
                        prop_assert_eq!(q.pop_until(until), want);
                        if let Some((t, _)) = want { now = t; }
                    }
                }
                prop_assert_eq!(q.len(), reference.len());
            }
            let rest: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
            let want: Vec<_> = std::iter::from_fn(|| reference.pop().map(|Reverse(x)| x)).collect();
            prop_assert_eq!(rest, want);
        }
    }
}

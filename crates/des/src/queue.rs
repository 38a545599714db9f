//! The pending-event set: a radix heap over integer nanoseconds with
//! first-in, first-out order among events at the same time.
//!
//! A radix heap (Ahuja, Mehlhorn, Orlin and Tarjan, J. ACM 1990) keeps the
//! last key popped, `last`, and files every pending key `k > last` by the
//! highest position where `k` and `last` differ; events due exactly at
//! `last` wait in a separate FIFO, `due`. This one compares keys in digits
//! of 6 bits (radix 64): the bucket of `k` is (highest differing digit
//! position, `k`'s digit there), 11 positions (the top one 4 bits wide) ×
//! 64 values, one 64-bit occupancy word per position. Buckets in index
//! order hold increasing keys, so the smallest pending key is in the lowest
//! non-empty bucket. When `due` runs dry, that bucket is emptied: its
//! smallest key becomes `last`, and each of its events moves to `due` or to
//! a bucket of a lower position (a position-0 bucket holds a single key and
//! goes to `due` whole; a bucket holding one event, common near the clock,
//! hands it over without the scan and the move). An event therefore moves at most 11 times, fewer
//! when it is scheduled a short time ahead of the clock, as most simulator
//! events are (100 µs ahead starts at position 2); each move is a
//! sequential append instead of a binary heap's `log n` scattered swaps.
//! Binary digits move events up to 64 times, 4-bit digits up to 16: in
//! `perf` profiles of the request simulator on fleet-1000, the queue's
//! share of the time fell from about 31 % with binary digits to 21 % with
//! radix 16; radix 64 then cut the whole run's instructions by 6 % under
//! cachegrind, and radix 256 (2,048 buckets) did worse than radix 64
//! (`docs/lab-core.md`, "The queue"; the queue alone is measured against
//! a binary heap by `benches/queue.rs`).
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

/// Keys are compared in digits of this many bits (radix 64).
const DIGIT_BITS: u32 = 6;
/// Digit values per position.
const DIGITS: usize = 1 << DIGIT_BITS;
/// Digit positions in a 64-bit key (the top one is partial).
const POSITIONS: usize = 64_usize.div_ceil(DIGIT_BITS as usize);
/// One bucket per (digit position, digit value).
const BUCKETS: usize = POSITIONS * DIGITS;
/// Words of the occupancy bitmap.
const WORDS: usize = BUCKETS.div_ceil(64);

/// Pending events of type `E`, popped in (time, scheduling order).
pub struct Queue<E> {
    /// The time of the last event popped (0 before the first).
    last: Nanos,
    /// Events due exactly at `last`, in scheduling order.
    due: VecDeque<E>,
    /// `buckets[64·p + v]` holds events whose time first differs from
    /// `last` at digit position `p`, where its digit is `v`.
    buckets: Vec<Vec<(Nanos, E)>>,
    /// Bit `i` (of word `i / 64`) set when `buckets[i]` is not empty.
    occupied: [u64; WORDS],
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
            occupied: [0; WORDS],
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
            self.occupied[b / 64] |= 1 << (b % 64);
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
        if self.due.is_empty() {
            // The first event due is handed over without a trip through `due`.
            let ev = self.refill(until)?;
            self.len -= 1;
            return Some((self.last, ev));
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
        if self.due.is_empty() {
            let ev = self.refill(Nanos::MAX)?;
            self.due.push_front(ev);
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
    /// Returns the first event due at `last` (the others wait in `due`),
    /// or `None` with the queue unchanged. Only called with `due` empty,
    /// so the events moved there keep their order.
    fn refill(&mut self, until: Nanos) -> Option<E> {
        let w = self.occupied.iter().position(|&word| word != 0)?;
        let b = w * 64 + self.occupied[w].trailing_zeros() as usize;
        if let [(t, _)] = self.buckets[b][..] {
            // One event (the common case near the clock): due now.
            if t > until {
                return None;
            }
            let (_, ev) = self.buckets[b].pop().expect("one event");
            self.occupied[w] &= !(1 << (b % 64));
            self.last = t;
            return Some(ev);
        }
        let mut events = std::mem::take(&mut self.buckets[b]);
        let min = events.iter().map(|&(t, _)| t).min().expect("an occupied bucket has events");
        if min > until {
            self.buckets[b] = events;
            return None;
        }
        self.occupied[w] &= !(1 << (b % 64));
        self.last = min;
        if b < DIGITS {
            // Position 0: the digit fixes the whole key, so every event
            // here is due now.
            let first = {
                let mut due = events.drain(..).map(|(_, ev)| ev);
                let first = due.next();
                self.due.extend(due);
                first
            };
            self.buckets[b] = events;
            return first;
        }
        let mut first = None;
        for (t, ev) in events.drain(..) {
            if t == min {
                match first {
                    None => first = Some(ev),
                    Some(_) => self.due.push_back(ev),
                }
            } else {
                let to = bucket(t, min);
                self.buckets[to].push((t, ev));
                self.occupied[to / 64] |= 1 << (to % 64);
            }
        }
        // Keep the allocation for the next time this bucket fills.
        self.buckets[b] = events;
        first
    }
}

/// The bucket of `at > last`: the position of the highest digit where they
/// differ, and `at`'s digit there. Buckets in index order hold increasing
/// keys: a higher position means a larger key, and at the same position a
/// larger digit does.
#[inline]
fn bucket(at: Nanos, last: Nanos) -> usize {
    let position = (63 - (at ^ last).leading_zeros()) / DIGIT_BITS;
    let digit = (at >> (position * DIGIT_BITS)) as usize & (DIGITS - 1);
    position as usize * DIGITS + digit
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
            // The top digits, up to the end of time.
            1 => any::<u64>().prop_map(Op::Schedule),
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
                        q.schedule(now.saturating_add(d), seq);
                        reference.push(Reverse((now.saturating_add(d), seq)));
                    }
                    Op::Pop => {
                        let want = reference.pop().map(|Reverse(x)| x);
                        prop_assert_eq!(q.pop(), want);
                        if let Some((t, _)) = want { now = t; }
                    }
                    Op::PopUntil(d) => {
                        let until = now.saturating_add(d);
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

//! The pending-event set: a radix heap over integer nanoseconds, plus
//! first-in, first-out lanes for events scheduled a constant delay ahead,
//! with first-in, first-out order among events at the same time.
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
//! Binary digits move an event up to 64 times and 4-bit digits up to 16;
//! 6-bit digits keep the moves few while the occupancy bitmap (11 words)
//! and the bucket array stay small enough to stay in cache
//! (`docs/contributing/event-core.md`; `benches/queue.rs` measures the
//! queue against a binary heap).
//!
//! Lanes (the "pipe" of packet simulators such as htsim: a link of fixed
//! latency is a FIFO of packets in flight): a [`Lane`] is registered with
//! a constant delay `d`, and [`Queue::schedule_lane`] files an event at
//! `now + d` at the back of that lane's ring buffer. The clock never goes
//! back, so a lane's events are due in the order they were scheduled and
//! its front is its earliest: an event is filed once, with no bucket
//! moves. A pop takes the earliest of the lanes' fronts and the heap's.
//! Before a lane's front is handed over, the heap's origin `last` moves
//! to its time, which keeps the invariant that `last` is the clock: the
//! heap's lowest bucket is re-filed only when that time falls in its key
//! range (each of its events then moves to a lower position, as a refill
//! would have moved it), otherwise no bucket changes. The lowest bucket
//! and the smallest key it can hold are kept up to date (lowered as events
//! are filed, recomputed after a bucket is emptied), so that the common
//! case, a lane's front before that key, is one comparison.
//!
//! Order among equal times, the deterministic tie-break: events at the
//! same time leave in the order they were scheduled, as a sequence-number
//! tie-break would order them. Inside the heap it needs no number: every
//! bucket is appended to and emptied in order, and all events with the
//! same key always sit in the same bucket (their bucket depends only on
//! the key and `last`). Inside a lane the order is the lane's. Between the
//! heap and the lanes, and between lanes, equal times cannot be ruled
//! out: two events handled at the same instant can schedule one into each
//! (a 100 µs hop and a service time that ends 100 µs later), and with
//! random service times in nanoseconds such ties happen thousands of
//! times in a long run. So every event carries its sequence number (8
//! bytes, taken from a counter at scheduling), and ties between the heap's
//! earliest and the lanes' fronts go to the smaller number. That keeps
//! the pop order exactly that of the heap alone, which a property test
//! checks for random interleavings of lane and heap events.
//!
//! A sorted run for a small bucket: when the lowest bucket above position
//! 0 must be emptied and holds at most [`RUN_MAX`] events, and no run is
//! pending, its events are not re-filed: they are sorted once by time
//! into the run and popped from it like a lane's front, merged with the
//! lanes by (time, sequence number). Small buckets are common when events
//! are scheduled a short, random time ahead (a position-2 bucket is
//! 4,096 ns wide); re-filing them would move every event once more to a
//! lower bucket and pop it from there. The order stays exact: a
//! bucket is in scheduling order (it is only appended to, and filled from
//! a higher bucket only while every lower one is empty), so a stable sort
//! by time leaves equal times in sequence order; the run's front is its
//! smallest (time, sequence number), and the merge treats it as it treats
//! a lane's. Events scheduled later into the run's time range go to the
//! heap as usual and are merged with it at pop time. A pop still sets the
//! heap's origin to the time it hands over, so the buckets stay valid.
//!
//! The price is the radix heap's precondition: an event may not be
//! scheduled before the time of the last event popped. A simulator's clock
//! satisfies it by construction; breaking it is a bug in the model, and
//! [`Queue::schedule`] panics rather than reorder time.

use std::collections::VecDeque;

use fulcrum_base::Nanos;

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
/// A bucket above position 0 holding at most this many events becomes the
/// sorted run when it is emptied, instead of being re-filed: an insertion
/// sort of a few dozen events costs less than re-filing them, and a larger
/// bound gains nothing once nearly every small bucket qualifies.
const RUN_MAX: usize = 32;
/// The least room [`Queue::keep`] counts an emptied bucket as needing: a
/// bucket that held fewer events is treated as having held this many.
const KEEP_MIN: usize = 16;
/// The most room an emptied bucket keeps (32 KB of 32-byte entries): a
/// bucket that held more grows again when it next fills, which costs
/// little beside moving that many events. Without it a bucket keeps what
/// it last held, and the buckets of the upper positions, each filled once
/// per turn of its digit (2^36 ns, 69 s, at position 5), would keep
/// thousands of entries each: memory would grow with the simulated time.
const KEEP_MAX: usize = 1024;
/// The source index of the sorted run among the lanes' (see
/// [`Queue::lane_front`]).
const RUN: usize = usize::MAX;

/// A pending event: its time, its scheduling order and itself.
struct Entry<E> {
    at: Nanos,
    seq: u64,
    ev: E,
}

/// A lane registered on a queue (see [`Queue::lane`]): events scheduled
/// on it are due a constant delay after the time they are scheduled.
/// A handle is only meaningful on the queue that made it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lane(u32);

/// One lane's events, due in the order they were scheduled.
struct LaneEvents<E> {
    delay: Nanos,
    events: VecDeque<Entry<E>>,
}

/// Pending events of type `E`, popped in (time, scheduling order).
pub struct Queue<E> {
    /// The time of the last event popped (0 before the first): the clock,
    /// and the heap's origin.
    last: Nanos,
    /// The sequence number of the next event scheduled.
    seq: u64,
    /// Heap events due exactly at `last`, in scheduling order.
    due: VecDeque<(u64, E)>,
    /// `buckets[64·p + v]` holds events whose time first differs from
    /// `last` at digit position `p`, where its digit is `v`.
    buckets: Box<[Vec<Entry<E>>; BUCKETS]>,
    /// Bit `i` (of word `i / 64`) set when `buckets[i]` is not empty.
    occupied: [u64; WORDS],
    /// The lowest non-empty bucket ([`BUCKETS`] when none), kept up to
    /// date as events are filed and recomputed after a bucket is emptied.
    low: usize,
    /// The smallest key `low` can hold ([`floor`]; `Nanos::MAX` when the
    /// buckets are empty): a lane's event before it leaves every bucket
    /// valid, with no look at the occupancy words.
    low_floor: Nanos,
    lanes: Vec<LaneEvents<E>>,
    /// The events of a small bucket taken out of the heap whole, sorted by
    /// (time, sequence number), the earliest last: merged at pop time like
    /// a lane's.
    run: Vec<Entry<E>>,
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
            seq: 0,
            due: VecDeque::new(),
            buckets: Box::new(std::array::from_fn(|_| Vec::new())),
            occupied: [0; WORDS],
            low: BUCKETS,
            low_floor: Nanos::MAX,
            lanes: Vec::new(),
            run: Vec::new(),
            len: 0,
        }
    }

    /// The lane for events due `delay` after they are scheduled, made on
    /// first use: every call with the same delay returns the same lane (one
    /// FIFO per delay keeps the lanes few, and the pop's scan short).
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

    /// Schedule `ev` at time `at`.
    ///
    /// # Panics
    /// If `at` is earlier than the last event popped: time cannot go back.
    #[inline]
    pub fn schedule(&mut self, at: Nanos, ev: E) {
        // The common case, an event ahead of the clock filed at or above the
        // lowest bucket with room in its vector, has no call in it, so that
        // it needs no saved registers; everything else is `schedule_slow`.
        if at > self.last {
            let b = bucket(at, self.last);
            let events = &mut self.buckets[b];
            if b >= self.low && events.len() < events.capacity() {
                let seq = self.seq;
                events.push(Entry { at, seq, ev });
                self.seq += 1;
                self.len += 1;
                self.occupied[b / 64] |= 1 << (b % 64);
                return;
            }
        }
        self.schedule_slow(at, ev);
    }

    /// [`Queue::schedule`] at the clock, below the lowest bucket, into a
    /// full vector, or in the past (a panic).
    #[inline(never)]
    fn schedule_slow(&mut self, at: Nanos, ev: E) {
        assert!(at >= self.last, "event scheduled at {at} ns, before the last event popped ({} ns)", self.last);
        self.len += 1;
        let seq = self.next_seq();
        if at == self.last {
            self.due.push_back((seq, ev));
        } else {
            self.file(Entry { at, seq, ev });
        }
    }

    /// Schedule `ev` on `lane`: at the time of the last event popped plus
    /// the lane's delay, in the same order as [`Queue::schedule`] at that
    /// time would put it, but filed once instead of moved through the heap.
    ///
    /// # Panics
    /// If the time overflows, or `lane` is beyond this queue's lanes (a
    /// handle from another queue is a bug the queue cannot always see).
    #[inline]
    pub fn schedule_lane(&mut self, lane: Lane, ev: E) {
        let seq = self.next_seq();
        let lane = &mut self.lanes[lane.0 as usize];
        let at = self.last.checked_add(lane.delay).expect("a lane's event is due before the end of time");
        lane.events.push_back(Entry { at, seq, ev });
        self.len += 1;
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
        let Some((lane, at, seq)) = self.lane_front() else { return self.pop_heap(until) };
        match self.due.front() {
            None if at > until => {
                // Only the heap can have an event due by `until`.
                return self.pop_heap(until);
            }
            None => {
                if let Some(first) = self.heap_before(at, seq) {
                    self.len -= 1;
                    return Some(first);
                }
            }
            // `due` holds the heap's earliest events, at `last` ≤ `at`.
            Some(&(s, _)) if self.last < at || s < seq => {
                if self.last > until {
                    return None;
                }
                let (_, ev) = self.due.pop_front().expect("a front");
                self.len -= 1;
                return Some((self.last, ev));
            }
            Some(_) if at > until => return None,
            Some(_) => {}
        }
        let e = if lane == RUN { self.run.pop() } else { self.lanes[lane].events.pop_front() };
        let e = e.expect("a front");
        self.last = at;
        self.len -= 1;
        Some((at, e.ev))
    }

    /// The time of the earliest pending event.
    pub fn peek_time(&self) -> Option<Nanos> {
        let heap = if self.due.is_empty() {
            let earliest =
                |b: usize| self.buckets[b].iter().map(|e| e.at).min().expect("an occupied bucket has events");
            self.lowest().map(earliest)
        } else {
            Some(self.last)
        };
        let lane = self.lane_front().map(|(_, at, _)| at);
        match (heap, lane) {
            (Some(h), Some(l)) => Some(h.min(l)),
            (h, l) => h.or(l),
        }
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

    #[inline]
    fn next_seq(&mut self) -> u64 {
        let seq = self.seq;
        self.seq += 1;
        seq
    }

    /// File an event later than `last` in its bucket.
    #[inline]
    fn file(&mut self, e: Entry<E>) {
        let b = bucket(e.at, self.last);
        self.buckets[b].push(e);
        self.occupied[b / 64] |= 1 << (b % 64);
        if b < self.low {
            self.lower_low(b);
        }
    }

    /// [`Queue::file`] below the lowest bucket, which is rare (events are
    /// filed ahead of the clock): kept out of line, so that `file` stays
    /// small where it is inlined.
    #[inline(never)]
    fn lower_low(&mut self, b: usize) {
        self.low = b;
        self.low_floor = floor(b, self.last);
    }

    /// Bring `low` and `low_floor` up to date after buckets were emptied.
    /// (While a bucket is re-filed, `low` is 0 so that `file` leaves them.)
    #[inline]
    fn reset_low(&mut self) {
        (self.low, self.low_floor) = match self.lowest() {
            Some(b) => (b, floor(b, self.last)),
            None => (BUCKETS, Nanos::MAX),
        };
    }

    /// The front first in (time, sequence) order among the lanes' and the
    /// sorted run's: lane (or [`RUN`]), time, sequence.
    #[inline]
    fn lane_front(&self) -> Option<(usize, Nanos, u64)> {
        let mut best = self.run.last().map(|e| (RUN, e.at, e.seq));
        if let [lane] = &self.lanes[..] {
            // One lane (a model whose constant delays are all equal): one
            // comparison, no loop.
            return match lane.events.front() {
                Some(e) if best.is_none_or(|(_, at, seq)| (e.at, e.seq) < (at, seq)) => Some((0, e.at, e.seq)),
                _ => best,
            };
        }
        for (i, lane) in self.lanes.iter().enumerate() {
            if let Some(e) = lane.events.front() {
                if best.is_none_or(|(_, at, seq)| (e.at, e.seq) < (at, seq)) {
                    best = Some((i, e.at, e.seq));
                }
            }
        }
        best
    }

    /// The lowest non-empty bucket, if any.
    #[inline]
    fn lowest(&self) -> Option<usize> {
        let w = self.occupied.iter().position(|&word| word != 0)?;
        Some(w * 64 + self.occupied[w].trailing_zeros() as usize)
    }

    /// The heap's earliest event if it is due at or before `until`
    /// (lanes aside).
    #[inline]
    fn pop_heap(&mut self, until: Nanos) -> Option<(Nanos, E)> {
        if self.due.is_empty() {
            // The first event due is handed over without a trip through `due`.
            self.low = 0;
            let ev = self.refill(until);
            self.reset_low();
            let ev = ev?;
            self.len -= 1;
            return Some((self.last, ev));
        }
        if self.last > until {
            return None;
        }
        let (_, ev) = self.due.pop_front()?;
        self.len -= 1;
        Some((self.last, ev))
    }

    /// With `due` empty, a lane's front at (`at`, `seq`): the heap's
    /// earliest event if it comes first, handed over; otherwise `None`, with
    /// the heap's origin moved to `at` for the lane's event. Only the lowest
    /// bucket can hold keys at or below `at`, and only when `at` falls in its
    /// key range: then its events are re-filed around the new origin (the
    /// earlier of `at` and their smallest time), each to a lower position,
    /// those at the origin to `due`. Any other bucket holds keys that differ
    /// from the new origin at the same digit as from `last`, so it stays
    /// valid as it is.
    #[inline]
    fn heap_before(&mut self, at: Nanos, seq: u64) -> Option<(Nanos, E)> {
        if at < self.low_floor || self.low == BUCKETS {
            // Before the lowest bucket, or no bucket (`at` may be the end
            // of time): every bucket stays valid around the new origin.
            self.last = at;
            return None;
        }
        let b = self.low;
        self.low = 0;
        let first = self.refile_before(b, at, seq);
        self.reset_low();
        first
    }

    /// [`Queue::heap_before`] when `at` falls in the range of bucket `b`,
    /// the lowest.
    fn refile_before(&mut self, b: usize, at: Nanos, seq: u64) -> Option<(Nanos, E)> {
        debug_assert_eq!(self.lowest(), Some(b));
        self.occupied[b / 64] &= !(1 << (b % 64));
        if let [Entry { at: t, seq: s, .. }] = self.buckets[b][..] {
            // One event (common near the clock): no scan, no trip through `due`.
            let e = self.buckets[b].pop().expect("one event");
            if (t, s) < (at, seq) {
                self.last = t;
                return Some((t, e.ev));
            }
            self.last = at;
            if t == at {
                self.due.push_back((s, e.ev));
            } else {
                self.file(e);
            }
            return None;
        }
        if self.take_run(b) {
            let &Entry { at: t, seq: s, .. } = self.run.last().expect("a run");
            if (t, s) < (at, seq) {
                self.last = t;
                return self.run.pop().map(|e| (t, e.ev));
            }
            self.last = at;
            return None;
        }
        let mut events = std::mem::take(&mut self.buckets[b]);
        let origin = events.iter().map(|e| e.at).min().expect("an occupied bucket has events").min(at);
        self.last = origin;
        let held = events.len();
        self.refile(&mut events);
        self.keep(b, events, held);
        match self.due.front() {
            Some(&(s, _)) if origin < at || s < seq => self.due.pop_front().map(|(_, ev)| (origin, ev)),
            _ => None,
        }
    }

    /// File `events` (emptying it) around the origin `last`, those at it in
    /// `due`, leaving `low` and `low_floor` for the caller to recompute.
    /// Out of line, the loop keeps its values in registers (inlined into
    /// the run loop, it spilled several per event).
    #[inline(never)]
    fn refile(&mut self, events: &mut Vec<Entry<E>>) {
        let last = self.last;
        for e in events.drain(..) {
            if e.at == last {
                self.due.push_back((e.seq, e.ev));
            } else {
                // `file` without its `low` check (the caller recomputes
                // `low`), written out: through a `&mut self` helper the
                // loop would reload the bucket array on every event.
                let b = bucket(e.at, last);
                self.buckets[b].push(e);
                self.occupied[b / 64] |= 1 << (b % 64);
            }
        }
    }

    /// Move the events of the lowest non-empty bucket down, making its
    /// smallest time the new `last`, unless that time is after `until`.
    /// Returns the first event due at `last` (the others wait in `due`),
    /// or `None` with the queue unchanged. Only called with `due` empty,
    /// so the events moved there keep their order.
    fn refill(&mut self, until: Nanos) -> Option<E> {
        let b = self.lowest()?;
        let w = b / 64;
        if let [Entry { at: t, .. }] = self.buckets[b][..] {
            // One event (the common case near the clock): due now.
            if t > until {
                return None;
            }
            let e = self.buckets[b].pop().expect("one event");
            self.occupied[w] &= !(1 << (b % 64));
            self.last = t;
            return Some(e.ev);
        }
        let events = std::mem::take(&mut self.buckets[b]);
        let min = events.iter().map(|e| e.at).min().expect("an occupied bucket has events");
        if min > until {
            self.buckets[b] = events;
            return None;
        }
        self.occupied[w] &= !(1 << (b % 64));
        self.buckets[b] = events;
        if self.take_run(b) {
            let e = self.run.pop().expect("a run");
            self.last = e.at;
            return Some(e.ev);
        }
        let mut events = std::mem::take(&mut self.buckets[b]);
        let held = events.len();
        self.last = min;
        if b < DIGITS {
            // Position 0: the digit fixes the whole key, so every event
            // here is due now.
            let first = {
                let mut due = events.drain(..).map(|e| (e.seq, e.ev));
                let first = due.next();
                self.due.extend(due);
                first
            };
            self.keep(b, events, held);
            return first.map(|(_, ev)| ev);
        }
        let mut first = None;
        for e in events.drain(..) {
            if e.at == min {
                match first {
                    None => first = Some(e.ev),
                    Some(_) => self.due.push_back((e.seq, e.ev)),
                }
            } else {
                self.file(e);
            }
        }
        self.keep(b, events, held);
        first
    }

    /// Give bucket `b` back its emptied vector, which held `held` events:
    /// the allocation stays for the next time the bucket fills, but no
    /// more than about twice what it needed, and at most [`KEEP_MAX`]
    /// entries. Allocations also move between buckets with the sorted
    /// run, so without the bound every bucket would come to keep the
    /// largest it or another ever held.
    #[inline]
    fn keep(&mut self, b: usize, mut events: Vec<Entry<E>>, held: usize) {
        debug_assert!(events.is_empty());
        let need = held.max(KEEP_MIN);
        if events.capacity() > (4 * need).min(KEEP_MAX) {
            events.shrink_to((2 * need).min(KEEP_MAX));
        }
        self.buckets[b] = events;
    }

    /// Make the sorted run of bucket `b`, just marked empty, if it is above
    /// position 0, small, and the run is free; otherwise leave it. Its
    /// events are then sorted once by (time, sequence number) and popped
    /// like a lane's, instead of each moving to a bucket of a lower
    /// position (and again, until it is due).
    #[inline]
    fn take_run(&mut self, b: usize) -> bool {
        if b < DIGITS || self.buckets[b].len() > RUN_MAX || !self.run.is_empty() {
            return false;
        }
        // The emptied run's allocation goes to the bucket: both keep one.
        let emptied = std::mem::replace(&mut self.run, std::mem::take(&mut self.buckets[b]));
        self.keep(b, emptied, self.run.len());
        debug_assert!(self.run.windows(2).all(|w| w[0].seq < w[1].seq), "a bucket is in scheduling order");
        // A bucket is in scheduling order (see the module's notes on equal
        // times): reversed, then sorted stably by time alone, the earliest
        // (time, sequence number) is last.
        self.run.reverse();
        self.run.sort_by_key(|e| std::cmp::Reverse(e.at));
        true
    }
}

/// The bucket of `at > last`: the position of the highest digit where they
/// differ, and `at`'s digit there. Buckets in index order hold increasing
/// keys: a higher position means a larger key, and at the same position a
/// larger digit does.
///
/// By table lookup on the count of leading zeros of `at ^ last` (not zero,
/// as `at > last`): its entry is the index of the position's first bucket
/// shifted left by 8, or-ed with the position's shift (below 64, so the
/// shift by the whole entry, which takes it modulo 64, is the shift),
/// instead of a division by [`DIGIT_BITS`] and two multiplications.
#[inline]
fn bucket(at: Nanos, last: Nanos) -> usize {
    let entry = BUCKET_OF_ZEROS[(at ^ last).leading_zeros() as usize];
    let digit = at.wrapping_shr(entry) as usize & (DIGITS - 1);
    (entry >> 8) as usize + digit
}

/// [`bucket`]'s table: for `z` leading zeros, the highest differing bit is
/// `63 − z`, its digit position `p = (63 − z) / DIGIT_BITS`; the entry is
/// `p · DIGITS << 8 | p · DIGIT_BITS`.
const BUCKET_OF_ZEROS: [u32; 64] = {
    let mut table = [0; 64];
    let mut zeros = 0;
    while zeros < 64 {
        let position = (63 - zeros) / DIGIT_BITS;
        table[zeros as usize] = ((position * DIGITS as u32) << 8) | (position * DIGIT_BITS);
        zeros += 1;
    }
    table
};

/// The smallest key bucket `b` can hold while the origin is `last`: the
/// digits of `last` above the bucket's position, its digit there, zeros
/// below.
#[inline]
fn floor(b: usize, last: Nanos) -> Nanos {
    let shift = (b / DIGITS) as u32 * DIGIT_BITS;
    let above = last.checked_shr(shift + DIGIT_BITS).unwrap_or(0).checked_shl(shift + DIGIT_BITS).unwrap_or(0);
    above | ((b % DIGITS) as Nanos) << shift
}

#[cfg(test)]
mod tests {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;

    use proptest::prelude::*;

    use super::*;

    #[test]
    fn emptied_buckets_keep_bounded_room() {
        // 200,000 events over 2^30 ns: about 3,000 in each position-4
        // bucket at first, re-filed when they come near. Once every event
        // has been popped, no bucket (and not the run) may keep room for
        // more than `KEEP_MAX` events, or a long run's memory would grow
        // as buckets of the upper positions take their turn.
        let mut rng = fulcrum_base::Rng::new(5);
        let mut q = Queue::new();
        for i in 0..200_000u32 {
            q.schedule(rng.next_u64() >> 34, i);
        }
        let mut popped = 0;
        while q.pop().is_some() {
            popped += 1;
        }
        assert_eq!(popped, 200_000);
        let most = q.buckets.iter().map(Vec::capacity).max().expect("buckets");
        assert!(most <= KEEP_MAX, "a bucket keeps room for {most} events");
        assert!(q.run.capacity() <= KEEP_MAX, "the run keeps room for {}", q.run.capacity());
    }

    #[test]
    fn the_bucket_table_finds_the_highest_differing_digit() {
        let mut rng = fulcrum_base::Rng::new(3);
        for _ in 0..100_000 {
            let last = rng.next_u64() >> (rng.next_u64() % 64);
            let at = last.saturating_add(1 + (rng.next_u64() >> (rng.next_u64() % 64)));
            if at == last {
                continue;
            }
            let position = (63 - (at ^ last).leading_zeros()) / DIGIT_BITS;
            let digit = (at >> (position * DIGIT_BITS)) as usize & (DIGITS - 1);
            assert_eq!(bucket(at, last), position as usize * DIGITS + digit, "at {at}, last {last}");
        }
        assert_eq!(bucket(u64::MAX, 0), (POSITIONS - 1) * DIGITS + 15);
        assert_eq!(bucket(1, 0), 1);
    }

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

    #[test]
    fn lane_events_leave_in_time_then_scheduling_order_with_the_heap() {
        let mut q = Queue::new();
        let hop = q.lane(100);
        assert_eq!(q.lane(100), hop, "one lane per delay");
        let slow = q.lane(250);
        assert_eq!(q.lane_delay(slow), 250);
        q.schedule(100, 'a'); // heap, 100
        q.schedule_lane(hop, 'b'); // lane, 100: after 'a'
        q.schedule(250, 'c'); // heap, 250
        q.schedule_lane(slow, 'd'); // lane, 250: after 'c'
        q.schedule(100, 'e'); // heap, 100: after 'b'
        assert_eq!(q.len(), 5);
        assert_eq!(q.peek_time(), Some(100));
        assert_eq!(q.pop(), Some((100, 'a')));
        q.schedule_lane(hop, 'f'); // lane, 200
        q.schedule(200, 'g'); // heap, 200: after 'f'
        q.schedule_lane(slow, 'h'); // lane, 350
        let got: Vec<(Nanos, char)> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(got, [(100, 'b'), (100, 'e'), (200, 'f'), (200, 'g'), (250, 'c'), (250, 'd'), (350, 'h')]);
        assert!(q.is_empty());
    }

    #[test]
    fn a_lane_event_before_the_heaps_lowest_bucket_leaves_it_valid() {
        let mut q = Queue::new();
        let lane = q.lane(10);
        // Several events in one bucket far ahead, and one just after the lane's.
        for (i, t) in [5_000u64, 4_100, 4_700, 11].into_iter().enumerate() {
            q.schedule(t, i);
        }
        q.schedule_lane(lane, 9);
        assert_eq!(q.pop(), Some((10, 9)));
        q.schedule_lane(lane, 8); // at 20
        assert_eq!(q.pop_until(15), Some((11, 3)));
        assert_eq!(q.pop_until(15), None);
        assert_eq!(q.peek_time(), Some(20));
        assert_eq!(q.pop(), Some((20, 8)));
        q.schedule(4_100, 7);
        let got: Vec<(Nanos, usize)> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(got, [(4_100, 1), (4_100, 7), (4_700, 2), (5_000, 0)]);
    }

    #[test]
    fn pop_until_leaves_a_later_lane_event() {
        let mut q = Queue::new();
        let lane = q.lane(50);
        q.schedule_lane(lane, 1);
        q.schedule(30, 2);
        assert_eq!(q.pop_until(40), Some((30, 2)));
        assert_eq!(q.pop_until(40), None);
        // Scheduling between the stop and the lane's event still works.
        q.schedule(45, 3);
        assert_eq!(q.pop(), Some((45, 3)));
        assert_eq!(q.pop(), Some((50, 1)));
        assert_eq!(q.pop(), None);
    }

    #[test]
    fn a_small_bucket_becomes_a_sorted_run_in_exact_order() {
        let mut q = Queue::new();
        let lane = q.lane(690);
        // Five events in one position-1 bucket (640..704), out of order,
        // two at the same time.
        for (i, t) in [700u64, 660, 700, 650, 690].into_iter().enumerate() {
            q.schedule(t, i);
        }
        q.schedule_lane(lane, 10); // at 690, after event 4
        assert_eq!(q.pop(), Some((650, 3)));
        assert_eq!(q.run.len(), 4, "the bucket became the run");
        q.schedule(700, 11); // the time of two run events: after them
        q.schedule_lane(lane, 12); // at 650 + 690
        assert_eq!(q.peek_time(), Some(660));
        assert_eq!(q.pop_until(659), None);
        let got: Vec<(Nanos, usize)> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(got, [(660, 1), (690, 4), (690, 10), (700, 0), (700, 2), (700, 11), (1_340, 12)]);
        assert!(q.is_empty());
    }

    #[derive(Debug, Clone)]
    enum Op {
        /// Schedule at now + delta.
        Schedule(u64),
        /// Schedule on lane `i` of [`DELAYS`].
        Lane(usize),
        Pop,
        PopUntil(u64),
    }

    /// Lane delays of the property test: zero, short ones that collide with
    /// the heap's small deltas, and long ones across high digit positions.
    const DELAYS: [u64; 5] = [0, 1, 3, 100_000, 1 << 40];

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

    /// The same, with lane events among them.
    fn op_with_lanes() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => op(),
            2 => (0..DELAYS.len()).prop_map(Op::Lane),
        ]
    }

    /// Delays near the clock, which fill buckets of positions 0 to 2 with a
    /// few events each (sorted runs), among lane events and pops.
    fn op_near() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (0u64..1 << 13).prop_map(Op::Schedule),
            1 => (0u64..1 << 7).prop_map(Op::Schedule),
            2 => (0..DELAYS.len()).prop_map(Op::Lane),
            3 => Just(Op::Pop),
            1 => (0u64..1 << 12).prop_map(Op::PopUntil),
        ]
    }

    /// Run `ops` on the queue with lanes of `delays` (`Op::Lane(i)` uses
    /// lane `i` modulo their number) and on a binary heap keyed by (time,
    /// sequence number), asserting they pop the same events.
    fn check_against_a_binary_heap(ops: Vec<Op>, delays: &[u64]) -> Result<(), TestCaseError> {
        let mut q = Queue::new();
        let lanes: Vec<Lane> = delays.iter().map(|&d| q.lane(d)).collect();
        let mut reference = BinaryHeap::new();
        let (mut now, mut seq) = (0u64, 0u64);
        for op in ops {
            match op {
                Op::Schedule(d) => {
                    seq += 1;
                    q.schedule(now.saturating_add(d), seq);
                    reference.push(Reverse((now.saturating_add(d), seq)));
                }
                Op::Lane(i) => {
                    let i = i % delays.len();
                    if now.checked_add(delays[i]).is_none() {
                        continue;
                    }
                    seq += 1;
                    q.schedule_lane(lanes[i], seq);
                    reference.push(Reverse((now + delays[i], seq)));
                }
                Op::Pop => {
                    let want = reference.pop().map(|Reverse(x)| x);
                    prop_assert_eq!(q.pop(), want);
                    if let Some((t, _)) = want {
                        now = t;
                    }
                }
                Op::PopUntil(d) => {
                    let until = now.saturating_add(d);
                    let want = match reference.peek() {
                        Some(&Reverse((t, _))) if t <= until => reference.pop().map(|Reverse(x)| x),
                        _ => None,
                    };
                    prop_assert_eq!(q.pop_until(until), want);
                    if let Some((t, _)) = want {
                        now = t;
                    }
                }
            }
            prop_assert_eq!(q.len(), reference.len());
            prop_assert_eq!(q.peek_time(), reference.peek().map(|&Reverse((t, _))| t));
        }
        let rest: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        let want: Vec<_> = std::iter::from_fn(|| reference.pop().map(|Reverse(x)| x)).collect();
        prop_assert_eq!(rest, want);
        Ok(())
    }

    proptest! {
        /// The radix heap pops exactly what a binary heap keyed by
        /// (time, sequence number) pops, for any sequence of operations.
        #[test]
        fn matches_a_binary_heap(ops in proptest::collection::vec(op(), 0..400)) {
            check_against_a_binary_heap(ops, &DELAYS)?;
        }

        /// With lanes too: the lanes and the heap together pop exactly the
        /// sequence the heap alone (or a binary heap) pops when every event
        /// is scheduled at its time.
        #[test]
        fn lanes_match_a_binary_heap(ops in proptest::collection::vec(op_with_lanes(), 0..400)) {
            check_against_a_binary_heap(ops, &DELAYS)?;
        }

        /// With many small buckets near the clock, emptied as sorted runs
        /// and merged with the lanes and the heap: the same sequence as a
        /// binary heap keyed by (time, sequence number).
        #[test]
        fn sorted_runs_match_a_binary_heap(ops in proptest::collection::vec(op_near(), 0..600)) {
            check_against_a_binary_heap(ops, &DELAYS)?;
        }

        /// With a single lane, which the pop compares with the run's front
        /// without a loop (a delay like the heap's
        /// typical ones, so that ties between them happen).
        #[test]
        fn one_lane_matches_a_binary_heap(ops in proptest::collection::vec(op_near(), 0..600)) {
            check_against_a_binary_heap(ops, &[1_000])?;
        }
    }
}

//! Pending-event set speed under the hold model: N events pending; each
//! operation pops the earliest and schedules one at its time plus a random
//! increment (exponential or uniform, mean 1 ms), so the set stays at N.
//! Compares the crate's radix heap (`fulcrum_des::Queue`) with a binary
//! heap keyed by (time, sequence number), the structure the request
//! simulator used before. Payloads are 16 bytes, like a simulator's event.
//! A constant increment (every event 1 ms after the one that scheduled it,
//! a hop of fixed latency) also runs the queue with a lane for that delay
//! (`Queue::schedule_lane`), which files each event once in a FIFO.
//!
//!   cargo bench -p fulcrum-des --bench queue

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use fulcrum_des::{Lane, Nanos, Queue, Rng};

type Payload = [u32; 4];

/// What the hold loop needs from a pending-event set.
trait Pending {
    fn schedule(&mut self, at: Nanos, ev: Payload);
    fn pop(&mut self) -> Option<(Nanos, Payload)>;
    /// Schedule `ev` `delay` after `now`, the time of the last pop.
    fn schedule_after(&mut self, now: Nanos, delay: Nanos, ev: Payload) {
        self.schedule(now + delay, ev);
    }
}

impl Pending for Queue<Payload> {
    fn schedule(&mut self, at: Nanos, ev: Payload) {
        Queue::schedule(self, at, ev)
    }
    fn pop(&mut self) -> Option<(Nanos, Payload)> {
        Queue::pop(self)
    }
}

/// The queue with a lane for the constant increment: events scheduled
/// `MEAN` ahead go to the lane, the others (the initial fill) to the heap.
struct Laned {
    queue: Queue<Payload>,
    lane: Lane,
}

impl Default for Laned {
    fn default() -> Self {
        let mut queue = Queue::new();
        let lane = queue.lane(MEAN as Nanos);
        Laned { queue, lane }
    }
}

impl Pending for Laned {
    fn schedule(&mut self, at: Nanos, ev: Payload) {
        self.queue.schedule(at, ev)
    }
    fn pop(&mut self) -> Option<(Nanos, Payload)> {
        self.queue.pop()
    }
    fn schedule_after(&mut self, now: Nanos, delay: Nanos, ev: Payload) {
        if delay == self.queue.lane_delay(self.lane) {
            self.queue.schedule_lane(self.lane, ev);
        } else {
            self.queue.schedule(now + delay, ev);
        }
    }
}

/// The baseline: `BinaryHeap` with a sequence number for FIFO ties.
#[derive(Default)]
struct Heap {
    heap: BinaryHeap<Entry>,
    seq: u64,
}

struct Entry {
    time: Nanos,
    seq: u64,
    ev: Payload,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        (self.time, self.seq) == (other.time, other.seq)
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    // Reversed: the earliest first out of a max-heap.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.time, other.seq).cmp(&(self.time, self.seq))
    }
}

impl Pending for Heap {
    fn schedule(&mut self, time: Nanos, ev: Payload) {
        self.seq += 1;
        self.heap.push(Entry { time, seq: self.seq, ev });
    }
    fn pop(&mut self) -> Option<(Nanos, Payload)> {
        self.heap.pop().map(|e| (e.time, e.ev))
    }
}

const MEAN: f64 = 1e6;

#[derive(Clone, Copy)]
enum Increment {
    Exponential,
    Uniform,
    /// Always `MEAN`: a hop of fixed latency.
    Constant,
}

impl Increment {
    fn name(self) -> &'static str {
        match self {
            Increment::Exponential => "exponential",
            Increment::Uniform => "uniform",
            Increment::Constant => "constant",
        }
    }

    #[inline]
    fn draw(self, rng: &mut Rng) -> Nanos {
        match self {
            Increment::Exponential => (-MEAN * (1.0 - rng.unit()).ln()) as Nanos,
            Increment::Uniform => rng.below(2 * MEAN as u64),
            Increment::Constant => MEAN as Nanos,
        }
    }
}

fn hold<P: Pending>(set: &mut P, rng: &mut Rng, inc: Increment) {
    let (now, ev) = set.pop().expect("the set stays full");
    set.schedule_after(now, inc.draw(rng), black_box(ev));
}

fn filled<P: Pending + Default>(n: u32, rng: &mut Rng, inc: Increment) -> P {
    let mut set = P::default();
    for i in 0..n {
        // A constant increment keeps the initial times' spread: spread them
        // over one increment.
        let at = match inc {
            Increment::Constant => rng.below(MEAN as u64),
            _ => inc.draw(rng),
        };
        set.schedule(at, [i; 4]);
    }
    // Reach the steady state before measuring.
    for _ in 0..2 * n {
        hold(&mut set, rng, inc);
    }
    set
}

fn bench_one<P: Pending + Default>(c: &mut Criterion, name: &str, n: u32, inc: Increment) {
    let mut group = c.benchmark_group(format!("hold-{}", inc.name()));
    group.throughput(Throughput::Elements(1));
    let mut rng = Rng::new(1);
    let mut set: P = filled(n, &mut rng, inc);
    group.bench_function(BenchmarkId::new(name, n), |b| b.iter(|| hold(&mut set, &mut rng, inc)));
    group.finish();
}

fn bench(c: &mut Criterion) {
    for inc in [Increment::Exponential, Increment::Uniform, Increment::Constant] {
        for n in [1_000, 100_000, 1_000_000] {
            bench_one::<Queue<Payload>>(c, "radix-heap", n, inc);
            if matches!(inc, Increment::Constant) {
                bench_one::<Laned>(c, "radix-heap-lane", n, inc);
            }
            bench_one::<Heap>(c, "binary-heap", n, inc);
        }
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).warm_up_time(std::time::Duration::from_millis(500))
        .measurement_time(std::time::Duration::from_secs(2));
    targets = bench
}
criterion_main!(benches);

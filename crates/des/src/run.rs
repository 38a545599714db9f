//! The run loop: pop events in order and hand them to the model, with
//! progress published to a shared counter in coarse steps.

use std::sync::atomic::{AtomicU64, Ordering};

use fulcrum_base::Nanos;

use crate::queue::Queue;
use crate::wheel::Wheel;

/// A set of pending events that [`run`] pops in (time, scheduling) order:
/// [`Queue`], or [`Wheel`] for models whose events are nearly all due
/// shortly after they are scheduled.
pub trait Pending<E> {
    /// The earliest event if it is due at or before `until`; otherwise
    /// `None`, and the set is unchanged.
    fn pop_until(&mut self, until: Nanos) -> Option<(Nanos, E)>;
}

impl<E> Pending<E> for Queue<E> {
    #[inline]
    fn pop_until(&mut self, until: Nanos) -> Option<(Nanos, E)> {
        Queue::pop_until(self, until)
    }
}

impl<E: Copy> Pending<E> for Wheel<E> {
    #[inline]
    fn pop_until(&mut self, until: Nanos) -> Option<(Nanos, E)> {
        Wheel::pop_until(self, until)
    }
}

/// A simulation's state and its reaction to events.
pub trait Model {
    /// What happens (small `Copy` values: indices, not owned data).
    type Event;
    /// Where its pending events wait (usually `Queue<Self::Event>`).
    type Queue: Pending<Self::Event>;

    /// Handle `ev`, due at `now`; schedule what follows on `queue` (at `now`
    /// or later).
    fn handle(&mut self, now: Nanos, ev: Self::Event, queue: &mut Self::Queue);

    /// Work done so far, in the unit the progress counter counts. The
    /// default is events handled (`events`); the request simulator counts
    /// completed requests instead, which it can announce in advance.
    fn work_done(&self, events: u64) -> u64 {
        events
    }
}

/// The progress counter is brought up to date every this many events (a
/// power of two: the check is one mask and one branch per event).
pub const PROGRESS_EVENTS: u64 = 1 << 12;

/// What a call to [`run`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ran {
    /// Events popped and handled.
    pub events: u64,
    /// The time of the last event handled (0 if none).
    pub end: Nanos,
}

/// Handle events in (time, scheduling) order until the queue is empty or
/// the next event is after `until` (events at `until` are handled; later
/// ones stay queued, so a run can be resumed with a later `until`).
///
/// `progress`, if given, is advanced by the growth of
/// [`Model::work_done`]: every [`PROGRESS_EVENTS`] events and once at the
/// end, so that when `run` returns it has grown by exactly the work done in
/// this call. Several runs (threads) may share one counter.
pub fn run<M: Model>(model: &mut M, queue: &mut M::Queue, until: Nanos, progress: Option<&AtomicU64>) -> Ran {
    let mut events = 0u64;
    let mut end = 0;
    let start = model.work_done(0);
    let mut published = start;
    while let Some((now, ev)) = queue.pop_until(until) {
        end = now;
        model.handle(now, ev, queue);
        events += 1;
        if events & (PROGRESS_EVENTS - 1) == 0 {
            if let Some(p) = progress {
                let done = model.work_done(events);
                p.fetch_add(done - published, Ordering::Relaxed);
                published = done;
            }
        }
    }
    if let Some(p) = progress {
        p.fetch_add(model.work_done(events) - published, Ordering::Relaxed);
    }
    Ran { events, end }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each event `n > 0` schedules `n − 1` one nanosecond later and is logged.
    #[derive(Default)]
    struct Countdown {
        log: Vec<(Nanos, u32)>,
    }

    impl Model for Countdown {
        type Event = u32;
        type Queue = Queue<u32>;
        fn handle(&mut self, now: Nanos, ev: u32, queue: &mut Queue<u32>) {
            self.log.push((now, ev));
            if ev > 0 {
                queue.schedule(now + 1, ev - 1);
            }
        }
    }

    #[test]
    fn runs_until_empty() {
        let (mut m, mut q) = (Countdown::default(), Queue::new());
        q.schedule(10, 3);
        let ran = run(&mut m, &mut q, Nanos::MAX, None);
        assert_eq!(ran, Ran { events: 4, end: 13 });
        assert_eq!(m.log, [(10, 3), (11, 2), (12, 1), (13, 0)]);
    }

    #[test]
    fn until_is_inclusive_and_resumable() {
        let (mut m, mut q) = (Countdown::default(), Queue::new());
        q.schedule(10, 5);
        assert_eq!(run(&mut m, &mut q, 12, None), Ran { events: 3, end: 12 });
        assert_eq!(q.len(), 1);
        assert_eq!(run(&mut m, &mut q, 12, None), Ran { events: 0, end: 0 });
        assert_eq!(run(&mut m, &mut q, Nanos::MAX, None), Ran { events: 3, end: 15 });
        let times: Vec<Nanos> = m.log.iter().map(|&(t, _)| t).collect();
        assert_eq!(times, [10, 11, 12, 13, 14, 15]);
    }

    #[test]
    fn progress_counts_every_event_by_default() {
        let (mut m, mut q) = (Countdown::default(), Queue::new());
        let n = 3 * PROGRESS_EVENTS as u32 + 17;
        q.schedule(0, n - 1);
        let counter = AtomicU64::new(5);
        run(&mut m, &mut q, Nanos::MAX, Some(&counter));
        assert_eq!(counter.load(Ordering::Relaxed), 5 + u64::from(n));
    }

    /// Counts its own unit of work: one per even event.
    struct Evens(u64);

    impl Model for Evens {
        type Event = u32;
        type Queue = Queue<u32>;
        fn handle(&mut self, now: Nanos, ev: u32, queue: &mut Queue<u32>) {
            self.0 += u64::from(ev.is_multiple_of(2));
            if ev > 0 {
                queue.schedule(now, ev - 1);
            }
        }
        fn work_done(&self, _events: u64) -> u64 {
            self.0
        }
    }

    #[test]
    fn progress_counts_the_models_unit_done_in_this_call() {
        let mut q = Queue::new();
        q.schedule(0, 2 * PROGRESS_EVENTS as u32 - 1);
        let counter = AtomicU64::new(0);
        // Work done before this call is not counted again.
        let mut m = Evens(10);
        run(&mut m, &mut q, Nanos::MAX, Some(&counter));
        assert_eq!(counter.load(Ordering::Relaxed), PROGRESS_EVENTS);
        assert_eq!(m.0, 10 + PROGRESS_EVENTS);
    }
}

//! A sub-millisecond timer for service delays and send schedules.
//!
//! Tokio's timer wheel has a resolution of one millisecond and rounds every
//! deadline up to the next tick, so `sleep(5 ms)` lasts 5–6 ms. That error is
//! the size of what we measure (a 5 ms backend, a send every 0.5 ms), so
//! [`Timer`] keeps its deadlines in a heap served by one plain thread that
//! waits on a condition variable: Linux wakes it within about 50–100 µs of
//! the deadline (the default timer slack). A sleeper awaits a oneshot
//! channel, so any tokio runtime can use it.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Instant;

use tokio::sync::oneshot;

/// The timer thread and a handle to its deadlines. Dropping it stops the
/// thread; sleeps still pending then end at once.
pub(crate) struct Timer {
    handle: TimerHandle,
    thread: Option<JoinHandle<()>>,
}

/// What tasks hold to sleep on a [`Timer`].
#[derive(Clone)]
pub(crate) struct TimerHandle {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    wake: Condvar,
}

#[derive(Default)]
struct State {
    heap: BinaryHeap<Reverse<Entry>>,
    seq: u64,
    stopped: bool,
}

/// A deadline; `seq` breaks ties so entries are totally ordered without
/// comparing their channels.
struct Entry {
    at: Instant,
    seq: u64,
    tx: oneshot::Sender<()>,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

impl Timer {
    /// Start the timer thread.
    pub(crate) fn start(name: &str) -> std::io::Result<Timer> {
        let shared = Arc::new(Shared { state: Mutex::new(State::default()), wake: Condvar::new() });
        let run = shared.clone();
        let thread = std::thread::Builder::new().name(name.into()).spawn(move || run.serve())?;
        Ok(Timer { handle: TimerHandle { shared }, thread: Some(thread) })
    }

    pub(crate) fn handle(&self) -> TimerHandle {
        self.handle.clone()
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        self.handle.shared.lock().stopped = true;
        self.handle.shared.wake.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Shared {
    /// The state; a panic elsewhere while holding the lock leaves nothing
    /// inconsistent in a heap of deadlines, so poisoning is ignored.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn serve(&self) {
        let mut state = self.lock();
        loop {
            if state.stopped {
                // Dropping the senders ends the pending sleeps.
                state.heap.clear();
                return;
            }
            let now = Instant::now();
            while state.heap.peek().is_some_and(|Reverse(e)| e.at <= now) {
                if let Some(Reverse(e)) = state.heap.pop() {
                    let _ = e.tx.send(());
                }
            }
            state = match state.heap.peek() {
                Some(Reverse(e)) => {
                    let wait = e.at - now;
                    self.wake.wait_timeout(state, wait).unwrap_or_else(|e| e.into_inner()).0
                }
                None => self.wake.wait(state).unwrap_or_else(|e| e.into_inner()),
            };
        }
    }
}

impl TimerHandle {
    /// Sleep until `at` (at once if it has passed or the timer has stopped).
    pub(crate) async fn sleep_until(&self, at: Instant) {
        if at <= Instant::now() {
            return;
        }
        let (tx, rx) = oneshot::channel();
        {
            let mut state = self.shared.lock();
            if state.stopped {
                return;
            }
            let seq = state.seq;
            state.seq += 1;
            // Only a new earliest deadline changes how long the thread waits.
            let earliest = state.heap.peek().is_none_or(|Reverse(e)| e.at > at);
            state.heap.push(Reverse(Entry { at, seq, tx }));
            if earliest {
                self.shared.wake.notify_one();
            }
        }
        let _ = rx.await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    #[ignore = "timing: a sleep may overshoot its deadline by at most 50 ms"]
    async fn sleeps_at_least_until_the_deadline_and_not_much_longer() {
        let timer = Timer::start("test-timer").unwrap();
        let h = timer.handle();
        for ms in [1u64, 3, 5] {
            let start = Instant::now();
            h.sleep_until(start + Duration::from_millis(ms)).await;
            let took = start.elapsed();
            assert!(took >= Duration::from_millis(ms), "{took:?}");
            // Generous: a loaded 2-core machine may deschedule the thread.
            assert!(took < Duration::from_millis(ms + 50), "{took:?}");
        }
    }

    #[tokio::test]
    #[ignore = "timing: deadlines 6 ms apart must not be registered late"]
    async fn deadlines_fire_in_order_whatever_order_they_arrive_in() {
        let timer = Timer::start("test-timer").unwrap();
        let start = Instant::now();
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for ms in [9u64, 2, 6, 4] {
            let (h, order) = (timer.handle(), order.clone());
            tasks.push(tokio::spawn(async move {
                h.sleep_until(start + Duration::from_millis(ms * 3)).await;
                order.lock().unwrap().push(ms);
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), vec![2, 4, 6, 9]);
    }

    #[tokio::test]
    async fn a_stopped_timer_ends_pending_sleeps() {
        let timer = Timer::start("test-timer").unwrap();
        let h = timer.handle();
        let sleeper = tokio::spawn(async move { h.sleep_until(Instant::now() + Duration::from_secs(60)).await });
        tokio::time::sleep(Duration::from_millis(10)).await;
        drop(timer);
        tokio::time::timeout(Duration::from_secs(5), sleeper).await.unwrap().unwrap();
    }
}

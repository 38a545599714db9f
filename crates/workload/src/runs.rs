//! Independent runs spread over threads: the one pool both simulators use
//! for their seeds (`fulcrum sim`'s algorithms × seeds, `fulcrum fabric`'s
//! seeds).
//!
//! A run is a pure function of its input (the scenario and its seed), so
//! the results come back in input order and do not depend on the number of
//! threads.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Seeds that would pass the largest seed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{runs} runs from seed {first} pass the largest seed ({}): give a smaller seed or fewer runs", u64::MAX)]
pub struct SeedOverflow {
    /// The first seed.
    pub first: u64,
    /// The number of runs.
    pub runs: u64,
}

/// The seeds of `runs` runs: `first`, `first + 1`, …, checked.
pub fn seeds(first: u64, runs: u64) -> Result<Vec<u64>, SeedOverflow> {
    match runs.checked_sub(1).map(|last| first.checked_add(last)) {
        Some(None) => Err(SeedOverflow { first, runs }),
        _ => Ok((0..runs).map(|i| first + i).collect()),
    }
}

/// `job` applied to every item of `items`, on up to `threads` threads
/// (at least one; never more than there are items); the results in item
/// order.
pub fn on_threads<T: Sync, R: Send>(items: &[T], threads: usize, job: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let threads = threads.clamp(1, items.len().max(1));
    if threads == 1 {
        return items.iter().map(job).collect();
    }
    let next = AtomicUsize::new(0);
    let slots: Mutex<Vec<Option<R>>> = Mutex::new(items.iter().map(|_| None).collect());
    let work = || loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        let Some(item) = items.get(i) else { break };
        let result = job(item);
        slots.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(result);
    };
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(work);
        }
    });
    // Every index below the length was taken by exactly one worker, and a
    // worker that panics takes the scope (and this call) down with it.
    slots.into_inner().unwrap_or_else(|e| e.into_inner()).into_iter().flatten().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_are_consecutive_and_checked() {
        assert_eq!(seeds(7, 3), Ok(vec![7, 8, 9]));
        assert_eq!(seeds(7, 0), Ok(vec![]));
        assert_eq!(seeds(u64::MAX, 1), Ok(vec![u64::MAX]));
        assert_eq!(seeds(u64::MAX - 1, 2), Ok(vec![u64::MAX - 1, u64::MAX]));
        let e = seeds(u64::MAX, 2).unwrap_err();
        assert_eq!(e, SeedOverflow { first: u64::MAX, runs: 2 });
        assert!(e.to_string().contains("smaller seed"), "{e}");
    }

    #[test]
    fn results_come_back_in_order_whatever_the_threads() {
        let items: Vec<u64> = (0..50).collect();
        let square = |x: &u64| x * x;
        let one = on_threads(&items, 1, square);
        assert_eq!(one, items.iter().map(square).collect::<Vec<_>>());
        for threads in [0, 2, 3, 8, 100] {
            assert_eq!(on_threads(&items, threads, square), one, "{threads} threads");
        }
        assert!(on_threads(&[] as &[u64], 4, square).is_empty());
    }
}

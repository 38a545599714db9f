//! A cluster's circuit breaker on requests in flight (`max_requests`,
//! Envoy's `max_requests`): a try that would exceed the limit is refused at
//! once (503) instead of being sent. The proxy's workers share one
//! [`RequestLimit`] per cluster; the simulator's balancers share one per
//! run, so both count and refuse alike. While every endpoint is ramping
//! (slow start) the limit is scaled by the same factor ([`ramped`]).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Requests in flight, counted against a limit.
#[derive(Debug, Default)]
pub struct RequestLimit {
    in_flight: AtomicU64,
}

impl RequestLimit {
    /// Take a slot if fewer than `limit` requests are in flight; `false`
    /// (nothing taken) means refuse the try.
    #[inline]
    pub fn acquire(&self, limit: u64) -> bool {
        if self.in_flight.fetch_add(1, Relaxed) >= limit {
            self.in_flight.fetch_sub(1, Relaxed);
            return false;
        }
        true
    }

    /// Give back a slot taken by [`RequestLimit::acquire`].
    #[inline]
    pub fn release(&self) {
        self.in_flight.fetch_sub(1, Relaxed);
    }

    /// Requests in flight now.
    pub fn in_flight(&self) -> u64 {
        self.in_flight.load(Relaxed)
    }
}

/// The limit in force: `max_requests` scaled by `factor` (the routable set's
/// `request_limit_factor`, below 1 while every endpoint is ramping), at
/// least 1.
pub fn ramped(max_requests: u64, factor: f64) -> u64 {
    if factor < 1.0 {
        ((max_requests as f64 * factor).ceil() as u64).max(1)
    } else {
        max_requests
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_beyond_the_limit_and_frees_on_release() {
        let l = RequestLimit::default();
        assert!(l.acquire(2) && l.acquire(2));
        assert!(!l.acquire(2), "a third try over a limit of 2");
        assert_eq!(l.in_flight(), 2, "a refusal takes nothing");
        l.release();
        assert!(l.acquire(2));
        assert!(!l.acquire(1), "a lowered limit refuses until enough finish");
    }

    #[test]
    fn slow_start_ramps_the_limit() {
        assert_eq!(ramped(100, 1.0), 100);
        assert_eq!(ramped(100, 0.1), 10);
        assert_eq!(ramped(100, 0.101), 11, "rounded up");
        assert_eq!(ramped(3, 0.001), 1, "never 0");
    }
}

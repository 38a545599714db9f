//! Statistics the driver keeps beyond one run's latency figures: per-server
//! shares over time.
//! The mean and 95 % interval over repeated runs are
//! [`fulcrum_workload::interval`]'s, shared with the fabric simulator.
//!
//! [`Summary`] (the seed-000 table's figures, exact or from a histogram)
//! comes from `fulcrum_workload::summary`, with the CDF points.

use fulcrum_balance::Nanos;

/// Latency figures and how they are computed live in `fulcrum_workload`,
/// shared with the load tool; they are re-exported here for the report code.
pub use fulcrum_workload::summary::{Summary, FIGURES};

/// Requests per server per time bucket, coarsened as the run grows so that
/// memory stays bounded whatever its length.
#[derive(Debug, Clone, PartialEq)]
pub struct ShareSeries {
    /// Width of a bucket.
    pub interval: Nanos,
    /// `buckets[t][s]`: requests sent to server `s` in bucket `t`.
    pub buckets: Vec<Vec<u64>>,
    servers: usize,
    /// The bucket the last count went to and its time range
    /// `[from, until)`: a simulator's counts come in time order, so most
    /// find their bucket without a division.
    current: usize,
    from: Nanos,
    until: Nanos,
}

/// Most buckets kept before neighbours are merged.
const MAX_BUCKETS: usize = 512;

impl ShareSeries {
    /// An empty series over `servers` servers.
    pub fn new(interval: Nanos, servers: usize) -> Self {
        ShareSeries { interval: interval.max(1), buckets: Vec::new(), servers, current: 0, from: 0, until: 0 }
    }

    /// Count one request to `server` at `now`.
    #[inline]
    pub fn record(&mut self, now: Nanos, server: usize) {
        if !(self.from..self.until).contains(&now) {
            self.enter(now);
        }
        self.buckets[self.current][server] += 1;
    }

    /// Make the bucket of `now` current, coarsening and growing the
    /// series as needed.
    #[inline(never)]
    fn enter(&mut self, now: Nanos) {
        let mut t = (now / self.interval) as usize;
        while t >= MAX_BUCKETS {
            self.coarsen();
            t = (now / self.interval) as usize;
        }
        if t >= self.buckets.len() {
            self.buckets.resize_with(t + 1, || vec![0; self.servers]);
        }
        self.current = t;
        self.from = t as Nanos * self.interval;
        self.until = self.from.saturating_add(self.interval);
    }

    /// Requests per server over the whole run: merging buckets keeps every
    /// count, so the column sums are exactly what was recorded.
    pub fn totals(&self) -> Vec<u64> {
        let mut totals = vec![0; self.servers];
        for bucket in &self.buckets {
            for (t, n) in totals.iter_mut().zip(bucket) {
                *t += n;
            }
        }
        totals
    }

    fn coarsen(&mut self) {
        self.interval *= 2;
        let old = std::mem::take(&mut self.buckets);
        for pair in old.chunks(2) {
            let mut merged = pair[0].clone();
            if let Some(second) = pair.get(1) {
                for (m, s) in merged.iter_mut().zip(second) {
                    *m += s;
                }
            }
            self.buckets.push(merged);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn share_series_stays_bounded() {
        let mut s = ShareSeries::new(1, 2);
        for t in 0..10_000u64 {
            s.record(t, (t % 2) as usize);
        }
        assert!(s.buckets.len() <= MAX_BUCKETS);
        let total: u64 = s.buckets.iter().flatten().sum();
        assert_eq!(total, 10_000);
        assert_eq!(s.interval, 32);
        assert_eq!(s.totals(), vec![5_000, 5_000]);
    }
}

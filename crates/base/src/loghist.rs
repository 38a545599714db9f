//! A log-linear latency histogram fine enough to model service times from:
//! buckets 5 % wide from 10 µs to 60 s, one below (under 10 µs) and one
//! above. [`AtomicLogHistogram`] counts with relaxed atomics (the proxy's
//! request path); [`bucket_bounds`] turns a bucket index back into the
//! range it covers (the simulator reading a snapshot).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::Nanos;

/// Lower bound of the first fine bucket.
pub const FLOOR: Nanos = 10_000;
/// Upper bound of the last fine bucket.
pub const CEILING: Nanos = 60_000_000_000;
/// Each bucket's upper bound over its lower bound.
pub const GROWTH: f64 = 1.05;
/// Fine buckets between [`FLOOR`] and [`CEILING`] (⌈ln(6·10⁶) / ln 1.05⌉).
const FINE: usize = 320;
/// All buckets: one under [`FLOOR`], the fine ones, one over [`CEILING`].
pub const BUCKETS: usize = FINE + 2;

/// The bucket `v` falls in.
pub fn bucket_of(v: Nanos) -> usize {
    if v < FLOOR {
        return 0;
    }
    if v >= CEILING {
        return BUCKETS - 1;
    }
    let mut i = (((v as f64 / FLOOR as f64).ln() / GROWTH.ln()) as usize).min(FINE - 1);
    // The logarithm may round across a bound: settle on the bucket whose
    // bounds (as `bucket_bounds` computes them) hold `v`.
    if i + 1 < FINE && v >= edge(i + 1) {
        i += 1;
    } else if i > 0 && v < edge(i) {
        i -= 1;
    }
    1 + i
}

/// The lower bound of fine bucket `k` (counted from 0), from a table built
/// once: `bucket_of` runs on the proxy's request path.
fn edge(k: usize) -> Nanos {
    static EDGES: std::sync::LazyLock<Vec<Nanos>> = std::sync::LazyLock::new(|| {
        (0..=FINE).map(|k| ((FLOOR as f64) * GROWTH.powi(k as i32)).min(CEILING as f64) as Nanos).collect()
    });
    EDGES[k]
}

/// `[low, high)` of bucket `i`, in nanoseconds (`i` past the last is the last).
pub fn bucket_bounds(i: usize) -> (Nanos, Nanos) {
    match i {
        0 => (0, FLOOR),
        i if i >= BUCKETS - 1 => (CEILING, CEILING),
        i => (edge(i - 1), edge(i)),
    }
}

/// Counts per bucket, shared by threads without a lock.
#[derive(Debug)]
pub struct AtomicLogHistogram {
    counts: Box<[AtomicU64]>,
}

impl Default for AtomicLogHistogram {
    fn default() -> Self {
        AtomicLogHistogram { counts: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect() }
    }
}

impl AtomicLogHistogram {
    /// Count one value.
    #[inline]
    pub fn record(&self, v: Nanos) {
        self.counts[bucket_of(v)].fetch_add(1, Relaxed);
    }

    /// `(bucket, count)` of every bucket that has counted something.
    pub fn nonzero(&self) -> Vec<(usize, u64)> {
        self.counts.iter().enumerate().map(|(i, c)| (i, c.load(Relaxed))).filter(|&(_, n)| n > 0).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_five_percent_wide_and_contain_their_values() {
        for v in [0, 9_999, 10_000, 10_499, 10_500, 1_234_567, 59_999_999_999, 60_000_000_000, u64::MAX] {
            let (lo, hi) = bucket_bounds(bucket_of(v));
            assert!(lo <= v && (v < hi || bucket_of(v) == BUCKETS - 1), "{v} not in [{lo}, {hi})");
        }
        let (lo, hi) = bucket_bounds(100);
        assert!((hi as f64 / lo as f64 - GROWTH).abs() < 1e-3);
        assert!(bucket_bounds(FINE).1 >= CEILING - 1, "the fine buckets reach the ceiling");
        let h = AtomicLogHistogram::default();
        h.record(1_000_000);
        h.record(1_000_001);
        h.record(5);
        assert_eq!(h.nonzero(), vec![(0, 1), (bucket_of(1_000_000), 2)]);
    }
}

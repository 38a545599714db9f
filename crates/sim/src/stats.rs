//! Statistics the driver keeps beyond one run's latency figures: per-server
//! shares over time, and the mean and 95 % interval over repeated runs.
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
}

/// Most buckets kept before neighbours are merged.
const MAX_BUCKETS: usize = 512;

impl ShareSeries {
    /// An empty series over `servers` servers.
    pub fn new(interval: Nanos, servers: usize) -> Self {
        ShareSeries { interval: interval.max(1), buckets: Vec::new(), servers }
    }

    /// Count one request to `server` at `now`.
    #[inline]
    pub fn record(&mut self, now: Nanos, server: usize) {
        let mut t = (now / self.interval) as usize;
        while t >= MAX_BUCKETS {
            self.coarsen();
            t = (now / self.interval) as usize;
        }
        if t >= self.buckets.len() {
            self.buckets.resize_with(t + 1, || vec![0; self.servers]);
        }
        self.buckets[t][server] += 1;
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

/// Two-sided 95 % Student-t quantile for `df` degrees of freedom.
pub fn t95(df: usize) -> f64 {
    const T: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
    ];
    match df {
        0 => 0.0,
        d if d <= 30 => T[d - 1],
        d if d <= 60 => 2.000,
        d if d <= 120 => 1.980,
        _ => 1.960,
    }
}

/// Mean and 95 % confidence half-width of `values`.
pub fn mean_ci95(values: &[f64]) -> (f64, f64) {
    let n = values.len();
    if n == 0 {
        return (0.0, 0.0);
    }
    let mean = values.iter().sum::<f64>() / n as f64;
    if n == 1 {
        return (mean, 0.0);
    }
    let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
    (mean, t95(n - 1) * (var / n as f64).sqrt())
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

    #[test]
    fn ci_uses_student_t() {
        let (m, h) = mean_ci95(&[1.0, 2.0, 3.0]);
        assert_eq!(m, 2.0);
        assert!((h - 4.303 * (1.0f64 / 3.0).sqrt()).abs() < 1e-9);
        assert_eq!(mean_ci95(&[4.0]), (4.0, 0.0));
    }
}

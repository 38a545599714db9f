//! Statistics the driver keeps: latency summaries, CDF points, per-server
//! shares over time, and the mean and 95 % interval over repeated runs.
//!
//! [`Summary`] holds the figures of the seed-000 table. Percentiles use
//! linear interpolation at rank `(n − 1)·p` on exact values, as the
//! seed-000 model computes them; the standard deviation is the population
//! one (divide by `n`).

use fulcrum_balance::Nanos;
use serde::Serialize;

/// Latency figures of one run, in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Summary {
    /// Smallest latency.
    pub min: f64,
    /// Mean.
    pub avg: f64,
    /// Median.
    pub p50: f64,
    /// 75th percentile.
    pub p75: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 95th percentile.
    pub p95: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Largest latency.
    pub max: f64,
    /// Population standard deviation.
    pub stddev: f64,
}

/// Reads one figure of a [`Summary`].
pub type Figure = fn(&Summary) -> f64;

/// The figure names, in table order, with accessors.
pub const FIGURES: [(&str, Figure); 10] = [
    ("min", |s| s.min),
    ("avg", |s| s.avg),
    ("p50", |s| s.p50),
    ("p75", |s| s.p75),
    ("p90", |s| s.p90),
    ("p95", |s| s.p95),
    ("p99", |s| s.p99),
    ("p999", |s| s.p999),
    ("max", |s| s.max),
    ("stddev", |s| s.stddev),
];

const MS: f64 = 1e6;

/// Percentile `p` (0..=1) of `sorted`: linear interpolation at rank (n−1)·p.
pub fn percentile(sorted: &[Nanos], p: f64) -> f64 {
    match sorted.len() {
        0 => 0.0,
        n => {
            let rank = (n - 1) as f64 * p;
            let lo = rank.floor() as usize;
            let hi = (lo + 1).min(n - 1);
            let frac = rank - lo as f64;
            sorted[lo] as f64 + (sorted[hi] as f64 - sorted[lo] as f64) * frac
        }
    }
}

impl Summary {
    /// Figures of `samples` (nanoseconds); sorts them in place.
    pub fn of(samples: &mut [Nanos]) -> Summary {
        if samples.is_empty() {
            return Summary::default();
        }
        samples.sort_unstable();
        let n = samples.len() as f64;
        let mean = samples.iter().map(|&x| x as f64).sum::<f64>() / n;
        let var = samples.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / n;
        let p = |q| percentile(samples, q) / MS;
        Summary {
            min: samples[0] as f64 / MS,
            avg: mean / MS,
            p50: p(0.5),
            p75: p(0.75),
            p90: p(0.9),
            p95: p(0.95),
            p99: p(0.99),
            p999: p(0.999),
            max: samples[samples.len() - 1] as f64 / MS,
            stddev: var.sqrt() / MS,
        }
    }

    /// A summary from its figures in [`FIGURES`] order.
    pub fn from_array(v: [f64; 10]) -> Summary {
        Summary {
            min: v[0],
            avg: v[1],
            p50: v[2],
            p75: v[3],
            p90: v[4],
            p95: v[5],
            p99: v[6],
            p999: v[7],
            max: v[8],
            stddev: v[9],
        }
    }
}

/// Points of the latency CDF for plotting: `(fraction, latency ms)`, at most
/// about `points` of them, always including the minimum and the maximum.
pub fn cdf_points(sorted: &[Nanos], points: usize) -> Vec<(f64, f64)> {
    let n = sorted.len();
    if n == 0 {
        return Vec::new();
    }
    let step = (n / points.max(1)).max(1);
    let mut out: Vec<(f64, f64)> =
        (0..n).step_by(step).map(|i| ((i + 1) as f64 / n as f64, sorted[i] as f64 / MS)).collect();
    // The tail is what matters on a latency plot: keep its last points exactly.
    let tail_from = n.saturating_sub((points / 10).max(1));
    for (i, &v) in sorted.iter().enumerate().skip(tail_from) {
        if i % step != 0 {
            out.push(((i + 1) as f64 / n as f64, v as f64 / MS));
        }
    }
    out.sort_by(|a, b| a.0.total_cmp(&b.0));
    out
}

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
    fn percentiles_interpolate_at_n_minus_one_rank() {
        let v = [10, 20, 30, 40];
        assert_eq!(percentile(&v, 0.0), 10.0);
        assert_eq!(percentile(&v, 1.0), 40.0);
        assert_eq!(percentile(&v, 0.5), 25.0);
        assert!((percentile(&v, 0.9) - 37.0).abs() < 1e-9);
        assert_eq!(percentile(&[7], 0.99), 7.0);
    }

    #[test]
    fn summary_of_known_samples() {
        // 9 × 5 ms and 1 × 50 ms: mean 9.5, population sd 13.5.
        let mut v: Vec<Nanos> = [5; 9].iter().chain(&[50]).map(|ms| ms * 1_000_000).collect();
        let s = Summary::of(&mut v);
        assert_eq!((s.min, s.p50, s.max), (5.0, 5.0, 50.0));
        assert!((s.avg - 9.5).abs() < 1e-9);
        assert!((s.stddev - 13.5).abs() < 1e-9);
        assert!((s.p95 - (5.0 + 0.55 * 45.0)).abs() < 1e-9);
        assert_eq!(Summary::of(&mut []), Summary::default());
    }

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
    }

    #[test]
    fn ci_uses_student_t() {
        let (m, h) = mean_ci95(&[1.0, 2.0, 3.0]);
        assert_eq!(m, 2.0);
        assert!((h - 4.303 * (1.0f64 / 3.0).sqrt()).abs() < 1e-9);
        assert_eq!(mean_ci95(&[4.0]), (4.0, 0.0));
    }

    #[test]
    fn cdf_keeps_the_tail() {
        let v: Vec<Nanos> = (1..=100_000).collect();
        let c = cdf_points(&v, 100);
        assert!(c.len() < 200);
        assert_eq!(c.last().unwrap().0, 1.0);
        assert!(c.windows(2).all(|w| w[0].0 < w[1].0));
    }
}

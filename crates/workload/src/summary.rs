//! Latency summaries (the seed-000 table's figures) and the [`Recorder`]
//! a driver feeds latencies into, one by one.
//!
//! Two methods compute the percentiles, and every [`Summary`] says which
//! one produced it ([`Method`]):
//!
//! - [`Method::Exact`]: every sample is kept and sorted; percentile `p` is
//!   the linear interpolation at rank `(n − 1)·p` (the "type 7" estimator of
//!   Hyndman & Fan, "Sample quantiles in statistical packages", 1996, which
//!   the seed-000 model uses).
//! - [`Method::Hdr`]: samples are counted in an HDR histogram with three
//!   significant digits (Gil Tene's HdrHistogram; buckets no wider than
//!   1/1000 of their value); percentile `p` is the nearest rank, the
//!   smallest sample with at least `⌈p·n⌉` samples at or below it, reported
//!   as the top of its bucket and never above the largest sample. So an
//!   HDR percentile is at most 0.1 % above the nearest-rank value of the
//!   same samples. Min, max and mean stay exact (kept beside the histogram);
//!   the standard deviation is computed on the fly (Welford) and merged
//!   with Chan et al.'s pairwise formula.
//!
//! A [`Recorder`] is exact up to a limit of samples ([`EXACT_LIMIT`] by
//! default), then folds what it holds into a histogram and continues
//! there, so its memory no longer grows with the number of requests.
//! [`Recorder::exact`] never folds.

use fulcrum_base::Nanos;
use hdrhistogram::Histogram;
use serde::Serialize;

/// Samples a default [`Recorder`] keeps before switching to a histogram.
///
/// A million latencies are 8 MB: cheap for one run, and past it the
/// nearest-rank p99.9 of a histogram is within 0.1 % of the exact one while
/// the 1,000 samples above it still make a p99.9 worth reading. Runs of the
/// reproduction scenarios (up to 10⁶ measured requests) stay exact.
pub const EXACT_LIMIT: usize = 1_000_000;

/// Significant digits of the histogram.
const SIGNIFICANT_DIGITS: u8 = 3;

const MS: f64 = 1e6;

/// How a [`Summary`]'s percentiles were computed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Method {
    /// Every sample kept; linear interpolation at rank `(n − 1)·p`.
    #[default]
    Exact,
    /// HDR histogram, three significant digits, nearest rank.
    Hdr,
}

impl Method {
    /// True for [`Method::Exact`] (JSON leaves the field out then, so the
    /// documents of exact runs keep their shape).
    pub fn is_exact(&self) -> bool {
        *self == Method::Exact
    }

    /// One line for people, under a table.
    pub fn describe(self) -> &'static str {
        match self {
            Method::Exact => "exact (every sample kept; linear interpolation at rank (n−1)·p)",
            Method::Hdr => "HDR histogram, 3 significant digits (nearest rank; min, max, mean exact)",
        }
    }

    /// The method of figures combined from summaries by these methods.
    pub fn combine(self, other: Method) -> Method {
        if self == Method::Exact && other == Method::Exact {
            Method::Exact
        } else {
            Method::Hdr
        }
    }
}

/// Latency figures, in milliseconds.
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
    /// Population standard deviation (divide by `n`).
    pub stddev: f64,
    /// How the percentiles were computed; in JSON only when not exact.
    #[serde(skip_serializing_if = "Method::is_exact")]
    pub method: Method,
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
    /// Exact figures of `samples` (nanoseconds); sorts them in place.
    pub fn of(samples: &mut [Nanos]) -> Summary {
        if samples.is_empty() {
            return Summary::default();
        }
        samples.sort_unstable();
        let n = samples.len() as f64;
        let mean = samples.iter().map(|&x| x as f64).sum::<f64>() / n;
        let var = samples.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / n;
        let (min, max) = (samples[0] as f64, samples[samples.len() - 1] as f64);
        Summary::from_nanos(min, mean, max, var.sqrt(), |q| percentile(samples, q), Method::Exact)
    }

    /// A summary from figures in nanoseconds, its quantiles read from
    /// `quantile` (p in [0, 1] → nanoseconds), whichever method made them.
    fn from_nanos(min: f64, avg: f64, max: f64, stddev: f64, quantile: impl Fn(f64) -> f64, method: Method) -> Summary {
        let p = |q| quantile(q) / MS;
        Summary {
            min: min / MS,
            avg: avg / MS,
            p50: p(0.5),
            p75: p(0.75),
            p90: p(0.9),
            p95: p(0.95),
            p99: p(0.99),
            p999: p(0.999),
            max: max / MS,
            stddev: stddev / MS,
            method,
        }
    }

    /// A summary from its figures in [`FIGURES`] order.
    pub fn from_array(v: [f64; 10], method: Method) -> Summary {
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
            method,
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

/// Latencies counted in a histogram, with the exact figures kept beside it.
#[derive(Debug, Clone)]
struct Folded {
    hist: Histogram<u64>,
    count: u64,
    sum: u128,
    min: Nanos,
    max: Nanos,
    mean: f64,
    /// Sum of squared deviations from `mean` (Welford).
    m2: f64,
}

impl Folded {
    fn of(samples: &[Nanos]) -> Folded {
        // Auto-resizing with three significant digits: valid, cannot fail.
        let hist = Histogram::new(SIGNIFICANT_DIGITS).expect("valid histogram precision");
        let mut f = Folded { hist, count: 0, sum: 0, min: Nanos::MAX, max: 0, mean: 0.0, m2: 0.0 };
        for &v in samples {
            f.record(v);
        }
        f
    }

    fn record(&mut self, v: Nanos) {
        if self.hist.record(v).is_err() {
            self.hist.saturating_record(v);
        }
        self.count += 1;
        self.sum += u128::from(v);
        self.min = self.min.min(v);
        self.max = self.max.max(v);
        let delta = v as f64 - self.mean;
        self.mean += delta / self.count as f64;
        self.m2 += delta * (v as f64 - self.mean);
    }

    fn merge(&mut self, other: &Folded) {
        if other.count == 0 {
            return;
        }
        // Both auto-resize, so adding cannot run out of range.
        let _ = self.hist.add(&other.hist);
        let (na, nb) = (self.count as f64, other.count as f64);
        let n = na + nb;
        let delta = other.mean - self.mean;
        self.mean += delta * nb / n;
        self.m2 += other.m2 + delta * delta * na * nb / n;
        self.count += other.count;
        self.sum += other.sum;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
    }

    /// Nearest-rank quantile `p`, in nanoseconds, within [min, max].
    fn quantile(&self, p: f64) -> f64 {
        self.hist.value_at_quantile(p).clamp(self.min, self.max) as f64
    }

    fn summary(&self) -> Summary {
        if self.count == 0 {
            return Summary { method: Method::Hdr, ..Summary::default() };
        }
        let (min, max) = (self.min as f64, self.max as f64);
        let avg = self.sum as f64 / self.count as f64;
        let stddev = (self.m2 / self.count as f64).max(0.0).sqrt();
        Summary::from_nanos(min, avg, max, stddev, |q| self.quantile(q), Method::Hdr)
    }

    /// CDF points by bucket, thinned as [`cdf_points`] thins samples: a
    /// bucket is kept when it holds a sample whose rank is a multiple of the
    /// step or one of the last `points / 10`.
    fn cdf_points(&self, points: usize) -> Vec<(f64, f64)> {
        let n = self.count;
        let step = (n / points.max(1) as u64).max(1);
        let tail_from = n.saturating_sub((points / 10).max(1) as u64);
        let mut out = Vec::new();
        let mut below = 0u64;
        for bucket in self.hist.iter_recorded() {
            let count = bucket.count_since_last_iteration();
            let last = below + count - 1;
            if last / step * step >= below || last >= tail_from {
                let value = bucket.value_iterated_to().clamp(self.min, self.max);
                out.push(((last + 1) as f64 / n as f64, value as f64 / MS));
            }
            below += count;
        }
        out
    }
}

/// Where a driver records latencies, one by one: exact up to a limit of
/// samples, a histogram past it (see the module documentation).
#[derive(Debug, Clone)]
pub struct Recorder {
    limit: usize,
    samples: Vec<Nanos>,
    folded: Option<Box<Folded>>,
}

impl Default for Recorder {
    /// Exact up to [`EXACT_LIMIT`] samples.
    fn default() -> Self {
        Recorder::bounded(EXACT_LIMIT)
    }
}

impl Recorder {
    /// A recorder that keeps every sample, whatever their number.
    pub fn exact() -> Recorder {
        Recorder::bounded(usize::MAX)
    }

    /// A recorder that keeps up to `limit` samples, then counts them in a
    /// histogram.
    pub fn bounded(limit: usize) -> Recorder {
        Recorder { limit, samples: Vec::new(), folded: None }
    }

    /// [`Recorder::exact`] if `exact`, else the default bounded one.
    pub fn new(exact: bool) -> Recorder {
        if exact {
            Recorder::exact()
        } else {
            Recorder::default()
        }
    }

    /// Make room for `n` samples up front (no more than the limit).
    pub fn reserve(&mut self, n: usize) {
        if self.folded.is_none() {
            self.samples.reserve(n.min(self.limit));
        }
    }

    /// Record one latency in nanoseconds.
    #[inline]
    pub fn record(&mut self, latency: Nanos) {
        match &mut self.folded {
            None if self.samples.len() < self.limit => self.samples.push(latency),
            Some(folded) => folded.record(latency),
            None => {
                self.switch_to_histogram();
                self.record(latency);
            }
        }
    }

    /// Count the samples held so far in a histogram, and every later one
    /// (what [`Recorder::record`] does past the limit; a driver whose
    /// shards share one limit calls it when the shared count passes it).
    pub fn switch_to_histogram(&mut self) {
        if self.folded.is_none() {
            self.folded = Some(Box::new(Folded::of(&self.samples)));
            self.samples = Vec::new();
        }
    }

    /// Samples recorded.
    pub fn len(&self) -> u64 {
        self.folded.as_ref().map_or(self.samples.len() as u64, |f| f.count)
    }

    /// True before the first sample.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The method [`Recorder::summary`] would use now.
    pub fn method(&self) -> Method {
        if self.folded.is_some() {
            Method::Hdr
        } else {
            Method::Exact
        }
    }

    /// Add `other`'s samples (runs, threads or shards of one measurement).
    /// The result stays exact if both are and their samples fit within
    /// this recorder's limit; otherwise it is a histogram.
    pub fn merge(&mut self, other: Recorder) {
        if self.folded.is_none() && other.folded.is_none() && self.samples.len() + other.samples.len() <= self.limit {
            if self.samples.is_empty() {
                self.samples = other.samples;
            } else {
                self.samples.extend_from_slice(&other.samples);
            }
            return;
        }
        self.switch_to_histogram();
        let other = other.folded.unwrap_or_else(|| Box::new(Folded::of(&other.samples)));
        if let Some(folded) = &mut self.folded {
            folded.merge(&other);
        }
    }

    /// The figures of what was recorded (sorts the kept samples in place).
    pub fn summary(&mut self) -> Summary {
        match &self.folded {
            Some(f) => f.summary(),
            None => Summary::of(&mut self.samples),
        }
    }

    /// Percentile `p` (0..=1) in nanoseconds, by the current method.
    pub fn quantile(&mut self, p: f64) -> f64 {
        match &self.folded {
            Some(f) => f.quantile(p),
            None => {
                self.samples.sort_unstable();
                percentile(&self.samples, p)
            }
        }
    }

    /// About `points` points `(fraction, latency ms)` of the CDF, the
    /// maximum and the tail included (sorts the kept samples in place).
    pub fn cdf_points(&mut self, points: usize) -> Vec<(f64, f64)> {
        match &self.folded {
            Some(f) => f.cdf_points(points),
            None => {
                self.samples.sort_unstable();
                cdf_points(&self.samples, points)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NS_PER_MS: u64 = 1_000_000;

    #[test]
    fn percentiles_interpolate_at_n_minus_one_rank() {
        let v = [10, 20, 30, 40];
        assert_eq!(percentile(&v, 0.0), 10.0);
        assert_eq!(percentile(&v, 1.0), 40.0);
        assert_eq!(percentile(&v, 0.5), 25.0);
        assert!((percentile(&v, 0.9) - 37.0).abs() < 1e-9);
        assert_eq!(percentile(&[7], 0.99), 7.0);
        assert_eq!(percentile(&[], 0.5), 0.0);
    }

    #[test]
    fn summary_of_known_samples() {
        // 9 × 5 ms and 1 × 50 ms: mean 9.5, population sd 13.5.
        let mut v: Vec<Nanos> = [5; 9].iter().chain(&[50]).map(|ms| ms * NS_PER_MS).collect();
        let s = Summary::of(&mut v);
        assert_eq!((s.min, s.p50, s.max, s.method), (5.0, 5.0, 50.0, Method::Exact));
        assert!((s.avg - 9.5).abs() < 1e-9);
        assert!((s.stddev - 13.5).abs() < 1e-9);
        assert!((s.p95 - (5.0 + 0.55 * 45.0)).abs() < 1e-9);
        assert_eq!(Summary::of(&mut []), Summary::default());
    }

    /// 1..=100 000 µs: the exact p99 interpolates at rank 98 999.01, the
    /// HDR one is the nearest rank 99 000 rounded up to its bucket's top.
    #[test]
    fn hdr_percentiles_are_nearest_rank_within_a_thousandth() {
        let values: Vec<Nanos> = (1..=100_000u64).map(|us| us * 1000).collect();
        let mut exact = Recorder::exact();
        let mut hdr = Recorder::bounded(0);
        for &v in &values {
            exact.record(v);
            hdr.record(v);
        }
        assert_eq!((exact.method(), hdr.method()), (Method::Exact, Method::Hdr));
        let (e, h) = (exact.summary(), hdr.summary());
        assert!((e.p99 - 99.000_01).abs() < 1e-9, "{e:?}");
        for (p, nearest_ms) in [(0.5, 50.0), (0.9, 90.0), (0.99, 99.0), (0.999, 99.9)] {
            let got = hdr.quantile(p) / 1e6;
            assert!(got >= nearest_ms && got <= nearest_ms * 1.001, "p{p}: {got} vs {nearest_ms}");
        }
        assert_eq!((h.min, h.max), (e.min, e.max));
        assert!((h.avg - e.avg).abs() < 1e-9, "{} vs {}", h.avg, e.avg);
        assert!((h.stddev / e.stddev - 1.0).abs() < 1e-9, "{} vs {}", h.stddev, e.stddev);
        assert_eq!(h.method, Method::Hdr);
        // Nothing above the largest sample, even where its bucket reaches higher.
        assert_eq!(hdr.quantile(1.0), 100_000_000.0);
    }

    #[test]
    fn recorder_switches_to_a_histogram_past_its_limit() {
        let mut r = Recorder::bounded(1000);
        for i in 0..1000 {
            r.record(i * NS_PER_MS);
        }
        assert_eq!((r.len(), r.method()), (1000, Method::Exact));
        let exact = r.summary();
        r.record(5 * NS_PER_MS);
        assert_eq!((r.len(), r.method()), (1001, Method::Hdr));
        assert!(r.samples.capacity() == 0, "the kept samples are freed once folded");
        let s = r.summary();
        assert_eq!(s.method, Method::Hdr);
        assert_eq!((s.min, s.max), (0.0, 999.0));
        // One sample more barely moves the median: within the bucket width.
        assert!((s.p50 / exact.p50 - 1.0).abs() < 0.002, "{} vs {}", s.p50, exact.p50);
        for i in 0..10_000 {
            r.record(i);
        }
        assert_eq!(r.len(), 11_001);
    }

    #[test]
    fn merging_keeps_exact_within_the_limit_and_folds_past_it() {
        let mut a = Recorder::bounded(10);
        let mut b = Recorder::bounded(10);
        (1..=4).for_each(|v| a.record(v * NS_PER_MS));
        (5..=8).for_each(|v| b.record(v * NS_PER_MS));
        a.merge(b.clone());
        assert_eq!((a.len(), a.method()), (8, Method::Exact));
        assert_eq!(a.summary().p50, 4.5);
        a.merge(b);
        assert_eq!((a.len(), a.method()), (12, Method::Hdr));

        // Merged histograms give the figures of one recorder fed everything.
        let mut whole = Recorder::bounded(0);
        let mut parts = [Recorder::bounded(100), Recorder::bounded(0), Recorder::exact()];
        for v in 0..3000u64 {
            let x = (v * 7919 % 3001) * 1000 + 17;
            whole.record(x);
            parts[(v % 3) as usize].record(x);
        }
        let mut merged = Recorder::bounded(0);
        for p in parts {
            merged.merge(p);
        }
        let (w, m) = (whole.summary(), merged.summary());
        for (name, get) in FIGURES {
            assert!((get(&w) - get(&m)).abs() < 1e-9 * get(&w).max(1.0), "{name}: {w:?} vs {m:?}");
        }
        assert_eq!(whole.cdf_points(100), merged.cdf_points(100));
    }

    #[test]
    fn cdf_points_of_both_methods() {
        let v: Vec<Nanos> = (1..=100_000).collect();
        let c = cdf_points(&v, 100);
        assert!(c.len() < 200);
        assert_eq!(c.last().unwrap().0, 1.0);
        assert!(c.windows(2).all(|w| w[0].0 < w[1].0));

        let mut r = Recorder::bounded(0);
        v.iter().for_each(|&x| r.record(x * 1000));
        let c = r.cdf_points(100);
        assert!((100..250).contains(&c.len()), "{}", c.len());
        assert_eq!(*c.last().unwrap(), (1.0, 100.0));
        assert!(c.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1));
        // Every point lies within a thousandth of the exact CDF's value.
        for &(q, ms) in &c {
            let exact = (q * 100_000.0).round() / 1000.0;
            assert!(ms >= exact * 0.999 && ms <= exact * 1.001, "{q}: {ms} vs {exact}");
        }
    }

    #[test]
    fn json_names_the_method_only_when_not_exact() {
        let exact = serde_json::to_value(Summary::default()).unwrap();
        assert!(exact.get("method").is_none());
        let hdr = serde_json::to_value(Summary { method: Method::Hdr, ..Summary::default() }).unwrap();
        assert_eq!(hdr["method"], "hdr");
        assert_eq!(Method::Exact.combine(Method::Hdr), Method::Hdr);
        assert_eq!(Method::Exact.combine(Method::Exact), Method::Exact);
    }
}

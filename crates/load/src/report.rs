//! What a load run measured: the [`Report`] and the [`Recorder`] that
//! workers write into while it runs.
//!
//! Latencies go into `fulcrum_workload` recorders, in nanoseconds: every
//! latency is kept until the run has answered [`EXACT_LIMIT`] requests, so
//! its figures are exact (as the simulator's); past that, the recorders
//! switch to HDR histograms (three significant digits), so memory stays
//! bounded however long the run. The report's [`Summary`] says which method
//! produced it. Workers write into a few shards, each behind its own mutex,
//! so two threads rarely meet on one lock; the shards are merged when the
//! run ends, and share one limit (a count of kept samples) so that the
//! memory bound holds for the run, not per shard. A response with any status has its latency
//! recorded; a request that got no response (connect, timeout, I/O error)
//! is only counted.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use fulcrum_workload::dist::nanos;
use fulcrum_workload::{Recorder as Latencies, Summary, EXACT_LIMIT};
use serde::Serialize;

use crate::client::Answer;

/// Why a request failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The TCP connection or the HTTP handshake failed.
    Connect,
    /// No complete response within the timeout (counted from the intended
    /// send time).
    Timeout,
    /// A 4xx response.
    Status4xx,
    /// A 5xx response.
    Status5xx,
    /// The connection failed while sending or receiving.
    Io,
}

/// Failed requests by [`ErrorKind`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ErrorCounts {
    /// [`ErrorKind::Connect`].
    pub connect: u64,
    /// [`ErrorKind::Timeout`].
    pub timeout: u64,
    /// [`ErrorKind::Status4xx`].
    pub status_4xx: u64,
    /// [`ErrorKind::Status5xx`].
    pub status_5xx: u64,
    /// [`ErrorKind::Io`].
    pub io: u64,
}

impl ErrorCounts {
    fn slot(&mut self, kind: ErrorKind) -> &mut u64 {
        match kind {
            ErrorKind::Connect => &mut self.connect,
            ErrorKind::Timeout => &mut self.timeout,
            ErrorKind::Status4xx => &mut self.status_4xx,
            ErrorKind::Status5xx => &mut self.status_5xx,
            ErrorKind::Io => &mut self.io,
        }
    }

    /// All failures.
    pub fn total(&self) -> u64 {
        self.connect + self.timeout + self.status_4xx + self.status_5xx + self.io
    }

    fn named(&self) -> [(&'static str, u64); 5] {
        [
            ("connect", self.connect),
            ("timeout", self.timeout),
            ("status_4xx", self.status_4xx),
            ("status_5xx", self.status_5xx),
            ("io", self.io),
        ]
    }

    fn add(&mut self, other: &ErrorCounts) {
        for (kind, n) in [
            (ErrorKind::Connect, other.connect),
            (ErrorKind::Timeout, other.timeout),
            (ErrorKind::Status4xx, other.status_4xx),
            (ErrorKind::Status5xx, other.status_5xx),
            (ErrorKind::Io, other.io),
        ] {
            *self.slot(kind) += n;
        }
    }
}

/// The result of a load run. `--json` prints it as is.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Report {
    /// Requests finished: answered, whatever the status, or failed.
    pub requests: u64,
    /// Of those, failed: no response, or a 4xx/5xx status.
    pub errors: u64,
    /// `requests` per second of `duration_s`.
    pub rps: f64,
    /// From the first intended send to the last completion, in seconds.
    pub duration_s: f64,
    /// Latency of the answered requests, from the intended send time: the
    /// simulator's figures and names, and its method (exact up to
    /// [`EXACT_LIMIT`] answered requests).
    pub latency_ms: Summary,
    /// The 99.99th percentile: in the table, not in the JSON, whose
    /// `latency_ms` is the simulator's.
    #[serde(skip)]
    pub latency_p9999_ms: f64,
    /// `errors` by kind.
    pub errors_by_kind: ErrorCounts,
    /// Responses by the value of their `x-fulcrum-backend` header; those
    /// without it are not counted here.
    pub by_backend: BTreeMap<String, u64>,
}

impl Report {
    /// The report as one line of JSON (with a final newline).
    pub fn json(&self) -> String {
        // A struct of numbers and string-keyed maps always serialises.
        let mut s = serde_json::to_string(self).unwrap_or_default();
        s.push('\n');
        s
    }

    /// The report as a table for people.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "requests {} in {:.2} s: {:.1} req/s, {} errors",
            self.requests, self.duration_s, self.rps, self.errors
        );
        let l = &self.latency_ms;
        let columns = [
            ("min", l.min),
            ("avg", l.avg),
            ("p50", l.p50),
            ("p75", l.p75),
            ("p90", l.p90),
            ("p95", l.p95),
            ("p99", l.p99),
            ("p99.9", l.p999),
            ("p99.99", self.latency_p9999_ms),
            ("max", l.max),
            ("stddev", l.stddev),
        ];
        let _ = write!(out, "{:<13}", "latency (ms)");
        for (name, _) in columns {
            let _ = write!(out, "{name:>9}");
        }
        let _ = write!(out, "\n{:<13}", "");
        for (_, v) in columns {
            let _ = write!(out, "{v:>9.3}");
        }
        out.push('\n');
        let _ = writeln!(out, "quantiles: {}", l.method.describe());
        if self.errors > 0 {
            let kinds: Vec<String> =
                self.errors_by_kind.named().iter().filter(|(_, n)| *n > 0).map(|(k, n)| format!("{k} {n}")).collect();
            let _ = writeln!(out, "errors: {}", kinds.join(", "));
        }
        if !self.by_backend.is_empty() {
            let total: u64 = self.by_backend.values().sum();
            let _ = writeln!(out, "responses by backend (x-fulcrum-backend):");
            let width = self.by_backend.keys().map(String::len).max().unwrap_or(0).max(8);
            for (name, n) in &self.by_backend {
                let share = 100.0 * *n as f64 / total as f64;
                let _ = writeln!(out, "  {name:<width$} {n:>10} {share:>6.2} %");
            }
        }
        out
    }
}

/// Live totals, readable while the run goes on (for a progress line).
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) requests: AtomicU64,
    pub(crate) errors: AtomicU64,
}

/// Where workers record outcomes while a run goes on.
pub(crate) struct Recorder {
    shards: Vec<Mutex<Shard>>,
    counters: Arc<Counters>,
    /// Latencies kept so far by all shards; past `limit` every shard
    /// switches to its histogram.
    kept: AtomicU64,
    limit: u64,
}

struct Shard {
    latency: Latencies,
    errors: ErrorCounts,
    // Keyed by the header's bytes so that counting allocates only for a
    // backend not seen before.
    by_backend: HashMap<Vec<u8>, u64>,
}

/// Shards of the recorder: a few per thread keeps collisions rare.
const SHARDS: usize = 16;

impl Recorder {
    pub(crate) fn new(counters: Arc<Counters>) -> Recorder {
        Recorder::with_limit(counters, EXACT_LIMIT)
    }

    /// A recorder exact up to `limit` latencies in all.
    fn with_limit(counters: Arc<Counters>, limit: usize) -> Recorder {
        let shards = (0..SHARDS)
            .map(|_| {
                Mutex::new(Shard {
                    latency: Latencies::exact(),
                    errors: ErrorCounts::default(),
                    by_backend: HashMap::new(),
                })
            })
            .collect();
        Recorder { shards, counters, kept: AtomicU64::new(0), limit: limit as u64 }
    }

    fn shard(&self, worker: usize) -> MutexGuard<'_, Shard> {
        // Counts stay consistent even if a holder panicked mid-way.
        self.shards[worker % SHARDS].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Record one request sent (or meant to be sent) at `intended`.
    pub(crate) fn record(&self, worker: usize, intended: Instant, outcome: Result<Answer, ErrorKind>) {
        let latency = intended.elapsed();
        let failed = match &outcome {
            Ok((status, _)) if status.is_client_error() => Some(ErrorKind::Status4xx),
            Ok((status, _)) if status.is_server_error() => Some(ErrorKind::Status5xx),
            Ok(_) => None,
            Err(kind) => Some(*kind),
        };
        {
            let mut shard = self.shard(worker);
            if let Ok((_, backend)) = &outcome {
                if self.kept.fetch_add(1, Relaxed) >= self.limit {
                    shard.latency.switch_to_histogram();
                }
                shard.latency.record(nanos(latency));
                if let Some(name) = backend {
                    match shard.by_backend.get_mut(name.as_bytes()) {
                        Some(n) => *n += 1,
                        None => {
                            shard.by_backend.insert(name.as_bytes().to_vec(), 1);
                        }
                    }
                }
            }
            if let Some(kind) = failed {
                *shard.errors.slot(kind) += 1;
            }
        }
        self.counters.requests.fetch_add(1, Relaxed);
        if failed.is_some() {
            self.counters.errors.fetch_add(1, Relaxed);
        }
    }

    /// Merge the shards into the report of a run that lasted `elapsed`.
    pub(crate) fn report(&self, elapsed: Duration) -> Report {
        let mut latency = Latencies::bounded(self.limit as usize);
        let mut errors = ErrorCounts::default();
        let mut by_backend = BTreeMap::new();
        for i in 0..SHARDS {
            let shard = self.shard(i);
            latency.merge(shard.latency.clone());
            errors.add(&shard.errors);
            for (name, n) in &shard.by_backend {
                *by_backend.entry(String::from_utf8_lossy(name).into_owned()).or_insert(0) += n;
            }
        }
        let requests = latency.len() + errors.connect + errors.timeout + errors.io;
        let duration_s = elapsed.as_secs_f64();
        let latency_ms = latency.summary();
        let latency_p9999_ms = if latency.is_empty() { 0.0 } else { latency.quantile(0.9999) / 1e6 };
        Report {
            requests,
            errors: errors.total(),
            rps: if duration_s > 0.0 { requests as f64 / duration_s } else { 0.0 },
            duration_s,
            latency_ms,
            latency_p9999_ms,
            errors_by_kind: errors,
            by_backend,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fulcrum_workload::Method;
    use http::{HeaderValue, StatusCode};

    #[test]
    fn outcomes_are_counted_by_kind_and_backend() {
        let rec = Recorder::new(Arc::default());
        let t = Instant::now();
        let ok = |name: &'static str| Ok((StatusCode::OK, Some(HeaderValue::from_static(name))));
        rec.record(0, t, ok("a"));
        rec.record(1, t, ok("a"));
        rec.record(2, t, ok("b"));
        rec.record(3, t, Ok((StatusCode::SERVICE_UNAVAILABLE, Some(HeaderValue::from_static("b")))));
        rec.record(4, t, Ok((StatusCode::NOT_FOUND, None)));
        rec.record(5, t, Err(ErrorKind::Connect));
        rec.record(6, t, Err(ErrorKind::Timeout));
        let r = rec.report(Duration::from_secs(2));
        assert_eq!((r.requests, r.errors), (7, 4));
        assert_eq!(r.rps, 3.5);
        let expect = ErrorCounts { connect: 1, timeout: 1, status_4xx: 1, status_5xx: 1, io: 0 };
        assert_eq!(r.errors_by_kind, expect);
        assert_eq!(r.by_backend, BTreeMap::from([("a".to_string(), 2), ("b".to_string(), 2)]));
    }

    fn answer() -> Result<Answer, ErrorKind> {
        Ok((StatusCode::OK, None))
    }

    #[test]
    fn latency_figures_are_exact_up_to_the_limit_then_hdr() {
        let rec = Recorder::with_limit(Arc::default(), 50);
        let t = Instant::now();
        for i in 0..50 {
            rec.record(i, t, answer());
        }
        let r = rec.report(Duration::from_secs(1));
        assert_eq!((r.requests, r.latency_ms.method), (50, Method::Exact));
        assert!(r.latency_ms.min > 0.0 && r.latency_p9999_ms <= r.latency_ms.max, "{:?}", r.latency_ms);
        assert!(r.table().contains("quantiles: exact"), "{}", r.table());
        for i in 0..20 {
            rec.record(i, t, answer());
        }
        let r = rec.report(Duration::from_secs(1));
        assert_eq!((r.requests, r.latency_ms.method), (70, Method::Hdr));
        assert!(r.table().contains("quantiles: HDR histogram"), "{}", r.table());
        assert!(r.json().contains(r#""method":"hdr""#), "{}", r.json());
    }

    #[test]
    fn the_json_has_the_simulator_latency_keys() {
        let v: serde_json::Value = serde_json::from_str(&Report::default().json()).unwrap();
        let keys: Vec<&str> = v["latency_ms"].as_object().unwrap().keys().map(String::as_str).collect();
        let mut expected = ["min", "avg", "p50", "p75", "p90", "p95", "p99", "p999", "max", "stddev"];
        expected.sort();
        let mut keys = keys;
        keys.sort();
        assert_eq!(keys, expected);
        for k in ["requests", "errors", "rps", "errors_by_kind", "by_backend"] {
            assert!(v.get(k).is_some(), "{k}");
        }
    }
}

//! Counters shared by all workers and rendered by the admin listener.
//!
//! Each endpoint has one [`EndpointStats`] of atomics, shared by every
//! worker (relaxed increments, no lock on the request path). Responses the
//! proxy makes itself (400, 404, 413, 431, 502, 503, 504) are counted in
//! [`ProxyStats`], including the 400s and 431s that hyper's parser sends
//! for malformed or oversized request heads ([`ProxyStats::count_connection_error`]). Latency estimates are not here: they live in each
//! worker's balancer and the admin listener asks for them.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::OnceLock;
use std::time::Duration;

use fulcrum_base::loghist::AtomicLogHistogram;

/// Upper bounds of the latency histogram buckets, in seconds (Prometheus
/// convention: cumulative, plus `+Inf`).
pub const LATENCY_BUCKETS: [f64; 14] =
    [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

/// What one endpoint has seen, across workers.
#[derive(Debug, Default)]
pub struct EndpointStats {
    /// Requests (or TCP connections) sent to it.
    pub requests: AtomicU64,
    /// Requests that failed: connect errors, timeouts, resets, 5xx.
    pub errors: AtomicU64,
    /// Requests picked and not yet finished.
    pub in_flight: AtomicU64,
    /// Latency histogram counts, one per bucket plus `+Inf`.
    buckets: [AtomicU64; LATENCY_BUCKETS.len() + 1],
    /// Successful requests' latencies by how many requests were in flight
    /// to the endpoint when each was picked (where queueing shows). Each
    /// success is counted there only: the endpoint's sum and fine
    /// histogram are derived from it when read.
    pub by_in_flight: InFlightStats,
    /// The rest (failures, and requests never sent at 0): their latency
    /// sum in nanoseconds, and 5 %-wide buckets allocated on first use.
    others_sum_ns: AtomicU64,
    others_fine: OnceLock<AtomicLogHistogram>,
}

impl EndpointStats {
    /// Count a request as started; returns the requests in flight before it.
    pub fn start(&self) -> u64 {
        self.requests.fetch_add(1, Relaxed);
        self.in_flight.fetch_add(1, Relaxed)
    }

    /// Count a request as finished after `latency` (to response headers);
    /// `before` is what [`EndpointStats::start`] returned (`None`: the
    /// request was never sent).
    pub fn finish(&self, latency: Duration, success: bool, before: Option<u64>) {
        self.in_flight.fetch_sub(1, Relaxed);
        let ns = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        match before {
            Some(before) if success => self.by_in_flight.record(before, ns),
            _ => {
                if !success {
                    self.errors.fetch_add(1, Relaxed);
                }
                self.others_sum_ns.fetch_add(ns, Relaxed);
                self.others_fine.get_or_init(Default::default).record(ns);
            }
        }
        let secs = latency.as_secs_f64();
        let bucket = LATENCY_BUCKETS.iter().position(|&b| secs <= b).unwrap_or(LATENCY_BUCKETS.len());
        self.buckets[bucket].fetch_add(1, Relaxed);
    }

    /// Every latency in 5 %-wide buckets: `(bucket, count)` of each bucket
    /// counted (the in-flight bands and the rest, summed).
    pub fn latency_fine(&self) -> Vec<(usize, u64)> {
        let mut counts = vec![0u64; fulcrum_base::loghist::BUCKETS];
        for h in self.by_in_flight.bands().map(|(_, h)| h).chain(self.others_fine.get()) {
            for (i, n) in h.nonzero() {
                counts[i] += n;
            }
        }
        counts.into_iter().enumerate().filter(|&(_, n)| n > 0).collect()
    }

    /// Cumulative bucket counts (`le` each bound, then `+Inf`), and the sum in seconds.
    pub fn histogram(&self) -> (Vec<u64>, f64) {
        let mut total = 0;
        let cumulative = self
            .buckets
            .iter()
            .map(|b| {
                total += b.load(Relaxed);
                total
            })
            .collect();
        let sum_ns = self.by_in_flight.sum_ns().wrapping_add(self.others_sum_ns.load(Relaxed));
        (cumulative, sum_ns as f64 / 1e9)
    }
}

/// In-flight levels counted apart: a request picked with more already in
/// flight counts in the last level.
pub const IN_FLIGHT_LEVELS: usize = 64;
/// Bands of in-flight levels with a fine latency histogram each: 0, 1,
/// 2–3, 4–7, …, 32–63, and 64 or more.
pub const IN_FLIGHT_BANDS: usize = 8;

/// Latencies by the requests in flight to the endpoint when each was
/// picked: per level, the requests, the latency sum (ns) and sum of squares
/// (µs²), wrapping (read as differences between two snapshots); per band of
/// levels, a fine histogram, allocated on first use.
#[derive(Debug)]
pub struct InFlightStats {
    levels: Box<[[AtomicU64; 3]]>,
    bands: [OnceLock<AtomicLogHistogram>; IN_FLIGHT_BANDS],
}

impl Default for InFlightStats {
    fn default() -> Self {
        InFlightStats { levels: (0..IN_FLIGHT_LEVELS).map(|_| Default::default()).collect(), bands: Default::default() }
    }
}

impl InFlightStats {
    /// The band of level `before`.
    pub fn band_of(before: u64) -> usize {
        ((u64::BITS - before.leading_zeros()) as usize).min(IN_FLIGHT_BANDS - 1)
    }

    /// The lowest level of band `b`.
    pub fn band_start(b: usize) -> u64 {
        if b == 0 {
            0
        } else {
            1 << (b - 1)
        }
    }

    fn record(&self, before: u64, ns: u64) {
        let us = ns / 1000;
        let level = &self.levels[(before as usize).min(IN_FLIGHT_LEVELS - 1)];
        level[0].fetch_add(1, Relaxed);
        level[1].fetch_add(ns, Relaxed);
        level[2].fetch_add(us.saturating_mul(us), Relaxed);
        self.bands[Self::band_of(before)].get_or_init(Default::default).record(ns);
    }

    /// `[level, requests, latency sum ns, sum of squares µs²]` of each level counted.
    pub fn levels(&self) -> Vec<[u64; 4]> {
        let load = |a: &AtomicU64| a.load(Relaxed);
        (0..IN_FLIGHT_LEVELS as u64)
            .zip(self.levels.iter())
            .map(|(i, [n, sum, sq])| [i, load(n), load(sum), load(sq)])
            .filter(|l| l[1] > 0)
            .collect()
    }

    /// The latency sum of every level, in nanoseconds (wrapping).
    pub fn sum_ns(&self) -> u64 {
        self.levels.iter().fold(0u64, |sum, l| sum.wrapping_add(l[1].load(Relaxed)))
    }

    /// `(lowest level, histogram)` of each band counted.
    pub fn bands(&self) -> impl Iterator<Item = (u64, &AtomicLogHistogram)> {
        self.bands.iter().enumerate().filter_map(|(b, h)| h.get().map(|h| (Self::band_start(b), h)))
    }
}

/// Responses the proxy generated itself, by status (each
/// [`LocalReply`](crate::local_reply::LocalReply) counts in the counter of
/// its status).
#[derive(Debug, Default)]
pub struct ProxyStats {
    /// 400: a malformed request head (answered by hyper's parser), or
    /// headers or a target the proxy cannot forward.
    pub bad_request: AtomicU64,
    /// 404: no route.
    pub no_route: AtomicU64,
    /// 502: upstream connect failure or reset.
    pub bad_gateway: AtomicU64,
    /// 503: no endpoint available, or the cluster's `max_requests` or
    /// `max_connections` reached.
    pub unavailable: AtomicU64,
    /// 504: no response headers within the request timeout.
    pub gateway_timeout: AtomicU64,
    /// 429: a route's rate limit.
    pub rate_limited: AtomicU64,
    /// 413: request body over `max_body_bytes`.
    pub payload_too_large: AtomicU64,
    /// 431: request head over `max_header_bytes` or `limits.max_headers`
    /// (answered by hyper's parser).
    pub header_too_large: AtomicU64,
    /// Redirects and direct responses of routes (not in `local_responses`).
    pub route_responses: AtomicU64,
    /// Downstream connections accepted.
    pub connections: AtomicU64,
    /// Connections closed on accept because `max_connections` were open.
    pub rejected_connections: AtomicU64,
    /// Accepts that failed for want of file descriptors or memory (EMFILE,
    /// ENFILE, ENOBUFS, ENOMEM); each pauses that accept loop briefly.
    pub accept_errors: AtomicU64,
    /// Client connections open on each worker.
    pub worker_connections: Box<[AtomicU64]>,
    /// Idle HTTP/1.1 connections parked (held without a task).
    pub parked_connections: AtomicU64,
    /// Access log records dropped because a log's queue was full.
    pub access_log_dropped: AtomicU64,
    /// Connections refused by a listener's `proxy_protocol` rule, by
    /// [`PROXY_REFUSALS`] reason.
    pub proxy_protocol_refused: [AtomicU64; PROXY_REFUSALS.len()],
    /// TLS passthrough connections closed unrouted, by [`PASSTHROUGH_REFUSALS`] reason.
    pub passthrough_refused: [AtomicU64; PASSTHROUGH_REFUSALS.len()],
}

/// The `reason` labels of `fulcrum_proxy_protocol_refused_total`.
pub const PROXY_REFUSALS: [&str; 5] = ["untrusted", "missing", "malformed", "timeout", "closed"];
/// The `reason` labels of `fulcrum_tls_passthrough_refused_total`: no
/// ClientHello (not TLS, malformed, too long, too slow, closed), or no
/// cluster for its server name.
pub const PASSTHROUGH_REFUSALS: [&str; 2] = ["no-client-hello", "no-route"];

impl ProxyStats {
    /// Counters for a proxy of `workers` workers.
    pub fn with_workers(workers: usize) -> Self {
        ProxyStats { worker_connections: (0..workers).map(|_| AtomicU64::new(0)).collect(), ..Default::default() }
    }

    /// `(status, count)` pairs for rendering.
    pub fn local_responses(&self) -> [(u16, u64); 8] {
        [
            (400, self.bad_request.load(Relaxed)),
            (404, self.no_route.load(Relaxed)),
            (413, self.payload_too_large.load(Relaxed)),
            (429, self.rate_limited.load(Relaxed)),
            (431, self.header_too_large.load(Relaxed)),
            (502, self.bad_gateway.load(Relaxed)),
            (503, self.unavailable.load(Relaxed)),
            (504, self.gateway_timeout.load(Relaxed)),
        ]
    }

    /// Count the answer hyper's HTTP/1 server sent before ending a
    /// connection with `err`: a request head it could not parse gets a 400,
    /// one over the size or header-count limit a 431 (hyper's rules, in its
    /// `on_error`). A URI over 64 KiB gets a 414 that counts as 431 here;
    /// only a `max_header_bytes` above 64 KiB lets such a head through.
    /// Other errors (resets, timeouts, an HTTP/2 preface) got no answer.
    pub fn count_connection_error(&self, err: &(dyn std::error::Error + 'static)) {
        let Some(err) = err.downcast_ref::<hyper::Error>() else { return };
        if err.is_parse_too_large() {
            self.header_too_large.fetch_add(1, Relaxed);
        } else if err.is_parse() && !err.is_parse_version_h2() && !err.is_parse_status() {
            self.bad_request.fetch_add(1, Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_is_cumulative() {
        let s = EndpointStats::default();
        s.start();
        s.finish(Duration::from_millis(3), true, Some(0));
        s.start();
        s.finish(Duration::from_secs(20), false, Some(1));
        let (h, sum) = s.histogram();
        assert_eq!(h[2], 0, "≤ 2.5 ms");
        assert_eq!(h[3], 1, "≤ 5 ms");
        assert_eq!(*h.last().unwrap(), 2);
        assert!((sum - 20.003).abs() < 1e-9);
        assert_eq!(s.errors.load(Relaxed), 1);
        assert_eq!(s.in_flight.load(Relaxed), 0);
        assert_eq!(s.by_in_flight.levels(), vec![[0, 1, 3_000_000, 9_000_000]], "successes only");
    }

    #[test]
    fn latencies_by_in_flight_level_and_band() {
        let s = EndpointStats::default();
        for before in [0, 1, 2, 3, 7, 8, 63, 64, 1000] {
            s.finish(Duration::from_micros(before + 10), true, Some(before));
        }
        s.finish(Duration::ZERO, true, None);
        let levels = s.by_in_flight.levels();
        assert_eq!(levels.len(), 7, "63, 64 and 1000 share the last level: {levels:?}");
        assert_eq!(levels[6], [63, 3, 73_000 + 74_000 + 1_010_000, 73 * 73 + 74 * 74 + 1010 * 1010]);
        let bands: Vec<(u64, u64)> =
            s.by_in_flight.bands().map(|(lo, h)| (lo, h.nonzero().iter().map(|b| b.1).sum())).collect();
        assert_eq!(bands, [(0, 1), (1, 1), (2, 2), (4, 1), (8, 1), (32, 1), (64, 2)]);
    }

    #[test]
    fn the_endpoint_histogram_is_every_band_and_the_rest() {
        let s = EndpointStats::default();
        let mut all = Vec::new();
        for (i, before) in [0u64, 0, 1, 5, 5, 40, 200].into_iter().enumerate() {
            let latency = Duration::from_micros(20 + 37 * i as u64);
            s.finish(latency, i != 3, Some(before));
            all.push(latency.as_nanos() as u64);
        }
        s.finish(Duration::ZERO, true, None);
        all.push(0);
        let expected = fulcrum_base::loghist::AtomicLogHistogram::default();
        all.iter().for_each(|&ns| expected.record(ns));
        assert_eq!(s.latency_fine(), expected.nonzero(), "successes by band, a failure and a request never sent");
        let (h, sum) = s.histogram();
        assert_eq!(*h.last().unwrap(), all.len() as u64);
        assert!((sum - all.iter().sum::<u64>() as f64 / 1e9).abs() < 1e-12, "{sum}");
    }
}

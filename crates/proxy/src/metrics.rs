//! Counters shared by all workers and rendered by the admin listener.
//!
//! Each endpoint has one [`EndpointStats`] of atomics, shared by every
//! worker (relaxed increments, no lock on the request path). Responses the
//! proxy makes itself (400, 404, 413, 431, 502, 503, 504) are counted in
//! [`ProxyStats`], including the 400s and 431s that hyper's parser sends
//! for malformed or oversized request heads ([`ProxyStats::count_connection_error`]). Latency estimates are not here: they live in each
//! worker's balancer and the admin listener asks for them.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

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
    /// Sum of latencies in nanoseconds.
    latency_sum_ns: AtomicU64,
    /// The same latencies in 5 %-wide buckets, for `/clusters/NAME/model`.
    pub latency_fine: fulcrum_base::loghist::AtomicLogHistogram,
}

impl EndpointStats {
    /// Count a request as started.
    pub fn start(&self) {
        self.requests.fetch_add(1, Relaxed);
        self.in_flight.fetch_add(1, Relaxed);
    }

    /// Count a request as finished after `latency` (to response headers).
    pub fn finish(&self, latency: Duration, success: bool) {
        self.in_flight.fetch_sub(1, Relaxed);
        if !success {
            self.errors.fetch_add(1, Relaxed);
        }
        let secs = latency.as_secs_f64();
        let bucket = LATENCY_BUCKETS.iter().position(|&b| secs <= b).unwrap_or(LATENCY_BUCKETS.len());
        self.buckets[bucket].fetch_add(1, Relaxed);
        let ns = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        self.latency_sum_ns.fetch_add(ns, Relaxed);
        self.latency_fine.record(ns);
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
        (cumulative, self.latency_sum_ns.load(Relaxed) as f64 / 1e9)
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
        s.finish(Duration::from_millis(3), true);
        s.start();
        s.finish(Duration::from_secs(20), false);
        let (h, sum) = s.histogram();
        assert_eq!(h[2], 0, "≤ 2.5 ms");
        assert_eq!(h[3], 1, "≤ 5 ms");
        assert_eq!(*h.last().unwrap(), 2);
        assert!((sum - 20.003).abs() < 1e-9);
        assert_eq!(s.errors.load(Relaxed), 1);
        assert_eq!(s.in_flight.load(Relaxed), 0);
    }
}

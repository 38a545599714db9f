//! The admin listener: `/metrics` (Prometheus text format), `/status`
//! (JSON), `/healthz`, and the runtime API under `/clusters`
//! ([`crate::runtime`]).
//!
//! Counters come from the shared [`EndpointStats`](crate::metrics::EndpointStats);
//! active counts and latency estimates are read from every worker's balancer,
//! labelled by worker, because each worker balances on its own view.

use std::convert::Infallible;
use std::fmt::Write;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use bytes::Bytes;
use http::{header, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use serde_json::json;

use crate::clock::Epoch;
use crate::cluster::SharedCluster;
use crate::metrics::{ProxyStats, LATENCY_BUCKETS, PASSTHROUGH_REFUSALS, PROXY_REFUSALS};

/// A per-cluster metric: name, help text, and how to read it.
type ClusterCounter = (&'static str, &'static str, fn(&SharedCluster) -> u64);

/// What the admin listener reports on.
pub struct Admin {
    /// The clusters in force (a reload replaces them).
    pub clusters: tokio::sync::watch::Receiver<Vec<Arc<SharedCluster>>>,
    /// Proxy-made responses and connections.
    pub stats: Arc<ProxyStats>,
    /// Time origin of the balancers.
    pub epoch: Epoch,
}

fn text(status: StatusCode, content_type: &'static str, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static(content_type));
    r
}

impl Admin {
    /// Answer one admin request.
    pub async fn handle(&self, req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
        let path = req.uri().path();
        if let Some(name) = path.strip_prefix("/clusters/").and_then(|p| p.strip_suffix("/model")) {
            if req.method() == http::Method::GET {
                return Ok(self.model(name));
            }
        }
        if path == "/clusters" || path.starts_with("/clusters/") {
            let clusters = self.clusters.borrow().clone();
            return Ok(crate::runtime::handle(&clusters, || self.epoch.now(), req).await);
        }
        Ok(match path {
            "/metrics" => text(StatusCode::OK, "text/plain; version=0.0.4", self.metrics()),
            "/status" => text(StatusCode::OK, "application/json", self.status()),
            "/healthz" => text(StatusCode::OK, "text/plain", "ok\n".into()),
            _ => text(StatusCode::NOT_FOUND, "text/plain", "try /metrics, /status, /healthz or /clusters\n".into()),
        })
    }

    /// Prometheus text exposition of every counter.
    pub fn metrics(&self) -> String {
        let mut out = String::new();
        let now = self.epoch.now();
        let clusters = self.clusters.borrow().clone();
        let family = |out: &mut String, name: &str, kind: &str, help: &str| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        };
        family(
            &mut out,
            "fulcrum_upstream_requests_total",
            "counter",
            "Requests (TCP: connections) sent to an endpoint.",
        );
        for c in &clusters {
            for (labels, u) in endpoints(c) {
                let _ = writeln!(out, "fulcrum_upstream_requests_total{{{labels}}} {}", u.stats.requests.load(Relaxed));
            }
        }
        family(
            &mut out,
            "fulcrum_upstream_errors_total",
            "counter",
            "Failed requests: connect errors, timeouts, resets, 5xx, failing grpc-status.",
        );
        for c in &clusters {
            for (labels, u) in endpoints(c) {
                let _ = writeln!(out, "fulcrum_upstream_errors_total{{{labels}}} {}", u.stats.errors.load(Relaxed));
            }
        }
        family(&mut out, "fulcrum_upstream_in_flight", "gauge", "Requests sent and not yet finished, all workers.");
        for c in &clusters {
            for (labels, u) in endpoints(c) {
                let _ = writeln!(out, "fulcrum_upstream_in_flight{{{labels}}} {}", u.stats.in_flight.load(Relaxed));
            }
        }
        family(&mut out, "fulcrum_upstream_latency_seconds", "histogram", "Time to response headers.");
        for c in &clusters {
            for (labels, u) in endpoints(c) {
                let (counts, sum) = u.stats.histogram();
                for (bound, count) in LATENCY_BUCKETS.iter().zip(&counts) {
                    let _ = writeln!(out, "fulcrum_upstream_latency_seconds_bucket{{{labels},le=\"{bound}\"}} {count}");
                }
                let total = counts.last().copied().unwrap_or(0);
                let _ = writeln!(out, "fulcrum_upstream_latency_seconds_bucket{{{labels},le=\"+Inf\"}} {total}");
                let _ = writeln!(out, "fulcrum_upstream_latency_seconds_sum{{{labels}}} {sum}");
                let _ = writeln!(out, "fulcrum_upstream_latency_seconds_count{{{labels}}} {total}");
            }
        }
        family(&mut out, "fulcrum_balancer_active", "gauge", "Active requests as one worker's balancer counts them.");
        family(
            &mut out,
            "fulcrum_balancer_latency_estimate_seconds",
            "gauge",
            "One worker's latency estimate (Peak-EWMA).",
        );
        for c in &clusters {
            let resolved = c.current();
            for (worker, loads) in c.worker_loads(now).iter().enumerate() {
                for load in loads {
                    let Some(e) = resolved.all.iter().find(|e| e.id == load.id) else { continue };
                    let labels = format!("cluster=\"{}\",endpoint=\"{}\",worker=\"{worker}\"", c.config.name, e.name);
                    let _ = writeln!(out, "fulcrum_balancer_active{{{labels}}} {}", load.active);
                    if let Some(est) = load.latency_estimate {
                        let _ = writeln!(out, "fulcrum_balancer_latency_estimate_seconds{{{labels}}} {}", est / 1e9);
                    }
                }
            }
        }
        family(&mut out, "fulcrum_upstream_healthy", "gauge", "1 if active health checks pass (or none run), else 0.");
        for c in &clusters {
            for (labels, id) in endpoint_ids(c) {
                let _ = writeln!(out, "fulcrum_upstream_healthy{{{labels}}} {}", u8::from(c.health_of(id).1));
            }
        }
        family(&mut out, "fulcrum_upstream_ejected", "gauge", "1 while outlier detection has the endpoint ejected.");
        for c in &clusters {
            for (labels, id) in endpoint_ids(c) {
                let _ = writeln!(out, "fulcrum_upstream_ejected{{{labels}}} {}", u8::from(c.health_of(id).0));
            }
        }
        let cluster_counters: [ClusterCounter; 7] = [
            ("fulcrum_cluster_ejections_total", "Outlier ejections.", |c| c.counters.ejections.load(Relaxed)),
            ("fulcrum_cluster_retries_total", "Retries made.", |c| c.counters.retries.load(Relaxed)),
            ("fulcrum_cluster_retries_denied_total", "Retries the budget refused.", |c| {
                c.counters.retries_denied.load(Relaxed)
            }),
            (
                "fulcrum_cluster_overflow_total",
                "Requests refused by max_requests, max_connections or max_pending (503).",
                |c| c.counters.overflows.load(Relaxed),
            ),
            ("fulcrum_cluster_upstream_connections", "Upstream connections open, all workers.", |c| {
                c.connections.open(c.config.max_connections) as u64
            }),
            ("fulcrum_cluster_request_limit", "Requests in flight allowed now (slow start ramps it).", |c| {
                c.request_limit.load(Relaxed)
            }),
            ("fulcrum_cluster_panic", "1 while too few endpoints are healthy and all are used.", |c| {
                u64::from(c.panic.load(Relaxed))
            }),
        ];
        for (name, help, read) in cluster_counters {
            let kind = if name.ends_with("_total") { "counter" } else { "gauge" };
            family(&mut out, name, kind, help);
            for c in &clusters {
                let _ = writeln!(out, "{name}{{cluster=\"{}\"}} {}", c.config.name, read(c));
            }
        }
        let name = "fulcrum_cluster_upstream_tls_errors_total";
        family(&mut out, name, "counter", "Failed TLS handshakes with endpoints, by reason.");
        for c in clusters.iter().filter(|c| c.tls.is_some()) {
            for reason in crate::upstream_tls::TlsFailure::ALL {
                let n = c.counters.tls_errors.get(reason);
                let _ = writeln!(out, "{name}{{cluster=\"{}\",reason=\"{}\"}} {n}", c.config.name, reason.label());
            }
        }
        family(&mut out, "fulcrum_local_responses_total", "counter", "Responses the proxy made itself, by status.");
        for (code, n) in self.stats.local_responses() {
            let _ = writeln!(out, "fulcrum_local_responses_total{{code=\"{code}\"}} {n}");
        }
        family(&mut out, "fulcrum_route_responses_total", "counter", "Redirects and direct responses of routes.");
        let _ = writeln!(out, "fulcrum_route_responses_total {}", self.stats.route_responses.load(Relaxed));
        family(&mut out, "fulcrum_downstream_connections_total", "counter", "Client connections accepted.");
        let _ = writeln!(out, "fulcrum_downstream_connections_total {}", self.stats.connections.load(Relaxed));
        family(&mut out, "fulcrum_downstream_rejected_total", "counter", "Connections closed over max_connections.");
        let _ = writeln!(out, "fulcrum_downstream_rejected_total {}", self.stats.rejected_connections.load(Relaxed));
        family(&mut out, "fulcrum_downstream_accept_errors_total", "counter", "Accepts failed: out of fds or memory.");
        let _ = writeln!(out, "fulcrum_downstream_accept_errors_total {}", self.stats.accept_errors.load(Relaxed));
        family(&mut out, "fulcrum_parked_connections", "gauge", "Idle HTTP/1.1 connections parked.");
        let _ = writeln!(out, "fulcrum_parked_connections {}", self.stats.parked_connections.load(Relaxed));
        family(&mut out, "fulcrum_worker_connections", "gauge", "Client connections open, by worker.");
        for (w, open) in self.stats.worker_connections.iter().enumerate() {
            let _ = writeln!(out, "fulcrum_worker_connections{{worker=\"{w}\"}} {}", open.load(Relaxed));
        }
        family(&mut out, "fulcrum_access_log_dropped_total", "counter", "Access log lines dropped: queue full.");
        let _ = writeln!(out, "fulcrum_access_log_dropped_total {}", self.stats.access_log_dropped.load(Relaxed));
        family(&mut out, "fulcrum_proxy_protocol_refused_total", "counter", "Connections refused: PROXY protocol.");
        for (reason, n) in PROXY_REFUSALS.iter().zip(&self.stats.proxy_protocol_refused) {
            let _ = writeln!(out, "fulcrum_proxy_protocol_refused_total{{reason=\"{reason}\"}} {}", n.load(Relaxed));
        }
        family(&mut out, "fulcrum_tls_passthrough_refused_total", "counter", "Passthrough connections not routed.");
        for (reason, n) in PASSTHROUGH_REFUSALS.iter().zip(&self.stats.passthrough_refused) {
            let _ = writeln!(out, "fulcrum_tls_passthrough_refused_total{{reason=\"{reason}\"}} {}", n.load(Relaxed));
        }
        out
    }

    /// `GET /clusters/NAME/model` ([`crate::model`]).
    fn model(&self, name: &str) -> Response<Full<Bytes>> {
        let clusters = self.clusters.borrow().clone();
        let Some(c) = clusters.iter().find(|c| c.config.name == name) else {
            let body = json!({ "error": format!("no cluster named {name:?}") }).to_string();
            return text(StatusCode::NOT_FOUND, "application/json", body + "\n");
        };
        let body = serde_json::to_string(&crate::model::model_json(c, self.epoch.now()))
            .unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
        text(StatusCode::OK, "application/json", body + "\n")
    }

    /// The clusters, endpoints and their counters as JSON.
    pub fn status(&self) -> String {
        let now = self.epoch.now();
        let clusters: Vec<_> = self.clusters.borrow().iter().map(|c| crate::runtime::cluster_json(c, now)).collect();
        let local: serde_json::Map<String, serde_json::Value> =
            self.stats.local_responses().iter().map(|(code, n)| (code.to_string(), json!(n))).collect();
        let mut s = serde_json::to_string_pretty(&json!({ "clusters": clusters, "local_responses": local }))
            .unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
        s.push('\n');
        s
    }
}

/// `(labels, id)` for every known endpoint of `c`.
fn endpoint_ids(c: &SharedCluster) -> Vec<(String, fulcrum_balance::EndpointId)> {
    c.current().all.iter().map(|e| (format!("cluster=\"{}\",endpoint=\"{}\"", c.config.name, e.name), e.id)).collect()
}

/// `(labels, upstream)` for every known endpoint of `c`.
fn endpoints(c: &SharedCluster) -> Vec<(String, crate::cluster::Upstream)> {
    let resolved = c.current();
    resolved
        .all
        .iter()
        .filter_map(|e| {
            let u = resolved.upstream(e.id)?.clone();
            Some((format!("cluster=\"{}\",endpoint=\"{}\"", c.config.name, e.name), u))
        })
        .collect()
}

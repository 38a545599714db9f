//! `GET /clusters/NAME/model`: what a simulator needs to model a cluster
//! (`fulcrum sim --from`): the cluster's state as `/clusters/NAME` gives
//! it, its resilience settings (in the configuration file's form), each endpoint's latency in 5 %-wide
//! buckets ([`fulcrum_base::loghist`]), the same by requests in flight when
//! each was picked ([`crate::metrics::InFlightStats`]), and the time of the snapshot, so
//! that two snapshots give rates and distributions over the window
//! between them.

use std::sync::atomic::Ordering::Relaxed;

use serde_json::{json, Value};

use crate::cluster::SharedCluster;

/// The model snapshot of `c` at `now` (the balancers' clock, nanoseconds).
pub fn model_json(c: &SharedCluster, now: fulcrum_balance::Nanos) -> Value {
    let mut v = crate::runtime::cluster_json(c, now);
    let resolved = c.current();
    if let Some(endpoints) = v.get_mut("endpoints").and_then(Value::as_array_mut) {
        for (e, out) in resolved.all.iter().zip(endpoints.iter_mut()) {
            let stats = resolved.upstream(e.id).map(|u| u.stats.clone());
            let buckets = |counts: Vec<(usize, u64)>| -> Vec<[u64; 3]> {
                counts
                    .into_iter()
                    .map(|(i, n)| {
                        let (lo, hi) = fulcrum_base::loghist::bucket_bounds(i);
                        [lo, hi, n]
                    })
                    .collect()
            };
            out["latency_buckets"] = json!(stats.as_ref().map(|s| buckets(s.latency_fine())).unwrap_or_default());
            out["by_in_flight"] = json!(stats.as_ref().map(|s| s.by_in_flight.levels()).unwrap_or_default());
            let bands: Vec<Value> = stats
                .as_ref()
                .map(|s| s.by_in_flight.bands().map(|(lo, h)| json!([lo, buckets(h.nonzero())])).collect())
                .unwrap_or_default();
            out["latency_buckets_by_in_flight"] = json!(bands);
        }
    }
    let cfg = &c.config;
    v["time_ns"] = json!(now);
    v["resilience"] = json!({
        "request_timeout_ms": cfg.request_timeout.as_secs_f64() * 1e3,
        "retries": cfg.retries,
        "outlier_detection": cfg.outlier_detection,
        "slow_start": cfg.slow_start,
        "max_requests": cfg.max_requests,
    });
    v["overflows"] = json!(c.counters.overflows.load(Relaxed));
    v
}

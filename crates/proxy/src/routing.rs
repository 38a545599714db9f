//! What a worker routes requests with, replaced whole on reload: the server
//! builds it, the request path ([`http`](crate::http)) reads it.

use std::sync::{Arc, Mutex};

use fulcrum_resilience::RateLimiter;

use crate::cluster::WorkerCluster;
use crate::config::{Config, Listener};
use crate::upstream::UpstreamPool;

/// The rate limiter of each route that has one, by listener then route:
/// shared by every worker, so that a limit holds for the whole proxy.
pub type RouteLimits = Vec<Vec<Option<Arc<Mutex<RateLimiter>>>>>;

/// The limiters of `config`'s routes: on a reload (`previous`), a route at
/// the same place with the same limit keeps its buckets; others start full.
pub fn route_limits(config: &Config, previous: Option<&Routing>) -> Arc<RouteLimits> {
    let limiter = |li: usize, ri: usize, l: &fulcrum_resilience::RateLimitConfig| {
        let same = previous.and_then(|p| {
            let before = p.listeners.get(li)?.routes.routes().get(ri)?.rate_limit.as_ref()?;
            (before == l).then(|| p.limits[li][ri].clone())?
        });
        same.unwrap_or_else(|| {
            let limiter = RateLimiter::new(l).unwrap_or_else(|e| unreachable!("validated rate limit rejected: {e}"));
            Arc::new(Mutex::new(limiter))
        })
    };
    let limits = config.listeners.iter().enumerate().map(|(li, l)| {
        l.routes.routes().iter().enumerate().map(|(ri, r)| r.rate_limit.as_ref().map(|c| limiter(li, ri, c))).collect()
    });
    Arc::new(limits.collect())
}

/// What a worker routes with: listeners' routes, its clusters and their
/// connection pools. Replaced whole on reload.
pub struct Routing {
    /// The listeners, in configuration order.
    pub listeners: Vec<Listener>,
    /// This worker's clusters, in configuration order.
    pub clusters: Vec<Arc<WorkerCluster>>,
    /// This worker's upstream connection pools, indexed like `clusters`.
    pub pools: Vec<Arc<UpstreamPool>>,
    /// The routes' rate limiters, shared by the workers.
    pub limits: Arc<RouteLimits>,
}

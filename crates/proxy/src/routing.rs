//! What a worker routes requests with, replaced whole on reload: the server
//! builds it, the request path ([`http`](crate::http)) reads it.

use std::sync::Arc;

use crate::cluster::WorkerCluster;
use crate::config::Listener;
use crate::upstream::UpstreamPool;

/// What a worker routes with: listeners' routes, its clusters and their
/// connection pools. Replaced whole on reload.
pub struct Routing {
    /// The listeners, in configuration order.
    pub listeners: Vec<Listener>,
    /// This worker's clusters, in configuration order.
    pub clusters: Vec<Arc<WorkerCluster>>,
    /// This worker's upstream connection pools, indexed like `clusters`.
    pub pools: Vec<Arc<UpstreamPool>>,
}

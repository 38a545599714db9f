//! Clusters at run time: resolved endpoints, shared counters, and each
//! worker's own balancer.
//!
//! [`SharedCluster`] is one per configured cluster: it owns the endpoint
//! registry (a stable [`EndpointId`] and [`EndpointStats`] per address) and
//! publishes the resolved endpoint set on a `watch` channel. Every worker
//! holds a [`WorkerCluster`] with its own balancer, built from the same
//! configuration with its own seed, and applies each new endpoint set to it,
//! so that the balancer keeps the state of endpoints that remain.
//!
//! Why per worker: a balancer behind one lock would serialise every pick of
//! every core. Per-worker balancers are what Envoy and nginx do; the price is
//! that least request counts only the requests of its own worker, and
//! Peak-EWMA learns latency only from its own worker's responses, so with W
//! workers each sees about 1/W of the traffic. The per-worker lock is never
//! contended on the request path (only the admin listener also takes it).

use std::collections::HashMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use fulcrum_balance::{build, Balancer, Endpoint, EndpointId, EndpointLoad, Nanos};
use tokio::sync::watch;

use crate::config::Cluster;
use crate::metrics::EndpointStats;

/// One upstream address with its counters.
#[derive(Debug, Clone)]
pub struct Upstream {
    /// Where to connect.
    pub addr: SocketAddr,
    /// Shared counters.
    pub stats: Arc<EndpointStats>,
}

/// A resolved endpoint set: the balancer's view plus where each id connects.
#[derive(Debug, Default)]
pub struct Resolved {
    /// Endpoints for the balancer, named `ip:port`.
    pub endpoints: Vec<Endpoint>,
    /// Upstream of each endpoint id (ids are small and dense).
    upstreams: Vec<Option<Upstream>>,
}

impl Resolved {
    /// The upstream behind `id`, if it is in this set.
    pub fn upstream(&self, id: EndpointId) -> Option<&Upstream> {
        self.upstreams.get(id.0 as usize).and_then(Option::as_ref)
    }
}

/// Stable ids and counters per address, for the life of the process.
#[derive(Debug, Default)]
struct Registry {
    by_addr: HashMap<SocketAddr, (EndpointId, Arc<EndpointStats>)>,
}

/// One worker's balancer for a cluster, shared with the admin listener.
type SharedBalancer = Arc<Mutex<Box<dyn Balancer>>>;

/// A cluster as all workers share it.
#[derive(Debug)]
pub struct SharedCluster {
    /// Its configuration.
    pub config: Cluster,
    registry: Mutex<Registry>,
    current: watch::Sender<Arc<Resolved>>,
    /// Each worker's balancer, for the admin listener.
    balancers: Mutex<Vec<SharedBalancer>>,
}

/// Lock a mutex even if a holder panicked: the guarded state stays usable
/// (a balancer's counters at worst drift), and the proxy keeps serving.
pub fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl SharedCluster {
    /// A cluster with its endpoints resolved once, now (blocking DNS).
    /// Names that do not resolve are reported and retried by [`SharedCluster::resolve`].
    pub fn new(config: Cluster) -> Arc<SharedCluster> {
        let (current, _) = watch::channel(Arc::new(Resolved::default()));
        let shared = Arc::new(SharedCluster {
            config,
            registry: Mutex::new(Registry::default()),
            current,
            balancers: Mutex::new(Vec::new()),
        });
        let addrs = shared
            .config
            .endpoints
            .iter()
            .map(|e| {
                let found = e.address.to_socket_addrs().map(|a| a.collect::<Vec<_>>()).unwrap_or_else(|err| {
                    eprintln!("fulcrum: cluster {}: cannot resolve {}: {err}", shared.config.name, e.address);
                    Vec::new()
                });
                (found, e.weight)
            })
            .collect();
        shared.publish(addrs);
        shared
    }

    /// Resolve every endpoint name again (async DNS) and publish the set if
    /// it changed. A name that fails keeps its previous addresses.
    pub async fn resolve(&self) {
        let previous = self.current.borrow().clone();
        let mut addrs = Vec::with_capacity(self.config.endpoints.len());
        for e in &self.config.endpoints {
            let found = match tokio::net::lookup_host(&e.address).await {
                Ok(a) => a.collect(),
                Err(err) => {
                    eprintln!("fulcrum: cluster {}: cannot resolve {}: {err}", self.config.name, e.address);
                    let port = e.address.rsplit_once(':').and_then(|(_, p)| p.parse::<u16>().ok());
                    previous.upstreams.iter().flatten().map(|u| u.addr).filter(|a| Some(a.port()) == port).collect()
                }
            };
            addrs.push((found, e.weight));
        }
        self.publish(addrs);
    }

    /// Publish the endpoint set made of `addrs` (per configured endpoint:
    /// its addresses and weight) unless it equals the current one.
    fn publish(&self, addrs: Vec<(Vec<SocketAddr>, f64)>) {
        let mut registry = lock(&self.registry);
        let mut resolved = Resolved::default();
        for (found, weight) in addrs {
            for addr in found {
                if resolved.endpoints.iter().any(|e| e.name == addr.to_string()) {
                    continue;
                }
                let next_id = EndpointId(registry.by_addr.len() as u64);
                let (id, stats) = registry.by_addr.entry(addr).or_insert_with(|| (next_id, Arc::default())).clone();
                resolved.endpoints.push(Endpoint { id, weight, name: addr.to_string() });
                let slot = id.0 as usize;
                if resolved.upstreams.len() <= slot {
                    resolved.upstreams.resize(slot + 1, None);
                }
                resolved.upstreams[slot] = Some(Upstream { addr, stats });
            }
        }
        self.current.send_if_modified(|current| {
            if current.endpoints == resolved.endpoints {
                return false;
            }
            *current = Arc::new(resolved);
            true
        });
    }

    /// The endpoint set in force.
    pub fn current(&self) -> Arc<Resolved> {
        self.current.borrow().clone()
    }

    /// Per-worker loads (active counts and latency estimates) as of `now`.
    pub fn worker_loads(&self, now: Nanos) -> Vec<Vec<EndpointLoad>> {
        lock(&self.balancers).iter().map(|b| lock(b).loads(now)).collect()
    }
}

/// One worker's view of a cluster.
#[derive(Debug)]
pub struct WorkerCluster {
    /// The shared part.
    pub shared: Arc<SharedCluster>,
    balancer: SharedBalancer,
    /// The endpoint set the balancer was last given.
    resolved: Mutex<Arc<Resolved>>,
}

/// A picked endpoint: the ticket to hand back and where to connect.
pub struct Pick {
    /// Hand back through [`WorkerCluster::complete`].
    pub ticket: fulcrum_balance::Ticket,
    /// Where to send the request.
    pub upstream: Upstream,
}

impl WorkerCluster {
    /// This worker's balancer for `shared`, seeded with `seed`.
    pub fn new(shared: Arc<SharedCluster>, seed: u64) -> Arc<WorkerCluster> {
        let resolved = shared.current();
        // The configuration was validated at load, so this cannot fail on
        // parameters; endpoints come from the registry with valid weights.
        let balancer = build(&shared.config.algorithm, &resolved.endpoints, seed)
            .unwrap_or_else(|e| unreachable!("validated algorithm failed to build: {e}"));
        let balancer = Arc::new(Mutex::new(balancer));
        lock(&shared.balancers).push(balancer.clone());
        Arc::new(WorkerCluster { shared, balancer, resolved: Mutex::new(resolved) })
    }

    /// Apply endpoint-set changes for as long as the cluster exists. Run it
    /// as a task on the worker's runtime.
    pub async fn follow_endpoints(self: Arc<Self>) {
        let mut rx = self.shared.current.subscribe();
        while rx.changed().await.is_ok() {
            let next = rx.borrow_and_update().clone();
            let mut balancer = lock(&self.balancer);
            if let Err(e) = balancer.set_endpoints(&next.endpoints) {
                eprintln!("fulcrum: cluster {}: endpoint update rejected: {e}", self.shared.config.name);
                continue;
            }
            *lock(&self.resolved) = next;
        }
    }

    /// Pick an endpoint for a request with hash `key` at `now`.
    pub fn pick(&self, now: Nanos, key: Option<u64>) -> Option<Pick> {
        let mut balancer = lock(&self.balancer);
        let ticket = balancer.pick(now, key)?;
        let resolved = lock(&self.resolved);
        match resolved.upstream(ticket.endpoint()) {
            Some(u) => {
                u.stats.start();
                Some(Pick { upstream: u.clone(), ticket })
            }
            None => {
                // Cannot happen: the balancer only knows endpoints of `resolved`.
                balancer.on_cancel(ticket);
                None
            }
        }
    }

    /// Report the outcome of a pick.
    pub fn complete(&self, pick: Pick, now: Nanos, outcome: fulcrum_balance::Outcome) {
        let (latency, success) = match outcome {
            fulcrum_balance::Outcome::Success { latency } => (latency, true),
            fulcrum_balance::Outcome::Failure { latency } => (latency, false),
        };
        pick.upstream.stats.finish(std::time::Duration::from_nanos(latency), success);
        lock(&self.balancer).on_complete(pick.ticket, now, outcome);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{EndpointConfig, HashKey, UpstreamProtocol};
    use fulcrum_balance::{AlgorithmKind, Outcome};
    use std::time::Duration;

    fn cluster(addrs: &[&str]) -> Cluster {
        Cluster {
            name: "c".into(),
            endpoints: addrs.iter().map(|a| EndpointConfig { address: a.to_string(), weight: 1.0 }).collect(),
            algorithm: AlgorithmKind::LeastRequest.default_config(),
            hash_key: HashKey::SourceIp,
            upstream: UpstreamProtocol::Http1,
            connect_timeout: Duration::from_secs(1),
            request_timeout: Duration::from_secs(1),
            resolve_interval: Duration::from_secs(1),
        }
    }

    #[test]
    fn ids_are_stable_and_counters_shared() {
        let shared = SharedCluster::new(cluster(&["127.0.0.1:1", "127.0.0.2:2"]));
        let a = WorkerCluster::new(shared.clone(), 1);
        let b = WorkerCluster::new(shared.clone(), 2);
        let p = a.pick(0, None).unwrap();
        let q = b.pick(0, None).unwrap();
        let total: u64 = shared
            .current()
            .upstreams
            .iter()
            .flatten()
            .map(|u| u.stats.in_flight.load(std::sync::atomic::Ordering::Relaxed))
            .sum();
        assert_eq!(total, 2);
        assert_eq!(shared.worker_loads(0).iter().map(|w| w.iter().map(|l| l.active).sum::<u32>()).sum::<u32>(), 2);
        a.complete(p, 1, Outcome::Success { latency: 1 });
        b.complete(q, 1, Outcome::Failure { latency: 1 });
        assert_eq!(shared.current().endpoints[1].name, "127.0.0.2:2");
        // Publishing the same set again changes nothing; a new set keeps ids.
        shared.publish(vec![(vec!["127.0.0.2:2".parse().unwrap()], 1.0)]);
        assert_eq!(shared.current().endpoints[0].id, EndpointId(1));
    }
}

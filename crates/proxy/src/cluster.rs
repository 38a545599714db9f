//! Clusters at run time: resolved endpoints, their health, shared counters,
//! and each worker's own balancer.
//!
//! [`SharedCluster`] is one per configured cluster. It owns the endpoint
//! registry (a stable [`EndpointId`] and [`EndpointStats`] per address) and
//! the [`Membership`], a thin adapter over `fulcrum_resilience::ClusterHealth`
//! (the simulator drives the same state machine): every resolved endpoint
//! with its active-health state, the outlier detector and slow-start clock.
//! It answers with the set the balancers should use (healthy, not ejected,
//! weights ramped; all of them in panic mode), which the cluster publishes
//! on a `watch` channel. Every worker
//! holds a [`WorkerCluster`] with its own balancer, built from the same
//! configuration with its own seed, and applies each new set to it, so the
//! balancer keeps the state of endpoints that remain.
//!
//! Why per worker: a balancer behind one lock would serialise every pick of
//! every core. Per-worker balancers are what Envoy and nginx do; the price is
//! that least request counts only the requests of its own worker, and
//! Peak-EWMA learns latency only from its own worker's responses, so with W
//! workers each sees about 1/W of the traffic. The per-worker lock is never
//! contended on the request path (only the admin listener also takes it).
//! Request results reach the outlier detector through a channel to the
//! control thread, never through a lock the workers share.

use std::collections::HashMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use fulcrum_balance::{build, pick_avoiding, Balancer, Endpoint, EndpointId, EndpointLoad, Nanos, Outcome};
use fulcrum_resilience::{
    Change, CheckThresholds, ClusterHealth, HealthConfig, RequestResult, RetryBudget, Snapshot, STEP,
};
use tokio::sync::{mpsc, watch};

use crate::clock::Epoch;
use crate::config::Cluster;
use crate::metrics::EndpointStats;
use crate::overrides::{ChangeError, FileEndpoints, Overrides};

/// One upstream address with its counters.
#[derive(Debug, Clone)]
pub struct Upstream {
    /// Where to connect.
    pub addr: SocketAddr,
    /// `addr` as a URI authority, made once rather than per request.
    pub authority: http::uri::Authority,
    /// Shared counters.
    pub stats: Arc<EndpointStats>,
}

/// A published endpoint set: what the balancers use, plus where every known
/// endpoint connects.
#[derive(Debug, Default)]
pub struct Resolved {
    /// Endpoints for the balancer, named `ip:port`, weights ramped by slow start.
    pub endpoints: Vec<Endpoint>,
    /// Every resolved endpoint, routable or not, with its configured weight.
    pub all: Vec<Endpoint>,
    /// Upstream of each endpoint id (ids are small and dense).
    upstreams: Vec<Option<Upstream>>,
    /// Too few endpoints are healthy, so all are used.
    pub panic: bool,
    /// Counts the sets published, so that the runtime API can wait until
    /// every worker's balancer has the one its change made.
    pub generation: u64,
}

impl Resolved {
    /// The upstream behind `id`, if it is known.
    pub fn upstream(&self, id: EndpointId) -> Option<&Upstream> {
        self.upstreams.get(id.0 as usize).and_then(Option::as_ref)
    }
}

/// The proxy's adapter over [`ClusterHealth`], the state machine the
/// simulator's `Guard` drives too (`tests/conformance.rs` feeds both the same
/// events and checks that they route alike). It adds what only the proxy
/// needs: where each member connects, and that the first endpoint set a
/// cluster resolves is established (no slow start) while later ones ramp.
/// Touched by the control thread only; time is passed in.
#[derive(Debug)]
pub struct Membership {
    health: ClusterHealth,
    /// Upstream of each member, by endpoint id (ids are small and dense).
    upstreams: Vec<Option<Upstream>>,
    started: bool,
    /// The addresses the file's endpoints resolved to, with their weights.
    file: Vec<(Vec<SocketAddr>, f64)>,
    /// Runtime changes over `file`, until the next reload.
    overrides: Overrides,
}

/// What a cluster's [`ClusterHealth`] is made of.
fn health_config(config: &Cluster) -> HealthConfig {
    HealthConfig {
        outlier_detection: config.outlier_detection.clone(),
        slow_start: config.slow_start.clone(),
        health_check: config
            .health_check
            .as_ref()
            .map(|h| CheckThresholds { healthy: h.healthy_threshold, unhealthy: h.unhealthy_threshold }),
        panic_threshold: config.panic_threshold,
    }
}

impl Membership {
    /// No members yet; the first [`Membership::set_members`] is established.
    pub fn new(config: &Cluster, now: Nanos) -> Membership {
        let health = ClusterHealth::new(health_config(config), &[], now)
            .unwrap_or_else(|e| unreachable!("validated slow start rejected: {e}"));
        Membership { health, upstreams: Vec::new(), started: false, file: Vec::new(), overrides: Overrides::default() }
    }

    /// The same members, health and ejections under `config` (a reload):
    /// endpoints resolved from now on ramp. Runtime changes are dropped: the
    /// file is the truth again.
    pub fn reconfigured(&self, config: &Cluster, now: Nanos) -> Membership {
        let health = self
            .health
            .reconfigured(health_config(config), now)
            .unwrap_or_else(|e| unreachable!("validated slow start rejected: {e}"));
        Membership {
            health,
            upstreams: self.upstreams.clone(),
            started: true,
            file: Vec::new(),
            overrides: Overrides::default(),
        }
    }

    /// Make the members exactly `members` at `now`, keeping the state of
    /// those that remain.
    pub fn set_members(&mut self, members: Vec<(Endpoint, Upstream)>, now: Nanos) {
        let endpoints: Vec<Endpoint> = members.iter().map(|(e, _)| e.clone()).collect();
        if self.started {
            self.health.set_members(&endpoints, now);
        } else {
            self.health = ClusterHealth::new(self.health.config().clone(), &endpoints, now)
                .unwrap_or_else(|e| unreachable!("validated slow start rejected: {e}"));
            self.started = true;
        }
        self.upstreams.clear();
        for (e, upstream) in members {
            let slot = e.id.0 as usize;
            if self.upstreams.len() <= slot {
                self.upstreams.resize(slot + 1, None);
            }
            self.upstreams[slot] = Some(upstream);
        }
    }

    /// A request result at `now`; returns the ejection it caused.
    pub fn record(&mut self, id: EndpointId, result: RequestResult, now: Nanos) -> Option<Change> {
        self.health.record(id, now, result)
    }

    /// An active health check at `now`; returns the new verdict if it flipped.
    pub fn record_check(&mut self, id: EndpointId, passed: bool, now: Nanos) -> Option<bool> {
        self.health.record_check(id, passed, now)
    }

    /// The detector's timer at `now`.
    pub fn tick(&mut self, now: Nanos) -> Vec<Change> {
        self.health.tick(now)
    }

    /// The routable set at `now`.
    pub fn routable(&mut self, now: Nanos) -> &Snapshot {
        self.health.routable(now)
    }

    /// Requests in flight allowed at `now` for a cluster configured with
    /// `max_requests`: ramped by slow start while every endpoint is new.
    pub fn request_limit(&mut self, max_requests: u64, now: Nanos) -> u64 {
        fulcrum_resilience::ramped(max_requests, self.health.routable(now).request_limit_factor)
    }

    /// Whether the runtime API has `id` draining.
    pub fn is_drained(&self, id: EndpointId) -> bool {
        let upstream = self.upstreams.get(id.0 as usize).and_then(Option::as_ref);
        upstream.is_some_and(|u| self.overrides.is_drained(u.addr))
    }

    fn name(&self, id: EndpointId) -> String {
        self.health.members().find(|e| e.id == id).map_or_else(|| format!("#{}", id.0), |e| e.name.clone())
    }
}

/// One worker's balancer for a cluster, shared with the admin listener.
type SharedBalancer = Arc<Mutex<Box<dyn Balancer>>>;

/// A cluster as all workers share it.
#[derive(Debug)]
pub struct SharedCluster {
    /// Its configuration.
    pub config: Cluster,
    /// The proxy's time origin.
    pub epoch: Epoch,
    registry: Mutex<HashMap<SocketAddr, (EndpointId, Arc<EndpointStats>)>>,
    membership: Mutex<Membership>,
    current: watch::Sender<Arc<Resolved>>,
    /// Request results on their way to the outlier detector.
    results: mpsc::UnboundedSender<(EndpointId, RequestResult)>,
    results_rx: Mutex<Option<mpsc::UnboundedReceiver<(EndpointId, RequestResult)>>>,
    /// Each worker's balancer, for the admin listener, with the generation
    /// of the endpoint set it was last given.
    balancers: Mutex<Vec<(SharedBalancer, Arc<AtomicU64>)>>,
    /// Counters that outlive a reload.
    pub counters: Arc<ClusterCounters>,
    /// Upstream connections open and waiting, over all workers.
    pub connections: Arc<crate::upstream::ConnectionLimit>,
    /// Whether the cluster is in panic mode now.
    pub panic: AtomicBool,
    /// Requests in flight allowed now: `max_requests`, scaled down by slow
    /// start while *every* endpoint is ramping (weights are relative, so
    /// ramping them all alike would otherwise change nothing).
    pub request_limit: AtomicU64,
    /// TLS to the endpoints, if the cluster has `tls`: one client
    /// configuration (and session cache) for all workers.
    pub tls: Option<Arc<crate::upstream_tls::UpstreamTls>>,
}

/// A cluster's counters, carried over when a reload replaces the cluster so
/// that requests in flight across the reload are counted once.
#[derive(Debug, Default)]
pub struct ClusterCounters {
    /// Requests in flight over all workers, for circuit breaking.
    in_flight: fulcrum_resilience::RequestLimit,
    /// Requests refused because `max_requests` were in flight.
    pub overflows: AtomicU64,
    /// Ejections so far.
    pub ejections: AtomicU64,
    /// Retries made.
    pub retries: AtomicU64,
    /// Retries not made because the budget was spent.
    pub retries_denied: AtomicU64,
    /// TLS handshakes with endpoints that failed, by reason.
    pub tls_errors: Arc<crate::upstream_tls::TlsErrors>,
}

/// Lock a mutex even if a holder panicked: the guarded state stays usable
/// (a balancer's counters at worst drift), and the proxy keeps serving.
pub fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl SharedCluster {
    /// A cluster with its endpoints resolved once, now (blocking DNS).
    /// Names that do not resolve are reported and retried by
    /// [`SharedCluster::resolve`]. With `previous` (a reload), endpoints that
    /// remain keep their ids, counters, health and ejection state.
    pub fn new(config: Cluster, epoch: Epoch, previous: Option<&SharedCluster>) -> Arc<SharedCluster> {
        let (current, _) = watch::channel(Arc::new(Resolved::default()));
        let (results, results_rx) = mpsc::unbounded_channel();
        let (registry, membership, counters) = match previous {
            Some(p) => {
                // One lock at a time: a runtime change holds the membership
                // while it takes the registry.
                let registry = lock(&p.registry).clone();
                let membership = lock(&p.membership).reconfigured(&config, epoch.now());
                (registry, membership, p.counters.clone())
            }
            None => (HashMap::new(), Membership::new(&config, epoch.now()), Arc::default()),
        };
        // Pools survive a reload with the same limits, and so do their permits.
        let connections = match previous {
            Some(p)
                if (p.config.max_connections, p.config.max_pending) == (config.max_connections, config.max_pending) =>
            {
                p.connections.clone()
            }
            _ => crate::upstream::ConnectionLimit::new(config.max_connections, config.max_pending),
        };
        let tls = crate::upstream_tls::UpstreamTls::new(&config, counters.tls_errors.clone());
        let shared = Arc::new(SharedCluster {
            tls,
            config,
            epoch,
            registry: Mutex::new(registry),
            membership: Mutex::new(membership),
            current,
            results,
            results_rx: Mutex::new(Some(results_rx)),
            balancers: Mutex::new(Vec::new()),
            connections,
            counters,
            panic: AtomicBool::new(false),
            request_limit: AtomicU64::new(u64::MAX),
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
        shared.set_addresses(addrs);
        shared
    }

    fn log(&self, message: std::fmt::Arguments) {
        eprintln!("fulcrum: cluster {}: {message}", self.config.name);
    }

    /// Resolve every endpoint name again (async DNS) and publish the set if
    /// it changed. A name that fails keeps its previous addresses.
    pub async fn resolve(&self) {
        let previous = self.current();
        let mut addrs = Vec::with_capacity(self.config.endpoints.len());
        for e in &self.config.endpoints {
            let found = match tokio::net::lookup_host(&e.address).await {
                Ok(a) => a.collect(),
                Err(err) => {
                    self.log(format_args!("cannot resolve {}: {err}", e.address));
                    let port = e.address.rsplit_once(':').and_then(|(_, p)| p.parse::<u16>().ok());
                    previous.upstreams.iter().flatten().map(|u| u.addr).filter(|a| Some(a.port()) == port).collect()
                }
            };
            addrs.push((found, e.weight));
        }
        self.set_addresses(addrs);
    }

    /// Make the members exactly `addrs` (per configured endpoint: its
    /// addresses and weight) with the runtime changes over them, keeping the
    /// health of those that remain.
    fn set_addresses(&self, addrs: Vec<(Vec<SocketAddr>, f64)>) {
        let mut membership = lock(&self.membership);
        membership.file = addrs;
        self.rebuild(&mut membership);
    }

    /// Make the members what the file's addresses and the runtime changes
    /// say, and publish the set.
    fn rebuild(&self, membership: &mut Membership) {
        let now = self.epoch.now();
        let mut registry = lock(&self.registry);
        let members = membership
            .overrides
            .apply(&membership.file)
            .into_iter()
            .map(|(addr, weight)| {
                let next_id = EndpointId(registry.len() as u64);
                let (id, stats) = registry.entry(addr).or_insert_with(|| (next_id, Arc::default())).clone();
                let authority = addr.to_string().parse().expect("a socket address is a valid authority");
                (Endpoint { id, weight, name: addr.to_string() }, Upstream { addr, authority, stats })
            })
            .collect();
        drop(registry);
        membership.set_members(members, now);
        self.publish(membership);
    }

    /// Apply a runtime change (drain, weight, add, remove: see
    /// [`Overrides`]) and publish the resulting set; it lasts until the next
    /// reload. Wait for [`SharedCluster::applied`] to know every worker has it.
    pub fn change(
        &self,
        f: impl FnOnce(&mut Overrides, &FileEndpoints) -> Result<(), ChangeError>,
    ) -> Result<(), ChangeError> {
        let mut membership = lock(&self.membership);
        let m = &mut *membership;
        f(&mut m.overrides, &m.file)?;
        self.rebuild(&mut membership);
        Ok(())
    }

    /// Wait, up to `limit`, until every worker's balancer has the endpoint
    /// set in force; whether they all had it in time.
    pub async fn applied(&self, limit: Duration) -> bool {
        let target = self.current().generation;
        let start = tokio::time::Instant::now();
        loop {
            if lock(&self.balancers).iter().all(|(_, seen)| seen.load(Relaxed) >= target) {
                return true;
            }
            if start.elapsed() >= limit {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// Publish the routable set of `membership` if it changed, with the
    /// request limit and panic state.
    fn publish(&self, membership: &mut Membership) {
        let now = self.epoch.now();
        self.request_limit.store(membership.request_limit(self.config.max_requests, now), Relaxed);
        let mut set = membership.routable(now).clone();
        // Draining endpoints stay members, but no balancer is given them.
        set.endpoints.retain(|e| !membership.is_drained(e.id));
        let all: Vec<Endpoint> = membership.health.members().cloned().collect();
        if set.panic != self.panic.swap(set.panic, Relaxed) {
            let healthy = membership.health.healthy_count();
            if set.panic {
                self.log(format_args!(
                    "PANIC: only {healthy} of {} endpoints healthy (below {} %); balancing over all of them",
                    all.len(),
                    self.config.panic_threshold
                ));
            } else {
                self.log(format_args!("panic over: {healthy} of {} endpoints healthy", all.len()));
            }
        }
        self.current.send_if_modified(|current| {
            if current.endpoints == set.endpoints && current.all == all {
                return false;
            }
            *current = Arc::new(Resolved {
                endpoints: set.endpoints,
                all,
                upstreams: membership.upstreams.clone(),
                panic: set.panic,
                generation: current.generation + 1,
            });
            true
        });
    }

    /// The endpoint set in force.
    pub fn current(&self) -> Arc<Resolved> {
        self.current.borrow().clone()
    }

    /// Per-worker loads (active counts and latency estimates) as of `now`.
    pub fn worker_loads(&self, now: Nanos) -> Vec<Vec<EndpointLoad>> {
        lock(&self.balancers).iter().map(|(b, _)| lock(b).loads(now)).collect()
    }

    /// Whether the outlier detector has `id` ejected, and whether active
    /// checks call it healthy.
    pub fn health_of(&self, id: EndpointId) -> (bool, bool) {
        let m = lock(&self.membership);
        (m.health.is_ejected(id), m.health.is_healthy(id))
    }

    /// Whether the runtime API has `id` draining.
    pub fn is_drained(&self, id: EndpointId) -> bool {
        lock(&self.membership).is_drained(id)
    }

    /// Record an active health check of `id`: `passed` or not. Flips the
    /// endpoint's health after the configured thresholds.
    pub fn record_check(&self, id: EndpointId, passed: bool) {
        let mut membership = lock(&self.membership);
        if membership.record_check(id, passed, self.epoch.now()).is_some() {
            let name = membership.name(id);
            self.log(format_args!("{name} is {} (active health check)", if passed { "healthy" } else { "unhealthy" }));
            self.publish(&mut membership);
        }
    }

    /// Feed request results to the outlier detector, return ejected
    /// endpoints on time, and step slow-start weights, until `stopped`.
    /// Run it on the control thread.
    pub async fn manage(self: Arc<Self>, mut stopped: watch::Receiver<Option<Duration>>) {
        let Some(mut results) = lock(&self.results_rx).take() else { return };
        let mut tick = tokio::time::interval(Duration::from_nanos(STEP));
        loop {
            tokio::select! {
                _ = crate::shutdown::stopping(&mut stopped) => return,
                Some((id, result)) = results.recv() => {
                    let mut m = lock(&self.membership);
                    let now = self.epoch.now();
                    if let Some(change) = m.record(id, result, now) {
                        self.log_change(&m, change, now);
                        self.publish(&mut m);
                    }
                }
                _ = tick.tick() => {
                    let mut m = lock(&self.membership);
                    let now = self.epoch.now();
                    for change in m.tick(now) {
                        self.log_change(&m, change, now);
                    }
                    // Publishes only when the set changed: a return, or a
                    // slow-start step.
                    self.publish(&mut m);
                }
            }
        }
    }

    fn log_change(&self, m: &Membership, change: Change, now: Nanos) {
        match change {
            Change::Ejected { id, reason, until } => {
                self.counters.ejections.fetch_add(1, Relaxed);
                let secs = Duration::from_nanos(until.saturating_sub(now)).as_secs_f64();
                self.log(format_args!("ejected {} ({reason:?}) for {secs:.0} s", m.name(id)));
            }
            Change::Returned { id } => self.log(format_args!("{} returns from ejection", m.name(id))),
        }
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
    /// That set's generation, for [`SharedCluster::applied`].
    applied: Arc<AtomicU64>,
    /// This worker's retry budget (`None`: retries are not limited).
    budget: Mutex<Option<RetryBudget>>,
}

/// A picked endpoint: the ticket to hand back and where to connect.
pub struct Pick {
    /// Hand back through [`WorkerCluster::complete`].
    pub ticket: fulcrum_balance::Ticket,
    /// Where to send the request.
    pub upstream: Upstream,
    /// Requests in flight to it when it was picked.
    pub before: u64,
}

/// Why no endpoint was picked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoPick {
    /// The cluster has no endpoint.
    Empty,
    /// `max_requests` are in flight (circuit breaker open).
    Overflow,
}

impl WorkerCluster {
    /// This worker's balancer for `shared`, seeded with `seed`. With
    /// `previous` (a reload) running the same algorithm, its balancer is kept,
    /// with its latency estimates and active counts, and given the new set.
    pub fn new(shared: Arc<SharedCluster>, seed: u64, previous: Option<&WorkerCluster>) -> Arc<WorkerCluster> {
        let resolved = shared.current();
        let balancer = match previous {
            Some(p) if p.shared.config.algorithm == shared.config.algorithm => {
                let b = p.balancer.clone();
                if let Err(e) = lock(&b).set_endpoints(&resolved.endpoints) {
                    shared.log(format_args!("endpoint update rejected: {e}"));
                }
                b
            }
            // The configuration was validated at load, so this cannot fail on
            // parameters; endpoints come from the registry with valid weights.
            _ => Arc::new(Mutex::new(
                build(&shared.config.algorithm, &resolved.endpoints, seed)
                    .unwrap_or_else(|e| unreachable!("validated algorithm failed to build: {e}")),
            )),
        };
        let applied = Arc::new(AtomicU64::new(resolved.generation));
        lock(&shared.balancers).push((balancer.clone(), applied.clone()));
        let budget =
            match previous {
                Some(p) if p.shared.config.retries.budget == shared.config.retries.budget => lock(&p.budget).clone(),
                _ => shared.config.retries.budget.clone().map(|b| {
                    RetryBudget::new(b).unwrap_or_else(|e| unreachable!("validated retry budget rejected: {e}"))
                }),
            };
        Arc::new(WorkerCluster {
            shared,
            balancer,
            resolved: Mutex::new(resolved),
            applied,
            budget: Mutex::new(budget),
        })
    }

    /// Apply endpoint-set changes to this worker's balancer until the
    /// cluster is replaced or gone. Run it as a task on the worker's runtime.
    pub async fn follow_endpoints(this: std::sync::Weak<Self>) {
        let Some(mut rx) = this.upgrade().map(|w| w.shared.current.subscribe()) else { return };
        // A set published between this worker's build and now would be
        // missed otherwise; giving the same set twice changes nothing.
        rx.mark_changed();
        while rx.changed().await.is_ok() {
            let Some(me) = this.upgrade() else { return };
            let next = rx.borrow_and_update().clone();
            let mut balancer = lock(&me.balancer);
            if let Err(e) = balancer.set_endpoints(&next.endpoints) {
                me.shared.log(format_args!("endpoint update rejected: {e}"));
                continue;
            }
            me.applied.store(next.generation, Relaxed);
            *lock(&me.resolved) = next;
        }
    }

    /// Pick an endpoint for a request with hash `key` at `now`, after tries
    /// on `tried` (empty for the first try), avoiding those when another
    /// can be had.
    pub fn pick(&self, now: Nanos, key: Option<u64>, tried: &[EndpointId]) -> Result<Pick, NoPick> {
        let counters = &self.shared.counters;
        if !counters.in_flight.acquire(self.shared.request_limit.load(Relaxed)) {
            counters.overflows.fetch_add(1, Relaxed);
            return Err(NoPick::Overflow);
        }
        let mut balancer = lock(&self.balancer);
        // The retry rule the simulator follows too: try number `tried.len()`,
        // on another endpoint than those already tried (unless the policy
        // says any will do).
        let avoid = if self.shared.config.retries.different_endpoint { tried } else { &[] };
        let ticket = pick_avoiding(balancer.as_mut(), now, key, tried.len() as u32, avoid);
        let resolved = lock(&self.resolved);
        let upstream = ticket.as_ref().and_then(|t| resolved.upstream(t.endpoint()).cloned());
        match (ticket, upstream) {
            (Some(ticket), Some(upstream)) => {
                let before = upstream.stats.start();
                Ok(Pick { upstream, ticket, before })
            }
            (ticket, _) => {
                if let Some(t) = ticket {
                    balancer.on_cancel(t);
                }
                self.shared.counters.in_flight.release();
                Err(NoPick::Empty)
            }
        }
    }

    /// Report the outcome of a pick: `latency` to response headers (or to
    /// the failure) and the result as outlier detection sees it.
    pub fn complete(&self, pick: Pick, now: Nanos, latency: Nanos, result: RequestResult) {
        self.shared.counters.in_flight.release();
        let success = result == RequestResult::Success;
        pick.upstream.stats.finish(Duration::from_nanos(latency), success, Some(pick.before));
        let id = pick.ticket.endpoint();
        let outcome = if success { Outcome::Success { latency } } else { Outcome::Failure { latency } };
        lock(&self.balancer).on_complete(pick.ticket, now, outcome);
        if self.shared.config.outlier_detection.is_some() {
            // The control thread may be gone at shutdown; then nobody needs it.
            let _ = self.shared.results.send((id, result));
        }
    }

    /// Give up on a pick without an outcome (the request was never sent).
    pub fn cancel(&self, pick: Pick) {
        self.shared.counters.in_flight.release();
        pick.upstream.stats.finish(Duration::ZERO, true, None);
        lock(&self.balancer).on_cancel(pick.ticket);
    }

    /// A first attempt is being made: it earns the retry budget a deposit.
    pub fn deposit(&self, now: Nanos) {
        if let Some(b) = lock(&self.budget).as_mut() {
            b.deposit(now);
        }
    }

    /// Whether a retry may be made now (it spends a token).
    pub fn may_retry(&self, now: Nanos) -> bool {
        let ok = lock(&self.budget).as_mut().is_none_or(|b| b.try_withdraw(now));
        if ok {
            self.shared.counters.retries.fetch_add(1, Relaxed);
        } else {
            self.shared.counters.retries_denied.fetch_add(1, Relaxed);
        }
        ok
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, HashKey};
    use std::path::Path;

    fn cluster(extra: &str, addrs: &[&str]) -> Cluster {
        let endpoints = addrs.iter().map(|a| format!("\"{a}\"")).collect::<Vec<_>>().join(", ");
        let text = format!(
            "[[listener]]\nlisten = \"127.0.0.1:1\"\nroutes = [{{ cluster = \"c\" }}]\n\n\
             [[cluster]]\nname = \"c\"\nendpoints = [{endpoints}]\nalgorithm = {{ kind = \"least-request\" }}\n{extra}"
        );
        let mut c = Config::parse(Path::new("t.toml"), &text).unwrap().clusters.remove(0);
        c.hash_key = HashKey::SourceIp;
        c
    }

    #[test]
    fn ids_are_stable_and_counters_shared() {
        let shared = SharedCluster::new(cluster("", &["127.0.0.1:1", "127.0.0.2:2"]), Epoch::new(), None);
        let a = WorkerCluster::new(shared.clone(), 1, None);
        let b = WorkerCluster::new(shared.clone(), 2, None);
        let p = a.pick(0, None, &[]).unwrap();
        let q = b.pick(0, None, &[]).unwrap();
        assert_eq!(shared.counters.in_flight.in_flight(), 2);
        let active: u32 = shared.worker_loads(0).iter().flatten().map(|l| l.active).sum();
        assert_eq!(active, 2);
        a.complete(p, 1, 1, RequestResult::Success);
        b.complete(q, 1, 1, RequestResult::GatewayFailure);
        assert_eq!(shared.counters.in_flight.in_flight(), 0);
        assert_eq!(shared.current().endpoints[1].name, "127.0.0.2:2");
        // A new address set keeps the ids of the addresses that remain.
        shared.set_addresses(vec![(vec!["127.0.0.2:2".parse().unwrap()], 1.0)]);
        assert_eq!(shared.current().endpoints[0].id, EndpointId(1));
    }

    #[test]
    fn the_circuit_breaker_refuses_beyond_max_requests() {
        let shared = SharedCluster::new(cluster("max_requests = 2", &["127.0.0.1:1"]), Epoch::new(), None);
        let w = WorkerCluster::new(shared.clone(), 1, None);
        let held: Vec<_> = (0..2).map(|_| w.pick(0, None, &[]).unwrap()).collect();
        assert_eq!(w.pick(0, None, &[]).err(), Some(NoPick::Overflow));
        assert_eq!(shared.counters.overflows.load(Relaxed), 1);
        for p in held {
            w.cancel(p);
        }
        assert!(w.pick(0, None, &[]).is_ok());
    }

    #[test]
    fn retries_avoid_the_endpoint_that_failed() {
        let shared =
            SharedCluster::new(cluster("", &["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"]), Epoch::new(), None);
        let w = WorkerCluster::new(shared, 1, None);
        for _ in 0..50 {
            let p = w.pick(0, None, &[EndpointId(0), EndpointId(1)]).unwrap();
            assert_eq!(p.ticket.endpoint(), EndpointId(2));
            w.cancel(p);
        }
    }

    #[test]
    fn failing_checks_remove_an_endpoint_and_panic_brings_it_back() {
        let c = cluster("health_check = { unhealthy_threshold = 2 }", &["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"]);
        let shared = SharedCluster::new(c, Epoch::new(), None);
        shared.record_check(EndpointId(0), false);
        assert_eq!(shared.current().endpoints.len(), 3, "one failure is below the threshold");
        shared.record_check(EndpointId(0), false);
        assert_eq!(shared.current().endpoints.len(), 2);
        for _ in 0..2 {
            shared.record_check(EndpointId(1), false);
        }
        // One of three healthy is under the 50 % panic threshold: all are used, and it says so.
        let now = shared.current();
        assert!(now.panic && shared.panic.load(Relaxed));
        assert_eq!(now.endpoints.len(), 3);
    }

    #[test]
    fn slow_start_ramps_the_request_limit_when_every_endpoint_is_new() {
        let epoch = Epoch::new();
        let c = cluster("max_requests = 100\nslow_start = { window = \"30s\" }", &["127.0.0.1:1", "127.0.0.1:2"]);
        let old = SharedCluster::new(c.clone(), epoch, None);
        assert_eq!(old.request_limit.load(Relaxed), 100, "endpoints there from the start are warm");
        // A reload that replaces every endpoint: all new, all at the 10 % floor.
        let c2 = cluster("max_requests = 100\nslow_start = { window = \"30s\" }", &["127.0.0.1:3", "127.0.0.1:4"]);
        let new = SharedCluster::new(c2, epoch, Some(&old));
        assert_eq!(new.request_limit.load(Relaxed), 10);
        let w = WorkerCluster::new(new.clone(), 1, None);
        let held: Vec<_> = (0..10).map(|_| w.pick(0, None, &[]).unwrap()).collect();
        assert_eq!(w.pick(0, None, &[]).err(), Some(NoPick::Overflow));
        held.into_iter().for_each(|p| w.cancel(p));
    }

    #[test]
    fn a_reload_keeps_state_of_endpoints_that_remain() {
        let epoch = Epoch::new();
        let c = cluster("health_check = { unhealthy_threshold = 1 }", &["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"]);
        let old = SharedCluster::new(c, epoch, None);
        let w_old = WorkerCluster::new(old.clone(), 1, None);
        let held = w_old.pick(0, None, &[]).unwrap();
        old.record_check(EndpointId(0), false);
        // The new configuration drops 127.0.0.1:3 and adds :4.
        let c = cluster("health_check = { unhealthy_threshold = 1 }", &["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:4"]);
        let new = SharedCluster::new(c, epoch, Some(&old));
        let w_new = WorkerCluster::new(new.clone(), 1, Some(&w_old));
        assert_eq!(new.health_of(EndpointId(0)), (false, false), "still unhealthy");
        let names: Vec<_> = new.current().all.iter().map(|e| (e.id.0, e.name.clone())).collect();
        assert_eq!(names, vec![(0, "127.0.0.1:1".into()), (1, "127.0.0.1:2".into()), (3, "127.0.0.1:4".into())]);
        // The balancer (same algorithm) is the same one: the request in flight is still counted.
        let active: u32 = new.worker_loads(0).iter().flatten().map(|l| l.active).sum();
        assert_eq!(active, u32::from(held.ticket.endpoint() == EndpointId(1)), "only :2 remains routable");
        assert_eq!(new.counters.in_flight.in_flight(), 1);
        w_old.complete(held, 1, 1, RequestResult::Success);
        assert_eq!(new.counters.in_flight.in_flight(), 0);
        drop(w_new);
    }
}

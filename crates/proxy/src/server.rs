//! Starting, reloading and stopping the proxy: listeners, worker threads,
//! the control thread.
//!
//! Every listener is bound once per worker with `SO_REUSEPORT`, so the
//! kernel spreads connections over the workers and no accept lock is
//! shared. Each worker is a thread running a single-threaded tokio runtime
//! with its own balancers and upstream connection pools
//! ([`WorkerCluster`]), reached through a
//! per-worker [`Routing`] that a reload replaces; a connection stays on the
//! worker that accepted it. A control thread serves the admin listener,
//! re-resolves endpoint names, runs health checks and outlier detection.
//!
//! [`Proxy::reload`] applies a new configuration without closing a listener
//! or a connection: requests already routed finish on the clusters they
//! started with, new ones use the new routing; clusters that remain keep
//! their endpoints' ids, counters, health and ejections, and their
//! balancers (with latency estimates and active counts) when the algorithm
//! is unchanged. [`Proxy::shutdown`] stops accepting, lets connections
//! finish their requests (up to a drain timeout) and joins every thread.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use http_body_util::Either;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use socket2::{Domain, Protocol, Socket, Type};
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};

use crate::access_log::AccessLog;
use crate::admin::Admin;
use crate::client_io::{Counted, IdleTimeout, SharedSocket, Slot};
use crate::clock::Epoch;
use crate::cluster::{lock, SharedCluster, WorkerCluster};
use crate::config::{Config, Http1Server, Listener, ListenerProtocol, HYPER_MAX_HEADERS};
use crate::h1::conn::{Io, Rewind};
use crate::h1::park::{Asleep, Parker, Resume};
use crate::h1::server::{Served, ServerLimits};
use crate::http::HttpService;
use crate::metrics::ProxyStats;
use crate::routing::{route_limits, RouteLimits, Routing};
use crate::shutdown::{stopping, Stop};
use crate::tls::TlsSlot;
use crate::upstream::UpstreamPool;

pub use crate::error::ServeError;

/// A running proxy.
pub struct Proxy {
    listen_addrs: Vec<SocketAddr>,
    admin_addr: Option<SocketAddr>,
    stop: watch::Sender<Stop>,
    threads: Vec<JoinHandle<()>>,
    epoch: Epoch,
    /// The configuration in force.
    config: Mutex<Config>,
    /// Shared clusters, watched by the control thread and the admin listener.
    clusters: watch::Sender<Vec<Arc<SharedCluster>>>,
    /// Each worker's routing.
    routing: Vec<watch::Sender<Arc<Routing>>>,
    /// Each listener's TLS, if it has any: certificates read again on a
    /// reload, settings replaced when they change.
    tls: Vec<Option<Arc<TlsSlot>>>,
}

/// How long a shutdown waits for requests in flight, unless told otherwise.
pub const DEFAULT_DRAIN: Duration = Duration::from_secs(10);

fn bind(addr: SocketAddr) -> Result<std::net::TcpListener, ServeError> {
    let err = |source| ServeError::Bind { addr, source };
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP)).map_err(err)?;
    socket.set_reuse_address(true).map_err(err)?;
    socket.set_reuse_port(true).map_err(err)?;
    socket.set_nonblocking(true).map_err(err)?;
    socket.bind(&addr.into()).map_err(err)?;
    socket.listen(1024).map_err(err)?;
    Ok(socket.into())
}

/// A listener's socket on one worker: TCP, or UDP for HTTP/3.
enum Bound {
    Tcp(std::net::TcpListener),
    Udp(std::net::UdpSocket),
}

impl Bound {
    fn bind(addr: SocketAddr, udp: bool) -> Result<Bound, ServeError> {
        Ok(if udp { Bound::Udp(crate::h3::bind_udp(addr)?) } else { Bound::Tcp(bind(addr)?) })
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        match self {
            Bound::Tcp(s) => s.local_addr(),
            Bound::Udp(s) => s.local_addr(),
        }
    }
}

/// Bind `addr` once per worker; port 0 is resolved by the first bind.
fn bind_per_worker(addr: SocketAddr, workers: usize, udp: bool) -> Result<(SocketAddr, Vec<Bound>), ServeError> {
    let first = Bound::bind(addr, udp)?;
    let actual = first.local_addr()?;
    let mut all = vec![first];
    for _ in 1..workers {
        all.push(Bound::bind(actual, udp)?);
    }
    Ok((actual, all))
}

fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread().enable_all().build()
}

/// A seed for a worker's request and trace IDs: unlike the balancers'
/// seeds, different at every start (one clock read, at start).
fn id_seed(listener: usize) -> u64 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let mut state = (now.as_nanos() as u64) ^ (u64::from(std::process::id()) << 32) ^ listener as u64;
    let thread = std::thread::current().id();
    state ^= xxhash_rust::xxh64::xxh64(format!("{thread:?}").as_bytes(), 0);
    fulcrum_balance::Rng::new(state).next_u64()
}

fn worker_seed(config: &Config, worker: usize, cluster: usize) -> u64 {
    config.seed.wrapping_add(worker as u64) ^ ((cluster as u64) << 32)
}

/// Routing for `worker` under `config`, reusing what `previous` had for
/// clusters of the same name.
fn routing(
    config: &Config,
    worker: usize,
    shared: &[Arc<SharedCluster>],
    previous: Option<&Routing>,
    limits: &Arc<RouteLimits>,
) -> Arc<Routing> {
    let mut clusters = Vec::with_capacity(shared.len());
    let mut pools = Vec::with_capacity(shared.len());
    for (i, s) in shared.iter().enumerate() {
        let old = previous.and_then(|p| {
            let j = p.clusters.iter().position(|c| c.shared.config.name == s.config.name)?;
            Some((&p.clusters[j], &p.pools[j]))
        });
        clusters.push(WorkerCluster::new(s.clone(), worker_seed(config, worker, i), old.map(|o| o.0.as_ref())));
        // A TLS cluster's pool starts anew: a reload may bring new files.
        let same_pool = s.tls.is_none()
            && old.is_some_and(|(c, _)| {
                let (a, b) = (&c.shared.config, &s.config);
                a.upstream == b.upstream
                    && a.tls == b.tls
                    && a.connect_timeout == b.connect_timeout
                    && a.max_connections == b.max_connections
                    && a.max_pending == b.max_pending
                    && a.proxy_protocol == b.proxy_protocol
            });
        pools.push(match old {
            Some((_, pool)) if same_pool => pool.clone(),
            _ => {
                let c = &s.config;
                let tls = s.tls.clone();
                UpstreamPool::with_tls(c.upstream, c.connect_timeout, s.connections.clone(), c.proxy_protocol, tls)
            }
        });
    }
    Arc::new(Routing { listeners: config.listeners.clone(), clusters, pools, limits: limits.clone() })
}

impl Proxy {
    /// Bind every listener and start the workers. Returns once the proxy
    /// accepts connections.
    pub fn start(config: Config) -> Result<Proxy, ServeError> {
        let epoch = Epoch::new();
        let stats = Arc::new(ProxyStats::with_workers(config.workers));
        let shared: Vec<Arc<SharedCluster>> =
            config.clusters.iter().cloned().map(|c| SharedCluster::new(c, epoch, None)).collect();
        let tls: Vec<Option<Arc<TlsSlot>>> = config
            .listeners
            .iter()
            .map(|l| {
                l.tls.as_ref().map(|t| TlsSlot::new(l.listen, t, l.protocol == ListenerProtocol::Http2)).transpose()
            })
            .collect::<Result<_, _>>()?;
        let quic: Vec<Option<quinn::ServerConfig>> = config
            .listeners
            .iter()
            .zip(&tls)
            .map(|(l, t)| match (l.protocol, t) {
                (ListenerProtocol::Http3, Some(t)) => crate::h3::server_config(l, t.acceptor().config()).map(Some),
                _ => Ok(None),
            })
            .collect::<Result<_, _>>()?;

        let mut listen_addrs = Vec::new();
        // sockets[worker][listener]
        let mut sockets: Vec<Vec<Bound>> = (0..config.workers).map(|_| Vec::new()).collect();
        for l in &config.listeners {
            let (addr, per_worker) = bind_per_worker(l.listen, config.workers, l.protocol == ListenerProtocol::Http3)?;
            listen_addrs.push(addr);
            for (w, s) in per_worker.into_iter().enumerate() {
                sockets[w].push(s);
            }
        }
        let admin_socket = config.admin.map(bind).transpose()?;
        let admin_addr = admin_socket.as_ref().map(|s| s.local_addr()).transpose()?;
        // Connection limits hold over all workers.
        let permits: Vec<Arc<Semaphore>> =
            config.listeners.iter().map(|l| Arc::new(Semaphore::new(l.limits.max_connections))).collect();

        // One writer thread per access log, joined after the workers (it
        // ends once their handles are gone and its queue is written).
        let mut log_threads = Vec::new();
        let mut logs = Vec::new();
        for (i, l) in config.listeners.iter().enumerate() {
            logs.push(match &l.access_log {
                Some(log) => {
                    let (log, thread) = AccessLog::start(log, format!("fulcrum-log-{i}"), stats.clone())
                        .map_err(|source| ServeError::AccessLog { listener: l.listen, source })?;
                    log_threads.push(thread);
                    Some(log)
                }
                None => None,
            });
        }
        let (stop, stopped) = watch::channel(None);
        let (clusters_tx, clusters_rx) = watch::channel(shared.clone());
        let mut threads = Vec::new();
        let mut routing_tx = Vec::new();
        let limits = route_limits(&config, None);
        for (worker, sockets) in sockets.into_iter().enumerate() {
            let (tx, rx) = watch::channel(routing(&config, worker, &shared, None, &limits));
            routing_tx.push(tx);
            let job = Worker {
                index: worker,
                sockets,
                routing: rx,
                tls: tls.clone(),
                quic: quic.clone(),
                permits: permits.clone(),
                logs: logs.clone(),
                stats: stats.clone(),
                epoch,
                stopped: stopped.clone(),
            };
            threads.push(std::thread::Builder::new().name(format!("fulcrum-worker-{worker}")).spawn(move || {
                match runtime() {
                    Ok(rt) => rt.block_on(job.run()),
                    Err(e) => eprintln!("fulcrum: worker {worker}: cannot start a runtime: {e}"),
                }
            })?);
        }
        let control = Control {
            admin: admin_socket.map(|s| (s, Arc::new(Admin { clusters: clusters_rx.clone(), stats, epoch }))),
            clusters: clusters_rx,
            tls: tls.iter().flatten().cloned().collect(),
            stopped,
        };
        threads.push(std::thread::Builder::new().name("fulcrum-control".into()).spawn(move || match runtime() {
            Ok(rt) => rt.block_on(control.run()),
            Err(e) => eprintln!("fulcrum: control thread: cannot start a runtime: {e}"),
        })?);
        drop(logs);
        threads.extend(log_threads);
        Ok(Proxy {
            listen_addrs,
            admin_addr,
            stop,
            threads,
            epoch,
            config: Mutex::new(config),
            tls,
            clusters: clusters_tx,
            routing: routing_tx,
        })
    }

    /// The bound address of each listener, in configuration order.
    pub fn listen_addrs(&self) -> &[SocketAddr] {
        &self.listen_addrs
    }

    /// The admin listener's address, if configured.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin_addr
    }

    /// The clusters in force.
    pub fn clusters(&self) -> Vec<Arc<SharedCluster>> {
        self.clusters.borrow().clone()
    }

    /// Apply `next` without dropping a connection or a request. Clusters,
    /// routes and a TCP listener's TLS settings may change freely; the rest
    /// of a listener (address, protocol, whether it has TLS, an HTTP/3
    /// listener's TLS, limits), the worker count, the admin address and the
    /// seed need a restart, and a configuration that changes them (or whose
    /// TLS files cannot be used) is refused whole (access logs are part of
    /// a listener).
    pub fn reload(&self, next: Config) -> Result<(), ServeError> {
        let mut config = lock(&self.config);
        let same_listener = |a: &Listener, b: &Listener| {
            a.listen == b.listen
                && a.protocol == b.protocol
                && a.tls.is_some() == b.tls.is_some()
                && (a.protocol != ListenerProtocol::Http3 || a.tls == b.tls)
                && a.max_header_bytes == b.max_header_bytes
                && a.limits == b.limits
                && a.http1_server == b.http1_server
                && a.access_log == b.access_log
                && a.alt_svc == b.alt_svc
                && a.proxy_protocol == b.proxy_protocol
        };
        if next.listeners.len() != config.listeners.len()
            || !next.listeners.iter().zip(&config.listeners).all(|(a, b)| same_listener(a, b))
        {
            return Err(ServeError::NeedsRestart("listeners changed".into()));
        }
        if next.workers != config.workers || next.admin != config.admin || next.seed != config.seed {
            return Err(ServeError::NeedsRestart("workers, admin or seed changed".into()));
        }
        // A TCP listener's TLS is built again (every file read, the CA
        // bundle too) before anything changes; an HTTP/3 listener's QUIC
        // configuration keeps its own, whose certificates are read again.
        let mut new_tls = Vec::new();
        for ((slot, a), b) in self.tls.iter().zip(&next.listeners).zip(&config.listeners) {
            if let (Some(slot), Some(tls)) = (slot, &a.tls) {
                let rebuilt = (a.protocol != ListenerProtocol::Http3).then(|| slot.prepare(tls)).transpose()?;
                new_tls.push((slot, rebuilt, a.tls != b.tls));
            }
        }
        let old = self.clusters.borrow().clone();
        let shared: Vec<Arc<SharedCluster>> = next
            .clusters
            .iter()
            .map(|c| {
                let previous = old.iter().find(|o| o.config.name == c.name);
                SharedCluster::new(c.clone(), self.epoch, previous.map(|p| p.as_ref()))
            })
            .collect();
        let limits = route_limits(&next, self.routing.first().map(|tx| tx.borrow().clone()).as_deref());
        // Every worker's routing is built before any is published, so a
        // reload takes effect on all workers at once, not worker by worker.
        let built: Vec<Arc<Routing>> = (self.routing.iter().enumerate())
            .map(|(worker, tx)| routing(&next, worker, &shared, Some(&tx.borrow().clone()), &limits))
            .collect();
        for (tx, routing) in self.routing.iter().zip(built) {
            tx.send_replace(routing);
        }
        self.clusters.send_replace(shared);
        *config = next;
        // The listeners' certificate files are read again (they were checked
        // with the configuration), or their new settings put in force.
        for (slot, rebuilt, changed) in new_tls {
            match rebuilt {
                Some(next) => slot.install(next, changed),
                None => {
                    slot.certificates().refresh();
                }
            }
        }
        Ok(())
    }

    /// Stop accepting, let requests in flight finish for up to `drain`, and
    /// join every thread.
    pub fn shutdown(self, drain: Duration) {
        let _ = self.stop.send(Some(drain));
        for t in self.threads {
            // Workers give up on connections after `drain`, so this ends.
            let _ = t.join();
        }
    }
}

/// One worker thread's share of the proxy.
struct Worker {
    /// Its number, from 0.
    index: usize,
    sockets: Vec<Bound>,
    routing: watch::Receiver<Arc<Routing>>,
    tls: Vec<Option<Arc<TlsSlot>>>,
    /// Each HTTP/3 listener's QUIC configuration.
    quic: Vec<Option<quinn::ServerConfig>>,
    permits: Vec<Arc<Semaphore>>,
    /// Each listener's access log, if it has one.
    logs: Vec<Option<AccessLog>>,
    stats: Arc<ProxyStats>,
    epoch: Epoch,
    stopped: watch::Receiver<Stop>,
}

impl Worker {
    async fn run(self) {
        // Keep each balancer in step with its cluster's endpoint set, for the
        // routing in force and every routing a reload brings.
        let mut follow = self.routing.clone();
        let mut stopped = self.stopped.clone();
        tokio::spawn(async move {
            loop {
                for c in &follow.borrow_and_update().clusters {
                    tokio::spawn(WorkerCluster::follow_endpoints(Arc::downgrade(c)));
                }
                tokio::select! {
                    _ = stopping(&mut stopped) => return,
                    changed = follow.changed() => if changed.is_err() { return },
                }
            }
        });
        // The worker's parker: its idle HTTP/1.1 connections, without tasks.
        let parker = Parker::new();
        tokio::spawn(tokio::task::unconstrained(parker.clone().run(self.stats.clone(), self.stopped.clone())));
        let graceful = Arc::new(GracefulShutdown::new());
        // hyper's connections are watched by `graceful`; every connection
        // (and HTTP/3's) holds a receiver of `alive` until it ends.
        let (alive, alive_rx) = watch::channel(());
        let mut accept_loops = Vec::new();
        let listeners = self.sockets.into_iter().zip(self.tls).zip(self.permits).zip(self.logs).zip(self.quic);
        for (index, ((((socket, tls), permits), access_log), quic)) in listeners.enumerate() {
            let listener = self.routing.borrow().listeners[index].clone();
            let service = Arc::new(HttpService {
                listener: index,
                routing: self.routing.clone(),
                stats: self.stats.clone(),
                epoch: self.epoch,
                tls: tls.is_some(),
                access_log,
                alt_svc: listener.alt_svc.as_deref().and_then(|a| http::HeaderValue::from_str(a).ok()),
                rng: std::sync::Mutex::new(fulcrum_balance::Rng::new(id_seed(index))),
            });
            let socket = match (socket, quic) {
                (Bound::Tcp(socket), _) => TcpListener::from_std(socket),
                (Bound::Udp(socket), quic) => {
                    let (stats, stopped, alive) = (self.stats.clone(), self.stopped.clone(), alive_rx.clone());
                    match crate::h3::H3Listener::start(socket, quic, permits, stats, stopped, alive) {
                        Ok(h3) => accept_loops.push(tokio::spawn(async move {
                            h3.run(service, &listener.limits, listener.max_header_bytes).await
                        })),
                        Err(e) => eprintln!("fulcrum: listener {}: {e}", listener.listen),
                    }
                    continue;
                }
            };
            let socket = match socket {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("fulcrum: listener {}: {e}", listener.listen);
                    continue;
                }
            };
            let accept = Accept {
                socket,
                permits,
                permits_total: listener.limits.max_connections,
                worker: self.index,
                warn: Warn::new(listener.listen),
                stats: self.stats.clone(),
                stopped: self.stopped.clone(),
                graceful: graceful.clone(),
                alive: alive_rx.clone(),
                parker: parker.clone(),
            };
            accept_loops.push(match listener.protocol {
                ListenerProtocol::Http | ListenerProtocol::Http2 | ListenerProtocol::Http3 => {
                    tokio::spawn(accept.http(service, listener, tls))
                }
                ListenerProtocol::Tcp | ListenerProtocol::TlsPassthrough => tokio::spawn(accept.tcp(service)),
            });
        }
        for a in accept_loops {
            let _ = a.await;
        }
        let drain = self.stopped.borrow().unwrap_or(DEFAULT_DRAIN);
        drop(alive_rx);
        if let Ok(graceful) = Arc::try_unwrap(graceful) {
            let _ = tokio::time::timeout(drain, async { tokio::join!(graceful.shutdown(), alive.closed()) }).await;
        }
    }
}

/// How long an accept loop pauses when the process is out of file
/// descriptors or memory.
const ACCEPT_PAUSE: Duration = Duration::from_millis(50);

/// Whether an accept error means the process or the system is out of
/// something (file descriptors, socket buffers, memory), not that one
/// client went away.
fn out_of_resources(e: &std::io::Error) -> bool {
    const EMFILE: i32 = 24;
    const ENFILE: i32 = 23;
    const ENOBUFS: i32 = 105;
    const ENOMEM: i32 = 12;
    matches!(e.raw_os_error(), Some(EMFILE | ENFILE | ENOBUFS | ENOMEM)) || e.kind() == std::io::ErrorKind::OutOfMemory
}

/// A warning printed at most once per [`Warn::EVERY`] (with the number of
/// times it was suppressed), so that a listener at its limits does not
/// flood the log.
struct Warn {
    listen: SocketAddr,
    last: Option<std::time::Instant>,
    suppressed: u64,
}

impl Warn {
    const EVERY: Duration = Duration::from_secs(10);

    fn new(listen: SocketAddr) -> Self {
        Warn { listen, last: None, suppressed: 0 }
    }

    fn say(&mut self, text: impl FnOnce() -> String) {
        let now = std::time::Instant::now();
        if self.last.is_some_and(|t| now.duration_since(t) < Self::EVERY) {
            self.suppressed += 1;
            return;
        }
        let more = match std::mem::take(&mut self.suppressed) {
            0 => String::new(),
            n => format!(" ({n} more since the last warning)"),
        };
        eprintln!("fulcrum: listener {}: {}{more}", self.listen, text());
        self.last = Some(now);
    }
}

/// One listener's accept loop on one worker.
struct Accept {
    socket: TcpListener,
    permits: Arc<Semaphore>,
    /// The listener's `max_connections`, for the warning.
    permits_total: usize,
    /// The worker this loop runs on.
    worker: usize,
    warn: Warn,
    stats: Arc<ProxyStats>,
    stopped: watch::Receiver<Stop>,
    graceful: Arc<GracefulShutdown>,
    /// Held, through [`Listening`], by every connection: the worker's drain
    /// waits until none is.
    alive: watch::Receiver<()>,
    /// The worker's parker, for idle HTTP/1.1 connections.
    parker: Arc<Parker<Arc<Listening>>>,
}

impl Accept {
    /// The next connection with its slot, or `None` once the proxy stops.
    /// Connections beyond `max_connections` are closed at once; when the
    /// process runs out of file descriptors (or memory) accepting pauses
    /// for a moment, leaving new connections in the listen queue, instead
    /// of failing again at once.
    async fn next(&mut self) -> Option<(tokio::net::TcpStream, SocketAddr, Slot)> {
        loop {
            tokio::select! {
                _ = stopping(&mut self.stopped) => return None,
                accepted = self.socket.accept() => match accepted {
                    Ok((stream, peer)) => {
                        self.stats.connections.fetch_add(1, Relaxed);
                        match self.permits.clone().try_acquire_owned() {
                            Ok(permit) => return Some((stream, peer, Slot::new(permit, self.stats.clone(), self.worker))),
                            Err(_) => {
                                self.stats.rejected_connections.fetch_add(1, Relaxed);
                                self.warn.say(|| format!(
                                    "{} connections open (max_connections): closing new ones", self.permits_total
                                ));
                                drop(stream);
                            }
                        }
                    }
                    Err(e) if out_of_resources(&e) => {
                        self.stats.accept_errors.fetch_add(1, Relaxed);
                        self.warn.say(|| format!("cannot accept: {e}; pausing accepts for {ACCEPT_PAUSE:?} at a time"));
                        tokio::select! {
                            _ = stopping(&mut self.stopped) => return None,
                            () = tokio::time::sleep(ACCEPT_PAUSE) => {}
                        }
                    }
                    // The client gave up before the accept (ECONNABORTED and the like).
                    Err(_) => {}
                },
            }
        }
    }

    async fn http(mut self, service: Arc<HttpService>, listener: Listener, tls: Option<Arc<TlsSlot>>) {
        let limits = &listener.limits;
        let listening = Arc::new(Listening {
            service,
            hyper: HyperServer::new(&listener),
            tls,
            lean: listener.protocol != ListenerProtocol::Http2 && listener.http1_server == Http1Server::Lean,
            h2_only: listener.protocol == ListenerProtocol::Http2,
            limits: Arc::new(ServerLimits {
                max_header_bytes: listener.max_header_bytes,
                max_headers: limits.max_headers,
                header_read_timeout: limits.header_read_timeout,
                idle_timeout: limits.idle_timeout,
                park_after: limits.park_after,
                parking: self.parker.parking().clone(),
            }),
            stopped: self.stopped.clone(),
            _alive: self.alive.clone(),
            parker: self.parker.clone(),
        });
        while let Some((stream, peer, slot)) = self.next().await {
            let _ = stream.set_nodelay(true);
            // Boxed here, as the lean server takes it: the connection's
            // task keeps its arguments for its whole life, so they are small.
            let stream = Box::new(Counted::new(stream, slot));
            tokio::spawn(listening.clone().serve(stream, peer, self.graceful.watcher()));
        }
    }

    /// A TCP or TLS passthrough listener's accept loop.
    async fn tcp(mut self, service: Arc<HttpService>) {
        while let Some((stream, peer, permit)) = self.next().await {
            let service = service.clone();
            tokio::spawn(async move {
                let _permit = permit;
                crate::tcp::serve(service, stream, peer).await;
            });
        }
    }
}

/// What the connections of one HTTP listener on one worker share; each
/// connection's task holds it by one `Arc` rather than a clone of each part.
struct Listening {
    service: Arc<HttpService>,
    hyper: HyperServer,
    tls: Option<Arc<TlsSlot>>,
    /// Whether the lean server serves HTTP/1.1 (otherwise hyper's does).
    lean: bool,
    h2_only: bool,
    limits: Arc<ServerLimits>,
    stopped: watch::Receiver<Stop>,
    /// Held while any of its connections is open: the worker's drain
    /// waits until no receiver is left.
    _alive: watch::Receiver<()>,
    /// The worker's parker, where its idle HTTP/1.1 connections go.
    parker: Arc<Parker<Arc<Listening>>>,
}

/// A parked connection goes back to its listener.
impl Resume for Arc<Listening> {
    fn idle_timeout(&self) -> Duration {
        self.limits.idle_timeout
    }

    fn resume(self, asleep: Asleep) {
        tokio::spawn(self.resumed(asleep));
    }
}

impl Listening {
    /// Serve one client connection until it ends. (An `async` block, not
    /// an `async fn`, which would keep its arguments twice for the
    /// connection's whole life.)
    #[allow(clippy::manual_async_fn)]
    fn serve(
        self: Arc<Self>,
        mut stream: Box<Counted<tokio::net::TcpStream>>,
        peer: SocketAddr,
        watcher: hyper_util::server::graceful::Watcher,
    ) -> impl std::future::Future<Output = ()> + Send {
        async move {
            let Some(mut peer) = self.service.peer(stream.get_mut(), peer).await else { return };
            // On a plain HTTP/2-only listener a second handle on the
            // socket outlives hyper's, for a lingering close.
            let mut spare = None;
            let io: Box<dyn Io> = match &self.tls {
                None if self.h2_only => {
                    let (stream, slot) = stream.into_parts();
                    let shared = Arc::new(stream);
                    spare = Some(shared.clone());
                    Box::new(Counted::new(SharedSocket(shared), slot))
                }
                None => stream,
                Some(tls) => {
                    let acceptor = tls.acceptor();
                    let (stream, slot) = stream.into_parts();
                    // Boxed, like hyper's server below: a connection's task is
                    // as large as its largest state, and it spends its life
                    // idle in the lean server's, not in these.
                    let handshake =
                        tokio::time::timeout(self.limits.header_read_timeout, Box::pin(acceptor.accept(stream)));
                    let Ok(Ok(stream)) = handshake.await else { return };
                    // The peer was made for this connection: nothing else holds it yet.
                    if let Some(peer) = Arc::get_mut(&mut peer) {
                        peer.client_cert = crate::tls::client_cert(stream.get_ref().1).map(Box::new);
                    }
                    Box::new(Counted::new(stream, slot))
                }
            };
            // HTTP/1.1 goes to the lean server unless hyper's is
            // chosen; HTTP/2 (ALPN h2, or the h2c preface) to hyper.
            let io = match self.lean && !io.alpn_h2() {
                true => {
                    let (service, limits, stopped) = (self.service.clone(), self.limits.clone(), self.stopped.clone());
                    let served = crate::h1::server::serve(io, service, peer.clone(), limits, stopped).await;
                    match self.lean_ended(served) {
                        Some(io) => io,
                        None => return,
                    }
                }
                false => io,
            };
            self.spawn_hyper(io, peer, spare, watcher);
        }
    }

    /// Serve a parked connection that woke, in a task of its own. (Only a
    /// connection that has had a request parks, so it does not turn out
    /// to speak HTTP/2.)
    #[allow(clippy::manual_async_fn)]
    fn resumed(self: Arc<Self>, asleep: Asleep) -> impl std::future::Future<Output = ()> + Send {
        async move {
            let (service, limits, stopped) = (self.service.clone(), self.limits.clone(), self.stopped.clone());
            let served = crate::h1::server::resume(asleep, service, limits, stopped).await;
            drop(self.lean_ended(served));
        }
    }

    /// After the lean server: a connection for hyper's HTTP/2 server, or
    /// none (closed, or parked).
    fn lean_ended(self: &Arc<Self>, served: Served) -> Option<Box<dyn Io>> {
        match served {
            Served::Done => None,
            Served::Http2(io, read) => Some(Box::new(Rewind::new(io, read))),
            Served::Parked(asleep) => {
                self.parker.park(asleep, self.clone());
                None
            }
        }
    }

    /// Serve `io` with hyper's HTTP/2 server, in a task of its own, so that
    /// the connection's task, sized for the lean server and the handshake,
    /// ends.
    fn spawn_hyper(
        self: Arc<Self>,
        io: Box<dyn Io>,
        peer: Arc<crate::http::Peer>,
        spare: Option<Arc<tokio::net::TcpStream>>,
        watcher: hyper_util::server::graceful::Watcher,
    ) {
        tokio::spawn(async move {
            let (service, idle) = (self.service.clone(), self.limits.idle_timeout);
            let failed = serve_hyper(io, &self.hyper, service, peer, idle, watcher).await;
            // hyper has dropped its handle: this one is the last.
            if let (true, Some(Ok(spare))) = (failed, spare.map(Arc::try_unwrap)) {
                // Boxed: it holds a read buffer, which every connection's
                // task would otherwise have room for.
                Box::pin(linger(spare)).await;
            }
        });
    }
}

/// The HTTP/2 settings of a listener's servers, on hyper's HTTP/2 server
/// or on its auto server's (two builder types with the same methods).
macro_rules! http2_settings {
    ($builder:expr, $listener:expr) => {
        $builder
            .timer(TokioTimer::new())
            // WebSockets over HTTP/2 (RFC 8441), proxied as HTTP/1.1 Upgrades.
            .enable_connect_protocol()
            .max_concurrent_streams(1024)
            .max_header_list_size(u32::try_from($listener.max_header_bytes).unwrap_or(u32::MAX))
    };
}

/// hyper's servers for one listener: its HTTP/2 server for connections
/// known to speak HTTP/2 (ALPN h2, the h2c preface the lean server saw, an
/// HTTP/2-only listener), and with `http1_server = "hyper"` its auto server,
/// which tells HTTP/1.1 from h2c itself. The HTTP/2 server alone keeps a
/// smaller state per connection than the auto server's, which has room for
/// either protocol.
struct HyperServer {
    h2: hyper::server::conn::http2::Builder<TokioExecutor>,
    auto: Option<auto::Builder<TokioExecutor>>,
}

impl HyperServer {
    fn new(listener: &Listener) -> Self {
        let mut h2 = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
        http2_settings!(h2, listener);
        let h2_only = listener.protocol == ListenerProtocol::Http2;
        let auto = (!h2_only && listener.http1_server == Http1Server::Hyper).then(|| {
            let mut builder = auto::Builder::new(TokioExecutor::new());
            builder
                .http1()
                .timer(TokioTimer::new())
                .header_read_timeout(listener.limits.header_read_timeout)
                .max_buf_size(listener.max_header_bytes);
            // hyper's own limit is the same 100 headers, on an array it keeps
            // inline; a limit set explicitly makes it build and fill a vector of
            // that many slots for every request head it parses.
            if listener.limits.max_headers != HYPER_MAX_HEADERS {
                builder.http1().max_headers(listener.limits.max_headers);
            }
            http2_settings!(builder.http2(), listener);
            builder
        });
        HyperServer { h2, auto }
    }
}

/// Serve `io` with hyper's server until the connection ends; whether it
/// ended in a connection error.
async fn serve_hyper(
    io: Box<dyn Io>,
    server: &HyperServer,
    service: Arc<HttpService>,
    peer: Arc<crate::http::Peer>,
    idle: Duration,
    watcher: hyper_util::server::graceful::Watcher,
) -> bool {
    let stats = service.stats.clone();
    let active = Arc::new(AtomicUsize::new(0));
    let counter = active.clone();
    let svc = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        let service = service.clone();
        let peer = peer.clone();
        let guard = ActiveGuard::new(counter.clone());
        async move {
            let response = service.handle(&peer, req.map(|b| Either::Left(Either::Left(b)))).await;
            drop(guard);
            response
        }
    });
    // Connection errors (malformed requests, resets) are the client's;
    // hyper has already answered what can be answered, and those answers
    // are counted.
    let h2 = io.alpn_h2();
    let io = TokioIo::new(IdleTimeout::new(io, idle, active));
    // The auto server's connection, which has room for either protocol,
    // is boxed: inline it would double the task of every HTTP/2
    // connection (1.7 KiB for HTTP/2 alone, 3.6 KiB with room for both).
    let served: Result<(), Box<dyn std::error::Error + Send + Sync>> = match &server.auto {
        Some(auto) if !h2 => {
            Box::pin(async move { watcher.watch(auto.serve_connection_with_upgrades(io, svc).into_owned()).await })
                .await
        }
        _ => watcher.watch(server.h2.serve_connection(io, svc)).await.map_err(Into::into),
    };
    match served {
        Ok(()) => false,
        Err(e) => {
            stats.count_connection_error(&*e);
            true
        }
    }
}

/// Close a connection that hyper gave up on (a bad HTTP/2 preface, a
/// protocol error) the way RFC 9113 §3.4 and h2spec expect: send FIN, then
/// read and discard what the client still sends, for at most a second and
/// 64 KiB, so that closing with unread data does not turn into a reset (a
/// client would see the reset, not the close, and maybe not hyper's GOAWAY).
async fn linger(mut spare: tokio::net::TcpStream) {
    use tokio::io::AsyncReadExt;
    let _ = socket2::SockRef::from(&spare).shutdown(std::net::Shutdown::Write);
    let mut buf = [0u8; 4096];
    let mut left: usize = 64 * 1024;
    let drain = async {
        while left > 0 {
            match spare.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => left = left.saturating_sub(n),
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), drain).await;
}

/// Counts a request in flight on its connection while it lives.
struct ActiveGuard(Arc<AtomicUsize>);

impl ActiveGuard {
    fn new(counter: Arc<AtomicUsize>) -> Self {
        counter.fetch_add(1, Relaxed);
        ActiveGuard(counter)
    }
}

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Relaxed);
    }
}

/// The control thread: admin listener, DNS re-resolution, health checks
/// and outlier detection for the clusters in force.
struct Control {
    admin: Option<(std::net::TcpListener, Arc<Admin>)>,
    clusters: watch::Receiver<Vec<Arc<SharedCluster>>>,
    /// The TLS listeners' certificates, watched for changes of their files.
    tls: Vec<Arc<TlsSlot>>,
    stopped: watch::Receiver<Stop>,
}

impl Control {
    /// Start the per-cluster tasks of `clusters`.
    fn spawn_cluster_tasks(&self, clusters: &[Arc<SharedCluster>]) -> Vec<tokio::task::JoinHandle<()>> {
        let mut tasks = Vec::new();
        for (i, c) in clusters.iter().enumerate() {
            tasks.push(tokio::spawn(c.clone().manage(self.stopped.clone())));
            tasks.push(tokio::spawn(crate::health::run(c.clone(), self.stopped.clone(), i as u64)));
            let (c, mut stopped) = (c.clone(), self.stopped.clone());
            tasks.push(tokio::spawn(async move {
                loop {
                    tokio::select! {
                        _ = stopping(&mut stopped) => return,
                        _ = tokio::time::sleep(c.config.resolve_interval) => c.resolve().await,
                    }
                }
            }));
        }
        tasks
    }

    async fn run(mut self) {
        let admin = self.admin.take();
        let mut clusters = self.clusters.clone();
        let mut stopped = self.stopped.clone();
        let mut tasks = self.spawn_cluster_tasks(&clusters.borrow_and_update());
        for t in &self.tls {
            tokio::spawn(t.clone().watch(self.stopped.clone()));
        }
        let supervisor = async {
            loop {
                tokio::select! {
                    _ = stopping(&mut stopped) => return,
                    changed = clusters.changed() => {
                        if changed.is_err() { return }
                        // A reload: the replaced clusters' tasks end, the new ones start.
                        for t in tasks.drain(..) {
                            t.abort();
                        }
                        tasks = self.spawn_cluster_tasks(&clusters.borrow_and_update());
                    }
                }
            }
        };
        let mut stopped = self.stopped.clone();
        tokio::join!(supervisor, async move {
            let Some((socket, admin)) = admin else { return };
            let socket = match TcpListener::from_std(socket) {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("fulcrum: admin listener: {e}");
                    return;
                }
            };
            loop {
                tokio::select! {
                    _ = stopping(&mut stopped) => return,
                    accepted = socket.accept() => {
                        let stream = match accepted {
                            Ok((stream, _)) => stream,
                            Err(e) if out_of_resources(&e) => {
                                tokio::time::sleep(ACCEPT_PAUSE).await;
                                continue;
                            }
                            Err(_) => continue,
                        };
                        let admin = admin.clone();
                        tokio::spawn(async move {
                            let svc = service_fn(move |req| {
                                let admin = admin.clone();
                                async move { admin.handle(req).await }
                            });
                            let conn = hyper::server::conn::http1::Builder::new();
                            let _ = conn.serve_connection(TokioIo::new(stream), svc).await;
                        });
                    }
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A worker's service for the first listener of `text`.
    fn service(text: &str) -> (Arc<HttpService>, Listener) {
        let config = Config::parse(std::path::Path::new("test.toml"), text).unwrap();
        let epoch = Epoch::new();
        let shared: Vec<_> = config.clusters.iter().cloned().map(|c| SharedCluster::new(c, epoch, None)).collect();
        let (_tx, rx) = watch::channel(routing(&config, 0, &shared, None, &route_limits(&config, None)));
        let stats = Arc::new(ProxyStats::with_workers(1));
        let rng = std::sync::Mutex::new(fulcrum_balance::Rng::new(0));
        let service =
            HttpService { listener: 0, routing: rx, stats, epoch, tls: false, access_log: None, alt_svc: None, rng };
        (Arc::new(service), config.listeners[0].clone())
    }

    /// What an idle HTTP/1.1 connection holds, by part (printed with
    /// `--nocapture`): its task's future (the whole connection's, which
    /// waits idle inside the lean server's), and the heap parts beside it.
    /// The serving loop, with the request path inline, is boxed while bytes
    /// are in hand, so neither is in the idle task.
    #[tokio::test]
    async fn an_idle_connection_holds_a_small_future() {
        use std::mem::size_of;
        let (service, listener) = service(
            "[[listener]]\nlisten = \"127.0.0.1:0\"\nroutes = [{ cluster = \"a\" }]\n\
             [[cluster]]\nname = \"a\"\nendpoints = [\"127.0.0.1:1\"]\n",
        );
        let (_stop, stopped) = watch::channel(None);
        let (_alive, alive) = watch::channel(());
        let limits = Arc::new(ServerLimits {
            max_header_bytes: listener.max_header_bytes,
            max_headers: listener.limits.max_headers,
            header_read_timeout: listener.limits.header_read_timeout,
            idle_timeout: listener.limits.idle_timeout,
            park_after: listener.limits.park_after,
            parking: Arc::default(),
        });
        let listening = Arc::new(Listening {
            service: service.clone(),
            hyper: HyperServer::new(&listener),
            tls: None,
            lean: true,
            h2_only: false,
            limits: limits.clone(),
            stopped: stopped.clone(),
            _alive: alive,
            parker: Parker::new(),
        });
        let socket = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let stream = tokio::net::TcpStream::connect(socket.local_addr().unwrap()).await.unwrap();
        let stats = Arc::new(ProxyStats::with_workers(1));
        let slot = Slot::new(Arc::new(Semaphore::new(1)).try_acquire_owned().unwrap(), stats, 0);
        let graceful = GracefulShutdown::new();
        let stream = Box::new(Counted::new(stream, slot));
        let task =
            std::mem::size_of_val(&listening.clone().serve(stream, "127.0.0.1:9".parse().unwrap(), graceful.watcher()));
        let io = || -> Box<dyn Io> { Box::new(tokio::io::duplex(64).0) };
        let peer = Arc::new(crate::http::Peer::new("127.0.0.1:9".parse().unwrap()));
        let lean = std::mem::size_of_val(&crate::h1::server::serve(
            io(),
            service.clone(),
            peer.clone(),
            limits.clone(),
            stopped,
        ));
        let conn = crate::h1::conn::Inbound::open(io(), Arc::default());
        let busy = crate::h1::server::busy_future_size(&conn, &service, &peer, &limits);
        let body = crate::h1::conn::H1Body::new(conn, crate::h1::parse::Framing::Length(0));
        let request = std::mem::size_of_val(&service.handle(&peer, hyper::Request::new(Either::Right(body))));
        eprintln!(
            "connection task future: {task} bytes, of which the lean server's idle future {lean}; boxed while \
             bytes are in hand: serving loop {busy}, with the request path {request} inline; beside the task: peer {}, \
             socket {}, timer {}, connection state {}",
            size_of::<crate::http::Peer>(),
            size_of::<Counted<tokio::net::TcpStream>>(),
            size_of::<tokio::time::Sleep>(),
            size_of::<crate::h1::conn::Conn>(),
        );
        // The same in debug and release builds. tokio pads a task's record
        // (about 100 bytes and the future) to a multiple of 128 bytes: up
        // to 408 it takes 512 (416: 640). With the serving loop or the PROXY protocol
        // reader inline, or the accepted socket and its slot kept as the
        // task's arguments, it would be over 1 KiB.
        assert!(task <= 408, "the connection's task future is {task} bytes");
        assert!(lean < task && busy > 2 * lean, "lean server {lean} bytes, serving loop {busy}: box less?");
        // The request path runs inline in the serving loop's kept box: boxing
        // it per request cost an allocation and a copy of its state.
        assert!(busy > request, "serving loop {busy} bytes, request path {request}: boxed again?");
    }
}

//! Starting and stopping the proxy: listeners, worker threads, the control
//! thread.
//!
//! Every listener is bound once per worker with `SO_REUSEPORT`, so the
//! kernel spreads connections over the workers and no accept lock is
//! shared. Each worker is a thread running a single-threaded tokio runtime
//! with its own balancers and upstream connection pools
//! ([`WorkerCluster`](crate::cluster::WorkerCluster)); a connection stays on
//! the worker that accepted it. A control thread serves the admin listener
//! and re-resolves endpoint names. [`Proxy::shutdown`] stops accepting,
//! lets connections finish their requests (up to a drain timeout) and joins
//! every thread.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use socket2::{Domain, Protocol, Socket, Type};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::admin::Admin;
use crate::cluster::{SharedCluster, WorkerCluster};
use crate::config::{Config, Listener, ListenerProtocol};
use crate::http::{upstream_client, Epoch, HttpService};
use crate::metrics::ProxyStats;

/// Why the proxy could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// A listener address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// A TLS certificate or key could not be used.
    #[error("TLS file {}: {message}", path.display())]
    Tls {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// A thread or runtime could not be started.
    #[error("cannot start: {0}")]
    Runtime(#[from] std::io::Error),
}

/// A running proxy.
pub struct Proxy {
    listen_addrs: Vec<SocketAddr>,
    admin_addr: Option<SocketAddr>,
    stop: watch::Sender<Stop>,
    threads: Vec<JoinHandle<()>>,
    clusters: Vec<Arc<SharedCluster>>,
}

/// How long a shutdown waits for requests in flight, unless told otherwise.
pub const DEFAULT_DRAIN: Duration = Duration::from_secs(10);

/// `None` while running; once stopping, how long to drain.
type Stop = Option<Duration>;

/// Resolves once the proxy is told to stop.
pub(crate) async fn stopping(rx: &mut watch::Receiver<Stop>) {
    // An error means the sender is gone, which is a stop too.
    let _ = rx.wait_for(Option::is_some).await.map(|_| ());
}

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

/// Bind `addr` once per worker; port 0 is resolved by the first bind.
fn bind_per_worker(addr: SocketAddr, workers: usize) -> Result<(SocketAddr, Vec<std::net::TcpListener>), ServeError> {
    let first = bind(addr)?;
    let actual = first.local_addr()?;
    let mut all = vec![first];
    for _ in 1..workers {
        all.push(bind(actual)?);
    }
    Ok((actual, all))
}

fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread().enable_all().build()
}

impl Proxy {
    /// Bind every listener and start the workers. Returns once the proxy
    /// accepts connections.
    pub fn start(config: Config) -> Result<Proxy, ServeError> {
        let epoch = Epoch::new();
        let stats = Arc::new(ProxyStats::default());
        let clusters: Vec<Arc<SharedCluster>> =
            config.clusters.iter().cloned().map(|c| SharedCluster::new(c, epoch)).collect();
        let tls: Vec<_> = config
            .listeners
            .iter()
            .map(|l| l.tls.as_ref().map(crate::tls::acceptor).transpose())
            .collect::<Result<_, _>>()?;

        let mut listen_addrs = Vec::new();
        // sockets[worker][listener]
        let mut sockets: Vec<Vec<std::net::TcpListener>> = (0..config.workers).map(|_| Vec::new()).collect();
        for l in &config.listeners {
            let (addr, per_worker) = bind_per_worker(l.listen, config.workers)?;
            listen_addrs.push(addr);
            for (w, s) in per_worker.into_iter().enumerate() {
                sockets[w].push(s);
            }
        }
        let admin_socket = config.admin.map(bind).transpose()?;
        let admin_addr = admin_socket.as_ref().map(|s| s.local_addr()).transpose()?;

        let (stop, stopped) = watch::channel(None);
        let mut threads = Vec::new();
        for (worker, sockets) in sockets.into_iter().enumerate() {
            let seed = config.seed.wrapping_add(worker as u64);
            let worker_clusters: Vec<Arc<WorkerCluster>> = clusters
                .iter()
                .enumerate()
                .map(|(i, c)| WorkerCluster::new(c.clone(), seed ^ ((i as u64) << 32)))
                .collect();
            let job = Worker {
                listeners: config.listeners.clone(),
                sockets,
                clusters: worker_clusters,
                tls: tls.clone(),
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
            admin: admin_socket.map(|s| (s, Arc::new(Admin { clusters: clusters.clone(), stats, epoch }))),
            clusters: clusters.clone(),
            stopped,
        };
        threads.push(std::thread::Builder::new().name("fulcrum-control".into()).spawn(move || match runtime() {
            Ok(rt) => rt.block_on(control.run()),
            Err(e) => eprintln!("fulcrum: control thread: cannot start a runtime: {e}"),
        })?);
        Ok(Proxy { listen_addrs, admin_addr, stop, threads, clusters })
    }

    /// The bound address of each listener, in configuration order.
    pub fn listen_addrs(&self) -> &[SocketAddr] {
        &self.listen_addrs
    }

    /// The admin listener's address, if configured.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin_addr
    }

    /// The clusters, for inspection.
    pub fn clusters(&self) -> &[Arc<SharedCluster>] {
        &self.clusters
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
    listeners: Vec<Listener>,
    sockets: Vec<std::net::TcpListener>,
    clusters: Vec<Arc<WorkerCluster>>,
    tls: Vec<Option<tokio_rustls::TlsAcceptor>>,
    stats: Arc<ProxyStats>,
    epoch: Epoch,
    stopped: watch::Receiver<Stop>,
}

impl Worker {
    async fn run(self) {
        for c in &self.clusters {
            tokio::spawn(c.clone().follow_endpoints());
        }
        let clients: Vec<_> = self.clusters.iter().map(|c| upstream_client(&c.shared.config)).collect();
        let graceful = Arc::new(GracefulShutdown::new());
        let mut accept_loops = Vec::new();
        for ((listener, socket), tls) in self.listeners.into_iter().zip(self.sockets).zip(self.tls) {
            let socket = match TcpListener::from_std(socket) {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("fulcrum: listener {}: {e}", listener.listen);
                    continue;
                }
            };
            let accept = Accept {
                socket,
                tls,
                stats: self.stats.clone(),
                epoch: self.epoch,
                stopped: self.stopped.clone(),
                graceful: graceful.clone(),
            };
            accept_loops.push(match listener.protocol {
                ListenerProtocol::Http => {
                    let service = Arc::new(HttpService {
                        max_header_bytes: listener.max_header_bytes,
                        tls: accept.tls.is_some(),
                        listener,
                        clusters: self.clusters.clone(),
                        clients: clients.clone(),
                        stats: self.stats.clone(),
                        epoch: self.epoch,
                    });
                    tokio::spawn(accept.http(service))
                }
                ListenerProtocol::Tcp => {
                    let cluster = self.clusters[listener.cluster.unwrap_or(0)].clone();
                    tokio::spawn(accept.tcp(cluster))
                }
            });
        }
        for a in accept_loops {
            let _ = a.await;
        }
        let drain = self.stopped.borrow().unwrap_or(DEFAULT_DRAIN);
        if let Ok(graceful) = Arc::try_unwrap(graceful) {
            let _ = tokio::time::timeout(drain, graceful.shutdown()).await;
        }
    }
}

/// One listener's accept loop on one worker.
struct Accept {
    socket: TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    stats: Arc<ProxyStats>,
    epoch: Epoch,
    stopped: watch::Receiver<Stop>,
    graceful: Arc<GracefulShutdown>,
}

impl Accept {
    /// The next connection, or `None` once the proxy stops.
    async fn next(&mut self) -> Option<(tokio::net::TcpStream, SocketAddr)> {
        loop {
            tokio::select! {
                _ = stopping(&mut self.stopped) => return None,
                accepted = self.socket.accept() => match accepted {
                    Ok(c) => {
                        self.stats.connections.fetch_add(1, Relaxed);
                        return Some(c);
                    }
                    // Out of file descriptors and the like: back off instead of spinning.
                    Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
                },
            }
        }
    }

    async fn http(mut self, service: Arc<HttpService>) {
        let mut builder = auto::Builder::new(TokioExecutor::new());
        builder
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(Duration::from_secs(30))
            .max_buf_size(service.max_header_bytes);
        builder.http2().timer(TokioTimer::new()).max_concurrent_streams(1024);
        let builder = Arc::new(builder);
        while let Some((stream, peer)) = self.next().await {
            let _ = stream.set_nodelay(true);
            let service = service.clone();
            let builder = builder.clone();
            let tls = self.tls.clone();
            let watcher = self.graceful.watcher();
            tokio::spawn(async move {
                let svc = service_fn(move |req| {
                    let service = service.clone();
                    async move { service.handle(peer, req).await }
                });
                // Connection errors (malformed requests, resets) are the
                // client's; hyper has already answered what can be answered.
                match tls {
                    None => {
                        let conn = builder.serve_connection(TokioIo::new(stream), svc);
                        let _ = watcher.watch(conn.into_owned()).await;
                    }
                    Some(acceptor) => {
                        let Ok(Ok(stream)) =
                            tokio::time::timeout(Duration::from_secs(10), acceptor.accept(stream)).await
                        else {
                            return;
                        };
                        let conn = builder.serve_connection(TokioIo::new(stream), svc);
                        let _ = watcher.watch(conn.into_owned()).await;
                    }
                }
            });
        }
    }

    async fn tcp(mut self, cluster: Arc<WorkerCluster>) {
        while let Some((stream, peer)) = self.next().await {
            tokio::spawn(crate::tcp::proxy(cluster.clone(), self.epoch, stream, peer));
        }
    }
}

/// The control thread: admin listener and DNS re-resolution.
struct Control {
    admin: Option<(std::net::TcpListener, Arc<Admin>)>,
    clusters: Vec<Arc<SharedCluster>>,
    stopped: watch::Receiver<Stop>,
}

impl Control {
    async fn run(mut self) {
        for (i, c) in self.clusters.iter().enumerate() {
            tokio::spawn(c.clone().manage(self.stopped.clone()));
            tokio::spawn(crate::health::run(c.clone(), self.stopped.clone(), i as u64));
        }
        for c in self.clusters.clone() {
            let mut stopped = self.stopped.clone();
            tokio::spawn(async move {
                loop {
                    tokio::select! {
                        _ = stopping(&mut stopped) => return,
                        _ = tokio::time::sleep(c.config.resolve_interval) => c.resolve().await,
                    }
                }
            });
        }
        let Some((socket, admin)) = self.admin.take() else {
            stopping(&mut self.stopped).await;
            return;
        };
        let socket = match TcpListener::from_std(socket) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("fulcrum: admin listener: {e}");
                return;
            }
        };
        loop {
            tokio::select! {
                _ = stopping(&mut self.stopped) => return,
                accepted = socket.accept() => {
                    let Ok((stream, _)) = accepted else { continue };
                    let admin = admin.clone();
                    tokio::spawn(async move {
                        let svc = service_fn(move |req| {
                            let admin = admin.clone();
                            async move { admin.handle(req).await }
                        });
                        let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
                    });
                }
            }
        }
    }
}

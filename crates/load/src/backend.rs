//! Test upstreams: HTTP servers that answer after a drawn service time.
//!
//! [`Backends::start`] binds every [`BackendSpec`] of a [`BackendsConfig`]
//! (on port 0 or given addresses) and serves them all from one tokio runtime
//! on a thread of its own, so sync code, tests and other runtimes can use
//! them alike. Each connection speaks HTTP/1.1 or h2c (hyper-util's auto
//! builder tells them apart by the preface). Every request, whatever its
//! method, has its body read and thrown away, then waits its service time
//! (a [`Dist`]), then gets a status from the [`StatusMix`], a body of
//! `body_bytes` zeros and the header `x-fulcrum-backend: <name>`, so whoever
//! sent it can count who answered. An echo backend ([`BackendSpec::echo`])
//! answers instead with the request it received as JSON ([`echo_body`]), so
//! a test can see what a proxy sent upstream.
//!
//! A running [`Backend`] can be changed: [`Backend::set_delay`],
//! [`Backend::set_status`], and [`Backend::pause`], which holds every
//! request that arrives for a while, like a stop-the-world pause. It counts
//! what it has answered ([`Backend::served`]).
//!
//! Service times are kept by [`crate::timer`], not tokio's millisecond wheel.

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use fulcrum_balance::Rng;
use http::{HeaderValue, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::dist::{Dist, StatusMix};
use crate::timer::{Timer, TimerHandle};

/// The response header that names the backend that answered.
pub const BACKEND_HEADER: &str = "x-fulcrum-backend";

/// How long [`Backends::shutdown`] lets requests in flight finish.
const DRAIN: Duration = Duration::from_secs(1);

/// One backend to start.
#[derive(Debug, Clone)]
pub struct BackendSpec {
    /// The value of `x-fulcrum-backend`; `None` means the backend's index.
    pub name: Option<String>,
    /// Where to listen; port 0 picks a free port.
    pub listen: SocketAddr,
    /// Service time of each request.
    pub delay: Dist,
    /// Status codes of the responses.
    pub status: StatusMix,
    /// Size of every response body.
    pub body_bytes: usize,
    /// Answer with the request received, as JSON ([`echo_body`]), rather
    /// than `body_bytes` zeros.
    pub echo: bool,
    /// Requests served at once (`None`: any number); the others wait, first
    /// come first served, and their service time starts when a slot frees.
    pub concurrency: Option<u32>,
}

impl Default for BackendSpec {
    fn default() -> Self {
        BackendSpec {
            name: None,
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            delay: Dist::ZERO,
            status: StatusMix::default(),
            body_bytes: 0,
            echo: false,
            concurrency: None,
        }
    }
}

impl BackendSpec {
    /// A backend on a free loopback port answering `200` after `delay`.
    pub fn with_delay(delay: Dist) -> BackendSpec {
        BackendSpec { delay, ..BackendSpec::default() }
    }
}

/// A set of backends to start together.
#[derive(Debug, Clone)]
pub struct BackendsConfig {
    /// The backends; `x-fulcrum-backend` defaults to their index here.
    pub backends: Vec<BackendSpec>,
    /// Seeds every backend's random delays and status codes.
    pub seed: u64,
    /// Threads of the runtime serving them all.
    pub threads: usize,
}

impl BackendsConfig {
    /// Loopback backends on free ports answering `200` after fixed delays,
    /// one per delay: the demo's ten are nine times 5 ms and one 50 ms.
    pub fn fixed_delays(delays: &[Duration]) -> BackendsConfig {
        let backends = delays.iter().map(|&d| BackendSpec::with_delay(Dist::fixed(d))).collect();
        BackendsConfig { backends, seed: 0, threads: 1 }
    }
}

/// A running backend: its counters and the knobs to change it.
#[derive(Debug)]
pub struct Backend {
    name: String,
    addr: SocketAddr,
    header: HeaderValue,
    body: Bytes,
    echo: bool,
    served: AtomicU64,
    behaviour: Mutex<Behaviour>,
    /// The service slots, when the concurrency is limited (a fair semaphore:
    /// waiters get slots in arrival order).
    slots: Option<tokio::sync::Semaphore>,
}

#[derive(Debug)]
struct Behaviour {
    delay: Dist,
    status: StatusMix,
    paused_until: Option<Instant>,
    rng: Rng,
}

impl Backend {
    /// The name it sends in `x-fulcrum-backend`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Responses sent so far.
    pub fn served(&self) -> u64 {
        self.served.load(Relaxed)
    }

    /// Use this service time for requests from now on.
    pub fn set_delay(&self, delay: Dist) {
        self.behaviour().delay = delay;
    }

    /// Answer with this status mix from now on.
    pub fn set_status(&self, status: StatusMix) {
        self.behaviour().status = status;
    }

    /// Hold every request that arrives in the next `pause` until it is over
    /// (then add its service time), as a process stopped by a long GC would.
    pub fn pause(&self, pause: Duration) {
        self.behaviour().paused_until = Some(Instant::now() + pause);
    }

    /// Nothing in `Behaviour` can be left half-updated, so a poisoned lock is
    /// as good as any.
    fn behaviour(&self) -> MutexGuard<'_, Behaviour> {
        self.behaviour.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// When to answer a request that arrived at `arrived`, and with what.
    fn draw(&self, arrived: Instant) -> (Instant, StatusCode) {
        let mut b = self.behaviour();
        let Behaviour { delay, status, paused_until, rng } = &mut *b;
        let start = paused_until.map_or(arrived, |p| p.max(arrived));
        (start + delay.sample_duration(rng), status.sample(rng))
    }

    async fn answer(&self, timer: &TimerHandle, req: Request<Incoming>) -> Response<Full<Bytes>> {
        let mut arrived = Instant::now();
        let (head, mut body) = req.into_parts();
        // Read the request body to its end so the connection stays usable.
        let mut received = 0;
        while let Some(frame) = body.frame().await {
            match frame {
                Ok(f) => received += f.data_ref().map_or(0, |d| d.len()),
                Err(_) => break,
            }
        }
        // Held until the response is made; the semaphore is never closed.
        let _slot = match &self.slots {
            Some(slots) => {
                let slot = slots.acquire().await.ok();
                arrived = Instant::now();
                slot
            }
            None => None,
        };
        let (due, status) = self.draw(arrived);
        timer.sleep_until(due).await;
        self.served.fetch_add(1, Relaxed);
        let body = if self.echo { Bytes::from(echo_body(&head, received, &self.name)) } else { self.body.clone() };
        let mut response = Response::new(Full::new(body));
        *response.status_mut() = status;
        response.headers_mut().insert(BACKEND_HEADER, self.header.clone());
        if self.echo {
            response.headers_mut().insert(http::header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        }
        response
    }
}

/// What an echo backend answers: the request it received as one JSON
/// object, `{"method", "path" (with the query), "authority" (the target's,
/// else `Host`), "version", "headers", "body_bytes", "backend"}`. `headers` maps each lowercase name to its
/// value; a name sent more than once has its values joined with `", "`.
/// Values that are not UTF-8 are read lossily.
pub fn echo_body(head: &http::request::Parts, body_bytes: usize, backend: &str) -> Vec<u8> {
    let mut headers = serde_json::Map::new();
    for (name, value) in &head.headers {
        let value = String::from_utf8_lossy(value.as_bytes());
        match headers.get_mut(name.as_str()) {
            Some(serde_json::Value::String(prior)) => {
                prior.push_str(", ");
                prior.push_str(&value);
            }
            _ => {
                headers.insert(name.as_str().to_string(), value.into_owned().into());
            }
        }
    }
    let path = head.uri.path_and_query().map_or_else(|| head.uri.path().to_string(), |p| p.as_str().to_string());
    let authority = match head.uri.authority() {
        Some(a) => Some(a.as_str().to_string()),
        None => head.headers.get(http::header::HOST).map(|h| String::from_utf8_lossy(h.as_bytes()).into_owned()),
    };
    let echo = serde_json::json!({
        "method": head.method.as_str(),
        "path": path,
        "authority": authority,
        "version": format!("{:?}", head.version),
        "headers": headers,
        "body_bytes": body_bytes,
        "backend": backend,
    });
    echo.to_string().into_bytes()
}

/// Backends serving on a thread of their own until [`Backends::shutdown`]
/// or drop.
pub struct Backends {
    backends: Vec<Arc<Backend>>,
    stop: watch::Sender<bool>,
    thread: Option<JoinHandle<()>>,
    // Dropped after the thread has ended, so no service time is cut short.
    _timer: Timer,
}

impl std::fmt::Debug for Backends {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backends").field("backends", &self.backends).finish_non_exhaustive()
    }
}

impl Backends {
    /// Bind every backend and start serving. Fails if an address cannot be
    /// bound (the error names it) or a name is not a valid header value.
    pub fn start(config: BackendsConfig) -> io::Result<Backends> {
        let mut seeds = Rng::new(config.seed);
        let mut listeners = Vec::with_capacity(config.backends.len());
        let mut backends = Vec::with_capacity(config.backends.len());
        for (i, spec) in config.backends.into_iter().enumerate() {
            let listener = bind(spec.listen).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", spec.listen)))?;
            let name = spec.name.unwrap_or_else(|| i.to_string());
            let header = HeaderValue::from_str(&name).map_err(|_| {
                io::Error::new(io::ErrorKind::InvalidInput, format!("backend name {name:?} is not a header value"))
            })?;
            backends.push(Arc::new(Backend {
                name,
                addr: listener.local_addr()?,
                header,
                body: Bytes::from(vec![0u8; spec.body_bytes]),
                echo: spec.echo,
                served: AtomicU64::new(0),
                slots: spec.concurrency.map(|n| tokio::sync::Semaphore::new(n.max(1) as usize)),
                behaviour: Mutex::new(Behaviour {
                    delay: spec.delay.clone(),
                    status: spec.status,
                    paused_until: None,
                    rng: seeds.fork(),
                }),
            }));
            listeners.push(listener);
        }
        let runtime = match config.threads {
            0 | 1 => tokio::runtime::Builder::new_current_thread().enable_all().build()?,
            n => tokio::runtime::Builder::new_multi_thread().worker_threads(n).enable_all().build()?,
        };
        let timer = Timer::start("fulcrum-backend-timer")?;
        let (stop, stopped) = watch::channel(false);
        let served = backends.clone();
        let handle = timer.handle();
        let thread = std::thread::Builder::new()
            .name("fulcrum-backends".into())
            .spawn(move || runtime.block_on(serve_all(served, listeners, handle, stopped)))?;
        Ok(Backends { backends, stop, thread: Some(thread), _timer: timer })
    }

    /// The backends, in the order of the configuration.
    pub fn backends(&self) -> &[Arc<Backend>] {
        &self.backends
    }

    /// Their addresses, in order.
    pub fn addrs(&self) -> Vec<SocketAddr> {
        self.backends.iter().map(|b| b.addr).collect()
    }

    /// Responses each has sent so far, in order.
    pub fn served(&self) -> Vec<u64> {
        self.backends.iter().map(|b| b.served()).collect()
    }

    /// Stop accepting, let requests in flight finish (for up to a second),
    /// and wait for the serving thread to end.
    pub fn shutdown(mut self) {
        self.stop_and_join();
    }

    fn stop_and_join(&mut self) {
        let _ = self.stop.send(true);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Backends {
    fn drop(&mut self) {
        self.stop_and_join();
    }
}

/// A listening socket with a long accept queue: a load generator opening
/// hundreds of connections at once must not overflow the default 128 and
/// wait a second for SYN retransmission.
fn bind(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(4096)?;
    Ok(socket.into())
}

async fn serve_all(
    backends: Vec<Arc<Backend>>,
    listeners: Vec<std::net::TcpListener>,
    timer: TimerHandle,
    stopped: watch::Receiver<bool>,
) {
    let graceful = Arc::new(GracefulShutdown::new());
    let mut accepts = Vec::new();
    for (backend, listener) in backends.into_iter().zip(listeners) {
        match TcpListener::from_std(listener) {
            Ok(listener) => {
                accepts.push(tokio::spawn(accept(backend, listener, timer.clone(), stopped.clone(), graceful.clone())))
            }
            Err(e) => eprintln!("fulcrum backend {}: {e}", backend.addr),
        }
    }
    for a in accepts {
        let _ = a.await;
    }
    if let Ok(graceful) = Arc::try_unwrap(graceful) {
        let _ = tokio::time::timeout(DRAIN, graceful.shutdown()).await;
    }
}

async fn accept(
    backend: Arc<Backend>,
    listener: TcpListener,
    timer: TimerHandle,
    mut stopped: watch::Receiver<bool>,
    graceful: Arc<GracefulShutdown>,
) {
    let builder = Arc::new(auto::Builder::new(TokioExecutor::new()));
    loop {
        let stream = tokio::select! {
            _ = stopped.wait_for(|&s| s) => return,
            accepted = listener.accept() => accepted,
        };
        let Ok((stream, _)) = stream else {
            // Out of file descriptors and the like: back off, do not spin.
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let _ = stream.set_nodelay(true);
        let (backend, timer, builder) = (backend.clone(), timer.clone(), builder.clone());
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let (backend, timer) = (backend.clone(), timer.clone());
                async move { Ok::<_, Infallible>(backend.answer(&timer, req).await) }
            });
            // A client that resets or sends garbage only ends its own connection.
            let _ = watcher.watch(builder.serve_connection(TokioIo::new(stream), service).into_owned()).await;
        });
    }
}

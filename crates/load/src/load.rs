//! The HTTP load generator: open loop, closed loop and the clients pattern.
//!
//! A run is described by a [`LoadConfig`] and driven by [`run`] (blocking,
//! on a runtime of its own) or [`run_async`] (on the caller's runtime). A
//! [`Control`] shows live totals and stops a run early. The result is a
//! [`Report`].
//!
//! **Open loop** ([`Pattern::OpenLoop`], and each client of
//! [`Pattern::Clients`]) follows wrk2 (Gil Tene's fix for coordinated
//! omission): request `k` is *meant* to leave at `start + k·interval`, and
//! its latency is measured from that instant, not from when a connection was
//! free to send it. A scheduler puts the intended times on a lane's queue as
//! they come due; workers, each with one connection, take them in order. A
//! lane opens another worker whenever a send is due and none is idle, up to
//! its connection limit; past that, sends wait in the queue and the wait
//! counts in their latency. A server that stalls therefore shows its stall
//! in every request that should have been sent meanwhile.
//!
//! **Closed loop** ([`Pattern::ClosedLoop`]): a fixed set of workers send
//! back to back; latency counts from the actual send.
//!
//! Every request, including its connection set-up, has until its intended
//! time plus the timeout to finish, so a run ends at most one timeout after
//! its last intended send.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;

use crate::client::{Conn, Pools, Protocol, Target};
use crate::report::{Counters, ErrorKind, Recorder, Report};
use crate::timer::{Timer, TimerHandle};

/// Why a run could not start.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The configuration is not usable (URL, header, rate, bounds …).
    #[error("{0}")]
    Config(String),
    /// The target's host name did not resolve.
    #[error("cannot resolve {0}")]
    Resolve(String),
    /// Threads or the runtime could not be created.
    #[error("cannot start the load generator: {0}")]
    Io(#[from] std::io::Error),
}

/// How requests are sent.
#[derive(Debug, Clone, PartialEq)]
pub enum Pattern {
    /// A fixed rate in requests per second, latency from the intended send
    /// time.
    OpenLoop {
        /// Requests per second.
        rate: f64,
    },
    /// `connections` workers sending back to back.
    ClosedLoop,
    /// Independent clients, each sending at a fixed interval (open loop).
    Clients(Clients),
}

/// The clients pattern of the seed-000 experiment: client `i` sends its
/// first request at `start + i·stagger` and then one every `interval`, each
/// on its own connections (opened as needed, up to the run's
/// `connections`).
#[derive(Debug, Clone, PartialEq)]
pub struct Clients {
    /// Number of clients.
    pub clients: usize,
    /// Time between a client's requests.
    pub interval: Duration,
    /// Requests each client sends.
    pub requests_per_client: u64,
    /// When the first client starts, after the run begins.
    pub start: Duration,
    /// Offset between consecutive clients' starts.
    pub stagger: Duration,
}

impl Clients {
    /// The seed-000 experiment: 10 clients, 100 requests each, one every
    /// 100 ms, starting 1 s in, 1 ms apart.
    pub fn seed_000() -> Clients {
        Clients {
            clients: 10,
            interval: Duration::from_millis(100),
            requests_per_client: 100,
            start: Duration::from_secs(1),
            stagger: Duration::from_millis(1),
        }
    }
}

/// Everything a run needs. [`LoadConfig::new`] gives the defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadConfig {
    /// `http://host:port/path?query`, or `https://…` for TLS (and QUIC).
    pub url: String,
    /// Request method.
    pub method: String,
    /// Extra request headers (name, value).
    pub headers: Vec<(String, String)>,
    /// Size of every request body (bytes of `x`).
    pub body_bytes: usize,
    /// Speak HTTP/2 instead of HTTP/1.1: h2c with prior knowledge for
    /// `http://`, ALPN `h2` for `https://`.
    pub http2: bool,
    /// Speak HTTP/3 over QUIC (`https://` only).
    pub http3: bool,
    /// `https://`: the CA bundle (PEM) the server's certificate is verified
    /// against (default: the built-in Mozilla roots).
    pub ca: Option<std::path::PathBuf>,
    /// Open loop, closed loop or clients.
    pub pattern: Pattern,
    /// Closed loop: the number of connections. Open loop: the most open at
    /// once. Clients: the most each client opens. `None`: 10, 256 and 16.
    pub connections: Option<usize>,
    /// HTTP/2 and HTTP/3: concurrent streams per connection (workers per
    /// connection).
    pub streams: usize,
    /// Stop scheduling after this long.
    pub duration: Option<Duration>,
    /// Stop after this many requests (open and closed loop).
    pub requests: Option<u64>,
    /// Per-request limit, from the intended send time.
    pub timeout: Duration,
    /// Runtime threads for [`run`]; 0 means one per core.
    pub threads: usize,
    /// Open loop: exponential gaps between sends, of mean 1 / rate
    /// (Poisson arrivals, as from many independent users), instead of a
    /// fixed interval.
    pub poisson: bool,
}

impl LoadConfig {
    /// A GET of `url`, closed loop, HTTP/1.1, 10 s timeout, no bound yet.
    pub fn new(url: impl Into<String>) -> LoadConfig {
        LoadConfig {
            url: url.into(),
            method: "GET".into(),
            headers: Vec::new(),
            body_bytes: 0,
            http2: false,
            http3: false,
            ca: None,
            pattern: Pattern::ClosedLoop,
            connections: None,
            streams: 1,
            duration: None,
            requests: None,
            timeout: Duration::from_secs(10),
            threads: 0,
            poisson: false,
        }
    }

    fn check(&self) -> Result<(), LoadError> {
        let bad = |why: &str| Err(LoadError::Config(why.into()));
        match &self.pattern {
            Pattern::OpenLoop { rate } if !(rate.is_finite() && *rate > 0.0 && *rate <= 10_000_000.0) => {
                return bad("the rate must be above 0 and at most 10,000,000 requests per second")
            }
            Pattern::Clients(c) => {
                if c.clients == 0 || c.requests_per_client == 0 {
                    return bad("the clients pattern needs at least one client and one request per client");
                }
                if c.interval.is_zero() {
                    return bad("the clients' interval must be above zero");
                }
                if self.requests.is_some() {
                    return bad("the clients pattern is bounded by requests per client, not a total");
                }
            }
            Pattern::OpenLoop { .. } | Pattern::ClosedLoop => {
                if self.duration.is_none() && self.requests.is_none() {
                    return bad("give a duration or a number of requests: a run must end by itself");
                }
            }
        }
        if self.duration.is_some_and(|d| d.is_zero()) || self.requests == Some(0) {
            return bad("the duration and the number of requests must be above zero");
        }
        if self.connections == Some(0) || self.streams == 0 {
            return bad("connections and streams must be at least 1");
        }
        if self.timeout.is_zero() {
            return bad("the timeout must be above zero");
        }
        if self.http2 && self.http3 {
            return bad("choose HTTP/2 or HTTP/3, not both");
        }
        Ok(())
    }

    /// The HTTP version the run speaks.
    pub fn protocol(&self) -> Protocol {
        match (self.http2, self.http3) {
            (_, true) => Protocol::Http3,
            (true, false) => Protocol::Http2,
            (false, false) => Protocol::Http1,
        }
    }

    fn connections(&self) -> usize {
        self.connections.unwrap_or(match self.pattern {
            Pattern::ClosedLoop => 10,
            Pattern::OpenLoop { .. } => 256,
            Pattern::Clients(_) => 16,
        })
    }
}

/// Live totals of a run and a switch to end it early. Clones share them.
#[derive(Debug, Clone)]
pub struct Control {
    counters: Arc<Counters>,
    stop: Arc<watch::Sender<bool>>,
}

impl Default for Control {
    fn default() -> Self {
        Control { counters: Arc::default(), stop: Arc::new(watch::Sender::new(false)) }
    }
}

impl Control {
    /// A control for one run.
    pub fn new() -> Control {
        Control::default()
    }

    /// Requests finished so far.
    pub fn requests(&self) -> u64 {
        self.counters.requests.load(Relaxed)
    }

    /// Of those, failed so far.
    pub fn errors(&self) -> u64 {
        self.counters.errors.load(Relaxed)
    }

    /// Stop sending: nothing more is scheduled or taken from the queues;
    /// requests in flight finish (or time out) and the run reports.
    pub fn stop(&self) {
        self.stop.send_replace(true);
    }
}

/// Run the load on a tokio runtime of its own and report. Blocks; from
/// async code use [`run_async`].
pub fn run(config: &LoadConfig) -> Result<Report, LoadError> {
    run_with(config, &Control::new())
}

/// [`run`], watched and stoppable through `control`.
pub fn run_with(config: &LoadConfig, control: &Control) -> Result<Report, LoadError> {
    let threads = match config.threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    };
    let runtime = match threads {
        1 => tokio::runtime::Builder::new_current_thread().enable_all().build()?,
        n => tokio::runtime::Builder::new_multi_thread().worker_threads(n).enable_all().build()?,
    };
    runtime.block_on(run_async(config, control))
}

/// Run the load on the current tokio runtime and report.
pub async fn run_async(config: &LoadConfig, control: &Control) -> Result<Report, LoadError> {
    config.check()?;
    let protocol = config.protocol();
    let target =
        Target::new(&config.url, &config.method, &config.headers, config.body_bytes, protocol, config.ca.as_ref())?;
    let target = Arc::new(target.resolve().await?);
    let timer = Timer::start("fulcrum-load-timer")?;
    let run = Arc::new(Run {
        target,
        recorder: Recorder::new(control.counters.clone()),
        timeout: config.timeout,
        stop: control.stop.subscribe(),
        timer: timer.handle(),
        workers: AtomicUsize::new(0),
    });
    let connections = config.connections();
    let begin = Instant::now();
    let end = config.duration.map(|d| begin + d);
    let pool = |n: usize| Pools::new(protocol, n);
    let workers_per = |conns: usize| if protocol == Protocol::Http1 { conns } else { conns * config.streams };

    let (first, tasks): (Instant, Vec<JoinHandle<()>>) = match &config.pattern {
        Pattern::ClosedLoop => {
            let issued = Arc::new(AtomicU64::new(0));
            let pool = pool(connections);
            let tasks = (0..workers_per(connections))
                .map(|w| {
                    let worker = Worker::new(&run, Conn::new(&pool, w));
                    tokio::spawn(worker.closed_loop(end, config.requests, issued.clone()))
                })
                .collect();
            (begin, tasks)
        }
        Pattern::OpenLoop { rate } => {
            let lane = Lane::new(run.clone(), workers_per(connections), pool(connections));
            let poisson = config.poisson.then(|| (fulcrum_balance::Rng::new(1), 0, 0.0));
            let schedule = Schedule { start: begin, interval_ns: 1e9 / rate, count: config.requests, end, poisson };
            (begin, vec![tokio::spawn(lane.drive(schedule))])
        }
        Pattern::Clients(c) => {
            let first = begin + c.start;
            let tasks = (0..c.clients)
                .map(|i| {
                    let lane = Lane::new(run.clone(), workers_per(connections), pool(connections));
                    let start = first + c.stagger * i as u32;
                    let interval_ns = c.interval.as_nanos() as f64;
                    let schedule =
                        Schedule { start, interval_ns, count: Some(c.requests_per_client), end, poisson: None };
                    tokio::spawn(lane.drive(schedule))
                })
                .collect();
            (first, tasks)
        }
    };
    for t in tasks {
        // A worker that panicked loses only its own requests.
        let _ = t.await;
    }
    let elapsed = Instant::now().saturating_duration_since(first);
    drop(timer);
    Ok(run.recorder.report(elapsed))
}

/// What every worker of a run shares.
struct Run {
    target: Arc<Target>,
    recorder: Recorder,
    timeout: Duration,
    stop: watch::Receiver<bool>,
    timer: TimerHandle,
    /// Workers started so far: numbers them for the recorder's shards.
    workers: AtomicUsize,
}

impl Run {
    fn stopped(&self) -> bool {
        *self.stop.borrow()
    }
}

/// One connection (or HTTP/2 stream) sending one request at a time.
struct Worker {
    run: Arc<Run>,
    conn: Conn,
    id: usize,
}

impl Worker {
    fn new(run: &Arc<Run>, conn: Conn) -> Worker {
        Worker { run: run.clone(), conn, id: run.workers.fetch_add(1, Relaxed) }
    }

    /// Send one request meant to leave at `intended`, and record it.
    async fn send(&mut self, intended: Instant) {
        let deadline = intended + self.run.timeout;
        let outcome = if Instant::now() >= deadline {
            // Queued past its whole timeout: it has failed without being sent.
            Err(ErrorKind::Timeout)
        } else {
            let exchange = self.conn.exchange(&self.run.target);
            match tokio::time::timeout_at(deadline.into(), exchange).await {
                Ok(outcome) => outcome,
                Err(_) => {
                    // The connection is mid-exchange: unusable.
                    self.conn.drop_connection();
                    Err(ErrorKind::Timeout)
                }
            }
        };
        self.run.recorder.record(self.id, intended, outcome);
    }

    async fn closed_loop(mut self, end: Option<Instant>, requests: Option<u64>, issued: Arc<AtomicU64>) {
        loop {
            if self.run.stopped() || end.is_some_and(|e| Instant::now() >= e) {
                return;
            }
            if requests.is_some_and(|n| issued.fetch_add(1, Relaxed) >= n) {
                return;
            }
            self.send(Instant::now()).await;
        }
    }

    async fn open_loop(mut self, lane: Arc<Lane>) {
        while let Some(intended) = lane.next().await {
            self.send(intended).await;
        }
    }
}

/// When an open-loop lane's sends are due: `start + k·interval` for
/// `k < count`, before `end`; with `poisson`, after `k` exponential gaps of
/// mean `interval` instead (the generator, and the last `k` and its offset).
struct Schedule {
    start: Instant,
    interval_ns: f64,
    count: Option<u64>,
    end: Option<Instant>,
    poisson: Option<(fulcrum_balance::Rng, u64, f64)>,
}

impl Schedule {
    /// Send `k`'s time; `k` never decreases from one call to the next.
    fn at(&mut self, k: u64) -> Option<Instant> {
        if self.count.is_some_and(|n| k >= n) {
            return None;
        }
        let offset = match &mut self.poisson {
            None => k as f64 * self.interval_ns,
            Some((rng, last, offset)) => {
                while *last < k {
                    *offset += -(1.0 - rng.unit()).ln() * self.interval_ns;
                    *last += 1;
                }
                *offset
            }
        };
        let at = self.start + Duration::from_nanos(offset as u64);
        match self.end {
            Some(end) if at >= end => None,
            _ => Some(at),
        }
    }
}

/// An open-loop stream of sends (the whole run, or one client) and the
/// workers that serve it.
struct Lane {
    run: Arc<Run>,
    queue: Mutex<VecDeque<Instant>>,
    ready: Notify,
    closed: AtomicBool,
    idle: AtomicUsize,
    max_workers: usize,
    pool: Pools,
}

impl Lane {
    fn new(run: Arc<Run>, max_workers: usize, pool: Pools) -> Arc<Lane> {
        Arc::new(Lane {
            run,
            queue: Mutex::new(VecDeque::new()),
            ready: Notify::new(),
            closed: AtomicBool::new(false),
            idle: AtomicUsize::new(0),
            max_workers,
            pool,
        })
    }

    fn queue(&self) -> std::sync::MutexGuard<'_, VecDeque<Instant>> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Put each send on the queue when it is due, opening workers as
    /// needed; then wait for the workers to finish.
    async fn drive(self: Arc<Lane>, mut schedule: Schedule) {
        let mut stop = self.run.stop.clone();
        let mut workers: Vec<JoinHandle<()>> = Vec::new();
        let mut k = 0;
        while let Some(at) = schedule.at(k) {
            tokio::select! {
                _ = self.run.timer.sleep_until(at) => {}
                _ = stop.wait_for(|&s| s) => {
                    self.queue().clear();
                    break;
                }
            }
            // Everything due by now goes out in one batch: at high rates
            // several sends fall within one wake-up of the timer.
            let now = Instant::now();
            let mut due = 0;
            {
                let mut queue = self.queue();
                while let Some(at) = schedule.at(k).filter(|&at| at <= now) {
                    queue.push_back(at);
                    k += 1;
                    due += 1;
                }
            }
            for _ in 0..due {
                self.ready.notify_one();
            }
            if self.idle.load(Relaxed) < due && workers.len() < self.max_workers {
                let extra = (due - self.idle.load(Relaxed)).min(self.max_workers - workers.len());
                for _ in 0..extra {
                    let worker = Worker::new(&self.run, Conn::new(&self.pool, workers.len()));
                    workers.push(tokio::spawn(worker.open_loop(self.clone())));
                }
            }
        }
        self.closed.store(true, SeqCst);
        self.ready.notify_waiters();
        for w in workers {
            let _ = w.await;
        }
    }

    /// The next intended send time, or `None` once the schedule is over
    /// (or stopped) and the queue is empty.
    async fn next(&self) -> Option<Instant> {
        loop {
            let ready = self.ready.notified();
            tokio::pin!(ready);
            // Registered before looking at the queue, so a push or close
            // between the look and the wait is not missed.
            ready.as_mut().enable();
            if self.run.stopped() {
                return None;
            }
            if let Some(at) = self.queue().pop_front() {
                return Some(at);
            }
            if self.closed.load(SeqCst) {
                return None;
            }
            self.idle.fetch_add(1, Relaxed);
            ready.await;
            self.idle.fetch_sub(1, Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poisson_sends_keep_the_rate_with_exponential_gaps() {
        let start = Instant::now();
        let mut fixed = Schedule { start, interval_ns: 1e6, count: None, end: None, poisson: None };
        assert_eq!(fixed.at(3).unwrap() - start, Duration::from_millis(3));
        let poisson = Some((fulcrum_balance::Rng::new(1), 0, 0.0));
        let mut s = Schedule { start, interval_ns: 1e6, count: Some(20_000), end: None, poisson };
        let times: Vec<f64> = (0..20_000).map(|k| (s.at(k).unwrap() - start).as_secs_f64() * 1e3).collect();
        assert_eq!(s.at(19_999).unwrap(), s.at(19_999).unwrap(), "the same send, the same time");
        assert!(s.at(20_000).is_none());
        let gaps: Vec<f64> = times.windows(2).map(|w| w[1] - w[0]).collect();
        let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
        let var = gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / gaps.len() as f64;
        assert!((mean - 1.0).abs() < 0.03, "mean gap {mean} ms");
        assert!((var.sqrt() / mean - 1.0).abs() < 0.05, "exponential gaps vary as much as their mean: {var}");
    }
}

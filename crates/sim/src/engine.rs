//! The event loop: one run of one algorithm over one scenario with one seed.
//!
//! [`Engine`] keeps a binary heap of [`Event`]s ordered by (time in integer
//! nanoseconds, sequence number), so that events at the same instant run in
//! the order they were scheduled and a run is a pure function of scenario,
//! algorithm and seed. A request travels client → balancer → server →
//! balancer → client; each hop is a network message whose delay is the hop's
//! latency plus, the first time one node sends to another, the first-contact
//! delay (later messages on that directed pair wait until it has passed, as
//! packets wait for address resolution). A hop that takes no time is handled
//! at once instead of through the heap, which is what makes closed-loop
//! scenarios cost about one heap operation per request.
//!
//! The balancers are `fulcrum_balance` balancers, called directly: `pick` when
//! a request reaches a balancer, `on_complete` when its response (or its
//! timeout) comes back. Requests live in a slab whose slots are reused, so
//! memory follows the number of requests in flight, not the number sent;
//! only the latency samples grow with the run.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};

use fulcrum_balance::{AlgorithmConfig, Balancer, BuildError, Endpoint, Nanos, Outcome, Rng, Ticket};

use crate::dist::Dist;
use crate::scenario::{Action, Arrivals, Keys, MeasureAt, Scenario};
use crate::stats::ShareSeries;

/// What one run produced, before summarising.
#[derive(Debug)]
pub struct RawRun {
    /// Latencies of measured successful requests, in nanoseconds.
    pub samples: Vec<Nanos>,
    /// Measured requests that failed.
    pub failed: u64,
    /// Measured requests sent to each server.
    pub per_server: Vec<u64>,
    /// Measured requests per server over time.
    pub share: ShareSeries,
    /// Events handled (heap and inline), for speed figures.
    pub events: u64,
    /// Requests completed, warm-up included.
    pub completed: u64,
    /// Simulated time at the end.
    pub end: Nanos,
}

/// Progress is published in steps of this many completed requests (a power of two).
pub const PROGRESS_STEP: u64 = 4096;

#[derive(Clone, Copy, Debug)]
enum Ev {
    /// Client starts (opens its connection or sends its first request).
    Start { client: u32 },
    /// The connection handshake reached the balancer.
    ConnectAtLb { client: u32 },
    /// The handshake came back: the client starts sending.
    Connected { client: u32 },
    /// Open loop: time for the client's next request.
    Tick { client: u32 },
    /// A request reached its balancer.
    AtLb { req: u32, gen: u32 },
    /// A request reached its server.
    AtServer { req: u32, gen: u32 },
    /// A server finished serving (or failing) a request.
    Done { req: u32, gen: u32, server: u32, ok: bool, frees: bool },
    /// A response reached the balancer.
    BackAtLb { req: u32, gen: u32, ok: bool },
    /// A response (or the balancer's error) reached the client.
    BackAtClient { req: u32, gen: u32, ok: bool },
    /// The balancer's timeout for a request.
    Timeout { req: u32, gen: u32 },
    /// A scenario event.
    Change { index: u32 },
}

struct Event {
    time: Nanos,
    seq: u64,
    ev: Ev,
}

impl PartialEq for Event {
    fn eq(&self, other: &Self) -> bool {
        (self.time, self.seq) == (other.time, other.seq)
    }
}
impl Eq for Event {}
impl PartialOrd for Event {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Event {
    // Reversed: BinaryHeap is a max-heap and we want the earliest first.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.time, other.seq).cmp(&(self.time, self.seq))
    }
}

struct Request {
    gen: u32,
    client: u32,
    server: u32,
    ticket: Option<Ticket>,
    sent: Nanos,
    forwarded: Nanos,
    lb_latency: Nanos,
    key: Option<u64>,
    measured: bool,
}

struct ClientState {
    balancer: u32,
    sent: u64,
    end: Nanos,
    key: u64,
}

struct ServerState {
    service: Dist,
    original: Dist,
    /// `Some(Some(d))`: fails with an error after `d`; `Some(None)`: never answers.
    failing: Option<Option<Dist>>,
    limit: u32,
    busy: u32,
    queue: VecDeque<(u32, u32)>,
    joined: bool,
    rng: Rng,
}

/// Which directed pair of nodes a hop uses, for first-contact delays.
#[derive(Clone, Copy)]
enum Pair {
    ClientLb(u32),
    LbClient(u32),
    LbServer(u32, u32),
    ServerLb(u32, u32),
}

/// One simulation run.
pub struct Engine<'a> {
    scenario: &'a Scenario,
    now: Nanos,
    seq: u64,
    heap: BinaryHeap<Event>,
    requests: Vec<Request>,
    free: Vec<u32>,
    clients: Vec<ClientState>,
    servers: Vec<ServerState>,
    balancers: Vec<Box<dyn Balancer>>,
    workload: Rng,
    network: Rng,
    /// Time each directed pair may next send (first contact resolved), or
    /// `None` before first contact. Empty when there is no first-contact delay.
    ready: Vec<Option<Nanos>>,
    zero_client_hop: bool,
    zero_server_hop: bool,
    out: RawRun,
    completed: u64,
    progress: Option<&'a AtomicU64>,
}

impl<'a> Engine<'a> {
    /// Set up a run of `algorithm` over `scenario`; every random choice
    /// derives from `seed`. `progress`, if given, is advanced by
    /// [`PROGRESS_STEP`] as requests complete.
    pub fn new(
        scenario: &'a Scenario,
        algorithm: &AlgorithmConfig,
        seed: u64,
        progress: Option<&'a AtomicU64>,
    ) -> Result<Self, BuildError> {
        let mut master = Rng::new(seed);
        let workload = master.fork();
        let network = master.fork();
        let servers: Vec<ServerState> = scenario
            .servers
            .iter()
            .map(|s| ServerState {
                service: s.service.clone(),
                original: s.service.clone(),
                failing: None,
                limit: s.concurrency.unwrap_or(u32::MAX),
                busy: 0,
                queue: VecDeque::new(),
                joined: s.joined,
                rng: master.fork(),
            })
            .collect();
        let endpoints = joined_endpoints(scenario, &servers);
        let balancers = (0..scenario.balancers.count)
            .map(|_| fulcrum_balance::build(algorithm, &endpoints, master.next_u64()))
            .collect::<Result<Vec<_>, _>>()?;
        let c = &scenario.clients;
        let clients = (0..c.count)
            .map(|i| ClientState {
                balancer: i % scenario.balancers.count,
                sent: 0,
                end: Nanos::MAX,
                key: master.next_u64(),
            })
            .collect();
        let n_servers = scenario.servers.len();
        let n_balancers = scenario.balancers.count as usize;
        let ready = if scenario.network.first_contact.is_zero() {
            Vec::new()
        } else {
            vec![None; 2 * c.count as usize + 2 * n_balancers * n_servers]
        };
        let mut engine = Engine {
            scenario,
            now: 0,
            seq: 0,
            heap: BinaryHeap::new(),
            requests: Vec::new(),
            free: Vec::new(),
            clients,
            servers,
            balancers,
            workload,
            network,
            ready,
            zero_client_hop: scenario.network.client_lb.is_zero(),
            zero_server_hop: scenario.network.lb_server.is_zero(),
            out: RawRun {
                samples: Vec::with_capacity(scenario.total_requests().unwrap_or(0).min(50_000_000) as usize),
                failed: 0,
                per_server: vec![0; n_servers],
                share: ShareSeries::new(scenario.metrics.share_interval, n_servers),
                events: 0,
                completed: 0,
                end: 0,
            },
            completed: 0,
            progress,
        };
        for i in 0..c.count {
            engine.push(c.start + c.stagger * i as u64, Ev::Start { client: i });
        }
        for (i, e) in scenario.events.iter().enumerate() {
            engine.push(e.at, Ev::Change { index: i as u32 });
        }
        Ok(engine)
    }

    /// Run to the end and return what was measured.
    pub fn run(mut self) -> RawRun {
        while let Some(Event { time, ev, .. }) = self.heap.pop() {
            self.now = time;
            self.handle(ev);
        }
        if let Some(p) = self.progress {
            p.fetch_add(self.completed % PROGRESS_STEP, AtomicOrdering::Relaxed);
        }
        self.out.end = self.now;
        self.out.completed = self.completed;
        self.out
    }

    #[inline]
    fn push(&mut self, time: Nanos, ev: Ev) {
        self.seq += 1;
        self.heap.push(Event { time, seq: self.seq, ev });
    }

    /// Send a message over `pair`; it arrives as `ev`, at once if the hop
    /// takes no time.
    #[inline]
    fn send(&mut self, pair: Pair, ev: Ev) {
        let client_hop = matches!(pair, Pair::ClientLb(_) | Pair::LbClient(_));
        let latency = if client_hop { &self.scenario.network.client_lb } else { &self.scenario.network.lb_server };
        let mut at = self.now;
        if !self.ready.is_empty() {
            let slot = self.pair_slot(pair);
            at = match self.ready[slot] {
                Some(ready) => ready.max(at),
                None => {
                    let ready = at + self.scenario.network.first_contact.sample(&mut self.network);
                    self.ready[slot] = Some(ready);
                    ready
                }
            };
        }
        if !(if client_hop { self.zero_client_hop } else { self.zero_server_hop }) {
            at += latency.sample(&mut self.network);
        }
        if at == self.now {
            self.handle(ev);
        } else {
            self.push(at, ev);
        }
    }

    fn pair_slot(&self, pair: Pair) -> usize {
        let c = self.clients.len();
        let s = self.servers.len();
        match pair {
            Pair::ClientLb(i) => i as usize,
            Pair::LbClient(i) => c + i as usize,
            Pair::LbServer(b, j) => 2 * c + b as usize * s + j as usize,
            Pair::ServerLb(b, j) => 2 * c + (self.balancers.len() + b as usize) * s + j as usize,
        }
    }

    fn handle(&mut self, ev: Ev) {
        self.out.events += 1;
        match ev {
            Ev::Start { client } => {
                let end = self.scenario.clients.duration.map_or(Nanos::MAX, |d| self.now.saturating_add(d));
                self.clients[client as usize].end = end;
                if self.scenario.clients.connect {
                    self.send(Pair::ClientLb(client), Ev::ConnectAtLb { client });
                } else {
                    self.begin(client);
                }
            }
            Ev::ConnectAtLb { client } => self.send(Pair::LbClient(client), Ev::Connected { client }),
            Ev::Connected { client } => self.begin(client),
            Ev::Tick { client } => {
                if self.may_send(client) {
                    self.issue(client);
                    let gap = match self.scenario.clients.arrivals {
                        Arrivals::Fixed(i) => i,
                        Arrivals::Poisson(mean) => Dist::Exponential { mean }.sample(&mut self.workload),
                        Arrivals::Closed(_) => unreachable!("closed-loop clients do not tick"),
                    };
                    self.push(self.now + gap, Ev::Tick { client });
                }
            }
            Ev::AtLb { req, gen } => self.at_balancer(req, gen),
            Ev::AtServer { req, gen } => self.at_server(req, gen),
            Ev::Done { req, gen, server, ok, frees } => {
                if frees {
                    self.release(server);
                }
                if self.requests[req as usize].gen == gen {
                    let b = self.clients[self.requests[req as usize].client as usize].balancer;
                    self.send(Pair::ServerLb(b, server), Ev::BackAtLb { req, gen, ok });
                }
            }
            Ev::BackAtLb { req, gen, ok } => self.answer_at_balancer(req, gen, ok),
            // The balancer gives up: the request fails, and a late response
            // finds its ticket gone.
            Ev::Timeout { req, gen } => self.answer_at_balancer(req, gen, false),
            Ev::BackAtClient { req, gen, ok } => self.at_client(req, gen, ok),
            Ev::Change { index } => self.change(index as usize),
        }
    }

    fn begin(&mut self, client: u32) {
        match self.scenario.clients.arrivals {
            Arrivals::Closed(n) => {
                for _ in 0..n {
                    if !self.may_send(client) {
                        break;
                    }
                    self.issue(client);
                }
            }
            _ => self.handle(Ev::Tick { client }),
        }
    }

    #[inline]
    fn may_send(&self, client: u32) -> bool {
        let c = &self.clients[client as usize];
        !matches!(self.scenario.clients.requests, Some(n) if c.sent >= n) && self.now < c.end
    }

    /// The client sends a new request.
    fn issue(&mut self, client: u32) {
        self.clients[client as usize].sent += 1;
        let key = match self.scenario.clients.keys {
            Keys::Random => Some(self.workload.next_u64()),
            Keys::Client => Some(self.clients[client as usize].key),
            Keys::None => None,
        };
        let request = Request {
            gen: 0,
            client,
            server: u32::MAX,
            ticket: None,
            sent: self.now,
            forwarded: 0,
            lb_latency: 0,
            key,
            measured: self.now >= self.scenario.metrics.warmup,
        };
        let req = match self.free.pop() {
            Some(slot) => {
                let r = &mut self.requests[slot as usize];
                let gen = r.gen;
                *r = Request { gen, ..request };
                slot
            }
            None => {
                self.requests.push(request);
                (self.requests.len() - 1) as u32
            }
        };
        let gen = self.requests[req as usize].gen;
        self.send(Pair::ClientLb(client), Ev::AtLb { req, gen });
    }

    fn at_balancer(&mut self, req: u32, gen: u32) {
        let r = &self.requests[req as usize];
        let (client, key) = (r.client, r.key);
        let b = self.clients[client as usize].balancer;
        let Some(ticket) = self.balancers[b as usize].pick(self.now, key) else {
            // No endpoint: the balancer answers with an error (through the
            // heap, so that a closed loop cannot spin without time passing).
            self.push(self.now, Ev::BackAtClient { req, gen, ok: false });
            return;
        };
        let server = ticket.endpoint().0 as u32;
        let r = &mut self.requests[req as usize];
        r.server = server;
        r.ticket = Some(ticket);
        r.forwarded = self.now;
        if r.measured {
            self.out.per_server[server as usize] += 1;
            self.out.share.record(self.now, server as usize);
        }
        if let Some(t) = self.scenario.balancers.timeout {
            self.push(self.now + t, Ev::Timeout { req, gen });
        }
        self.send(Pair::LbServer(b, server), Ev::AtServer { req, gen });
    }

    /// A response (or the timeout) settles the request at its balancer,
    /// which learns the outcome; the answer goes on to the client.
    fn answer_at_balancer(&mut self, req: u32, gen: u32, ok: bool) {
        let r = &mut self.requests[req as usize];
        if r.gen != gen {
            return;
        }
        // `None`: already settled (timed out before its response, or the
        // timeout of a request that was answered).
        let Some(ticket) = r.ticket.take() else { return };
        let latency = self.now - r.forwarded;
        r.lb_latency = latency;
        let client = r.client;
        let outcome = if ok { Outcome::Success { latency } } else { Outcome::Failure { latency } };
        let b = self.clients[client as usize].balancer as usize;
        self.balancers[b].on_complete(ticket, self.now, outcome);
        self.send(Pair::LbClient(client), Ev::BackAtClient { req, gen, ok });
    }

    fn at_server(&mut self, req: u32, gen: u32) {
        if self.requests[req as usize].gen != gen {
            return;
        }
        let server = self.requests[req as usize].server;
        let s = &mut self.servers[server as usize];
        match &s.failing {
            Some(Some(after)) => {
                let t = self.now + after.sample(&mut s.rng);
                self.push(t, Ev::Done { req, gen, server, ok: false, frees: false });
            }
            // Never answers: the balancer's timeout fires.
            Some(None) => {}
            None if s.busy < s.limit => {
                s.busy += 1;
                let t = self.now + s.service.sample(&mut s.rng);
                self.push(t, Ev::Done { req, gen, server, ok: true, frees: true });
            }
            None => s.queue.push_back((req, gen)),
        }
    }

    /// A server slot is free: start the next queued request still wanted.
    fn release(&mut self, server: u32) {
        let s = &mut self.servers[server as usize];
        s.busy -= 1;
        while let Some((req, gen)) = s.queue.pop_front() {
            if self.requests[req as usize].gen != gen {
                continue;
            }
            s.busy += 1;
            let t = self.now + s.service.sample(&mut s.rng);
            self.push(t, Ev::Done { req, gen, server, ok: true, frees: true });
            break;
        }
    }

    fn at_client(&mut self, req: u32, gen: u32, ok: bool) {
        let r = &mut self.requests[req as usize];
        if r.gen != gen {
            return;
        }
        if let Some(ticket) = r.ticket.take() {
            // Answered without reaching a server's response (cannot happen
            // today, but a ticket must never leak).
            let b = self.clients[r.client as usize].balancer as usize;
            self.balancers[b].on_cancel(ticket);
        }
        let r = &mut self.requests[req as usize];
        if r.measured {
            if ok {
                let latency = match self.scenario.metrics.latency_at {
                    MeasureAt::Client => self.now - r.sent,
                    MeasureAt::Balancer => r.lb_latency,
                };
                self.out.samples.push(latency);
            } else {
                self.out.failed += 1;
            }
        }
        let client = r.client;
        r.gen = r.gen.wrapping_add(1);
        self.free.push(req);
        self.completed += 1;
        if self.completed & (PROGRESS_STEP - 1) == 0 {
            if let Some(p) = self.progress {
                p.fetch_add(PROGRESS_STEP, AtomicOrdering::Relaxed);
            }
        }
        if matches!(self.scenario.clients.arrivals, Arrivals::Closed(_)) && self.may_send(client) {
            self.issue(client);
        }
    }

    fn change(&mut self, index: usize) {
        let event = &self.scenario.events[index];
        let s = &mut self.servers[event.server];
        let membership = match &event.action {
            Action::Slow(d) => {
                s.service = d.clone();
                false
            }
            Action::Fail(mode) => {
                s.failing = Some(mode.clone());
                false
            }
            Action::Recover => {
                s.failing = None;
                s.service = s.original.clone();
                false
            }
            Action::Join => !std::mem::replace(&mut s.joined, true),
            Action::Leave => std::mem::replace(&mut s.joined, false),
        };
        if membership {
            let endpoints = joined_endpoints(self.scenario, &self.servers);
            for b in &mut self.balancers {
                // The set was valid at build time and only its membership changes.
                b.set_endpoints(&endpoints).expect("a subset of valid endpoints is valid");
            }
        }
    }
}

fn joined_endpoints(scenario: &Scenario, servers: &[ServerState]) -> Vec<Endpoint> {
    scenario
        .servers
        .iter()
        .zip(servers)
        .enumerate()
        .filter(|(_, (_, state))| state.joined)
        .map(|(i, (s, _))| Endpoint::new(i as u64, s.name.clone()).with_weight(s.weight))
        .collect()
}

//! The event loop: one run of one algorithm over one scenario with one seed.
//!
//! [`Engine`] runs as a [`fulcrum_des::Model`]: its events wait in a
//! [`fulcrum_des::Queue`] ordered by time in integer nanoseconds, events at
//! the same instant in the order they were scheduled, so that a run is a
//! pure function of scenario, algorithm and seed. A request travels client → balancer → server →
//! balancer → client; each hop is a network message whose delay is the hop's
//! latency plus, the first time one node sends to another, the first-contact
//! delay (later messages on that directed pair wait until it has passed, as
//! packets wait for address resolution). A hop that takes no time is handled
//! at once instead of through the queue, which is what makes closed-loop
//! scenarios cost about one queue operation per request. A hop of fixed
//! latency (and no first-contact delay) goes on the queue's lane for that
//! delay ([`fulcrum_des::Lane`]): its messages arrive in the order they
//! were sent, so they are filed once in a FIFO instead of moving through
//! the radix heap, in the same order as through the heap.
//!
//! Every scenario takes the same path: a request is one event per step —
//! the client's tick (open loop), its arrival at the balancer, the try's
//! arrival at its server, the end of its service, the answer's arrival at
//! the balancer and at the client — and a server is a busy count and a
//! FIFO queue of waiting tries. Each event handled, queued or at once, is
//! counted once, in `Engine::dispatch`.
//!
//! The balancers are `fulcrum_balance` balancers, called directly: `pick` when
//! a request reaches a balancer, `on_complete` when its response (or its
//! timeout) comes back. When the scenario turns on outlier detection, slow
//! start or retries, each balancer also has a [`Guard`] (see
//! [`crate::resilience`]) that learns every try's result, changes the
//! balancer's endpoint set, and decides whether a failed try is retried (at
//! once, on the same balancer, preferably on another endpoint). Requests live in a slab whose slots are reused, so
//! memory follows the number of requests in flight, not the number sent;
//! the latency samples grow with the run only up to the recorder's limit
//! (see [`fulcrum_workload::Recorder`]).

use std::collections::VecDeque;
use std::sync::atomic::AtomicU64;

use fulcrum_balance::{
    pick_avoiding, AlgorithmConfig, Balancer, BuildError, Endpoint, EndpointId, Nanos, Outcome, Rng, Ticket,
};
use fulcrum_des::{Lane, Model, Queue};

use fulcrum_resilience::RequestLimit;

use crate::dist::Dist;
use crate::resilience::{Guard, ResilienceStats, TryResult, TICK};
use crate::scenario::{Action, Arrivals, Cold, Keys, MeasureAt, Scenario, Server};
use crate::stats::ShareSeries;
use crate::trace::DRAWN;
use crate::Recorder;

/// What one run produced, before summarising.
#[derive(Debug)]
pub struct RawRun {
    /// Latencies of measured successful requests, in nanoseconds.
    pub latency: Recorder,
    /// Measured requests that failed.
    pub failed: u64,
    /// Measured requests sent to each server.
    pub per_server: Vec<u64>,
    /// Measured requests per server over time.
    pub share: ShareSeries,
    /// Events handled (queued or at once), for speed figures.
    pub events: u64,
    /// Requests sent, warm-up included.
    pub sent: u64,
    /// Requests completed (answered or failed), warm-up included: every
    /// request sent, once the run is over.
    pub completed: u64,
    /// Simulated time at the end.
    pub end: Nanos,
    /// What the resilience mechanisms did, when the scenario has any.
    pub resilience: Option<ResilienceStats>,
    /// Per server, the tries in flight to it (picked by any balancer and
    /// not yet settled) when each measured try was picked: count, sum and
    /// sum of squares, as the proxy counts its endpoints' in-flight levels.
    pub in_flight_at_pick: Vec<[u64; 3]>,
}

impl RawRun {
    fn new(scenario: &Scenario) -> Self {
        let n_servers = scenario.servers.len();
        let mut latency = Recorder::new(scenario.metrics.exact);
        latency.reserve(scenario.total_requests().unwrap_or(0).min(50_000_000) as usize);
        RawRun {
            latency,
            failed: 0,
            per_server: vec![0; n_servers],
            share: ShareSeries::new(scenario.metrics.share_interval, n_servers),
            events: 0,
            sent: 0,
            completed: 0,
            end: 0,
            resilience: None,
            in_flight_at_pick: vec![[0; 3]; n_servers],
        }
    }
}

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
    /// A try of a request reached its server.
    AtServer { req: u32, gen: u32, attempt: u8, server: u32 },
    /// A server finished a try: served it (`Ok`, which frees its slot), or
    /// failed or refused it (which took no slot).
    Done { req: u32, gen: u32, attempt: u8, server: u32, res: TryResult },
    /// A response reached the balancer.
    BackAtLb { req: u32, gen: u32, attempt: u8, res: TryResult },
    /// A response (or the balancer's error) reached the client.
    BackAtClient { req: u32, gen: u32, ok: bool },
    /// The balancer's timeout: of the whole request (`overall`, from
    /// `balancers.timeout`) or of one try (`retries.per_try_timeout`).
    Timeout { req: u32, gen: u32, attempt: u8, overall: bool },
    /// A scenario event.
    Change { index: u32 },
    /// Tick the outlier detectors and step slow start.
    Guard,
}

/// The pending events: the radix heap with lanes. (A timing wheel with
/// lanes, `fulcrum_des::Wheel`, was measured in its place: fewer
/// instructions on fleet-1000 but no less time, and a slower seed-004.)
type Events = Queue<Ev>;

// Every pending event is stored with its time and sequence number: keep
// the event itself to two words.
const _: () = assert!(std::mem::size_of::<Ev>() <= 16);

/// A request in flight. Every event of a request reads its slot, so it is
/// kept to one cache line (64 bytes, aligned): the servers of earlier tries
/// live in [`Engine::tried`], touched only by retries.
#[repr(align(64))]
struct Request {
    gen: u32,
    client: u32,
    /// The client's balancer, copied here so that the hops of a request
    /// need not read its client's state (one more cache miss each).
    balancer: u32,
    measured: bool,
    /// Tries made before the current one.
    attempt: u8,
    ticket: Option<Ticket>,
    sent: Nanos,
    /// When the current try was forwarded; once the balancer has the
    /// answer, the latency it saw (what `latency = "balancer"` measures).
    at_lb: Nanos,
    /// The hash key; meaningless when the scenario's keys are `"none"`
    /// (see [`Engine::key`]), kept unwrapped so the request fits its line.
    key: u64,
}

// The size the comment above promises (a larger slot costs cache misses).
const _: () = assert!(std::mem::size_of::<Request>() == 64);

struct ClientState {
    balancer: u32,
    sent: u64,
    end: Nanos,
    key: u64,
    /// With a trace: the line this client sends next.
    row: usize,
}

/// How a failing server fails.
enum Failing {
    /// With an error after a delay.
    Error(Dist),
    /// Never answers.
    Silent,
    /// Refuses the connection at once.
    Refuse,
}

/// A server: `busy` of its `limit` slots serve a try each, and further
/// tries wait in `queue`, first come first served. With 1,000 servers
/// picked at random each server touched is a cache miss, so the fields are
/// laid out by use: the first cache line has what every arrival and every
/// end of service reads (the slots, the failure mode, the waiting tries,
/// the cold start), the second what a service draws from.
#[repr(C, align(64))]
struct ServerState {
    busy: u32,
    limit: u32,
    /// Boxed, as it is rarely set: 8 bytes on the first line.
    failing: Option<Box<Failing>>,
    /// Waiting tries: (request, generation, attempt).
    queue: VecDeque<(u32, u32, u8)>,
    /// Boxed, as it is rarely set: 8 bytes on the first line.
    cold: Option<Box<Cold>>,
    /// When it last joined (the start for servers joined from the start).
    joined_at: Nanos,
    service: Dist,
    rng: Rng,
    joined: bool,
    original: Dist,
    /// When the current failure or slow-down began (for time to ejection).
    failing_since: Option<Nanos>,
    /// Share of served tries answered with a server error.
    errors: f64,
}

// The layout the comment above describes.
const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(offset_of!(ServerState, joined_at) + size_of::<Nanos>() <= 64);
    assert!(offset_of!(ServerState, service) == 64);
    assert!(offset_of!(ServerState, rng) + size_of::<Rng>() <= 128);
};

impl ServerState {
    fn new(s: &Server, rng: Rng) -> Self {
        ServerState {
            busy: 0,
            limit: s.concurrency.unwrap_or(u32::MAX),
            failing: None,
            cold: s.cold.map(Box::new),
            joined_at: 0,
            service: s.service.clone(),
            rng,
            queue: VecDeque::new(),
            joined: s.joined,
            original: s.service.clone(),
            failing_since: None,
            errors: s.errors,
        }
    }

    /// A service time drawn at `now` (or the trace's, `given`), with the
    /// cold-start penalty if any.
    #[inline]
    fn service_time(&mut self, now: Nanos, given: Option<Nanos>) -> Nanos {
        let t = match given {
            Some(t) => t,
            None => self.service.sample(&mut self.rng),
        };
        match &self.cold {
            Some(c) => (t as f64 * c.multiplier(now.saturating_sub(self.joined_at))) as Nanos,
            None => t,
        }
    }
}

/// How messages cross a hop.
#[derive(Clone, Copy)]
enum Hop {
    /// It takes no time (and there is no first-contact delay): the message
    /// is handled at once, not through the queue.
    AtOnce,
    /// A fixed latency (and no first-contact delay): every message takes
    /// the same time, so they arrive in the order sent, through the
    /// queue's lane for that delay.
    Lane(Lane),
    /// A latency drawn per message, or first-contact delays.
    Drawn,
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
    /// The events scheduled at setup, handed to the run loop by [`Engine::run`].
    initial: Events,
    requests: Vec<Request>,
    /// Servers of the earlier tries of the request in the same slot (kept
    /// apart so that requests stay small; grown only when a retry happens).
    tried: Vec<Vec<EndpointId>>,
    /// The trace's service time of the request in the same slot
    /// ([`DRAWN`]: none); kept apart, like `tried`, so that requests stay
    /// one cache line. Empty unless the trace gives service times.
    given: Vec<Nanos>,
    free: Vec<u32>,
    clients: Vec<ClientState>,
    servers: Vec<ServerState>,
    balancers: Vec<Box<dyn Balancer>>,
    workload: Rng,
    network: Rng,
    /// Time each directed pair may next send (first contact resolved), or
    /// `None` before first contact. Empty when there is no first-contact delay.
    ready: Vec<Option<Nanos>>,
    /// How a message crosses the client ↔ balancer hop, and the
    /// balancer ↔ server hop.
    client_hop: Hop,
    server_hop: Hop,
    out: RawRun,
    progress: Option<&'a AtomicU64>,
    /// One per balancer when the scenario has resilience mechanisms, else empty.
    guards: Vec<Guard>,
    stats: ResilienceStats,
    /// Tries in flight over all balancers, against `balancers.max_requests`
    /// ramped by slow start (`request_limit`): the proxy's circuit breaker.
    in_flight: RequestLimit,
    request_limit: u64,
    /// Per server, the tries picked for it by any balancer and not yet settled there.
    picked: Vec<u32>,
}

impl<'a> Engine<'a> {
    /// Set up a run of `algorithm` over `scenario`; every random choice
    /// derives from `seed`. `progress`, if given, counts completed
    /// requests (in steps: see [`fulcrum_des::run`]).
    pub fn new(
        scenario: &'a Scenario,
        algorithm: &AlgorithmConfig,
        seed: u64,
        progress: Option<&'a AtomicU64>,
    ) -> Result<Self, BuildError> {
        // The streams are forked in a fixed order (workload, network, each
        // server, then each balancer's and each client's seed), so that a
        // seed names one run.
        let mut master = Rng::new(seed);
        let workload = master.fork();
        let network = master.fork();
        let servers: Vec<ServerState> = scenario.servers.iter().map(|s| ServerState::new(s, master.fork())).collect();
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
                row: i as usize,
            })
            .collect();
        let (n_servers, n_balancers) = (scenario.servers.len(), scenario.balancers.count as usize);
        let resilience = &scenario.resilience;
        let guards = if resilience.enabled() || scenario.balancers.max_requests.is_some() {
            let all: Vec<Endpoint> = (0..n_servers).map(|i| endpoint(scenario, i)).collect();
            let member: Vec<bool> = servers.iter().map(|s| s.joined).collect();
            (0..n_balancers).map(|_| Guard::new(resilience, &all, member.clone(), 0)).collect()
        } else {
            Vec::new()
        };
        let net = &scenario.network;
        let ready = if net.first_contact.is_zero() {
            Vec::new()
        } else {
            vec![None; 2 * c.count as usize + 2 * n_balancers * n_servers]
        };
        let mut initial = Queue::new();
        let mut hop = |latency: &Dist| match latency {
            _ if !net.first_contact.is_zero() => Hop::Drawn,
            Dist::Fixed(0) => Hop::AtOnce,
            Dist::Fixed(d) => Hop::Lane(initial.lane(*d)),
            _ => Hop::Drawn,
        };
        let (client_hop, server_hop) = (hop(&net.client_lb), hop(&net.lb_server));
        schedule_initial(scenario, &mut initial);
        Ok(Engine {
            scenario,
            now: 0,
            initial,
            requests: Vec::new(),
            tried: Vec::new(),
            given: Vec::new(),
            free: Vec::new(),
            clients,
            servers,
            balancers,
            workload,
            network,
            ready,
            client_hop,
            server_hop,
            out: RawRun::new(scenario),
            progress,
            guards,
            stats: ResilienceStats {
                first_ejection: vec![None; n_servers],
                time_to_ejection: vec![None; n_servers],
                rate_limited: resilience.rate_limit.as_ref().map(|_| 0),
                overflows: scenario.balancers.max_requests.map(|_| 0),
                ..ResilienceStats::default()
            },
            in_flight: RequestLimit::default(),
            request_limit: scenario.balancers.max_requests.unwrap_or(u64::MAX),
            picked: vec![0; n_servers],
        })
    }

    /// Run to the end and return what was measured.
    pub fn run(mut self) -> RawRun {
        let mut queue = std::mem::take(&mut self.initial);
        let progress = self.progress;
        fulcrum_des::run(&mut Running(&mut self), &mut queue, Nanos::MAX, progress);
        self.out.end = self.now;
        // Every measured request is in the share series too (one count
        // per request instead of two on the hot path).
        self.out.per_server = self.out.share.totals();
        if !self.guards.is_empty() {
            for g in &mut self.guards {
                g.finish(self.now);
            }
            let total: Nanos = self.guards.iter().map(|g| g.panic_total).sum();
            self.stats.panic = total / self.guards.len() as Nanos;
            self.out.resilience = Some(std::mem::take(&mut self.stats));
        }
        self.out
    }

    /// Send a message over `pair`; it arrives as `ev`: at once over a hop
    /// that takes no time, on the hop's lane over a fixed latency, else
    /// when [`Engine::send_drawn`] says.
    #[inline(always)]
    fn send(&mut self, pair: Pair, ev: Ev, q: &mut Events) {
        let client_hop = matches!(pair, Pair::ClientLb(_) | Pair::LbClient(_));
        match if client_hop { self.client_hop } else { self.server_hop } {
            Hop::AtOnce => self.dispatch(ev, q),
            Hop::Lane(lane) => q.schedule_lane(lane, ev),
            Hop::Drawn => self.send_drawn(pair, client_hop, ev, q),
        }
    }

    /// [`Engine::send`] over a hop of random latency or with first-contact
    /// delays: first contact, then the hop's latency drawn.
    #[inline(never)]
    fn send_drawn(&mut self, pair: Pair, client_hop: bool, ev: Ev, q: &mut Events) {
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
        if !latency.is_zero() {
            at += latency.sample(&mut self.network);
        }
        if at == self.now {
            self.dispatch(ev, q);
        } else {
            q.schedule(at, ev);
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

    /// Handle `ev` at `self.now`: the one place events are counted,
    /// whether they came off the queue or are handled at once (a hop that
    /// takes no time, an open-loop client's first tick).
    fn dispatch(&mut self, ev: Ev, q: &mut Events) {
        self.out.events += 1;
        match ev {
            Ev::Start { client } => {
                let end = self.scenario.clients.duration.map_or(Nanos::MAX, |d| self.now.saturating_add(d));
                self.clients[client as usize].end = end;
                if self.scenario.clients.connect {
                    self.send(Pair::ClientLb(client), Ev::ConnectAtLb { client }, q);
                } else {
                    self.begin(client, q);
                }
            }
            Ev::ConnectAtLb { client } => self.send(Pair::LbClient(client), Ev::Connected { client }, q),
            Ev::Connected { client } => self.begin(client, q),
            Ev::Tick { client } => self.tick(client, q),
            Ev::AtLb { req, gen } => self.at_balancer(req, gen, q),
            Ev::AtServer { req, gen, attempt, server } => self.at_server(req, gen, attempt, server, q),
            Ev::Done { req, gen, attempt, server, res } => self.done(req, gen, attempt, server, res, q),
            Ev::BackAtLb { req, gen, attempt, res } => self.answer_at_balancer(req, gen, attempt, res, false, q),
            // The balancer gives up: the try fails, and a late response finds
            // its ticket gone.
            Ev::Timeout { req, gen, attempt, overall } => {
                self.answer_at_balancer(req, gen, attempt, TryResult::Timeout, overall, q)
            }
            Ev::BackAtClient { req, gen, ok } => self.at_client(req, gen, ok, q),
            Ev::Change { index } => self.change(index as usize),
            Ev::Guard => self.guard_tick(q),
        }
    }

    /// The client is ready to send: a closed loop fills its window, an
    /// open loop has its first tick now.
    fn begin(&mut self, client: u32, q: &mut Events) {
        let scenario = self.scenario;
        match scenario.clients.arrivals {
            Arrivals::Closed(n) => {
                for _ in 0..n {
                    if !self.may_send(client) {
                        break;
                    }
                    self.send_request(client, q);
                }
            }
            Arrivals::Trace(ref t) => {
                if let Some(&at) = t.times.get(client as usize) {
                    self.tick_at(scenario.clients.start + at, client, q);
                }
            }
            _ => self.dispatch(Ev::Tick { client }, q),
        }
    }

    /// The client's next tick at `at`, or now if that has passed (the
    /// trace's first line, or any line, before a connection was made).
    fn tick_at(&mut self, at: Nanos, client: u32, q: &mut Events) {
        if at <= self.now {
            self.dispatch(Ev::Tick { client }, q);
        } else {
            q.schedule(at, Ev::Tick { client });
        }
    }

    /// Whether the client may send a request now.
    #[inline]
    fn may_send(&self, client: u32) -> bool {
        let c = &self.clients[client as usize];
        !matches!(self.scenario.clients.requests, Some(n) if c.sent >= n) && self.now < c.end
    }

    /// An open-loop client's tick: it sends a request, if it still may,
    /// and its next tick is due one gap later.
    fn tick(&mut self, client: u32, q: &mut Events) {
        if !self.may_send(client) {
            return;
        }
        self.send_request(client, q);
        let scenario = self.scenario;
        let gap = match scenario.clients.arrivals {
            Arrivals::Fixed(i) => i,
            Arrivals::Poisson(mean) => Dist::Exponential { mean }.sample(&mut self.workload),
            Arrivals::Trace(ref t) => {
                let c = &mut self.clients[client as usize];
                c.row += scenario.clients.count as usize;
                if let Some(&at) = t.times.get(c.row) {
                    self.tick_at(scenario.clients.start + at, client, q);
                }
                return;
            }
            Arrivals::Closed(_) => unreachable!("closed-loop clients do not tick"),
        };
        q.schedule(self.now + gap, Ev::Tick { client });
    }

    /// The client sends a new request now, to its balancer.
    fn send_request(&mut self, client: u32, q: &mut Events) {
        let (req, gen) = self.issue(client);
        self.send(Pair::ClientLb(client), Ev::AtLb { req, gen }, q);
    }

    /// A new request from `client`, sent now: its slot and generation.
    fn issue(&mut self, client: u32) -> (u32, u32) {
        let sent = self.now;
        self.out.sent += 1;
        if self.scenario.clients.requests.is_some() {
            // Counted only where a limit reads it: no write to the client's line.
            self.clients[client as usize].sent += 1;
        }
        let row = self.clients[client as usize].row;
        let key = match self.scenario.clients.keys {
            Keys::Random => self.workload.next_u64(),
            Keys::Client => self.clients[client as usize].key,
            Keys::None => 0,
            Keys::Trace => match &self.scenario.clients.arrivals {
                Arrivals::Trace(t) => t.keys[row],
                _ => unreachable!("trace keys need a trace (checked on load)"),
            },
        };
        let request = Request {
            gen: 0,
            client,
            balancer: self.clients[client as usize].balancer,
            ticket: None,
            sent,
            at_lb: 0,
            key,
            measured: sent >= self.scenario.metrics.warmup,
            attempt: 0,
        };
        let req = match self.free.pop() {
            Some(slot) => {
                let r = &mut self.requests[slot as usize];
                let gen = r.gen;
                *r = Request { gen, ..request };
                if let Some(tried) = self.tried.get_mut(slot as usize) {
                    tried.clear();
                }
                slot
            }
            None => {
                self.requests.push(request);
                (self.requests.len() - 1) as u32
            }
        };
        if let Arrivals::Trace(t) = &self.scenario.clients.arrivals {
            if !t.service.is_empty() {
                let slot = req as usize;
                if self.given.len() <= slot {
                    self.given.resize(slot + 1, DRAWN);
                }
                self.given[slot] = t.service[row];
            }
        }
        (req, self.requests[req as usize].gen)
    }

    /// The key a request's picks hash, if the scenario gives keys.
    #[inline]
    fn key(&self, r: &Request) -> Option<u64> {
        match self.scenario.clients.keys {
            Keys::None => None,
            Keys::Random | Keys::Client | Keys::Trace => Some(r.key),
        }
    }

    /// A request arrives at its balancer: its first try.
    fn at_balancer(&mut self, req: u32, gen: u32, q: &mut Events) {
        if !self.guards.is_empty() {
            let r = &self.requests[req as usize];
            let (b, client, measured) = (r.balancer as usize, r.client, r.measured);
            if !self.guards[b].admit(client, self.now) {
                // Refused (a 429): answered at once, as failed.
                if measured {
                    *self.stats.rate_limited.get_or_insert(0) += 1;
                }
                self.send(Pair::LbClient(client), Ev::BackAtClient { req, gen, ok: false }, q);
                return;
            }
            if let Some(budget) = &mut self.guards[b].budget {
                budget.deposit(self.now);
            }
        }
        self.forward(req, gen, q);
    }

    /// Pick an endpoint for the request's current try and send it there
    /// (unless `max_requests` tries are in flight: then, as with no
    /// endpoint, the balancer answers with an error).
    fn forward(&mut self, req: u32, gen: u32, q: &mut Events) {
        let r = &self.requests[req as usize];
        let (key, attempt, b, measured) = (self.key(r), r.attempt, r.balancer, r.measured);
        if !self.in_flight.acquire(self.request_limit) {
            if measured {
                *self.stats.overflows.get_or_insert(0) += 1;
            }
            q.schedule(self.now, Ev::BackAtClient { req, gen, ok: false });
            return;
        }
        let picked = if attempt == 0 {
            self.balancers[b as usize].pick(self.now, key)
        } else {
            self.pick_for_retry(req, b as usize)
        };
        let Some(ticket) = picked else {
            self.in_flight.release();
            // No endpoint: the balancer answers with an error (through the
            // heap, so that a closed loop cannot spin without time passing).
            q.schedule(self.now, Ev::BackAtClient { req, gen, ok: false });
            return;
        };
        let server = ticket.endpoint().0 as u32;
        let r = &mut self.requests[req as usize];
        r.ticket = Some(ticket);
        r.at_lb = self.now;
        let level = u64::from(self.picked[server as usize]);
        self.picked[server as usize] += 1;
        if r.measured {
            self.out.share.record(self.now, server as usize);
            let m = &mut self.out.in_flight_at_pick[server as usize];
            m[0] += 1;
            m[1] += level;
            m[2] += level * level;
        }
        if attempt == 0 {
            if let Some(t) = self.scenario.balancers.timeout {
                q.schedule(self.now + t, Ev::Timeout { req, gen, attempt, overall: true });
            }
        }
        if let Some(t) = self.scenario.resilience.per_try_timeout() {
            q.schedule(self.now + t, Ev::Timeout { req, gen, attempt, overall: false });
        }
        self.send(Pair::LbServer(b, server), Ev::AtServer { req, gen, attempt, server }, q);
    }

    /// A pick for a retry: with `different_endpoint`, one avoiding the
    /// endpoints already tried, by the rule the proxy uses too
    /// ([`fulcrum_balance::pick_avoiding`]).
    fn pick_for_retry(&mut self, req: u32, b: usize) -> Option<Ticket> {
        let different = self.scenario.resilience.retries.as_ref().is_some_and(|r| r.different_endpoint);
        let r = &self.requests[req as usize];
        let avoid: &[EndpointId] = if different { &self.tried[req as usize] } else { &[] };
        let (key, attempt) = (self.key(r), u32::from(r.attempt));
        pick_avoiding(self.balancers[b].as_mut(), self.now, key, attempt, avoid)
    }

    /// A response (or the timeout) settles the request at its balancer,
    /// which learns the outcome; the answer goes on to the client.
    ///
    /// With resilience mechanisms, the try's result also goes to the
    /// outlier detector, and a failed try may be retried at once instead.
    fn answer_at_balancer(&mut self, req: u32, gen: u32, attempt: u8, res: TryResult, overall: bool, q: &mut Events) {
        let r = &mut self.requests[req as usize];
        if r.gen != gen || (!overall && r.attempt != attempt) {
            return;
        }
        // `None`: already settled (timed out before its response, or the
        // timeout of a request that was answered).
        let Some(ticket) = r.ticket.take() else { return };
        self.in_flight.release();
        let latency = self.now - r.at_lb;
        r.at_lb = latency;
        let (client, b, measured) = (r.client, r.balancer as usize, r.measured);
        let server = ticket.endpoint().0 as u32;
        self.picked[server as usize] -= 1;
        let ok = res == TryResult::Ok;
        let outcome = if ok { Outcome::Success { latency } } else { Outcome::Failure { latency } };
        self.balancers[b].on_complete(ticket, self.now, outcome);
        if !self.guards.is_empty() {
            if let Some(ejected) = self.guards[b].record(server, self.now, res) {
                self.note_ejection(ejected);
                self.apply_guard(b);
            }
            if !ok && !overall && self.retry(req, b, server, res, measured) {
                self.forward(req, gen, q);
                return;
            }
        }
        self.send(Pair::LbClient(client), Ev::BackAtClient { req, gen, ok }, q);
    }

    /// Whether the failed try of `req` is retried (the budget permitting);
    /// if so the request is ready for its next try.
    fn retry(&mut self, req: u32, b: usize, server: u32, res: TryResult, measured: bool) -> bool {
        let Some(retries) = &self.scenario.resilience.retries else { return false };
        let r = &self.requests[req as usize];
        if !res.retried_by(retries) || u32::from(r.attempt) + 1 >= retries.attempts {
            return false;
        }
        let allowed = match &mut self.guards[b].budget {
            Some(budget) => budget.try_withdraw(self.now),
            None => true,
        };
        if !allowed {
            self.stats.retries_denied += u64::from(measured);
            return false;
        }
        self.stats.retries += u64::from(measured);
        let r = &mut self.requests[req as usize];
        r.attempt += 1;
        let slot = req as usize;
        if self.tried.len() <= slot {
            self.tried.resize_with(slot + 1, Vec::new);
        }
        self.tried[slot].push(EndpointId(u64::from(server)));
        true
    }

    /// Count an ejection of `server` by some balancer.
    fn note_ejection(&mut self, server: u32) {
        let s = server as usize;
        self.stats.ejections += 1;
        self.stats.first_ejection[s].get_or_insert(self.now);
        if let Some(since) = self.servers[s].failing_since {
            self.stats.time_to_ejection[s].get_or_insert(self.now - since);
        }
    }

    /// Give balancer `b` its routable set, if it changed.
    fn apply_guard(&mut self, b: usize) {
        if self.scenario.resilience.manages_endpoints() {
            self.guards[b].apply(self.balancers[b].as_mut(), self.now);
        }
    }

    /// The resilience timer: returns from ejection, interval rules, slow-start steps.
    fn guard_tick(&mut self, q: &mut Events) {
        if let (Some(max), Some(g)) = (self.scenario.balancers.max_requests, self.guards.first_mut()) {
            // Every balancer's detector sees the same joins: the first one's
            // slow-start factor is the cluster's, as the proxy's one membership.
            self.request_limit = fulcrum_resilience::ramped(max, g.routable(self.now).request_limit_factor);
        }
        for b in 0..self.guards.len() {
            for server in self.guards[b].tick(self.now) {
                self.note_ejection(server);
            }
            self.apply_guard(b);
        }
        // Nothing else pending: the run is over.
        if !q.is_empty() {
            q.schedule(self.now + TICK, Ev::Guard);
        }
    }

    /// Whether the try `attempt` of the request in slot `req`, generation
    /// `gen`, is still wanted: not given up by a timeout (the slot may hold
    /// a later try, or another request, by then).
    #[inline]
    fn wanted(&self, req: u32, gen: u32, attempt: u8) -> bool {
        let r = &self.requests[req as usize];
        r.gen == gen && r.attempt == attempt
    }

    /// The trace's service time of the request in slot `req`, if it gives one.
    #[inline]
    fn given(&self, req: u32) -> Option<Nanos> {
        self.given.get(req as usize).copied().filter(|&t| t != DRAWN)
    }

    /// A try reaches its server: served at once if a slot is free, else it
    /// waits; a failing server answers with its failure instead.
    fn at_server(&mut self, req: u32, gen: u32, attempt: u8, server: u32, q: &mut Events) {
        if !self.wanted(req, gen, attempt) {
            return;
        }
        let now = self.now;
        let given = self.given(req);
        let s = &mut self.servers[server as usize];
        let (at, res) = match s.failing.as_deref() {
            Some(Failing::Error(after)) => (now + after.sample(&mut s.rng), TryResult::ServerError),
            Some(Failing::Refuse) => (now, TryResult::Refused),
            // Never answers: the balancer's timeout fires.
            Some(Failing::Silent) => return,
            None if s.busy < s.limit => {
                s.busy += 1;
                (now + s.service_time(now, given), TryResult::Ok)
            }
            None => {
                s.queue.push_back((req, gen, attempt));
                return;
            }
        };
        q.schedule(at, Ev::Done { req, gen, attempt, server, res });
    }

    /// A server is done with a try: a served one frees its slot for the
    /// next waiting try; the answer goes back to the balancer if the try is
    /// still wanted.
    fn done(&mut self, req: u32, gen: u32, attempt: u8, server: u32, mut res: TryResult, q: &mut Events) {
        // Read before the release (which starts other tries only), so that
        // the request's slot and the server's state are fetched together.
        let wanted = self.wanted(req, gen, attempt);
        if res == TryResult::Ok {
            self.release(server, q);
            // A served try may still be answered with an error (drawn only
            // for servers that have errors, so other runs draw as before).
            let s = &mut self.servers[server as usize];
            if s.errors > 0.0 && s.rng.unit() < s.errors {
                res = TryResult::ServerError;
            }
        }
        if !wanted {
            return;
        }
        let b = self.requests[req as usize].balancer;
        self.send(Pair::ServerLb(b, server), Ev::BackAtLb { req, gen, attempt, res }, q);
    }

    /// A slot of `server` is free: start the first waiting try still wanted.
    fn release(&mut self, server: u32, q: &mut Events) {
        self.servers[server as usize].busy -= 1;
        while let Some((req, gen, attempt)) = self.servers[server as usize].queue.pop_front() {
            if !self.wanted(req, gen, attempt) {
                continue;
            }
            let now = self.now;
            let given = self.given(req);
            let s = &mut self.servers[server as usize];
            s.busy += 1;
            let t = now + s.service_time(now, given);
            q.schedule(t, Ev::Done { req, gen, attempt, server, res: TryResult::Ok });
            break;
        }
    }

    /// The answer to `req` reaches its client.
    fn at_client(&mut self, req: u32, gen: u32, ok: bool, q: &mut Events) {
        let now = self.now;
        let r = &mut self.requests[req as usize];
        if r.gen != gen {
            return;
        }
        if let Some(ticket) = r.ticket.take() {
            // Answered without reaching a server's response (cannot happen
            // today, but a ticket must never leak).
            let b = r.balancer as usize;
            self.picked[ticket.endpoint().0 as usize] -= 1;
            self.balancers[b].on_cancel(ticket);
            self.in_flight.release();
        }
        let r = &mut self.requests[req as usize];
        if r.measured {
            if ok {
                let latency = match self.scenario.metrics.latency_at {
                    MeasureAt::Client => now - r.sent,
                    MeasureAt::Balancer => r.at_lb,
                };
                self.out.latency.record(latency);
            } else {
                self.out.failed += 1;
            }
        }
        let client = r.client;
        r.gen = r.gen.wrapping_add(1);
        self.free.push(req);
        self.out.completed += 1;
        // A closed-loop client sends its next request on an answer.
        if matches!(self.scenario.clients.arrivals, Arrivals::Closed(_)) && self.may_send(client) {
            self.send_request(client, q);
        }
    }

    fn change(&mut self, index: usize) {
        let event = &self.scenario.events[index];
        let now = self.now;
        let s = &mut self.servers[event.server];
        let membership = match &event.action {
            Action::Slow(d) => {
                s.service = d.clone();
                s.failing_since.get_or_insert(now);
                false
            }
            Action::Fail(mode) => {
                s.failing = Some(Box::new(match mode {
                    Some(after) => Failing::Error(after.clone()),
                    None => Failing::Silent,
                }));
                s.failing_since.get_or_insert(now);
                false
            }
            Action::Refuse => {
                s.failing = Some(Box::new(Failing::Refuse));
                s.failing_since.get_or_insert(now);
                false
            }
            Action::Recover => {
                s.failing = None;
                s.failing_since = None;
                s.service = s.original.clone();
                false
            }
            Action::Join => {
                let joins = !std::mem::replace(&mut s.joined, true);
                if joins {
                    s.joined_at = now;
                }
                joins
            }
            Action::Leave => std::mem::replace(&mut s.joined, false),
        };
        if membership && !self.guards.is_empty() {
            let (server, joined) = (event.server, self.servers[event.server].joined);
            for b in 0..self.guards.len() {
                self.guards[b].set_member(server, joined, now);
                if self.scenario.resilience.manages_endpoints() {
                    self.apply_guard(b);
                } else {
                    let endpoints = joined_endpoints(self.scenario, &self.servers);
                    self.balancers[b].set_endpoints(&endpoints).expect("a subset of valid endpoints is valid");
                }
            }
        } else if membership {
            let endpoints = joined_endpoints(self.scenario, &self.servers);
            for b in &mut self.balancers {
                // The set was valid at build time and only its membership changes.
                b.set_endpoints(&endpoints).expect("a subset of valid endpoints is valid");
            }
        }
    }
}

/// The engine as the run loop sees it (a private wrapper, so that the
/// event type stays private).
struct Running<'e, 'a>(&'e mut Engine<'a>);

impl Model for Running<'_, '_> {
    type Event = Ev;
    type Queue = Events;

    fn handle(&mut self, now: Nanos, ev: Ev, queue: &mut Events) {
        self.0.now = now;
        self.0.dispatch(ev, queue);
    }

    /// Completed requests: what the progress bar counts.
    fn work_done(&self, _events: u64) -> u64 {
        self.0.out.completed
    }
}

/// The events a run starts with: each client's start, each scenario
/// event, and the resilience timer's first tick if it has work.
fn schedule_initial(scenario: &Scenario, q: &mut Events) {
    let c = &scenario.clients;
    for i in 0..c.count {
        q.schedule(c.start + c.stagger * u64::from(i), Ev::Start { client: i });
    }
    for (i, e) in scenario.events.iter().enumerate() {
        q.schedule(e.at, Ev::Change { index: i as u32 });
    }
    if scenario.resilience.manages_endpoints() {
        q.schedule(TICK, Ev::Guard);
    }
}

/// Server `i` as the balancers see it.
fn endpoint(scenario: &Scenario, i: usize) -> Endpoint {
    let s = &scenario.servers[i];
    Endpoint::new(i as u64, s.name.clone()).with_weight(s.weight)
}

/// The servers in the balancers' sets now.
fn joined_endpoints(scenario: &Scenario, servers: &[ServerState]) -> Vec<Endpoint> {
    (0..servers.len()).filter(|&i| servers[i].joined).map(|i| endpoint(scenario, i)).collect()
}

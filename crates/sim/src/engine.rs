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
//! Four events of the model are folded into others: an answer's arrival at
//! an open-loop client is handled when its balancer sends it
//! (`Engine::folds_client`; no output can tell), and, when the server hop
//! is a lane, no timeout can give a try up and service times are random
//! (`Engine::service_times_are_random`), a served try's end of service is
//! no event: its answer is scheduled at the balancer when the
//! service starts (one hop after the end), and the server frees the slot
//! by the end times it keeps, at once when a later try finds it full, or
//! by a `Release` event at the earliest end while tries wait
//! (`Engine::serve`). With Poisson clients on lanes, a client's tick is
//! handled when its request reaches the balancer (`Engine::folds_send`),
//! and, without scenario events, a try's arrival at its server when the
//! balancer forwards it (`Engine::folds_arrival`): fleet-1000 queues two
//! events per request, the request at the balancer and the answer back
//! there. A folded event then takes its place among events at the same
//! nanosecond when it is scheduled, not when its unfolded form would
//! have been, which can only matter when two random times coincide to
//! the nanosecond.
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

use crate::dist::Dist;
use crate::resilience::{Guard, ResilienceStats, TryResult, TICK};
use crate::scenario::{Action, Arrivals, Cold, Keys, MeasureAt, Scenario};
use crate::stats::ShareSeries;
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
    /// Events handled (heap and inline), for speed figures.
    pub events: u64,
    /// Requests completed, warm-up included.
    pub completed: u64,
    /// Simulated time at the end.
    pub end: Nanos,
    /// What the resilience mechanisms did, when the scenario has any.
    pub resilience: Option<ResilienceStats>,
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
    /// Open loop with sends folded ([`Engine::fold_send`]): the client's
    /// tick one client hop ago and its request's arrival at the balancer
    /// now, in one event.
    SentAtLb { client: u32 },
    /// A request reached its balancer.
    AtLb { req: u32, gen: u32 },
    /// A try of a request reached its server.
    AtServer { req: u32, gen: u32, attempt: u8, server: u32 },
    /// A server finished serving (or failing) a try. When ends are folded
    /// ([`Engine::fold_done`]) only errors and refusals are events.
    Done { req: u32, gen: u32, attempt: u8, server: u32, res: TryResult, frees: bool },
    /// A full server with tries waiting reaches its earliest end of
    /// service, when its answers skip the `Done` event.
    Release { server: u32 },
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
/// lanes, 4 µs slots and a 33 ms horizon, was measured in its place: it
/// cut fleet-1000's instructions per request by 17 % but not its time,
/// and slowed seed-004 by a quarter.)
type Events = Queue<Ev>;

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

/// Fields in the order a try reaching the server reads them, aligned to a
/// cache line: with 1,000 servers picked at random, the busy count, the
/// failure mode (boxed: 8 bytes, rarely set), the folded ends and the cold
/// start fill the first line, the join time, the service time and its
/// random stream the second, the rest the third and fourth.
#[repr(C, align(64))]
struct ServerState {
    busy: u32,
    limit: u32,
    failing: Option<Box<Failing>>,
    /// With folded ends ([`Engine::fold_done`]) and a concurrency limit:
    /// the end times of the tries in service, in no order, some possibly
    /// past: its length is the busy count, an upper bound until
    /// [`Engine::catch_up`] drops the past ones, which it does only when
    /// the bound reaches the limit (appends are cheaper than a heap's
    /// pushes and pops; a fast fleet-1000 server keeps about 10 of its 32
    /// slots busy, so one pass drops about 20 ends).
    ends: Vec<Nanos>,
    cold: Option<Cold>,
    /// When it last joined (the start for servers joined from the start).
    joined_at: Nanos,
    service: Dist,
    rng: Rng,
    /// Waiting tries: (request, generation, attempt).
    queue: VecDeque<(u32, u32, u8)>,
    /// Whether a [`Ev::Release`] is pending (folded ends only).
    release_pending: bool,
    joined: bool,
    original: Dist,
    /// When the current failure or slow-down began (for time to ejection).
    failing_since: Option<Nanos>,
}

impl ServerState {
    /// A service time drawn at `now`, with the cold-start penalty if any.
    #[inline]
    fn service_time(&mut self, now: Nanos) -> Nanos {
        let t = self.service.sample(&mut self.rng);
        match &self.cold {
            Some(c) => (t as f64 * c.multiplier(now.saturating_sub(self.joined_at))) as Nanos,
            None => t,
        }
    }
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
    free: Vec<u32>,
    clients: Vec<ClientState>,
    servers: Vec<ServerState>,
    balancers: Vec<Box<dyn Balancer>>,
    workload: Rng,
    network: Rng,
    /// Time each directed pair may next send (first contact resolved), or
    /// `None` before first contact. Empty when there is no first-contact delay.
    ready: Vec<Option<Nanos>>,
    /// The queue's lanes for the client ↔ balancer and balancer ↔ server
    /// hops, when the hop's latency is fixed, not zero, and there is no
    /// first-contact delay (every message then takes the same time).
    client_lane: Option<Lane>,
    server_lane: Option<Lane>,
    zero_client_hop: bool,
    /// The client lane's latency when an answer's arrival at its client is
    /// handled when the balancer sends it (see [`Engine::answer_at_balancer`]).
    fold_client: Option<Nanos>,
    /// The server lane's latency when a served try's answer is scheduled
    /// at the balancer when its service starts, with no event at the end
    /// of service (see [`Engine::serve`]). Not with timeouts: a try given
    /// up before its end of service sends no answer (and its end is the
    /// run's last event or not), which only the end's event can tell.
    fold_done: Option<Nanos>,
    /// The client lane's latency when an open-loop client's tick is
    /// handled when its request reaches the balancer, one hop later (see
    /// [`Engine::folds_send`]).
    fold_send: Option<Nanos>,
    /// The server lane's latency when a try's arrival at its server is
    /// handled when its balancer forwards it, one hop earlier (see
    /// [`Engine::folds_arrival`]).
    fold_arrival: Option<Nanos>,
    zero_server_hop: bool,
    /// Whether a try can be given up before its server answers (a
    /// timeout); without one, a try reaching its server is always the
    /// request's current one and its slot need not be read.
    abandons: bool,
    out: RawRun,
    completed: u64,
    progress: Option<&'a AtomicU64>,
    /// One per balancer when the scenario has resilience mechanisms, else empty.
    guards: Vec<Guard>,
    stats: ResilienceStats,
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
                failing_since: None,
                limit: s.concurrency.unwrap_or(u32::MAX),
                busy: 0,
                release_pending: false,
                ends: Vec::new(),
                queue: VecDeque::new(),
                joined: s.joined,
                joined_at: 0,
                cold: s.cold,
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
        let all_endpoints: Vec<Endpoint> = scenario
            .servers
            .iter()
            .enumerate()
            .map(|(i, s)| Endpoint::new(i as u64, s.name.clone()).with_weight(s.weight))
            .collect();
        let resilience = &scenario.resilience;
        let guards = if resilience.enabled() {
            let member: Vec<bool> = servers.iter().map(|s| s.joined).collect();
            (0..n_balancers).map(|_| Guard::new(resilience, &all_endpoints, member.clone(), 0)).collect()
        } else {
            Vec::new()
        };
        let ready = if scenario.network.first_contact.is_zero() {
            Vec::new()
        } else {
            vec![None; 2 * c.count as usize + 2 * n_balancers * n_servers]
        };
        let mut initial = Queue::new();
        let net = &scenario.network;
        let mut hop_lane = |latency: &Dist| match latency {
            Dist::Fixed(d) if *d > 0 && net.first_contact.is_zero() => Some(initial.lane(*d)),
            _ => None,
        };
        let (client_lane, server_lane) = (hop_lane(&net.client_lb), hop_lane(&net.lb_server));
        let mut engine = Engine {
            scenario,
            now: 0,
            initial,
            requests: Vec::new(),
            tried: Vec::new(),
            free: Vec::new(),
            clients,
            servers,
            balancers,
            workload,
            network,
            ready,
            client_lane,
            server_lane,
            zero_client_hop: scenario.network.client_lb.is_zero(),
            fold_client: None,
            fold_done: None,
            fold_send: None,
            fold_arrival: None,
            zero_server_hop: scenario.network.lb_server.is_zero(),
            abandons: scenario.balancers.timeout.is_some() || scenario.resilience.per_try_timeout().is_some(),
            out: RawRun {
                latency: {
                    let mut r = Recorder::new(scenario.metrics.exact);
                    r.reserve(scenario.total_requests().unwrap_or(0).min(50_000_000) as usize);
                    r
                },
                failed: 0,
                per_server: vec![0; n_servers],
                share: ShareSeries::new(scenario.metrics.share_interval, n_servers),
                events: 0,
                completed: 0,
                end: 0,
                resilience: None,
            },
            completed: 0,
            progress,
            guards,
            stats: ResilienceStats {
                first_ejection: vec![None; n_servers],
                time_to_ejection: vec![None; n_servers],
                ..ResilienceStats::default()
            },
        };
        engine.fold_client = match engine.client_lane {
            Some(lane) if engine.folds_client() => Some(engine.initial.lane_delay(lane)),
            _ => None,
        };
        engine.fold_done = match engine.server_lane {
            Some(lane) if !engine.abandons && engine.service_times_are_random() => {
                Some(engine.initial.lane_delay(lane))
            }
            _ => None,
        };
        engine.fold_send = engine.fold_client.filter(|_| engine.folds_send());
        engine.fold_arrival = engine.fold_done.filter(|_| engine.folds_arrival());
        let q = &mut engine.initial;
        for i in 0..c.count {
            q.schedule(c.start + c.stagger * i as u64, Ev::Start { client: i });
        }
        for (i, e) in scenario.events.iter().enumerate() {
            q.schedule(e.at, Ev::Change { index: i as u32 });
        }
        if resilience.manages_endpoints() {
            q.schedule(TICK, Ev::Guard);
        }
        Ok(engine)
    }

    /// Whether an answer's arrival at its client can be handled when its
    /// balancer sends it instead of as an event one lane delay later, with
    /// every output the same. There the client only records the latency
    /// (due at a known time), counts the request and frees its slot; that
    /// observes nothing another event changes, and the lane hands answers
    /// over in the order they were sent, so the latencies are recorded in
    /// the same order. It holds for open-loop clients (a closed-loop
    /// client sends its next request on the answer's arrival) without
    /// timeouts or resilience mechanisms (their events read the request's
    /// slot, and the guard's timer stops when no other event is pending).
    fn folds_client(&self) -> bool {
        !matches!(self.scenario.clients.arrivals, Arrivals::Closed(_)) && !self.abandons && self.guards.is_empty()
    }

    /// Whether every service time is drawn from a continuous distribution
    /// in nanoseconds (exponential, log-normal, uniform in ns), those a
    /// scenario event may set included, and sends are not at fixed
    /// intervals: then the end of a service is a random nanosecond, and
    /// folding it ([`Engine::fold_done`]) can move an answer among events
    /// due at its nanosecond only when two random times coincide. With
    /// fixed, whole-millisecond or empirical service times and fixed hops
    /// such ties are systematic (a closed loop of fixed 2 ms services on
    /// 100 µs hops measured other latencies folded than not).
    fn service_times_are_random(&self) -> bool {
        let continuous =
            |d: &Dist| matches!(d, Dist::Exponential { .. } | Dist::LogNormal { .. } | Dist::Uniform { .. });
        !matches!(self.scenario.clients.arrivals, Arrivals::Fixed(_))
            && self.scenario.servers.iter().all(|s| continuous(&s.service))
            && self.scenario.events.iter().all(|e| !matches!(&e.action, Action::Slow(d) if !continuous(d)))
    }

    /// Whether an open-loop client's tick can be handled one client hop
    /// late, when its request reaches the balancer: one queued event per
    /// request instead of the tick and the arrival. The tick draws the
    /// request's key and the next gap from the workload stream, which
    /// only ticks draw from, and every tick (the first, at the client's
    /// start, too) moves by the same delay, so the draws keep their
    /// order; it counts a send and takes a request slot, which nothing
    /// reads before the arrival (the slot's index is seen by no output).
    /// Whether the next tick will send is known when it is scheduled
    /// (only the client's own ticks change its count), so a tick that
    /// sends nothing is never moved (see [`Engine::next_tick`]).
    ///
    /// What a fold can move is an event's place among events due at the
    /// same nanosecond, its sequence number being taken at another time.
    /// With Poisson sends every time of a run derives from random
    /// nanoseconds, so that needs two random times to coincide (as for
    /// the folded ends); with sends at fixed
    /// intervals, starts and ticks would tie at round times, so only
    /// Poisson arrivals fold, and only under the conditions of
    /// [`Engine::folds_client`] (no timeout, no resilience timer).
    fn folds_send(&self) -> bool {
        matches!(self.scenario.clients.arrivals, Arrivals::Poisson(_)) && self.folds_client()
    }

    /// Whether a try's arrival at its server can be handled when its
    /// balancer forwards it, one server hop early, with the same service
    /// starts and draws. With folded ends ([`Engine::fold_done`]) a working server
    /// changes only by arrivals and by time passing: arrivals come off
    /// one lane in the order they were forwarded, and the arrival catches
    /// the server up to its own time first (the ends before it free their
    /// slots and start the waiting tries at those ends, as the `Release`
    /// events would), so each service starts when and in the order it did,
    /// drawing the same times. Not when scenario events can fail, slow,
    /// add or remove a server between the forward and the arrival, and,
    /// as for sends ([`Engine::folds_send`]), only with Poisson arrivals:
    /// the answer scheduled at the forward takes its place among events
    /// due at its nanosecond then, not at the arrival.
    fn folds_arrival(&self) -> bool {
        matches!(self.scenario.clients.arrivals, Arrivals::Poisson(_)) && self.scenario.events.is_empty()
    }

    /// Run to the end and return what was measured.
    pub fn run(mut self) -> RawRun {
        let mut queue = std::mem::take(&mut self.initial);
        let progress = self.progress;
        fulcrum_des::run(&mut Running(&mut self), &mut queue, Nanos::MAX, progress);
        self.out.end = self.out.end.max(self.now);
        // Every measured request is in the share series too (one count
        // per request instead of two on the hot path).
        self.out.per_server = self.out.share.totals();
        self.out.completed = self.completed;
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

    /// Send a message over `pair`; it arrives as `ev`, at once if the hop
    /// takes no time. The lane's case, four of a fleet request's six
    /// events, is inlined into every handler; the general one is a call.
    #[inline(always)]
    fn send(&mut self, pair: Pair, ev: Ev, q: &mut Events) {
        let client_hop = matches!(pair, Pair::ClientLb(_) | Pair::LbClient(_));
        if let Some(lane) = if client_hop { self.client_lane } else { self.server_lane } {
            // Due at now + the fixed latency, like the general path below.
            q.schedule_lane(lane, ev);
            return;
        }
        self.send_timed(pair, client_hop, ev, q);
    }

    /// [`Engine::send`] over a hop without a lane: first contact, then the
    /// hop's latency drawn.
    #[inline(never)]
    fn send_timed(&mut self, pair: Pair, client_hop: bool, ev: Ev, q: &mut Events) {
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

    /// Ask the processor to bring in the line `ev`'s handler reads first
    /// (an answer's request slot, a send's client), while the current
    /// event is handled: at random places among 64-byte records those are
    /// cache misses, which a prefetch one event ahead hides. A hint only:
    /// no result depends on it. About 10 % less CPU time per fleet-1000
    /// request in alternating runs.
    #[inline]
    fn prefetch(&self, ev: &Ev) {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            let line: *const i8 = match *ev {
                Ev::BackAtLb { req, .. } => match self.requests.get(req as usize) {
                    Some(r) => (r as *const Request).cast(),
                    None => return,
                },
                Ev::SentAtLb { client } => match self.clients.get(client as usize) {
                    Some(c) => (c as *const ClientState).cast(),
                    None => return,
                },
                _ => return,
            };
            // SAFETY: a prefetch is a hint that cannot fault, whatever the
            // address; this one points into a live slice.
            unsafe { _mm_prefetch(line, _MM_HINT_T0) };
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = ev;
    }

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
            Ev::Tick { client } => {
                if self.may_send(client, self.now) {
                    self.send_request(client, q);
                    self.next_tick(client, self.now, q);
                }
            }
            Ev::SentAtLb { client } => {
                // The tick's event, counted as the model has it.
                self.out.events += 1;
                let sent = self.now - self.fold_send.expect("folded sends");
                let (req, gen) = self.issue(client, sent);
                self.next_tick(client, sent, q);
                self.at_balancer(req, gen, q);
            }
            Ev::AtLb { req, gen } => self.at_balancer(req, gen, q),
            Ev::AtServer { req, gen, attempt, server } => self.at_server(req, gen, attempt, server, q),
            Ev::Done { req, gen, attempt, server, res, frees } => {
                if frees {
                    self.release(server, q);
                }
                // Without a timeout no try is given up, so the answer is
                // the request's current try's (as at the server), and the
                // slot is read only when it may not be, or for the
                // balancer that names a first-contact pair.
                if self.abandons {
                    let r = &self.requests[req as usize];
                    if r.gen != gen || r.attempt != attempt {
                        return;
                    }
                }
                let b = if self.ready.is_empty() { 0 } else { self.requests[req as usize].balancer };
                self.send(Pair::ServerLb(b, server), Ev::BackAtLb { req, gen, attempt, res }, q);
            }
            Ev::Release { server } => {
                // Not a step of any request: the events counted stay those
                // of the model with an event per end of service.
                self.out.events -= 1;
                self.release_folded(server, q);
            }
            Ev::BackAtLb { req, gen, attempt, res } => self.answer_at_balancer(req, gen, attempt, res, false, q),
            // The balancer gives up: the try fails, and a late response finds
            // its ticket gone.
            Ev::Timeout { req, gen, attempt, overall } => {
                self.answer_at_balancer(req, gen, attempt, TryResult::Timeout, overall, q)
            }
            Ev::BackAtClient { req, gen, ok } => self.at_client(self.now, req, gen, ok, q),
            Ev::Change { index } => self.change(index as usize),
            Ev::Guard => self.guard_tick(q),
        }
    }

    fn begin(&mut self, client: u32, q: &mut Events) {
        match self.scenario.clients.arrivals {
            Arrivals::Closed(n) => {
                for _ in 0..n {
                    if !self.may_send(client, self.now) {
                        break;
                    }
                    self.send_request(client, q);
                }
            }
            _ => match self.fold_send {
                // The first tick moves by the hop like every other (its
                // draws keep their place among theirs); the event counts
                // as the tick and the arrival.
                Some(hop) if self.may_send(client, self.now) => q.schedule(self.now + hop, Ev::SentAtLb { client }),
                _ => self.dispatch(Ev::Tick { client }, q),
            },
        }
    }

    /// Whether the client may send a request at `at` (its count as now).
    #[inline]
    fn may_send(&self, client: u32, at: Nanos) -> bool {
        let c = &self.clients[client as usize];
        !matches!(self.scenario.clients.requests, Some(n) if c.sent >= n) && at < c.end
    }

    /// Schedule an open-loop client's next tick after one sent at `sent`.
    /// With folded sends ([`Engine::fold_send`]) a tick that will send is
    /// scheduled as its request's arrival at the balancer, one hop after
    /// the tick; one that will not is an event of its own at its time, or
    /// counted at once if that time has passed (it changes nothing but the
    /// count, and the run's end if it is the last event).
    fn next_tick(&mut self, client: u32, sent: Nanos, q: &mut Events) {
        let gap = match self.scenario.clients.arrivals {
            Arrivals::Fixed(i) => i,
            Arrivals::Poisson(mean) => Dist::Exponential { mean }.sample(&mut self.workload),
            Arrivals::Closed(_) => unreachable!("closed-loop clients do not tick"),
        };
        let at = sent + gap;
        match self.fold_send {
            Some(hop) if self.may_send(client, at) => q.schedule(at + hop, Ev::SentAtLb { client }),
            Some(_) if at < self.now => {
                self.out.events += 1;
                self.out.end = self.out.end.max(at);
            }
            _ => q.schedule(at, Ev::Tick { client }),
        }
    }

    /// The client sends a new request now, to its balancer.
    fn send_request(&mut self, client: u32, q: &mut Events) {
        let (req, gen) = self.issue(client, self.now);
        self.send(Pair::ClientLb(client), Ev::AtLb { req, gen }, q);
    }

    /// The client sends a new request at `sent` (now, or one client hop
    /// ago when sends are folded): its slot and generation.
    fn issue(&mut self, client: u32, sent: Nanos) -> (u32, u32) {
        if self.scenario.clients.requests.is_some() {
            // Counted only where a limit reads it: no write to the client's line.
            self.clients[client as usize].sent += 1;
        }
        let key = match self.scenario.clients.keys {
            Keys::Random => self.workload.next_u64(),
            Keys::Client => self.clients[client as usize].key,
            Keys::None => 0,
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
        (req, self.requests[req as usize].gen)
    }

    /// The key a request's picks hash, if the scenario gives keys.
    #[inline]
    fn key(&self, r: &Request) -> Option<u64> {
        match self.scenario.clients.keys {
            Keys::None => None,
            Keys::Random | Keys::Client => Some(r.key),
        }
    }

    /// A request arrives at its balancer: its first try.
    fn at_balancer(&mut self, req: u32, gen: u32, q: &mut Events) {
        if !self.guards.is_empty() {
            let b = self.requests[req as usize].balancer as usize;
            if let Some(budget) = &mut self.guards[b].budget {
                budget.deposit(self.now);
            }
        }
        self.forward(req, gen, q);
    }

    /// Pick an endpoint for the request's current try and send it there.
    fn forward(&mut self, req: u32, gen: u32, q: &mut Events) {
        let r = &self.requests[req as usize];
        let (key, attempt, b) = (self.key(r), r.attempt, r.balancer);
        let picked = if attempt == 0 {
            self.balancers[b as usize].pick(self.now, key)
        } else {
            self.pick_for_retry(req, b as usize)
        };
        let Some(ticket) = picked else {
            // No endpoint: the balancer answers with an error (through the
            // heap, so that a closed loop cannot spin without time passing).
            q.schedule(self.now, Ev::BackAtClient { req, gen, ok: false });
            return;
        };
        let server = ticket.endpoint().0 as u32;
        let r = &mut self.requests[req as usize];
        r.ticket = Some(ticket);
        r.at_lb = self.now;
        if r.measured {
            self.out.share.record(self.now, server as usize);
        }
        if attempt == 0 {
            if let Some(t) = self.scenario.balancers.timeout {
                q.schedule(self.now + t, Ev::Timeout { req, gen, attempt, overall: true });
            }
        }
        if let Some(t) = self.scenario.resilience.per_try_timeout() {
            q.schedule(self.now + t, Ev::Timeout { req, gen, attempt, overall: false });
        }
        if let Some(hop) = self.fold_arrival {
            // Handled now, as due one lane delay later (see `folds_arrival`).
            self.out.events += 1;
            self.arrive_folded(req, gen, attempt, server, self.now + hop, q);
            return;
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
        let latency = self.now - r.at_lb;
        r.at_lb = latency;
        let (client, b, measured) = (r.client, r.balancer as usize, r.measured);
        let server = ticket.endpoint().0 as u32;
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
        if let Some(delay) = self.fold_client {
            // Handled now, as due one lane delay later (see `folds_client`):
            // one event fewer through the queue.
            let at = self.now + delay;
            self.out.events += 1;
            self.out.end = at;
            self.at_client(at, req, gen, ok, q);
            return;
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

    fn at_server(&mut self, req: u32, gen: u32, attempt: u8, server: u32, q: &mut Events) {
        if self.abandons {
            let r = &self.requests[req as usize];
            if r.gen != gen || r.attempt != attempt {
                return;
            }
        }
        let now = self.now;
        let s = &mut self.servers[server as usize];
        match s.failing.as_deref() {
            Some(Failing::Error(after)) => {
                let t = now + after.sample(&mut s.rng);
                q.schedule(t, Ev::Done { req, gen, attempt, server, res: TryResult::ServerError, frees: false });
            }
            Some(Failing::Refuse) => {
                q.schedule(now, Ev::Done { req, gen, attempt, server, res: TryResult::Refused, frees: false });
            }
            // Never answers: the balancer's timeout fires.
            Some(Failing::Silent) => {}
            None if self.fold_done.is_some() => self.arrive_folded(req, gen, attempt, server, now, q),
            None if s.busy < s.limit => {
                s.busy += 1;
                let t = now + s.service_time(now);
                q.schedule(t, Ev::Done { req, gen, attempt, server, res: TryResult::Ok, frees: true });
            }
            None => s.queue.push_back((req, gen, attempt)),
        }
    }

    /// [`Engine::at_server`] for a working server whose ends are folded,
    /// the try arriving at `now` (the clock, or one hop ahead of it when
    /// arrivals are folded): served at once if it has room, else queued,
    /// with a [`Ev::Release`] at its earliest end of service.
    fn arrive_folded(&mut self, req: u32, gen: u32, attempt: u8, server: u32, now: Nanos, q: &mut Events) {
        let s = &mut self.servers[server as usize];
        if s.ends.len() >= s.limit as usize {
            // Full, perhaps only on paper: ends up to now free their slots
            // (an end at `now` frees it before or after this arrival, the
            // same either way: the front of the queue is served first).
            self.catch_up(server, now, q);
        }
        let s = &mut self.servers[server as usize];
        if s.ends.len() < s.limit as usize {
            self.serve(req, gen, attempt, server, now, q);
        } else {
            s.queue.push_back((req, gen, attempt));
            self.pend_release(server, q);
        }
    }

    /// Start serving a try at `start` on a server whose ends are folded:
    /// its answer is scheduled at the balancer at once, due one server hop
    /// after its end of service, and the end is kept in the server's
    /// `ends` (when it has a limit) to free its slot then. The end of
    /// service is counted as the event it is in the unfolded model.
    #[inline]
    fn serve(&mut self, req: u32, gen: u32, attempt: u8, server: u32, start: Nanos, q: &mut Events) {
        let hop = self.fold_done.expect("folded ends");
        let s = &mut self.servers[server as usize];
        let end = start + s.service_time(start);
        if s.limit != u32::MAX {
            // Without a limit no try ever waits: the ends need no keeping.
            s.ends.push(end);
        }
        self.out.events += 1;
        q.schedule(end + hop, Ev::BackAtLb { req, gen, attempt, res: TryResult::Ok });
    }

    /// Free the slots of a folded server's tries ended by `upto`, each
    /// starting the next waiting try at its end (in end order, as their
    /// `Done` events would have).
    fn catch_up(&mut self, server: u32, upto: Nanos, q: &mut Events) {
        loop {
            let s = &mut self.servers[server as usize];
            if s.queue.is_empty() {
                // Nothing waits: the slots of ended tries are simply free.
                s.ends.retain(|&end| end > upto);
                return;
            }
            let Some((i, end)) = earliest(&s.ends) else { return };
            if end > upto {
                return;
            }
            s.ends.swap_remove(i);
            // Without timeouts (see `fold_done`) every waiting try is wanted.
            let (req, gen, attempt) = s.queue.pop_front().expect("a waiting try");
            self.serve(req, gen, attempt, server, end, q);
        }
    }

    /// Make sure a folded server with tries waiting has a [`Ev::Release`]
    /// pending at its earliest end of service.
    fn pend_release(&mut self, server: u32, q: &mut Events) {
        let s = &mut self.servers[server as usize];
        if s.release_pending || s.queue.is_empty() {
            return;
        }
        if let Some((_, end)) = earliest(&s.ends) {
            s.release_pending = true;
            q.schedule(end, Ev::Release { server });
        }
    }

    /// A folded server's earliest end of service while tries wait.
    fn release_folded(&mut self, server: u32, q: &mut Events) {
        self.servers[server as usize].release_pending = false;
        self.catch_up(server, self.now, q);
        self.pend_release(server, q);
    }

    /// A server slot is free: start the next queued request still wanted.
    fn release(&mut self, server: u32, q: &mut Events) {
        let now = self.now;
        let s = &mut self.servers[server as usize];
        s.busy -= 1;
        while let Some((req, gen, attempt)) = s.queue.pop_front() {
            // Only a timeout can have given a waiting try up.
            if self.abandons {
                let r = &self.requests[req as usize];
                if r.gen != gen || r.attempt != attempt {
                    continue;
                }
            }
            s.busy += 1;
            let t = now + s.service_time(now);
            q.schedule(t, Ev::Done { req, gen, attempt, server, res: TryResult::Ok, frees: true });
            break;
        }
    }

    /// The answer to `req` reaches its client at `now`.
    fn at_client(&mut self, now: Nanos, req: u32, gen: u32, ok: bool, q: &mut Events) {
        let r = &mut self.requests[req as usize];
        if r.gen != gen {
            return;
        }
        if let Some(ticket) = r.ticket.take() {
            // Answered without reaching a server's response (cannot happen
            // today, but a ticket must never leak).
            let b = r.balancer as usize;
            self.balancers[b].on_cancel(ticket);
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
        self.completed += 1;
        // Closed loop: never folded, so `now` is the clock.
        if matches!(self.scenario.clients.arrivals, Arrivals::Closed(_)) && self.may_send(client, now) {
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
        // The next event's first line on its way while this one is handled.
        if let Some(next) = queue.next_hint() {
            self.0.prefetch(next);
        }
        self.0.now = now;
        self.0.dispatch(ev, queue);
    }

    /// Completed requests: what the progress bar counts.
    fn work_done(&self, _events: u64) -> u64 {
        self.0.completed
    }
}

/// The earliest of a folded server's end times, and its index.
fn earliest(ends: &[Nanos]) -> Option<(usize, Nanos)> {
    ends.iter().copied().enumerate().min_by_key(|&(_, end)| end)
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

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn scenario(text: &str) -> Scenario {
        Scenario::parse(text, "t.toml", "t", Path::new(".")).expect("a valid scenario")
    }

    /// Runs `scenario`'s first algorithm with the client's arrivals folded
    /// or not, and the ends of service folded or not: what it measured,
    /// and the events handled and the end. Sends and arrivals at servers
    /// are folded where the engine folds them.
    fn measured(scenario: &Scenario, fold: bool, fold_done: bool) -> (String, u64, u64, Nanos) {
        measured_with(scenario, fold, fold_done, false)
    }

    /// [`measured`], with sends and arrivals at servers unfolded too if
    /// `unfolded`.
    fn measured_with(scenario: &Scenario, fold: bool, fold_done: bool, unfolded: bool) -> (String, u64, u64, Nanos) {
        let mut engine = Engine::new(scenario, &scenario.algorithms[0], 7, None).expect("an engine");
        assert_eq!(engine.fold_client.is_some(), engine.folds_client());
        assert_eq!(engine.fold_done.is_some(), engine.server_lane.is_some());
        assert_eq!(engine.fold_send.is_some(), engine.fold_client.is_some() && engine.folds_send());
        assert_eq!(engine.fold_arrival.is_some(), engine.fold_done.is_some() && engine.folds_arrival());
        if !fold {
            engine.fold_client = None;
        }
        if !fold_done {
            engine.fold_done = None;
            // A folded arrival needs folded ends.
            engine.fold_arrival = None;
        }
        if unfolded {
            engine.fold_send = None;
            engine.fold_arrival = None;
        }
        let mut raw = engine.run();
        let summary = format!("{:?} {} {:?} {:?}", raw.latency.summary(), raw.failed, raw.per_server, raw.share);
        (summary, raw.events, raw.completed, raw.end)
    }

    #[test]
    fn an_answer_folded_into_its_balancers_event_changes_nothing() {
        // Open loop, fixed hops, exponential service: ties between the
        // lanes and the radix heap happen, and the last event is an answer.
        let text = r#"
[clients]
count = 20
loop = "open"
rate = 2000
duration = "200ms"
[[servers]]
count = 8
service = { dist = "exponential", mean = "2ms" }
concurrency = 2
[network]
client_lb = "100us"
lb_server = "50us"
[balancers]
count = 3
"#;
        for measure in ["", "\n[metrics]\nlatency = \"balancer\"\n"] {
            let open = scenario(&format!("{text}{measure}"));
            let folded = measured(&open, true, true);
            assert_eq!(folded, measured(&open, false, true));
            assert!(folded.2 > 5_000, "requests completed: {}", folded.2);
        }
        // A closed loop sends on the answer's arrival: never folded.
        let closed = scenario(
            &text
                .replace("rate = 2000\nduration = \"200ms\"", "in_flight = 2\nrequests = 50")
                .replace("\"open\"", "\"closed\""),
        );
        assert!(Engine::new(&closed, &closed.algorithms[0], 7, None).expect("an engine").fold_client.is_none());
    }

    #[test]
    fn ends_of_service_folded_into_the_answers_hop_change_nothing() {
        // Servers full much of the time (tries wait, and a waiting try
        // starts at an end of service), one failing with errors from
        // 100 ms: the folded model must measure what the model with an
        // event per end measures, clients folded or not.
        let base = r#"
[clients]
count = 30
loop = "open"
rate = 400
duration = "300ms"
[[servers]]
count = 6
name = "s"
service = { dist = "exponential", mean = "2ms" }
concurrency = 2
[network]
client_lb = "100us"
lb_server = "50us"
[[events]]
at = "100ms"
server = "s-0"
action = "fail"
after = "1ms"
"#;
        // With retries of errors too (a retry is a new try at the server).
        let retries = "[retries]\nattempts = 2\non = [\"5xx\"]\n";
        for extra in ["[balancers]\ncount = 2\n", retries] {
            let s = scenario(&format!("{base}{extra}"));
            for fold_client in [true, false] {
                let folded = measured(&s, fold_client, true);
                assert_eq!(folded, measured(&s, fold_client, false));
                assert!(folded.2 > 3_000, "requests completed: {}", folded.2);
            }
        }
        // A timeout can give a try up before its end: never folded.
        let timeout = scenario(&format!("{base}[balancers]\ntimeout = \"8ms\"\n"));
        assert!(Engine::new(&timeout, &timeout.algorithms[0], 7, None).expect("an engine").fold_done.is_none());
        // Without a concurrency limit no end is kept.
        let unlimited = scenario(&base.replace("concurrency = 2\n", ""));
        assert_eq!(measured(&unlimited, true, true), measured(&unlimited, true, false));
        // Fixed service times on fixed hops tie at round times, where
        // the folded answer would leave in another order: not folded.
        let fixed = scenario(
            &base
                .replace("{ dist = \"exponential\", mean = \"2ms\" }", "{ dist = \"fixed\", value = \"2ms\" }")
                .replace(
                    "loop = \"open\"\nrate = 400\nduration = \"300ms\"",
                    "loop = \"closed\"\nin_flight = 2\nrequests = 100",
                ),
        );
        assert!(Engine::new(&fixed, &fixed.algorithms[0], 7, None).expect("an engine").fold_done.is_none());
    }

    #[test]
    fn sends_and_arrivals_folded_change_nothing() {
        // Open loop without scenario events: a client's tick is handled
        // when its request reaches the balancer, and a try's arrival at
        // its server when the balancer forwards it. Servers full much of
        // the time, so tries wait and start at the `Release` events;
        // staggered starts among the other clients' ticks; a request
        // limit and a warm-up, so that the last ticks send nothing and
        // some requests are not measured.
        let text = r#"
[clients]
count = 25
loop = "open"
rate = 450
duration = "300ms"
stagger = "1ms"
{limit}
[[servers]]
count = 6
name = "s"
service = { dist = "exponential", mean = "2ms" }
concurrency = 2
[network]
client_lb = "100us"
lb_server = "{server_hop}"
[balancers]
count = 3
[metrics]
warmup = "20ms"
"#;
        let mut folded_runs = 0;
        for limit in ["", "requests = 40"] {
            for server_hop in ["50us", "0s"] {
                let s = scenario(&text.replace("{limit}", limit).replace("{server_hop}", server_hop));
                let engine = Engine::new(&s, &s.algorithms[0], 7, None).expect("an engine");
                assert!(engine.fold_send.is_some());
                // A zero hop has no lane: arrivals are handled at once anyway.
                assert_eq!(engine.fold_arrival.is_some(), server_hop != "0s");
                let folded = measured_with(&s, true, true, false);
                assert_eq!(folded, measured_with(&s, true, true, true), "{limit} {server_hop}");
                assert_eq!(folded, measured_with(&s, false, false, true), "{limit} {server_hop}");
                assert!(folded.2 > 900, "requests completed: {}", folded.2);
                folded_runs += 1;
            }
        }
        assert_eq!(folded_runs, 4);
        // A scenario event can change a server between a forward and its
        // arrival: arrivals are not folded then (sends still are).
        let failing = scenario(
            &(text.replace("{limit}", "").replace("{server_hop}", "50us")
                + "[[events]]\nat = \"100ms\"\nserver = \"s-0\"\naction = \"fail\"\n"),
        );
        let engine = Engine::new(&failing, &failing.algorithms[0], 7, None).expect("an engine");
        assert!(engine.fold_send.is_some() && engine.fold_arrival.is_none());
    }
}

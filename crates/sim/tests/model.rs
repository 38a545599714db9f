//! Invariants of the simulator's model over generated scenarios: random
//! topologies (clients, balancers, servers), arrival processes (Poisson,
//! fixed interval, closed loop), service and hop distributions (fixed and
//! random), first-contact delays, concurrency limits, cold starts,
//! timeouts, retries, outlier detection, slow start and scenario events
//! (slow-downs, failures of every mode, recoveries, joins and leaves).
//!
//! Each generated scenario is written as TOML and read like a file, so it
//! is valid by the same checks; then, for every run:
//!
//! - every request sent is completed (answered or failed) exactly once;
//! - the measured requests are the successes recorded plus the failures,
//!   and each was forwarded once per try unless no endpoint was left;
//! - no success is faster than its hops and its service allow, nor slower
//!   than a timeout allows;
//! - with no failure source, nothing fails;
//! - without events, timeouts or resilience mechanisms, the events handled
//!   are exactly one per step of each request (the counter counts once);
//! - the same seed gives the same run, on one thread or several.

use std::fmt::Write as _;
use std::path::Path;

use fulcrum_sim::engine::{Engine, RawRun};
use fulcrum_sim::{report, run_once, simulate, Plan, Scenario};
use proptest::prelude::*;

/// A duration distribution, in microseconds.
#[derive(Clone, Debug)]
enum DistSpec {
    Fixed(u64),
    Exponential(u64),
    /// `[min, min + width]`.
    Uniform(u64, u64),
    /// Whole milliseconds in `[min, min + width)`.
    UniformMs(u64, u64),
    LogNormal(u64, f64),
}

impl DistSpec {
    fn toml(&self) -> String {
        match *self {
            DistSpec::Fixed(v) => format!("\"{v}us\""),
            DistSpec::Exponential(m) => format!("{{ dist = \"exponential\", mean = \"{m}us\" }}"),
            DistSpec::Uniform(lo, w) => format!("{{ dist = \"uniform\", min = \"{lo}us\", max = \"{}us\" }}", lo + w),
            DistSpec::UniformMs(lo, w) => {
                format!("{{ dist = \"uniform-ms\", min = \"{lo}ms\", max = \"{}ms\" }}", lo + w)
            }
            DistSpec::LogNormal(m, sigma) => {
                format!("{{ dist = \"log-normal\", median = \"{m}us\", sigma = {sigma} }}")
            }
        }
    }

    /// The smallest value it can draw, in nanoseconds.
    fn min_ns(&self) -> u64 {
        match *self {
            DistSpec::Fixed(v) | DistSpec::Uniform(v, _) => v * 1_000,
            DistSpec::UniformMs(lo, _) => lo * 1_000_000,
            DistSpec::Exponential(_) | DistSpec::LogNormal(..) => 0,
        }
    }

    /// The largest value it can draw, in nanoseconds, if bounded.
    fn max_ns(&self) -> Option<u64> {
        match *self {
            DistSpec::Fixed(v) => Some(v * 1_000),
            DistSpec::Uniform(lo, w) => Some((lo + w) * 1_000),
            DistSpec::UniformMs(lo, w) => Some((lo + w) * 1_000_000),
            DistSpec::Exponential(_) | DistSpec::LogNormal(..) => None,
        }
    }
}

fn service() -> impl Strategy<Value = DistSpec> {
    prop_oneof![
        (100..20_000u64).prop_map(DistSpec::Fixed),
        (100..20_000u64).prop_map(DistSpec::Exponential),
        (0..10_000u64, 1..10_000u64).prop_map(|(lo, w)| DistSpec::Uniform(lo, w)),
        (0..10u64, 1..20u64).prop_map(|(lo, w)| DistSpec::UniformMs(lo, w)),
        (100..20_000u64, 0.1..1.0f64).prop_map(|(m, s)| DistSpec::LogNormal(m, s)),
    ]
}

/// A network hop: no time, a fixed latency or a random one.
fn hop() -> impl Strategy<Value = DistSpec> {
    prop_oneof![
        Just(DistSpec::Fixed(0)),
        (1..500u64).prop_map(DistSpec::Fixed),
        (0..300u64, 1..300u64).prop_map(|(lo, w)| DistSpec::Uniform(lo, w)),
        (1..300u64).prop_map(DistSpec::Exponential),
    ]
}

#[derive(Clone, Debug)]
enum ArrivalSpec {
    /// Requests per second per client.
    Poisson(u64),
    /// Microseconds between requests.
    Fixed(u64),
    /// Requests in flight per client.
    Closed(u32),
}

#[derive(Clone, Debug)]
struct ClientSpec {
    count: u32,
    arrivals: ArrivalSpec,
    requests: u64,
    duration_ms: Option<u64>,
    start_us: u64,
    stagger_us: u64,
    connect: bool,
    keys: &'static str,
}

fn clients() -> impl Strategy<Value = ClientSpec> {
    let arrivals = prop_oneof![
        (100..5_000u64).prop_map(ArrivalSpec::Poisson),
        (100..5_000u64).prop_map(ArrivalSpec::Fixed),
        (1..4u32).prop_map(ArrivalSpec::Closed),
    ];
    (
        1..5u32,
        arrivals,
        1..40u64,
        prop::option::weighted(0.3, 1..150u64),
        0..2_000u64,
        0..500u64,
        any::<bool>(),
        prop::sample::select(vec!["random", "client", "none"]),
    )
        .prop_map(|(count, arrivals, requests, duration_ms, start_us, stagger_us, connect, keys)| ClientSpec {
            count,
            arrivals,
            requests,
            duration_ms,
            start_us,
            stagger_us,
            connect,
            keys,
        })
}

#[derive(Clone, Debug)]
struct GroupSpec {
    count: u32,
    service: DistSpec,
    concurrency: Option<u32>,
    weight: u32,
    joined: bool,
    /// Cold start: factor and duration in ms.
    cold: Option<(u32, u64)>,
}

fn group() -> impl Strategy<Value = GroupSpec> {
    (
        1..4u32,
        service(),
        prop::option::of(1..4u32),
        1..4u32,
        prop::bool::weighted(0.8),
        prop::option::weighted(0.2, (1..5u32, 1..100u64)),
    )
        .prop_map(|(count, service, concurrency, weight, joined, cold)| GroupSpec {
            count,
            service,
            concurrency,
            weight,
            joined,
            cold,
        })
}

#[derive(Clone, Debug)]
enum Action {
    Slow(DistSpec),
    /// Errors after this many microseconds.
    Error(u64),
    /// Never answers (needs a timeout; an error at once without one).
    Silent,
    Refuse,
    Recover,
    Join,
    Leave,
}

impl Action {
    /// Whether it can make a request fail.
    fn fails(&self) -> bool {
        matches!(self, Action::Error(_) | Action::Silent | Action::Refuse | Action::Leave)
    }
}

fn event() -> impl Strategy<Value = (u64, usize, Action)> {
    let action = prop_oneof![
        service().prop_map(Action::Slow),
        (0..5_000u64).prop_map(Action::Error),
        Just(Action::Silent),
        Just(Action::Refuse),
        Just(Action::Recover),
        Just(Action::Join),
        Just(Action::Leave),
    ];
    (0..200u64, 0..12usize, action)
}

#[derive(Clone, Debug)]
struct RetrySpec {
    attempts: u32,
    on_5xx: bool,
    on_connect: bool,
    per_try_timeout_ms: Option<u64>,
    different_endpoint: bool,
    budget: bool,
}

fn retries() -> impl Strategy<Value = RetrySpec> {
    (2..4u32, any::<bool>(), any::<bool>(), prop::option::of(2..50u64), any::<bool>(), any::<bool>()).prop_map(
        |(attempts, on_5xx, on_connect, per_try_timeout_ms, different_endpoint, budget)| RetrySpec {
            attempts,
            on_5xx,
            on_connect,
            per_try_timeout_ms,
            different_endpoint,
            budget,
        },
    )
}

/// A generated scenario.
#[derive(Clone, Debug)]
struct Spec {
    seed: u64,
    algorithm: &'static str,
    clients: ClientSpec,
    groups: Vec<GroupSpec>,
    client_lb: DistSpec,
    lb_server: DistSpec,
    /// Largest first-contact delay, in microseconds.
    first_contact_us: Option<u64>,
    balancers: u32,
    timeout_ms: Option<u64>,
    at_balancer: bool,
    warmup_ms: u64,
    events: Vec<(u64, usize, Action)>,
    /// Consecutive errors to eject, and the base ejection time in ms.
    outlier: Option<(u32, u64)>,
    retries: Option<RetrySpec>,
    /// Slow-start window in ms.
    slow_start_ms: Option<u64>,
}

fn spec() -> impl Strategy<Value = Spec> {
    let algorithm = prop::sample::select(vec![
        "round-robin",
        "random",
        "least-request",
        "peak-ewma",
        "ring-hash",
        "maglev",
        "rendezvous",
    ]);
    let topology = (
        any::<u64>(),
        algorithm,
        clients(),
        prop::collection::vec(group(), 1..4),
        hop(),
        hop(),
        prop::option::weighted(0.2, 1..5_000u64),
        1..4u32,
    );
    let behaviour = (
        prop::option::weighted(0.4, 5..100u64),
        any::<bool>(),
        prop::sample::select(vec![0u64, 0, 5, 20]),
        prop::collection::vec(event(), 0..5),
        prop::option::weighted(0.3, (1..5u32, 10..200u64)),
        prop::option::weighted(0.3, retries()),
        prop::option::weighted(0.2, 10..300u64),
    );
    (topology, behaviour).prop_map(
        |(
            (seed, algorithm, clients, groups, client_lb, lb_server, first_contact_us, balancers),
            (timeout_ms, at_balancer, warmup_ms, events, outlier, retries, slow_start_ms),
        )| Spec {
            seed,
            algorithm,
            clients,
            groups,
            client_lb,
            lb_server,
            first_contact_us,
            balancers,
            timeout_ms,
            at_balancer,
            warmup_ms,
            events,
            outlier,
            retries,
            slow_start_ms,
        },
    )
}

impl Spec {
    fn servers(&self) -> usize {
        self.groups.iter().map(|g| g.count as usize).sum()
    }

    /// The scenario file.
    fn toml(&self) -> String {
        let c = &self.clients;
        let mut t =
            format!("seed = {}\nalgorithms = [\"{}\"]\n\n[clients]\ncount = {}\n", self.seed, self.algorithm, c.count);
        match c.arrivals {
            ArrivalSpec::Poisson(rate) => writeln!(t, "loop = \"open\"\nrate = {rate}"),
            ArrivalSpec::Fixed(us) => writeln!(t, "loop = \"open\"\ninterval = \"{us}us\""),
            ArrivalSpec::Closed(n) => writeln!(t, "loop = \"closed\"\nin_flight = {n}"),
        }
        .unwrap();
        writeln!(t, "requests = {}\nstart = \"{}us\"\nstagger = \"{}us\"", c.requests, c.start_us, c.stagger_us)
            .unwrap();
        writeln!(t, "connect = {}\nkeys = \"{}\"", c.connect, c.keys).unwrap();
        if let Some(d) = c.duration_ms {
            writeln!(t, "duration = \"{d}ms\"").unwrap();
        }
        for (i, g) in self.groups.iter().enumerate() {
            writeln!(t, "\n[[servers]]\nname = \"g{i}\"\ncount = {}\nservice = {}", g.count, g.service.toml()).unwrap();
            writeln!(t, "weight = {}\njoined = {}", g.weight, g.joined).unwrap();
            if let Some(n) = g.concurrency {
                writeln!(t, "concurrency = {n}").unwrap();
            }
            if let Some((factor, ms)) = g.cold {
                writeln!(t, "cold = {{ factor = {factor}.0, duration = \"{ms}ms\" }}").unwrap();
            }
        }
        writeln!(t, "\n[network]\nclient_lb = {}\nlb_server = {}", self.client_lb.toml(), self.lb_server.toml())
            .unwrap();
        if let Some(us) = self.first_contact_us {
            writeln!(t, "first_contact = {{ dist = \"uniform\", min = \"0us\", max = \"{us}us\" }}").unwrap();
        }
        writeln!(t, "\n[balancers]\ncount = {}", self.balancers).unwrap();
        if let Some(ms) = self.timeout_ms {
            writeln!(t, "timeout = \"{ms}ms\"").unwrap();
        }
        let at = if self.at_balancer { "balancer" } else { "client" };
        writeln!(t, "\n[metrics]\nlatency = \"{at}\"\nwarmup = \"{}ms\"\nexact = true", self.warmup_ms).unwrap();
        self.resilience_toml(&mut t);
        for (at, server, action) in &self.events {
            writeln!(t, "\n[[events]]\nat = \"{at}ms\"\nserver = {}", server % self.servers()).unwrap();
            match action {
                Action::Slow(d) => writeln!(t, "action = \"slow\"\nservice = {}", d.toml()),
                Action::Error(us) => writeln!(t, "action = \"fail\"\nafter = \"{us}us\""),
                Action::Silent if self.timeout_ms.is_some() => writeln!(t, "action = \"fail\"\nmode = \"timeout\""),
                Action::Silent => writeln!(t, "action = \"fail\""),
                Action::Refuse => writeln!(t, "action = \"fail\"\nmode = \"refuse\""),
                Action::Recover => writeln!(t, "action = \"recover\""),
                Action::Join => writeln!(t, "action = \"join\""),
                Action::Leave => writeln!(t, "action = \"leave\""),
            }
            .unwrap();
        }
        t
    }

    fn resilience_toml(&self, t: &mut String) {
        if let Some((n, ms)) = self.outlier {
            writeln!(t, "\n[outlier_detection]\nconsecutive_5xx = {n}\nbase_ejection_time = \"{ms}ms\"").unwrap();
        }
        if let Some(ms) = self.slow_start_ms {
            writeln!(t, "\n[slow_start]\nwindow = \"{ms}ms\"").unwrap();
        }
        if let Some(r) = &self.retries {
            let mut on = Vec::new();
            if r.on_5xx {
                on.push("\"5xx\"");
            }
            if r.on_connect {
                on.push("\"connect-failure\"");
            }
            if r.per_try_timeout_ms.is_some() {
                on.push("\"timeout\"");
            }
            if on.is_empty() {
                on.push("\"5xx\"");
            }
            writeln!(t, "\n[retries]\nattempts = {}\non = [{}]", r.attempts, on.join(", ")).unwrap();
            writeln!(t, "different_endpoint = {}", r.different_endpoint).unwrap();
            if let Some(ms) = r.per_try_timeout_ms {
                writeln!(t, "per_try_timeout = \"{ms}ms\"").unwrap();
            }
            if r.budget {
                writeln!(t, "\n[retries.budget]\nratio = 0.2\nmin_per_second = 10.0\nttl = \"1s\"").unwrap();
            }
        }
    }

    fn open_loop(&self) -> bool {
        !matches!(self.clients.arrivals, ArrivalSpec::Closed(_))
    }

    /// Whether the scenario has a timeout of any kind.
    fn times_out(&self) -> bool {
        self.timeout_ms.is_some() || self.retries.as_ref().is_some_and(|r| r.per_try_timeout_ms.is_some())
    }

    /// Whether some server is in the balancers' sets from the start.
    fn starts_served(&self) -> bool {
        self.groups.iter().any(|g| g.joined)
    }

    /// Whether a request can fail: a failing or leaving server, a timeout,
    /// or no server to start with.
    fn may_fail(&self) -> bool {
        self.times_out() || !self.starts_served() || self.events.iter().any(|(_, _, a)| a.fails())
    }

    /// Whether each request takes exactly its steps' events: nothing else
    /// schedules any (no scenario event, timeout or resilience timer).
    fn plain(&self) -> bool {
        self.events.is_empty()
            && !self.times_out()
            && self.starts_served()
            && self.outlier.is_none()
            && self.retries.is_none()
            && self.slow_start_ms.is_none()
    }

    /// The least time a successful request can take where it is measured,
    /// in nanoseconds: two hops each way (one at the balancer) and the
    /// shortest service any server can have (cold starts only add).
    fn least_latency(&self) -> u64 {
        let slowed = self.events.iter().filter_map(|(_, _, a)| match a {
            Action::Slow(d) => Some(d.min_ns()),
            _ => None,
        });
        let service = self.groups.iter().map(|g| g.service.min_ns()).chain(slowed).min().expect("a server");
        let client_hops = if self.at_balancer { 0 } else { 2 * self.client_lb.min_ns() };
        client_hops + 2 * self.lb_server.min_ns() + service
    }

    /// The most time a successful request can take where it is measured,
    /// when a timeout bounds it: the balancer hears no answer later than
    /// its timeouts, and the client one bounded hop after that.
    fn most_latency(&self) -> Option<u64> {
        let per_try = self.retries.as_ref().and_then(|r| r.per_try_timeout_ms);
        if self.at_balancer {
            let bound = match (self.timeout_ms, per_try) {
                (Some(a), Some(b)) => a.min(b),
                (a, b) => a.or(b)?,
            };
            return Some(bound * 1_000_000);
        }
        if self.first_contact_us.is_some() {
            return None;
        }
        Some(self.timeout_ms? * 1_000_000 + 2 * self.client_lb.max_ns()?)
    }

    /// The events of a [`Spec::plain`] run: each client's start (and
    /// handshake), its open-loop ticks (one more than it sends: the last
    /// finds it done), and five steps per request.
    fn plain_events(&self, sent: u64) -> u64 {
        let c = &self.clients;
        let per_client = 1 + 2 * u64::from(c.connect) + u64::from(self.open_loop());
        u64::from(c.count) * per_client + sent * (5 + u64::from(self.open_loop()))
    }
}

fn scenario(spec: &Spec) -> Scenario {
    let text = spec.toml();
    Scenario::parse(&text, "generated.toml", "generated", Path::new("."))
        .unwrap_or_else(|e| panic!("a generated scenario is valid: {e}\n{text}"))
}

fn run(scenario: &Scenario) -> RawRun {
    Engine::new(scenario, &scenario.algorithms[0], scenario.seed, None).expect("an engine").run()
}

/// The invariants of one run of `spec`.
fn check_run(spec: &Spec, raw: &mut RawRun) -> Result<(), TestCaseError> {
    let c = &spec.clients;
    let limit = u64::from(c.count) * c.requests;
    prop_assert_eq!(raw.completed, raw.sent, "every request sent completes once");
    if c.duration_ms.is_none() {
        prop_assert_eq!(raw.sent, limit, "each client sends its requests");
    } else {
        prop_assert!(raw.sent <= limit);
    }
    let measured = raw.latency.len() + raw.failed;
    prop_assert!(measured <= raw.completed);
    if spec.warmup_ms == 0 {
        prop_assert_eq!(measured, raw.completed, "without warm-up every request is measured");
    }
    let retries = raw.resilience.as_ref().map_or(0, |r| r.retries);
    let tries: u64 = raw.per_server.iter().sum();
    prop_assert!(tries <= measured + retries, "{} tries for {} requests and {} retries", tries, measured, retries);
    prop_assert!(tries + raw.failed >= measured + retries, "a try not forwarded fails its request");
    if !spec.may_fail() {
        prop_assert_eq!(raw.failed, 0, "nothing can fail");
    }
    if !raw.latency.is_empty() {
        let (least, most) = (raw.latency.quantile(0.0), raw.latency.quantile(1.0));
        prop_assert!(least >= spec.least_latency() as f64, "latency {} ns below {}", least, spec.least_latency());
        if let Some(bound) = spec.most_latency() {
            prop_assert!(most <= bound as f64, "latency {} ns above {}", most, bound);
        }
    }
    if spec.plain() {
        prop_assert_eq!(raw.events, spec.plain_events(raw.sent), "one event per step");
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn generated_scenarios_keep_the_models_invariants(spec in spec()) {
        let s = scenario(&spec);
        check_run(&spec, &mut run(&s))?;
    }

    #[test]
    fn the_same_seed_gives_the_same_run(spec in spec()) {
        let s = scenario(&spec);
        let algorithm = &s.algorithms[0];
        let once = format!("{:?}", run_once(&s, algorithm, spec.seed, None).expect("a run"));
        prop_assert_eq!(&once, &format!("{:?}", run_once(&s, algorithm, spec.seed, None).expect("a run")));
        // Several runs on one thread or on several: the same report.
        let json = |threads| {
            let plan = Plan { algorithms: vec![algorithm.clone()], seed: spec.seed, runs: 3, threads };
            let mut report = simulate(&s, &plan, None).expect("a report");
            report.wall_seconds = 0.0;
            (report::json(&report), report.events)
        };
        prop_assert_eq!(json(1), json(3));
    }
}

//! The simulator predicts the proxy: one trace of events (request results,
//! active health checks, joins, leaves, time passing) goes through the
//! simulator's adapter (`fulcrum_sim::resilience::Guard`) and the proxy's
//! (`fulcrum_proxy::cluster::Membership`), each configured from its own file
//! format with the same settings, and at every step both must answer with
//! the same routable endpoints, weights, panic state and request-limit
//! factor. The simulator's answer is also read back from the balancer it
//! fed, so its path to `set_endpoints` is covered too.

use std::path::Path;
use std::sync::Arc;

use fulcrum_balance::{build, AlgorithmKind, Balancer, Endpoint, EndpointId, Nanos};
use fulcrum_proxy::cluster::{Membership, Upstream};
use fulcrum_proxy::Config;
use fulcrum_resilience::{Change, CheckThresholds, RequestResult, STEP};
use fulcrum_sim::resilience::{Guard, TryResult};
use fulcrum_sim::Scenario;

const MS: Nanos = 1_000_000;
const S: Nanos = 1_000_000_000;
/// Servers 0..4 are joined at the start; 4..8 join later.
const SERVERS: usize = 8;

/// The mechanisms, in the proxy's configuration format.
const PROXY: &str = r#"
[[listener]]
listen = "127.0.0.1:1"
routes = [{ cluster = "c" }]

[[cluster]]
name = "c"
endpoints = ["127.0.0.1:1"]
panic_threshold = 50.0
health_check = { healthy_threshold = 2, unhealthy_threshold = 3 }
slow_start = { window = "10s", aggression = 2.0, min_weight_percent = 5.0 }
outlier_detection = { consecutive_5xx = 4, base_ejection_time = "3s", max_ejection_percent = 50.0 }
"#;

/// The same mechanisms, in the simulator's scenario format.
const SCENARIO: &str = r#"
panic_threshold = 50.0

[clients]
loop = "open"
interval = "1ms"
duration = "1s"

[balancers]
timeout = "1s"

[[servers]]
count = 8
name = "s"
service = "5ms"

[slow_start]
window = "10s"
aggression = 2.0
min_weight_percent = 5.0

[outlier_detection]
consecutive_5xx = 4
base_ejection_time = "3s"
max_ejection_percent = 50.0
"#;

/// One event of the trace.
#[derive(Clone, Copy, Debug)]
enum Event {
    /// A request to the server ended so.
    Result(usize, TryResult),
    /// An active check of the server passed or not.
    Check(usize, bool),
    /// The server joins the cluster.
    Join(usize),
    /// The server leaves.
    Leave(usize),
}

/// The trace: (time, event), in time order.
fn trace() -> Vec<(Nanos, Event)> {
    use Event::*;
    let mut t = vec![(S + 30 * MS, Join(4))];
    // Server 1 fails four times in a row: ejected for 3 s, then ramps back.
    t.extend((0..4).map(|i| (2 * S + 10 * MS * i, Result(1, TryResult::ServerError))));
    // Server 2 fails three checks (unhealthy), server 3 too: with 1 ejected,
    // 2 of 5 are healthy, under 50 %: panic.
    t.extend((0..3).map(|i| (3 * S + 170 * MS * i, Check(2, false))));
    t.extend((0..3).map(|i| (4 * S + 170 * MS * i, Check(3, false))));
    // Two passing checks make server 2 healthy again (ramping).
    t.extend([
        (6 * S + 5 * MS, Check(2, true)),
        (6 * S + 400 * MS, Check(3, false)),
        (6 * S + 800 * MS, Check(2, true)),
    ]);
    // Successes keep the detector's counters moving.
    t.extend((0..40).map(|i| (7 * S + 100 * MS * i + 7 * MS, Result(i as usize % 5, TryResult::Ok))));
    // Server 0 leaves and comes back (a new member: slow start again).
    t.extend([(11 * S + 250 * MS, Leave(0)), (12 * S + 640 * MS, Join(0))]);
    // The whole fleet is replaced: every member is new, the request limit ramps.
    t.extend((0..5).map(|s| (20 * S + 10 * MS * s, Leave(s as usize))));
    t.extend((5..8).map(|s| (20 * S + 5 * MS + 10 * MS * s, Join(s as usize))));
    // Gateway failures on a new member: ejected while ramping.
    t.extend((0..5).map(|i| (24 * S + 33 * MS * i, Result(6, TryResult::Refused))));
    t.sort_by_key(|(at, _)| *at);
    t
}

fn endpoint(server: usize) -> Endpoint {
    Endpoint::new(server as u64, format!("127.0.0.{}:80", server + 1))
}

fn upstream(server: usize) -> Upstream {
    let addr: std::net::SocketAddr = format!("127.0.0.{}:80", server + 1).parse().unwrap();
    Upstream { addr, authority: addr.to_string().parse().unwrap(), stats: Arc::default() }
}

/// The proxy's side of a membership change: it resolves to this member set.
fn proxy_members(joined: &[bool]) -> Vec<(Endpoint, Upstream)> {
    (0..SERVERS).filter(|&s| joined[s]).map(|s| (endpoint(s), upstream(s))).collect()
}

fn for_proxy(r: TryResult) -> RequestResult {
    match r {
        TryResult::Ok => RequestResult::Success,
        TryResult::ServerError => RequestResult::ServerError,
        TryResult::Timeout | TryResult::Refused => RequestResult::GatewayFailure,
    }
}

/// (id, weight) pairs.
fn pairs(endpoints: &[Endpoint]) -> Vec<(u64, f64)> {
    endpoints.iter().map(|e| (e.id.0, e.weight)).collect()
}

#[test]
fn the_simulator_and_the_proxy_route_alike() {
    let config = Config::parse(Path::new("conformance.toml"), PROXY).unwrap().clusters.remove(0);
    let mut scenario = Scenario::parse(SCENARIO, "conformance.toml", "conformance", Path::new(".")).unwrap();
    // Scenario files have no active checks: the proxy's thresholds, as numbers.
    let hc = config.health_check.as_ref().unwrap();
    scenario.resilience.health_check =
        Some(CheckThresholds { healthy: hc.healthy_threshold, unhealthy: hc.unhealthy_threshold });
    let max_requests = 1000;

    let all: Vec<Endpoint> = (0..SERVERS).map(endpoint).collect();
    let mut joined = vec![true, true, true, true, false, false, false, false];
    let mut guard = Guard::new(&scenario.resilience, &all, joined.clone(), 0);
    let established: Vec<Endpoint> = (0..SERVERS).filter(|&s| joined[s]).map(endpoint).collect();
    let mut balancer: Box<dyn Balancer> = build(&AlgorithmKind::ROUND_ROBIN.default_config(), &established, 1).unwrap();
    let mut membership = Membership::new(&config, 0);
    membership.set_members(proxy_members(&joined), 0);

    let events = trace();
    let mut next = 0;
    let (mut panics, mut ramps, mut limited, mut ejections) = (0, 0, 0, 0);
    // Every 10 ms: the events due by then, the timers at each step, then the
    // question both drivers ask.
    for now in (0..=40 * S).step_by(10 * MS as usize) {
        while next < events.len() && events[next].0 <= now {
            let (at, event) = events[next];
            match event {
                Event::Result(s, r) => {
                    let sim = guard.record(s as u32, at, r);
                    let proxy = membership.record(EndpointId(s as u64), for_proxy(r), at);
                    assert_eq!(sim.is_some(), proxy.is_some(), "ejection at {at}");
                    ejections += usize::from(sim.is_some());
                }
                Event::Check(s, passed) => {
                    guard.record_check(s as u32, passed, at);
                    membership.record_check(EndpointId(s as u64), passed, at);
                }
                Event::Join(s) | Event::Leave(s) => {
                    joined[s] = matches!(event, Event::Join(_));
                    guard.set_member(s, joined[s], at);
                    membership.set_members(proxy_members(&joined), at);
                }
            }
            guard.apply(balancer.as_mut(), at);
            next += 1;
        }
        if now % STEP == 0 {
            let sim = guard.tick(now);
            let proxy = membership.tick(now);
            assert_eq!(sim.len(), proxy.iter().filter(|c| matches!(c, Change::Ejected { .. })).count());
            guard.apply(balancer.as_mut(), now);
        }
        let sim = guard.routable(now).clone();
        let proxy = membership.routable(now).clone();
        let at = format!("at {} ms", now / MS);
        assert_eq!(pairs(&sim.endpoints), pairs(&proxy.endpoints), "{at}");
        assert_eq!(pairs(balancer.endpoints()), pairs(&proxy.endpoints), "{at}: the simulator's balancer");
        assert_eq!(sim.panic, proxy.panic, "{at}");
        assert_eq!(sim.request_limit_factor, proxy.request_limit_factor, "{at}");
        let limit = membership.request_limit(max_requests, now);
        assert_eq!(limit, ((max_requests as f64 * sim.request_limit_factor).ceil() as u64), "{at}");
        panics += usize::from(sim.panic);
        ramps += usize::from(sim.endpoints.iter().any(|e| e.weight < 1.0));
        limited += usize::from(limit < max_requests);
    }
    assert_eq!(next, events.len(), "the whole trace was fed");
    // The trace did exercise every mechanism.
    assert!(ejections >= 2, "{ejections} ejections");
    assert!(panics > 0 && ramps > 0 && limited > 0, "panic {panics}, ramping {ramps}, limited {limited}");
}

#[test]
fn one_retry_policy_reads_the_same_in_both_formats() {
    // The scenario's old spelling "connect" is an alias of "connect-failure".
    let policy = r#"retries = { attempts = 3, on = ["5xx", "connect", "timeout", "503"], different_endpoint = false, per_try_timeout = "250ms", budget = { ratio = 0.3 } }"#;
    let proxy = Config::parse(Path::new("p.toml"), &format!("{PROXY}{policy}\n")).unwrap().clusters.remove(0).retries;
    let scenario = Scenario::parse(&format!("{policy}\n{SCENARIO}"), "s.toml", "s", Path::new(".")).unwrap();
    assert_eq!(Some(&proxy), scenario.resilience.retries.as_ref());
    assert_eq!(proxy.conditions[1], fulcrum_resilience::RetryOn::ConnectFailure);
    // No budget, in both.
    let off = r#"retries = { attempts = 2, budget = false }"#;
    let proxy = Config::parse(Path::new("p.toml"), &format!("{PROXY}{off}\n")).unwrap().clusters.remove(0).retries;
    let scenario = Scenario::parse(&format!("{off}\n{SCENARIO}"), "s.toml", "s", Path::new(".")).unwrap();
    assert_eq!((proxy.budget, scenario.resilience.retries.unwrap().budget), (None, None));
    // A bad condition names the file and the line, in both.
    let bad = r#"retries = { on = ["4xx"] }"#;
    let e = Config::parse(Path::new("p.toml"), &format!("{PROXY}{bad}\n")).unwrap_err();
    assert!(e.to_string().starts_with("p.toml:13:") && e.message.contains("\"4xx\" is not connect-failure"), "{e}");
    let e = Scenario::parse(&format!("{bad}\n{SCENARIO}"), "s.toml", "s", Path::new(".")).unwrap_err().to_string();
    assert!(e.starts_with("s.toml:1:") && e.contains("\"4xx\" is not connect-failure"), "{e}");
}

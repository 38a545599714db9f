//! The simulator's example scenarios (`examples/sim/`) load, run, and show
//! what the tutorial (`docs/tutorial/first-simulation.md`) says they show.

use std::path::PathBuf;

use fulcrum_sim::{simulate, AlgorithmReport, Plan, Report, Scenario};

fn examples() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/sim")
}

fn run(name: &str) -> Report {
    let s = Scenario::load(&examples().join(name)).unwrap_or_else(|e| panic!("{e}"));
    simulate(&s, &Plan::for_scenario(&s), None).unwrap()
}

fn result<'a>(report: &'a Report, algorithm: &str) -> &'a AlgorithmReport {
    report.results.iter().find(|a| a.algorithm == algorithm).unwrap_or_else(|| panic!("no {algorithm}"))
}

#[test]
fn every_example_scenario_loads() {
    let mut found = 0;
    for entry in std::fs::read_dir(examples()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            Scenario::load(&path).unwrap_or_else(|e| panic!("{e}"));
            found += 1;
        }
    }
    assert!(found > 0, "no scenario in examples/sim");
}

#[test]
fn fifty_servers_one_slow_shows_the_tail_the_tutorial_describes() {
    let report = run("fifty-servers-one-slow.toml");
    assert_eq!(report.servers.len(), 50);
    let slow = report.servers.iter().position(|n| n == "slow").expect("a server named slow");
    let (rr, lr, pe) = (result(&report, "round-robin"), result(&report, "least-request"), result(&report, "peak-ewma"));
    for a in [rr, lr, pe] {
        assert_eq!(a.failed, 0.0, "{}", a.algorithm);
        assert!((10.0..12.0).contains(&a.latency.p50), "{} p50 {}", a.algorithm, a.latency.p50);
    }
    // Round robin gives the slow server its 2 %, which sets its P99 near
    // 50 ms; the load-aware algorithms send it less and keep the tail short.
    assert!((1.9..2.1).contains(&(rr.share_of(slow) * 100.0)), "round-robin share {}", rr.share_of(slow));
    assert!(rr.latency.p99 > 45.0, "round-robin p99 {}", rr.latency.p99);
    assert!(lr.share_of(slow) < rr.share_of(slow) / 2.0, "least-request share {}", lr.share_of(slow));
    assert!(pe.share_of(slow) < lr.share_of(slow), "peak-ewma share {}", pe.share_of(slow));
    assert!(pe.latency.p99 < lr.latency.p99 && lr.latency.p99 < 30.0, "p99 {} {}", pe.latency.p99, lr.latency.p99);
}

#[test]
fn a_rate_limit_shapes_the_burst_of_rate_limit_burst() {
    let limited = run("rate-limit-burst.toml");
    let mut s = Scenario::load(&examples().join("rate-limit-burst.toml")).unwrap();
    s.resilience.disable(fulcrum_sim::Mechanism::RateLimit);
    let open = simulate(&s, &Plan::for_scenario(&s), None).unwrap();
    let (with, without) = (result(&limited, "least-request"), result(&open, "least-request"));
    // 2,000 req/s offered, 1,200 allowed (and a burst of 20): about 40 % refused.
    let refused = with.resilience.as_ref().and_then(|r| r.rate_limited).expect("a rate limit");
    assert_eq!(refused, with.failed);
    assert!((0.37..0.43).contains(&(refused / with.requests)), "{refused} of {}", with.requests);
    assert_eq!(without.failed, 0.0);
    assert!(without.resilience.is_none(), "no mechanism left on");
    // What goes through is served at once; without the limit, everything queues.
    assert!(with.latency.p99 < 25.0 && without.latency.p99 > 300.0, "{} {}", with.latency.p99, without.latency.p99);
}

#[test]
fn trace_replay_sends_every_line_and_shows_the_hot_key() {
    let report = run("trace-replay.toml");
    let lines = std::fs::read_to_string(examples().join("trace-replay.csv")).unwrap();
    let requests = lines.lines().filter(|l| l.starts_with(|c: char| c.is_ascii_digit())).count() as f64;
    let hot = lines.lines().filter(|l| l.contains(",user-7,")).count() as f64;
    let (maglev, lr) = (result(&report, "maglev"), result(&report, "least-request"));
    for a in [maglev, lr] {
        assert_eq!((a.requests, a.failed), (requests, 0.0), "{}: every line once", a.algorithm);
    }
    // Maglev sends every request of the hot key to one server, which gets
    // them all beside its share of the others; its queue sets the tail.
    let busiest = (0..4).map(|s| maglev.share_of(s)).fold(0.0, f64::max);
    assert!(busiest >= hot / requests, "busiest share {busiest}, hot key {}", hot / requests);
    assert!(maglev.latency.p99 > 2.0 * lr.latency.p99, "p99 {} vs {}", maglev.latency.p99, lr.latency.p99);
    // The hot key's 8 ms service times come from the trace, not the servers' 2 ms.
    assert!(lr.latency.p99 > 8.0, "least-request p99 {}", lr.latency.p99);
}

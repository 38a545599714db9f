//! Behaviour of the event loop on small scenarios written inline: queueing,
//! failures and timeouts, membership changes, fleets of balancers, warm-up,
//! first-contact delays, and determinism.

use std::path::Path;

use fulcrum_balance::AlgorithmKind;
use fulcrum_sim::{report, run_once, simulate, Plan, Scenario};

fn parse(text: &str) -> Scenario {
    Scenario::parse(text, "inline.toml", "inline", Path::new(".")).unwrap_or_else(|e| panic!("{e}"))
}

fn plan(s: &Scenario, kinds: &[AlgorithmKind], runs: u32, threads: usize) -> Plan {
    Plan { algorithms: kinds.iter().map(|&k| s.config_for(k)).collect(), seed: 7, runs, threads }
}

const QUEUE: &str = r#"
[clients]
loop = "open"
interval = "1ms"
requests = 10

[[servers]]
service = "10ms"
concurrency = 1
"#;

#[test]
fn a_concurrency_limit_queues_in_fifo_order() {
    let s = parse(QUEUE);
    let r = run_once(&s, &s.config_for(AlgorithmKind::ROUND_ROBIN), 1, None).unwrap();
    // Request k is sent at k ms and finishes at (k+1)·10 ms: latency 10 + 9k ms.
    assert_eq!(r.latency.min, 10.0);
    assert_eq!(r.latency.max, 10.0 + 9.0 * 9.0);
    assert_eq!(r.requests, 10);
    // Without the limit the server is a pure delay.
    let s = parse(&QUEUE.replace("concurrency = 1\n", ""));
    let r = run_once(&s, &s.config_for(AlgorithmKind::ROUND_ROBIN), 1, None).unwrap();
    assert_eq!((r.latency.min, r.latency.max), (10.0, 10.0));
}

#[test]
fn tries_in_flight_are_counted_at_each_pick() {
    // Request k is picked at k ms, while the k before it are all in flight.
    let s = parse(QUEUE);
    let r = run_once(&s, &s.config_for(AlgorithmKind::ROUND_ROBIN), 1, None).unwrap();
    assert_eq!(r.in_flight_at_pick, vec![[10, 45, 285]]);
    let dispersion = r.in_flight_dispersion(0).unwrap();
    assert!((dispersion - (28.5 - 4.5 * 4.5) / 4.5).abs() < 1e-9, "{dispersion}");
    // One every 20 ms to a 10 ms delay: never one in flight at a pick.
    let s = parse(&QUEUE.replace("\"1ms\"", "\"20ms\""));
    let r = run_once(&s, &s.config_for(AlgorithmKind::ROUND_ROBIN), 1, None).unwrap();
    assert_eq!((r.in_flight_at_pick.clone(), r.in_flight_dispersion(0)), (vec![[10, 0, 0]], None));
}

#[test]
fn network_hops_add_to_client_latency_but_not_balancer_latency() {
    let text = QUEUE.replace("concurrency = 1\n", "") + "[network]\nclient_lb = \"1ms\"\nlb_server = \"2ms\"\n";
    let s = parse(&text);
    let r = run_once(&s, &s.config_for(AlgorithmKind::RANDOM), 1, None).unwrap();
    assert_eq!((r.latency.min, r.latency.max), (16.0, 16.0));
    let s = parse(&(text + "[metrics]\nlatency = \"balancer\"\n"));
    let r = run_once(&s, &s.config_for(AlgorithmKind::RANDOM), 1, None).unwrap();
    assert_eq!((r.latency.min, r.latency.max), (14.0, 14.0));
}

#[test]
fn first_contact_delays_only_the_first_messages_of_a_pair() {
    let text = QUEUE.replace("concurrency = 1\n", "").replace("\"1ms\"", "\"100ms\"")
        + "[network]\nfirst_contact = { dist = \"uniform\", min = \"5ms\", max = \"6ms\" }\n";
    let s = parse(&text);
    let r = run_once(&s, &s.config_for(AlgorithmKind::RANDOM), 1, None).unwrap();
    // Four directed pairs are resolved on the first request (5–6 ms each).
    assert!(r.latency.max >= 30.0 && r.latency.max < 34.0, "{:?}", r.latency);
    assert_eq!(r.latency.min, 10.0, "later requests pay nothing");
    let s = parse(&text.replace("requests = 10", "requests = 10\nconnect = true"));
    let r = run_once(&s, &s.config_for(AlgorithmKind::RANDOM), 1, None).unwrap();
    assert!(r.latency.max >= 20.0 && r.latency.max < 23.0, "connecting first pays the client hops: {:?}", r.latency);
}

const TWO: &str = r#"
[clients]
loop = "open"
interval = "10ms"
requests = 400

[balancers]
timeout = "100ms"

[[servers]]
name = "a"
service = "5ms"

[[servers]]
name = "b"
service = "5ms"
"#;

#[test]
fn failures_timeouts_and_recovery() {
    let errors = parse(&format!(
        "{TWO}\n[[events]]\nat = \"1s\"\nserver = \"b\"\naction = \"fail\"\nafter = \"1ms\"\n\
         [[events]]\nat = \"3s\"\nserver = \"b\"\naction = \"recover\"\n"
    ));
    let r = run_once(&errors, &errors.config_for(AlgorithmKind::ROUND_ROBIN), 1, None).unwrap();
    // Round robin sends every other request to b: half of those sent in 1–3 s fail.
    assert_eq!(r.failed, 100);
    assert_eq!(r.requests, 400);
    let timeouts =
        parse(&format!("{TWO}\n[[events]]\nat = \"1s\"\nserver = \"b\"\naction = \"fail\"\nmode = \"timeout\"\n"));
    let r = run_once(&timeouts, &timeouts.config_for(AlgorithmKind::ROUND_ROBIN), 1, None).unwrap();
    assert_eq!(r.failed, 150);
    assert_eq!(r.latency.max, 5.0, "failures are not latency samples");
    // Peak-EWMA learns to avoid the server that times out (failures count as ≥ 250 ms).
    let r = run_once(&timeouts, &timeouts.config_for(AlgorithmKind::PEAK_EWMA), 1, None).unwrap();
    assert!(r.failed < 20, "{}", r.failed);
}

#[test]
fn slow_down_join_and_leave() {
    let s = parse(&format!(
        "{TWO}\n[[servers]]\nname = \"c\"\nservice = \"5ms\"\njoined = false\n\
         [[events]]\nat = \"2s\"\nserver = \"c\"\naction = \"join\"\n\
         [[events]]\nat = \"2s\"\nserver = \"a\"\naction = \"leave\"\n\
         [[events]]\nat = \"3s\"\nserver = \"b\"\naction = \"slow\"\nservice = \"50ms\"\n"
    ));
    let r = run_once(&s, &s.config_for(AlgorithmKind::ROUND_ROBIN), 1, None).unwrap();
    // 0–2 s: a and b share 200 requests; 2–4 s: b and c share 200.
    assert_eq!(r.requests_per_server, vec![100, 200, 100]);
    assert_eq!(r.latency.max, 50.0);
    // The share series shows a leaving at 2 s.
    let after: u64 = r.share.buckets[2..].iter().map(|b| b[0]).sum();
    assert_eq!(after, 0);
}

#[test]
fn warmup_is_left_out_and_clients_spread_over_balancers() {
    let s = parse(&format!("{TWO}\n[metrics]\nwarmup = \"1s\"\n").replace("[clients]", "[clients]\ncount = 4"));
    let r = run_once(&s, &s.config_for(AlgorithmKind::ROUND_ROBIN), 1, None).unwrap();
    assert_eq!(r.requests, 4 * 300);
    assert_eq!(r.completed, 4 * 400);
    let fleet =
        parse(&TWO.replace("[balancers]", "[balancers]\ncount = 3").replace("[clients]", "[clients]\ncount = 6"));
    let r = run_once(&fleet, &fleet.config_for(AlgorithmKind::LEAST_REQUEST), 1, None).unwrap();
    assert_eq!(r.requests, 6 * 400);
}

#[test]
fn closed_loop_and_poisson_workloads() {
    let closed =
        parse("[clients]\nloop = \"closed\"\nin_flight = 4\nduration = \"1s\"\n[[servers]]\nservice = \"10ms\"\n");
    let r = run_once(&closed, &closed.config_for(AlgorithmKind::RANDOM), 1, None).unwrap();
    assert_eq!(r.requests, 400, "4 in flight for 1 s at 10 ms each");
    let poisson =
        parse("[clients]\nloop = \"open\"\nrate = 1000.0\nduration = \"10s\"\n[[servers]]\nservice = \"1ms\"\n");
    let r = run_once(&poisson, &poisson.config_for(AlgorithmKind::RANDOM), 1, None).unwrap();
    assert!((9_700..10_300).contains(&r.requests), "{}", r.requests);
}

#[test]
fn same_seed_same_report_whatever_the_threads() {
    let s =
        parse(&format!("{TWO}\n[network]\nfirst_contact = {{ dist = \"uniform\", min = \"0ms\", max = \"10ms\" }}\n"));
    let kinds =
        [AlgorithmKind::PEAK_EWMA, AlgorithmKind::LEAST_REQUEST, AlgorithmKind::RING_HASH, AlgorithmKind::MAGLEV];
    let strip = |mut r: fulcrum_sim::Report| {
        r.wall_seconds = 0.0;
        (report::json(&r), report::table(&r))
    };
    let one = strip(simulate(&s, &plan(&s, &kinds, 3, 1), None).unwrap());
    let two = strip(simulate(&s, &plan(&s, &kinds, 3, 2), None).unwrap());
    let again = strip(simulate(&s, &plan(&s, &kinds, 3, 4), None).unwrap());
    assert_eq!(one, two);
    assert_eq!(one, again);
    let mut other = plan(&s, &kinds, 3, 2);
    other.seed = 8;
    assert_ne!(one, strip(simulate(&s, &other, None).unwrap()), "another seed, other draws");
}

/// The human report of a small scenario, pinned. If a change alters it on
/// purpose, regenerate with `UPDATE_SNAPSHOTS=1 cargo test -p fulcrum-sim`.
#[test]
fn snapshot_of_the_report() {
    let s = parse(&format!(
        "name = \"snapshot\"\n{TWO}\n[network]\nfirst_contact = {{ dist = \"uniform\", min = \"0ms\", max = \"10ms\" }}\n\
         [[events]]\nat = \"2s\"\nserver = \"b\"\naction = \"slow\"\nservice = {{ dist = \"exponential\", mean = \"20ms\" }}\n"
    ));
    let kinds = [AlgorithmKind::ROUND_ROBIN, AlgorithmKind::LEAST_REQUEST, AlgorithmKind::PEAK_EWMA];
    let mut r = simulate(&s, &plan(&s, &kinds, 2, 2), None).unwrap();
    r.wall_seconds = 0.0;
    let text = format!("{}\n{}", report::table(&r), report::json(&r));
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots/report.txt");
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(&path, &text).unwrap();
    }
    let expected = std::fs::read_to_string(&path).expect("snapshot exists (UPDATE_SNAPSHOTS=1 writes it)");
    assert_eq!(text, expected);
}

/// With more than 20 servers the report summarises requests per server
/// instead of printing a column per server. Pinned like the report above
/// (`UPDATE_SNAPSHOTS=1` regenerates it).
#[test]
fn many_servers_are_summarised() {
    let s = parse(
        "name = \"summary\"\n[clients]\ncount = 4\nloop = \"open\"\ninterval = \"1ms\"\nrequests = 500\n\
         [[servers]]\ncount = 24\nname = \"fast\"\nservice = \"5ms\"\nconcurrency = 2\n\
         [[servers]]\nname = \"slow\"\nservice = \"50ms\"\nconcurrency = 2\n",
    );
    let kinds = [AlgorithmKind::ROUND_ROBIN, AlgorithmKind::LEAST_REQUEST];
    let mut r = simulate(&s, &plan(&s, &kinds, 1, 1), None).unwrap();
    r.wall_seconds = 0.0;
    let text = report::table(&r);
    assert!(text.contains("Requests per server (25 servers; --csv DIR writes every server)"), "{text}");
    assert!(!text.contains("#24 slow, "), "no per-server legend: {text}");
    // Round robin spreads 2,000 requests exactly: 80 each, 4 % of the total.
    assert!(text.contains("round-robin        4.0000    4.0000    4.0000"), "{text}");
    // Least request sends the slow server the least.
    let least = text.lines().find(|l| l.starts_with("Least loaded, least-request: ")).expect(&text);
    assert!(least.contains(": #24 slow "), "{least}");
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots/report-summary.txt");
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(&path, &text).unwrap();
    }
    let expected = std::fs::read_to_string(&path).expect("snapshot exists (UPDATE_SNAPSHOTS=1 writes it)");
    assert_eq!(text, expected);
}

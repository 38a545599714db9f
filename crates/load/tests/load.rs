//! The load generator against in-process backends: rate, bounds, errors by
//! kind, coordinated omission, the clients pattern, HTTP/2, timeouts and the
//! JSON shape. Everything is on 127.0.0.1 and bounded to a few seconds;
//! timing bounds are generous because this runs on a shared 2-core machine.

use std::time::{Duration, Instant};

use fulcrum_load::{
    run, run_with, BackendSpec, Backends, BackendsConfig, Clients, Control, Dist, LoadConfig, LoadError, Pattern,
    Report,
};

const MS: Duration = Duration::from_millis(1);

fn backends(specs: Vec<BackendSpec>) -> Backends {
    Backends::start(BackendsConfig { backends: specs, seed: 3, threads: 1 }).expect("start backends")
}

fn config(url: String, pattern: Pattern) -> LoadConfig {
    LoadConfig { pattern, threads: 2, ..LoadConfig::new(url) }
}

fn url(b: &Backends, i: usize) -> String {
    format!("http://{}/", b.addrs()[i])
}

fn total(r: &Report) -> u64 {
    r.by_backend.values().sum()
}

#[test]
#[ignore = "timing: the achieved rate within 15 % of the target, p50 under 50 ms"]
fn open_loop_sends_at_its_rate_for_its_duration() {
    let b = backends(vec![BackendSpec::default()]);
    let c =
        LoadConfig { duration: Some(Duration::from_secs(2)), ..config(url(&b, 0), Pattern::OpenLoop { rate: 1000.0 }) };
    let r = run(&c).unwrap();
    // Exactly the sends scheduled in [0, 2 s), all answered.
    assert_eq!((r.requests, r.errors), (2000, 0), "{r:?}");
    assert_eq!(total(&r), 2000);
    assert_eq!(b.served(), vec![2000]);
    assert!((850.0..=1050.0).contains(&r.rps), "rps {}", r.rps);
    assert!(r.latency_ms.p50 < 50.0, "{:?}", r.latency_ms);
}

#[test]
fn open_loop_stops_after_its_request_count() {
    let b = backends(vec![BackendSpec::with_delay(Dist::fixed(2 * MS)); 2]);
    let c = LoadConfig { requests: Some(300), ..config(url(&b, 1), Pattern::OpenLoop { rate: 1500.0 }) };
    let started = Instant::now();
    let r = run(&c).unwrap();
    assert_eq!((r.requests, r.errors), (300, 0));
    assert_eq!(b.served(), vec![0, 300]);
    assert_eq!(r.by_backend.get("1"), Some(&300));
    // 300 sends at 1500/s take 0.2 s; a latency minimum is the 2 ms delay.
    assert!(started.elapsed() < Duration::from_secs(3));
    assert!(r.latency_ms.min >= 2.0, "{:?}", r.latency_ms);
}

#[test]
#[ignore = "timing: over 200 req/s on four connections"]
fn closed_loop_sends_exactly_the_requests_asked_for_on_its_connections() {
    let b = backends(vec![BackendSpec::with_delay(Dist::fixed(MS))]);
    let c = LoadConfig { requests: Some(500), connections: Some(4), ..config(url(&b, 0), Pattern::ClosedLoop) };
    let r = run(&c).unwrap();
    assert_eq!((r.requests, r.errors, total(&r)), (500, 0, 500));
    // Four connections at about 1 ms each: well over 500 req/s unless the
    // machine is badly overloaded.
    assert!(r.rps > 200.0, "rps {}", r.rps);
}

#[test]
fn a_closed_port_counts_connect_errors() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let c = LoadConfig {
        requests: Some(50),
        ..config(format!("http://127.0.0.1:{port}/"), Pattern::OpenLoop { rate: 500.0 })
    };
    let r = run(&c).unwrap();
    assert_eq!((r.requests, r.errors, r.errors_by_kind.connect), (50, 50, 50), "{r:?}");
    assert!(r.by_backend.is_empty());
}

#[test]
fn error_statuses_are_counted_by_class_and_still_timed() {
    let b = backends(vec![
        BackendSpec { status: "503".parse().unwrap(), ..BackendSpec::default() },
        BackendSpec { status: "200:0.5,404:0.5".parse().unwrap(), ..BackendSpec::default() },
    ]);
    let c = LoadConfig { requests: Some(100), connections: Some(2), ..config(url(&b, 0), Pattern::ClosedLoop) };
    let r = run(&c).unwrap();
    assert_eq!((r.requests, r.errors, r.errors_by_kind.status_5xx), (100, 100, 100));
    assert!(r.latency_ms.max > 0.0);
    let r = run(&LoadConfig { url: url(&b, 1), ..c }).unwrap();
    assert_eq!(r.errors, r.errors_by_kind.status_4xx);
    assert!((20..=80).contains(&r.errors), "{r:?}");
}

/// wrk2's point: when the server stalls, every request that should have
/// been sent during the stall waits, and the report must show it.
#[test]
#[ignore = "timing: a stall started by a sleep; closed-loop p99 under 100 ms"]
fn a_stall_shows_in_the_open_loop_tail_but_hides_from_the_closed_loop() {
    let b = backends(vec![BackendSpec::with_delay(Dist::fixed(MS))]);
    let server = b.backends()[0].clone();
    let stall_later = |server: std::sync::Arc<fulcrum_load::Backend>| {
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(400));
            server.pause(Duration::from_millis(200));
        })
    };

    let stall = stall_later(server.clone());
    let open = LoadConfig {
        duration: Some(Duration::from_millis(1500)),
        ..config(url(&b, 0), Pattern::OpenLoop { rate: 1000.0 })
    };
    let r = run(&open).unwrap();
    stall.join().unwrap();
    assert_eq!((r.requests, r.errors), (1500, 0));
    // About 200 of 1500 sends (13 %) fell in the stall, waiting 0–200 ms.
    assert!(r.latency_ms.max >= 150.0, "{:?}", r.latency_ms);
    assert!(r.latency_ms.p99 >= 100.0, "{:?}", r.latency_ms);
    assert!(r.latency_ms.p90 >= 10.0, "{:?}", r.latency_ms);

    // One connection sending back to back sees a single slow request.
    let stall = stall_later(server);
    let closed = LoadConfig {
        duration: Some(Duration::from_millis(1500)),
        connections: Some(1),
        ..config(url(&b, 0), Pattern::ClosedLoop)
    };
    let r = run(&closed).unwrap();
    stall.join().unwrap();
    assert!(r.latency_ms.max >= 150.0, "{:?}", r.latency_ms);
    assert!(r.latency_ms.p99 < 100.0, "{:?}", r.latency_ms);
}

#[test]
fn clients_pattern_sends_clients_times_requests() {
    let b = backends(vec![BackendSpec::with_delay(Dist::fixed(2 * MS)); 3]);
    let clients = Clients {
        clients: 4,
        interval: Duration::from_millis(20),
        requests_per_client: 25,
        start: Duration::from_millis(100),
        stagger: Duration::from_millis(1),
    };
    let started = Instant::now();
    let r = run(&config(url(&b, 2), Pattern::Clients(clients))).unwrap();
    assert_eq!((r.requests, r.errors), (100, 0));
    assert_eq!(r.by_backend.get("2"), Some(&100));
    // Last send at 100 ms + 3 ms + 24 × 20 ms = 583 ms after the start.
    assert!(started.elapsed() >= Duration::from_millis(583));
    assert!(r.duration_s >= 0.48 && r.duration_s < 3.0, "{}", r.duration_s);
}

#[test]
fn http2_runs_without_errors() {
    let b = backends(vec![BackendSpec::with_delay(Dist::fixed(MS))]);
    let open = LoadConfig {
        http2: true,
        requests: Some(200),
        method: "POST".into(),
        body_bytes: 1000,
        ..config(url(&b, 0), Pattern::OpenLoop { rate: 1000.0 })
    };
    let r = run(&open).unwrap();
    assert_eq!((r.requests, r.errors), (200, 0), "{r:?}");
    let closed = LoadConfig { connections: Some(2), streams: 8, pattern: Pattern::ClosedLoop, ..open };
    let r = run(&closed).unwrap();
    assert_eq!((r.requests, r.errors), (200, 0), "{r:?}");
}

#[test]
fn slow_answers_time_out_and_the_run_still_ends() {
    let b = backends(vec![BackendSpec::with_delay(Dist::fixed(Duration::from_secs(2)))]);
    let c = LoadConfig {
        requests: Some(20),
        timeout: Duration::from_millis(100),
        ..config(url(&b, 0), Pattern::OpenLoop { rate: 200.0 })
    };
    let started = Instant::now();
    let r = run(&c).unwrap();
    assert_eq!((r.requests, r.errors_by_kind.timeout), (20, 20));
    assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
}

#[test]
fn stop_ends_a_run_early_with_what_it_measured() {
    let b = backends(vec![BackendSpec::default()]);
    let c =
        LoadConfig { duration: Some(Duration::from_secs(60)), ..config(url(&b, 0), Pattern::OpenLoop { rate: 500.0 }) };
    let control = Control::new();
    let stopper = control.clone();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        stopper.stop();
    });
    let started = Instant::now();
    let r = run_with(&c, &control).unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(r.requests > 50 && r.requests < 2000, "{}", r.requests);
    assert_eq!(r.requests, control.requests());
}

#[test]
fn the_json_report_has_the_agreed_shape() {
    let b = backends(vec![BackendSpec::default(); 2]);
    let r = run(&LoadConfig { requests: Some(10), ..config(url(&b, 0), Pattern::ClosedLoop) }).unwrap();
    let v: serde_json::Value = serde_json::from_str(&r.json()).unwrap();
    assert_eq!(v["requests"], 10);
    assert_eq!(v["errors"], 0);
    assert!(v["rps"].as_f64().unwrap() > 0.0);
    let mut keys: Vec<&String> = v["latency_ms"].as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(keys, ["avg", "max", "min", "p50", "p75", "p90", "p95", "p99", "p999", "stddev"]);
    for kind in ["connect", "timeout", "status_4xx", "status_5xx", "io"] {
        assert_eq!(v["errors_by_kind"][kind], 0, "{kind}");
    }
    assert_eq!(v["by_backend"]["0"], 10);
}

#[test]
fn unusable_configurations_are_refused_before_sending() {
    let cases = [
        LoadConfig::new("http://127.0.0.1:9/"),
        LoadConfig { requests: Some(1), ..LoadConfig::new("ftp://127.0.0.1:9/") },
        LoadConfig { requests: Some(1), http3: true, ..LoadConfig::new("http://127.0.0.1:9/") },
        LoadConfig { requests: Some(1), http2: true, http3: true, ..LoadConfig::new("https://127.0.0.1:9/") },
        LoadConfig {
            requests: Some(1),
            ca: Some("/nonexistent.pem".into()),
            ..LoadConfig::new("https://127.0.0.1:9/")
        },
        LoadConfig { requests: Some(1), ..LoadConfig::new("not a url") },
        LoadConfig { requests: Some(1), pattern: Pattern::OpenLoop { rate: 0.0 }, ..LoadConfig::new("http://a/") },
        LoadConfig {
            requests: Some(1),
            headers: vec![("bad name".into(), "v".into())],
            ..LoadConfig::new("http://a/")
        },
        LoadConfig { requests: Some(1), method: "GE T".into(), ..LoadConfig::new("http://a/") },
        LoadConfig {
            requests: Some(1),
            pattern: Pattern::Clients(Clients { clients: 0, ..Clients::seed_000() }),
            ..LoadConfig::new("http://a/")
        },
    ];
    for c in cases {
        assert!(matches!(run(&c), Err(LoadError::Config(_))), "{c:?}");
    }
}

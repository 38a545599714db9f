//! Outlier ejection, slow start, the panic threshold and retries in the
//! simulator: each shipped scenario shows its mechanism's
//! effect against the same scenario with the mechanism turned off, and small
//! inline scenarios pin the details (panic, per-try timeouts, refused
//! connections, parse errors, determinism).

use std::path::{Path, PathBuf};

use fulcrum_balance::AlgorithmKind;
use fulcrum_sim::{report, run_once, simulate, Mechanism, Plan, RunResult, Scenario};

const S: u64 = 1_000_000_000;

fn shipped(name: &str) -> Scenario {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scenarios").join(name);
    Scenario::load(&path).unwrap_or_else(|e| panic!("{e}"))
}

fn parse(text: &str) -> Scenario {
    Scenario::parse(text, "inline.toml", "inline", Path::new(".")).unwrap_or_else(|e| panic!("{e}"))
}

fn parse_err(text: &str) -> String {
    Scenario::parse(text, "inline.toml", "inline", Path::new(".")).map(|_| ()).unwrap_err().to_string()
}

fn run(s: &Scenario, kind: AlgorithmKind) -> RunResult {
    run_once(s, &s.config_for(kind), s.seed, None).unwrap()
}

fn without(s: &Scenario, mechanism: Mechanism) -> Scenario {
    let mut s = s.clone();
    s.resilience.disable(mechanism);
    s
}

/// Tries sent to `server` and to all servers between `from` and `to` (seconds).
fn tries(r: &RunResult, server: usize, from: f64, to: f64) -> (u64, u64) {
    let width = r.share.interval as f64 / S as f64;
    let mut mine = 0;
    let mut all = 0;
    for (t, bucket) in r.share.buckets.iter().enumerate() {
        let start = t as f64 * width;
        if start >= from && start + width <= to {
            mine += bucket[server];
            all += bucket.iter().sum::<u64>();
        }
    }
    (mine, all)
}

fn share(r: &RunResult, server: usize, from: f64, to: f64) -> f64 {
    let (mine, all) = tries(r, server, from, to);
    mine as f64 / all as f64
}

#[test]
fn outlier_detection_ejects_a_fast_failure_and_cuts_failures() {
    let on = shipped("outlier-ejection.toml");
    let off = without(&on, Mechanism::OutlierDetection);
    for kind in [AlgorithmKind::ROUND_ROBIN, AlgorithmKind::LEAST_REQUEST] {
        let with = run(&on, kind);
        let plain = run(&off, kind);
        let stats = with.resilience.as_ref().unwrap();
        // Each of the 4 balancers sees ~50 requests/s to backend-3: five in a
        // row fail within ~100 ms.
        let delay = stats.time_to_ejection[3].expect("backend-3 is ejected");
        assert!(delay < 200_000_000, "{kind}: ejected after {} ms", delay / 1_000_000);
        assert!(stats.time_to_ejection.iter().enumerate().all(|(s, t)| s == 3 || t.is_none()));
        // Ejected at 10 s for 5 s, again for 10 s, again for 15 s (it
        // recovers at 40 s, just as the third ejection ends): 3 per balancer.
        assert_eq!(stats.ejections, 12, "{kind}");
        // While failing, it gets almost nothing (a few tries each time it
        // returns); without detection round robin keeps sending 1/10, and
        // least-request more (a fast failure is never busy).
        let ejected = share(&with, 3, 11.0, 40.0);
        let kept = share(&plain, 3, 11.0, 40.0);
        assert!(ejected < 0.005, "{kind}: share while failing {ejected:.4}");
        assert!(kept > 0.09, "{kind}: share without detection {kept:.4}");
        assert!(
            with.failed * 20 < plain.failed,
            "{kind}: {} failed with detection, {} without",
            with.failed,
            plain.failed
        );
        // After recovery it is back in full.
        let back = share(&with, 3, 41.0, 50.0);
        assert!((0.08..0.12).contains(&back), "{kind}: share after recovery {back:.4}");
        assert!(plain.resilience.is_none(), "no mechanism on: no resilience figures");
    }
}

#[test]
fn slow_start_ramps_a_cold_joiner() {
    let on = shipped("slow-start.toml");
    let off = without(&on, Mechanism::SlowStart);
    for kind in [AlgorithmKind::ROUND_ROBIN, AlgorithmKind::MAGLEV] {
        let ramped = run(&on, kind);
        let plain = run(&off, kind);
        // cold-0 (#8) joins at 10 s; its full share is 1/10.
        let early = share(&ramped, 8, 10.0, 13.0);
        let middle = share(&ramped, 8, 23.0, 27.0);
        let settled = share(&ramped, 8, 41.0, 45.0);
        assert!(early < 0.03, "{kind}: share in the first 3 s {early:.4}");
        assert!(early < middle && middle < settled, "{kind}: {early:.4} < {middle:.4} < {settled:.4}");
        assert!((0.085..0.115).contains(&settled), "{kind}: settled share {settled:.4}");
        let at_once = share(&plain, 8, 10.0, 13.0);
        assert!(at_once > 0.08, "{kind}: without slow start the joiner gets its share at once ({at_once:.4})");
        // The cold servers cannot take a full share: without slow start
        // their queues grow and requests time out.
        assert_eq!(ramped.failed, 0, "{kind}");
        assert!(plain.failed > 1000, "{kind}: {} failed", plain.failed);
        assert!(ramped.latency.p99 < 100.0 && plain.latency.p99 > 1000.0, "{kind}");
    }
}

#[test]
fn the_retry_budget_caps_amplification() {
    let budgeted = shipped("retries.toml");
    let unbudgeted = without(&budgeted, Mechanism::RetryBudget);
    let none = without(&budgeted, Mechanism::Retries);
    let with = run(&budgeted, AlgorithmKind::ROUND_ROBIN);
    let free = run(&unbudgeted, AlgorithmKind::ROUND_ROBIN);
    let plain = run(&none, AlgorithmKind::ROUND_ROBIN);
    let (w, f) = (with.resilience.as_ref().unwrap(), free.resilience.as_ref().unwrap());
    // Retries hide failures; the budget gives some of that back for bounded load.
    assert!(
        free.failed < with.failed && with.failed < plain.failed,
        "{} {} {}",
        free.failed,
        with.failed,
        plain.failed
    );
    assert!(free.failed * 5 < plain.failed);
    assert_eq!(f.retries_denied, 0);
    assert!(w.retries_denied > 1000);
    // Every retry happens during the outage (10–20 s). Within any 10 s
    // (the ttl), retries ≤ 20 % of the first tries + 10/s × 10 s.
    let (_, tries_in_outage) = tries(&with, 0, 10.0, 20.5);
    let first_tries = tries_in_outage - w.retries;
    let bound = 0.2 * first_tries as f64 + 100.0;
    assert!(w.retries as f64 <= bound * 1.02, "{} retries, bound {bound:.0}", w.retries);
    assert!(w.retries as f64 >= bound * 0.9, "the budget is used: {} retries, bound {bound:.0}", w.retries);
    // Without the budget retries add about half the traffic again.
    assert!(f.retries > 2 * w.retries, "{} unbudgeted, {} budgeted", f.retries, w.retries);
    let amplification = (tries_in_outage as f64) / first_tries as f64;
    assert!(amplification < 1.22, "{amplification:.3}");
}

const TRIO: &str = r#"
[clients]
loop = "open"
interval = "1ms"
duration = "4s"

[balancers]
timeout = "1s"

[[servers]]
count = 3
name = "s"
service = "5ms"
"#;

fn fail(server: &str, at: &str, extra: &str) -> String {
    format!("\n[[events]]\nat = \"{at}\"\nserver = \"{server}\"\naction = \"fail\"\n{extra}\n")
}

#[test]
fn the_panic_threshold_balances_over_all_when_too_few_are_healthy() {
    let text = format!(
        "{TRIO}\n[outlier_detection]\nmax_ejection_percent = 100.0\nbase_ejection_time = \"10s\"\n{}{}",
        fail("s-1", "1s", ""),
        fail("s-2", "1s", "")
    );
    // Two of three ejected: 33 % healthy is under 50 %, so all three are used.
    let panicked = run(&parse(&text), AlgorithmKind::ROUND_ROBIN);
    let stats = panicked.resilience.as_ref().unwrap();
    assert_eq!(stats.ejections, 2);
    // In panic from the ejections (just after 1 s) to the end of the run.
    let seconds = stats.panic as f64 / S as f64;
    assert!((2.9..=4.1).contains(&seconds), "panic {seconds} s");
    assert!(share(&panicked, 1, 1.5, 4.0) > 0.3, "in panic the ejected servers still get traffic");
    // Threshold 0: no panic, only the healthy server is used.
    let strict = run(&parse(&format!("panic_threshold = 0.0\n{text}")), AlgorithmKind::ROUND_ROBIN);
    assert_eq!(strict.resilience.as_ref().unwrap().panic, 0);
    assert_eq!(share(&strict, 0, 1.5, 4.0), 1.0);
    assert!(strict.failed < 20, "{}", strict.failed);
    assert!(panicked.failed > 1000, "{}", panicked.failed);
}

#[test]
fn per_try_timeouts_and_refused_connections_are_retried_elsewhere() {
    // Without a budget (the default one would refuse some of these retries).
    let retries =
        "\n[retries]\nattempts = 2\non = [\"timeout\", \"connect-failure\"]\nper_try_timeout = \"50ms\"\nbudget = false\n";
    let silent = parse(&format!("{TRIO}{retries}{}", fail("s-1", "1s", "mode = \"timeout\"")));
    let r = run(&silent, AlgorithmKind::ROUND_ROBIN);
    assert_eq!(r.failed, 0);
    assert!((r.latency.max - 55.0).abs() < 1e-9, "a timed-out try costs 50 ms: {}", r.latency.max);
    // Every try sent to s-1 timed out and was retried, elsewhere.
    let (to_silent, _) = tries(&r, 1, 1.0, 10.0);
    assert_eq!(r.resilience.as_ref().unwrap().retries, to_silent);
    assert!(to_silent > 900, "{to_silent}");
    let refused = parse(&format!("{TRIO}{retries}{}", fail("s-1", "1s", "mode = \"refuse\"")));
    let r = run(&refused, AlgorithmKind::ROUND_ROBIN);
    assert_eq!((r.failed, r.latency.max), (0, 5.0));
    // Not retried when `on` leaves it out: refused tries fail at once.
    let only_5xx =
        format!("{TRIO}\n[retries]\nattempts = 2\non = [\"5xx\"]\n{}", fail("s-1", "1s", "mode = \"refuse\""));
    let r = run(&parse(&only_5xx), AlgorithmKind::ROUND_ROBIN);
    assert_eq!(r.failed, 1000);
    // With one try in all, per_try_timeout still bounds each try.
    let once = parse(&format!(
        "{TRIO}\n[retries]\nattempts = 1\non = [\"timeout\"]\nper_try_timeout = \"50ms\"\n{}",
        fail("s-1", "1s", "mode = \"timeout\"")
    ));
    let r = run(&once, AlgorithmKind::ROUND_ROBIN);
    assert_eq!((r.failed, r.resilience.as_ref().unwrap().retries), (1000, 0));
}

#[test]
fn resilience_sections_are_validated_with_their_position() {
    // Every error reads file:line:column: field: message, at the value
    // (the sections start at line 15).
    let starts = |err: String, with: &str| assert!(err.starts_with(with), "{err}");
    let err = parse_err(&format!("{TRIO}\n[retries]\nattempts = 0\n"));
    starts(err, "inline.toml:16:12: retries.attempts: 0 must be between 1 and 10");
    let err = parse_err(&format!("{TRIO}\n[retries]\non = [\"timeout\"]\n"));
    starts(err, "inline.toml:16:6: retries.on: has \"timeout\", which needs retries.per_try_timeout");
    let err = parse_err(&format!("{TRIO}\n[retries]\non = [\"4xx\"]\n"));
    assert!(err.starts_with("inline.toml:16:6: retries.on: ") && err.contains("\"4xx\" is not"), "{err}");
    let err = parse_err(&format!("{TRIO}\n[retries.budget]\nttl = \"100ms\"\n"));
    starts(err, "inline.toml:15:1: retries.budget: retry_budget.ttl must be at least 1s");
    let err = parse_err(&format!("{TRIO}\n[outlier_detection]\ninterval = \"0s\"\n"));
    starts(err, "inline.toml:16:12: outlier_detection.interval: must be greater than 0");
    let err = parse_err(&format!("{TRIO}\n[outlier_detection]\nconsecutive_500 = 3\n"));
    starts(err, "inline.toml:16:1: outlier_detection.consecutive_500: unknown field `consecutive_500`");
    let err = parse_err(&format!("{TRIO}\n[slow_start]\naggression = 0.0\n"));
    starts(err, "inline.toml:16:14: slow_start.aggression: = 0 must be > 0");
    let err = parse_err(&format!("panic_threshold = 150.0\n{TRIO}"));
    starts(err, "inline.toml:1:19: panic_threshold: 150 must be a percentage in 0..=100");
    let err =
        parse_err(&TRIO.replace("service = \"5ms\"", "service = \"5ms\"\ncold = { factor = 0.5, duration = \"1s\" }"));
    starts(err, "inline.toml:14:19: servers[0].cold.factor: 0.5 must be a finite number ≥ 1");
    let err = parse_err(&format!("{TRIO}{}", fail("s-1", "1s", "mode = \"refuse\"\nafter = \"1ms\"")));
    starts(err, "inline.toml:20:9: events[0].after: applies to mode = \"error\" only");
    // A budget table alone turns retries on with their defaults.
    let s = parse(&format!("{TRIO}\n[retries.budget]\nratio = 0.1\n"));
    let retries = s.resilience.retries.unwrap();
    assert_eq!((retries.attempts, retries.budget.unwrap().ratio), (2, 0.1));
    assert_eq!("retry-budget".parse::<Mechanism>(), Ok(Mechanism::RetryBudget));
    assert!("everything".parse::<Mechanism>().is_err());
}

#[test]
fn resilience_reports_are_deterministic_and_only_add_keys() {
    let s = shipped("outlier-ejection.toml");
    let plan = |threads| Plan {
        algorithms: [AlgorithmKind::ROUND_ROBIN, AlgorithmKind::PEAK_EWMA].iter().map(|&k| s.config_for(k)).collect(),
        seed: 3,
        runs: 2,
        threads,
    };
    let strip = |mut r: fulcrum_sim::Report| {
        r.wall_seconds = 0.0;
        (report::json(&r), report::table(&r))
    };
    let one = strip(simulate(&s, &plan(1), None).unwrap());
    assert_eq!(one, strip(simulate(&s, &plan(2), None).unwrap()));
    let (json, table) = one;
    assert!(table.contains("Resilience (mean per run)") && table.contains("First ejections, round-robin: #3 at 10."));
    let doc: serde_json::Value = serde_json::from_str(&json).unwrap();
    let result = doc["results"][0].as_object().unwrap();
    let keys: Vec<&str> = result.keys().map(String::as_str).collect();
    for key in ["algorithm", "requests", "failed", "latency_ms", "ci95_ms", "requests_per_server"] {
        assert!(keys.contains(&key), "{key} kept: {keys:?}");
    }
    for key in ["retries", "retries_denied", "ejections", "panic_seconds", "first_ejection_s", "time_to_ejection_ms"] {
        assert!(keys.contains(&key), "{key} added: {keys:?}");
    }
    assert!(result["first_ejection_s"][0].is_null() && result["first_ejection_s"][3].as_f64().unwrap() > 10.0);
    // With the mechanisms off the report is the plain one.
    let mut plain = s.clone();
    plain.resilience.disable(Mechanism::OutlierDetection);
    let (json, table) = strip(simulate(&plain, &plan(2), None).unwrap());
    assert!(!json.contains("retries") && !table.contains("Resilience"));
}

#[test]
fn a_server_with_an_error_share_fails_that_share_and_retries_mend_it() {
    let text = |retries: &str| {
        format!(
            "{retries}[clients]\nloop = \"open\"\nrate = 1000\nrequests = 20000\n\
             [[servers]]\nservice = \"1ms\"\nerrors = 0.2\n[[servers]]\nservice = \"1ms\"\n"
        )
    };
    let r = run(&parse(&text("")), AlgorithmKind::ROUND_ROBIN);
    let failed = r.failed as f64 / r.requests as f64;
    assert!((0.08..0.12).contains(&failed), "one of two servers fails 20 %: {failed}");
    let r =
        run(&parse(&text("retries = { attempts = 3, on = [\"5xx\"], budget = false }\n")), AlgorithmKind::ROUND_ROBIN);
    assert!((r.failed as f64 / r.requests as f64) < 0.01, "retried: {} of {}", r.failed, r.requests);
    assert!(parse_err(&text("").replace("errors = 0.2", "errors = 1.0")).contains("servers[0].errors"));
}

/// `balancers.max_requests`: the proxy's circuit breaker, shared by the
/// balancers. One 10 ms server offered 1,000 requests/s over two balancers
/// has about 10 in flight: a limit of 5 refuses a large share at once
/// (each refusal is a failed request and costs no service), a limit of
/// 100 none; a cold fleet under slow start gets a ramped limit.
#[test]
fn max_requests_refuses_tries_beyond_the_limit_over_all_balancers() {
    let text = |limit: u64, extra: &str| {
        format!(
            "name = \"limit\"\n[clients]\ncount = 4\nloop = \"open\"\nrate = 250\nduration = \"4s\"\n\
             [[servers]]\nname = \"a\"\nservice = \"10ms\"\n[balancers]\ncount = 2\nmax_requests = {limit}\n{extra}"
        )
    };
    let r = run(&parse(&text(5, "")), AlgorithmKind::ROUND_ROBIN);
    let refused = r.resilience.as_ref().and_then(|s| s.overflows).unwrap();
    assert_eq!(refused, r.failed, "every failure is a refusal");
    let share = refused as f64 / r.requests as f64;
    assert!((0.2..0.8).contains(&share), "refused {refused} of {}", r.requests);
    assert!(r.latency.p99 <= 10.0 + 1e-9, "a refused try waits for nothing: {:?}", r.latency);
    let r = run(&parse(&text(100, "")), AlgorithmKind::ROUND_ROBIN);
    assert_eq!((r.resilience.unwrap().overflows, r.failed), (Some(0), 0));
    // Every endpoint joins at 1 s under slow start: the limit of 100 is
    // ramped down to 10 % first, so some requests are refused after 1 s.
    let cold = "[slow_start]\nwindow = \"2s\"\n[[events]]\nat = \"1s\"\nserver = 0\naction = \"join\"\n";
    let mut s = parse(&text(100, cold).replace("service = \"10ms\"", "service = \"10ms\"\njoined = false"));
    s.clients.arrivals = fulcrum_sim::scenario::Arrivals::Poisson(S as f64 / 1000.0);
    let r = run(&s, AlgorithmKind::ROUND_ROBIN);
    assert!(r.resilience.unwrap().overflows.unwrap() > 0, "a ramped limit of 10 at 4,000 requests/s");
    assert!(parse_err(&text(0, "")).contains("balancers.max_requests"));
}

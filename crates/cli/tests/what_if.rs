//! End-to-end: `fulcrum sim --from` against a running `fulcrum serve`
//! (round robin over three `fulcrum backend`s of 20, 60 and 200 ms) under
//! `fulcrum load` in open loop. The scenario it builds has the three
//! endpoints with their service times in the right order and ratio, the
//! offered rate, and a prediction of the present within 10 % of the
//! measured p50 and p90; unknown clusters and unreachable proxies get clear
//! errors.

mod common;

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::{app_config, closed_port, fulcrum_backend, get, temp_dir, toml_list, Fulcrum, KillOnDrop};
use serde_json::Value;

fn fulcrum() -> Command {
    Command::new(env!("CARGO_BIN_EXE_fulcrum"))
}

fn sim(args: &[&str]) -> Output {
    fulcrum().arg("sim").args(args).output().unwrap()
}

/// Mean of an empirical latency file (ms).
fn mean_ms(path: &std::path::Path) -> f64 {
    let text = std::fs::read_to_string(path).unwrap();
    let v: Vec<f64> = text.lines().map(|l| l.parse().unwrap()).collect();
    v.iter().sum::<f64>() / v.len() as f64
}

#[test]
fn a_scenario_from_a_running_proxy_predicts_its_present() {
    let (_backend, addrs) = fulcrum_backend(&["--count", "3", "--delays", "20ms,60ms,200ms"]);
    let config = app_config(&toml_list(&addrs), "workers = 1", "", "algorithm = { kind = \"round-robin\" }");
    let f = Fulcrum::serve("what-if", &config);
    let (admin, listen) = (f.admin.unwrap(), f.listen[0]);
    let _load = KillOnDrop(
        fulcrum()
            .args(["load", &format!("http://{listen}/"), "--rate", "200", "-d", "10s", "--threads", "1"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    std::thread::sleep(Duration::from_millis(1500));

    let dir = temp_dir("what-if-scenario");
    let file = dir.join("app.toml");
    let from = format!("http://{admin}");
    let o = sim(&["--from", &from, "--cluster", "app", "--window", "5s", "--json", "--write-scenario"]
        .iter()
        .copied()
        .chain([file.to_str().unwrap()])
        .collect::<Vec<_>>());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let current = &v["current_state"];
    assert_eq!(current["algorithm"], "round-robin", "{current}");
    let rate = current["rate"].as_f64().unwrap();
    assert!((170.0..230.0).contains(&rate), "offered 200/s, modelled {rate}/s");
    for f in current["figures"].as_array().unwrap().iter().take(2) {
        let d = f["distance_percent"].as_f64().unwrap();
        assert!(d.abs() < 10.0, "prediction of the present off by {d:.1} %: {f}");
    }

    // Three endpoints, service times in the backends' order and ratio
    // (the proxy-endpoint overhead is inside them, so the ratio is below 10).
    let means: Vec<f64> = (0..3).map(|i| mean_ms(&dir.join(format!("app.endpoint-{i}.txt")))).collect();
    // (values are spread over 5 %-wide buckets, so a 20 ms latency may read 19.2)
    assert!(means[0] >= 19.0 && means[0] < means[1] && means[1] < means[2], "{means:?}");
    assert!((4.0..10.5).contains(&(means[2] / means[0])), "{means:?}");
    let scenario = std::fs::read_to_string(&file).unwrap();
    assert_eq!(scenario.matches("[[servers]]").count(), 3, "{scenario}");
    // The cluster's settings as the proxy runs them: one balancer per
    // worker, the request timeout and limit, the algorithm and the retry policy.
    for table in [
        "[balancers]\ncount = 1\ntimeout = \"15000000us\"\nmax_requests = 1024\n",
        "[[algorithm]]\nkind = \"round-robin\"",
        "[retries]",
    ] {
        assert!(scenario.contains(table), "{table} in {scenario}");
    }

    // Every algorithm side by side; those that see load beat round robin
    // on the median with one endpoint ten times slower.
    let results = v["report"]["results"].as_array().unwrap();
    let p50 = |name: &str| {
        let r = results.iter().find(|r| r["algorithm"] == name).unwrap_or_else(|| panic!("{name}: {results:?}"));
        r["latency_ms"]["p50"].as_f64().unwrap()
    };
    assert!(p50("peak-ewma") < p50("round-robin"), "{results:?}");

    // The written scenario runs on its own.
    let again = sim(&[file.to_str().unwrap(), "--algorithms", "least-request"]);
    assert!(again.status.success(), "{}", String::from_utf8_lossy(&again.stderr));

    // Clear errors: an unknown cluster (exit 2), no proxy at all (exit 1).
    let o = sim(&["--from", &from, "--cluster", "nope", "--window", "10ms"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("no cluster named \"nope\""), "{err}");
    let o = sim(&["--from", &format!("http://{}", closed_port()), "--cluster", "app", "--window", "10ms"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("cannot reach the admin listener"), "{err}");
}

/// One measured or predicted state: p50, p90, p99 and the mean, in ms.
#[derive(Clone, Copy, Debug)]
struct Figures {
    p: [f64; 3],
    mean: f64,
}

impl Figures {
    fn of_report(result: &Value) -> Figures {
        let l = &result["latency_ms"];
        let f = |k: &str| l[k].as_f64().unwrap();
        Figures { p: [f("p50"), f("p90"), f("p99")], mean: f("avg") }
    }

    fn of_check(current: &Value, key: &str) -> Figures {
        let figures = current["figures"].as_array().unwrap();
        let f = |name: &str| figures.iter().find(|f| f["figure"] == name).unwrap()[key].as_f64().unwrap();
        Figures { p: [f("p50"), f("p90"), f("p99")], mean: f("mean") }
    }
}

/// Settings of the proof; the bench script lengthens them.
fn setting<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// `fulcrum sim --from` on the running proxy: its JSON answer.
fn what_if(admin: std::net::SocketAddr, window: &str, runs: &str, extra: &[&str]) -> Value {
    let from = format!("http://{admin}");
    let mut args = vec!["--from", &from, "--cluster", "app", "--window", window, "--json", "--runs", runs];
    args.extend_from_slice(extra);
    let o = sim(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// `fulcrum load` in open loop at `rate` for a long time (killed on
/// drop), with `extra` flags.
fn load_with(listen: std::net::SocketAddr, rate: f64, extra: &[&str]) -> KillOnDrop {
    KillOnDrop(
        fulcrum()
            .args(["load", &format!("http://{listen}/"), "--rate", &rate.to_string(), "-d", "600s", "--threads", "1"])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

/// The proof: ask for a prediction from a proxy running round robin, make
/// the change for real, measure, and undo it; case by case, so that each
/// prediction comes from the window just before its change. Backends are
/// log-normal delays of medians 20, 60 and 200 ms, long beside the
/// milliseconds that timers and a busy CPU add; the proxy has one worker
/// (one balancer, as the scenario has). The first case changes nothing: it
/// shows how far two windows of the same state differ. Each measured state
/// is also predicted from its own window (the "same window" figure), which
/// separates a model error from a drift of the endpoints' latencies between
/// windows. Goals: p50 and p90 within 10 %, p99 within 20 %, and the
/// algorithms ranked alike by mean latency. The test asserts the goals for
/// the same-window predictions and the ranking; the distances across
/// windows, which a busy machine's drift adds to, are printed and written
/// (docs/results/what-if.md has them). `FULCRUM_WHATIF_WINDOW`,
/// `FULCRUM_WHATIF_RATE`, `FULCRUM_WHATIF_RUNS` and `FULCRUM_WHATIF_DELAYS`
/// change its length, rate, simulated runs and backends,
/// `FULCRUM_WHATIF_POISSON=1` sends the load's requests at Poisson times
/// (the model's clients) instead of evenly spaced; `FULCRUM_WHATIF_OUT` names a file for the figures as
/// JSON (`bench/what-if` sets them).
#[test]
#[ignore = "timing: predictions against changes made to a live proxy (about 2 minutes, wall-clock latencies)"]
fn predictions_hold_against_changes_made_for_real() {
    let window: String = setting("FULCRUM_WHATIF_WINDOW", "10s".to_string());
    let rate: f64 = setting("FULCRUM_WHATIF_RATE", 400.0);
    let runs: String = setting("FULCRUM_WHATIF_RUNS", "3".to_string());
    let delays: String =
        setting("FULCRUM_WHATIF_DELAYS", "log-normal(20ms,0.5),log-normal(60ms,0.5),log-normal(200ms,0.5)".to_string());
    let arrivals: &[&str] = if setting("FULCRUM_WHATIF_POISSON", 0u8) == 1 { &["--poisson"] } else { &[] };
    let load = |listen, rate| load_with(listen, rate, arrivals);
    let (_backend, addrs) = fulcrum_backend(&["--count", "3", "--delays", &delays]);
    let config = |algorithm: &str| {
        app_config(&toml_list(&addrs), "workers = 1", "", &format!("algorithm = {{ kind = \"{algorithm}\" }}"))
    };
    let f = Fulcrum::serve("what-if-proof", &config("round-robin"));
    let (admin, listen) = (f.admin.unwrap(), f.listen[0]);
    let slow = addrs[2].to_string();
    let slow = slow.as_str();

    // A reload applies asynchronously and restores the file's endpoints
    // (undoing a drain): wait until the cluster runs the new algorithm.
    let reload = |algorithm: &str| {
        std::fs::write(f.dir.join("fulcrum.toml"), config(algorithm)).unwrap();
        let s = fulcrum().args(["reload", "--pid", &f.pid().to_string()]).status().unwrap();
        assert!(s.success());
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let v: Value = serde_json::from_slice(&get(admin, "admin", "/clusters/app", "").body).unwrap();
            if v["algorithm"]["kind"] == algorithm {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "the reload did not apply: {v}");
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let ctl = |verb: &str| {
        let s = fulcrum().args(["ctl", "--admin", &admin.to_string(), verb, "app", slow]).status().unwrap();
        assert!(s.success());
    };
    let settle = || std::thread::sleep(Duration::from_millis(1500));
    let questions = ["--algorithms", "round-robin,least-request,peak-ewma", "--drain", slow, "--rate-scale", "1.5"];

    let mut traffic = Some(load(listen, rate));
    let mut cases = Vec::new();
    let mut diagnosis = String::new();
    let mut ranking_asked = None;
    for (case, algorithm) in [
        ("unchanged", "round-robin"),
        ("least-request", "least-request"),
        ("peak-ewma", "peak-ewma"),
        ("drain #2", "round-robin"),
        ("rate x1.5", "round-robin"),
    ] {
        settle();
        let asked = what_if(admin, &window, &runs, &questions);
        let results = asked["report"]["results"].as_array().unwrap().clone();
        let row = |label: &str| results.iter().find(|r| r["algorithm"] == label).unwrap().clone();
        let predicted = Figures::of_report(&row(if case == "unchanged" { "round-robin" } else { case }));
        ranking_asked.get_or_insert_with(|| results.clone());
        match case {
            "least-request" | "peak-ewma" => reload(algorithm),
            "drain #2" => ctl("drain"),
            "rate x1.5" => traffic = Some(load(listen, rate * 1.5)),
            _ => {}
        }
        settle();
        let after = what_if(admin, &window, "1", &["--algorithms", algorithm]);
        let current = &after["current_state"];
        assert_eq!(current["algorithm"], algorithm, "the change did not apply");
        let measured = Figures::of_check(current, "measured_ms");
        let same_window = Figures::of_check(current, "predicted_ms");
        let n: Vec<u64> = current["requests_per_endpoint"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["requests"].as_u64().unwrap())
            .collect();
        let share = |r: &Value| r["requests_per_server"].clone();
        let p_share = share(&row(if case == "unchanged" { "round-robin" } else { case }));
        diagnosis += &format!("{case}: requests per endpoint predicted {p_share}, measured {n:?}\n");
        match case {
            "least-request" | "peak-ewma" => reload("round-robin"),
            "drain #2" => ctl("undrain"),
            "rate x1.5" => traffic = Some(load(listen, rate)),
            _ => {}
        }
        cases.push((case, predicted, measured, same_window));
    }
    drop(traffic);

    // The comparison, printed, written for the bench, then checked.
    let mut report =
        String::from("case           figure  predicted ms  measured ms  distance  same-window prediction\n");
    let mut rows = Vec::new();
    let mut missed = Vec::new();
    for (case, p, m, w) in &cases {
        for (i, (name, goal)) in [("p50", 10.0), ("p90", 10.0), ("p99", 20.0)].iter().enumerate() {
            let d = (p.p[i] - m.p[i]) / m.p[i] * 100.0;
            let dw = (w.p[i] - m.p[i]) / m.p[i] * 100.0;
            report += &format!("{case:<14} {name:<6} {:>12.3} {:>12.3} {d:>+8.1} % {dw:>+8.1} %\n", p.p[i], m.p[i]);
            rows.push(serde_json::json!({"case": case, "figure": name, "predicted_ms": p.p[i],
                "measured_ms": m.p[i], "distance_percent": d, "same_window_distance_percent": dw,
                "goal_percent": goal}));
            if dw.abs() > *goal {
                missed.push(format!("{case} {name}: same-window prediction {dw:+.1} % (goal ±{goal} %)"));
            }
        }
    }
    // The algorithms from the lowest mean latency: predicted from the first
    // window, measured after each switch.
    let asked = ranking_asked.unwrap();
    let mut predicted_rank: Vec<(String, f64)> = ["round-robin", "least-request", "peak-ewma"]
        .iter()
        .map(|a| {
            let r = asked.iter().find(|r| r["algorithm"] == *a).unwrap();
            (a.to_string(), Figures::of_report(r).mean)
        })
        .collect();
    let mut measured_rank: Vec<(String, f64)> = cases[..3]
        .iter()
        .map(|(c, _, m, _)| ((if *c == "unchanged" { "round-robin" } else { c }).to_string(), m.mean))
        .collect();
    predicted_rank.sort_by(|a, b| a.1.total_cmp(&b.1));
    measured_rank.sort_by(|a, b| a.1.total_cmp(&b.1));
    let names = |r: &[(String, f64)]| r.iter().map(|(a, _)| a.clone()).collect::<Vec<_>>();
    let (predicted_rank, measured_rank) = (names(&predicted_rank), names(&measured_rank));
    report += &format!("ranking by mean: predicted {predicted_rank:?}, measured {measured_rank:?}\n");
    eprintln!("{diagnosis}{report}");
    if let Ok(out) = std::env::var("FULCRUM_WHATIF_OUT") {
        let doc = serde_json::json!({"window": window, "rate": rate, "runs": runs, "rows": rows,
            "delays": delays, "requests_per_endpoint": diagnosis.lines().collect::<Vec<_>>(),
            "ranking": {"by": "mean", "predicted": predicted_rank, "measured": measured_rank}});
        std::fs::write(out, serde_json::to_string_pretty(&doc).unwrap()).unwrap();
    }
    assert_eq!(predicted_rank, measured_rank, "{report}");
    assert!(missed.is_empty(), "goals missed: {missed:?}\n{report}");
}

/// Queueing: one backend that serves 8 requests at once (50 ms each, the
/// rest wait their turn) behind the proxy at 100 requests/s (Poisson, as
/// the scenario's clients send), about 60 % of
/// its 160/s (20 s windows, so that the levels above 8 in flight are seen
/// often). The concurrency fitted from the proxy's latencies by requests in
/// flight is 8 ± 1, its interval holds 8, and the scenario has it. Then
/// `--headroom 150ms` names a rate, and a real load at that rate measures a
/// p99 within a factor 2 of 150 ms: near saturation a queue's p99 doubles
/// for about a tenth more rate, so this checks the predicted rate to about
/// ±10 %. `FULCRUM_WHATIF_OUT` names a file for the figures as JSON.
#[test]
#[ignore = "timing: a fitted concurrency and its headroom against a live proxy (about 60 s, wall-clock latencies)"]
fn a_fitted_concurrency_predicts_the_headroom_of_a_live_endpoint() {
    let (_backend, addrs) = fulcrum_backend(&["--delays", "50ms", "--concurrency", "8"]);
    let addr = addrs[0];
    let config = app_config(&toml_list(&[addr]), "workers = 1", "", "algorithm = { kind = \"round-robin\" }");
    let f = Fulcrum::serve("what-if-queue", &config);
    let (admin, listen) = (f.admin.unwrap(), f.listen[0]);
    let traffic = load_with(listen, 100.0, &["--poisson"]);
    std::thread::sleep(Duration::from_millis(1500));

    let dir = temp_dir("what-if-queue");
    let file = dir.join("app.toml");
    let asked = what_if(admin, "20s", "3", &["--headroom", "150ms", "--write-scenario", file.to_str().unwrap()]);
    drop(traffic);
    let current = &asked["current_state"];
    let fit = &current["concurrency"][0];
    eprintln!(
        "fitted {fit}, overhead {} ms\nheadroom {}\ncurrent state {}",
        current["overhead_ms"], asked["headroom"], current["figures"]
    );
    let c = fit["concurrency"].as_u64().unwrap_or_else(|| panic!("no limit fitted: {fit}"));
    let (low, high) = (fit["low"].as_u64().unwrap(), fit["high"].as_u64().unwrap());
    assert!((7..=9).contains(&c) && low <= 8 && 8 <= high, "fitted {fit}");
    let scenario = std::fs::read_to_string(&file).unwrap();
    assert!(scenario.contains(&format!("concurrency = {c}\n")), "{scenario}");
    let h = &asked["headroom"];
    let rate = h["rate"].as_f64().unwrap_or_else(|| panic!("no headroom found: {h}"));
    assert!((100.0..200.0).contains(&rate), "{h}");

    let traffic = load_with(listen, rate, &["--poisson"]);
    std::thread::sleep(Duration::from_millis(2000));
    let measured = what_if(admin, "20s", "1", &[]);
    drop(traffic);
    let p99 = Figures::of_check(&measured["current_state"], "measured_ms").p[2];
    eprintln!("at {rate:.1}/s: measured p99 {p99:.1} ms (bound 150 ms)");
    if let Ok(out) = std::env::var("FULCRUM_WHATIF_OUT") {
        let doc = serde_json::json!({"fit": fit, "overhead_ms": current["overhead_ms"], "headroom": h,
            "current_state": current["figures"], "measured_p99_ms_at_rate": p99, "p99_bound_ms": 150.0});
        std::fs::write(out, serde_json::to_string_pretty(&doc).unwrap()).unwrap();
    }
    assert!((75.0..300.0).contains(&p99), "at the predicted {rate:.1}/s the p99 is {p99:.1} ms, not 150 ms ± 2×: {h}");
}

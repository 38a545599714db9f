//! `fulcrum sim --from ADMIN --cluster NAME`: a simulator scenario built
//! from a running proxy's measurements, and the check of its prediction of
//! the present against what the proxy measured.
//!
//! Two snapshots of `GET /clusters/NAME/model`, `--window` apart, give per
//! endpoint the requests, errors and latency histogram (5 %-wide buckets)
//! of the window. Each routable endpoint that answered in the window
//! becomes a server whose service time is `empirical`: the window's
//! latencies as the proxy measured them (request sent to response
//! headers), so the proxy↔endpoint network time is inside the service time
//! and `[network]` is zero. Each endpoint's concurrency is fitted from its
//! latencies by requests in flight ([`crate::concurrency`]): with a limit
//! seen, the server gets that `concurrency` and the latencies of requests
//! that found a slot free, so the simulator queues the rest; without one it
//! is a pure delay (any queueing is in the measured latencies). A server
//! answers its window's share of failed requests with errors. The clients
//! send Poisson traffic at the window's request rate, and latency is
//! measured at the balancer, as the proxy measures it. The balancers (one
//! per worker), the algorithm and the resilience settings are the
//! cluster's.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};

use crate::cli::Failure;
use crate::concurrency::Level;

/// Clients the window's rate is spread over (Poisson each, Poisson in all).
const CLIENTS: u32 = 10;
/// Simulated time of each run, and the part of it left out at the start.
const DURATION_S: u64 = 30;
const WARMUP_S: u64 = 2;
/// Most latency values written per endpoint (spread over its buckets).
const MAX_VALUES: u64 = 20_000;
/// Fewest unqueued latencies to model a limited endpoint's service time from.
const MIN_UNQUEUED: u64 = 50;
/// Algorithms compared besides the cluster's own.
const COMPARED: [&str; 4] = ["round-robin", "least-request", "peak-ewma", "random"];

/// What was measured over the window and the scenario built from it.
pub struct Measured {
    /// The scenario file written.
    pub scenario: PathBuf,
    /// The cluster's algorithm (the first one the scenario runs).
    pub algorithm: String,
    /// Requests per second over the window, all endpoints.
    pub rate: f64,
    /// Failed share of the window's requests.
    pub error_rate: f64,
    /// Measured p50, p90, p99, p99.9 over the window, milliseconds (bucket-interpolated).
    pub p: [f64; 4],
    /// Measured mean over the window, milliseconds (bucket midpoints).
    pub mean: f64,
    /// Requests in the window.
    pub requests: u64,
    /// Requests in the window per endpoint (routable or not), by address.
    pub per_endpoint: Vec<(String, u64)>,
    /// The window actually measured, seconds.
    pub window: f64,
    /// Per endpoint that answered in the window: its concurrency fit.
    pub fits: Vec<(String, crate::concurrency::Fit)>,
    /// Time outside the endpoints' slots, ms, when a limit was fitted.
    pub overhead_ms: Option<f64>,
}

/// The admin address in `--from`: `http://HOST:PORT[/]` or `HOST:PORT`.
pub fn admin_addr(from: &str) -> Result<SocketAddr, Failure> {
    let rest = from.strip_prefix("http://").unwrap_or(from).trim_end_matches('/');
    rest.parse().map_err(|_| {
        Failure::input(format!(
            "--from {from:?}: expected the admin listener as http://IP:PORT (such as http://127.0.0.1:9901)"
        ))
    })
}

fn snapshot(runtime: &tokio::runtime::Runtime, admin: SocketAddr, cluster: &str) -> Result<Value, Failure> {
    if cluster.is_empty() || !cluster.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) {
        return Err(Failure::input(format!("--cluster {cluster:?}: not a cluster name")));
    }
    let path = format!("/clusters/{cluster}/model");
    runtime.block_on(fulcrum_proxy::ctl::call(admin, http::Method::GET, &path, None)).map_err(|e| {
        if e.is_refusal() {
            Failure::input(format!("--cluster {cluster}: {e}"))
        } else {
            Failure::runtime(format!("--from: {e}"))
        }
    })
}

/// One endpoint of a snapshot.
struct Endpoint {
    address: String,
    weight: f64,
    routable: bool,
    requests: u64,
    errors: u64,
    /// Latency bucket counts: `[low, high, count]`.
    buckets: Vec<[u64; 3]>,
    /// `[level, requests, sum ns, sum of squares µs²]` by requests in flight when picked.
    levels: Vec<[u64; 4]>,
    /// Latency bucket counts by band of in-flight levels (its lowest level).
    bands: Vec<(u64, Vec<[u64; 3]>)>,
}

fn endpoints(v: &Value) -> Result<Vec<Endpoint>, Failure> {
    let bad = || {
        Failure::runtime(
            "--from: the admin listener's model answer has no endpoint list (is it a fulcrum proxy of this version?)",
        )
    };
    let list = v.get("endpoints").and_then(Value::as_array).ok_or_else(bad)?;
    list.iter()
        .map(|e| {
            let address = e.get("address").and_then(Value::as_str).ok_or_else(bad)?.to_string();
            let routable = e.get("healthy").and_then(Value::as_bool).unwrap_or(true)
                && !e.get("ejected").and_then(Value::as_bool).unwrap_or(false)
                && !e.get("draining").and_then(Value::as_bool).unwrap_or(false);
            let buckets: Vec<[u64; 3]> =
                serde_json::from_value(e.get("latency_buckets").cloned().ok_or_else(bad)?).map_err(|_| bad())?;
            // Older proxies have no in-flight levels: no concurrency is fitted then.
            let optional = |key: &str| e.get(key).cloned().unwrap_or(Value::Array(Vec::new()));
            Ok(Endpoint {
                address,
                weight: e.get("weight").and_then(Value::as_f64).unwrap_or(1.0),
                routable,
                requests: e.get("requests").and_then(Value::as_u64).unwrap_or(0),
                errors: e.get("errors").and_then(Value::as_u64).unwrap_or(0),
                buckets,
                levels: serde_json::from_value(optional("by_in_flight")).map_err(|_| bad())?,
                bands: serde_json::from_value(optional("latency_buckets_by_in_flight")).map_err(|_| bad())?,
            })
        })
        .collect()
}

/// The window's bucket counts: `after − before`, by bucket.
fn delta(before: &[[u64; 3]], after: &[[u64; 3]]) -> Vec<[u64; 3]> {
    after
        .iter()
        .filter_map(|&[lo, hi, n]| {
            let was = before.iter().find(|b| b[0] == lo).map_or(0, |b| b[2]);
            (n > was).then_some([lo, hi, n - was])
        })
        .collect()
}

/// The window's in-flight levels: `after − before`, by level (the sums wrap).
fn level_delta(before: &[[u64; 4]], after: &[[u64; 4]]) -> Vec<Level> {
    after
        .iter()
        .map(|a| {
            let b = before.iter().find(|b| b[0] == a[0]).copied().unwrap_or([a[0], 0, 0, 0]);
            Level {
                level: a[0],
                n: a[1].wrapping_sub(b[1]),
                sum_ns: a[2].wrapping_sub(b[2]),
                sq_us2: a[3].wrapping_sub(b[3]),
            }
        })
        .filter(|l| l.n > 0)
        .collect()
}

/// The window's latencies of requests picked below `c` in flight (never
/// queued at an endpoint of `c` slots): the bands that lie wholly below it.
fn unqueued(before: &Endpoint, after: &Endpoint, c: u32) -> Vec<[u64; 3]> {
    let mut all: Vec<[u64; 3]> = Vec::new();
    for (start, buckets) in &after.bands {
        let top = if *start == 0 { 0 } else { 2 * start - 1 };
        if top < u64::from(c) {
            let old = before.bands.iter().find(|b| b.0 == *start).map_or(&[][..], |b| &b.1[..]);
            all.extend(delta(old, buckets));
        }
    }
    merge(all)
}

/// Bucket counts summed by bucket.
fn merge(mut all: Vec<[u64; 3]>) -> Vec<[u64; 3]> {
    all.sort_by_key(|b| b[0]);
    all.chunk_by(|a, b| a[0] == b[0]).map(|c| [c[0][0], c[0][1], c.iter().map(|b| b[2]).sum()]).collect()
}

/// Quantile `q` of bucket counts, interpolated linearly within the bucket, in ms.
fn quantile(buckets: &[[u64; 3]], q: f64) -> f64 {
    let total: u64 = buckets.iter().map(|b| b[2]).sum();
    let rank = q * total as f64;
    let mut below = 0.0;
    for &[lo, hi, n] in buckets {
        if below + n as f64 >= rank {
            let within = ((rank - below) / n as f64).clamp(0.0, 1.0);
            return (lo as f64 + (hi - lo) as f64 * within) / 1e6;
        }
        below += n as f64;
    }
    buckets.last().map_or(0.0, |b| b[1] as f64 / 1e6)
}

/// Mean of bucket counts, each count at its bucket's midpoint, in ms.
fn mean(buckets: &[[u64; 3]]) -> f64 {
    let total: u64 = buckets.iter().map(|b| b[2]).sum();
    let sum: f64 = buckets.iter().map(|&[lo, hi, n]| (lo + hi) as f64 / 2.0 * n as f64).sum();
    sum / total.max(1) as f64 / 1e6
}

/// Latency values in milliseconds, spread evenly inside each bucket, at
/// most [`MAX_VALUES`] in all (each bucket keeps its share, and at least one).
/// `less` (ns) is taken off each (the overhead outside the endpoint).
fn values(buckets: &[[u64; 3]], less: f64) -> String {
    let total: u64 = buckets.iter().map(|b| b[2]).sum();
    let scale = (MAX_VALUES as f64 / total.max(1) as f64).min(1.0);
    let mut out = String::new();
    for &[lo, hi, n] in buckets {
        let k = ((n as f64 * scale).round() as u64).max(1);
        for j in 0..k {
            let v = lo as f64 + (hi - lo) as f64 * (j as f64 + 0.5) / k as f64;
            let _ = writeln!(out, "{:.4}", (v - less).max(0.0) / 1e6);
        }
    }
    out
}

/// Read two snapshots `window` apart and write the scenario to `file` (its
/// latency files beside it, named after it).
pub fn build(from: &str, cluster: &str, window: Duration, file: &Path) -> Result<Measured, Failure> {
    let admin = admin_addr(from)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::runtime(format!("cannot start a runtime: {e}")))?;
    let first = snapshot(&runtime, admin, cluster)?;
    std::thread::sleep(window);
    let second = snapshot(&runtime, admin, cluster)?;
    let t = |v: &Value| v.get("time_ns").and_then(Value::as_u64).unwrap_or(0);
    let window_s = t(&second).saturating_sub(t(&first)) as f64 / 1e9;
    let algorithm = second.pointer("/algorithm/kind").and_then(Value::as_str).unwrap_or("round-robin").to_string();
    let (before, after) = (endpoints(&first)?, endpoints(&second)?);

    let mut servers = Vec::new();
    let (mut requests, mut errors, mut all, mut per_endpoint, mut levels) = (0, 0, Vec::new(), Vec::new(), Vec::new());
    let none = Endpoint {
        address: String::new(),
        weight: 1.0,
        routable: true,
        requests: 0,
        errors: 0,
        buckets: Vec::new(),
        levels: Vec::new(),
        bands: Vec::new(),
    };
    for (i, e) in after.iter().enumerate() {
        let old = before.iter().find(|b| b.address == e.address).unwrap_or(&none);
        let window_buckets = delta(&old.buckets, &e.buckets);
        let (req, err) = (e.requests - old.requests.min(e.requests), e.errors - old.errors.min(e.errors));
        requests += req;
        per_endpoint.push((e.address.clone(), req));
        errors += err;
        all.extend_from_slice(&window_buckets);
        if !e.routable || window_buckets.is_empty() {
            continue;
        }
        levels.push((level_delta(&old.levels, &e.levels), old, e));
        servers.push(Server {
            index: i,
            address: e.address.clone(),
            weight: e.weight,
            service: window_buckets,
            concurrency: None,
            errors: (err > 0 && req > 0).then(|| (err as f64 / req as f64).min(0.999)),
            fit: None,
        });
    }
    if servers.is_empty() || requests == 0 || window_s <= 0.0 {
        return Err(Failure::runtime(format!(
            "--from: cluster {cluster} answered no request in the {window_s:.1} s window: nothing to model (is traffic flowing?)"
        )));
    }
    let merged = merge(all);
    let rate = requests as f64 / window_s;
    let mut algorithms = vec![algorithm.clone()];
    algorithms.extend(COMPARED.iter().map(|s| s.to_string()).filter(|a| *a != algorithm));
    let header = format!(
        "# Built by `fulcrum sim --from {from} --cluster {cluster}` from a {window_s:.1} s window:\n\
         # {requests} requests ({rate:.1}/s), {errors} failed (each endpoint's share as its `errors`).\n\
         # One balancer per worker; the cluster's algorithm, timeout, max_requests, retries,\n\
         # outlier detection and slow start as the proxy runs them.\n\
         name = \"{cluster}\"\nalgorithms = {algorithms:?}\n\n[clients]\ncount = {CLIENTS}\nloop = \"open\"\n\
         rate = {:.3}\nduration = \"{DURATION_S}s\"\n",
        rate / f64::from(CLIENTS),
    );
    let mut out = Out { file, header, servers, settings: settings(&second)? };
    let fits = out.fit_concurrency(&levels)?;
    let measured_mean = mean(&merged);
    let overhead = match out.servers.iter().any(|s| s.concurrency.is_some()) {
        true => Some(out.calibrate(measured_mean)?),
        false => {
            out.write(0.0)?;
            None
        }
    };
    Ok(Measured {
        scenario: file.to_path_buf(),
        algorithm,
        rate,
        error_rate: errors as f64 / requests as f64,
        p: [quantile(&merged, 0.5), quantile(&merged, 0.9), quantile(&merged, 0.99), quantile(&merged, 0.999)],
        mean: measured_mean,
        requests,
        per_endpoint,
        window: window_s,
        fits,
        overhead_ms: overhead.map(|d| d / 1e6),
    })
}

/// One server of the scenario written.
struct Server {
    /// Its endpoint's index in the model (names its latency file).
    index: usize,
    address: String,
    weight: f64,
    /// The latencies its service times are drawn from.
    service: Vec<[u64; 3]>,
    concurrency: Option<u32>,
    errors: Option<f64>,
    /// The concurrency fit, as a comment.
    fit: Option<String>,
}

/// The scenario file and its latency files, before they are written.
struct Out<'a> {
    file: &'a Path,
    header: String,
    servers: Vec<Server>,
    settings: String,
}

impl Out<'_> {
    /// Fit each server's concurrency from its window's `levels` (with the
    /// endpoint's two snapshots), against the dispersion the scenario as
    /// pure delays gives it. With a limit seen, the server gets it and the
    /// latencies of the requests that found a free slot, and the queue is
    /// the simulator's.
    fn fit_concurrency(
        &mut self,
        levels: &[(Vec<Level>, &Endpoint, &Endpoint)],
    ) -> Result<Vec<(String, crate::concurrency::Fit)>, Failure> {
        self.write(0.0)?;
        let s = fulcrum_sim::Scenario::load(self.file).map_err(|e| Failure::runtime(format!("--from: {e}")))?;
        let expected =
            crate::concurrency::expected_dispersions(&s).map_err(|e| Failure::runtime(format!("--from: {e}")))?;
        let mut fits = Vec::new();
        for ((server, (levels, old, e)), expected) in self.servers.iter_mut().zip(levels).zip(expected) {
            let Some(fit) = crate::concurrency::fit(levels, expected) else { continue };
            if let Some((c, ..)) = fit.limit {
                let unqueued = unqueued(old, e, c);
                if unqueued.iter().map(|b| b[2]).sum::<u64>() >= MIN_UNQUEUED {
                    (server.service, server.concurrency) = (unqueued, Some(c));
                }
            }
            server.fit = Some(fit.text());
            fits.push((server.address.clone(), fit));
        }
        Ok(fits)
    }

    /// Write the scenario with `overhead` ns outside the endpoints: taken
    /// off every latency, and put on the balancer ↔ server hop (half each way).
    fn write(&self, overhead: f64) -> Result<(), Failure> {
        let stem = self.file.file_stem().map_or("whatif".into(), |s| s.to_string_lossy().into_owned());
        let dir = self.file.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).map_err(|e| Failure::runtime(format!("creating {}: {e}", dir.display())))?;
        let mut text = self.header.clone();
        for s in &self.servers {
            let latency_file = format!("{stem}.endpoint-{}.txt", s.index);
            std::fs::write(dir.join(&latency_file), values(&s.service, overhead))
                .map_err(|e| Failure::runtime(format!("writing {}: {e}", dir.join(&latency_file).display())))?;
            if let Some(fit) = &s.fit {
                let _ = write!(text, "\n# concurrency: {fit}");
            }
            let (address, weight) = (&s.address, s.weight);
            let _ = writeln!(
                text,
                "\n[[servers]]\nname = {address:?}\nweight = {weight}\nservice = {{ dist = \"empirical\", file = {latency_file:?} }}"
            );
            if let Some(c) = s.concurrency {
                let _ = writeln!(text, "concurrency = {c}");
            }
            if let Some(e) = s.errors {
                let _ = writeln!(text, "errors = {e}");
            }
        }
        let _ = write!(
            text,
            "\n# Service times are the proxy's measured latencies (request sent to response headers){}\n\
             [network]\nlb_server = \"{}ns\"\n",
            if overhead > 0.0 {
                format!(
                    ",\n# less {:.3} ms spent outside the endpoints' slots (proxy, network, wake-ups), set so that\n\
                     # the simulated mean latency, and so (Little's law) the mean in flight, is the measured one",
                    overhead / 1e6
                )
            } else {
                ": the proxy-endpoint time is inside them".to_string()
            },
            (overhead / 2.0).round() as u64
        );
        let _ = write!(text, "\n[metrics]\nlatency = \"balancer\"\nwarmup = \"{WARMUP_S}s\"\n\n{}", self.settings);
        std::fs::write(self.file, text)
            .map_err(|e| Failure::runtime(format!("--write-scenario {}: {e}", self.file.display())))
    }

    /// The overhead (ns) at which the simulated mean latency is `measured`
    /// ms, by bisection between none and the shortest latency; the
    /// scenario is left written with it.
    fn calibrate(&self, measured: f64) -> Result<f64, Failure> {
        let mean_at = |overhead: f64| -> Result<f64, Failure> {
            self.write(overhead)?;
            let s = fulcrum_sim::Scenario::load(self.file).map_err(|e| Failure::runtime(format!("--from: {e}")))?;
            let plan =
                fulcrum_sim::Plan { algorithms: vec![s.algorithms[0].clone()], seed: s.seed, runs: 1, threads: 1 };
            let report =
                fulcrum_sim::simulate(&s, &plan, None).map_err(|e| Failure::runtime(format!("--from: {e}")))?;
            Ok(report.results[0].latency.avg)
        };
        let shortest = self.servers.iter().filter_map(|s| s.service.first().map(|b| b[0])).min().unwrap_or(0) as f64;
        let (mut lo, mut hi) = (0.0, shortest);
        if mean_at(lo)? <= measured {
            return Ok(0.0);
        }
        if mean_at(hi)? > measured {
            return Ok(hi);
        }
        while hi - lo > shortest * 1e-3 {
            let mid = (lo + hi) / 2.0;
            if mean_at(mid)? > measured {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        mean_at(hi)?;
        Ok(hi)
    }
}

/// The cluster's settings as scenario tables: one balancer per worker with
/// the request timeout and `max_requests`, the algorithm with its parameters, and the
/// resilience tables the proxy runs (retries, outlier detection, slow start).
fn settings(model: &Value) -> Result<String, Failure> {
    let bad = |what: &str| Failure::runtime(format!("--from: the model's {what} cannot be written as a scenario"));
    let workers = model.pointer("/endpoints/0/workers").and_then(Value::as_array).map_or(1, |w| w.len().max(1));
    let timeout = model.pointer("/resilience/request_timeout_ms").and_then(Value::as_f64);
    let mut out = format!("[balancers]\ncount = {workers}\n");
    if let Some(ms) = timeout {
        let _ = writeln!(out, "timeout = \"{}us\"", (ms * 1e3).round() as u64);
    }
    if let Some(n) = model.pointer("/resilience/max_requests").and_then(Value::as_u64) {
        let _ = writeln!(out, "max_requests = {n}");
    }
    let mut tables = serde_json::Map::new();
    if let Some(a) = model.get("algorithm").filter(|a| a.is_object()) {
        tables.insert("algorithm".into(), json!([without_nulls(a)]));
    }
    for key in ["retries", "outlier_detection", "slow_start"] {
        if let Some(v) = model.pointer(&format!("/resilience/{key}")).filter(|v| v.is_object()) {
            tables.insert(key.into(), without_nulls(v));
        }
    }
    out += "\n";
    out += &toml::to_string(&Value::Object(tables)).map_err(|_| bad("settings"))?;
    Ok(out)
}

/// `v` without its `null` members (TOML has no null: a missing key is the default).
fn without_nulls(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            Value::Object(m.iter().filter(|(_, v)| !v.is_null()).map(|(k, v)| (k.clone(), without_nulls(v))).collect())
        }
        Value::Array(a) => Value::Array(a.iter().map(without_nulls).collect()),
        other => other.clone(),
    }
}

/// The headroom again with each fitted concurrency at both ends of its
/// interval, carrying the fit's uncertainty to the answer: adds
/// `factor_range` and `rate_range` to `h` (nothing when no limit was fitted).
pub fn headroom_range(
    h: &mut Value,
    scenario: &fulcrum_sim::Scenario,
    m: &Measured,
    algorithm: &fulcrum_balance::AlgorithmConfig,
    plan: &fulcrum_sim::Plan,
    bound: Duration,
) -> Result<(), Failure> {
    let limited: Vec<(usize, u32, u32)> = scenario
        .servers
        .iter()
        .enumerate()
        .filter_map(|(i, s)| {
            let (c, low, high) = m.fits.iter().find(|(a, _)| *a == s.name)?.1.limit?;
            (s.concurrency == Some(c)).then_some((i, low, high))
        })
        .collect();
    if limited.is_empty() {
        return Ok(());
    }
    let at = |end: fn(&(usize, u32, u32)) -> u32| {
        let mut s = scenario.clone();
        for l in &limited {
            s.servers[l.0].concurrency = Some(end(l));
        }
        crate::questions::headroom(&s, algorithm, plan, bound)
    };
    let (low, high) = (at(|l| l.1)?, at(|l| l.2)?);
    h["factor_range"] = json!([low["factor"], high["factor"]]);
    h["rate_range"] = json!([low["rate"], high["rate"]]);
    Ok(())
}

/// The current state's check: measured against the first algorithm's prediction.
pub fn check(m: &Measured, predicted: &fulcrum_workload::Summary) -> Value {
    let pred = [predicted.p50, predicted.p90, predicted.p99, predicted.p999, predicted.avg];
    let figures: Vec<Value> = ["p50", "p90", "p99", "p999", "mean"]
        .iter()
        .zip(m.p.iter().chain([&m.mean]).zip(pred))
        .map(|(name, (&measured, predicted))| {
            json!({ "figure": name, "measured_ms": measured, "predicted_ms": predicted,
                    "distance_percent": (predicted - measured) / measured.max(1e-9) * 100.0 })
        })
        .collect();
    json!({
        "algorithm": m.algorithm, "window_s": m.window, "requests": m.requests, "rate": m.rate,
        "error_rate": m.error_rate, "scenario": m.scenario.display().to_string(), "figures": figures,
        "requests_per_endpoint": m.per_endpoint.iter().map(|(a, n)| json!({ "address": a, "requests": n })).collect::<Vec<_>>(),
        "concurrency": m.fits.iter().map(|(a, f)| f.json(a)).collect::<Vec<_>>(),
        "overhead_ms": m.overhead_ms,
        "concurrency_text": m.fits.iter().map(|(a, f)| format!("{a}: {}", f.text())).collect::<Vec<_>>(),
    })
}

/// The check as the lines printed before the report's table.
pub fn check_text(check: &Value) -> String {
    let mut out = format!(
        "current state ({}, {:.0} req/s over {:.1} s, {:.2} % errors): measured vs predicted\n",
        check["algorithm"].as_str().unwrap_or("?"),
        check["rate"].as_f64().unwrap_or(0.0),
        check["window_s"].as_f64().unwrap_or(0.0),
        check["error_rate"].as_f64().unwrap_or(0.0) * 100.0
    );
    for f in check["figures"].as_array().into_iter().flatten() {
        let _ = writeln!(
            out,
            "  {:<4}  {:>9.3} ms  {:>9.3} ms  {:+6.1} %",
            f["figure"].as_str().unwrap_or("?"),
            f["measured_ms"].as_f64().unwrap_or(0.0),
            f["predicted_ms"].as_f64().unwrap_or(0.0),
            f["distance_percent"].as_f64().unwrap_or(0.0)
        );
    }
    for line in check["concurrency_text"].as_array().into_iter().flatten() {
        let _ = writeln!(out, "  concurrency {}", line.as_str().unwrap_or("?"));
    }
    if let Some(ms) = check["overhead_ms"].as_f64() {
        let _ = writeln!(out, "  outside the endpoints' slots: {ms:.3} ms (fitted to the measured mean)");
    }
    let _ = writeln!(out, "scenario: {}\n", check["scenario"].as_str().unwrap_or("?"));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_quantiles_and_values() {
        let before = [[1_000_000, 1_050_000, 5]];
        let after = [[1_000_000, 1_050_000, 15], [2_000_000, 2_100_000, 10]];
        let d = delta(&before, &after);
        assert_eq!(d, vec![[1_000_000, 1_050_000, 10], [2_000_000, 2_100_000, 10]]);
        assert!((quantile(&d, 0.5) - 1.05).abs() < 1e-9);
        assert!((quantile(&d, 0.75) - 2.05).abs() < 1e-9);
        assert!((mean(&d) - (1.025 + 2.05) / 2.0).abs() < 1e-9);
        let v = values(&d, 0.0);
        assert_eq!(v.lines().count(), 20);
        assert!(v.lines().all(|l| (1.0..2.1).contains(&l.parse::<f64>().unwrap())));
        assert!(admin_addr("http://127.0.0.1:9901/").is_ok());
        assert!(admin_addr("localhost").is_err());
    }
}

//! `fulcrum demo`: the seed-000 experiment, live on loopback, next to the
//! simulator's prediction for the same setup.
//!
//! It starts ten backends in-process (nine answering in 5 ms, one in 50 ms),
//! then for each algorithm a proxy (one worker, so one balancer sees all the
//! traffic, as in the seed) and the seed's clients: ten of them, each sending
//! one request every 100 ms, client i starting at 1 s + i ms, latency
//! measured at the client from the intended send time. It prints the
//! seed-000 table with a live row and a simulated row per algorithm, then the
//! requests each backend served. Hash-based algorithms hash a header the
//! clients do not send, so every request gets a random key, as in the seed.
//!
//! Both rows are computed by the same method, exact percentiles (linear
//! interpolation at rank (n−1)·p over every sample), and a line under the
//! table says so: a full demo measures about a thousand requests per
//! algorithm, far below `fulcrum_workload::EXACT_LIMIT`, so the live
//! recorder keeps every latency as the simulator does, and an HDR
//! histogram's rounding would only add a difference between rows that
//! should differ by the model's error alone.
//! Ctrl-C stops the run in progress, shuts everything down and exits 130.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Args as ClapArgs;
use fulcrum_balance::{AlgorithmConfig, AlgorithmKind};
use fulcrum_load::{Backends, BackendsConfig, Clients, Control, LoadConfig, Pattern, Report};
use fulcrum_proxy::config::HashKey;
use fulcrum_proxy::{Config, Proxy};
use fulcrum_sim::{Plan, Scenario};
use fulcrum_workload::Method;
use serde::Serialize;

use crate::cli::Failure;

/// Options of `fulcrum demo`.
#[derive(Debug, ClapArgs)]
#[command(after_help = "\
Examples:
  fulcrum demo                                  # all seven algorithms, about 80 s
  fulcrum demo --quick                          # 20 requests per client, about 25 s
  fulcrum demo --algorithms round-robin,peak-ewma --seed 7

It starts ten backends on loopback (nine answer in 5 ms, one in 50 ms), then for each algorithm \
a proxy and ten clients, each sending one request every 100 ms. The table shows each \
algorithm's latency percentiles measured live, next to the simulator's prediction for the same \
setup, then how many requests each backend served. Nothing leaves the machine.")]
pub struct Args {
    /// 20 requests per client instead of 100 (about 3 s per algorithm instead of 11 s).
    #[arg(long)]
    quick: bool,
    /// Algorithms to run, comma-separated (default: all seven).
    #[arg(long, value_delimiter = ',')]
    algorithms: Vec<String>,
    /// Seed of the balancers and of the simulation.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

const SERVICE_MS: [u64; 10] = [5, 5, 5, 5, 5, 5, 5, 5, 5, 50];
/// The header hash-based algorithms hash; the clients never send it.
const KEY_HEADER: &str = "x-fulcrum-demo-key";

/// One algorithm's live and simulated figures.
struct Row {
    algorithm: AlgorithmKind,
    live: Report,
    sim: fulcrum_sim::AlgorithmReport,
}

/// The simulator's model of exactly this setup: loopback (no network
/// delay, no first-contact delay), servers named by the backends' addresses
/// so hash tables match the proxy's.
fn scenario(names: &[String], kinds: &[AlgorithmKind], requests: u64, seed: u64) -> Result<Scenario, Failure> {
    #[derive(Serialize)]
    struct Algorithms {
        algorithm: Vec<AlgorithmConfig>,
    }
    let list: Vec<String> = kinds.iter().map(|k| format!("{:?}", k.name())).collect();
    let quoted = |s: &[String]| s.iter().map(|n| format!("{n:?}")).collect::<Vec<_>>().join(", ");
    let mut text = format!(
        "name = \"demo\"\nseed = {seed}\nalgorithms = [{}]\n\n[clients]\ncount = 10\nloop = \"open\"\n\
         interval = \"100ms\"\nrequests = {requests}\nstart = \"1s\"\nstagger = \"1ms\"\nconnect = true\n\
         keys = \"random\"\n\n[[servers]]\nnames = [{}]\nservice = \"5ms\"\n\n[[servers]]\nname = {:?}\n\
         service = \"50ms\"\n\n[metrics]\nlatency = \"client\"\n\n",
        list.join(", "),
        quoted(&names[..9]),
        names[9]
    );
    let configs = Algorithms { algorithm: kinds.iter().map(|k| k.default_config()).collect() };
    text.push_str(&toml::to_string(&configs).map_err(|e| Failure::runtime(e.to_string()))?);
    Scenario::parse(&text, "demo", "demo", std::path::Path::new("."))
        .map_err(|e| Failure::runtime(format!("demo scenario: {e}")))
}

/// One live run of `kind` against `backends`.
fn live(
    kind: AlgorithmKind,
    backends: &Backends,
    clients: &Clients,
    seed: u64,
    control: &Control,
) -> Result<Report, Failure> {
    let addrs: Vec<String> = backends.addrs().iter().map(|a| a.to_string()).collect();
    let listen = "127.0.0.1:0".parse().expect("a valid address literal");
    let mut config = Config::quick(listen, &addrs, kind).map_err(|e| Failure::runtime(e.to_string()))?;
    config.workers = 1;
    config.seed = seed;
    config.clusters[0].hash_key = HashKey::Header(KEY_HEADER.into());
    let proxy = Proxy::start(config).map_err(|e| Failure::runtime(e.to_string()))?;
    let mut load = LoadConfig::new(format!("http://{}/", proxy.listen_addrs()[0]));
    load.pattern = Pattern::Clients(clients.clone());
    load.threads = 1;
    let report = fulcrum_load::run_with(&load, control).map_err(|e| Failure::runtime(e.to_string()));
    proxy.shutdown(Duration::from_secs(2));
    report
}

/// Run the demo.
pub fn run(args: Args) -> Result<(), Failure> {
    let kinds: Vec<AlgorithmKind> = if args.algorithms.is_empty() {
        AlgorithmKind::all()
    } else {
        args.algorithms
            .iter()
            .map(|a| a.parse().map_err(|e: fulcrum_balance::UnknownAlgorithm| Failure::input(e.to_string())))
            .collect::<Result<_, _>>()?
    };
    let requests = if args.quick { 20 } else { 100 };
    let clients = Clients { requests_per_client: requests, ..Clients::seed_000() };

    let delays: Vec<Duration> = SERVICE_MS.iter().map(|&ms| Duration::from_millis(ms)).collect();
    let backends = Backends::start(BackendsConfig::fixed_delays(&delays))
        .map_err(|e| Failure::runtime(format!("cannot start the backends: {e}")))?;
    let names: Vec<String> = backends.addrs().iter().map(|a| a.to_string()).collect();

    let interrupted = Arc::new(AtomicBool::new(false));
    let control: Arc<Mutex<Control>> = Arc::new(Mutex::new(Control::new()));
    {
        let (interrupted, control) = (interrupted.clone(), control.clone());
        crate::signal::on_signals(move |n| {
            if n > 1 {
                std::process::exit(130);
            }
            interrupted.store(true, Ordering::SeqCst);
            control.lock().unwrap_or_else(std::sync::PoisonError::into_inner).stop();
            eprintln!("fulcrum demo: stopping (Ctrl-C again to quit at once)");
        })
        .map_err(|e| Failure::runtime(format!("cannot handle signals: {e}")))?;
    }

    eprintln!(
        "fulcrum demo: 10 backends on {} … (9 × 5 ms, 1 × 50 ms); 10 clients × {requests} requests, one every 100 ms",
        names[0]
    );
    let scenario = scenario(&names, &kinds, requests, args.seed)?;
    let predicted = fulcrum_sim::simulate(&scenario, &Plan::for_scenario(&scenario), None)
        .map_err(|e| Failure::runtime(format!("simulation: {e}")))?;

    let mut rows = Vec::new();
    for (i, (kind, sim)) in kinds.iter().zip(predicted.results).enumerate() {
        eprintln!("[{}/{}] {kind}: live run, about {} s", i + 1, kinds.len(), 1 + requests / 10);
        let run_control = Control::new();
        *control.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = run_control.clone();
        let report = live(*kind, &backends, &clients, args.seed, &run_control);
        if interrupted.load(Ordering::SeqCst) {
            backends.shutdown();
            return Err(Failure::interrupted());
        }
        rows.push(Row { algorithm: *kind, live: report?, sim });
    }
    backends.shutdown();
    print!("{}", table(&rows));
    Ok(())
}

/// How the rows' percentiles were computed: one method for all, or each
/// side's if they differ (a run past the recorder's limit).
fn quantiles(rows: &[Row]) -> String {
    let method = |live: bool| {
        rows.iter()
            .map(|r| if live { r.live.latency_ms.method } else { r.sim.latency.method })
            .fold(Method::Exact, Method::combine)
    };
    let (live, sim) = (method(true), method(false));
    if live == sim {
        format!("{}, live and simulated", live.describe())
    } else {
        format!("live {}; simulated {}", live.describe(), sim.describe())
    }
}

/// The seed-000 table, a live and a simulated row per algorithm.
fn table(rows: &[Row]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "Latency (ms): live through the proxy on loopback, and the simulator's prediction");
    let _ = writeln!(
        out,
        "{:<15} {:<5} {:>8} {:>6} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7}",
        "Algorithm", "", "Requests", "Errors", "Min", "Avg", "P50", "P75", "P90", "P95", "P99", "P999", "Max", "StdDev"
    );
    for r in rows {
        let l = &r.live.latency_ms;
        let live = [l.min, l.avg, l.p50, l.p75, l.p90, l.p95, l.p99, l.p999, l.max, l.stddev];
        let s = &r.sim.latency;
        let sim = [s.min, s.avg, s.p50, s.p75, s.p90, s.p95, s.p99, s.p999, s.max, s.stddev];
        for (source, requests, errors, figures) in
            [("live", r.live.requests as f64, r.live.errors as f64, live), ("sim", r.sim.requests, r.sim.failed, sim)]
        {
            let name = if source == "live" { r.algorithm.name() } else { "" };
            let _ = write!(out, "{name:<15} {source:<5} {requests:>8.0} {errors:>6.0}");
            for v in figures {
                let _ = write!(out, " {v:>7.2}");
            }
            out.push('\n');
        }
    }
    let _ = writeln!(out, "quantiles: {}", quantiles(rows));
    let _ = writeln!(out, "\nRequests per backend (#9 is the 50 ms one)");
    let _ = write!(out, "{:<15} {:<5}", "Algorithm", "");
    for i in 0..SERVICE_MS.len() {
        let _ = write!(out, " {:>6}", format!("#{i}"));
    }
    out.push('\n');
    for r in rows {
        let live: Vec<f64> =
            (0..SERVICE_MS.len()).map(|i| r.live.by_backend.get(&i.to_string()).copied().unwrap_or(0) as f64).collect();
        for (source, counts) in [("live", &live), ("sim", &r.sim.requests_per_server)] {
            let name = if source == "live" { r.algorithm.name() } else { "" };
            let _ = write!(out, "{name:<15} {source:<5}");
            for c in counts.iter() {
                let _ = write!(out, " {c:>6.0}");
            }
            out.push('\n');
        }
    }
    out
}

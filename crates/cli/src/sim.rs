//! `fulcrum sim`: run a scenario file through the simulator and report.
//!
//! Raw arguments become a [`fulcrum_sim::Plan`] (algorithms, seeds, runs)
//! before anything runs; the report goes to stdout as a table or as JSON,
//! and optionally to CSV files and an SVG plot. A progress bar is drawn on
//! stderr (when it is a terminal) once a simulation has run for a second
//! (`fulcrum_workload::progress`).

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use clap::Args as ClapArgs;
use fulcrum_balance::AlgorithmKind;
use fulcrum_sim::{report, Plan, Scenario};
use fulcrum_workload::progress;

use crate::cli::Failure;
use crate::sim_options::{scenario_digest, SimOptions};

/// Options of `fulcrum sim`.
#[derive(Debug, ClapArgs)]
#[command(after_help = "\
Examples:
  fulcrum sim scenarios/seed-000.toml
  fulcrum sim scenarios/seed-000.toml --runs 20 --json
  fulcrum sim scenarios/seed-004-1m.toml --algorithms peak-ewma,lr --plot seed-004.svg --csv out/
  fulcrum sim scenarios/seed-000.toml --set clients.requests=1000 --set servers[1].count=4
  fulcrum sim --from http://127.0.0.1:9901 --cluster web --window 10s --write-scenario web.toml
  fulcrum sim --from http://127.0.0.1:9901 --cluster web --drain 10.0.0.3:80 --rate-scale 1.5
  fulcrum sim web.toml --slower 10.0.0.2:80=2 --headroom 50ms

--runs repeats each algorithm's simulation. --csv writes summary.csv (one row per run), \
requests_per_server.csv, cdf.csv and share.csv. --plot draws the latency CDFs (log-scale x) and \
each server's share of requests over time.

The scenario format is described in docs/reference/sim-scenario.md. Exit code 2 means the \
scenario or an option was rejected; the message names the file, line and field (or the --set \
that broke it).

--from reads the cluster's model from a running proxy's admin listener twice, --window apart, \
builds a scenario from the window (docs/tutorial/what-if.md) and prints first the current \
state's check: the measured p50/p90/p99/p999 and mean beside the prediction for the cluster's \
own algorithm, and each endpoint's concurrency fitted from its latencies by requests in flight \
(with --json: {\"current_state\": check, \"report\": report}).

--drain, --add, --slower and --rate-scale each add a case, run with the first algorithm and \
reported (table, JSON, CSV, plot) as a row named after the change; with --from, the --set \
overrides together are one more case (\"--set\") instead of changing the present. --headroom \
prints the rate factor at which the predicted p99 crosses the bound (JSON: \"headroom\"), and \
with a fitted concurrency the factors at both ends of its 95 % interval.")]
pub struct Args {
    /// The scenario file (TOML); not with --from.
    #[arg(required_unless_present = "from", conflicts_with = "from")]
    scenario: Option<PathBuf>,

    /// Build the scenario from a running proxy: its admin listener, as
    /// http://IP:PORT.
    #[arg(long, value_name = "URL", requires = "cluster")]
    from: Option<String>,

    /// With --from: the cluster to model.
    #[arg(long, value_name = "NAME", requires = "from")]
    cluster: Option<String>,

    /// With --from: how long to measure between the two snapshots.
    #[arg(long, value_name = "DURATION", requires = "from", default_value = "10s", value_parser = fulcrum_config::parse_duration)]
    window: std::time::Duration,

    /// With --from: write the scenario here (its latency files beside it),
    /// to inspect, edit and run again with `fulcrum sim FILE`. Default: a
    /// temporary directory.
    #[arg(long, value_name = "FILE", requires = "from")]
    write_scenario: Option<PathBuf>,

    /// Comma-separated algorithms to compare, instead of the scenario's list:
    /// round-robin (wrr), random, least-request (lr), peak-ewma (PeakEWMA),
    /// ring-hash (RingHash), maglev, rendezvous. Parameters come from the
    /// scenario's [[algorithm]] tables, or the defaults.
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    algorithms: Option<Vec<String>>,

    /// Turn off resilience mechanisms that the scenario turns on, to compare
    /// (comma-separated): outlier-detection, slow-start, retries, retry-budget, rate-limit.
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    without: Vec<String>,

    /// Seed of the first run (default: the scenario's `seed`).
    #[arg(long)]
    seed: Option<u64>,

    /// Override a scenario field, e.g. --set clients.requests=1000 or
    /// --set servers[0].service=8ms (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    sets: Vec<String>,

    /// Keep every latency sample for exact percentiles, however many there
    /// are (as the scenario's `[metrics] exact = true`). Without it, a run
    /// past 1,000,000 measured requests switches to an HDR histogram
    /// (3 significant digits), so memory stays bounded; the report says so.
    #[arg(long)]
    exact: bool,

    #[command(flatten)]
    questions: crate::questions::Questions,

    #[command(flatten)]
    options: SimOptions,
}

/// Load, run, report.
pub fn run(mut args: Args) -> Result<(), Failure> {
    let measured = match (&args.from, &args.cluster) {
        (Some(from), Some(cluster)) => {
            let file = match &args.write_scenario {
                Some(f) => f.clone(),
                None => {
                    let dir = std::env::temp_dir().join(format!("fulcrum-what-if-{}", std::process::id()));
                    std::fs::create_dir_all(&dir)
                        .map_err(|e| Failure::runtime(format!("creating {}: {e}", dir.display())))?;
                    dir.join(format!("{cluster}.toml"))
                }
            };
            let m = crate::whatif::build(from, cluster, args.window, &file)?;
            args.scenario = Some(m.scenario.clone());
            Some(m)
        }
        _ => None,
    };
    let Some(path) = args.scenario.clone() else { return Err(Failure::input("a scenario file or --from is needed")) };
    // With --from, the --set overrides are a case of their own: the present
    // is what was measured.
    let base_sets: &[String] = if measured.is_some() { &[] } else { &args.sets };
    let mut scenario = Scenario::load_with(&path, base_sets).map_err(|e| Failure::input(e.to_string()))?;
    let q = &args.questions;
    let added = q.append_added(&mut scenario)?;
    let mut cases = q.cases(&scenario, &added)?;
    if measured.is_some() && !args.sets.is_empty() {
        let mut changed = Scenario::load_with(&path, &args.sets).map_err(|e| Failure::input(e.to_string()))?;
        q.append_added(&mut changed)?;
        cases.insert(0, crate::questions::Case { label: "--set".into(), scenario: changed });
    }
    for name in &args.without {
        let mechanism = name.parse().map_err(|e| Failure::input(format!("--without: {e}")))?;
        scenario.resilience.disable(mechanism);
    }
    if args.exact {
        scenario.metrics.exact = true;
    }
    let mut plan = Plan::for_scenario(&scenario);
    if let Some(names) = &args.algorithms {
        plan.algorithms = names
            .iter()
            .map(|n| n.parse::<AlgorithmKind>().map(|k| scenario.config_for(k)))
            .collect::<Result<_, _>>()
            .map_err(|e| Failure::input(format!("--algorithms: {e}")))?;
        if plan.algorithms.is_empty() {
            return Err(Failure::input("--algorithms: the list is empty"));
        }
    }
    if let Some(seed) = args.seed {
        plan.seed = seed;
    }
    plan.runs = args.options.runs;
    if let Some(t) = args.options.threads {
        plan.threads = t as usize;
    }

    let mut overrides = args.sets.clone();
    if let Some(names) = &args.algorithms {
        overrides.push(format!("--algorithms={}", names.join(",")));
    }
    if !args.without.is_empty() {
        overrides.push(format!("--without={}", args.without.join(",")));
    }
    if args.exact {
        overrides.push("--exact".to_string());
    }
    let digest = scenario_digest(&path, &args.sets, &scenario.inputs)?;
    let provenance = fulcrum_version::provenance(digest, plan.seed, u64::from(plan.runs), overrides);

    let expected = scenario.total_requests().map(|n| n * plan.jobs() as u64);
    let done = AtomicU64::new(0);
    let mut report = progress::while_running(
        progress::wanted(args.options.progress),
        |elapsed| progress::bar(done.load(Ordering::Relaxed), expected, "requests", elapsed),
        || fulcrum_sim::simulate(&scenario, &plan, Some(&done)),
    )
    .map_err(|e| Failure::input(format!("{}: {e}", path.display())))?;
    report.provenance = Some(provenance);
    let first = &plan.algorithms[0];
    report.results.extend(crate::questions::run(&cases, first, &plan)?);
    let headroom = q
        .headroom
        .map(|bound| {
            let mut h = crate::questions::headroom(&scenario, first, &plan, bound)?;
            if let Some(m) = &measured {
                crate::whatif::headroom_range(&mut h, &scenario, m, first, &plan, bound)?;
            }
            Ok::<_, Failure>(h)
        })
        .transpose()?;

    let mut stdout = std::io::stdout().lock();
    let check = match (&measured, report.results.first()) {
        (Some(m), Some(first)) => Some(crate::whatif::check(m, &first.latency)),
        _ => None,
    };
    let text = match (check.is_some() || headroom.is_some(), args.options.json) {
        (false, false) => report::table(&report),
        (false, true) => report::json(&report),
        (true, false) => {
            check.as_ref().map_or(String::new(), crate::whatif::check_text)
                + &report::table(&report)
                + &headroom.as_ref().map_or(String::new(), crate::questions::headroom_text)
        }
        (true, true) => {
            let report: serde_json::Value = serde_json::from_str(&report::json(&report))
                .map_err(|e| Failure::runtime(format!("the report's JSON: {e}")))?;
            let mut doc = serde_json::json!({ "report": report });
            if let Some(c) = check {
                doc["current_state"] = c;
            }
            if let Some(h) = headroom {
                doc["headroom"] = h;
            }
            let mut s =
                serde_json::to_string_pretty(&doc).map_err(|e| Failure::runtime(format!("the report's JSON: {e}")))?;
            s.push('\n');
            s
        }
    };
    stdout.write_all(text.as_bytes()).map_err(|e| Failure::runtime(format!("writing the report: {e}")))?;
    stdout.flush().map_err(|e| Failure::runtime(format!("writing the report: {e}")))?;
    if let Some(dir) = &args.options.csv {
        report::write_csv(&report, dir).map_err(|e| Failure::runtime(format!("--csv {}: {e}", dir.display())))?;
    }
    if let Some(file) = &args.options.plot {
        std::fs::write(file, fulcrum_sim::plot::svg(&report))
            .map_err(|e| Failure::runtime(format!("--plot {}: {e}", file.display())))?;
    }
    if !args.options.json {
        eprintln!(
            "simulated {} requests ({} events) in {:.3} s wall ({:.3} µs per request, {:.2} M events/s)",
            report.simulated_requests,
            report.events,
            report.wall_seconds,
            report.wall_seconds * 1e6 / report.simulated_requests.max(1) as f64,
            report.events as f64 / report.wall_seconds.max(1e-9) / 1e6
        );
    }
    Ok(())
}

//! `fulcrum fabric`: run a datacenter-fabric scenario and report flow
//! completion times and queues.
//!
//! Raw arguments become a scenario (with `--set` overrides applied and
//! checked) and a list of seeds; the report goes to stdout as a table or as
//! one JSON line. The shared progress line (`fulcrum_workload::progress`)
//! shows the share of simulated time done once a run has taken a second.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use clap::Args as ClapArgs;
use fulcrum_fabric::report::Report;
use fulcrum_fabric::Scenario;
use fulcrum_workload::progress;

use crate::cli::Failure;
use crate::sim_options::{scenario_digest, SimOptions};

/// Options of `fulcrum fabric`.
#[derive(Debug, ClapArgs)]
#[command(after_help = "\
Examples:
  fulcrum fabric scenarios/fabric/large-scale-ecnsharp.toml
  fulcrum fabric scenarios/fabric/large-scale-tcn-high.toml --runs 5 --json
  fulcrum fabric scenarios/fabric/large-scale-ecnsharp.toml --set workload.load=0.4
  fulcrum fabric scenarios/fabric/lb-4x4x8-asymmetric.toml --set routing.scheme=letflow
  fulcrum fabric scenarios/fabric/large-scale-ecnsharp.toml --plot fct.svg --csv out/
  fulcrum fabric --plot-sweep sweep.jsonl --plot sweep.svg

--json prints the report on one line, so that reports append to a .jsonl file; --plot-sweep reads \
such a file, draws it into the --plot file and prints the same figures as Markdown tables on \
stdout. --csv writes flows.csv (one row per flow) and queues.csv, and queue_series.csv when the \
scenario names monitor.queue_ports. --plot draws the FCT distribution of each flow-size bucket, \
with panels of queue length (monitor.queue_ports) and of long flows' throughput over time when \
the run has them.

Exit code 2 means the scenario or an option was rejected; the message names the file, line and \
field (or the --set that broke it).")]
pub struct Args {
    /// The scenario file (TOML).
    #[arg(required_unless_present = "plot_sweep")]
    scenario: Option<PathBuf>,

    /// Instead of running: draw the FCT of a load-balancing sweep
    /// (`--json` lines of runs with `--set routing.scheme=…` and
    /// `--set workload.load=…`, e.g. from bench/fabric-sweep) against load,
    /// normalised to ECMP's, into the --plot file, and print the figures as
    /// Markdown tables.
    #[arg(long, value_name = "RESULTS.jsonl", conflicts_with = "scenario")]
    plot_sweep: Option<PathBuf>,

    /// Older spelling of --plot for --plot-sweep.
    #[arg(long, value_name = "FILE.svg", hide = true, requires = "plot_sweep", conflicts_with = "plot")]
    out: Option<PathBuf>,

    /// Seed of the first run (default: the scenario's `seed`).
    #[arg(long)]
    seed: Option<u64>,

    /// Override a scenario field, e.g. --set workload.load=0.4 (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    sets: Vec<String>,

    #[command(flatten)]
    options: SimOptions,
}

/// Load, run, report (or draw a sweep's figure).
pub fn run(args: Args) -> Result<(), Failure> {
    if let Some(results) = &args.plot_sweep {
        let out = args.options.plot.as_ref().or(args.out.as_ref());
        let out = out.ok_or_else(|| Failure::input("--plot-sweep needs --plot FILE.svg"))?;
        return plot_sweep(results, out);
    }
    let options = &args.options;
    let path = args.scenario.as_ref().ok_or_else(|| Failure::input("a scenario file is needed".to_string()))?;
    let scenario = Scenario::load(path, &args.sets).map_err(|e| Failure::input(e.to_string()))?;
    let seed = args.seed.unwrap_or(scenario.seed);
    let threads = options
        .threads
        .map(|t| t as usize)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    // Progress counts simulated microseconds over all runs.
    let done = AtomicU64::new(0);
    let expected = Some(scenario.end.0 / 1000 * options.runs as u64);
    let started = Instant::now();
    let outcomes = progress::while_running(
        progress::wanted(options.progress),
        |elapsed| progress::bar(done.load(Ordering::Relaxed), expected, "simulated µs", elapsed),
        || fulcrum_fabric::run_many(&scenario, seed, options.runs as usize, threads, Some(&done)),
    )
    .map_err(|e| Failure::input(format!("--seed {seed} --runs {}: {e}", options.runs)))?;
    let wall = started.elapsed().as_secs_f64();
    let digest = scenario_digest(path, &args.sets, &scenario.inputs)?;
    let provenance = fulcrum_version::provenance(digest, seed, u64::from(options.runs), args.sets.clone());
    let report = Report {
        provenance: Some(&provenance),
        scenario: &scenario.name,
        sets: &args.sets,
        outcomes: &outcomes,
        wall_seconds: wall,
    };
    let text = if options.json { report.json() } else { report.table() };
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(text.as_bytes()).map_err(|e| Failure::runtime(format!("writing the report: {e}")))?;
    stdout.flush().map_err(|e| Failure::runtime(format!("writing the report: {e}")))?;
    if let Some(dir) = &options.csv {
        report.write_csv(dir).map_err(|e| Failure::runtime(format!("--csv {}: {e}", dir.display())))?;
    }
    if let Some(file) = &options.plot {
        std::fs::write(file, report.plot_svg())
            .map_err(|e| Failure::runtime(format!("--plot {}: {e}", file.display())))?;
    }
    if !options.json {
        let events: u64 = outcomes.iter().map(|o| o.events).sum();
        let packets: u64 = outcomes.iter().map(|o| o.data_packets).sum();
        eprintln!(
            "simulated {} run(s): {packets} data packets, {events} events in {wall:.3} s wall ({:.1} M events/s)",
            outcomes.len(),
            events as f64 / wall / 1e6
        );
    }
    Ok(())
}

/// `--plot-sweep RESULTS --plot FILE`: the sweep's figure, and its tables
/// on stdout.
fn plot_sweep(results: &Path, out: &Path) -> Result<(), Failure> {
    let text = std::fs::read_to_string(results).map_err(|e| Failure::input(format!("{}: {e}", results.display())))?;
    let bad = |e: fulcrum_fabric::sweep::SweepError| Failure::input(format!("{}: {e}", results.display()));
    let points = fulcrum_fabric::sweep::parse(&text).map_err(bad)?;
    let svg = fulcrum_fabric::sweep::plot(&points).map_err(bad)?;
    let tables = fulcrum_fabric::sweep::table(&points).map_err(bad)?;
    std::fs::write(out, svg).map_err(|e| Failure::runtime(format!("--plot {}: {e}", out.display())))?;
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(tables.as_bytes()).map_err(|e| Failure::runtime(format!("writing the tables: {e}")))
}

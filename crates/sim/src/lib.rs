//! Fulcrum's discrete-event simulator: clients → balancers → servers, driving
//! the algorithms of `fulcrum_balance` directly.
//!
//! A [`Scenario`] (read from TOML, see [`scenario`]) describes the workload,
//! the servers, the network and the balancer instances. [`simulate`] runs it
//! for each algorithm of a [`Plan`] and each of its seeds, spread over
//! threads, and returns a [`Report`]: per algorithm the latency [`Summary`]
//! (the seed-000 table's figures), failures, requests per server, CDF points
//! and the per-server share over time; with several runs, the mean and the
//! 95 % interval of every figure. [`report`] renders it as a table, JSON or
//! CSV, and [`plot`] as SVG.
//!
//! Scenarios may turn on outlier ejection, slow start, the panic threshold
//! and retries with budgets ([`resilience`]); they run on the state machines
//! of `fulcrum_resilience`, the same code as the proxy's.
//!
//! Each run is an [`engine::Engine`]: a plain event loop on the shared
//! event core `fulcrum_des` (events in integer nanoseconds, those at the
//! same instant in scheduling order), with every random draw taken from
//! RNGs seeded by the run's seed. The same
//! scenario and seed therefore give the same report, byte for byte, however
//! many threads run it.

#![forbid(unsafe_code)]

pub mod engine;
pub mod plot;
pub mod report;
pub mod resilience;
pub mod scenario;
pub mod stats;
pub mod trace;

use std::sync::atomic::AtomicU64;
use std::time::Instant;

use fulcrum_balance::{AlgorithmConfig, BuildError, Nanos};

/// The distributions of durations, shared with the load tool.
pub use fulcrum_workload::dist;
pub use fulcrum_workload::{Dist, Method, Recorder};
pub use resilience::{Mechanism, ResilienceStats};
pub use scenario::{Scenario, ScenarioError};
pub use stats::{ShareSeries, Summary};
pub use trace::Trace;

/// CDF points kept per run for plots and CSV.
const CDF_POINTS: usize = 1000;

/// One run of one algorithm with one seed, summarised.
#[derive(Debug, Clone)]
pub struct RunResult {
    /// The seed of this run.
    pub seed: u64,
    /// Measured requests that completed (successes and failures).
    pub requests: u64,
    /// Measured requests that failed.
    pub failed: u64,
    /// Latency figures of the successful ones (exact, or from a histogram
    /// past [`fulcrum_workload::EXACT_LIMIT`] samples unless the scenario's
    /// `metrics.exact` is set).
    pub latency: Summary,
    /// Measured requests sent to each server, in scenario order.
    pub requests_per_server: Vec<u64>,
    /// `(fraction, latency ms)` points of the latency CDF.
    pub cdf: Vec<(f64, f64)>,
    /// Requests per server over time.
    pub share: ShareSeries,
    /// Events handled.
    pub events: u64,
    /// Requests completed, warm-up included.
    pub completed: u64,
    /// Simulated time at the end of the run.
    pub simulated: Nanos,
    /// What the resilience mechanisms did (`None` when the scenario has none).
    pub resilience: Option<ResilienceStats>,
    /// Per server, the tries in flight to it when each measured try was
    /// picked: count, sum and sum of squares.
    pub in_flight_at_pick: Vec<[u64; 3]>,
}

impl RunResult {
    /// Variance over mean of the tries in flight to server `s` when each
    /// was picked (`None` if none was): 1 for Poisson arrivals to a pure
    /// delay, less for more regular ones (round robin's turns, for one).
    pub fn in_flight_dispersion(&self, s: usize) -> Option<f64> {
        let [n, sum, sq] = self.in_flight_at_pick.get(s).copied()?;
        let (n, sum, sq) = (n as f64, sum as f64, sq as f64);
        (n > 0.0 && sum > 0.0).then(|| (sq / n - (sum / n).powi(2)) / (sum / n))
    }
}

/// Run `algorithm` over `scenario` once with `seed`.
pub fn run_once(
    scenario: &Scenario,
    algorithm: &AlgorithmConfig,
    seed: u64,
    progress: Option<&AtomicU64>,
) -> Result<RunResult, BuildError> {
    let mut raw = engine::Engine::new(scenario, algorithm, seed, progress)?.run();
    let latency = raw.latency.summary();
    Ok(RunResult {
        seed,
        requests: raw.latency.len() + raw.failed,
        failed: raw.failed,
        latency,
        requests_per_server: raw.per_server,
        cdf: raw.latency.cdf_points(CDF_POINTS),
        share: raw.share,
        events: raw.events,
        completed: raw.completed,
        simulated: raw.end,
        resilience: raw.resilience,
        in_flight_at_pick: raw.in_flight_at_pick,
    })
}

/// What to run: algorithms × seeds `seed, seed+1, …, seed+runs−1`.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The algorithms, in report order.
    pub algorithms: Vec<AlgorithmConfig>,
    /// The first seed.
    pub seed: u64,
    /// Runs per algorithm (≥ 1).
    pub runs: u32,
    /// Worker threads (≥ 1); results do not depend on it.
    pub threads: usize,
}

impl Plan {
    /// The scenario's own algorithms and seed, one run, one thread per core.
    pub fn for_scenario(scenario: &Scenario) -> Plan {
        Plan {
            algorithms: scenario.algorithms.clone(),
            seed: scenario.seed,
            runs: 1,
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
        }
    }

    /// Number of runs in all.
    pub fn jobs(&self) -> usize {
        self.algorithms.len() * self.runs as usize
    }
}

/// The results of one algorithm over all runs.
#[derive(Debug, Clone)]
pub struct AlgorithmReport {
    /// Configuration name (`peak-ewma`, …).
    pub algorithm: String,
    /// Each run, in seed order.
    pub runs: Vec<RunResult>,
    /// Mean of each latency figure over the runs.
    pub latency: Summary,
    /// 95 % confidence half-width of each figure (0 with one run).
    pub ci95: Summary,
    /// Mean measured requests per run.
    pub requests: f64,
    /// Mean failed requests per run.
    pub failed: f64,
    /// Mean requests per server per run.
    pub requests_per_server: Vec<f64>,
    /// Resilience figures, means over the runs (`None` when the scenario has none).
    pub resilience: Option<ResilienceSummary>,
}

/// Resilience figures of one algorithm, means over its runs.
#[derive(Debug, Clone, PartialEq)]
pub struct ResilienceSummary {
    /// Retries made per run.
    pub retries: f64,
    /// Retries refused by the budget per run.
    pub retries_denied: f64,
    /// Ejections per run (all balancers).
    pub ejections: f64,
    /// Seconds in panic per run (mean over balancers).
    pub panic_seconds: f64,
    /// Per server: simulated time of its first ejection in seconds, mean over
    /// the runs that ejected it.
    pub first_ejection_s: Vec<Option<f64>>,
    /// Per server: milliseconds from its failure (or slow-down) to its first
    /// ejection, mean over the runs that ejected it while failing.
    pub time_to_ejection_ms: Vec<Option<f64>>,
    /// Requests the rate limit refused per run (`None` without a limit).
    pub rate_limited: Option<f64>,
    /// Requests refused by `balancers.max_requests` per run (`None` without it).
    pub overflows: Option<f64>,
}

impl ResilienceSummary {
    fn of(runs: &[&ResilienceStats]) -> ResilienceSummary {
        let n = runs.len() as f64;
        let mean = |f: &dyn Fn(&ResilienceStats) -> f64| runs.iter().map(|r| f(r)).sum::<f64>() / n;
        let servers = runs.first().map_or(0, |r| r.first_ejection.len());
        let per_server = |get: &dyn Fn(&ResilienceStats, usize) -> Option<Nanos>, unit: f64| -> Vec<Option<f64>> {
            (0..servers)
                .map(|s| {
                    let seen: Vec<f64> = runs.iter().filter_map(|r| get(r, s)).map(|t| t as f64 / unit).collect();
                    (!seen.is_empty()).then(|| seen.iter().sum::<f64>() / seen.len() as f64)
                })
                .collect()
        };
        ResilienceSummary {
            retries: mean(&|r| r.retries as f64),
            retries_denied: mean(&|r| r.retries_denied as f64),
            ejections: mean(&|r| r.ejections as f64),
            panic_seconds: mean(&|r| r.panic as f64 / 1e9),
            first_ejection_s: per_server(&|r, s| r.first_ejection[s], 1e9),
            time_to_ejection_ms: per_server(&|r, s| r.time_to_ejection[s], 1e6),
            rate_limited: runs
                .iter()
                .all(|r| r.rate_limited.is_some())
                .then(|| mean(&|r| r.rate_limited.unwrap_or(0) as f64)),
            overflows: runs.iter().all(|r| r.overflows.is_some()).then(|| mean(&|r| r.overflows.unwrap_or(0) as f64)),
        }
    }
}

impl AlgorithmReport {
    fn of(algorithm: String, runs: Vec<RunResult>) -> Self {
        let n = runs.len() as f64;
        let mean = |f: &dyn Fn(&RunResult) -> f64| runs.iter().map(f).sum::<f64>() / n;
        let mut means = [0.0; 10];
        let mut halves = [0.0; 10];
        for (k, (_, get)) in stats::FIGURES.iter().enumerate() {
            let values: Vec<f64> = runs.iter().map(|r| get(&r.latency)).collect();
            (means[k], halves[k]) = fulcrum_workload::interval::mean_ci95(&values);
        }
        let method = runs.iter().fold(Method::Exact, |m, r| m.combine(r.latency.method));
        let latency = Summary::from_array(means, method);
        let ci95 = Summary::from_array(halves, method);
        let servers = runs.first().map_or(0, |r| r.requests_per_server.len());
        let requests_per_server = (0..servers).map(|s| mean(&|r| r.requests_per_server[s] as f64)).collect();
        let stats: Option<Vec<&ResilienceStats>> = runs.iter().map(|r| r.resilience.as_ref()).collect();
        let resilience = stats.filter(|s| !s.is_empty()).map(|s| ResilienceSummary::of(&s));
        AlgorithmReport {
            algorithm,
            requests: mean(&|r| r.requests as f64),
            failed: mean(&|r| r.failed as f64),
            requests_per_server,
            latency,
            ci95,
            resilience,
            runs,
        }
    }

    /// Share of requests sent to server `s`, over all runs (0..=1).
    pub fn share_of(&self, s: usize) -> f64 {
        let total: f64 = self.requests_per_server.iter().sum();
        if total == 0.0 {
            0.0
        } else {
            self.requests_per_server[s] / total
        }
    }
}

/// Everything a simulation produced.
#[derive(Debug, Clone)]
pub struct Report {
    /// The scenario's name.
    pub scenario: String,
    /// Server names, in scenario order.
    pub servers: Vec<String>,
    /// The first seed.
    pub seed: u64,
    /// Runs per algorithm.
    pub runs: u32,
    /// Per algorithm, in plan order.
    pub results: Vec<AlgorithmReport>,
    /// Requests simulated in all runs.
    pub simulated_requests: u64,
    /// Events handled in all runs.
    pub events: u64,
    /// Wall-clock time of the simulation.
    pub wall_seconds: f64,
    /// What produced the report, when the caller says
    /// (`fulcrum sim` and the Python package do; none leaves it out).
    pub provenance: Option<fulcrum_workload::report::Provenance>,
}

/// A plan that cannot run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SimError {
    /// An algorithm's balancer could not be built over the scenario's servers.
    #[error("{algorithm}: {source}")]
    Build {
        /// The algorithm.
        algorithm: String,
        /// Why.
        source: BuildError,
    },
    /// Zero runs or no algorithm.
    #[error("nothing to run: {0}")]
    Empty(&'static str),
    /// The seeds would pass the largest one.
    #[error(transparent)]
    Seeds(#[from] fulcrum_workload::runs::SeedOverflow),
}

/// Run every algorithm of `plan` over `scenario` for each seed, on
/// `plan.threads` threads. `progress`, if given, counts completed requests
/// (in steps: see [`fulcrum_des::run`]).
pub fn simulate(scenario: &Scenario, plan: &Plan, progress: Option<&AtomicU64>) -> Result<Report, SimError> {
    if plan.runs == 0 {
        return Err(SimError::Empty("runs must be at least 1"));
    }
    if plan.algorithms.is_empty() {
        return Err(SimError::Empty("no algorithm given"));
    }
    let started = Instant::now();
    let seeds = fulcrum_workload::runs::seeds(plan.seed, u64::from(plan.runs))?;
    // Every algorithm with every seed, algorithm by algorithm.
    let jobs: Vec<(&AlgorithmConfig, u64)> =
        plan.algorithms.iter().flat_map(|a| seeds.iter().map(move |&seed| (a, seed))).collect();
    let done = fulcrum_workload::runs::on_threads(&jobs, plan.threads, |&(algorithm, seed)| {
        run_once(scenario, algorithm, seed, progress)
    });
    let mut done = done.into_iter();
    let mut results = Vec::with_capacity(plan.algorithms.len());
    for config in &plan.algorithms {
        let name = config.kind().name().to_string();
        let runs = done
            .by_ref()
            .take(seeds.len())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|source| SimError::Build { algorithm: name.clone(), source })?;
        results.push(AlgorithmReport::of(name, runs));
    }
    let simulated_requests = results.iter().flat_map(|a| &a.runs).map(|r| r.completed).sum();
    let events = results.iter().flat_map(|a| &a.runs).map(|r| r.events).sum();
    Ok(Report {
        scenario: scenario.name.clone(),
        servers: scenario.servers.iter().map(|s| s.name.clone()).collect(),
        seed: plan.seed,
        runs: plan.runs,
        results,
        simulated_requests,
        events,
        wall_seconds: started.elapsed().as_secs_f64(),
        provenance: None,
    })
}

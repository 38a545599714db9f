//! `fulcrum._fulcrum`: the native part of the Python package (the `fulcrum`
//! module, `crates/python/python/fulcrum`). Each function runs a scenario
//! given as TOML text through the same entry points as `fulcrum sim` and
//! `fulcrum fabric` (`Scenario` loading with `--set`s, `fulcrum_sim::simulate`,
//! `fulcrum_fabric::run_many`, the reports' JSON) with the interpreter
//! released, and returns the CLI's JSON and the tables as columns
//! ([`columns`]). Errors are Python exceptions: a bad scenario raises
//! `ScenarioError` with the `file:line:column: field: message` text.

#![forbid(unsafe_code)]

mod columns;

use std::path::Path;
use std::time::Instant;

use fulcrum_fabric::report::Report as FabricReport;
use pyo3::create_exception;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

create_exception!(_fulcrum, ScenarioError, PyValueError, "A scenario or an override was rejected.");

/// Where a scenario came from: its text, the name errors give it, the
/// directory its relative files are read from.
struct Origin<'a> {
    text: &'a str,
    name: &'a str,
    base_dir: &'a Path,
}

fn scenario_error(e: impl std::fmt::Display) -> PyErr {
    ScenarioError::new_err(e.to_string())
}

/// Run a scenario of `kind` (`"sim"`: each algorithm of a request-simulator
/// scenario; `"fabric"`: a fabric scenario) over seeds `seed`… (`runs` of
/// them; the scenario's seed when `None`) on `threads` threads. Returns
/// `{"json": …, "tables": {name: columns}}`.
// The arguments are the Python keyword arguments, one by one.
#[allow(clippy::too_many_arguments)]
#[pyfunction]
#[pyo3(signature = (kind, text, origin, base_dir, sets, seed, runs, threads))]
fn run<'py>(
    py: Python<'py>,
    kind: &str,
    text: &str,
    origin: &str,
    base_dir: &str,
    sets: Vec<String>,
    seed: Option<u64>,
    runs: u32,
    threads: Option<usize>,
) -> PyResult<Bound<'py, PyDict>> {
    let engine = match kind {
        "sim" => sim,
        "fabric" => fabric,
        other => return Err(PyValueError::new_err(format!("kind {other:?}: expected 'sim' or 'fabric'"))),
    };
    if runs == 0 {
        return Err(PyValueError::new_err("runs must be at least 1"));
    }
    let from = Origin { text, name: origin, base_dir: Path::new(base_dir) };
    let (json, tables) = py.detach(|| engine(&from, &sets, seed, runs, threads))?;
    let out = PyDict::new(py);
    out.set_item("json", json)?;
    out.set_item("tables", columns::to_python(py, tables)?)?;
    Ok(out)
}

fn sim(
    from: &Origin,
    sets: &[String],
    seed: Option<u64>,
    runs: u32,
    threads: Option<usize>,
) -> PyResult<(String, Vec<columns::Table>)> {
    let file = Path::new(from.name);
    let stem = file.file_stem().map_or_else(|| "scenario".into(), |s| s.to_string_lossy().into_owned());
    let scenario =
        fulcrum_sim::Scenario::parse_with(from.text, file, sets, &stem, from.base_dir).map_err(scenario_error)?;
    let digest = scenario.inputs.digest(fulcrum_config::digest(file, from.text, sets).map_err(scenario_error)?);
    let mut plan = fulcrum_sim::Plan::for_scenario(&scenario);
    plan.seed = seed.unwrap_or(plan.seed);
    plan.runs = runs;
    if let Some(t) = threads {
        plan.threads = t.max(1);
    }
    let mut report = fulcrum_sim::simulate(&scenario, &plan, None)
        .map_err(|e| PyRuntimeError::new_err(format!("{}: {e}", from.name)))?;
    report.provenance = Some(fulcrum_version::provenance(digest, plan.seed, u64::from(runs), sets.to_vec()));
    Ok((fulcrum_sim::report::json(&report), columns::sim(&report)))
}

fn fabric(
    from: &Origin,
    sets: &[String],
    seed: Option<u64>,
    runs: u32,
    threads: Option<usize>,
) -> PyResult<(String, Vec<columns::Table>)> {
    // The scenario's relative files are read from `base_dir` (absolute, so
    // that a worker in another directory finds them too).
    let file = Path::new(from.name);
    let path = from.base_dir.join(file.file_name().unwrap_or(file.as_os_str()));
    let scenario = fulcrum_fabric::Scenario::parse(from.text, &path, sets).map_err(scenario_error)?;
    let digest = scenario.inputs.digest(fulcrum_config::digest(&path, from.text, sets).map_err(scenario_error)?);
    let seed = seed.unwrap_or(scenario.seed);
    let threads = threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())).max(1);
    let started = Instant::now();
    let outcomes = fulcrum_fabric::run_many(&scenario, seed, runs as usize, threads, None)
        .map_err(|e| PyValueError::new_err(format!("seed {seed}, runs {runs}: {e}")))?;
    let provenance = fulcrum_version::provenance(digest, seed, u64::from(runs), sets.to_vec());
    let report = FabricReport {
        provenance: Some(&provenance),
        scenario: &scenario.name,
        sets,
        outcomes: &outcomes,
        wall_seconds: started.elapsed().as_secs_f64(),
    };
    Ok((report.json(), columns::fabric(&outcomes)))
}

/// A scenario given as a dictionary (its JSON text) as TOML text.
#[pyfunction]
fn json_to_toml(json: &str) -> PyResult<String> {
    let value: toml::Value =
        serde_json::from_str(json).map_err(|e| ScenarioError::new_err(format!("the scenario dictionary: {e}")))?;
    toml::to_string(&value).map_err(|e| ScenarioError::new_err(format!("the scenario dictionary: {e}")))
}

#[pymodule]
fn _fulcrum(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", fulcrum_version::VERSION)?;
    m.add("COMMIT", fulcrum_version::COMMIT)?;
    m.add("ScenarioError", m.py().get_type::<ScenarioError>())?;
    m.add_function(wrap_pyfunction!(run, m)?)?;
    m.add_function(wrap_pyfunction!(json_to_toml, m)?)?;
    Ok(())
}

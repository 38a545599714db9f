//! Rendering a [`Report`]: the human table, the JSON document and CSV files.
//!
//! The table follows the seed-000 layout (Min, Avg, P50, P75, P90, P95, P99,
//! P999, Max, StdDev in ms) with the requests per server below it: one
//! column per server up to [`TABLE_SERVERS`] servers, else a summary (each
//! algorithm's min / median / max share and the five most and least loaded
//! servers; the CSV files keep every server). The JSON
//! shape is fixed so that other tools can read it:
//! `{["provenance"], "scenario", "seed", ["runs"], "results": [{"algorithm", "requests",
//! "failed", "latency_ms": {…}, ["ci95_ms": {…}], "requests_per_server"}],
//! "simulated_requests", "wall_seconds"}`.
//!
//! When the scenario turns on resilience mechanisms, the table gains a
//! resilience part and each JSON result the keys `retries`,
//! `retries_denied`, `ejections`, `panic_seconds`, `first_ejection_s` and
//! `time_to_ejection_ms` (per server, `null` when never ejected); nothing
//! else changes.
//!
//! A run past `fulcrum_workload::EXACT_LIMIT` samples (without `exact`) has
//! HDR-histogram percentiles: its `latency_ms` and `ci95_ms` then carry
//! `"method": "hdr"` and the table ends with a line saying so.

use std::fmt::{Display, Write as _};
use std::io;
use std::path::Path;

use fulcrum_workload::report::{write_csv_files, Csv, Provenance};
use serde::Serialize;

use crate::stats::{Summary, FIGURES};
use crate::{AlgorithmReport, Report, ResilienceSummary};

/// The human-readable report (what `fulcrum sim` prints).
pub fn table(report: &Report) -> String {
    let mut out = String::new();
    let runs = if report.runs == 1 {
        format!("seed {}", report.seed)
    } else {
        format!("mean of {} runs, seeds {}..={}", report.runs, report.seed, report.seed + report.runs as u64 - 1)
    };
    let _ = writeln!(out, "Scenario {} ({runs})\n", report.scenario);
    let _ = writeln!(out, "Latency (ms)");
    header(&mut out);
    for a in &report.results {
        row(&mut out, a, &a.latency, true);
    }
    if report.runs > 1 {
        let _ = writeln!(out, "\n95 % interval (± ms) over {} runs", report.runs);
        header(&mut out);
        for a in &report.results {
            row(&mut out, a, &a.ci95, false);
        }
    }
    if report.servers.len() > TABLE_SERVERS {
        per_server_summary(&mut out, report);
    } else {
        per_server_table(&mut out, report);
    }
    resilience_table(&mut out, report);
    quantiles_note(&mut out, report);
    out
}

/// Up to this many servers, the report lists requests per server in full;
/// beyond, it summarises them (the CSV files always have every server).
pub const TABLE_SERVERS: usize = 20;

/// Servers named at each end of the summary.
const EXTREMES: usize = 5;

/// Requests per server, one column per server.
fn per_server_table(out: &mut String, report: &Report) {
    let _ = writeln!(out, "\nRequests per server{}", if report.runs > 1 { " (mean per run)" } else { "" });
    let _ = write!(out, "{:<15}", "Algorithm");
    for i in 0..report.servers.len() {
        let _ = write!(out, " {:>8}", format!("#{i}"));
    }
    out.push('\n');
    for a in &report.results {
        let _ = write!(out, "{:<15}", a.algorithm);
        for &n in &a.requests_per_server {
            if report.runs > 1 {
                let _ = write!(out, " {n:>8.1}");
            } else {
                let _ = write!(out, " {n:>8.0}");
            }
        }
        out.push('\n');
    }
    let legend: Vec<String> = report.servers.iter().enumerate().map(|(i, n)| format!("#{i} {n}")).collect();
    let _ = writeln!(out, "Servers: {}", legend.join(", "));
}

/// Requests per server for a large fleet: each algorithm's smallest,
/// median and largest share of its requests, and the most and least loaded
/// servers.
fn per_server_summary(out: &mut String, report: &Report) {
    let mean = if report.runs > 1 { ", mean per run" } else { "" };
    let _ =
        writeln!(out, "\nRequests per server ({} servers{mean}; --csv DIR writes every server)", report.servers.len());
    let _ = writeln!(out, "{:<15} {:>9} {:>9} {:>9}", "Algorithm", "Min %", "P50 %", "Max %");
    for a in &report.results {
        let mut counts = a.requests_per_server.clone();
        counts.sort_by(f64::total_cmp);
        let total: f64 = counts.iter().sum();
        let share = |n: f64| if total > 0.0 { 100.0 * n / total } else { 0.0 };
        let median = (counts[(counts.len() - 1) / 2] + counts[counts.len() / 2]) / 2.0;
        let (min, max) = (counts[0], counts[counts.len() - 1]);
        let _ = writeln!(out, "{:<15} {:>9.4} {:>9.4} {:>9.4}", a.algorithm, share(min), share(median), share(max));
    }
    for a in &report.results {
        // Most loaded first; ties in server order.
        let mut order: Vec<usize> = (0..a.requests_per_server.len()).collect();
        order.sort_by(|&x, &y| a.requests_per_server[y].total_cmp(&a.requests_per_server[x]).then(x.cmp(&y)));
        let name = |&i: &usize| {
            let n = a.requests_per_server[i];
            let n = if report.runs > 1 { format!("{n:.1}") } else { format!("{n:.0}") };
            format!("#{i} {} {n}", report.servers[i])
        };
        let most: Vec<String> = order.iter().take(EXTREMES).map(name).collect();
        let least: Vec<String> = order.iter().rev().take(EXTREMES).map(name).collect();
        let _ = writeln!(out, "Most loaded, {}: {}", a.algorithm, most.join(", "));
        let _ = writeln!(out, "Least loaded, {}: {}", a.algorithm, least.join(", "));
    }
}

/// Says so when some run's percentiles come from a histogram (exact
/// figures, the usual case, need no note, so their table is unchanged).
fn quantiles_note(out: &mut String, report: &Report) {
    if report.results.iter().any(|a| !a.latency.method.is_exact()) {
        let _ = writeln!(
            out,
            "\nQuantiles: {} in runs past {} samples (--exact keeps every sample)",
            fulcrum_workload::Method::Hdr.describe(),
            fulcrum_workload::EXACT_LIMIT
        );
    }
}

/// Retries, ejections and panic time, when the scenario has them.
fn resilience_table(out: &mut String, report: &Report) {
    let rows: Vec<(&str, &ResilienceSummary)> =
        report.results.iter().filter_map(|a| a.resilience.as_ref().map(|r| (a.algorithm.as_str(), r))).collect();
    if rows.is_empty() {
        return;
    }
    let per_run = if report.runs > 1 { " (mean per run)" } else { "" };
    let _ = writeln!(out, "\nResilience{per_run}");
    let _ = writeln!(out, "{:<15} {:>9} {:>9} {:>9} {:>9}", "Algorithm", "Retries", "Denied", "Ejections", "Panic s");
    for (name, r) in &rows {
        let _ = writeln!(
            out,
            "{name:<15} {:>9.0} {:>9.0} {:>9.1} {:>9.3}",
            r.retries, r.retries_denied, r.ejections, r.panic_seconds
        );
    }
    for (name, r) in &rows {
        let firsts: Vec<String> = r
            .first_ejection_s
            .iter()
            .zip(&r.time_to_ejection_ms)
            .enumerate()
            .filter_map(|(s, (first, delay))| {
                let first = (*first)?;
                Some(match delay {
                    Some(ms) => format!("#{s} at {first:.3} s ({ms:.0} ms after it failed)"),
                    None => format!("#{s} at {first:.3} s"),
                })
            })
            .collect();
        if !firsts.is_empty() {
            let _ = writeln!(out, "First ejections, {name}: {}", firsts.join(", "));
        }
    }
    for a in &report.results {
        let r = a.resilience.as_ref();
        for (what, refused) in
            [("Rate limited", r.and_then(|r| r.rate_limited)), ("Over max_requests", r.and_then(|r| r.overflows))]
        {
            if let Some(refused) = refused {
                let share = if a.requests > 0.0 { 100.0 * refused / a.requests } else { 0.0 };
                let _ =
                    writeln!(out, "{what}, {}: {refused:.0} of {:.0} requests ({share:.1} %)", a.algorithm, a.requests);
            }
        }
    }
}

fn header(out: &mut String) {
    let _ = write!(out, "{:<15} {:>9} {:>7}", "Algorithm", "Requests", "Failed");
    for name in ["Min", "Avg", "P50", "P75", "P90", "P95", "P99", "P999", "Max", "StdDev"] {
        let _ = write!(out, " {name:>8}");
    }
    out.push('\n');
}

fn row(out: &mut String, a: &AlgorithmReport, s: &Summary, counts: bool) {
    if counts {
        let _ = write!(out, "{:<15} {:>9.0} {:>7.0}", a.algorithm, a.requests, a.failed);
    } else {
        let _ = write!(out, "{:<15} {:>9} {:>7}", a.algorithm, "", "");
    }
    for (_, get) in FIGURES {
        let _ = write!(out, " {:>8.3}", get(s));
    }
    out.push('\n');
}

#[derive(Serialize)]
struct JsonReport<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    provenance: Option<&'a Provenance>,
    scenario: &'a str,
    seed: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    runs: Option<u32>,
    results: Vec<JsonResult<'a>>,
    simulated_requests: u64,
    wall_seconds: f64,
}

#[derive(Serialize)]
struct JsonResult<'a> {
    algorithm: &'a str,
    requests: u64,
    failed: u64,
    latency_ms: Summary,
    #[serde(skip_serializing_if = "Option::is_none")]
    ci95_ms: Option<Summary>,
    requests_per_server: Vec<u64>,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    resilience: Option<JsonResilience>,
}

#[derive(Serialize)]
struct JsonResilience {
    retries: u64,
    retries_denied: u64,
    ejections: f64,
    panic_seconds: f64,
    first_ejection_s: Vec<Option<f64>>,
    time_to_ejection_ms: Vec<Option<f64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rate_limited: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    overflows: Option<u64>,
}

impl JsonResilience {
    fn of(r: &ResilienceSummary) -> Self {
        JsonResilience {
            retries: r.retries.round() as u64,
            retries_denied: r.retries_denied.round() as u64,
            ejections: r.ejections,
            panic_seconds: r.panic_seconds,
            first_ejection_s: r.first_ejection_s.clone(),
            time_to_ejection_ms: r.time_to_ejection_ms.clone(),
            rate_limited: r.rate_limited.map(|n| n.round() as u64),
            overflows: r.overflows.map(|n| n.round() as u64),
        }
    }
}

/// The JSON document. With more than one run, counts are the rounded means
/// and `runs` and `ci95_ms` are added.
pub fn json(report: &Report) -> String {
    let many = report.runs > 1;
    let doc = JsonReport {
        provenance: report.provenance.as_ref(),
        scenario: &report.scenario,
        seed: report.seed,
        runs: many.then_some(report.runs),
        results: report
            .results
            .iter()
            .map(|a| JsonResult {
                algorithm: &a.algorithm,
                requests: a.requests.round() as u64,
                failed: a.failed.round() as u64,
                latency_ms: a.latency,
                ci95_ms: many.then_some(a.ci95),
                requests_per_server: a.requests_per_server.iter().map(|n| n.round() as u64).collect(),
                resilience: a.resilience.as_ref().map(JsonResilience::of),
            })
            .collect(),
        simulated_requests: report.simulated_requests,
        wall_seconds: report.wall_seconds,
    };
    fulcrum_workload::report::json_document(&doc)
}

/// Write `summary.csv` (one row per run), `requests_per_server.csv`,
/// `cdf.csv` and `share.csv` (per run) into `dir`, creating it if needed,
/// each opened by the report's provenance when it has one.
pub fn write_csv(report: &Report, dir: &Path) -> io::Result<()> {
    let figures: Vec<String> = FIGURES.iter().map(|(name, _)| format!("{name}_ms")).collect();
    let mut header = vec!["algorithm", "seed", "requests", "failed"];
    header.extend(figures.iter().map(String::as_str));
    let mut summary = Csv::new(&header);
    let mut per_server = Csv::new(&["algorithm", "seed", "server", "name", "requests"]);
    let mut cdf = Csv::new(&["algorithm", "seed", "fraction", "latency_ms"]);
    let mut share = Csv::new(&["algorithm", "seed", "time_s", "server", "name", "requests"]);
    for a in &report.results {
        for r in &a.runs {
            let values: Vec<f64> = FIGURES.iter().map(|(_, get)| get(&r.latency)).collect();
            let mut cells: Vec<&dyn Display> = vec![&a.algorithm, &r.seed, &r.requests, &r.failed];
            cells.extend(values.iter().map(|v| v as &dyn Display));
            summary.row(&cells);
            for (s, n) in r.requests_per_server.iter().enumerate() {
                per_server.row(&[&a.algorithm, &r.seed, &s, &report.servers[s], n]);
            }
            for (f, ms) in &r.cdf {
                cdf.row(&[&a.algorithm, &r.seed, f, ms]);
            }
            let width = r.share.interval as f64 / 1e9;
            for (t, bucket) in r.share.buckets.iter().enumerate() {
                let time = t as f64 * width;
                for (s, n) in bucket.iter().enumerate() {
                    share.row(&[&a.algorithm, &r.seed, &time, &s, &report.servers[s], n]);
                }
            }
        }
    }
    let files =
        [("summary.csv", &summary), ("requests_per_server.csv", &per_server), ("cdf.csv", &cdf), ("share.csv", &share)];
    write_csv_files(dir, &files, report.provenance.as_ref())
}

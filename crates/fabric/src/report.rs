//! Reports of one or several runs: a human table and one JSON line.
//!
//! The JSON is one line per invocation so that the outputs of a sweep run as
//! independent processes (GNU parallel, a Slurm array) concatenate into a
//! JSON-lines file:
//!
//! `{["provenance"], "scenario", "set", "seed", ["runs"], "flows", "fct_ms": {"avg",
//! "small_avg", "small_p99", "large_avg", "small_p99_censored"}, ["ci95_ms":
//! {…}], ["per_seed": [{"seed", "fct_ms"}]], "buckets": [{"size", "flows",
//! "avg_ms", "p99_ms", "avg_slowdown"}], "queues": [{"port", "mean_packets",
//! "max_packets", "marks", "drops"}], "unfinished_flows", "stranded_flows",
//! "stranded_small_flows", "data_packets",
//! "simulated_seconds", "events", "wall_seconds", ["throughput_gbps"],
//! ["queue_series"], ["routing_stats"]}`
//!
//! With `monitor.queue_ports`, `queues` also has one entry per named port
//! (its name as `port`; the mean and largest sample of its queue
//! discipline's length, its marks and drops), and `queue_series` is
//! `[{"port", "interval_us", "packets": [p0, p1, …]}, …]`: the port's
//! queue-discipline length at times 0, interval, 2 × interval, … (with
//! `--runs`, the mean over the runs).
//!
//! With long-lived flows (`workload.kind = "flows"`), `throughput_gbps` is
//! `[[t, [g0, g1, …]], …]`: at each sample time t (seconds, every
//! `workload.throughput_interval`, from 0) the Gb/s each long flow's
//! receiver got in order over the interval ending at t; the table prints
//! the same samples as `Flow: i, throughput (Gbps): x` lines, as the seed's
//! mq program does.
//!
//! With a routing scheme that counts its decisions (Hermes),
//! `routing_stats` is `{"hermes": {…}}`: the counters of
//! [`crate::lb::hermes::Stats`] under their field names, summed over the
//! hosts (with `--runs`, each counter's mean over the runs).
//!
//! `--plot FILE.svg` draws the figures of [`crate::plot`].
//!
//! `--csv DIR` writes `flows.csv` (one row per flow and seed: id, hosts,
//! size, start, FCT, whether it completed, IP bytes sent, slowdown, and the
//! FCT by the receiver's last new byte, empty if it never got it) and
//! `queues.csv` (one row per port group, or named port, and seed), and with
//! named ports `queue_series.csv` (seed, port, t_ns, packets: one row per
//! sample).
//!
//! `stranded_flows` counts the flows of which nothing arrived before the
//! run ended (`stranded_small_flows` the small ones): they have no FCT, so
//! every FCT figure but `small_p99_censored` leaves them out, as the
//! original's flow-monitor parser does; `small_p99_censored` counts the
//! stranded small flows at their age when the run ended
//! ([`crate::metrics`]). The table prints a `stranded` line when there are
//! any.
//!
//! With several runs every figure is the mean over the runs (seeds `seed`,
//! `seed + 1`, …) and `ci95_ms` holds the 95 % half-interval of each FCT
//! figure (Student t over the runs, as `fulcrum sim` reports).

use std::fmt::Write as _;
use std::path::Path;

use fulcrum_workload::interval::mean_ci95;
use fulcrum_workload::report::{write_csv_files, Csv, Provenance};
use serde::Serialize;
use serde_json::Value;

use crate::metrics::{Bucket, FctSummary};
use crate::{Outcome, QueueSummary};

/// Runs of one scenario, in seed order.
pub struct Report<'a> {
    /// What produced the report (`fulcrum fabric` and the Python package
    /// say; none leaves it out of the JSON and the CSV files).
    pub provenance: Option<&'a Provenance>,
    pub scenario: &'a str,
    pub sets: &'a [String],
    pub outcomes: &'a [Outcome],
    pub wall_seconds: f64,
}

#[derive(Serialize)]
struct PerSeed {
    seed: u64,
    fct_ms: FctSummary,
}

#[derive(Serialize)]
struct Json<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    provenance: Option<&'a Provenance>,
    scenario: &'a str,
    set: &'a [String],
    seed: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    runs: Option<usize>,
    flows: f64,
    fct_ms: FctSummary,
    #[serde(skip_serializing_if = "Option::is_none")]
    ci95_ms: Option<FctSummary>,
    #[serde(skip_serializing_if = "Option::is_none")]
    per_seed: Option<Vec<PerSeed>>,
    buckets: Vec<Bucket>,
    queues: Vec<QueueSummary>,
    unfinished_flows: f64,
    stranded_flows: f64,
    stranded_small_flows: f64,
    data_packets: f64,
    simulated_seconds: f64,
    events: f64,
    wall_seconds: f64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    throughput_gbps: Vec<(f64, Vec<f64>)>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    queue_series: Vec<SeriesJson>,
    #[serde(skip_serializing_if = "Option::is_none")]
    routing_stats: Option<Value>,
}

/// One watched port's queue length over time, mean over the runs.
#[derive(Serialize)]
struct SeriesJson {
    port: String,
    interval_us: f64,
    packets: Vec<f64>,
}

fn mean(v: impl Iterator<Item = f64>) -> f64 {
    let v: Vec<f64> = v.collect();
    mean_ci95(&v).0
}

/// The element-wise mean of JSON values of one shape (numbers, and arrays
/// and objects of them; anything else is taken from the first).
fn mean_value(values: &[Value]) -> Value {
    let at = |f: &dyn Fn(&Value) -> Option<&Value>| -> Vec<Value> {
        values.iter().map(|v| f(v).cloned().unwrap_or(Value::Null)).collect()
    };
    match &values[0] {
        Value::Number(_) => Value::from(mean(values.iter().map(|v| v.as_f64().unwrap_or(0.0)))),
        Value::Array(first) => Value::Array((0..first.len()).map(|i| mean_value(&at(&|v| v.get(i)))).collect()),
        Value::Object(first) => {
            Value::Object(first.keys().map(|k| (k.clone(), mean_value(&at(&|v| v.get(k))))).collect())
        }
        other => other.clone(),
    }
}

impl Report<'_> {
    fn each<F: Fn(&FctSummary) -> f64>(&self, f: F) -> (f64, f64) {
        let v: Vec<f64> = self.outcomes.iter().map(|o| f(&o.fct)).collect();
        mean_ci95(&v)
    }

    /// Mean FCT figures and their 95 % half-intervals.
    pub fn fct(&self) -> (FctSummary, FctSummary) {
        let (avg, avg_ci) = self.each(|s| s.avg);
        let (small_avg, small_ci) = self.each(|s| s.small_avg);
        let (small_p99, p99_ci) = self.each(|s| s.small_p99);
        let (large_avg, large_ci) = self.each(|s| s.large_avg);
        let (small_p99_censored, censored_ci) = self.each(|s| s.small_p99_censored);
        (
            FctSummary { avg, small_avg, small_p99, large_avg, small_p99_censored },
            FctSummary {
                avg: avg_ci,
                small_avg: small_ci,
                small_p99: p99_ci,
                large_avg: large_ci,
                small_p99_censored: censored_ci,
            },
        )
    }

    fn buckets(&self) -> Vec<Bucket> {
        let first = &self.outcomes[0].buckets;
        (0..first.len())
            .map(|i| Bucket {
                size: first[i].size.clone(),
                flows: (mean(self.outcomes.iter().map(|o| o.buckets[i].flows as f64))).round() as usize,
                avg_ms: mean(self.outcomes.iter().map(|o| o.buckets[i].avg_ms)),
                p99_ms: mean(self.outcomes.iter().map(|o| o.buckets[i].p99_ms)),
                avg_slowdown: mean(self.outcomes.iter().map(|o| o.buckets[i].avg_slowdown)),
            })
            .collect()
    }

    fn queues(&self) -> Vec<QueueSummary> {
        let first = &self.outcomes[0].queues;
        (0..first.len())
            .map(|i| QueueSummary {
                port: first[i].port.clone(),
                mean_packets: mean(self.outcomes.iter().map(|o| o.queues[i].mean_packets)),
                max_packets: self.outcomes.iter().map(|o| o.queues[i].max_packets).max().unwrap_or(0),
                marks: mean(self.outcomes.iter().map(|o| o.queues[i].marks as f64)).round() as u64,
                drops: mean(self.outcomes.iter().map(|o| o.queues[i].drops as f64)).round() as u64,
            })
            .collect()
    }

    /// Long flows' throughput samples, (seconds, Gb/s of each long flow),
    /// averaged over the runs (they sample at the same times).
    pub(crate) fn throughput(&self) -> Vec<(f64, Vec<f64>)> {
        let first = &self.outcomes[0].throughput;
        (0..first.len())
            .map(|k| {
                let flows = (0..first[k].1.len())
                    .map(|f| mean(self.outcomes.iter().map(|o| o.throughput.get(k).map_or(0.0, |s| s.1[f]))))
                    .collect();
                (first[k].0 as f64 / 1e9, flows)
            })
            .collect()
    }

    /// Each watched port's queue length at each sample, the mean over the
    /// runs (they sample at the same times): (name, interval ns, packets).
    pub(crate) fn queue_series(&self) -> Vec<(String, u64, Vec<f64>)> {
        let first = &self.outcomes[0].queue_series;
        (0..first.len())
            .map(|i| {
                let packets = (0..first[i].packets.len())
                    .map(|k| {
                        mean(self.outcomes.iter().map(|o| o.queue_series[i].packets.get(k).map_or(0.0, |&p| p as f64)))
                    })
                    .collect();
                (first[i].port.clone(), first[i].interval_ns, packets)
            })
            .collect()
    }

    /// The routing scheme's counters: one run's as they are, or each
    /// counter's mean over the runs.
    fn routing_stats(&self) -> Option<Value> {
        let values: Vec<Value> = self
            .outcomes
            .iter()
            .filter_map(|o| o.routing_stats.as_ref())
            .map(|s| serde_json::to_value(s).expect("plain data serialises"))
            .collect();
        match values.len() {
            0 => None,
            1 => values.into_iter().next(),
            _ => Some(mean_value(&values)),
        }
    }

    /// The report as one JSON line (with a trailing newline).
    pub fn json(&self) -> String {
        let many = self.outcomes.len() > 1;
        let (fct, ci) = self.fct();
        let per = |f: fn(&Outcome) -> f64| mean(self.outcomes.iter().map(f));
        let json = Json {
            provenance: self.provenance,
            scenario: self.scenario,
            set: self.sets,
            seed: self.outcomes[0].seed,
            runs: many.then_some(self.outcomes.len()),
            flows: per(|o| o.flows.len() as f64),
            fct_ms: fct,
            ci95_ms: many.then_some(ci),
            per_seed: many.then(|| self.outcomes.iter().map(|o| PerSeed { seed: o.seed, fct_ms: o.fct }).collect()),
            buckets: self.buckets(),
            queues: self.queues(),
            unfinished_flows: per(|o| o.unfinished as f64),
            stranded_flows: per(|o| o.stranded.len() as f64),
            stranded_small_flows: per(|o| o.stranded.iter().filter(|f| f.small).count() as f64),
            data_packets: per(|o| o.data_packets as f64),
            simulated_seconds: self.outcomes[0].simulated_ns as f64 / 1e9,
            events: per(|o| o.events as f64),
            wall_seconds: self.wall_seconds,
            throughput_gbps: self.throughput(),
            queue_series: self
                .queue_series()
                .into_iter()
                .map(|(port, every, packets)| SeriesJson { port, interval_us: every as f64 / 1e3, packets })
                .collect(),
            routing_stats: self.routing_stats(),
        };
        fulcrum_workload::report::json_line(&json)
    }

    /// The report as a table for people.
    pub fn table(&self) -> String {
        let n = self.outcomes.len();
        let first = self.outcomes[0].seed;
        let mut out = String::new();
        let runs = if n == 1 {
            format!("seed {first}")
        } else {
            format!("mean of {n} runs, seeds {first}..={}", first + n as u64 - 1)
        };
        let _ = writeln!(out, "Scenario {} ({runs})", self.scenario);
        for s in self.sets {
            let _ = writeln!(out, "  --set {s}");
        }
        let (fct, ci) = self.fct();
        let _ = writeln!(out, "\nFCT (ms)        avg      small avg  small p99  large avg");
        let row = |out: &mut String, name: &str, s: &FctSummary| {
            let _ = writeln!(
                out,
                "{name:<14}{:>9.3}{:>11.3}{:>11.3}{:>11.3}",
                s.avg, s.small_avg, s.small_p99, s.large_avg
            );
        };
        row(&mut out, "mean", &fct);
        if n > 1 {
            row(&mut out, "95 % ±", &ci);
        }
        let stranded = mean(self.outcomes.iter().map(|o| o.stranded.len() as f64));
        if stranded > 0.0 {
            let small = mean(self.outcomes.iter().map(|o| o.stranded.iter().filter(|f| f.small).count() as f64));
            let _ = writeln!(
                out,
                "stranded      {stranded:.1} flows ({small:.1} small) of which nothing arrived, left out above; \
                 small p99 counting them at their age: {:.3} ms",
                fct.small_p99_censored
            );
        }
        let _ = writeln!(out, "\nBy size       flows   avg ms   p99 ms  slowdown");
        for b in self.buckets() {
            let _ =
                writeln!(out, "{:<12}{:>7}{:>9.3}{:>9.3}{:>10.2}", b.size, b.flows, b.avg_ms, b.p99_ms, b.avg_slowdown);
        }
        let _ = writeln!(out, "\nQueues      mean pkts  max pkts      marks      drops");
        for q in self.queues() {
            let _ = writeln!(
                out,
                "{:<12}{:>9.2}{:>10}{:>11}{:>11}",
                q.port, q.mean_packets, q.max_packets, q.marks, q.drops
            );
        }
        let series = self.throughput();
        if !series.is_empty() {
            let _ = writeln!(out, "\nLong flows' throughput over each interval ending at t");
            for (t, flows) in series {
                for (i, g) in flows.iter().enumerate() {
                    let _ = writeln!(out, "t {t:.3} s  Flow: {i}, throughput (Gbps): {g:.3}");
                }
            }
        }
        out
    }

    /// Write `flows.csv` and `queues.csv` into `dir` (created if missing),
    /// and `queue_series.csv` when ports are watched.
    pub fn write_csv(&self, dir: &Path) -> std::io::Result<()> {
        let mut flows = Csv::new(&[
            "seed",
            "flow",
            "src",
            "dst",
            "bytes",
            "start_ns",
            "fct_ns",
            "complete",
            "tx_bytes",
            "slowdown",
            "last_byte_ns",
        ]);
        let mut queues = Csv::new(&["seed", "port", "mean_packets", "max_packets", "marks", "drops"]);
        let mut series = Csv::new(&["seed", "port", "t_ns", "packets"]);
        for o in self.outcomes {
            for f in &o.flows {
                let last_byte = f.last_byte_ns.map_or(String::new(), |t| t.to_string());
                flows.row(&[
                    &o.seed,
                    &f.id,
                    &f.src,
                    &f.dst,
                    &f.bytes,
                    &f.start_ns,
                    &f.fct_ns,
                    &f.complete,
                    &f.tx_bytes,
                    &format_args!("{:.4}", f.slowdown),
                    &last_byte,
                ]);
            }
            for q in &o.queues {
                let mean = format_args!("{:.4}", q.mean_packets);
                queues.row(&[&o.seed, &q.port, &mean, &q.max_packets, &q.marks, &q.drops]);
            }
            for s in &o.queue_series {
                for (k, p) in s.packets.iter().enumerate() {
                    series.row(&[&o.seed, &s.port, &(k as u64 * s.interval_ns), p]);
                }
            }
        }
        let mut files = vec![("flows.csv", &flows), ("queues.csv", &queues)];
        if self.outcomes.iter().any(|o| !o.queue_series.is_empty()) {
            files.push(("queue_series.csv", &series));
        }
        write_csv_files(dir, &files, self.provenance)
    }
}

//! The tables of a report as columns, named as the CLI's CSV files name
//! theirs (`docs/reference/output-formats.md`), built here and handed to
//! Python whole: a numeric column as the little-endian bytes of its values
//! with a NumPy dtype (`np.frombuffer` makes the array without a loop), a
//! text column as a list of strings.

use fulcrum_fabric::Outcome;
use fulcrum_sim::Report;
use fulcrum_workload::summary::FIGURES;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};

/// One column's values.
pub enum Column {
    U64(Vec<u64>),
    F64(Vec<f64>),
    Bool(Vec<bool>),
    Text(Vec<String>),
}

/// A named table of named columns of one length.
pub struct Table {
    pub name: &'static str,
    pub columns: Vec<(String, Column)>,
}

/// A table being filled row by row: `cols[i]` is column `i`.
struct Builder {
    name: &'static str,
    names: Vec<String>,
    cols: Vec<Column>,
}

impl Builder {
    fn new(name: &'static str, columns: Vec<(&str, Column)>) -> Builder {
        let (names, cols) = columns.into_iter().map(|(n, c)| (n.to_string(), c)).unzip();
        Builder { name, names, cols }
    }

    fn done(self) -> Table {
        Table { name: self.name, columns: self.names.into_iter().zip(self.cols).collect() }
    }
}

fn u64s(c: &mut Column) -> &mut Vec<u64> {
    match c {
        Column::U64(v) => v,
        _ => unreachable!("declared as u64 in this module"),
    }
}

fn f64s(c: &mut Column) -> &mut Vec<f64> {
    match c {
        Column::F64(v) => v,
        _ => unreachable!("declared as f64 in this module"),
    }
}

fn texts(c: &mut Column) -> &mut Vec<String> {
    match c {
        Column::Text(v) => v,
        _ => unreachable!("declared as text in this module"),
    }
}

fn bools(c: &mut Column) -> &mut Vec<bool> {
    match c {
        Column::Bool(v) => v,
        _ => unreachable!("declared as bool in this module"),
    }
}

/// `summary`, `requests_per_server`, `cdf` and `share`: one row per
/// algorithm and seed (and server, CDF point, time bucket), as the CSV files.
pub fn sim(report: &Report) -> Vec<Table> {
    let text = || Column::Text(Vec::new());
    let int = || Column::U64(Vec::new());
    let float = || Column::F64(Vec::new());
    let figures: Vec<String> = FIGURES.iter().map(|(n, _)| format!("{n}_ms")).collect();
    let mut head = vec![("algorithm", text()), ("seed", int()), ("requests", int()), ("failed", int())];
    head.extend(figures.iter().map(|n| (n.as_str(), float())));
    let mut summary = Builder::new("summary", head);
    let mut per_server = Builder::new(
        "requests_per_server",
        vec![("algorithm", text()), ("seed", int()), ("server", int()), ("name", text()), ("requests", int())],
    );
    let mut cdf = Builder::new(
        "cdf",
        vec![("algorithm", text()), ("seed", int()), ("fraction", float()), ("latency_ms", float())],
    );
    let mut share = Builder::new(
        "share",
        vec![
            ("algorithm", text()),
            ("seed", int()),
            ("time_s", float()),
            ("server", int()),
            ("name", text()),
            ("requests", int()),
        ],
    );
    for a in &report.results {
        for r in &a.runs {
            let c = &mut summary.cols;
            texts(&mut c[0]).push(a.algorithm.clone());
            u64s(&mut c[1]).push(r.seed);
            u64s(&mut c[2]).push(r.requests);
            u64s(&mut c[3]).push(r.failed);
            for (k, (_, get)) in FIGURES.iter().enumerate() {
                f64s(&mut c[4 + k]).push(get(&r.latency));
            }
            for (s, n) in r.requests_per_server.iter().enumerate() {
                let c = &mut per_server.cols;
                texts(&mut c[0]).push(a.algorithm.clone());
                u64s(&mut c[1]).push(r.seed);
                u64s(&mut c[2]).push(s as u64);
                texts(&mut c[3]).push(report.servers[s].clone());
                u64s(&mut c[4]).push(*n);
            }
            for (f, ms) in &r.cdf {
                let c = &mut cdf.cols;
                texts(&mut c[0]).push(a.algorithm.clone());
                u64s(&mut c[1]).push(r.seed);
                f64s(&mut c[2]).push(*f);
                f64s(&mut c[3]).push(*ms);
            }
            let width = r.share.interval as f64 / 1e9;
            for (t, bucket) in r.share.buckets.iter().enumerate() {
                for (s, n) in bucket.iter().enumerate() {
                    let c = &mut share.cols;
                    texts(&mut c[0]).push(a.algorithm.clone());
                    u64s(&mut c[1]).push(r.seed);
                    f64s(&mut c[2]).push(t as f64 * width);
                    u64s(&mut c[3]).push(s as u64);
                    texts(&mut c[4]).push(report.servers[s].clone());
                    u64s(&mut c[5]).push(*n);
                }
            }
        }
    }
    vec![summary.done(), per_server.done(), cdf.done(), share.done()]
}

/// `flows`, `queues`, `queue_series` and `throughput`, one row per flow
/// (port group, sample) and seed; `last_byte_ns` is NaN where the CSV file
/// leaves it empty.
pub fn fabric(outcomes: &[Outcome]) -> Vec<Table> {
    let flows_n: usize = outcomes.iter().map(|o| o.flows.len()).sum();
    let int = || Column::U64(Vec::with_capacity(flows_n));
    let mut flows = Builder::new(
        "flows",
        vec![
            ("seed", int()),
            ("flow", int()),
            ("src", int()),
            ("dst", int()),
            ("bytes", int()),
            ("start_ns", int()),
            ("fct_ns", int()),
            ("complete", Column::Bool(Vec::with_capacity(flows_n))),
            ("tx_bytes", int()),
            ("slowdown", Column::F64(Vec::with_capacity(flows_n))),
            ("last_byte_ns", Column::F64(Vec::with_capacity(flows_n))),
        ],
    );
    let text = || Column::Text(Vec::new());
    let int = || Column::U64(Vec::new());
    let float = || Column::F64(Vec::new());
    let mut queues = Builder::new(
        "queues",
        vec![
            ("seed", int()),
            ("port", text()),
            ("mean_packets", float()),
            ("max_packets", int()),
            ("marks", int()),
            ("drops", int()),
        ],
    );
    let mut series =
        Builder::new("queue_series", vec![("seed", int()), ("port", text()), ("t_ns", int()), ("packets", int())]);
    let mut throughput =
        Builder::new("throughput", vec![("seed", int()), ("t_s", float()), ("flow", int()), ("gbps", float())]);
    for o in outcomes {
        let c = &mut flows.cols;
        for f in &o.flows {
            u64s(&mut c[0]).push(o.seed);
            u64s(&mut c[1]).push(u64::from(f.id));
            u64s(&mut c[2]).push(u64::from(f.src));
            u64s(&mut c[3]).push(u64::from(f.dst));
            u64s(&mut c[4]).push(f.bytes);
            u64s(&mut c[5]).push(f.start_ns);
            u64s(&mut c[6]).push(f.fct_ns);
            bools(&mut c[7]).push(f.complete);
            u64s(&mut c[8]).push(f.tx_bytes);
            f64s(&mut c[9]).push(f.slowdown);
            f64s(&mut c[10]).push(f.last_byte_ns.map_or(f64::NAN, |t| t as f64));
        }
        for q in &o.queues {
            let c = &mut queues.cols;
            u64s(&mut c[0]).push(o.seed);
            texts(&mut c[1]).push(q.port.clone());
            f64s(&mut c[2]).push(q.mean_packets);
            u64s(&mut c[3]).push(u64::from(q.max_packets));
            u64s(&mut c[4]).push(q.marks);
            u64s(&mut c[5]).push(q.drops);
        }
        for s in &o.queue_series {
            for (k, p) in s.packets.iter().enumerate() {
                let c = &mut series.cols;
                u64s(&mut c[0]).push(o.seed);
                texts(&mut c[1]).push(s.port.clone());
                u64s(&mut c[2]).push(k as u64 * s.interval_ns);
                u64s(&mut c[3]).push(u64::from(*p));
            }
        }
        for (t, gbps) in &o.throughput {
            for (i, g) in gbps.iter().enumerate() {
                let c = &mut throughput.cols;
                u64s(&mut c[0]).push(o.seed);
                f64s(&mut c[1]).push(*t as f64 / 1e9);
                u64s(&mut c[2]).push(i as u64);
                f64s(&mut c[3]).push(*g);
            }
        }
    }
    vec![flows.done(), queues.done(), series.done(), throughput.done()]
}

/// `{table: {column: (dtype, bytes) or [str, …]}}`, columns in order.
pub fn to_python(py: Python<'_>, tables: Vec<Table>) -> PyResult<Bound<'_, PyDict>> {
    let out = PyDict::new(py);
    for table in tables {
        let cols = PyDict::new(py);
        for (name, column) in table.columns {
            match column {
                Column::U64(v) => {
                    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                    cols.set_item(name, ("<u8", PyBytes::new(py, &bytes)))?;
                }
                Column::F64(v) => {
                    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                    cols.set_item(name, ("<f8", PyBytes::new(py, &bytes)))?;
                }
                Column::Bool(v) => {
                    let bytes: Vec<u8> = v.iter().map(|&b| u8::from(b)).collect();
                    cols.set_item(name, ("?", PyBytes::new(py, &bytes)))?;
                }
                Column::Text(v) => cols.set_item(name, PyList::new(py, v)?)?,
            }
        }
        out.set_item(table.name, cols)?;
    }
    Ok(out)
}

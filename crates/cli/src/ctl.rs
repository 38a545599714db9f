//! `fulcrum ctl`: the runtime API of a running `fulcrum serve` from the
//! command line (the calls are `fulcrum_proxy::ctl`'s): list clusters and
//! endpoints, drain, undrain, weigh, add and remove endpoints.

use std::fmt::Write;
use std::net::SocketAddr;

use clap::{Args as ClapArgs, Subcommand};
use fulcrum_proxy::ctl::{self, CtlError};
use serde_json::Value;

use crate::cli::{json_wanted, Failure, OutputFormat, GLOBAL_HEADING};

/// Options of `fulcrum ctl`.
#[derive(Debug, ClapArgs)]
#[command(after_help = "\
Examples:
  fulcrum ctl clusters
  fulcrum ctl endpoints web
  fulcrum ctl drain web 127.0.0.1:9001        # before taking 9001 down
  fulcrum ctl undrain web 127.0.0.1:9001
  fulcrum ctl weight web 127.0.0.1:9002 3
  fulcrum ctl add web 127.0.0.1:9003 --weight 2
  fulcrum ctl remove web 127.0.0.1:9003
  fulcrum ctl --admin 10.0.0.5:9901 --json endpoints web | jq '.endpoints[].in_flight'

The proxy must run with an admin listener (`admin = \"127.0.0.1:9901\"` in its file, or \
`fulcrum serve --admin 127.0.0.1:9901`). Anyone who can reach that address can make these \
changes: bind it to loopback or a management network.

Changes apply to every worker's balancer before the command returns, and last until the next \
`fulcrum reload`, which restores the file's endpoints and weights. A draining endpoint gets no \
new request; requests already sent to it finish.")]
pub struct Args {
    /// The proxy's admin listener.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9901", global = true, help_heading = GLOBAL_HEADING)]
    admin: SocketAddr,
    /// Print the API's JSON answer instead of a table (for scripts).
    #[arg(long, global = true, help_heading = GLOBAL_HEADING)]
    json: bool,
    /// Older spelling of --json.
    #[arg(short = 'o', long = "output", value_enum, value_name = "FORMAT", global = true, hide = true)]
    output: Option<OutputFormat>,
    #[command(subcommand)]
    command: Command,
}

impl Args {
    /// Whether to print JSON (`--json` or `-o json`).
    pub fn json(&self) -> bool {
        json_wanted(self.json, self.output)
    }
}

#[derive(Debug, Subcommand)]
enum Command {
    /// List clusters: algorithm, endpoints, routable ones, counters.
    #[command(after_help = "Examples:\n  fulcrum ctl clusters\n  fulcrum ctl clusters --json")]
    Clusters,
    /// List a cluster's endpoints with their state and each worker's balancer view.
    #[command(after_help = "Examples:\n  fulcrum ctl endpoints web\n  fulcrum ctl endpoints web --json")]
    Endpoints {
        /// The cluster's name.
        cluster: String,
    },
    /// Stop sending new requests to an endpoint; those in flight finish.
    #[command(after_help = "Examples:\n  fulcrum ctl drain web 127.0.0.1:9001")]
    Drain {
        /// The cluster's name.
        cluster: String,
        /// The endpoint, ip:port.
        addr: SocketAddr,
    },
    /// Send requests to a drained endpoint again.
    #[command(after_help = "Examples:\n  fulcrum ctl undrain web 127.0.0.1:9001")]
    Undrain {
        /// The cluster's name.
        cluster: String,
        /// The endpoint, ip:port.
        addr: SocketAddr,
    },
    /// Set an endpoint's weight (relative, > 0).
    #[command(after_help = "Examples:\n  fulcrum ctl weight web 127.0.0.1:9002 3")]
    Weight {
        /// The cluster's name.
        cluster: String,
        /// The endpoint, ip:port.
        addr: SocketAddr,
        /// The new weight.
        weight: f64,
    },
    /// Add an endpoint (an address, not a host name).
    #[command(
        after_help = "Examples:\n  fulcrum ctl add web 127.0.0.1:9003\n  fulcrum ctl add web 127.0.0.1:9003 --weight 2"
    )]
    Add {
        /// The cluster's name.
        cluster: String,
        /// The endpoint, ip:port.
        addr: SocketAddr,
        /// Its weight (default: 1, or the file's for an address the file names).
        #[arg(long)]
        weight: Option<f64>,
    },
    /// Remove an endpoint; requests in flight to it finish.
    #[command(after_help = "Examples:\n  fulcrum ctl remove web 127.0.0.1:9003")]
    Remove {
        /// The cluster's name.
        cluster: String,
        /// The endpoint, ip:port.
        addr: SocketAddr,
    },
}

/// Run `fulcrum ctl`.
pub fn run(args: Args) -> Result<(), Failure> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::runtime(format!("cannot start a runtime: {e}")))?;
    let admin = args.admin;
    let answer = runtime.block_on(async {
        match &args.command {
            Command::Clusters => ctl::clusters(admin).await,
            Command::Endpoints { cluster } => ctl::endpoints(admin, cluster).await,
            Command::Drain { cluster, addr } => ctl::drain(admin, cluster, *addr, true).await,
            Command::Undrain { cluster, addr } => ctl::drain(admin, cluster, *addr, false).await,
            Command::Weight { cluster, addr, weight } => ctl::weight(admin, cluster, *addr, *weight).await,
            Command::Add { cluster, addr, weight } => ctl::add(admin, cluster, *addr, *weight).await,
            Command::Remove { cluster, addr } => ctl::remove(admin, cluster, *addr).await,
        }
    });
    let answer =
        answer.map_err(
            |e: CtlError| {
                if e.is_refusal() {
                    Failure::input(e.to_string())
                } else {
                    Failure::runtime(e.to_string())
                }
            },
        )?;
    if args.json() {
        println!("{}", serde_json::to_string_pretty(&answer).unwrap_or_default());
        return Ok(());
    }
    print!("{}", human(&args.command, &answer));
    Ok(())
}

/// What a person reads for `answer` to `command`.
fn human(command: &Command, answer: &Value) -> String {
    let empty = Vec::new();
    match command {
        Command::Clusters => {
            let clusters = answer["clusters"].as_array().unwrap_or(&empty);
            table(
                &[
                    "CLUSTER",
                    "ALGORITHM",
                    "ENDPOINTS",
                    "ROUTABLE",
                    "DRAINING",
                    "PANIC",
                    "EJECTIONS",
                    "RETRIES",
                    "OVERFLOWS",
                ],
                clusters.iter().map(cluster_row).collect(),
            )
        }
        Command::Endpoints { .. } => endpoint_table(answer["endpoints"].as_array().unwrap_or(&empty)),
        _ => {
            let e = &answer["endpoint"];
            let cluster = answer["cluster"].as_str().unwrap_or("?");
            let address = e["address"].as_str().unwrap_or("?");
            let done = match command {
                Command::Drain { .. } => "draining",
                Command::Undrain { .. } => "undrained",
                Command::Weight { .. } => "weight set",
                Command::Add { .. } => "added",
                _ => "removed",
            };
            let applied = if answer["applied"] == true {
                "every worker's balancer has it"
            } else {
                "WARNING: some worker had not applied it after 2 s"
            };
            let mut out = format!("{cluster} {address}: {done} ({applied})\n");
            if e.get("removed").is_none() {
                out.push_str(&endpoint_table(std::slice::from_ref(e)));
            }
            out
        }
    }
}

fn cluster_row(c: &Value) -> Vec<String> {
    let empty = Vec::new();
    let endpoints = c["endpoints"].as_array().unwrap_or(&empty);
    let routable = endpoints.iter().filter(|e| !e["effective_weight"].is_null()).count();
    let draining = endpoints.iter().filter(|e| e["draining"] == true).count();
    vec![
        text(&c["name"]),
        text(&c["algorithm"]["kind"]),
        endpoints.len().to_string(),
        routable.to_string(),
        draining.to_string(),
        yes_no(&c["panic"]),
        text(&c["ejections"]),
        text(&c["retries"]),
        text(&c["overflows"]),
    ]
}

fn endpoint_table(endpoints: &[Value]) -> String {
    let rows = endpoints
        .iter()
        .map(|e| {
            let state = if e["draining"] == true {
                "draining"
            } else if e["ejected"] == true {
                "ejected"
            } else if e["healthy"] == false {
                "unhealthy"
            } else {
                "up"
            };
            let workers = e["workers"].as_array().cloned().unwrap_or_default();
            let per_worker = |key: &str| {
                let v: Vec<String> = workers.iter().map(|w| number(&w[key])).collect();
                v.join("/")
            };
            vec![
                text(&e["address"]),
                number(&e["weight"]),
                number(&e["effective_weight"]),
                state.to_string(),
                text(&e["in_flight"]),
                per_worker("active"),
                per_worker("latency_estimate_ms"),
                text(&e["requests"]),
                text(&e["errors"]),
            ]
        })
        .collect();
    table(
        &[
            "ADDRESS",
            "WEIGHT",
            "EFFECTIVE",
            "STATE",
            "IN_FLIGHT",
            "ACTIVE/WORKER",
            "EST_MS/WORKER",
            "REQUESTS",
            "ERRORS",
        ],
        rows,
    )
}

/// A JSON scalar as a cell: strings bare, null as `-`.
fn text(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A number with at most two decimals, null as `-`.
fn number(v: &Value) -> String {
    match v.as_f64() {
        Some(x) if x.fract() == 0.0 => format!("{x:.0}"),
        Some(x) => format!("{x:.2}"),
        None => "-".into(),
    }
}

fn yes_no(v: &Value) -> String {
    if *v == true { "yes" } else { "no" }.into()
}

/// Left-aligned columns as wide as their widest cell.
fn table(headers: &[&str], rows: Vec<Vec<String>>) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let mut out = String::new();
    let header: Vec<String> = headers.iter().map(|h| h.to_string()).collect();
    for row in std::iter::once(&header).chain(&rows) {
        let line: Vec<String> = row.iter().zip(&widths).map(|(cell, w)| format!("{cell:<w$}")).collect();
        let _ = writeln!(out, "{}", line.join("  ").trim_end());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn endpoint_rows_show_state_and_each_worker() {
        let e = json!({"address": "127.0.0.1:9001", "weight": 1.0, "effective_weight": null, "healthy": true,
            "ejected": false, "draining": true, "requests": 12, "errors": 0, "in_flight": 1,
            "workers": [{"active": 0, "latency_estimate_ms": 5.126}, {"active": 1, "latency_estimate_ms": null}]});
        let out = endpoint_table(&[e]);
        let lines: Vec<&str> = out.lines().collect();
        assert!(lines[0].starts_with("ADDRESS         WEIGHT  EFFECTIVE  STATE"), "{out}");
        assert_eq!(
            lines[1].split_whitespace().collect::<Vec<_>>(),
            ["127.0.0.1:9001", "1", "-", "draining", "1", "0/1", "5.13/-", "12", "0"]
        );
    }
}

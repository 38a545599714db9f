//! The questions `fulcrum sim` answers beside the present, each one flag
//! away: an endpoint drained (`--drain`, alias `--remove`), one added
//! (`--add`), one made slower (`--slower`), the rate scaled
//! (`--rate-scale`), and the rate at which the predicted p99 crosses a bound
//! (`--headroom`). Each change is one case: the scenario with that change
//! alone, run with the first algorithm; its result joins the report under
//! the case's label, so the table, JSON, CSV files and plot show the cases
//! beside the algorithms.
//!
//! Every case has the same server list (the report's per-server columns):
//! an added endpoint is in the list of every case but joined only in its own.

use std::time::Duration;

use fulcrum_balance::AlgorithmConfig;
use fulcrum_balance::Nanos;
use fulcrum_sim::scenario::Arrivals;
use fulcrum_sim::{AlgorithmReport, Plan, Scenario};
use serde_json::{json, Value};

use crate::cli::Failure;

/// Highest rate factor `--headroom` tries.
const HEADROOM_MAX: f64 = 64.0;
/// `--headroom` stops when the bracket is this narrow (ratio).
const HEADROOM_PRECISION: f64 = 1.01;

/// The what-if flags of `fulcrum sim`.
#[derive(Debug, Default, clap::Args)]
pub struct Questions {
    /// Predict the cluster with this endpoint drained (its name in the
    /// scenario, which --from makes the address, or #INDEX). Also spelt
    /// --remove: drained and removed are the same once its requests in
    /// flight are done. Repeatable: one case each.
    #[arg(long, visible_alias = "remove", value_name = "ENDPOINT")]
    pub drain: Vec<String>,

    /// Predict the cluster with one more endpoint, with ENDPOINT's service
    /// times and weight. Repeatable: one case each.
    #[arg(long, value_name = "ENDPOINT")]
    pub add: Vec<String>,

    /// Predict ENDPOINT with its service times multiplied by FACTOR (such as
    /// 127.0.0.1:9002=2). Repeatable: one case each.
    #[arg(long, value_name = "ENDPOINT=FACTOR")]
    pub slower: Vec<String>,

    /// Predict the request rate multiplied by X (open-loop clients).
    /// Repeatable: one case each.
    #[arg(long, value_name = "X")]
    pub rate_scale: Vec<f64>,

    /// Find the rate factor (up to 64×) at which the predicted p99 of the
    /// first algorithm crosses this bound, by bisection.
    #[arg(long, value_name = "P99_BOUND", value_parser = fulcrum_config::parse_duration)]
    pub headroom: Option<Duration>,
}

/// One question: a label for the report and the scenario with the change.
pub struct Case {
    /// Short label (the report's algorithm column).
    pub label: String,
    /// The scenario with this change.
    pub scenario: Scenario,
}

impl Questions {
    /// Append the `--add` endpoints to `s`, not joined (every case keeps the
    /// same server list); their indices, in `--add` order.
    pub fn append_added(&self, s: &mut Scenario) -> Result<Vec<usize>, Failure> {
        let mut added = Vec::new();
        for (k, name) in self.add.iter().enumerate() {
            let like = endpoint(s, name, "--add")?;
            let mut server = s.servers[like].clone();
            server.name = format!("{}+{}", server.name, k + 1);
            server.joined = false;
            server.cold = None;
            s.servers.push(server);
            added.push(s.servers.len() - 1);
        }
        Ok(added)
    }

    /// The cases, each `base` (with [`Questions::append_added`] applied)
    /// changed once.
    pub fn cases(&self, base: &Scenario, added: &[usize]) -> Result<Vec<Case>, Failure> {
        let mut cases = Vec::new();
        let mut case = |label: String, change: &dyn Fn(&mut Scenario) -> Result<(), Failure>| {
            let mut scenario = base.clone();
            change(&mut scenario)?;
            cases.push(Case { label, scenario });
            Ok::<(), Failure>(())
        };
        for name in &self.drain {
            let i = endpoint(base, name, "--drain")?;
            case(format!("drain #{i}"), &|s| {
                s.servers[i].joined = false;
                if s.servers.iter().all(|s| !s.joined) {
                    return Err(Failure::input(format!("--drain {name}: no endpoint would be left")));
                }
                Ok(())
            })?;
        }
        for (name, &i) in self.add.iter().zip(added) {
            let like = endpoint(base, name, "--add")?;
            case(format!("add #{i} as #{like}"), &|s| {
                s.servers[i].joined = true;
                Ok(())
            })?;
        }
        for arg in &self.slower {
            let bad = || Failure::input(format!("--slower {arg:?}: expected ENDPOINT=FACTOR, FACTOR a number > 0"));
            let (name, factor) = arg.rsplit_once('=').ok_or_else(bad)?;
            let factor: f64 = factor.trim().parse().map_err(|_| bad())?;
            if !(factor.is_finite() && factor > 0.0) {
                return Err(bad());
            }
            let i = endpoint(base, name, "--slower")?;
            case(format!("#{i} x{factor}"), &|s| {
                s.servers[i].service = s.servers[i].service.scaled(factor);
                Ok(())
            })?;
        }
        for &x in &self.rate_scale {
            case(format!("rate x{x}"), &|s| {
                scale_rate(s, x).map_err(|e| Failure::input(format!("--rate-scale: {e}")))
            })?;
        }
        Ok(cases)
    }
}

/// The index of the server named `name` (or `#INDEX`) in `s`.
fn endpoint(s: &Scenario, name: &str, flag: &str) -> Result<usize, Failure> {
    let by_index = name.strip_prefix('#').and_then(|i| i.parse::<usize>().ok()).filter(|&i| i < s.servers.len());
    by_index.or_else(|| s.servers.iter().position(|sv| sv.name == name)).ok_or_else(|| {
        let names: Vec<&str> = s.servers.iter().map(|s| s.name.as_str()).collect();
        Failure::input(format!(
            "{flag} {name:?}: no such endpoint (give a name or #0..#{}): {}",
            s.servers.len().saturating_sub(1),
            names.join(", ")
        ))
    })
}

/// Multiply the clients' rate by `x` (open loops only).
pub fn scale_rate(s: &mut Scenario, x: f64) -> Result<(), String> {
    if !(x.is_finite() && x > 0.0) {
        return Err(format!("{x}: the factor must be a number > 0"));
    }
    s.clients.arrivals = match s.clients.arrivals {
        Arrivals::Poisson(gap) => Arrivals::Poisson(gap / x),
        Arrivals::Fixed(interval) => Arrivals::Fixed(((interval as f64 / x) as Nanos).max(1)),
        Arrivals::Closed(_) => {
            return Err("a closed loop has no rate to scale (its clients wait for each answer)".into());
        }
        Arrivals::Trace(_) => return Err("a trace's arrival times are fixed: scale them in the trace file".into()),
    };
    Ok(())
}

/// Requests per second the clients of `s` offer (open loops).
fn offered_rate(s: &Scenario) -> Option<f64> {
    let per_client = match s.clients.arrivals {
        Arrivals::Poisson(gap) => 1e9 / gap,
        Arrivals::Fixed(interval) => 1e9 / interval as f64,
        Arrivals::Closed(_) | Arrivals::Trace(_) => return None,
    };
    Some(per_client * f64::from(s.clients.count))
}

/// Run each case with `algorithm` under `plan`'s seeds and runs; the
/// results, labelled.
pub fn run(cases: &[Case], algorithm: &AlgorithmConfig, plan: &Plan) -> Result<Vec<AlgorithmReport>, Failure> {
    let plan = Plan { algorithms: vec![algorithm.clone()], ..plan.clone() };
    cases
        .iter()
        .map(|c| {
            let mut report = fulcrum_sim::simulate(&c.scenario, &plan, None)
                .map_err(|e| Failure::input(format!("{}: {e}", c.label)))?;
            let mut result = report.results.remove(0);
            result.algorithm = c.label.clone();
            Ok(result)
        })
        .collect()
}

/// The rate factor at which the predicted p99 of `algorithm` crosses
/// `bound`: doubled from 1× until it does (up to [`HEADROOM_MAX`]), then
/// bisected (geometrically) to [`HEADROOM_PRECISION`]. As JSON: the bound,
/// the p99 now, and the factor and rate (null when not crossed).
pub fn headroom(base: &Scenario, algorithm: &AlgorithmConfig, plan: &Plan, bound: Duration) -> Result<Value, Failure> {
    let plan = Plan { algorithms: vec![algorithm.clone()], ..plan.clone() };
    let bound_ms = bound.as_secs_f64() * 1e3;
    let p99 = |x: f64| -> Result<f64, Failure> {
        let mut s = base.clone();
        scale_rate(&mut s, x).map_err(|e| Failure::input(format!("--headroom: {e}")))?;
        let report = fulcrum_sim::simulate(&s, &plan, None).map_err(|e| Failure::input(format!("--headroom: {e}")))?;
        Ok(report.results[0].latency.p99)
    };
    let now = p99(1.0)?;
    let (mut lo, mut hi) = (1.0, 2.0);
    let crossed = if now > bound_ms {
        Some(1.0)
    } else {
        loop {
            if p99(hi)? > bound_ms {
                break;
            }
            if hi >= HEADROOM_MAX {
                break;
            }
            (lo, hi) = (hi, (hi * 2.0).min(HEADROOM_MAX));
        }
        if hi >= HEADROOM_MAX && p99(hi)? <= bound_ms {
            None
        } else {
            while hi / lo > HEADROOM_PRECISION {
                let mid = (lo * hi).sqrt();
                if p99(mid)? > bound_ms {
                    hi = mid;
                } else {
                    lo = mid;
                }
            }
            Some(hi)
        }
    };
    Ok(json!({
        "algorithm": algorithm.kind().name(),
        "p99_bound_ms": bound_ms,
        "p99_now_ms": now,
        "factor": crossed,
        "rate": crossed.and_then(|x| offered_rate(base).map(|r| r * x)),
        "searched_to": HEADROOM_MAX,
    }))
}

/// The headroom as the line printed after the table.
pub fn headroom_text(h: &Value) -> String {
    let bound = h["p99_bound_ms"].as_f64().unwrap_or(0.0);
    let now = h["p99_now_ms"].as_f64().unwrap_or(0.0);
    let algorithm = h["algorithm"].as_str().unwrap_or("?");
    match (h["factor"].as_f64(), h["rate"].as_f64()) {
        (Some(x), _) if x <= 1.0 => {
            format!("\nheadroom ({algorithm}): the predicted p99 ({now:.3} ms) is already above {bound:.3} ms\n")
        }
        (Some(x), rate) => format!(
            "\nheadroom ({algorithm}): the predicted p99 ({now:.3} ms now) crosses {bound:.3} ms at {x:.2}× the rate{}{}\n",
            rate.map_or(String::new(), |r| format!(" ({r:.0} req/s)")),
            match h["factor_range"].as_array().map(|r| (r[0].as_f64(), r[1].as_f64())) {
                Some((Some(lo), hi)) => format!(
                    "; {lo:.2}–{}× over the fitted concurrency's 95 % interval",
                    hi.map_or(format!("{HEADROOM_MAX}+"), |hi| format!("{hi:.2}"))
                ),
                _ => String::new(),
            }
        ),
        (None, _) => format!(
            "\nheadroom ({algorithm}): the predicted p99 ({now:.3} ms now) stays below {bound:.3} ms up to {HEADROOM_MAX}× the rate\n"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scenario() -> Scenario {
        let text = "name = \"t\"\n[clients]\ncount = 2\nloop = \"open\"\nrate = 100\nduration = \"5s\"\n\
                    [[servers]]\nname = \"a\"\nservice = \"2ms\"\nconcurrency = 1\n\
                    [[servers]]\nname = \"b\"\nservice = \"8ms\"\nconcurrency = 1\n";
        Scenario::parse(text, "t.toml", "t", std::path::Path::new(".")).unwrap()
    }

    #[test]
    fn each_flag_is_one_case_over_the_same_servers() {
        let q = Questions {
            drain: vec!["b".into()],
            add: vec!["#0".into()],
            slower: vec!["a=3".into()],
            rate_scale: vec![1.5],
            headroom: None,
        };
        let mut base = scenario();
        let added = q.append_added(&mut base).unwrap();
        assert_eq!(added, [2]);
        assert!(!base.servers[2].joined && base.servers[2].name == "a+1");
        let cases = q.cases(&base, &added).unwrap();
        let labels: Vec<&str> = cases.iter().map(|c| c.label.as_str()).collect();
        assert_eq!(labels, ["drain #1", "add #2 as #0", "#0 x3", "rate x1.5"]);
        assert!(cases.iter().all(|c| c.scenario.servers.len() == 3));
        assert!(!cases[0].scenario.servers[1].joined && cases[1].scenario.servers[2].joined);
        assert!((cases[2].scenario.servers[0].service.mean() - 6e6).abs() < 1.0);
        assert_eq!(offered_rate(&cases[3].scenario), Some(300.0));
    }

    #[test]
    fn bad_questions_are_refused_with_the_flag() {
        let base = scenario();
        let err = |q: Questions| q.cases(&base, &[]).err().map(|f| f.to_string()).unwrap_or_default();
        assert!(err(Questions { drain: vec!["c".into()], ..Questions::default() }).contains("--drain \"c\""));
        let both = Questions { drain: vec!["a".into(), "b".into()], ..Questions::default() };
        assert!(both.cases(&base, &[]).is_ok(), "each drain is its own case");
        assert!(err(Questions { slower: vec!["a=0".into()], ..Questions::default() }).contains("ENDPOINT=FACTOR"));
        assert!(err(Questions { slower: vec!["a".into()], ..Questions::default() }).contains("ENDPOINT=FACTOR"));
        assert!(err(Questions { rate_scale: vec![-1.0], ..Questions::default() }).contains("> 0"));
    }

    #[test]
    fn headroom_finds_where_a_queue_crosses_the_bound() {
        // Two single-slot servers of 2 and 8 ms at 200 req/s round robin:
        // the 8 ms one saturates at 250 req/s in all (125 each), so p99
        // explodes just above 1.25×; 100 ms is crossed between 1× and 1.25×.
        let base = scenario();
        let plan = Plan { algorithms: vec![], seed: 1, runs: 1, threads: 1 };
        let algorithm = base.algorithms[0].clone();
        let h = headroom(&base, &algorithm, &plan, Duration::from_millis(100)).unwrap();
        let x = h["factor"].as_f64().unwrap();
        assert!((1.0..1.3).contains(&x), "{h}");
        assert!((h["rate"].as_f64().unwrap() - 200.0 * x).abs() < 1e-6, "{h}");
        let h = headroom(&base, &algorithm, &plan, Duration::from_secs(3600)).unwrap();
        assert!(h["factor"].is_null(), "{h}");
        assert!(headroom_text(&h).contains("stays below"));
    }
}

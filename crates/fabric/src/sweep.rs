//! The load-balancing sweep's figure: flow completion time against load,
//! one line per scheme, normalised to per-flow ECMP's at the same load —
//! the form of the Hermes paper's figures (Zhang et al., SIGCOMM 2017).
//!
//! Input is the JSON lines `fulcrum fabric --json` prints (one run each,
//! as `bench/fabric-sweep` concatenates them); a line's scheme, load and
//! workload come from its `--set` list (`routing.scheme=…`,
//! `workload.load=…`, `workload.cdf=…`; ECMP and the scenario's own CDF
//! when absent). Lines group by scenario and workload; each group is one
//! row of two charts, average FCT and small-flow p99, drawn with the shared
//! plot code of `fulcrum_workload::plot`, and [`table`] gives the same
//! figures as Markdown tables. The small-flow p99 is the censored one
//! (`small_p99_censored`: flows of which nothing arrived count at their
//! age), so that a fault that strands flows shows in it; lines without
//! that field use `small_p99`.

use std::collections::BTreeMap;

use fulcrum_workload::plot::{color, trim, Axis, Chart, Frame, Scale, Series, Svg};
use serde_json::Value;

/// A line of the results that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("line {line}: {msg}")]
pub struct SweepError {
    pub line: usize,
    pub msg: String,
}

/// One run's figures.
#[derive(Clone, Debug, PartialEq)]
pub struct Point {
    pub scenario: String,
    pub workload: String,
    pub scheme: String,
    pub load: f64,
    pub avg_ms: f64,
    pub small_p99_ms: f64,
}

/// The value of `key` in a `--set` list, if set.
fn set_value<'a>(sets: &'a [Value], key: &str) -> Option<&'a str> {
    sets.iter()
        .filter_map(Value::as_str)
        .filter_map(|s| s.split_once('='))
        .find(|(k, _)| k.trim() == key)
        .map(|(_, v)| v.trim().trim_matches('"'))
}

/// Parse the JSON lines of a sweep.
pub fn parse(text: &str) -> Result<Vec<Point>, SweepError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let fail = |msg: String| SweepError { line: i + 1, msg };
        let v: Value = serde_json::from_str(line).map_err(|e| fail(format!("not JSON: {e}")))?;
        let sets = v["set"].as_array().map_or(&[][..], |a| a.as_slice());
        let load = set_value(sets, "workload.load")
            .ok_or_else(|| fail("no --set workload.load=… in \"set\"".into()))?
            .parse::<f64>()
            .map_err(|e| fail(format!("workload.load: {e}")))?;
        let fct = |k: &str| v["fct_ms"][k].as_f64().ok_or_else(|| fail(format!("no fct_ms.{k}")));
        let workload = set_value(sets, "workload.cdf").unwrap_or("scenario's CDF");
        let workload = workload.rsplit('/').next().unwrap_or(workload).trim_end_matches(".txt");
        out.push(Point {
            scenario: v["scenario"].as_str().ok_or_else(|| fail("no \"scenario\"".into()))?.to_string(),
            workload: workload.to_string(),
            scheme: set_value(sets, "routing.scheme").unwrap_or("ecmp").to_string(),
            load,
            avg_ms: fct("avg")?,
            small_p99_ms: fct("small_p99_censored").or_else(|_| fct("small_p99"))?,
        });
    }
    if out.is_empty() {
        return Err(SweepError { line: 0, msg: "no results".into() });
    }
    Ok(out)
}

/// Per (scenario, workload): per scheme, (load, avg ÷ ECMP's, small p99 ÷
/// ECMP's) in load order. Several runs of one point are averaged first.
pub type Normalised = BTreeMap<(String, String), ByScheme>;

/// Per scheme, (load, avg ÷ ECMP's, small p99 ÷ ECMP's) in load order.
pub type ByScheme = BTreeMap<String, Vec<(f64, f64, f64)>>;

/// (scenario, workload), scheme, load in thousandths.
type Key = ((String, String), String, i64);

/// Per point (group, scheme, load), the mean over its runs of the average
/// FCT and of the small-flow p99, in ms.
fn means(points: &[Point]) -> BTreeMap<Key, (f64, f64)> {
    let mut sums: BTreeMap<Key, (f64, f64, u32)> = BTreeMap::new();
    for p in points {
        let key = ((p.scenario.clone(), p.workload.clone()), p.scheme.clone(), (p.load * 1000.0).round() as i64);
        let e = sums.entry(key).or_default();
        *e = (e.0 + p.avg_ms, e.1 + p.small_p99_ms, e.2 + 1);
    }
    sums.into_iter().map(|(k, (a, p, n))| (k, (a / n as f64, p / n as f64))).collect()
}

/// Normalise every point to ECMP's at its load; a load without an ECMP
/// run is an error.
pub fn normalise(points: &[Point]) -> Result<Normalised, SweepError> {
    let means = means(points);
    let mean = |k: &Key| means.get(k).copied();
    let mut out: Normalised = BTreeMap::new();
    for key in means.keys() {
        let (group, scheme, load) = key;
        let base = mean(&(group.clone(), "ecmp".to_string(), *load)).ok_or_else(|| SweepError {
            line: 0,
            msg: format!("{} / {}: no ECMP run at load {}", group.0, group.1, *load as f64 / 1000.0),
        })?;
        let (avg, p99) = mean(key).expect("a key of the map");
        let row = (*load as f64 / 1000.0, avg / base.0, p99 / base.1);
        out.entry(group.clone()).or_default().entry(scheme.clone()).or_default().push(row);
    }
    Ok(out)
}

/// The schemes of `groups`, ECMP first (the baseline keeps the first
/// colour and row), then by name.
fn schemes(groups: &Normalised) -> Vec<&String> {
    let mut s: Vec<&String> = groups.values().flat_map(|g| g.keys()).collect();
    s.sort_by_key(|name| (name.as_str() != "ecmp", name.as_str()));
    s.dedup();
    s
}

/// The figures as Markdown: per scenario, a table of the average FCT and
/// one of the small-flow p99, each ÷ ECMP's at the same load, a row per
/// scheme, a column per workload, a cell per load (`a / b / …` in load
/// order, `–` where a scheme has no run); then ECMP's own figures in ms.
pub fn table(points: &[Point]) -> Result<String, SweepError> {
    use std::fmt::Write;
    let groups = normalise(points)?;
    let means = means(points);
    let schemes = schemes(&groups);
    let scenarios: Vec<&String> = {
        let mut s: Vec<&String> = groups.keys().map(|(scenario, _)| scenario).collect();
        s.dedup();
        s
    };
    let mut out = String::new();
    for scenario in scenarios {
        let workloads: Vec<(&String, &ByScheme)> =
            groups.iter().filter(|((s, _), _)| s == scenario).map(|((_, w), g)| (w, g)).collect();
        let mut loads: Vec<f64> = workloads.iter().flat_map(|(_, g)| g.values().flatten().map(|r| r.0)).collect();
        loads.sort_by(f64::total_cmp);
        loads.dedup();
        let loads_text: Vec<String> = loads.iter().map(|&l| trim(l)).collect();
        for (what, pick) in [("average FCT", 1usize), ("small-flow p99 FCT", 2)] {
            let _ = writeln!(
                out,
                "
{scenario}: {what} ÷ ECMP's at loads {}
",
                loads_text.join(" / ")
            );
            let names: Vec<&str> = workloads.iter().map(|(w, _)| w.as_str()).collect();
            let _ = writeln!(
                out,
                "| scheme | {} |
|---|{}",
                names.join(" | "),
                "---|".repeat(names.len())
            );
            for scheme in &schemes {
                let cells: Vec<String> = workloads
                    .iter()
                    .map(|(_, g)| {
                        let rows = g.get(*scheme);
                        let cell = |&load: &f64| {
                            let r = rows.and_then(|rows| rows.iter().find(|r| r.0 == load));
                            r.map_or("–".to_string(), |r| format!("{:.2}", if pick == 1 { r.1 } else { r.2 }))
                        };
                        loads.iter().map(cell).collect::<Vec<_>>().join(" / ")
                    })
                    .collect();
                let _ = writeln!(out, "| {scheme} | {} |", cells.join(" | "));
            }
            let ecmp: Vec<String> = workloads
                .iter()
                .map(|(w, _)| {
                    let ms = |&load: &f64| {
                        let key =
                            ((scenario.clone(), (*w).clone()), "ecmp".to_string(), (load * 1000.0).round() as i64);
                        means
                            .get(&key)
                            .map_or("–".to_string(), |m| format!("{:.2}", if pick == 1 { m.0 } else { m.1 }))
                    };
                    format!("{w} {}", loads.iter().map(ms).collect::<Vec<_>>().join(" / "))
                })
                .collect();
            let _ = writeln!(
                out,
                "
ECMP's own, ms: {}",
                ecmp.join("; ")
            );
        }
    }
    Ok(out)
}

/// The figure: a row of two charts per (scenario, workload).
pub fn plot(points: &[Point]) -> Result<String, SweepError> {
    let groups = normalise(points)?;
    let schemes = schemes(&groups);
    let (row_h, width) = (330.0, 1160.0);
    let mut svg = Svg::new(width, row_h * groups.len() as f64 + 20.0);
    for (row, ((scenario, workload), by_scheme)) in groups.iter().enumerate() {
        let mut loads: Vec<f64> = by_scheme.values().flatten().map(|r| r.0).collect();
        loads.sort_by(f64::total_cmp);
        loads.dedup();
        let (lo, hi) = (loads[0], loads[loads.len() - 1]);
        let (lo, hi) = if hi > lo { (lo, hi) } else { (lo - 0.1, hi + 0.1) };
        for (col, (what, pick)) in [("average FCT", 1usize), ("small-flow p99 FCT", 2)].into_iter().enumerate() {
            let value = |r: &(f64, f64, f64)| if pick == 1 { r.1 } else { r.2 };
            let top = by_scheme.values().flatten().map(value).filter(|v| v.is_finite()).fold(1.0f64, f64::max);
            let top = (top * 1.1 * 4.0).ceil() / 4.0;
            let mut ordered: Vec<_> = by_scheme.iter().collect();
            ordered.sort_by_key(|(scheme, _)| schemes.iter().position(|s| s == scheme));
            let series = ordered
                .into_iter()
                .map(|(scheme, rows)| Series {
                    name: if col == 1 { scheme.clone() } else { String::new() },
                    color: color(schemes.iter().position(|s| *s == scheme).unwrap_or(0)),
                    width: 2.0,
                    points: rows.iter().map(|r| (r.0, value(r))).collect(),
                })
                .collect();
            let chart = Chart {
                title: format!("{scenario}, {workload}: {what}"),
                title_size: 13.0,
                x: Axis {
                    scale: Scale::Linear { lo, hi },
                    ticks: loads.iter().map(|&v| (v, trim(v))).collect(),
                    label: "load".into(),
                },
                y: Axis {
                    scale: Scale::Linear { lo: 0.0, hi: top },
                    ticks: (0..=4)
                        .map(|k| top * k as f64 / 4.0)
                        .map(|v| (v, trim((v * 100.0).round() / 100.0)))
                        .collect(),
                    label: "÷ ECMP's".into(),
                },
                series,
            };
            let f = Frame { x: 75.0 + col as f64 * 470.0, y: 40.0 + row as f64 * row_h, w: 380.0, h: row_h - 100.0 };
            chart.draw(&mut svg, &f);
        }
    }
    Ok(svg.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(scheme: &str, load: f64, avg: f64, p99: f64) -> String {
        format!(
            r#"{{"scenario":"lb","set":["routing.scheme={scheme}","workload.load={load}","workload.cdf=cdf/data-mining.txt"],"seed":1,"fct_ms":{{"avg":{avg},"small_avg":0.1,"small_p99":{p99},"large_avg":9}}}}"#
        )
    }

    #[test]
    fn points_normalise_to_ecmp_at_each_load() {
        let text = [
            line("ecmp", 0.3, 2.0, 4.0),
            line("drill", 0.3, 1.0, 2.0),
            line("ecmp", 0.6, 4.0, 8.0),
            line("drill", 0.6, 3.0, 2.0),
            line("drill", 0.6, 5.0, 2.0),
        ]
        .join("\n");
        let points = parse(&text).unwrap();
        assert_eq!(points[1].scheme, "drill");
        assert_eq!(points[1].workload, "data-mining");
        let n = normalise(&points).unwrap();
        let g = &n[&("lb".to_string(), "data-mining".to_string())];
        assert_eq!(g["ecmp"], [(0.3, 1.0, 1.0), (0.6, 1.0, 1.0)]);
        assert_eq!(g["drill"], [(0.3, 0.5, 0.5), (0.6, 1.0, 0.25)], "two runs at 0.6 averaged");
        let svg = plot(&points).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("drill") && svg.matches("<polyline").count() == 4, "{svg}");
        let table = table(&points).unwrap();
        assert!(table.contains("| ecmp | 1.00 / 1.00 |\n| drill | 0.50 / 1.00 |"), "{table}");
        assert!(table.contains("| drill | 0.50 / 0.25 |"), "small p99 table: {table}");
        assert!(table.contains("ECMP's own, ms: data-mining 2.00 / 4.00"), "{table}");
        assert!(table.contains("ECMP's own, ms: data-mining 4.00 / 8.00"), "{table}");
    }

    #[test]
    fn the_small_flow_p99_is_the_censored_one_when_given() {
        let censored = r#"{"scenario":"lb","set":["workload.load=0.3"],"fct_ms":{"avg":1,"small_p99":2,"small_p99_censored":300}}"#;
        assert_eq!(parse(censored).unwrap()[0].small_p99_ms, 300.0);
        assert_eq!(parse(&line("ecmp", 0.3, 1.0, 2.0)).unwrap()[0].small_p99_ms, 2.0, "older lines: small_p99");
    }

    #[test]
    fn bad_lines_are_named() {
        let err = parse(&format!("{}\n{{\"scenario\":\"lb\",\"set\":[]}}", line("ecmp", 0.3, 1.0, 1.0))).unwrap_err();
        assert_eq!(err.line, 2);
        assert!(err.to_string().contains("workload.load"), "{err}");
        let err = normalise(&parse(&line("drill", 0.3, 1.0, 1.0)).unwrap()).unwrap_err();
        assert!(err.msg.contains("no ECMP run at load 0.3"), "{err}");
        assert!(parse("").is_err());
    }
}

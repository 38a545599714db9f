//! SVG plots of a [`Report`]: the latency CDF of each algorithm on a
//! log-scale x axis, and below it, one panel per algorithm, each server's
//! share of requests over simulated time. Plots use the first run (the
//! first seed) of each algorithm. Only the assembly is here; the drawing
//! primitives and the chart layout are `fulcrum_workload::plot`'s.

use fulcrum_workload::plot::{color, trim, Axis, Chart, Frame, Scale, Series, Svg, TextStyle};

use crate::Report;

const WIDTH: f64 = 920.0;
const CDF_HEIGHT: f64 = 420.0;
const PANEL_W: f64 = 450.0;
const PANEL_H: f64 = 230.0;

/// The whole figure as an SVG document.
pub fn svg(report: &Report) -> String {
    let rows = report.results.len().div_ceil(2);
    let height = CDF_HEIGHT + 40.0 + rows as f64 * PANEL_H + 20.0;
    let mut svg = Svg::new(WIDTH, height);
    let cdf_frame = Frame { x: 70.0, y: 40.0, w: WIDTH - 250.0, h: CDF_HEIGHT - 90.0 };
    cdf(report).draw(&mut svg, &cdf_frame);
    svg.text(WIDTH / 2.0, CDF_HEIGHT + 28.0, "Share of requests per server over time (%)", TextStyle::centred(15.0));
    for i in 0..report.results.len() {
        let (col, row) = (i % 2, i / 2);
        let frame = Frame {
            x: 10.0 + col as f64 * PANEL_W + 50.0,
            y: CDF_HEIGHT + 40.0 + row as f64 * PANEL_H + 25.0,
            w: PANEL_W - 80.0,
            h: PANEL_H - 70.0,
        };
        share_panel(&mut svg, report, i, &frame);
    }
    svg.finish()
}

/// The CDF chart: one line per algorithm, fraction of requests against
/// latency in ms.
fn cdf(report: &Report) -> Chart {
    let points = || report.results.iter().flat_map(|a| a.runs[0].cdf.iter().map(|&(_, ms)| ms));
    let scale = Scale::log_decades(points());
    let series = report
        .results
        .iter()
        .enumerate()
        .map(|(i, a)| Series {
            name: a.algorithm.clone(),
            color: color(i),
            width: 1.8,
            points: a.runs[0].cdf.iter().map(|&(q, ms)| (ms, q)).collect(),
        })
        .collect();
    Chart {
        title: format!("{}: latency CDF (log scale)", report.scenario),
        title_size: 15.0,
        x: Axis { ticks: scale.decade_ticks(), scale, label: "latency (ms)".into() },
        y: Axis {
            scale: Scale::Linear { lo: 0.0, hi: 1.0 },
            ticks: [0.0, 0.25, 0.5, 0.75, 0.9, 1.0].iter().map(|&q| (q, trim(q))).collect(),
            label: "fraction of requests".into(),
        },
        series,
    }
}

/// Algorithm `index`'s panel: each server's share of the requests of each
/// time bucket, in %, with the server legend beside the first panel.
fn share_panel(svg: &mut Svg, report: &Report, index: usize, f: &Frame) {
    let run = &report.results[index].runs[0];
    let buckets = &run.share.buckets;
    let width_s = run.share.interval as f64 / 1e9;
    let t_end = (buckets.len() as f64 * width_s).max(width_s);
    // Skip leading empty buckets (clients that start late) in the x range.
    let first = buckets.iter().position(|b| b.iter().any(|&n| n > 0)).unwrap_or(0);
    let t0 = first as f64 * width_s;
    let series = (0..report.servers.len())
        .map(|s| Series {
            name: String::new(),
            color: color(s),
            width: 1.2,
            points: buckets
                .iter()
                .enumerate()
                .skip(first)
                .filter_map(|(t, bucket)| {
                    let total: u64 = bucket.iter().sum();
                    (total > 0).then(|| ((t as f64 + 0.5) * width_s, 100.0 * bucket[s] as f64 / total as f64))
                })
                .collect(),
        })
        .collect();
    let chart = Chart {
        title: report.results[index].algorithm.clone(),
        title_size: 13.0,
        x: Axis {
            scale: Scale::Linear { lo: t0, hi: t_end.max(t0 + 1e-9) },
            ticks: [t0, (t0 + t_end) / 2.0, t_end]
                .iter()
                .map(|&t| (t, format!("{}s", trim((t * 100.0).round() / 100.0))))
                .collect(),
            label: String::new(),
        },
        y: Axis {
            scale: Scale::Linear { lo: 0.0, hi: 100.0 },
            ticks: [0.0, 25.0, 50.0, 75.0, 100.0].iter().map(|&p| (p, trim(p))).collect(),
            label: String::new(),
        },
        series,
    };
    chart.draw(svg, f);
    if index == 0 {
        for (s, name) in report.servers.iter().enumerate().take(20) {
            let style = TextStyle { size: 7.0, fill: color(s), ..TextStyle::default() };
            svg.text(f.x + f.w + 8.0, f.y + 6.0 + s as f64 * 8.0, &format!("#{s} {name}"), style);
        }
    }
}

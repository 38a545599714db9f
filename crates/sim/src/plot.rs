//! Hand-written SVG plots of a [`Report`]: the latency CDF of each algorithm
//! on a log-scale x axis, and below it, one panel per algorithm, each
//! server's share of requests over simulated time. Plots use the first run
//! (the first seed) of each algorithm.

use std::fmt::Write as _;

use crate::Report;

const PALETTE: [&str; 10] =
    ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];

const WIDTH: f64 = 920.0;
const CDF_HEIGHT: f64 = 420.0;
const PANEL_W: f64 = 450.0;
const PANEL_H: f64 = 230.0;

/// Plot area inside a frame, with margins for the axes.
struct Frame {
    x: f64,
    y: f64,
    w: f64,
    h: f64,
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// The whole figure as an SVG document.
pub fn svg(report: &Report) -> String {
    let panels = report.results.len();
    let rows = panels.div_ceil(2);
    let height = CDF_HEIGHT + 40.0 + rows as f64 * PANEL_H + 20.0;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    cdf(&mut out, report);
    let _ = writeln!(
        out,
        r#"<text x="{}" y="{}" text-anchor="middle" font-size="15">Share of requests per server over time (%)</text>"#,
        WIDTH / 2.0,
        CDF_HEIGHT + 28.0
    );
    for (i, a) in report.results.iter().enumerate() {
        let (col, row) = (i % 2, i / 2);
        let frame = Frame {
            x: 10.0 + col as f64 * PANEL_W + 50.0,
            y: CDF_HEIGHT + 40.0 + row as f64 * PANEL_H + 25.0,
            w: PANEL_W - 80.0,
            h: PANEL_H - 70.0,
        };
        share_panel(&mut out, report, i, &frame);
        let _ = writeln!(
            out,
            r#"<text x="{}" y="{}" text-anchor="middle" font-size="13">{}</text>"#,
            frame.x + frame.w / 2.0,
            frame.y - 8.0,
            esc(&a.algorithm)
        );
    }
    out.push_str("</svg>\n");
    out
}

fn cdf(out: &mut String, report: &Report) {
    let f = Frame { x: 70.0, y: 40.0, w: WIDTH - 250.0, h: CDF_HEIGHT - 90.0 };
    let points: Vec<&[(f64, f64)]> = report.results.iter().map(|a| a.runs[0].cdf.as_slice()).collect();
    let positive = points.iter().flat_map(|p| p.iter()).map(|&(_, ms)| ms).filter(|&ms| ms > 0.0);
    let smallest = positive.clone().fold(f64::INFINITY, f64::min);
    let largest = positive.fold(0.0, f64::max);
    let (lo, hi) = if smallest.is_finite() {
        (10f64.powf(smallest.log10().floor()), 10f64.powf(largest.log10().ceil().max(smallest.log10().floor() + 1.0)))
    } else {
        (0.1, 10.0)
    };
    let (llo, lhi) = (lo.log10(), hi.log10());
    let sx = |ms: f64| f.x + (ms.max(lo).log10() - llo) / (lhi - llo) * f.w;
    let sy = |q: f64| f.y + f.h - q * f.h;
    let _ = writeln!(
        out,
        r#"<text x="{}" y="22" text-anchor="middle" font-size="15">{}: latency CDF (log scale)</text>"#,
        f.x + f.w / 2.0,
        esc(&report.scenario)
    );
    axes(out, &f);
    let mut decade = llo.round() as i32;
    while decade as f64 <= lhi + 1e-9 {
        let v = 10f64.powi(decade);
        let x = sx(v);
        let _ = writeln!(
            out,
            r##"<line x1="{x:.1}" y1="{}" x2="{x:.1}" y2="{}" stroke="#ddd"/><text x="{x:.1}" y="{}" text-anchor="middle">{}</text>"##,
            f.y,
            f.y + f.h,
            f.y + f.h + 16.0,
            trim(v)
        );
        decade += 1;
    }
    for q in [0.0, 0.25, 0.5, 0.75, 0.9, 1.0] {
        grid_line(out, &f, sy(q), &q.to_string());
    }
    let _ = writeln!(
        out,
        r#"<text x="{}" y="{}" text-anchor="middle">latency (ms)</text><text x="18" y="{}" transform="rotate(-90 18 {})" text-anchor="middle">fraction of requests</text>"#,
        f.x + f.w / 2.0,
        f.y + f.h + 36.0,
        f.y + f.h / 2.0,
        f.y + f.h / 2.0
    );
    for (i, (a, pts)) in report.results.iter().zip(&points).enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        let mut path = String::new();
        for &(q, ms) in pts.iter() {
            let _ = write!(path, "{:.1},{:.1} ", sx(ms), sy(q));
        }
        let _ = writeln!(out, r#"<polyline fill="none" stroke="{color}" stroke-width="1.8" points="{path}"/>"#);
        let ly = f.y + 10.0 + i as f64 * 18.0;
        let lx = f.x + f.w + 20.0;
        let _ = writeln!(
            out,
            r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{color}" stroke-width="3"/><text x="{}" y="{}">{}</text>"#,
            lx + 22.0,
            lx + 28.0,
            ly + 4.0,
            esc(&a.algorithm)
        );
    }
}

fn share_panel(out: &mut String, report: &Report, index: usize, f: &Frame) {
    let run = &report.results[index].runs[0];
    let buckets = &run.share.buckets;
    let width_s = run.share.interval as f64 / 1e9;
    let t_end = (buckets.len() as f64 * width_s).max(width_s);
    // Skip leading empty buckets (clients that start late) in the x range.
    let first = buckets.iter().position(|b| b.iter().any(|&n| n > 0)).unwrap_or(0);
    let t0 = first as f64 * width_s;
    let sx = |t: f64| f.x + (t - t0) / (t_end - t0).max(1e-9) * f.w;
    let sy = |share: f64| f.y + f.h - share * f.h;
    axes(out, f);
    for share in [0.0, 0.25, 0.5, 0.75, 1.0] {
        grid_line(out, f, sy(share), &(share * 100.0).to_string());
    }
    for t in [t0, (t0 + t_end) / 2.0, t_end] {
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{}" text-anchor="middle">{}s</text>"#,
            sx(t),
            f.y + f.h + 15.0,
            trim((t * 100.0).round() / 100.0)
        );
    }
    for s in 0..report.servers.len() {
        let mut path = String::new();
        for (t, bucket) in buckets.iter().enumerate().skip(first) {
            let total: u64 = bucket.iter().sum();
            if total == 0 {
                continue;
            }
            let share = bucket[s] as f64 / total as f64;
            let _ = write!(path, "{:.1},{:.1} ", sx((t as f64 + 0.5) * width_s), sy(share));
        }
        let color = PALETTE[s % PALETTE.len()];
        let _ = writeln!(out, r#"<polyline fill="none" stroke="{color}" stroke-width="1.2" points="{path}"/>"#);
    }
    if index == 0 {
        for (s, name) in report.servers.iter().enumerate().take(20) {
            let color = PALETTE[s % PALETTE.len()];
            let x = f.x + f.w + 8.0;
            let y = f.y + 6.0 + s as f64 * 8.0;
            let _ = writeln!(out, r#"<text x="{x}" y="{y}" font-size="7" fill="{color}">#{s} {}</text>"#, esc(name));
        }
    }
}

/// A horizontal grid line at `y` across the frame, labelled on the left.
fn grid_line(out: &mut String, f: &Frame, y: f64, label: &str) {
    let _ = writeln!(
        out,
        r##"<line x1="{}" y1="{y:.1}" x2="{}" y2="{y:.1}" stroke="#eee"/><text x="{}" y="{:.1}" text-anchor="end">{label}</text>"##,
        f.x,
        f.x + f.w,
        f.x - 6.0,
        y + 4.0
    );
}

fn axes(out: &mut String, f: &Frame) {
    let _ =
        writeln!(out, r#"<rect x="{}" y="{}" width="{}" height="{}" fill="none" stroke="black"/>"#, f.x, f.y, f.w, f.h);
}

fn trim(v: f64) -> String {
    let s = format!("{v}");
    s.strip_suffix(".0").map(str::to_string).unwrap_or(s)
}

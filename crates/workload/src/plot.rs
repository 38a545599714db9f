//! Hand-written SVG charts shared by the drivers: lines over an x/y frame,
//! with grid lines, tick labels, axis titles and a legend.
//!
//! Two layers. [`Svg`] writes the primitives (frame outline, grid lines,
//! text, polylines, legend entries) into a document, escaping text and
//! trimming numbers; [`Chart`] assembles them into the usual figure: a
//! [`Frame`] in pixels, an x and a y [`Axis`] (linear or log₁₀ [`Scale`])
//! and [`Series`] of points in data units. A report that needs several
//! charts on a page (the simulator's CDF above per-algorithm panels) draws
//! each into its own frame of one [`Svg`]. The format is SVG 1.1
//! (<https://www.w3.org/TR/SVG11/>): plain elements, no scripts or styles,
//! so any browser and most editors show the file.

use std::fmt::Write as _;

/// Line colours, in series order (matplotlib's "tab10").
pub const PALETTE: [&str; 10] =
    ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];

/// The colour of series `i` (the palette repeats).
pub fn color(i: usize) -> &'static str {
    PALETTE[i % PALETTE.len()]
}

/// Text made safe for SVG content and attribute values.
pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// A number as a short label: `10` rather than `10.0`.
pub fn trim(v: f64) -> String {
    let s = format!("{v}");
    s.strip_suffix(".0").map(str::to_string).unwrap_or(s)
}

/// A plot area in pixels: top-left corner, width and height (axes' labels
/// go outside it).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Frame {
    /// Left edge.
    pub x: f64,
    /// Top edge.
    pub y: f64,
    /// Width.
    pub w: f64,
    /// Height.
    pub h: f64,
}

/// How data values map onto an axis.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scale {
    /// Linear from `lo` to `hi`.
    Linear {
        /// Value at the start of the axis.
        lo: f64,
        /// Value at its end.
        hi: f64,
    },
    /// Logarithmic (base 10) from `lo` to `hi`, both above 0; smaller
    /// values are drawn at `lo`.
    Log {
        /// Value at the start of the axis.
        lo: f64,
        /// Value at its end.
        hi: f64,
    },
}

impl Scale {
    /// Whole decades around the positive `values`: from the decade at or
    /// below the smallest to the one at or above the largest, at least one
    /// decade wide (0.1 to 10 when no value is positive).
    pub fn log_decades(values: impl IntoIterator<Item = f64>) -> Scale {
        let (mut smallest, mut largest) = (f64::INFINITY, 0.0f64);
        for v in values.into_iter().filter(|&v| v > 0.0 && v.is_finite()) {
            smallest = smallest.min(v);
            largest = largest.max(v);
        }
        if !smallest.is_finite() {
            return Scale::Log { lo: 0.1, hi: 10.0 };
        }
        let lo = smallest.log10().floor();
        let hi = largest.log10().ceil().max(lo + 1.0);
        Scale::Log { lo: 10f64.powf(lo), hi: 10f64.powf(hi) }
    }

    /// Where `v` falls, as a fraction of the axis (0 at its start, 1 at
    /// its end).
    pub fn fraction(&self, v: f64) -> f64 {
        match *self {
            Scale::Linear { lo, hi } => (v - lo) / (hi - lo).max(1e-12),
            Scale::Log { lo, hi } => (v.max(lo).log10() - lo.log10()) / (hi.log10() - lo.log10()).max(1e-12),
        }
    }

    /// Linear from 0 to a round number at or above `max` (1, 2 or 5 times a
    /// power of ten), with a tick at each of about `count` equal steps; 0 to
    /// 1 when `max` is not above 0. Returns the scale and its ticks.
    pub fn zero_to(max: f64, count: usize) -> (Scale, Vec<(f64, String)>) {
        let max = if max > 0.0 && max.is_finite() { max } else { 1.0 };
        let raw = max / count.max(1) as f64;
        let power = 10f64.powf(raw.log10().floor());
        let step = [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * power).find(|&s| s >= raw * (1.0 - 1e-9)).unwrap_or(raw);
        let steps = (max / step - 1e-9).ceil().max(1.0) as usize;
        // As many decimals as the step needs (0.30000000000000004 → 0.3).
        let decimals = (-step.log10().floor()).max(0.0) as usize;
        let label = |v: f64| format!("{v:.decimals$}");
        let ticks = (0..=steps).map(|k| (k as f64 * step, label(k as f64 * step))).collect();
        (Scale::Linear { lo: 0.0, hi: steps as f64 * step }, ticks)
    }

    /// A tick at every power of ten of a log scale; none for a linear one.
    pub fn decade_ticks(&self) -> Vec<(f64, String)> {
        let Scale::Log { lo, hi } = *self else {
            return Vec::new();
        };
        let (first, last) = (lo.log10().round() as i32, hi.log10());
        (first..).take_while(|&d| d as f64 <= last + 1e-9).map(|d| (10f64.powi(d), trim(10f64.powi(d)))).collect()
    }
}

/// An SVG document being written.
#[derive(Debug)]
pub struct Svg {
    out: String,
}

/// How a piece of text is set.
#[derive(Debug, Clone, Copy)]
pub struct TextStyle {
    /// Font size in pixels.
    pub size: f64,
    /// `start`, `middle` or `end`.
    pub anchor: &'static str,
    /// Fill colour.
    pub fill: &'static str,
}

impl Default for TextStyle {
    fn default() -> Self {
        TextStyle { size: 12.0, anchor: "start", fill: "black" }
    }
}

impl TextStyle {
    /// Centred text of this size.
    pub fn centred(size: f64) -> TextStyle {
        TextStyle { size, anchor: "middle", ..TextStyle::default() }
    }
}

impl Svg {
    /// A white page of `width` × `height` pixels.
    pub fn new(width: f64, height: f64) -> Svg {
        let mut out = String::new();
        let _ = writeln!(
            out,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">"#
        );
        let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
        Svg { out }
    }

    /// The outline of `f`.
    pub fn outline(&mut self, f: &Frame) {
        let _ = writeln!(
            self.out,
            r#"<rect x="{}" y="{}" width="{}" height="{}" fill="none" stroke="black"/>"#,
            f.x, f.y, f.w, f.h
        );
    }

    /// A horizontal grid line at `y` across `f`, labelled on the left.
    pub fn grid_y(&mut self, f: &Frame, y: f64, label: &str) {
        let _ = writeln!(
            self.out,
            r##"<line x1="{}" y1="{y:.1}" x2="{}" y2="{y:.1}" stroke="#eee"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
            f.x,
            f.x + f.w,
            f.x - 6.0,
            y + 4.0,
            esc(label)
        );
    }

    /// A vertical grid line at `x` across `f`, labelled below.
    pub fn grid_x(&mut self, f: &Frame, x: f64, label: &str) {
        let _ = writeln!(
            self.out,
            r##"<line x1="{x:.1}" y1="{}" x2="{x:.1}" y2="{}" stroke="#ddd"/><text x="{x:.1}" y="{}" text-anchor="middle">{}</text>"##,
            f.y,
            f.y + f.h,
            f.y + f.h + 16.0,
            esc(label)
        );
    }

    /// `text` at (`x`, `y`).
    pub fn text(&mut self, x: f64, y: f64, text: &str, style: TextStyle) {
        let _ = writeln!(
            self.out,
            r#"<text x="{x:.1}" y="{y:.1}" font-size="{}" text-anchor="{}" fill="{}">{}</text>"#,
            style.size,
            style.anchor,
            style.fill,
            esc(text)
        );
    }

    /// `text` centred on (`x`, `y`), read bottom to top (a y-axis title).
    pub fn text_vertical(&mut self, x: f64, y: f64, text: &str) {
        let _ = writeln!(
            self.out,
            r#"<text x="{x:.1}" y="{y:.1}" transform="rotate(-90 {x:.1} {y:.1})" text-anchor="middle">{}</text>"#,
            esc(text)
        );
    }

    /// A line through `points` (pixels).
    pub fn polyline(&mut self, points: impl IntoIterator<Item = (f64, f64)>, color: &str, width: f64) {
        let mut path = String::new();
        for (x, y) in points {
            let _ = write!(path, "{x:.1},{y:.1} ");
        }
        let _ = writeln!(
            self.out,
            r#"<polyline fill="none" stroke="{color}" stroke-width="{width}" points="{}"/>"#,
            path.trim_end()
        );
    }

    /// A legend entry: a short thick line of `color` at (`x`, `y`), then
    /// `name`.
    pub fn legend_entry(&mut self, x: f64, y: f64, color: &str, name: &str) {
        let _ = writeln!(
            self.out,
            r#"<line x1="{x}" y1="{y}" x2="{}" y2="{y}" stroke="{color}" stroke-width="3"/><text x="{}" y="{}">{}</text>"#,
            x + 22.0,
            x + 28.0,
            y + 4.0,
            esc(name)
        );
    }

    /// The finished document.
    pub fn finish(mut self) -> String {
        self.out.push_str("</svg>\n");
        self.out
    }
}

/// One axis of a [`Chart`].
#[derive(Debug, Clone, PartialEq)]
pub struct Axis {
    /// How values map onto it.
    pub scale: Scale,
    /// Grid lines: (value, label).
    pub ticks: Vec<(f64, String)>,
    /// Its title (empty for none).
    pub label: String,
}

/// One line of a [`Chart`].
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Its legend entry (empty for none).
    pub name: String,
    /// Its colour, e.g. from [`color`].
    pub color: &'static str,
    /// Stroke width in pixels.
    pub width: f64,
    /// (x, y) in data units; points with a non-finite coordinate are
    /// skipped.
    pub points: Vec<(f64, f64)>,
}

/// Lines over an x/y frame with a legend on the right.
#[derive(Debug, Clone, PartialEq)]
pub struct Chart {
    /// Title above the frame (empty for none).
    pub title: String,
    /// Font size of the title.
    pub title_size: f64,
    /// The horizontal axis.
    pub x: Axis,
    /// The vertical axis.
    pub y: Axis,
    /// The lines, drawn in order.
    pub series: Vec<Series>,
}

impl Chart {
    /// The pixel position of data point (`x`, `y`) in `f`.
    pub fn position(&self, f: &Frame, x: f64, y: f64) -> (f64, f64) {
        (f.x + self.x.scale.fraction(x) * f.w, f.y + f.h - self.y.scale.fraction(y) * f.h)
    }

    /// Draw the chart into `f` of `svg`: outline, grid lines and labels,
    /// axis titles, the lines, and their legend to the right of the frame
    /// (allow about 150 px there when the series have names).
    pub fn draw(&self, svg: &mut Svg, f: &Frame) {
        if !self.title.is_empty() {
            svg.text(f.x + f.w / 2.0, f.y - 12.0, &self.title, TextStyle::centred(self.title_size));
        }
        svg.outline(f);
        for (v, label) in &self.x.ticks {
            svg.grid_x(f, self.position(f, *v, 0.0).0, label);
        }
        for (v, label) in &self.y.ticks {
            svg.grid_y(f, self.position(f, 0.0, *v).1, label);
        }
        if !self.x.label.is_empty() {
            svg.text(f.x + f.w / 2.0, f.y + f.h + 36.0, &self.x.label, TextStyle::centred(12.0));
        }
        if !self.y.label.is_empty() {
            svg.text_vertical(f.x - 52.0, f.y + f.h / 2.0, &self.y.label);
        }
        for s in &self.series {
            let points = s.points.iter().filter(|(x, y)| x.is_finite() && y.is_finite());
            svg.polyline(points.map(|&(x, y)| self.position(f, x, y)), s.color, s.width);
        }
        let named = self.series.iter().filter(|s| !s.name.is_empty());
        for (i, s) in named.enumerate() {
            svg.legend_entry(f.x + f.w + 20.0, f.y + 10.0 + i as f64 * 18.0, s.color, &s.name);
        }
    }

    /// The chart alone on a page of `width` × `height` pixels.
    pub fn svg(&self, width: f64, height: f64) -> String {
        let mut svg = Svg::new(width, height);
        let legend = if self.series.iter().any(|s| !s.name.is_empty()) { 170.0 } else { 20.0 };
        let f = Frame { x: 70.0, y: 40.0, w: (width - 70.0 - legend).max(10.0), h: (height - 90.0).max(10.0) };
        self.draw(&mut svg, &f);
        svg.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart() -> Chart {
        Chart {
            title: "a <b> & c".into(),
            title_size: 15.0,
            x: Axis { scale: Scale::log_decades([0.5, 42.0]), ticks: Vec::new(), label: "latency (ms)".into() },
            y: Axis {
                scale: Scale::Linear { lo: 0.0, hi: 1.0 },
                ticks: [0.0, 0.5, 1.0].iter().map(|&q| (q, trim(q))).collect(),
                label: "fraction".into(),
            },
            series: vec![
                Series { name: "one".into(), color: color(0), width: 1.8, points: vec![(1.0, 0.5), (10.0, 1.0)] },
                Series { name: String::new(), color: color(1), width: 1.0, points: vec![(f64::NAN, 0.5), (1.0, 0.0)] },
            ],
        }
    }

    #[test]
    fn scales_map_values_onto_the_axis() {
        assert_eq!(Scale::log_decades([0.5, 42.0]), Scale::Log { lo: 0.1, hi: 100.0 });
        assert_eq!(Scale::log_decades([3.0]), Scale::Log { lo: 1.0, hi: 10.0 });
        assert_eq!(Scale::log_decades([0.0, f64::NAN]), Scale::Log { lo: 0.1, hi: 10.0 });
        let log = Scale::Log { lo: 1.0, hi: 100.0 };
        assert_eq!((log.fraction(1.0), log.fraction(10.0), log.fraction(100.0)), (0.0, 0.5, 1.0));
        assert_eq!(log.fraction(0.0), 0.0, "below the axis is drawn at its start");
        let ticks: Vec<String> = log.decade_ticks().into_iter().map(|t| t.1).collect();
        assert_eq!(ticks, ["1", "10", "100"]);
        assert_eq!(Scale::Linear { lo: 10.0, hi: 20.0 }.fraction(15.0), 0.5);
        assert!(Scale::Linear { lo: 0.0, hi: 1.0 }.decade_ticks().is_empty());
    }

    #[test]
    fn zero_to_rounds_up_to_even_steps() {
        let (scale, ticks) = Scale::zero_to(117.0, 6);
        assert_eq!(scale, Scale::Linear { lo: 0.0, hi: 120.0 });
        let labels: Vec<&str> = ticks.iter().map(|t| t.1.as_str()).collect();
        assert_eq!(labels, ["0", "20", "40", "60", "80", "100", "120"]);
        assert_eq!(Scale::zero_to(117.0, 5).0, Scale::Linear { lo: 0.0, hi: 150.0 }, "steps of 50");
        let (scale, ticks) = Scale::zero_to(0.3, 3);
        let Scale::Linear { hi, .. } = scale else { panic!("linear") };
        assert!((hi - 0.3).abs() < 1e-12, "{hi}");
        assert_eq!(ticks.last().unwrap().1, "0.3");
        assert_eq!(Scale::zero_to(0.0, 4).0, Scale::Linear { lo: 0.0, hi: 1.0 });
        assert_eq!(Scale::zero_to(10.0, 4).0, Scale::Linear { lo: 0.0, hi: 10.0 });
    }

    #[test]
    fn a_chart_is_a_document_with_its_lines_grid_and_legend() {
        let c = chart();
        let f = Frame { x: 100.0, y: 50.0, w: 200.0, h: 100.0 };
        let (x, y) = c.position(&f, 1.0, 0.5);
        assert!((x - (100.0 + 200.0 / 3.0)).abs() < 1e-9 && y == 100.0, "{x}, {y}");
        let svg = c.svg(600.0, 300.0);
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert_eq!(svg.matches("stroke=\"#eee\"").count(), 3, "one grid line per y tick");
        assert!(svg.contains("a &lt;b&gt; &amp; c"), "text is escaped");
        assert!(
            svg.contains(">one</text>") && svg.matches("stroke-width=\"3\"").count() == 1,
            "unnamed series have no entry"
        );
        // The NaN point is left out: the second line has a single point.
        let second = svg.lines().find(|l| l.contains(color(1))).unwrap();
        assert_eq!(second.matches(',').count(), 1, "{second}");
    }

    #[test]
    fn numbers_and_text_are_trimmed_and_escaped() {
        assert_eq!(trim(10.0), "10");
        assert_eq!(trim(0.25), "0.25");
        assert_eq!(esc(r#"<"x" & y>"#), "&lt;&quot;x&quot; &amp; y&gt;");
        assert_eq!(color(11), PALETTE[1]);
    }
}

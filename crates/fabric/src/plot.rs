//! The figures of `--plot FILE.svg`, drawn with the shared chart primitives
//! ([`fulcrum_workload::plot`]), one panel below the other on one page:
//!
//! 1. the FCT distribution (CDF over log-scale time) of each flow-size
//!    bucket, all runs pooled;
//! 2. with named ports (`monitor.queue_ports`), each port's queue length
//!    over time — the seed's queue-track figure (packets in the queue
//!    discipline, sampled every `monitor.interval`; with `--runs`, the mean
//!    over the runs);
//! 3. with long-lived flows, each long flow's throughput over time — the
//!    seed's mq figure (Gb/s over each `workload.throughput_interval`).
//!
//! A run without named ports or long flows gets the first panel alone, as
//! before. Long series are thinned to the smallest and largest sample of
//! each of about 1500 slices, so spikes stay visible and the file small.

use fulcrum_workload::plot::{color, Axis, Chart, Frame, Scale, Series, Svg};

use crate::metrics::{bucket_of, BUCKET_LABELS};
use crate::report::Report;

/// Page width and the height of each panel (pixels).
const WIDTH: f64 = 900.0;
const PANEL: f64 = 500.0;
/// Slices a long series is thinned to.
const SLICES: usize = 1500;

/// `(t, v)` points thinned to the smallest and largest value of each of
/// about [`SLICES`] slices, in time order.
fn thin(points: &[(f64, f64)]) -> Vec<(f64, f64)> {
    if points.len() <= 2 * SLICES {
        return points.to_vec();
    }
    let per = points.len().div_ceil(SLICES);
    let mut out = Vec::with_capacity(2 * SLICES + 2);
    for slice in points.chunks(per) {
        let lo = slice.iter().min_by(|a, b| a.1.total_cmp(&b.1)).expect("chunks are non-empty");
        let hi = slice.iter().max_by(|a, b| a.1.total_cmp(&b.1)).expect("chunks are non-empty");
        let (first, second) = if lo.0 <= hi.0 { (lo, hi) } else { (hi, lo) };
        out.push(*first);
        out.push(*second);
    }
    out
}

/// A time axis from 0 to `end_s` seconds.
fn time_axis(end_s: f64) -> Axis {
    let (scale, ticks) = Scale::zero_to(end_s, 8);
    Axis { scale, ticks, label: "time (s)".into() }
}

impl Report<'_> {
    fn fct_chart(&self) -> Chart {
        let mut fct: Vec<Vec<f64>> = vec![Vec::new(); BUCKET_LABELS.len()];
        for f in self.outcomes.iter().flat_map(|o| &o.flows) {
            fct[bucket_of(f.bytes)].push(f.fct_ns as f64 / 1e6);
        }
        let scale = Scale::log_decades(fct.iter().flatten().copied());
        let series = fct
            .iter_mut()
            .zip(BUCKET_LABELS)
            .enumerate()
            .filter(|(_, (v, _))| !v.is_empty())
            .map(|(i, (v, label))| {
                v.sort_by(f64::total_cmp);
                let n = v.len();
                let step = n.div_ceil(400).max(1);
                let mut points: Vec<(f64, f64)> =
                    (0..n).step_by(step).map(|k| (v[k], (k + 1) as f64 / n as f64)).collect();
                points.push((v[n - 1], 1.0));
                Series { name: format!("{label} B ({n})"), color: color(i), width: 2.0, points }
            })
            .collect();
        Chart {
            title: format!("{}: flow completion time by flow size", self.scenario),
            title_size: 15.0,
            x: Axis { scale, ticks: scale.decade_ticks(), label: "FCT (ms)".into() },
            y: Axis {
                scale: Scale::Linear { lo: 0.0, hi: 1.0 },
                ticks: (0..=4).map(|k| (k as f64 / 4.0, format!("{}", k as f64 / 4.0))).collect(),
                label: "fraction of flows".into(),
            },
            series,
        }
    }

    /// Queue length over time of the named ports, if any.
    fn queue_chart(&self) -> Option<Chart> {
        let all = self.queue_series();
        let (_, every, _) = all.first()?;
        let every_s = *every as f64 / 1e9;
        let top = all.iter().flat_map(|s| s.2.iter().copied()).fold(0.0, f64::max);
        let (scale, ticks) = Scale::zero_to(top, 6);
        let end = all.iter().map(|s| s.2.len()).max().unwrap_or(1).saturating_sub(1) as f64 * every_s;
        let series = all
            .iter()
            .enumerate()
            .map(|(i, (port, _, packets))| {
                let points: Vec<(f64, f64)> =
                    packets.iter().enumerate().map(|(k, &p)| (k as f64 * every_s, p)).collect();
                Series { name: port.clone(), color: color(i), width: 1.0, points: thin(&points) }
            })
            .collect();
        let runs =
            if self.outcomes.len() > 1 { format!(", mean of {} runs", self.outcomes.len()) } else { String::new() };
        Some(Chart {
            title: format!("{}: queue length, sampled every {} µs{runs}", self.scenario, every / 1000),
            title_size: 15.0,
            x: time_axis(end),
            y: Axis { scale, ticks, label: "packets in the queue".into() },
            series,
        })
    }

    /// Long flows' throughput over time, if there are long flows.
    fn throughput_chart(&self) -> Option<Chart> {
        let samples = self.throughput();
        let flows = samples.first()?.1.len();
        let top = samples.iter().flat_map(|s| s.1.iter().copied()).fold(0.0, f64::max);
        let (scale, ticks) = Scale::zero_to(top, 5);
        let end = samples.last().map_or(1.0, |s| s.0);
        let series = (0..flows)
            .map(|f| Series {
                name: format!("long flow {f}"),
                color: color(f),
                width: 2.0,
                points: samples.iter().map(|(t, g)| (*t, g[f])).collect(),
            })
            .collect();
        Some(Chart {
            title: format!("{}: long flows' throughput over each interval", self.scenario),
            title_size: 15.0,
            x: time_axis(end),
            y: Axis { scale, ticks, label: "throughput (Gb/s)".into() },
            series,
        })
    }

    /// The figures as one SVG page: the FCT CDFs, then the queue and
    /// throughput panels when the run has them.
    pub fn plot_svg(&self) -> String {
        let fct = self.fct_chart();
        let extra: Vec<Chart> = [self.queue_chart(), self.throughput_chart()].into_iter().flatten().collect();
        if extra.is_empty() {
            return fct.svg(WIDTH, PANEL);
        }
        let mut svg = Svg::new(WIDTH, PANEL * (1 + extra.len()) as f64);
        for (i, chart) in [fct].into_iter().chain(extra).enumerate() {
            let frame = Frame { x: 70.0, y: 40.0 + PANEL * i as f64, w: WIDTH - 70.0 - 170.0, h: PANEL - 90.0 };
            chart.draw(&mut svg, &frame);
        }
        svg.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thinning_keeps_each_slice_extremes_in_time_order() {
        let short: Vec<(f64, f64)> = (0..10).map(|k| (k as f64, k as f64)).collect();
        assert_eq!(thin(&short), short);
        // A lone spike among 30 000 zeros survives.
        let mut long: Vec<(f64, f64)> = (0..30_000).map(|k| (k as f64, 0.0)).collect();
        long[12_345].1 = 99.0;
        let thinned = thin(&long);
        assert!(thinned.len() <= 2 * SLICES);
        assert!(thinned.contains(&(12_345.0, 99.0)));
        assert!(thinned.windows(2).all(|w| w[0].0 <= w[1].0));
    }
}

//! How many requests an endpoint serves at once, fitted from what the
//! proxy measured: each successful request's latency by the requests
//! already in flight to the endpoint when it was picked (its level).
//!
//! An endpoint that serves `c` requests at once and queues the rest, first
//! come first served, answers a request picked at level `k < c` in its
//! service time `a`, and one picked at `k ≥ c` after `k − c + 1` of the
//! requests ahead of it have left as well, one every `a / c` or so. So the
//! mean latency by level is flat, then rises in a straight line from the
//! knee `c`: `W(k) = a + b · max(0, k − c + 1)`. An endpoint without such a
//! limit keeps `W` flat (Little's law, `L = λW`, then only says how many are
//! in flight, not how many could be). For each knee `c` the line is fitted
//! by least squares weighted by each level's standard error, and the knee
//! with the least χ² is the estimate. Its 95 % interval is the knees whose
//! χ² is within 3.84 of the least (the profile likelihood), after dividing
//! by the reduced χ² when the straight line fits worse than the levels'
//! scatter says it should. The flat line (no limit) is a candidate too:
//! when it is inside the interval, no limit is claimed, only a lower bound.
//! A knee is also refused when its slope is far from `a / c`. And the fit
//! assumes arrivals about as irregular as Poisson ones (many independent
//! clients): then the requests in flight vary about as much as their mean
//! (index of dispersion 1, exactly so for a pure delay). When they vary
//! much less, a queue barely forms below capacity, and what rises with the
//! requests in flight is mostly stalls (a busy CPU delays the answers, so
//! more pile up): no limit is claimed then. The bar is
//! [`MIN_DISPERSION_RATIO`] of the larger of 1 and what the simulator gives
//! the endpoint as a pure delay under the cluster's algorithm
//! ([`expected_dispersions`]; about 0.5 for one of three under round
//! robin, whose turns make arrivals steadier). The simulator's value alone
//! is not enough: on a busy machine, stalls lift a fixed-rate load's
//! dispersion under round robin to that level, and knees fitted there
//! for endpoints with no limit sent predictions off by several times.

use serde_json::{json, Value};

/// Fewest requests at a level for it to take part in the fit.
const MIN_REQUESTS: u64 = 20;
/// Δχ² of a 95 % interval for one parameter.
const DELTA_CHI2_95: f64 = 3.84;
/// The slope above the knee may differ from `a / c` by this factor either way.
const SLOPE_FACTOR: f64 = 2.0;
/// Least variance over mean of the requests in flight, relative to the
/// larger of Poisson's (1) and the simulator's for the endpoint, for a limit to be claimed.
pub const MIN_DISPERSION_RATIO: f64 = 0.8;

/// One level's requests and latency moments, as the model gives them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Level {
    /// Requests in flight to the endpoint when these were picked.
    pub level: u64,
    /// Requests.
    pub n: u64,
    /// Sum of their latencies, ns.
    pub sum_ns: u64,
    /// Sum of their squares, µs².
    pub sq_us2: u64,
}

/// What the fit found for one endpoint.
#[derive(Clone, Debug, PartialEq)]
pub struct Fit {
    /// Requests in the levels used.
    pub requests: u64,
    /// Highest level used (with at least [`MIN_REQUESTS`] requests).
    pub max_level: u64,
    /// The estimate, when a limit is seen: `c`, and its 95 % interval.
    pub limit: Option<(u32, u32, u32)>,
    /// Lowest concurrency the data allow (the interval's low end).
    pub at_least: u32,
    /// Mean latency below the knee (or over all levels without one), ms.
    pub unqueued_ms: f64,
    /// Latency added per request in flight above the knee, ms.
    pub per_request_ms: f64,
    /// The levels used: `(level, requests, mean ms)`.
    pub used: Vec<(u64, u64, f64)>,
    /// Variance over mean of the requests in flight (1 for Poisson arrivals to a pure delay).
    pub dispersion: f64,
    /// The same as the simulator has it for this endpoint as a pure delay.
    pub expected_dispersion: f64,
}

/// A weighted straight line `m = a + b·h` through the levels (with `b ≥ 0`):
/// `(a, b, χ²)`.
fn line(points: &[(f64, f64, f64)]) -> (f64, f64, f64) {
    let (mut sw, mut sh, mut sm, mut shh, mut shm) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for &(h, m, w) in points {
        sw += w;
        sh += w * h;
        sm += w * m;
        shh += w * h * h;
        shm += w * h * m;
    }
    let det = sw * shh - sh * sh;
    let (mut a, mut b) = if det > 1e-12 * sw * shh.max(1.0) {
        ((shh * sm - sh * shm) / det, (sw * shm - sh * sm) / det)
    } else {
        (sm / sw, 0.0)
    };
    if b < 0.0 {
        (a, b) = (sm / sw, 0.0);
    }
    let chi2 = points.iter().map(|&(h, m, w)| w * (m - a - b * h).powi(2)).sum();
    (a, b, chi2)
}

/// Fit the levels of one endpoint (a window's differences); `expected` is
/// the dispersion of its requests in flight that the model's arrivals give
/// ([`Fit::expected_dispersion`]).
pub fn fit(levels: &[Level], expected: f64) -> Option<Fit> {
    // The last level counts every request picked at it or above: not one level.
    let last = (fulcrum_proxy::metrics::IN_FLIGHT_LEVELS - 1) as u64;
    // (level, mean ms, weight = 1 / standard error² in ms⁻²)
    let used: Vec<(u64, f64, f64, u64)> = levels
        .iter()
        .filter(|l| l.n >= MIN_REQUESTS && l.level < last)
        .map(|l| {
            let n = l.n as f64;
            let mean_us = l.sum_ns as f64 / 1e3 / n;
            let var_us2 = (l.sq_us2 as f64 / n - mean_us * mean_us).max(0.0);
            // A floor on the scatter: 1 % of the mean, and 50 µs (timers).
            let var_ms2 = (var_us2 / 1e6).max((mean_us / 1e3 * 0.01).powi(2)).max(0.05f64.powi(2));
            (l.level, mean_us / 1e3, n / var_ms2, l.n)
        })
        .collect();
    let max_level = used.iter().map(|u| u.0).max()?;
    let total: f64 = levels.iter().map(|l| l.n as f64).sum();
    let mean_level = levels.iter().map(|l| l.n as f64 * l.level as f64).sum::<f64>() / total;
    let var_level = levels.iter().map(|l| l.n as f64 * (l.level as f64 - mean_level).powi(2)).sum::<f64>() / total;
    let dispersion = var_level / mean_level.max(1e-9);
    let irregular = dispersion >= MIN_DISPERSION_RATIO * expected.max(1.0);
    let requests = levels.iter().filter(|l| l.n >= MIN_REQUESTS && l.level < last).map(|l| l.n).sum();
    let at = |c: u64| -> Vec<(f64, f64, f64)> {
        used.iter().map(|&(k, m, w, _)| ((k + 1).saturating_sub(c) as f64, m, w)).collect()
    };
    let flat = line(&at(u64::MAX));
    // Knees that fit as a queue of c slots would: rising, by about a / c
    // (a knee above the highest level used is the flat line again).
    let knees: Vec<(u32, (f64, f64, f64))> = (1..=max_level)
        .map(|c| (c as u32, line(&at(c))))
        .filter(|&(c, (a, b, _))| {
            let expected = a / f64::from(c);
            b > 0.0 && b >= expected / SLOPE_FACTOR && b <= expected * SLOPE_FACTOR
        })
        .collect();
    let best = knees.iter().map(|k| k.1 .2).fold(flat.2, f64::min);
    let dof = used.len().saturating_sub(3).max(1) as f64;
    let scale = (best / dof).max(1.0);
    let within = |chi2: f64| (chi2 - best) / scale <= DELTA_CHI2_95;
    let inside: Vec<u32> = knees.iter().filter(|k| within(k.1 .2)).map(|k| k.0).collect();
    let no_limit = max_level as u32 + 1;
    let used: Vec<(u64, u64, f64)> = used.iter().map(|&(k, m, _, n)| (k, n, m)).collect();
    let at_least = inside.first().copied().unwrap_or(no_limit);
    let estimate = knees.iter().min_by(|x, y| x.1 .2.total_cmp(&y.1 .2)).filter(|k| within(k.1 .2));
    Some(match estimate {
        Some(&(c, (a, b, _))) if !within(flat.2) && irregular => Fit {
            requests,
            max_level,
            limit: Some((c, at_least, inside.last().copied().unwrap_or(c))),
            at_least,
            unqueued_ms: a,
            per_request_ms: b,
            used,
            dispersion,
            expected_dispersion: expected,
        },
        _ => Fit {
            requests,
            max_level,
            limit: None,
            at_least: if irregular { at_least } else { 1 },
            unqueued_ms: flat.0,
            per_request_ms: 0.0,
            used,
            dispersion,
            expected_dispersion: expected,
        },
    })
}

/// Per server of `scenario`, the dispersion of the requests in flight to
/// it when each was picked, in one run of its first algorithm (1, as for
/// Poisson arrivals, where it was never picked).
pub fn expected_dispersions(scenario: &fulcrum_sim::Scenario) -> Result<Vec<f64>, fulcrum_sim::SimError> {
    let plan = fulcrum_sim::Plan {
        algorithms: vec![scenario.algorithms[0].clone()],
        seed: scenario.seed,
        runs: 1,
        threads: 1,
    };
    let report = fulcrum_sim::simulate(scenario, &plan, None)?;
    let run = &report.results[0].runs[0];
    Ok((0..scenario.servers.len()).map(|s| run.in_flight_dispersion(s).unwrap_or(1.0)).collect())
}

impl Fit {
    /// As JSON, for the current state's check.
    pub fn json(&self, address: &str) -> Value {
        json!({
            "address": address,
            "concurrency": self.limit.map(|l| l.0),
            "low": self.limit.map_or(self.at_least, |l| l.1),
            "high": self.limit.map(|l| l.2),
            "requests": self.requests,
            "max_in_flight": self.max_level,
            "unqueued_ms": self.unqueued_ms,
            "per_request_ms": self.per_request_ms,
            "dispersion": self.dispersion,
            "expected_dispersion": self.expected_dispersion,
            "levels": self.used.iter().map(|&(k, n, m)| json!({ "in_flight": k, "requests": n, "mean_ms": m })).collect::<Vec<_>>(),
        })
    }

    /// One line: the estimate and its interval, or the bound.
    pub fn text(&self) -> String {
        match self.limit {
            Some((c, lo, hi)) => format!(
                "{c} at once (95 %: {lo}–{hi}); {:.3} ms unqueued, +{:.3} ms per request in flight from {c} \
                 ({} requests at 0–{} in flight)",
                self.unqueued_ms, self.per_request_ms, self.requests, self.max_level
            ),
            None if self.dispersion < MIN_DISPERSION_RATIO * self.expected_dispersion.max(1.0) => format!(
                "not fitted: the requests in flight vary {:.2} times as much as their mean, the model's \
                 arrivals {:.2} (at least {MIN_DISPERSION_RATIO} of 1 or more needed; regular arrivals hide a \
                 limit), so a pure delay",
                self.dispersion, self.expected_dispersion
            ),
            None => format!(
                "no limit seen (at least {}): latency does not rise as a queue's would up to {} in flight \
                 ({} requests)",
                self.at_least, self.max_level, self.requests
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BinaryHeap;

    /// Service times spread log-uniformly around 10 ms (about ±40 %).
    const SERVICE: Draw = |r| 10.0 * (0.3 * (r.unit() - 0.5) * 3.4).exp();

    type Draw = fn(&mut fulcrum_balance::Rng) -> f64;

    /// How requests reach the endpoint.
    #[derive(Clone, Copy)]
    enum Arrivals {
        /// Poisson at the rate given.
        Poisson,
        /// One every 1 / rate.
        Regular,
        /// Poisson at `n` times the rate, split by round robin over `n`
        /// endpoints: every `n`-th is this one's.
        RoundRobin(u32),
    }

    /// A first-come-first-served queue of `c` slots fed `arrivals` at
    /// `rate` per ms with service times from `service` (ms): each request's
    /// latency by the requests in the system when it arrived.
    fn queue(c: usize, rate: f64, arrivals: Arrivals, seed: u64, n: usize) -> Vec<Level> {
        let mut rng = fulcrum_balance::Rng::new(seed);
        let mut levels: Vec<Level> = (0..64).map(|i| Level { level: i, n: 0, sum_ns: 0, sq_us2: 0 }).collect();
        // Departure times of the requests in the system (min-heap), and when each slot frees.
        let mut leaving = BinaryHeap::new();
        let mut free = vec![0.0f64; c];
        let mut t = 0.0;
        let exponential = |rng: &mut fulcrum_balance::Rng, rate: f64| -(1.0 - rng.unit()).ln() / rate;
        for _ in 0..n {
            t += match arrivals {
                Arrivals::Poisson => exponential(&mut rng, rate),
                Arrivals::Regular => 1.0 / rate,
                Arrivals::RoundRobin(k) => (0..k).map(|_| exponential(&mut rng, rate * f64::from(k))).sum(),
            };
            while leaving.peek().is_some_and(|&std::cmp::Reverse(d): &std::cmp::Reverse<u64>| (d as f64) / 1e6 <= t) {
                leaving.pop();
            }
            let k = leaving.len().min(63);
            let slot = (0..c).min_by(|&a, &b| free[a].total_cmp(&free[b])).unwrap();
            let start = free[slot].max(t);
            let done = start + SERVICE(&mut rng);
            free[slot] = done;
            leaving.push(std::cmp::Reverse((done * 1e6) as u64));
            let (ns, us) = (((done - t) * 1e6) as u64, ((done - t) * 1e3) as u64);
            levels[k].n += 1;
            levels[k].sum_ns += ns;
            levels[k].sq_us2 += us * us;
        }
        levels
    }

    /// The simulator's dispersion for one of `servers` pure delays of about
    /// 10 ms under `algorithm`, Poisson clients sending `rate` per ms to each.
    fn simulated(algorithm: &str, servers: u32, rate: f64) -> f64 {
        let text = format!(
            "algorithms = [\"{algorithm}\"]\n[clients]\ncount = 10\nloop = \"open\"\nrate = {}\nduration = \"60s\"\n{}",
            rate * 1e3 * f64::from(servers) / 10.0,
            "[[servers]]\nservice = { dist = \"log-normal\", median = \"10ms\", sigma = 0.3 }\n"
                .repeat(servers as usize)
        );
        let s = fulcrum_sim::Scenario::parse(&text, "t.toml", "t", std::path::Path::new(".")).unwrap();
        expected_dispersions(&s).unwrap()[0]
    }

    #[test]
    fn a_queue_of_c_slots_is_found_within_one() {
        for (c, rho) in [(1, 0.6), (4, 0.75), (8, 0.8)] {
            // Log-normal-ish service of mean 10 ms.
            let levels = queue(c, rho * c as f64 / 10.0, Arrivals::Poisson, 7, 20_000);
            let f = fit(&levels, 1.0).unwrap();
            let (est, lo, hi) = f.limit.unwrap_or_else(|| panic!("c = {c}: {f:?}"));
            assert!(est.abs_diff(c as u32) <= 1 && lo <= c as u32 + 1 && hi + 1 >= c as u32, "c = {c}: {f:?}");
            assert!((f.unqueued_ms - 10.0).abs() < 1.5, "c = {c}: {f:?}");
        }
    }

    #[test]
    fn round_robin_turns_are_measured_by_the_simulator_and_still_decline() {
        // One of three endpoints of 4 slots under round robin: its arrivals
        // are steadier than Poisson ones, and the simulator says by how much;
        // the fit still declines (below 0.8 of Poisson's), as stalls on a
        // busy machine reach the same dispersion.
        let expected = simulated("round-robin", 3, 0.3);
        assert!((0.3..0.75).contains(&expected), "round robin over three: {expected}");
        let levels = queue(4, 0.3, Arrivals::RoundRobin(3), 7, 20_000);
        let f = fit(&levels, expected).unwrap();
        assert!(f.dispersion > MIN_DISPERSION_RATIO * expected && f.dispersion < MIN_DISPERSION_RATIO, "{f:?}");
        assert_eq!(f.limit, None, "{f:?}");
        assert!(f.text().starts_with("not fitted"), "{}", f.text());
        // Random picks are Poisson again.
        assert!((simulated("random", 3, 0.3) - 1.0).abs() < 0.1);
    }

    #[test]
    fn the_interval_holds_the_true_limit_about_as_often_as_it_says() {
        // 40 windows of 3,000 requests into 4 slots: a 95 % interval that
        // misses the true c in more than 4 of them is too narrow.
        let missed = (0..40)
            .filter(|&seed| {
                let f = fit(&queue(4, 0.3, Arrivals::Poisson, seed, 3_000), 1.0).unwrap();
                !f.limit.is_some_and(|(_, lo, hi)| (lo..=hi).contains(&4))
            })
            .count();
        assert!(missed <= 4, "the interval missed c = 4 in {missed} of 40 windows");
    }

    #[test]
    fn a_pure_delay_has_no_limit_but_a_bound() {
        let levels = queue(1000, 2.0, Arrivals::Poisson, 7, 20_000);
        let f = fit(&levels, 1.0).unwrap();
        assert_eq!(f.limit, None, "{f:?}");
        assert!(f.at_least >= 20 && f.max_level >= 25, "{f:?}");
        assert!((f.dispersion - 1.0).abs() < 0.15, "Poisson arrivals to a pure delay: {f:?}");
        assert!(f.text().contains("no limit seen"));
        assert_eq!(fit(&[], 1.0), None);
        assert!((simulated("round-robin", 1, 2.0) - 1.0).abs() < 0.1, "the simulator agrees");
    }

    #[test]
    fn regular_arrivals_claim_no_limit() {
        // A fixed rate into 4 slots at 90 %: a real limit, but the requests
        // in flight barely vary against the model's Poisson arrivals, so the
        // fit declines to claim it.
        let levels = queue(4, 0.36, Arrivals::Regular, 7, 20_000);
        let f = fit(&levels, simulated("round-robin", 1, 0.36)).unwrap();
        assert_eq!(f.limit, None, "{f:?}");
        assert!(f.dispersion < MIN_DISPERSION_RATIO * f.expected_dispersion.max(1.0), "{f:?}");
        assert!(f.text().starts_with("not fitted"), "{}", f.text());
    }
}

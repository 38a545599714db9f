//! What a test backend draws for each request: a service time (a
//! [`Dist`], shared with the simulator) and a status code ([`StatusMix`]),
//! with their command-line syntax.
//!
//! Service times take every shape of [`Dist`] in its command-line form:
//! `5ms` (fixed), `uniform(1ms,9ms)`, `uniform-ms(10ms,50ms)`,
//! `exponential(5ms)` (the mean; `exp(5ms)` for short),
//! `log-normal(5ms,0.5)` (median, sigma) and `empirical(file.txt)`; a plain
//! duration can instead be given a shape by [`DelayShape`]. Status mixes:
//! `200`, or `200:0.99,503:0.01` (weights, normalised). Lists repeat an
//! item with `X*N`: `5ms*9,50ms` is nine 5 ms backends and one at 50 ms
//! ([`expand_list`]).

use std::str::FromStr;
use std::time::Duration;

use fulcrum_balance::Rng;
use fulcrum_workload::dist::nanos;
pub use fulcrum_workload::dist::{parse_duration, ParseError};
pub use fulcrum_workload::Dist;
use http::StatusCode;

/// The shape of a delay whose scale is given as one duration, as
/// `fulcrum backend --delay-dist` applies it to each of `--delays`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DelayShape {
    /// Exactly the duration.
    Fixed,
    /// Uniform on [0, 2·d): mean d.
    Uniform,
    /// Exponential with mean d.
    Exponential,
}

impl DelayShape {
    /// The delay of this shape whose mean is `mean`.
    pub fn with_mean(self, mean: Duration) -> Dist {
        let mean = nanos(mean);
        match self {
            DelayShape::Fixed => Dist::Fixed(mean),
            DelayShape::Uniform => Dist::Uniform { min: 0, max: mean.saturating_mul(2) },
            DelayShape::Exponential => Dist::Exponential { mean: mean as f64 },
        }
    }
}

impl FromStr for DelayShape {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Self, ParseError> {
        match s {
            "fixed" => Ok(DelayShape::Fixed),
            "uniform" => Ok(DelayShape::Uniform),
            "exponential" | "exp" => Ok(DelayShape::Exponential),
            _ => Err(ParseError(format!("unknown delay distribution {s:?} (fixed, uniform, exponential)"))),
        }
    }
}

/// Status codes with their probabilities.
#[derive(Debug, Clone, PartialEq)]
pub struct StatusMix {
    /// (code, cumulative probability); the last is 1.
    cumulative: Vec<(StatusCode, f64)>,
}

impl StatusMix {
    /// Always `code`.
    pub fn always(code: StatusCode) -> StatusMix {
        StatusMix { cumulative: vec![(code, 1.0)] }
    }

    /// Codes with weights (normalised; at least one must be positive).
    pub fn weighted(weights: &[(StatusCode, f64)]) -> Result<StatusMix, ParseError> {
        let total: f64 = weights.iter().map(|&(_, w)| w).sum();
        if weights.iter().any(|&(_, w)| !(w >= 0.0 && w.is_finite())) || !(total > 0.0 && total.is_finite()) {
            return Err(ParseError("status weights must be non-negative and not all zero".into()));
        }
        let mut acc = 0.0;
        let mut cumulative: Vec<(StatusCode, f64)> = weights
            .iter()
            .map(|&(code, w)| {
                acc += w / total;
                (code, acc)
            })
            .collect();
        if let Some(last) = cumulative.last_mut() {
            last.1 = 1.0; // rounding must not leave a gap above the last code
        }
        Ok(StatusMix { cumulative })
    }

    /// One status code.
    pub fn sample(&self, rng: &mut Rng) -> StatusCode {
        if let [(only, _)] = self.cumulative.as_slice() {
            return *only;
        }
        let u = rng.unit();
        self.cumulative.iter().find(|&&(_, c)| u < c).map_or(self.cumulative[self.cumulative.len() - 1].0, |&(s, _)| s)
    }
}

impl Default for StatusMix {
    fn default() -> Self {
        StatusMix::always(StatusCode::OK)
    }
}

impl FromStr for StatusMix {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Self, ParseError> {
        let code = |c: &str| {
            c.trim()
                .parse::<u16>()
                .ok()
                .filter(|c| (100..=599).contains(c))
                .and_then(|c| StatusCode::from_u16(c).ok())
                .ok_or_else(|| ParseError(format!("{c:?} is not an HTTP status code (100–599)")))
        };
        let weights = s
            .split(',')
            .map(|item| match item.split_once(':') {
                None => Ok((code(item)?, 1.0)),
                Some((c, w)) => {
                    let w = w.trim().parse::<f64>().map_err(|_| ParseError(format!("{w:?} is not a weight")))?;
                    Ok((code(c)?, w))
                }
            })
            .collect::<Result<Vec<_>, ParseError>>()?;
        StatusMix::weighted(&weights).map_err(|e| ParseError(format!("{s:?}: {e}")))
    }
}

/// Split a comma-separated list whose items may repeat as `X*N`, keeping
/// commas inside parentheses: `uniform(1ms,2ms)*2,5ms` gives three items.
pub fn expand_list(s: &str) -> Result<Vec<String>, ParseError> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    if depth != 0 {
        return Err(ParseError(format!("{s:?}: unbalanced parentheses")));
    }
    let mut items = Vec::new();
    for part in parts {
        let part = part.trim();
        let (item, times) = match part.rsplit_once('*') {
            Some((x, n)) if !n.contains(')') => {
                let n = n.trim().parse::<usize>().ok().filter(|n| (1..=10_000).contains(n));
                (x.trim(), n.ok_or_else(|| ParseError(format!("{part:?}: the repeat count must be 1 to 10000")))?)
            }
            _ => (part, 1),
        };
        if item.is_empty() {
            return Err(ParseError(format!("{s:?}: empty item in the list")));
        }
        items.extend((0..times).map(|_| item.to_string()));
    }
    Ok(items)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn test_delay_shapes() {
        assert_eq!(DelayShape::Uniform.with_mean(5 * MS), Dist::Uniform { min: 0, max: 10_000_000 });
        assert_eq!(DelayShape::Exponential.with_mean(5 * MS), "exp(5ms)".parse().unwrap());
        assert_eq!(DelayShape::Fixed.with_mean(5 * MS), "5ms".parse().unwrap());
        assert!("normal".parse::<DelayShape>().is_err());
    }

    /// A backend's delay may be any shape the simulator knows: a log-normal
    /// on the command line parses and draws around its median.
    #[test]
    fn a_backend_delay_can_be_log_normal() {
        let d: Dist = "log-normal(4ms, 0.5)".parse().unwrap();
        let mut rng = Rng::new(7);
        let mut v: Vec<Duration> = (0..20_001).map(|_| d.sample_duration(&mut rng)).collect();
        v.sort_unstable();
        let median = v[10_000].as_secs_f64();
        assert!((median / 0.004 - 1.0).abs() < 0.03, "{median}");
        assert!(v[19_800] > 2 * v[10_000], "a long tail: p99 {:?} vs p50 {:?}", v[19_800], v[10_000]);
    }

    #[test]
    fn test_expand_list() {
        assert_eq!(expand_list("5ms*3,50ms").unwrap(), ["5ms", "5ms", "5ms", "50ms"]);
        assert_eq!(expand_list("uniform(1ms,2ms)*2, 7ms").unwrap(), ["uniform(1ms,2ms)", "uniform(1ms,2ms)", "7ms"]);
        assert!(expand_list("5ms*0").is_err());
        assert!(expand_list("5ms,,6ms").is_err());
        assert!(expand_list("uniform(1ms,2ms").is_err());
    }

    #[test]
    fn test_parse_status_mix_and_sample_it() {
        assert_eq!("200".parse(), Ok(StatusMix::always(StatusCode::OK)));
        let mix: StatusMix = "200:0.75, 503:0.25".parse().unwrap();
        let mut rng = Rng::new(1);
        let errors = (0..10_000).filter(|_| mix.sample(&mut rng) == StatusCode::SERVICE_UNAVAILABLE).count();
        assert!((2_200..2_800).contains(&errors), "{errors}");
        for bad in ["", "200:x", "700", "200:-1", "200:0,503:0"] {
            assert!(bad.parse::<StatusMix>().is_err(), "{bad}");
        }
    }
}

//! What a test backend draws for each request: a service time ([`Delay`])
//! and a status code ([`StatusMix`]), with their command-line syntax.
//!
//! Delays: `5ms` (fixed), `uniform(1ms,9ms)`, `exponential(5ms)` (the mean;
//! `exp(5ms)` for short). Status mixes: `200`, or `200:0.99,503:0.01`
//! (weights, normalised). Lists repeat an item with `X*N`: `5ms*9,50ms` is
//! nine 5 ms backends and one at 50 ms ([`expand_list`]).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use fulcrum_balance::Rng;
use http::StatusCode;

/// A value on the command line or in the API that cannot be used; the
/// message says which and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ParseError(pub String);

/// A service-time distribution.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Delay {
    /// Always this long.
    Fixed(Duration),
    /// Uniform between the two bounds (low, high).
    Uniform(Duration, Duration),
    /// Exponential with this mean.
    Exponential(Duration),
}

/// The shape of a delay whose scale is given as one duration, as
/// `fulcrum backend --delay-dist` applies it to each of `--delays`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DelayShape {
    /// Exactly the duration.
    Fixed,
    /// Uniform on [0, 2·d]: mean d.
    Uniform,
    /// Exponential with mean d.
    Exponential,
}

impl DelayShape {
    /// The delay of this shape whose mean is `mean`.
    pub fn with_mean(self, mean: Duration) -> Delay {
        match self {
            DelayShape::Fixed => Delay::Fixed(mean),
            DelayShape::Uniform => Delay::Uniform(Duration::ZERO, mean * 2),
            DelayShape::Exponential => Delay::Exponential(mean),
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

impl Delay {
    /// No delay at all.
    pub const ZERO: Delay = Delay::Fixed(Duration::ZERO);

    /// One service time.
    pub fn sample(&self, rng: &mut Rng) -> Duration {
        match *self {
            Delay::Fixed(d) => d,
            Delay::Uniform(lo, hi) => lo + (hi - lo).mul_f64(rng.unit()),
            // Inverse transform; 1 − u is in (0, 1], so the logarithm is finite.
            Delay::Exponential(mean) => mean.mul_f64(-(1.0 - rng.unit()).ln()),
        }
    }

    /// The mean service time.
    pub fn mean(&self) -> Duration {
        match *self {
            Delay::Fixed(d) | Delay::Exponential(d) => d,
            Delay::Uniform(lo, hi) => (lo + hi) / 2,
        }
    }
}

/// Parse a duration such as `5ms`, `1.5s` or `250us`.
pub fn parse_duration(s: &str) -> Result<Duration, ParseError> {
    let s = s.trim();
    humantime::parse_duration(s).map_err(|e| ParseError(format!("{s:?} is not a duration like 5ms or 1s: {e}")))
}

impl FromStr for Delay {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Self, ParseError> {
        let s = s.trim();
        let Some((name, args)) = s.strip_suffix(')').and_then(|s| s.split_once('(')) else {
            return parse_duration(s).map(Delay::Fixed);
        };
        let args: Vec<&str> = args.split(',').collect();
        match (name.trim(), args.as_slice()) {
            ("fixed", [d]) => parse_duration(d).map(Delay::Fixed),
            ("uniform", [lo, hi]) => {
                let (lo, hi) = (parse_duration(lo)?, parse_duration(hi)?);
                if lo > hi {
                    return Err(ParseError(format!("{s}: the low bound is above the high one")));
                }
                Ok(Delay::Uniform(lo, hi))
            }
            ("exponential" | "exp", [mean]) => parse_duration(mean).map(Delay::Exponential),
            _ => {
                Err(ParseError(format!("{s:?} is not a delay: 5ms, fixed(5ms), uniform(1ms,9ms) or exponential(5ms)")))
            }
        }
    }
}

impl fmt::Display for Delay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = |d: Duration| humantime::format_duration(d).to_string();
        match *self {
            Delay::Fixed(x) => write!(f, "{}", d(x)),
            Delay::Uniform(lo, hi) => write!(f, "uniform({},{})", d(lo), d(hi)),
            Delay::Exponential(m) => write!(f, "exponential({})", d(m)),
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
    fn test_parse_delays() {
        assert_eq!("5ms".parse(), Ok(Delay::Fixed(5 * MS)));
        assert_eq!("fixed(5ms)".parse(), Ok(Delay::Fixed(5 * MS)));
        assert_eq!("uniform(1ms, 9ms)".parse(), Ok(Delay::Uniform(MS, 9 * MS)));
        assert_eq!("exp(5ms)".parse(), Ok(Delay::Exponential(5 * MS)));
        assert!("uniform(9ms,1ms)".parse::<Delay>().is_err());
        assert!("normal(5ms)".parse::<Delay>().is_err());
        assert!("5 parsecs".parse::<Delay>().is_err());
        assert_eq!(DelayShape::Uniform.with_mean(5 * MS), Delay::Uniform(Duration::ZERO, 10 * MS));
    }

    #[test]
    fn test_emit_delays_round_trip() {
        for d in [Delay::Fixed(5 * MS), Delay::Uniform(MS, 9 * MS), Delay::Exponential(50 * MS)] {
            assert_eq!(d.to_string().parse(), Ok(d));
        }
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
    fn samples_stay_in_range_and_have_the_right_mean() {
        let mut rng = Rng::new(7);
        let n = 20_000;
        let u = Delay::Uniform(2 * MS, 4 * MS);
        let e = Delay::Exponential(5 * MS);
        let (mut su, mut se) = (Duration::ZERO, Duration::ZERO);
        for _ in 0..n {
            let x = u.sample(&mut rng);
            assert!((2 * MS..=4 * MS).contains(&x));
            su += x;
            se += e.sample(&mut rng);
        }
        assert!(((su / n).as_secs_f64() - 0.003).abs() < 0.0001);
        assert!(((se / n).as_secs_f64() - 0.005).abs() < 0.0003);
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

//! Random durations: service times, network latencies, first-contact delays.
//!
//! [`Dist`] is what a scenario writes (`"5ms"`, or a table such as
//! `{ dist = "uniform-ms", min = "10ms", max = "50ms" }`); it is validated
//! while the TOML is read, so a bad parameter is reported with its line.
//! [`Dist::sample`] draws a value in integer nanoseconds from the caller's
//! [`Rng`], which keeps every draw reproducible from the run's seed.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use fulcrum_balance::{Nanos, Rng, MILLISECOND};
use serde::Deserialize;

/// A distribution of durations.
#[derive(Clone, Debug, PartialEq)]
pub enum Dist {
    /// Always the same value.
    Fixed(Nanos),
    /// Uniform over the continuous interval `[min, max)`.
    Uniform {
        /// Smallest value.
        min: Nanos,
        /// Bound above (exclusive).
        max: Nanos,
    },
    /// Uniform over the whole milliseconds of `[min, max)`, as tower's demo
    /// draws them (`gen_range(min_ms, max_ms)`).
    UniformMs {
        /// Smallest value, whole milliseconds.
        min_ms: u64,
        /// Bound above (exclusive), whole milliseconds.
        max_ms: u64,
    },
    /// Exponential with the given mean.
    Exponential {
        /// The mean.
        mean: f64,
    },
    /// Log-normal: `median · exp(sigma · N(0, 1))`.
    LogNormal {
        /// The median (the mean is `median · exp(sigma²/2)`).
        median: f64,
        /// The standard deviation of the underlying normal.
        sigma: f64,
    },
    /// Drawn uniformly from measured values.
    Empirical(Arc<Vec<Nanos>>),
}

impl Dist {
    /// Draw one value.
    #[inline]
    pub fn sample(&self, rng: &mut Rng) -> Nanos {
        match self {
            Dist::Fixed(v) => *v,
            Dist::Uniform { min, max } => {
                if max <= min {
                    *min
                } else {
                    min + rng.below(max - min)
                }
            }
            Dist::UniformMs { min_ms, max_ms } => (min_ms + rng.below(max_ms - min_ms)) * MILLISECOND,
            Dist::Exponential { mean } => {
                // 1 − unit() is in (0, 1], so the logarithm is finite.
                let u = 1.0 - rng.unit();
                to_nanos(-mean * u.ln())
            }
            Dist::LogNormal { median, sigma } => to_nanos(median * (sigma * standard_normal(rng)).exp()),
            Dist::Empirical(values) => values[rng.below(values.len() as u64) as usize],
        }
    }

    /// The mean of the distribution, in nanoseconds.
    pub fn mean(&self) -> f64 {
        match self {
            Dist::Fixed(v) => *v as f64,
            Dist::Uniform { min, max } => (*min as f64 + (*max).max(*min) as f64) / 2.0,
            Dist::UniformMs { min_ms, max_ms } => (*min_ms + *max_ms - 1) as f64 / 2.0 * MILLISECOND as f64,
            Dist::Exponential { mean } => *mean,
            Dist::LogNormal { median, sigma } => median * (sigma * sigma / 2.0).exp(),
            Dist::Empirical(v) => v.iter().map(|&x| x as f64).sum::<f64>() / v.len() as f64,
        }
    }

    /// True when every draw is zero (lets the engine skip a hop's event).
    pub fn is_zero(&self) -> bool {
        matches!(self, Dist::Fixed(0))
    }
}

fn to_nanos(x: f64) -> Nanos {
    if x.is_finite() && x > 0.0 {
        x.min(u64::MAX as f64 / 2.0) as Nanos
    } else {
        0
    }
}

/// A standard normal draw (Box–Muller; one of the pair is discarded so that
/// a draw consumes a fixed number of random words).
fn standard_normal(rng: &mut Rng) -> f64 {
    let u1 = 1.0 - rng.unit();
    let u2 = rng.unit();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

pub(crate) fn nanos(d: Duration) -> Nanos {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[derive(Deserialize)]
#[serde(tag = "dist", rename_all = "kebab-case", deny_unknown_fields)]
enum DistTable {
    Fixed {
        #[serde(with = "humantime_serde")]
        value: Duration,
    },
    Uniform {
        #[serde(with = "humantime_serde")]
        min: Duration,
        #[serde(with = "humantime_serde")]
        max: Duration,
    },
    UniformMs {
        #[serde(with = "humantime_serde")]
        min: Duration,
        #[serde(with = "humantime_serde")]
        max: Duration,
    },
    Exponential {
        #[serde(with = "humantime_serde")]
        mean: Duration,
    },
    LogNormal {
        #[serde(with = "humantime_serde")]
        median: Duration,
        sigma: f64,
    },
    Empirical {
        file: PathBuf,
    },
}

// Where relative `empirical` file names are resolved while a scenario is
// being read (set by `Scenario::parse`).
thread_local! {
    pub(crate) static BASE_DIR: std::cell::RefCell<PathBuf> = std::cell::RefCell::new(PathBuf::from("."));
}

/// Read an empirical sample file: one value in milliseconds per line; blank
/// lines and lines starting with `#` are skipped.
pub fn read_empirical(path: &Path) -> Result<Vec<Nanos>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let mut values = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let ms: f64 = line
            .parse()
            .map_err(|_| format!("{}:{}: expected a latency in milliseconds, found {line:?}", path.display(), i + 1))?;
        if !(ms.is_finite() && ms >= 0.0) {
            return Err(format!("{}:{}: latency {ms} must be a finite number ≥ 0", path.display(), i + 1));
        }
        values.push((ms * MILLISECOND as f64).round() as Nanos);
    }
    if values.is_empty() {
        return Err(format!("{} holds no latency values", path.display()));
    }
    Ok(values)
}

impl<'de> Deserialize<'de> for Dist {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        // Read a generic value first so that a table's own errors (an unknown
        // field, a missing `max`) reach the user rather than "no variant matched".
        let table = match toml::Value::deserialize(deserializer)? {
            toml::Value::String(s) => {
                let d = humantime::parse_duration(&s)
                    .map_err(|e| D::Error::custom(format!("{s:?} is not a duration ({e}); write e.g. \"5ms\"")))?;
                return Ok(Dist::Fixed(nanos(d)));
            }
            v @ toml::Value::Table(_) => v.try_into::<DistTable>().map_err(|e| D::Error::custom(e.message()))?,
            _ => {
                return Err(D::Error::custom(
                    "expected a duration such as \"5ms\" or a table with dist = \"fixed\" | \"uniform\" | \
                     \"uniform-ms\" | \"exponential\" | \"log-normal\" | \"empirical\"",
                ))
            }
        };
        Ok(match table {
            DistTable::Fixed { value } => Dist::Fixed(nanos(value)),
            DistTable::Uniform { min, max } => {
                if max < min {
                    return Err(D::Error::custom(format!("uniform: max ({max:?}) is below min ({min:?})")));
                }
                Dist::Uniform { min: nanos(min), max: nanos(max) }
            }
            DistTable::UniformMs { min, max } => {
                let (min_ms, max_ms) = (min.as_millis() as u64, max.as_millis() as u64);
                if nanos(min) != min_ms * MILLISECOND || nanos(max) != max_ms * MILLISECOND {
                    return Err(D::Error::custom("uniform-ms: min and max must be whole milliseconds"));
                }
                if max_ms <= min_ms {
                    return Err(D::Error::custom(format!(
                        "uniform-ms: max ({max_ms}ms, exclusive) must be above min ({min_ms}ms)"
                    )));
                }
                Dist::UniformMs { min_ms, max_ms }
            }
            DistTable::Exponential { mean } => Dist::Exponential { mean: nanos(mean) as f64 },
            DistTable::LogNormal { median, sigma } => {
                if !(sigma.is_finite() && sigma >= 0.0) {
                    return Err(D::Error::custom(format!("log-normal: sigma = {sigma} must be a finite number ≥ 0")));
                }
                Dist::LogNormal { median: nanos(median) as f64, sigma }
            }
            DistTable::Empirical { file } => {
                let path = BASE_DIR.with(|b| b.borrow().join(&file));
                Dist::Empirical(Arc::new(read_empirical(&path).map_err(D::Error::custom)?))
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize)]
    struct Doc {
        d: Dist,
    }

    fn parse(s: &str) -> Result<Dist, String> {
        toml::from_str::<Doc>(s).map(|d| d.d).map_err(|e| e.to_string())
    }

    #[test]
    fn parse_each_form() {
        assert_eq!(parse("d = \"5ms\"").unwrap(), Dist::Fixed(5 * MILLISECOND));
        assert_eq!(parse("d = { dist = \"fixed\", value = \"2s\" }").unwrap(), Dist::Fixed(2_000 * MILLISECOND));
        assert_eq!(
            parse("d = { dist = \"uniform-ms\", min = \"10ms\", max = \"50ms\" }").unwrap(),
            Dist::UniformMs { min_ms: 10, max_ms: 50 }
        );
        assert_eq!(
            parse("d = { dist = \"uniform\", min = \"0ms\", max = \"10ms\" }").unwrap(),
            Dist::Uniform { min: 0, max: 10 * MILLISECOND }
        );
        assert!(matches!(
            parse("d = { dist = \"log-normal\", median = \"5ms\", sigma = 0.5 }"),
            Ok(Dist::LogNormal { .. })
        ));
        assert!(matches!(parse("d = { dist = \"exponential\", mean = \"5ms\" }"), Ok(Dist::Exponential { .. })));
    }

    #[test]
    fn bad_parameters_name_the_line() {
        let err = parse("\nd = { dist = \"uniform\", min = \"10ms\", max = \"5ms\" }").unwrap_err();
        assert!(err.contains("line 2") && err.contains("max"), "{err}");
        let err = parse("d = { dist = \"uniform-ms\", min = \"1ms\", max = \"1ms\" }").unwrap_err();
        assert!(err.contains("must be above min"), "{err}");
        let err = parse("d = { dist = \"gamma\" }").unwrap_err();
        assert!(err.contains("gamma"), "{err}");
        let err = parse("d = { dist = \"uniform\", min = \"1ms\", maxx = \"5ms\" }").unwrap_err();
        assert!(err.contains("maxx"), "{err}");
        let err = parse("d = 5").unwrap_err();
        assert!(err.contains("expected a duration"), "{err}");
        let err = parse("d = \"5 parsecs\"").unwrap_err();
        assert!(err.contains("not a duration"), "{err}");
        let err = parse("d = { dist = \"empirical\", file = \"/nonexistent/x.txt\" }").unwrap_err();
        assert!(err.contains("cannot read"), "{err}");
    }

    #[test]
    fn samples_stay_in_range_with_the_right_mean() {
        let mut rng = Rng::new(3);
        let cases = [
            Dist::UniformMs { min_ms: 10, max_ms: 50 },
            Dist::Uniform { min: 0, max: 10 * MILLISECOND },
            Dist::Exponential { mean: 5e6 },
            Dist::LogNormal { median: 5e6, sigma: 0.5 },
            Dist::Empirical(Arc::new(vec![MILLISECOND, 3 * MILLISECOND])),
        ];
        for d in cases {
            let n = 200_000;
            let mut sum = 0.0;
            for _ in 0..n {
                let v = d.sample(&mut rng);
                if let Dist::UniformMs { min_ms, max_ms } = d {
                    assert!(v % MILLISECOND == 0 && v >= min_ms * MILLISECOND && v < max_ms * MILLISECOND);
                }
                sum += v as f64;
            }
            let mean = sum / n as f64;
            assert!((mean / d.mean() - 1.0).abs() < 0.02, "{d:?}: {mean} vs {}", d.mean());
        }
    }

    #[test]
    fn empirical_file_format() {
        let dir = std::env::temp_dir().join(format!("fulcrum-emp-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("lat.txt");
        std::fs::write(&f, "# ms\n1.5\n\n2\n").unwrap();
        assert_eq!(read_empirical(&f).unwrap(), vec![1_500_000, 2_000_000]);
        std::fs::write(&f, "1\nfast\n").unwrap();
        assert!(read_empirical(&f).unwrap_err().contains(":2:"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

//! Random durations: service times, network latencies, first-contact delays,
//! the delays of test backends.
//!
//! [`Dist`] is written two ways, both parsed here so that a scenario and a
//! command line describe the same shapes with the same parameters:
//!
//! - in a scenario (serde, e.g. TOML): `"5ms"`, or a table such as
//!   `{ dist = "uniform-ms", min = "10ms", max = "50ms" }`; a bad parameter
//!   is reported through the deserializer, which names its line;
//! - on a command line ([`FromStr`]): `5ms`, `fixed(5ms)`,
//!   `uniform(1ms,9ms)`, `uniform-ms(10ms,50ms)`, `exponential(5ms)` (or
//!   `exp(5ms)`, the mean), `log-normal(5ms,0.5)` (median, sigma) and
//!   `empirical(file.txt)`.
//!
//! [`Dist::sample`] draws a value in integer nanoseconds from the caller's
//! [`Rng`], so every draw is reproducible from a seed: the simulator's runs
//! and the test backends draw the same sequence for the same seed. The
//! log-normal draw is the usual `median · exp(sigma · Z)` with `Z` from the
//! Box–Muller transform (Box & Muller, "A note on the generation of random
//! normal deviates", 1958).

use std::cell::RefCell;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use fulcrum_base::{Nanos, Rng, MILLISECOND};
use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

/// A distribution written on a command line that cannot be used; the
/// message says which and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ParseError(pub String);

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
    /// Exponential with the given mean (nanoseconds).
    Exponential {
        /// The mean.
        mean: f64,
    },
    /// Log-normal: `median · exp(sigma · N(0, 1))`.
    LogNormal {
        /// The median in nanoseconds (the mean is `median · exp(sigma²/2)`).
        median: f64,
        /// The standard deviation of the underlying normal.
        sigma: f64,
    },
    /// Drawn uniformly from measured values.
    Empirical(Arc<Vec<Nanos>>),
}

impl Dist {
    /// No delay at all.
    pub const ZERO: Dist = Dist::Fixed(0);

    /// Always `d`.
    pub fn fixed(d: Duration) -> Dist {
        Dist::Fixed(nanos(d))
    }

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

    /// One value as a [`Duration`] (what a live backend sleeps).
    pub fn sample_duration(&self, rng: &mut Rng) -> Duration {
        Duration::from_nanos(self.sample(rng))
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

    /// The same distribution with every value multiplied by `factor` (> 0):
    /// a server made that much slower or faster (whole-millisecond uniform
    /// draws become continuous ones).
    pub fn scaled(&self, factor: f64) -> Dist {
        let x = |v: Nanos| to_nanos(v as f64 * factor);
        match self {
            Dist::Fixed(v) => Dist::Fixed(x(*v)),
            Dist::Uniform { min, max } => Dist::Uniform { min: x(*min), max: x(*max) },
            Dist::UniformMs { min_ms, max_ms } => {
                Dist::Uniform { min: x(min_ms * MILLISECOND), max: x(max_ms * MILLISECOND) }
            }
            Dist::Exponential { mean } => Dist::Exponential { mean: mean * factor },
            Dist::LogNormal { median, sigma } => Dist::LogNormal { median: median * factor, sigma: *sigma },
            Dist::Empirical(v) => Dist::Empirical(Arc::new(v.iter().map(|&v| x(v)).collect())),
        }
    }

    /// True when every draw is zero (lets the simulator skip a hop's event).
    pub fn is_zero(&self) -> bool {
        matches!(self, Dist::Fixed(0))
    }
}

/// A draw in nanoseconds: truncated, 0 for anything not finite and
/// positive, at most 2^63.
#[inline]
fn to_nanos(x: f64) -> Nanos {
    // 2^63, exactly (`u64::MAX as f64 / 2.0`, the cap from the start).
    const CAP: f64 = 9_223_372_036_854_775_808.0;
    // The common case in one comparison pair and a signed conversion (in
    // range, so it truncates as the unsigned one would): two draws per
    // simulated request go through here.
    if x > 0.0 && x < CAP {
        x as i64 as Nanos
    } else if x >= CAP && x.is_finite() {
        CAP as Nanos
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

/// A duration in integer nanoseconds, saturating past 584 years.
pub use fulcrum_base::nanos;

// Where relative `empirical` file names are resolved (see `with_base_dir`).
thread_local! {
    static BASE_DIR: RefCell<PathBuf> = RefCell::new(PathBuf::from("."));
}

/// Run `f` with relative `empirical` file names resolved against `dir`
/// (a scenario's directory while the scenario is read); the previous
/// directory is restored afterwards.
pub fn with_base_dir<R>(dir: &Path, f: impl FnOnce() -> R) -> R {
    let previous = BASE_DIR.with(|b| b.replace(dir.to_path_buf()));
    let result = f();
    BASE_DIR.with(|b| *b.borrow_mut() = previous);
    result
}

fn resolve(file: &Path) -> PathBuf {
    BASE_DIR.with(|b| b.borrow().join(file))
}

/// Read an empirical sample file: one value in milliseconds per line; blank
/// lines and lines starting with `#` are skipped.
pub fn read_empirical(path: &Path) -> Result<Vec<Nanos>, String> {
    let text = fulcrum_config::read_input(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
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

// Constructors shared by both syntaxes, so that a parameter is checked the
// same way whether it comes from a scenario or a command line.

fn uniform(min: Duration, max: Duration) -> Result<Dist, String> {
    if max < min {
        return Err(format!("uniform: max ({max:?}) is below min ({min:?})"));
    }
    Ok(Dist::Uniform { min: nanos(min), max: nanos(max) })
}

fn uniform_ms(min: Duration, max: Duration) -> Result<Dist, String> {
    let (min_ms, max_ms) = (min.as_millis() as u64, max.as_millis() as u64);
    if nanos(min) != min_ms * MILLISECOND || nanos(max) != max_ms * MILLISECOND {
        return Err("uniform-ms: min and max must be whole milliseconds".into());
    }
    if max_ms <= min_ms {
        return Err(format!("uniform-ms: max ({max_ms}ms, exclusive) must be above min ({min_ms}ms)"));
    }
    Ok(Dist::UniformMs { min_ms, max_ms })
}

fn log_normal(median: Duration, sigma: f64) -> Result<Dist, String> {
    if !(sigma.is_finite() && sigma >= 0.0) {
        return Err(format!("log-normal: sigma = {sigma} must be a finite number ≥ 0"));
    }
    Ok(Dist::LogNormal { median: nanos(median) as f64, sigma })
}

fn empirical(file: &Path) -> Result<Dist, String> {
    Ok(Dist::Empirical(Arc::new(read_empirical(&resolve(file))?)))
}

/// The table form of a scenario.
#[derive(Deserialize)]
#[serde(tag = "dist", rename_all = "kebab-case", deny_unknown_fields)]
enum DistTable {
    Fixed {
        #[serde(with = "fulcrum_config::duration")]
        value: Duration,
    },
    Uniform {
        #[serde(with = "fulcrum_config::duration")]
        min: Duration,
        #[serde(with = "fulcrum_config::duration")]
        max: Duration,
    },
    UniformMs {
        #[serde(with = "fulcrum_config::duration")]
        min: Duration,
        #[serde(with = "fulcrum_config::duration")]
        max: Duration,
    },
    Exponential {
        #[serde(with = "fulcrum_config::duration")]
        mean: Duration,
    },
    LogNormal {
        #[serde(with = "fulcrum_config::duration")]
        median: Duration,
        sigma: f64,
    },
    Empirical {
        file: PathBuf,
    },
}

impl DistTable {
    fn build(self) -> Result<Dist, String> {
        match self {
            DistTable::Fixed { value } => Ok(Dist::Fixed(nanos(value))),
            DistTable::Uniform { min, max } => uniform(min, max),
            DistTable::UniformMs { min, max } => uniform_ms(min, max),
            DistTable::Exponential { mean } => Ok(Dist::Exponential { mean: nanos(mean) as f64 }),
            DistTable::LogNormal { median, sigma } => log_normal(median, sigma),
            DistTable::Empirical { file } => empirical(&file),
        }
    }
}

struct DistVisitor;

impl<'de> Visitor<'de> for DistVisitor {
    type Value = Dist;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "a duration such as \"5ms\" or a table with dist = \"fixed\" | \"uniform\" | \"uniform-ms\" | \
             \"exponential\" | \"log-normal\" | \"empirical\"",
        )
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<Dist, E> {
        fulcrum_config::parse_duration(s).map(|d| Dist::Fixed(nanos(d))).map_err(E::custom)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Dist, A::Error> {
        // The table's own errors (an unknown field, a missing `max`) reach
        // the user as they are, rather than "no variant matched".
        let table = DistTable::deserialize(de::value::MapAccessDeserializer::new(map))?;
        table.build().map_err(de::Error::custom)
    }
}

impl<'de> Deserialize<'de> for Dist {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(DistVisitor)
    }
}

/// Parse a duration such as `5ms`, `1.5s` or `250us` (the syntax of
/// every configuration file: [`fulcrum_config::parse_duration`]).
pub fn parse_duration(s: &str) -> Result<Duration, ParseError> {
    fulcrum_config::parse_duration(s).map_err(ParseError)
}

const SYNTAX: &str = "5ms, fixed(5ms), uniform(1ms,9ms), uniform-ms(10ms,50ms), exponential(5ms), \
                      log-normal(5ms,0.5) or empirical(file.txt)";

impl FromStr for Dist {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Self, ParseError> {
        let s = s.trim();
        let Some((name, args)) = s.strip_suffix(')').and_then(|s| s.split_once('(')) else {
            return parse_duration(s)
                .map(|d| Dist::Fixed(nanos(d)))
                .map_err(|e| ParseError(format!("{e}; a distribution is {SYNTAX}")));
        };
        let args: Vec<&str> = args.split(',').map(str::trim).collect();
        let built = match (name.trim(), args.as_slice()) {
            ("fixed", [d]) => Ok(Dist::Fixed(nanos(parse_duration(d)?))),
            ("uniform", [lo, hi]) => uniform(parse_duration(lo)?, parse_duration(hi)?),
            ("uniform-ms", [lo, hi]) => uniform_ms(parse_duration(lo)?, parse_duration(hi)?),
            ("exponential" | "exp", [mean]) => Ok(Dist::Exponential { mean: nanos(parse_duration(mean)?) as f64 }),
            ("log-normal" | "lognormal", [median, sigma]) => {
                let sigma =
                    sigma.parse::<f64>().map_err(|_| ParseError(format!("{s}: sigma {sigma:?} is not a number")))?;
                log_normal(parse_duration(median)?, sigma)
            }
            ("empirical", [file]) if !file.is_empty() => empirical(Path::new(file)),
            (name, _) => {
                return Err(ParseError(format!(
                    "{s:?} is not a distribution ({name:?} with {} argument(s)); write {SYNTAX}",
                    args.len()
                )))
            }
        };
        built.map_err(|e| ParseError(format!("{s}: {e}")))
    }
}

/// The command-line form, which [`FromStr`] reads back to the same value
/// (except `empirical`, whose file name is not kept: it prints its count
/// and mean, for people).
impl fmt::Display for Dist {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = |ns: f64| humantime::format_duration(Duration::from_nanos(to_nanos(ns.round()))).to_string();
        match self {
            Dist::Fixed(v) => write!(f, "{}", d(*v as f64)),
            Dist::Uniform { min, max } => write!(f, "uniform({},{})", d(*min as f64), d(*max as f64)),
            Dist::UniformMs { min_ms, max_ms } => write!(f, "uniform-ms({min_ms}ms,{max_ms}ms)"),
            Dist::Exponential { mean } => write!(f, "exponential({})", d(*mean)),
            Dist::LogNormal { median, sigma } => write!(f, "log-normal({},{sigma})", d(*median)),
            Dist::Empirical(v) => write!(f, "empirical({} values, mean {})", v.len(), d(self.mean())),
        }
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

    fn temp_file(name: &str, text: &str) -> (PathBuf, PathBuf) {
        let dir = std::env::temp_dir().join(format!("fulcrum-workload-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("lat.txt");
        std::fs::write(&f, text).unwrap();
        (dir, f)
    }

    #[test]
    fn scaled_multiplies_every_draw() {
        let mut rng = Rng::new(7);
        for d in [
            Dist::Fixed(1_000),
            Dist::Uniform { min: 1_000, max: 3_000 },
            Dist::Exponential { mean: 2_000.0 },
            Dist::LogNormal { median: 2_000.0, sigma: 0.5 },
            Dist::Empirical(Arc::new(vec![1_000, 3_000])),
        ] {
            let s = d.scaled(2.5);
            assert!((s.mean() / d.mean() - 2.5).abs() < 1e-9, "{d:?} → {s:?}");
            assert!(s.sample(&mut rng) > 0);
        }
    }

    #[test]
    fn parse_each_scenario_form() {
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
        assert_eq!(
            parse("d = { dist = \"log-normal\", median = \"5ms\", sigma = 0.5 }").unwrap(),
            Dist::LogNormal { median: 5e6, sigma: 0.5 }
        );
        assert_eq!(parse("d = { dist = \"exponential\", mean = \"5ms\" }").unwrap(), Dist::Exponential { mean: 5e6 });
        // A multi-line table reads the same as an inline one.
        assert_eq!(
            parse("[d]\ndist = \"uniform-ms\"\nmin = \"1ms\"\nmax = \"3ms\"\n").unwrap(),
            "uniform-ms(1ms,3ms)".parse().unwrap()
        );
    }

    #[test]
    fn bad_scenario_parameters_name_the_line() {
        let err = parse("\nd = { dist = \"uniform\", min = \"10ms\", max = \"5ms\" }").unwrap_err();
        assert!(err.contains("line 2") && err.contains("max"), "{err}");
        let err = parse("d = { dist = \"uniform-ms\", min = \"1ms\", max = \"1ms\" }").unwrap_err();
        assert!(err.contains("must be above min"), "{err}");
        let err = parse("d = { dist = \"gamma\" }").unwrap_err();
        assert!(err.contains("gamma"), "{err}");
        let err = parse("d = { dist = \"uniform\", min = \"1ms\", maxx = \"5ms\" }").unwrap_err();
        assert!(err.contains("maxx"), "{err}");
        let err = parse("d = { dist = \"uniform\", min = \"1ms\" }").unwrap_err();
        assert!(err.contains("max"), "{err}");
        let err = parse("d = 5").unwrap_err();
        assert!(err.contains("expected a duration"), "{err}");
        let err = parse("d = \"5 parsecs\"").unwrap_err();
        assert!(err.contains("not a duration"), "{err}");
        let err = parse("d = { dist = \"empirical\", file = \"/nonexistent/x.txt\" }").unwrap_err();
        assert!(err.contains("cannot read"), "{err}");
        let err = parse("d = { dist = \"log-normal\", median = \"5ms\", sigma = -1.0 }").unwrap_err();
        assert!(err.contains("sigma"), "{err}");
    }

    #[test]
    fn command_line_forms() {
        const MS: Nanos = MILLISECOND;
        let cases = [
            ("5ms", Dist::Fixed(5 * MS)),
            ("fixed(5ms)", Dist::Fixed(5 * MS)),
            ("uniform(1ms, 9ms)", Dist::Uniform { min: MS, max: 9 * MS }),
            ("uniform-ms(10ms,50ms)", Dist::UniformMs { min_ms: 10, max_ms: 50 }),
            ("exp(5ms)", Dist::Exponential { mean: 5e6 }),
            ("exponential(250us)", Dist::Exponential { mean: 250e3 }),
            ("log-normal(5ms,0.5)", Dist::LogNormal { median: 5e6, sigma: 0.5 }),
            ("lognormal(2ms, 1)", Dist::LogNormal { median: 2e6, sigma: 1.0 }),
        ];
        for (text, want) in cases {
            assert_eq!(text.parse::<Dist>(), Ok(want), "{text}");
        }
    }

    #[test]
    fn command_line_round_trips() {
        let dists = [
            Dist::Fixed(5 * MILLISECOND),
            Dist::Fixed(1_234_567),
            Dist::Uniform { min: MILLISECOND, max: 9 * MILLISECOND },
            Dist::UniformMs { min_ms: 10, max_ms: 50 },
            Dist::Exponential { mean: 50e6 },
            Dist::LogNormal { median: 5e6, sigma: 0.25 },
            Dist::LogNormal { median: 7e5, sigma: 1.0 / 3.0 },
        ];
        for d in dists {
            assert_eq!(d.to_string().parse::<Dist>(), Ok(d.clone()), "{d}");
        }
    }

    #[test]
    fn command_line_errors_say_what_is_wrong() {
        let err = |s: &str| s.parse::<Dist>().unwrap_err().0;
        let e = err("uniform(9ms,1ms)");
        assert!(e.contains("below min"), "{e}");
        let e = err("normal(5ms)");
        assert!(e.contains("\"normal\"") && e.contains("log-normal(5ms,0.5)"), "{e}");
        let e = err("5 parsecs");
        assert!(e.contains("not a duration") && e.contains("uniform(1ms,9ms)"), "{e}");
        let e = err("log-normal(5ms)");
        assert!(e.contains("1 argument"), "{e}");
        let e = err("log-normal(5ms,wide)");
        assert!(e.contains("sigma \"wide\""), "{e}");
        let e = err("log-normal(5ms,-0.5)");
        assert!(e.contains("must be a finite number"), "{e}");
        let e = err("uniform-ms(1.5ms,3ms)");
        assert!(e.contains("whole milliseconds"), "{e}");
        let e = err("exp(fast)");
        assert!(e.contains("\"fast\" is not a duration"), "{e}");
        let e = err("empirical(/nonexistent/lat.txt)");
        assert!(e.contains("cannot read /nonexistent/lat.txt"), "{e}");
        let e = err("empirical()");
        assert!(e.contains("is not a distribution"), "{e}");
    }

    #[test]
    fn empirical_on_the_command_line_and_in_a_scenario_dir() {
        let (dir, f) = temp_file("cli", "# ms\n1.5\n\n2\n");
        let want = Dist::Empirical(Arc::new(vec![1_500_000, 2_000_000]));
        assert_eq!(format!("empirical({})", f.display()).parse::<Dist>(), Ok(want.clone()));
        let relative = with_base_dir(&dir, || parse("d = { dist = \"empirical\", file = \"lat.txt\" }"));
        assert_eq!(relative.unwrap(), want);
        assert_eq!(want.to_string(), "empirical(2 values, mean 1ms 750us)");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn empirical_file_format() {
        let (dir, f) = temp_file("fmt", "# ms\n1.5\n\n2\n");
        assert_eq!(read_empirical(&f).unwrap(), vec![1_500_000, 2_000_000]);
        std::fs::write(&f, "1\nfast\n").unwrap();
        assert!(read_empirical(&f).unwrap_err().contains(":2:"));
        std::fs::write(&f, "# nothing\n").unwrap();
        assert!(read_empirical(&f).unwrap_err().contains("no latency values"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn to_nanos_truncates_and_caps_as_the_plain_conversion() {
        // The first formula: finite and positive, capped at 2^63, then `as`.
        let plain = |x: f64| if x.is_finite() && x > 0.0 { x.min(u64::MAX as f64 / 2.0) as Nanos } else { 0 };
        let cap = 2f64.powi(63);
        let edges = [
            0.0,
            -0.0,
            -1.0,
            0.4,
            0.999_999,
            1.0,
            1.5,
            1e9 + 0.75,
            2f64.powi(53),
            2f64.powi(62) * 1.5,
            cap - 1024.0,
            cap,
            cap * 2.0,
            f64::MAX,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            f64::MIN_POSITIVE,
        ];
        for x in edges {
            assert_eq!(to_nanos(x), plain(x), "{x}");
        }
        let mut rng = Rng::new(11);
        for _ in 0..100_000 {
            let x = f64::from_bits(rng.next_u64());
            assert_eq!(to_nanos(x), plain(x), "{x}");
            let y = -1e7 * (1.0 - rng.unit()).ln();
            assert_eq!(to_nanos(y), plain(y), "{y}");
        }
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

    /// The draws are a pure function of the seed (the simulator's
    /// reproduction tests pin the resulting figures).
    #[test]
    fn sampling_is_deterministic() {
        let draw = |d: &Dist, seed| {
            let mut rng = Rng::new(seed);
            (0..4).map(|_| d.sample(&mut rng)).collect::<Vec<_>>()
        };
        let dists = [
            Dist::Uniform { min: 0, max: 10 * MILLISECOND },
            Dist::UniformMs { min_ms: 10, max_ms: 50 },
            Dist::Exponential { mean: 5e6 },
            Dist::LogNormal { median: 5e6, sigma: 0.5 },
        ];
        for d in &dists {
            assert_eq!(draw(d, 11), draw(d, 11));
            assert_ne!(draw(d, 11), draw(d, 12));
        }
        // The log-normal consumes two words per draw (Box–Muller, one of the
        // pair discarded), the others one: a fixed count keeps streams aligned.
        let mut a = Rng::new(5);
        let mut b = Rng::new(5);
        Dist::LogNormal { median: 5e6, sigma: 0.5 }.sample(&mut a);
        b.unit();
        b.unit();
        assert_eq!(a.unit(), b.unit());
        // Median of a log-normal is its `median`.
        let d = "log-normal(5ms,0.5)".parse::<Dist>().unwrap();
        let mut rng = Rng::new(9);
        let mut v: Vec<Nanos> = (0..100_001).map(|_| d.sample(&mut rng)).collect();
        v.sort_unstable();
        assert!((v[50_000] as f64 / 5e6 - 1.0).abs() < 0.02, "{}", v[50_000]);
    }
}

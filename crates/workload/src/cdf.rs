//! Sizes drawn from a piecewise-linear CDF file (the fabric simulator's
//! flow sizes).
//!
//! Unlike [`crate::Dist`]'s `empirical` shape, which resamples observed
//! values, this interpolates between the points of a cumulative
//! distribution. The file format and the sampling rule are those of the traffic generator
//! the seed experiments use (HKUST-SING TrafficGenerator's `cdf.c`, copied
//! into ns3-ecn-sharp): one `value cumulative_probability` pair per line,
//! probabilities non-decreasing. A draw takes `u` uniform between the
//! smallest and largest probability in the file (0 and 1 unless the file
//! goes beyond them), finds the first point whose probability is ≥ `u` and
//! interpolates linearly from the point before it — from (0, 0) for the first
//! point, so the first segment starts at size 0. The mean is the same
//! piecewise-linear integral: Σ (midpoint of the segment × its probability).
//!
//! Probabilities are fractions (0 … 1) or, in the convention of the HPCC
//! simulator's traffic generator and the Parsimon/m3 workload files,
//! percentages: a file whose last probability is exactly 100 is read as
//! percentages and scaled by 1/100, so those files work as they are.

use std::path::Path;

use fulcrum_base::Rng;

/// A piecewise-linear CDF over flow sizes in bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct Cdf {
    /// (value, cumulative probability), in file order.
    points: Vec<(f64, f64)>,
    min_p: f64,
    max_p: f64,
}

impl Cdf {
    /// Parse the text of a CDF file; errors name the line.
    pub fn parse(text: &str) -> Result<Cdf, String> {
        let mut points: Vec<(f64, f64)> = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let mut it = line.split_whitespace().map(str::parse::<f64>);
            let (Some(Ok(v)), Some(Ok(p)), None) = (it.next(), it.next(), it.next()) else {
                return Err(format!("line {}: expected `size probability`, found {line:?}", i + 1));
            };
            if !(v.is_finite() && v >= 0.0 && p.is_finite() && (0.0..=100.0).contains(&p)) {
                return Err(format!(
                    "line {}: size must be ≥ 0 and probability within 0..1 (or a percentage), found {line:?}",
                    i + 1
                ));
            }
            if let Some(&(pv, pp)) = points.last() {
                if p < pp || v < pv {
                    return Err(format!("line {}: sizes and probabilities must not decrease", i + 1));
                }
            }
            points.push((v, p));
        }
        let Some(&(_, last)) = points.last() else {
            return Err("no points".into());
        };
        if last <= 0.0 {
            return Err("the last probability must be above 0".into());
        }
        if last > 1.0 {
            // Percentages: only when the file ends at exactly 100, so a
            // fraction file with a typo (1.5) is still refused.
            if last != 100.0 {
                return Err(format!(
                    "probabilities go above 1 but the last one is {last}: a file in percentages must end at 100"
                ));
            }
            for point in &mut points {
                point.1 /= 100.0;
            }
            return Ok(Cdf { points, min_p: 0.0, max_p: 1.0 });
        }
        Ok(Cdf { points, min_p: 0.0, max_p: last.max(1.0) })
    }

    /// Read and parse a CDF file; errors name the file and line.
    pub fn load(path: &Path) -> Result<Cdf, String> {
        let text = fulcrum_config::read_input(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Cdf::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Mean of the distribution (bytes).
    pub fn mean(&self) -> f64 {
        let mut prev = (0.0, 0.0);
        let mut sum = 0.0;
        for &(v, p) in &self.points {
            sum += (v + prev.0) / 2.0 * (p - prev.1);
            prev = (v, p);
        }
        sum
    }

    /// One draw (bytes, truncated to an integer, at least 1).
    pub fn sample(&self, rng: &mut Rng) -> u64 {
        let u = self.min_p + rng.unit() * (self.max_p - self.min_p);
        let mut prev = (0.0, 0.0);
        for &(v, p) in &self.points {
            if u <= p {
                let x =
                    if p == prev.1 { (prev.0 + v) / 2.0 } else { prev.0 + (u - prev.1) * (v - prev.0) / (p - prev.1) };
                return (x as u64).max(1);
            }
            prev = (v, p);
        }
        (prev.0 as u64).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WEB_SEARCH: &str = include_str!("../../../scenarios/fabric/cdf/web-search.txt");

    #[test]
    fn web_search_mean_matches_the_piecewise_integral() {
        let cdf = Cdf::parse(WEB_SEARCH).unwrap();
        assert!((cdf.mean() - 1_711_250.0).abs() < 1e-6, "{}", cdf.mean());
    }

    #[test]
    fn samples_follow_the_cdf() {
        let cdf = Cdf::parse(WEB_SEARCH).unwrap();
        let mut rng = Rng::new(1);
        let n = 200_000;
        let draws: Vec<u64> = (0..n).map(|_| cdf.sample(&mut rng)).collect();
        let below = |x: u64| draws.iter().filter(|&&d| d <= x).count() as f64 / n as f64;
        assert!((below(10_000) - 0.15).abs() < 0.005);
        assert!((below(1_000_000) - 0.70).abs() < 0.005);
        assert!((below(5_000) - 0.075).abs() < 0.005, "first segment starts at 0");
        let mean = draws.iter().sum::<u64>() as f64 / n as f64;
        assert!((mean / cdf.mean() - 1.0).abs() < 0.03, "{mean}");
        assert!(draws.iter().all(|&d| (1..=30_000_000).contains(&d)));
    }

    #[test]
    fn percentages_ending_at_100_are_scaled() {
        let fractions = Cdf::parse("0 0\n4000 0.2293\n8000 0.6921\n2000000 1\n").unwrap();
        let percent = Cdf::parse("0 0\n4000 22.93\n8000 69.21\n2000000 100\n").unwrap();
        assert!((fractions.mean() - percent.mean()).abs() < 1e-6);
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        for _ in 0..1000 {
            assert_eq!(fractions.sample(&mut a), percent.sample(&mut b));
        }
        assert!(Cdf::parse("10 0.5\n20 1.5\n").unwrap_err().contains("must end at 100"));
        assert!(Cdf::parse("10 50\n20 101\n").unwrap_err().contains("line 2"));
    }

    #[test]
    fn the_shipped_cdfs_parse_with_sane_means() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/fabric/cdf");
        // The means docs/reference/input-files.md gives, to 2 significant digits.
        let means = [
            ("web-search.txt", 1_711_250.0),
            ("data-mining.txt", 12_700_000.0),
            ("meta-webserver.txt", 91_000.0),
            ("meta-cache-follower.txt", 610_000.0),
            ("meta-hadoop.txt", 570_000.0),
            ("fb-hadoop-hpcc.txt", 120_000.0),
            ("alibaba-storage.txt", 41_000.0),
            ("google-rpc.txt", 2_900.0),
        ];
        let mut seen = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let cdf = Cdf::load(&path).unwrap();
            let text = std::fs::read_to_string(&path).unwrap();
            assert!(text.starts_with('#'), "{}: every shipped CDF names its source first", path.display());
            let name = path.file_name().unwrap().to_str().unwrap();
            let (_, mean) = means.iter().find(|(n, _)| *n == name).expect("a shipped CDF the docs list");
            assert!((cdf.mean() / mean - 1.0).abs() < 0.01, "{name}: {}", cdf.mean());
            seen += 1;
        }
        assert_eq!(seen, means.len());
    }

    #[test]
    fn bad_files_name_the_line() {
        assert!(Cdf::parse("10 0.5\n5 0.4\n").unwrap_err().contains("line 2"));
        assert!(Cdf::parse("10 x\n").unwrap_err().contains("line 1"));
        assert!(Cdf::parse("# empty\n").is_err());
    }
}

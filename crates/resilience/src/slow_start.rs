//! Slow start: an endpoint that joins or returns gets a share of traffic
//! that grows over a window instead of its full share at once (Envoy's
//! `slow_start_config`).
//!
//! Its weight is multiplied by `max(min_weight_percent, (t / window)^(1 / aggression))`,
//! where `t` is the time since it joined. Weights are relative, so when every
//! endpoint is new, scaling them all changes nothing; that case (a fresh
//! deployment or a restart of the whole fleet) is exactly when a cold cache
//! hurts most. The proxy then ramps the cluster's limit on requests in
//! flight (`max_requests`) by the same [`SlowStart::factor`], so that a cold
//! fleet still warms up gradually.

use std::time::Duration;

use fulcrum_balance::Nanos;
use serde::{Deserialize, Serialize};

/// Slow-start parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SlowStartConfig {
    /// How long the ramp lasts.
    #[serde(with = "fulcrum_config::duration")]
    pub window: Duration,
    /// Shape of the ramp: 1.0 is linear, larger ramps faster at first.
    pub aggression: f64,
    /// Smallest factor, in percent, so a new endpoint still gets some traffic.
    pub min_weight_percent: f64,
}

impl Default for SlowStartConfig {
    fn default() -> Self {
        SlowStartConfig { window: Duration::from_secs(30), aggression: 1.0, min_weight_percent: 10.0 }
    }
}

/// The slow-start rule for one cluster.
#[derive(Clone, Debug)]
pub struct SlowStart {
    window: Nanos,
    exponent: f64,
    floor: f64,
}

impl SlowStart {
    /// Validate `config`; the error names the field.
    pub fn new(config: &SlowStartConfig) -> Result<SlowStart, String> {
        if config.window.is_zero() {
            return Err("slow_start.window must be greater than 0".into());
        }
        if !(config.aggression.is_finite() && config.aggression > 0.0) {
            return Err(format!("slow_start.aggression = {} must be > 0", config.aggression));
        }
        if !(0.0..=100.0).contains(&config.min_weight_percent) || config.min_weight_percent == 0.0 {
            return Err(format!("slow_start.min_weight_percent = {} must be in (0, 100]", config.min_weight_percent));
        }
        Ok(SlowStart {
            window: u64::try_from(config.window.as_nanos()).unwrap_or(u64::MAX),
            exponent: 1.0 / config.aggression,
            floor: config.min_weight_percent / 100.0,
        })
    }

    /// The weight factor in (0, 1] of an endpoint that joined `age` ago.
    pub fn factor(&self, age: Nanos) -> f64 {
        if age >= self.window {
            return 1.0;
        }
        (age as f64 / self.window as f64).powf(self.exponent).max(self.floor)
    }

    /// Whether an endpoint of this `age` is still ramping.
    pub fn ramping(&self, age: Nanos) -> bool {
        age < self.window
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Nanos = 1_000_000_000;

    #[test]
    fn linear_ramp_with_a_floor() {
        let s = SlowStart::new(&SlowStartConfig::default()).unwrap();
        assert_eq!(s.factor(0), 0.1);
        assert_eq!(s.factor(3 * S), 0.1);
        assert!((s.factor(15 * S) - 0.5).abs() < 1e-12);
        assert_eq!(s.factor(30 * S), 1.0);
        assert!(!s.ramping(31 * S));
    }

    #[test]
    fn aggression_bends_the_ramp() {
        let config = SlowStartConfig { aggression: 2.0, ..SlowStartConfig::default() };
        let s = SlowStart::new(&config).unwrap();
        assert!((s.factor(S * 30 / 4) - 0.5).abs() < 1e-12, "(1/4)^(1/2)");
    }

    #[test]
    fn bad_values_are_named() {
        let bad = SlowStartConfig { aggression: 0.0, ..SlowStartConfig::default() };
        assert!(SlowStart::new(&bad).unwrap_err().contains("aggression"));
        let bad = SlowStartConfig { window: Duration::ZERO, ..SlowStartConfig::default() };
        assert!(SlowStart::new(&bad).unwrap_err().contains("window"));
    }
}

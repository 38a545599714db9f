//! A retry budget (Finagle's `RetryBudget`, Linkerd's `retry_budget`):
//! retries may add at most `ratio` of the recent requests, plus a small
//! floor per second, so that retrying cannot multiply the load on a cluster
//! that is already failing.
//!
//! Every request deposits `ratio` of a token; every retry withdraws one
//! whole token, and a retry without a token is not made. Deposits expire
//! after `ttl`, so the budget follows recent traffic; `min_per_second`
//! tokens are granted per second whatever the traffic, so that a quiet
//! service can still retry.

use std::collections::VecDeque;
use std::time::Duration;

use fulcrum_balance::Nanos;
use serde::{Deserialize, Serialize};

/// Retry-budget parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetryBudgetConfig {
    /// Retries allowed per request, on average (0.2 = 20 %).
    pub ratio: f64,
    /// Retries allowed per second regardless of traffic.
    pub min_per_second: f64,
    /// How long a request's deposit counts.
    #[serde(with = "fulcrum_config::duration")]
    pub ttl: Duration,
}

impl Default for RetryBudgetConfig {
    fn default() -> Self {
        RetryBudgetConfig { ratio: 0.2, min_per_second: 10.0, ttl: Duration::from_secs(10) }
    }
}

/// One second's deposits and withdrawals, so memory stays bounded.
#[derive(Clone, Debug)]
struct Bucket {
    second: u64,
    deposits: f64,
}

/// The budget of one cluster.
#[derive(Clone, Debug)]
pub struct RetryBudget {
    config: RetryBudgetConfig,
    buckets: VecDeque<Bucket>,
    /// Tokens withdrawn that are still within the ttl, per second.
    withdrawn: VecDeque<(u64, f64)>,
}

const SECOND: Nanos = 1_000_000_000;

impl RetryBudget {
    /// Validate `config`; the error names the field.
    pub fn new(config: RetryBudgetConfig) -> Result<RetryBudget, String> {
        if !(config.ratio.is_finite() && config.ratio >= 0.0) {
            return Err(format!("retry_budget.ratio = {} must be ≥ 0", config.ratio));
        }
        if !(config.min_per_second.is_finite() && config.min_per_second >= 0.0) {
            return Err(format!("retry_budget.min_per_second = {} must be ≥ 0", config.min_per_second));
        }
        if config.ttl < Duration::from_secs(1) {
            return Err("retry_budget.ttl must be at least 1s".into());
        }
        Ok(RetryBudget { config, buckets: VecDeque::new(), withdrawn: VecDeque::new() })
    }

    fn ttl_seconds(&self) -> u64 {
        self.config.ttl.as_secs().max(1)
    }

    fn expire(&mut self, now: Nanos) {
        let oldest = (now / SECOND).saturating_sub(self.ttl_seconds() - 1);
        while self.buckets.front().is_some_and(|b| b.second < oldest) {
            self.buckets.pop_front();
        }
        while self.withdrawn.front().is_some_and(|w| w.0 < oldest) {
            self.withdrawn.pop_front();
        }
    }

    /// A first attempt is being sent at `now`.
    pub fn deposit(&mut self, now: Nanos) {
        self.expire(now);
        let second = now / SECOND;
        match self.buckets.back_mut() {
            Some(b) if b.second == second => b.deposits += self.config.ratio,
            _ => self.buckets.push_back(Bucket { second, deposits: self.config.ratio }),
        }
    }

    /// Tokens available at `now`.
    pub fn balance(&mut self, now: Nanos) -> f64 {
        self.expire(now);
        let deposits: f64 = self.buckets.iter().map(|b| b.deposits).sum();
        let floor = self.config.min_per_second * self.ttl_seconds() as f64;
        let spent: f64 = self.withdrawn.iter().map(|w| w.1).sum();
        deposits + floor - spent
    }

    /// Take a token for a retry at `now`; `false` means do not retry.
    pub fn try_withdraw(&mut self, now: Nanos) -> bool {
        if self.balance(now) < 1.0 {
            return false;
        }
        let second = now / SECOND;
        match self.withdrawn.back_mut() {
            Some(w) if w.0 == second => w.1 += 1.0,
            _ => self.withdrawn.push_back((second, 1.0)),
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_are_bounded_by_ratio_plus_floor() {
        let config = RetryBudgetConfig { ratio: 0.2, min_per_second: 1.0, ttl: Duration::from_secs(10) };
        let mut b = RetryBudget::new(config).unwrap();
        // 1000 requests in the first second, every one failing and wanting a retry.
        let mut retries = 0;
        for i in 0..1000u64 {
            let now = i * 1_000_000;
            b.deposit(now);
            if b.try_withdraw(now) {
                retries += 1;
            }
        }
        // 20 % of 1000 plus the 10-token floor (1/s over a 10 s ttl).
        assert!((200..=211).contains(&retries), "{retries} retries");
    }

    #[test]
    fn deposits_expire_after_the_ttl() {
        let config = RetryBudgetConfig { ratio: 1.0, min_per_second: 0.0, ttl: Duration::from_secs(2) };
        let mut b = RetryBudget::new(config).unwrap();
        for _ in 0..5 {
            b.deposit(0);
        }
        assert_eq!(b.balance(SECOND), 5.0);
        assert_eq!(b.balance(2 * SECOND), 0.0);
        assert!(!b.try_withdraw(2 * SECOND));
    }

    #[test]
    fn a_quiet_service_can_still_retry() {
        let mut b = RetryBudget::new(RetryBudgetConfig::default()).unwrap();
        assert!(b.try_withdraw(0));
    }
}

//! Local rate limiting: a token bucket per route, or per key of a route
//! (a client address, a header's value), as Envoy's `local_ratelimit` and
//! nginx's `limit_req` offer.
//!
//! A bucket holds up to `burst` tokens and gains `rate` tokens a second; a
//! request takes one, and a request that finds none is refused with the
//! time until a token is there (the `Retry-After` of a 429). It is kept as
//! one number, the time at which the bucket would be full again (the
//! generic cell rate algorithm's "theoretical arrival time"): integer
//! nanoseconds, so that a sequence of requests gives the same answers on
//! every machine, in the proxy and in the simulator alike.
//!
//! [`RateLimiter`] keeps one bucket per key in a table of at most
//! `max_keys`. A full table first forgets the buckets that are full again
//! (forgetting them changes nothing), then the least recently used ones, an
//! eighth of the table at a time so that a flood of new keys costs O(1) per
//! request amortised. A forgotten key starts again with a full bucket:
//! under a flood of more distinct keys than the table holds, per-key limits
//! loosen, memory does not grow.

use std::collections::HashMap;

use fulcrum_balance::Nanos;
use serde::{Deserialize, Serialize};

const SECOND: Nanos = 1_000_000_000;

/// A bucket's parameters, as configured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimitConfig {
    /// Tokens gained per second: the sustained rate allowed (requests per second).
    pub rate: f64,
    /// Most tokens a bucket holds: requests allowed at once after a quiet
    /// spell (default: one second's worth of `rate`, at least 1).
    #[serde(default)]
    pub burst: Option<u32>,
    /// A bucket per key instead of one for all requests (default: one for all).
    #[serde(default)]
    pub key: Option<LimitKey>,
    /// Most keys with a bucket of their own (per-key limits; default 10,000).
    #[serde(default)]
    pub max_keys: Option<usize>,
}

/// What a per-key limit counts requests by.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub enum LimitKey {
    /// The client: its IP address in the proxy, the client in the simulator.
    Client,
    /// A request header's value (requests without it share one bucket).
    Header(String),
}

/// Default `max_keys`.
pub const DEFAULT_MAX_KEYS: usize = 10_000;

impl RateLimitConfig {
    /// The burst in force: as given, else one second of `rate` (at least 1).
    pub fn burst(&self) -> u32 {
        self.burst.unwrap_or_else(|| (self.rate.ceil().clamp(1.0, u32::MAX as f64)) as u32)
    }

    /// Check the values; the error names the field.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.rate.is_finite() && self.rate > 0.0 && self.rate <= 1e9) {
            return Err(format!("rate = {} must be > 0 and at most 1e9 (per second)", self.rate));
        }
        if self.burst == Some(0) {
            return Err("burst must be at least 1".into());
        }
        if self.max_keys == Some(0) {
            return Err("max_keys must be at least 1".into());
        }
        Ok(())
    }
}

/// One token bucket.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TokenBucket {
    /// When the bucket is full again (at or before: full now).
    full_at: Nanos,
}

/// The rule every bucket of a limiter follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Rule {
    /// Time one token takes to come back.
    interval: Nanos,
    /// `burst × interval`: how far `full_at` may run ahead of now.
    depth: Nanos,
}

impl Rule {
    fn new(config: &RateLimitConfig) -> Rule {
        let interval = ((SECOND as f64 / config.rate).round() as Nanos).max(1);
        Rule { interval, depth: interval.saturating_mul(u64::from(config.burst())) }
    }

    /// Take a token from `bucket` at `now`: `Ok`, or `Err(wait)` until one is there.
    fn take(self, bucket: &mut TokenBucket, now: Nanos) -> Result<(), Nanos> {
        let next = bucket.full_at.max(now).saturating_add(self.interval);
        let ahead = next - now;
        if ahead <= self.depth {
            bucket.full_at = next;
            Ok(())
        } else {
            Err(ahead - self.depth)
        }
    }
}

/// A refused request: how long until a token is there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limited {
    /// Nanoseconds until the next token.
    pub wait: Nanos,
}

impl Limited {
    /// The wait in whole seconds, rounded up (a `Retry-After` value; at least 1).
    pub fn retry_after_secs(self) -> u64 {
        self.wait.div_ceil(SECOND).max(1)
    }
}

/// The buckets of one rate limit: one for all requests, or one per key.
#[derive(Clone, Debug)]
pub struct RateLimiter {
    rule: Rule,
    /// The one bucket of an unkeyed limit.
    single: TokenBucket,
    /// Per key: the bucket and when it was last used.
    keyed: HashMap<u64, (TokenBucket, Nanos)>,
    max_keys: usize,
}

impl RateLimiter {
    /// A limiter with every bucket full; `config` must be valid.
    pub fn new(config: &RateLimitConfig) -> Result<RateLimiter, String> {
        config.validate()?;
        Ok(RateLimiter {
            rule: Rule::new(config),
            single: TokenBucket::default(),
            keyed: HashMap::new(),
            max_keys: config.max_keys.unwrap_or(DEFAULT_MAX_KEYS),
        })
    }

    /// A request at `now` without a key: take a token from the one bucket.
    pub fn check(&mut self, now: Nanos) -> Result<(), Limited> {
        self.rule.take(&mut self.single, now).map_err(|wait| Limited { wait })
    }

    /// A request at `now` with `key`: take a token from that key's bucket.
    pub fn check_key(&mut self, key: u64, now: Nanos) -> Result<(), Limited> {
        if !self.keyed.contains_key(&key) && self.keyed.len() >= self.max_keys {
            self.evict(now);
        }
        let (bucket, used) = self.keyed.entry(key).or_default();
        *used = now;
        self.rule.take(bucket, now).map_err(|wait| Limited { wait })
    }

    /// Keys with a bucket now.
    pub fn keys(&self) -> usize {
        self.keyed.len()
    }

    /// Make room in a full table: drop the buckets that are full again,
    /// then, if that freed less than an eighth, the least recently used
    /// (ties by key, so that the result does not depend on the table's order).
    fn evict(&mut self, now: Nanos) {
        self.keyed.retain(|_, (b, _)| b.full_at > now);
        let room = (self.max_keys / 8).max(1);
        let target = self.max_keys.saturating_sub(room);
        if self.keyed.len() <= target {
            return;
        }
        let mut ages: Vec<(Nanos, u64)> = self.keyed.iter().map(|(k, (_, used))| (*used, *k)).collect();
        let drop = self.keyed.len() - target;
        ages.select_nth_unstable(drop - 1);
        for (_, key) in &ages[..drop] {
            self.keyed.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Nanos = 1_000_000;

    fn limiter(rate: f64, burst: u32, max_keys: usize) -> RateLimiter {
        RateLimiter::new(&RateLimitConfig { rate, burst: Some(burst), key: None, max_keys: Some(max_keys) }).unwrap()
    }

    /// `1` for a request let through, `0` for one refused.
    fn run(l: &mut RateLimiter, times_ms: &[u64]) -> String {
        times_ms.iter().map(|t| if l.check(t * MS).is_ok() { '1' } else { '0' }).collect()
    }

    #[test]
    fn golden_sequence_burst_then_rate() {
        // 10 per second, burst 3: three at once, then one every 100 ms.
        let mut l = limiter(10.0, 3, 1);
        let times = [0, 0, 0, 0, 50, 99, 100, 150, 200, 200, 1000, 1000, 1000, 1000];
        assert_eq!(run(&mut l, &times), "11100010101110");
    }

    #[test]
    fn refusals_say_how_long_to_wait() {
        let mut l = limiter(2.0, 1, 1);
        assert!(l.check(0).is_ok());
        let refused = l.check(100 * MS).unwrap_err();
        assert_eq!(refused.wait, 400 * MS, "a token every 500 ms");
        assert_eq!(refused.retry_after_secs(), 1, "rounded up");
        let mut slow = limiter(0.1, 1, 1);
        assert!(slow.check(0).is_ok());
        let refused = slow.check(1).unwrap_err();
        assert_eq!((refused.wait, refused.retry_after_secs()), (10 * 1000 * MS - 1, 10));
        assert_eq!(Limited { wait: 10 * 1000 * MS + 1 }.retry_after_secs(), 11);
    }

    #[test]
    fn a_steady_stream_at_twice_the_rate_gets_half_through() {
        let mut l = limiter(100.0, 1, 1);
        let through = (0..2000u64).filter(|i| l.check(i * 5 * MS).is_ok()).count();
        assert_eq!(through, 1000);
    }

    #[test]
    fn keys_have_buckets_of_their_own() {
        let mut l = limiter(1.0, 1, 100);
        assert!(l.check_key(1, 0).is_ok());
        assert!(l.check_key(1, 0).is_err());
        assert!(l.check_key(2, 0).is_ok(), "another key has its own bucket");
        assert!(l.check_key(1, 1000 * MS).is_ok());
    }

    #[test]
    fn the_key_table_is_bounded_and_keeps_recent_keys() {
        let mut l = limiter(1.0, 1, 16);
        for k in 0..16 {
            assert!(l.check_key(k, 0).is_ok());
        }
        // Key 0 is used again (refused): the least recently used are 1, 2, …
        assert!(l.check_key(0, 10 * MS).is_err());
        assert!(l.check_key(100, 20 * MS).is_ok());
        assert!(l.keys() <= 16);
        assert!(l.check_key(0, 30 * MS).is_err(), "the recently used key kept its empty bucket");
        for k in 1000..100_000 {
            let _ = l.check_key(k, 40 * MS);
            assert!(l.keys() <= 16);
        }
    }

    #[test]
    fn a_full_table_forgets_the_buckets_that_are_full_again_first() {
        let mut l = limiter(1.0, 1, 4);
        for k in 0..4 {
            assert!(l.check_key(k, 0).is_ok());
        }
        assert!(l.check_key(0, 1500 * MS).is_ok(), "key 0's bucket is in use again");
        assert!(l.check_key(9, 1600 * MS).is_ok());
        assert_eq!(l.keys(), 2, "keys 1, 2 and 3 had full buckets: forgotten, nothing lost");
        assert!(l.check_key(0, 1600 * MS).is_err(), "key 0 kept its state");
    }

    #[test]
    fn bad_configs_are_named() {
        let c = |rate: f64, burst| RateLimitConfig { rate, burst, key: None, max_keys: None };
        assert!(c(0.0, None).validate().unwrap_err().contains("rate"));
        assert!(c(f64::NAN, None).validate().unwrap_err().contains("rate"));
        assert!(c(1.0, Some(0)).validate().unwrap_err().contains("burst"));
        assert_eq!(c(2.5, None).burst(), 3);
        assert_eq!(c(0.2, None).burst(), 1);
    }
}

//! The retry policy: which failed tries are tried again, how many tries in
//! all, on which endpoint, with what per-try timeout and budget. One type
//! and one vocabulary for the proxy's `[cluster.retries]` and the
//! simulator's `[retries]`, so a scenario can be written with the proxy's
//! settings (Envoy's `retry_policy` has the same parts: `retry_on`,
//! `num_retries`, `per_try_timeout`, a retry budget, and
//! `previous_hosts` for "another endpoint").
//!
//! Canonical spellings: `attempts`, `on` (`"connect-failure"`, `"reset"`,
//! `"timeout"`, `"5xx"`, a status `"500"`..`"599"`, or `"grpc-unavailable"`:
//! a gRPC call answered with status 14 UNAVAILABLE, as Envoy's
//! `retry_on: unavailable` and gRPC's own retry policy), `different_endpoint`,
//! `per_try_timeout`, `budget` (a [`RetryBudgetConfig`] table, or `false`
//! for none). Accepted alias: `"connect"` for `"connect-failure"` (older
//! scenarios).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::{RetryBudget, RetryBudgetConfig};

/// One kind of failed try that a policy may retry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetryOn {
    /// No connection could be made, so the request was never sent (`"connect-failure"`).
    ConnectFailure,
    /// The connection broke before a response (`"reset"`).
    Reset,
    /// No response within the per-try timeout (`"timeout"`).
    Timeout,
    /// Any 5xx response (`"5xx"`).
    ServerError,
    /// This 5xx status (`"503"`).
    Status(u16),
    /// A gRPC response whose `grpc-status` is 14, UNAVAILABLE (`"grpc-unavailable"`).
    GrpcUnavailable,
}

impl FromStr for RetryOn {
    type Err = String;

    fn from_str(s: &str) -> Result<RetryOn, String> {
        Ok(match s {
            "connect-failure" | "connect" => RetryOn::ConnectFailure,
            "reset" => RetryOn::Reset,
            "timeout" => RetryOn::Timeout,
            "5xx" => RetryOn::ServerError,
            "grpc-unavailable" => RetryOn::GrpcUnavailable,
            other => match other.parse::<u16>() {
                Ok(status) if (500..600).contains(&status) => RetryOn::Status(status),
                _ => {
                    return Err(format!(
                        "retries.on: {other:?} is not connect-failure, reset, timeout, 5xx, a status 500-599 \
                         or grpc-unavailable"
                    ))
                }
            },
        })
    }
}

impl fmt::Display for RetryOn {
    /// The name [`RetryOn::from_str`] reads.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RetryOn::ConnectFailure => f.write_str("connect-failure"),
            RetryOn::Reset => f.write_str("reset"),
            RetryOn::Timeout => f.write_str("timeout"),
            RetryOn::ServerError => f.write_str("5xx"),
            RetryOn::Status(status) => write!(f, "{status}"),
            RetryOn::GrpcUnavailable => f.write_str("grpc-unavailable"),
        }
    }
}

impl Serialize for RetryOn {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for RetryOn {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?.parse().map_err(serde::de::Error::custom)
    }
}

/// A retry policy (see the module documentation for the file format).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetryPolicy {
    /// Tries in all, the first included (1..=10; 1 = no retries).
    pub attempts: u32,
    /// Which failed tries are retried (`on` in files).
    #[serde(rename = "on")]
    pub conditions: Vec<RetryOn>,
    /// Avoid the endpoints already tried when picking for a retry
    /// (`fulcrum_balance::pick_avoiding`).
    pub different_endpoint: bool,
    /// A try without an answer after this long fails as a timeout (and may
    /// be retried); `None`: the request's own deadline bounds every try.
    #[serde(with = "fulcrum_config::duration", skip_serializing_if = "Option::is_none")]
    pub per_try_timeout: Option<Duration>,
    /// The retry budget (each driver keeps one per balancer instance);
    /// `None` (`budget = false`): every failure is retried up to `attempts`.
    #[serde(deserialize_with = "budget", serialize_with = "write_budget")]
    pub budget: Option<RetryBudgetConfig>,
}

impl Default for RetryPolicy {
    /// Two tries, only when the first never reached the endpoint, on another
    /// endpoint, within the default budget.
    fn default() -> Self {
        RetryPolicy {
            attempts: 2,
            conditions: vec![RetryOn::ConnectFailure],
            different_endpoint: true,
            per_try_timeout: None,
            budget: Some(RetryBudgetConfig::default()),
        }
    }
}

/// `budget = false` or a budget table (`true`: the default budget).
/// A budget as files write it: its table, or `false`.
fn write_budget<S: Serializer>(budget: &Option<RetryBudgetConfig>, s: S) -> Result<S::Ok, S::Error> {
    match budget {
        Some(b) => b.serialize(s),
        None => s.serialize_bool(false),
    }
}

fn budget<'de, D: Deserializer<'de>>(d: D) -> Result<Option<RetryBudgetConfig>, D::Error> {
    struct Budget;
    impl<'de> serde::de::Visitor<'de> for Budget {
        type Value = Option<RetryBudgetConfig>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a budget table or false")
        }

        fn visit_bool<E: serde::de::Error>(self, on: bool) -> Result<Self::Value, E> {
            Ok(on.then(RetryBudgetConfig::default))
        }

        fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
            RetryBudgetConfig::deserialize(serde::de::value::MapAccessDeserializer::new(map)).map(Some)
        }
    }
    d.deserialize_any(Budget)
}

/// A policy field out of range.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyError {
    /// The field, as in files (`attempts`, `per_try_timeout`, `budget`).
    pub field: &'static str,
    /// What is wrong with it.
    pub message: String,
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "retries.{}: {}", self.field, self.message)
    }
}

impl std::error::Error for PolicyError {}

impl RetryPolicy {
    /// Check the ranges; the error names the field.
    pub fn validate(&self) -> Result<(), PolicyError> {
        let fail = |field, message: String| Err(PolicyError { field, message });
        if !(1..=10).contains(&self.attempts) {
            return fail("attempts", format!("{} must be between 1 and 10 (the first try included)", self.attempts));
        }
        if self.per_try_timeout.is_some_and(|t| t.is_zero()) {
            return fail("per_try_timeout", "must be greater than 0 (leave it out for none)".into());
        }
        if let Some(b) = &self.budget {
            if let Err(m) = RetryBudget::new(b.clone()) {
                return fail("budget", m);
            }
        }
        Ok(())
    }

    /// Whether a try that failed as `failure` is retried (attempts and
    /// budget permitting).
    pub fn retries(&self, failure: RetryOn) -> bool {
        self.conditions.iter().any(|&on| {
            on == failure || matches!((on, failure), (RetryOn::ServerError, RetryOn::Status(_) | RetryOn::ServerError))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<RetryPolicy, String> {
        toml::from_str::<RetryPolicy>(text).map_err(|e| e.to_string())
    }

    #[test]
    fn a_policy_written_out_reads_back_the_same() {
        for text in
            ["", "attempts = 3\non = [\"5xx\", \"503\", \"reset\"]\nper_try_timeout = \"250ms\"\nbudget = false\n"]
        {
            let policy = parse(text).unwrap();
            let written = toml::to_string(&policy).unwrap();
            assert_eq!(parse(&written).unwrap(), policy, "{written}");
        }
    }

    #[test]
    fn both_vocabularies_read_the_same() {
        let proxy = parse("attempts = 3\non = [\"connect-failure\", \"5xx\", \"503\"]\n").unwrap();
        let scenario = parse("attempts = 3\non = [\"connect\", \"5xx\", \"503\"]\n").unwrap();
        assert_eq!(proxy, scenario);
        assert_eq!(proxy.conditions[2], RetryOn::Status(503));
        assert_eq!(proxy.budget, Some(RetryBudgetConfig::default()), "a budget unless turned off");
        assert_eq!(parse("budget = false").unwrap().budget, None);
        assert_eq!(parse("budget = { ratio = 0.5 }").unwrap().budget.unwrap().ratio, 0.5);
        assert!(parse("budget = { rate = 0.5 }").unwrap_err().contains("unknown field `rate`"));
        assert_eq!(parse("").unwrap(), RetryPolicy::default());
    }

    #[test]
    fn bad_values_are_named() {
        assert!(parse("on = [\"4xx\"]").unwrap_err().contains("\"4xx\" is not connect-failure"));
        assert!(parse("on = [\"404\"]").is_err());
        let e = parse("attempts = 0").unwrap().validate().unwrap_err();
        assert_eq!(e.field, "attempts");
        let e = parse("per_try_timeout = \"0s\"").unwrap().validate().unwrap_err();
        assert_eq!(e.field, "per_try_timeout");
        let e = parse("budget = { ttl = \"100ms\" }").unwrap().validate().unwrap_err();
        assert!(e.to_string().starts_with("retries.budget: "), "{e}");
    }

    #[test]
    fn a_5xx_condition_covers_every_5xx_status() {
        let p = parse("on = [\"5xx\"]").unwrap();
        assert!(p.retries(RetryOn::ServerError) && p.retries(RetryOn::Status(502)));
        assert!(!p.retries(RetryOn::ConnectFailure));
        let p = parse("on = [\"503\"]").unwrap();
        assert!(p.retries(RetryOn::Status(503)) && !p.retries(RetryOn::Status(502)));
        // gRPC's UNAVAILABLE comes with HTTP 200: only its own condition retries it.
        assert!(!p.retries(RetryOn::GrpcUnavailable));
        let p = parse("on = [\"5xx\", \"grpc-unavailable\"]").unwrap();
        assert!(p.retries(RetryOn::GrpcUnavailable) && p.retries(RetryOn::Status(503)));
    }
}

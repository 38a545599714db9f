//! What the proxy reads of gRPC (the gRPC over HTTP/2 protocol: "Requests"
//! and "Responses"): a call's `grpc-timeout` header, which bounds how long
//! the proxy waits for it, and its `grpc-status`, carried in the trailers
//! (or in the head of a trailers-only response), which says whether the
//! call failed even though the HTTP status is 200 (and whether it is 14,
//! UNAVAILABLE, which a cluster may retry: `retries.on = ["grpc-unavailable"]`).

use std::time::Duration;

use http::header::{HeaderMap, HeaderName};

const GRPC_TIMEOUT: HeaderName = HeaderName::from_static("grpc-timeout");
const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");

/// The call's `grpc-timeout`: at most 8 digits and a unit (`H`ours,
/// `M`inutes, `S`econds, `m`illi-, `u` micro-, `n` nanoseconds). `None` if
/// absent or malformed (the cluster's `request_timeout` applies then).
pub fn timeout(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get(GRPC_TIMEOUT)?.to_str().ok()?;
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// Whether `headers` (trailers, or a trailers-only head) carry a
/// `grpc-status` other than 0 (OK).
pub fn failed(headers: &HeaderMap) -> bool {
    headers.get(GRPC_STATUS).is_some_and(|s| s.as_bytes() != b"0")
}

/// Whether a request is a gRPC call: its `content-type` is
/// `application/grpc`, alone or with a `+format` or `;parameters`.
pub fn is_call(headers: &HeaderMap) -> bool {
    headers.get(http::header::CONTENT_TYPE).is_some_and(|v| {
        let v = v.as_bytes();
        v.starts_with(b"application/grpc") && matches!(v.get(16), None | Some(b'+' | b';'))
    })
}

/// The `grpc-status` in `headers` (trailers, or a trailers-only head), if
/// there is one and it is a number.
pub fn status(headers: &HeaderMap) -> Option<u32> {
    headers.get(GRPC_STATUS)?.to_str().ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn with(name: HeaderName, value: &'static str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(name, HeaderValue::from_static(value));
        h
    }

    #[test]
    fn timeouts_parse_every_unit_and_reject_malformed_values() {
        let t = |v| timeout(&with(GRPC_TIMEOUT, v));
        assert_eq!(t("2H"), Some(Duration::from_secs(7200)));
        assert_eq!(t("3M"), Some(Duration::from_secs(180)));
        assert_eq!(t("1S"), Some(Duration::from_secs(1)));
        assert_eq!(t("250m"), Some(Duration::from_millis(250)));
        assert_eq!(t("99999999u"), Some(Duration::from_micros(99_999_999)));
        assert_eq!(t("5n"), Some(Duration::from_nanos(5)));
        for bad in ["", "m", "123456789m", "1x", "-1S", "1.5S"] {
            assert_eq!(t(bad), None, "{bad:?}");
        }
        assert_eq!(timeout(&HeaderMap::new()), None);
    }

    #[test]
    fn only_a_status_other_than_ok_is_a_failure() {
        assert!(!failed(&with(GRPC_STATUS, "0")));
        assert!(failed(&with(GRPC_STATUS, "14")));
        assert!(!failed(&HeaderMap::new()));
        assert_eq!(status(&with(GRPC_STATUS, "14")), Some(14));
        assert_eq!(status(&with(GRPC_STATUS, "x")), None);
    }

    #[test]
    fn calls_are_known_by_their_content_type() {
        let ct = http::header::CONTENT_TYPE;
        assert!(is_call(&with(ct.clone(), "application/grpc")));
        assert!(is_call(&with(ct.clone(), "application/grpc+proto")));
        assert!(!is_call(&with(ct.clone(), "application/grpc-web")));
        assert!(!is_call(&with(ct, "application/json")));
        assert!(!is_call(&HeaderMap::new()));
    }
}

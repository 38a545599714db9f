//! The answers the proxy makes itself, in one place. Each [`LocalReply`]
//! says its status, its message (the plain-text body), the counter of
//! [`ProxyStats`] it counts in, the access log's flag, and what the
//! balancer hears of the request's pick when an endpoint had been picked
//! ([`Heard`]). Every path that answers locally takes its answer from here
//! — the request path and its upgrade path ([`http`](crate::http)), and
//! the lean server's refusal of a head it cannot serve
//! ([`h1::server`](crate::h1::server)) — so that one refusal reads and
//! counts the same wherever it happens.

use std::borrow::Cow;
use std::sync::atomic::AtomicU64;

use http::StatusCode;

use crate::access_log::Flags;
use crate::cluster::NoPick;
use crate::metrics::ProxyStats;

/// The `Content-Type` of every local reply.
pub const CONTENT_TYPE: &str = "text/plain; charset=utf-8";

/// An answer the proxy makes itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LocalReply {
    /// 400: an HTTP/1.1 request without `Host` (RFC 9112 §3.2).
    MissingHost,
    /// 400: a request with more than one `Host`.
    TwoHosts,
    /// 400: a request head the lean server cannot parse, and why (the
    /// connection closes; no access log record).
    BadHead(&'static str),
    /// 431: a request head over `max_header_bytes` or `max_headers` (the
    /// connection closes; no access log record).
    HeadTooLarge,
    /// 404: no route for the request's host and path.
    NoRoute,
    /// 413: a request body over `max_body_bytes`, announced or found while
    /// it streamed.
    BodyTooLarge,
    /// 400: a request body that broke while it streamed (a chunk size that
    /// overflows, say).
    MalformedBody,
    /// 400: request headers that cannot be sent upstream.
    HeadersNotForwardable,
    /// 400: a request target that cannot be sent upstream.
    TargetNotForwardable,
    /// 502: a retry found the request's headers already spent.
    CannotResend,
    /// 503: the cluster has no endpoint to pick.
    NoEndpoint,
    /// 503: the cluster's `max_requests` are in flight.
    MaxRequests,
    /// 503: the cluster's `max_connections` are open and no more may wait
    /// (`max_pending`, or not within the request timeout).
    MaxConnections,
    /// 502: no connection could be made to the endpoint.
    ConnectFailure,
    /// 502: the endpoint's connection broke after the request was sent.
    UpstreamReset,
    /// 504: no response head within the request timeout.
    Timeout,
    /// A route's redirect (301, 302, 303, 307 or 308); the `Location` is
    /// the route's.
    Redirect(StatusCode),
    /// A route's configured response (status, body and headers are the route's).
    Respond(StatusCode),
    /// 429: the route's rate limit; `Retry-After` says these seconds.
    RateLimited(u64),
}

/// What the balancer hears of a request answered locally after an
/// endpoint was picked for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Heard {
    /// The pick is withdrawn: the request never reached the endpoint, or
    /// the client is to blame, so the endpoint learns nothing.
    Cancelled,
    /// A failure of the endpoint (a gateway failure, at the latency so far).
    Failure,
}

impl LocalReply {
    /// The response status.
    pub fn status(self) -> StatusCode {
        use LocalReply::*;
        match self {
            MissingHost | TwoHosts | BadHead(_) | MalformedBody | HeadersNotForwardable | TargetNotForwardable => {
                StatusCode::BAD_REQUEST
            }
            HeadTooLarge => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            NoRoute => StatusCode::NOT_FOUND,
            BodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            CannotResend | ConnectFailure | UpstreamReset => StatusCode::BAD_GATEWAY,
            NoEndpoint | MaxRequests | MaxConnections => StatusCode::SERVICE_UNAVAILABLE,
            Timeout => StatusCode::GATEWAY_TIMEOUT,
            Redirect(status) | Respond(status) => status,
            RateLimited(_) => StatusCode::TOO_MANY_REQUESTS,
        }
    }

    /// The response body: one line saying why (a route's answers have
    /// their own, or none).
    pub fn message(self) -> Cow<'static, str> {
        use LocalReply::*;
        Cow::Borrowed(match self {
            Redirect(_) | Respond(_) => "",
            MissingHost => "fulcrum: HTTP/1.1 request without Host\n",
            TwoHosts => "fulcrum: request with more than one Host\n",
            BadHead(why) => return Cow::Owned(format!("fulcrum: {why}\n")),
            HeadTooLarge => "fulcrum: request head too large\n",
            NoRoute => "fulcrum: no route for this host and path\n",
            BodyTooLarge => "fulcrum: request body too large\n",
            MalformedBody => "fulcrum: malformed request body\n",
            HeadersNotForwardable => "fulcrum: request headers cannot be forwarded\n",
            TargetNotForwardable => "fulcrum: request target cannot be forwarded\n",
            CannotResend => "fulcrum: request cannot be sent again\n",
            NoEndpoint => "fulcrum: no endpoint available\n",
            MaxRequests => "fulcrum: cluster overloaded (max_requests)\n",
            MaxConnections => "fulcrum: cluster overloaded (max_connections)\n",
            ConnectFailure | UpstreamReset => "fulcrum: upstream connection failed\n",
            Timeout => "fulcrum: upstream did not answer in time\n",
            RateLimited(_) => "fulcrum: rate limit exceeded\n",
        })
    }

    /// The counter of `stats` the reply counts in (one per status, as
    /// `fulcrum_local_responses_total` shows them).
    pub fn counter(self, stats: &ProxyStats) -> &AtomicU64 {
        if let LocalReply::Redirect(_) | LocalReply::Respond(_) = self {
            return &stats.route_responses;
        }
        match self.status() {
            StatusCode::NOT_FOUND => &stats.no_route,
            StatusCode::PAYLOAD_TOO_LARGE => &stats.payload_too_large,
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE => &stats.header_too_large,
            StatusCode::BAD_GATEWAY => &stats.bad_gateway,
            StatusCode::SERVICE_UNAVAILABLE => &stats.unavailable,
            StatusCode::GATEWAY_TIMEOUT => &stats.gateway_timeout,
            StatusCode::TOO_MANY_REQUESTS => &stats.rate_limited,
            _ => &stats.bad_request,
        }
    }

    /// The access log's flag for the request.
    pub fn flag(self) -> Flags {
        use LocalReply::*;
        match self {
            MissingHost | TwoHosts | BadHead(_) | MalformedBody | HeadersNotForwardable | TargetNotForwardable => {
                Flags::BAD_REQUEST
            }
            HeadTooLarge | Redirect(_) | Respond(_) => Flags::default(),
            NoRoute => Flags::NO_ROUTE,
            BodyTooLarge => Flags::TOO_LARGE,
            NoEndpoint => Flags::NO_HEALTHY_UPSTREAM,
            MaxRequests | MaxConnections => Flags::UPSTREAM_OVERFLOW,
            ConnectFailure => Flags::UPSTREAM_CONNECT_FAILURE,
            CannotResend | UpstreamReset => Flags::UPSTREAM_RESET,
            Timeout => Flags::UPSTREAM_TIMEOUT,
            RateLimited(_) => Flags::RATE_LIMITED,
        }
    }

    /// What the balancer hears of the pick, if an endpoint was picked
    /// before the proxy answered.
    pub fn heard(self) -> Heard {
        match self {
            LocalReply::ConnectFailure | LocalReply::UpstreamReset | LocalReply::Timeout => Heard::Failure,
            _ => Heard::Cancelled,
        }
    }

    /// Whether the reply counts in the cluster's overflows
    /// (`fulcrum_cluster_overflow_total`) when it settles a pick:
    /// `max_connections`'s. A `max_requests` overflow is counted by the
    /// pick it prevents.
    pub fn overflows(self) -> bool {
        self == LocalReply::MaxConnections
    }
}

impl From<NoPick> for LocalReply {
    fn from(no: NoPick) -> LocalReply {
        match no {
            NoPick::Empty => LocalReply::NoEndpoint,
            NoPick::Overflow => LocalReply::MaxRequests,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering::Relaxed;

    use super::*;

    const ALL: [LocalReply; 17] = [
        LocalReply::MissingHost,
        LocalReply::TwoHosts,
        LocalReply::BadHead("malformed request line"),
        LocalReply::HeadTooLarge,
        LocalReply::NoRoute,
        LocalReply::BodyTooLarge,
        LocalReply::MalformedBody,
        LocalReply::HeadersNotForwardable,
        LocalReply::TargetNotForwardable,
        LocalReply::CannotResend,
        LocalReply::NoEndpoint,
        LocalReply::MaxRequests,
        LocalReply::MaxConnections,
        LocalReply::ConnectFailure,
        LocalReply::UpstreamReset,
        LocalReply::Timeout,
        LocalReply::RateLimited(1),
    ];

    #[test]
    fn each_reply_counts_under_its_own_status() {
        for reply in ALL {
            let stats = ProxyStats::default();
            reply.counter(&stats).fetch_add(1, Relaxed);
            let counted: Vec<u16> = stats.local_responses().iter().filter(|(_, n)| *n == 1).map(|(c, _)| *c).collect();
            assert_eq!(counted, [reply.status().as_u16()], "{reply:?}");
            let message = reply.message();
            assert!(message.starts_with("fulcrum: ") && message.ends_with('\n'), "{reply:?}: {message:?}");
        }
    }

    #[test]
    fn a_cluster_overload_reads_the_same_wherever_it_happens() {
        // Both limits flag the record as an overflow (`UO`) and say which
        // limit it was; no endpoint is a different answer.
        let requests = LocalReply::from(NoPick::Overflow);
        assert_eq!(requests, LocalReply::MaxRequests);
        for overload in [requests, LocalReply::MaxConnections] {
            assert_eq!(overload.status(), StatusCode::SERVICE_UNAVAILABLE);
            assert_eq!(overload.flag(), Flags::UPSTREAM_OVERFLOW);
            assert_eq!(overload.heard(), Heard::Cancelled);
        }
        assert!(requests.message().contains("max_requests"));
        assert!(LocalReply::MaxConnections.message().contains("max_connections"));
        assert!(LocalReply::MaxConnections.overflows() && !requests.overflows());
        let empty = LocalReply::from(NoPick::Empty);
        assert_eq!((empty, empty.flag()), (LocalReply::NoEndpoint, Flags::NO_HEALTHY_UPSTREAM));
        assert_ne!(empty.message(), requests.message());
    }

    #[test]
    fn only_the_endpoints_own_failures_count_against_it() {
        let failures: Vec<LocalReply> = ALL.into_iter().filter(|r| r.heard() == Heard::Failure).collect();
        assert_eq!(failures, [LocalReply::ConnectFailure, LocalReply::UpstreamReset, LocalReply::Timeout]);
    }
}

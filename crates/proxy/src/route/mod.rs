//! Routes: which requests a route takes and what it does with them.
//!
//! A listener's routes are compiled once, when the configuration loads
//! ([`compile`]), into a [`RouteTable`]: hosts lowercased (`*.example.com`
//! kept as a suffix), methods and header names parsed, and every regular
//! expression of the listener gathered into one set per subject — the
//! path, each header name, each query parameter — so a request runs each
//! set at most once, however many routes use it. The conditions are
//! indexed by subject, exact values by their hash, so that a
//! request is checked against all routes at once rather than one by one. A
//! route matches when every condition it gives holds; the first route that
//! matches wins.
//!
//! What a route does is its [`Action`]: forward to a cluster or a weighted
//! [`Split`] of clusters, [`Redirect`], or [`Respond`] directly. Forwarded
//! requests may have their path and host rewritten ([`Rewrite`]), their
//! request and response headers changed ([`HeaderOps`], whose values are
//! [`Template`]s with a few variables), and their own timeout and retry
//! policy.

pub(crate) mod action;
pub(crate) mod compile;
pub(crate) mod index;
pub(crate) mod matcher;
pub(crate) mod regexes;

pub use action::{Action, HeaderOps, Redirect, Respond, Rewrite, Split, Template, Vars};
pub(crate) use compile::compile;
pub use compile::RouteError;
pub use matcher::{Route, RouteTable};

/// The header whose value the `$request_id` variable reads when the
/// listener names none (`request_id.header`).
pub static REQUEST_ID: http::header::HeaderName = http::header::HeaderName::from_static("x-request-id");

#[cfg(test)]
mod tests;

//! Fulcrum's L7 proxy: HTTP/1.1, HTTP/2 (h2c and TLS with ALPN), HTTP/3 and TCP
//! load balancing on tokio and hyper, driving the `fulcrum-balance`
//! algorithms.
//!
//! [`Config`] loads and validates the TOML file (or builds the quick
//! one-cluster mode); [`Proxy::start`] binds the listeners and starts one
//! worker per core, each with its own balancers and connection pools
//! ([`cluster`] explains why and what it costs); [`Proxy::shutdown`] drains.
//! The request path is in [`http`] and [`tcp`]; counters and the admin
//! listener in [`metrics`] and [`admin`]. Pieces several of those share have
//! files of their own, so that no two modules import each other: the clock
//! ([`clock`]), the request body types ([`body`]), a worker's [`routing`],
//! the startup error ([`error`]) and the shutdown signal.

#![forbid(unsafe_code)]

pub mod access_log;
pub mod admin;
pub mod body;
pub mod client_io;
pub mod clock;
pub mod cluster;
pub mod config;
pub mod ctl;
pub mod error;
pub mod ext_connect;
pub mod grpc;
pub mod h1;
pub mod h3;
pub mod health;
pub mod http;
pub mod local_reply;
pub mod metrics;
pub mod model;
pub mod overrides;
pub mod passthrough;
mod pipe;
pub mod proxy_protocol;
pub mod route;
pub mod routing;
pub mod runtime;
pub mod server;
mod shutdown;
pub mod tcp;
pub mod tls;
pub mod tls_files;
pub mod trace_context;
pub mod upstream;
pub mod upstream_tls;

pub use config::{Config, ConfigError};
pub use server::{Proxy, ServeError, DEFAULT_DRAIN};

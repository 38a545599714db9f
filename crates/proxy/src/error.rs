//! Why the proxy could not start or reload: the one error type of
//! [`Proxy::start`](crate::Proxy::start) and [`Proxy::reload`](crate::Proxy::reload), also
//! returned by the TLS setup, which the server module uses.

use std::net::SocketAddr;
use std::path::PathBuf;

/// Why the proxy could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// A listener address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// A TLS certificate or key could not be used.
    #[error("TLS file {}: {message}", path.display())]
    Tls {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// A listener's access log could not be opened.
    #[error("listener {listener}: cannot open the access log: {source}")]
    AccessLog {
        /// The listener's configured address.
        listener: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// A thread or runtime could not be started.
    #[error("cannot start: {0}")]
    Runtime(#[from] std::io::Error),
    /// A reload asked for something only a restart can do.
    #[error("cannot reload: {0}; restart to apply it (the old configuration keeps serving)")]
    NeedsRestart(String),
}

//! The shutdown signal: a `watch` channel that holds `None` while the proxy
//! runs and, once it stops, how long to drain. The server sends it; workers,
//! listeners, health checks and cluster managers wait on [`stopping`].

use std::time::Duration;

use tokio::sync::watch;

/// `None` while running; once stopping, how long to drain.
pub(crate) type Stop = Option<Duration>;

/// Resolves once the proxy is told to stop.
pub(crate) async fn stopping(rx: &mut watch::Receiver<Stop>) {
    // An error means the sender is gone, which is a stop too.
    let _ = rx.wait_for(Option::is_some).await.map(|_| ());
}

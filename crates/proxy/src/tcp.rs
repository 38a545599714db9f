//! Plain TCP proxying, balanced per connection.
//!
//! Each accepted connection asks the cluster's balancer for an endpoint
//! (hash-based algorithms hash the client's IP address), connects within the
//! cluster's `connect_timeout`, and copies bytes both ways until either side
//! closes. The balancer counts the connection as active until it ends, and
//! learns the connect time as its latency; a connect that fails or times out
//! is a failure, and another endpoint is tried within the retry policy's
//! attempts and budget before the client's connection is closed.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use fulcrum_resilience::RequestResult;
use tokio::net::TcpStream;
use xxhash_rust::xxh64::xxh64;

use crate::clock::Epoch;
use crate::cluster::WorkerCluster;

fn ip_hash(peer: SocketAddr) -> u64 {
    match peer.ip() {
        std::net::IpAddr::V4(ip) => xxh64(&ip.octets(), 0),
        std::net::IpAddr::V6(ip) => xxh64(&ip.octets(), 0),
    }
}

/// Proxy one client connection to an endpoint of `cluster`.
pub async fn proxy(cluster: Arc<WorkerCluster>, epoch: Epoch, mut inbound: TcpStream, peer: SocketAddr) {
    let mut tried = Vec::new();
    let (pick, mut outbound, latency) = loop {
        // No endpoint or too many in flight: closing is all TCP can say.
        let Ok(pick) = cluster.pick(epoch.now(), Some(ip_hash(peer)), &tried) else { return };
        tried.push(pick.ticket.endpoint());
        let started = Instant::now();
        let timeout = cluster.shared.config.connect_timeout;
        let connected = tokio::time::timeout(timeout, TcpStream::connect(pick.upstream.addr)).await;
        let latency = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        match connected {
            Ok(Ok(s)) => break (pick, s, latency),
            Ok(Err(_)) | Err(_) => {
                cluster.complete(pick, epoch.now(), latency, RequestResult::GatewayFailure);
                // Nothing was sent yet, so another endpoint is always safe to try.
                if tried.len() as u32 >= cluster.shared.config.retries.attempts || !cluster.may_retry(epoch.now()) {
                    return;
                }
            }
        }
    };
    let _ = outbound.set_nodelay(true);
    let _ = inbound.set_nodelay(true);
    // Errors here are the peers resetting; the connection is over either way.
    let copied = crate::pipe::join(&mut inbound, &mut outbound).await;
    let result = if copied.is_ok() { RequestResult::Success } else { RequestResult::GatewayFailure };
    cluster.complete(pick, epoch.now(), latency, result);
}

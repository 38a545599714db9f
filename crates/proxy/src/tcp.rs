//! Plain TCP proxying, balanced per connection.
//!
//! Each accepted connection asks the cluster's balancer for an endpoint
//! (hash-based algorithms hash the client's IP address), connects within the
//! cluster's `connect_timeout`, and copies bytes both ways until either side
//! closes. The balancer counts the connection as active until it ends, and
//! learns the connect time as its latency; a connect that fails or times out
//! is a failure, and another endpoint is tried within the retry policy's
//! attempts and budget before the client's connection is closed.
//!
//! [`serve`] is a TCP or TLS passthrough listener's connection: its PROXY
//! protocol header if the listener takes one, the ClientHello's server name
//! on a passthrough listener (`crate::passthrough`), then [`proxy`]. A
//! cluster with `proxy_protocol` gets a header before the client's bytes.

use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Instant;

use fulcrum_resilience::RequestResult;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use xxhash_rust::xxh64::xxh64;

use crate::clock::Epoch;
use crate::cluster::WorkerCluster;
use crate::config::ListenerProtocol;
use crate::http::HttpService;
use crate::proxy_protocol::Addresses;

/// Serve one connection of `service`'s TCP or TLS passthrough listener.
pub async fn serve(service: Arc<HttpService>, mut inbound: TcpStream, peer: SocketAddr) {
    let routing = service.routing.borrow().clone();
    let listener = &routing.listeners[service.listener];
    let rule = listener.proxy_protocol.as_ref();
    let Some(client) = crate::proxy_protocol::client_of(&mut inbound, peer, rule, &service.stats).await else { return };
    let (first, cluster) = if listener.protocol == ListenerProtocol::TlsPassthrough {
        let timeout = listener.limits.header_read_timeout;
        let (first, hello) = match crate::passthrough::read_hello(&mut inbound, timeout).await {
            Ok(hello) => hello,
            Err(e) => {
                service.stats.passthrough_refused[0].fetch_add(1, Relaxed);
                eprintln!("fulcrum: listener {}: closed a connection from {}: {e}", listener.listen, client.source);
                return;
            }
        };
        let Some(cluster) = crate::passthrough::route(&listener.sni_routes, listener.cluster, &hello) else {
            service.stats.passthrough_refused[1].fetch_add(1, Relaxed);
            let name = hello.server_name.as_deref().unwrap_or("(none)");
            let alpn = if hello.alpn.is_empty() { String::new() } else { format!(" (ALPN {})", hello.alpn.join(", ")) };
            eprintln!(
                "fulcrum: listener {}: no cluster for server name {name} from {}{alpn}",
                listener.listen, client.source
            );
            return;
        };
        (first, cluster)
    } else {
        let Some(cluster) = listener.cluster else { return };
        (Vec::new(), cluster)
    };
    let Some(cluster) = routing.clusters.get(cluster).cloned() else { return };
    drop(routing);
    proxy(cluster, service.epoch, inbound, client, &first).await;
}

fn ip_hash(peer: SocketAddr) -> u64 {
    match peer.ip() {
        std::net::IpAddr::V4(ip) => xxh64(&ip.octets(), 0),
        std::net::IpAddr::V6(ip) => xxh64(&ip.octets(), 0),
    }
}

/// Proxy one client connection to an endpoint of `cluster`: the cluster's
/// PROXY protocol header if it sends one, the bytes already read (`first`),
/// then both ways until either side closes.
pub async fn proxy(cluster: Arc<WorkerCluster>, epoch: Epoch, mut inbound: TcpStream, client: Addresses, first: &[u8]) {
    let peer = client.source;
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
    let header = cluster.shared.config.proxy_protocol.map(|v| crate::proxy_protocol::encode(v, Some(client)));
    let preface = [header.as_deref().unwrap_or_default(), first].concat();
    if !preface.is_empty() && outbound.write_all(&preface).await.is_err() {
        cluster.complete(pick, epoch.now(), latency, RequestResult::GatewayFailure);
        return;
    }
    // Errors here are the peers resetting; the connection is over either way.
    let copied = crate::pipe::join(&mut inbound, &mut outbound).await;
    let result = if copied.is_ok() { RequestResult::Success } else { RequestResult::GatewayFailure };
    cluster.complete(pick, epoch.now(), latency, result);
}

//! Active health checks: every endpoint of a cluster with a `health_check`
//! is probed on its own schedule (interval plus random jitter) by an HTTP
//! GET or a TCP connect (over TLS when the cluster has `tls`), and the verdicts go to
//! [`SharedCluster::record_check`], which flips an endpoint's health after
//! `unhealthy_threshold` failures or `healthy_threshold` passes in a row.
//! Runs on the control thread, never on a worker. [`probe`] is also what
//! `fulcrum lb health` checks the L4 data plane's backends with.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use fulcrum_balance::{EndpointId, Rng};
use http_body_util::Empty;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::sync::watch;

use crate::cluster::SharedCluster;
use crate::config::{HealthCheck, HealthCheckKind};
use crate::proxy_protocol::encode;
use crate::upstream_tls::{UpstreamStream, UpstreamTls};

/// One probe of `addr` as `check` says (its kind, path, statuses and
/// timeout): whether it passed.
pub async fn probe(check: &HealthCheck, addr: SocketAddr) -> bool {
    probe_over(check, addr, &[], None).await
}

/// [`probe`], with `preface` (a PROXY protocol header) sent first, over TLS
/// when `tls` is given (a TCP check then passes once the handshake has); the
/// HTTP check speaks HTTP/2 when TLS chose it.
pub async fn probe_over(check: &HealthCheck, addr: SocketAddr, preface: &[u8], tls: Option<&UpstreamTls>) -> bool {
    let attempt = async {
        let stream = crate::upstream::connect(addr, check.timeout, preface, tls).await?;
        if check.kind == HealthCheckKind::Tcp {
            return Some(true);
        }
        let h2 = matches!(&stream, UpstreamStream::Tls(s) if s.get_ref().1.alpn_protocol() == Some(b"h2"));
        let req = http::Request::get(check.path.as_str())
            .header(http::header::HOST, addr.to_string())
            .header(http::header::USER_AGENT, "fulcrum-health-check")
            .body(Empty::<Bytes>::new())
            .ok()?;
        let status = if h2 {
            let (mut send, conn) =
                hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream)).await.ok()?;
            tokio::spawn(conn);
            send.send_request(req).await.ok()?.status()
        } else {
            let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.ok()?;
            tokio::spawn(conn);
            send.send_request(req).await.ok()?.status()
        };
        Some((check.expected_status[0]..=check.expected_status[1]).contains(&status.as_u16()))
    };
    matches!(tokio::time::timeout(check.timeout, attempt).await, Ok(Some(true)))
}

/// Check every endpoint of `cluster` until the proxy stops. Endpoints that
/// appear later (DNS) are picked up at the next round.
pub async fn run(cluster: Arc<SharedCluster>, mut stopped: watch::Receiver<Option<Duration>>, seed: u64) {
    let Some(check) = cluster.config.health_check.clone() else { return };
    // The endpoints of a cluster that sends the PROXY protocol expect a
    // header on every connection: checks send one that names no client.
    let preface: Arc<[u8]> = cluster.config.proxy_protocol.map(|v| encode(v, None)).unwrap_or_default().into();
    let mut checking: Vec<EndpointId> = Vec::new();
    let mut rng = Rng::new(seed);
    loop {
        for e in cluster.current().all.iter() {
            if checking.contains(&e.id) {
                continue;
            }
            checking.push(e.id);
            let (cluster, check, id, preface) = (cluster.clone(), check.clone(), e.id, preface.clone());
            let mut stopped = stopped.clone();
            let jitter_ns = u64::try_from(check.jitter.as_nanos()).unwrap_or(0);
            let mut rng = rng.fork();
            tokio::spawn(async move {
                loop {
                    let Some(addr) = cluster.current().upstream(id).map(|u| u.addr) else { return };
                    if !cluster.current().all.iter().any(|e| e.id == id) {
                        return; // Gone from the set; a new task starts if it comes back.
                    }
                    let passed = probe_over(&check, addr, &preface, cluster.tls.as_deref()).await;
                    cluster.record_check(id, passed);
                    let jitter =
                        if jitter_ns > 0 { Duration::from_nanos(rng.below(jitter_ns)) } else { Duration::ZERO };
                    tokio::select! {
                        _ = crate::shutdown::stopping(&mut stopped) => return,
                        _ = tokio::time::sleep(check.interval + jitter) => {}
                    }
                }
            });
        }
        checking.retain(|id| cluster.current().all.iter().any(|e| e.id == *id));
        tokio::select! {
            _ = crate::shutdown::stopping(&mut stopped) => return,
            _ = tokio::time::sleep(check.interval) => {}
        }
    }
}

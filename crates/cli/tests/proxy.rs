//! End-to-end: the real `fulcrum serve` binary in front of real backends on
//! loopback. HTTP/1.1, h2c, TLS with ALPN h2, TCP mode, every algorithm's
//! behaviour through the proxy, metrics, and a graceful stop.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::h2c::{h2_client, h2c_client};
use common::{app_config, closed_port, eventually, get, send, spread, toml_list, Fulcrum};
use fulcrum_load::{Backends, BackendsConfig, BACKEND_HEADER};
use http_body_util::{BodyExt, Empty};

fn backends(delays_ms: &[u64]) -> Backends {
    let delays: Vec<Duration> = delays_ms.iter().map(|&ms| Duration::from_millis(ms)).collect();
    Backends::start(BackendsConfig::fixed_delays(&delays)).unwrap()
}

fn endpoints(b: &Backends) -> String {
    toml_list(&b.addrs())
}

/// One worker (so counts are exact), an admin listener, one HTTP listener.
fn config(b: &Backends, algorithm: &str, extra_cluster: &str) -> String {
    app_config(&endpoints(b), "workers = 1", "", &format!("algorithm = {{ kind = \"{algorithm}\" }}\n{extra_cluster}"))
}

/// Waits until the proxy has `n` requests in flight to its upstreams (from
/// the admin `/status`): a test acts once its requests have arrived, not
/// after a sleep that guesses when they will have.
fn wait_in_flight(admin: SocketAddr, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let s: serde_json::Value = serde_json::from_slice(&get(admin, "admin", "/status", "").body).unwrap();
        let in_flight: u64 = s["clusters"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|c| c["endpoints"].as_array().unwrap())
            .map(|e| e["in_flight"].as_u64().unwrap())
            .sum();
        if in_flight >= n {
            return;
        }
        assert!(Instant::now() < deadline, "{n} requests never in flight: {s}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn http1_round_robin_reaches_every_backend_equally_and_forwards_headers() {
    let b = backends(&[0, 0, 0]);
    let f = Fulcrum::serve("rr", &config(&b, "round-robin", ""));
    let counts = spread(f.listen[0], 30, 1, "");
    assert_eq!(counts.values().copied().collect::<Vec<_>>(), vec![10; 3], "{counts:?}");
    let r = get(f.listen[0], "app", "/", "");
    assert_eq!(r.header("via"), Some("1.1 fulcrum"));
}

#[test]
fn hash_keys_stick_to_one_backend() {
    let b = backends(&[0, 0, 0, 0]);
    for algorithm in ["ring-hash", "maglev", "rendezvous"] {
        let f = Fulcrum::serve(algorithm, &config(&b, algorithm, "hash_key = { header = \"x-user\" }"));
        let mut homes = std::collections::HashSet::new();
        for user in 0..12 {
            let counts = spread(f.listen[0], 8, 1, &format!("x-user: user-{user}\r\n"));
            assert_eq!(counts.len(), 1, "{algorithm}: user {user} landed on {counts:?}");
            homes.extend(counts.into_keys());
        }
        assert!(homes.len() >= 3, "{algorithm}: 12 users on only {homes:?}");
    }
}

#[test]
fn peak_ewma_avoids_a_slow_backend() {
    let b = backends(&[2, 2, 2, 2, 60]);
    let f = Fulcrum::serve("pe", &config(&b, "peak-ewma", ""));
    let counts = spread(f.listen[0], 400, 4, "");
    let slow = counts.get("4").copied().unwrap_or(0);
    // Round robin would send it 80.
    assert!(slow <= 12, "the 60 ms backend got {slow} of 400: {counts:?}");
}

/// Requests in flight to the endpoint at `address`, from the admin `/status`.
fn endpoint_in_flight(admin: SocketAddr, address: SocketAddr) -> u64 {
    let s: serde_json::Value = serde_json::from_slice(&get(admin, "admin", "/status", "").body).unwrap();
    let endpoints = s["clusters"].as_array().unwrap().iter().flat_map(|c| c["endpoints"].as_array().unwrap());
    let found = endpoints.clone().find(|e| e["address"] == address.to_string());
    found.unwrap_or_else(|| panic!("no endpoint {address} in {s}"))["in_flight"].as_u64().unwrap()
}

#[test]
fn least_request_follows_in_flight_counts() {
    // Two backends, so both are always compared. While the slow one holds a
    // request, the fast one has fewer in flight whenever it is idle, and a
    // new request must go there. Each request is sent only once the admin
    // shows the fast one idle (0 against 1), so a loaded machine, on which
    // the fast one's requests overlap, cannot make a tie; and only within
    // half the hold after it was seen, so every one is sent while it lasts.
    const HOLD: Duration = Duration::from_secs(6);
    let b = backends(&[HOLD.as_millis() as u64, 1]);
    let [slow, fast] = [b.addrs()[0], b.addrs()[1]];
    let f = Fulcrum::serve("lr", &config(&b, "least-request", ""));
    let (addr, admin) = (f.listen[0], f.admin.unwrap());
    // One request at a time until one stays on the slow backend.
    let holder =
        std::thread::spawn(move || while get(addr, "app", "/hold", "").header(BACKEND_HEADER).unwrap() != "0" {});
    eventually("the slow backend holding a request", || endpoint_in_flight(admin, slow) == 1);
    let held = Instant::now();
    let (mut sent, mut to_slow) = (0, 0);
    while sent < 10 {
        eventually("the fast backend idle", || endpoint_in_flight(admin, fast) == 0);
        if held.elapsed() >= HOLD / 2 {
            break;
        }
        sent += 1;
        to_slow += usize::from(get(addr, "app", &format!("/{sent}"), "").header(BACKEND_HEADER).unwrap() == "0");
    }
    assert_eq!(to_slow, 0, "the slow backend got {to_slow} of {sent} sent while it held one and the fast one none");
    assert!(sent >= 5, "only {sent} requests sent in the first half of the slow backend's hold");
    holder.join().unwrap();
}

#[test]
fn connection_and_pending_limits_answer_503() {
    // The first request holds the connection for 3 s: the second one comes
    // as soon as the first is seen in flight, well within that.
    let b = backends(&[3000]);
    let f = Fulcrum::serve("breaker", &config(&b, "round-robin", "max_connections = 1\nmax_pending = 0"));
    let addr = f.listen[0];
    let first = std::thread::spawn(move || get(addr, "app", "/", "").status);
    wait_in_flight(f.admin.unwrap(), 1);
    // The one connection is busy and nobody may wait for it.
    assert_eq!(get(addr, "app", "/", "").status, 503);
    assert_eq!(first.join().unwrap(), 200);
    let metrics = String::from_utf8(get(f.admin.unwrap(), "admin", "/metrics", "").body).unwrap();
    assert!(metrics.contains("fulcrum_cluster_overflow_total{cluster=\"app\"} 1"), "{metrics}");
    assert!(metrics.contains("fulcrum_cluster_upstream_connections{cluster=\"app\"} 1"), "{metrics}");
}

#[test]
fn a_request_with_a_body_goes_to_another_endpoint_when_one_refuses() {
    // Round robin over a closed port and a live backend, default retries
    // (connect failures, two tries): every POST whose first pick refuses the
    // connection still reaches the live backend with its body, since a body
    // that was never sent comes back from the pool.
    let b = backends(&[0]);
    let endpoints = toml_list(&[closed_port().to_string(), b.addrs()[0].to_string()]);
    let f = Fulcrum::serve("retry-body", &app_config(&endpoints, "workers = 1", "", ""));
    for i in 0..6 {
        let body = format!("payload {i}");
        let raw = format!(
            "POST /upload HTTP/1.1\r\nHost: app\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        let r = send(f.listen[0], raw.as_bytes());
        assert_eq!(r.status, 200, "POST {i}: {r:?}");
    }
}

#[test]
fn an_upstream_that_answers_before_reading_the_body_is_heard() {
    // The upstream reads the request head, answers 413 at once and reads
    // nothing more until the client has its answer (or 30 s). The 16 MiB
    // body cannot fit in the sockets' buffers, so a proxy that finished
    // writing it before reading would hang until the upstream gives up,
    // and the client would time out; Fulcrum reads while it writes.
    use std::io::{Read, Write};
    let upstream = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = upstream.local_addr().unwrap();
    let (answered, hold) = std::sync::mpsc::channel::<()>();
    let answering = std::thread::spawn(move || {
        let (mut s, _) = upstream.accept().unwrap();
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = s.read(&mut buf).unwrap();
            assert!(n > 0, "the request head never came");
            seen.extend_from_slice(&buf[..n]);
        }
        s.write_all(b"HTTP/1.1 413 Payload Too Large\r\ncontent-length: 8\r\n\r\ntoo big\n").unwrap();
        let _ = hold.recv_timeout(Duration::from_secs(30));
    });
    let f = Fulcrum::serve("early-answer", &app_config(&toml_list(&[addr]), "workers = 1", "", ""));
    let mut client = std::net::TcpStream::connect(f.listen[0]).unwrap();
    client.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let size = 16 << 20;
    let head = format!("POST /upload HTTP/1.1\r\nHost: app\r\nContent-Length: {size}\r\n\r\n");
    client.write_all(head.as_bytes()).unwrap();
    let mut writer = client.try_clone().unwrap();
    // The proxy may stop reading the body once it has the answer: write it
    // from another thread and ignore how that ends.
    let body = std::thread::spawn(move || {
        let _ = writer.write_all(&vec![b'x'; size]);
    });
    let started = Instant::now();
    let mut reply = Vec::new();
    let mut buf = [0u8; 4096];
    while !reply.windows(4).any(|w| w == b"\r\n\r\n") {
        match client.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => reply.extend_from_slice(&buf[..n]),
        }
    }
    let reply = String::from_utf8_lossy(&reply);
    // The upstream is still holding its connection: the answer came while
    // the body was being written, not after the upstream gave up.
    assert!(reply.starts_with("HTTP/1.1 413"), "{reply:?} after {:?}", started.elapsed());
    let _ = answered.send(());
    // Ends the writer's write too, whether or not the proxy still reads.
    let _ = client.shutdown(std::net::Shutdown::Both);
    body.join().unwrap();
    answering.join().unwrap();
}

#[test]
fn h2c_and_tls_with_alpn_h2() {
    let b = backends(&[0, 0]);
    let dir = common::temp_dir("tls-certs");
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    std::fs::write(dir.join("cert.pem"), cert.cert.pem()).unwrap();
    std::fs::write(dir.join("key.pem"), cert.key_pair.serialize_pem()).unwrap();
    let text = format!(
        r#"
workers = 1
admin = "127.0.0.1:0"

[[listener]]
listen = "127.0.0.1:0"
routes = [{{ cluster = "app" }}]

[[listener]]
listen = "127.0.0.1:0"
tls = {{ cert = "{0}/cert.pem", key = "{0}/key.pem" }}
routes = [{{ cluster = "app" }}]

[[cluster]]
name = "app"
endpoints = [{1}]
upstream = "http2"
"#,
        dir.display(),
        endpoints(&b)
    );
    let f = Fulcrum::serve("tls", &text);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        // h2c with prior knowledge.
        let mut send = h2c_client(f.listen[0]).await;
        for _ in 0..4 {
            let req = http::Request::get("http://app/").body(Empty::<Bytes>::new()).unwrap();
            let resp = send.send_request(req).await.unwrap();
            assert_eq!((resp.status().as_u16(), resp.version()), (200, http::Version::HTTP_2));
            assert_eq!(resp.headers()["via"], "2 fulcrum");
            resp.into_body().collect().await.unwrap();
        }

        // TLS, ALPN offers h2 first: the proxy picks it.
        let mut roots = rustls::RootCertStore::empty();
        roots.add(cert.cert.der().clone()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let connector = tokio_rustls::TlsConnector::from(Arc::new(tls));
        let tcp = tokio::net::TcpStream::connect(f.listen[1]).await.unwrap();
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let stream = connector.connect(name, tcp).await.unwrap();
        assert_eq!(stream.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
        let mut send = h2_client(stream).await;
        let req = http::Request::get("https://localhost/").body(Empty::<Bytes>::new()).unwrap();
        let resp = send.send_request(req).await.unwrap();
        assert_eq!((resp.status().as_u16(), resp.version()), (200, http::Version::HTTP_2));
    });
    let _ = std::fs::remove_dir_all(dir);
    // The upstream side spoke HTTP/2 too: both backends served.
    assert_eq!(b.served().iter().sum::<u64>(), 5);
}

#[test]
fn tcp_mode_balances_connections() {
    let b = backends(&[0, 0, 0]);
    let text = format!(
        r#"
workers = 1
admin = "127.0.0.1:0"

[[listener]]
listen = "127.0.0.1:0"
protocol = "tcp"
cluster = "tcp"

[[cluster]]
name = "tcp"
endpoints = [{}]
algorithm = {{ kind = "round-robin" }}
"#,
        endpoints(&b)
    );
    let f = Fulcrum::serve("tcp", &text);
    // Each request is its own TCP connection, balanced per connection.
    let counts = spread(f.listen[0], 9, 1, "");
    assert_eq!(counts.values().copied().collect::<Vec<_>>(), vec![3; 3], "{counts:?}");
    let metrics = String::from_utf8(get(f.admin.unwrap(), "admin", "/metrics", "").body).unwrap();
    assert_eq!(metrics.matches("fulcrum_upstream_requests_total{cluster=\"tcp\"").count(), 3, "{metrics}");
}

#[test]
fn admin_reports_metrics_status_and_health() {
    let b = backends(&[0, 0]);
    let f = Fulcrum::serve("admin", &config(&b, "peak-ewma", ""));
    spread(f.listen[0], 10, 1, "");
    let admin = f.admin.unwrap();
    assert_eq!(get(admin, "admin", "/healthz", "").status, 200);
    let metrics = String::from_utf8(get(admin, "admin", "/metrics", "").body).unwrap();
    let total: u64 = metrics
        .lines()
        .filter(|l| l.starts_with("fulcrum_upstream_requests_total{"))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(total, 10, "{metrics}");
    assert!(metrics.contains("fulcrum_upstream_latency_seconds_bucket{"), "{metrics}");
    assert!(metrics.contains("fulcrum_balancer_latency_estimate_seconds{"), "{metrics}");
    let status: serde_json::Value = serde_json::from_slice(&get(admin, "admin", "/status", "").body).unwrap();
    assert_eq!(status["clusters"][0]["algorithm"]["kind"], "peak-ewma");
    assert_eq!(status["clusters"][0]["endpoints"].as_array().unwrap().len(), 2);
}

#[test]
fn sigterm_as_soon_as_it_listens_is_a_clean_stop() {
    // Signals are caught before the "listening" lines appear, so a SIGTERM
    // sent the moment they do never finds the default action (death by
    // signal) in place.
    let b = backends(&[0]);
    for i in 0..10 {
        let f = Fulcrum::serve("early-term", &config(&b, "round-robin", ""));
        let status = f.terminate();
        assert!(status.success(), "start {i}: {status:?}");
    }
}

#[test]
fn sigterm_lets_a_request_in_flight_finish() {
    let b = backends(&[400]);
    let f = Fulcrum::serve("drain", &config(&b, "round-robin", ""));
    let addr = f.listen[0];
    let started = Instant::now();
    let inflight = std::thread::spawn(move || get(addr, "app", "/", ""));
    wait_in_flight(f.admin.unwrap(), 1);
    let status = f.terminate();
    assert!(status.success(), "{status:?}");
    let r = inflight.join().unwrap();
    assert_eq!(r.status, 200, "{r:?}");
    assert!(started.elapsed() >= Duration::from_millis(400));
}

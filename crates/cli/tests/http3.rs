//! End-to-end: HTTP/3 through the real `fulcrum serve` to a `fulcrum
//! backend`, with a quinn/h3 client and (ignored unless Python's `aioquic`
//! is installed, as `scripts/test` does) with `aioquic`; the `Alt-Svc` a TLS
//! listener advertises; the listener's connection limit, idle timeout and
//! body limit; and bad input (datagrams that are not QUIC, a client
//! expecting another name) that must leave the proxy serving; client
//! certificates over QUIC (verified, forwarded, logged, matched by routes);
//! and `fulcrum load` over HTTP/3 and HTTP/2 with TLS. Loopback only,
//! bounded, every process ended by PID.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes};
use common::{fulcrum_backend, temp_dir, Fulcrum, KillOnDrop};
use rustls::pki_types::CertificateDer;

/// Response body size the backend sends.
const BODY: usize = 3000;

/// A `fulcrum backend` answering `BODY` bytes, and its address.
fn backend() -> (KillOnDrop, SocketAddr) {
    let (child, addrs) = fulcrum_backend(&["--body-bytes", &BODY.to_string()]);
    (child, addrs[0])
}

/// A self-signed certificate for `localhost` written to `dir`; its DER.
fn certificate(dir: &Path) -> CertificateDer<'static> {
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    std::fs::write(dir.join("cert.pem"), cert.cert.pem()).unwrap();
    std::fs::write(dir.join("key.pem"), cert.key_pair.serialize_pem()).unwrap();
    cert.cert.der().clone()
}

/// Listeners: 0 HTTP/3 with a JSON access log, 1 HTTP/3 with one
/// connection at most and a short idle timeout, 2 HTTPS advertising 0.
fn config(dir: &Path, backend: SocketAddr) -> String {
    let d = dir.display();
    format!(
        r#"admin = "127.0.0.1:0"
workers = 2

[[listener]]
listen = "127.0.0.1:0"
protocol = "http3"
tls = {{ cert = "{d}/cert.pem", key = "{d}/key.pem" }}
routes = [{{ cluster = "app" }}]
access_log = {{ path = "{d}/access.log", json = true }}
limits = {{ max_body_bytes = 200000 }}

[[listener]]
listen = "127.0.0.1:0"
protocol = "http3"
tls = {{ cert = "{d}/cert.pem", key = "{d}/key.pem" }}
routes = [{{ cluster = "app" }}]
limits = {{ max_connections = 1, idle_timeout = "500ms" }}

[[listener]]
listen = "127.0.0.1:0"
tls = {{ cert = "{d}/cert.pem", key = "{d}/key.pem" }}
routes = [{{ cluster = "app" }}]
alt_svc = 'h3=":443"; ma=60'

[[cluster]]
name = "app"
endpoints = ["{backend}"]
"#
    )
}

/// A QUIC client trusting `ca`, offering ALPN h3.
fn client(ca: &CertificateDer<'static>) -> quinn::Endpoint {
    client_as(ca, None)
}

/// A QUIC client trusting `ca`, offering ALPN h3 and presenting the
/// certificate and key in the PEM files `identity`, if given.
fn client_as(ca: &CertificateDer<'static>, identity: Option<(&Path, &Path)>) -> quinn::Endpoint {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.clone()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(roots);
    let mut tls = match identity {
        Some((cert, key)) => {
            let chain = CertificateDer::pem_file_iter(cert).unwrap().map(Result::unwrap).collect();
            let key = rustls::pki_types::PrivateKeyDer::from_pem_file(key).unwrap();
            builder.with_client_auth_cert(chain, key).unwrap()
        }
        None => builder.with_no_client_auth(),
    };
    tls.alpn_protocols = vec![b"h3".to_vec()];
    let quic = quinn::crypto::rustls::QuicClientConfig::try_from(tls).unwrap();
    let mut endpoint = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
    endpoint.set_default_client_config(quinn::ClientConfig::new(Arc::new(quic)));
    endpoint
}

/// A response: status, headers, body.
type Answer = (u16, http::HeaderMap, Vec<u8>);

/// Open a connection to `addr` as `name` and send requests on it: each a
/// method, a path and a body.
async fn h3(
    endpoint: &quinn::Endpoint,
    addr: SocketAddr,
    name: &str,
    reqs: &[(&str, &str, &[u8])],
) -> Result<Vec<Answer>, String> {
    h3_with(endpoint, addr, name, reqs, &[]).await
}

/// [`h3`], every request carrying `headers`.
async fn h3_with(
    endpoint: &quinn::Endpoint,
    addr: SocketAddr,
    name: &str,
    reqs: &[(&str, &str, &[u8])],
    headers: &[(&str, &str)],
) -> Result<Vec<Answer>, String> {
    let conn = endpoint.connect(addr, name).map_err(|e| e.to_string())?.await.map_err(|e| e.to_string())?;
    let (mut driver, mut send) = h3::client::new(h3_quinn::Connection::new(conn)).await.map_err(|e| e.to_string())?;
    let drive = tokio::spawn(async move { std::future::poll_fn(|cx| driver.poll_close(cx)).await });
    let mut answers = Vec::new();
    for (method, path, body) in reqs {
        let mut req = http::Request::builder().method(*method).uri(format!("https://localhost{path}"));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let req = req.body(()).unwrap();
        let mut stream = send.send_request(req).await.map_err(|e| e.to_string())?;
        if !body.is_empty() {
            stream.send_data(Bytes::copy_from_slice(body)).await.map_err(|e| e.to_string())?;
        }
        stream.finish().await.map_err(|e| e.to_string())?;
        let response = stream.recv_response().await.map_err(|e| e.to_string())?;
        let mut data = Vec::new();
        while let Some(mut chunk) = stream.recv_data().await.map_err(|e| e.to_string())? {
            data.extend_from_slice(&chunk.copy_to_bytes(chunk.remaining()));
        }
        answers.push((response.status().as_u16(), response.headers().clone(), data));
    }
    drop(send);
    drive.abort();
    Ok(answers)
}

/// A POST to `addr` announcing a `length`-byte body it does not send; the status.
async fn h3_announced(endpoint: &quinn::Endpoint, addr: SocketAddr, length: usize) -> Result<u16, String> {
    let conn = endpoint.connect(addr, "localhost").map_err(|e| e.to_string())?.await.map_err(|e| e.to_string())?;
    let (mut driver, mut send) = h3::client::new(h3_quinn::Connection::new(conn)).await.map_err(|e| e.to_string())?;
    let drive = tokio::spawn(async move { std::future::poll_fn(|cx| driver.poll_close(cx)).await });
    let req = http::Request::post("https://localhost/big").header("content-length", length).body(()).unwrap();
    let mut stream = send.send_request(req).await.map_err(|e| e.to_string())?;
    let status = stream.recv_response().await.map_err(|e| e.to_string())?.status().as_u16();
    drive.abort();
    Ok(status)
}

/// The access log's lines once it has `n`, as JSON.
fn log_lines(path: &Path, n: usize) -> Vec<serde_json::Value> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.lines().count() >= n {
            return text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        }
        assert!(Instant::now() < deadline, "{} has fewer than {n} lines:\n{text}", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A GET over HTTPS (HTTP/1.1) to `addr`; the response head.
async fn https_head(addr: SocketAddr, ca: &CertificateDer<'static>) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.clone()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let mut stream = tokio_rustls::TlsConnector::from(Arc::new(tls)).connect(name, tcp).await.unwrap();
    stream.write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").await.unwrap();
    let mut out = Vec::new();
    let _ = stream.read_to_end(&mut out).await;
    let text = String::from_utf8_lossy(&out).to_string();
    text.split("\r\n\r\n").next().unwrap_or_default().to_string()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

#[test]
fn http3_requests_take_the_proxy_path_to_a_backend() {
    let dir = temp_dir("http3");
    let ca = certificate(&dir);
    let (_backend, backend_addr) = backend();
    let proxy = Fulcrum::serve("http3-proxy", &config(&dir, backend_addr));
    let (h3_addr, limited, https) = (proxy.listen[0], proxy.listen[1], proxy.listen[2]);
    let rt = runtime();
    rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(60), async {
            let endpoint = client(&ca);
            let upload = vec![7u8; 100_000];
            let reqs: [(&str, &str, &[u8]); 3] =
                [("GET", "/first?q=1", b""), ("POST", "/upload", &upload), ("GET", "/third", b"")];
            let answers = h3(&endpoint, h3_addr, "localhost", &reqs).await.unwrap();
            for (status, headers, body) in &answers {
                assert_eq!(*status, 200, "{headers:?}");
                assert_eq!(body.len(), BODY);
                assert!(headers.contains_key("x-fulcrum-backend"), "{headers:?}");
            }

            // A body announced over max_body_bytes: 413 before it is read.
            let big = h3_announced(&endpoint, h3_addr, 300_000).await.unwrap();
            assert_eq!(big, 413);

            // Bad input: datagrams that are not QUIC, a client that
            // expects another name; the proxy keeps serving.
            let junk = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            for len in [1usize, 20, 1200, 1500] {
                junk.send_to(&vec![0xc3; len], h3_addr).unwrap();
                junk.send_to(&vec![0x40; len], h3_addr).unwrap();
            }
            let wrong = h3(&endpoint, h3_addr, "unknown.test", &[("GET", "/", b"")]).await;
            assert!(wrong.is_err(), "a certificate for localhost passed as unknown.test: {wrong:?}");
            let again = h3(&endpoint, h3_addr, "localhost", &[("GET", "/after-junk", b"")]).await.unwrap();
            assert_eq!(again[0].0, 200);

            // One connection at most on the limited listener; its idle
            // timeout closes it, and then another is let in.
            let held = endpoint.connect(limited, "localhost").unwrap().await.unwrap();
            let refused = h3(&endpoint, limited, "localhost", &[("GET", "/", b"")]).await;
            assert!(refused.is_err(), "a second connection over max_connections = 1: {refused:?}");
            let closed = tokio::time::timeout(Duration::from_secs(5), held.closed()).await;
            assert!(closed.is_ok(), "idle_timeout did not close the connection");
            // The proxy's own idle timer may fire a little after the client's.
            let deadline = Instant::now() + Duration::from_secs(5);
            let after = loop {
                match h3(&endpoint, limited, "localhost", &[("GET", "/", b"")]).await {
                    Ok(a) => break a,
                    Err(e) if Instant::now() > deadline => panic!("no connection after the idle one closed: {e}"),
                    Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                }
            };
            assert_eq!(after[0].0, 200);

            let head = https_head(https, &ca).await;
            assert!(head.starts_with("HTTP/1.1 200"), "{head}");
            assert!(head.to_ascii_lowercase().contains("alt-svc: h3=\":443\"; ma=60"), "{head}");
        })
        .await
        .expect("HTTP/3 test timed out");
    });

    let log = log_lines(&dir.join("access.log"), 4);
    let first = log.iter().find(|l| l["path"] == "/first?q=1").expect("GET logged");
    assert_eq!(first["protocol"], "HTTP/3.0");
    assert_eq!(first["status"], 200);
    assert_eq!(first["bytes_out"], BODY);
    assert_eq!(first["cluster"], "app");
    let upload = log.iter().find(|l| l["path"] == "/upload").expect("POST logged");
    assert_eq!(upload["method"], "POST");
    assert_eq!(upload["bytes_in"], 100_000);
    assert!(proxy.terminate().success());
}

/// A tiny HTTP/3 client on aioquic's API: GET `url`'s path from host:port,
/// verifying with `ca`; prints the status and the body length. Given a
/// certificate and key too, it presents them and prints the body as well.
const AIOQUIC_CLIENT: &str = r#"
import asyncio, ssl, sys
from aioquic.asyncio.client import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration

class Client(QuicConnectionProtocol):
    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.h3 = H3Connection(self._quic)
        self.done = asyncio.get_running_loop().create_future()
        self.status, self.body = None, b""

    def quic_event_received(self, event):
        for e in self.h3.handle_event(event):
            if isinstance(e, HeadersReceived):
                self.status = dict(e.headers)[b":status"].decode()
            elif isinstance(e, DataReceived):
                self.body += e.data
            if getattr(e, "stream_ended", False) and not self.done.done():
                self.done.set_result(None)

async def main(host, port, ca, path, cert=None, key=None):
    config = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, server_name="localhost")
    config.load_verify_locations(ca)
    if cert:
        config.load_cert_chain(cert, key)
    async with connect(host, int(port), configuration=config, create_protocol=Client) as client:
        sid = client._quic.get_next_available_stream_id()
        client.h3.send_headers(sid, [(b":method", b"GET"), (b":scheme", b"https"),
            (b":authority", b"localhost"), (b":path", path.encode())], end_stream=True)
        client.transmit()
        await asyncio.wait_for(client.done, 10)
        print(client.status, len(client.body))
        if cert:
            print(client.body.decode())

asyncio.run(main(*sys.argv[1:]))
"#;

#[test]
#[ignore = "needs python aioquic"]
fn aioquic_gets_responses_through_the_proxy() {
    let dir = temp_dir("http3-aioquic");
    certificate(&dir);
    let (_backend, backend_addr) = backend();
    let proxy = Fulcrum::serve("http3-aioquic-proxy", &config(&dir, backend_addr));
    let script = dir.join("client.py");
    std::fs::write(&script, AIOQUIC_CLIENT).unwrap();
    let addr = proxy.listen[0];
    for path in ["/a", "/b?x=1"] {
        let out = Command::new("timeout")
            .args(["20", "python3", script.to_str().unwrap(), "127.0.0.1", &addr.port().to_string()])
            .arg(dir.join("cert.pem"))
            .arg(path)
            .output()
            .expect("run python3");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "aioquic client failed: {stdout}{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(stdout.trim(), format!("200 {BODY}"));
    }
    let log = log_lines(&dir.join("access.log"), 2);
    assert!(log.iter().any(|l| l["path"] == "/b?x=1" && l["protocol"] == "HTTP/3.0"), "{log:#?}");
    assert!(proxy.terminate().success());
}

/// The repository's example certificates (`examples/proxy/certs`).
fn example(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/proxy/certs").join(name).canonicalize().unwrap()
}

/// A `fulcrum backend --echo` (answers with the request it received, as
/// JSON), and its address.
fn echo_backend() -> (KillOnDrop, SocketAddr) {
    let (child, addrs) = fulcrum_backend(&["--echo"]);
    (child, addrs[0])
}

/// Listeners with the example certificates and CA: 0 HTTP/3 where a client
/// certificate is optional and `/admin` needs the example client's SAN;
/// 1 HTTP/3 where one is required.
fn mtls_config(dir: &Path, backend: SocketAddr) -> String {
    let (cert, key, ca) = (example("default.pem"), example("default.key"), example("ca.pem"));
    let tls = format!("cert = {cert:?}, key = {key:?}, client_ca = {ca:?}");
    format!(
        r#"admin = "127.0.0.1:0"
workers = 1

[[listener]]
listen = "127.0.0.1:0"
protocol = "http3"
tls = {{ {tls}, client_auth = "optional" }}
access_log = {{ path = "{log}", format = "$path $status $client_cert" }}
routes = [
  {{ path_prefix = "/admin", client_cert = [{{ name = "san", exact = "spiffe://example.test/client" }}], cluster = "app" }},
  {{ path_prefix = "/admin", respond = {{ status = 403 }} }},
  {{ cluster = "app" }},
]

[[listener]]
listen = "127.0.0.1:0"
protocol = "http3"
tls = {{ {tls} }}
routes = [{{ cluster = "app" }}]

[[cluster]]
name = "app"
endpoints = ["{backend}"]
"#,
        log = dir.join("access.log").display()
    )
}

/// The `x-forwarded-client-cert` the echo backend received, if any.
fn forwarded_cert(body: &[u8]) -> Option<String> {
    let echo: serde_json::Value = serde_json::from_slice(body).unwrap_or_else(|e| panic!("{e}: {body:?}"));
    echo["headers"]["x-forwarded-client-cert"].as_str().map(str::to_string)
}

#[test]
fn http3_client_certificates_are_verified_forwarded_logged_and_routed() {
    let dir = temp_dir("http3-mtls");
    let (_backend, backend_addr) = echo_backend();
    let proxy = Fulcrum::serve("http3-mtls-proxy", &mtls_config(&dir, backend_addr));
    let (optional, required) = (proxy.listen[0], proxy.listen[1]);
    let ca = {
        use rustls::pki_types::pem::PemObject;
        CertificateDer::from_pem_file(example("ca.pem")).unwrap()
    };
    let identity = (example("client.pem"), example("client.key"));
    let rt = runtime();
    rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(60), async {
            let forged = [("x-forwarded-client-cert", "Subject=\"CN=forged\"")];
            let with = client_as(&ca, Some((&identity.0, &identity.1)));
            let answers =
                h3_with(&with, optional, "localhost", &[("GET", "/admin/a", b""), ("GET", "/", b"")], &forged)
                    .await
                    .unwrap();
            for (status, _, body) in &answers {
                assert_eq!(*status, 200);
                let xfcc = forwarded_cert(body).expect("the verified identity goes upstream");
                assert!(xfcc.contains("CN=example-client"), "{xfcc}");
                assert!(xfcc.contains("URI=spiffe://example.test/client"), "{xfcc}");
                assert!(!xfcc.contains("forged"), "the client's own copy is dropped: {xfcc}");
            }

            let without = client(&ca);
            let answers =
                h3_with(&without, optional, "localhost", &[("GET", "/admin/a", b""), ("GET", "/", b"")], &forged)
                    .await
                    .unwrap();
            assert_eq!(answers[0].0, 403, "the route needs the client's name");
            assert_eq!(answers[1].0, 200);
            assert_eq!(forwarded_cert(&answers[1].2), None, "no certificate, no header (a forged one is dropped)");

            let refused = h3(&without, required, "localhost", &[("GET", "/", b"")]).await;
            assert!(refused.is_err(), "served without a required client certificate: {refused:?}");
            let ok = h3(&with, required, "localhost", &[("GET", "/", b"")]).await.unwrap();
            assert_eq!(ok[0].0, 200);
        })
        .await
        .expect("HTTP/3 mTLS test timed out");
    });
    assert!(proxy.terminate().success());
    let log = std::fs::read_to_string(dir.join("access.log")).unwrap();
    assert!(log.lines().any(|l| l.starts_with("/admin/a 200 CN=example-client")), "{log}");
    assert!(log.lines().any(|l| l.starts_with("/admin/a 403 -")), "{log}");
}

/// `fulcrum load` against `url` with `args`: its JSON report.
fn load(url: &str, args: &[&str]) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_fulcrum"))
        .args(["load", url, "--json", "--threads", "1"])
        .args(args)
        .output()
        .expect("run fulcrum load");
    assert!(out.status.success(), "fulcrum load {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn fulcrum_load_speaks_http3_and_http2_over_tls() {
    let dir = temp_dir("http3-load");
    certificate(&dir);
    let (_backend, backend_addr) = backend();
    let proxy = Fulcrum::serve("http3-load-proxy", &config(&dir, backend_addr));
    let ca = dir.join("cert.pem").display().to_string();
    let (h3_port, https_port) = (proxy.listen[0].port(), proxy.listen[2].port());
    for (port, protocol) in [(h3_port, "--http3"), (https_port, "--http2"), (https_port, "--http1.1")] {
        let url = format!("https://localhost:{port}/");
        let mut args = vec!["--cacert", &ca, "-n", "300", "--connections", "3"];
        if protocol != "--http1.1" {
            args.extend([protocol, "--streams", "4"]);
        }
        let report = load(&url, &args);
        assert_eq!(
            (report["requests"].as_u64(), report["errors"].as_u64()),
            (Some(300), Some(0)),
            "{protocol}: {report}"
        );
        // Every answer came from the backend through the proxy.
        let by: u64 = report["by_backend"].as_object().unwrap().values().map(|v| v.as_u64().unwrap()).sum();
        assert_eq!(by, 300, "{protocol}: {report}");
    }
    // A server the CA bundle does not vouch for: every request fails to connect.
    let other = temp_dir("http3-load-other");
    certificate(&other);
    let untrusted = other.join("cert.pem").display().to_string();
    let report = load(&format!("https://localhost:{h3_port}/"), &["--http3", "--cacert", &untrusted, "-n", "5"]);
    assert_eq!(report["errors_by_kind"]["connect"].as_u64(), Some(5), "{report}");
    assert!(proxy.terminate().success());
}

#[test]
#[ignore = "needs python aioquic"]
fn aioquic_presents_a_client_certificate_over_http3() {
    let dir = temp_dir("http3-aioquic-mtls");
    let (_backend, backend_addr) = echo_backend();
    let proxy = Fulcrum::serve("http3-aioquic-mtls-proxy", &mtls_config(&dir, backend_addr));
    let script = dir.join("client.py");
    std::fs::write(&script, AIOQUIC_CLIENT).unwrap();
    let run = |port: u16, identity: &[std::path::PathBuf]| {
        Command::new("timeout")
            .args(["20", "python3", script.to_str().unwrap(), "127.0.0.1", &port.to_string()])
            .arg(example("ca.pem"))
            .arg("/admin/x")
            .args(identity)
            .output()
            .expect("run python3")
    };
    let out = run(proxy.listen[0].port(), &[example("client.pem"), example("client.key")]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "aioquic client failed: {stdout}{}", String::from_utf8_lossy(&out.stderr));
    let (status, body) = stdout.split_once('\n').unwrap_or_else(|| panic!("{stdout}"));
    assert!(status.starts_with("200 "), "{stdout}");
    let xfcc = forwarded_cert(body.trim().as_bytes()).expect("the verified identity goes upstream");
    assert!(xfcc.contains("CN=example-client") && xfcc.contains("URI=spiffe://example.test/client"), "{xfcc}");
    // Without one: refused by the route on the optional listener, and in
    // the handshake on the required one.
    let out = run(proxy.listen[0].port(), &[]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "403 0");
    let out = run(proxy.listen[1].port(), &[]);
    assert!(!out.status.success(), "served without a required certificate: {}", String::from_utf8_lossy(&out.stdout));
    assert!(proxy.terminate().success());
}

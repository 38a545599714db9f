//! TLS passthrough end to end against the real binary: connections routed
//! by the ClientHello's server name (exact, wildcard, default, refused)
//! with TLS left to the endpoints. With OpenSSL's `s_client` and `s_server`
//! (`scripts/test` installs openssl): two names reach two TLS servers, each
//! with its own certificate.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{get, Fulcrum, KillOnDrop};

/// A TCP endpoint that reads what a client sends first and answers `name`.
fn named_endpoint(name: &'static str) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for mut conn in listener.incoming().flatten() {
            let mut first = [0u8; 512];
            let _ = conn.read(&mut first);
            let _ = conn.write_all(name.as_bytes());
        }
    });
    addr
}

/// A minimal ClientHello record with server name `sni`, if any.
fn client_hello(sni: Option<&str>) -> Vec<u8> {
    let mut ext = Vec::new();
    if let Some(name) = sni {
        let n = name.len() as u16;
        ext.extend_from_slice(&[0, 0]);
        ext.extend_from_slice(&(n + 5).to_be_bytes());
        ext.extend_from_slice(&(n + 3).to_be_bytes());
        ext.push(0);
        ext.extend_from_slice(&n.to_be_bytes());
        ext.extend_from_slice(name.as_bytes());
    }
    let mut body = vec![3, 3];
    body.extend_from_slice(&[1; 32]);
    body.extend_from_slice(&[0, 0, 2, 0x13, 0x01, 1, 0]);
    body.extend_from_slice(&(ext.len() as u16).to_be_bytes());
    body.extend_from_slice(&ext);
    let mut record = vec![22, 3, 1];
    record.extend_from_slice(&(body.len() as u16 + 4).to_be_bytes());
    record.extend_from_slice(&[1, 0]);
    record.extend_from_slice(&(body.len() as u16).to_be_bytes());
    record.extend_from_slice(&body);
    record
}

/// Send `raw` in two pieces (a record split across segments) and read the answer.
fn ask(addr: SocketAddr, raw: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let (a, b) = raw.split_at(raw.len() / 2);
    s.write_all(a).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let _ = s.write_all(b);
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

fn metric(f: &Fulcrum, line: &str) -> u64 {
    let metrics = String::from_utf8(get(f.admin.unwrap(), "admin", "/metrics", "").body).unwrap();
    let found = metrics.lines().find_map(|l| l.strip_prefix(line)).unwrap_or_else(|| panic!("{line} in {metrics}"));
    found.trim().parse().unwrap()
}

fn config(a: SocketAddr, b: SocketAddr) -> String {
    let routes = "sni_routes = [{ server_name = \"a.example.com\", cluster = \"a\" }, \
                  { server_name = \"*.example.org\", cluster = \"b\" }]";
    format!(
        "workers = 1\nadmin = \"127.0.0.1:0\"\n\n\
         [[listener]]\nlisten = \"127.0.0.1:0\"\nprotocol = \"tls-passthrough\"\n{routes}\n\n\
         [[listener]]\nlisten = \"127.0.0.1:0\"\nprotocol = \"tls-passthrough\"\n{routes}\ncluster = \"a\"\n\n\
         [[cluster]]\nname = \"a\"\nendpoints = [\"{a}\"]\n\n[[cluster]]\nname = \"b\"\nendpoints = [\"{b}\"]\n"
    )
}

#[test]
fn connections_are_routed_by_server_name() {
    let f = Fulcrum::serve("passthrough", &config(named_endpoint("A"), named_endpoint("B")));
    let (strict, with_default) = (f.listen[0], f.listen[1]);
    assert_eq!(ask(strict, &client_hello(Some("A.Example.com"))), "A");
    assert_eq!(ask(strict, &client_hello(Some("www.example.org"))), "B");
    assert_eq!(ask(strict, &client_hello(Some("a.b.example.org"))), "");
    f.wait_for_log("no cluster for server name a.b.example.org from 127.0.0.1:");
    assert_eq!(ask(strict, &client_hello(None)), "");
    f.wait_for_log("no cluster for server name (none)");
    assert_eq!(ask(with_default, &client_hello(Some("other.net"))), "A");
    assert_eq!(ask(with_default, &client_hello(None)), "A");
    assert_eq!(ask(with_default, b"GET / HTTP/1.1\r\nHost: a.example.com\r\n\r\n"), "");
    f.wait_for_log("not a TLS ClientHello");
    assert_eq!(metric(&f, "fulcrum_tls_passthrough_refused_total{reason=\"no-route\"}"), 2);
    assert_eq!(metric(&f, "fulcrum_tls_passthrough_refused_total{reason=\"no-client-hello\"}"), 1);
    assert!(f.terminate().success());
}

/// The ClientHello rustls sends for server `name` offering `alpn`.
fn rustls_hello(name: &str, alpn: &[&str]) -> Vec<u8> {
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    tls.alpn_protocols = alpn.iter().map(|p| p.as_bytes().to_vec()).collect();
    let name = rustls::pki_types::ServerName::try_from(name.to_string()).unwrap();
    let mut conn = rustls::ClientConnection::new(std::sync::Arc::new(tls), name).unwrap();
    let mut hello = Vec::new();
    conn.write_tls(&mut hello).unwrap();
    hello
}

#[test]
fn routes_can_match_the_alpn_protocols_offered() {
    let config = format!(
        "workers = 1\nadmin = \"127.0.0.1:0\"\n\n[[listener]]\nlisten = \"127.0.0.1:0\"\n\
         protocol = \"tls-passthrough\"\nsni_routes = [\
         {{ server_name = \"a.example.com\", alpn = [\"h2\", \"acme-tls/1\"], cluster = \"b\" }}, \
         {{ server_name = \"a.example.com\", cluster = \"a\" }}, \
         {{ server_name = \"*.example.org\", alpn = [\"h2\"], cluster = \"b\" }}]\n\n\
         [[cluster]]\nname = \"a\"\nendpoints = [\"{}\"]\n\n[[cluster]]\nname = \"b\"\nendpoints = [\"{}\"]\n",
        named_endpoint("A"),
        named_endpoint("B")
    );
    let f = Fulcrum::serve("passthrough-alpn", &config);
    let to = f.listen[0];
    assert_eq!(ask(to, &rustls_hello("a.example.com", &["http/1.1", "h2"])), "B");
    assert_eq!(ask(to, &rustls_hello("a.example.com", &["acme-tls/1"])), "B");
    assert_eq!(ask(to, &rustls_hello("a.example.com", &["http/1.1"])), "A");
    assert_eq!(ask(to, &rustls_hello("a.example.com", &[])), "A");
    assert_eq!(ask(to, &rustls_hello("www.example.org", &["h2"])), "B");
    assert_eq!(ask(to, &rustls_hello("www.example.org", &["http/1.1"])), "");
    f.wait_for_log("no cluster for server name www.example.org from 127.0.0.1:");
    f.wait_for_log("(ALPN http/1.1)");
    assert!(f.terminate().success());
}

/// A TCP endpoint that answers the first line it receives.
fn first_line_endpoint() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let mut writer = conn.try_clone().unwrap();
            let mut line = String::new();
            let _ = std::io::BufRead::read_line(&mut std::io::BufReader::new(conn), &mut line);
            let _ = writer.write_all(line.as_bytes());
        }
    });
    addr
}

#[test]
fn behind_a_proxy_protocol_balancer_the_client_is_passed_on() {
    let config = format!(
        "workers = 1\nadmin = \"127.0.0.1:0\"\n\n[[listener]]\nlisten = \"127.0.0.1:0\"\n\
         protocol = \"tls-passthrough\"\nsni_routes = [{{ server_name = \"a.example.com\", cluster = \"a\" }}]\n\
         proxy_protocol = {{ trusted = [\"127.0.0.1\"] }}\n\n\
         [[cluster]]\nname = \"a\"\nendpoints = [\"{}\"]\nproxy_protocol = \"v1\"\n",
        first_line_endpoint()
    );
    let f = Fulcrum::serve("passthrough-proxy-protocol", &config);
    let to = f.listen[0];
    let header = format!("PROXY TCP4 203.0.113.9 {} 40000 {}\r\n", to.ip(), to.port());
    let reply = ask(to, &[header.as_bytes(), &client_hello(Some("a.example.com"))].concat());
    assert_eq!(reply, header);
    assert!(f.terminate().success());
}

/// An `openssl s_server -www` for `name` with its own certificate: the
/// server (killed on drop), its address and its certificate (PEM).
fn tls_server(dir: &std::path::Path, name: &str) -> (KillOnDrop, SocketAddr, String) {
    let cert = rcgen::generate_simple_self_signed(vec![name.into()]).unwrap();
    let (cert_path, key_path) = (dir.join(format!("{name}.pem")), dir.join(format!("{name}.key")));
    std::fs::write(&cert_path, cert.cert.pem()).unwrap();
    std::fs::write(&key_path, cert.key_pair.serialize_pem()).unwrap();
    let addr = common::closed_port();
    let server = Command::new("openssl")
        .args(["s_server", "-quiet", "-www", "-accept", &addr.to_string()])
        .args(["-cert", cert_path.to_str().unwrap(), "-key", key_path.to_str().unwrap()])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("openssl (scripts/test installs it)");
    let server = KillOnDrop(server);
    for _ in 0..500 {
        if TcpStream::connect(addr).is_ok() {
            return (server, addr, cert.cert.pem());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("openssl s_server did not listen on {addr}");
}

/// `openssl s_client` through `addr` with `sni` (none: `-noservername`):
/// whether the handshake ended, and everything it printed.
fn s_client(addr: SocketAddr, sni: Option<&str>) -> String {
    let mut cmd = Command::new("openssl");
    cmd.args(["s_client", "-connect", &addr.to_string(), "-showcerts"]);
    match sni {
        Some(name) => cmd.args(["-servername", name]),
        None => cmd.arg("-noservername"),
    };
    let out = cmd.stdin(Stdio::null()).output().expect("openssl (scripts/test installs it)");
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// Whether `output` shows the certificate `pem` (its base64 body).
fn shows(output: &str, pem: &str) -> bool {
    let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    let seen: String = output.lines().collect();
    seen.contains(&body)
}

#[test]
#[ignore = "needs openssl (scripts/test installs it)"]
fn openssl_clients_reach_the_tls_server_their_name_routes_to() {
    let dir = common::temp_dir("passthrough-openssl");
    let (_a, a, cert_a) = tls_server(&dir, "a.example.com");
    let (_b, b, cert_b) = tls_server(&dir, "www.example.org");
    let f = Fulcrum::serve("passthrough-openssl", &config(a, b));
    let (strict, with_default) = (f.listen[0], f.listen[1]);
    let out = s_client(strict, Some("a.example.com"));
    assert!(shows(&out, &cert_a) && !shows(&out, &cert_b), "{out}");
    let out = s_client(strict, Some("www.example.org"));
    assert!(shows(&out, &cert_b) && !shows(&out, &cert_a), "{out}");
    // Unknown and absent names: refused on the strict listener (the
    // handshake fails), the default cluster on the other.
    for sni in [Some("other.net"), None] {
        let out = s_client(strict, sni);
        assert!(!shows(&out, &cert_a) && !shows(&out, &cert_b), "{out}");
        assert!(shows(&s_client(with_default, sni), &cert_a), "{sni:?}");
    }
    f.wait_for_log("no cluster for server name other.net");
    assert_eq!(metric(&f, "fulcrum_tls_passthrough_refused_total{reason=\"no-route\"}"), 2);
    assert!(f.terminate().success());
    let _ = std::fs::remove_dir_all(dir);
}

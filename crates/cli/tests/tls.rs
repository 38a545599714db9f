//! End-to-end TLS against `fulcrum serve` with third-party peers: openssl's
//! `s_client` sees the certificate chosen by SNI and the stapled OCSP
//! response, and the new certificate after its files are replaced while a
//! download goes on; curl goes through a listener that requires a client
//! certificate; a Python `ssl` server that requires one is the upstream.
//! The certificates are the repository's example ones
//! (`examples/proxy/certs`, made by its `make.sh`) and some made here.
//! A plain `cargo test` ignores these tests but the rustls one (TLS
//! settings changed by a reload); `scripts/test` installs openssl and curl
//! and runs them, and without them they fail, never skip.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{temp_dir, Fulcrum, KillOnDrop};

fn certs() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/proxy/certs").canonicalize().unwrap()
}

fn cert(name: &str) -> String {
    certs().join(name).display().to_string()
}

/// `openssl s_client` to `addr` with `args`: its whole output.
fn s_client(addr: SocketAddr, args: &[&str]) -> String {
    let out = Command::new("openssl")
        .args(["s_client", "-connect", &addr.to_string()])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("openssl (scripts/test installs it)");
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

/// The subject line of the certificate `s_client` was shown.
fn subject(addr: SocketAddr, args: &[&str]) -> String {
    let out = s_client(addr, args);
    let line = out.lines().find(|l| l.starts_with("subject=")).unwrap_or_else(|| panic!("no certificate: {out}"));
    line.to_string()
}

/// An upstream answering every request with 200 and the request head as
/// its body, or with `size` bytes when the path is `/big`.
fn upstream(size: usize) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut writer = conn.try_clone().unwrap();
                let mut reader = BufReader::new(conn);
                loop {
                    let mut head = String::new();
                    loop {
                        let mut line = String::new();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        head.push_str(&line);
                        if line == "\r\n" {
                            break;
                        }
                    }
                    let body = if head.starts_with("GET /big") { vec![b'x'; size] } else { head.into_bytes() };
                    let reply = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", body.len());
                    if writer.write_all(reply.as_bytes()).is_err() || writer.write_all(&body).is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

fn config(listener_tls: &str, upstream: SocketAddr) -> String {
    format!(
        "workers = 1\nadmin = \"127.0.0.1:0\"\n\n[[listener]]\nlisten = \"127.0.0.1:0\"\nroutes = [{{ cluster = \"app\" }}]\n\
         {listener_tls}\n\n[[cluster]]\nname = \"app\"\nendpoints = [\"{upstream}\"]\n"
    )
}

#[test]
#[ignore = "needs openssl (scripts/test installs it)"]
fn openssl_sees_the_certificate_of_each_name_the_default_and_the_ocsp_staple() {
    let tls = format!(
        "[listener.tls]\ncert = \"{}\"\nkey = \"{}\"\nocsp = \"{}\"\n\
         [[listener.tls.certificates]]\nnames = [\"api.example.test\"]\ncert = \"{}\"\nkey = \"{}\"\n\
         [[listener.tls.certificates]]\nnames = [\"*.example.test\"]\ncert = \"{}\"\nkey = \"{}\"\n",
        cert("default.pem"),
        cert("default.key"),
        cert("default.ocsp"),
        cert("api.pem"),
        cert("api.key"),
        cert("wildcard.pem"),
        cert("wildcard.key"),
    );
    let f = Fulcrum::serve("tls-sni", &config(&tls, upstream(0)));
    let addr = f.listen[0];
    let api = subject(addr, &["-servername", "api.example.test"]);
    assert!(api.contains("api.example.test"), "{api}");
    let wild = subject(addr, &["-servername", "www.example.test"]);
    assert!(wild.contains("*.example.test"), "{wild}");
    let other = subject(addr, &["-servername", "other.test"]);
    assert!(other.contains("localhost"), "the default for an unknown name: {other}");
    let none = subject(addr, &["-noservername"]);
    assert!(none.contains("localhost"), "the default without SNI: {none}");
    // The RSA certificate is served with an RSA signature.
    let api = s_client(addr, &["-servername", "api.example.test"]);
    assert!(api.contains("Peer signature type: RSA") || api.contains("rsa_pss"), "{api}");
    let stapled = s_client(addr, &["-servername", "localhost", "-status"]);
    assert!(stapled.contains("OCSP Response Status: successful"), "{stapled}");
    let unstapled = s_client(addr, &["-servername", "api.example.test", "-status"]);
    assert!(unstapled.contains("OCSP response: no response sent"), "{unstapled}");
    assert!(f.terminate().success());
}

/// A self-signed certificate for localhost whose subject is `CN=cn`.
fn self_signed(dir: &Path, cn: &str) -> (PathBuf, PathBuf) {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec!["localhost".into()]).unwrap();
    params.distinguished_name.push(rcgen::DnType::CommonName, cn);
    let c = params.self_signed(&key).unwrap();
    let (cert, key_path) = (dir.join(format!("{cn}.pem")), dir.join(format!("{cn}.key")));
    std::fs::write(&cert, c.pem()).unwrap();
    std::fs::write(&key_path, key.serialize_pem()).unwrap();
    (cert, key_path)
}

#[test]
#[ignore = "needs openssl and curl (scripts/test installs them)"]
fn a_certificate_replaced_on_disk_serves_new_handshakes_and_a_download_in_flight_completes() {
    let dir = temp_dir("tls-rotate-files");
    let (first, first_key) = self_signed(&dir, "first");
    let (second, second_key) = self_signed(&dir, "second");
    let (live, live_key) = (dir.join("live.pem"), dir.join("live.key"));
    std::fs::copy(&first, &live).unwrap();
    std::fs::copy(&first_key, &live_key).unwrap();
    let tls = format!(
        "[listener.tls]\ncert = \"{}\"\nkey = \"{}\"\nreload_interval = \"100ms\"\n",
        live.display(),
        live_key.display()
    );
    const SIZE: usize = 16 << 20;
    let f = Fulcrum::serve("tls-rotate", &config(&tls, upstream(SIZE)));
    let addr = f.listen[0];
    assert!(subject(addr, &["-servername", "localhost"]).contains("first"));
    // About four seconds of download at 4 MB/s.
    let url = format!("https://localhost:{}/big", addr.port());
    let resolve = format!("localhost:{}:127.0.0.1", addr.port());
    let download = Command::new("curl")
        .args(["--silent", "--insecure", "--limit-rate", "4M", "--max-time", "60", "--resolve", &resolve])
        .args(["--write-out", "%{size_download}", "--output", "/dev/null", &url])
        .stdout(Stdio::piped())
        .spawn()
        .expect("curl (scripts/test installs it)");
    let download = KillOnDrop(download);
    std::thread::sleep(Duration::from_millis(500));
    // The key first: for a moment the pair does not match, and the old one stays.
    std::fs::copy(&second_key, &live_key).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert!(subject(addr, &["-servername", "localhost"]).contains("first"), "a mismatched pair is not used");
    std::fs::copy(&second, &live).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !subject(addr, &["-servername", "localhost"]).contains("second") {
        assert!(Instant::now() < deadline, "the new certificate was never served");
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut download = download;
    let mut size = String::new();
    download.0.stdout.take().unwrap().read_to_string(&mut size).unwrap();
    let status = download.0.wait().unwrap();
    assert!(status.success(), "the download over the old handshake broke: {status}");
    assert_eq!(size.trim(), SIZE.to_string());
    assert!(f.terminate().success());
    let _ = std::fs::remove_dir_all(dir);
}

/// curl through the proxy: (exit status success, body).
fn curl(args: &[&str]) -> (bool, String) {
    let out = Command::new("curl")
        .args(["--silent", "--show-error", "--max-time", "20"])
        .args(args)
        .output()
        .expect("curl (scripts/test installs it)");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
#[ignore = "needs curl (scripts/test installs it)"]
fn curl_with_a_client_certificate_passes_and_the_upstream_sees_who_it_is() {
    let log = temp_dir("tls-mtls-log").join("access.log");
    let tls = format!(
        "access_log = {{ path = \"{}\", format = \"$status $client_cert\" }}\n\
         [listener.tls]\ncert = \"{}\"\nkey = \"{}\"\nclient_ca = \"{}\"\n",
        log.display(),
        cert("default.pem"),
        cert("default.key"),
        cert("ca.pem"),
    );
    let f = Fulcrum::serve("tls-mtls", &config(&tls, upstream(0)));
    let url = format!("https://localhost:{}/who", f.listen[0].port());
    let resolve = format!("localhost:{}:127.0.0.1", f.listen[0].port());
    let ca = cert("ca.pem");
    let with = ["--cacert", &ca, "--resolve", &resolve, "--cert", &cert("client.pem"), "--key", &cert("client.key")];
    let (ok, head) = curl(&[&with[..], &["-H", "x-forwarded-client-cert: Subject=\"CN=forged\"", &url]].concat());
    assert!(ok, "refused with a client certificate");
    let xfcc = head.lines().find(|l| l.starts_with("x-forwarded-client-cert:")).unwrap_or_else(|| panic!("{head}"));
    assert!(xfcc.contains("CN=example-client"), "{xfcc}");
    assert!(xfcc.contains("URI=spiffe://example.test/client"), "{xfcc}");
    assert!(!head.contains("forged"), "the client's own copy is dropped: {head}");
    let (ok, _) = curl(&["--cacert", &ca, "--resolve", &resolve, &url]);
    assert!(!ok, "served without a client certificate");
    assert!(f.terminate().success());
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.lines().any(|l| l.starts_with("200 ") && l.contains("CN=example-client")), "{logged}");
}

/// The Python upstream that requires a client certificate signed by the
/// example CA, and its address.
fn python_peer() -> (KillOnDrop, SocketAddr) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/tools/tls_peer.py");
    let (child, lines) = common::spawn_printing(
        Command::new("python3")
            .arg(script)
            .args([cert("default.pem"), cert("default.key"), cert("ca.pem")])
            .stderr(Stdio::null()),
        1,
    );
    let line = lines.first().map_or("", String::as_str);
    let port: u16 =
        line.trim().strip_prefix("port ").unwrap_or_else(|| panic!("tls_peer.py: {line:?}")).parse().unwrap();
    (child, SocketAddr::from(([127, 0, 0, 1], port)))
}

fn metrics(admin: SocketAddr) -> String {
    String::from_utf8_lossy(&common::get(admin, "admin", "/metrics", "").body).into_owned()
}

#[test]
#[ignore = "needs python3 (scripts/test runs it)"]
fn a_python_upstream_requiring_a_client_certificate_gets_one_and_failures_are_502() {
    let (_peer, addr) = python_peer();
    let dir = temp_dir("tls-upstream-files");
    let (other_ca, _) = self_signed(&dir, "other-ca");
    let cluster = |name: &str, tls: &str| {
        format!(
            "[[cluster]]\nname = \"{name}\"\nendpoints = [\"{addr}\"]\ntls = {{ {tls} }}\n\
             health_check = {{ kind = \"tcp\", interval = \"200ms\", jitter = \"0s\", unhealthy_threshold = 1, healthy_threshold = 1 }}\n"
        )
    };
    let ca = cert("ca.pem");
    let client = format!("cert = \"{}\", key = \"{}\"", cert("client.pem"), cert("client.key"));
    let text = format!(
        "workers = 2\nadmin = \"127.0.0.1:0\"\n\n[[listener]]\nlisten = \"127.0.0.1:0\"\nroutes = [\n\
         {{ path_prefix = \"/ok\", cluster = \"ok\" }}, {{ path_prefix = \"/nocert\", cluster = \"nocert\" }},\n\
         {{ path_prefix = \"/wrongca\", cluster = \"wrongca\" }}, {{ path_prefix = \"/name\", cluster = \"name\" }},\n]\n\n{}{}{}{}",
        cluster("ok", &format!("ca = \"{ca}\", {client}")),
        cluster("nocert", &format!("ca = \"{ca}\"")),
        cluster("wrongca", &format!("ca = \"{}\", {client}", other_ca.display())),
        cluster("name", &format!("ca = \"{ca}\", sni = \"wrong.example.test\", {client}")),
    );
    let f = Fulcrum::serve("tls-upstream", &text);
    for _ in 0..3 {
        let ok = common::get(f.listen[0], "app", "/ok", "");
        assert_eq!((ok.status, String::from_utf8_lossy(&ok.body).as_ref()), (200, "hello example-client"));
    }
    for path in ["/nocert", "/wrongca", "/name"] {
        assert_eq!(common::get(f.listen[0], "app", path, "").status, 502, "{path}");
    }
    let m = metrics(f.admin.unwrap());
    let count = |series: &str| -> u64 {
        let line = m.lines().find(|l| l.starts_with(series)).unwrap_or_else(|| panic!("no {series}:\n{m}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    assert!(count("fulcrum_cluster_upstream_tls_errors_total{cluster=\"wrongca\",reason=\"unknown_ca\"}") >= 1);
    assert!(count("fulcrum_cluster_upstream_tls_errors_total{cluster=\"name\",reason=\"name_mismatch\"}") >= 1);
    assert_eq!(count("fulcrum_cluster_upstream_tls_errors_total{cluster=\"ok\",reason=\"unknown_ca\"}"), 0);
    // TCP health checks over TLS: a handshake the endpoint's CA does not verify fails them.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let m = metrics(f.admin.unwrap());
        let healthy = |c: &str| {
            m.lines().any(|l| l.starts_with(&format!("fulcrum_upstream_healthy{{cluster=\"{c}\"")) && l.ends_with(" 1"))
        };
        if healthy("ok") && !healthy("wrongca") && !healthy("name") {
            break;
        }
        assert!(Instant::now() < deadline, "health over TLS never settled:\n{m}");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(f.terminate().success());
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
#[ignore = "needs openssl (scripts/test installs it)"]
fn a_reload_reads_the_certificate_files_at_once() {
    let dir = temp_dir("tls-sighup-files");
    let (first, first_key) = self_signed(&dir, "first");
    let (second, second_key) = self_signed(&dir, "second");
    let (live, live_key) = (dir.join("live.pem"), dir.join("live.key"));
    std::fs::copy(&first, &live).unwrap();
    std::fs::copy(&first_key, &live_key).unwrap();
    let tls = format!(
        "[listener.tls]\ncert = \"{}\"\nkey = \"{}\"\nreload_interval = \"1h\"\n",
        live.display(),
        live_key.display()
    );
    let f = Fulcrum::serve("tls-sighup", &config(&tls, upstream(0)));
    let addr = f.listen[0];
    assert!(subject(addr, &["-servername", "localhost"]).contains("first"));
    std::fs::copy(&second, &live).unwrap();
    std::fs::copy(&second_key, &live_key).unwrap();
    assert!(subject(addr, &["-servername", "localhost"]).contains("first"), "read before the interval");
    Command::new("kill").args(["-HUP", &f.pid().to_string()]).status().unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !subject(addr, &["-servername", "localhost"]).contains("second") {
        assert!(Instant::now() < deadline, "the reload did not bring the new certificate");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(f.terminate().success());
    let _ = std::fs::remove_dir_all(dir);
}

/// A TLS connection to `addr` trusting `ca`, offering `alpn`, TLS 1.2 only
/// if `tls12`, with the client certificate `client` if given.
async fn rustls_connect(
    addr: SocketAddr,
    ca: &rcgen::Certificate,
    alpn: &[&str],
    tls12: bool,
    client: Option<(&rcgen::Certificate, &rcgen::KeyPair)>,
) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.der().clone()).unwrap();
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let versions: &[&rustls::SupportedProtocolVersion] =
        if tls12 { &[&rustls::version::TLS12] } else { &[&rustls::version::TLS13, &rustls::version::TLS12] };
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .unwrap()
        .with_root_certificates(roots);
    let mut tls = match client {
        Some((cert, key)) => {
            let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
            builder.with_client_auth_cert(vec![cert.der().clone()], key).unwrap()
        }
        None => builder.with_no_client_auth(),
    };
    tls.alpn_protocols = alpn.iter().map(|p| p.as_bytes().to_vec()).collect();
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let name = ServerName::try_from("localhost").unwrap();
    tokio_rustls::TlsConnector::from(std::sync::Arc::new(tls)).connect(name, tcp).await
}

/// One keep-alive GET on `stream`: the status line, or `None` if the
/// connection failed or closed first.
async fn keep_alive_status<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(stream: &mut S) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    stream.write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n").await.ok()?;
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&seen).to_string();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length = head.lines().find_map(|l| {
                l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse::<usize>().unwrap())
            });
            if body.len() >= length.unwrap_or(0) {
                return head.lines().next().map(str::to_string);
            }
        }
        match tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => seen.extend_from_slice(&buf[..n]),
            _ => return None,
        }
    }
}

#[test]
fn a_reload_changes_alpn_min_version_and_client_ca_and_keeps_open_connections() {
    let dir = temp_dir("tls-settings-files");
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let signed = |name: &str| {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert =
            rcgen::CertificateParams::new(vec![name.to_string()]).unwrap().signed_by(&key, &ca, &ca_key).unwrap();
        (cert, key)
    };
    let (server, server_key) = signed("localhost");
    let (client, client_key) = signed("client.test");
    for (name, text) in [("server.pem", server.pem()), ("server.key", server_key.serialize_pem()), ("ca.pem", ca.pem())]
    {
        std::fs::write(dir.join(name), text).unwrap();
    }
    let d = dir.display();
    let tls = |extra: &str| format!("[listener.tls]\ncert = \"{d}/server.pem\"\nkey = \"{d}/server.key\"\n{extra}\n");
    let up = upstream(0);
    let f = Fulcrum::serve("tls-settings-reload", &config(&tls("alpn = [\"http/1.1\"]"), up));
    let addr = f.listen[0];
    // `fulcrum reload` with `text`, then wait for the `n`th log line with `log`.
    let reload = |text: &str, log: &str, n: usize| {
        std::fs::write(f.dir.join("fulcrum.toml"), text).unwrap();
        let pid = f.pid().to_string();
        let status = Command::new(env!("CARGO_BIN_EXE_fulcrum")).args(["reload", "--pid", &pid]).status();
        assert!(status.unwrap().success());
        let deadline = Instant::now() + Duration::from_secs(10);
        while f.stderr.lock().unwrap().iter().filter(|l| l.contains(log)).count() < n {
            assert!(Instant::now() < deadline, "no {log:?} in {:#?}", f.stderr.lock().unwrap());
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        // Before: ALPN http/1.1 only, TLS 1.2 accepted, no client certificate asked for.
        let mut open = rustls_connect(addr, &ca, &["h2", "http/1.1"], false, None).await.unwrap();
        assert_eq!(open.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
        assert_eq!(keep_alive_status(&mut open).await.as_deref(), Some("HTTP/1.1 200 OK"));
        let mut old12 = rustls_connect(addr, &ca, &["http/1.1"], true, None).await.unwrap();
        assert_eq!(keep_alive_status(&mut old12).await.as_deref(), Some("HTTP/1.1 200 OK"));

        // ALPN h2 and TLS 1.3 only, from the next handshake on.
        reload(&config(&tls("alpn = [\"h2\"]\nmin_version = \"1.3\""), up), "TLS settings reloaded", 1);
        let h2 = rustls_connect(addr, &ca, &["h2", "http/1.1"], false, None).await.unwrap();
        assert_eq!(h2.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
        assert!(rustls_connect(addr, &ca, &["h2"], true, None).await.is_err(), "TLS 1.2 is refused now");

        // A client CA: a new client without a certificate is refused, one with it served.
        let mtls = tls(&format!("alpn = [\"http/1.1\"]\nclient_ca = \"{d}/ca.pem\""));
        reload(&config(&mtls, up), "TLS settings reloaded", 2);
        if let Ok(mut anonymous) = rustls_connect(addr, &ca, &["http/1.1"], false, None).await {
            assert_eq!(keep_alive_status(&mut anonymous).await, None, "served without a client certificate");
        }
        let mut with_cert =
            rustls_connect(addr, &ca, &["http/1.1"], false, Some((&client, &client_key))).await.unwrap();
        assert_eq!(keep_alive_status(&mut with_cert).await.as_deref(), Some("HTTP/1.1 200 OK"));

        // A client CA that cannot be read: the reload is refused whole, the settings stay.
        let broken = tls(&format!("alpn = [\"h2\"]\nclient_ca = \"{d}/missing.pem\""));
        reload(&config(&broken, up), "reload refused", 1);
        f.wait_for_log("missing.pem");
        let still = rustls_connect(addr, &ca, &["h2", "http/1.1"], false, Some((&client, &client_key))).await.unwrap();
        assert_eq!(still.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));

        // The connections opened before every reload were never dropped.
        assert_eq!(keep_alive_status(&mut open).await.as_deref(), Some("HTTP/1.1 200 OK"));
        assert_eq!(keep_alive_status(&mut old12).await.as_deref(), Some("HTTP/1.1 200 OK"));
    });
    assert!(f.terminate().success());
    let _ = std::fs::remove_dir_all(dir);
}

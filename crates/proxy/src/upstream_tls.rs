//! TLS to a cluster's endpoints: one rustls client configuration per
//! cluster, shared by every worker (so is its session cache: a new
//! connection resumes a session another worker made), the server name
//! each endpoint is verified against, and the handshake failures counted by
//! reason ([`TlsErrors`]) and logged.
//!
//! Trust: the cluster's `ca` bundle, else the Mozilla root programme's CAs
//! compiled in (`webpki-roots`): the same on every machine and in a
//! container without a system CA store, where the platform's store would
//! differ from one host to the next. A private CA is named with `ca`.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use crate::config::{Cluster, UpstreamProtocol, UpstreamTls as TlsConfig};
use crate::tls_files::{certs, key, provider, read, roots, FileError};

/// A connection to an upstream: plain TCP or TLS over it.
#[derive(Debug)]
pub enum UpstreamStream {
    /// Clear text.
    Plain(TcpStream),
    /// TLS.
    Tls(Box<TlsStream<TcpStream>>),
}

impl UpstreamStream {
    /// Whether the upstream closed the connection (or sent something
    /// unasked) while it was idle. On clear text, costs a system call only
    /// when the socket has been readable since it was last read to the end.
    pub fn is_closed(&mut self) -> bool {
        match self {
            UpstreamStream::Plain(s) => {
                let mut probe = [0u8; 1];
                !matches!(s.try_read(&mut probe), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
            }
            // TLS records that carry no data (session tickets) are taken
            // in; anything else, or the end, means the connection is done.
            UpstreamStream::Tls(s) => {
                let mut probe = [0u8; 1];
                let mut buf = ReadBuf::new(&mut probe);
                let mut cx = Context::from_waker(Waker::noop());
                !matches!(Pin::new(s.as_mut()).poll_read(&mut cx, &mut buf), Poll::Pending)
            }
        }
    }
}

impl AsyncRead for UpstreamStream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            UpstreamStream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            UpstreamStream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for UpstreamStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            UpstreamStream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            UpstreamStream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            UpstreamStream::Plain(s) => Pin::new(s).poll_flush(cx),
            UpstreamStream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            UpstreamStream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            UpstreamStream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            UpstreamStream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            UpstreamStream::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            UpstreamStream::Plain(s) => s.is_write_vectored(),
            UpstreamStream::Tls(s) => s.is_write_vectored(),
        }
    }
}

/// Why a TLS handshake with an upstream failed, as the metric labels it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsFailure {
    /// The certificate's issuer is not trusted (`unknown_ca`).
    UnknownCa,
    /// The certificate is not for the name verified (`name_mismatch`).
    NameMismatch,
    /// The certificate has expired or is not valid yet (`expired`).
    Expired,
    /// Any other problem with the certificate (`bad_certificate`).
    BadCertificate,
    /// The handshake failed otherwise: an alert, a protocol error, a reset,
    /// no answer within `connect_timeout` (`handshake`).
    Handshake,
}

impl TlsFailure {
    /// Every reason, in the order the metric lists them.
    pub const ALL: [TlsFailure; 5] = [
        TlsFailure::UnknownCa,
        TlsFailure::NameMismatch,
        TlsFailure::Expired,
        TlsFailure::BadCertificate,
        TlsFailure::Handshake,
    ];

    /// The metric's `reason` label.
    pub fn label(self) -> &'static str {
        match self {
            TlsFailure::UnknownCa => "unknown_ca",
            TlsFailure::NameMismatch => "name_mismatch",
            TlsFailure::Expired => "expired",
            TlsFailure::BadCertificate => "bad_certificate",
            TlsFailure::Handshake => "handshake",
        }
    }

    fn of(e: &io::Error) -> TlsFailure {
        let Some(rustls::Error::InvalidCertificate(c)) = e.get_ref().and_then(|e| e.downcast_ref::<rustls::Error>())
        else {
            return TlsFailure::Handshake;
        };
        match c {
            CertificateError::UnknownIssuer => TlsFailure::UnknownCa,
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                TlsFailure::NameMismatch
            }
            CertificateError::Expired
            | CertificateError::ExpiredContext { .. }
            | CertificateError::NotValidYet
            | CertificateError::NotValidYetContext { .. } => TlsFailure::Expired,
            _ => TlsFailure::BadCertificate,
        }
    }
}

/// Failed handshakes of one cluster by reason, over all workers; kept
/// across reloads with the cluster's other counters.
#[derive(Debug, Default)]
pub struct TlsErrors {
    counts: [AtomicU64; 5],
    /// The second (since the Unix epoch) a failure was last logged: at most
    /// one line a second per cluster.
    logged: AtomicU64,
}

impl TlsErrors {
    /// The count for `reason`.
    pub fn get(&self, reason: TlsFailure) -> u64 {
        self.counts[reason as usize].load(Relaxed)
    }
}

/// A cluster's TLS: its client configuration and how each endpoint is named.
#[derive(Debug)]
pub struct UpstreamTls {
    /// The connector, or why the files could not be used (every handshake
    /// then fails with that reason).
    config: Result<Arc<ClientConfig>, String>,
    /// The configured SNI name.
    sni: Option<ServerName<'static>>,
    /// Endpoints configured by host name, and those configured by address.
    hosts: Vec<String>,
    literal: Vec<SocketAddr>,
    /// The name found for each address.
    names: Mutex<HashMap<SocketAddr, ServerName<'static>>>,
    cluster: String,
    errors: Arc<TlsErrors>,
}

impl UpstreamTls {
    /// The TLS of `cluster`, if it has any; failures count in `errors`. A
    /// cluster that does not verify certificates is warned about here.
    pub fn new(cluster: &Cluster, errors: Arc<TlsErrors>) -> Option<Arc<UpstreamTls>> {
        let tls = cluster.tls.as_ref()?;
        if !tls.verify {
            eprintln!(
                "fulcrum: warning: cluster {}: tls.verify = false: endpoint certificates are not verified, \
                 anyone on the path can impersonate them",
                cluster.name
            );
        }
        let config = client_config(tls, cluster.upstream).map(Arc::new).map_err(|e| format!("tls.{}: {e}", e.field));
        if let Err(e) = &config {
            eprintln!(
                "fulcrum: cluster {}: cannot use its TLS settings, every connection will fail: {e}",
                cluster.name
            );
        }
        let mut hosts: Vec<String> = Vec::new();
        let mut literal = Vec::new();
        for e in &cluster.endpoints {
            match e.address.parse::<SocketAddr>() {
                Ok(a) => literal.push(a),
                Err(_) => hosts.push(e.address.clone()),
            }
        }
        hosts.dedup();
        Some(Arc::new(UpstreamTls {
            config,
            sni: tls.sni.as_ref().and_then(|s| ServerName::try_from(s.clone()).ok()),
            hosts,
            literal,
            names: Mutex::default(),
            cluster: cluster.name.clone(),
            errors,
        }))
    }

    /// The name `addr` is verified against: the configured `sni`; else the
    /// host name of the endpoint that resolved to it; else its address.
    async fn server_name(&self, addr: SocketAddr) -> ServerName<'static> {
        if let Some(sni) = &self.sni {
            return sni.clone();
        }
        let ip = ServerName::IpAddress(addr.ip().into());
        if self.literal.contains(&addr) || self.hosts.is_empty() {
            return ip;
        }
        if let Some(name) = self.names.lock().unwrap_or_else(PoisonError::into_inner).get(&addr) {
            return name.clone();
        }
        let host = |h: &str| h.rsplit_once(':').map_or(h, |(host, _)| host).trim_matches(['[', ']']).to_string();
        let mut found = None;
        if self.hosts.len() == 1 {
            found = Some(host(&self.hosts[0]));
        } else {
            for h in &self.hosts {
                if tokio::net::lookup_host(h.as_str()).await.is_ok_and(|mut a| a.any(|a| a == addr)) {
                    found = Some(host(h));
                    break;
                }
            }
        }
        let name = found.and_then(|h| ServerName::try_from(h).ok()).unwrap_or(ip);
        self.names.lock().unwrap_or_else(PoisonError::into_inner).insert(addr, name.clone());
        name
    }

    /// The TLS handshake on `tcp` to `addr`, within `timeout`. A failure
    /// is counted by reason and logged (at most a line a second).
    pub async fn handshake(&self, addr: SocketAddr, tcp: TcpStream, timeout: Duration) -> Option<UpstreamStream> {
        let connector = match &self.config {
            Ok(c) => TlsConnector::from(c.clone()),
            Err(why) => {
                self.failed(addr, TlsFailure::Handshake, why);
                return None;
            }
        };
        let name = self.server_name(addr).await;
        match tokio::time::timeout(timeout, connector.connect(name.clone(), tcp)).await {
            Ok(Ok(stream)) => Some(UpstreamStream::Tls(Box::new(stream))),
            Ok(Err(e)) => {
                let reason = TlsFailure::of(&e);
                self.failed(addr, reason, &format!("{} ({})", e, name.to_str()));
                None
            }
            Err(_) => {
                self.failed(addr, TlsFailure::Handshake, &format!("no answer within {timeout:?}"));
                None
            }
        }
    }

    fn failed(&self, addr: SocketAddr, reason: TlsFailure, why: &str) {
        self.errors.counts[reason as usize].fetch_add(1, Relaxed);
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        if self.errors.logged.swap(now, Relaxed) != now {
            eprintln!(
                "fulcrum: cluster {}: TLS handshake with {addr} failed ({}): {why}",
                self.cluster,
                reason.label()
            );
        }
    }
}

/// The client configuration of a cluster's `tls`: trust, client
/// certificate, ALPN for `protocol`, and the default session cache.
pub fn client_config(tls: &TlsConfig, protocol: UpstreamProtocol) -> Result<ClientConfig, FileError> {
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| FileError { field: "verify", path: Default::default(), message: e.to_string() })?;
    let builder = if tls.verify {
        let roots = match &tls.ca {
            Some(ca) => roots("ca", ca)?,
            None => RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() },
        };
        builder.with_root_certificates(roots)
    } else {
        builder.dangerous().with_custom_certificate_verifier(Arc::new(NoVerification(provider())))
    };
    let mut config = match (&tls.cert, &tls.key) {
        (Some(cert), Some(key_path)) => {
            let chain = certs("cert", cert, &read("cert", cert)?)?;
            let der = key("key", key_path, &read("key", key_path)?)?;
            builder.with_client_auth_cert(chain, der).map_err(|e| FileError {
                field: "key",
                path: key_path.clone(),
                message: format!("cannot be used with {}: {e}", cert.display()),
            })?
        }
        _ => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![match protocol {
        UpstreamProtocol::Http1 => b"http/1.1".to_vec(),
        UpstreamProtocol::Http2 => b"h2".to_vec(),
    }];
    Ok(config)
}

/// `verify = false`: any certificate is accepted (signatures on the
/// handshake are still checked, so the connection is at least consistent).
#[derive(Debug)]
struct NoVerification(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for NoVerification {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream::{ConnectionLimit, UpstreamPool};
    use http_body_util::{BodyExt, Either, Empty, Full};
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use rustls::HandshakeKind;

    /// A TLS upstream for localhost on a kernel-chosen port, speaking
    /// HTTP/2 or HTTP/1.1 by ALPN and closing each HTTP/1.1 connection after
    /// one response; the CA file that verifies it, and the kind of each
    /// handshake it made.
    async fn upstream(dir: &std::path::Path) -> (SocketAddr, std::path::PathBuf, Arc<Mutex<Vec<HandshakeKind>>>) {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".into()]).unwrap().self_signed(&key).unwrap();
        let ca = dir.join("upstream.pem");
        std::fs::write(&ca, cert.pem()).unwrap();
        let der = rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der()).unwrap();
        let mut config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert.der().clone()], der)
            .unwrap();
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let kinds = Arc::new(Mutex::new(Vec::new()));
        let seen = kinds.clone();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, seen) = (acceptor.clone(), seen.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else { return };
                    let (_, conn) = tls.get_ref();
                    seen.lock().unwrap().extend(conn.handshake_kind());
                    let h2 = conn.alpn_protocol() == Some(b"h2");
                    let service = hyper::service::service_fn(move |_req| async move {
                        let body = if h2 { "over h2" } else { "over http/1.1" };
                        let mut response = http::Response::new(Full::new(bytes::Bytes::from(body)));
                        if !h2 {
                            response.headers_mut().insert("connection", http::HeaderValue::from_static("close"));
                        }
                        Ok::<_, std::convert::Infallible>(response)
                    });
                    let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                    let _ = builder.serve_connection(TokioIo::new(tls), service).await;
                });
            }
        });
        (addr, ca, kinds)
    }

    fn cluster(ca: &std::path::Path, protocol: &str, sni: &str) -> Cluster {
        let text = format!(
            "[[listener]]\nlisten = \"127.0.0.1:1\"\nroutes = [{{ cluster = \"c\" }}]\n[[cluster]]\nname = \"c\"\n\
             endpoints = [\"127.0.0.1:1\"]\nupstream = \"{protocol}\"\ntls = {{ ca = {ca:?}, sni = \"{sni}\" }}\n"
        );
        crate::Config::parse(std::path::Path::new("t.toml"), &text).unwrap().clusters.remove(0)
    }

    fn get() -> http::Request<crate::body::UpstreamBody> {
        http::Request::builder().uri("/").header("host", "localhost").body(Either::Right(Empty::new())).unwrap()
    }

    async fn body(pool: &Arc<UpstreamPool>, addr: SocketAddr) -> Result<String, String> {
        match pool.send(addr, get()).await {
            Ok(r) => Ok(String::from_utf8_lossy(&r.into_body().collect().await.unwrap().to_bytes()).into_owned()),
            Err(e) => Err(format!("{e:?}")),
        }
    }

    #[tokio::test]
    async fn http1_and_http2_over_tls_resume_sessions_and_failures_are_counted_by_reason() {
        let dir = std::env::temp_dir().join(format!("fulcrum-upstream-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (addr, ca, kinds) = upstream(&dir).await;
        let pool_for = |c: &Cluster, errors: Arc<TlsErrors>| {
            let tls = UpstreamTls::new(c, errors);
            UpstreamPool::with_tls(c.upstream, Duration::from_secs(2), ConnectionLimit::new(10, 10), None, tls)
        };
        // HTTP/1.1: each response closes its connection, and the next
        // connection resumes the session of the one before.
        let h1 = cluster(&ca, "http1", "localhost");
        let pool = pool_for(&h1, Arc::default());
        for _ in 0..3 {
            assert_eq!(body(&pool, addr).await.unwrap(), "over http/1.1");
        }
        assert_eq!(
            kinds.lock().unwrap().clone(),
            [HandshakeKind::Full, HandshakeKind::Resumed, HandshakeKind::Resumed]
        );
        // HTTP/2 by ALPN: one connection carries every request.
        let pool = pool_for(&cluster(&ca, "http2", "localhost"), Arc::default());
        for _ in 0..3 {
            assert_eq!(body(&pool, addr).await.unwrap(), "over h2");
        }
        assert_eq!(kinds.lock().unwrap().len(), 4);
        // A name the certificate does not have, and a CA that did not sign it.
        let errors = Arc::new(TlsErrors::default());
        let pool = pool_for(&cluster(&ca, "http1", "other.test"), errors.clone());
        assert!(body(&pool, addr).await.unwrap_err().contains("ConnectFailure"));
        assert_eq!(errors.get(TlsFailure::NameMismatch), 1);
        let other_key = rcgen::KeyPair::generate().unwrap();
        let mut other = rcgen::CertificateParams::new(vec!["localhost".into()]).unwrap();
        other.distinguished_name.push(rcgen::DnType::CommonName, "another CA");
        let other_ca = dir.join("other.pem");
        std::fs::write(&other_ca, other.self_signed(&other_key).unwrap().pem()).unwrap();
        let errors = Arc::new(TlsErrors::default());
        let pool = pool_for(&cluster(&other_ca, "http1", "localhost"), errors.clone());
        assert!(body(&pool, addr).await.is_err());
        assert_eq!((errors.get(TlsFailure::UnknownCa), errors.get(TlsFailure::NameMismatch)), (1, 0));
        let _ = std::fs::remove_dir_all(dir);
    }
}

//! TLS for HTTP listeners: rustls, with the certificate chosen by SNI
//! ([`Certificates`], exact names before `*.` wildcards before the default),
//! certificates and OCSP responses read again when their files change,
//! ALPN (h2 and http/1.1 by default, only h2 on an HTTP/2-only listener),
//! a minimum version, and optional client certificates (mutual TLS) whose
//! verified identity the request path forwards ([`ClientCert`]).
//!
//! A reload builds a whole new table of certificates and swaps an `Arc`:
//! a handshake in flight keeps the certificate it was given, open
//! connections are untouched, and a file that cannot be used leaves the
//! table in use as it was (the reason is logged once per change). A
//! configuration reload that changes the listener's other TLS settings
//! swaps its whole acceptor ([`TlsSlot`]) the same way.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use http::HeaderValue;
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use tokio_rustls::TlsAcceptor;

use crate::config::{ClientAuth, Tls, TlsVersion};
use crate::error::ServeError;
use crate::tls_files::{provider, roots, FileError, KeyPairBytes, KeyPairFiles};

/// The certificates of one listener, chosen by the name the client asks
/// for, and replaced whole when their files change.
#[derive(Debug)]
pub struct Certificates {
    /// Which listener, for log lines.
    listener: SocketAddr,
    tls: Tls,
    table: RwLock<Arc<Table>>,
    /// The files' contents when last read, and the error they gave if they
    /// could not be used (logged once).
    seen: Mutex<(Vec<KeyPairBytes>, Option<FileError>)>,
}

/// Certificates by server name.
#[derive(Debug)]
struct Table {
    /// Exact names (lower case) to an index into `keys`.
    exact: HashMap<String, usize>,
    /// `*.example.com` as `example.com` to an index into `keys`.
    wildcard: HashMap<String, usize>,
    /// The default certificate first, then the configured ones in order.
    keys: Vec<Arc<CertifiedKey>>,
}

impl Table {
    /// The certificate for `name`: an exact name, else a wildcard for its
    /// parent domain, else the default.
    fn select(&self, name: Option<&str>) -> &Arc<CertifiedKey> {
        let index = name.and_then(|name| {
            let lower;
            let name = if name.bytes().any(|b| b.is_ascii_uppercase()) {
                lower = name.to_ascii_lowercase();
                lower.as_str()
            } else {
                name
            };
            self.exact.get(name).or_else(|| self.wildcard.get(name.split_once('.')?.1)).copied()
        });
        &self.keys[index.unwrap_or(0)]
    }
}

/// What reading the files again did.
#[derive(Debug, PartialEq, Eq)]
pub enum Refresh {
    /// The files are as they were.
    Unchanged,
    /// New certificates are in use.
    Replaced,
    /// The files changed but cannot be used; the certificates in use stay.
    Kept(FileError),
}

impl Certificates {
    /// The listener's certificates, read now.
    pub fn load(listener: SocketAddr, tls: &Tls) -> Result<Arc<Certificates>, FileError> {
        let bytes = read_all(tls)?;
        let table = build(tls, &bytes)?;
        Ok(Arc::new(Certificates {
            listener,
            tls: tls.clone(),
            table: RwLock::new(Arc::new(table)),
            seen: Mutex::new((bytes, None)),
        }))
    }

    /// Read the files again and, if they changed and can be used, serve
    /// the new certificates from the next handshake on. A failure is
    /// logged the first time it is seen.
    pub fn refresh(&self) -> Refresh {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        let result = read_all(&self.tls).and_then(|bytes| {
            if bytes == seen.0 {
                return Ok(None);
            }
            let table = build(&self.tls, &bytes)?;
            Ok(Some((bytes, table)))
        });
        match result {
            Ok(None) => Refresh::Unchanged,
            Ok(Some((bytes, table))) => {
                *self.table.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(table);
                *seen = (bytes, None);
                eprintln!("fulcrum: listener {}: certificates reloaded", self.listener);
                Refresh::Replaced
            }
            Err(e) => {
                if seen.1.as_ref() != Some(&e) {
                    eprintln!(
                        "fulcrum: listener {}: keeping the certificates in use: tls.{}: {e}",
                        self.listener, e.field
                    );
                    seen.1 = Some(e.clone());
                }
                Refresh::Kept(e)
            }
        }
    }
}

impl ResolvesServerCert for Certificates {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let table = self.table.read().unwrap_or_else(PoisonError::into_inner).clone();
        Some(table.select(hello.server_name()).clone())
    }
}

/// The files of every certificate of `tls`, the default first.
fn files(tls: &Tls) -> Vec<KeyPairFiles<'_>> {
    let fields = ["cert", "key", "ocsp"];
    let default = KeyPairFiles { cert: &tls.cert, key: &tls.key, ocsp: tls.ocsp.as_deref(), fields };
    let named = tls.certificates.iter().map(|c| KeyPairFiles {
        cert: &c.cert,
        key: &c.key,
        ocsp: c.ocsp.as_deref(),
        fields: ["certificates.cert", "certificates.key", "certificates.ocsp"],
    });
    std::iter::once(default).chain(named).collect()
}

fn read_all(tls: &Tls) -> Result<Vec<KeyPairBytes>, FileError> {
    files(tls).iter().map(KeyPairFiles::read).collect()
}

/// The table of `tls`'s certificates from the files' contents.
fn build(tls: &Tls, bytes: &[KeyPairBytes]) -> Result<Table, FileError> {
    let mut table = Table { exact: HashMap::new(), wildcard: HashMap::new(), keys: Vec::new() };
    for (files, bytes) in files(tls).iter().zip(bytes) {
        table.keys.push(Arc::new(files.certified(bytes)?));
    }
    for (i, c) in tls.certificates.iter().enumerate() {
        for name in &c.names {
            let name = name.to_ascii_lowercase();
            match name.strip_prefix("*.") {
                Some(parent) => table.wildcard.insert(parent.to_string(), i + 1),
                None => table.exact.insert(name, i + 1),
            };
        }
    }
    Ok(table)
}

/// A listener's TLS: the acceptor its workers share and the certificates
/// that the control thread reloads.
#[derive(Clone)]
pub struct ListenerTls {
    /// Accepts handshakes.
    pub acceptor: TlsAcceptor,
    /// Its certificates.
    pub certificates: Arc<Certificates>,
}

/// A TCP listener's TLS as configuration reloads leave it: each handshake
/// takes the acceptor in force when it starts, and keeps it.
pub struct TlsSlot {
    listener: SocketAddr,
    h2_only: bool,
    current: RwLock<ListenerTls>,
}

impl TlsSlot {
    /// The slot of the listener at `listener`, with the TLS `tls` says.
    pub fn new(listener: SocketAddr, tls: &Tls, h2_only: bool) -> Result<Arc<TlsSlot>, ServeError> {
        let current = RwLock::new(acceptor(listener, tls, h2_only)?);
        Ok(Arc::new(TlsSlot { listener, h2_only, current }))
    }

    fn current(&self) -> std::sync::RwLockReadGuard<'_, ListenerTls> {
        self.current.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// The acceptor for the next handshake.
    pub fn acceptor(&self) -> TlsAcceptor {
        self.current().acceptor.clone()
    }

    /// The certificates in force.
    pub fn certificates(&self) -> Arc<Certificates> {
        self.current().certificates.clone()
    }

    /// The TLS `tls` says, its files read, for [`install`](Self::install).
    pub fn prepare(&self, tls: &Tls) -> Result<ListenerTls, ServeError> {
        acceptor(self.listener, tls, self.h2_only)
    }

    /// Put `next` in force from the next handshake on; `changed` says that
    /// its settings differ (logged), not only its files' contents.
    pub fn install(&self, next: ListenerTls, changed: bool) {
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = next;
        if changed {
            eprintln!("fulcrum: listener {}: TLS settings reloaded", self.listener);
        }
    }

    /// Read the certificates' files every `reload_interval` (of the
    /// settings in force) until `stopped` says stop.
    pub async fn watch(self: Arc<Self>, mut stopped: tokio::sync::watch::Receiver<Option<std::time::Duration>>) {
        loop {
            let certificates = self.certificates();
            tokio::select! {
                _ = crate::shutdown::stopping(&mut stopped) => return,
                _ = tokio::time::sleep(certificates.tls.reload_interval) => {}
            }
            // File reads block: off the runtime's threads.
            let _ = tokio::task::spawn_blocking(move || certificates.refresh()).await;
        }
    }
}

/// The TLS of the listener at `listener` as `tls` says; `h2_only` offers
/// only h2 in ALPN unless `tls.alpn` says otherwise.
pub fn acceptor(listener: SocketAddr, tls: &Tls, h2_only: bool) -> Result<ListenerTls, ServeError> {
    let bad = |e: FileError| ServeError::Tls { path: e.path, message: format!("tls.{}: {}", e.field, e.message) };
    let certificates = Certificates::load(listener, tls).map_err(bad)?;
    let versions: &[&rustls::SupportedProtocolVersion] = match tls.min_version {
        TlsVersion::V12 => &[&rustls::version::TLS13, &rustls::version::TLS12],
        TlsVersion::V13 => &[&rustls::version::TLS13],
    };
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(versions)
        .map_err(|e| ServeError::Tls { path: tls.cert.clone(), message: e.to_string() })?;
    let builder = match &tls.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let roots = Arc::new(roots("client_ca", ca).map_err(bad)?);
            let verifier = WebPkiClientVerifier::builder_with_provider(roots, provider());
            let verifier = match tls.client_auth.unwrap_or_default() {
                ClientAuth::Required => verifier,
                ClientAuth::Optional => verifier.allow_unauthenticated(),
            };
            let verifier = verifier
                .build()
                .map_err(|e| ServeError::Tls { path: ca.clone(), message: format!("tls.client_ca: {e}") })?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_cert_resolver(certificates.clone());
    config.alpn_protocols = match &tls.alpn {
        Some(list) => list.iter().map(|p| p.as_bytes().to_vec()).collect(),
        None if h2_only => vec![b"h2".to_vec()],
        None => vec![b"h2".to_vec(), b"http/1.1".to_vec()],
    };
    Ok(ListenerTls { acceptor: TlsAcceptor::from(Arc::new(config)), certificates })
}

/// The verified client certificate of a mutual-TLS connection, as the
/// request path forwards and logs it.
#[derive(Debug, Clone)]
pub struct ClientCert {
    /// The subject's distinguished name (RFC 4514, e.g. `CN=client,O=Example`).
    pub subject: Arc<str>,
    /// The `x-forwarded-client-cert` value: `Subject="…"` and a `URI=…` per
    /// URI subject alternative name.
    pub header: HeaderValue,
    /// Its subject alternative names as text: DNS names, URIs, e-mail
    /// addresses and IP addresses (what routes' `client_cert` `san` reads).
    pub names: Arc<[Box<str>]>,
}

/// The identity in the client certificate `conn` verified, if it has one.
pub fn client_cert(conn: &rustls::ServerConnection) -> Option<ClientCert> {
    client_cert_of(conn.peer_certificates()?)
}

/// The identity in `chain`, a client's verified certificate chain (leaf
/// first), whether it came over TCP or QUIC.
pub fn client_cert_of(chain: &[rustls::pki_types::CertificateDer<'_>]) -> Option<ClientCert> {
    let der = chain.first()?;
    let (_, cert) = x509_parser::parse_x509_certificate(der.as_ref()).ok()?;
    let subject = cert.subject().to_string();
    let mut value = String::from("Subject=\"");
    for b in subject.bytes() {
        match b {
            b'"' | b'\\' => value.extend(['\\', char::from(b)]),
            0x20..=0x7e => value.push(char::from(b)),
            // Bytes a header cannot carry, as `\xHH`.
            _ => value.push_str(&format!("\\x{b:02X}")),
        }
    }
    value.push('"');
    let mut names = Vec::new();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        use x509_parser::extensions::GeneralName;
        for name in &san.value.general_names {
            if let GeneralName::URI(uri) = name {
                if uri.bytes().all(|b| b.is_ascii_graphic()) {
                    value.push_str(";URI=");
                    value.push_str(uri);
                }
            }
            let text = match name {
                GeneralName::DNSName(s) | GeneralName::URI(s) | GeneralName::RFC822Name(s) => s.to_string(),
                GeneralName::IPAddress(b) => match <[u8; 4]>::try_from(*b) {
                    Ok(v4) => std::net::IpAddr::from(v4).to_string(),
                    Err(_) => {
                        <[u8; 16]>::try_from(*b).map_or(String::new(), |v6| std::net::IpAddr::from(v6).to_string())
                    }
                },
                _ => String::new(),
            };
            if !text.is_empty() {
                names.push(text.into_boxed_str());
            }
        }
    }
    let header = HeaderValue::from_str(&value).ok()?;
    Some(ClientCert { subject: subject.into(), header, names: names.into() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::{Path, PathBuf};

    /// A self-signed certificate for `names` (ECDSA P-256 or RSA) written
    /// to `dir` as `stem.pem` and `stem.key`.
    pub(crate) fn write_cert(dir: &Path, stem: &str, names: &[&str], rsa: bool) -> (PathBuf, PathBuf) {
        let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        // ring cannot generate RSA keys: the example RSA key is used.
        let key = if rsa {
            rcgen::KeyPair::from_pem(RSA_KEY).unwrap()
        } else {
            rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap()
        };
        let cert = rcgen::CertificateParams::new(names).unwrap().self_signed(&key).unwrap();
        let (c, k) = (dir.join(format!("{stem}.pem")), dir.join(format!("{stem}.key")));
        std::fs::write(&c, cert.pem()).unwrap();
        std::fs::write(&k, key.serialize_pem()).unwrap();
        (c, k)
    }

    const RSA_KEY: &str = include_str!("../../../examples/proxy/certs/api.key");

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("fulcrum-tls-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn tls(cert: PathBuf, key: PathBuf) -> Tls {
        let text = format!("cert = {:?}\nkey = {:?}\n", cert, key);
        toml::from_str(&text).unwrap()
    }

    fn subject_of(key: &CertifiedKey) -> String {
        let (_, c) = x509_parser::parse_x509_certificate(key.cert[0].as_ref()).unwrap();
        c.subject_alternative_name().unwrap().unwrap().value.general_names[0].to_string()
    }

    #[test]
    fn sni_picks_exact_then_wildcard_then_default() {
        let d = dir("sni");
        let (dc, dk) = write_cert(&d, "default", &["default.test"], false);
        let (ac, ak) = write_cert(&d, "exact", &["api.example.com"], true);
        let (wc, wk) = write_cert(&d, "wild", &["*.example.com"], false);
        let mut t = tls(dc, dk);
        t.certificates = vec![
            crate::config::NamedCert { names: vec!["*.example.com".into()], cert: wc, key: wk, ocsp: None },
            crate::config::NamedCert { names: vec!["API.example.com".into()], cert: ac, key: ak, ocsp: None },
        ];
        let certs = Certificates::load("127.0.0.1:1".parse().unwrap(), &t).unwrap();
        let table = certs.table.read().unwrap().clone();
        let pick = |name: Option<&str>| subject_of(table.select(name));
        assert!(pick(Some("api.example.com")).contains("api.example.com"), "exact beats wildcard");
        assert!(pick(Some("Api.Example.COM")).contains("api.example.com"), "names are case-insensitive");
        assert!(pick(Some("www.example.com")).contains("*.example.com"));
        assert!(pick(Some("a.b.example.com")).contains("default.test"), "a wildcard covers one label");
        assert!(pick(Some("example.com")).contains("default.test"));
        assert!(pick(Some("other.test")).contains("default.test"));
        assert!(pick(None).contains("default.test"));
    }

    #[test]
    fn a_changed_file_replaces_the_table_and_a_bad_one_keeps_it() {
        let d = dir("reload");
        let (c, k) = write_cert(&d, "one", &["one.test"], false);
        let certs = Certificates::load("127.0.0.1:1".parse().unwrap(), &tls(c.clone(), k.clone())).unwrap();
        let current = || subject_of(certs.table.read().unwrap().select(None));
        assert_eq!(certs.refresh(), Refresh::Unchanged);
        // A certificate without its key: kept, with the reason.
        let (c2, _) = write_cert(&d, "two", &["two.test"], false);
        std::fs::copy(&c2, &c).unwrap();
        match certs.refresh() {
            Refresh::Kept(e) => assert!(e.message.contains("does not match") && e.field == "key", "{e}"),
            other => panic!("{other:?}"),
        }
        assert!(current().contains("one.test"));
        // Then its key arrives.
        std::fs::copy(d.join("two.key"), &k).unwrap();
        assert_eq!(certs.refresh(), Refresh::Replaced);
        assert!(current().contains("two.test"));
        // A file that vanishes keeps what is in use.
        std::fs::remove_file(&k).unwrap();
        assert!(matches!(certs.refresh(), Refresh::Kept(e) if e.message.contains("cannot read")));
        assert!(current().contains("two.test"));
    }
}

//! TLS for HTTP listeners: rustls with ALPN offering h2 and http/1.1 (only
//! h2 on an HTTP/2-only listener).

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

use crate::config::Tls;
use crate::error::ServeError;

fn read_pem(path: &Path) -> Result<Vec<u8>, ServeError> {
    std::fs::read(path).map_err(|e| ServeError::Tls { path: path.to_path_buf(), message: e.to_string() })
}

/// An acceptor for the certificate chain and key in `tls`; `h2_only`
/// offers only h2 in ALPN.
pub fn acceptor(tls: &Tls, h2_only: bool) -> Result<TlsAcceptor, ServeError> {
    let bad = |path: &Path, message: String| ServeError::Tls { path: path.to_path_buf(), message };
    let certs: Vec<CertificateDer<'static>> = rustls_pemfile::certs(&mut read_pem(&tls.cert)?.as_slice())
        .collect::<Result<_, _>>()
        .map_err(|e| bad(&tls.cert, e.to_string()))?;
    if certs.is_empty() {
        return Err(bad(&tls.cert, "no PEM certificate found".into()));
    }
    let key: PrivateKeyDer<'static> = rustls_pemfile::private_key(&mut read_pem(&tls.key)?.as_slice())
        .map_err(|e| bad(&tls.key, e.to_string()))?
        .ok_or_else(|| bad(&tls.key, "no PEM private key found".into()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| bad(&tls.cert, e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| bad(&tls.key, e.to_string()))?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    if !h2_only {
        config.alpn_protocols.push(b"http/1.1".to_vec());
    }
    Ok(TlsAcceptor::from(Arc::new(config)))
}

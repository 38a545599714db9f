//! Reading the files TLS needs (PEM certificate chains, private keys, CA
//! bundles and DER OCSP responses) into rustls types, with an error that
//! names the file and says what is wrong with it. Shared by the
//! configuration check, the listeners ([`tls`](crate::tls)) and the
//! upstream connections ([`upstream_tls`](crate::upstream_tls)).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;
use rustls::RootCertStore;

/// A TLS file that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {message}", path.display())]
pub struct FileError {
    /// The key of the configuration that names the file (`cert`, `key`, `ocsp`, `ca`, …).
    pub field: &'static str,
    /// The file.
    pub path: PathBuf,
    /// What is wrong with it.
    pub message: String,
}

impl FileError {
    fn new(field: &'static str, path: &Path, message: impl Into<String>) -> FileError {
        FileError { field, path: path.to_path_buf(), message: message.into() }
    }
}

/// The bytes of `path`, named `field` in errors.
pub fn read(field: &'static str, path: &Path) -> Result<Vec<u8>, FileError> {
    std::fs::read(path).map_err(|e| FileError::new(field, path, format!("cannot read: {e}")))
}

/// The certificates of a PEM file's contents (at least one).
pub fn certs(field: &'static str, path: &Path, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, FileError> {
    let certs: Vec<CertificateDer<'static>> = rustls_pemfile::certs(&mut &pem[..])
        .collect::<Result<_, _>>()
        .map_err(|e| FileError::new(field, path, format!("not PEM: {e}")))?;
    if certs.is_empty() {
        return Err(FileError::new(field, path, "no PEM certificate (BEGIN CERTIFICATE) found"));
    }
    Ok(certs)
}

/// The private key of a PEM file's contents (PKCS#8, PKCS#1 or SEC1).
pub fn key(field: &'static str, path: &Path, pem: &[u8]) -> Result<PrivateKeyDer<'static>, FileError> {
    rustls_pemfile::private_key(&mut &pem[..])
        .map_err(|e| FileError::new(field, path, format!("not PEM: {e}")))?
        .ok_or_else(|| FileError::new(field, path, "no PEM private key found"))
}

/// The contents of the files of one certificate, read together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyPairBytes {
    /// The certificate chain (PEM).
    pub cert: Vec<u8>,
    /// The private key (PEM).
    pub key: Vec<u8>,
    /// The OCSP response (DER), if configured.
    pub ocsp: Option<Vec<u8>>,
}

/// The files of one certificate: chain, key and optional OCSP response,
/// and the names of their keys in the configuration.
#[derive(Debug, Clone, Copy)]
pub struct KeyPairFiles<'a> {
    /// The certificate chain (PEM).
    pub cert: &'a Path,
    /// The private key (PEM).
    pub key: &'a Path,
    /// A DER OCSP response to staple.
    pub ocsp: Option<&'a Path>,
    /// The configuration's keys for the three, for errors.
    pub fields: [&'static str; 3],
}

impl KeyPairFiles<'_> {
    /// Read the three files.
    pub fn read(&self) -> Result<KeyPairBytes, FileError> {
        Ok(KeyPairBytes {
            cert: read(self.fields[0], self.cert)?,
            key: read(self.fields[1], self.key)?,
            ocsp: self.ocsp.map(|p| read(self.fields[2], p)).transpose()?,
        })
    }

    /// A certificate with its signing key, from the files' contents: the key
    /// must be one rustls signs with (RSA, ECDSA P-256/P-384, Ed25519) and
    /// must match the certificate.
    pub fn certified(&self, bytes: &KeyPairBytes) -> Result<CertifiedKey, FileError> {
        let [cert_field, key_field, ocsp_field] = self.fields;
        let chain = certs(cert_field, self.cert, &bytes.cert)?;
        let der = key(key_field, self.key, &bytes.key)?;
        let signing = rustls::crypto::ring::sign::any_supported_type(&der)
            .map_err(|e| FileError::new(key_field, self.key, format!("unusable key: {e}")))?;
        let mut certified = CertifiedKey::new(chain, signing);
        certified.keys_match().map_err(|e| {
            FileError::new(key_field, self.key, format!("does not match the certificate {}: {e}", self.cert.display()))
        })?;
        if let (Some(path), Some(ocsp)) = (self.ocsp, &bytes.ocsp) {
            if ocsp.first() != Some(&0x30) {
                return Err(FileError::new(ocsp_field, path, "not a DER OCSP response"));
            }
            certified.ocsp = Some(ocsp.clone());
        }
        Ok(certified)
    }

    /// Read the files and make the certified key.
    pub fn load(&self) -> Result<Arc<CertifiedKey>, FileError> {
        Ok(Arc::new(self.certified(&self.read()?)?))
    }
}

/// The trust anchors of a CA bundle (PEM), named `field` in errors.
pub fn roots(field: &'static str, path: &Path) -> Result<RootCertStore, FileError> {
    let mut store = RootCertStore::empty();
    for cert in certs(field, path, &read(field, path)?)? {
        store.add(cert).map_err(|e| FileError::new(field, path, format!("not a CA certificate: {e}")))?;
    }
    Ok(store)
}

/// The crypto provider every TLS configuration here uses.
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

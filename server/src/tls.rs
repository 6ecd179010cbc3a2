//! TLS for QUIC: a self-signed certificate made at start (clients pin its SHA-256
//! fingerprint), or a certificate and key from PEM files.

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use sha2::{Digest, Sha256};
use std::sync::Arc;

/// A certificate chain, its key and the end certificate's fingerprint.
pub struct Identity {
    /// Chain, end certificate first.
    pub chain: Vec<CertificateDer<'static>>,
    /// Private key.
    pub key: PrivateKeyDer<'static>,
    /// SHA-256 of the end certificate's DER, lower-case hex.
    pub fingerprint: String,
}

/// SHA-256 of a certificate's DER, lower-case hex.
pub fn fingerprint(cert: &[u8]) -> String {
    hex::encode(Sha256::digest(cert))
}

impl Identity {
    /// A fresh self-signed certificate for `localhost` and `expel`.
    pub fn self_signed() -> Result<Identity, crate::ServerError> {
        let c = rcgen::generate_simple_self_signed(vec!["localhost".into(), "expel".into()])
            .map_err(|e| crate::ServerError::Tls(e.to_string()))?;
        let der = c.cert.der().clone();
        Ok(Identity {
            fingerprint: fingerprint(&der),
            chain: vec![der],
            key: PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(c.key_pair.serialize_der())),
        })
    }

    /// A certificate chain and key from PEM text.
    pub fn from_pem(cert_pem: &[u8], key_pem: &[u8]) -> Result<Identity, crate::ServerError> {
        use rustls::pki_types::pem::PemObject;
        let tls = |m: String| crate::ServerError::Tls(m);
        let chain: Vec<CertificateDer<'static>> = rustls_pemfile_certs(cert_pem)?;
        let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(key_pem)
            .map_err(|e| tls(format!("key: {e}")))?;
        let end = chain
            .first()
            .ok_or_else(|| tls("no certificate in the file".into()))?;
        Ok(Identity {
            fingerprint: fingerprint(end),
            chain,
            key,
        })
    }

    /// The QUIC server configuration (ALPN `expel/3`, TLS 1.3).
    pub fn quic_config(&self) -> Result<quinn::ServerConfig, crate::ServerError> {
        let tls = |m: String| crate::ServerError::Tls(m);
        let mut crypto = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(self.chain.clone(), self.key.clone_key())
            .map_err(|e| tls(e.to_string()))?;
        crypto.alpn_protocols = vec![expel_shared::protocol::ALPN.to_vec()];
        let quic = quinn::crypto::rustls::QuicServerConfig::try_from(crypto)
            .map_err(|e| tls(e.to_string()))?;
        let mut cfg = quinn::ServerConfig::with_crypto(Arc::new(quic));
        let mut transport = quinn::TransportConfig::default();
        transport.max_idle_timeout(Some(
            std::time::Duration::from_secs(15)
                .try_into()
                .map_err(|_| tls("idle timeout".into()))?,
        ));
        transport.keep_alive_interval(Some(std::time::Duration::from_secs(2)));
        transport.datagram_receive_buffer_size(Some(256 * 1024));
        transport.datagram_send_buffer_size(256 * 1024);
        cfg.transport_config(Arc::new(transport));
        Ok(cfg)
    }
}

fn rustls_pemfile_certs(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, crate::ServerError> {
    use rustls::pki_types::pem::PemObject;
    CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| crate::ServerError::Tls(format!("certificate: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pem_files_load_with_the_same_fingerprint() {
        let c = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let id = Identity::from_pem(
            c.cert.pem().as_bytes(),
            c.key_pair.serialize_pem().as_bytes(),
        )
        .unwrap();
        assert_eq!(id.fingerprint, fingerprint(c.cert.der()));
        assert_eq!(id.chain.len(), 1);
        assert!(id.quic_config().is_ok());
        assert!(Identity::from_pem(b"not pem", b"nor this").is_err());
    }
}

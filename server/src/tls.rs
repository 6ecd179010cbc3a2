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
            .map_err(|e| tls("generating a self-signed certificate", e))?;
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
        let chain: Vec<CertificateDer<'static>> = rustls_pemfile_certs(cert_pem)?;
        let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(key_pem)
            .map_err(|e| tls("reading the private key", e))?;
        let end = chain
            .first()
            .ok_or_else(|| tls("reading the certificates", "no certificate in the file"))?;
        Ok(Identity {
            fingerprint: fingerprint(end),
            chain,
            key,
        })
    }

    /// The QUIC server configuration (ALPN [`expel_protocol::ALPN`], TLS 1.3).
    pub fn quic_config(&self) -> Result<quinn::ServerConfig, crate::ServerError> {
        let mut crypto = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(self.chain.clone(), self.key.clone_key())
            .map_err(|e| tls("using the certificate and key", e))?;
        crypto.alpn_protocols = vec![expel_protocol::ALPN.to_vec()];
        let quic = quinn::crypto::rustls::QuicServerConfig::try_from(crypto)
            .map_err(|e| tls("making the QUIC configuration", e))?;
        let mut cfg = quinn::ServerConfig::with_crypto(Arc::new(quic));
        cfg.transport_config(Arc::new(transport()?));
        // Connection attempts the QUIC driver has not decided on yet, and what quinn
        // buffers for them meanwhile (it decides at once, so these stay small).
        cfg.max_incoming(MAX_INCOMING);
        cfg.incoming_buffer_size(INCOMING_BUFFER);
        cfg.incoming_buffer_size_total(MAX_INCOMING as u64 * INCOMING_BUFFER / 4);
        Ok(cfg)
    }
}

/// Connection attempts quinn holds until the QUIC driver decides on them.
const MAX_INCOMING: usize = 1024;
/// Bytes quinn buffers for one undecided attempt.
const INCOMING_BUFFER: u64 = 16 * 1024;
/// The client's control frames are a hello and a bye, a few hundred bytes: the window
/// for its one stream, and for the whole connection.
const CONTROL_WINDOW: u32 = 8 * 1024;
/// Input datagrams held until the QUIC driver hands them to the machine (it does as each
/// packet is read; an input datagram is at most about 1.2 KB).
const DATAGRAM_IN: usize = 16 * 1024;
/// Snapshot datagrams held while congestion control holds them back (older ones are
/// dropped first, and a newer snapshot supersedes them anyway).
const DATAGRAM_OUT: usize = 16 * 1024;
/// Control-stream bytes in flight and unsent (the map transfer): a write waits for room.
const SEND_WINDOW: u64 = 256 * 1024;

/// The transport as the protocol uses it, so no peer costs more than a small fixed amount:
/// one bidirectional stream (the control stream, opened by the client) and no
/// unidirectional ones, small receive windows (the server reads everything it lets in),
/// bounded datagram buffers both ways.
fn transport() -> Result<quinn::TransportConfig, crate::ServerError> {
    let mut t = quinn::TransportConfig::default();
    t.max_idle_timeout(Some(
        std::time::Duration::from_secs(15)
            .try_into()
            .map_err(|e| tls("setting the idle timeout", e))?,
    ));
    t.keep_alive_interval(Some(std::time::Duration::from_secs(2)));
    t.max_concurrent_bidi_streams(1u32.into());
    t.max_concurrent_uni_streams(0u32.into());
    t.stream_receive_window(CONTROL_WINDOW.into());
    t.receive_window(CONTROL_WINDOW.into());
    t.send_window(SEND_WINDOW);
    t.datagram_receive_buffer_size(Some(DATAGRAM_IN));
    t.datagram_send_buffer_size(DATAGRAM_OUT);
    // Each snapshot is a packet the client must acknowledge: asked to wait, it
    // acknowledges in its next input rather than in a packet of its own.
    t.ack_frequency_config(Some(expel_quic::ack_frequency()));
    t.mtu_discovery_config(expel_quic::mtu_discovery());
    Ok(t)
}

/// A TLS error: what was being done, and what failed.
fn tls(
    what: &'static str,
    source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
) -> crate::ServerError {
    crate::ServerError::Tls {
        what,
        source: source.into(),
    }
}

fn rustls_pemfile_certs(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, crate::ServerError> {
    use rustls::pki_types::pem::PemObject;
    CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| tls("reading the certificates", e))
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

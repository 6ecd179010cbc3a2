//! Server authentication: a pinned certificate fingerprint (SHA-256 of the end
//! certificate, as `expel serve` prints it) or a certificate authority.

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use sha2::{Digest, Sha256};
use std::sync::Arc;

/// Accepts exactly the certificate whose SHA-256 is the pinned fingerprint; handshake
/// signatures are still verified, so only the holder of its key passes.
#[derive(Debug)]
struct Pinned {
    fingerprint: [u8; 32],
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if Sha256::digest(end_entity.as_ref()).as_slice() == self.fingerprint {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::General(
                "server certificate does not match the pinned fingerprint".into(),
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// How the client trusts the server.
#[derive(Clone, Debug)]
pub enum Trust {
    /// SHA-256 of the server certificate, hex.
    Fingerprint(String),
    /// PEM certificates of authorities to trust.
    Authority(Vec<u8>),
}

/// The QUIC client configuration for `trust`, with ALPN `alpn`.
pub fn client_config(
    trust: &Trust,
    alpn: &[u8],
) -> Result<quinn_proto::ClientConfig, crate::ClientError> {
    let err = |what: &'static str, source: Box<dyn std::error::Error + Send + Sync>| {
        crate::ClientError::Tls { what, source }
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| err("choosing TLS 1.3", e.into()))?;
    let mut crypto = match trust {
        Trust::Fingerprint(hexfp) => {
            let raw =
                hex::decode(hexfp.trim()).map_err(|e| err("reading the fingerprint", e.into()))?;
            let fingerprint: [u8; 32] = raw.try_into().map_err(|_| {
                err(
                    "reading the fingerprint",
                    "not 32 bytes (64 hex digits)".into(),
                )
            })?;
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(Pinned {
                    fingerprint,
                    provider,
                }))
                .with_no_client_auth()
        }
        Trust::Authority(pem) => {
            use rustls::pki_types::pem::PemObject;
            let mut roots = rustls::RootCertStore::empty();
            for c in CertificateDer::pem_slice_iter(pem) {
                let c = c.map_err(|e| err("reading the authority's certificate", e.into()))?;
                roots
                    .add(c)
                    .map_err(|e| err("trusting the authority's certificate", e.into()))?;
            }
            builder.with_root_certificates(roots).with_no_client_auth()
        }
    };
    crypto.alpn_protocols = vec![alpn.to_vec()];
    let quic = quinn_proto::crypto::rustls::QuicClientConfig::try_from(crypto)
        .map_err(|e| err("making the QUIC configuration", e.into()))?;
    let mut cfg = quinn_proto::ClientConfig::new(Arc::new(quic));
    let mut transport = quinn_proto::TransportConfig::default();
    transport.keep_alive_interval(Some(std::time::Duration::from_secs(2)));
    transport.datagram_receive_buffer_size(Some(256 * 1024));
    // Each input is a packet the server must acknowledge: at QUIC's default (every
    // second packet) many of its packets back would be bare ACKs. Asked to wait, it
    // acknowledges in the snapshots it sends anyway.
    transport.ack_frequency_config(Some(expel_quic::ack_frequency()));
    transport.mtu_discovery_config(expel_quic::mtu_discovery());
    cfg.transport_config(Arc::new(transport));
    Ok(cfg)
}

//! TLS for the Proxmox API: web PKI (+ a CA file), SHA-256 certificate pinning through a
//! custom rustls verifier, or (explicitly) none.

use std::sync::Arc;
use std::time::Duration;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

use super::credentials::{format_fingerprint, ProxmoxCredentials, TlsTrust};
use super::other;
use crate::cloud::{http, CloudError};

/// Accepts exactly the server certificate whose SHA-256 digest is `expected`.
#[derive(Debug)]
pub struct FingerprintVerifier {
    expected: [u8; 32],
    provider: Arc<CryptoProvider>,
}

impl FingerprintVerifier {
    pub fn new(expected: [u8; 32], provider: Arc<CryptoProvider>) -> Self {
        FingerprintVerifier { expected, provider }
    }
}

/// SHA-256 of a DER certificate.
pub fn sha256(der: &[u8]) -> [u8; 32] {
    let d = ring::digest::digest(&ring::digest::SHA256, der);
    let mut out = [0u8; 32];
    out.copy_from_slice(d.as_ref());
    out
}

impl ServerCertVerifier for FingerprintVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let got = sha256(end_entity.as_ref());
        // Constant-time comparison: the digest is public, but it costs nothing.
        let diff = got
            .iter()
            .zip(self.expected.iter())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b));
        if diff == 0 {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::General(format!(
                "server certificate fingerprint {} does not match the pinned fingerprint {}",
                format_fingerprint(&got),
                format_fingerprint(&self.expected)
            )))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
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
        verify_tls13_signature(
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

/// Builds the HTTP client for these credentials.
pub fn build_client(
    creds: &ProxmoxCredentials,
    connect_timeout: Duration,
    request_timeout: Duration,
) -> Result<reqwest::Client, CloudError> {
    let mut builder = http::client_builder(connect_timeout, request_timeout);
    match &creds.tls {
        TlsTrust::Verify { ca_file: None } => {}
        TlsTrust::Verify {
            ca_file: Some(path),
        } => {
            builder = builder.tls_certs_merge(http::read_ca_bundle("caFile", path).map_err(other)?);
        }
        TlsTrust::Fingerprint(fp) => {
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let config = rustls::ClientConfig::builder_with_provider(provider.clone())
                .with_safe_default_protocol_versions()
                .map_err(|e| other(format!("TLS setup: {e}")))?
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(FingerprintVerifier::new(*fp, provider)))
                .with_no_client_auth();
            builder = builder.tls_backend_preconfigured(config);
        }
        TlsTrust::Insecure => {
            tracing::warn!(
                "insecureSkipTlsVerify: TLS certificate verification is disabled for Proxmox VE"
            );
            builder = builder.tls_danger_accept_invalid_certs(true);
        }
    }
    http::build(builder, super::PROVIDER)
}

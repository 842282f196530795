//! HTTPS for the simulator: a TLS-accepting listener for `axum::serve`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use super::SimTls;

pub fn acceptor(t: &SimTls) -> std::io::Result<TlsAcceptor> {
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(t.cert_chain_pem.as_bytes())
            .collect::<Result<_, _>>()
            .map_err(|e| std::io::Error::other(format!("certificate PEM: {e}")))?;
    let key = PrivateKeyDer::from_pem_slice(t.key_pem.as_bytes())
        .map_err(|e| std::io::Error::other(format!("key PEM: {e}")))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(std::io::Error::other)?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(std::io::Error::other)?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

pub struct TlsListener {
    pub tcp: TcpListener,
    pub acceptor: TlsAcceptor,
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let Ok((stream, addr)) = self.tcp.accept().await else {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            };
            // A client that rejects the certificate aborts the handshake: next.
            if let Ok(Ok(tls)) =
                tokio::time::timeout(Duration::from_secs(5), self.acceptor.accept(stream)).await
            {
                return (tls, addr);
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}

impl SimTls {
    /// A self-signed certificate for `127.0.0.1` and `localhost`, as a fresh Proxmox VE
    /// host has one (for `simulate --serve`: clients pin it or trust it as a CA file).
    pub fn self_signed() -> std::io::Result<SimTls> {
        use rcgen::{CertificateParams, DnType, KeyPair};
        let key = KeyPair::generate().map_err(std::io::Error::other)?;
        let mut params =
            CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
                .map_err(std::io::Error::other)?;
        params
            .distinguished_name
            .push(DnType::CommonName, "pve1.sim");
        let cert = params.self_signed(&key).map_err(std::io::Error::other)?;
        Ok(SimTls {
            cert_chain_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }

    /// SHA-256 fingerprint of the first certificate (`AB:CD:...`), the form Proxmox shows
    /// and nodewright's `fingerprint:` takes.
    pub fn fingerprint(&self) -> Option<String> {
        let der = CertificateDer::pem_slice_iter(self.cert_chain_pem.as_bytes())
            .next()?
            .ok()?;
        let d = ring::digest::digest(&ring::digest::SHA256, der.as_ref());
        Some(
            d.as_ref()
                .iter()
                .map(|b| format!("{b:02X}"))
                .collect::<Vec<_>>()
                .join(":"),
        )
    }
}

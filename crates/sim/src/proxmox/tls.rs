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

//! Issue 11: a TLS failure names the host and the cause, for every provider's client.
//! Each client is pointed at a server with a self-signed certificate (the simulated
//! Proxmox VE over HTTPS: the handshake fails before any request, so which API it serves
//! does not matter).

use std::collections::BTreeMap;
use std::sync::Arc;

use nodewright::cloud::kamatera::{KamateraCredentials, KamateraProvider};
use nodewright::cloud::openstack::{OpenStackCredentials, OpenStackProvider};
use nodewright::cloud::proxmox::{ProxmoxCredentials, ProxmoxProvider};
use nodewright::cloud::{CloudError, CloudProvider};
use nodewright::sim::proxmox::{SimProxmox, SimProxmoxOptions, SimTls};

/// A server whose certificate (for `localhost` and 127.0.0.1) signs itself.
async fn self_signed_server() -> SimProxmox {
    let key = rcgen::KeyPair::generate().expect("key");
    let params =
        rcgen::CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
            .expect("params");
    let cert = params.self_signed(&key).expect("certificate");
    SimProxmox::start(SimProxmoxOptions {
        tls: Some(SimTls {
            cert_chain_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }),
        ..SimProxmoxOptions::default()
    })
    .await
    .expect("server starts (needs PVE_API_SCHEMA)")
}

fn providers(url: &str) -> Vec<Arc<dyn CloudProvider>> {
    let proxmox = ProxmoxCredentials::from_yaml_str(&format!(
        "url: {url}\ntokenId: nw@pve!t\ntokenSecret: 5f0c2a9e-1b7d-4c3e-9a8f-6d2e1c0b9a87\n"
    ))
    .expect("proxmox credentials");
    let openstack = OpenStackCredentials::from_yaml_str(&format!(
        "OS_AUTH_URL: {url}/identity/v3\nOS_USERNAME: nw\nOS_PASSWORD: secret-password\nOS_PROJECT_NAME: p\nOS_USER_DOMAIN_NAME: Default\nOS_PROJECT_DOMAIN_NAME: Default\n"
    ))
    .expect("openstack credentials");
    let kamatera = KamateraCredentials::new(url, "client-id", "kamatera-secret");
    vec![
        Arc::new(ProxmoxProvider::new(proxmox, BTreeMap::new()).expect("proxmox")),
        Arc::new(OpenStackProvider::new(openstack, BTreeMap::new()).expect("openstack")),
        Arc::new(KamateraProvider::new(kamatera, BTreeMap::new()).expect("kamatera")),
    ]
}

#[tokio::test]
async fn tls_failures_name_the_host_and_the_cause_for_every_provider() {
    let server = self_signed_server().await;
    let url = server.url();
    let host = url.trim_start_matches("https://").to_string();
    for p in providers(&url) {
        let e = p
            .list_servers("c")
            .await
            .expect_err("untrusted certificate");
        let text = e.to_string();
        assert!(
            matches!(e, CloudError::Transport { .. }),
            "{}: {text}",
            p.name()
        );
        assert!(
            text.contains(&format!("TLS handshake with {host} failed")),
            "{}: names the host: {text}",
            p.name()
        );
        assert!(
            text.contains("not signed by a certificate authority this client trusts")
                && text.contains("UnknownIssuer"),
            "{}: names the cause: {text}",
            p.name()
        );
        for secret in ["secret-password", "kamatera-secret", "5f0c2a9e"] {
            assert!(
                !text.contains(secret),
                "{}: leaks a secret: {text}",
                p.name()
            );
        }
    }
}

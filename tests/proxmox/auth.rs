//! Logging in (API token, ticket with CSRF) and trusting the server (fingerprint
//! pinning, CA file).

use super::*;

#[tokio::test]
async fn ticket_auth_sends_csrf_on_writes_only_and_logs_in_again() {
    let (s, _) = sim().await;
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("pve.yaml");
    s.write_password_credentials_file(&path).expect("write");
    let creds = ProxmoxCredentials::from_file(&path).expect("load");
    let p = provider_with(creds.clone(), &[("workers", "template: k3s-shared\n")]);
    let a = p
        .create_server(&req("prod-workers-aaaaa", "workers", ""))
        .await
        .expect("create");
    p.delete_server("prod", &a.id).await.expect("delete");
    assert_clean(&s);
    assert_eq!(s.tickets_issued(), 1);
    let calls = s.calls();
    assert_eq!(calls[0].path, "/access/ticket");
    assert_eq!(calls[0].auth, SimAuth::None);
    for c in &calls[1..] {
        match &c.auth {
            SimAuth::Ticket { csrf } if c.method == "GET" => assert!(csrf.is_none(), "{c:?}"),
            SimAuth::Ticket { csrf } => assert!(csrf.is_some(), "write without CSRF token: {c:?}"),
            other => panic!("not ticket auth: {other:?}"),
        }
        assert!(c.status < 400, "{c:?}");
    }
    // An expired ticket: 401, one fresh login, the call goes through.
    s.expire_tickets();
    p.list_servers("prod")
        .await
        .expect("list after ticket expiry");
    assert_eq!(s.tickets_issued(), 2);
    // Renewal before expiry.
    let renewing = ProxmoxProvider::with_options(
        creds,
        BTreeMap::new(),
        ProviderOptions {
            ticket_renewal: Duration::from_millis(50),
            ..fast()
        },
    )
    .expect("provider");
    renewing.list_servers("prod").await.expect("list");
    tokio::time::sleep(Duration::from_millis(100)).await;
    renewing.list_servers("prod").await.expect("list");
    assert_eq!(s.tickets_issued(), 4);
    // Wrong password: an authentication error.
    let bad = ProxmoxCredentials::from_yaml_str(&format!(
        "url: {}\nusername: nodewright@pve\npassword: wrong\n",
        s.url()
    ))
    .expect("creds");
    let e = provider_with(bad, &[])
        .list_servers("prod")
        .await
        .expect_err("refused");
    assert!(matches!(e, CloudError::Auth { .. }), "{e}");
}

struct Pki {
    ca_pem: String,
    leaf_pem: String,
    leaf_der: Vec<u8>,
    key_pem: String,
}

fn pki() -> Pki {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().expect("key");
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "Proxmox Virtual Environment (sim)");
    let ca = ca_params.self_signed(&ca_key).expect("ca");
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate().expect("key");
    let mut params = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
        .expect("params");
    params
        .distinguished_name
        .push(DnType::CommonName, "pve1.sim");
    let leaf = params.signed_by(&key, &issuer).expect("leaf");
    Pki {
        ca_pem: ca.pem(),
        leaf_pem: leaf.pem(),
        leaf_der: leaf.der().to_vec(),
        key_pem: key.serialize_pem(),
    }
}

fn fingerprint(der: &[u8]) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, der);
    d.as_ref()
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect::<Vec<_>>()
        .join(":")
}

#[tokio::test]
async fn tls_fingerprint_pinning_and_ca_file() {
    let pki = pki();
    let s = sim_with(SimProxmoxOptions {
        tls: Some(SimTls {
            cert_chain_pem: pki.leaf_pem.clone(),
            key_pem: pki.key_pem.clone(),
        }),
        ..SimProxmoxOptions::default()
    })
    .await;
    assert!(s.url().starts_with("https://127.0.0.1:"));
    let o = s.options();
    let base = format!(
        "url: {}\ntokenId: {}\ntokenSecret: {}\n",
        s.url(),
        o.token_id,
        o.token_secret
    );
    let with = |extra: &str| {
        let creds = ProxmoxCredentials::from_yaml_str(&format!("{base}{extra}")).expect("creds");
        provider_with(creds, &[])
    };
    // Verification is on by default: the self-signed chain is refused.
    let e = with("").list_servers("prod").await.expect_err("untrusted");
    assert!(matches!(e, CloudError::Transport { .. }), "{e}");
    // Pinned fingerprint of the server certificate.
    with(&format!(
        "fingerprint: \"{}\"\n",
        fingerprint(&pki.leaf_der)
    ))
    .list_servers("prod")
    .await
    .expect("pinned fingerprint accepted");
    // A different fingerprint is refused.
    let e = with(&format!(
        "fingerprint: \"{}\"\n",
        fingerprint(b"another certificate")
    ))
    .list_servers("prod")
    .await
    .expect_err("wrong pin");
    assert!(
        format!("{e}").contains("fingerprint") || matches!(e, CloudError::Transport { .. }),
        "{e}"
    );
    // The CA file.
    let dir = tempfile::tempdir().expect("tmp");
    let ca = dir.path().join("pve-root-ca.pem");
    std::fs::write(&ca, &pki.ca_pem).expect("write");
    with(&format!("caFile: {}\n", ca.display()))
        .list_servers("prod")
        .await
        .expect("CA file trusted");
    // Explicit opt-out.
    with("insecureSkipTlsVerify: true\n")
        .list_servers("prod")
        .await
        .expect("insecure accepted");
    assert_clean(&s);
}

//! HTTPS for the simulated API server, as a real one always serves: a fresh cluster CA
//! (`kubernetes`, as kubeadm names it) signs the serving certificate for 127.0.0.1 and
//! localhost, and the kubeconfig carries the CA. kubectl (client-go) sends its bearer
//! token only over HTTPS, so this is what makes a token-checking server usable by it.

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

use crate::proxmox::SimTls;

/// The cluster CA (PEM, for kubeconfigs) and the server's certificate and key.
#[derive(Clone)]
pub struct ClusterTls {
    pub ca_pem: String,
    pub server: SimTls,
}

impl ClusterTls {
    pub fn generate() -> std::io::Result<ClusterTls> {
        let err = std::io::Error::other;
        let ca_key = KeyPair::generate().map_err(err)?;
        let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(err)?;
        ca.distinguished_name.push(DnType::CommonName, "kubernetes");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca.self_signed(&ca_key).map_err(err)?;
        let issuer = Issuer::new(ca, &ca_key);

        let key = KeyPair::generate().map_err(err)?;
        let mut leaf = CertificateParams::new(vec![
            "127.0.0.1".to_string(),
            "localhost".to_string(),
            "kubernetes".to_string(),
            "kubernetes.default.svc".to_string(),
        ])
        .map_err(err)?;
        leaf.distinguished_name
            .push(DnType::CommonName, "kube-apiserver");
        leaf.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let cert = leaf.signed_by(&key, &issuer).map_err(err)?;
        Ok(ClusterTls {
            ca_pem: ca_cert.pem(),
            server: SimTls {
                cert_chain_pem: cert.pem(),
                key_pem: key.serialize_pem(),
            },
        })
    }
}

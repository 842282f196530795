//! kubeadm bootstrap tokens nodewright mints, one per VM it makes (`userData.bootstrapToken`),
//! as Cluster API's kubeadm bootstrap does: a `bootstrap.kubernetes.io/token` Secret in
//! kube-system, good for `provisionTimeout`, in the groups of kubeadm's default node token.
//! Its id is derived from the cluster and the VM's name, so the token of a VM is found by
//! the name alone and deleted once its node joined (or its VM is deleted) without the
//! right to list kube-system's Secrets; one whose VM vanished otherwise simply expires.
//! The template also gets the API endpoint and the CA's public-key hash that
//! `kube-public/cluster-info` publishes, what `kubeadm join` discovery checks.

use base64::Engine;
use ring::rand::SecureRandom;

/// The groups a token of `kubeadm token create` carries, so the RBAC of a kubeadm
/// cluster (node bootstrap, CSR auto-approval) applies to ours.
pub const NODE_TOKEN_GROUPS: &str = "system:bootstrappers:kubeadm:default-node-token";

const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";

/// The token id of VM `node` of `cluster`: 6 of `[a-z0-9]`, from a SHA-256 of both.
pub fn token_id(cluster: &str, node: &str) -> String {
    let d = ring::digest::digest(
        &ring::digest::SHA256,
        format!("nodewright bootstrap token\n{cluster}\n{node}").as_bytes(),
    );
    d.as_ref()
        .iter()
        .take(6)
        .map(|b| ALPHABET[usize::from(*b) % ALPHABET.len()] as char)
        .collect()
}

/// The Secret holding the token of id `id`.
pub fn secret_name(id: &str) -> String {
    format!("bootstrap-token-{id}")
}

/// A fresh token secret: 16 of `[a-z0-9]` from the system's random source.
pub fn token_secret() -> Result<String, String> {
    let rng = ring::rand::SystemRandom::new();
    let mut out = String::new();
    while out.len() < 16 {
        let mut b = [0u8; 32];
        rng.fill(&mut b)
            .map_err(|_| "the system random source failed".to_string())?;
        // 252 = 7 × 36: bytes above it would favour the first letters.
        out.extend(
            b.iter()
                .filter(|x| **x < 252)
                .map(|x| ALPHABET[usize::from(*x) % ALPHABET.len()] as char),
        );
    }
    out.truncate(16);
    Ok(out)
}

/// The API endpoint (`host:port`) and CA public-key hash (`sha256:<hex>`) in the
/// kubeconfig of `kube-public/cluster-info`.
pub fn discovery(kubeconfig: &str) -> Result<(String, String), String> {
    let doc: serde_yaml::Value =
        serde_yaml::from_str(kubeconfig).map_err(|e| format!("its kubeconfig is not YAML: {e}"))?;
    let cluster = &doc["clusters"][0]["cluster"];
    let server = cluster["server"]
        .as_str()
        .ok_or("its kubeconfig names no server (clusters[0].cluster.server)")?;
    let endpoint = server
        .split_once("://")
        .map_or(server, |(_, rest)| rest)
        .split('/')
        .next()
        .unwrap_or_default()
        .to_string();
    if endpoint.is_empty() {
        return Err(format!("its server `{server}` has no host"));
    }
    let ca = cluster["certificate-authority-data"]
        .as_str()
        .ok_or("its kubeconfig carries no CA (certificate-authority-data)")?;
    let pem = base64::engine::general_purpose::STANDARD
        .decode(ca.trim())
        .map_err(|_| "its certificate-authority-data is not base64".to_string())?;
    let der = pem_certificate(&pem).ok_or("its CA is no PEM certificate")?;
    let spki = subject_public_key_info(&der).ok_or("its CA certificate cannot be read")?;
    let hash = ring::digest::digest(&ring::digest::SHA256, spki);
    let hex: String = hash.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    Ok((endpoint, format!("sha256:{hex}")))
}

/// The DER of the first `CERTIFICATE` block of `pem`.
fn pem_certificate(pem: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(pem).ok()?;
    let body = text
        .split("-----BEGIN CERTIFICATE-----")
        .nth(1)?
        .split("-----END CERTIFICATE-----")
        .next()?;
    let b64: String = body.chars().filter(|c| !c.is_whitespace()).collect();
    base64::engine::general_purpose::STANDARD.decode(b64).ok()
}

/// One DER element at the start of `der`: (tag, content, whole element, rest).
fn element(der: &[u8]) -> Option<(u8, &[u8], &[u8], &[u8])> {
    let (&tag, rest) = der.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
        (len, &rest[n..])
    };
    if rest.len() < len {
        return None;
    }
    let header = der.len() - rest.len();
    Some((tag, &rest[..len], &der[..header + len], &rest[len..]))
}

/// The `subjectPublicKeyInfo` element of an X.509 certificate (RFC 5280, 4.1): what
/// kubeadm's `--discovery-token-ca-cert-hash` is the SHA-256 of.
fn subject_public_key_info(cert: &[u8]) -> Option<&[u8]> {
    const SEQUENCE: u8 = 0x30;
    let (tag, certificate, _, _) = element(cert)?;
    if tag != SEQUENCE {
        return None;
    }
    let (tag, tbs, _, _) = element(certificate)?;
    if tag != SEQUENCE {
        return None;
    }
    let mut rest = tbs;
    // [0] version is optional; then serial, signature, issuer, validity, subject.
    let (tag, _, _, after) = element(rest)?;
    if tag == 0xa0 {
        rest = after;
    }
    for _ in 0..5 {
        rest = element(rest)?.3;
    }
    let (tag, _, spki, _) = element(rest)?;
    (tag == SEQUENCE).then_some(spki)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_id_is_six_of_the_alphabet_and_the_same_for_the_same_vm() {
        let a = token_id("prod", "prod-workers-abcde");
        assert_eq!(a.len(), 6);
        assert!(a.bytes().all(|b| ALPHABET.contains(&b)));
        assert_eq!(a, token_id("prod", "prod-workers-abcde"));
        assert_ne!(a, token_id("prod", "prod-workers-abcdf"));
        let s = token_secret().expect("random");
        assert_eq!(s.len(), 16);
        assert!(s.bytes().all(|b| ALPHABET.contains(&b)));
        assert_ne!(s, token_secret().expect("random"));
    }

    #[test]
    fn discovery_refuses_what_it_cannot_read_with_the_reason() {
        assert!(discovery("clusters: []").is_err());
        let no_ca = "clusters:\n- cluster:\n    server: https://10.0.0.1:6443\n";
        assert!(discovery(no_ca)
            .unwrap_err()
            .contains("certificate-authority-data"));
        let bad = "clusters:\n- cluster:\n    server: https://10.0.0.1:6443\n    certificate-authority-data: bm90IGEgY2VydA==\n";
        assert!(discovery(bad).unwrap_err().contains("PEM"));
    }
}

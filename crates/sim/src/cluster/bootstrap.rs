//! kubeadm's join, as far as the API server takes part in it: the `kube-public/cluster-info`
//! ConfigMap a kubeadm cluster publishes (its API endpoint and CA), and bootstrap tokens
//! (`bootstrap.kubernetes.io/token` Secrets `bootstrap-token-<id>` in kube-system). A
//! booting VM whose user data runs `kubeadm join` registers only with a token the server
//! holds, meant for authentication and signing, and not expired at its boot; otherwise
//! kubeadm fails its discovery and no kubelet ever starts, as on a real cluster. The
//! server's clock may be moved ahead ([`super::SimCluster::advance_clock`]) so a test sees
//! a token made by `kubeadm token create` (24 h) expire.

use base64::Engine;
use k8s_openapi::jiff::Timestamp;
use serde_json::{json, Value};

use super::meta;
use super::resources::SECRETS;
use super::store::Txn;
use super::userdata;

/// The ConfigMap `cluster-info` kubeadm writes into kube-public: a kubeconfig with the
/// API server's address and the cluster CA, and no user.
pub fn cluster_info(server: &str, ca_pem: &str) -> Value {
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    let kubeconfig = format!(
        "apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: {ca}\n    server: {server}\n  name: \"\"\ncontexts: null\ncurrent-context: \"\"\nkind: Config\npreferences: {{}}\nusers: null\n"
    );
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cluster-info", "namespace": "kube-public"},
        "data": {"kubeconfig": kubeconfig},
    })
}

/// The bootstrap token in `text`: the value of `--token` (`--token=x` or `--token x`) or
/// of a `token:` key (a kubeadm JoinConfiguration), quotes taken off.
fn token_in(text: &str) -> Option<String> {
    let clean = |s: &str| s.trim().trim_matches(|c| c == '"' || c == '\'').to_string();
    let words: Vec<&str> = text.split_whitespace().collect();
    for (i, w) in words.iter().enumerate() {
        if let Some(v) = w.strip_prefix("--token=") {
            return Some(clean(v));
        }
        if *w == "--token" {
            return words.get(i + 1).map(|v| clean(v));
        }
    }
    text.lines().find_map(|l| {
        let l = l.trim().trim_start_matches("- ");
        l.strip_prefix("token:").map(clean)
    })
}

/// Whether `s` is a bootstrap token: `[a-z0-9]{6}.[a-z0-9]{16}`.
fn well_formed(s: &str) -> Option<(&str, &str)> {
    let (id, secret) = s.split_once('.')?;
    let ok = |p: &str, n: usize| {
        p.len() == n
            && p.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    };
    (ok(id, 6) && ok(secret, 16)).then_some((id, secret))
}

fn data(secret: &Value, key: &str) -> Option<String> {
    let v = meta::path_str(secret, &["data", key])?;
    let bytes = base64::engine::general_purpose::STANDARD.decode(v).ok()?;
    String::from_utf8(bytes).ok()
}

/// Why a VM booted with `user_data` at `now` fails its `kubeadm join`, if it runs one:
/// no token, a malformed one, or one the server does not hold, does not allow for
/// authentication and signing, or holds past its expiration.
pub fn join_error(txn: &Txn<'_>, user_data: &str, now: Timestamp) -> Option<String> {
    let texts = userdata::texts(user_data);
    if !texts.iter().any(|t| t.contains("kubeadm join")) {
        return None;
    }
    let Some(token) = texts.iter().find_map(|t| token_in(t)) else {
        return Some("kubeadm join: no bootstrap token given (--token or a JoinConfiguration's discovery.bootstrapToken.token)".into());
    };
    let Some((id, secret)) = well_formed(&token) else {
        return Some("kubeadm join: the token does not match the regular expression ^[a-z0-9]{6}\\.[a-z0-9]{16}$".into());
    };
    let invalid = || {
        Some(format!(
            "kubeadm join: couldn't validate the identity of the API Server: token id \"{id}\" is invalid for this cluster or it has expired"
        ))
    };
    let Some(s) = txn.get(&SECRETS, "kube-system", &format!("bootstrap-token-{id}")) else {
        return invalid();
    };
    let usable = meta::path_str(s, &["type"]) == Some("bootstrap.kubernetes.io/token")
        && data(s, "token-id").as_deref() == Some(id)
        && data(s, "token-secret").as_deref() == Some(secret)
        && data(s, "usage-bootstrap-authentication").as_deref() == Some("true")
        && data(s, "usage-bootstrap-signing").as_deref() == Some("true");
    let expired = match data(s, "expiration") {
        None => false,
        Some(e) => e.parse::<Timestamp>().map_or(true, |t| t <= now),
    };
    if !usable || expired {
        return invalid();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_is_read_from_a_flag_or_a_join_configuration() {
        let t = "abcdef.0123456789abcdef";
        assert_eq!(
            token_in(&format!("kubeadm join x --token {t} --x")),
            Some(t.into())
        );
        assert_eq!(
            token_in(&format!("kubeadm join x --token={t}")),
            Some(t.into())
        );
        let cfg = format!("discovery:\n  bootstrapToken:\n    token: \"{t}\"\n");
        assert_eq!(token_in(&cfg), Some(t.into()));
        assert_eq!(token_in("kubeadm join x"), None);
        assert!(well_formed(t).is_some());
        assert!(well_formed("ABCDEF.0123456789abcdef").is_none());
        assert!(well_formed("abcdef.0123").is_none());
    }
}

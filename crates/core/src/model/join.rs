//! What a kubeadm node joins with: the cluster adapter mints it, the user-data renderer
//! writes it into the node's join configuration.

/// What a kubeadm node joins with when nodewright mints its bootstrap token: the token
/// (`<id>.<secret>`, good for `provisionTimeout`), the API server's `host:port` and the
/// SHA-256 of the cluster CA's public key, as `kube-public/cluster-info` publishes them.
#[derive(Clone, PartialEq, Eq)]
pub struct JoinCredentials {
    pub token: String,
    pub api_server_endpoint: String,
    pub ca_cert_hash: String,
}

/// The token is a credential: never printed.
impl std::fmt::Debug for JoinCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JoinCredentials")
            .field("token", &"<redacted>")
            .field("api_server_endpoint", &self.api_server_endpoint)
            .field("ca_cert_hash", &self.ca_cert_hash)
            .finish()
    }
}

//! Proxmox VE: one template VM cloned per node, ownership in VM tags.
//!
//! - [`credentials`]: the credentials YAML file (API token or user + password, TLS trust).
//! - [`client`]: HTTP client, TLS (CA file, certificate fingerprint pinning), token and
//!   ticket authentication, `{"data": ..}` unwrapping and error mapping.
//! - [`tasks`]: UPIDs and awaiting tasks with a deadline.
//! - [`tags`]: ownership encoded into Proxmox's restricted tag alphabet.
//! - [`ippool`]: the static IPv4 pool, derived from the live VMs every time.
//! - [`allocate`]: listings, template disks, VM id allocation, clone.
//! - [`hosts`]: host capacity, maintenance, the cluster name and per-host template copies.
//! - [`halfmade`]: a clone whose creation stopped before its config call.
//! - [`agent`]: running the join script through the QEMU guest agent.
//! - [`seed`]: the NoCloud seed ISO that carries the user data of a `join: cloudInit` VM.
//! - [`settings`]: the `proxmox:` block of a node group (serde, validation, shape, hash).
//! - [`check`]: what `nodewright check` verifies.
//! - [`provider`]: [`ProxmoxProvider`], the [`crate::cloud::CloudProvider`].

mod adopt;
pub mod agent;
pub mod allocate;
pub mod check;
pub mod client;
pub mod credentials;
pub mod halfmade;
pub mod hosts;
pub mod ippool;
pub mod provider;
pub mod seed;
pub mod settings;
pub mod tags;
pub mod tasks;
mod tls;

pub use credentials::{ProxmoxAuth, ProxmoxCredentials, TlsTrust};
pub use ippool::StaticPool;
pub use provider::{JoinState, ProviderOptions, ProxmoxProvider};
pub use settings::{
    validate_settings, CloneMode, HostReserve, IpConfig, JoinMode, ProxmoxSettings, TemplateRef,
};
pub use tasks::TaskDeadline;

/// Provider name used in errors, logs and [`crate::model::Server::provider`].
pub const PROVIDER: &str = "proxmox";

pub(crate) use crate::cloud::http::seg;

/// Encodes a value the way Proxmox's `urlencoded` format wants it (e.g. `sshkeys`):
/// every byte but ASCII letters, digits and `-_.~` as `%XX` (spaces as `%20`, never `+`).
pub fn pve_urlencode(s: &str) -> String {
    seg(s)
}

pub(crate) fn other(message: impl Into<String>) -> crate::cloud::CloudError {
    crate::cloud::CloudError::Other {
        provider: PROVIDER.into(),
        message: message.into(),
    }
}

/// Builds the provider for `groups` from the credentials file at `path` (the registry's
/// `build`): clones get the config's task-aware deadline; `read_only` for a process that
/// only reads.
pub(crate) fn build(
    path: &std::path::Path,
    groups: std::collections::BTreeMap<String, ProxmoxSettings>,
    options: &crate::cloud::BuildOptions,
) -> Result<std::sync::Arc<dyn crate::cloud::CloudProvider>, crate::cloud::BuildError> {
    let creds = ProxmoxCredentials::from_file(path)
        .map_err(|e| crate::cloud::BuildError::Credentials(e.to_string()))?;
    Ok(std::sync::Arc::new(ProxmoxProvider::with_options(
        creds,
        groups,
        ProviderOptions {
            clone_deadline: Some(TaskDeadline {
                nominal: options.provision_timeout,
                max: options.provision_deadline_max,
                stall: options.provision_stall,
            }),
            read_only: options.read_only,
            identity: options.identity.clone(),
            ..ProviderOptions::default()
        },
    )?))
}

/// Reads the credentials file without the network (the registry's `read_credentials`).
pub(crate) fn read_credentials(path: &std::path::Path) -> Result<(), String> {
    ProxmoxCredentials::from_file(path)
        .map(drop)
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_parse() {
        let s: ProxmoxSettings = crate::yaml::from_str(
            "template: 9000\nclone: linked\nmemory: 4 GiB\nsshKeys: [\"ssh-ed25519 AAAA x@y\"]\nipConfig:\n  static:\n    cidr: 10.0.0.0/24\n    gateway: 10.0.0.1\n    nameservers: [10.0.0.2]\njoin: guestAgent\n",
        )
        .expect("parses");
        assert_eq!(s.template, TemplateRef::Id(9000));
        assert_eq!(s.clone, CloneMode::Linked);
        assert!(matches!(s.ip_config, IpConfig::Static(_)));
        assert_eq!(s.join, JoinMode::GuestAgent);
        let s: ProxmoxSettings =
            crate::yaml::from_str("template: ubuntu-tmpl\nipConfig: dhcp\n").expect("parses");
        assert_eq!(s.template, TemplateRef::Name("ubuntu-tmpl".into()));
        assert_eq!(s.ip_config, IpConfig::Dhcp);
        let e = crate::yaml::from_str::<ProxmoxSettings>("template: 1\nbogus: 1\n")
            .expect_err("unknown key");
        assert!(e.to_string().contains("bogus"), "{e}");
    }

    #[test]
    fn urlencoding_is_strict() {
        assert_eq!(
            pve_urlencode("ssh-ed25519 AAAA+/= me@host\nssh-rsa B"),
            "ssh-ed25519%20AAAA%2B%2F%3D%20me%40host%0Assh-rsa%20B"
        );
    }
}

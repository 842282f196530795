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
pub mod tags;
pub mod tasks;
mod tls;

use serde::Deserialize;

pub use credentials::{ProxmoxAuth, ProxmoxCredentials, TlsTrust};
pub use ippool::StaticPool;
pub use provider::{JoinState, ProviderOptions, ProxmoxProvider};
pub use tasks::TaskDeadline;

/// Provider name used in errors, logs and [`crate::model::Server::provider`].
pub const PROVIDER: &str = "proxmox";

/// The template VM to clone: its VM id, its name, or `{tag: ...}`. A name or tag may match
/// one copy per host (templates on local storage); the copy on the chosen host is cloned.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum TemplateRef {
    Id(u32),
    Name(String),
    Tag { tag: String },
}

impl std::fmt::Display for TemplateRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TemplateRef::Id(id) => write!(f, "{id}"),
            TemplateRef::Name(n) => f.write_str(n),
            TemplateRef::Tag { tag } => write!(f, "tag {tag}"),
        }
    }
}

/// Full clone (independent disks) or linked clone (copy-on-write on the template's disks).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum CloneMode {
    #[default]
    Full,
    Linked,
}

/// How a new VM gets its address: `dhcp`, or `{static: {...}}` from a pool.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum IpConfig {
    #[default]
    Dhcp,
    Static(StaticPool),
}

impl<'de> Deserialize<'de> for IpConfig {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = IpConfig;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("`dhcp` or `{static: {cidr, gateway, ...}}`")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<IpConfig, E> {
                match v {
                    "dhcp" => Ok(IpConfig::Dhcp),
                    other => Err(E::custom(format!(
                        "unknown ipConfig '{other}': expected `dhcp` or `{{static: {{...}}}}`"
                    ))),
                }
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut m: A,
            ) -> Result<IpConfig, A::Error> {
                let Some(key) = m.next_key::<String>()? else {
                    return Err(serde::de::Error::custom(
                        "empty ipConfig: expected `dhcp` or `static`",
                    ));
                };
                let out = match key.as_str() {
                    "static" => IpConfig::Static(m.next_value()?),
                    "dhcp" => {
                        m.next_value::<serde::de::IgnoredAny>()?;
                        IpConfig::Dhcp
                    }
                    other => {
                        return Err(serde::de::Error::custom(format!(
                            "unknown ipConfig '{other}': expected `dhcp` or `static`"
                        )))
                    }
                };
                if m.next_key::<String>()?.is_some() {
                    return Err(serde::de::Error::custom(
                        "ipConfig takes exactly one of `dhcp` or `static`",
                    ));
                }
                Ok(out)
            }
        }
        d.deserialize_any(V)
    }
}

/// How a new VM joins the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum JoinMode {
    /// cloud-init in the guest runs the group's rendered user data, delivered as a NoCloud
    /// seed ISO (see [`seed`]); or, with `cicustom` (the group's or the template's), the
    /// user's own snippets, and the rendered user data is not used.
    #[default]
    CloudInit,
    /// nodewright writes the group's rendered user data (a script) into the VM and runs
    /// it through the QEMU guest agent once the agent answers.
    GuestAgent,
}

/// CPU and memory each host keeps for itself, before any overcommit.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HostReserve {
    /// Cores (`2`, `500m`).
    #[serde(default)]
    pub cpu: Option<crate::model::Quantity>,
    #[serde(default)]
    pub memory: Option<crate::model::Bytes>,
}

/// Per-node-group Proxmox settings (the `proxmox` key of a node group).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProxmoxSettings {
    /// Template VM, by VM id or name.
    pub template: TemplateRef,
    /// Hosts (Proxmox nodes) VMs may be placed on; empty means every online host.
    #[serde(default)]
    pub nodes: Vec<String>,
    #[serde(default)]
    pub clone: CloneMode,
    /// Target storage of a full clone (default: the template's storage).
    #[serde(default)]
    pub storage: Option<String>,
    #[serde(default)]
    pub cores: Option<u32>,
    /// RAM of each VM (default: the template's).
    #[serde(default)]
    pub memory: Option<crate::model::Bytes>,
    /// Resource pool the new VMs are added to.
    #[serde(default)]
    pub pool: Option<String>,
    /// cloud-init user (`ciuser`).
    #[serde(default)]
    pub ciuser: Option<String>,
    /// SSH public keys for `ciuser` (`sshkeys`).
    #[serde(default)]
    pub ssh_keys: Vec<String>,
    /// Bridge of `net0` (default: the template's).
    #[serde(default)]
    pub bridge: Option<String>,
    #[serde(default)]
    pub ip_config: IpConfig,
    #[serde(default)]
    pub join: JoinMode,
    /// Storage the seed ISO is uploaded to (`join: cloudInit`); default: the first storage
    /// on the VM's host whose content includes `iso`.
    #[serde(default)]
    pub seed_storage: Option<String>,
    /// Proxmox `cicustom` (`user=local:snippets/join.yaml`): the VM's cloud-init reads these
    /// snippets, which the user keeps on a snippets storage; no seed is built.
    #[serde(default)]
    pub cicustom: Option<String>,
    /// Where the join script is written in the guest (`join: guestAgent`).
    #[serde(default = "default_join_script_path")]
    pub join_script_path: String,
    /// How far configured vCPUs and memory may exceed each host's (default cpu 4, memory 1).
    #[serde(default)]
    pub overcommit: crate::model::Overcommit,
    /// Kept free on every host.
    #[serde(default)]
    pub reserve: HostReserve,
    /// At most this many VMs of the group per host (default: no limit, balanced).
    #[serde(default)]
    pub max_per_host: Option<u32>,
}

/// Problems with `s` as (field under `proxmox`, what is wrong and expected).
pub fn validate_settings(s: &ProxmoxSettings) -> Vec<(String, String)> {
    let mut p = Vec::new();
    for (field, v) in [
        ("overcommit.cpu", s.overcommit.cpu),
        ("overcommit.memory", s.overcommit.memory),
    ] {
        if !(v.is_finite() && v > 0.0 && v <= 100.0) {
            p.push((field.to_string(), format!("got {v}; expected a ratio above 0 and at most 100, e.g. 4.0 for CPU, 1.0 for memory")));
        }
    }
    if s.max_per_host == Some(0) {
        p.push((
            "maxPerHost".into(),
            "got 0; expected at least 1, or no maxPerHost for no limit".into(),
        ));
    }
    if s.cores == Some(0) {
        p.push(("cores".into(), "got 0; expected at least 1".into()));
    }
    if s.memory.is_some_and(|m| m.as_u64() < 16 << 20) {
        p.push((
            "memory".into(),
            "below 16 MiB; expected at least 16 MiB".into(),
        ));
    }
    if let Some(c) = &s.cicustom {
        let bad = c.split(',').find(|part| {
            let (k, v) = part.split_once('=').unwrap_or((part, ""));
            !matches!(k.trim(), "meta" | "network" | "user" | "vendor") || !v.contains(':')
        });
        if let Some(bad) = bad {
            p.push((
                "cicustom".into(),
                format!("`{bad}` is not `<user|vendor|network|meta>=<storage>:snippets/<file>`, e.g. `user=local:snippets/join.yaml`"),
            ));
        }
    }
    if s.seed_storage.is_some() && (s.cicustom.is_some() || s.join == JoinMode::GuestAgent) {
        p.push((
            "seedStorage".into(),
            "a seed is only built for `join: cloudInit` without `cicustom`; remove seedStorage"
                .into(),
        ));
    }
    if let TemplateRef::Tag { tag } = &s.template {
        if tag.is_empty()
            || !tag
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '+'))
        {
            p.push((
                "template.tag".into(),
                format!("`{tag}` is not a Proxmox tag; expected letters, digits and `-_.+`"),
            ));
        }
    }
    p
}

fn default_join_script_path() -> String {
    "/var/tmp/nodewright-join.sh".into()
}

/// Percent-encodes one URL path segment.
pub(crate) fn seg(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

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

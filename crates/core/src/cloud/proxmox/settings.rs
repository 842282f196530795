//! The `proxmox:` block of a node group: its serde shape, its validation, the shape of a
//! VM it implies and what of it goes into the settings hash (see
//! [`crate::cloud::registry`]). Nothing here talks to Proxmox.

use serde::Deserialize;
use serde_json::Value;

use super::StaticPool;
use crate::cloud::registry::{GroupContext, Settings};
use crate::model::GroupShape;

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
    /// seed ISO (see [`super::seed`]); or, with `cicustom` (the group's or the template's), the
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
    pub overcommit: crate::model::hosts::Overcommit,
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

impl Settings for ProxmoxSettings {
    fn validate(&self, group: &GroupContext<'_>) -> Vec<(String, String)> {
        let mut p: Vec<(String, String)> = validate_settings(self)
            .into_iter()
            .map(|(field, problem)| (format!("proxmox.{field}"), problem))
            .collect();
        if let IpConfig::Static(pool) = &self.ip_config {
            let path = "proxmox.ipConfig.static".to_string();
            match pool.validate() {
                Err(why) => p.push((path, why)),
                Ok(valid) if valid.capacity() < u64::from(group.max_size) => p.push((
                    path,
                    format!(
                        "holds {} addresses ({} to {}, without the gateway), fewer than maxSize {}: VMs past the pool would fail to be created; widen first/last or the cidr, or lower maxSize",
                        valid.capacity(),
                        std::net::Ipv4Addr::from(valid.first),
                        std::net::Ipv4Addr::from(valid.last),
                        group.max_size
                    ),
                )),
                Ok(_) => {}
            }
        }
        p
    }

    fn hash_fields(&self) -> Vec<(&'static str, Value)> {
        let mut m = vec![("proxmox.template", Value::from(self.template.to_string()))];
        if self.clone == CloneMode::Linked {
            m.push(("proxmox.clone", Value::from("linked")));
        }
        if let Some(s) = &self.storage {
            m.push(("proxmox.storage", Value::from(s.clone())));
        }
        if let Some(c) = self.cores {
            m.push(("proxmox.cores", Value::from(c)));
        }
        if let Some(b) = self.memory {
            m.push(("proxmox.memory", Value::from(b.as_u64())));
        }
        if let Some(u) = &self.ciuser {
            m.push(("proxmox.ciuser", Value::from(u.clone())));
        }
        if !self.ssh_keys.is_empty() {
            m.push(("proxmox.sshKeys", Value::from(self.ssh_keys.clone())));
        }
        if let Some(b) = &self.bridge {
            m.push(("proxmox.bridge", Value::from(b.clone())));
        }
        if let IpConfig::Static(p) = &self.ip_config {
            // The subnet, gateway and DNS a VM is configured with; the range addresses are
            // handed out from is assignment, not make.
            m.push(("proxmox.ipConfig.static.cidr", Value::from(p.cidr.clone())));
            m.push((
                "proxmox.ipConfig.static.gateway",
                Value::from(p.gateway.to_string()),
            ));
            let dns: Vec<String> = p.nameservers.iter().map(|a| a.to_string()).collect();
            if !dns.is_empty() {
                m.push(("proxmox.ipConfig.static.nameservers", Value::from(dns)));
            }
        }
        if self.join == JoinMode::GuestAgent {
            m.push(("proxmox.join", Value::from("guestAgent")));
            m.push((
                "proxmox.joinScriptPath",
                Value::from(self.join_script_path.clone()),
            ));
        }
        m
    }

    fn offline_shape(&self) -> GroupShape {
        let mut shape = GroupShape {
            cpu_milli: self.cores.map(|c| u64::from(c) * 1000),
            memory: self.memory.map(|m| m.as_u64()),
            instance_type: Some(self.template.to_string()),
            ..GroupShape::default()
        };
        if let [one] = self.nodes.as_slice() {
            shape.zone = Some(one.clone());
        }
        shape
    }

    fn unknown_shape(&self) -> String {
        "proxmox.cores / proxmox.memory are not set (the template's are not known offline)".into()
    }

    fn runs_user_data_as_script(&self) -> Option<&'static str> {
        (self.join == JoinMode::GuestAgent)
            .then_some("`proxmox.join: guestAgent` writes it into the VM and runs it as a script")
    }
}

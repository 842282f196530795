//! The `kamatera:` block of a node group: its serde shape, its validation (against the
//! tag limits of [`super`]), the shape of a server it implies and what of it goes into the
//! settings hash (see [`crate::cloud::registry`]). Nothing here talks to Kamatera.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Deserializer};
use serde_json::Value;

use super::{
    cluster_tag, group_tag, is_tag_char, is_time_tag_suffix, DEFAULT_TAG_PREFIX, MAX_DISKS,
    MAX_NETWORKS, MAX_TAG_LEN, TIME_TAG_DIGITS,
};
use crate::cloud::registry::{GroupContext, ProviderSettings, Settings};
use crate::model::{GroupShape, SizeShape};

/// Hourly or monthly billing (`billingcycle`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BillingCycle {
    #[default]
    Hourly,
    Monthly,
}

impl BillingCycle {
    pub fn as_str(self) -> &'static str {
        match self {
            BillingCycle::Hourly => "hourly",
            BillingCycle::Monthly => "monthly",
        }
    }
}

/// Where the rendered user data goes in the create request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UserDataField {
    /// `script-file`: run as the server's initialization script (bash on Linux).
    #[default]
    Script,
    /// `userdata-file`: handed to cloud-init on images that run it.
    Userdata,
}

impl UserDataField {
    /// The create request field carrying the user data.
    pub fn request_field(self) -> &'static str {
        match self {
            UserDataField::Script => "script-file",
            UserDataField::Userdata => "userdata-file",
        }
    }
}

/// RAM of a server in whole MiB (Kamatera's unit), written as a size like every other
/// byte size in config (`8 GiB`, `8192 MiB`; see [`crate::model::Bytes`]): a bare
/// number is refused, not read as MB. 0: not written (a group of `sizes`).
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct RamMb(pub u64);

impl RamMb {
    pub fn bytes(self) -> u64 {
        self.0.saturating_mul(1024 * 1024)
    }
}

impl fmt::Debug for RamMb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} MB", self.0)
    }
}

/// Parses a size (`4 GiB`, `4096 MiB`) into whole MiB.
pub fn parse_ram(text: &str) -> Result<RamMb, String> {
    let bytes = crate::model::Bytes::parse(text)?.as_u64();
    if !bytes.is_multiple_of(1024 * 1024) {
        return Err(format!(
            "`{}` is not a whole number of MiB; Kamatera sizes RAM in MiB (e.g. `4 GiB` or `4096 MiB`)",
            text.trim()
        ));
    }
    Ok(RamMb(bytes / (1024 * 1024)))
}

impl<'de> Deserialize<'de> for RamMb {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let bytes = crate::model::Bytes::deserialize(d)?;
        parse_ram(&format!("{} B", bytes.as_u64())).map_err(|_| {
            serde::de::Error::custom(format!(
                "{bytes} is not a whole number of MiB; Kamatera sizes RAM in MiB (e.g. `4 GiB` or `4096 MiB`)"
            ))
        })
    }
}

fn default_disks() -> Vec<String> {
    vec!["size=20".into()]
}
fn default_networks() -> Vec<String> {
    vec!["name=wan,ip=auto".into()]
}
fn default_tag_prefix() -> String {
    DEFAULT_TAG_PREFIX.into()
}
fn default_command_timeout() -> Duration {
    Duration::from_secs(30 * 60)
}

/// Per-node-group Kamatera settings (the `kamatera` key of a node group).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KamateraSettings {
    /// Datacenter id, e.g. `EU`, `US-NY2`, `IL`.
    pub datacenter: String,
    /// Image name or id (`EU:6000C2...`), e.g. `ubuntu_server_24.04_64-bit`.
    pub image: String,
    /// CPU count and type, e.g. `2B` (types A, B, T, D); empty with `sizes`.
    #[serde(default)]
    pub cpu: String,
    /// RAM: a size such as `4 GiB` or `4096 MiB` (whole MiB); unset with `sizes`.
    #[serde(default)]
    pub ram: RamMb,
    /// Several sizes instead of `cpu`/`ram`: each scale-up takes the one that wastes least
    /// for its pods, the first where nothing chose (`minSize`, warm pools).
    #[serde(default)]
    pub sizes: Vec<KamateraSize>,
    /// Disks as cloudcli `--disk` values, e.g. `size=50`; the first is the boot disk.
    #[serde(default = "default_disks")]
    pub disks: Vec<String>,
    /// Networks as cloudcli `--network` values, e.g. `name=wan,ip=auto`.
    #[serde(default = "default_networks")]
    pub networks: Vec<String>,
    #[serde(default)]
    pub billing_cycle: BillingCycle,
    /// Monthly traffic package (monthly billing only), e.g. `t5000`.
    #[serde(default)]
    pub monthly_package: Option<String>,
    #[serde(default)]
    pub daily_backup: bool,
    #[serde(default)]
    pub managed: bool,
    /// Public SSH key (the key text, e.g. `ssh-ed25519 AAAA... me@host`) for root.
    #[serde(default)]
    pub ssh_key: Option<String>,
    /// Where the rendered user data goes: `script` (default) or `userdata`.
    #[serde(default)]
    pub user_data_field: UserDataField,
    /// Prefix of the ownership tags `<tagPrefix>-<cluster>` and `<tagPrefix>-<group>`.
    #[serde(default = "default_tag_prefix")]
    pub tag_prefix: String,
    /// Extra tags set on every server of the group.
    #[serde(default)]
    pub extra_tags: Vec<String>,
    /// Deadline for each asynchronous command (create, terminate, power) to finish.
    #[serde(default = "default_command_timeout", with = "humantime_serde")]
    pub command_timeout: Duration,
}

impl KamateraSettings {
    /// Number of CPUs in `cpu` (`2B` → 2), when it has the documented form.
    pub fn cpu_count(&self) -> Option<u32> {
        parse_cpu(&self.cpu).map(|(n, _)| n)
    }

    /// Every size, the default first: `sizes`, or the one of `cpu`/`ram`.
    pub fn size_list(&self) -> Vec<KamateraSize> {
        if self.sizes.is_empty() {
            vec![KamateraSize {
                cpu: self.cpu.clone(),
                ram: self.ram,
            }]
        } else {
            self.sizes.clone()
        }
    }

    /// The size named `name` (see [`KamateraSize::name`]), the default for `None`; `None`
    /// when no size has that name.
    pub fn size_named(&self, name: Option<&str>) -> Option<KamateraSize> {
        let all = self.size_list();
        match name {
            None => all.into_iter().next(),
            Some(n) => all.into_iter().find(|s| s.name() == n),
        }
    }
}

/// One size of a group of several (`sizes: [{cpu: 2B, ram: 4 GiB}, ...]`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KamateraSize {
    pub cpu: String,
    pub ram: RamMb,
}

impl KamateraSize {
    /// `2B-4096`: its CPU and RAM in MiB, as the node's instance type says it.
    pub fn name(&self) -> String {
        format!("{}-{}", self.cpu, self.ram.0)
    }

    fn shape(&self) -> SizeShape {
        SizeShape {
            name: self.name(),
            cpu_milli: parse_cpu(&self.cpu).map(|(n, _)| u64::from(n) * 1000),
            memory: Some(self.ram.bytes()),
        }
    }
}

/// `2B` → `(2, 'B')`.
pub fn parse_cpu(cpu: &str) -> Option<(u32, char)> {
    let cpu = cpu.trim();
    let kind = cpu.chars().last()?;
    if !kind.is_ascii_alphabetic() {
        return None;
    }
    let digits = &cpu[..cpu.len() - kind.len_utf8()];
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u32 = digits.parse().ok()?;
    (n > 0).then_some((n, kind.to_ascii_uppercase()))
}

/// Checks a group's Kamatera settings against what the API accepts, with the cluster and
/// group names as they end up in tags. Returns one message per problem (empty: fine); the
/// config layer prefixes them with the field path.
pub fn validate_settings(cluster: &str, group: &str, settings: &KamateraSettings) -> Vec<String> {
    let mut p = Vec::new();
    let prefix = settings.tag_prefix.as_str();
    if prefix.is_empty() {
        p.push("tagPrefix: empty; expected letters, digits, `-` or `_`, e.g. `nodewright`".into());
    } else if !prefix.chars().all(is_tag_char) {
        p.push(format!(
            "tagPrefix: `{prefix}` has characters Kamatera tags do not take; expected letters, digits, `-` or `_`"
        ));
    }
    // The creation-time tag `<prefix>-t` + 10 digits must fit too.
    let time_tag_len = prefix.len() + 2 + TIME_TAG_DIGITS;
    if time_tag_len > MAX_TAG_LEN {
        let max_prefix = MAX_TAG_LEN - 2 - TIME_TAG_DIGITS;
        p.push(format!(
            "tagPrefix: `{prefix}` ({} characters) is too long for the creation-time tag `{prefix}-t1700000000` ({time_tag_len} characters); Kamatera tags take at most {MAX_TAG_LEN}, so kamatera.tagPrefix may have at most {max_prefix} characters (e.g. `nodewright` or `nw`)",
            prefix.len(),
        ));
    }
    let budget = MAX_TAG_LEN.saturating_sub(prefix.len() + 1);
    for (what, name, tag) in [
        ("clusterName", cluster, cluster_tag(prefix, cluster)),
        ("group name", group, group_tag(prefix, group)),
    ] {
        if tag.len() > MAX_TAG_LEN {
            p.push(format!(
                "{what} `{name}` makes the Kamatera tag `{tag}` ({} characters); Kamatera tags take at most {MAX_TAG_LEN}, so with tagPrefix `{prefix}` the {what} may have at most {budget} characters (shorten it or set a shorter kamatera.tagPrefix)",
                tag.len()
            ));
        }
    }
    for (what, name) in [("clusterName", cluster), ("group name", group)] {
        if is_time_tag_suffix(name) {
            p.push(format!(
                "{what} `{name}` looks like nodewright's creation-time tag `{prefix}-t<unix seconds>`; expected a name that is not `t` followed by digits only"
            ));
        }
    }
    if cluster == group {
        p.push(format!(
            "group name `{group}` equals clusterName: the group tag would be the cluster tag `{}`; expected a group name different from the cluster name",
            cluster_tag(prefix, cluster)
        ));
    }
    for (i, tag) in settings.extra_tags.iter().enumerate() {
        if tag.is_empty() || !tag.chars().all(is_tag_char) || tag.len() > MAX_TAG_LEN {
            p.push(format!(
                "extraTags[{i}]: `{tag}` is not a Kamatera tag; expected 1 to {MAX_TAG_LEN} letters, digits, `-` or `_`"
            ));
        } else if tag.starts_with(&format!("{prefix}-")) || tag.starts_with(&format!("{prefix}_h"))
        {
            p.push(format!(
                "extraTags[{i}]: `{tag}` starts with the ownership prefix `{prefix}-` or the settings-hash prefix `{prefix}_h`; expected another tag"
            ));
        }
    }
    if settings.datacenter.trim().is_empty() {
        p.push("datacenter: empty; expected a datacenter id such as `EU` or `US-NY2`".into());
    }
    if settings.image.trim().is_empty() {
        p.push(
            "image: empty; expected an image name or id, e.g. `ubuntu_server_24.04_64-bit`".into(),
        );
    }
    if settings.sizes.is_empty() {
        check_size(&mut p, "", &settings.size_list()[0]);
    } else {
        if !settings.cpu.is_empty() || settings.ram.0 > 0 {
            p.push("sizes: set together with cpu/ram; expected either cpu and ram (one size) or sizes (several), not both".into());
        }
        for (i, size) in settings.sizes.iter().enumerate() {
            check_size(&mut p, &format!("sizes[{i}]."), size);
            if settings.sizes[..i].iter().any(|s| s == size) {
                p.push(format!(
                    "sizes[{i}]: {} is listed twice; expected each size once",
                    size.name()
                ));
            }
        }
    }
    check_items(
        &mut p,
        "disks",
        &settings.disks,
        MAX_DISKS,
        &["id", "size"],
        "size",
    );
    check_items(
        &mut p,
        "networks",
        &settings.networks,
        MAX_NETWORKS,
        &["id", "name", "ip"],
        "name",
    );
    if settings.billing_cycle == BillingCycle::Hourly && settings.monthly_package.is_some() {
        p.push("monthlyPackage: only used with billingCycle `monthly`; remove it or set billingCycle: monthly".into());
    }
    if let Some(key) = &settings.ssh_key {
        if key.trim().is_empty() || key.contains('\n') {
            p.push(
                "sshKey: expected one public key line, e.g. `ssh-ed25519 AAAA... me@host`".into(),
            );
        }
    }
    if settings.command_timeout < Duration::from_secs(1) {
        p.push("commandTimeout: expected at least 1s".into());
    }
    p
}

/// A size's `cpu` and `ram`, their paths under `kamatera` starting with `at`.
fn check_size(p: &mut Vec<String>, at: &str, size: &KamateraSize) {
    if size.cpu.is_empty() {
        p.push(format!(
            "{at}cpu: missing; expected a count and a type letter, e.g. `2B` (or `sizes` for several)"
        ));
    } else if parse_cpu(&size.cpu).is_none() {
        p.push(format!(
            "{at}cpu: `{}` is not a CPU spec; expected a count and a type letter, e.g. `2B`",
            size.cpu
        ));
    }
    if size.ram.0 == 0 {
        p.push(format!(
            "{at}ram: missing; expected a size such as `4 GiB` (or `sizes` for several)"
        ));
    } else if size.ram.0 < 256 {
        p.push(format!(
            "{at}ram: {} MiB is too small; expected at least 256 MiB (e.g. `4 GiB`)",
            size.ram.0
        ));
    }
}

/// Disk and network items: `key=value` pairs joined by `,`, no spaces (the API splits the
/// list on spaces), only known keys, the required key present.
fn check_items(
    p: &mut Vec<String>,
    field: &str,
    items: &[String],
    max: usize,
    keys: &[&str],
    required: &str,
) {
    if items.is_empty() {
        p.push(format!("{field}: empty; expected at least one item"));
    }
    if items.len() > max {
        p.push(format!(
            "{field}: {} items; Kamatera takes at most {max}",
            items.len()
        ));
    }
    for (i, item) in items.iter().enumerate() {
        if item.chars().any(char::is_whitespace) {
            p.push(format!(
                "{field}[{i}]: `{item}` contains whitespace; expected `key=value` pairs joined by `,`"
            ));
            continue;
        }
        let mut seen_required = false;
        for pair in item.split(',') {
            match pair.split_once('=') {
                Some((k, v)) if keys.contains(&k) && !v.is_empty() && !v.contains('=') => {
                    seen_required |= k == required;
                }
                _ => {
                    p.push(format!(
                        "{field}[{i}]: `{pair}` in `{item}` is not one of {}=VALUE",
                        keys.join("=…, ")
                    ));
                }
            }
        }
        if !seen_required {
            p.push(format!("{field}[{i}]: `{item}` has no `{required}=`"));
        }
    }
}

impl Settings for KamateraSettings {
    fn validate(&self, group: &GroupContext<'_>) -> Vec<(String, String)> {
        validate_settings(group.cluster, group.group, self)
            .into_iter()
            .map(|problem| ("kamatera".to_string(), problem))
            .collect()
    }

    fn hash_fields(&self) -> Vec<(&'static str, Value)> {
        let mut m = vec![
            ("kamatera.datacenter", Value::from(self.datacenter.clone())),
            ("kamatera.image", Value::from(self.image.clone())),
            ("kamatera.cpu", Value::from(self.cpu.clone())),
            ("kamatera.ram", Value::from(self.ram.0)),
            ("kamatera.disks", Value::from(self.disks.clone())),
            ("kamatera.networks", Value::from(self.networks.clone())),
        ];
        if !self.sizes.is_empty() {
            // Never stamped: each VM carries the hash of its own size (see `sizes`).
            let names: Vec<String> = self.sizes.iter().map(KamateraSize::name).collect();
            m.push(("kamatera.sizes", Value::from(names)));
        }
        if let Some(k) = &self.ssh_key {
            m.push(("kamatera.sshKey", Value::from(k.clone())));
        }
        if self.user_data_field == UserDataField::Userdata {
            m.push(("kamatera.userDataField", Value::from("userdata")));
        }
        m
    }

    fn offline_shape(&self) -> GroupShape {
        let all = self.size_list();
        let first = all[0].shape();
        GroupShape {
            cpu_milli: first.cpu_milli,
            memory: first.memory,
            instance_type: Some(first.name),
            zone: Some(self.datacenter.clone()),
            sizes: if all.len() > 1 {
                all.iter().map(KamateraSize::shape).collect()
            } else {
                Vec::new()
            },
            ..GroupShape::default()
        }
    }

    fn unknown_shape(&self) -> String {
        format!(
            "kamatera.cpu {} does not start with a CPU count",
            self.size_list()[0].cpu
        )
    }

    fn sizes(&self) -> Vec<String> {
        self.sizes.iter().map(KamateraSize::name).collect()
    }

    fn with_size(&self, size: &str) -> Option<ProviderSettings> {
        let one = self.sizes.iter().find(|s| s.name() == size)?;
        let mut alone = self.clone();
        alone.cpu = one.cpu.clone();
        alone.ram = one.ram;
        alone.sizes = Vec::new();
        Some(ProviderSettings::Kamatera(alone))
    }

    fn runs_user_data_as_script(&self) -> Option<&'static str> {
        (self.user_data_field == UserDataField::Script).then_some(
            "`kamatera.userDataField: script` (the default) runs it as the server's initialization script",
        )
    }
}

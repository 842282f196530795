//! The hashes releases before the v2 hash stamped on their nodes: the SHA-256 of the
//! `Debug` text of the group's settings as those releases' own types printed it
//! (`provider|openstack|proxmox|kamatera|variables|labels|taints|arch`, each provider's
//! one field `None` or `Some(<settings>)`), then the template's bytes.
//!
//! That text is written out here by hand, field by field in those releases' order, from
//! their type definitions: no change to today's types (a new field, another `Debug`) may
//! change it, or every node such a release made looks drifted after an upgrade and is
//! replaced. Two texts were stamped, alike but for how a byte size printed:
//!
//! - releases up to 2026-11-27 10:26 UTC (byte sizes were `bytesize::ByteSize`):
//!   `8.0 GiB (8589934592 bytes)`;
//! - releases from then to the v2 hash (byte sizes were `config::Bytes`): `8.0 GiB`.
//!
//! A group that sets what those releases did not have (Proxmox `seedStorage` or
//! `cicustom`) has no old hash: no such release made its VMs.

use std::collections::BTreeMap;
use std::fmt::Write;

use super::super::NodeGroupConfig;
use crate::cloud::kamatera::settings::{BillingCycle, KamateraSettings, UserDataField};
use crate::cloud::openstack::settings::OpenStackSettings;
use crate::cloud::proxmox::settings::{
    CloneMode, IpConfig, JoinMode, ProxmoxSettings, TemplateRef,
};
use crate::config::{ProviderKind, TaintEffect};

/// How a release's `Debug` text printed a byte size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Sizes {
    /// `bytesize::ByteSize`: `8.0 GiB (8589934592 bytes)`.
    WithBytes,
    /// `config::Bytes`: `8.0 GiB`.
    Iec,
}

/// The texts stamped, oldest first.
pub(super) const ERAS: [Sizes; 2] = [Sizes::WithBytes, Sizes::Iec];

/// The hashes releases before the v2 hash gave `g` whose template is `template`, one per
/// text they stamped, oldest first; none when `g` uses a setting they did not have.
pub fn legacy_settings_hashes(g: &NodeGroupConfig, template: &[u8]) -> Vec<String> {
    ERAS.iter()
        .filter_map(|&sizes| text(g, sizes))
        .map(|t| super::digest(&[t.as_bytes(), template]))
        .collect()
}

/// The text a release printing sizes as `sizes` hashed for `g`, if it could make `g`.
pub(super) fn text(g: &NodeGroupConfig, sizes: Sizes) -> Option<String> {
    let provider = match g.provider {
        ProviderKind::Openstack => "Openstack",
        ProviderKind::Proxmox => "Proxmox",
        ProviderKind::Kamatera => "Kamatera",
    };
    let openstack = option(g.settings.of::<OpenStackSettings>().map(openstack));
    let proxmox = match g.settings.of::<ProxmoxSettings>() {
        Some(p) => option(Some(proxmox(p, sizes)?)),
        None => option(None),
    };
    let kamatera = option(g.settings.of::<KamateraSettings>().map(kamatera));
    let taints: Vec<String> = g
        .taints
        .iter()
        .map(|t| {
            let effect = match t.effect {
                TaintEffect::NoSchedule => "NoSchedule",
                TaintEffect::PreferNoSchedule => "PreferNoSchedule",
                TaintEffect::NoExecute => "NoExecute",
            };
            format!(
                "TaintConfig {{ key: {:?}, value: {:?}, effect: {effect} }}",
                t.key, t.value
            )
        })
        .collect();
    Some(format!(
        "{provider}|{openstack}|{proxmox}|{kamatera}|{}|{}|{}|{}",
        map(&g.user_data.variables, json),
        map(&g.labels, |v| format!("{v:?}")),
        list(&taints),
        g.arch
    ))
}

/// `Some(<text>)` or `None`.
fn option(text: Option<String>) -> String {
    match text {
        Some(t) => format!("Some({t})"),
        None => "None".into(),
    }
}

/// `[a, b]` of texts already printed.
fn list(items: &[String]) -> String {
    format!("[{}]", items.join(", "))
}

/// `["a", "b"]`.
fn strings(items: &[String]) -> String {
    list(&items.iter().map(|s| format!("{s:?}")).collect::<Vec<_>>())
}

/// `{"k": <value>, ...}` in key order.
fn map<V>(m: &BTreeMap<String, V>, value: impl Fn(&V) -> String) -> String {
    let pairs: Vec<String> = m
        .iter()
        .map(|(k, v)| format!("{k:?}: {}", value(v)))
        .collect();
    format!("{{{}}}", pairs.join(", "))
}

/// A template variable as `serde_json::Value` printed it.
fn json(v: &serde_json::Value) -> String {
    use serde_json::Value;
    match v {
        Value::Null => "Null".into(),
        Value::Bool(b) => format!("Bool({b})"),
        Value::Number(n) => format!("Number({n})"),
        Value::String(s) => format!("String({s:?})"),
        Value::Array(a) => format!("Array {}", list(&a.iter().map(json).collect::<Vec<_>>())),
        Value::Object(o) => {
            let pairs: Vec<String> = o
                .iter()
                .map(|(k, v)| format!("{k:?}: {}", json(v)))
                .collect();
            format!("Object {{{}}}", pairs.join(", "))
        }
    }
}

/// A byte size as `bytesize::ByteSize` displayed it (IEC, one decimal): `512 B`,
/// `1.5 GiB`, `8.0 GiB`.
fn iec(bytes: u64) -> String {
    const UNIT: u64 = 1024;
    if bytes < UNIT {
        return format!("{bytes} B");
    }
    let size = bytes as f64;
    let mut exp: u32 = 1;
    while exp < 6 && size / (UNIT.pow(exp) as f64) >= UNIT as f64 {
        exp += 1;
    }
    let prefix = ['K', 'M', 'G', 'T', 'P', 'E'][exp as usize - 1];
    format!("{:.1} {prefix}iB", size / UNIT.pow(exp) as f64)
}

fn size(bytes: u64, sizes: Sizes) -> String {
    match sizes {
        Sizes::WithBytes => format!("{} ({bytes} bytes)", iec(bytes)),
        Sizes::Iec => iec(bytes),
    }
}

fn openstack(s: &OpenStackSettings) -> String {
    format!(
        "OpenStackSettings {{ flavor: {:?}, image: {:?}, network: {:?}, key_name: {:?}, security_groups: {}, availability_zone: {:?}, server_group: {:?} }}",
        s.flavor,
        s.image,
        s.network,
        s.key_name,
        strings(&s.security_groups),
        s.availability_zone,
        s.server_group,
    )
}

fn proxmox(s: &ProxmoxSettings, sizes: Sizes) -> Option<String> {
    if s.seed_storage.is_some() || s.cicustom.is_some() {
        return None;
    }
    let template = match &s.template {
        TemplateRef::Id(id) => format!("Id({id})"),
        TemplateRef::Name(n) => format!("Name({n:?})"),
        TemplateRef::Tag { tag } => format!("Tag {{ tag: {tag:?} }}"),
    };
    let clone = match s.clone {
        CloneMode::Full => "Full",
        CloneMode::Linked => "Linked",
    };
    let ip_config = match &s.ip_config {
        IpConfig::Dhcp => "Dhcp".to_string(),
        IpConfig::Static(p) => {
            let dns: Vec<String> = p.nameservers.iter().map(|a| a.to_string()).collect();
            format!(
                "Static(StaticPool {{ cidr: {:?}, first: {}, last: {}, gateway: {}, nameservers: {} }})",
                p.cidr,
                option(p.first.map(|a| a.to_string())),
                option(p.last.map(|a| a.to_string())),
                p.gateway,
                list(&dns),
            )
        }
    };
    let join = match s.join {
        JoinMode::CloudInit => "CloudInit",
        JoinMode::GuestAgent => "GuestAgent",
    };
    let mut out = String::new();
    let _ = write!(
        out,
        "ProxmoxSettings {{ template: {template}, nodes: {}, clone: {clone}, storage: {:?}, cores: {:?}, memory: {}, pool: {:?}, ciuser: {:?}, ssh_keys: {}, bridge: {:?}, ip_config: {ip_config}, join: {join}, join_script_path: {:?}, ",
        strings(&s.nodes),
        s.storage,
        s.cores,
        option(s.memory.map(|m| size(m.as_u64(), sizes))),
        s.pool,
        s.ciuser,
        strings(&s.ssh_keys),
        s.bridge,
        s.join_script_path,
    );
    let _ = write!(
        out,
        "overcommit: Overcommit {{ cpu: {:?}, memory: {:?} }}, reserve: HostReserve {{ cpu: {}, memory: {} }}, max_per_host: {:?} }}",
        s.overcommit.cpu,
        s.overcommit.memory,
        option(s.reserve.cpu.as_ref().map(|q| q.text().to_string())),
        option(s.reserve.memory.map(|m| size(m.as_u64(), sizes))),
        s.max_per_host,
    );
    Some(out)
}

fn kamatera(s: &KamateraSettings) -> String {
    let billing = match s.billing_cycle {
        BillingCycle::Hourly => "Hourly",
        BillingCycle::Monthly => "Monthly",
    };
    let field = match s.user_data_field {
        UserDataField::Script => "Script",
        UserDataField::Userdata => "Userdata",
    };
    format!(
        "KamateraSettings {{ datacenter: {:?}, image: {:?}, cpu: {:?}, ram: {} MB, disks: {}, networks: {}, billing_cycle: {billing}, monthly_package: {:?}, daily_backup: {}, managed: {}, ssh_key: {:?}, user_data_field: {field}, tag_prefix: {:?}, extra_tags: {}, command_timeout: {:?} }}",
        s.datacenter,
        s.image,
        s.cpu,
        s.ram.0,
        strings(&s.disks),
        strings(&s.networks),
        s.monthly_package,
        s.daily_backup,
        s.managed,
        s.ssh_key,
        s.tag_prefix,
        strings(&s.extra_tags),
        s.command_timeout,
    )
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::{text, Sizes};
    use crate::config::Config;

    /// `k3s-agent.join.sh.j2` as the release before the v2 hash shipped it.
    const OLD_JOIN_SCRIPT: &[u8] = include_bytes!("testdata/k3s-agent.join.sh.j2");

    /// `groups` under a fixed top, its templates (`join.j2`, `join.sh.j2`, and the old
    /// `k3s-agent.join.sh.j2`) in a directory kept while the config is used.
    fn parse(groups: &str) -> (tempfile::TempDir, Config) {
        let dir = tempfile::tempdir().expect("temp dir");
        for (name, text) in [
            ("join.j2", &b"#cloud-config\nruncmd: [k3s]\n"[..]),
            ("join.sh.j2", &b"#!/bin/sh\necho join\n"[..]),
            ("k3s-agent.join.sh.j2", OLD_JOIN_SCRIPT),
        ] {
            std::fs::write(dir.path().join(name), text).expect("template");
        }
        let text = format!(
            "clusterName: pinned\nfreeMemoryTarget: 1 GiB\ntemplatesDir: {}\nnodeGroups:\n{groups}",
            dir.path().display()
        );
        let c = Config::parse(&text, Path::new("/")).expect("config is valid");
        (dir, c)
    }

    /// The demo's `batch` group (`simulate`'s config).
    const DEMO_BATCH: &str = r#"- name: batch
  provider: proxmox
  maxSize: 3
  proxmox: {template: agent-shared, memory: 8 GiB, cores: 4, join: guestAgent}
  userData:
    template: k3s-agent.join.sh.j2
    variables: {k3s_url: "https://192.0.2.10:6443", k3s_token: demo-join-token}
  labels: {workload: batch}
  taints: [{key: dedicated, value: batch, effect: NoSchedule}]
"#;

    /// Issue 29 item 2: the previous release labelled the demo's `batch` nodes
    /// `1cd2489d8af3` (read off a node it made); today's release takes that for current.
    #[test]
    fn the_demo_batch_group_keeps_the_hash_the_previous_release_stamped() {
        let (_dir, c) = parse(DEMO_BATCH);
        let g = &c.node_groups[0];
        assert_eq!(
            text(g, Sizes::WithBytes).as_deref(),
            Some(concat!(
                r#"Proxmox|None|Some(ProxmoxSettings { template: Name("agent-shared"), nodes: [], clone: Full, storage: None, cores: Some(4), memory: Some(8.0 GiB (8589934592 bytes)), pool: None, ciuser: None, ssh_keys: [], bridge: None, ip_config: Dhcp, join: GuestAgent, join_script_path: "/var/tmp/nodewright-join.sh", overcommit: Overcommit { cpu: 4.0, memory: 1.0 }, reserve: HostReserve { cpu: None, memory: None }, max_per_host: None })|None|"#,
                r#"{"k3s_token": String("demo-join-token"), "k3s_url": String("https://192.0.2.10:6443")}|{"workload": "batch"}|[TaintConfig { key: "dedicated", value: "batch", effect: NoSchedule }]|amd64"#
            ))
        );
        assert_eq!(g.legacy_settings_hashes[0], "1cd2489d8af3");
        assert!(g.hash_is_current("1cd2489d8af3"));
    }
    /// One group per provider and then some, every field those releases had set in one of
    /// them, as they are read today.
    const EVERY_FIELD: &str = r#"- name: os
  provider: openstack
  maxSize: 3
  openstack: {flavor: m1.large, image: ubuntu-24.04, network: private, keyName: ops, securityGroups: [k8s, "web \"x\""], availabilityZone: az1, serverGroup: spread}
  userData:
    template: join.j2
    variables: {zeta: "https://10.0.0.1:6443", alpha: 3, neg: -2, half: 1.5, whole: 2.0, flag: true, none: null, list: [a, 1, {b: c}], obj: {y: 1, x: "q"}}
  labels: {tier: web, "example.com/role": "a"}
  taints: [{key: dedicated, value: web, effect: NoSchedule}, {key: spot, effect: PreferNoSchedule}]
- name: os-min
  provider: openstack
  maxSize: 3
  openstack: {flavor: m1.small, image: cirros}
  userData: {template: join.j2}
- name: pve
  provider: proxmox
  maxSize: 3
  proxmox:
    template: 9000
    nodes: [pve1, pve2]
    clone: linked
    storage: fast
    cores: 4
    memory: 1536 MiB
    pool: k8s
    ciuser: ubuntu
    sshKeys: ["ssh-ed25519 AAAAC3 ops@example"]
    bridge: vmbr1
    ipConfig: {static: {cidr: 10.0.0.0/24, first: 10.0.0.10, last: 10.0.0.20, gateway: 10.0.0.1, nameservers: [1.1.1.1, 8.8.8.8]}}
    join: guestAgent
    joinScriptPath: /opt/join.sh
    overcommit: {cpu: 2.5, memory: 1.0}
    reserve: {cpu: 500m, memory: 2 GiB}
    maxPerHost: 2
  userData: {template: join.sh.j2}
- name: pve-tag
  provider: proxmox
  maxSize: 3
  proxmox: {template: {tag: k3s-tpl}, ipConfig: {static: {cidr: 10.1.0.0/16, gateway: 10.1.0.1}}, reserve: {cpu: 2}}
  userData: {template: join.j2}
- name: pve-name
  provider: proxmox
  maxSize: 3
  proxmox: {template: agent-shared, memory: 8 GiB, cores: 4, join: guestAgent}
  userData: {template: join.sh.j2}
- name: kam
  provider: kamatera
  maxSize: 3
  arch: arm64
  kamatera: {datacenter: EU, image: ubuntu, cpu: 2B, ram: 4 GiB, disks: [size=50, size=100], networks: ["name=wan,ip=auto"], billingCycle: monthly, monthlyPackage: t5000, dailyBackup: true, managed: true, sshKey: "ssh-rsa AAAAB3 ops", userDataField: userdata, tagPrefix: nwx, extraTags: [team-a], commandTimeout: 90s}
  userData: {template: join.j2}
- name: kam-min
  provider: kamatera
  maxSize: 3
  kamatera: {datacenter: IL, image: ubuntu, cpu: 1A, ram: 1 GiB}
  userData: {template: join.sh.j2}
"#;

    /// The hashes each group got from the releases before the v2 hash, computed by their
    /// own code from this config: the last that printed byte sizes as `bytesize::ByteSize`
    /// (main at 1890cbe, 2026-11-27 10:26 UTC), then the last that printed them as
    /// `config::Bytes` (main at 35d61da). Every field of each provider's settings,
    /// variables of every JSON kind, labels and taints, written the old way by hand here.
    #[test]
    fn each_providers_hash_is_the_one_the_release_before_v2_computed() {
        let (_dir, c) = parse(EVERY_FIELD);
        let hashes: Vec<(&str, Vec<&str>)> = c
            .node_groups
            .iter()
            .map(|g| {
                let h = g.legacy_settings_hashes.iter().map(String::as_str);
                (g.name.as_str(), h.collect())
            })
            .collect();
        assert_eq!(
            hashes,
            [
                ("os", vec!["3bb0c2e6184d", "3bb0c2e6184d"]),
                ("os-min", vec!["a464a1bd964d", "a464a1bd964d"]),
                ("pve", vec!["df4624cdeaaa", "2a73f675e549"]),
                ("pve-tag", vec!["50f6380cd0a8", "50f6380cd0a8"]),
                ("pve-name", vec!["51a41034ff28", "5325669f85e5"]),
                ("kam", vec!["3f8ba59113ea", "3f8ba59113ea"]),
                ("kam-min", vec!["579fb50c24a4", "579fb50c24a4"]),
            ]
        );
    }
}

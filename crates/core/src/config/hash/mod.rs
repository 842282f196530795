//! The settings hash: what a VM of a group is made from, as an explicit, versioned list of
//! fields, so that only a change to one of them drifts the group's nodes. Placement knobs
//! (`maxPerHost`, `nodes`, `overcommit`, `reserve`, availability zone, server group), sizes
//! used only for planning (`nodeMemory`, `resources`, `reserved`, `maxPods`), prices,
//! limits, billing and tag settings are not in it; nor is any field a release adds later
//! unless it is added here on purpose. A field at its default is left out of the list, so
//! a field added to the list later with a default that keeps today's behaviour changes no
//! existing hash.
//!
//! Changing what this hashes changes the hash of every group: do it only deliberately
//! (a test pins the hash of a fixed config), with a new [`VERSION`].

use serde::Serialize;

use super::NodeGroupConfig;

mod legacy;

pub use legacy::legacy_settings_hashes;

/// The version of the field list, the first line of what is hashed.
pub const VERSION: &str = "nodewright settings hash v2";

/// `key=<JSON value>` lines in a fixed order.
#[derive(Default)]
struct Material(String);

impl Material {
    fn put(&mut self, key: &str, value: impl Serialize) {
        // Strings, numbers, lists and maps of them: JSON never fails on these.
        let v = serde_json::to_string(&value).unwrap_or_default();
        self.0.push_str(key);
        self.0.push('=');
        self.0.push_str(&v);
        self.0.push('\n');
    }

    fn list<T: Serialize>(&mut self, key: &str, values: &[T]) {
        if !values.is_empty() {
            self.put(key, values);
        }
    }
}

/// The list of fields of `g` that make its VMs, as hashed (see the module docs).
fn material(g: &NodeGroupConfig) -> String {
    let mut m = Material::default();
    m.0.push_str(VERSION);
    m.0.push('\n');
    m.put("provider", g.provider.as_str());
    // Each block's own fields (its settings module's `hash_fields`), in table order.
    for block in g.settings.iter() {
        for (key, value) in block.as_settings().hash_fields() {
            m.put(key, value);
        }
    }
    if let Some(f) = g.user_data.format {
        m.put("userData.format", f);
    }
    if !g.user_data.variables.is_empty() {
        m.put("userData.variables", &g.user_data.variables);
    }
    if !g.labels.is_empty() {
        m.put("labels", &g.labels);
    }
    let taints: Vec<String> = g.taints.iter().map(|t| t.to_flag()).collect();
    m.list("taints", &taints);
    m.put("arch", &g.arch);
    m.0
}

/// The first 12 hex digits of the SHA-256 of `parts` in order.
fn digest(parts: &[&[u8]]) -> String {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    for p in parts {
        ctx.update(p);
    }
    ctx.finish()
        .as_ref()
        .iter()
        .take(6)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The settings hash of `g` whose user-data template is `template` (the file's bytes).
pub fn settings_hash(g: &NodeGroupConfig, template: &[u8]) -> String {
    digest(&[material(g).as_bytes(), b"userData.template\n", template])
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::cloud::kamatera::settings::KamateraSettings;
    use crate::cloud::openstack::settings::OpenStackSettings;
    use crate::cloud::proxmox::settings::ProxmoxSettings;
    use crate::config::Config;

    /// A config with one group per provider, every hashed field set, and the directory
    /// holding its template (kept while the config is used).
    fn fixed() -> (tempfile::TempDir, Config) {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("join.j2"), "#cloud-config\nruncmd: [k3s]\n")
            .expect("template");
        let text = format!(
            r#"
clusterName: pinned
freeMemoryTarget: 1 GiB
templatesDir: {dir}
nodeGroups:
- name: os
  provider: openstack
  maxSize: 3
  openstack: {{flavor: m1.large, image: ubuntu-24.04, network: private, keyName: ops, securityGroups: [k8s]}}
  userData: {{template: join.j2, variables: {{k3s_url: "https://10.0.0.1:6443"}}}}
  labels: {{tier: web}}
  taints: [{{key: dedicated, value: web, effect: NoSchedule}}]
- name: pve
  provider: proxmox
  maxSize: 3
  proxmox: {{template: 9000, clone: linked, storage: fast, cores: 4, memory: 8 GiB, bridge: vmbr1, join: guestAgent}}
  userData: {{template: join.j2}}
- name: kam
  provider: kamatera
  maxSize: 3
  arch: arm64
  kamatera: {{datacenter: EU, image: ubuntu, cpu: 2B, ram: 4 GiB, disks: [size=50]}}
  userData: {{template: join.j2}}
"#,
            dir = dir.path().display()
        );
        let c = Config::parse(&text, Path::new("/")).expect("fixed config is valid");
        (dir, c)
    }

    /// The hash of a fixed config is pinned: a change to what is hashed, or how, changes
    /// every group's hash and replaces every node, so it must be deliberate (a new
    /// [`super::VERSION`], and these values updated with it).
    #[test]
    fn the_hash_of_a_fixed_config_is_pinned() {
        let (_dir, c) = fixed();
        let hashes: Vec<(&str, &str)> = c
            .node_groups
            .iter()
            .map(|g| (g.name.as_str(), g.settings_hash.as_str()))
            .collect();
        assert_eq!(
            hashes,
            [
                ("os", "a8094917208f"),
                ("pve", "07bbb2073d9b"),
                ("kam", "68b175daa8ea")
            ]
        );
    }

    /// Placement, planning sizes, prices, pools and billing are not what a VM is made from.
    #[test]
    fn placement_planning_and_prices_leave_the_hash_alone() {
        let (_dir, base) = fixed();
        let dir = base.templates_dir.clone();
        let mut changed = base.clone();
        for g in &mut changed.node_groups {
            g.price = Some(0.5);
            g.max_size = 9;
            g.max_pods = 50;
            g.node_memory = Some(crate::model::Bytes(16 << 30));
            if let Some(o) = g.settings.of_mut::<OpenStackSettings>() {
                o.availability_zone = Some("az2".into());
                o.server_group = Some("spread".into());
            }
            if let Some(p) = g.settings.of_mut::<ProxmoxSettings>() {
                p.max_per_host = Some(2);
                p.nodes = vec!["pve1".into()];
                p.pool = Some("k8s".into());
            }
            if let Some(k) = g.settings.of_mut::<KamateraSettings>() {
                k.daily_backup = true;
                k.extra_tags = vec!["team-a".into()];
            }
            g.compute_settings_hashes(&dir);
        }
        for (a, b) in base.node_groups.iter().zip(&changed.node_groups) {
            assert_eq!(a.settings_hash, b.settings_hash, "group {}", a.name);
        }
        // What a VM is made from does change it.
        let mut image = base.clone();
        image.node_groups[0]
            .settings
            .of_mut::<OpenStackSettings>()
            .expect("openstack")
            .image = "ubuntu-26.04".into();
        image.node_groups[0].compute_settings_hashes(&dir);
        assert_ne!(
            image.node_groups[0].settings_hash,
            base.node_groups[0].settings_hash
        );
    }
}

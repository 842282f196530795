//! Drift read from the VM when the node has no settings-hash label (issue 8).

use super::*;
use crate::config::DisruptionReason;
use crate::model::LABEL_SETTINGS_HASH;

fn cordoned(d: &Decision) -> Option<(Vec<String>, DisruptionReason)> {
    match &d.action {
        Action::Cordon {
            nodes, disruption, ..
        } => Some((nodes.clone(), *disruption)),
        _ => None,
    }
}

/// Three joined nodes, none labelled with a settings hash; VM `b`'s tag says `vm_hash`.
fn unlabelled(vm_hash: Option<&str>) -> Snapshot {
    let mut s = Snapshot::default();
    for n in ["dev-workers-a", "dev-workers-b", "dev-workers-c"] {
        mk_member(&mut s, n, 3600);
    }
    s.servers[1].settings_hash = vm_hash.map(str::to_string);
    s.pods.push(mk_pod("p", Some("dev-workers-b"), GI).into());
    s
}

#[test]
fn node_without_the_label_but_with_a_stale_vm_hash_is_replaced_as_drifted() {
    let c = mk_config("freeMemoryTarget: 0 B");
    let s = unlabelled(Some("0123456789ab"));
    let d = plan_it(&s, &c);
    assert_eq!(
        cordoned(&d),
        Some((vec!["dev-workers-b".to_string()], DisruptionReason::Drifted)),
        "{d:#?}"
    );
    assert!(d.has_reason(ReasonCode::NodeDrifted), "{d:#?}");
}

#[test]
fn the_node_label_wins_over_the_vm_tag_and_no_hash_at_all_is_no_drift() {
    let c = mk_config("freeMemoryTarget: 0 B");
    let current = c.node_groups[0].settings_hash.clone();
    // The VM's tag is current: no drift.
    let d = plan_it(&unlabelled(Some(&current)), &c);
    assert!(!d.has_reason(ReasonCode::NodeDrifted), "{d:#?}");
    // Neither label nor tag (made before either existed): never drifted.
    let d = plan_it(&unlabelled(None), &c);
    assert!(!d.has_reason(ReasonCode::NodeDrifted), "{d:#?}");
    // A current node label decides even when the VM's tag is stale.
    let mut s = unlabelled(Some("0123456789ab"));
    s.nodes[1]
        .labels
        .insert(LABEL_SETTINGS_HASH.into(), current.clone());
    let d = plan_it(&s, &c);
    assert!(!d.has_reason(ReasonCode::NodeDrifted), "{d:#?}");
    // A stale node label decides even when the VM's tag is current.
    let mut s = unlabelled(Some(&current));
    s.nodes[1]
        .labels
        .insert(LABEL_SETTINGS_HASH.into(), "0123456789ab".into());
    let d = plan_it(&s, &c);
    assert_eq!(
        cordoned(&d).map(|(_, r)| r),
        Some(DisruptionReason::Drifted),
        "{d:#?}"
    );
}

/// A directory of this process's own holding the template the drift tests hash: written
/// once, so no other test's rewrite of a shared file (truncated, then written) is ever
/// read half-way and changes a hash between two parses.
fn drift_templates() -> &'static Path {
    static DIR: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("nodewright-drift-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("template dir");
        std::fs::write(dir.join("nodewright-plan-test.j2"), "#cloud-config\n").expect("template");
        dir
    })
}

/// A Proxmox group whose `proxmox` settings are `template: k3s` plus `extra`.
fn pve_config(extra: &str) -> Config {
    let extra = if extra.is_empty() {
        String::new()
    } else {
        format!(", {extra}")
    };
    let text = format!(
        r#"
clusterName: dev
freeMemoryTarget: 0 B
provisionTimeout: 10m
templatesDir: {dir}
nodeGroups:
- name: workers
  provider: proxmox
  minSize: 0
  maxSize: 5
  nodeMemory: 8 GiB
  proxmox: {{template: k3s{extra}}}
  userData: {{template: nodewright-plan-test.j2}}
"#,
        dir = drift_templates().display()
    );
    Config::parse(&text, Path::new("/")).expect("test config is valid")
}

/// Regression (issue 19, F): the hash was the `Debug` text of the settings, so adding a
/// placement knob (`maxPerHost`) drifted every node of the group.
#[test]
fn placement_knob_does_not_drift_nodes() {
    let before = pve_config("");
    let after = pve_config("maxPerHost: 2, nodes: [pve1, pve2], overcommit: {cpu: 8}");
    let (b, a) = (&before.node_groups[0], &after.node_groups[0]);
    assert_eq!(b.settings_hash, a.settings_hash);
    // A node made before the knob was added is not drifted.
    let mut s = Snapshot::default();
    for n in ["dev-workers-a", "dev-workers-b"] {
        mk_member(&mut s, n, 3600);
    }
    for node in &mut s.nodes {
        node.labels
            .insert(LABEL_SETTINGS_HASH.into(), b.settings_hash.clone());
    }
    let d = plan_it(&s, &after);
    assert!(!d.has_reason(ReasonCode::NodeDrifted), "{d:#?}");
    // What a VM is made from still drifts it.
    let image = pve_config("storage: fast");
    assert_ne!(image.node_groups[0].settings_hash, b.settings_hash);
    let d = plan_it(&s, &image);
    assert!(d.has_reason(ReasonCode::NodeDrifted), "{d:#?}");
}

/// A node made by a release that hashed the `Debug` text of the same settings is as
/// current as one carrying the new hash: upgrading replaces nothing.
#[test]
fn nodes_made_before_the_explicit_hash_do_not_drift_on_upgrade() {
    let c = mk_config("freeMemoryTarget: 0 B");
    let g = &c.node_groups[0];
    assert_eq!(g.legacy_settings_hashes.len(), 2, "one per text stamped");
    for legacy in &g.legacy_settings_hashes {
        assert_ne!(legacy, &g.settings_hash);
        let d = plan_it(&unlabelled(Some(legacy)), &c);
        assert!(!d.has_reason(ReasonCode::NodeDrifted), "{legacy}: {d:#?}");
    }
}

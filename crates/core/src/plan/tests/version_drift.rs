//! Issue 30: nodes follow the control plane's version. A node whose kubelet is older than
//! the API server (or than the group's older pin) has drifted; the opt-out, a template
//! that installs no server version and an unreadable version call nothing drifted.

use super::*;
use crate::config::DisruptionReason;

/// A template that installs the server's version, as the shipped ones do.
const FOLLOWS: &str =
    "#!/bin/sh\nINSTALL_K3S_VERSION={{ server_version | default('') }}\nk3s agent\n";
/// A template that installs a fixed version whatever the server runs.
const FIXED: &str = "#!/bin/sh\nINSTALL_K3S_VERSION=v1.30.0+k3s1\nk3s agent\n";

/// A config whose group `workers` uses a template with `body`, plus `group_extra` lines
/// in the group.
fn config(body: &str, group_extra: &str) -> (tempfile::TempDir, Config) {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("t.sh.j2"), body).expect("template");
    let text = format!(
        r#"
clusterName: dev
freeMemoryTarget: 0 B
templatesDir: {dir}
nodeGroups:
- name: workers
  provider: openstack
  minSize: 0
  maxSize: 5
  nodeMemory: 8 GiB
  openstack: {{flavor: m1.large, image: fcos}}
  userData: {{template: t.sh.j2{variables}}}
{group_extra}
"#,
        dir = dir.path().display(),
        variables = if group_extra.contains("k3s_version") {
            ", variables: {k3s_version: v1.31.2+k3s1}"
        } else {
            ""
        },
        group_extra = if group_extra.contains("k3s_version") {
            ""
        } else {
            group_extra
        },
    );
    let c = Config::parse(&text, Path::new("/")).expect("test config is valid");
    (dir, c)
}

/// Three joined nodes on kubelet `v1.31.4+k3s1` but `b` on `b_version`, the API server
/// on `server`.
fn cluster(server: Option<&str>, b_version: &str) -> Snapshot {
    let mut s = Snapshot::default();
    for n in ["dev-workers-a", "dev-workers-b", "dev-workers-c"] {
        mk_member(&mut s, n, 3600);
    }
    for n in &mut s.nodes {
        n.kubelet_version = Some("v1.31.4+k3s1".into());
    }
    s.nodes[1].kubelet_version = Some(b_version.into());
    s.server_version = server.map(str::to_string);
    s
}

fn cordoned(d: &Decision) -> Option<(Vec<String>, DisruptionReason)> {
    match &d.action {
        Action::Cordon {
            nodes, disruption, ..
        } => Some((nodes.clone(), *disruption)),
        _ => None,
    }
}

#[test]
fn a_node_older_than_the_api_server_has_drifted_and_is_replaced() {
    let (_dir, c) = config(FOLLOWS, "");
    let d = plan_it(&cluster(Some("v1.31.4+k3s1"), "v1.30.9+k3s1"), &c);
    assert_eq!(
        cordoned(&d),
        Some((vec!["dev-workers-b".to_string()], DisruptionReason::Drifted)),
        "{d:#?}"
    );
    let why = d
        .reasons
        .iter()
        .find(|r| r.code == ReasonCode::NodeDrifted)
        .expect("a drift reason");
    assert!(
        why.message
            .contains("kubelet v1.30.9+k3s1, older than the API server's v1.31.4+k3s1"),
        "{}",
        why.message
    );
}

#[test]
fn a_control_plane_upgrade_drifts_every_older_node_and_a_repackaging_does_not() {
    let (_dir, c) = config(FOLLOWS, "");
    // Upgraded to the next patch: all three are older; the budget takes one at a time.
    let d = plan_it(&cluster(Some("v1.31.5+k3s1"), "v1.31.4+k3s1"), &c);
    assert_eq!(
        cordoned(&d).map(|(n, r)| (n.len(), r)),
        Some((1, DisruptionReason::Drifted)),
        "{d:#?}"
    );
    // The same Kubernetes release repackaged (k3s2): nothing to replace.
    let d = plan_it(&cluster(Some("v1.31.4+k3s2"), "v1.31.4+k3s1"), &c);
    assert!(!d.has_reason(ReasonCode::NodeDrifted), "{d:#?}");
    // A node newer than the server is not made older.
    let d = plan_it(&cluster(Some("v1.31.4+k3s1"), "v1.32.0+k3s1"), &c);
    assert!(!d.has_reason(ReasonCode::NodeDrifted), "{d:#?}");
}

#[test]
fn no_version_drift_when_opted_out_unknown_or_the_template_installs_its_own() {
    let snapshot = cluster(Some("v1.32.0+k3s1"), "v1.30.9+k3s1");
    let (_dir, opted_out) = config(FOLLOWS, "  followControlPlaneVersion: false");
    assert!(!opted_out.node_groups[0].follow_control_plane_version);
    let d = plan_it(&snapshot, &opted_out);
    assert!(!d.has_reason(ReasonCode::NodeDrifted), "{d:#?}");
    let (_dir, fixed) = config(FIXED, "");
    let d = plan_it(&snapshot, &fixed);
    assert!(!d.has_reason(ReasonCode::NodeDrifted), "{d:#?}");
    let (_dir, follows) = config(FOLLOWS, "");
    let d = plan_it(&cluster(None, "v1.30.9+k3s1"), &follows);
    assert!(!d.has_reason(ReasonCode::NodeDrifted), "{d:#?}");
    // The drift switch turns version drift off with settings drift.
    let (_dir, no_drift) = config(FOLLOWS, "");
    let mut no_drift = no_drift;
    no_drift.disruption.drift = false;
    let d = plan_it(&snapshot, &no_drift);
    assert!(!d.has_reason(ReasonCode::NodeDrifted), "{d:#?}");
}

#[test]
fn an_older_pin_is_what_nodes_follow_so_its_nodes_are_not_replaced_for_ever() {
    // The group pins v1.31.2+k3s1, older than the server's v1.32.0: nodes at the pin
    // stay, an older one goes.
    let (_dir, c) = config(FOLLOWS, "k3s_version");
    assert_eq!(
        c.node_groups[0].pinned_version(),
        Some(("k3s_version", "v1.31.2+k3s1"))
    );
    let mut at_pin = cluster(Some("v1.32.0+k3s1"), "v1.31.2+k3s1");
    for n in &mut at_pin.nodes {
        n.kubelet_version = Some("v1.31.2+k3s1".into());
    }
    let d = plan_it(&at_pin, &c);
    assert!(!d.has_reason(ReasonCode::NodeDrifted), "{d:#?}");
    at_pin.nodes[2].kubelet_version = Some("v1.31.1+k3s1".into());
    let d = plan_it(&at_pin, &c);
    assert_eq!(
        cordoned(&d),
        Some((vec!["dev-workers-c".to_string()], DisruptionReason::Drifted)),
        "{d:#?}"
    );
}

#[test]
fn a_pin_newer_than_the_server_is_noted() {
    let (_dir, c) = config(FOLLOWS, "k3s_version");
    let d = plan_it(&cluster(Some("v1.31.1+k3s1"), "v1.31.1+k3s1"), &c);
    let note = d
        .notes
        .iter()
        .find(|n| n.code == ReasonCode::VersionNewerThanServer)
        .expect("a note");
    assert_eq!(
        note.message,
        "group workers pins k3s_version v1.31.2+k3s1, newer than the API server's v1.31.1+k3s1: it makes no node (none is newer than its control plane); lower the pin or upgrade the server"
    );
    let d = plan_it(&cluster(Some("v1.31.2+k3s1"), "v1.31.1+k3s1"), &c);
    assert!(!d
        .notes
        .iter()
        .any(|n| n.code == ReasonCode::VersionNewerThanServer));
}

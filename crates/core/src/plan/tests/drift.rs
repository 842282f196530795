//! Drift read from the VM when the node has no settings-hash label (issue 8).

use super::*;
use crate::config::DisruptionReason;
use crate::LABEL_SETTINGS_HASH;

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

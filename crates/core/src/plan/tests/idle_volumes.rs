//! Issue 29, items 1 and 5: a bound volume only one node can reach pins that node
//! whether or not a pod uses it now (a workload scaled to zero, a CronJob between runs),
//! until its claim is deleted; and a NotReady node holding such data keeps its VM.

use super::volumes::{config, cordoned, hostname_is, unneeded_since};
use super::*;
use crate::model::{ClaimInfo, PvInfo, LABEL_SETTINGS_HASH};

const A: &str = "dev-workers-a";
const B: &str = "dev-workers-b";
const C: &str = "dev-workers-c";

/// Claim `default/<claim>` bound to PV `pvc-<claim>`, whose affinity names `node` alone
/// (as `local-path` makes it), and no pod using it.
fn idle_volume(s: &mut Snapshot, claim: &str, node: &str) {
    let pv = format!("pvc-{claim}");
    s.volumes.pvs.push(PvInfo {
        name: pv.clone(),
        node_affinity: Some(hostname_is(node)),
        local: false,
        csi_driver: None,
        claim: Some(("default".into(), claim.into())),
        disposable: false,
    });
    s.volumes.claims.push(ClaimInfo {
        namespace: "default".into(),
        name: claim.into(),
        volume_name: Some(pv),
        storage_class: Some("local-path".into()),
        selected_node: Some(node.into()),
        disposable: false,
    });
}

/// A (busy), B (empty but for the volume of claim `db-data`, its ReplicaSet scaled to
/// zero) and C (one small pod), all unneeded for an hour.
fn scaled_to_zero(c: &Config) -> Snapshot {
    let mut s = Snapshot::default();
    for n in [A, B, C] {
        mk_member(&mut s, n, 3600);
    }
    s.pods.push(mk_pod("big", Some(A), 3 * GI).into());
    s.pods.push(mk_pod("web", Some(C), GI).into());
    idle_volume(&mut s, "db-data", B);
    unneeded_since(&mut s, 3600);
    s.resolve_volumes(c);
    s
}

fn kept_for_its_volume(d: &Decision, node: &str) -> bool {
    d.unremovable
        .iter()
        .any(|u| u.node == node && u.reason == KeptReason::LocalVolume)
}

#[test]
fn a_local_volume_no_pod_uses_keeps_its_node_from_scale_down_and_plan_says_no_pod() {
    let c = config("", "");
    let d = plan_it(&scaled_to_zero(&c), &c);
    assert!(!cordoned(&d).contains(&B.to_string()), "{d:#?}");
    let k = d
        .unremovable
        .iter()
        .find(|u| u.node == B)
        .unwrap_or_else(|| panic!("{B} not reported kept: {d:#?}"));
    assert_eq!(k.reason, KeptReason::LocalVolume, "{k:?}");
    assert_eq!(k.pod, None, "{k:?}");
    assert_eq!(k.label(), "local-volume (no pod)");
    assert!(
        k.detail.contains("pvc-db-data") && k.detail.contains("default/db-data"),
        "{k:?}"
    );
    // The node without such a volume is the one that goes.
    assert_eq!(cordoned(&d), vec![C.to_string()], "{d:#?}");
}

#[test]
fn once_the_claim_is_deleted_or_bound_elsewhere_the_node_may_go() {
    let c = config("", "");
    let mut s = scaled_to_zero(&c);
    s.volumes.claims.clear();
    let d = plan_it(&s, &c);
    assert!(cordoned(&d).contains(&B.to_string()), "{d:#?}");
    assert!(!kept_for_its_volume(&d, B), "{d:#?}");
    // A claim of that name made anew and not bound to the old (released) volume.
    let mut s = scaled_to_zero(&c);
    s.volumes.claims[0].volume_name = None;
    let d = plan_it(&s, &c);
    assert!(cordoned(&d).contains(&B.to_string()), "{d:#?}");
}

#[test]
fn a_disposable_claim_or_volume_or_a_group_allowing_loss_lets_the_node_go() {
    let c = config("", "");
    let mut s = scaled_to_zero(&c);
    s.volumes.claims[0].disposable = true;
    let d = plan_it(&s, &c);
    assert!(cordoned(&d).contains(&B.to_string()), "{d:#?}");
    let mut s = scaled_to_zero(&c);
    s.volumes.pvs[0].disposable = true;
    let d = plan_it(&s, &c);
    assert!(cordoned(&d).contains(&B.to_string()), "{d:#?}");
    let c = config("", "  allowLocalVolumeLoss: true");
    let d = plan_it(&scaled_to_zero(&c), &c);
    assert!(cordoned(&d).contains(&B.to_string()), "{d:#?}");
}

#[test]
fn a_pod_using_the_volume_elsewhere_does_not_free_the_node_holding_it() {
    // The claim's pod runs on C (it could not, on a real cluster, but a pod on another
    // node says nothing about B's disk): B stays pinned.
    let c = config("", "");
    let mut s = scaled_to_zero(&c);
    let mut p = mk_pod("db", Some(C), GI);
    p.claims.push(crate::model::PodClaim {
        volume: "data".into(),
        claim: "db-data".into(),
    });
    s.pods.push(p.into());
    s.resolve_volumes(&c);
    let d = plan_it(&s, &c);
    assert!(!cordoned(&d).contains(&B.to_string()), "{d:#?}");
    assert!(kept_for_its_volume(&d, B), "{d:#?}");
}

/// A young node and B, past `oldNodeAgeLimit` (72h), holding an idle volume.
fn old_holder(c: &Config) -> Snapshot {
    let mut s = Snapshot::default();
    mk_member(&mut s, A, 3600);
    mk_member(&mut s, B, 80 * 3600);
    idle_volume(&mut s, "db-data", B);
    s.resolve_volumes(c);
    s
}

fn says_not_replaced(d: &Decision) -> bool {
    d.notes.iter().any(|n| {
        n.code == ReasonCode::DrainBlocked
            && n.message.contains(B)
            && n.message.contains("pvc-db-data")
            && n.message.contains("no pod uses it now")
    })
}

#[test]
fn expiry_does_not_replace_a_node_holding_a_volume_no_pod_uses_not_even_with_a_hard_limit() {
    let c = config("", "");
    let d = plan_it(&old_holder(&c), &c);
    assert!(cordoned(&d).is_empty(), "{d:#?}");
    assert!(says_not_replaced(&d), "{d:#?}");
    let c = config("drain: {timeout: 10m, terminationGracePeriod: 1h}", "");
    let d = plan_it(&old_holder(&c), &c);
    assert!(cordoned(&d).is_empty(), "{d:#?}");
    // Without the volume, the same node is replaced.
    let mut s = old_holder(&c);
    s.volumes = Default::default();
    let d = plan_it(&s, &c);
    assert_eq!(cordoned(&d), vec![B.to_string()], "{d:#?}");
}

#[test]
fn drift_does_not_replace_a_node_holding_a_volume_no_pod_uses() {
    let c = config("", "");
    let mut s = Snapshot::default();
    mk_member(&mut s, A, 3600);
    mk_member(&mut s, B, 3600);
    s.nodes[1]
        .labels
        .insert(LABEL_SETTINGS_HASH.into(), "0123456789ab".into());
    idle_volume(&mut s, "db-data", B);
    s.resolve_volumes(&c);
    let d = plan_it(&s, &c);
    assert!(cordoned(&d).is_empty(), "{d:#?}");
    assert!(d.has_reason(ReasonCode::NodeDrifted), "{d:#?}");
    assert!(says_not_replaced(&d), "{d:#?}");
    s.volumes = Default::default();
    let d = plan_it(&s, &c);
    assert_eq!(cordoned(&d), vec![B.to_string()], "{d:#?}");
}

#[test]
fn a_node_cordoned_for_removal_before_its_volume_pinned_it_is_given_back_not_deleted() {
    for (disruption, extra) in [
        ("underutilized", ""),
        (
            "expired",
            "drain: {timeout: 10m, terminationGracePeriod: 1h}",
        ),
    ] {
        let c = config(extra, "");
        let mut s = old_holder(&c);
        cordon_by_us(&mut s.nodes[1], disruption, 3 * 3600);
        let d = plan_it(&s, &c);
        assert!(
            matches!(&d.action, Action::Uncordon { nodes, .. } if nodes == &[B.to_string()]),
            "{disruption}: {d:#?}"
        );
    }
}

/// A healthy node and B, NotReady for an hour (past `health.unhealthyAfter`), holding
/// data only it can reach: a pod's volume (`with_pod`) or one no pod uses.
fn broken_holder(c: &Config, with_pod: bool) -> Snapshot {
    let mut s = Snapshot::default();
    mk_member(&mut s, A, 3 * 3600);
    mk_member(&mut s, B, 3 * 3600);
    s.nodes[1].ready = false;
    s.nodes[1].ready_changed = Some(ago(3600));
    idle_volume(&mut s, "db-data", B);
    if with_pod {
        let mut p = mk_pod("db", Some(B), GI);
        p.claims.push(crate::model::PodClaim {
            volume: "data".into(),
            claim: "db-data".into(),
        });
        s.pods.push(p.into());
    }
    s.resolve_volumes(c);
    s
}

#[test]
fn a_not_ready_node_holding_local_data_is_not_replaced_and_kept_for_a_person() {
    let c = config("", "");
    for with_pod in [false, true] {
        let d = plan_it(&broken_holder(&c, with_pod), &c);
        assert!(cordoned(&d).is_empty(), "pod {with_pod}: {d:#?}");
        assert!(
            !matches!(
                d.action,
                Action::DeleteNodes { .. } | Action::DeleteServers { .. }
            ),
            "{d:#?}"
        );
        assert!(
            d.notes.iter().any(|n| n.code == ReasonCode::DrainBlocked
                && n.message.contains("not replaced though NotReady")
                && n.message.contains("pvc-db-data")),
            "pod {with_pod}: {d:#?}"
        );
    }
    // The group lets the data go: replaced as any broken node.
    let c = config("", "  allowLocalVolumeLoss: true");
    let d = plan_it(&broken_holder(&c, true), &c);
    assert_eq!(cordoned(&d), vec![B.to_string()], "{d:#?}");
    // No such data: replaced.
    let c = config("", "");
    let mut s = broken_holder(&c, false);
    s.volumes = Default::default();
    let d = plan_it(&s, &c);
    assert_eq!(cordoned(&d), vec![B.to_string()], "{d:#?}");
}

#[test]
fn a_not_ready_node_cordoned_as_unhealthy_keeps_its_local_data_pod_and_its_vm() {
    let c = config("", "");
    for with_pod in [false, true] {
        // Cordoned as unhealthy (by a release before this rule), past drain.timeout.
        let mut s = broken_holder(&c, with_pod);
        cordon_by_us(&mut s.nodes[1], "unhealthy", 2 * 3600);
        let d = plan_it(&s, &c);
        assert!(
            !matches!(&d.action, Action::Drain { pods, .. } if pods.iter().any(|p| p.name == "db")),
            "{d:#?}"
        );
        assert!(
            !matches!(d.action, Action::DeleteNodes { .. }),
            "pod {with_pod}: {d:#?}"
        );
        assert!(
            d.notes
                .iter()
                .any(|n| n.code == ReasonCode::DrainBlocked && n.message.contains("pvc-db-data")),
            "pod {with_pod}: {d:#?}"
        );
    }
}

fn stopped(d: &Decision) -> Vec<String> {
    match &d.action {
        Action::StopUnreachable { servers, .. } => servers.iter().map(|s| s.name.clone()).collect(),
        _ => Vec::new(),
    }
}

#[test]
fn item_5_a_group_with_unreachable_with_local_data_stop_stops_the_vm_once_per_not_ready_spell() {
    let c = config("", "  unreachableWithLocalData: stop");
    for with_pod in [false, true] {
        let d = plan_it(&broken_holder(&c, with_pod), &c);
        assert_eq!(stopped(&d), vec![B.to_string()], "pod {with_pod}: {d:#?}");
        let Action::StopUnreachable { at, .. } = d.action else {
            unreachable!()
        };
        assert_eq!(at, crate::model::unix_secs(now()));
    }
    // Stopped in this spell (its NotReady began an hour ago): not again, whether it is
    // still stopped or a person started it since.
    for status in [ServerStatus::Stopped, ServerStatus::Active] {
        let mut s = broken_holder(&c, true);
        s.servers[1].fenced = Some(ago(1800));
        s.servers[1].status = status;
        let d = plan_it(&s, &c);
        assert!(stopped(&d).is_empty(), "{status:?}: {d:#?}");
        assert!(cordoned(&d).is_empty(), "{d:#?}");
        assert!(
            !matches!(
                d.action,
                Action::DeleteNodes { .. } | Action::DeleteServers { .. }
            ),
            "{d:#?}"
        );
    }
    // Stopped in an earlier spell, running again, NotReady again: stopped again.
    let mut s = broken_holder(&c, true);
    s.servers[1].fenced = Some(ago(7200));
    assert_eq!(stopped(&plan_it(&s, &c)), vec![B.to_string()]);
    // Not yet past unhealthyAfter, or Ready: left running.
    let mut s = broken_holder(&c, true);
    s.nodes[1].ready_changed = Some(ago(60));
    assert!(stopped(&plan_it(&s, &c)).is_empty());
    let mut s = broken_holder(&c, true);
    s.nodes[1].ready = true;
    assert!(stopped(&plan_it(&s, &c)).is_empty());
    // No data only it can reach: replaced as any broken node, never stopped.
    let mut s = broken_holder(&c, false);
    s.volumes = Default::default();
    let d = plan_it(&s, &c);
    assert!(stopped(&d).is_empty(), "{d:#?}");
    assert_eq!(cordoned(&d), vec![B.to_string()], "{d:#?}");
    // The default keeps the VM running.
    let c = config("", "");
    assert!(stopped(&plan_it(&broken_holder(&c, true), &c)).is_empty());
}

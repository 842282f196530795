//! Issue 28: fewer node-hours. Room nodewright is taking away is given back before a VM
//! is bought; the nodes that may go carry a soft taint; the unneeded clock runs from the
//! fall under the utilization threshold; the delay after an add holds only its group.

use super::scale_up::{group, mk_config_groups};
use super::*;
use crate::model::{ANNOTATION_UNNEEDED_SINCE, DELETION_CANDIDATE_TAINT_KEY};

const A: &str = "dev-workers-a";
const B: &str = "dev-workers-b";
const C: &str = "dev-workers-c";
const D: &str = "dev-workers-d";

fn node<'s>(s: &'s mut Snapshot, name: &str) -> &'s mut NodeInfo {
    s.nodes
        .iter_mut()
        .find(|n| n.name == name)
        .unwrap_or_else(|| panic!("no node {name}"))
}

fn unneeded_since(s: &mut Snapshot, name: &str, secs: u64) {
    node(s, name).annotations.insert(
        ANNOTATION_UNNEEDED_SINCE.into(),
        humantime::format_rfc3339_seconds(ago(secs)).to_string(),
    );
}

fn soft_taint() -> Taint {
    Taint {
        key: DELETION_CANDIDATE_TAINT_KEY.into(),
        value: None,
        effect: "PreferNoSchedule".into(),
    }
}

/// `a` full (7 GiB of 8), `b` cordoned by a person, `c` cordoned by nodewright to
/// replace it (drifted), `d` cordoned by nodewright's scale-down (empty); all empty but
/// `a`; one pending 2 GiB pod.
fn cordoned_three_ways() -> Snapshot {
    let mut s = Snapshot::default();
    for n in [A, B, C, D] {
        mk_member(&mut s, n, 3600);
    }
    s.pods.push(mk_pod("busy", Some(A), 7 * GI).into());
    node(&mut s, B).unschedulable = true;
    cordon_by_us(node(&mut s, C), "drifted", 60);
    cordon_by_us(node(&mut s, D), "empty", 60);
    s.pods.push(mk_pod("new", None, 2 * GI).into());
    s
}

#[test]
fn reuse_before_you_buy_a_node_cordoned_for_scale_down_is_uncordoned_for_pending_pods() {
    let c = mk_config("freeMemoryTarget: 0 B");
    let d = plan_it(&cordoned_three_ways(), &c);
    // Only the node scale-down cordoned: not the person's, not the one being replaced.
    assert_eq!(
        d.action,
        Action::ReuseCordoned {
            nodes: vec![D.to_string()]
        },
        "{d:#?}"
    );
    let p = d
        .pending
        .iter()
        .find(|p| p.pod.name == "new")
        .expect("the pending pod is reported");
    assert_eq!(p.bucket, Bucket::WillSchedule, "{p:?}");
    assert!(p.detail.contains(D), "{p:?}");
}

#[test]
fn reuse_before_you_buy_never_takes_a_node_a_person_or_a_replacement_cordoned() {
    let c = mk_config("freeMemoryTarget: 0 B");
    let mut s = cordoned_three_ways();
    // Without nodewright's scale-down cordon, the pod needs a new node.
    s.nodes.retain(|n| n.name != D);
    s.servers.retain(|v| v.name != D);
    let d = plan_it(&s, &c);
    assert!(matches!(d.action, Action::ScaleUp { .. }), "{d:#?}");
}

#[test]
fn reuse_before_you_buy_gives_back_a_node_whose_drain_is_in_progress() {
    let c = mk_config("freeMemoryTarget: 0 B");
    let mut s = Snapshot::default();
    mk_member(&mut s, A, 3600);
    mk_member(&mut s, B, 3600);
    s.pods.push(mk_pod("busy", Some(A), 7 * GI).into());
    // Cordoned as underused two minutes ago; one pod still to evict.
    cordon_by_us(node(&mut s, B), "underutilized", 120);
    s.pods.push(mk_pod("leaving", Some(B), 2 * GI).into());
    s.pods.push(mk_pod("new", None, 3 * GI).into());
    let d = plan_it(&s, &c);
    assert_eq!(
        d.action,
        Action::ReuseCordoned {
            nodes: vec![B.to_string()]
        },
        "{d:#?}"
    );
}

/// `a` runs 3 GiB, `b` 1 GiB: both under the 50% threshold, each one's pods fit on the
/// other, but only one can go.
fn two_half_empty() -> Snapshot {
    let mut s = Snapshot::default();
    mk_member(&mut s, A, 3600);
    mk_member(&mut s, B, 3600);
    s.pods.push(mk_pod("big", Some(A), 3 * GI).into());
    s.pods.push(mk_pod("small", Some(B), GI).into());
    unneeded_since(&mut s, A, 60);
    unneeded_since(&mut s, B, 60);
    s
}

#[test]
fn steer_pods_off_a_removal_candidate_gets_the_soft_taint_and_loses_it_when_needed() {
    let c = mk_config("freeMemoryTarget: 0 B\nscaleDown: {delayAfterAdd: 1m, unneededTime: 10m}");
    let s = two_half_empty();
    let d = plan_it(&s, &c);
    // The emptier one, alone: tainting both would steer pods from each to the other.
    assert_eq!(
        d.action,
        Action::SoftTaint {
            add: vec![B.to_string()],
            remove: vec![]
        },
        "{d:#?}"
    );
    // Tainted, it is left alone while it stays a candidate.
    let mut s = s;
    node(&mut s, B).taints.push(soft_taint());
    let d = plan_it(&s, &c);
    assert!(!matches!(d.action, Action::SoftTaint { .. }), "{d:#?}");
    // Pods arrive on it: it is needed again, and the taint goes (the other node, now
    // the one whose pods fit elsewhere, takes it).
    s.pods.push(mk_pod("arrived", Some(B), 4 * GI).into());
    node(&mut s, B)
        .annotations
        .remove(ANNOTATION_UNNEEDED_SINCE);
    let d = plan_it(&s, &c);
    assert_eq!(
        d.action,
        Action::SoftTaint {
            add: vec![A.to_string()],
            remove: vec![B.to_string()]
        },
        "{d:#?}"
    );
}

#[test]
fn steer_pods_off_the_soft_taint_never_keeps_a_pod_off_its_node_in_the_model() {
    let c = mk_config("freeMemoryTarget: 0 B");
    let mut s = Snapshot::default();
    mk_member(&mut s, A, 3600);
    mk_member(&mut s, B, 3600);
    s.pods.push(mk_pod("busy", Some(A), 7 * GI).into());
    node(&mut s, B).taints.push(soft_taint());
    s.pods.push(mk_pod("new", None, 4 * GI).into());
    let d = plan_it(&s, &c);
    assert!(d.action.scale_up().is_none(), "{d:#?}");
    let p = d
        .pending
        .iter()
        .find(|p| p.pod.name == "new")
        .expect("reported");
    assert_eq!(p.bucket, Bucket::WillSchedule, "{p:?}");
    assert!(p.detail.contains(B), "{p:?}");
}

#[test]
fn the_unneeded_clock_starts_when_a_node_falls_under_the_threshold() {
    let c = mk_config("freeMemoryTarget: 0 B\nscaleDown: {delayAfterAdd: 1m, unneededTime: 10m}");
    let mut s = Snapshot::default();
    mk_member(&mut s, A, 3600);
    mk_member(&mut s, B, 3600);
    s.pods.push(mk_pod("big", Some(A), 6 * GI).into());
    // Under the threshold, but its pod fits no other node (yet).
    let mut p = mk_pod("ssd", Some(B), GI);
    p.node_selector.insert("disk".into(), "ssd".into());
    s.pods.push(p.into());
    node(&mut s, B).labels.insert("disk".into(), "ssd".into());
    let d = plan_it(&s, &c);
    match &d.action {
        Action::MarkUnneeded { mark, clear, .. } => {
            assert_eq!(mark, &[B.to_string()], "{d:#?}");
            assert!(clear.is_empty());
        }
        other => panic!("expected the clock of {B} to start, got {other:?}"),
    }
    // Once its pod could go elsewhere and the clock has run, it goes at once.
    unneeded_since(&mut s, B, 3600);
    node(&mut s, A).labels.insert("disk".into(), "ssd".into());
    let d = plan_it(&s, &c);
    assert_eq!(d.action.cordons(), [B.to_string()], "{d:#?}");
}

#[test]
fn the_delay_after_an_add_holds_its_own_group_not_the_others() {
    let groups = group("workers", 5, "4", "8Gi", "") + &group("batch", 5, "4", "8Gi", "");
    let c = mk_config_groups(
        "scaleDown: {delayAfterAdd: 10m, unneededTime: 10m}",
        &groups,
    );
    let mut s = Snapshot::default();
    mk_member(&mut s, "dev-workers-old", 7200);
    mk_member(&mut s, "dev-batch-new", 90);
    mk_member(&mut s, "dev-batch-old", 7200);
    for name in ["dev-batch-new", "dev-batch-old"] {
        if let Some(v) = s.servers.iter_mut().find(|v| v.name == name) {
            v.group = Some("batch".into());
        }
        node(&mut s, name)
            .labels
            .insert(LABEL_GROUP.into(), "batch".into());
    }
    s.pods
        .push(mk_pod("job", Some("dev-batch-new"), 6 * GI).into());
    unneeded_since(&mut s, "dev-workers-old", 3600);
    unneeded_since(&mut s, "dev-batch-old", 3600);
    let d = plan_it(&s, &c);
    // The idle worker goes though batch just added a node; batch's idle one waits.
    assert_eq!(
        d.action.cordons(),
        ["dev-workers-old".to_string()],
        "{d:#?}"
    );
    let kept = d
        .unremovable
        .iter()
        .find(|u| u.node == "dev-batch-old")
        .expect("the batch node is reported kept");
    assert_eq!(kept.reason, KeptReason::ScaleDownDelay, "{kept:?}");
    assert!(
        kept.detail.contains("group batch") && kept.detail.contains("delayAfterAdd 10m"),
        "{kept:?}"
    );
}

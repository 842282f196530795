//! Issue 18: "nothing says why a node is not scaled down". Every node in service that
//! scale-down keeps is reported with one reason; a test per reason.

use super::*;
use crate::model::{
    ANNOTATION_UNNEEDED_SINCE, CA_SAFE_TO_EVICT, CA_SCALE_DOWN_DISABLED, KARPENTER_DO_NOT_DISRUPT,
};

const A: &str = "dev-workers-a";
const B: &str = "dev-workers-b";

fn kept<'d>(d: &'d Decision, node: &str) -> &'d Unremovable {
    d.unremovable
        .iter()
        .find(|u| u.node == node)
        .unwrap_or_else(|| panic!("{node} is not reported as kept: {d:#?}"))
}

fn reason_of(d: &Decision, node: &str) -> KeptReason {
    kept(d, node).reason
}

/// Nodes `a` (a 3 GiB pod) and `b` (a 1 GiB pod, changed by `change`): `b` is the one
/// scale-down would take.
fn two_nodes(change: impl Fn(&mut PodInfo)) -> Snapshot {
    let mut s = Snapshot::default();
    mk_member(&mut s, A, 3600);
    mk_member(&mut s, B, 3600);
    s.pods.push(mk_pod("big", Some(A), 3 * GI).into());
    let mut p = mk_pod("small", Some(B), GI);
    change(&mut p);
    s.pods.push(p.into());
    s
}

fn unneeded_since(s: &mut Snapshot, secs: u64) {
    for n in &mut s.nodes {
        n.annotations.insert(
            ANNOTATION_UNNEEDED_SINCE.into(),
            humantime::format_rfc3339_seconds(ago(secs)).to_string(),
        );
    }
}

fn config(extra: &str) -> Config {
    mk_config(&format!(
        "freeMemoryTarget: 0 B\nscaleDown: {{delayAfterAdd: 1m}}\n{extra}"
    ))
}

#[test]
fn a_pdb_protected_pod_holding_an_underused_node_is_named_with_its_budget() {
    let c = config("");
    let mut s = two_nodes(|p| {
        p.labels.insert("app".into(), "small".into());
    });
    s.pdbs.push(PdbInfo {
        namespace: "default".into(),
        name: "small".into(),
        selector: Some(crate::model::LabelSelector {
            match_labels: BTreeMap::from([("app".to_string(), "small".to_string())]),
            ..Default::default()
        }),
        disruptions_allowed: 0,
    });
    let d = plan_after_unneeded(&s, &c, 3600);
    let k = kept(&d, B);
    assert_eq!(k.reason, KeptReason::BlockedByPod, "{d:#?}");
    assert_eq!(k.group, "workers");
    assert_eq!(
        k.pod,
        Some(PodRef {
            namespace: "default".into(),
            name: "small".into()
        })
    );
    assert_eq!(k.pod_reason.as_deref(), Some("pdb"));
    assert!(
        k.detail.contains("PodDisruptionBudget default/small"),
        "{k:?}"
    );
    // As data in the JSON too, with stable codes.
    let json = serde_json::to_value(&d).expect("json");
    let entry = json["unremovable"]
        .as_array()
        .and_then(|l| l.iter().find(|u| u["node"] == B))
        .cloned()
        .expect("in the JSON");
    assert_eq!(entry["reason"], "blocked-by-pod");
    assert_eq!(entry["podReason"], "pdb");
    assert_eq!(entry["pod"]["name"], "small");
}

#[test]
fn every_pod_that_blocks_a_drain_is_named_with_why() {
    let c = config("");
    type Change = Box<dyn Fn(&mut PodInfo)>;
    let cases: Vec<(&str, Change)> = vec![
        ("no-controller", Box::new(|p| p.controller_kind = None)),
        ("local-storage", Box::new(|p| p.local_storage = true)),
        (
            "kube-system",
            Box::new(|p| p.namespace = "kube-system".into()),
        ),
        (
            "not-safe-to-evict",
            Box::new(|p| {
                p.annotations
                    .insert(CA_SAFE_TO_EVICT.into(), "false".into());
            }),
        ),
        (
            "do-not-disrupt",
            Box::new(|p| {
                p.annotations
                    .insert(KARPENTER_DO_NOT_DISRUPT.into(), "true".into());
            }),
        ),
        ("job", Box::new(|p| p.controller_kind = Some("Job".into()))),
    ];
    for (code, change) in cases {
        let s = two_nodes(change);
        let d = plan_after_unneeded(&s, &c, 3600);
        let k = kept(&d, B);
        assert_eq!(k.reason, KeptReason::BlockedByPod, "{code}: {d:#?}");
        assert_eq!(k.pod_reason.as_deref(), Some(code), "{code}: {k:?}");
        assert_eq!(k.pod.as_ref().map(|p| p.name.as_str()), Some("small"));
    }
}

#[test]
fn a_busy_node_is_kept_as_not_underutilized() {
    let c = config("");
    let mut s = two_nodes(|p| p.requests.memory = 6 * GI);
    unneeded_since(&mut s, 3600);
    let d = plan_it(&s, &c);
    let k = kept(&d, B);
    assert_eq!(k.reason, KeptReason::NotUnderutilized, "{d:#?}");
    assert!(k.detail.contains("75%"), "{k:?}");
}

#[test]
fn a_node_of_a_group_at_min_size_is_kept_for_it() {
    let mut c = config("");
    c.node_groups[0].min_size = 2;
    let d = plan_after_unneeded(&two_nodes(|_| {}), &c, 3600);
    assert_eq!(reason_of(&d, A), KeptReason::GroupAtMinSize, "{d:#?}");
    assert_eq!(reason_of(&d, B), KeptReason::GroupAtMinSize, "{d:#?}");
    assert!(kept(&d, B).detail.contains("minSize is 2"));
}

#[test]
fn scale_down_disabled_and_the_opt_out_annotation_are_reasons() {
    let c = mk_config("freeMemoryTarget: 0 B\nscaleDown: {enabled: false}");
    let d = plan_it(&two_nodes(|_| {}), &c);
    assert_eq!(reason_of(&d, B), KeptReason::ScaleDownDisabled, "{d:#?}");

    let c = config("");
    let mut s = two_nodes(|_| {});
    s.nodes[1]
        .annotations
        .insert(CA_SCALE_DOWN_DISABLED.into(), "true".into());
    let d = plan_after_unneeded(&s, &c, 3600);
    assert_eq!(
        reason_of(&d, B),
        KeptReason::ScaleDownDisabledAnnotation,
        "{d:#?}"
    );
}

#[test]
fn an_underused_node_waits_out_its_unneeded_time() {
    let c = config("");
    let s = two_nodes(|_| {});
    // First cycle: its clock starts.
    let d = plan_it(&s, &c);
    assert!(matches!(d.action, Action::MarkUnneeded { .. }), "{d:#?}");
    let k = kept(&d, B);
    assert_eq!(k.reason, KeptReason::UnneededTooShort);
    assert!(k.detail.contains("became unneeded this cycle"), "{k:?}");
    // Five minutes of the default ten; it carries the soft taint of a removal candidate
    // since (issue 28).
    let mut s = s;
    unneeded_since(&mut s, 300);
    s.nodes[1].taints.push(crate::model::Taint {
        key: crate::model::DELETION_CANDIDATE_TAINT_KEY.into(),
        value: None,
        effect: "PreferNoSchedule".into(),
    });
    let d = plan_it(&s, &c);
    assert_eq!(d.action, Action::None, "{d:#?}");
    let k = kept(&d, B);
    assert_eq!(k.reason, KeptReason::UnneededTooShort);
    assert!(k.detail.contains("unneeded for 5m"), "{k:?}");
    assert!(k.detail.contains("scaleDown.unneededTime 10m"), "{k:?}");
    // The "nothing to do" reason points at the list.
    assert!(
        d.reasons[0].message.contains("node(s) kept"),
        "{:?}",
        d.reasons
    );
}

#[test]
fn a_new_node_holds_scale_down_for_delay_after_add() {
    let c = mk_config("freeMemoryTarget: 0 B\nscaleDown: {delayAfterAdd: 10m}");
    let mut s = two_nodes(|_| {});
    // The newest node registered 2 minutes ago.
    s.nodes[0].created = ago(120);
    unneeded_since(&mut s, 3600);
    let d = plan_it(&s, &c);
    let k = kept(&d, B);
    assert_eq!(k.reason, KeptReason::ScaleDownDelay, "{d:#?}");
    assert!(k.detail.contains("scaleDown.delayAfterAdd 10m"), "{k:?}");
}

#[test]
fn an_exhausted_budget_keeps_ripe_nodes() {
    let c = config("disruption: {budgets: [{nodes: 0}]}");
    let mut s = two_nodes(|_| {});
    mk_member(&mut s, "dev-workers-c", 3600);
    unneeded_since(&mut s, 3600);
    let d = plan_it(&s, &c);
    assert_eq!(reason_of(&d, B), KeptReason::DisruptionBudget, "{d:#?}");
    // The empty one too, under the `empty` budget.
    let k = kept(&d, "dev-workers-c");
    assert_eq!(k.reason, KeptReason::DisruptionBudget);
    assert!(k.detail.contains("`empty`"), "{k:?}");
}

#[test]
fn a_node_needed_for_the_free_memory_target_is_kept_for_it() {
    let c = mk_config("freeMemoryTarget: 10 GiB\nscaleDown: {delayAfterAdd: 1m}");
    let d = plan_after_unneeded(&two_nodes(|_| {}), &c, 3600);
    let k = kept(&d, B);
    assert_eq!(k.reason, KeptReason::FreeCapacityTarget, "{d:#?}");
    assert!(k.detail.contains("freeMemoryTarget"), "{k:?}");
}

#[test]
fn a_pod_that_fits_no_other_node_keeps_its_node() {
    let c = config("");
    let mut s = two_nodes(|p| {
        p.node_selector.insert("disk".into(), "ssd".into());
    });
    s.nodes[1].labels.insert("disk".into(), "ssd".into());
    let d = plan_after_unneeded(&s, &c, 3600);
    let k = kept(&d, B);
    assert_eq!(k.reason, KeptReason::NoPlaceToMovePods, "{d:#?}");
    assert!(k.detail.contains("default/small"), "{k:?}");
}

#[test]
fn a_node_whose_removal_breaks_minimum_free_node_memory_is_kept() {
    let c = config("minimumFreeNodeMemory: 6500 MiB");
    let mut s = two_nodes(|_| {});
    s.pods.retain(|p| p.name != "big");
    s.pods.push(mk_pod("big", Some(A), GI).into());
    let d = plan_after_unneeded(&s, &c, 3600);
    assert_eq!(reason_of(&d, B), KeptReason::MinimumFreeNode, "{d:#?}");
}

#[test]
fn only_one_underused_node_goes_per_cycle_the_other_says_so() {
    let c = config("");
    let mut s = two_nodes(|_| {});
    s.pods.retain(|p| p.name != "big");
    s.pods.push(mk_pod("big", Some(A), GI).into());
    unneeded_since(&mut s, 3600);
    let d = plan_it(&s, &c);
    let gone = match &d.action {
        Action::Cordon { nodes, .. } => nodes.clone(),
        other => panic!("expected a cordon, got {other:?}"),
    };
    assert_eq!(gone.len(), 1);
    let other = if gone[0] == A { B } else { A };
    assert!(d.unremovable.iter().all(|u| u.node != gone[0]), "{d:#?}");
    let k = kept(&d, other);
    assert_eq!(k.reason, KeptReason::OtherActionFirst, "{d:#?}");
    assert!(k.detail.contains("cordon"), "{k:?}");
}

#[test]
fn a_vm_still_provisioning_holds_scale_down() {
    let c = config("");
    let mut s = two_nodes(|_| {});
    unneeded_since(&mut s, 3600);
    s.servers.push(mk_server("dev-workers-new", ago(30)));
    let d = plan_it(&s, &c);
    let k = kept(&d, B);
    assert_eq!(k.reason, KeptReason::ScaleUpInProgress, "{d:#?}");
    assert!(k.detail.contains("dev-workers-new"), "{k:?}");
}

#[test]
fn a_drain_under_way_holds_other_removals() {
    let c = config("");
    let mut s = two_nodes(|_| {});
    mk_member(&mut s, "dev-workers-c", 3600);
    s.pods
        .push(mk_pod("leaving", Some("dev-workers-c"), GI).into());
    cordon_by_us(&mut s.nodes[2], "underutilized", 10);
    unneeded_since(&mut s, 3600);
    let d = plan_it(&s, &c);
    assert_eq!(reason_of(&d, B), KeptReason::DrainInProgress, "{d:#?}");
    // The node being drained is not "kept".
    assert!(d.unremovable.iter().all(|u| u.node != "dev-workers-c"));
}

#[test]
fn too_many_unready_nodes_keep_the_ready_ones_and_say_so() {
    let c = config("health: {okUnreadyCount: 0, maxUnreadyPercentage: 10}");
    let mut s = two_nodes(|_| {});
    mk_member(&mut s, "dev-workers-c", 3600);
    s.nodes[2].ready = false;
    s.nodes[2].ready_changed = Some(ago(10));
    unneeded_since(&mut s, 3600);
    let d = plan_it(&s, &c);
    assert_eq!(reason_of(&d, B), KeptReason::TooManyUnready, "{d:#?}");
    assert_eq!(
        reason_of(&d, "dev-workers-c"),
        KeptReason::NotReady,
        "{d:#?}"
    );
}

#[test]
fn an_idle_node_of_a_preferred_group_stays_while_a_less_preferred_one_runs_pods() {
    use super::scale_up::{group, mk_config_groups};
    let groups = format!(
        "{}{}",
        group("onprem", 5, "4", "8Gi", ""),
        group("cloud", 5, "4", "8Gi", "")
    );
    let c = mk_config_groups(
        "expander: {type: priority, priorities: [onprem, cloud]}\nscaleDown: {delayAfterAdd: 1m}",
        &groups,
    );
    let mut s = Snapshot::default();
    for (name, g) in [("dev-onprem-a", "onprem"), ("dev-cloud-a", "cloud")] {
        let mut server = mk_server(name, ago(3600));
        server.group = Some(g.into());
        s.servers.push(server);
        let mut node = mk_node(name, ago(3500));
        node.labels
            .insert(crate::model::LABEL_GROUP.into(), g.into());
        s.nodes.push(node);
    }
    s.pods.push(mk_pod("web", Some("dev-cloud-a"), GI).into());
    unneeded_since(&mut s, 3600);
    let d = plan_it(&s, &c);
    // The cloud node goes first; the idle on-prem node is kept for it.
    assert_eq!(
        match &d.action {
            Action::Cordon { nodes, .. } => nodes.clone(),
            _ => Vec::new(),
        },
        vec!["dev-cloud-a".to_string()],
        "{d:#?}"
    );
    let k = kept(&d, "dev-onprem-a");
    assert_eq!(k.reason, KeptReason::PreferredGroup, "{d:#?}");
    assert!(
        k.detail
            .contains("group onprem is preferred over group cloud"),
        "{k:?}"
    );
}

#[test]
fn during_a_scale_up_kept_nodes_say_scale_down_waits_for_it() {
    let c = config("");
    let mut s = two_nodes(|_| {});
    unneeded_since(&mut s, 3600);
    // Pods that fit no node: this cycle scales up, scale-down does not look.
    for i in 0..3 {
        s.pods
            .push(mk_pod(&format!("wait-{i}"), None, 7 * GI + GI / 2).into());
    }
    let d = plan_it(&s, &c);
    assert!(matches!(d.action, Action::ScaleUp { .. }), "{d:#?}");
    let k = kept(&d, B);
    assert_eq!(k.reason, KeptReason::ScaleUpInProgress, "{d:#?}");
    assert!(
        k.detail
            .contains("scale-down did not run: this cycle does: add 3 node(s)"),
        "{k:?}"
    );
    // The checks without the model still apply.
    let mut s2 = s.clone();
    s2.nodes[1]
        .annotations
        .insert(CA_SCALE_DOWN_DISABLED.into(), "true".into());
    let d = plan_it(&s2, &c);
    assert_eq!(
        reason_of(&d, B),
        KeptReason::ScaleDownDisabledAnnotation,
        "{d:#?}"
    );
}

//! Safe, budgeted disruption: a regression test per bug of issue 8 (named after it),
//! the drain rules, budgets, drift, health guards and batching.

use super::*;
use crate::config::DisruptionReason;
use crate::model::{
    LabelSelector, Operator, Requirement, ANNOTATION_CORDONED_AT, ANNOTATION_UNNEEDED_SINCE,
    CA_SAFE_TO_EVICT, CA_SCALE_DOWN_DISABLED, KARPENTER_DO_NOT_DISRUPT, LABEL_SETTINGS_HASH,
};

fn three_nodes(c: &Config) -> Snapshot {
    let _ = c;
    let mut s = Snapshot::default();
    mk_member(&mut s, "dev-workers-a", 3600);
    mk_member(&mut s, "dev-workers-b", 3600);
    mk_member(&mut s, "dev-workers-c", 3600);
    s
}

fn cordoned_nodes(d: &Decision) -> Vec<String> {
    match &d.action {
        Action::Cordon { nodes, .. } => nodes.clone(),
        _ => Vec::new(),
    }
}

fn disruption(d: &Decision) -> Option<DisruptionReason> {
    match &d.action {
        Action::Cordon { disruption, .. } => Some(*disruption),
        _ => None,
    }
}

#[test]
fn vm_in_error_with_a_ready_node_is_cordoned_and_drained_not_deleted() {
    let c = mk_config("freeMemoryTarget: 0 B");
    let mut s = three_nodes(&c);
    s.servers[0].status = ServerStatus::Error;
    s.pods.push(mk_pod("web", Some("dev-workers-a"), GI).into());
    let d = plan_it(&s, &c);
    assert!(!matches!(d.action, Action::DeleteServers { .. }), "{d:#?}");
    assert_eq!(
        cordoned_nodes(&d),
        vec!["dev-workers-a".to_string()],
        "{d:#?}"
    );
    assert_eq!(disruption(&d), Some(DisruptionReason::Unhealthy));
    // Next cycle: drained, not deleted with its pod.
    cordon_by_us(&mut s.nodes[0], "unhealthy", 10);
    let d = plan_it(&s, &c);
    assert!(matches!(d.action, Action::Drain { .. }), "{d:#?}");
}

#[test]
fn node_whose_ownership_label_was_removed_is_disowned_not_deleted() {
    let c = mk_config("freeMemoryTarget: 0 B");
    let mut s = Snapshot::default();
    mk_member(&mut s, "dev-workers-a", 3 * 3600);
    s.nodes[0].labels.remove(LABEL_GROUP);
    s.pods.push(mk_pod("web", Some("dev-workers-a"), GI).into());
    let d = plan_it(&s, &c);
    assert!(!matches!(d.action, Action::DeleteServers { .. }), "{d:#?}");
    assert!(d.has_reason(ReasonCode::NodeDisowned), "{d:#?}");
}

#[test]
fn empty_node_cordoned_by_a_person_is_not_deleted() {
    let c = mk_config("freeMemoryTarget: 0 B");
    let mut s = three_nodes(&c);
    s.nodes[0].unschedulable = true;
    let d = plan_it(&s, &c);
    assert!(!matches!(d.action, Action::DeleteNodes { .. }), "{d:#?}");
}

#[test]
fn replacement_never_cordons_a_node_it_could_not_drain() {
    let c = mk_config("freeMemoryTarget: 0 B");
    let mut s = three_nodes(&c);
    s.nodes[0].created = ago(100 * 3600);
    let mut bare = mk_pod("bare", Some("dev-workers-a"), GI);
    bare.controller_kind = None;
    s.pods.push(bare.into());
    let d = plan_it(&s, &c);
    assert!(cordoned_nodes(&d).is_empty(), "{d:#?}");
    assert!(d.has_reason(ReasonCode::DrainBlocked), "{d:#?}");
    // Same with a PodDisruptionBudget that allows nothing now.
    std::sync::Arc::make_mut(&mut s.pods[0]).controller_kind = Some("ReplicaSet".into());
    std::sync::Arc::make_mut(&mut s.pods[0])
        .labels
        .insert("app".into(), "db".into());
    s.pdbs.push(PdbInfo {
        namespace: "default".into(),
        name: "db".into(),
        selector: Some(LabelSelector {
            match_labels: BTreeMap::from([("app".to_string(), "db".to_string())]),
            ..Default::default()
        }),
        disruptions_allowed: 0,
    });
    let d = plan_it(&s, &c);
    assert!(cordoned_nodes(&d).is_empty(), "{d:#?}");
    // Once the budget allows it, the old node goes.
    s.pdbs[0].disruptions_allowed = 1;
    let d = plan_it(&s, &c);
    assert_eq!(
        cordoned_nodes(&d),
        vec!["dev-workers-a".to_string()],
        "{d:#?}"
    );
    assert_eq!(disruption(&d), Some(DisruptionReason::Expired));
}

#[test]
fn voluntary_drain_past_its_deadline_is_given_back_instead_of_wedging() {
    let c = mk_config("freeMemoryTarget: 0 B\ndrain: {timeout: 10m}");
    let mut s = three_nodes(&c);
    cordon_by_us(&mut s.nodes[0], "expired", 11 * 60);
    let mut p = mk_pod("db-0", Some("dev-workers-a"), GI);
    p.labels.insert("app".into(), "db".into());
    s.pods.push(p.into());
    s.pdbs.push(PdbInfo {
        namespace: "default".into(),
        name: "db".into(),
        selector: Some(LabelSelector::default()),
        disruptions_allowed: 0,
    });
    let d = plan_it(&s, &c);
    assert!(
        matches!(&d.action, Action::Uncordon { nodes, .. } if nodes == &["dev-workers-a".to_string()]),
        "{d:#?}"
    );
    assert!(d.has_reason(ReasonCode::DrainTimedOut));
    // Within the deadline it waits, blocked.
    cordon_by_us(&mut s.nodes[0], "expired", 60);
    let d = plan_it(&s, &c);
    assert!(
        !matches!(d.action, Action::Uncordon { .. } | Action::Drain { .. }),
        "{d:#?}"
    );
    assert!(d.has_reason(ReasonCode::DrainBlocked), "{d:#?}");
}

#[test]
fn unhealthy_node_past_its_drain_deadline_is_deleted_anyway() {
    let c = mk_config("freeMemoryTarget: 0 B\ndrain: {timeout: 10m}");
    let mut s = three_nodes(&c);
    cordon_by_us(&mut s.nodes[0], "unhealthy", 11 * 60);
    // Still broken: a node Ready again with its VM fine has recovered and is given back.
    s.nodes[0].ready = false;
    s.nodes[0].ready_changed = Some(ago(20 * 60));
    s.pods
        .push(mk_pod("stuck", Some("dev-workers-a"), GI).into());
    std::sync::Arc::make_mut(&mut s.pods[0]).deleting = true;
    let d = plan_it(&s, &c);
    assert!(
        matches!(&d.action, Action::DeleteNodes { nodes } if nodes[0].node == "dev-workers-a"),
        "{d:#?}"
    );
}

#[test]
fn replacement_adds_nodes_only_to_a_group_that_can_host_the_pods() {
    let text = super::scale_up::group("workers", 5, "4", "8Gi", "")
        + &super::scale_up::group("small", 5, "1", "2Gi", "");
    let c = super::scale_up::mk_config_groups("oldNodeAgeLimit: 72h", &text);
    let mut s = Snapshot::default();
    mk_member(&mut s, "dev-workers-old", 100 * 3600);
    // The workers group is at its maximum; only the small group has room, and a 3 GiB
    // pod does not fit there: no node is added (before, one was, again and again).
    let mut c = c;
    c.node_groups[0].max_size = 1;
    s.pods
        .push(mk_pod("big", Some("dev-workers-old"), 3 * GI).into());
    let d = plan_it(&s, &c);
    assert!(!matches!(d.action, Action::ScaleUp { .. }), "{d:#?}");
    assert!(d.has_reason(ReasonCode::ReplacementNeedsCapacity), "{d:#?}");
    // With room in its own group, the replacement comes from there.
    c.node_groups[0].max_size = 5;
    let d = plan_it(&s, &c);
    assert_eq!(
        d.action,
        Action::ScaleUp {
            group: "workers".into(),
            count: 1,
            size: None
        },
        "{d:#?}"
    );
}

#[test]
fn group_at_zero_is_sized_by_allocatable_not_by_vm_ram() {
    // 8 GiB of RAM, but the kubelet keeps some: a 7.9 GiB pod fits no new node.
    let c = mk_config("freeMemoryTarget: 0 B");
    let mut s = Snapshot::default();
    s.pods
        .push(mk_pod("almost-8g", None, 8 * GI - 100 * (1 << 20)).into());
    let d = plan_it(&s, &c);
    assert!(!matches!(d.action, Action::ScaleUp { .. }), "{d:#?}");
    assert!(d.has_reason(ReasonCode::NoGroupFits), "{d:#?}");
}

#[test]
fn pdb_with_empty_selector_protects_every_pod_of_its_namespace() {
    let all = PdbInfo {
        namespace: "default".into(),
        name: "all".into(),
        selector: Some(LabelSelector::default()),
        disruptions_allowed: 0,
    };
    let p = mk_pod("anything", Some("n"), GI);
    assert!(all.selects(&p));
    let none = PdbInfo {
        selector: None,
        ..all.clone()
    };
    assert!(!none.selects(&p));
    let mut other_ns = p.clone();
    other_ns.namespace = "other".into();
    assert!(!all.selects(&other_ns));
}

#[test]
fn pdb_with_only_match_expressions_selects_by_them() {
    let pdb = PdbInfo {
        namespace: "default".into(),
        name: "db".into(),
        selector: Some(LabelSelector {
            expressions: vec![Requirement {
                key: "app".into(),
                operator: Operator::In,
                values: vec!["db".into()],
            }],
            ..Default::default()
        }),
        disruptions_allowed: 0,
    };
    let mut db = mk_pod("db-0", Some("n"), GI);
    db.labels.insert("app".into(), "db".into());
    let web = mk_pod("web-0", Some("n"), GI);
    assert!(pdb.selects(&db));
    assert!(
        !pdb.selects(&web),
        "only matchExpressions no longer means the whole namespace"
    );
}

#[test]
fn not_ready_node_past_unhealthy_after_is_replaced() {
    let c = mk_config("freeMemoryTarget: 0 B\nhealth: {unhealthyAfter: 15m}");
    let mut s = three_nodes(&c);
    s.nodes[0].ready = false;
    s.nodes[0].ready_changed = Some(ago(5 * 60));
    let d = plan_it(&s, &c);
    assert!(cordoned_nodes(&d).is_empty(), "{d:#?}");
    s.nodes[0].ready_changed = Some(ago(20 * 60));
    let d = plan_it(&s, &c);
    assert_eq!(
        cordoned_nodes(&d),
        vec!["dev-workers-a".to_string()],
        "{d:#?}"
    );
    assert_eq!(disruption(&d), Some(DisruptionReason::Unhealthy));
}

#[test]
fn not_ready_blip_does_not_scale_up() {
    let c = mk_config("freeMemoryTarget: 10 GiB\nhealth: {notReadyGrace: 2m}");
    let mut s = Snapshot::default();
    mk_member(&mut s, "dev-workers-a", 3600);
    mk_member(&mut s, "dev-workers-b", 3600);
    s.nodes[1].ready = false;
    s.nodes[1].ready_changed = Some(ago(30));
    let d = plan_it(&s, &c);
    assert!(!matches!(d.action, Action::ScaleUp { .. }), "{d:#?}");
    // NotReady for longer: it is not capacity any more.
    s.nodes[1].ready_changed = Some(ago(5 * 60));
    let d = plan_it(&s, &c);
    assert!(matches!(d.action, Action::ScaleUp { .. }), "{d:#?}");
}

#[test]
fn pending_daemonset_pods_do_not_block_scale_down() {
    let c = mk_config("freeMemoryTarget: 0 B\nscaleDown: {delayAfterAdd: 1m}");
    let mut s = three_nodes(&c);
    let mut ds = mk_pod("agent-x", None, GI);
    ds.controller_kind = Some("DaemonSet".into());
    s.pods.push(ds.into());
    let d = plan_it(&s, &c);
    assert!(
        matches!(&d.action, Action::MarkUnneeded { mark, .. } if !mark.is_empty()),
        "{d:#?}"
    );
}

#[test]
fn drain_rules_block_the_choice_of_a_node() {
    let c = mk_config("freeMemoryTarget: 0 B\nscaleDown: {delayAfterAdd: 1m}");
    type Change = Box<dyn Fn(&mut PodInfo)>;
    let cases: Vec<(&str, Change, bool)> = vec![
        ("plain", Box::new(|_| {}), true),
        (
            "no controller",
            Box::new(|p| p.controller_kind = None),
            false,
        ),
        ("local storage", Box::new(|p| p.local_storage = true), false),
        (
            "kube-system",
            Box::new(|p| p.namespace = "kube-system".into()),
            false,
        ),
        (
            "safe-to-evict false",
            Box::new(|p| {
                p.annotations
                    .insert(CA_SAFE_TO_EVICT.into(), "false".into());
            }),
            false,
        ),
        (
            "do-not-disrupt",
            Box::new(|p| {
                p.annotations
                    .insert(KARPENTER_DO_NOT_DISRUPT.into(), "true".into());
            }),
            false,
        ),
        (
            "local storage but safe-to-evict true",
            Box::new(|p| {
                p.local_storage = true;
                p.annotations.insert(CA_SAFE_TO_EVICT.into(), "true".into());
            }),
            true,
        ),
        (
            "running Job pod",
            Box::new(|p| p.controller_kind = Some("Job".into())),
            false,
        ),
    ];
    for (name, change, removable) in cases {
        let mut s = Snapshot::default();
        mk_member(&mut s, "dev-workers-a", 3600);
        mk_member(&mut s, "dev-workers-b", 3600);
        s.pods
            .push(mk_pod("big", Some("dev-workers-a"), 3 * GI).into());
        let mut p = mk_pod("small", Some("dev-workers-b"), GI);
        change(&mut p);
        s.pods.push(p.into());
        let d = plan_after_unneeded(&s, &c, 3600);
        let b_goes = cordoned_nodes(&d) == vec!["dev-workers-b".to_string()];
        assert_eq!(b_goes, removable, "{name}: {d:#?}");
    }
}

#[test]
fn node_annotated_scale_down_disabled_is_left_alone() {
    let c = mk_config("freeMemoryTarget: 0 B\nscaleDown: {delayAfterAdd: 1m}");
    let mut s = Snapshot::default();
    mk_member(&mut s, "dev-workers-a", 3600);
    mk_member(&mut s, "dev-workers-b", 3600);
    for n in &mut s.nodes {
        n.annotations
            .insert(CA_SCALE_DOWN_DISABLED.into(), "true".into());
    }
    let d = plan_after_unneeded(&s, &c, 3600);
    assert!(cordoned_nodes(&d).is_empty(), "{d:#?}");
    assert!(!matches!(d.action, Action::MarkUnneeded { .. }), "{d:#?}");
}

#[test]
fn job_pods_are_waited_for_then_evicted_after_the_grace_period() {
    let c = mk_config("freeMemoryTarget: 0 B\ndrain: {jobGracePeriod: 30m, timeout: 2h}");
    let mut s = three_nodes(&c);
    cordon_by_us(&mut s.nodes[0], "expired", 10 * 60);
    let mut job = mk_pod("batch-1", Some("dev-workers-a"), GI);
    job.controller_kind = Some("Job".into());
    s.pods.push(job.into());
    let d = plan_it(&s, &c);
    assert!(!matches!(d.action, Action::Drain { .. }), "{d:#?}");
    assert!(d.has_reason(ReasonCode::DrainInProgress), "{d:#?}");
    cordon_by_us(&mut s.nodes[0], "expired", 40 * 60);
    let d = plan_it(&s, &c);
    assert!(matches!(d.action, Action::Drain { .. }), "{d:#?}");
}

#[test]
fn unneeded_clock_survives_a_restart_in_the_annotation() {
    let c = mk_config("freeMemoryTarget: 0 B\nscaleDown: {delayAfterAdd: 1m, unneededTime: 10m}");
    let mut s = Snapshot::default();
    mk_member(&mut s, "dev-workers-a", 3600);
    mk_member(&mut s, "dev-workers-b", 3600);
    s.pods.push(mk_pod("p", Some("dev-workers-a"), GI).into());
    // First cycle: the clock starts.
    let d = plan_it(&s, &c);
    assert!(
        matches!(&d.action, Action::MarkUnneeded { mark, .. } if mark.len() == 2),
        "{d:#?}"
    );
    // A fresh process five minutes later reads the clock back: not yet.
    for n in &mut s.nodes {
        n.annotations.insert(
            ANNOTATION_UNNEEDED_SINCE.into(),
            humantime::format_rfc3339_seconds(ago(5 * 60)).to_string(),
        );
    }
    let d = plan_it(&s, &c);
    assert!(cordoned_nodes(&d).is_empty(), "{d:#?}");
    // Eleven minutes: the emptiest goes.
    for n in &mut s.nodes {
        n.annotations.insert(
            ANNOTATION_UNNEEDED_SINCE.into(),
            humantime::format_rfc3339_seconds(ago(11 * 60)).to_string(),
        );
    }
    let d = plan_it(&s, &c);
    assert_eq!(
        cordoned_nodes(&d),
        vec!["dev-workers-b".to_string()],
        "{d:#?}"
    );
    assert_eq!(disruption(&d), Some(DisruptionReason::Empty));
}

#[test]
fn a_restart_in_the_middle_of_a_drain_continues_it() {
    let c = mk_config("freeMemoryTarget: 0 B");
    let mut s = three_nodes(&c);
    cordon_by_us(&mut s.nodes[0], "underutilized", 120);
    s.pods.push(mk_pod("p1", Some("dev-workers-a"), GI).into());
    s.pods.push(mk_pod("p2", Some("dev-workers-a"), GI).into());
    std::sync::Arc::make_mut(&mut s.pods[0]).deleting = true;
    // A fresh planner sees only the cluster: it evicts what is left.
    let d = plan_it(&s, &c);
    assert!(
        matches!(&d.action, Action::Drain { pods, .. } if pods.len() == 1 && pods[0].name == "p2"),
        "{d:#?}"
    );
    assert!(s.nodes[0].annotations.contains_key(ANNOTATION_CORDONED_AT));
}

#[test]
fn empty_nodes_go_together_and_are_deleted_together() {
    let c = mk_config("freeMemoryTarget: 0 B\nscaleDown: {delayAfterAdd: 1m}\ndisruption: {budgets: [{nodes: 5}]}");
    let mut s = three_nodes(&c);
    mk_member(&mut s, "dev-workers-d", 3600);
    s.pods.push(mk_pod("p", Some("dev-workers-a"), GI).into());
    let d = plan_after_unneeded(&s, &c, 3600);
    let mut nodes = cordoned_nodes(&d);
    nodes.sort();
    assert_eq!(
        nodes,
        vec!["dev-workers-b", "dev-workers-c", "dev-workers-d"],
        "{d:#?}"
    );
    for n in s.nodes.iter_mut().skip(1) {
        cordon_by_us(n, "empty", 30);
    }
    let d = plan_it(&s, &c);
    assert!(
        matches!(&d.action, Action::DeleteNodes { nodes } if nodes.len() == 3),
        "{d:#?}"
    );
}

#[test]
fn budgets_limit_disruption_and_follow_their_schedule() {
    // Two nodes at most, none during working hours (Mondays 08:00 UTC for 10 h).
    let budgets =
        "disruption: {budgets: [{nodes: 2}, {nodes: 0, schedule: \"0 8 * * 1\", duration: 10h}]}";
    let c = mk_config(&format!(
        "freeMemoryTarget: 0 B\nscaleDown: {{delayAfterAdd: 1m}}\n{budgets}"
    ));
    let mut s = three_nodes(&c);
    mk_member(&mut s, "dev-workers-d", 3600);
    s.pods.push(mk_pod("p", Some("dev-workers-a"), GI).into());
    let d = plan_after_unneeded(&s, &c, 3600);
    assert_eq!(cordoned_nodes(&d).len(), 2, "{d:#?}");
    // now() is a Sunday evening; the next morning at 09:00 the second budget is active.
    let monday_9 = UNIX_EPOCH + Duration::from_secs(1_900_054_800);
    assert_eq!(
        humantime::format_rfc3339_seconds(monday_9).to_string(),
        "2030-03-18T09:00:00Z"
    );
    let mut s2 = s.clone();
    for n in &mut s2.nodes {
        n.created = monday_9 - Duration::from_secs(3600);
        n.annotations.insert(
            ANNOTATION_UNNEEDED_SINCE.into(),
            humantime::format_rfc3339_seconds(monday_9 - Duration::from_secs(3600)).to_string(),
        );
    }
    let d = plan(&s2, &c, monday_9);
    assert!(cordoned_nodes(&d).is_empty(), "{d:#?}");
    assert!(
        d.has_reason(ReasonCode::DisruptionBudgetExhausted),
        "{d:#?}"
    );
}

#[test]
fn drifted_nodes_are_replaced_within_the_budget() {
    let c = mk_config("freeMemoryTarget: 0 B");
    let mut s = three_nodes(&c);
    let current = c.node_groups[0].settings_hash.clone();
    assert!(!current.is_empty());
    for n in &mut s.nodes {
        n.labels.insert(LABEL_SETTINGS_HASH.into(), current.clone());
    }
    s.nodes[1]
        .labels
        .insert(LABEL_SETTINGS_HASH.into(), "0123456789ab".into());
    s.pods.push(mk_pod("p", Some("dev-workers-b"), GI).into());
    let d = plan_it(&s, &c);
    assert_eq!(
        cordoned_nodes(&d),
        vec!["dev-workers-b".to_string()],
        "{d:#?}"
    );
    assert_eq!(disruption(&d), Some(DisruptionReason::Drifted));
    assert!(d.has_reason(ReasonCode::NodeDrifted));
    // With drift replacement off, nothing happens.
    let off = mk_config("freeMemoryTarget: 0 B\ndisruption: {drift: false}");
    let d = plan_it(&s, &off);
    assert!(disruption(&d) != Some(DisruptionReason::Drifted), "{d:#?}");
}

#[test]
fn too_many_unready_nodes_stop_disruption_but_not_scale_up() {
    let c =
        mk_config("freeMemoryTarget: 0 B\nhealth: {okUnreadyCount: 1, maxUnreadyPercentage: 45}");
    let mut s = three_nodes(&c);
    for n in s.nodes.iter_mut().take(2) {
        n.ready = false;
        n.ready_changed = Some(ago(3600));
    }
    let d = plan_it(&s, &c);
    assert!(cordoned_nodes(&d).is_empty(), "{d:#?}");
    assert!(d.has_reason(ReasonCode::TooManyUnready), "{d:#?}");
    s.pods
        .push(mk_pod("fills-c", Some("dev-workers-c"), 7 * GI).into());
    s.pods.push(mk_pod("pending", None, 6 * GI).into());
    let d = plan_it(&s, &c);
    assert!(matches!(d.action, Action::ScaleUp { .. }), "{d:#?}");
}

#[test]
fn a_cordon_record_left_on_an_uncordoned_node_is_forgotten_first() {
    let c = mk_config("freeMemoryTarget: 0 B");
    let mut s = three_nodes(&c);
    cordon_by_us(&mut s.nodes[0], "unhealthy", 3600);
    // Someone uncordoned it; the record stayed.
    s.nodes[0].unschedulable = false;
    let d = plan_it(&s, &c);
    assert!(
        matches!(&d.action, Action::ForgetCordon { nodes } if nodes == &["dev-workers-a".to_string()]),
        "{d:#?}"
    );
    // Were it cordoned again by a person with the record still there, it would pass for
    // nodewright's and be deleted at once (an hour-old unhealthy cordon is past its
    // deadline): the record goes before anything else can read it.
    assert_eq!(STEPS[0].0, "finish-provisioning");
    assert!(
        STEPS.iter().position(|s| s.0 == "forget-stale-cordons")
            < STEPS.iter().position(|s| s.0 == "remove-empty")
    );
}

#[test]
fn vm_in_error_with_a_not_ready_node_running_pods_goes_through_the_drain() {
    let c = mk_config("freeMemoryTarget: 0 B");
    let mut s = three_nodes(&c);
    s.servers[0].status = ServerStatus::Error;
    s.nodes[0].ready = false;
    s.nodes[0].ready_changed = Some(ago(60));
    s.pods.push(mk_pod("web", Some("dev-workers-a"), GI).into());
    let d = plan_it(&s, &c);
    assert!(!matches!(d.action, Action::DeleteServers { .. }), "{d:#?}");
    assert_eq!(
        cordoned_nodes(&d),
        vec!["dev-workers-a".to_string()],
        "{d:#?}"
    );
}

#[test]
fn a_pod_selected_by_two_budgets_blocks_its_node() {
    let c = mk_config("freeMemoryTarget: 0 B\nscaleDown: {delayAfterAdd: 1m}");
    let mut s = Snapshot::default();
    mk_member(&mut s, "dev-workers-a", 3600);
    mk_member(&mut s, "dev-workers-b", 3600);
    s.pods
        .push(mk_pod("big", Some("dev-workers-a"), 3 * GI).into());
    let mut p = mk_pod("db-0", Some("dev-workers-b"), GI);
    p.labels.insert("app".into(), "db".into());
    s.pods.push(p.into());
    for name in ["one", "two"] {
        s.pdbs.push(PdbInfo {
            namespace: "default".into(),
            name: name.into(),
            selector: Some(LabelSelector::default()),
            disruptions_allowed: 5,
        });
    }
    let d = plan_after_unneeded(&s, &c, 3600);
    assert!(cordoned_nodes(&d).is_empty(), "{d:#?}");
}

#[test]
fn a_user_pod_carrying_the_image_puller_label_is_not_ignored_by_the_drain() {
    let c = mk_config("freeMemoryTarget: 0 B");
    let mut s = three_nodes(&c);
    cordon_by_us(&mut s.nodes[0], "underutilized", 60);
    let mut p = mk_pod("imposter", Some("dev-workers-a"), GI);
    p.labels
        .insert(crate::model::LABEL_IMAGE_PULLER.into(), "true".into());
    s.pods.push(p.into());
    let d = plan_it(&s, &c);
    assert!(!matches!(d.action, Action::DeleteNodes { .. }), "{d:#?}");
    assert!(
        matches!(&d.action, Action::Drain { pods, .. } if pods[0].name == "imposter"),
        "{d:#?}"
    );
}

#[test]
fn no_second_voluntary_removal_while_a_drain_is_under_way() {
    let c = mk_config("freeMemoryTarget: 0 B\nscaleDown: {delayAfterAdd: 1m}");
    let mut s = three_nodes(&c);
    mk_member(&mut s, "dev-workers-d", 3600);
    cordon_by_us(&mut s.nodes[0], "underutilized", 60);
    let mut p = mk_pod("db-0", Some("dev-workers-a"), GI);
    p.labels.insert("app".into(), "db".into());
    s.pods.push(p.into());
    s.pdbs.push(PdbInfo {
        namespace: "default".into(),
        name: "db".into(),
        selector: Some(LabelSelector::default()),
        disruptions_allowed: 0,
    });
    let d = plan_after_unneeded(&s, &c, 3600);
    assert!(cordoned_nodes(&d).is_empty(), "{d:#?}");
}

#[test]
fn after_an_abandoned_drain_replacements_wait_for_delay_after_failure() {
    let c = mk_config("freeMemoryTarget: 0 B\nscaleDown: {delayAfterFailure: 5m}");
    let mut s = three_nodes(&c);
    s.nodes[0].created = ago(100 * 3600);
    s.last_disruption_failure = Some(ago(60));
    let d = plan_it(&s, &c);
    assert!(cordoned_nodes(&d).is_empty(), "{d:#?}");
    s.last_disruption_failure = Some(ago(600));
    let d = plan_it(&s, &c);
    assert_eq!(
        cordoned_nodes(&d),
        vec!["dev-workers-a".to_string()],
        "{d:#?}"
    );
}

#[test]
fn job_grace_is_not_cut_short_by_the_drain_timeout() {
    let c = mk_config("freeMemoryTarget: 0 B\ndrain: {jobGracePeriod: 1h, timeout: 10m}");
    let mut s = three_nodes(&c);
    cordon_by_us(&mut s.nodes[0], "expired", 30 * 60);
    let mut job = mk_pod("batch-1", Some("dev-workers-a"), GI);
    job.controller_kind = Some("Job".into());
    s.pods.push(job.into());
    let d = plan_it(&s, &c);
    assert!(
        !matches!(d.action, Action::Uncordon { .. } | Action::Drain { .. }),
        "{d:#?}"
    );
}

/// Regression (issue 19 G): a VM the cloud reported in ERROR while its node was Ready went
/// the forced path at once, so a bare pod (and do-not-disrupt, emptyDir, kube-system
/// pods) would be evicted. Its node still runs them: it is replaced by the voluntary
/// rules, and a pod that blocks a drain keeps it.
#[test]
fn a_ready_node_whose_vm_the_cloud_calls_error_keeps_its_bare_pod() {
    let c = mk_config("freeMemoryTarget: 0 B");
    let mut s = three_nodes(&c);
    s.servers[0].status = ServerStatus::Error;
    let mut bare = mk_pod("bare", Some("dev-workers-a"), GI);
    bare.controller_kind = None;
    bare.controller_name = None;
    s.pods.push(bare.into());
    let d = plan_it(&s, &c);
    assert!(cordoned_nodes(&d).is_empty(), "{d:#?}");
    assert!(
        d.notes
            .iter()
            .any(|n| n.code == ReasonCode::DrainBlocked && n.message.contains("dev-workers-a")),
        "{d:#?}"
    );
    // Not Ready as well: broken, so forced, as before.
    s.nodes[0].ready = false;
    s.nodes[0].ready_changed = Some(ago(60));
    let d = plan_it(&s, &c);
    assert_eq!(cordoned_nodes(&d), ["dev-workers-a"], "{d:#?}");
    assert_eq!(disruption(&d), Some(DisruptionReason::Unhealthy));
}

/// Regression (issue 19 G): the unhealthy mark was sticky, so a node cordoned while
/// broken was drained by force (bare pods evicted) after it was Ready again. Judged
/// again every cycle: Ready again, its drain follows the voluntary rules.
#[test]
fn a_node_cordoned_as_unhealthy_that_is_ready_again_drains_by_the_voluntary_rules() {
    let c = mk_config("freeMemoryTarget: 0 B");
    let mut s = three_nodes(&c);
    // The VM is still in error (so the node is not given back), its node Ready again.
    s.servers[0].status = ServerStatus::Error;
    cordon_by_us(&mut s.nodes[0], "unhealthy", 60);
    let mut bare = mk_pod("bare", Some("dev-workers-a"), GI);
    bare.controller_kind = None;
    bare.controller_name = None;
    s.pods.push(bare.into());
    s.pods.push(mk_pod("web", Some("dev-workers-a"), GI).into());
    let d = plan_it(&s, &c);
    match &d.action {
        Action::Drain { pods, .. } => {
            let names: Vec<&str> = pods.iter().map(|p| p.name.as_str()).collect();
            assert_eq!(names, ["web"], "the bare pod stays: {d:#?}");
        }
        other => panic!("expected a drain, got {other:?}"),
    }
    // NotReady again: forced again, the bare pod goes too.
    s.nodes[0].ready = false;
    s.nodes[0].ready_changed = Some(ago(30));
    let d = plan_it(&s, &c);
    assert!(
        matches!(&d.action, Action::Drain { pods, .. } if pods.len() == 2),
        "{d:#?}"
    );
}

/// Regression (issue 19 G): a node cordoned as unhealthy whose node and VM both recovered
/// was still removed. It is given back.
#[test]
fn a_node_cordoned_as_unhealthy_whose_node_and_vm_recovered_is_given_back() {
    let c = mk_config("freeMemoryTarget: 0 B");
    let mut s = three_nodes(&c);
    cordon_by_us(&mut s.nodes[0], "unhealthy", 60);
    // Empty: without the re-judging it would be deleted at once.
    let d = plan_it(&s, &c);
    assert!(
        matches!(&d.action, Action::Uncordon { nodes, reason } if nodes == &["dev-workers-a"] && reason == "recovered"),
        "{d:#?}"
    );
    // Still broken (NotReady): removed as before.
    s.nodes[0].ready = false;
    s.nodes[0].ready_changed = Some(ago(900));
    let d = plan_it(&s, &c);
    assert!(
        matches!(&d.action, Action::DeleteNodes { nodes } if nodes[0].node == "dev-workers-a"),
        "{d:#?}"
    );
}

/// Regression (issue 19 A): a VM the cloud shows half-made (untagged, described for this
/// cluster) whose name a Node carries ran as a node: it lost its tags to a person. It is
/// reported as disowned, never deleted with its node and pods.
#[test]
fn a_half_made_looking_vm_with_a_node_is_disowned_not_deleted() {
    let c = mk_config("freeMemoryTarget: 0 B");
    let mut s = Snapshot::default();
    mk_member(&mut s, "dev-workers-a", 3600);
    s.servers[0].status = ServerStatus::Incomplete;
    s.servers[0].joined = None;
    s.pods.push(mk_pod("web", Some("dev-workers-a"), GI).into());
    let d = plan_it(&s, &c);
    assert!(!matches!(d.action, Action::DeleteServers { .. }), "{d:#?}");
    assert!(d.has_reason(ReasonCode::NodeDisowned), "{d:#?}");
    // Its node NotReady too: still not half-made.
    s.nodes[0].ready = false;
    let d = plan_it(&s, &c);
    assert!(!matches!(d.action, Action::DeleteServers { .. }), "{d:#?}");
    // Without any node it is half-made, and goes.
    s.nodes.clear();
    s.pods.clear();
    let d = plan_it(&s, &c);
    assert!(matches!(d.action, Action::DeleteServers { .. }), "{d:#?}");
}

/// Issue 19 A and B: VMs the provider found carrying this cluster's marks but not its
/// (a copy, a VM that lost its tag) are noted every cycle and counted per group.
#[test]
fn stray_vms_are_reported_in_the_plan_and_counted_per_group() {
    use crate::model::{Stray, StrayKind};
    let c = mk_config("freeMemoryTarget: 0 B");
    let mut s = Snapshot::default();
    mk_member(&mut s, "dev-workers-a", 3600);
    s.strays.push(Stray {
        provider: "proxmox".into(),
        id: "130".into(),
        name: "Copy-of-VM-dev-workers-a".into(),
        group: Some("workers".into()),
        kind: StrayKind::Copied { of: "105".into() },
    });
    s.strays.push(Stray {
        provider: "proxmox".into(),
        id: "106".into(),
        name: "dev-workers-b".into(),
        group: Some("workers".into()),
        kind: StrayKind::Disowned,
    });
    let d = plan_it(&s, &c);
    let copied = d
        .notes
        .iter()
        .find(|n| n.code == ReasonCode::VmCopied)
        .expect("the copy is noted");
    assert!(copied.message.contains("is a copy of VM 105"), "{copied:?}");
    assert!(d.notes.iter().any(|n| n.code == ReasonCode::VmDisowned));
    let sum = crate::plan::summary::summarize(&s, &c, now());
    let states = &sum.groups["workers"].states;
    assert_eq!((states["copied"], states["disowned"]), (1, 1), "{states:?}");
    // Neither counts against maxSize.
    assert_eq!(sum.groups["workers"].size, 1);
}

//! The hard limit of an expired node's drain, `drain.terminationGracePeriod` (issue 8:
//! "unless the removal is forced (expired past a hard limit, unhealthy)").

use super::*;
use crate::config::DisruptionReason;
use crate::model::{LabelSelector, KARPENTER_DO_NOT_DISRUPT};

const WITH_LIMIT: &str = "freeMemoryTarget: 0 B\ndrain: {timeout: 10m, terminationGracePeriod: 1h}";
const WITHOUT_LIMIT: &str = "freeMemoryTarget: 0 B\ndrain: {timeout: 10m}";

/// Three nodes; `dev-workers-a` is past `oldNodeAgeLimit` (72h) and runs `pod`.
fn old_node_running(pod: PodInfo) -> Snapshot {
    let mut s = Snapshot::default();
    for n in ["dev-workers-a", "dev-workers-b", "dev-workers-c"] {
        mk_member(&mut s, n, 3600);
    }
    s.nodes[0].created = ago(100 * 3600);
    s.pods.push(pod.into());
    s
}

fn do_not_disrupt() -> PodInfo {
    let mut p = mk_pod("pinned", Some("dev-workers-a"), GI);
    p.annotations
        .insert(KARPENTER_DO_NOT_DISRUPT.into(), "true".into());
    p
}

fn evicted(d: &Decision) -> Vec<String> {
    match &d.action {
        Action::Drain { pods, .. } => pods.iter().map(|p| p.name.clone()).collect(),
        _ => Vec::new(),
    }
}

fn deleted(d: &Decision) -> Vec<String> {
    match &d.action {
        Action::DeleteNodes { nodes } => nodes.iter().map(|t| t.node.clone()).collect(),
        _ => Vec::new(),
    }
}

#[test]
fn expired_node_blocked_by_do_not_disrupt_is_drained_forcibly_and_deleted_past_the_hard_limit() {
    let limit = mk_config(WITH_LIMIT);
    let none = mk_config(WITHOUT_LIMIT);
    let mut s = old_node_running(do_not_disrupt());
    // Without a hard limit the blocked node is never chosen; with one it is.
    let d = plan_it(&s, &none);
    assert!(!matches!(d.action, Action::Cordon { .. }), "{d:#?}");
    let d = plan_it(&s, &limit);
    assert!(
        matches!(&d.action, Action::Cordon { nodes, disruption: DisruptionReason::Expired, .. }
            if nodes == &["dev-workers-a".to_string()]),
        "{d:#?}"
    );
    assert!(d.has_reason(ReasonCode::DrainBlocked), "{d:#?}");

    // Past drain.timeout but within the limit: not given back, the blocker waits.
    cordon_by_us(&mut s.nodes[0], "expired", 30 * 60);
    let d = plan_it(&s, &none);
    assert!(matches!(d.action, Action::Uncordon { .. }), "{d:#?}");
    let d = plan_it(&s, &limit);
    assert!(
        !matches!(
            d.action,
            Action::Uncordon { .. } | Action::Drain { .. } | Action::DeleteNodes { .. }
        ),
        "{d:#?}"
    );
    assert!(
        d.notes.iter().any(|n| n.code == ReasonCode::DrainBlocked
            && n.message.contains("drain.terminationGracePeriod")),
        "{d:#?}"
    );

    // Past the limit: evicted whatever its annotation says...
    cordon_by_us(&mut s.nodes[0], "expired", 61 * 60);
    let d = plan_it(&s, &limit);
    assert_eq!(evicted(&d), ["pinned"], "{d:#?}");
    // ...its termination is waited for up to drain.timeout more...
    std::sync::Arc::make_mut(&mut s.pods[0]).deleting = true;
    let d = plan_it(&s, &limit);
    assert!(deleted(&d).is_empty(), "{d:#?}");
    // ...then the node goes, with whatever is left.
    cordon_by_us(&mut s.nodes[0], "expired", 71 * 60);
    let d = plan_it(&s, &limit);
    assert_eq!(deleted(&d), ["dev-workers-a"], "{d:#?}");
    assert!(d.has_reason(ReasonCode::NodeTooOld), "{d:#?}");
}

/// Issue 19, item S: past the hard limit the node and its VM went with the pods a
/// PodDisruptionBudget held still running. They are deleted first (gracefully, as
/// Karpenter does past its terminationGracePeriod), waited for, then the node goes.
#[test]
fn pods_a_pdb_holds_are_deleted_before_their_expired_node_past_the_hard_limit() {
    let c = mk_config(WITH_LIMIT);
    let mut db = mk_pod("db-0", Some("dev-workers-a"), GI);
    db.labels.insert("app".into(), "db".into());
    let mut s = old_node_running(db);
    s.pdbs.push(PdbInfo {
        namespace: "default".into(),
        name: "db".into(),
        selector: Some(LabelSelector::default()),
        disruptions_allowed: 0,
    });
    cordon_by_us(&mut s.nodes[0], "expired", 50 * 60);
    let d = plan_it(&s, &c);
    assert!(
        deleted(&d).is_empty()
            && !matches!(
                d.action,
                Action::Uncordon { .. } | Action::DeletePodsPastLimit { .. }
            ),
        "{d:#?}"
    );
    // Past the limit: the Eviction API would refuse it for ever, so it is deleted.
    cordon_by_us(&mut s.nodes[0], "expired", 61 * 60);
    let d = plan_it(&s, &c);
    assert!(deleted(&d).is_empty(), "{d:#?}");
    match &d.action {
        Action::DeletePodsPastLimit { nodes, pods } => {
            assert_eq!(nodes, &["dev-workers-a".to_string()]);
            assert_eq!(pods.len(), 1);
            assert_eq!(pods[0].name, "db-0");
        }
        other => panic!("expected the pod to be deleted first, got {other:?}"),
    }
    // Terminating: waited for (not deleted again)...
    std::sync::Arc::make_mut(&mut s.pods[0]).deleting = true;
    let d = plan_it(&s, &c);
    assert!(
        deleted(&d).is_empty() && !matches!(d.action, Action::DeletePodsPastLimit { .. }),
        "{d:#?}"
    );
    // ...gone: the node goes.
    s.pods.clear();
    let d = plan_it(&s, &c);
    assert_eq!(deleted(&d), ["dev-workers-a"], "{d:#?}");
    // A pod that never goes holds it at most drain.timeout past the limit.
    let mut stuck = mk_pod("db-0", Some("dev-workers-a"), GI);
    stuck.deleting = true;
    s.pods.push(stuck.into());
    cordon_by_us(&mut s.nodes[0], "expired", 71 * 60);
    let d = plan_it(&s, &c);
    assert_eq!(deleted(&d), ["dev-workers-a"], "{d:#?}");
}

#[test]
fn past_the_hard_limit_bare_and_job_pods_are_evicted_too() {
    let c = mk_config(&format!("{WITH_LIMIT}\n").replace("1h}", "1h, jobGracePeriod: 2h}"));
    let mut bare = mk_pod("bare", Some("dev-workers-a"), GI);
    bare.controller_kind = None;
    let mut s = old_node_running(bare);
    let mut job = mk_pod("batch", Some("dev-workers-a"), GI);
    job.controller_kind = Some("Job".into());
    s.pods.push(job.into());
    cordon_by_us(&mut s.nodes[0], "expired", 30 * 60);
    let d = plan_it(&s, &c);
    assert!(evicted(&d).is_empty(), "{d:#?}");
    // The hard limit cuts drain.jobGracePeriod short.
    cordon_by_us(&mut s.nodes[0], "expired", 61 * 60);
    let d = plan_it(&s, &c);
    let mut names = evicted(&d);
    names.sort();
    assert_eq!(names, ["bare", "batch"], "{d:#?}");
}

#[test]
fn expired_node_past_the_hard_limit_waits_for_its_volumes_only_so_long() {
    let c = mk_config(WITH_LIMIT);
    let mut s = old_node_running(do_not_disrupt());
    s.pods.clear();
    s.volume_attachments
        .push(("csi-1".into(), "dev-workers-a".into()));
    cordon_by_us(&mut s.nodes[0], "expired", 61 * 60);
    let d = plan_it(&s, &c);
    assert!(deleted(&d).is_empty(), "{d:#?}");
    assert!(d.has_reason(ReasonCode::VolumesAttached), "{d:#?}");
    cordon_by_us(&mut s.nodes[0], "expired", 71 * 60);
    let d = plan_it(&s, &c);
    assert_eq!(deleted(&d), ["dev-workers-a"], "{d:#?}");
}

#[test]
fn the_hard_limit_needs_a_node_lifetime_and_a_duration() {
    let err = |extra: &str| {
        let dir = std::env::temp_dir();
        std::fs::write(dir.join("nodewright-plan-test.j2"), "#cloud-config\n")
            .expect("temp dir is writable");
        let text = format!(
            "clusterName: dev\nfreeMemoryTarget: 1 GiB\ntemplatesDir: {}\n{extra}\nnodeGroups:\n- name: workers\n  provider: openstack\n  maxSize: 5\n  openstack: {{flavor: m1.large, image: fcos}}\n  userData: {{template: nodewright-plan-test.j2}}\n",
            dir.display()
        );
        match Config::parse(&text, Path::new("/")) {
            Ok(_) => String::new(),
            Err(e) => e.to_string(),
        }
    };
    let e = err("drain: {terminationGracePeriod: 48h}");
    assert!(
        e.contains("drain.terminationGracePeriod") && e.contains("oldNodeAgeLimit"),
        "{e}"
    );
    assert_eq!(
        err("oldNodeAgeLimit: 720h\ndrain: {terminationGracePeriod: 48h}"),
        ""
    );
    let e = err("oldNodeAgeLimit: 720h\ndrain: {terminationGracePeriod: two days}");
    assert!(e.contains("drain.terminationGracePeriod"), "{e}");
    let e = err("oldNodeAgeLimit: 720h\ndrain: {terminationGracePeriod: 0s}");
    assert!(e.contains("at least 1s"), "{e}");
    let e = err("oldNodeAgeLimit: 720h\ndrain: {terminationGracePeriode: 48h}");
    assert!(e.contains("did you mean `terminationGracePeriod`"), "{e}");
}

//! Issue 19, volumes: a pod whose data is on a volume only its node can reach (k3s's
//! `local-path`, `local` PVs, OpenEBS LocalPV) pins that node; pending pods fit only the
//! nodes their volumes allow.

use std::path::Path;

use super::*;
use crate::config::DisruptionReason;
use crate::model::{
    volumes::HOSTNAME_LABEL, ClaimInfo, ClassInfo, NodeSelectorTerm, Operator, PodClaim, PvInfo,
    Requirement, ANNOTATION_UNNEEDED_SINCE, CA_SAFE_TO_EVICT, CA_SAFE_TO_EVICT_LOCAL_VOLUMES,
};

const A: &str = "dev-workers-a";
const B: &str = "dev-workers-b";
const C: &str = "dev-workers-c";

/// `mk_config` with settings for the group (`group`) as well as the top level.
pub(super) fn config(extra: &str, group: &str) -> Config {
    let dir = std::env::temp_dir();
    std::fs::write(dir.join("nodewright-plan-test.j2"), "#cloud-config\n")
        .expect("temp dir is writable");
    let text = format!(
        r#"
clusterName: dev
freeMemoryTarget: 0 B
provisionTimeout: 10m
oldNodeAgeLimit: 72h
scaleDown: {{delayAfterAdd: 1m}}
templatesDir: {dir}
{extra}
nodeGroups:
- name: workers
  provider: openstack
  minSize: 0
  maxSize: 5
  nodeMemory: 8 GiB
  openstack: {{flavor: m1.large, image: fcos}}
  userData: {{template: nodewright-plan-test.j2}}
{group}
"#,
        dir = dir.display()
    );
    Config::parse(&text, Path::new("/")).expect("test config is valid")
}

pub(super) fn hostname_is(host: &str) -> Vec<NodeSelectorTerm> {
    vec![NodeSelectorTerm {
        expressions: vec![Requirement {
            key: HOSTNAME_LABEL.into(),
            operator: Operator::In,
            values: vec![host.into()],
        }],
        fields: Vec::new(),
    }]
}

/// A pod of a ReplicaSet on `node` (None: pending) whose volume `data` is a
/// `local-path` claim bound to a PV on `pv_node`.
fn with_local_volume(s: &mut Snapshot, pod: &str, node: Option<&str>, pv_node: &str) {
    with_volume(s, pod, node, hostname_is(pv_node));
}

/// A pod of a ReplicaSet on `node` whose volume `data` is bound to a PV whose required
/// node affinity is `affinity`.
fn with_volume(s: &mut Snapshot, pod: &str, node: Option<&str>, affinity: Vec<NodeSelectorTerm>) {
    let claim = format!("{pod}-data");
    let pv = format!("pvc-{pod}");
    let pv_node = node.unwrap_or_default();
    s.volumes.pvs.push(PvInfo {
        name: pv.clone(),
        node_affinity: Some(affinity),
        local: false,
        csi_driver: None,
        claim: Some(("default".into(), claim.clone())),
        disposable: false,
    });
    s.volumes.claims.push(ClaimInfo {
        namespace: "default".into(),
        name: claim.clone(),
        volume_name: Some(pv),
        storage_class: Some("local-path".into()),
        selected_node: (!pv_node.is_empty()).then(|| pv_node.into()),
        disposable: false,
    });
    let mut p = mk_pod(pod, node, GI);
    p.claims.push(PodClaim {
        volume: "data".into(),
        claim,
    });
    s.pods.push(p.into());
}

pub(super) fn unneeded_since(s: &mut Snapshot, secs: u64) {
    for n in &mut s.nodes {
        n.annotations.insert(
            ANNOTATION_UNNEEDED_SINCE.into(),
            humantime::format_rfc3339_seconds(ago(secs)).to_string(),
        );
    }
}

pub(super) fn cordoned(d: &Decision) -> Vec<String> {
    match &d.action {
        Action::Cordon { nodes, .. } => nodes.clone(),
        _ => Vec::new(),
    }
}

/// A (busy), B and C (each one small pod; B's keeps its data on B's disk).
fn consolidation_world(c: &Config) -> Snapshot {
    let mut s = Snapshot::default();
    for n in [A, B, C] {
        mk_member(&mut s, n, 3600);
    }
    s.pods.push(mk_pod("big", Some(A), 3 * GI).into());
    with_local_volume(&mut s, "db", Some(B), B);
    s.pods.push(mk_pod("web", Some(C), GI).into());
    unneeded_since(&mut s, 3600);
    s.resolve_volumes(c);
    s
}

#[test]
fn an_underused_node_holding_a_local_path_volume_is_kept_and_plan_names_the_pod_and_volume() {
    let c = config("", "");
    let s = consolidation_world(&c);
    let d = plan_it(&s, &c);
    let k = d
        .unremovable
        .iter()
        .find(|u| u.node == B)
        .unwrap_or_else(|| panic!("{B} not reported kept: {d:#?}"));
    assert_eq!(k.reason, KeptReason::LocalVolume, "{d:#?}");
    assert_eq!(k.pod.as_ref().map(|p| p.name.as_str()), Some("db"));
    assert_eq!(k.pod_reason.as_deref(), Some("local-volume"));
    assert!(
        k.detail.contains("pvc-db") && k.detail.contains("db-data") && k.detail.contains(B),
        "{k:?}"
    );
    let json = serde_json::to_value(&d).expect("json");
    assert!(json["unremovable"]
        .as_array()
        .is_some_and(|l| l.iter().any(|u| u["reason"] == "local-volume")));
    // The equivalent node without such a pod is the one that goes.
    assert_eq!(cordoned(&d), vec![C.to_string()], "{d:#?}");
}

fn label_is(key: &str, value: &str) -> Vec<NodeSelectorTerm> {
    vec![NodeSelectorTerm {
        expressions: vec![Requirement {
            key: key.into(),
            operator: Operator::In,
            values: vec![value.into()],
        }],
        fields: Vec::new(),
    }]
}

/// A (busy), B and C as in [`consolidation_world`], each labelled `openebs.io/nodename`
/// with its name as OpenEBS's node plugin does; B's pod keeps its data on an OpenEBS
/// LocalPV whose affinity is `affinity`.
fn openebs_world(c: &Config, affinity: Vec<NodeSelectorTerm>) -> Snapshot {
    let mut s = Snapshot::default();
    for n in [A, B, C] {
        mk_member(&mut s, n, 3600);
    }
    for n in &mut s.nodes {
        n.labels
            .insert("openebs.io/nodename".into(), n.name.clone());
    }
    s.pods.push(mk_pod("big", Some(A), 3 * GI).into());
    with_volume(&mut s, "db", Some(B), affinity);
    s.pods.push(mk_pod("web", Some(C), GI).into());
    unneeded_since(&mut s, 3600);
    s.resolve_volumes(c);
    s
}

#[test]
fn an_underused_node_holding_an_openebs_local_pv_by_openebs_io_nodename_is_kept_and_plan_names_the_pod_and_volume(
) {
    let c = config("", "");
    let s = openebs_world(&c, label_is("openebs.io/nodename", B));
    let d = plan_it(&s, &c);
    let k = d
        .unremovable
        .iter()
        .find(|u| u.node == B)
        .unwrap_or_else(|| panic!("{B} not reported kept: {d:#?}"));
    assert_eq!(k.reason, KeptReason::LocalVolume, "{d:#?}");
    assert_eq!(k.pod.as_ref().map(|p| p.name.as_str()), Some("db"));
    assert!(k.detail.contains("pvc-db") && k.detail.contains(B), "{k:?}");
    assert_eq!(cordoned(&d), vec![C.to_string()], "{d:#?}");
}

#[test]
fn a_volume_a_new_node_of_the_group_could_reach_does_not_keep_its_node() {
    let c = config("", "");
    // Every node of group workers, new ones too, reaches it: B's pod can move.
    let s = openebs_world(&c, label_is(crate::model::LABEL_GROUP, "workers"));
    let d = plan_it(&s, &c);
    assert!(
        !d.unremovable
            .iter()
            .any(|u| u.reason == KeptReason::LocalVolume),
        "{d:#?}"
    );
    assert!(s.pods.iter().all(|p| p.local_volumes.is_empty()));
    assert_eq!(cordoned(&d).len(), 1, "{d:#?}");
}

#[test]
fn a_local_volume_pins_its_node_even_with_the_opt_ins_for_consolidation() {
    let c = config("", "  allowLocalVolumeLoss: true");
    let mut s = consolidation_world(&c);
    // C's pod cannot move (it alone is kept for that), so only B could be taken.
    s.pods.retain(|p| p.name != "web");
    for p in &mut s.pods {
        std::sync::Arc::make_mut(p)
            .annotations
            .insert(CA_SAFE_TO_EVICT_LOCAL_VOLUMES.into(), "data".into());
    }
    let d = plan_it(&s, &c);
    assert!(!cordoned(&d).contains(&B.to_string()), "{d:#?}");
    assert!(d
        .unremovable
        .iter()
        .any(|u| u.node == B && u.reason == KeptReason::LocalVolume));
}

/// An expired node (B) whose pod keeps its data there, and a young node with room.
fn expired_world(c: &Config, annotate: Option<&str>) -> Snapshot {
    let mut s = Snapshot::default();
    mk_member(&mut s, A, 3600);
    mk_member(&mut s, B, 80 * 3600);
    with_local_volume(&mut s, "db", Some(B), B);
    if let Some(list) = annotate {
        let p = s.pods.last_mut().expect("pod");
        std::sync::Arc::make_mut(p)
            .annotations
            .insert(CA_SAFE_TO_EVICT_LOCAL_VOLUMES.into(), list.into());
    }
    s.resolve_volumes(c);
    s
}

#[test]
fn an_expired_node_with_a_local_volume_is_not_replaced_and_the_plan_says_why() {
    let c = config("", "");
    let d = plan_it(&expired_world(&c, None), &c);
    assert!(cordoned(&d).is_empty(), "{d:#?}");
    assert!(
        d.notes.iter().any(|n| n.code == ReasonCode::DrainBlocked
            && n.message.contains("default/db")
            && n.message.contains("pvc-db")),
        "{d:#?}"
    );
}

#[test]
fn safe_to_evict_true_does_not_give_up_a_local_volume() {
    let c = config("", "");
    let mut s = expired_world(&c, None);
    let p = s.pods.last_mut().expect("pod");
    std::sync::Arc::make_mut(p)
        .annotations
        .insert(CA_SAFE_TO_EVICT.into(), "true".into());
    let d = plan_it(&s, &c);
    assert!(cordoned(&d).is_empty(), "{d:#?}");
}

#[test]
fn listing_every_local_volume_in_safe_to_evict_local_volumes_lets_expiry_replace_the_node() {
    let c = config("", "");
    let d = plan_it(&expired_world(&c, Some("cache, data")), &c);
    assert_eq!(cordoned(&d), vec![B.to_string()], "{d:#?}");
    // Listing another volume only is not enough.
    let d = plan_it(&expired_world(&c, Some("cache")), &c);
    assert!(cordoned(&d).is_empty(), "{d:#?}");
}

#[test]
fn allow_local_volume_loss_on_the_group_lets_expiry_replace_the_node() {
    let c = config("", "  allowLocalVolumeLoss: true");
    let d = plan_it(&expired_world(&c, None), &c);
    assert_eq!(cordoned(&d), vec![B.to_string()], "{d:#?}");
}

#[test]
fn a_hard_limit_does_not_force_out_a_pod_with_a_local_volume() {
    let c = config("drain: {timeout: 10m, terminationGracePeriod: 1h}", "");
    let d = plan_it(&expired_world(&c, None), &c);
    assert!(cordoned(&d).is_empty(), "{d:#?}");
    // A node already cordoned for expiry and past its limit keeps the pod too.
    let mut s = expired_world(&c, None);
    cordon_by_us(&mut s.nodes[1], "expired", 3 * 3600);
    let d = plan_it(&s, &c);
    assert!(
        !matches!(&d.action, Action::Drain { pods, .. } if pods.iter().any(|p| p.name == "db")),
        "{d:#?}"
    );
    assert!(!matches!(d.action, Action::DeleteNodes { .. }), "{d:#?}");
}

/// Issue 29, item 5: a broken node may come back with its disk, so its local volume's
/// pod is not evicted (it was, before: the pod went Pending for ever and the VM went).
#[test]
fn an_unhealthy_node_keeps_its_local_volume_pod() {
    let c = config("", "");
    let mut s = expired_world(&c, None);
    cordon_by_us(&mut s.nodes[1], "unhealthy", 10);
    s.nodes[1].ready = false;
    let d = plan_it(&s, &c);
    assert!(
        !matches!(&d.action, Action::Drain { pods, .. } if pods.iter().any(|p| p.name == "db")),
        "{d:#?}"
    );
    let _ = DisruptionReason::Unhealthy;
}

#[test]
fn a_pending_pod_whose_local_volume_node_is_gone_is_no_capacity_and_gets_no_node() {
    let c = config("", "");
    let mut s = Snapshot::default();
    mk_member(&mut s, A, 3600);
    with_local_volume(&mut s, "db", None, "dev-workers-gone");
    s.resolve_volumes(&c);
    let d = plan_it(&s, &c);
    assert!(!matches!(d.action, Action::ScaleUp { .. }), "{d:#?}");
    assert_eq!(d.bucket_of("default", "db"), Some(Bucket::NoCapacity));
    let p = d
        .pending
        .iter()
        .find(|p| p.pod.name == "db")
        .expect("pending");
    assert!(
        p.detail.contains("dev-workers-gone") && p.detail.contains("pvc-db"),
        "{p:?}"
    );
}

#[test]
fn a_pending_pod_whose_local_volume_is_on_an_existing_full_node_gets_no_new_node() {
    let c = config("", "");
    let mut s = Snapshot::default();
    mk_member(&mut s, A, 3600);
    mk_member(&mut s, B, 3600);
    s.pods.push(mk_pod("hog", Some(A), 7 * GI).into());
    with_local_volume(&mut s, "db", None, A);
    s.resolve_volumes(&c);
    let d = plan_it(&s, &c);
    assert!(!matches!(d.action, Action::ScaleUp { .. }), "{d:#?}");
    assert_eq!(d.bucket_of("default", "db"), Some(Bucket::NoCapacity));
}

#[test]
fn a_pending_pod_with_a_zonal_volume_gets_a_node_of_the_group_in_that_zone() {
    let dir = std::env::temp_dir();
    std::fs::write(dir.join("nodewright-plan-test.j2"), "#cloud-config\n")
        .expect("temp dir is writable");
    let group = |name: &str, zone: &str| {
        format!(
            "- name: {name}\n  provider: openstack\n  minSize: 0\n  maxSize: 5\n  nodeMemory: 8 GiB\n  labels: {{topology.kubernetes.io/zone: {zone}}}\n  openstack: {{flavor: m1.large, image: fcos}}\n  userData: {{template: nodewright-plan-test.j2}}\n"
        )
    };
    let text = format!(
        "clusterName: dev\nfreeMemoryTarget: 0 B\ntemplatesDir: {}\nnodeGroups:\n{}{}",
        dir.display(),
        group("zone-a", "a"),
        group("zone-b", "b")
    );
    let c = Config::parse(&text, Path::new("/")).expect("valid");
    let zone_b = vec![NodeSelectorTerm {
        expressions: vec![Requirement {
            key: "topology.kubernetes.io/zone".into(),
            operator: Operator::In,
            values: vec!["b".into()],
        }],
        fields: Vec::new(),
    }];
    // A bound volume in zone b.
    let mut s = Snapshot::default();
    s.volumes.pvs.push(PvInfo {
        name: "disk".into(),
        node_affinity: Some(zone_b.clone()),
        local: false,
        csi_driver: None,
        claim: None,
        disposable: false,
    });
    s.volumes.claims.push(ClaimInfo {
        namespace: "default".into(),
        name: "data".into(),
        volume_name: Some("disk".into()),
        storage_class: None,
        selected_node: None,
        disposable: false,
    });
    let mut p = mk_pod("db", None, GI);
    p.claims.push(PodClaim {
        volume: "data".into(),
        claim: "data".into(),
    });
    s.pods.push(p.clone().into());
    s.resolve_volumes(&c);
    let d = plan_it(&s, &c);
    assert!(
        matches!(&d.action, Action::ScaleUp { group, .. } if group == "zone-b"),
        "{d:#?}"
    );
    // An unbound WaitForFirstConsumer claim whose class allows zone b only: the same.
    let mut s = Snapshot::default();
    s.volumes.claims.push(ClaimInfo {
        namespace: "default".into(),
        name: "data".into(),
        volume_name: None,
        storage_class: Some("zonal".into()),
        selected_node: None,
        disposable: false,
    });
    s.volumes.classes.push(ClassInfo {
        name: "zonal".into(),
        provisioner: "disk.csi.example.com".into(),
        wait_for_first_consumer: true,
        allowed_topologies: Some(zone_b),
        default: false,
    });
    s.pods.push(p.into());
    s.resolve_volumes(&c);
    let d = plan_it(&s, &c);
    assert!(
        matches!(&d.action, Action::ScaleUp { group, .. } if group == "zone-b"),
        "{d:#?}"
    );
}

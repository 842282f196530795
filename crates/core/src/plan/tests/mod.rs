//! Planner tests: small `mk_*` builders, a fixed clock, no I/O.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::*;
use crate::model::{
    normalize_image, NodeInfo, PdbInfo, PodPhase, Server, ServerStatus, Taint, Toleration,
    ANNOTATION_CORDONED, LABEL_CLUSTER, LABEL_GROUP, LABEL_IMAGE_PULLER, STARTUP_TAINT_KEY,
};

const GI: u64 = 1 << 30;

fn now() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_900_000_000)
}

fn ago(secs: u64) -> SystemTime {
    now() - Duration::from_secs(secs)
}

fn mk_config(extra: &str) -> Config {
    let dir = std::env::temp_dir();
    std::fs::write(dir.join("nodewright-plan-test.j2"), "#cloud-config\n")
        .expect("temp dir is writable");
    let target = if extra.contains("freeMemoryTarget") {
        ""
    } else {
        "freeMemoryTarget: 2 GiB"
    };
    let text = format!(
        r#"
clusterName: dev
{target}
provisionTimeout: 10m
oldNodeAgeLimit: 72h
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
"#,
        dir = dir.display()
    );
    Config::parse(&text, Path::new("/")).expect("test config is valid")
}

fn mk_server(name: &str, created: SystemTime) -> Server {
    Server {
        id: format!("id-{name}"),
        name: name.to_string(),
        cluster: Some("dev".into()),
        group: Some("workers".into()),
        status: ServerStatus::Active,
        created,
        memory_bytes: Some(8 * GI),
        provider: "openstack".into(),
        size: None,
        settings_hash: None,
        fault: None,
        warm: false,
        filling: false,
        joined: None,
        restarted: None,
        fenced: None,
        removing_since: None,
    }
}

fn mk_node(name: &str, created: SystemTime) -> NodeInfo {
    let mut labels = BTreeMap::new();
    labels.insert(LABEL_CLUSTER.to_string(), "dev".to_string());
    labels.insert(LABEL_GROUP.to_string(), "workers".to_string());
    NodeInfo {
        name: name.to_string(),
        labels,
        annotations: BTreeMap::new(),
        created,
        unschedulable: false,
        ready: true,
        taints: vec![],
        allocatable: mk_alloc(4000, 8 * GI),
        images: BTreeSet::new(),
        image_listing: Default::default(),
        deleting: false,
        ready_changed: None,
        kubelet_version: None,
    }
}

fn mk_alloc(cpu_milli: u64, memory: u64) -> crate::model::Resources {
    let mut r = crate::model::Resources::cpu_mem(cpu_milli, memory);
    r.pods = 110;
    r
}

fn mk_pod(name: &str, node: Option<&str>, memory: u64) -> PodInfo {
    let mut p = PodInfo::new("default", name);
    p.node_name = node.map(str::to_string);
    p.phase = if node.is_some() {
        PodPhase::Running
    } else {
        PodPhase::Pending
    };
    p.requests.memory = memory;
    p.unschedulable = node.is_none();
    p.unschedulable_since = node.is_none().then(|| ago(30));
    p.controller_kind = Some("ReplicaSet".into());
    p.controller_name = Some(format!("{name}-rs"));
    p.images = vec!["nginx:1.25".into()];
    p.created = ago(60);
    p
}

/// One managed node `n1` (server and node), created `age` seconds ago; its VM carries
/// the joined mark, as every VM whose node was seen Ready does.
fn mk_member(s: &mut Snapshot, name: &str, age: u64) {
    let mut server = mk_server(name, ago(age));
    server.joined = Some(ago(age.saturating_sub(30)));
    s.servers.push(server);
    let mut node = mk_node(name, ago(age - 30));
    node.images.insert(normalize_image("nginx:1.25"));
    s.nodes.push(node);
}

fn plan_it(s: &Snapshot, c: &Config) -> Decision {
    plan(s, c, now())
}

/// Marks `node` as cordoned by nodewright for `disruption`, `secs` ago.
fn cordon_by_us(node: &mut NodeInfo, disruption: &str, secs: u64) {
    node.unschedulable = true;
    node.annotations
        .insert(ANNOTATION_CORDONED.into(), format!("test: {disruption}"));
    node.annotations.insert(
        crate::model::ANNOTATION_CORDONED_AT.into(),
        humantime::format_rfc3339_seconds(ago(secs)).to_string(),
    );
    node.annotations.insert(
        crate::model::ANNOTATION_DISRUPTION.into(),
        disruption.into(),
    );
}

/// Plans; when the answer is to start unneeded clocks, starts them `unneeded` seconds
/// in the past and plans again (as after that long a later cycle would).
fn plan_after_unneeded(s: &Snapshot, c: &Config, unneeded: u64) -> Decision {
    let d = plan_it(s, c);
    let Action::MarkUnneeded { mark, .. } = &d.action else {
        return d;
    };
    let mut s = s.clone();
    for n in s.nodes.iter_mut().filter(|n| mark.contains(&n.name)) {
        n.annotations.insert(
            crate::model::ANNOTATION_UNNEEDED_SINCE.into(),
            humantime::format_rfc3339_seconds(ago(unneeded)).to_string(),
        );
    }
    plan_it(&s, c)
}

#[test]
fn empty_cluster_scales_up_to_meet_free_memory_target() {
    let c = mk_config("");
    let d = plan_it(&Snapshot::default(), &c);
    assert_eq!(
        d.action,
        Action::ScaleUp {
            group: "workers".into(),
            count: 1,
            size: None
        }
    );
    assert!(d.has_reason(ReasonCode::FreeMemoryBelowTarget), "{d:?}");
}

#[test]
fn enough_free_memory_does_nothing() {
    let c = mk_config("");
    let mut s = Snapshot::default();
    mk_member(&mut s, "dev-workers-a", 3600);
    s.pods.push(mk_pod("p1", Some("dev-workers-a"), GI).into());
    let d = plan_it(&s, &c);
    assert_eq!(d.action, Action::None, "{d:?}");
}

#[test]
fn memory_counted_by_requests_of_pods_and_pending_pods() {
    let c = mk_config("");
    let mut s = Snapshot::default();
    mk_member(&mut s, "dev-workers-a", 3600);
    s.pods
        .push(mk_pod("p1", Some("dev-workers-a"), 5 * GI).into());
    // 3 GiB free minus 2 GiB pending that fits = 1 GiB < 2 GiB target.
    s.pods.push(mk_pod("pending", None, 2 * GI).into());
    let d = plan_it(&s, &c);
    assert!(
        matches!(d.action, Action::ScaleUp { count: 1, .. }),
        "{d:?}"
    );
    assert!(d.has_reason(ReasonCode::FreeMemoryBelowTarget));
}

#[test]
fn unschedulable_pods_get_enough_nodes_in_one_action() {
    let c = mk_config("");
    let mut s = Snapshot::default();
    mk_member(&mut s, "dev-workers-a", 3600);
    s.pods
        .push(mk_pod("big", Some("dev-workers-a"), 7 * GI).into());
    for i in 0..4 {
        s.pods.push(mk_pod(&format!("p{i}"), None, 5 * GI).into());
    }
    let d = plan_it(&s, &c);
    assert_eq!(
        d.action,
        Action::ScaleUp {
            group: "workers".into(),
            count: 4,
            size: None
        },
        "{d:?}"
    );
    assert!(d.has_reason(ReasonCode::UnschedulablePods));
}

#[test]
fn provisioning_vms_count_as_capacity() {
    let c = mk_config("");
    let mut s = Snapshot::default();
    s.pods.push(mk_pod("pending", None, 3 * GI).into());
    s.servers.push(mk_server("dev-workers-b", ago(20)));
    let d = plan_it(&s, &c);
    assert_eq!(d.action, Action::None, "{d:?}");
}

#[test]
fn scale_up_respects_max_size() {
    let c = mk_config("");
    let mut s = Snapshot::default();
    for i in 0..5 {
        mk_member(&mut s, &format!("dev-workers-{i}"), 3600);
        s.pods.push(
            mk_pod(
                &format!("full{i}"),
                Some(&format!("dev-workers-{i}")),
                8 * GI,
            )
            .into(),
        );
    }
    s.pods.push(mk_pod("pending", None, GI).into());
    let d = plan_it(&s, &c);
    assert!(!matches!(d.action, Action::ScaleUp { .. }), "{d:?}");
    assert!(d.has_reason(ReasonCode::GroupAtMaxSize));
}

#[test]
fn pod_no_group_can_host_is_noted_not_scaled_for() {
    let c = mk_config("freeMemoryTarget: 0 B");
    let mut s = Snapshot::default();
    let mut p = mk_pod("gpu", None, GI);
    p.node_selector.insert("gpu".into(), "true".into());
    s.pods.push(p.into());
    let d = plan_it(&s, &c.clone());
    assert_eq!(d.action, Action::None, "{d:?}");
    assert!(d.has_reason(ReasonCode::NoGroupFits));
}

#[test]
fn ready_node_with_startup_taint_is_untainted_first() {
    let c = mk_config("");
    let mut s = Snapshot::default();
    mk_member(&mut s, "dev-workers-a", 60);
    s.nodes[0].taints.push(Taint {
        key: STARTUP_TAINT_KEY.into(),
        value: Some("true".into()),
        effect: "NoSchedule".into(),
    });
    s.pods.push(mk_pod("pending", None, 30 * GI).into());
    let d = plan_it(&s, &c);
    assert_eq!(
        d.action,
        Action::RemoveStartupTaint {
            nodes: vec!["dev-workers-a".into()]
        }
    );
}

#[test]
fn vm_that_never_joined_is_deleted_after_provision_timeout() {
    let c = mk_config("");
    let mut s = Snapshot::default();
    mk_member(&mut s, "dev-workers-a", 3600);
    s.servers.push(mk_server("dev-workers-stuck", ago(11 * 60)));
    let d = plan_it(&s, &c);
    match &d.action {
        Action::DeleteServers { servers, nodes } => {
            assert_eq!(servers.len(), 1);
            assert_eq!(servers[0].name, "dev-workers-stuck");
            assert!(nodes.is_empty());
        }
        other => panic!("expected DeleteServers, got {other:?}"),
    }
    assert!(d.has_reason(ReasonCode::ProvisionTimeout));
}

#[test]
fn ownership_needs_both_node_label_and_cloud_tag() {
    let c = mk_config("freeMemoryTarget: 0 B");
    let mut s = Snapshot::default();
    // A cordoned, empty node labelled as ours but with no VM tagged ours: not touched.
    let mut node = mk_node("dev-workers-x", ago(3600));
    node.unschedulable = true;
    s.nodes.push(node);
    // A VM of another cluster with a matching cordoned node: not touched either.
    let mut other = mk_server("dev-workers-y", ago(3600));
    other.cluster = Some("prod".into());
    s.servers.push(other);
    let mut node = mk_node("dev-workers-y", ago(3600));
    node.unschedulable = true;
    s.nodes.push(node);
    let d = plan_it(&s, &c);
    assert_eq!(d.action, Action::None, "{d:?}");
}

#[test]
fn empty_cordoned_managed_node_is_deleted() {
    let c = mk_config("freeMemoryTarget: 0 B");
    let mut s = Snapshot::default();
    mk_member(&mut s, "dev-workers-a", 3600);
    cordon_by_us(&mut s.nodes[0], "empty", 60);
    let mut ds = mk_pod("ds", Some("dev-workers-a"), GI);
    ds.controller_kind = Some("DaemonSet".into());
    s.pods.push(ds.into());
    let d = plan_it(&s, &c);
    assert!(
        matches!(&d.action, Action::DeleteNodes { nodes } if nodes.len() == 1 && nodes[0].node == "dev-workers-a" && nodes[0].server.id == "id-dev-workers-a"),
        "{d:?}"
    );
}

#[test]
fn empty_node_waits_for_its_volumes_to_detach() {
    let c = mk_config("freeMemoryTarget: 0 B");
    let mut s = Snapshot::default();
    mk_member(&mut s, "dev-workers-a", 3600);
    cordon_by_us(&mut s.nodes[0], "empty", 60);
    s.volume_attachments
        .push(("csi-123".into(), "dev-workers-a".into()));
    let d = plan_it(&s, &c);
    assert!(!matches!(d.action, Action::DeleteNodes { .. }), "{d:?}");
    assert!(d.has_reason(ReasonCode::VolumesAttached));
    s.volume_attachments.clear();
    let d = plan_it(&s, &c);
    assert!(matches!(d.action, Action::DeleteNodes { .. }), "{d:?}");
}

#[test]
fn old_node_is_cordoned_when_the_rest_can_hold_its_pods() {
    let c = mk_config("");
    let mut s = Snapshot::default();
    mk_member(&mut s, "dev-workers-old", 80 * 3600);
    mk_member(&mut s, "dev-workers-new", 3600);
    mk_member(&mut s, "dev-workers-new2", 3600);
    s.pods
        .push(mk_pod("p", Some("dev-workers-old"), 2 * GI).into());
    let d = plan_it(&s, &c);
    assert!(
        matches!(&d.action, Action::Cordon { nodes, .. } if nodes == &["dev-workers-old".to_string()]),
        "{d:?}"
    );
    assert!(d.has_reason(ReasonCode::NodeTooOld));
}

#[test]
fn old_node_triggers_scale_up_first_when_the_rest_cannot_hold_its_pods() {
    let c = mk_config("");
    let mut s = Snapshot::default();
    mk_member(&mut s, "dev-workers-old", 80 * 3600);
    s.pods
        .push(mk_pod("p", Some("dev-workers-old"), 2 * GI).into());
    let d = plan_it(&s, &c);
    assert_eq!(
        d.action,
        Action::ScaleUp {
            group: "workers".into(),
            count: 1,
            size: None
        },
        "{d:?}"
    );
    assert!(d.has_reason(ReasonCode::ReplacementNeedsCapacity));
    // Once that VM is provisioning, the planner waits instead of adding another.
    s.servers.push(mk_server("dev-workers-b", ago(10)));
    let d = plan_it(&s, &c);
    assert_eq!(d.action, Action::None, "{d:?}");
    assert!(d.has_reason(ReasonCode::WaitingForProvisioning));
}

#[test]
fn cordoned_old_node_is_drained_but_bare_pods_block() {
    let c = mk_config("");
    let mut s = Snapshot::default();
    mk_member(&mut s, "dev-workers-old", 80 * 3600);
    mk_member(&mut s, "dev-workers-new", 3600);
    cordon_by_us(&mut s.nodes[0], "expired", 60);
    s.pods.push(mk_pod("p", Some("dev-workers-old"), GI).into());
    let d = plan_it(&s, &c);
    assert!(
        matches!(&d.action, Action::Drain { nodes, pods } if nodes == &["dev-workers-old".to_string()] && pods.len() == 1),
        "{d:?}"
    );
    std::sync::Arc::make_mut(&mut s.pods[0]).controller_kind = None;
    let d = plan_it(&s, &c);
    assert!(!matches!(d.action, Action::Drain { .. }), "{d:?}");
    assert!(d.has_reason(ReasonCode::DrainBlocked));
}

#[test]
fn pod_without_owner_does_not_panic_anywhere() {
    let c = mk_config("");
    let mut s = Snapshot::default();
    mk_member(&mut s, "dev-workers-a", 3600);
    let mut p = mk_pod("bare", Some("dev-workers-a"), GI);
    p.controller_kind = None;
    p.images.clear();
    s.pods.push(p.into());
    let _ = plan_it(&s, &c);
}

#[test]
fn missing_images_are_pulled_but_ignored_prefixes_are_not() {
    let c = mk_config(
        "imagePuller: {ignore: [docker.io/library/busybox]}\nscaleDown: {enabled: false}",
    );
    let mut s = Snapshot::default();
    mk_member(&mut s, "dev-workers-a", 3600);
    mk_member(&mut s, "dev-workers-b", 3600);
    let mut p = mk_pod("p", Some("dev-workers-a"), GI);
    p.images = vec!["redis:7".into(), "busybox:1.36".into()];
    s.pods.push(p.into());
    s.nodes[0].images.insert(normalize_image("redis:7"));
    let d = plan_it(&s, &c);
    assert_eq!(
        d.action,
        Action::PullImages {
            node: "dev-workers-b".into(),
            images: vec!["docker.io/library/redis:7".into()],
            pull_secrets: Vec::new(),
        },
        "{d:?}"
    );
}

#[test]
fn images_are_only_pulled_where_their_pods_could_run() {
    let c = mk_config("scaleDown: {enabled: false}");
    let mut s = Snapshot::default();
    mk_member(&mut s, "dev-workers-a", 3600);
    mk_member(&mut s, "dev-workers-b", 3600);
    s.nodes[1].taints.push(Taint {
        key: "dedicated".into(),
        value: Some("batch".into()),
        effect: "NoSchedule".into(),
    });
    let mut p = mk_pod("web", Some("dev-workers-a"), GI);
    p.images = vec!["redis:7".into()];
    s.pods.push(p.into());
    s.nodes[0].images.insert(normalize_image("redis:7"));
    // b is tainted and the pod does not tolerate it: nothing to pull anywhere.
    let d = plan_it(&s, &c);
    assert_eq!(d.action, Action::None, "{d:?}");
    // Once the pod tolerates the taint, b gets the image.
    std::sync::Arc::make_mut(&mut s.pods[0])
        .tolerations
        .push(Toleration {
            key: Some("dedicated".into()),
            operator: Some("Exists".into()),
            value: None,
            effect: None,
        });
    let d = plan_it(&s, &c);
    assert!(
        matches!(&d.action, Action::PullImages { node, .. } if node == "dev-workers-b"),
        "{d:?}"
    );
}

/// A finished puller pod as nodewright creates it: in the puller namespace, with the
/// image-puller label and this cluster's name.
fn mk_puller(c: &Config, name: &str) -> PodInfo {
    let mut p = mk_pod(name, Some("dev-workers-a"), 0);
    p.namespace = c.image_puller.namespace.clone();
    p.labels.insert(LABEL_IMAGE_PULLER.into(), "true".into());
    p.labels
        .insert(LABEL_CLUSTER.into(), c.cluster_name.clone());
    p.phase = PodPhase::Succeeded;
    p
}

#[test]
fn finished_image_pullers_are_cleaned_up() {
    let c = mk_config("");
    let mut s = Snapshot::default();
    mk_member(&mut s, "dev-workers-a", 3600);
    s.pods.push(mk_puller(&c, "puller").into());
    let d = plan_it(&s, &c);
    assert!(
        matches!(&d.action, Action::DeletePods { pods } if pods.len() == 1),
        "{d:?}"
    );
}

/// Issue 8: the clean-up deleted any pod in any namespace carrying the image-puller
/// label. Now only nodewright's own: in the puller namespace, with this cluster's name.
#[test]
fn image_puller_cleanup_leaves_other_pods_with_its_label() {
    let c = mk_config("");
    let mut s = Snapshot::default();
    mk_member(&mut s, "dev-workers-a", 3600);
    // The label in another namespace; in ours without a cluster name; of another
    // cluster; with the label set to something else. All finished long ago.
    let mut elsewhere = mk_puller(&c, "elsewhere");
    elsewhere.namespace = "apps".into();
    let mut unnamed = mk_puller(&c, "unnamed");
    unnamed.labels.remove(LABEL_CLUSTER);
    let mut other_cluster = mk_puller(&c, "other-cluster");
    other_cluster
        .labels
        .insert(LABEL_CLUSTER.into(), "prod".into());
    let mut not_true = mk_puller(&c, "not-true");
    not_true
        .labels
        .insert(LABEL_IMAGE_PULLER.into(), "false".into());
    for mut p in [elsewhere, unnamed, other_cluster, not_true] {
        p.created = ago(3600);
        s.pods.push(p.into());
    }
    let d = plan_it(&s, &c);
    assert!(!matches!(d.action, Action::DeletePods { .. }), "{d:?}");
    // Ours beside them: only ours goes.
    s.pods.push(mk_puller(&c, "ours").into());
    let d = plan_it(&s, &c);
    match &d.action {
        Action::DeletePods { pods } => {
            let names: Vec<String> = pods.iter().map(|p| p.to_string()).collect();
            assert_eq!(
                names,
                vec![format!("{}/ours", c.image_puller.namespace)],
                "{d:?}"
            );
        }
        other => panic!("expected DeletePods, got {other:?}"),
    }
}

#[test]
fn below_min_size_scales_up_even_with_enough_memory() {
    let c = mk_config("freeMemoryTarget: 0 B");
    let mut c = c;
    c.node_groups[0].min_size = 2;
    let mut s = Snapshot::default();
    mk_member(&mut s, "dev-workers-a", 3600);
    let d = plan_it(&s, &c);
    assert_eq!(
        d.action,
        Action::ScaleUp {
            group: "workers".into(),
            count: 1,
            size: None
        }
    );
    assert!(d.has_reason(ReasonCode::GroupBelowMinSize));
}

#[test]
fn unneeded_node_is_cordoned_after_the_delay_but_not_below_min_or_target() {
    let c = mk_config("scaleDown: {delayAfterAdd: 10m}");
    let mut s = Snapshot::default();
    mk_member(&mut s, "dev-workers-a", 3600);
    mk_member(&mut s, "dev-workers-b", 3600);
    s.pods
        .push(mk_pod("p1", Some("dev-workers-a"), 3 * GI).into());
    s.pods.push(mk_pod("p2", Some("dev-workers-b"), GI).into());
    let d = plan_after_unneeded(&s, &c, 3600);
    assert!(
        matches!(&d.action, Action::Cordon { nodes, .. } if nodes == &["dev-workers-b".to_string()]),
        "{d:?}"
    );
    assert!(d.has_reason(ReasonCode::NodeUnneeded));

    // A node added 5 minutes ago holds scale-down off.
    let mut young = s.clone();
    mk_member(&mut young, "dev-workers-c", 330);
    let d = plan_after_unneeded(&young, &c, 3600);
    assert!(!matches!(d.action, Action::Cordon { .. }), "{d:?}");

    // At minSize nothing is removed.
    let mut at_min = c.clone();
    at_min.node_groups[0].min_size = 2;
    let d = plan_after_unneeded(&s, &at_min, 3600);
    assert!(!matches!(d.action, Action::Cordon { .. }), "{d:?}");

    // When removing any node would drop free memory below target, nothing is removed.
    let tight = mk_config("freeMemoryTarget: 12 GiB");
    let d = plan_after_unneeded(&s, &tight, 3600);
    assert!(!matches!(d.action, Action::Cordon { .. }), "{d:?}");

    // Disabled.
    let off = mk_config("scaleDown: {enabled: false}");
    let d = plan_after_unneeded(&s, &off, 3600);
    assert!(!matches!(d.action, Action::Cordon { .. }), "{d:?}");
}

fn mk_pdb(app: &str, allowed: i32) -> PdbInfo {
    PdbInfo {
        namespace: "default".into(),
        name: format!("{app}-pdb"),
        selector: Some(crate::model::LabelSelector {
            match_labels: BTreeMap::from([("app".to_string(), app.to_string())]),
            ..Default::default()
        }),
        disruptions_allowed: allowed,
    }
}

#[test]
fn pod_disruption_budgets_hold_back_scale_down_and_eviction() {
    let c = mk_config("scaleDown: {delayAfterAdd: 10m}");
    let mut s = Snapshot::default();
    mk_member(&mut s, "dev-workers-a", 3600);
    mk_member(&mut s, "dev-workers-b", 3600);
    s.pods
        .push(mk_pod("p1", Some("dev-workers-a"), 3 * GI).into());
    let mut db = mk_pod("db-0", Some("dev-workers-b"), GI);
    db.labels.insert("app".into(), "db".into());
    s.pods.push(db.into());
    s.pdbs.push(mk_pdb("db", 0));
    // b would be the one to go, but its pod may not be disrupted: a goes instead? No:
    // a's 3 GiB pod fits on b, so a is the candidate when b is protected.
    let d = plan_after_unneeded(&s, &c, 3600);
    assert!(
        matches!(&d.action, Action::Cordon { nodes, .. } if nodes == &["dev-workers-a".to_string()]),
        "{d:?}"
    );
    // Draining a node whose remaining pod is protected waits instead of evicting.
    cordon_by_us(&mut s.nodes[1], "underutilized", 60);
    let d = plan_after_unneeded(&s, &c, 3600);
    assert!(!matches!(d.action, Action::Drain { .. }), "{d:?}");
    assert!(d.has_reason(ReasonCode::DrainBlocked));
    s.pdbs[0].disruptions_allowed = 1;
    let d = plan_after_unneeded(&s, &c, 3600);
    assert!(
        matches!(&d.action, Action::Drain { pods, .. } if pods.len() == 1),
        "{d:?}"
    );
}

#[test]
fn a_backed_off_group_gets_no_new_vms() {
    let c = mk_config("");
    let mut s = Snapshot::default();
    s.pods.push(mk_pod("pending", None, GI).into());
    s.group_backoff
        .insert("workers".into(), now() + Duration::from_secs(20));
    let d = plan_it(&s, &c);
    assert_eq!(d.action, Action::None, "{d:?}");
    assert!(d.has_reason(ReasonCode::GroupBackedOff));
    // Once the time has passed it scales up again.
    s.group_backoff
        .insert("workers".into(), now() - Duration::from_secs(1));
    let d = plan_it(&s, &c);
    assert!(matches!(d.action, Action::ScaleUp { .. }), "{d:?}");
}

mod cost;
mod dedup;
mod disruption;
mod drift;
mod faults;
mod hard_limit;
mod hosts;
mod idle_volumes;
mod images;
mod joined;
mod pools;
mod props;
mod removal;
mod replay;
mod scale_up;
mod sizes;
mod unremovable;
mod version_drift;
mod volumes;

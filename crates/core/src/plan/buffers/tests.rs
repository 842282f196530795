//! Capacity buffers through the whole planner: small builders, a fixed clock (Sunday
//! 2030-03-17 17:46:40 UTC, 18:46 in Berlin).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::BUFFER_NAMESPACE;
use crate::config::Config;
use crate::model::{
    NodeInfo, PodInfo, PodPhase, Resources, Server, ServerStatus, LABEL_CLUSTER, LABEL_GROUP,
};
use crate::plan::{plan, Action, Decision, ReasonCode, Snapshot};

const GI: u64 = 1 << 30;

fn now() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_900_000_000)
}

fn ago(secs: u64) -> SystemTime {
    now() - Duration::from_secs(secs)
}

/// A config with `buffers` (a YAML list) and a `workers` group of 4 CPU / 8 GiB nodes,
/// plus `extra_groups` (YAML list items).
fn config(buffers: &str, extra_groups: &str) -> Config {
    let dir = std::env::temp_dir();
    std::fs::write(dir.join("nodewright-buffer-test.j2"), "#cloud-config\n")
        .expect("temp dir is writable");
    let text = format!(
        r#"clusterName: dev
freeMemoryTarget: 0 B
provisionTimeout: 10m
templatesDir: {dir}
scaleDown: {{delayAfterAdd: 10m}}
buffers:
{buffers}
nodeGroups:
- name: workers
  provider: openstack
  maxSize: 10
  resources: {{cpu: "4", memory: 8Gi}}
  reserved: {{memory: 0}}
  openstack: {{flavor: f, image: i}}
  userData: {{template: nodewright-buffer-test.j2}}
{extra_groups}
"#,
        dir = dir.display()
    );
    Config::parse(&text, Path::new("/")).expect("test config is valid")
}

/// A joined node of `group` (4 CPU, 8 GiB), with its VM.
fn member(s: &mut Snapshot, name: &str, group: &str) {
    s.servers.push(Server {
        id: format!("id-{name}"),
        name: name.to_string(),
        cluster: Some("dev".into()),
        group: Some(group.into()),
        status: ServerStatus::Active,
        created: ago(3600),
        memory_bytes: Some(8 * GI),
        provider: "openstack".into(),
        size: None,
        settings_hash: None,
        fault: None,
        warm: false,
        filling: false,
        joined: Some(ago(3500)),
        restarted: None,
        fenced: None,
        removing_since: None,
    });
    let mut labels = BTreeMap::new();
    labels.insert(LABEL_CLUSTER.to_string(), "dev".to_string());
    labels.insert(LABEL_GROUP.to_string(), group.to_string());
    labels.insert("kubernetes.io/hostname".to_string(), name.to_string());
    let mut allocatable = Resources::cpu_mem(4000, 8 * GI);
    allocatable.pods = 110;
    s.nodes.push(NodeInfo {
        name: name.to_string(),
        labels,
        annotations: BTreeMap::new(),
        created: ago(3500),
        unschedulable: false,
        ready: true,
        taints: vec![],
        allocatable,
        images: BTreeSet::new(),
        image_listing: Default::default(),
        deleting: false,
        ready_changed: None,
        kubelet_version: None,
    });
}

/// A VM of `workers` still booting (no node yet).
fn booting(s: &mut Snapshot, name: &str) {
    s.servers.push(Server {
        id: format!("id-{name}"),
        name: name.to_string(),
        cluster: Some("dev".into()),
        group: Some("workers".into()),
        status: ServerStatus::Active,
        created: ago(60),
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
    });
}

/// A running ReplicaSet pod on `node`, or a pending one the scheduler refused.
fn pod(name: &str, node: Option<&str>, cpu: u64, memory: u64) -> PodInfo {
    let mut p = PodInfo::new("default", name);
    p.node_name = node.map(str::to_string);
    p.phase = if node.is_some() {
        PodPhase::Running
    } else {
        PodPhase::Pending
    };
    p.requests.cpu = cpu;
    p.requests.memory = memory;
    p.unschedulable = node.is_none();
    p.unschedulable_since = node.is_none().then(|| ago(30));
    p.controller_kind = Some("ReplicaSet".into());
    p.controller_name = Some(format!("{name}-rs"));
    p.created = ago(120);
    p
}

/// A buffer of `replicas` pods of 2 CPU / 4 GiB, with optional extra YAML keys.
fn buffer(name: &str, replicas: u32, extra: &str) -> String {
    format!(
        "- name: {name}\n  replicas: {replicas}\n  resources: {{cpu: \"2\", memory: 4Gi}}\n{extra}"
    )
}

/// No buffer pod in the decision: so none in its Events either, which only name what the
/// decision names (`act::events`' `events_name_only_what_the_decision_names`).
fn no_buffer_pods_leak(d: &Decision) {
    assert!(
        d.pending
            .iter()
            .all(|p| p.pod.namespace != BUFFER_NAMESPACE),
        "{d:?}"
    );
    for r in d.reasons.iter().chain(&d.notes) {
        assert!(
            r.objects
                .iter()
                .all(|o| o.namespace.as_deref() != Some(BUFFER_NAMESPACE)),
            "{r:?}"
        );
    }
    if let Action::Drain { pods, .. } = &d.action {
        assert!(pods.iter().all(|p| p.namespace != BUFFER_NAMESPACE));
    }
}

/// Scale-down wants a node gone: it cordons one, or starts its unneeded clock.
fn wants_removal(d: &Decision) -> bool {
    match &d.action {
        Action::Cordon { .. } => true,
        Action::MarkUnneeded { mark, .. } => !mark.is_empty(),
        _ => false,
    }
}

fn scale_up(group: &str, count: u32) -> Action {
    Action::ScaleUp {
        group: group.into(),
        count,
        size: None,
    }
}

#[test]
fn always_on_buffer_scales_up_with_packing() {
    let c = config(&buffer("warm", 4, ""), "");
    let mut s = Snapshot::default();
    member(&mut s, "dev-workers-a", "workers");
    // 3 CPU used: the node has room for no 2-CPU buffer pod; 4 pods pack two per node.
    s.pods
        .push(pod("busy", Some("dev-workers-a"), 3000, GI).into());
    let d = plan(&s, &c, now());
    assert_eq!(d.action, scale_up("workers", 2), "{d:#?}");
    assert!(d.has_reason(ReasonCode::BufferShort), "{d:#?}");
    assert!(
        d.reasons[0].message.contains("buffer warm: 4 of 4 pod(s)"),
        "{}",
        d.reasons[0].message
    );
    no_buffer_pods_leak(&d);
}

#[test]
fn buffer_that_fits_does_nothing_and_counts_provisioning_vms() {
    let c = config(&buffer("warm", 2, ""), "");
    let mut s = Snapshot::default();
    member(&mut s, "dev-workers-a", "workers");
    let d = plan(&s, &c, now());
    assert!(!matches!(d.action, Action::ScaleUp { .. }), "{d:#?}");
    assert!(!d.has_reason(ReasonCode::BufferShort), "{d:#?}");
    // Two more pods than the node holds: one booting VM takes them.
    let c = config(&buffer("warm", 4, ""), "");
    booting(&mut s, "dev-workers-b");
    let d = plan(&s, &c, now());
    assert!(!matches!(d.action, Action::ScaleUp { .. }), "{d:#?}");
    assert!(!d.has_reason(ReasonCode::BufferShort), "{d:#?}");
}

#[test]
fn buffer_outside_its_schedule_does_nothing_inside_it_scales_up() {
    let mut s = Snapshot::default();
    member(&mut s, "dev-workers-a", "workers");
    s.pods
        .push(pod("busy", Some("dev-workers-a"), 3000, GI).into());
    // Weekdays from 07:00 Berlin: now is Sunday evening.
    let weekdays = "  schedule: {cron: \"0 7 * * 1-5\", duration: 10h, timeZone: Europe/Berlin}\n";
    let d = plan(&s, &config(&buffer("morning", 2, weekdays), ""), now());
    assert!(!matches!(d.action, Action::ScaleUp { .. }), "{d:#?}");
    assert!(!d.has_reason(ReasonCode::BufferShort), "{d:#?}");
    // Sundays 18:00 Berlin (17:00 UTC) for an hour: now (17:46 UTC) is inside.
    let sunday = "  schedule: {cron: \"0 18 * * sun\", duration: 1h, timeZone: Europe/Berlin}\n";
    let c = config(&buffer("evening", 2, sunday), "");
    let d = plan(&s, &c, now());
    assert_eq!(d.action, scale_up("workers", 1), "{d:#?}");
    assert!(d.has_reason(ReasonCode::BufferShort), "{d:#?}");
    // ... and 15 minutes later it has closed.
    let d = plan(&s, &c, now() + Duration::from_secs(15 * 60));
    assert!(!d.has_reason(ReasonCode::BufferShort), "{d:#?}");
}

#[test]
fn real_pending_pods_come_first_and_buffer_pods_never_reach_buckets() {
    let c = config(&buffer("warm", 2, ""), "");
    let mut s = Snapshot::default();
    member(&mut s, "dev-workers-a", "workers");
    s.pods
        .push(pod("busy", Some("dev-workers-a"), 3000, GI).into());
    s.pods.push(pod("web", None, 2000, GI).into());
    let d = plan(&s, &c, now());
    assert_eq!(d.action, scale_up("workers", 1), "{d:#?}");
    assert!(d.has_reason(ReasonCode::UnschedulablePods), "{d:#?}");
    assert!(!d.has_reason(ReasonCode::BufferShort), "{d:#?}");
    assert_eq!(d.pending.len(), 1, "{d:#?}");
    no_buffer_pods_leak(&d);

    // Next cycle: the real pod is on its way to the booting VM; the buffer wants the
    // room that VM has left (2 CPU) plus another node.
    booting(&mut s, "dev-workers-b");
    let d = plan(&s, &c, now());
    assert_eq!(d.action, scale_up("workers", 1), "{d:#?}");
    assert!(d.has_reason(ReasonCode::BufferShort), "{d:#?}");
    assert!(
        d.reasons[0].message.contains("buffer warm: 1 of 2 pod(s)"),
        "{}",
        d.reasons[0].message
    );
    no_buffer_pods_leak(&d);
}

#[test]
fn buffer_goes_to_the_group_it_selects_and_tolerates() {
    let batch = r#"- name: batch
  provider: openstack
  maxSize: 3
  resources: {cpu: "8", memory: 16Gi}
  reserved: {memory: 0}
  labels: {pool: batch}
  taints: [{key: dedicated, value: batch, effect: NoSchedule}]
  openstack: {flavor: f, image: i}
  userData: {template: nodewright-buffer-test.j2}
"#;
    let extra = "  nodeSelector: {pool: batch}\n  tolerations: [{key: dedicated, operator: Equal, value: batch, effect: NoSchedule}]\n";
    let c = config(&buffer("jobs", 3, extra), batch);
    let mut s = Snapshot::default();
    member(&mut s, "dev-workers-a", "workers");
    let d = plan(&s, &c, now());
    // Three 2-CPU pods fit one 8-CPU batch node; the idle worker does not count.
    assert_eq!(d.action, scale_up("batch", 1), "{d:#?}");

    // Without the toleration no group can host them: a note, no VM.
    let c = config(&buffer("jobs", 3, "  nodeSelector: {pool: batch}\n"), batch);
    let d = plan(&s, &c, now());
    assert!(!matches!(d.action, Action::ScaleUp { .. }), "{d:#?}");
    let note = d
        .notes
        .iter()
        .find(|n| n.code == ReasonCode::BufferShort)
        .expect("a BufferShort note");
    assert!(
        note.message.contains("buffer jobs: 3 of 3"),
        "{}",
        note.message
    );
    assert!(note.message.contains("dedicated=batch"), "{}", note.message);
    no_buffer_pods_leak(&d);
}

#[test]
fn buffer_bigger_than_every_group_is_noted_not_scaled_for() {
    let big = "- name: huge\n  replicas: 1\n  resources: {cpu: \"16\"}\n";
    let d = plan(&Snapshot::default(), &config(big, ""), now());
    assert!(!matches!(d.action, Action::ScaleUp { .. }), "{d:#?}");
    let note = d
        .notes
        .iter()
        .find(|n| n.code == ReasonCode::BufferShort)
        .expect("a BufferShort note");
    assert!(
        note.message.contains("group workers: insufficient cpu"),
        "{}",
        note.message
    );
}

#[test]
fn buffer_at_max_size_waits_with_a_note() {
    let c = config(&buffer("warm", 40, ""), "");
    let mut s = Snapshot::default();
    for i in 0..10 {
        member(&mut s, &format!("dev-workers-{i}"), "workers");
    }
    let d = plan(&s, &c, now());
    assert!(!matches!(d.action, Action::ScaleUp { .. }), "{d:#?}");
    assert!(d.has_reason(ReasonCode::GroupAtMaxSize), "{d:#?}");
    assert!(d.has_reason(ReasonCode::BufferShort), "{d:#?}");
    // Scale-down does not make it worse.
    assert!(!matches!(d.action, Action::Cordon { .. }), "{d:#?}");
}

#[test]
fn scale_down_keeps_an_active_buffer_schedulable() {
    let mut s = Snapshot::default();
    member(&mut s, "dev-workers-a", "workers");
    member(&mut s, "dev-workers-b", "workers");
    s.pods
        .push(pod("small", Some("dev-workers-a"), 500, GI).into());
    // Without a buffer one node is not needed.
    let d = plan(&s, &config("  []", ""), now());
    assert!(wants_removal(&d), "{d:#?}");
    // A buffer of two 2-CPU pods needs the room of both nodes: keep them.
    let d = plan(&s, &config(&buffer("warm", 2, ""), ""), now());
    assert_eq!(d.action, Action::None, "{d:#?}");
    // Each is reported as kept for the buffer.
    for n in ["dev-workers-a", "dev-workers-b"] {
        let kept = d.unremovable.iter().find(|u| u.node == n);
        assert_eq!(
            kept.map(|u| u.reason),
            Some(crate::plan::KeptReason::CapacityBuffer),
            "{n}: {d:#?}"
        );
    }
    // A buffer of one pod still leaves one node unneeded.
    let d = plan(&s, &config(&buffer("warm", 1, ""), ""), now());
    assert!(wants_removal(&d), "{d:#?}");
    // An inactive buffer does not hold nodes.
    let weekdays = "  schedule: {cron: \"0 7 * * 1-5\", duration: 10h, timeZone: Europe/Berlin}\n";
    let d = plan(&s, &config(&buffer("warm", 2, weekdays), ""), now());
    assert!(wants_removal(&d), "{d:#?}");
    no_buffer_pods_leak(&d);
}

//! Scale-up with the scheduling model: every resource and predicate, packing, the
//! expanders, limits, hybrid burst and frozen providers.

use super::*;
use crate::model::{LabelSelector, Namespaces, PodAffinityTerm, SpreadConstraint};

const HOST: &str = "kubernetes.io/hostname";
const ZONE: &str = "topology.kubernetes.io/zone";

/// A config with these top-level settings and these groups (YAML list items).
pub(super) fn mk_config_groups(top: &str, groups: &str) -> Config {
    let dir = std::env::temp_dir();
    std::fs::write(dir.join("nodewright-plan-test.j2"), "#cloud-config\n")
        .expect("temp dir is writable");
    let target = if top.contains("freeMemoryTarget") {
        ""
    } else {
        "freeMemoryTarget: 0 B"
    };
    let text = format!(
        "clusterName: dev\n{target}\nprovisionTimeout: 10m\ntemplatesDir: {}\n{top}\nnodeGroups:\n{groups}",
        dir.display()
    );
    Config::parse(&text, Path::new("/")).expect("test config is valid")
}

/// One OpenStack group as a YAML list item.
pub(super) fn group(name: &str, max: u32, cpu: &str, memory: &str, extra: &str) -> String {
    format!(
        r#"- name: {name}
  provider: openstack
  maxSize: {max}
  resources: {{cpu: "{cpu}", memory: {memory}}}
  reserved: {{memory: 0}}
  openstack: {{flavor: f, image: i}}
  userData: {{template: nodewright-plan-test.j2}}
{extra}
"#
    )
}

/// A member node of `group` with `cpu` millicores and `mem` bytes allocatable.
fn mk_member_in(s: &mut Snapshot, name: &str, group: &str, cpu: u64, mem: u64) {
    let mut server = mk_server(name, ago(3600));
    server.group = Some(group.into());
    s.servers.push(server);
    let mut node = mk_node(name, ago(3500));
    node.labels.insert(LABEL_GROUP.into(), group.into());
    node.labels.insert(HOST.into(), name.into());
    node.allocatable = mk_alloc(cpu, mem);
    s.nodes.push(node);
}

fn pending(name: &str, cpu: u64, mem: u64) -> PodInfo {
    let mut p = mk_pod(name, None, mem);
    p.requests.cpu = cpu;
    p.labels.insert("app".into(), "web".into());
    p
}

fn running(name: &str, node: &str, cpu: u64, mem: u64) -> PodInfo {
    let mut p = mk_pod(name, Some(node), mem);
    p.requests.cpu = cpu;
    p
}

fn scale_up_of(d: &Decision) -> Option<(&str, u32)> {
    match &d.action {
        Action::ScaleUp { group, count, .. } => Some((group.as_str(), *count)),
        _ => None,
    }
}

#[test]
fn pod_short_of_cpu_with_memory_to_spare_gets_a_node() {
    let c = mk_config_groups("", &group("workers", 5, "4", "16Gi", ""));
    let mut s = Snapshot::default();
    mk_member_in(&mut s, "dev-workers-a", "workers", 4000, 16 * GI);
    s.pods
        .push(running("busy", "dev-workers-a", 3500, GI).into());
    s.pods.push(pending("web", 1000, GI).into());
    let d = plan_it(&s, &c);
    assert_eq!(scale_up_of(&d), Some(("workers", 1)), "{d:#?}");
    assert_eq!(d.bucket_of("default", "web"), Some(Bucket::ScalingUp));
}

#[test]
fn pod_selecting_kubernetes_io_os_linux_gets_a_node() {
    // The existing node lacks the label (as in the issue); a new node has it.
    let c = mk_config_groups(
        "freeMemoryTarget: 1 GiB",
        &group("workers", 5, "4", "16Gi", ""),
    );
    let mut s = Snapshot::default();
    mk_member_in(&mut s, "dev-workers-a", "workers", 4000, 16 * GI);
    let mut p = pending("chart-pod", 100, GI);
    p.node_selector
        .insert("kubernetes.io/os".into(), "linux".into());
    s.pods.push(p.into());
    let d = plan_it(&s, &c);
    assert_eq!(scale_up_of(&d), Some(("workers", 1)), "{d:#?}");
}

#[test]
fn gpu_pod_goes_only_to_the_gpu_group() {
    let groups = group("cpu", 5, "16", "64Gi", "")
        + &group("gpu", 2, "8", "32Gi", "  price: 3.0").replace(
            "resources: {cpu: \"8\", memory: 32Gi}",
            "resources: {cpu: \"8\", memory: 32Gi, nvidia.com/gpu: 1}",
        );
    let c = mk_config_groups("", &groups);
    let mut s = Snapshot::default();
    let mut p = pending("train", 1000, 4 * GI);
    p.requests.set("nvidia.com/gpu", 1.0);
    s.pods.push(p.into());
    let d = plan_it(&s, &c);
    assert_eq!(scale_up_of(&d), Some(("gpu", 1)), "{d:#?}");
}

#[test]
fn hostname_anti_affinity_gives_one_node_per_pod() {
    let c = mk_config_groups("", &group("workers", 10, "8", "32Gi", ""));
    let mut s = Snapshot::default();
    for i in 0..3 {
        let mut p = pending(&format!("zk-{i}"), 100, GI);
        p.pod_anti_affinity.push(PodAffinityTerm {
            selector: LabelSelector {
                match_labels: BTreeMap::from([("app".to_string(), "web".to_string())]),
                ..Default::default()
            },
            namespaces: Namespaces::Listed(vec!["default".into()]),
            topology_key: HOST.into(),
        });
        s.pods.push(p.into());
    }
    let d = plan_it(&s, &c);
    assert_eq!(scale_up_of(&d), Some(("workers", 3)), "{d:#?}");
}

#[test]
fn zone_spread_sends_new_nodes_to_the_emptier_zone() {
    let groups = group(
        "zone-a",
        5,
        "8",
        "32Gi",
        &format!("  labels: {{{ZONE}: a}}"),
    ) + &group(
        "zone-b",
        5,
        "8",
        "32Gi",
        &format!("  labels: {{{ZONE}: b}}"),
    );
    let c = mk_config_groups("", &groups);
    let mut s = Snapshot::default();
    mk_member_in(&mut s, "dev-zone-a-x", "zone-a", 1000, 32 * GI);
    s.nodes[0].labels.insert(ZONE.into(), "a".into());
    let mut web = running("web-0", "dev-zone-a-x", 900, GI);
    web.labels.insert("app".into(), "web".into());
    s.pods.push(web.into());
    let mut p = pending("web-1", 900, GI);
    p.spread.push(SpreadConstraint {
        max_skew: 1,
        topology_key: ZONE.into(),
        selector: LabelSelector {
            match_labels: BTreeMap::from([("app".to_string(), "web".to_string())]),
            ..Default::default()
        },
        min_domains: None,
        honor_node_affinity: true,
        honor_taints: false,
    });
    s.pods.push(p.into());
    let d = plan_it(&s, &c);
    assert_eq!(scale_up_of(&d), Some(("zone-b", 1)), "{d:#?}");
}

#[test]
fn daemonset_overhead_sends_a_pod_to_the_bigger_group() {
    let groups = group("small", 5, "4", "8Gi", "") + &group("big", 5, "8", "16Gi", "");
    let c = mk_config_groups("", &groups);
    let mut s = Snapshot::default();
    mk_member_in(&mut s, "dev-other-a", "other", 4000, 8 * GI);
    let mut ds = running("logs-x", "dev-other-a", 100, GI);
    ds.controller_kind = Some("DaemonSet".into());
    ds.controller_name = Some("logs".into());
    s.pods.push(ds.into());
    // Fits 8 GiB, but not 8 GiB minus the 1 GiB log agent.
    s.pods.push(pending("fat", 500, 7 * GI + GI / 2).into());
    let d = plan_it(&s, &c);
    assert_eq!(scale_up_of(&d), Some(("big", 1)), "{d:#?}");
}

#[test]
fn pod_bigger_than_every_group_gets_a_reason_per_group_and_no_vm() {
    let groups = group("web", 5, "8", "32Gi", "")
        + &group(
            "batch",
            5,
            "16",
            "64Gi",
            "  taints: [{key: dedicated, value: batch, effect: NoSchedule}]",
        );
    let c = mk_config_groups("", &groups);
    let mut s = Snapshot::default();
    s.pods.push(pending("huge", 12000, GI).into());
    let d = plan_it(&s, &c);
    assert_eq!(d.action, Action::None, "{d:#?}");
    let note = d
        .notes
        .iter()
        .find(|n| n.code == ReasonCode::NoGroupFits)
        .expect("a NoGroupFits note");
    assert!(
        note.message
            .contains("group web: needs cpu 12, a node has 8"),
        "{}",
        note.message
    );
    assert!(
        note.message
            .contains("group batch: taint dedicated=batch:NoSchedule not tolerated"),
        "{}",
        note.message
    );
    assert_eq!(note.objects[0].name, "huge");
    assert_eq!(d.bucket_of("default", "huge"), Some(Bucket::NoCapacity));
}

#[test]
fn mixed_shapes_get_the_first_fit_decreasing_node_count_in_one_action() {
    let c = mk_config_groups("", &group("workers", 20, "4", "16Gi", ""));
    let mut s = Snapshot::default();
    // 3 × 3 CPU + 6 × 1 CPU = 15 CPU: FFD puts a 1-CPU pod beside each 3-CPU one and
    // the other three 1-CPU pods on a fourth node.
    for i in 0..3 {
        s.pods.push(pending(&format!("big-{i}"), 3000, GI).into());
    }
    for i in 0..6 {
        s.pods.push(pending(&format!("small-{i}"), 1000, GI).into());
    }
    // A memory-heavy one: 12 GiB fits beside nothing else big.
    s.pods.push(pending("mem", 100, 12 * GI).into());
    let d = plan_it(&s, &c);
    assert_eq!(scale_up_of(&d), Some(("workers", 4)), "{d:#?}");
    assert_eq!(d.bucket_counts().get(&Bucket::ScalingUp), Some(&10));
}

#[test]
fn least_waste_expander_picks_the_snugger_group() {
    let groups = group("huge", 5, "32", "128Gi", "") + &group("fit", 5, "4", "16Gi", "");
    let c = mk_config_groups("", &groups);
    let mut s = Snapshot::default();
    s.pods.push(pending("a", 3500, 12 * GI).into());
    let d = plan_it(&s, &c);
    assert_eq!(scale_up_of(&d), Some(("fit", 1)), "{d:#?}");
}

#[test]
fn priority_expander_fills_on_prem_first_then_bursts_to_the_cloud() {
    let groups = group("cloud-os", 10, "4", "16Gi", "") + &group("onprem-pve", 2, "4", "16Gi", "");
    let top = "expander: {type: priority, priorities: [\"onprem-.*\", \"cloud-.*\"]}";
    let c = mk_config_groups(top, &groups);
    let mut s = Snapshot::default();
    for i in 0..4 {
        s.pods.push(pending(&format!("p-{i}"), 3000, GI).into());
    }
    let d = plan_it(&s, &c);
    assert_eq!(scale_up_of(&d), Some(("onprem-pve", 2)), "{d:#?}");
    // Once the on-prem VMs are on their way (and the group is full), the rest bursts.
    for n in ["dev-onprem-pve-a", "dev-onprem-pve-b"] {
        let mut server = mk_server(n, ago(10));
        server.group = Some("onprem-pve".into());
        s.servers.push(server);
    }
    let d = plan_it(&s, &c);
    assert_eq!(scale_up_of(&d), Some(("cloud-os", 2)), "{d:#?}");
    assert_eq!(d.bucket_counts().get(&Bucket::CapacityComing), Some(&2));
}

#[test]
fn price_expander_picks_the_cheapest_per_pod() {
    let groups = group("dear", 5, "4", "16Gi", "  price: 1.0")
        + &group("cheap", 5, "4", "16Gi", "  price: 0.2");
    let c = mk_config_groups("expander: {type: price}", &groups);
    let mut s = Snapshot::default();
    s.pods.push(pending("a", 1000, GI).into());
    let d = plan_it(&s, &c);
    assert_eq!(scale_up_of(&d), Some(("cheap", 1)), "{d:#?}");
}

#[test]
fn cluster_limits_cap_the_scale_up_and_say_so() {
    let c = mk_config_groups(
        "limits: {nodes: 3, cpu: \"100\"}",
        &group("workers", 10, "4", "16Gi", ""),
    );
    let mut s = Snapshot::default();
    mk_member_in(&mut s, "dev-workers-a", "workers", 4000, 16 * GI);
    s.pods
        .push(running("busy", "dev-workers-a", 4000, GI).into());
    for i in 0..5 {
        s.pods.push(pending(&format!("p-{i}"), 3000, GI).into());
    }
    let d = plan_it(&s, &c);
    assert_eq!(scale_up_of(&d), Some(("workers", 2)), "{d:#?}");
    assert!(d.has_reason(ReasonCode::ClusterLimitReached), "{d:#?}");
    assert_eq!(
        d.bucket_counts().get(&Bucket::NoCapacity),
        Some(&3),
        "{d:#?}"
    );

    let c = mk_config_groups(
        "limits: {cpu: \"8\"}",
        &group("workers", 10, "4", "16Gi", ""),
    );
    let d = plan_it(&s, &c);
    assert_eq!(scale_up_of(&d), Some(("workers", 1)), "{d:#?}");
}

#[test]
fn a_provider_that_cannot_be_listed_freezes_only_its_groups() {
    let groups = group("os", 5, "4", "16Gi", "")
        + r#"- name: kam
  provider: kamatera
  maxSize: 5
  kamatera: {datacenter: EU, image: ubuntu, cpu: 4B, ram: 16 GiB}
  reserved: {memory: 0}
  userData: {template: nodewright-plan-test.j2}
"#;
    let top = "expander: {type: priority, priorities: [\"os\", \"kam\"]}";
    let c = mk_config_groups(top, &groups);
    let mut s = Snapshot::default();
    s.group_shapes.insert(
        "kam".into(),
        crate::model::GroupShape {
            cpu_milli: Some(4000),
            memory: Some(16 * GI),
            ..Default::default()
        },
    );
    s.unavailable_providers
        .insert("openstack".into(), "HTTP 503 from Nova".into());
    s.pods.push(pending("p", 1000, GI).into());
    let d = plan_it(&s, &c);
    assert_eq!(scale_up_of(&d), Some(("kam", 1)), "{d:#?}");
    assert!(d.has_reason(ReasonCode::ProviderUnavailable), "{d:#?}");
}

/// Found by the crash-and-fault runs: with one provider frozen its VMs were missing
/// from the count, and another group scaled past `limits.nodes`.
#[test]
fn limits_hold_while_a_provider_is_frozen() {
    let groups = group("os", 5, "4", "16Gi", "")
        + r#"- name: kam
  provider: kamatera
  maxSize: 3
  kamatera: {datacenter: EU, image: ubuntu, cpu: 4B, ram: 16 GiB}
  reserved: {memory: 0}
  userData: {template: nodewright-plan-test.j2}
"#;
    for (limit, want) in [(6, Some(("os", 1))), (5, None)] {
        let c = mk_config_groups(&format!("limits: {{nodes: {limit}}}"), &groups);
        let mut s = Snapshot::default();
        mk_member_in(&mut s, "dev-os-a", "os", 4000, 16 * GI);
        mk_member_in(&mut s, "dev-os-b", "os", 4000, 16 * GI);
        s.unavailable_providers
            .insert("kamatera".into(), "HTTP 503".into());
        // Two fit the os nodes; three more would need three new nodes.
        for i in 0..5 {
            s.pods.push(pending(&format!("p{i}"), 3000, GI).into());
        }
        let d = plan_it(&s, &c);
        // 2 os nodes + kam counted at its maxSize 3.
        assert_eq!(scale_up_of(&d), want, "limit {limit}: {d:#?}");
    }
}

#[test]
fn model_mismatch_waits_out_the_grace_then_gets_a_node() {
    let c = mk_config_groups(
        "modelMismatchGrace: 2m",
        &group("workers", 5, "4", "16Gi", ""),
    );
    let mut s = Snapshot::default();
    mk_member_in(&mut s, "dev-workers-a", "workers", 4000, 16 * GI);
    let mut p = pending("odd", 1000, GI);
    p.unschedulable_since = Some(ago(30));
    s.pods.push(p.into());
    let d = plan_it(&s, &c);
    assert_eq!(scale_up_of(&d), None, "{d:#?}");
    assert_eq!(d.bucket_of("default", "odd"), Some(Bucket::WillSchedule));
    std::sync::Arc::make_mut(&mut s.pods[0]).unschedulable_since = Some(ago(600));
    let d = plan_it(&s, &c);
    assert!(d.has_reason(ReasonCode::ModelMismatch), "{d:#?}");
    assert_eq!(scale_up_of(&d), Some(("workers", 1)), "{d:#?}");
}

#[test]
fn free_cpu_target_adds_capacity() {
    let c = mk_config_groups("freeCpuTarget: 2", &group("workers", 5, "4", "16Gi", ""));
    let mut s = Snapshot::default();
    mk_member_in(&mut s, "dev-workers-a", "workers", 4000, 16 * GI);
    s.pods
        .push(running("busy", "dev-workers-a", 3000, GI).into());
    let d = plan_it(&s, &c);
    assert_eq!(scale_up_of(&d), Some(("workers", 1)), "{d:#?}");
    assert!(d.has_reason(ReasonCode::FreeCpuBelowTarget));
}

#[test]
fn scale_down_keeps_a_node_whose_pods_fit_elsewhere_by_memory_but_not_cpu() {
    let c = mk_config_groups(
        "scaleDown: {delayAfterAdd: 1m}",
        &group("workers", 5, "4", "16Gi", ""),
    );
    let mut s = Snapshot::default();
    mk_member_in(&mut s, "dev-workers-a", "workers", 4000, 16 * GI);
    mk_member_in(&mut s, "dev-workers-b", "workers", 4000, 16 * GI);
    s.pods.push(running("a", "dev-workers-a", 3000, GI).into());
    s.pods.push(running("b", "dev-workers-b", 3000, GI).into());
    let d = super::plan_after_unneeded(&s, &c, 3600);
    assert!(!matches!(d.action, Action::Cordon { .. }), "{d:#?}");
    // With CPU to spare, one of them goes.
    std::sync::Arc::make_mut(&mut s.pods[1]).requests.cpu = 500;
    let d = super::plan_after_unneeded(&s, &c, 3600);
    assert!(matches!(d.action, Action::Cordon { .. }), "{d:#?}");
}

#[test]
fn a_model_mismatch_gets_one_node_not_one_per_cycle() {
    let c = mk_config_groups(
        "modelMismatchGrace: 2m",
        &group("workers", 9, "4", "16Gi", ""),
    );
    let mut s = Snapshot::default();
    mk_member_in(&mut s, "dev-workers-a", "workers", 4000, 16 * GI);
    let mut p = pending("odd", 1000, GI);
    p.unschedulable_since = Some(ago(600));
    s.pods.push(p.into());
    let d = plan_it(&s, &c);
    assert_eq!(scale_up_of(&d), Some(("workers", 1)), "{d:#?}");
    // That node came and joined; the scheduler still refuses the pod: no more nodes.
    mk_member_in(&mut s, "dev-workers-b", "workers", 4000, 16 * GI);
    s.servers[1].created = ago(300);
    let d = plan_it(&s, &c);
    assert_eq!(scale_up_of(&d), None, "{d:#?}");
    assert_eq!(
        d.bucket_of("default", "odd"),
        Some(Bucket::NoCapacity),
        "{d:#?}"
    );
}

#[test]
fn pods_whose_affinity_no_new_node_satisfies_are_told_so() {
    let c = mk_config_groups("", &group("workers", 5, "4", "16Gi", ""));
    let mut s = Snapshot::default();
    let mut p = pending("needs-db-zone", 100, GI);
    // Affinity to pods that exist only in zone z1, which no group offers.
    p.pod_affinity.push(PodAffinityTerm {
        selector: LabelSelector {
            match_labels: BTreeMap::from([("app".to_string(), "db".to_string())]),
            ..Default::default()
        },
        namespaces: Namespaces::Listed(vec!["default".into()]),
        topology_key: ZONE.into(),
    });
    s.pods.push(p.into());
    mk_member_in(&mut s, "dev-other-z1", "other", 100, GI);
    s.nodes[0].labels.insert(ZONE.into(), "z1".into());
    let mut db = running("db-0", "dev-other-z1", 100, GI / 2);
    db.labels.insert("app".into(), "db".into());
    s.pods.push(db.into());
    let d = plan_it(&s, &c);
    assert_eq!(scale_up_of(&d), None, "{d:#?}");
    assert_eq!(
        d.bucket_of("default", "needs-db-zone"),
        Some(Bucket::NoCapacity),
        "{d:#?}"
    );
    assert!(d.has_reason(ReasonCode::NoGroupFits), "{d:#?}");
}

#[test]
fn hybrid_burst_leftovers_are_capacity_coming_not_starving() {
    let groups = group("cloud-os", 10, "4", "16Gi", "") + &group("onprem-pve", 2, "4", "16Gi", "");
    let top = "expander: {type: priority, priorities: [\"onprem-.*\", \"cloud-.*\"]}";
    let c = mk_config_groups(top, &groups);
    let mut s = Snapshot::default();
    for i in 0..4 {
        s.pods.push(pending(&format!("p-{i}"), 3000, GI).into());
    }
    let d = plan_it(&s, &c);
    assert_eq!(scale_up_of(&d), Some(("onprem-pve", 2)), "{d:#?}");
    let counts = d.bucket_counts();
    assert_eq!(counts.get(&Bucket::ScalingUp), Some(&2), "{d:#?}");
    assert_eq!(counts.get(&Bucket::CapacityComing), Some(&2), "{d:#?}");
    assert_eq!(counts.get(&Bucket::NoCapacity), None, "{d:#?}");
}

#[test]
fn a_frozen_group_without_a_shape_is_reported_frozen_not_too_small() {
    let c = mk_config_groups(
        "",
        &group("os", 5, "4", "16Gi", "").replace("  resources: {cpu: \"4\", memory: 16Gi}\n", ""),
    );
    let mut s = Snapshot::default();
    s.unavailable_providers
        .insert("openstack".into(), "HTTP 503".into());
    s.pods.push(pending("p", 1000, GI).into());
    let d = plan_it(&s, &c);
    let detail = d
        .pending
        .iter()
        .find(|p| p.pod.name == "p")
        .map(|p| p.detail.clone())
        .unwrap_or_default();
    assert!(detail.contains("frozen"), "{detail}: {d:#?}");
    assert!(!detail.contains("a node has 0"), "{detail}");
}

#[test]
fn an_idle_on_prem_node_stays_while_cloud_nodes_run_pods() {
    let groups = group("cloud-os", 10, "4", "16Gi", "") + &group("onprem-pve", 2, "4", "16Gi", "");
    let top = "expander: {type: priority, priorities: [\"onprem-.*\", \"cloud-.*\"]}\nscaleDown: {delayAfterAdd: 1m}";
    let c = mk_config_groups(top, &groups);
    let mut s = Snapshot::default();
    mk_member_in(&mut s, "dev-onprem-pve-a", "onprem-pve", 4000, 16 * GI);
    mk_member_in(&mut s, "dev-cloud-os-a", "cloud-os", 4000, 16 * GI);
    s.pods
        .push(running("busy", "dev-cloud-os-a", 3500, 12 * GI).into());
    let d = super::plan_after_unneeded(&s, &c, 3600);
    assert!(
        !matches!(&d.action, Action::Cordon { nodes, .. } if nodes.contains(&"dev-onprem-pve-a".to_string())),
        "{d:#?}"
    );
    // Once the cloud node is idle too, the cloud goes first.
    s.pods.clear();
    let d = super::plan_after_unneeded(&s, &c, 3600);
    assert!(
        matches!(&d.action, Action::Cordon { nodes, .. } if nodes.first().map(String::as_str) == Some("dev-cloud-os-a")),
        "{d:#?}"
    );
}

/// What a provider found that no server carries (a clone a process gone started that
/// failed) is a note of the plan, whatever the action, so `plan`, the status ConfigMap
/// and an Event show it.
#[test]
fn a_providers_finding_is_a_note_of_any_decision() {
    let c = mk_config_groups("", &group("workers", 5, "4", "16Gi", ""));
    let mut s = Snapshot::default();
    s.cloud_failures.push((
        "proxmox".into(),
        "clone UPID:pve1:1 failed: exit status 'no space left'".into(),
    ));
    let d = plan_it(&s, &c);
    assert_eq!(d.action, Action::None, "{d:#?}");
    let note = d
        .notes
        .iter()
        .find(|n| n.code == ReasonCode::ServerError)
        .expect("a ServerError note");
    assert!(
        note.message
            .starts_with("provider proxmox: clone UPID:pve1:1"),
        "{note:?}"
    );
    assert!(note.objects.is_empty(), "{note:?}");
    s.pods.push(pending("p", 1000, GI).into());
    let d = plan_it(&s, &c);
    assert!(matches!(d.action, Action::ScaleUp { .. }), "{d:#?}");
    assert!(
        d.notes.iter().any(|n| n.message.contains("no space left")),
        "{d:#?}"
    );
}

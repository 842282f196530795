//! The scheduling model against the scheduler's rules, with small builders.

use std::collections::BTreeMap;

use super::*;
use crate::model::{
    HostPort, LabelSelector, Namespaces, NodeSelectorTerm, Operator, PodAffinityTerm, PodPhase,
    Requirement, SpreadConstraint, Toleration,
};

const GI: u64 = 1 << 30;
const HOST: &str = "kubernetes.io/hostname";
const ZONE: &str = "topology.kubernetes.io/zone";

fn mk_node(name: &str, zone: &str, cpu: u64, mem_gi: u64) -> NodeInfo {
    let mut allocatable = Resources::cpu_mem(cpu, mem_gi * GI);
    allocatable.pods = 110;
    NodeInfo {
        name: name.into(),
        labels: BTreeMap::from([
            (HOST.to_string(), name.to_string()),
            (ZONE.to_string(), zone.to_string()),
            ("kubernetes.io/os".to_string(), "linux".to_string()),
        ]),
        annotations: BTreeMap::new(),
        created: std::time::UNIX_EPOCH,
        unschedulable: false,
        ready: true,
        taints: vec![],
        allocatable,
        images: Default::default(),
        image_listing: Default::default(),
        deleting: false,
        ready_changed: None,
        kubelet_version: None,
    }
}

fn mk_pod(name: &str, node: Option<&str>, cpu: u64, mem_gi: u64) -> PodInfo {
    let mut p = PodInfo::new("default", name);
    p.node_name = node.map(str::to_string);
    p.phase = if node.is_some() {
        PodPhase::Running
    } else {
        PodPhase::Pending
    };
    p.requests.cpu = cpu;
    p.requests.memory = mem_gi * GI;
    p.labels.insert("app".into(), "web".into());
    p
}

fn app_selector() -> LabelSelector {
    LabelSelector {
        match_labels: BTreeMap::from([("app".to_string(), "web".to_string())]),
        ..LabelSelector::default()
    }
}

fn anti(key: &str) -> PodAffinityTerm {
    PodAffinityTerm {
        selector: app_selector(),
        namespaces: Namespaces::Listed(vec!["default".into()]),
        topology_key: key.into(),
    }
}

fn check(nodes: &[NodeInfo], pods: &[PodInfo], pod: &PodInfo, node: &str) -> Result<(), Unfit> {
    let mut m = Model::of_cluster(nodes, pods);
    let i = m.slot_index(node).expect("node in model");
    // The pod under test is not in `pods`; borrow it for the model's lifetime.
    let pod: &PodInfo = leak(pod);
    m.check(pod, i)
}

/// Tests only: keeps a pod alive for the model's borrow without threading lifetimes.
fn leak(p: &PodInfo) -> &'static PodInfo {
    Box::leak(Box::new(p.clone()))
}

#[test]
fn pod_short_of_cpu_does_not_fit_though_memory_does() {
    let nodes = [mk_node("n1", "a", 2000, 8)];
    let pods = [mk_pod("busy", Some("n1"), 1500, 1)];
    let r = check(&nodes, &pods, &mk_pod("new", None, 1000, 1), "n1");
    assert_eq!(r, Err(Unfit::Insufficient(vec!["cpu"])));
    assert!(check(&nodes, &pods, &mk_pod("small", None, 500, 1), "n1").is_ok());
}

#[test]
fn pods_per_node_are_a_resource() {
    let mut n = mk_node("n1", "a", 2000, 8);
    n.allocatable.pods = 1;
    let pods = [mk_pod("one", Some("n1"), 0, 0)];
    let r = check(&[n], &pods, &mk_pod("two", None, 0, 0), "n1");
    assert_eq!(r, Err(Unfit::Insufficient(vec!["pods"])));
}

#[test]
fn extended_and_hugepages_resources_must_be_offered() {
    let mut gpu_node = mk_node("gpu", "a", 8000, 32);
    gpu_node.allocatable.set("nvidia.com/gpu", 1.0);
    let plain = mk_node("plain", "a", 8000, 32);
    let mut pod = mk_pod("train", None, 100, 1);
    pod.requests.set("nvidia.com/gpu", 1.0);
    let nodes = [gpu_node, plain];
    assert!(check(&nodes, &[], &pod, "gpu").is_ok());
    assert_eq!(
        check(&nodes, &[], &pod, "plain"),
        Err(Unfit::Insufficient(vec!["extended"]))
    );
    let mut huge = mk_pod("huge", None, 100, 1);
    huge.requests.set("hugepages-2Mi", (512u64 << 20) as f64);
    assert!(check(&nodes, &[], &huge, "gpu").is_err());
}

#[test]
fn node_selector_and_required_node_affinity() {
    let nodes = [mk_node("n1", "a", 2000, 8), mk_node("n2", "b", 2000, 8)];
    let mut p = mk_pod("p", None, 100, 1);
    p.node_selector
        .insert("kubernetes.io/os".into(), "linux".into());
    assert!(check(&nodes, &[], &p, "n1").is_ok());
    p.node_affinity = Some(vec![NodeSelectorTerm {
        expressions: vec![Requirement {
            key: ZONE.into(),
            operator: Operator::In,
            values: vec!["b".into()],
        }],
        fields: vec![],
    }]);
    assert_eq!(check(&nodes, &[], &p, "n1"), Err(Unfit::NodeAffinity));
    assert!(check(&nodes, &[], &p, "n2").is_ok());
    p.node_selector.insert("disk".into(), "ssd".into());
    assert_eq!(check(&nodes, &[], &p, "n2"), Err(Unfit::NodeSelector));
}

#[test]
fn taints_need_tolerations_and_prefer_no_schedule_is_ignored() {
    let mut n = mk_node("n1", "a", 2000, 8);
    n.taints.push(Taint {
        key: "dedicated".into(),
        value: Some("batch".into()),
        effect: "NoSchedule".into(),
    });
    n.taints.push(Taint {
        key: "soft".into(),
        value: None,
        effect: "PreferNoSchedule".into(),
    });
    let nodes = [n];
    let mut p = mk_pod("p", None, 100, 1);
    assert_eq!(
        check(&nodes, &[], &p, "n1"),
        Err(Unfit::Taint("dedicated=batch:NoSchedule".into()))
    );
    p.tolerations.push(Toleration {
        key: Some("dedicated".into()),
        operator: Some("Equal".into()),
        value: Some("batch".into()),
        effect: Some("NoSchedule".into()),
    });
    assert!(check(&nodes, &[], &p, "n1").is_ok());
}

#[test]
fn cordoned_nodes_take_only_pods_tolerating_unschedulable() {
    let mut n = mk_node("n1", "a", 2000, 8);
    n.unschedulable = true;
    let nodes = [n];
    let mut p = mk_pod("p", None, 100, 1);
    assert_eq!(check(&nodes, &[], &p, "n1"), Err(Unfit::Unschedulable));
    p.tolerations.push(Toleration {
        key: Some(UNSCHEDULABLE_TAINT.into()),
        operator: Some("Exists".into()),
        value: None,
        effect: None,
    });
    assert!(check(&nodes, &[], &p, "n1").is_ok());
}

#[test]
fn host_ports_conflict() {
    let nodes = [mk_node("n1", "a", 2000, 8)];
    let mut running = mk_pod("ingress-1", Some("n1"), 100, 1);
    running.host_ports.push(HostPort {
        protocol: "TCP".into(),
        port: 443,
        ip: String::new(),
    });
    let mut p = mk_pod("ingress-2", None, 100, 1);
    p.host_ports = running.host_ports.clone();
    assert_eq!(check(&nodes, &[running], &p, "n1"), Err(Unfit::HostPort));
}

#[test]
fn hostname_anti_affinity_keeps_replicas_apart_both_ways() {
    let nodes = [mk_node("n1", "a", 4000, 8), mk_node("n2", "a", 4000, 8)];
    let plain_running = [mk_pod("web-0", Some("n1"), 100, 1)];
    let mut p = mk_pod("web-2", None, 100, 1);
    p.pod_anti_affinity.push(anti(HOST));
    assert_eq!(
        check(&nodes, &plain_running, &p, "n1"),
        Err(Unfit::PodAntiAffinity)
    );
    assert!(check(&nodes, &plain_running, &p, "n2").is_ok());
    let mut running = mk_pod("web-1", Some("n1"), 100, 1);
    running.pod_anti_affinity.push(anti(HOST));
    let pods = [running.clone()];
    assert!(check(&nodes, &pods, &p, "n1").is_err());
    assert!(check(&nodes, &pods, &p, "n2").is_ok());
    // Symmetry: a pod without rules is still kept away by the running pod's rule.
    let plain = mk_pod("web-3", None, 100, 1);
    assert_eq!(
        check(&nodes, &pods, &plain, "n1"),
        Err(Unfit::ExistingAntiAffinity)
    );
}

#[test]
fn pod_affinity_needs_a_match_in_the_zone_except_for_the_first_pod() {
    let nodes = [mk_node("n1", "a", 4000, 8), mk_node("n2", "b", 4000, 8)];
    let mut p = mk_pod("web-2", None, 100, 1);
    p.pod_affinity.push(anti(ZONE));
    // Nothing matches anywhere and the pod matches its own term: the first of its kind.
    assert!(check(&nodes, &[], &p, "n1").is_ok());
    let running = mk_pod("web-1", Some("n2"), 100, 1);
    assert_eq!(
        check(&nodes, std::slice::from_ref(&running), &p, "n1"),
        Err(Unfit::PodAffinity)
    );
    assert!(check(&nodes, &[running], &p, "n2").is_ok());
}

#[test]
fn zone_spread_refuses_the_fuller_zone() {
    let nodes = [mk_node("n1", "a", 4000, 8), mk_node("n2", "b", 4000, 8)];
    let pods = [mk_pod("web-1", Some("n1"), 100, 1)];
    let mut p = mk_pod("web-2", None, 100, 1);
    p.spread.push(SpreadConstraint {
        max_skew: 1,
        topology_key: ZONE.into(),
        selector: app_selector(),
        min_domains: None,
        honor_node_affinity: true,
        honor_taints: false,
    });
    assert_eq!(check(&nodes, &pods, &p, "n1"), Err(Unfit::TopologySpread));
    assert!(check(&nodes, &pods, &p, "n2").is_ok());
    // A node without the topology label cannot take it at all.
    let mut bare = mk_node("n3", "c", 4000, 8);
    bare.labels.remove(ZONE);
    let nodes = [nodes[0].clone(), bare];
    assert_eq!(
        check(&nodes, &pods, &p, "n3"),
        Err(Unfit::MissingTopologyLabel(ZONE.into()))
    );
}

#[test]
fn first_fit_decreasing_packs_mixed_shapes_and_rollback_restores() {
    let nodes = [mk_node("n1", "a", 4000, 8), mk_node("n2", "a", 4000, 8)];
    let pending: Vec<PodInfo> = (0..6)
        .map(|i| mk_pod(&format!("p{i}"), None, 1500, 1))
        .collect();
    let mut m = Model::of_cluster(&nodes, &[]);
    let cp = m.checkpoint();
    let mut refs: Vec<&PodInfo> = pending.iter().collect();
    sort_for_packing(&mut refs, &Resources::cpu_mem(4000, 8 * GI));
    let (placed, left) = first_fit(&mut m, &refs, |_| true);
    // Two 1.5-CPU pods per 4-CPU node.
    assert_eq!((placed.len(), left.len()), (4, 2));
    m.rollback(cp);
    assert_eq!(m.slots[0].used, Resources::default());
    assert_eq!(m.pods_on(0).len(), 0);
}

#[test]
fn new_nodes_are_packed_first_fit_decreasing_over_cpu_and_memory() {
    let mut template = Slot::for_node(Box::leak(Box::new(mk_node("t", "a", 4000, 16))));
    template.kind = SlotKind::New("g".into());
    // 3 pods of 3 CPU (one per node), 6 pods of 1 CPU fill the gaps (3 × 1 CPU), then
    // need one more node for the other 3.
    let pods: Vec<PodInfo> = (0..3)
        .map(|i| mk_pod(&format!("big{i}"), None, 3000, 1))
        .chain((0..6).map(|i| mk_pod(&format!("small{i}"), None, 1000, 1)))
        .collect();
    let mut refs: Vec<&PodInfo> = pods.iter().collect();
    sort_for_packing(&mut refs, &template.allocatable);
    let mut m = Model::new();
    let nodes = pack_new_nodes(&mut m, &refs, &template, &Resources::default(), 10, &[]);
    assert_eq!(nodes.count, 4);
    assert_eq!(nodes.placed.len(), 9);
    let limited = {
        let mut m = Model::new();
        pack_new_nodes(&mut m, &refs, &template, &Resources::default(), 2, &[])
    };
    assert_eq!(limited.count, 2);
    assert!(!limited.over_room.is_empty());
}

#[test]
fn daemonset_overhead_counts_one_pod_per_daemonset_that_would_land() {
    let template = Slot::for_node(Box::leak(Box::new(mk_node("t", "a", 4000, 16))));
    let ds = |name: &str, owner: &str, cpu| {
        let mut p = mk_pod(name, Some("elsewhere"), cpu, 0);
        p.controller_kind = Some("DaemonSet".into());
        p.controller_name = Some(owner.into());
        // Pinned to its node as the DaemonSet controller does.
        p.node_affinity = Some(vec![NodeSelectorTerm {
            expressions: vec![],
            fields: vec![Requirement {
                key: "metadata.name".into(),
                operator: Operator::In,
                values: vec!["elsewhere".into()],
            }],
        }]);
        p
    };
    let mut gpu_only = ds("nvidia-1", "nvidia", 300);
    gpu_only.node_selector.insert("gpu".into(), "true".into());
    let pods = vec![
        ds("proxy-1", "proxy", 100),
        ds("proxy-2", "proxy", 100),
        ds("logs-1", "logs", 200),
        gpu_only,
    ];
    let overhead = daemonset_overhead(&pods, &template);
    assert_eq!(overhead.cpu, 300);
}

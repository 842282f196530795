//! What claims mean for where a pod may run, and which volumes pin a node.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::*;
use crate::plan::sched::spec::{NodeSelectorTerm, Operator, Requirement};
use crate::plan::sched::{Model, Resources, Unfit};
use crate::plan::{NodeInfo, PodInfo};

fn term(key: &str, values: &[&str]) -> NodeSelectorTerm {
    NodeSelectorTerm {
        expressions: vec![Requirement {
            key: key.into(),
            operator: Operator::In,
            values: values.iter().map(|v| v.to_string()).collect(),
        }],
        fields: Vec::new(),
    }
}

fn pv(name: &str, affinity: Option<Vec<NodeSelectorTerm>>, csi: Option<&str>) -> PvInfo {
    PvInfo {
        name: name.into(),
        node_affinity: affinity,
        local: false,
        csi_driver: csi.map(str::to_string),
        claim: None,
    }
}

fn claim(name: &str, volume: Option<&str>, class: Option<&str>) -> ClaimInfo {
    ClaimInfo {
        namespace: "default".into(),
        name: name.into(),
        volume_name: volume.map(str::to_string),
        storage_class: class.map(str::to_string),
        selected_node: None,
    }
}

fn class(name: &str, wffc: bool, allowed: Option<Vec<NodeSelectorTerm>>) -> ClassInfo {
    ClassInfo {
        name: name.into(),
        provisioner: "rancher.io/local-path".into(),
        wait_for_first_consumer: wffc,
        allowed_topologies: allowed,
        default: false,
    }
}

fn node(name: &str, zone: &str) -> NodeInfo {
    let mut labels = BTreeMap::new();
    labels.insert(HOSTNAME_LABEL.to_string(), name.to_string());
    labels.insert("topology.kubernetes.io/zone".to_string(), zone.to_string());
    let mut allocatable = Resources::cpu_mem(4000, 8 << 30);
    allocatable.pods = 110;
    NodeInfo {
        name: name.into(),
        labels,
        annotations: BTreeMap::new(),
        created: std::time::UNIX_EPOCH,
        unschedulable: false,
        ready: true,
        taints: Vec::new(),
        allocatable,
        images: Default::default(),
        deleting: false,
        ready_changed: None,
    }
}

fn pod(name: &str, node: Option<&str>, claims: &[(&str, &str)]) -> PodInfo {
    let mut p = PodInfo::new("default", name);
    p.node_name = node.map(str::to_string);
    p.claims = claims
        .iter()
        .map(|(v, c)| PodClaim {
            volume: v.to_string(),
            claim: c.to_string(),
        })
        .collect();
    p
}

fn resolved(v: &Volumes, nodes: &mut [NodeInfo], p: PodInfo) -> PodInfo {
    let mut pods = vec![Arc::new(p)];
    resolve(v, nodes, &mut pods);
    (*pods[0]).clone()
}

fn fits<'a>(
    nodes: &'a [NodeInfo],
    bound: &'a [PodInfo],
    p: &'a PodInfo,
    on: &str,
) -> Result<(), Unfit> {
    let mut model = Model::of_cluster(nodes, bound);
    let i = model
        .slots
        .iter()
        .position(|s| s.name == on)
        .unwrap_or_else(|| panic!("no slot {on}"));
    model.check(p, i)
}

#[test]
fn a_local_path_volume_pins_the_node_its_affinity_names() {
    let local = pv("pvc-1", Some(vec![term(HOSTNAME_LABEL, &["host-a"])]), None);
    assert_eq!(local.pinned_node(), Some("host-a"));
    let zonal = pv(
        "z",
        Some(vec![term("topology.kubernetes.io/zone", &["a"])]),
        None,
    );
    assert_eq!(zonal.pinned_node(), None);
    let two = pv("two", Some(vec![term(HOSTNAME_LABEL, &["a", "b"])]), None);
    assert_eq!(two.pinned_node(), None);
    let split = pv(
        "split",
        Some(vec![
            term(HOSTNAME_LABEL, &["a"]),
            term(HOSTNAME_LABEL, &["b"]),
        ]),
        None,
    );
    assert_eq!(split.pinned_node(), None);
    assert_eq!(pv("nfs", None, None).pinned_node(), None);
}

#[test]
fn a_pod_bound_to_a_local_volume_fits_only_its_node() {
    let v = Volumes {
        pvs: vec![pv("pvc-1", Some(vec![term(HOSTNAME_LABEL, &["a"])]), None)],
        claims: vec![claim("data", Some("pvc-1"), Some("local-path"))],
        ..Volumes::default()
    };
    let mut nodes = vec![node("a", "z1"), node("b", "z1")];
    let p = resolved(&v, &mut nodes, pod("db", None, &[("data", "data")]));
    assert_eq!(p.local_volumes.len(), 1);
    assert_eq!(p.local_volumes[0].node, "a");
    assert_eq!(p.local_volumes[0].pv, "pvc-1");
    assert_eq!(fits(&nodes, &[], &p, "a"), Ok(()));
    assert_eq!(fits(&nodes, &[], &p, "b"), Err(Unfit::VolumeNodeAffinity));
}

#[test]
fn the_pinned_node_is_found_by_its_hostname_label_not_its_name() {
    let v = Volumes {
        pvs: vec![pv(
            "pvc-1",
            Some(vec![term(HOSTNAME_LABEL, &["host-a"])]),
            None,
        )],
        claims: vec![claim("data", Some("pvc-1"), None)],
        ..Volumes::default()
    };
    let mut n = node("node-a.example", "z1");
    n.labels.insert(HOSTNAME_LABEL.into(), "host-a".into());
    let p = resolved(&v, &mut [n], pod("db", None, &[("data", "data")]));
    assert_eq!(p.local_volumes[0].node, "node-a.example");
}

#[test]
fn an_unbound_wait_for_first_consumer_claim_fits_only_its_allowed_topologies() {
    let v = Volumes {
        claims: vec![claim("data", None, Some("zonal"))],
        classes: vec![class(
            "zonal",
            true,
            Some(vec![term("topology.kubernetes.io/zone", &["z2"])]),
        )],
        ..Volumes::default()
    };
    let mut nodes = vec![node("a", "z1"), node("b", "z2")];
    let p = resolved(&v, &mut nodes, pod("db", None, &[("data", "data")]));
    assert_eq!(fits(&nodes, &[], &p, "a"), Err(Unfit::VolumeNodeAffinity));
    assert_eq!(fits(&nodes, &[], &p, "b"), Ok(()));
    assert!(p.local_volumes.is_empty());
}

#[test]
fn an_unbound_claim_without_topology_of_the_default_class_fits_anywhere() {
    let mut default = class("local-path", true, None);
    default.default = true;
    let v = Volumes {
        claims: vec![claim("data", None, None)],
        classes: vec![default],
        ..Volumes::default()
    };
    let mut nodes = vec![node("a", "z1")];
    let p = resolved(&v, &mut nodes, pod("db", None, &[("data", "data")]));
    assert_eq!(p.volume_problem, None);
    assert_eq!(fits(&nodes, &[], &p, "a"), Ok(()));
}

#[test]
fn a_missing_claim_or_an_unbound_immediate_claim_fits_no_node() {
    let v = Volumes {
        claims: vec![claim("late", None, Some("fast"))],
        classes: vec![class("fast", false, None)],
        ..Volumes::default()
    };
    let mut nodes = vec![node("a", "z1")];
    let p = resolved(&v, &mut nodes, pod("db", None, &[("data", "nope")]));
    assert!(
        matches!(fits(&nodes, &[], &p, "a"), Err(Unfit::Volume(w)) if w.contains("\"nope\" not found"))
    );
    let p = resolved(&v, &mut nodes, pod("db", None, &[("data", "late")]));
    assert!(
        matches!(fits(&nodes, &[], &p, "a"), Err(Unfit::Volume(w)) if w.contains("unbound immediate"))
    );
}

#[test]
fn csi_attach_limits_count_where_a_driver_publishes_them() {
    let v = Volumes {
        pvs: vec![
            pv("ebs-1", None, Some("ebs.csi.aws.com")),
            pv("ebs-2", None, Some("ebs.csi.aws.com")),
        ],
        claims: vec![
            claim("one", Some("ebs-1"), None),
            claim("two", Some("ebs-2"), None),
        ],
        csi_nodes: vec![CsiNodeInfo {
            node: "a".into(),
            limits: [("ebs.csi.aws.com".to_string(), 1)].into(),
        }],
        ..Volumes::default()
    };
    let mut nodes = vec![node("a", "z1"), node("b", "z1")];
    let mut pods = vec![
        Arc::new(pod("first", Some("a"), &[("v", "one")])),
        Arc::new(pod("second", None, &[("v", "two")])),
    ];
    resolve(&v, &mut nodes, &mut pods);
    // Resolving twice changes nothing more.
    resolve(&v, &mut nodes, &mut pods);
    let key = attach_resource("ebs.csi.aws.com");
    assert_eq!(nodes[0].allocatable.scalar.get(&key), Some(&1));
    assert_eq!(pods[1].requests.scalar.get(&key), Some(&1));
    let bound = vec![(*pods[0]).clone()];
    // Node a's one attachment is taken; node b publishes no limit: unlimited.
    assert!(matches!(
        fits(&nodes, &bound, &pods[1], "a"),
        Err(Unfit::Insufficient(_))
    ));
    assert_eq!(fits(&nodes, &bound, &pods[1], "b"), Ok(()));
}

#[test]
fn safe_to_evict_local_volumes_is_a_comma_separated_list() {
    let a = "data, cache,,".to_string();
    assert_eq!(listed_volumes(Some(&a)), ["data", "cache"]);
    assert!(listed_volumes(None).is_empty());
}

//! What claims mean for where a pod may run, and which volumes pin a node.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::*;
use crate::model::{
    CsiNodeInfo, NodeInfo, NodeSelectorTerm, Operator, PodClaim, PodInfo, Requirement, Resources,
};
use crate::plan::sched::{Model, Unfit};

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
        disposable: false,
    }
}

fn claim(name: &str, volume: Option<&str>, class: Option<&str>) -> ClaimInfo {
    ClaimInfo {
        namespace: "default".into(),
        name: name.into(),
        volume_name: volume.map(str::to_string),
        storage_class: class.map(str::to_string),
        selected_node: None,
        disposable: false,
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
        image_listing: Default::default(),
        deleting: false,
        ready_changed: None,
        kubelet_version: None,
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
    resolve(v, nodes, &[], &mut pods);
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

fn requirement(key: &str, operator: Operator, values: &[&str]) -> Requirement {
    Requirement {
        key: key.into(),
        operator,
        values: values.iter().map(|v| v.to_string()).collect(),
    }
}

/// Nodes a, b, c in zone z1, each labelled `openebs.io/nodename` with its name as the
/// OpenEBS node plugin does; a running pod `db` on `on` whose claim is bound to `pv`.
fn pinned_by(pv: PvInfo, on: &str, new: &[NewNode]) -> Vec<LocalVolume> {
    let mut nodes: Vec<NodeInfo> = ["a", "b", "c"].map(|n| node(n, "z1")).into();
    for n in &mut nodes {
        n.labels.insert(OPENEBS_NODENAME.into(), n.name.clone());
    }
    let v = Volumes {
        claims: vec![claim("data", Some(&pv.name), Some("openebs-hostpath"))],
        pvs: vec![pv],
        ..Volumes::default()
    };
    let mut pods = vec![Arc::new(pod("db", Some(on), &[("data", "data")]))];
    resolve(&v, &mut nodes, new, &mut pods);
    pods[0].local_volumes.clone()
}

const OPENEBS_NODENAME: &str = "openebs.io/nodename";

/// A new node of group `workers` as [`new_nodes`] makes it: zone z1, its group label.
fn new_worker() -> NewNode {
    let mut labels = BTreeMap::new();
    labels.insert(HOSTNAME_LABEL.to_string(), "workers-new-0".to_string());
    labels.insert("topology.kubernetes.io/zone".to_string(), "z1".to_string());
    labels.insert(crate::model::LABEL_GROUP.to_string(), "workers".to_string());
    NewNode {
        name: "workers-new-0".into(),
        labels,
    }
}

#[test]
fn a_local_path_volume_pins_the_node_its_affinity_names() {
    let local = pv("pvc-1", Some(vec![term(HOSTNAME_LABEL, &["a"])]), None);
    let pinned = pinned_by(local, "a", &[new_worker()]);
    assert_eq!(pinned.len(), 1);
    assert_eq!(
        (pinned[0].node.as_str(), pinned[0].pv.as_str()),
        ("a", "pvc-1")
    );
    assert_eq!(pinned[0].volume, "data");
    // By `metadata.name` in matchFields, the same.
    let by_name = NodeSelectorTerm {
        expressions: Vec::new(),
        fields: vec![requirement("metadata.name", Operator::In, &["a"])],
    };
    let pinned = pinned_by(pv("pvc-2", Some(vec![by_name]), None), "a", &[]);
    assert_eq!(pinned.first().map(|l| l.node.as_str()), Some("a"));
    // Two hostnames, or one per term (ORed): two nodes reach it.
    let two = pv("two", Some(vec![term(HOSTNAME_LABEL, &["a", "b"])]), None);
    assert!(pinned_by(two, "a", &[]).is_empty());
    let split = pv(
        "split",
        Some(vec![
            term(HOSTNAME_LABEL, &["a"]),
            term(HOSTNAME_LABEL, &["b"]),
        ]),
        None,
    );
    assert!(pinned_by(split, "a", &[]).is_empty());
    assert!(pinned_by(pv("nfs", None, None), "a", &[]).is_empty());
}

#[test]
fn an_openebs_local_pv_pinned_by_openebs_io_nodename_pins_its_node() {
    let openebs = pv(
        "pvc-openebs",
        Some(vec![term(OPENEBS_NODENAME, &["b"])]),
        Some("local.csi.openebs.io"),
    );
    let pinned = pinned_by(openebs, "b", &[new_worker()]);
    assert_eq!(pinned.len(), 1, "{pinned:?}");
    assert_eq!(pinned[0].node, "b");
    assert_eq!(pinned[0].pv, "pvc-openebs");
    assert_eq!(pinned[0].claim, "data");
}

#[test]
fn a_pv_selecting_one_node_by_any_operator_pins_it() {
    // NotIn every other node, ANDed with the zone: node c alone.
    let not_in = NodeSelectorTerm {
        expressions: vec![
            requirement("topology.kubernetes.io/zone", Operator::In, &["z1"]),
            requirement(OPENEBS_NODENAME, Operator::NotIn, &["a", "b"]),
        ],
        fields: Vec::new(),
    };
    let pinned = pinned_by(pv("pvc-c", Some(vec![not_in]), None), "c", &[new_worker()]);
    // A new node of zone z1 lacks openebs.io/nodename, so NotIn selects it too.
    assert!(pinned.is_empty(), "{pinned:?}");
    // With Exists, the new node (no such label) is out and node c alone is left.
    let exists = NodeSelectorTerm {
        expressions: vec![
            requirement(OPENEBS_NODENAME, Operator::Exists, &[]),
            requirement(OPENEBS_NODENAME, Operator::NotIn, &["a", "b"]),
        ],
        fields: Vec::new(),
    };
    let pinned = pinned_by(pv("pvc-c", Some(vec![exists]), None), "c", &[new_worker()]);
    assert_eq!(pinned.first().map(|l| l.node.as_str()), Some("c"));
}

#[test]
fn a_zonal_pv_selecting_many_nodes_does_not_pin() {
    let zonal = pv(
        "pvc-zonal",
        Some(vec![term("topology.kubernetes.io/zone", &["z1"])]),
        Some("disk.csi.example.com"),
    );
    assert!(pinned_by(zonal, "a", &[]).is_empty());
}

#[test]
fn a_pv_whose_selector_matches_a_new_node_of_a_group_does_not_pin() {
    // Node a is the only node of group workers now, but the group can make more.
    let by_group = pv(
        "pvc-group",
        Some(vec![term(crate::model::LABEL_GROUP, &["workers"])]),
        None,
    );
    let mut nodes: Vec<NodeInfo> = vec![node("a", "z1"), node("b", "z1")];
    nodes[0]
        .labels
        .insert(crate::model::LABEL_GROUP.into(), "workers".into());
    let v = Volumes {
        claims: vec![claim("data", Some("pvc-group"), None)],
        pvs: vec![by_group],
        ..Volumes::default()
    };
    let mut pods = vec![Arc::new(pod("db", Some("a"), &[("data", "data")]))];
    resolve(&v, &mut nodes, &[], &mut pods);
    assert_eq!(pods[0].local_volumes.len(), 1, "no group: a alone");
    let mut pods = vec![Arc::new(pod("db", Some("a"), &[("data", "data")]))];
    resolve(&v, &mut nodes, &[new_worker()], &mut pods);
    assert!(
        pods[0].local_volumes.is_empty(),
        "{:?}",
        pods[0].local_volumes
    );
    // `kubernetes.io/hostname Exists` selects every node, new ones too.
    let any = NodeSelectorTerm {
        expressions: vec![requirement(HOSTNAME_LABEL, Operator::Exists, &[])],
        fields: Vec::new(),
    };
    let mut one = vec![node("a", "z1")];
    let v = Volumes {
        claims: vec![claim("data", Some("pvc-any"), None)],
        pvs: vec![pv("pvc-any", Some(vec![any]), None)],
        ..Volumes::default()
    };
    let mut pods = vec![Arc::new(pod("db", Some("a"), &[("data", "data")]))];
    resolve(&v, &mut one, &[new_worker()], &mut pods);
    assert!(pods[0].local_volumes.is_empty());
}

#[test]
fn a_local_pv_holds_the_data_of_the_node_its_pod_runs_on_whatever_its_affinity() {
    let mut local = pv(
        "pvc-local",
        Some(vec![term("topology.kubernetes.io/zone", &["z1"])]),
        None,
    );
    local.local = true;
    let pinned = pinned_by(local, "b", &[new_worker()]);
    assert_eq!(pinned.first().map(|l| l.node.as_str()), Some("b"));
}

#[test]
fn new_nodes_carry_the_group_labels_and_one_zone_per_hypervisor_host() {
    let dir = std::env::temp_dir();
    std::fs::write(dir.join("nodewright-volumes-test.j2"), "#cloud-config\n")
        .expect("temp dir is writable");
    let text = format!(
        "clusterName: dev\nfreeMemoryTarget: 0 B\ntemplatesDir: {}\nnodeGroups:\n- name: workers\n  provider: openstack\n  minSize: 0\n  maxSize: 3\n  labels: {{disk: nvme}}\n  openstack: {{flavor: m1.large, image: fcos}}\n  userData: {{template: nodewright-volumes-test.j2}}\n",
        dir.display()
    );
    let config = crate::config::Config::parse(&text, std::path::Path::new("/")).expect("valid");
    let new = new_nodes(&config, &BTreeMap::new());
    assert_eq!(new.len(), 1);
    assert_eq!(new[0].labels.get("disk").map(String::as_str), Some("nvme"));
    assert_eq!(
        new[0].labels.get(HOSTNAME_LABEL).map(String::as_str),
        Some("workers-new-0")
    );
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
    resolve(&v, &mut nodes, &[], &mut pods);
    // Resolving twice changes nothing more.
    resolve(&v, &mut nodes, &[], &mut pods);
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

/// Claim `data` bound to `pv` (and `pv` naming it back).
fn bound(mut pv: PvInfo) -> Volumes {
    pv.claim = Some(("default".into(), "data".into()));
    Volumes {
        claims: vec![claim("data", Some(&pv.name), Some("local-path"))],
        pvs: vec![pv],
        ..Volumes::default()
    }
}

#[test]
fn a_bound_volume_only_one_node_can_reach_is_held_by_that_node_pod_or_no_pod() {
    let nodes: Vec<NodeInfo> = ["a", "b"].map(|n| node(n, "z1")).into();
    let on_a = pv("pvc-1", Some(vec![term(HOSTNAME_LABEL, &["a"])]), None);
    let held = held_volumes(&bound(on_a.clone()), &nodes, &[]);
    let a = held.get("a").expect("held by a");
    assert_eq!(a[0].pv, "pvc-1");
    assert_eq!(a[0].claim, ("default".to_string(), "data".to_string()));
    assert_eq!(held.len(), 1);
    // A node that is gone still holds it (its pod would wait for it for ever).
    let gone = pv("pvc-1", Some(vec![term(HOSTNAME_LABEL, &["gone"])]), None);
    assert!(held_volumes(&bound(gone), &nodes, &[]).contains_key("gone"));
    // Several nodes reach a zonal volume: none holds it.
    let zonal = pv(
        "pvc-1",
        Some(vec![term("topology.kubernetes.io/zone", &["z1"])]),
        None,
    );
    assert!(held_volumes(&bound(zonal), &nodes, &[]).is_empty());
    // Its claim deleted, bound to another volume, or either marked disposable: not held.
    let mut v = bound(on_a.clone());
    v.claims.clear();
    assert!(held_volumes(&v, &nodes, &[]).is_empty());
    let mut v = bound(on_a.clone());
    v.claims[0].volume_name = Some("pvc-other".into());
    assert!(held_volumes(&v, &nodes, &[]).is_empty());
    let mut v = bound(on_a.clone());
    v.claims[0].disposable = true;
    assert!(held_volumes(&v, &nodes, &[]).is_empty());
    let mut v = bound(on_a);
    v.pvs[0].disposable = true;
    assert!(held_volumes(&v, &nodes, &[]).is_empty());
}

//! Persistent volumes as the planner needs them: which nodes a pod's volumes let it run
//! on (kube-scheduler's VolumeBinding and CSI attach limits), and which pods keep data
//! that only their node can reach (a `local-path`, `local` or OpenEBS LocalPV volume),
//! which pins that node.
//!
//! Plain data, filled by the adapters from PersistentVolumes, PersistentVolumeClaims,
//! StorageClasses and CSINodes; [`resolve`] writes what each pod's claims mean into the
//! pod (`volume_affinity`, `volume_problem`, `local_volumes`, attach requests) and each
//! node's attach limits into its allocatable, so the scheduling model and the policy read
//! plain fields and stay unaware of claims.

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::sync::Arc;

use super::sched::template::LABEL_ZONE;
use super::sched::well_known_labels;
use crate::config::Config;
use crate::model::volumes::HOSTNAME_LABEL;
use crate::model::{
    attach_resource, ClaimInfo, ClassInfo, CsiNodeInfo, GroupShape, HeldVolume, LocalVolume,
    NodeInfo, NodeSelectorTerm, Operator, PodInfo, PvInfo, Volumes,
};

/// The one node `terms` name by `kubernetes.io/hostname` or `metadata.name` (every term
/// asks for that one node, the same in each), if so: how a volume whose node is gone
/// still says which node held it.
pub fn names_one_node(terms: &[NodeSelectorTerm]) -> Option<&str> {
    let mut node: Option<&str> = None;
    for t in terms {
        let single = t
            .expressions
            .iter()
            .filter(|r| r.key == HOSTNAME_LABEL)
            .chain(t.fields.iter().filter(|r| r.key == "metadata.name"))
            .find_map(|r| match (r.operator, r.values.as_slice()) {
                (Operator::In, [one]) => Some(one.as_str()),
                _ => None,
            })?;
        if node.is_some_and(|n| n != single) {
            return None;
        }
        node = Some(single);
    }
    node
}

/// A node a group could make, as a volume's node affinity sees it: its name and labels.
#[derive(Debug, Clone, PartialEq)]
pub struct NewNode {
    pub name: String,
    pub labels: BTreeMap<String, String>,
}

/// What a new node of each group of `config` would carry (see
/// [`super::sched::well_known_labels`]), once per hypervisor host a group may use (each is
/// a zone of its own): a volume whose affinity selects one of these is reachable from a
/// node nodewright can make, so it pins no node.
pub fn new_nodes(config: &Config, shapes: &BTreeMap<String, GroupShape>) -> Vec<NewNode> {
    let mut out = Vec::new();
    for g in &config.node_groups {
        let shape = shapes.get(&g.name);
        let name = format!("{}-new-0", g.name);
        let mut labels = well_known_labels(g, &config.cluster_name, shape);
        labels.insert(HOSTNAME_LABEL.to_string(), name.clone());
        let hosts = shape.and_then(|s| s.hosts.as_ref());
        for h in hosts.map_or(&[][..], |h| &h.hosts[..]) {
            let mut on_host = labels.clone();
            on_host.insert(LABEL_ZONE.to_string(), h.name.clone());
            out.push(NewNode {
                name: name.clone(),
                labels: on_host,
            });
        }
        out.push(NewNode { name, labels });
    }
    out
}

/// The nodes a volume's node affinity is judged against: those in view and those a
/// group could make.
struct Reach<'a> {
    by_name: BTreeMap<&'a str, &'a NodeInfo>,
    by_hostname: BTreeMap<&'a str, &'a NodeInfo>,
    nodes: &'a [NodeInfo],
    new_nodes: &'a [NewNode],
}

/// How many existing nodes some terms select.
#[derive(Debug, PartialEq)]
enum Selected<'a> {
    NoNode,
    One(&'a str),
    Several,
}

impl<'a> Reach<'a> {
    fn new(nodes: &'a [NodeInfo], new_nodes: &'a [NewNode]) -> Reach<'a> {
        Reach {
            by_name: nodes.iter().map(|n| (n.name.as_str(), n)).collect(),
            by_hostname: nodes
                .iter()
                .filter_map(|n| Some((n.labels.get(HOSTNAME_LABEL)?.as_str(), n)))
                .collect(),
            nodes,
            new_nodes,
        }
    }

    /// The existing nodes `terms` select (ORed terms, as kube-scheduler matches a PV's
    /// required node affinity), told apart only as none, one or several. A term that
    /// asks for hostnames or names `In` a list is checked against those nodes only.
    fn existing(&self, terms: &[NodeSelectorTerm]) -> Selected<'a> {
        let mut found: Option<&'a str> = None;
        for t in terms {
            let listed = t
                .expressions
                .iter()
                .find(|r| r.key == HOSTNAME_LABEL && r.operator == Operator::In)
                .map(|r| (&self.by_hostname, r))
                .or_else(|| {
                    t.fields
                        .iter()
                        .find(|r| r.key == "metadata.name" && r.operator == Operator::In)
                        .map(|r| (&self.by_name, r))
                });
            let candidates: Box<dyn Iterator<Item = &'a NodeInfo> + '_> = match listed {
                Some((index, r)) => Box::new(
                    r.values
                        .iter()
                        .filter_map(|v| index.get(v.as_str()).copied()),
                ),
                None => Box::new(self.nodes.iter()),
            };
            for n in candidates.filter(|n| t.matches(&n.name, &n.labels)) {
                match found {
                    Some(f) if f != n.name => return Selected::Several,
                    _ => found = Some(n.name.as_str()),
                }
            }
        }
        found.map_or(Selected::NoNode, Selected::One)
    }

    /// Whether `terms` select a node some group could make.
    fn a_new_node(&self, terms: &[NodeSelectorTerm]) -> bool {
        self.new_nodes
            .iter()
            .any(|n| terms.iter().any(|t| t.matches(&n.name, &n.labels)))
    }

    /// The node whose disk holds `pv`'s data for a pod on `pod_node`, if only one node
    /// can reach it: its required node affinity selects that node, no other node in
    /// view and no node a group could make (`local-path`, OpenEBS LocalPV by
    /// `openebs.io/nodename`, a `local` PV by any label). A `local` PV is one node's
    /// disk whatever its affinity says: it holds the data of the node its pod runs on.
    /// A volume naming a node that is gone still names it, so the pod is reported.
    fn data_node(&self, pv: &PvInfo, pod_node: Option<&str>) -> Option<String> {
        let terms = pv.node_affinity.as_deref()?;
        if pv.local {
            if let Some(n) = pod_node.and_then(|n| self.by_name.get(n)) {
                if terms.iter().any(|t| t.matches(&n.name, &n.labels)) {
                    return Some(n.name.clone());
                }
            }
        }
        if self.a_new_node(terms) {
            return None;
        }
        match self.existing(terms) {
            Selected::One(n) => Some(n.to_string()),
            Selected::NoNode => names_one_node(terms).map(str::to_string),
            Selected::Several => None,
        }
    }
}

/// The volume objects by name, for one resolution.
fn index(volumes: &Volumes) -> Index<'_> {
    Index {
        pvs: volumes.pvs.iter().map(|p| (p.name.as_str(), p)).collect(),
        claims: volumes
            .claims
            .iter()
            .map(|c| ((c.namespace.as_str(), c.name.as_str()), c))
            .collect(),
        classes: volumes
            .classes
            .iter()
            .map(|c| (c.name.as_str(), c))
            .collect(),
        default_class: volumes
            .classes
            .iter()
            .filter(|c| c.default)
            .map(|c| c.name.as_str())
            .max(),
    }
}

struct Index<'a> {
    pvs: BTreeMap<&'a str, &'a PvInfo>,
    claims: BTreeMap<(&'a str, &'a str), &'a ClaimInfo>,
    classes: BTreeMap<&'a str, &'a ClassInfo>,
    default_class: Option<&'a str>,
}

/// What a pod's claims mean for where it may run.
#[derive(Debug, Default, PartialEq)]
struct Resolved {
    affinity: Vec<Vec<NodeSelectorTerm>>,
    problem: Option<String>,
    local: Vec<LocalVolume>,
    attach: BTreeMap<String, u64>,
}

fn resolve_pod(ix: &Index<'_>, reach: &Reach<'_>, pod: &PodInfo) -> Resolved {
    let mut r = Resolved::default();
    for pc in &pod.claims {
        let Some(claim) = ix.claims.get(&(pod.namespace.as_str(), pc.claim.as_str())) else {
            r.problem
                .get_or_insert_with(|| format!("persistentvolumeclaim \"{}\" not found", pc.claim));
            continue;
        };
        match claim.volume_name.as_deref().filter(|v| !v.is_empty()) {
            Some(pv_name) => {
                let Some(pv) = ix.pvs.get(pv_name) else {
                    r.problem.get_or_insert_with(|| {
                        format!(
                            "persistentvolumeclaim \"{}\" is bound to PersistentVolume \"{pv_name}\", which does not exist",
                            pc.claim
                        )
                    });
                    continue;
                };
                if let Some(terms) = &pv.node_affinity {
                    r.affinity.push(terms.clone());
                }
                if let Some(node) = reach.data_node(pv, pod.node_name.as_deref()) {
                    r.local.push(LocalVolume {
                        volume: pc.volume.clone(),
                        claim: pc.claim.clone(),
                        pv: pv.name.clone(),
                        node,
                        affinity: pv.node_affinity.clone().unwrap_or_default(),
                    });
                }
                if let Some(d) = &pv.csi_driver {
                    *r.attach.entry(attach_resource(d)).or_default() += 1;
                }
            }
            None => {
                let class = claim.storage_class.as_deref().or(ix.default_class);
                match class.and_then(|c| ix.classes.get(c)) {
                    Some(c) if c.wait_for_first_consumer => {
                        if let Some(terms) = &c.allowed_topologies {
                            r.affinity.push(terms.clone());
                        }
                    }
                    Some(_) => {
                        r.problem.get_or_insert_with(|| {
                            "pod has unbound immediate PersistentVolumeClaims".to_string()
                        });
                    }
                    None => {
                        r.problem.get_or_insert_with(|| match class {
                            Some(c) => format!(
                                "persistentvolumeclaim \"{}\": storageclass.storage.k8s.io \"{c}\" not found",
                                pc.claim
                            ),
                            None => format!(
                                "persistentvolumeclaim \"{}\" is not bound and names no StorageClass",
                                pc.claim
                            ),
                        });
                    }
                }
            }
        }
    }
    r
}

/// Writes what the volume objects mean into `pods` (only those with claims are copied)
/// and `nodes` (attach limits). `new_nodes` are the nodes groups could make
/// ([`new_nodes`]): a volume one of them could reach pins no node. Idempotent: running
/// it twice changes nothing more.
pub fn resolve(
    volumes: &Volumes,
    nodes: &mut [NodeInfo],
    new_nodes: &[NewNode],
    pods: &mut [Arc<PodInfo>],
) {
    let ix = index(volumes);
    let reach = Reach::new(nodes, new_nodes);
    for p in pods.iter_mut().filter(|p| !p.claims.is_empty()) {
        let r = resolve_pod(&ix, &reach, p);
        let pod = Arc::make_mut(p);
        for (k, n) in &r.attach {
            pod.requests.scalar.insert(k.clone(), *n);
        }
        pod.volume_affinity = r.affinity;
        pod.volume_problem = r.problem;
        pod.local_volumes = r.local;
    }
    drop(reach);
    let limits: BTreeMap<&str, &CsiNodeInfo> = volumes
        .csi_nodes
        .iter()
        .map(|c| (c.node.as_str(), c))
        .collect();
    for n in nodes.iter_mut() {
        if let Some(c) = limits.get(n.name.as_str()) {
            for (driver, count) in &c.limits {
                n.allocatable.scalar.insert(attach_resource(driver), *count);
            }
        }
    }
}

/// Every bound volume whose data only one node can reach (as [`resolve`] judges a pod's
/// volume, with no pod to say which node), by that node: its claim exists and is bound
/// to it, and neither is marked disposable. Whether a pod uses it now does not matter:
/// a workload scaled to zero, or a CronJob between runs, comes back to that node.
pub fn held_volumes(
    volumes: &Volumes,
    nodes: &[NodeInfo],
    new_nodes: &[NewNode],
) -> BTreeMap<String, Vec<HeldVolume>> {
    let ix = index(volumes);
    let reach = Reach::new(nodes, new_nodes);
    let mut out: BTreeMap<String, Vec<HeldVolume>> = BTreeMap::new();
    for pv in &volumes.pvs {
        let Some((ns, name)) = &pv.claim else {
            continue;
        };
        let bound = ix
            .claims
            .get(&(ns.as_str(), name.as_str()))
            .filter(|c| c.volume_name.as_deref() == Some(pv.name.as_str()));
        let Some(claim) = bound else {
            continue;
        };
        if pv.disposable || claim.disposable {
            continue;
        }
        if let Some(node) = reach.data_node(pv, None) {
            out.entry(node.clone()).or_default().push(HeldVolume {
                pv: pv.name.clone(),
                claim: (ns.clone(), name.clone()),
                node,
            });
        }
    }
    out
}

/// The names of the volumes `annotation` lists (`safe-to-evict-local-volumes`).
pub fn listed_volumes(annotation: Option<&String>) -> Vec<&str> {
    annotation
        .map(|a| {
            a.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .collect()
        })
        .unwrap_or_default()
}

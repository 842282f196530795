//! What a node of a group that does not exist yet will look like to the scheduler: the
//! labels its kubelet and user data give it, its group's taints (never the startup
//! taint: it comes off once the node is Ready, and the pods it is for must not be held
//! back by it), and its allocatable resources minus the DaemonSet pods that will land
//! there.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use super::{static_check, Slot, SlotKind};
use crate::config::NodeGroupConfig;
use crate::model::{GroupShape, PodInfo, Resources, Taint, LABEL_CLUSTER, LABEL_GROUP};

pub const LABEL_HOSTNAME: &str = "kubernetes.io/hostname";
pub const LABEL_OS: &str = "kubernetes.io/os";
pub const LABEL_ARCH: &str = "kubernetes.io/arch";
pub const LABEL_INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
pub const LABEL_ZONE: &str = "topology.kubernetes.io/zone";
pub const LABEL_REGION: &str = "topology.kubernetes.io/region";

/// Labels a new node of `group` will carry, but `kubernetes.io/hostname` (unique per
/// node): the group's labels, nodewright's ownership labels, the kubelet's os and arch,
/// and instance type, zone and region where known (rendered into user data, so the
/// node really gets them).
pub fn well_known_labels(
    group: &NodeGroupConfig,
    cluster: &str,
    shape: Option<&GroupShape>,
) -> BTreeMap<String, String> {
    let mut l = BTreeMap::new();
    l.insert(LABEL_OS.to_string(), "linux".to_string());
    l.insert(LABEL_ARCH.to_string(), group.arch.clone());
    l.insert("beta.kubernetes.io/os".to_string(), "linux".to_string());
    l.insert("beta.kubernetes.io/arch".to_string(), group.arch.clone());
    l.extend(provider_labels(shape));
    l.extend(group.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
    l.insert(LABEL_GROUP.to_string(), group.name.clone());
    l.insert(LABEL_CLUSTER.to_string(), cluster.to_string());
    l
}

/// The labels a new node gets from its provider's shape: instance type, zone and
/// region where known. Rendered into user data (kubelet accepts these keys in
/// `--node-labels`); os and arch are not, the kubelet sets them itself.
pub fn provider_labels(shape: Option<&GroupShape>) -> BTreeMap<String, String> {
    let mut l = BTreeMap::new();
    if let Some(s) = shape {
        let known = [
            (LABEL_INSTANCE_TYPE, &s.instance_type),
            (LABEL_ZONE, &s.zone),
            (LABEL_REGION, &s.region),
        ];
        for (k, v) in known {
            if let Some(v) = v {
                l.insert(k.to_string(), v.clone());
            }
        }
    }
    l
}

/// Allocatable of one new node of `group` from the provider's shape and the config:
/// configured `resources` win, then the flavor, minus `reserved`.
pub fn allocatable_from_shape(group: &NodeGroupConfig, shape: Option<&GroupShape>) -> Resources {
    let mut r = Resources::default();
    let cpu = shape.and_then(|s| s.cpu_milli);
    let memory = group
        .node_memory
        .map(|b| b.as_u64())
        .or(shape.and_then(|s| s.memory));
    r.cpu = cpu.unwrap_or(0);
    r.memory = memory.unwrap_or(0);
    // Unknown disk: assume it holds what pods ask for rather than refuse them all.
    r.ephemeral_storage = u64::MAX / 4;
    r.pods = u64::from(group.max_pods);
    for (name, q) in &group.resources {
        r.set(name, q.value());
    }
    let reserved = group.reserved.resolve(r.memory);
    r.sub(&reserved);
    r
}

/// The empty new node of `group` number `index`, before DaemonSets.
pub fn group_template(
    group: &NodeGroupConfig,
    labels: &BTreeMap<String, String>,
    allocatable: Resources,
    kind: SlotKind,
    index: usize,
) -> Slot<'static> {
    let name = format!("{}-new-{index}", group.name);
    let mut labels = labels.clone();
    labels.insert(LABEL_HOSTNAME.to_string(), name.clone());
    let taints: Vec<Taint> = group
        .taints
        .iter()
        .map(|t| Taint {
            key: t.key.clone(),
            value: (!t.value.is_empty()).then(|| t.value.clone()),
            effect: t.effect.as_str().to_string(),
        })
        .collect();
    Slot {
        name: Cow::Owned(name),
        labels: Cow::Owned(labels),
        taints: Cow::Owned(taints),
        unschedulable: false,
        usable: true,
        allocatable,
        used: Resources::default(),
        kind,
        host_ports: Vec::new(),
    }
}

/// Requests of the DaemonSet pods that will run on a node shaped like `slot`: one
/// running pod of each DaemonSet in the cluster stands for it, judged by its selector,
/// node affinity (without the per-node name pin) and tolerations. `pods` may be every
/// pod or only the DaemonSet ones (cheaper when asked for several groups).
pub fn daemonset_overhead<'p>(
    pods: impl IntoIterator<Item = &'p PodInfo>,
    slot: &Slot<'_>,
) -> Resources {
    let mut seen = BTreeSet::new();
    let mut total = Resources::default();
    for p in pods
        .into_iter()
        .filter(|p| p.is_daemonset() && !p.is_terminal())
    {
        let owner = (
            p.namespace.as_str(),
            p.controller_name.as_deref().unwrap_or(&p.name),
        );
        if seen.contains(&owner) {
            continue;
        }
        seen.insert(owner);
        if static_check(p, slot, true).is_ok() {
            total.add(&p.requests);
        }
    }
    total
}

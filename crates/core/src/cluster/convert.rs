//! Kubernetes objects → the planner's plain model. Pure functions, so odd objects
//! (no owner, no requests, unparsable quantities) are handled in one tested place.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::{
    Container, Node, NodeSelector, NodeSelectorRequirement, PersistentVolume,
    PersistentVolumeClaim, Pod, PodAffinityTerm as K8sAffinityTerm, PodSpec, ResourceRequirements,
    TopologySpreadConstraint,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector as K8sSelector, LabelSelectorRequirement, Time,
};

use crate::model::{
    normalize_image, pod_requests, quantity_value, volumes::ANNOTATION_VOLUME_DISPOSABLE,
    volumes::DEFAULT_CLASS, volumes::SELECTED_NODE, ClaimInfo, ClassInfo, ContainerRequests,
    CsiNodeInfo, HostPort, LabelSelector, Namespaces, NodeInfo, NodeSelectorTerm, Operator,
    PdbInfo, PodAffinityTerm, PodClaim, PodInfo, PodPhase, PvInfo, Requirement, Resources,
    SpreadConstraint, Taint, Toleration,
};

pub fn time_to_system(t: &Time) -> SystemTime {
    let secs = t.0.as_second();
    let nanos = t.0.subsec_nanosecond().max(0) as u32;
    if secs >= 0 {
        UNIX_EPOCH + Duration::new(secs as u64, nanos)
    } else {
        UNIX_EPOCH
    }
}

/// A resource list (`requests`, `allocatable`, `overhead`) as [`Resources`]; entries
/// that do not parse are skipped (the API server would not have stored them).
pub fn resources(list: Option<&BTreeMap<String, K8sQuantity>>) -> Resources {
    let mut r = Resources::default();
    for (name, q) in list.into_iter().flatten() {
        if let Some(v) = quantity_value(&q.0) {
            r.set(name, v);
        }
    }
    r
}

fn requests_of(rr: Option<&ResourceRequirements>) -> Resources {
    resources(rr.and_then(|r| r.requests.as_ref()))
}

/// What the scheduler reserves for a pod of this spec.
pub fn spec_requests(s: &PodSpec) -> Resources {
    let app: Vec<Resources> = s
        .containers
        .iter()
        .map(|c: &Container| requests_of(c.resources.as_ref()))
        .collect();
    let init: Vec<ContainerRequests> = s
        .init_containers
        .iter()
        .flatten()
        .map(|c| ContainerRequests {
            requests: requests_of(c.resources.as_ref()),
            restartable: c.restart_policy.as_deref() == Some("Always"),
        })
        .collect();
    let overhead = s.overhead.as_ref().map(|o| resources(Some(o)));
    pod_requests(&app, &init, overhead.as_ref())
}

fn requirement(key: &str, op: &str, values: &Option<Vec<String>>) -> Option<Requirement> {
    Some(Requirement {
        key: key.to_string(),
        operator: Operator::parse(op)?,
        values: values.clone().unwrap_or_default(),
    })
}

/// A `metav1.LabelSelector`; one with an operator this build does not know matches
/// nothing rather than everything.
pub fn label_selector(s: &K8sSelector) -> LabelSelector {
    let mut out = LabelSelector {
        match_labels: s.match_labels.clone().unwrap_or_default(),
        ..LabelSelector::default()
    };
    for e in s.match_expressions.iter().flatten() {
        let e: &LabelSelectorRequirement = e;
        match requirement(&e.key, &e.operator, &e.values) {
            Some(r) if !matches!(r.operator, Operator::Gt | Operator::Lt) => {
                out.expressions.push(r)
            }
            _ => out.never = true,
        }
    }
    out
}

/// A `NodeSelector`'s terms (any one must match).
fn selector_terms(sel: &NodeSelector) -> Vec<NodeSelectorTerm> {
    sel.node_selector_terms
        .iter()
        .map(|t| {
            match (
                node_requirements(&t.match_expressions),
                node_requirements(&t.match_fields),
            ) {
                (Some(expressions), Some(fields)) => NodeSelectorTerm {
                    expressions,
                    fields,
                },
                // An unknown operator: the term matches no node.
                _ => NodeSelectorTerm::default(),
            }
        })
        .collect()
}

fn node_requirements(list: &Option<Vec<NodeSelectorRequirement>>) -> Option<Vec<Requirement>> {
    list.iter()
        .flatten()
        .map(|e| requirement(&e.key, &e.operator, &e.values))
        .collect()
}

fn affinity_term(t: &K8sAffinityTerm, own_ns: &str) -> PodAffinityTerm {
    let namespaces = match (&t.namespaces, &t.namespace_selector) {
        (_, Some(sel)) if label_selector(sel).is_empty() => Namespaces::All,
        (_, Some(_)) => Namespaces::All,
        (Some(list), None) if !list.is_empty() => Namespaces::Listed(list.clone()),
        _ => Namespaces::Listed(vec![own_ns.to_string()]),
    };
    let selector = t.label_selector.as_ref().map_or(
        // A term without a selector selects no pods.
        LabelSelector {
            never: true,
            ..LabelSelector::default()
        },
        label_selector,
    );
    PodAffinityTerm {
        selector,
        namespaces,
        topology_key: t.topology_key.clone(),
    }
}

fn spread_constraint(
    c: &TopologySpreadConstraint,
    pod_labels: &BTreeMap<String, String>,
) -> Option<SpreadConstraint> {
    if c.when_unsatisfiable != "DoNotSchedule" {
        return None;
    }
    let mut selector = c.label_selector.as_ref().map_or(
        LabelSelector {
            never: true,
            ..LabelSelector::default()
        },
        label_selector,
    );
    // matchLabelKeys: the pod's own values of these keys narrow the selector.
    for key in c.match_label_keys.iter().flatten() {
        if let Some(v) = pod_labels.get(key) {
            selector.match_labels.insert(key.clone(), v.clone());
        }
    }
    Some(SpreadConstraint {
        max_skew: c.max_skew.max(1) as u32,
        topology_key: c.topology_key.clone(),
        selector,
        min_domains: c.min_domains.map(|n| n.max(1) as u32),
        honor_node_affinity: c.node_affinity_policy.as_deref() != Some("Ignore"),
        honor_taints: c.node_taints_policy.as_deref() == Some("Honor"),
    })
}

fn labels(m: &Option<BTreeMap<String, String>>) -> BTreeMap<String, String> {
    m.clone().unwrap_or_default()
}

/// Node annotations the planner reads: nodewright's own and the opt-outs users know.
fn node_annotation_read(key: &str) -> bool {
    key.starts_with("nodewright.io/")
        || key == crate::model::CA_SCALE_DOWN_DISABLED
        || key == crate::model::KARPENTER_DO_NOT_DISRUPT
}

/// Pod annotations the planner reads (whether a pod is a mirror pod is kept apart).
fn pod_annotation_read(key: &str) -> bool {
    key == crate::model::CA_SAFE_TO_EVICT
        || key == crate::model::KARPENTER_DO_NOT_DISRUPT
        || key == crate::model::CA_SAFE_TO_EVICT_LOCAL_VOLUMES
}

/// Only the annotations the planner reads: the rest (`last-applied-configuration`,
/// checksums) can be most of an object's size, and the watch caches keep every object.
fn annotations(
    m: &Option<BTreeMap<String, String>>,
    read: fn(&str) -> bool,
) -> BTreeMap<String, String> {
    m.iter()
        .flatten()
        .filter(|(k, _)| read(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Taints the node lifecycle controller and kubelet set from a node's state (cordoned,
/// not Ready, unreachable). They are not read as taints, as cluster-autoscaler ignores
/// them too: the state itself (`unschedulable`, `ready`) is, so a joining node still
/// counts as room for the pods it is about to take.
pub const NODE_STATE_TAINTS: [&str; 3] = [
    "node.kubernetes.io/unschedulable",
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
];

pub fn node_info(n: &Node) -> Option<NodeInfo> {
    let name = n.metadata.name.clone()?;
    let spec = n.spec.as_ref();
    let status = n.status.as_ref();
    let ready_condition = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"));
    let ready = ready_condition.is_some_and(|c| c.status == "True");
    let ready_changed = ready_condition
        .and_then(|c| c.last_transition_time.as_ref())
        .map(time_to_system);
    let taints = spec
        .and_then(|s| s.taints.as_ref())
        .map(|ts| {
            ts.iter()
                .filter(|t| !NODE_STATE_TAINTS.contains(&t.key.as_str()))
                .map(|t| Taint {
                    key: t.key.clone(),
                    value: t.value.clone(),
                    effect: t.effect.clone(),
                })
                .collect()
        })
        .unwrap_or_default();
    let allocatable = resources(status.and_then(|s| s.allocatable.as_ref()));
    let listed = status.and_then(|s| s.images.as_deref()).unwrap_or_default();
    let mut image_listing = crate::model::ImageListing {
        entries: listed.len(),
        ..Default::default()
    };
    for entry in listed {
        let size = entry
            .size_bytes
            .and_then(|b| u64::try_from(b).ok())
            .unwrap_or(0);
        for n in entry.names.iter().flatten() {
            image_listing.sizes.insert(normalize_image(n), size);
        }
    }
    let images = image_listing.sizes.keys().cloned().collect();
    Some(NodeInfo {
        name,
        labels: labels(&n.metadata.labels),
        annotations: annotations(&n.metadata.annotations, node_annotation_read),
        created: n
            .metadata
            .creation_timestamp
            .as_ref()
            .map(time_to_system)
            .unwrap_or(UNIX_EPOCH),
        unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
        ready,
        taints,
        allocatable,
        images,
        image_listing,
        deleting: n.metadata.deletion_timestamp.is_some(),
        ready_changed,
        kubelet_version: status
            .and_then(|s| s.node_info.as_ref())
            .map(|i| i.kubelet_version.clone())
            .filter(|v| !v.is_empty()),
    })
}

pub fn pod_info(p: &Pod) -> Option<PodInfo> {
    let name = p.metadata.name.clone()?;
    let spec = p.spec.as_ref();
    let status = p.status.as_ref();
    let phase = match status.and_then(|s| s.phase.as_deref()) {
        Some("Running") => PodPhase::Running,
        Some("Succeeded") => PodPhase::Succeeded,
        Some("Failed") => PodPhase::Failed,
        Some("Pending") | None => PodPhase::Pending,
        Some(_) => PodPhase::Unknown,
    };
    let unschedulable_condition = status.and_then(|s| s.conditions.as_ref()).and_then(|cs| {
        cs.iter().find(|c| {
            c.type_ == "PodScheduled"
                && c.status == "False"
                && c.reason.as_deref() == Some("Unschedulable")
        })
    });
    let controller = p
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true));
    let mirror = p
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key("kubernetes.io/config.mirror"));
    let images = spec
        .map(|s| {
            s.init_containers
                .iter()
                .flatten()
                .chain(s.containers.iter())
                .filter_map(|c| c.image.clone())
                .collect()
        })
        .unwrap_or_default();
    let image_pull_secrets = spec
        .and_then(|s| s.image_pull_secrets.as_ref())
        .map(|refs| {
            refs.iter()
                .map(|r| r.name.clone())
                .filter(|n| !n.is_empty())
                .collect()
        })
        .unwrap_or_default();
    let pull_failures = pull_failures(p);
    let tolerations = spec
        .and_then(|s| s.tolerations.as_ref())
        .map(|ts| {
            ts.iter()
                .map(|t| Toleration {
                    key: t.key.clone(),
                    operator: t.operator.clone(),
                    value: t.value.clone(),
                    effect: t.effect.clone(),
                })
                .collect()
        })
        .unwrap_or_default();
    let namespace = p
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let pod_labels = labels(&p.metadata.labels);
    let affinity = spec.and_then(|s| s.affinity.as_ref());
    let node_affinity = affinity
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .map(selector_terms);
    let terms = |list: Option<&Vec<K8sAffinityTerm>>| -> Vec<PodAffinityTerm> {
        list.into_iter()
            .flatten()
            .map(|t| affinity_term(t, &namespace))
            .collect()
    };
    let pod_affinity = terms(
        affinity
            .and_then(|a| a.pod_affinity.as_ref())
            .and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_ref()
            }),
    );
    let pod_anti_affinity = terms(
        affinity
            .and_then(|a| a.pod_anti_affinity.as_ref())
            .and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_ref()
            }),
    );
    let spread = spec
        .and_then(|s| s.topology_spread_constraints.as_ref())
        .map(|cs| {
            cs.iter()
                .filter_map(|c| spread_constraint(c, &pod_labels))
                .collect()
        })
        .unwrap_or_default();
    let host_ports = spec
        .map(|s| {
            s.init_containers
                .iter()
                .flatten()
                .chain(s.containers.iter())
                .flat_map(|c| c.ports.iter().flatten())
                .filter_map(|port| {
                    let hp = port.host_port.filter(|p| *p > 0)?;
                    Some(HostPort {
                        protocol: port.protocol.clone().unwrap_or_else(|| "TCP".into()),
                        port: u16::try_from(hp).ok()?,
                        ip: port.host_ip.clone().unwrap_or_default(),
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    let local_storage = spec.and_then(|s| s.volumes.as_ref()).is_some_and(|vs| {
        vs.iter().any(|v| {
            v.host_path.is_some()
                || v.empty_dir
                    .as_ref()
                    .is_some_and(|e| e.medium.as_deref() != Some("Memory"))
        })
    });
    let claims = spec
        .and_then(|s| s.volumes.as_ref())
        .map(|vs| {
            vs.iter()
                .filter_map(|v| {
                    let claim = match (&v.persistent_volume_claim, &v.ephemeral) {
                        (Some(c), _) => c.claim_name.clone(),
                        // A generic ephemeral volume's claim is named `<pod>-<volume>`.
                        (None, Some(_)) => format!("{name}-{}", v.name),
                        (None, None) => return None,
                    };
                    Some(PodClaim {
                        volume: v.name.clone(),
                        claim,
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    Some(PodInfo {
        claims,
        volume_affinity: Vec::new(),
        volume_problem: None,
        local_volumes: Vec::new(),
        name,
        node_name: spec.and_then(|s| s.node_name.clone()),
        phase,
        requests: spec.map(spec_requests).unwrap_or_else(|| Resources {
            pods: 1,
            ..Resources::default()
        }),
        priority: spec.and_then(|s| s.priority).unwrap_or(0),
        unschedulable: unschedulable_condition.is_some(),
        unschedulable_since: unschedulable_condition
            .and_then(|c| c.last_transition_time.as_ref())
            .map(time_to_system),
        controller_kind: controller.map(|o| o.kind.clone()),
        controller_name: controller.map(|o| o.name.clone()),
        mirror,
        images,
        image_pull_secrets,
        pull_failures,
        node_selector: spec
            .and_then(|s| s.node_selector.clone())
            .unwrap_or_default(),
        node_affinity,
        pod_affinity,
        pod_anti_affinity,
        spread,
        host_ports,
        tolerations,
        labels: pod_labels,
        annotations: annotations(&p.metadata.annotations, pod_annotation_read),
        local_storage,
        deleting: p.metadata.deletion_timestamp.is_some(),
        created: p
            .metadata
            .creation_timestamp
            .as_ref()
            .map(time_to_system)
            .unwrap_or(UNIX_EPOCH),
        namespace,
    })
}

/// Why a container waits when its image cannot be pulled, as the kubelet words it.
const PULL_ERRORS: &[&str] = &[
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "ErrImageNeverPull",
];

/// The images of `p`'s containers (init ones too) that wait with a pull error, with it.
fn pull_failures(p: &Pod) -> Vec<(String, String)> {
    let Some(status) = p.status.as_ref() else {
        return Vec::new();
    };
    status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten())
        .filter_map(|c| {
            let reason = c.state.as_ref()?.waiting.as_ref()?.reason.as_deref()?;
            PULL_ERRORS
                .contains(&reason)
                .then(|| (c.image.clone(), reason.to_string()))
        })
        .collect()
}

pub fn pv_info(pv: &PersistentVolume) -> Option<PvInfo> {
    let spec = pv.spec.as_ref();
    Some(PvInfo {
        name: pv.metadata.name.clone()?,
        node_affinity: spec
            .and_then(|s| s.node_affinity.as_ref())
            .and_then(|a| a.required.as_ref())
            .map(selector_terms),
        local: spec.is_some_and(|s| s.local.is_some()),
        csi_driver: spec.and_then(|s| s.csi.as_ref()).map(|c| c.driver.clone()),
        claim: spec
            .and_then(|s| s.claim_ref.as_ref())
            .and_then(|c| Some((c.namespace.clone()?, c.name.clone()?))),
        disposable: disposable(&pv.metadata.annotations),
    })
}

pub fn claim_info(c: &PersistentVolumeClaim) -> Option<ClaimInfo> {
    let spec = c.spec.as_ref();
    Some(ClaimInfo {
        namespace: c.metadata.namespace.clone()?,
        name: c.metadata.name.clone()?,
        volume_name: spec
            .and_then(|s| s.volume_name.clone())
            .filter(|v| !v.is_empty()),
        storage_class: spec.and_then(|s| s.storage_class_name.clone()),
        selected_node: c
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(SELECTED_NODE).cloned()),
        disposable: disposable(&c.metadata.annotations),
    })
}

/// Whether a volume or claim is annotated as holding scratch data.
fn disposable(annotations: &Option<BTreeMap<String, String>>) -> bool {
    annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_VOLUME_DISPOSABLE))
        .is_some_and(|v| v == "true")
}

pub fn class_info(c: &StorageClass) -> Option<ClassInfo> {
    let allowed = c
        .allowed_topologies
        .as_ref()
        .filter(|t| !t.is_empty())
        .map(|ts| {
            ts.iter()
                .map(|t| NodeSelectorTerm {
                    expressions: t
                        .match_label_expressions
                        .iter()
                        .flatten()
                        .map(|e| Requirement {
                            key: e.key.clone(),
                            operator: Operator::In,
                            values: e.values.clone(),
                        })
                        .collect(),
                    fields: Vec::new(),
                })
                .collect()
        });
    Some(ClassInfo {
        name: c.metadata.name.clone()?,
        provisioner: c.provisioner.clone(),
        wait_for_first_consumer: c.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer"),
        allowed_topologies: allowed,
        default: c
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(DEFAULT_CLASS))
            .is_some_and(|v| v == "true"),
    })
}

pub fn csi_node_info(c: &CSINode) -> Option<CsiNodeInfo> {
    Some(CsiNodeInfo {
        node: c.metadata.name.clone()?,
        limits: c
            .spec
            .drivers
            .iter()
            .filter_map(|d| {
                let n = d.allocatable.as_ref()?.count?;
                Some((d.name.clone(), u64::try_from(n).ok()?))
            })
            .collect(),
    })
}

pub fn pdb_info(b: &PodDisruptionBudget) -> Option<PdbInfo> {
    let selector = b.spec.as_ref().and_then(|s| s.selector.as_ref());
    Some(PdbInfo {
        namespace: b.metadata.namespace.clone()?,
        name: b.metadata.name.clone()?,
        selector: selector.map(label_selector),
        // Without a status the controller has not computed it yet: assume none allowed.
        disruptions_allowed: b
            .status
            .as_ref()
            .and_then(|s| s.disruptions_allowed)
            .unwrap_or(0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_state_taints_are_left_out_and_others_kept() {
        let n: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n1"},
            "spec": {"unschedulable": true, "taints": [
                {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},
                {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"},
                {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"},
                {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]}
        }))
        .expect("node");
        let info = node_info(&n).expect("converts");
        assert!(info.unschedulable);
        let keys: Vec<&str> = info.taints.iter().map(|t| t.key.as_str()).collect();
        assert_eq!(keys, ["dedicated"]);
    }

    #[test]
    fn only_the_annotations_the_planner_reads_are_kept() {
        let mut p = Pod::default();
        p.metadata.name = Some("web".into());
        p.metadata.annotations = Some(BTreeMap::from([
            (
                crate::model::CA_SAFE_TO_EVICT.to_string(),
                "false".to_string(),
            ),
            ("kubernetes.io/config.mirror".to_string(), "x".to_string()),
            (
                "kubectl.kubernetes.io/last-applied-configuration".to_string(),
                "{...}".to_string(),
            ),
        ]));
        let info = pod_info(&p).expect("converts");
        assert!(info.mirror);
        assert_eq!(
            info.annotations.keys().collect::<Vec<_>>(),
            vec![crate::model::CA_SAFE_TO_EVICT]
        );
        let mut n = Node::default();
        n.metadata.name = Some("n1".into());
        n.metadata.annotations = Some(BTreeMap::from([
            (
                crate::model::ANNOTATION_CORDONED.to_string(),
                "why".to_string(),
            ),
            (
                crate::model::CA_SCALE_DOWN_DISABLED.to_string(),
                "true".to_string(),
            ),
            ("node.alpha.kubernetes.io/ttl".to_string(), "0".to_string()),
        ]));
        let info = node_info(&n).expect("converts");
        assert_eq!(info.annotations.len(), 2, "{:?}", info.annotations);
    }

    #[test]
    fn pod_without_spec_or_owner_converts() {
        let mut p = Pod::default();
        p.metadata.name = Some("bare".into());
        let info = pod_info(&p).expect("named pod converts");
        assert_eq!(info.controller_kind, None);
        assert_eq!(info.requests.memory, 0);
        assert_eq!(info.requests.pods, 1);
        assert_eq!(info.phase, PodPhase::Pending);
        assert!(pod_info(&Pod::default()).is_none());
    }

    #[test]
    fn a_volume_or_claim_is_disposable_only_when_annotated_true() {
        let pv = |value: &str| -> PersistentVolume {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "pvc-1", "annotations": {ANNOTATION_VOLUME_DISPOSABLE: value}},
                "spec": {"claimRef": {"namespace": "default", "name": "data"}},
            }))
            .expect("a PersistentVolume")
        };
        let info = pv_info(&pv("true")).expect("converted");
        assert!(info.disposable);
        assert_eq!(info.claim, Some(("default".into(), "data".into())));
        assert!(!pv_info(&pv("yes")).expect("converted").disposable);
        let claim: PersistentVolumeClaim = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "data", "namespace": "default",
                         "annotations": {ANNOTATION_VOLUME_DISPOSABLE: "true"}},
        }))
        .expect("a claim");
        assert!(claim_info(&claim).expect("converted").disposable);
        let plain: PersistentVolumeClaim = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "data", "namespace": "default"},
        }))
        .expect("a claim");
        assert!(!claim_info(&plain).expect("converted").disposable);
    }

    /// The kubelet's words for a pull that failed, in init and regular containers
    /// alike; a container waiting for another reason is no pull failure.
    #[test]
    fn pull_errors_and_pull_secrets_are_read_from_the_pod() {
        let p: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "apps"},
            "spec": {"imagePullSecrets": [{"name": "regcred"}],
                "initContainers": [{"name": "i", "image": "init:1"}],
                "containers": [{"name": "a", "image": "ghost:404"}, {"name": "b", "image": "ok:1"}]},
            "status": {"phase": "Pending",
                "initContainerStatuses": [{"name": "i", "image": "init:1", "imageID": "",
                    "ready": false, "restartCount": 0,
                    "state": {"waiting": {"reason": "ErrImagePull"}}}],
                "containerStatuses": [
                    {"name": "a", "image": "ghost:404", "imageID": "", "ready": false,
                     "restartCount": 0, "state": {"waiting": {"reason": "ImagePullBackOff"}}},
                    {"name": "b", "image": "ok:1", "imageID": "", "ready": false,
                     "restartCount": 0, "state": {"waiting": {"reason": "PodInitializing"}}}]}
        }))
        .expect("pod");
        let info = pod_info(&p).expect("converts");
        assert_eq!(info.image_pull_secrets, ["regcred"]);
        assert_eq!(
            info.pull_failures,
            [
                ("init:1".to_string(), "ErrImagePull".to_string()),
                ("ghost:404".to_string(), "ImagePullBackOff".to_string())
            ]
        );
    }

    /// The listing's entries are counted (not the names: an entry has a tag and a
    /// digest name) and each name keeps its entry's size.
    #[test]
    fn the_image_listing_counts_entries_and_keeps_sizes() {
        let n: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n1"},
            "status": {"images": [
                {"names": ["docker.io/library/nginx@sha256:ab", "docker.io/library/nginx:1.25"],
                 "sizeBytes": 70000000},
                {"names": ["redis:7"], "sizeBytes": 40000000}]}
        }))
        .expect("node");
        let info = node_info(&n).expect("converts");
        assert_eq!(info.image_listing.entries, 2);
        assert_eq!(
            info.image_listing.sizes.get("docker.io/library/nginx:1.25"),
            Some(&70000000)
        );
        assert_eq!(info.image_listing.smallest(), Some(40000000));
        assert!(info.images.contains("docker.io/library/redis:7"));
        assert!(!info.image_listing.is_full());
    }
}

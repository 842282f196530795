//! Cluster objects as the planner sees them: nodes, pods, budgets, taints and
//! tolerations as plain data, no Kubernetes client types, so the planner can be tested
//! with small builders and fed by any adapter.

use std::collections::{BTreeMap, BTreeSet};
use std::time::SystemTime;

use serde::Serialize;

use super::resources::Resources;
use super::selector::{
    HostPort, LabelSelector, NodeSelectorTerm, PodAffinityTerm, SpreadConstraint,
};
use super::volumes::{LocalVolume, PodClaim};

/// A PodDisruptionBudget, as far as planning needs it.
#[derive(Debug, Clone, Serialize)]
pub struct PdbInfo {
    pub namespace: String,
    pub name: String,
    /// `None` (no selector) selects no pods; an empty selector selects every pod of the
    /// namespace, as the eviction API evaluates `policy/v1` budgets.
    pub selector: Option<LabelSelector>,
    pub disruptions_allowed: i32,
}

impl PdbInfo {
    pub fn selects(&self, pod: &PodInfo) -> bool {
        pod.namespace == self.namespace
            && self
                .selector
                .as_ref()
                .is_some_and(|s| s.matches(&pod.labels))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct Taint {
    pub key: String,
    pub value: Option<String>,
    pub effect: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct Toleration {
    pub key: Option<String>,
    /// `Exists` or `Equal` (the default).
    pub operator: Option<String>,
    pub value: Option<String>,
    pub effect: Option<String>,
}

impl Toleration {
    pub fn tolerates(&self, t: &Taint) -> bool {
        if let Some(effect) = &self.effect {
            if !effect.is_empty() && effect != &t.effect {
                return false;
            }
        }
        let exists = self.operator.as_deref() == Some("Exists");
        match &self.key {
            None => exists,
            Some(k) if k.is_empty() => exists,
            Some(k) if k != &t.key => false,
            Some(_) if exists => true,
            Some(_) => self.value.as_deref().unwrap_or("") == t.value.as_deref().unwrap_or(""),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct NodeInfo {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub created: SystemTime,
    pub unschedulable: bool,
    pub ready: bool,
    pub taints: Vec<Taint>,
    pub allocatable: Resources,
    /// Every name the node reports for its cached images, normalized.
    pub images: BTreeSet<String>,
    /// The sizes and count of the entries of `status.images`, which the kubelet cuts
    /// to its largest [`KUBELET_LISTED_IMAGES`] by default.
    pub image_listing: ImageListing,
    pub deleting: bool,
    /// When the Ready condition last changed (its `lastTransitionTime`), if known.
    pub ready_changed: Option<SystemTime>,
    /// `status.nodeInfo.kubeletVersion` (`v1.31.4+k3s1`), if reported.
    pub kubelet_version: Option<String>,
}

/// What a node's `status.images` says beyond the names: the kubelet lists its images
/// largest first and only the first `--node-status-max-images` (50 by default), so a
/// node with more images does not name them all.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ImageListing {
    /// Each normalized name with the size (bytes) of its entry.
    pub sizes: BTreeMap<String, u64>,
    /// How many entries the listing has.
    pub entries: usize,
}

/// The kubelet's default `--node-status-max-images`.
pub const KUBELET_LISTED_IMAGES: usize = 50;

impl ImageListing {
    /// The listing holds as many entries as the kubelet reports by default: the node
    /// may have more images than it names.
    pub fn is_full(&self) -> bool {
        self.entries >= KUBELET_LISTED_IMAGES
    }

    /// The size of the smallest entry listed (None when there is none).
    pub fn smallest(&self) -> Option<u64> {
        self.sizes.values().min().copied()
    }
}

impl NodeInfo {
    pub fn has_taint(&self, key: &str) -> bool {
        self.taints.iter().any(|t| t.key == key)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum PodPhase {
    Pending,
    Running,
    Succeeded,
    Failed,
    Unknown,
}

#[derive(Debug, Clone, Serialize)]
pub struct PodInfo {
    pub namespace: String,
    pub name: String,
    pub node_name: Option<String>,
    pub phase: PodPhase,
    /// What the scheduler reserves for it (see [`super::resources::pod_requests`]).
    pub requests: Resources,
    /// `spec.priority` (0 when unset).
    pub priority: i32,
    /// `PodScheduled=False` with reason `Unschedulable`.
    pub unschedulable: bool,
    /// When the scheduler last called it Unschedulable.
    pub unschedulable_since: Option<SystemTime>,
    /// Kind of the controlling owner, if any (`ReplicaSet`, `DaemonSet`, ...).
    pub controller_kind: Option<String>,
    /// Name of the controlling owner, if any.
    pub controller_name: Option<String>,
    pub mirror: bool,
    pub images: Vec<String>,
    /// The names of its `imagePullSecrets` (Secrets of its namespace).
    pub image_pull_secrets: Vec<String>,
    /// The images its containers wait for with a pull error (`ErrImagePull`,
    /// `ImagePullBackOff`, ...), with that reason, as the kubelet reports them.
    pub pull_failures: Vec<(String, String)>,
    pub node_selector: BTreeMap<String, String>,
    /// Required node affinity terms (any one must match); `None` when there are none.
    pub node_affinity: Option<Vec<NodeSelectorTerm>>,
    pub pod_affinity: Vec<PodAffinityTerm>,
    pub pod_anti_affinity: Vec<PodAffinityTerm>,
    /// `DoNotSchedule` topology spread constraints.
    pub spread: Vec<SpreadConstraint>,
    pub host_ports: Vec<HostPort>,
    pub tolerations: Vec<Toleration>,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// Mounts an `emptyDir` not in memory or a `hostPath`: data a drain would lose.
    pub local_storage: bool,
    /// Volumes backed by PersistentVolumeClaims (`persistentVolumeClaim`, and the claim
    /// of an `ephemeral` volume).
    pub claims: Vec<PodClaim>,
    /// What its bound volumes (or the classes of its unbound WaitForFirstConsumer claims)
    /// allow: each entry is a list of node selector terms, one of which must match.
    /// Set by [`crate::plan::volumes::resolve`].
    pub volume_affinity: Vec<Vec<NodeSelectorTerm>>,
    /// Why its claims let it run nowhere (a missing claim, an unbound Immediate claim);
    /// set by [`crate::plan::volumes::resolve`].
    pub volume_problem: Option<String>,
    /// Its volumes whose data only one node can reach; set by [`crate::plan::volumes::resolve`].
    pub local_volumes: Vec<LocalVolume>,
    pub deleting: bool,
    pub created: SystemTime,
}

impl PodInfo {
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// Finished pods hold no resources.
    pub fn is_terminal(&self) -> bool {
        matches!(self.phase, PodPhase::Succeeded | PodPhase::Failed)
    }

    pub fn is_daemonset(&self) -> bool {
        self.controller_kind.as_deref() == Some("DaemonSet")
    }

    /// Pods that a drain leaves alone and that do not keep a node from being removed
    /// (nodewright's own image pullers too: see `plan::policy::ignored`).
    pub fn ignored_by_drain(&self) -> bool {
        self.is_daemonset() || self.mirror || self.is_terminal()
    }

    /// A pod with nothing set but a name: the start of test builders and conversions.
    pub fn new(namespace: &str, name: &str) -> PodInfo {
        PodInfo {
            namespace: namespace.to_string(),
            name: name.to_string(),
            node_name: None,
            phase: PodPhase::Pending,
            requests: Resources {
                pods: 1,
                ..Resources::default()
            },
            priority: 0,
            unschedulable: false,
            unschedulable_since: None,
            controller_kind: None,
            controller_name: None,
            mirror: false,
            images: Vec::new(),
            image_pull_secrets: Vec::new(),
            pull_failures: Vec::new(),
            node_selector: BTreeMap::new(),
            node_affinity: None,
            pod_affinity: Vec::new(),
            pod_anti_affinity: Vec::new(),
            spread: Vec::new(),
            host_ports: Vec::new(),
            tolerations: Vec::new(),
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
            local_storage: false,
            claims: Vec::new(),
            volume_affinity: Vec::new(),
            volume_problem: None,
            local_volumes: Vec::new(),
            deleting: false,
            created: std::time::UNIX_EPOCH,
        }
    }
}

/// Normalizes an image reference the way the container runtime reports it, so pod specs
/// (`nginx:1.25`) and node status (`docker.io/library/nginx:1.25`) compare equal.
pub fn normalize_image(image: &str) -> String {
    let (name, digest) = match image.split_once('@') {
        Some((n, d)) => (n, Some(d)),
        None => (image, None),
    };
    let last = name.rsplit('/').next().unwrap_or(name);
    let has_tag = last.contains(':');
    let first = name.split('/').next().unwrap_or(name);
    let has_registry =
        name.contains('/') && (first.contains('.') || first.contains(':') || first == "localhost");
    let mut out = if has_registry {
        name.to_string()
    } else if name.contains('/') {
        format!("docker.io/{name}")
    } else {
        format!("docker.io/library/{name}")
    };
    match digest {
        Some(d) => {
            out.push('@');
            out.push_str(d);
        }
        None if !has_tag => out.push_str(":latest"),
        None => {}
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_normalization() {
        assert_eq!(normalize_image("nginx"), "docker.io/library/nginx:latest");
        assert_eq!(
            normalize_image("nginx:1.25"),
            "docker.io/library/nginx:1.25"
        );
        assert_eq!(
            normalize_image("bitnami/redis:7"),
            "docker.io/bitnami/redis:7"
        );
        assert_eq!(normalize_image("quay.io/x/y:1"), "quay.io/x/y:1");
        assert_eq!(
            normalize_image("localhost:5000/y"),
            "localhost:5000/y:latest"
        );
        assert_eq!(
            normalize_image("ghcr.io/a/b@sha256:ab"),
            "ghcr.io/a/b@sha256:ab"
        );
    }

    #[test]
    fn toleration_matching() {
        let taint = Taint {
            key: "k".into(),
            value: Some("v".into()),
            effect: "NoSchedule".into(),
        };
        let exists_all = Toleration {
            key: None,
            operator: Some("Exists".into()),
            value: None,
            effect: None,
        };
        assert!(exists_all.tolerates(&taint));
        let equal = Toleration {
            key: Some("k".into()),
            operator: None,
            value: Some("v".into()),
            effect: Some("NoSchedule".into()),
        };
        assert!(equal.tolerates(&taint));
        let wrong_value = Toleration {
            value: Some("w".into()),
            ..equal.clone()
        };
        assert!(!wrong_value.tolerates(&taint));
        let wrong_effect = Toleration {
            effect: Some("NoExecute".into()),
            ..equal
        };
        assert!(!wrong_effect.tolerates(&taint));
    }
}

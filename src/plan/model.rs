//! The planner's view of the world: plain data, no Kubernetes or cloud client types, so
//! the planner can be tested with small builders and fed by any adapter.

use std::collections::{BTreeMap, BTreeSet};
use std::time::SystemTime;

use serde::Serialize;

use crate::cloud::Server;

/// Everything one cycle observed.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Snapshot {
    pub nodes: Vec<NodeInfo>,
    pub pods: Vec<PodInfo>,
    /// Servers tagged with this cluster, from every provider.
    pub servers: Vec<Server>,
    /// Memory of a new VM per group, as the provider reports it (flavor size).
    pub group_memory: BTreeMap<String, u64>,
    pub pdbs: Vec<PdbInfo>,
    /// Attached volumes as (VolumeAttachment name, node name).
    pub volume_attachments: Vec<(String, String)>,
    /// Groups whose last VM create or provisioning failed, with the time until which they
    /// are left alone.
    pub group_backoff: BTreeMap<String, SystemTime>,
}

/// A PodDisruptionBudget, as far as planning needs it.
#[derive(Debug, Clone, Serialize)]
pub struct PdbInfo {
    pub namespace: String,
    pub name: String,
    pub match_labels: BTreeMap<String, String>,
    /// `matchExpressions` present: the selector is only partly known, so it is taken to
    /// match whatever `matchLabels` matches (erring toward "protected").
    pub has_expressions: bool,
    pub disruptions_allowed: i32,
}

impl PdbInfo {
    pub fn selects(&self, pod: &PodInfo) -> bool {
        pod.namespace == self.namespace
            && (!self.match_labels.is_empty() || self.has_expressions)
            && self
                .match_labels
                .iter()
                .all(|(k, v)| pod.labels.get(k) == Some(v))
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Taint {
    pub key: String,
    pub value: Option<String>,
    pub effect: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
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
    pub allocatable_memory: u64,
    /// Every name the node reports for its cached images, normalized.
    pub images: BTreeSet<String>,
    pub deleting: bool,
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
    /// Sum of container memory requests (init containers: the max, as the scheduler counts).
    pub memory_request: u64,
    /// `PodScheduled=False` with reason `Unschedulable`.
    pub unschedulable: bool,
    /// Kind of the controlling owner, if any (`ReplicaSet`, `DaemonSet`, ...).
    pub controller_kind: Option<String>,
    pub mirror: bool,
    pub images: Vec<String>,
    pub node_selector: BTreeMap<String, String>,
    pub tolerations: Vec<Toleration>,
    pub labels: BTreeMap<String, String>,
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

    pub fn is_image_puller(&self) -> bool {
        self.labels.contains_key(crate::LABEL_IMAGE_PULLER)
    }

    /// Pods that a drain leaves alone and that do not keep a node from being removed.
    pub fn ignored_by_drain(&self) -> bool {
        self.is_daemonset() || self.mirror || self.is_terminal() || self.is_image_puller()
    }

    pub fn tolerates_all(&self, taints: &[Taint]) -> bool {
        taints
            .iter()
            .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
            .all(|t| self.tolerations.iter().any(|tol| tol.tolerates(t)))
    }

    pub fn selects(&self, labels: &BTreeMap<String, String>) -> bool {
        self.node_selector
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
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

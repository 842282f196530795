//! The resource types the simulated API server serves, with what discovery reports
//! about them and how their bodies are validated (the checks are in `normalize`).
//!
//! The table every other part of the cluster reads, so it imports nothing of the
//! cluster but its own `normalize` child: store, status, storage and the handlers all
//! sit above it.

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{
    ConfigMap, Event, Namespace, Node, Pod, Secret, Service, ServiceAccount,
};
use k8s_openapi::api::events::v1::Event as EventsV1Event;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::api::storage::v1::VolumeAttachment;
use serde_json::Value;

pub(super) mod normalize;

use normalize::{
    normalize_binding, normalize_class, normalize_csinode, normalize_job, normalize_pv,
    normalize_pvc, normalize_role, roundtrip,
};

/// One served resource. `id` is the qualified resource name used in messages
/// ("pods", "poddisruptionbudgets.policy") and as store key.
#[derive(Debug)]
pub struct ResourceDef {
    pub id: &'static str,
    pub group: &'static str,
    pub version: &'static str,
    pub plural: &'static str,
    pub singular: &'static str,
    pub kind: &'static str,
    pub namespaced: bool,
    pub short_names: &'static [&'static str],
    pub categories: &'static [&'static str],
    /// Serves `{name}/status`; writes to the main resource keep the stored status.
    pub status_subresource: bool,
    /// `metadata.generation` is bumped when `spec` changes.
    pub has_generation: bool,
    /// Serves `{name}/scale` (an `autoscaling/v1` Scale of `spec.replicas`).
    pub scale_subresource: bool,
    /// Decodes into the k8s-openapi type and back: validates and drops unknown fields.
    pub normalize: fn(Value) -> Result<Value, String>,
}

impl ResourceDef {
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }
}

const NO_NAMES: &[&str] = &[];

pub static NAMESPACES: ResourceDef = ResourceDef {
    id: "namespaces",
    group: "",
    version: "v1",
    plural: "namespaces",
    singular: "namespace",
    kind: "Namespace",
    namespaced: false,
    short_names: &["ns"],
    categories: NO_NAMES,
    status_subresource: true,
    has_generation: false,
    scale_subresource: false,
    normalize: roundtrip::<Namespace>,
};

pub static NODES: ResourceDef = ResourceDef {
    id: "nodes",
    group: "",
    version: "v1",
    plural: "nodes",
    singular: "node",
    kind: "Node",
    namespaced: false,
    short_names: &["no"],
    categories: NO_NAMES,
    status_subresource: true,
    has_generation: false,
    scale_subresource: false,
    normalize: roundtrip::<Node>,
};

pub static PODS: ResourceDef = ResourceDef {
    id: "pods",
    group: "",
    version: "v1",
    plural: "pods",
    singular: "pod",
    kind: "Pod",
    namespaced: true,
    short_names: &["po"],
    categories: &["all"],
    status_subresource: true,
    has_generation: true,
    scale_subresource: false,
    normalize: roundtrip::<Pod>,
};

pub static CONFIGMAPS: ResourceDef = ResourceDef {
    id: "configmaps",
    group: "",
    version: "v1",
    plural: "configmaps",
    singular: "configmap",
    kind: "ConfigMap",
    namespaced: true,
    short_names: &["cm"],
    categories: NO_NAMES,
    status_subresource: false,
    has_generation: false,
    scale_subresource: false,
    normalize: roundtrip::<ConfigMap>,
};

pub static EVENTS: ResourceDef = ResourceDef {
    id: "events",
    group: "",
    version: "v1",
    plural: "events",
    singular: "event",
    kind: "Event",
    namespaced: true,
    short_names: &["ev"],
    categories: NO_NAMES,
    status_subresource: false,
    has_generation: false,
    scale_subresource: false,
    normalize: roundtrip::<Event>,
};

pub static EVENTS_V1: ResourceDef = ResourceDef {
    id: "events.events.k8s.io",
    group: "events.k8s.io",
    version: "v1",
    plural: "events",
    singular: "event",
    kind: "Event",
    namespaced: true,
    short_names: &["ev"],
    categories: NO_NAMES,
    status_subresource: false,
    has_generation: false,
    scale_subresource: false,
    normalize: roundtrip::<EventsV1Event>,
};

pub static LEASES: ResourceDef = ResourceDef {
    id: "leases.coordination.k8s.io",
    group: "coordination.k8s.io",
    version: "v1",
    plural: "leases",
    singular: "lease",
    kind: "Lease",
    namespaced: true,
    short_names: NO_NAMES,
    categories: NO_NAMES,
    status_subresource: false,
    has_generation: false,
    scale_subresource: false,
    normalize: roundtrip::<Lease>,
};

pub static PDBS: ResourceDef = ResourceDef {
    id: "poddisruptionbudgets.policy",
    group: "policy",
    version: "v1",
    plural: "poddisruptionbudgets",
    singular: "poddisruptionbudget",
    kind: "PodDisruptionBudget",
    namespaced: true,
    short_names: &["pdb"],
    categories: NO_NAMES,
    status_subresource: true,
    has_generation: true,
    scale_subresource: false,
    normalize: roundtrip::<PodDisruptionBudget>,
};

pub static REPLICASETS: ResourceDef = ResourceDef {
    id: "replicasets.apps",
    group: "apps",
    version: "v1",
    plural: "replicasets",
    singular: "replicaset",
    kind: "ReplicaSet",
    namespaced: true,
    short_names: &["rs"],
    categories: &["all"],
    status_subresource: true,
    has_generation: true,
    scale_subresource: true,
    normalize: roundtrip::<ReplicaSet>,
};

pub static DAEMONSETS: ResourceDef = ResourceDef {
    id: "daemonsets.apps",
    group: "apps",
    version: "v1",
    plural: "daemonsets",
    singular: "daemonset",
    kind: "DaemonSet",
    namespaced: true,
    short_names: &["ds"],
    categories: &["all"],
    status_subresource: true,
    has_generation: true,
    scale_subresource: false,
    normalize: roundtrip::<DaemonSet>,
};

pub static DEPLOYMENTS: ResourceDef = ResourceDef {
    id: "deployments.apps",
    group: "apps",
    version: "v1",
    plural: "deployments",
    singular: "deployment",
    kind: "Deployment",
    namespaced: true,
    short_names: &["deploy"],
    categories: &["all"],
    status_subresource: true,
    has_generation: true,
    scale_subresource: true,
    normalize: roundtrip::<Deployment>,
};

pub static JOBS: ResourceDef = ResourceDef {
    id: "jobs.batch",
    group: "batch",
    version: "v1",
    plural: "jobs",
    singular: "job",
    kind: "Job",
    namespaced: true,
    short_names: NO_NAMES,
    categories: &["all"],
    status_subresource: true,
    has_generation: true,
    scale_subresource: false,
    normalize: normalize_job,
};

/// Read by nodewright to wait for volumes to detach before deleting a VM.
pub static VOLUMEATTACHMENTS: ResourceDef = ResourceDef {
    id: "volumeattachments.storage.k8s.io",
    group: "storage.k8s.io",
    version: "v1",
    plural: "volumeattachments",
    singular: "volumeattachment",
    kind: "VolumeAttachment",
    namespaced: false,
    short_names: NO_NAMES,
    categories: NO_NAMES,
    status_subresource: true,
    has_generation: false,
    scale_subresource: false,
    normalize: roundtrip::<VolumeAttachment>,
};

// The kinds of identity and access a deployment brings along (ServiceAccount, Secret,
// Service, Role, ClusterRole and their bindings), so `kubectl apply` of the project's
// Helm and kustomize output works on the simulated cluster, and the RBAC objects there
// decide what a ServiceAccount's token may do (see `rbac`).

pub static SERVICEACCOUNTS: ResourceDef = ResourceDef {
    id: "serviceaccounts",
    group: "",
    version: "v1",
    plural: "serviceaccounts",
    singular: "serviceaccount",
    kind: "ServiceAccount",
    namespaced: true,
    short_names: &["sa"],
    categories: NO_NAMES,
    status_subresource: false,
    has_generation: false,
    scale_subresource: false,
    normalize: roundtrip::<ServiceAccount>,
};

pub static SECRETS: ResourceDef = ResourceDef {
    id: "secrets",
    group: "",
    version: "v1",
    plural: "secrets",
    singular: "secret",
    kind: "Secret",
    namespaced: true,
    short_names: NO_NAMES,
    categories: NO_NAMES,
    status_subresource: false,
    has_generation: false,
    scale_subresource: false,
    normalize: roundtrip::<Secret>,
};

pub static SERVICES: ResourceDef = ResourceDef {
    id: "services",
    group: "",
    version: "v1",
    plural: "services",
    singular: "service",
    kind: "Service",
    namespaced: true,
    short_names: &["svc"],
    categories: &["all"],
    status_subresource: true,
    has_generation: false,
    scale_subresource: false,
    normalize: roundtrip::<Service>,
};

/// The group of Role, ClusterRole and their bindings.
pub const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

pub static ROLES: ResourceDef = ResourceDef {
    id: "roles.rbac.authorization.k8s.io",
    group: RBAC_GROUP,
    version: "v1",
    plural: "roles",
    singular: "role",
    kind: "Role",
    namespaced: true,
    short_names: NO_NAMES,
    categories: NO_NAMES,
    status_subresource: false,
    has_generation: false,
    scale_subresource: false,
    normalize: normalize_role::<Role>,
};

pub static CLUSTERROLES: ResourceDef = ResourceDef {
    id: "clusterroles.rbac.authorization.k8s.io",
    group: RBAC_GROUP,
    version: "v1",
    plural: "clusterroles",
    singular: "clusterrole",
    kind: "ClusterRole",
    namespaced: false,
    short_names: NO_NAMES,
    categories: NO_NAMES,
    status_subresource: false,
    has_generation: false,
    scale_subresource: false,
    normalize: normalize_role::<ClusterRole>,
};

pub static ROLEBINDINGS: ResourceDef = ResourceDef {
    id: "rolebindings.rbac.authorization.k8s.io",
    group: RBAC_GROUP,
    version: "v1",
    plural: "rolebindings",
    singular: "rolebinding",
    kind: "RoleBinding",
    namespaced: true,
    short_names: NO_NAMES,
    categories: NO_NAMES,
    status_subresource: false,
    has_generation: false,
    scale_subresource: false,
    normalize: normalize_binding::<RoleBinding>,
};

pub static CLUSTERROLEBINDINGS: ResourceDef = ResourceDef {
    id: "clusterrolebindings.rbac.authorization.k8s.io",
    group: RBAC_GROUP,
    version: "v1",
    plural: "clusterrolebindings",
    singular: "clusterrolebinding",
    kind: "ClusterRoleBinding",
    namespaced: false,
    short_names: NO_NAMES,
    categories: NO_NAMES,
    status_subresource: false,
    has_generation: false,
    scale_subresource: false,
    normalize: normalize_binding::<ClusterRoleBinding>,
};

pub static PERSISTENTVOLUMES: ResourceDef = ResourceDef {
    id: "persistentvolumes",
    group: "",
    version: "v1",
    plural: "persistentvolumes",
    singular: "persistentvolume",
    kind: "PersistentVolume",
    namespaced: false,
    short_names: &["pv"],
    categories: NO_NAMES,
    status_subresource: true,
    has_generation: false,
    scale_subresource: false,
    normalize: normalize_pv,
};

pub static PERSISTENTVOLUMECLAIMS: ResourceDef = ResourceDef {
    id: "persistentvolumeclaims",
    group: "",
    version: "v1",
    plural: "persistentvolumeclaims",
    singular: "persistentvolumeclaim",
    kind: "PersistentVolumeClaim",
    namespaced: true,
    short_names: &["pvc"],
    categories: NO_NAMES,
    status_subresource: true,
    has_generation: false,
    scale_subresource: false,
    normalize: normalize_pvc,
};

pub static STORAGECLASSES: ResourceDef = ResourceDef {
    id: "storageclasses.storage.k8s.io",
    group: "storage.k8s.io",
    version: "v1",
    plural: "storageclasses",
    singular: "storageclass",
    kind: "StorageClass",
    namespaced: false,
    short_names: &["sc"],
    categories: NO_NAMES,
    status_subresource: false,
    has_generation: false,
    scale_subresource: false,
    normalize: normalize_class,
};

/// What each CSI driver may attach to a node (`allocatable.count`).
pub static CSINODES: ResourceDef = ResourceDef {
    id: "csinodes.storage.k8s.io",
    group: "storage.k8s.io",
    version: "v1",
    plural: "csinodes",
    singular: "csinode",
    kind: "CSINode",
    namespaced: false,
    short_names: NO_NAMES,
    categories: NO_NAMES,
    status_subresource: false,
    has_generation: false,
    scale_subresource: false,
    normalize: normalize_csinode,
};

pub static ALL: [&ResourceDef; 24] = [
    &NAMESPACES,
    &NODES,
    &PODS,
    &CONFIGMAPS,
    &EVENTS,
    &EVENTS_V1,
    &LEASES,
    &PDBS,
    &REPLICASETS,
    &DAEMONSETS,
    &DEPLOYMENTS,
    &JOBS,
    &VOLUMEATTACHMENTS,
    &SERVICEACCOUNTS,
    &SECRETS,
    &SERVICES,
    &ROLES,
    &CLUSTERROLES,
    &ROLEBINDINGS,
    &CLUSTERROLEBINDINGS,
    &PERSISTENTVOLUMES,
    &PERSISTENTVOLUMECLAIMS,
    &STORAGECLASSES,
    &CSINODES,
];

/// Served API groups (other than the core group) with their single version.
pub const GROUPS: [(&str, &str); 7] = [
    ("storage.k8s.io", "v1"),
    ("apps", "v1"),
    ("batch", "v1"),
    ("policy", "v1"),
    ("coordination.k8s.io", "v1"),
    ("events.k8s.io", "v1"),
    (RBAC_GROUP, "v1"),
];

pub fn find(group: &str, version: &str, plural: &str) -> Option<&'static ResourceDef> {
    ALL.iter()
        .copied()
        .find(|r| r.group == group && r.version == version && r.plural == plural)
}

//! Persistent volume objects as the planner reads them (PersistentVolumes, claims,
//! StorageClasses, CSINodes) and the names kube gives their annotations and resources;
//! what they mean for a pod is the planner's (`plan::volumes`).

use std::collections::BTreeMap;

use serde::Serialize;

use super::selector::NodeSelectorTerm;

/// The node label a `local-path`/LocalPV volume's affinity names its node by.
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

/// The annotation kube-scheduler sets on a WaitForFirstConsumer claim for the node it chose.
pub const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";

/// `"true"` on a PersistentVolume or its claim: its data is scratch, so the volume pins
/// no node (a bound volume only one node can reach pins it otherwise, pod or no pod).
pub const ANNOTATION_VOLUME_DISPOSABLE: &str = "nodewright.io/volume-disposable";

/// The annotation that marks the default StorageClass.
pub const DEFAULT_CLASS: &str = "storageclass.kubernetes.io/is-default-class";

/// Prefix of the scalar resource that counts a CSI driver's volumes on a node, named as
/// kube's in-tree attach limits were (`attachable-volumes-*`). A node that publishes no
/// limit for a driver has none: a missing allocatable entry of this prefix never makes
/// a pod not fit (see [`super::resources::Resources::fits`]).
pub const ATTACH_PREFIX: &str = "attachable-volumes-csi-";

/// The scalar resource counting `driver`'s volumes on a node.
pub fn attach_resource(driver: &str) -> String {
    format!("{ATTACH_PREFIX}{driver}")
}

/// Every volume object the planner reads, from one cycle.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Volumes {
    pub pvs: Vec<PvInfo>,
    pub claims: Vec<ClaimInfo>,
    pub classes: Vec<ClassInfo>,
    pub csi_nodes: Vec<CsiNodeInfo>,
}

/// A PersistentVolume.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PvInfo {
    pub name: String,
    /// `spec.nodeAffinity.required` terms (any one must match); None when unset.
    pub node_affinity: Option<Vec<NodeSelectorTerm>>,
    /// A `local` volume (a disk of one node), whatever its affinity looks like.
    pub local: bool,
    /// The CSI driver serving it, if any (`spec.csi.driver`).
    pub csi_driver: Option<String>,
    /// `spec.claimRef` as (namespace, name).
    pub claim: Option<(String, String)>,
    /// Annotated [`ANNOTATION_VOLUME_DISPOSABLE`]: `"true"`.
    pub disposable: bool,
}

/// A PersistentVolumeClaim.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClaimInfo {
    pub namespace: String,
    pub name: String,
    /// `spec.volumeName`: the PV it is bound to.
    pub volume_name: Option<String>,
    /// `spec.storageClassName` (None: unset; the API server's admission sets the default).
    pub storage_class: Option<String>,
    /// `volume.kubernetes.io/selected-node`: where the scheduler chose to provision it.
    pub selected_node: Option<String>,
    /// Annotated [`ANNOTATION_VOLUME_DISPOSABLE`]: `"true"`.
    pub disposable: bool,
}

/// A StorageClass.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClassInfo {
    pub name: String,
    pub provisioner: String,
    /// `volumeBindingMode: WaitForFirstConsumer` (else Immediate).
    pub wait_for_first_consumer: bool,
    /// `allowedTopologies` as node selector terms (any one must match).
    pub allowed_topologies: Option<Vec<NodeSelectorTerm>>,
    pub default: bool,
}

/// A CSINode: how many volumes each CSI driver may attach to the node.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CsiNodeInfo {
    pub node: String,
    /// Driver name to `allocatable.count`, for the drivers that publish one.
    pub limits: BTreeMap<String, u64>,
}

/// One pod volume backed by a claim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PodClaim {
    /// The name of the volume in the pod spec (what `safe-to-evict-local-volumes` lists).
    pub volume: String,
    /// The PersistentVolumeClaim, in the pod's namespace.
    pub claim: String,
}

/// A volume of a pod whose data only one node can reach.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LocalVolume {
    /// The pod spec's volume name.
    pub volume: String,
    pub claim: String,
    pub pv: String,
    /// The node holding the data.
    pub node: String,
    /// The PV's required node affinity, as the pod's `volume_affinity` carries it: what
    /// a pod whose volume is let go is freed of.
    #[serde(skip)]
    pub affinity: Vec<NodeSelectorTerm>,
}

/// A bound volume whose data only one node holds, pod or no pod: it pins that node until
/// its claim is deleted (or the volume released), unless it is marked disposable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HeldVolume {
    pub pv: String,
    /// The claim bound to it, as (namespace, name).
    pub claim: (String, String),
    /// The node holding the data.
    pub node: String,
}

impl std::fmt::Display for HeldVolume {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "PersistentVolume {} (claim {}/{}) keeps its data on node {}, which only that node can reach; no pod uses it now",
            self.pv, self.claim.0, self.claim.1, self.node
        )
    }
}

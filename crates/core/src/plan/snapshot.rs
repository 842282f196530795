//! What one cycle observed, as the planner reads it: plain data of the vocabulary
//! ([`crate::model`]), no Kubernetes or cloud client types, so the planner can be tested
//! with small builders and fed by any adapter.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;

use serde::Serialize;

use crate::model::{GroupShape, NodeInfo, PdbInfo, PodInfo, Resources, Server, Stray, Volumes};

/// Everything one cycle observed.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Snapshot {
    pub nodes: Vec<NodeInfo>,
    /// The API server's `gitVersion` (`v1.31.4+k3s1`), when it could be read: nodes of a
    /// group that follows it are drifted when older, and new ones install it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_version: Option<String>,
    /// Shared with the watch cache: a cycle at 150,000 pods copies references, not pods.
    #[serde(serialize_with = "shared_pods")]
    pub pods: Vec<Arc<PodInfo>>,
    /// Servers tagged with this cluster, from every provider.
    pub servers: Vec<Server>,
    /// What the provider knows of a new VM per group (flavor CPU and memory, zone).
    pub group_shapes: BTreeMap<String, GroupShape>,
    /// Providers whose VMs could not be listed this cycle, with the error: their groups
    /// are frozen (nothing is decided from missing data) while the others carry on.
    pub unavailable_providers: BTreeMap<String, String>,
    /// VMs per group of a provider that could not be listed, as its last good listing
    /// in this process showed them: the cluster-wide limits count them. A group of a
    /// frozen provider missing here (the process restarted during the outage) counts at
    /// its `maxSize`.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub frozen_sizes: BTreeMap<String, u32>,
    /// What a node of each group offered when this process last saw one Ready
    /// (allocatable), by `<group>/<settings hash>`: a group scaled to zero is modelled with it rather than its flavor
    /// minus `reserved`, which a real kubelet's reservation may undercut (a pod that fits
    /// only the model got a node, which went again as unneeded, and again: a flap).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub learned_allocatable: BTreeMap<String, Resources>,
    /// Provisioning failures a provider found that no server carries, as (provider,
    /// what it said): noted in the plan and posted as an Event.
    pub cloud_failures: Vec<(String, String)>,
    /// VMs carrying this cluster's marks that are not its (a person's copy of a node VM,
    /// a VM that lost its cluster tag): reported every cycle, never acted on.
    pub strays: Vec<Stray>,
    pub pdbs: Vec<PdbInfo>,
    /// Attached volumes as (VolumeAttachment name, node name).
    pub volume_attachments: Vec<(String, String)>,
    /// PersistentVolumes, claims, StorageClasses and CSINodes; applied to the pods and
    /// nodes by [`Snapshot::resolve_volumes`].
    pub volumes: Volumes,
    /// Groups whose last VM create or provisioning failed, with the time until which they
    /// are left alone.
    pub group_backoff: BTreeMap<String, SystemTime>,
    /// Actions that failed on their objects, by [`crate::plan::backoff::keys`], with the
    /// time until which they are held back.
    pub action_backoff: BTreeMap<String, SystemTime>,
    /// When this process last deleted a node (for `scaleDown.delayAfterDelete`).
    pub last_node_deleted: Option<SystemTime>,
    /// When a drain was last abandoned or a removal failed (`delayAfterFailure`).
    pub last_disruption_failure: Option<SystemTime>,
    /// When VMs were last removed for not joining (the latest few), as the cluster
    /// records them and this process remembers: such removals are a rate, per
    /// `provisionTimeout`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub not_joined_removed: Vec<SystemTime>,
}

impl Snapshot {
    /// Writes what [`Snapshot::volumes`] means into the pods and nodes (see
    /// [`super::volumes::resolve`]), judging which volumes only one node can reach
    /// against the nodes in view and what a new node of each group of `config` carries;
    /// the adapters call it once they have read everything.
    pub fn resolve_volumes(&mut self, config: &crate::config::Config) {
        let new_nodes = super::volumes::new_nodes(config, &self.group_shapes);
        super::volumes::resolve(&self.volumes, &mut self.nodes, &new_nodes, &mut self.pods);
    }
}

fn shared_pods<S: serde::Serializer>(pods: &[Arc<PodInfo>], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(pods.iter().map(|p| &**p))
}

/// Pods as a snapshot holds them (test builders and adapters that own their pods).
pub fn shared(pods: impl IntoIterator<Item = PodInfo>) -> Vec<Arc<PodInfo>> {
    pods.into_iter().map(Arc::new).collect()
}

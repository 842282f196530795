//! The Kubernetes side: reads nodes and pods into the planner's model and performs the
//! few writes the actions need, behind [`ClusterApi`] so the loop can be driven by any
//! implementation.

pub mod bootstrap;
mod cache;
pub mod convert;
pub mod deadline;
pub mod events;
mod kube_api;
pub mod leader;
pub mod records;
pub mod retry_after;
pub mod status;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

use async_trait::async_trait;

pub use cache::{CacheOptions, CacheStats};
pub use kube_api::KubeCluster;
pub use records::{DisruptionRecords, RecordKind};

use crate::model::{NodeInfo, PdbInfo, PodInfo, PodRef, Volumes};

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("kubeconfig {path}: {message}")]
    Kubeconfig { path: String, message: String },
    #[error("{call}: {source}")]
    Api {
        call: String,
        #[source]
        source: Box<kube::Error>,
    },
    /// The object changed since the plan in a way that makes the write wrong (a person
    /// cordoned the node meanwhile): nothing was written; the next cycle reads it again.
    #[error("{0}")]
    Changed(String),
    /// A kubeadm bootstrap token could not be minted (no `kube-public/cluster-info`, an
    /// unreadable CA): the reason, naming what to fix.
    #[error("{0}")]
    Bootstrap(String),
    /// The watch cache has not completed its first list: deciding on part of the cluster
    /// could remove nodes that are needed.
    #[error("the {resource} cache is not synced after {}{}", humantime::format_duration(*.waited), .last_error.as_ref().map(|e| format!(" (last watch error: {e})")).unwrap_or_default())]
    NotSynced {
        resource: &'static str,
        waited: std::time::Duration,
        last_error: Option<String>,
    },
}

impl ClusterError {
    /// The API server did not answer at all (a dropped connection, a call deadline): a
    /// call about another object would wait out the same, so an action over several
    /// objects stops there.
    pub fn unanswered(&self) -> bool {
        match self {
            ClusterError::Api { source, .. } => !matches!(**source, kube::Error::Api(_)),
            _ => false,
        }
    }
}

/// What became of an eviction request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Eviction {
    Evicted,
    /// Refused, typically by a PodDisruptionBudget (HTTP 429); retried next cycle.
    Blocked(String),
    /// The pod was already gone.
    Gone,
}

#[async_trait]
pub trait ClusterApi: Send + Sync {
    async fn nodes(&self) -> Result<Vec<NodeInfo>, ClusterError>;
    /// Shared, not copied: the watch cache and every snapshot hold the same pods.
    async fn pods(&self) -> Result<Vec<Arc<PodInfo>>, ClusterError>;
    async fn pdbs(&self) -> Result<Vec<PdbInfo>, ClusterError>;
    /// Attached volumes as (VolumeAttachment name, node name).
    async fn volume_attachments(&self) -> Result<Vec<(String, String)>, ClusterError>;
    /// PersistentVolumes, claims, StorageClasses and CSINodes. An implementation without
    /// volumes (a replay whose workload has none) answers empty.
    async fn volumes(&self) -> Result<Volumes, ClusterError> {
        Ok(Volumes::default())
    }
    /// Marks the node unschedulable and sets `annotations` (why, when, what for) in the
    /// same patch, so a crash never leaves a cordon without its record. A node someone
    /// else cordoned meanwhile is left to them ([`ClusterError::Changed`]).
    async fn cordon(
        &self,
        node: &str,
        annotations: &BTreeMap<String, String>,
    ) -> Result<(), ClusterError>;
    /// Makes the node schedulable again and drops nodewright's cordon annotations and
    /// unneeded clock.
    async fn uncordon(&self, node: &str) -> Result<(), ClusterError>;
    /// Sets (`Some`) or removes (`None`) node annotations.
    async fn annotate(
        &self,
        node: &str,
        annotations: &BTreeMap<String, Option<String>>,
    ) -> Result<(), ClusterError>;
    /// Sets (`Some`) or removes (`None`) node labels.
    async fn label(
        &self,
        node: &str,
        labels: &BTreeMap<String, Option<String>>,
    ) -> Result<(), ClusterError>;
    async fn remove_taint(&self, node: &str, key: &str) -> Result<(), ClusterError>;
    /// Adds `taint` to the node unless a taint of its key and effect is there already.
    async fn add_taint(&self, node: &str, taint: &crate::model::Taint) -> Result<(), ClusterError>;
    async fn evict(&self, pod: &PodRef) -> Result<Eviction, ClusterError>;
    /// Deleting a node that is already gone is success.
    async fn delete_node(&self, node: &str) -> Result<(), ClusterError>;
    /// Mints the kubeadm bootstrap token of VM `node` of `cluster` (see [`bootstrap`]),
    /// good until `expires`, replacing any earlier one of that VM; with the endpoint and CA
    /// hash of `kube-public/cluster-info`.
    async fn mint_bootstrap_token(
        &self,
        cluster: &str,
        node: &str,
        expires: std::time::SystemTime,
    ) -> Result<crate::model::JoinCredentials, ClusterError> {
        let _ = (cluster, expires);
        Err(ClusterError::Bootstrap(format!(
            "node {node}: this cluster client mints no bootstrap tokens"
        )))
    }
    /// Deletes the bootstrap token of VM `node` of `cluster`; one already gone is success.
    async fn delete_bootstrap_token(&self, cluster: &str, node: &str) -> Result<(), ClusterError> {
        let _ = (cluster, node);
        Ok(())
    }
    /// `node` as the API server has it now (labels, annotations, cordon); `None` when
    /// there is no such node. The actuator checks it just before a destructive call.
    async fn node(&self, node: &str) -> Result<Option<NodeInfo>, ClusterError>;
    /// The pods bound to `node` as the API server has them now (not the watch cache):
    /// read just before a node is deleted, so a cache a failing watch left stale never
    /// passes a node running pods for empty. The default filters [`Self::pods`], right
    /// for implementations without a cache.
    async fn pods_on_node(&self, node: &str) -> Result<Vec<Arc<PodInfo>>, ClusterError> {
        Ok(self
            .pods()
            .await?
            .into_iter()
            .filter(|p| p.node_name.as_deref() == Some(node))
            .collect())
    }
    /// Starts a pod on `node` whose only job is to make the runtime pull `images` (with
    /// the Secrets named `pull_secrets` of `namespace` as its `imagePullSecrets`),
    /// labelled as an image puller of `cluster` (so that only `cluster`'s nodewright
    /// ever deletes it).
    async fn create_image_puller(
        &self,
        cluster: &str,
        namespace: &str,
        node: &str,
        images: &[String],
        pull_secrets: &[String],
    ) -> Result<String, ClusterError>;
    /// Deleting a pod that is already gone is success.
    async fn delete_pod(&self, pod: &PodRef) -> Result<(), ClusterError>;
    /// The disruption records kept in the cluster (see [`records`]), read every cycle so
    /// the scale-down delays survive a restart. An implementation that keeps none (the
    /// in-memory replay, where the process never restarts) answers empty.
    async fn disruption_records(&self) -> Result<DisruptionRecords, ClusterError> {
        Ok(DisruptionRecords::default())
    }
    /// The cluster's own identity: the UID of the `kube-system` namespace, which every
    /// cluster has from its start and keeps (see [`crate::cloud::ClusterIdentity`]).
    /// `None` from an implementation that has none (the in-memory replay).
    async fn identity(&self) -> Result<Option<String>, ClusterError> {
        Ok(None)
    }
    /// The API server's version, `/version`'s `gitVersion` (`v1.31.4+k3s1`): new nodes
    /// install it and older ones have drifted. `None` from an implementation that has
    /// none (the in-memory replay).
    async fn server_version(&self) -> Result<Option<String>, ClusterError> {
        Ok(None)
    }
    /// Records `at` as the last `kind` of each of `groups`.
    async fn record_disruption(
        &self,
        _kind: RecordKind,
        _groups: &[String],
        _at: SystemTime,
    ) -> Result<(), ClusterError> {
        Ok(())
    }
    /// Records `times` as the latest removals of VMs for not joining (replacing the
    /// earlier record), so their rate holds across a restart.
    async fn record_not_joined_removed(&self, _times: &[SystemTime]) -> Result<(), ClusterError> {
        Ok(())
    }
}

/// Builds a Kubernetes client from `KUBECONFIG_FILE`, else `KUBECONFIG`, else in-cluster.
pub async fn client_from_env() -> Result<kube::Client, ClusterError> {
    let explicit = std::env::var_os(crate::config::ENV_KUBECONFIG_FILE);
    let config = match explicit {
        Some(path) => kubeconfig_from_file(Path::new(&path)).await?,
        None => kube::Config::infer()
            .await
            .map_err(|e| ClusterError::Kubeconfig {
                path: std::env::var("KUBECONFIG").unwrap_or_else(|_| "(in-cluster)".into()),
                message: e.to_string(),
            })?,
    };
    client_from_config(config)
}

/// A client that does not retry on its own: a 429 from an eviction blocked by a
/// PodDisruptionBudget carries no Retry-After and would otherwise be retried for minutes,
/// stalling the cycle; the loop itself is the retry.
/// A [`retry_after`] layer holds every call back while the API server's last 429 or 503
/// asks to wait, and counts failures in the metrics.
/// Every call but a watch has [`deadline::DEFAULT_CALL_DEADLINE`] for its whole answer.
pub fn client_from_config(config: kube::Config) -> Result<kube::Client, ClusterError> {
    client_with_deadline(config, deadline::DEFAULT_CALL_DEADLINE)
}

/// [`client_from_config`] with another deadline per call (the Retry-After wait included).
pub fn client_with_deadline(
    mut config: kube::Config,
    call_deadline: std::time::Duration,
) -> Result<kube::Client, ClusterError> {
    config.default_retry = false;
    let builder = kube::client::ClientBuilder::try_from(config).map_err(|e| ClusterError::Api {
        call: "building the Kubernetes client".into(),
        source: Box::new(e),
    })?;
    Ok(builder
        .with_layer(&retry_after::RetryAfterLayer::default())
        .with_layer(&deadline::DeadlineLayer::new(call_deadline))
        .build())
}

pub async fn kubeconfig_from_file(path: &Path) -> Result<kube::Config, ClusterError> {
    let err = |message: String| ClusterError::Kubeconfig {
        path: path.display().to_string(),
        message,
    };
    let kc = kube::config::Kubeconfig::read_from(path).map_err(|e| err(e.to_string()))?;
    kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
        .await
        .map_err(|e| err(e.to_string()))
}

//! Watch caches of nodes, pods, PodDisruptionBudgets, VolumeAttachments and the volume
//! objects (PersistentVolumes, PersistentVolumeClaims, StorageClasses, CSINodes), so that a
//! cycle reads memory instead of listing the cluster, and so that the changes worth
//! acting on (a pod the scheduler gave up on, a terminating pod gone, a node that became
//! Ready, went away or was cordoned) wake the loop within seconds instead of at the next `scanInterval`.
//!
//! Each resource has one kube-rs `watcher` (list, then watch from that resourceVersion;
//! a watch that ends resumes from the last version seen; `410 Gone` relists) with
//! client-go's backoff after errors. Objects are converted to the planner's types as they
//! arrive and only those are kept: no `managedFields`, no annotations the planner never
//! reads, no full object at all.

mod store;
mod watch;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::{CSINode, StorageClass, VolumeAttachment};
use kube::{Api, Client, ResourceExt};
use tokio::task::JoinHandle;

use super::convert::{
    claim_info, class_info, csi_node_info, node_info, pdb_info, pod_info, pv_info,
};
use super::ClusterError;
use crate::model::{
    ClaimInfo, ClassInfo, CsiNodeInfo, NodeInfo, PdbInfo, PodInfo, PvInfo, Volumes,
};
pub(crate) use store::Cached;
use store::{Change, Store};

/// How the caches behave; the defaults suit real clusters.
#[derive(Debug, Clone)]
pub struct CacheOptions {
    /// A cycle waits this long at most for a cache's first complete list, then fails
    /// (and the next cycle waits again).
    pub sync_timeout: Duration,
    /// `timeoutSeconds` of each watch request: the server ends the watch after this
    /// and it is resumed from the last version seen.
    pub watch_timeout: Option<u32>,
}

impl Default for CacheOptions {
    fn default() -> Self {
        CacheOptions {
            sync_timeout: Duration::from_secs(120),
            watch_timeout: None,
        }
    }
}

/// What a cache has seen, for logs, tests and benchmarks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheStats {
    pub resource: &'static str,
    pub objects: usize,
    pub synced: bool,
    /// Complete lists applied: 1 after the first sync, one more per relist.
    pub lists: u64,
    pub events: u64,
    pub errors: u64,
    pub last_error: Option<String>,
}

/// The VolumeAttachment fields the planner reads: its name and its node.
pub(crate) type Attachment = (String, String);

impl Cached for NodeInfo {
    fn wake(old: Option<&Self>, new: Option<&Self>) -> Option<&'static str> {
        match (old, new) {
            (old, Some(n)) if n.ready && !old.is_some_and(|o| o.ready) => Some("node Ready"),
            (Some(o), Some(n)) if n.unschedulable && !o.unschedulable => Some("node cordoned"),
            (Some(_), None) => Some("node deleted"),
            _ => None,
        }
    }
}

impl Cached for Arc<PodInfo> {
    fn wake(old: Option<&Self>, new: Option<&Self>) -> Option<&'static str> {
        match (old, new) {
            (old, Some(n)) if n.unschedulable && !old.is_some_and(|o| o.unschedulable) => {
                Some("pod Unschedulable")
            }
            // An evicted (or otherwise deleted) pod finished terminating: a drain waiting
            // on it can go on to delete its node now, not at the next scanInterval.
            (Some(o), None) if o.deleting => Some("terminating pod gone"),
            _ => None,
        }
    }
}

impl Cached for PdbInfo {}
impl Cached for Attachment {}
impl Cached for PvInfo {}
impl Cached for ClaimInfo {}
impl Cached for ClassInfo {}
impl Cached for CsiNodeInfo {}

/// One resource's cache, shared by its watch task and the readers.
pub(crate) struct Shared<V> {
    resource: &'static str,
    store: Mutex<Store<V>>,
    synced: tokio::sync::watch::Sender<bool>,
    stats: Mutex<Counters>,
}

#[derive(Debug, Default)]
struct Counters {
    lists: u64,
    events: u64,
    errors: u64,
    last_error: Option<String>,
}

impl<V: Cached> Shared<V> {
    fn new(resource: &'static str) -> Arc<Self> {
        Arc::new(Shared {
            resource,
            store: Mutex::new(Store::default()),
            synced: tokio::sync::watch::channel(false).0,
            stats: Mutex::new(Counters::default()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Store<V>> {
        self.store.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn counters(&self) -> std::sync::MutexGuard<'_, Counters> {
        self.stats.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Applies a watch event; returns the wake-ups it causes.
    fn apply(&self, change: Change<V>) -> Vec<store::Trigger> {
        let done = matches!(change, Change::InitDone);
        let triggers = self.lock().apply(change, Instant::now());
        let mut c = self.counters();
        c.events += 1;
        if done {
            c.lists += 1;
            self.synced.send_replace(true);
        }
        triggers
    }

    fn failed(&self, error: String) {
        let mut c = self.counters();
        c.errors += 1;
        c.last_error = Some(error);
    }

    /// The cached objects, once the first complete list is in.
    pub async fn values(&self, timeout: Duration) -> Result<Vec<V>, ClusterError> {
        self.wait_synced(timeout).await?;
        let mut store = self.lock();
        // A pin that has outlived its time yields to the watch even when no event for
        // its object has come since: a finished pod's last event may be the one held.
        store.expire(Instant::now());
        Ok(store.values())
    }

    /// Waits for the first complete list (without copying anything).
    pub async fn wait_synced(&self, timeout: Duration) -> Result<(), ClusterError> {
        let mut synced = self.synced.subscribe();
        if tokio::time::timeout(timeout, synced.wait_for(|s| *s))
            .await
            .is_err()
        {
            return Err(ClusterError::NotSynced {
                resource: self.resource,
                waited: timeout,
                last_error: self.counters().last_error.clone(),
            });
        }
        Ok(())
    }

    fn write_through<K: ResourceExt>(&self, obj: &K, convert: fn(&K) -> Option<V>) {
        if let Some(v) = convert(obj) {
            self.lock()
                .write_through(key_of(obj), obj.resource_version(), v, Instant::now());
        }
    }

    fn forget(&self, key: &str) {
        self.lock().forget(key, Instant::now());
    }

    /// Changes the cached value of `key`, if any, until the next watch event for it.
    fn modify(&self, key: &str, f: impl FnOnce(&mut V)) {
        self.lock().modify(key, f);
    }

    fn stats(&self) -> CacheStats {
        let (objects, synced) = {
            let s = self.lock();
            (s.len(), s.synced())
        };
        let c = self.counters();
        CacheStats {
            resource: self.resource,
            objects,
            synced,
            lists: c.lists,
            events: c.events,
            errors: c.errors,
            last_error: c.last_error.clone(),
        }
    }
}

/// `namespace/name` for namespaced objects, `name` otherwise: a list's order.
pub(crate) fn key_of<K: ResourceExt>(obj: &K) -> String {
    match obj.namespace() {
        Some(ns) => format!("{ns}/{}", obj.name_any()),
        None => obj.name_any(),
    }
}

/// Counts wake-ups; the loop waits for it to change.
pub(crate) type WakeTx = tokio::sync::watch::Sender<u64>;

/// The volume objects' caches.
pub(crate) struct VolumeCaches {
    pub pvs: Arc<Shared<PvInfo>>,
    pub claims: Arc<Shared<ClaimInfo>>,
    pub classes: Arc<Shared<ClassInfo>>,
    pub csi_nodes: Arc<Shared<CsiNodeInfo>>,
}

impl VolumeCaches {
    pub async fn values(&self, timeout: Duration) -> Result<Volumes, ClusterError> {
        let (pvs, claims, classes, csi_nodes) = tokio::try_join!(
            self.pvs.values(timeout),
            self.claims.values(timeout),
            self.classes.values(timeout),
            self.csi_nodes.values(timeout)
        )?;
        Ok(Volumes {
            pvs,
            claims,
            classes,
            csi_nodes,
        })
    }

    pub async fn wait_synced(&self, timeout: Duration) -> Result<(), ClusterError> {
        tokio::try_join!(
            self.pvs.wait_synced(timeout),
            self.claims.wait_synced(timeout),
            self.classes.wait_synced(timeout),
            self.csi_nodes.wait_synced(timeout)
        )?;
        Ok(())
    }
}

/// The caches and their watch tasks, which end when this is dropped.
pub(crate) struct ClusterCache {
    pub nodes: Arc<Shared<NodeInfo>>,
    pub pods: Arc<Shared<Arc<PodInfo>>>,
    pub pdbs: Arc<Shared<PdbInfo>>,
    pub attachments: Arc<Shared<Attachment>>,
    pub volumes: VolumeCaches,
    wake: WakeTx,
    options: CacheOptions,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for ClusterCache {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Pods are held once, behind an `Arc`, by the cache and every snapshot.
fn shared_pod_info(p: &Pod) -> Option<Arc<PodInfo>> {
    pod_info(p).map(Arc::new)
}

fn attachment(va: &VolumeAttachment) -> Option<Attachment> {
    Some((va.metadata.name.clone()?, va.spec.node_name.clone()))
}

impl ClusterCache {
    /// Starts the watches on the current tokio runtime.
    pub fn start(client: Client, options: CacheOptions) -> ClusterCache {
        let wake = tokio::sync::watch::channel(0u64).0;
        let nodes = Shared::new("nodes");
        let pods = Shared::new("pods");
        let pdbs = Shared::new("poddisruptionbudgets");
        let attachments = Shared::new("volumeattachments");
        let volumes = VolumeCaches {
            pvs: Shared::new("persistentvolumes"),
            claims: Shared::new("persistentvolumeclaims"),
            classes: Shared::new("storageclasses"),
            csi_nodes: Shared::new("csinodes"),
        };
        let mut cfg = kube::runtime::watcher::Config::default();
        if let Some(t) = options.watch_timeout {
            cfg = cfg.timeout(t);
        }
        let tasks = vec![
            tokio::spawn(watch::run(
                Api::<Node>::all(client.clone()),
                cfg.clone(),
                nodes.clone(),
                node_info,
                wake.clone(),
            )),
            tokio::spawn(watch::run(
                Api::<Pod>::all(client.clone()),
                cfg.clone(),
                pods.clone(),
                shared_pod_info,
                wake.clone(),
            )),
            tokio::spawn(watch::run(
                Api::<PodDisruptionBudget>::all(client.clone()),
                cfg.clone(),
                pdbs.clone(),
                pdb_info,
                wake.clone(),
            )),
            tokio::spawn(watch::run(
                Api::<VolumeAttachment>::all(client.clone()),
                cfg.clone(),
                attachments.clone(),
                attachment,
                wake.clone(),
            )),
            tokio::spawn(watch::run(
                Api::<PersistentVolume>::all(client.clone()),
                cfg.clone(),
                volumes.pvs.clone(),
                pv_info,
                wake.clone(),
            )),
            tokio::spawn(watch::run(
                Api::<PersistentVolumeClaim>::all(client.clone()),
                cfg.clone(),
                volumes.claims.clone(),
                claim_info,
                wake.clone(),
            )),
            tokio::spawn(watch::run(
                Api::<StorageClass>::all(client.clone()),
                cfg.clone(),
                volumes.classes.clone(),
                class_info,
                wake.clone(),
            )),
            tokio::spawn(watch::run(
                Api::<CSINode>::all(client),
                cfg,
                volumes.csi_nodes.clone(),
                csi_node_info,
                wake.clone(),
            )),
        ];
        ClusterCache {
            nodes,
            pods,
            pdbs,
            attachments,
            volumes,
            wake,
            options,
            tasks,
        }
    }

    pub fn sync_timeout(&self) -> Duration {
        self.options.sync_timeout
    }

    pub fn wakeups(&self) -> tokio::sync::watch::Receiver<u64> {
        self.wake.subscribe()
    }

    pub fn node_written(&self, node: &Node) {
        self.nodes.write_through(node, node_info);
    }

    pub fn node_deleted(&self, name: &str) {
        self.nodes.forget(name);
    }

    pub fn pod_written(&self, pod: &Pod) {
        self.pods.write_through(pod, shared_pod_info);
    }

    pub fn pod_deleted(&self, namespace: &str, name: &str) {
        self.pods.forget(&format!("{namespace}/{name}"));
    }

    /// An eviction the API server accepted: the pod is terminating (or already gone) even
    /// before its watch event arrives, so the drain waits for it instead of evicting it
    /// again, and its removal then wakes the loop ("terminating pod gone").
    pub fn pod_evicted(&self, namespace: &str, name: &str) {
        self.pods.modify(&format!("{namespace}/{name}"), |p| {
            Arc::make_mut(p).deleting = true
        });
    }

    pub fn stats(&self) -> Vec<CacheStats> {
        vec![
            self.nodes.stats(),
            self.pods.stats(),
            self.pdbs.stats(),
            self.attachments.stats(),
            self.volumes.pvs.stats(),
            self.volumes.claims.stats(),
            self.volumes.classes.stats(),
            self.volumes.csi_nodes.stats(),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(ready: bool, unschedulable: bool) -> NodeInfo {
        let n: Node = serde_json::from_value(json!({
            "metadata": {"name": "n1"},
            "spec": {"unschedulable": unschedulable},
            "status": {"conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]}
        }))
        .expect("node");
        node_info(&n).expect("converts")
    }

    fn pod(unschedulable: bool) -> Arc<PodInfo> {
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "default"},
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled",
                "status": if unschedulable {"False"} else {"True"}, "reason": "Unschedulable"}]}
        }))
        .expect("pod");
        Arc::new(pod_info(&p).expect("converts"))
    }

    #[test]
    fn what_wakes_the_loop() {
        let wake = NodeInfo::wake;
        assert_eq!(wake(None, Some(&node(true, false))), Some("node Ready"));
        assert_eq!(
            wake(Some(&node(false, false)), Some(&node(true, false))),
            Some("node Ready")
        );
        assert_eq!(wake(None, Some(&node(false, false))), None);
        assert_eq!(
            wake(Some(&node(true, false)), Some(&node(true, true))),
            Some("node cordoned")
        );
        assert_eq!(
            wake(Some(&node(true, true)), Some(&node(true, false))),
            None
        );
        assert_eq!(wake(Some(&node(true, false)), None), Some("node deleted"));
        assert_eq!(
            wake(Some(&node(true, false)), Some(&node(true, false))),
            None
        );

        let wake = <Arc<PodInfo>>::wake;
        assert_eq!(wake(None, Some(&pod(true))), Some("pod Unschedulable"));
        assert_eq!(
            wake(Some(&pod(false)), Some(&pod(true))),
            Some("pod Unschedulable")
        );
        assert_eq!(wake(Some(&pod(true)), Some(&pod(true))), None);
        assert_eq!(wake(Some(&pod(true)), None), None);
        let mut terminating = pod(false);
        Arc::make_mut(&mut terminating).deleting = true;
        assert_eq!(wake(Some(&terminating), None), Some("terminating pod gone"));
        assert_eq!(wake(None, Some(&pod(false))), None);
    }

    #[test]
    fn keys_are_namespace_slash_name_or_name() {
        let p: Pod = serde_json::from_value(json!({"metadata": {"name": "p", "namespace": "ns"}}))
            .expect("pod");
        assert_eq!(key_of(&p), "ns/p");
        let n: Node = serde_json::from_value(json!({"metadata": {"name": "n"}})).expect("node");
        assert_eq!(key_of(&n), "n");
    }
}

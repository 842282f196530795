//! The in-process API tests and scenarios use to set up and inspect the cluster
//! directly (not over HTTP): unmanaged nodes, workloads, budgets, and typed snapshots.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{DaemonSet, ReplicaSet};
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

use super::kubelet;
use super::meta;
use super::objects::{self, NodeBuild, SimNodeSpec, SimPodTemplate};
use super::resources::{
    self, ResourceDef, DAEMONSETS, EVENTS, EVENTS_V1, NAMESPACES, NODES, PDBS,
    PERSISTENTVOLUMECLAIMS, PODS, REPLICASETS, VOLUMEATTACHMENTS,
};
use super::status::ApiError;
use super::SimCluster;

/// What a PodDisruptionBudget guarantees.
#[derive(Debug, Clone, PartialEq)]
pub enum PdbBudget {
    MinAvailable(IntOrString),
    MaxUnavailable(IntOrString),
}

fn typed<K: DeserializeOwned>(v: Value) -> Result<K, ApiError> {
    serde_json::from_value(v)
        .map_err(|e| ApiError::internal(format!("stored object does not decode: {e}")))
}

fn res_of<K: k8s_openapi::Resource>() -> Option<&'static ResourceDef> {
    resources::find(K::GROUP, K::VERSION, K::URL_PATH_SEGMENT)
}

impl SimCluster {
    fn create(&self, res: &'static ResourceDef, obj: Value) -> Result<Value, ApiError> {
        let obj = (res.normalize)(obj).map_err(|e| ApiError::invalid(res, "", &e))?;
        let mut txn = self.inner.store.lock();
        let ns = meta::namespace(&obj).to_string();
        if res.namespaced && txn.get(&NAMESPACES, "", &ns).is_none() {
            return Err(ApiError::not_found(&NAMESPACES, &ns));
        }
        txn.create(res, obj)
    }

    /// Adds a node whose kubelet is simulated as healthy (control plane, unmanaged
    /// workers). Its Ready condition follows `spec.ready`; see [`Self::set_node_ready`].
    pub fn add_node(&self, spec: SimNodeSpec) -> Result<Node, ApiError> {
        let mut images = self.inner.opts.base_images.clone();
        images.extend(spec.images.iter().cloned());
        let address = {
            let mut k = kubelet::lock(&self.inner.kubelet);
            k.revive(&spec.name);
            k.node_images
                .insert(spec.name.clone(), images.iter().cloned().collect());
            k.next_address("10.77")
        };
        let node = objects::node_object(NodeBuild {
            name: &spec.name,
            labels: spec.labels.clone(),
            taints: spec
                .taints
                .iter()
                .filter_map(|t| serde_json::to_value(t).ok())
                .collect(),
            memory: spec.memory,
            reserve: 0,
            cpus: spec.cpus,
            unschedulable: spec.unschedulable,
            ready: spec.ready,
            images: &images,
            created: spec.created,
            kubelet_version: &self.inner.server_version(),
            address,
            provider_id: None,
            extended: spec.extended.clone(),
        });
        typed(self.create(&NODES, node)?)
    }

    /// Flips a node's Ready condition (its kubelet starting or stopping to report).
    pub fn set_node_ready(&self, name: &str, ready: bool) -> Result<(), ApiError> {
        let mut txn = self.inner.store.lock();
        match kubelet::set_ready(&mut txn, name, ready)? {
            Some(_) => Ok(()),
            None => Err(ApiError::not_found(&NODES, name)),
        }
    }

    /// Deletes a Node object (as `kubectl delete node` would); its pods are then
    /// garbage collected.
    pub fn delete_node(&self, name: &str) -> Result<(), ApiError> {
        self.inner.store.lock().delete(&NODES, "", name).map(|_| ())
    }

    /// A CSI volume attached to `node` (as the attach/detach controller records it).
    pub fn attach_volume(&self, name: &str, node: &str, pv: &str) -> Result<(), ApiError> {
        let obj = json!({"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment",
            "metadata": {"name": name},
            "spec": {"attacher": "csi.sim.nodewright.io", "nodeName": node,
                     "source": {"persistentVolumeName": pv}},
            "status": {"attached": true}});
        self.create(&VOLUMEATTACHMENTS, obj).map(|_| ())
    }

    /// A PersistentVolumeClaim of `size` (`1Gi`), ReadWriteOnce, of `class` (None: the
    /// default class, `local-path`, as the DefaultStorageClass admission sets it).
    pub fn add_claim(
        &self,
        ns: &str,
        name: &str,
        class: Option<&str>,
        size: &str,
    ) -> Result<(), ApiError> {
        let mut obj = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}}});
        if let Some(c) = class {
            obj["spec"]["storageClassName"] = json!(c);
        }
        let obj = (PERSISTENTVOLUMECLAIMS.normalize)(obj)
            .map_err(|e| ApiError::invalid(&PERSISTENTVOLUMECLAIMS, name, &e))?;
        let mut txn = self.inner.store.lock();
        if txn.get(&NAMESPACES, "", ns).is_none() {
            return Err(ApiError::not_found(&NAMESPACES, ns));
        }
        let mut obj = obj;
        super::storage::admit_claim(&txn, &mut obj);
        txn.create(&PERSISTENTVOLUMECLAIMS, obj).map(|_| ())
    }

    /// Adds any object the server serves (PersistentVolumes, StorageClasses, CSINodes,
    /// ...), validated as a create through the API would be.
    pub fn add_object(&self, obj: Value) -> Result<Value, ApiError> {
        let api_version = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
        let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
        let res = resources::ALL
            .iter()
            .copied()
            .find(|r| r.api_version() == api_version && r.kind == kind)
            .ok_or_else(|| {
                ApiError::bad_request(format!("no served resource for {api_version} {kind}"))
            })?;
        self.create(res, obj)
    }

    /// The volume was detached: its VolumeAttachment goes away.
    pub fn detach_volume(&self, name: &str) -> Result<(), ApiError> {
        self.inner
            .store
            .lock()
            .delete(&VOLUMEATTACHMENTS, "", name)
            .map(|_| ())
    }

    pub fn add_namespace(&self, name: &str) -> Result<(), ApiError> {
        self.add_namespace_labelled(name, &[])
    }

    /// A namespace with `labels`, e.g. `pod-security.kubernetes.io/enforce: restricted`
    /// (pods created through the API there are then admitted as the real server does).
    pub fn add_namespace_labelled(
        &self,
        name: &str,
        labels: &[(&str, &str)],
    ) -> Result<(), ApiError> {
        let mut l = serde_json::Map::new();
        l.insert("kubernetes.io/metadata.name".into(), json!(name));
        for (k, v) in labels {
            l.insert((*k).to_string(), json!(v));
        }
        let obj = json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": l},
            "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}});
        self.create(&NAMESPACES, obj).map(|_| ())
    }

    fn template_with_labels(
        name: &str,
        template: &SimPodTemplate,
    ) -> (SimPodTemplate, BTreeMap<String, String>) {
        let mut t = template.clone();
        if t.labels.is_empty() {
            t.labels.insert("app".into(), name.into());
        }
        let labels = t.labels.clone();
        (t, labels)
    }

    /// A ReplicaSet keeping `replicas` pods from `template` (labels default to
    /// `app=<name>` and form the selector). Deleted or evicted pods are replaced by
    /// new pending pods.
    pub fn add_replicaset(
        &self,
        ns: &str,
        name: &str,
        replicas: i32,
        template: SimPodTemplate,
    ) -> Result<ReplicaSet, ApiError> {
        let (t, labels) = Self::template_with_labels(name, &template);
        let rs = json!({
            "apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": name, "namespace": ns, "labels": labels},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels}, "template": t.to_template()},
        });
        typed(self.create(&REPLICASETS, rs)?)
    }

    pub fn scale_replicaset(&self, ns: &str, name: &str, replicas: i32) -> Result<(), ApiError> {
        let mut txn = self.inner.store.lock();
        match txn.modify(&REPLICASETS, ns, name, |rs| {
            rs["spec"]["replicas"] = json!(replicas)
        })? {
            Some(_) => Ok(()),
            None => Err(ApiError::not_found(&REPLICASETS, name)),
        }
    }

    /// A DaemonSet: one pod per node, bound directly, tolerating every taint.
    pub fn add_daemonset(
        &self,
        ns: &str,
        name: &str,
        image: &str,
        memory: u64,
    ) -> Result<DaemonSet, ApiError> {
        let (t, labels) = Self::template_with_labels(name, &SimPodTemplate::new(image, memory));
        let ds = json!({
            "apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": name, "namespace": ns, "labels": labels},
            "spec": {"selector": {"matchLabels": labels}, "template": t.to_template()},
        });
        typed(self.create(&DAEMONSETS, ds)?)
    }

    /// A bare pod (no controller): pending until scheduled, or bound when the
    /// template names a node.
    pub fn add_pod(&self, ns: &str, name: &str, template: SimPodTemplate) -> Result<Pod, ApiError> {
        let t = template.to_template();
        let mut pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": t["metadata"], "spec": t["spec"]});
        pod["metadata"]["name"] = json!(name);
        pod["metadata"]["namespace"] = json!(ns);
        objects::default_pod(&mut pod);
        typed(self.create(&PODS, pod)?)
    }

    /// A static pod's mirror, as a kubelet creates it: bound to `node`, annotated
    /// `kubernetes.io/config.mirror`, owned by the Node.
    pub fn add_mirror_pod(
        &self,
        ns: &str,
        name: &str,
        node: &str,
        template: SimPodTemplate,
    ) -> Result<Pod, ApiError> {
        let node_uid = self
            .node(node)
            .and_then(|n| n.metadata.uid)
            .ok_or_else(|| ApiError::not_found(&NODES, node))?;
        let mut t = template.annotation(
            "kubernetes.io/config.mirror",
            format!("{:x}", name.len() * 7919),
        );
        t.node_name = Some(node.to_string());
        let pod = self.add_pod(ns, name, t)?;
        let mut txn = self.inner.store.lock();
        let owned = txn.modify(&PODS, ns, name, |p| {
            p["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "Node", "name": node,
                "uid": node_uid, "controller": true}]);
        })?;
        match owned {
            Some(p) => typed(p),
            None => Ok(pod),
        }
    }

    pub fn add_pdb(
        &self,
        ns: &str,
        name: &str,
        match_labels: BTreeMap<String, String>,
        budget: PdbBudget,
    ) -> Result<PodDisruptionBudget, ApiError> {
        let mut spec = json!({"selector": {"matchLabels": match_labels}});
        match budget {
            PdbBudget::MinAvailable(v) => spec["minAvailable"] = json!(v),
            PdbBudget::MaxUnavailable(v) => spec["maxUnavailable"] = json!(v),
        }
        let pdb = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": ns}, "spec": spec});
        typed(self.create(&PDBS, pdb)?)
    }

    /// Every stored object of type `K` (nodes, pods, leases, ...), by namespace/name.
    pub fn list<K: k8s_openapi::Resource + DeserializeOwned>(&self) -> Vec<K> {
        let Some(res) = res_of::<K>() else {
            return Vec::new();
        };
        let objs = self.inner.store.lock().list_owned(res, None);
        objs.into_iter()
            .filter_map(|o| serde_json::from_value(o).ok())
            .collect()
    }

    /// One object of type `K`; `ns` is ignored for cluster-scoped kinds.
    pub fn get<K: k8s_openapi::Resource + DeserializeOwned>(
        &self,
        ns: &str,
        name: &str,
    ) -> Option<K> {
        let res = res_of::<K>()?;
        let obj = self.inner.store.lock().get(res, ns, name).cloned()?;
        serde_json::from_value(obj).ok()
    }

    pub fn nodes(&self) -> Vec<Node> {
        self.list()
    }

    pub fn node(&self, name: &str) -> Option<Node> {
        self.get("", name)
    }

    pub fn pods(&self) -> Vec<Pod> {
        self.list()
    }

    pub fn pod(&self, ns: &str, name: &str) -> Option<Pod> {
        self.get(ns, name)
    }

    /// Pods bound to `node`.
    pub fn pods_on(&self, node: &str) -> Vec<Pod> {
        self.pods()
            .into_iter()
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
            .collect()
    }

    /// Core v1 events plus events.k8s.io/v1 events converted to the core shape
    /// (regarding → involvedObject, note → message, reportingController → source).
    pub fn events(&self) -> Vec<Event> {
        let (core, v1) = {
            let txn = self.inner.store.lock();
            (
                txn.list_owned(&EVENTS, None),
                txn.list_owned(&EVENTS_V1, None),
            )
        };
        let converted = v1.into_iter().map(|e| {
            let mut c = json!({
                "apiVersion": "v1", "kind": "Event",
                "metadata": e["metadata"],
                "involvedObject": e.get("regarding").cloned().unwrap_or_else(|| json!({})),
                "reason": e["reason"], "message": e["note"], "type": e["type"], "action": e["action"],
                "eventTime": e["eventTime"],
                "reportingComponent": e["reportingController"], "reportingInstance": e["reportingInstance"],
                "source": {"component": e["reportingController"]},
                "count": meta::path(&e, &["series", "count"]).cloned().unwrap_or(json!(1)),
                "firstTimestamp": e.get("deprecatedFirstTimestamp").cloned().unwrap_or(Value::Null),
                "lastTimestamp": meta::path(&e, &["series", "lastObservedTime"]).cloned().unwrap_or(Value::Null),
            });
            if let Some(m) = c.as_object_mut() {
                m.retain(|_, v| !v.is_null());
            }
            c
        });
        core.into_iter()
            .chain(converted)
            .filter_map(|e| serde_json::from_value(e).ok())
            .collect()
    }

    pub fn pdbs(&self) -> Vec<PodDisruptionBudget> {
        self.list()
    }

    pub fn replicasets(&self) -> Vec<ReplicaSet> {
        self.list()
    }

    pub fn daemonsets(&self) -> Vec<DaemonSet> {
        self.list()
    }

    /// Polls `pred` after every change (and at least every 50ms) until it holds or
    /// `timeout` passes; returns whether it held.
    pub async fn wait_until(
        &self,
        mut pred: impl FnMut(&SimCluster) -> bool,
        timeout: Duration,
    ) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut changed = self.inner.store.subscribe();
        loop {
            changed.borrow_and_update();
            if pred(self) {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            let _ = tokio::time::timeout_at(
                deadline.min(tokio::time::Instant::now() + Duration::from_millis(50)),
                changed.changed(),
            )
            .await;
        }
    }
}

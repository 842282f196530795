//! Seeding a large cluster fast (benchmarks: 5,000 nodes and 150,000 pods in seconds):
//! objects go into the store in one transaction without per-object validation or watch
//! history, and a synthetic cluster of Ready nodes running ReplicaSet pods can be made
//! in one call. Controllers find the seeded workloads already settled, so nothing is
//! rewritten afterwards.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::meta;
use super::objects::{self, NodeBuild};
use super::resources::{self, ResourceDef, NAMESPACES, NODES, PODS, REPLICASETS};
use super::status::ApiError;
use super::SimCluster;

/// The shape of a synthetic cluster made by [`SimCluster::seed_synthetic`].
#[derive(Debug, Clone)]
pub struct SyntheticCluster {
    pub nodes: usize,
    pub pods_per_node: usize,
    /// Pods are spread over this many namespaces (`bench-0`, `bench-1`, ...).
    pub namespaces: usize,
    /// Labels every node gets (e.g. the node group's, to make them managed).
    pub node_labels: BTreeMap<String, String>,
    pub node_memory: u64,
    pub node_cpus: u32,
    /// Requests of each pod.
    pub pod_memory: u64,
    pub pod_cpu_millis: u32,
}

impl Default for SyntheticCluster {
    fn default() -> Self {
        SyntheticCluster {
            nodes: 100,
            pods_per_node: 30,
            namespaces: 10,
            node_labels: BTreeMap::new(),
            node_memory: 64 << 30,
            node_cpus: 16,
            pod_memory: 256 << 20,
            pod_cpu_millis: 100,
        }
    }
}

fn resource_of(obj: &Value) -> Result<&'static ResourceDef, ApiError> {
    let api_version = obj
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or_default();
    resources::ALL
        .iter()
        .copied()
        .find(|r| r.api_version() == api_version && r.kind == kind)
        .ok_or_else(|| {
            ApiError::bad_request(format!("no served resource for {api_version} {kind}"))
        })
}

/// A Running, Ready pod of ReplicaSet `rs` on `node`, as its kubelet reports it.
fn running_pod(spec: &SyntheticCluster, rs: &Value, name: &str, node: &str, ip: &str) -> Value {
    let now = meta::now_rfc3339();
    let ns = meta::namespace(rs);
    let app = meta::name(rs);
    let mut pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "generateName": format!("{app}-"),
            "labels": {"app": app},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": app,
                "uid": meta::uid(rs), "controller": true, "blockOwnerDeletion": true}]},
        "spec": {"nodeName": node, "containers": [{"name": "main", "image": "registry.example/app:1",
            "resources": {"requests": {"cpu": format!("{}m", spec.pod_cpu_millis),
                                       "memory": spec.pod_memory.to_string()}}}]},
        "status": {"phase": "Running", "hostIP": "10.77.0.1", "podIP": ip, "startTime": now},
    });
    objects::default_pod(&mut pod);
    for c in [
        "PodReadyToStartContainers",
        "Initialized",
        "Ready",
        "ContainersReady",
        "PodScheduled",
    ] {
        meta::set_condition(&mut pod, c, "True", "", "");
    }
    pod["status"]["containerStatuses"] = json!([{"name": "main", "image": "registry.example/app:1",
        "imageID": "registry.example/app@sha256:0", "ready": true, "started": true,
        "restartCount": 0, "state": {"running": {"startedAt": now}}}]);
    pod
}

impl SimCluster {
    /// Stores many objects at once, each with the `apiVersion` and `kind` of a served
    /// resource, skipping the validation and defaulting a request would get (pods get
    /// the API server's defaults). Watches from before answer 410 Expired afterwards.
    /// Returns how many were stored.
    pub fn bulk_load(&self, objects: impl IntoIterator<Item = Value>) -> Result<usize, ApiError> {
        let mut by_res: Vec<(&'static ResourceDef, Vec<Value>)> = Vec::new();
        for mut obj in objects {
            let res = resource_of(&obj)?;
            if std::ptr::eq(res, &PODS) {
                objects::default_pod(&mut obj);
            }
            match by_res.iter_mut().find(|(r, _)| std::ptr::eq(*r, res)) {
                Some((_, list)) => list.push(obj),
                None => by_res.push((res, vec![obj])),
            }
        }
        let mut txn = self.inner.store.lock();
        let mut stored = 0;
        for (res, list) in by_res {
            stored += txn.bulk_create(res, list)?;
        }
        Ok(stored)
    }

    /// Seeds `spec.nodes` Ready nodes (`node-00000`, ...) each running
    /// `spec.pods_per_node` Ready pods of one ReplicaSet (`app-00000` in namespace
    /// `bench-<n % namespaces>`), with settled ReplicaSet status.
    pub fn seed_synthetic(&self, spec: &SyntheticCluster) -> Result<(), ApiError> {
        let namespaces = spec.namespaces.max(1);
        let ns_objects = (0..namespaces).map(|i| {
            let name = format!("bench-{i}");
            json!({"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name}},
                "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}})
        });
        self.inner
            .store
            .lock()
            .bulk_create(&NAMESPACES, ns_objects)?;
        let nodes = (0..spec.nodes).map(|i| {
            objects::node_object(NodeBuild {
                name: &format!("node-{i:05}"),
                labels: spec.node_labels.clone(),
                taints: Vec::new(),
                memory: spec.node_memory,
                reserve: 0,
                cpus: spec.node_cpus,
                unschedulable: false,
                ready: true,
                images: &[],
                created: None,
                kubelet_version: &self.inner.server_version(),
                address: format!("10.77.{}.{}", i / 250, i % 250 + 1),
                provider_id: None,
                extended: BTreeMap::new(),
            })
        });
        self.inner.store.lock().bulk_create(&NODES, nodes)?;
        let per = spec.pods_per_node;
        let sets = (0..spec.nodes).map(|i| {
            let name = format!("app-{i:05}");
            json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "metadata": {"name": name, "namespace": format!("bench-{}", i % namespaces),
                    "labels": {"app": name}, "generation": 1},
                "spec": {"replicas": per, "selector": {"matchLabels": {"app": name}},
                    "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [
                        {"name": "main", "image": "registry.example/app:1", "resources": {"requests": {
                            "cpu": format!("{}m", spec.pod_cpu_millis), "memory": spec.pod_memory.to_string()}}}]}}},
                "status": {"replicas": per, "fullyLabeledReplicas": per, "readyReplicas": per,
                    "availableReplicas": per, "observedGeneration": 1}})
        });
        let mut txn = self.inner.store.lock();
        txn.bulk_create(&REPLICASETS, sets)?;
        let sets = txn.list_stored(&REPLICASETS, None);
        let mut pods = Vec::with_capacity(spec.nodes * per);
        for rs in sets.iter().filter(|rs| meta::name(rs).starts_with("app-")) {
            let Some(i) = meta::name(rs)
                .strip_prefix("app-")
                .and_then(|n| n.parse::<usize>().ok())
            else {
                continue;
            };
            let node = format!("node-{i:05}");
            for j in 0..per {
                let n = i * per + j;
                let ip = format!("10.88.{}.{}", n / 250 % 250, n % 250 + 1);
                pods.push(running_pod(
                    spec,
                    rs,
                    &format!("{}-{j:05}", meta::name(rs)),
                    &node,
                    &ip,
                ));
            }
        }
        txn.bulk_create(&PODS, pods)?;
        Ok(())
    }
}

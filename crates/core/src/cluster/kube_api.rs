//! [`ClusterApi`] over the real Kubernetes API with kube-rs: reads from watch caches
//! ([`KubeCluster::watching`], what `run` uses) or by listing ([`KubeCluster::new`], for
//! one-shot commands), writes always to the API server.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{
    ConfigMap, Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::{CSINode, StorageClass, VolumeAttachment};
use kube::api::{Api, DeleteParams, EvictParams, ListParams, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::json;

use super::cache::{CacheOptions, CacheStats, ClusterCache};
use super::convert::{
    claim_info, class_info, csi_node_info, node_info, pdb_info, pod_info, pv_info,
};
use super::records::{not_joined_data, record_data, DisruptionRecords, RecordKind};
use super::status::write_status;
use super::{ClusterApi, ClusterError, Eviction};
use crate::model::{
    NodeInfo, PdbInfo, PodInfo, PodRef, Volumes, ANNOTATION_CORDONED, LABEL_CLUSTER,
    LABEL_IMAGE_PULLER,
};

/// The namespace whose UID is the cluster's identity: every cluster has it from its
/// start, and nobody deletes it.
const IDENTITY_NAMESPACE: &str = "kube-system";

/// Large clusters are listed in pages of this size.
const PAGE: u32 = 500;

#[derive(Clone)]
pub struct KubeCluster {
    client: Client,
    /// Namespace and name of the ConfigMap holding the disruption records; none kept
    /// without it.
    records: Option<(String, String)>,
    cache: Option<Arc<ClusterCache>>,
}

impl KubeCluster {
    /// Rewrites the taints of `node` with `edit`. The node lifecycle controller rewrites
    /// the taints when a node turns Ready (its not-ready taints go), just when the startup
    /// taint is removed: the resourceVersion makes the write a compare-and-swap, and a lost
    /// race is read again and retried at once, a few times, rather than a cycle later.
    async fn edit_taints(
        &self,
        node: &str,
        what: &str,
        edit: impl Fn(&mut Vec<k8s_openapi::api::core::v1::Taint>),
    ) -> Result<(), ClusterError> {
        let api: Api<Node> = Api::all(self.client.clone());
        let mut attempt = 0;
        loop {
            attempt += 1;
            let current = api
                .get(node)
                .await
                .map_err(api_err(format!("get node {node}")))?;
            let mut taints = current
                .spec
                .as_ref()
                .and_then(|s| s.taints.clone())
                .unwrap_or_default();
            edit(&mut taints);
            let patch = json!({
                "metadata": {"resourceVersion": current.metadata.resource_version},
                "spec": {"taints": taints}
            });
            match api
                .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(patched) => {
                    self.node_written(&patched);
                    return Ok(());
                }
                Err(kube::Error::Api(s)) if s.code == 409 && attempt < 3 => continue,
                Err(e) => return Err(api_err(what.to_string())(e)),
            }
        }
    }
    /// Lists the cluster on every read: right for a single look (`plan`, `check`).
    pub fn new(client: Client) -> Self {
        KubeCluster {
            client,
            records: None,
            cache: None,
        }
    }

    /// Keeps the disruption records in ConfigMap `namespace/name` (the status ConfigMap:
    /// the records are data keys beside its `status`).
    pub fn with_records(mut self, namespace: &str, name: &str) -> Self {
        self.records = Some((namespace.to_string(), name.to_string()));
        self
    }

    /// Reads from watch caches started now (on the current tokio runtime) and kept until
    /// the last clone is dropped: what a long-running loop wants. The first read waits
    /// for the caches' first complete list.
    pub fn watching(client: Client, options: CacheOptions) -> Self {
        let cache = ClusterCache::start(client.clone(), options);
        KubeCluster {
            client,
            records: None,
            cache: Some(Arc::new(cache)),
        }
    }

    /// Changes as a counter: it moves when a pod becomes Unschedulable or a node becomes
    /// Ready, is cordoned or deleted. `None` without caches.
    pub fn wakeups(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        self.cache.as_ref().map(|c| c.wakeups())
    }

    /// What each cache holds and has seen; empty without caches.
    pub fn cache_stats(&self) -> Vec<CacheStats> {
        self.cache.as_ref().map(|c| c.stats()).unwrap_or_default()
    }

    /// Waits until every cache has its first complete list.
    pub async fn synced(&self) -> Result<(), ClusterError> {
        if let Some(c) = &self.cache {
            let t = c.sync_timeout();
            tokio::try_join!(
                c.nodes.wait_synced(t),
                c.pods.wait_synced(t),
                c.pdbs.wait_synced(t),
                c.attachments.wait_synced(t),
                c.volumes.wait_synced(t)
            )?;
        }
        Ok(())
    }

    fn forget_node(&self, name: &str) {
        if let Some(c) = &self.cache {
            c.node_deleted(name);
        }
    }

    fn node_written(&self, node: &Node) {
        if let Some(c) = &self.cache {
            c.node_written(node);
        }
    }
}

fn api_err(call: impl Into<String>) -> impl FnOnce(kube::Error) -> ClusterError {
    let call = call.into();
    move |e| ClusterError::Api {
        call,
        source: Box::new(e),
    }
}

fn status_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

async fn list_all<K>(api: &Api<K>, what: &str) -> Result<Vec<K>, ClusterError>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    list_with(api, what, ListParams::default()).await
}

/// Every object `params` selects, page by page.
async fn list_with<K>(api: &Api<K>, what: &str, params: ListParams) -> Result<Vec<K>, ClusterError>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut out = Vec::new();
    let mut params = params.limit(PAGE);
    loop {
        let page = api
            .list(&params)
            .await
            .map_err(api_err(format!("list {what}")))?;
        let next = page.metadata.continue_.clone().filter(|c| !c.is_empty());
        out.extend(page.items);
        match next {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(out),
        }
    }
}

#[async_trait]
impl ClusterApi for KubeCluster {
    async fn disruption_records(&self) -> Result<DisruptionRecords, ClusterError> {
        let Some((ns, name)) = &self.records else {
            return Ok(DisruptionRecords::default());
        };
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), ns);
        let cm = api
            .get_opt(name)
            .await
            .map_err(api_err(format!("get configmap {ns}/{name}")))?;
        let data = cm.and_then(|c| c.data).unwrap_or_default();
        Ok(DisruptionRecords::from_data(&data))
    }

    async fn identity(&self) -> Result<Option<String>, ClusterError> {
        let api: Api<Namespace> = Api::all(self.client.clone());
        let ns = api
            .get(IDENTITY_NAMESPACE)
            .await
            .map_err(api_err(format!("get namespace {IDENTITY_NAMESPACE}")))?;
        Ok(ns.metadata.uid.filter(|u| !u.is_empty()))
    }

    async fn server_version(&self) -> Result<Option<String>, ClusterError> {
        // One small GET, readable by every client (`system:public-info-viewer`).
        let info = self
            .client
            .apiserver_version()
            .await
            .map_err(api_err("get /version".to_string()))?;
        Ok(Some(info.git_version).filter(|v| !v.is_empty()))
    }

    async fn record_disruption(
        &self,
        kind: RecordKind,
        groups: &[String],
        at: SystemTime,
    ) -> Result<(), ClusterError> {
        let Some((ns, name)) = &self.records else {
            return Ok(());
        };
        write_status(&self.client, ns, name, record_data(kind, groups, at))
            .await
            .map_err(api_err(format!("patch configmap {ns}/{name}")))
    }

    async fn record_not_joined_removed(&self, times: &[SystemTime]) -> Result<(), ClusterError> {
        let Some((ns, name)) = &self.records else {
            return Ok(());
        };
        write_status(&self.client, ns, name, not_joined_data(times))
            .await
            .map_err(api_err(format!("patch configmap {ns}/{name}")))
    }

    async fn nodes(&self) -> Result<Vec<NodeInfo>, ClusterError> {
        if let Some(c) = &self.cache {
            return c.nodes.values(c.sync_timeout()).await;
        }
        let api: Api<Node> = Api::all(self.client.clone());
        Ok(list_all(&api, "nodes")
            .await?
            .iter()
            .filter_map(node_info)
            .collect())
    }

    async fn pods(&self) -> Result<Vec<Arc<PodInfo>>, ClusterError> {
        if let Some(c) = &self.cache {
            return c.pods.values(c.sync_timeout()).await;
        }
        let api: Api<Pod> = Api::all(self.client.clone());
        Ok(list_all(&api, "pods")
            .await?
            .iter()
            .filter_map(pod_info)
            .map(Arc::new)
            .collect())
    }

    async fn pdbs(&self) -> Result<Vec<PdbInfo>, ClusterError> {
        if let Some(c) = &self.cache {
            return c.pdbs.values(c.sync_timeout()).await;
        }
        let api: Api<PodDisruptionBudget> = Api::all(self.client.clone());
        Ok(list_all(&api, "poddisruptionbudgets")
            .await?
            .iter()
            .filter_map(pdb_info)
            .collect())
    }

    async fn volume_attachments(&self) -> Result<Vec<(String, String)>, ClusterError> {
        if let Some(c) = &self.cache {
            return c.attachments.values(c.sync_timeout()).await;
        }
        let api: Api<VolumeAttachment> = Api::all(self.client.clone());
        Ok(list_all(&api, "volumeattachments")
            .await?
            .into_iter()
            .filter_map(|va| Some((va.metadata.name?, va.spec.node_name)))
            .collect())
    }

    async fn volumes(&self) -> Result<Volumes, ClusterError> {
        if let Some(c) = &self.cache {
            return c.volumes.values(c.sync_timeout()).await;
        }
        let pv_api = Api::<PersistentVolume>::all(self.client.clone());
        let claim_api = Api::<PersistentVolumeClaim>::all(self.client.clone());
        let class_api = Api::<StorageClass>::all(self.client.clone());
        let csi_api = Api::<CSINode>::all(self.client.clone());
        let (pvs, claims, classes, csi_nodes) = tokio::try_join!(
            list_all(&pv_api, "persistentvolumes"),
            list_all(&claim_api, "persistentvolumeclaims"),
            list_all(&class_api, "storageclasses"),
            list_all(&csi_api, "csinodes"),
        )?;
        Ok(Volumes {
            pvs: pvs.iter().filter_map(pv_info).collect(),
            claims: claims.iter().filter_map(claim_info).collect(),
            classes: classes.iter().filter_map(class_info).collect(),
            csi_nodes: csi_nodes.iter().filter_map(csi_node_info).collect(),
        })
    }

    async fn cordon(
        &self,
        node: &str,
        annotations: &BTreeMap<String, String>,
    ) -> Result<(), ClusterError> {
        let api: Api<Node> = Api::all(self.client.clone());
        let current = api
            .get(node)
            .await
            .map_err(api_err(format!("get node {node}")))?;
        let cordoned = current.spec.as_ref().and_then(|s| s.unschedulable) == Some(true);
        let ours = current
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(ANNOTATION_CORDONED));
        if cordoned && !ours {
            return Err(ClusterError::Changed(format!(
                "node {node} was cordoned by someone else since the plan; nodewright leaves their cordon alone"
            )));
        }
        // The resourceVersion makes this a compare-and-swap: a person's cordon (or any
        // change) between the read and the patch fails with 409 Conflict instead of being
        // taken over; the next cycle reads the node again.
        let patch = json!({
            "metadata": {
                "resourceVersion": current.metadata.resource_version,
                "annotations": annotations
            },
            "spec": {"unschedulable": true}
        });
        let patched = api
            .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(api_err(format!("cordon node {node}")))?;
        self.node_written(&patched);
        Ok(())
    }

    async fn uncordon(&self, node: &str) -> Result<(), ClusterError> {
        let api: Api<Node> = Api::all(self.client.clone());
        let mut annotations = serde_json::Map::new();
        for key in [
            ANNOTATION_CORDONED,
            crate::model::ANNOTATION_CORDONED_AT,
            crate::model::ANNOTATION_DISRUPTION,
            crate::model::ANNOTATION_UNNEEDED_SINCE,
        ] {
            annotations.insert(key.to_string(), serde_json::Value::Null);
        }
        let patch = json!({
            "metadata": {"annotations": annotations},
            "spec": {"unschedulable": false}
        });
        let patched = api
            .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(api_err(format!("uncordon node {node}")))?;
        self.node_written(&patched);
        Ok(())
    }

    async fn annotate(
        &self,
        node: &str,
        annotations: &BTreeMap<String, Option<String>>,
    ) -> Result<(), ClusterError> {
        let api: Api<Node> = Api::all(self.client.clone());
        let patch = json!({"metadata": {"annotations": annotations}});
        let patched = api
            .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(api_err(format!("annotate node {node}")))?;
        self.node_written(&patched);
        Ok(())
    }

    async fn label(
        &self,
        node: &str,
        labels: &BTreeMap<String, Option<String>>,
    ) -> Result<(), ClusterError> {
        let api: Api<Node> = Api::all(self.client.clone());
        let patch = json!({"metadata": {"labels": labels}});
        let patched = api
            .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(api_err(format!("label node {node}")))?;
        self.node_written(&patched);
        Ok(())
    }

    async fn remove_taint(&self, node: &str, key: &str) -> Result<(), ClusterError> {
        self.edit_taints(node, &format!("remove taint {key} from node {node}"), |t| {
            t.retain(|t| t.key != key)
        })
        .await
    }

    async fn add_taint(&self, node: &str, taint: &crate::model::Taint) -> Result<(), ClusterError> {
        let what = format!("add taint {} to node {node}", taint.key);
        self.edit_taints(node, &what, |t| {
            if !t
                .iter()
                .any(|x| x.key == taint.key && x.effect == taint.effect)
            {
                t.push(k8s_openapi::api::core::v1::Taint {
                    key: taint.key.clone(),
                    value: taint.value.clone(),
                    effect: taint.effect.clone(),
                    time_added: None,
                });
            }
        })
        .await
    }

    async fn evict(&self, pod: &PodRef) -> Result<Eviction, ClusterError> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &pod.namespace);
        match api.evict(&pod.name, &EvictParams::default()).await {
            Ok(_) => {
                if let Some(c) = &self.cache {
                    c.pod_evicted(&pod.namespace, &pod.name);
                }
                Ok(Eviction::Evicted)
            }
            Err(e) if status_code(&e) == Some(404) => {
                if let Some(c) = &self.cache {
                    c.pod_deleted(&pod.namespace, &pod.name);
                }
                Ok(Eviction::Gone)
            }
            Err(kube::Error::Api(s)) if s.code == 429 => Ok(Eviction::Blocked(s.message)),
            Err(e) => Err(api_err(format!("evict pod {pod}"))(e)),
        }
    }

    async fn delete_node(&self, node: &str) -> Result<(), ClusterError> {
        let api: Api<Node> = Api::all(self.client.clone());
        match api.delete(node, &DeleteParams::default()).await {
            Ok(answer) => match answer.left() {
                // Still there only while finalizers hold it: it is seen deleting. An
                // answer with the object and no finalizer is the object as it was
                // deleted; writing it through would pin a node whose delete event may
                // already have passed (it then stayed in the cache for good).
                Some(n)
                    if n.metadata
                        .finalizers
                        .as_ref()
                        .is_some_and(|f| !f.is_empty()) =>
                {
                    self.node_written(&n)
                }
                _ => self.forget_node(node),
            },
            Err(e) if status_code(&e) == Some(404) => self.forget_node(node),
            Err(e) => return Err(api_err(format!("delete node {node}"))(e)),
        }
        Ok(())
    }

    async fn mint_bootstrap_token(
        &self,
        cluster: &str,
        node: &str,
        expires: SystemTime,
    ) -> Result<crate::model::JoinCredentials, ClusterError> {
        use super::bootstrap;
        use k8s_openapi::api::core::v1::{ConfigMap, Secret};
        let info: Api<ConfigMap> = Api::namespaced(self.client.clone(), "kube-public");
        let found = info
            .get_opt("cluster-info")
            .await
            .map_err(api_err("get configmap kube-public/cluster-info"))?;
        let why = |m: String| {
            ClusterError::Bootstrap(format!(
                "userData.bootstrapToken: kube-public/cluster-info {m}; it is what kubeadm publishes (`kubeadm init phase bootstrap-token`): is this a kubeadm cluster? For k3s, use its node token instead"
            ))
        };
        let kubeconfig = found
            .as_ref()
            .and_then(|c| c.data.as_ref())
            .and_then(|d| d.get("kubeconfig"))
            .ok_or_else(|| why("does not exist or has no `kubeconfig` key".into()))?;
        let (endpoint, ca_hash) = bootstrap::discovery(kubeconfig).map_err(why)?;
        let id = bootstrap::token_id(cluster, node);
        let secret = bootstrap::token_secret().map_err(ClusterError::Bootstrap)?;
        let name = bootstrap::secret_name(&id);
        let expiration = k8s_openapi::jiff::Timestamp::try_from(expires)
            .map_err(|e| ClusterError::Bootstrap(format!("token expiration: {e}")))?
            .strftime("%Y-%m-%dT%H:%M:%SZ")
            .to_string();
        let data = [
            ("token-id", id.as_str()),
            ("token-secret", secret.as_str()),
            ("expiration", expiration.as_str()),
            ("usage-bootstrap-authentication", "true"),
            ("usage-bootstrap-signing", "true"),
            ("auth-extra-groups", bootstrap::NODE_TOKEN_GROUPS),
            (
                "description",
                &format!("nodewright: the join of node {node}"),
            ),
        ]
        .into_iter()
        .map(|(k, v)| {
            (
                k.to_string(),
                k8s_openapi::ByteString(v.as_bytes().to_vec()),
            )
        })
        .collect();
        let object = Secret {
            metadata: kube::api::ObjectMeta {
                name: Some(name.clone()),
                namespace: Some("kube-system".into()),
                labels: Some(BTreeMap::from([(
                    crate::model::LABEL_CLUSTER.to_string(),
                    cluster.to_string(),
                )])),
                ..Default::default()
            },
            type_: Some("bootstrap.kubernetes.io/token".into()),
            data: Some(data),
            ..Default::default()
        };
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), "kube-system");
        let call = format!("create secret kube-system/{name}");
        match secrets.create(&PostParams::default(), &object).await {
            Ok(_) => {}
            // A token of this VM from an earlier render (a join run again, a warm VM
            // started): replaced, so the one in the new user data is the one that works.
            Err(e) if status_code(&e) == Some(409) => {
                self.delete_bootstrap_token(cluster, node).await?;
                secrets
                    .create(&PostParams::default(), &object)
                    .await
                    .map_err(api_err(call))?;
            }
            Err(e) => return Err(api_err(call)(e)),
        }
        Ok(crate::model::JoinCredentials {
            token: format!("{id}.{secret}"),
            api_server_endpoint: endpoint,
            ca_cert_hash: ca_hash,
        })
    }

    async fn delete_bootstrap_token(&self, cluster: &str, node: &str) -> Result<(), ClusterError> {
        use super::bootstrap;
        let name = bootstrap::secret_name(&bootstrap::token_id(cluster, node));
        let secrets: Api<k8s_openapi::api::core::v1::Secret> =
            Api::namespaced(self.client.clone(), "kube-system");
        match secrets.delete(&name, &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(e) if status_code(&e) == Some(404) => Ok(()),
            Err(e) => Err(api_err(format!("delete secret kube-system/{name}"))(e)),
        }
    }

    async fn node(&self, node: &str) -> Result<Option<NodeInfo>, ClusterError> {
        let api: Api<Node> = Api::all(self.client.clone());
        let found = api
            .get_opt(node)
            .await
            .map_err(api_err(format!("get node {node}")))?;
        Ok(found.as_ref().and_then(node_info))
    }

    async fn pods_on_node(&self, node: &str) -> Result<Vec<Arc<PodInfo>>, ClusterError> {
        let api: Api<Pod> = Api::all(self.client.clone());
        let params = ListParams::default().fields(&format!("spec.nodeName={node}"));
        Ok(list_with(&api, &format!("pods on node {node}"), params)
            .await?
            .iter()
            .filter_map(pod_info)
            .map(Arc::new)
            .collect())
    }

    async fn create_image_puller(
        &self,
        cluster: &str,
        namespace: &str,
        node: &str,
        images: &[String],
        pull_secrets: &[String],
    ) -> Result<String, ClusterError> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let pod: Pod = serde_json::from_value(puller_pod(cluster, node, images, pull_secrets))
            .map_err(|e| ClusterError::Api {
                call: "build image puller pod".into(),
                source: Box::new(kube::Error::SerdeError(e)),
            })?;
        let created = api
            .create(&PostParams::default(), &pod)
            .await
            .map_err(api_err(format!("create image puller on {node}")))?;
        if let Some(c) = &self.cache {
            c.pod_written(&created);
        }
        Ok(created.metadata.name.unwrap_or_default())
    }

    async fn delete_pod(&self, pod: &PodRef) -> Result<(), ClusterError> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &pod.namespace);
        let gone = match api.delete(&pod.name, &DeleteParams::default()).await {
            Ok(answer) => match answer.left() {
                Some(p) => {
                    if let Some(c) = &self.cache {
                        c.pod_written(&p);
                    }
                    false
                }
                None => true,
            },
            Err(e) if status_code(&e) == Some(404) => true,
            Err(e) => return Err(api_err(format!("delete pod {pod}"))(e)),
        };
        if let (true, Some(c)) = (gone, &self.cache) {
            c.pod_deleted(&pod.namespace, &pod.name);
        }
        Ok(())
    }
}

/// The user the puller containers run as (`nobody`): an image that would run as root
/// still starts, and an image is pulled before its user matters.
const PULLER_UID: i64 = 65534;

/// A pod pinned to `node` with one container per image, pulling with the Secrets named
/// `pull_secrets` (of its own namespace). Each container exits at once
/// (or fails to start when the image has no shell); either way the image is now cached.
/// Labelled with [`LABEL_IMAGE_PULLER`] and `cluster` under [`LABEL_CLUSTER`]: the
/// clean-up deletes only pods that carry both.
fn puller_pod(
    cluster: &str,
    node: &str,
    images: &[String],
    pull_secrets: &[String],
) -> serde_json::Value {
    let pull_secrets: Vec<_> = pull_secrets.iter().map(|n| json!({"name": n})).collect();
    let containers: Vec<_> = images
        .iter()
        .enumerate()
        .map(|(i, image)| {
            json!({
                "name": format!("pull-{i}"),
                "image": image,
                "imagePullPolicy": "IfNotPresent",
                "command": ["/bin/sh", "-c", "true"],
                "resources": {
                    "requests": {"cpu": "1m", "memory": "4Mi"},
                    "limits": {"cpu": "50m", "memory": "32Mi"}
                },
                "securityContext": {
                    "allowPrivilegeEscalation": false,
                    "readOnlyRootFilesystem": true,
                    "capabilities": {"drop": ["ALL"]}
                }
            })
        })
        .collect();
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": "nodewright-image-puller-",
            "labels": {
                LABEL_IMAGE_PULLER: "true",
                LABEL_CLUSTER: cluster,
                "app.kubernetes.io/managed-by": "nodewright"
            }
        },
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            // No API access from the pod, no service links, no root: it passes the
            // `restricted` Pod Security Standard of nodewright's namespace.
            "automountServiceAccountToken": false,
            "enableServiceLinks": false,
            "securityContext": {
                "runAsNonRoot": true,
                "runAsUser": PULLER_UID,
                "runAsGroup": PULLER_UID,
                "seccompProfile": {"type": "RuntimeDefault"}
            },
            // Every taint, nodewright's startup taint too: a new node is warmed as soon
            // as it registers, before pods may land there.
            "tolerations": [{"operator": "Exists"}],
            "imagePullSecrets": pull_secrets,
            "containers": containers
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The puller runs in nodewright's namespace, which enforces the `restricted` Pod
    /// Security Standard: the pod must meet it, and get no API token.
    #[test]
    fn the_image_puller_pod_meets_the_restricted_pod_security_standard() {
        let pod = puller_pod("c", "n1", &["nginx:1.25".into(), "redis:7".into()], &[]);
        let spec = &pod["spec"];
        assert_eq!(spec["automountServiceAccountToken"], false);
        assert_eq!(spec["enableServiceLinks"], false);
        assert_eq!(spec["securityContext"]["runAsNonRoot"], true);
        assert!(spec["securityContext"]["runAsUser"].as_i64() > Some(0));
        assert_eq!(
            spec["securityContext"]["seccompProfile"]["type"],
            "RuntimeDefault"
        );
        assert!(spec.get("serviceAccountName").is_none());
        assert!(spec.get("volumes").is_none());
        assert!(spec.get("hostNetwork").is_none() && spec.get("hostPID").is_none());
        let containers = spec["containers"].as_array().expect("containers");
        assert_eq!(containers.len(), 2);
        for c in containers {
            let sc = &c["securityContext"];
            assert_eq!(sc["allowPrivilegeEscalation"], false, "{c}");
            assert_eq!(
                sc["capabilities"]["drop"],
                serde_json::json!(["ALL"]),
                "{c}"
            );
            assert!(c.get("ports").is_none() && c.get("volumeMounts").is_none());
        }
        // It parses as a Pod.
        let _: Pod = serde_json::from_value(pod).expect("a Pod");
    }

    /// The puller pulls with the Secrets its pods name, and tolerates nodewright's
    /// startup taint (every taint), so a new node is warmed as soon as it registers.
    #[test]
    fn the_image_puller_names_the_pull_secrets_and_tolerates_the_startup_taint() {
        let pod = puller_pod(
            "c",
            "n1",
            &["registry.example/app:1".into()],
            &["regcred".into()],
        );
        let pod: Pod = serde_json::from_value(pod).expect("a Pod");
        let spec = pod.spec.expect("spec");
        let secrets: Vec<String> = spec
            .image_pull_secrets
            .unwrap_or_default()
            .into_iter()
            .map(|r| r.name)
            .collect();
        assert_eq!(secrets, ["regcred"]);
        let startup = crate::model::Taint {
            key: crate::model::STARTUP_TAINT_KEY.into(),
            value: Some("true".into()),
            effect: "NoSchedule".into(),
        };
        let tolerates = spec.tolerations.unwrap_or_default().iter().any(|t| {
            crate::model::Toleration {
                key: t.key.clone(),
                operator: t.operator.clone(),
                value: t.value.clone(),
                effect: t.effect.clone(),
            }
            .tolerates(&startup)
        });
        assert!(tolerates);
    }
}

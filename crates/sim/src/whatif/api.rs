//! The world behind production's traits: [`MemCluster`] answers as the API server
//! would ([`ClusterApi`]), [`MemCloud`] as one provider would ([`CloudProvider`]), so the
//! unmodified [`crate::run::Reconciler`] drives it.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;

use super::world::World;
use crate::act::Clouds;
use crate::cloud::{check_owned, CloudError, CloudProvider, CreateRequest, RenderJoin};
use crate::config::{Config, ProviderKind};
use crate::model::{GroupShape, NodeInfo, PdbInfo, PodInfo, PodRef, Server, ServerStatus};
use nodewright_core::cluster::{ClusterApi, ClusterError, Eviction};
use nodewright_core::model::{
    ANNOTATION_CORDONED, ANNOTATION_CORDONED_AT, ANNOTATION_DISRUPTION, ANNOTATION_UNNEEDED_SINCE,
};

/// The world's Kubernetes API.
pub struct MemCluster {
    pub world: World,
}

/// The world's cloud, as one provider kind sees it.
pub struct MemCloud {
    pub world: World,
    pub kind: ProviderKind,
}

/// One in-memory provider per provider kind the config's groups use.
pub fn clouds(world: &World, config: &Config) -> Clouds {
    let mut clouds = Clouds::new();
    let mut made: BTreeMap<&str, Arc<dyn CloudProvider>> = BTreeMap::new();
    for g in &config.node_groups {
        let p = made
            .entry(g.provider.as_str())
            .or_insert_with(|| {
                Arc::new(MemCloud {
                    world: world.clone(),
                    kind: g.provider,
                })
            })
            .clone();
        clouds.add_group(&g.name, p);
    }
    clouds
}

fn edit_node(world: &World, node: &str, f: impl FnOnce(&mut NodeInfo)) -> Result<(), ClusterError> {
    let mut s = world.lock();
    // Patching a node that is gone is a 404 the actuator reports; in memory it is a
    // no-op the next cycle observes.
    if let Some(n) = s.node_mut(node) {
        f(n);
    }
    s.room();
    Ok(())
}

#[async_trait]
impl ClusterApi for MemCluster {
    async fn nodes(&self) -> Result<Vec<NodeInfo>, ClusterError> {
        Ok(self.world.lock().node_infos())
    }

    async fn pods(&self) -> Result<Vec<Arc<PodInfo>>, ClusterError> {
        Ok(nodewright_core::plan::shared(self.world.lock().pod_infos()))
    }

    async fn pdbs(&self) -> Result<Vec<PdbInfo>, ClusterError> {
        Ok(self.world.lock().pdb_infos())
    }

    async fn volume_attachments(&self) -> Result<Vec<(String, String)>, ClusterError> {
        Ok(Vec::new())
    }

    async fn volumes(&self) -> Result<nodewright_core::model::Volumes, ClusterError> {
        Ok(self.world.lock().volume_objects())
    }

    async fn cordon(
        &self,
        node: &str,
        annotations: &BTreeMap<String, String>,
    ) -> Result<(), ClusterError> {
        edit_node(&self.world, node, |n| {
            n.unschedulable = true;
            n.annotations
                .extend(annotations.iter().map(|(k, v)| (k.clone(), v.clone())));
        })
    }

    async fn uncordon(&self, node: &str) -> Result<(), ClusterError> {
        edit_node(&self.world, node, |n| {
            n.unschedulable = false;
            for k in [
                ANNOTATION_CORDONED,
                ANNOTATION_CORDONED_AT,
                ANNOTATION_DISRUPTION,
                ANNOTATION_UNNEEDED_SINCE,
            ] {
                n.annotations.remove(k);
            }
        })
    }

    async fn annotate(
        &self,
        node: &str,
        annotations: &BTreeMap<String, Option<String>>,
    ) -> Result<(), ClusterError> {
        edit_node(&self.world, node, |n| {
            apply(&mut n.annotations, annotations)
        })
    }

    async fn label(
        &self,
        node: &str,
        labels: &BTreeMap<String, Option<String>>,
    ) -> Result<(), ClusterError> {
        edit_node(&self.world, node, |n| apply(&mut n.labels, labels))
    }

    async fn remove_taint(&self, node: &str, key: &str) -> Result<(), ClusterError> {
        edit_node(&self.world, node, |n| n.taints.retain(|t| t.key != key))
    }

    async fn add_taint(
        &self,
        node: &str,
        taint: &nodewright_core::model::Taint,
    ) -> Result<(), ClusterError> {
        edit_node(&self.world, node, |n| {
            if !n
                .taints
                .iter()
                .any(|t| t.key == taint.key && t.effect == taint.effect)
            {
                n.taints.push(taint.clone());
            }
        })
    }

    async fn evict(&self, pod: &PodRef) -> Result<Eviction, ClusterError> {
        Ok(self.world.lock().evict(&pod.namespace, &pod.name))
    }

    async fn delete_node(&self, node: &str) -> Result<(), ClusterError> {
        self.world.lock().delete_node(node);
        Ok(())
    }

    /// The what-if's VMs join with whatever their user data holds: a token of the right
    /// form, for a kubeadm group's template to render.
    async fn mint_bootstrap_token(
        &self,
        cluster: &str,
        node: &str,
        _expires: std::time::SystemTime,
    ) -> Result<nodewright_core::model::JoinCredentials, ClusterError> {
        let id = nodewright_core::cluster::bootstrap::token_id(cluster, node);
        Ok(nodewright_core::model::JoinCredentials {
            token: format!("{id}.whatifwhatifwhat"),
            api_server_endpoint: "what-if.invalid:6443".into(),
            ca_cert_hash: "sha256:what-if".into(),
        })
    }

    async fn node(&self, node: &str) -> Result<Option<NodeInfo>, ClusterError> {
        Ok(self.world.lock().node(node).cloned())
    }

    async fn create_image_puller(
        &self,
        cluster: &str,
        namespace: &str,
        node: &str,
        images: &[String],
        _pull_secrets: &[String],
    ) -> Result<String, ClusterError> {
        Ok(self
            .world
            .lock()
            .image_puller(cluster, namespace, node, images))
    }

    async fn delete_pod(&self, pod: &PodRef) -> Result<(), ClusterError> {
        self.world.lock().delete_pod(&pod.namespace, &pod.name);
        Ok(())
    }
}

impl MemCloud {
    fn other(&self, message: String) -> CloudError {
        CloudError::Other {
            provider: self.kind.as_str().to_string(),
            message,
        }
    }
}

#[async_trait]
impl CloudProvider for MemCloud {
    fn name(&self) -> &str {
        self.kind.as_str()
    }

    async fn list_servers(&self, cluster: &str) -> Result<Vec<Server>, CloudError> {
        let s = self.world.lock();
        Ok(s.vms
            .values()
            .filter(|v| v.server.provider == self.kind.as_str())
            .filter(|v| v.server.cluster.as_deref() == Some(cluster))
            .map(|v| v.server.clone())
            .collect())
    }

    async fn create_server(&self, req: &CreateRequest) -> Result<Server, CloudError> {
        let mut s = self.world.lock();
        if req.cluster != s.cluster_name {
            return Err(self.other(format!(
                "create for cluster {}: this world is cluster {}",
                req.cluster, s.cluster_name
            )));
        }
        match s.groups.get(&req.group) {
            Some(g) if g.provider == self.kind => {}
            _ => {
                return Err(self.other(format!(
                    "group {} is not a {} group",
                    req.group,
                    self.kind.as_str()
                )))
            }
        }
        s.create_vm(&req.group, self.kind.as_str())
            .ok_or_else(|| self.other(format!("no group {}", req.group)))
    }

    async fn get_server(&self, _cluster: &str, id: &str) -> Result<Option<Server>, CloudError> {
        let s = self.world.lock();
        Ok(s.vms
            .get(id)
            .filter(|v| v.server.provider == self.kind.as_str())
            .map(|v| v.server.clone()))
    }

    async fn delete_server(&self, cluster: &str, id: &str) -> Result<(), CloudError> {
        let mut s = self.world.lock();
        let Some(server) = s
            .vms
            .get(id)
            .filter(|v| v.server.provider == self.kind.as_str())
            .map(|v| v.server.clone())
        else {
            return Ok(());
        };
        check_owned(self.kind.as_str(), &server, cluster)?;
        s.delete_vm(id);
        Ok(())
    }

    async fn create_warm(&self, req: &CreateRequest) -> Result<Server, CloudError> {
        let mut s = self.world.lock();
        if req.cluster != s.cluster_name {
            return Err(self.other(format!(
                "create for cluster {}: this world is cluster {}",
                req.cluster, s.cluster_name
            )));
        }
        s.create_warm_vm(&req.group, self.kind.as_str(), &req.settings_hash)
            .ok_or_else(|| self.other(format!("no group {}", req.group)))
    }

    /// Its user data is rendered as a real provider's is (no hosts here, so for no zone,
    /// as a create is), so a template that does not render fails the start alike.
    async fn start_warm(
        &self,
        cluster: &str,
        id: &str,
        render: &RenderJoin<'_>,
    ) -> Result<(), CloudError> {
        let mut s = self.world.lock();
        let server = s.vms.get(id).map(|v| v.server.clone());
        let server = server.ok_or_else(|| self.other(format!("no VM {id}")))?;
        check_owned(self.kind.as_str(), &server, cluster)?;
        render(None).map_err(|e| self.other(format!("warm VM {id} not started: {e}")))?;
        s.start_warm_vm(id).map_err(|m| self.other(m))
    }

    async fn park(&self, cluster: &str, id: &str) -> Result<(), CloudError> {
        let mut s = self.world.lock();
        let server = s.vms.get(id).map(|v| v.server.clone());
        let server = server.ok_or_else(|| self.other(format!("no VM {id}")))?;
        check_owned(self.kind.as_str(), &server, cluster)?;
        s.park_vm(id);
        Ok(())
    }

    /// The mark lives on the VM, as a cloud tag does.
    async fn mark_joined(
        &self,
        cluster: &str,
        id: &str,
        at: Option<std::time::SystemTime>,
    ) -> Result<(), CloudError> {
        let mut s = self.world.lock();
        let server = s.vms.get(id).map(|v| v.server.clone());
        let server = server.ok_or_else(|| self.other(format!("no VM {id}")))?;
        check_owned(self.kind.as_str(), &server, cluster)?;
        if let Some(vm) = s.vms.get_mut(id) {
            vm.server.joined = at;
            if at.is_some() {
                vm.server.restarted = None;
            }
            // Let in again: no longer being removed, as each cloud's mark write does.
            if at.is_some() && vm.server.status == ServerStatus::Removing {
                vm.server.status = ServerStatus::Active;
                vm.server.removing_since = None;
            }
        }
        Ok(())
    }

    /// The mark lives on the VM, as a cloud tag does; its kubelet registers its node
    /// when the VM is up again.
    async fn restart(
        &self,
        cluster: &str,
        id: &str,
        at: std::time::SystemTime,
    ) -> Result<(), CloudError> {
        let mut s = self.world.lock();
        let server = s.vms.get(id).map(|v| v.server.clone());
        let server = server.ok_or_else(|| self.other(format!("no VM {id}")))?;
        check_owned(self.kind.as_str(), &server, cluster)?;
        s.restart_vm(id, at).map_err(|m| self.other(m))
    }

    /// The mark lives on the VM, as a cloud tag does.
    async fn fence(
        &self,
        cluster: &str,
        id: &str,
        at: std::time::SystemTime,
    ) -> Result<(), CloudError> {
        let mut s = self.world.lock();
        let server = s.vms.get(id).map(|v| v.server.clone());
        let server = server.ok_or_else(|| self.other(format!("no VM {id}")))?;
        check_owned(self.kind.as_str(), &server, cluster)?;
        s.fence_vm(id, at).map_err(|m| self.other(m))
    }

    /// The mark lives on the VM, as a cloud tag does.
    async fn mark_removing(&self, cluster: &str, id: &str) -> Result<(), CloudError> {
        let mut s = self.world.lock();
        let server = s.vms.get(id).map(|v| v.server.clone());
        let server = server.ok_or_else(|| self.other(format!("no VM {id}")))?;
        check_owned(self.kind.as_str(), &server, cluster)?;
        let now = super::spec::at(s.now);
        if let Some(vm) = s.vms.get_mut(id) {
            vm.server.status = ServerStatus::Removing;
            vm.server.removing_since = Some(now);
        }
        Ok(())
    }

    async fn group_shape(&self, group: &str) -> Result<GroupShape, CloudError> {
        let s = self.world.lock();
        s.groups
            .get(group)
            .map(|g| g.shape.clone())
            .ok_or_else(|| self.other(format!("no group {group}")))
    }
}

/// Sets (`Some`) or removes (`None`) each key of `edits` in `map`, as a merge patch does.
fn apply(map: &mut BTreeMap<String, String>, edits: &BTreeMap<String, Option<String>>) {
    for (k, v) in edits {
        match v {
            Some(v) => {
                map.insert(k.clone(), v.clone());
            }
            None => {
                map.remove(k);
            }
        }
    }
}

//! Faults and crash points for the in-memory world. [`FaultyCluster`] and
//! [`FaultyCloud`] wrap the world's [`MemCluster`] and [`MemCloud`] behind the same
//! production traits, and put every call through one seeded [`Injector`]:
//!
//! - **Crash points**: every call is numbered; the call due to crash is never made and
//!   every later call of that process fails, as if the process had died between the two
//!   calls. The driver ([`super::crash`]) then starts a fresh `Reconciler`. Crashes
//!   fall on calls at random (a mean gap is given) and on one write in eight.
//! - **Faults**: a fraction of calls fail, some of them half-done: a create that fails
//!   after the VM exists, a VM created that never boots, a delete accepted that never
//!   happens, a node delete done whose answer is lost, a 409 on a node patch.
//! - **Audit**: writes naming an object that is not this cluster's, evictions a budget
//!   forbids and pods deleted instead of evicted are recorded as violations, whether or
//!   not the world would have let them through.
//!
//! Calls are made in a fixed order (the in-memory world answers at once), so the same
//! seed gives the same faults and crash points every time.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;

use super::api::{MemCloud, MemCluster};
use super::world::{World, NAMESPACE};
use crate::act::Clouds;
use crate::cloud::{CloudError, CloudProvider, CreateRequest};
use crate::config::Config;
use crate::model::{GroupShape, NodeInfo, PdbInfo, PodInfo, PodRef, Server};
use nodewright_core::cluster::{ClusterApi, ClusterError, Eviction};

/// splitmix64, as the world's failures use: small, seeded, portable.
pub(super) fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Besides the crash points spread over all calls, this share of writes is one too:
/// most calls are reads, and a death in the middle of an action is the case that
/// matters most.
const WRITE_CRASH: f64 = 0.125;

/// Reads change nothing; every other call is a write.
fn is_read(call: &str) -> bool {
    call.starts_with("list ") || call.starts_with("read ") || call == "get server"
}

/// What befalls one call.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Verdict {
    Go,
    /// The process is dead: this call and every later one never happen.
    Dead,
    /// An injected fault; `pick` (uniform in 0..1) chooses among the call's variants.
    Fault {
        pick: f64,
    },
}

/// The kinds of injected faults, as counted in the figures.
pub const FAULT_ERROR: &str = "call failed (5xx), nothing done";
pub const FAULT_CONFLICT: &str = "node patch refused (409 Conflict)";
pub const FAULT_CREATE_HALF: &str = "create failed after the VM exists";
pub const FAULT_CREATE_STUCK: &str = "VM created, never boots";
pub const FAULT_DELETE_NEVER: &str = "VM delete accepted, never done";
pub const FAULT_NODE_DELETE_LOST: &str = "node deleted, answer lost";

/// What the injector counted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FaultStats {
    /// Calls made (or due) through the wrappers.
    pub calls: u64,
    /// Crash points hit, by the call that never happened.
    pub crash_points: BTreeMap<&'static str, u32>,
    /// Faults injected, by kind.
    pub faults: BTreeMap<&'static str, u32>,
    /// Invariant violations seen at the call (unmanaged objects, budgets).
    pub violations: Vec<String>,
}

struct InjectorState {
    rng: u64,
    rate: f64,
    /// Mean calls between crashes (0: no crash).
    crash_mean: u64,
    next_crash: Option<u64>,
    /// Faults and crashes happen only while on (the driver turns them off to watch
    /// the loop converge).
    on: bool,
    dead: bool,
    stats: FaultStats,
    foreign_nodes: BTreeSet<String>,
    foreign_vms: BTreeSet<String>,
}

/// One seeded source of faults and crash points for every wrapped call.
pub struct Injector {
    state: Mutex<InjectorState>,
}

impl Injector {
    /// Faults on `rate` of the calls (0 to 1) and a crash every `crash_mean` calls on
    /// average (0: never), drawn from `seed`.
    pub fn new(seed: u64, rate: f64, crash_mean: u64) -> Arc<Injector> {
        let mut s = InjectorState {
            rng: mix(seed ^ 0x5eed),
            rate,
            crash_mean,
            next_crash: None,
            on: true,
            dead: false,
            stats: FaultStats::default(),
            foreign_nodes: BTreeSet::new(),
            foreign_vms: BTreeSet::new(),
        };
        s.next_crash = s.draw_crash(0);
        Arc::new(Injector {
            state: Mutex::new(s),
        })
    }

    fn lock(&self) -> MutexGuard<'_, InjectorState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Names of nodes and ids of VMs that are not this cluster's: any write naming one
    /// is a violation.
    pub fn set_foreign(&self, nodes: BTreeSet<String>, vms: BTreeSet<String>) {
        let mut s = self.lock();
        s.foreign_nodes = nodes;
        s.foreign_vms = vms;
    }

    /// Turns faults and crashes on or off.
    pub fn set_on(&self, on: bool) {
        self.lock().on = on;
    }

    /// Whether the process died during the cycle just run; a new one starts alive.
    pub fn take_crash(&self) -> bool {
        std::mem::take(&mut self.lock().dead)
    }

    pub fn stats(&self) -> FaultStats {
        self.lock().stats.clone()
    }

    fn violation(&self, v: String) {
        self.lock().stats.violations.push(v);
    }

    fn is_foreign_node(&self, node: &str) -> bool {
        self.lock().foreign_nodes.contains(node)
    }

    fn is_foreign_vm(&self, id: &str) -> bool {
        self.lock().foreign_vms.contains(id)
    }

    fn verdict(&self, call: &'static str) -> Verdict {
        let mut s = self.lock();
        if s.dead {
            return Verdict::Dead;
        }
        s.stats.calls += 1;
        if !s.on {
            return Verdict::Go;
        }
        let n = s.stats.calls;
        let at_write = s.crash_mean > 0 && !is_read(call) && s.unit() < WRITE_CRASH;
        if s.next_crash == Some(n) || at_write {
            s.dead = true;
            *s.stats.crash_points.entry(call).or_default() += 1;
            if s.next_crash == Some(n) {
                s.next_crash = s.draw_crash(n);
            }
            return Verdict::Dead;
        }
        if s.rate > 0.0 && s.unit() < s.rate {
            let pick = s.unit();
            return Verdict::Fault { pick };
        }
        Verdict::Go
    }

    fn count(&self, kind: &'static str) {
        *self.lock().stats.faults.entry(kind).or_default() += 1;
    }
}

impl InjectorState {
    fn next(&mut self) -> u64 {
        self.rng = mix(self.rng);
        self.rng
    }

    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// The call after `after` at which the next crash falls: uniform over
    /// `1..=2*crash_mean` calls later.
    fn draw_crash(&mut self, after: u64) -> Option<u64> {
        if self.crash_mean == 0 {
            return None;
        }
        let span = self.crash_mean.saturating_mul(2).max(1);
        Some(after + 1 + self.next() % span)
    }
}

fn api_error(call: &str, code: u16, reason: &str, message: &str) -> ClusterError {
    ClusterError::Api {
        call: call.to_string(),
        source: Box::new(kube::Error::Api(
            kube::core::Status::failure(message, reason)
                .with_code(code)
                .boxed(),
        )),
    }
}

fn dead_cluster(call: &str) -> ClusterError {
    api_error(
        call,
        503,
        "ProcessKilled",
        "the process died before this call",
    )
}

/// The world's Kubernetes API with faults, crash points and an audit of every write.
pub struct FaultyCluster {
    pub inner: MemCluster,
    pub injector: Arc<Injector>,
}

impl FaultyCluster {
    /// `None` to make the call as asked, `Some(pick)` for an injected fault, or the
    /// error of a dead process.
    fn gate(&self, call: &'static str) -> Result<Option<f64>, ClusterError> {
        match self.injector.verdict(call) {
            Verdict::Go => Ok(None),
            Verdict::Dead => Err(dead_cluster(call)),
            Verdict::Fault { pick } => Ok(Some(pick)),
        }
    }

    fn fault(&self, call: &str) -> ClusterError {
        self.injector.count(FAULT_ERROR);
        api_error(call, 500, "InternalError", "injected fault")
    }

    /// A call without a half-done variant: a fault is an error and nothing is done.
    fn plain(&self, call: &'static str) -> Result<(), ClusterError> {
        match self.gate(call)? {
            None => Ok(()),
            Some(_) => Err(self.fault(call)),
        }
    }

    /// A node patch: audited, and a fault is a 409, as a patch racing another writer
    /// gets.
    fn node_write(&self, call: &'static str, node: &str) -> Result<(), ClusterError> {
        let fault = self.gate(call)?;
        if self.injector.is_foreign_node(node) {
            self.injector.violation(format!(
                "{call} of node {node}, which is not this cluster's"
            ));
        }
        if fault.is_some() {
            self.injector.count(FAULT_CONFLICT);
            return Err(api_error(
                call,
                409,
                "Conflict",
                "the object has been modified; please apply your changes to the latest version and try again",
            ));
        }
        Ok(())
    }

    /// The node a pod runs on now, and whether a budget selecting it allows no
    /// disruption.
    fn pod_facts(&self, pod: &PodRef) -> (Option<String>, bool) {
        let pods = self.inner.world.lock().pod_infos();
        let pdbs = self.inner.world.lock().pdb_infos();
        let Some(p) = pods
            .iter()
            .find(|p| p.namespace == pod.namespace && p.name == pod.name)
        else {
            return (None, false);
        };
        let forbidden = pdbs
            .iter()
            .any(|b| b.selects(p) && b.disruptions_allowed <= 0);
        (p.node_name.clone(), forbidden)
    }

    fn pod_write(&self, call: &'static str, pod: &PodRef) -> Option<String> {
        let (node, _) = self.pod_facts(pod);
        if let Some(n) = node.as_deref().filter(|n| self.injector.is_foreign_node(n)) {
            self.injector.violation(format!(
                "{call} of pod {pod} on node {n}, which is not this cluster's"
            ));
        }
        node
    }
}

#[async_trait]
impl ClusterApi for FaultyCluster {
    async fn nodes(&self) -> Result<Vec<NodeInfo>, ClusterError> {
        self.plain("list nodes")?;
        self.inner.nodes().await
    }

    async fn pods(&self) -> Result<Vec<Arc<PodInfo>>, ClusterError> {
        self.plain("list pods")?;
        self.inner.pods().await
    }

    async fn pdbs(&self) -> Result<Vec<PdbInfo>, ClusterError> {
        self.plain("list pdbs")?;
        self.inner.pdbs().await
    }

    async fn volume_attachments(&self) -> Result<Vec<(String, String)>, ClusterError> {
        self.plain("list volume attachments")?;
        self.inner.volume_attachments().await
    }

    /// A failed list fails the cycle as a failed pods or nodes list does. Its draw moved
    /// every seeded run of the crash suite onto other faults, which found a VM made just
    /// before its provider's listing failed left out of the limits.
    async fn volumes(&self) -> Result<nodewright_core::model::Volumes, ClusterError> {
        self.plain("list volumes")?;
        self.inner.volumes().await
    }

    async fn cordon(
        &self,
        node: &str,
        annotations: &BTreeMap<String, String>,
    ) -> Result<(), ClusterError> {
        self.node_write("cordon", node)?;
        self.inner.cordon(node, annotations).await
    }

    async fn uncordon(&self, node: &str) -> Result<(), ClusterError> {
        self.node_write("uncordon", node)?;
        self.inner.uncordon(node).await
    }

    async fn annotate(
        &self,
        node: &str,
        annotations: &BTreeMap<String, Option<String>>,
    ) -> Result<(), ClusterError> {
        self.node_write("annotate node", node)?;
        self.inner.annotate(node, annotations).await
    }

    async fn label(
        &self,
        node: &str,
        labels: &BTreeMap<String, Option<String>>,
    ) -> Result<(), ClusterError> {
        self.node_write("label node", node)?;
        self.inner.label(node, labels).await
    }

    async fn remove_taint(&self, node: &str, key: &str) -> Result<(), ClusterError> {
        self.node_write("remove taint", node)?;
        self.inner.remove_taint(node, key).await
    }

    async fn add_taint(
        &self,
        node: &str,
        taint: &nodewright_core::model::Taint,
    ) -> Result<(), ClusterError> {
        self.node_write("add taint", node)?;
        self.inner.add_taint(node, taint).await
    }

    async fn evict(&self, pod: &PodRef) -> Result<Eviction, ClusterError> {
        self.plain("evict")?;
        self.pod_write("evict", pod);
        let (_, forbidden) = self.pod_facts(pod);
        let result = self.inner.evict(pod).await?;
        if forbidden && result == Eviction::Evicted {
            self.injector
                .violation(format!("pod {pod} evicted while its budget allowed none"));
        }
        Ok(result)
    }

    async fn mint_bootstrap_token(
        &self,
        cluster: &str,
        node: &str,
        expires: std::time::SystemTime,
    ) -> Result<nodewright_core::model::JoinCredentials, ClusterError> {
        self.plain("create secret")?;
        self.inner
            .mint_bootstrap_token(cluster, node, expires)
            .await
    }

    async fn delete_bootstrap_token(&self, cluster: &str, node: &str) -> Result<(), ClusterError> {
        self.plain("delete secret")?;
        self.inner.delete_bootstrap_token(cluster, node).await
    }

    async fn delete_node(&self, node: &str) -> Result<(), ClusterError> {
        let fault = self.gate("delete node")?;
        if self.injector.is_foreign_node(node) {
            self.injector.violation(format!(
                "delete of node {node}, which is not this cluster's"
            ));
        }
        match fault {
            None => self.inner.delete_node(node).await,
            Some(pick) if pick < 0.5 => {
                self.inner.delete_node(node).await?;
                self.injector.count(FAULT_NODE_DELETE_LOST);
                Err(api_error(
                    "delete node",
                    500,
                    "InternalError",
                    "injected fault after the delete",
                ))
            }
            Some(_) => Err(self.fault("delete node")),
        }
    }

    async fn node(&self, node: &str) -> Result<Option<NodeInfo>, ClusterError> {
        self.plain("read node")?;
        self.inner.node(node).await
    }

    async fn create_image_puller(
        &self,
        cluster: &str,
        namespace: &str,
        node: &str,
        images: &[String],
        pull_secrets: &[String],
    ) -> Result<String, ClusterError> {
        self.plain("create image puller")?;
        if self.injector.is_foreign_node(node) {
            self.injector.violation(format!(
                "image puller on node {node}, which is not this cluster's"
            ));
        }
        self.inner
            .create_image_puller(cluster, namespace, node, images, pull_secrets)
            .await
    }

    async fn delete_pod(&self, pod: &PodRef) -> Result<(), ClusterError> {
        self.plain("delete pod")?;
        self.pod_write("delete pod", pod);
        if pod.namespace == NAMESPACE {
            self.injector.violation(format!(
                "workload pod {pod} deleted instead of evicted (no budget asked)"
            ));
        }
        self.inner.delete_pod(pod).await
    }
}

/// One provider of the world with faults, crash points and an audit of deletes.
pub struct FaultyCloud {
    pub inner: MemCloud,
    pub injector: Arc<Injector>,
}

impl FaultyCloud {
    fn err(&self, call: &str, message: &str) -> CloudError {
        CloudError::Api {
            provider: self.inner.kind.as_str().to_string(),
            call: call.to_string(),
            status: 500,
            message: message.to_string(),
        }
    }

    fn gate(&self, call: &'static str) -> Result<Option<f64>, CloudError> {
        match self.injector.verdict(call) {
            Verdict::Go => Ok(None),
            Verdict::Dead => Err(self.err(call, "the process died before this call")),
            Verdict::Fault { pick } => Ok(Some(pick)),
        }
    }

    fn plain(&self, call: &'static str) -> Result<(), CloudError> {
        match self.gate(call)? {
            None => Ok(()),
            Some(_) => {
                self.injector.count(FAULT_ERROR);
                Err(self.err(call, "injected fault"))
            }
        }
    }
}

#[async_trait]
impl CloudProvider for FaultyCloud {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn list_servers(&self, cluster: &str) -> Result<Vec<Server>, CloudError> {
        self.plain("list servers")?;
        self.inner.list_servers(cluster).await
    }

    async fn create_server(&self, req: &CreateRequest) -> Result<Server, CloudError> {
        match self.gate("create server")? {
            None => self.inner.create_server(req).await,
            Some(pick) if pick < 1.0 / 3.0 => {
                self.inner.create_server(req).await?;
                self.injector.count(FAULT_CREATE_HALF);
                Err(self.err("create server", "injected fault after the VM was made"))
            }
            Some(pick) if pick < 2.0 / 3.0 => {
                let server = self.inner.create_server(req).await?;
                self.inner.world.lock().stuck.insert(server.id.clone());
                self.injector.count(FAULT_CREATE_STUCK);
                Ok(server)
            }
            Some(_) => {
                self.injector.count(FAULT_ERROR);
                Err(self.err("create server", "injected fault"))
            }
        }
    }

    async fn get_server(&self, cluster: &str, id: &str) -> Result<Option<Server>, CloudError> {
        self.plain("get server")?;
        self.inner.get_server(cluster, id).await
    }

    async fn delete_server(&self, cluster: &str, id: &str) -> Result<(), CloudError> {
        let fault = self.gate("delete server")?;
        if self.injector.is_foreign_vm(id) {
            self.injector
                .violation(format!("delete of VM {id}, which is not this cluster's"));
        }
        match fault {
            None => self.inner.delete_server(cluster, id).await,
            Some(pick) if pick < 0.5 => {
                self.injector.count(FAULT_DELETE_NEVER);
                Ok(())
            }
            Some(_) => {
                self.injector.count(FAULT_ERROR);
                Err(self.err("delete server", "injected fault"))
            }
        }
    }

    async fn group_shape(&self, group: &str) -> Result<GroupShape, CloudError> {
        self.plain("read group shape")?;
        self.inner.group_shape(group).await
    }

    async fn create_warm(&self, req: &CreateRequest) -> Result<Server, CloudError> {
        match self.gate("create warm VM")? {
            None => self.inner.create_warm(req).await,
            Some(pick) if pick < 0.5 => {
                self.inner.create_warm(req).await?;
                self.injector.count(FAULT_CREATE_HALF);
                Err(self.err("create warm VM", "injected fault after the VM was made"))
            }
            Some(_) => {
                self.injector.count(FAULT_ERROR);
                Err(self.err("create warm VM", "injected fault"))
            }
        }
    }

    async fn start_warm(
        &self,
        cluster: &str,
        id: &str,
        render: &crate::cloud::RenderJoin<'_>,
    ) -> Result<(), CloudError> {
        self.plain("start warm VM")?;
        if self.injector.is_foreign_vm(id) {
            self.injector
                .violation(format!("start of VM {id}, which is not this cluster's"));
        }
        self.inner.start_warm(cluster, id, render).await
    }

    async fn park(&self, cluster: &str, id: &str) -> Result<(), CloudError> {
        self.plain("park VM")?;
        if self.injector.is_foreign_vm(id) {
            self.injector
                .violation(format!("park of VM {id}, which is not this cluster's"));
        }
        self.inner.park(cluster, id).await
    }

    async fn mark_joined(
        &self,
        cluster: &str,
        id: &str,
        at: Option<std::time::SystemTime>,
    ) -> Result<(), CloudError> {
        self.plain("mark VM joined")?;
        if self.injector.is_foreign_vm(id) {
            self.injector
                .violation(format!("mark of VM {id}, which is not this cluster's"));
        }
        self.inner.mark_joined(cluster, id, at).await
    }

    async fn restart(
        &self,
        cluster: &str,
        id: &str,
        at: std::time::SystemTime,
    ) -> Result<(), CloudError> {
        self.plain("restart VM")?;
        if self.injector.is_foreign_vm(id) {
            self.injector
                .violation(format!("restart of VM {id}, which is not this cluster's"));
        }
        self.inner.restart(cluster, id, at).await
    }

    async fn fence(
        &self,
        cluster: &str,
        id: &str,
        at: std::time::SystemTime,
    ) -> Result<(), CloudError> {
        self.plain("stop VM")?;
        if self.injector.is_foreign_vm(id) {
            self.injector
                .violation(format!("stop of VM {id}, which is not this cluster's"));
        }
        self.inner.fence(cluster, id, at).await
    }

    async fn mark_removing(&self, cluster: &str, id: &str) -> Result<(), CloudError> {
        self.plain("mark VM removing")?;
        if self.injector.is_foreign_vm(id) {
            self.injector
                .violation(format!("mark of VM {id}, which is not this cluster's"));
        }
        self.inner.mark_removing(cluster, id).await
    }
}

/// The world's cluster and one provider per provider kind of the config, every call
/// through `injector`.
pub fn faulty_apis(
    world: &World,
    config: &Config,
    injector: &Arc<Injector>,
) -> (Arc<dyn ClusterApi>, Clouds) {
    let cluster = Arc::new(FaultyCluster {
        inner: MemCluster {
            world: world.clone(),
        },
        injector: injector.clone(),
    });
    let mut clouds = Clouds::new();
    let mut made: BTreeMap<&str, Arc<dyn CloudProvider>> = BTreeMap::new();
    for g in &config.node_groups {
        let p = made
            .entry(g.provider.as_str())
            .or_insert_with(|| {
                Arc::new(FaultyCloud {
                    inner: MemCloud {
                        world: world.clone(),
                        kind: g.provider,
                    },
                    injector: injector.clone(),
                })
            })
            .clone();
        clouds.add_group(&g.name, p);
    }
    (cluster, clouds)
}

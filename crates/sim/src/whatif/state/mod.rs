//! The state behind the world (`super::world::World`): pods, nodes, VMs and the events due, and
//! what happens to them: arrivals, the scheduler, kubelets running pods for their
//! duration, boots, failures, and the writes the API server and the clouds accept.

mod warm;

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::sync::Arc;

use super::scoring;
use super::spec::{
    at, ms, pod_info, Counters, GroupSpec, Ms, RowStat, VmStat, WorldOptions, NAMESPACE,
};
use super::workload::{PodKind, WorkloadRow};
use crate::model::{
    volumes::HOSTNAME_LABEL, ClaimInfo, ClassInfo, LocalVolume, NodeInfo, NodeSelectorTerm,
    Operator, PdbInfo, PodClaim, PodInfo, PodPhase, PvInfo, Requirement, Server, ServerStatus,
    Volumes,
};
use crate::plan::sched::template::LABEL_HOSTNAME;
use crate::plan::sched::{Model, Slot};

pub(super) struct LivePod {
    pub(super) info: PodInfo,
    pub(super) row: usize,
    /// The room count at which the scheduler last refused it.
    pub(super) refused_at: Option<u64>,
    /// Run time still to do.
    pub(super) remaining: Ms,
    /// When the current run started.
    pub(super) started: Option<Ms>,
}

pub(super) struct Vm {
    pub(super) server: Server,
    pub(super) stat: usize,
}

pub(super) struct NodeRec {
    pub(super) info: NodeInfo,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Event {
    PodDone(String),
    Boot(String),
    Fail(String),
    NotReadyEviction(String),
}

pub(super) struct Pdb {
    pub(super) info: PdbInfo,
    pub(super) allowed: i32,
}

/// Everything in the world, behind one lock.
pub(super) struct State {
    pub(super) now: Ms,
    pub(super) cluster_name: String,
    pub(super) groups: BTreeMap<String, GroupSpec>,
    pub(super) vms: BTreeMap<String, Vm>,
    pub(super) vm_stats: Vec<VmStat>,
    pub(super) counters: Counters,
    pub(super) rows: Arc<[WorkloadRow]>,
    pub(super) next_row: usize,
    pub(super) row_stats: Vec<RowStat>,
    pub(super) pods: BTreeMap<String, LivePod>,
    /// Pods that are not the workload's (image pullers).
    pub(super) aux_pods: BTreeMap<String, PodInfo>,
    pub(super) nodes: BTreeMap<String, NodeRec>,
    pub(super) pdbs: Vec<Pdb>,
    pub(super) events: BinaryHeap<Reverse<(Ms, u64, Event)>>,
    pub(super) seq: u64,
    pub(super) next_vm: u64,
    /// A pod arrived or room may have appeared: a scheduling round is due.
    pub(super) dirty: bool,
    /// Room may have appeared (a pod left, a node joined or changed): pods refused
    /// before are tried again. Otherwise a round tries only pods not yet refused.
    pub(super) room_changed: bool,
    /// Counts the times room changed; a refused pod remembers the count it was
    /// refused at.
    pub(super) room_gen: u64,
    /// The last time a pod started or finished.
    pub(super) last_pod_change: Ms,
    pub(super) options: WorldOptions,
    /// VMs that never finish booting (a fault run's half-done creates).
    pub(super) stuck: BTreeSet<String>,
    /// Where each `local_volume` row's data lives (row index to node), from its first
    /// start on.
    pub(super) local_volumes: BTreeMap<usize, String>,
    /// How many Ready nodes run no workload pod, from each instant that number changed
    /// on: (since, count), in time order.
    pub(super) empty_log: Vec<(Ms, u32)>,
}

/// The claim of row `row`'s local volume.
fn volume_claim(name: &str, row: usize) -> String {
    format!("{name}-{row}-data")
}

fn volume_pv(claim: &str) -> String {
    format!("pvc-{claim}")
}

/// "On node `node` only", as the local-path provisioner writes a PV's node affinity.
fn hostname_terms(node: &str) -> NodeSelectorTerm {
    NodeSelectorTerm {
        expressions: vec![Requirement {
            key: HOSTNAME_LABEL.into(),
            operator: Operator::In,
            values: vec![node.to_string()],
        }],
        fields: Vec::new(),
    }
}

/// splitmix64: a small, seeded, portable generator.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

fn unit(x: u64) -> f64 {
    (mix(x) >> 11) as f64 / (1u64 << 53) as f64
}

impl State {
    fn push(&mut self, t: Ms, e: Event) {
        self.seq += 1;
        self.events.push(Reverse((t, self.seq, e)));
    }

    fn next_arrival(&self) -> Option<Ms> {
        self.rows.get(self.next_row).map(|r| r.arrival_ms)
    }

    pub fn next_due(&self) -> Option<Ms> {
        let e = self.events.peek().map(|Reverse((t, _, _))| *t);
        match (self.next_arrival(), e) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    pub fn advance_to(&mut self, t: Ms) {
        // What changed at the current instant (an eviction, a taint off) comes first.
        self.schedule();
        self.note_empty();
        while let Some(next) = self.next_due().filter(|n| *n <= t) {
            self.now = self.now.max(next);
            while self.next_arrival() == Some(next) {
                self.arrive(next);
            }
            while self
                .events
                .peek()
                .is_some_and(|Reverse((at, _, _))| *at == next)
            {
                if let Some(Reverse((_, _, e))) = self.events.pop() {
                    self.handle(next, e);
                }
            }
            self.schedule();
            self.note_empty();
        }
        self.now = self.now.max(t);
        self.schedule();
        self.note_empty();
    }

    /// Notes, at `now`, how many Ready nodes run no workload pod, if that changed.
    /// Every write happens at `now` and time moves only here, so the log is exact.
    fn note_empty(&mut self) {
        let busy: BTreeSet<&str> = self
            .pods
            .values()
            .filter(|p| p.started.is_some())
            .filter_map(|p| p.info.node_name.as_deref())
            .collect();
        let empty = self
            .nodes
            .values()
            .filter(|n| n.info.ready && !busy.contains(n.info.name.as_str()))
            .count() as u32;
        match self.empty_log.last_mut() {
            Some((since, count)) if *since == self.now => *count = empty,
            Some((_, count)) if *count == empty => {}
            _ => self.empty_log.push((self.now, empty)),
        }
    }

    fn arrive(&mut self, t: Ms) {
        let i = self.next_row;
        self.next_row += 1;
        let Some(row) = self.rows.get(i) else {
            return;
        };
        let name = format!("{}-{i}", row.name);
        let mut info = pod_info(row, &name, at(t), &self.groups);
        self.with_volume(&mut info, i);
        let remaining = row.duration_s.saturating_mul(1000);
        self.pods.insert(
            name,
            LivePod {
                info,
                row: i,
                remaining,
                started: None,
                refused_at: None,
            },
        );
        self.dirty = true;
    }

    fn handle(&mut self, t: Ms, e: Event) {
        match e {
            Event::PodDone(name) => {
                let done = self
                    .pods
                    .get(&name)
                    .is_some_and(|p| p.started.is_some_and(|s| s + p.remaining == t));
                if done {
                    if let Some(p) = self.pods.remove(&name) {
                        if let Some(stat) = self.row_stats.get_mut(p.row) {
                            stat.finished = Some(t);
                        }
                        self.last_pod_change = t;
                        self.room();
                    }
                }
            }
            Event::Boot(id) => self.boot(t, &id),
            Event::Fail(node) => {
                if let Some(n) = self.nodes.get_mut(&node).filter(|n| n.info.ready) {
                    n.info.ready = false;
                    n.info.ready_changed = Some(at(t));
                    self.counters.node_failures += 1;
                    let after = ms(self.options.not_ready_eviction);
                    self.push(t + after, Event::NotReadyEviction(node));
                }
            }
            Event::NotReadyEviction(node) => {
                if self.nodes.get(&node).is_some_and(|n| !n.info.ready) {
                    self.kill_pods_on(&node, t);
                }
            }
        }
    }

    /// A VM finished booting: its kubelet registers the node, Ready, with the startup
    /// taint; it may be drawn to fail later.
    fn boot(&mut self, t: Ms, id: &str) {
        let Some(vm) = self.vms.get_mut(id) else {
            return;
        };
        if vm.server.status != ServerStatus::Building || self.stuck.contains(id) {
            return;
        }
        vm.server.status = ServerStatus::Active;
        let name = vm.server.name.clone();
        let ordinal = vm.stat as u64;
        if let Some(s) = self.vm_stats.get_mut(vm.stat) {
            s.ready.get_or_insert(t);
        }
        let Some(spec) = vm.server.group.as_ref().and_then(|g| self.groups.get(g)) else {
            return;
        };
        let mut labels = spec.labels.clone();
        labels.insert(LABEL_HOSTNAME.to_string(), name.clone());
        let info = NodeInfo {
            name: name.clone(),
            labels,
            annotations: BTreeMap::new(),
            created: at(t),
            unschedulable: false,
            ready: true,
            taints: spec.taints.clone(),
            allocatable: spec.allocatable.clone(),
            images: BTreeSet::new(),
            image_listing: Default::default(),
            deleting: false,
            ready_changed: Some(at(t)),
            kubelet_version: None,
        };
        self.nodes.insert(name.clone(), NodeRec { info });
        let f = self.options.node_failures;
        let seed = self.options.seed;
        if f > 0.0 && unit(seed ^ mix(ordinal)) < f {
            let window = ms(self.options.failure_window) as f64;
            let after = (unit(seed.wrapping_add(1) ^ mix(ordinal)) * window) as Ms;
            self.push(t + after.max(1), Event::Fail(name));
        }
        self.room();
    }

    /// The node `name`'s kubelet stopped reporting (its VM is gone).
    pub fn node_lost(&mut self, name: &str, t: Ms) {
        if let Some(n) = self.nodes.get_mut(name).filter(|n| n.info.ready) {
            n.info.ready = false;
            n.info.ready_changed = Some(at(t));
            let after = ms(self.options.not_ready_eviction);
            self.push(t + after, Event::NotReadyEviction(name.to_string()));
        }
    }

    /// Pods on a node that failed or is deleted go: their controllers make new ones.
    fn kill_pods_on(&mut self, node: &str, t: Ms) {
        let names: Vec<String> = self
            .pods
            .iter()
            .filter(|(_, p)| p.info.node_name.as_deref() == Some(node))
            .map(|(k, _)| k.clone())
            .collect();
        for name in names {
            self.counters.pods_killed += 1;
            self.displace(&name, t);
        }
        self.aux_pods
            .retain(|_, p| p.node_name.as_deref() != Some(node));
    }

    /// Takes workload pod `name` off its node. Its controller makes a new pending pod:
    /// a Deployment's keeps the run left, a Job's starts its run again; a bare pod is
    /// lost.
    pub fn displace(&mut self, name: &str, t: Ms) {
        let Some(p) = self.pods.remove(name) else {
            return;
        };
        self.room();
        let Some(row) = self.rows.get(p.row).cloned() else {
            return;
        };
        let ran = p.started.map_or(0, |s| t.saturating_sub(s));
        let remaining = match row.kind {
            PodKind::Deployment => p.remaining.saturating_sub(ran),
            PodKind::Job => {
                if p.started.is_some() {
                    self.counters.job_restarts += 1;
                }
                row.duration_s.saturating_mul(1000)
            }
            PodKind::Pod => {
                self.counters.pods_lost += 1;
                self.last_pod_change = t;
                if let Some(stat) = self.row_stats.get_mut(p.row) {
                    stat.lost = true;
                }
                return;
            }
        };
        let Some(stat) = self.row_stats.get_mut(p.row) else {
            return;
        };
        if p.started.is_some() && remaining == 0 {
            stat.finished = Some(t);
            return;
        }
        stat.replacements += 1;
        let name = format!("{}-{}-{}", row.name, p.row, stat.replacements);
        let mut info = pod_info(&row, &name, at(t), &self.groups);
        self.with_volume(&mut info, p.row);
        self.pods.insert(
            name,
            LivePod {
                info,
                row: p.row,
                remaining,
                started: None,
                refused_at: None,
            },
        );
        self.room();
    }

    /// One scheduling round over every pending pod, as the default scheduler would:
    /// priority first, then age; of the nodes that pass every check, the one
    /// kube-scheduler's default scores put first ([`scoring`]) wins;
    /// a pod that fits nowhere is marked `PodScheduled=False/Unschedulable`.
    fn schedule(&mut self) {
        if !self.dirty {
            return;
        }
        self.dirty = false;
        if self.room_changed {
            self.room_gen += 1;
            self.room_changed = false;
        }
        let (t, gen) = (self.now, self.room_gen);
        let (placed, refused) = self.decide(gen);
        for (pod, node) in placed {
            self.start(&pod, node, t);
        }
        for pod in refused {
            if let Some(p) = self.pods.get_mut(&pod) {
                p.refused_at = Some(gen);
                if !p.info.unschedulable {
                    p.info.unschedulable = true;
                    p.info.unschedulable_since = Some(at(t));
                }
            }
        }
    }

    /// Where the pending pods not refused at room count `gen` go: (pod, node) pairs
    /// and the pods that fit nowhere. The model borrows the world as it is, nothing
    /// copied.
    fn decide(&self, gen: u64) -> (Vec<(String, String)>, Vec<String>) {
        let mut placed = Vec::new();
        let mut refused = Vec::new();
        let mut pending: Vec<&PodInfo> = self
            .pods
            .values()
            .filter(|p| p.started.is_none() && p.refused_at != Some(gen))
            .map(|p| &p.info)
            .collect();
        if pending.is_empty() {
            return (placed, refused);
        }
        pending.sort_by(|a, b| {
            b.priority
                .cmp(&a.priority)
                .then_with(|| a.created.cmp(&b.created))
                .then_with(|| a.name.cmp(&b.name))
        });
        let mut model = Model::new();
        for n in self.nodes.values() {
            model.add_slot(Slot::for_node(&n.info));
        }
        for p in self.pods.values().filter(|p| p.started.is_some()) {
            if let Some(i) = p
                .info
                .node_name
                .as_deref()
                .and_then(|n| model.slot_index(n))
            {
                model.place(&p.info, i);
            }
        }
        let scoring = self.options.scoring;
        let mut feasible = Vec::new();
        for pod in pending {
            feasible.clear();
            for i in 0..model.slots.len() {
                let slot = &model.slots[i];
                // Resources first: cheap, and what most refusals are.
                if slot.allocatable.fits(&slot.used, &pod.requests) && model.check(pod, i).is_ok() {
                    feasible.push(i);
                }
            }
            match scoring::pick(&model, pod, &feasible, scoring) {
                Some(i) => {
                    placed.push((pod.name.clone(), model.slots[i].name.to_string()));
                    model.place(pod, i);
                }
                None => refused.push(pod.name.clone()),
            }
        }
        (placed, refused)
    }

    /// The claim of row `row`'s local volume (if it has one), and once the volume
    /// exists, what it means: the pod fits only the volume's node.
    fn with_volume(&self, info: &mut PodInfo, row: usize) {
        if !self.rows.get(row).is_some_and(|r| r.local_volume) {
            return;
        }
        let claim = volume_claim(&self.rows[row].name, row);
        info.claims = vec![PodClaim {
            volume: "data".into(),
            claim: claim.clone(),
        }];
        if let Some(node) = self.local_volumes.get(&row) {
            let pv = volume_pv(&claim);
            info.volume_affinity = vec![vec![hostname_terms(node)]];
            info.local_volumes = vec![LocalVolume {
                volume: "data".into(),
                claim,
                pv,
                node: node.clone(),
                affinity: vec![hostname_terms(node)],
            }];
        }
    }

    /// The volume objects the API server would hold: a default `local-path` class, one
    /// claim per `local_volume` row with a live pod, bound once its volume exists.
    pub fn volume_objects(&self) -> Volumes {
        let mut v = Volumes {
            classes: vec![ClassInfo {
                name: "local-path".into(),
                provisioner: "rancher.io/local-path".into(),
                wait_for_first_consumer: true,
                allowed_topologies: None,
                default: true,
            }],
            ..Volumes::default()
        };
        let rows: BTreeSet<usize> = self
            .pods
            .values()
            .map(|p| p.row)
            .filter(|r| self.rows.get(*r).is_some_and(|w| w.local_volume))
            .collect();
        for row in rows {
            let claim = volume_claim(&self.rows[row].name, row);
            let node = self.local_volumes.get(&row);
            if let Some(node) = node {
                v.pvs.push(PvInfo {
                    name: volume_pv(&claim),
                    node_affinity: Some(vec![hostname_terms(node)]),
                    local: false,
                    csi_driver: None,
                    claim: Some((NAMESPACE.to_string(), claim.clone())),
                    disposable: false,
                });
            }
            v.claims.push(ClaimInfo {
                namespace: NAMESPACE.to_string(),
                volume_name: node.map(|_| volume_pv(&claim)),
                name: claim,
                storage_class: Some("local-path".into()),
                selected_node: node.cloned(),
                disposable: false,
            });
        }
        v
    }

    fn start(&mut self, pod: &str, node: String, t: Ms) {
        let Some(p) = self.pods.get_mut(pod) else {
            return;
        };
        // The local-path provisioner makes a first-started pod's volume on its node.
        let row = p.row;
        if self.rows.get(row).is_some_and(|r| r.local_volume) {
            self.local_volumes
                .entry(row)
                .or_insert_with(|| node.clone());
        }
        let Some(p) = self.pods.get_mut(pod) else {
            return;
        };
        if !p.info.claims.is_empty() && p.info.local_volumes.is_empty() {
            if let Some(n) = self.local_volumes.get(&row) {
                let claim = volume_claim(&self.rows[row].name, row);
                p.info.volume_affinity = vec![vec![hostname_terms(n)]];
                p.info.local_volumes = vec![LocalVolume {
                    volume: "data".into(),
                    pv: volume_pv(&claim),
                    claim,
                    node: n.clone(),
                    affinity: vec![hostname_terms(n)],
                }];
            }
        }
        p.info.node_name = Some(node);
        p.info.phase = PodPhase::Running;
        p.info.unschedulable = false;
        p.info.unschedulable_since = None;
        p.started = Some(t);
        let (row, remaining) = (p.row, p.remaining);
        let info = p.info.clone();
        if let Some(stat) = self.row_stats.get_mut(row) {
            stat.first_start.get_or_insert(t);
        }
        for pdb in self.pdbs.iter_mut().filter(|b| b.info.selects(&info)) {
            pdb.info.disruptions_allowed = (pdb.info.disruptions_allowed + 1).min(pdb.allowed);
        }
        self.last_pod_change = t;
        self.push(t + remaining, Event::PodDone(pod.to_string()));
    }

    // --- what the API server does for the cluster adapter ---

    pub fn node_infos(&self) -> Vec<NodeInfo> {
        self.nodes.values().map(|n| n.info.clone()).collect()
    }

    pub fn pod_infos(&self) -> Vec<PodInfo> {
        self.pods
            .values()
            .map(|p| p.info.clone())
            .chain(self.aux_pods.values().cloned())
            .collect()
    }

    pub fn pdb_infos(&self) -> Vec<PdbInfo> {
        self.pdbs.iter().map(|p| p.info.clone()).collect()
    }

    pub fn node_mut(&mut self, name: &str) -> Option<&mut NodeInfo> {
        self.nodes.get_mut(name).map(|n| &mut n.info)
    }

    pub fn node(&self, name: &str) -> Option<&NodeInfo> {
        self.nodes.get(name).map(|n| &n.info)
    }

    /// Room may have appeared: every pending pod is tried again.
    pub fn room(&mut self) {
        self.dirty = true;
        self.room_changed = true;
    }

    /// The Eviction API: refused while a budget selecting the pod allows no disruption.
    pub fn evict(&mut self, namespace: &str, name: &str) -> nodewright_core::cluster::Eviction {
        use nodewright_core::cluster::Eviction;
        if namespace == NAMESPACE {
            if let Some(p) = self.pods.get(name) {
                let info = p.info.clone();
                if let Some(b) = self
                    .pdbs
                    .iter()
                    .find(|b| b.info.selects(&info) && b.info.disruptions_allowed <= 0)
                {
                    self.counters.evictions_refused += 1;
                    return Eviction::Blocked(format!(
                        "Cannot evict pod as it would violate the pod's disruption budget {}.",
                        b.info.name
                    ));
                }
                for b in self.pdbs.iter_mut().filter(|b| b.info.selects(&info)) {
                    b.info.disruptions_allowed -= 1;
                }
                self.counters.evictions += 1;
                let running_job = p.started.is_some()
                    && self.rows.get(p.row).is_some_and(|r| r.kind == PodKind::Job);
                self.counters.running_jobs_evicted += u32::from(running_job);
                let t = self.now;
                self.displace(name, t);
                return Eviction::Evicted;
            }
        }
        match self.aux_pods.get(name).filter(|p| p.namespace == namespace) {
            Some(_) => {
                self.aux_pods.remove(name);
                Eviction::Evicted
            }
            None => Eviction::Gone,
        }
    }

    /// Deleting a pod: as an eviction without budgets.
    pub fn delete_pod(&mut self, namespace: &str, name: &str) {
        if namespace == NAMESPACE && self.pods.contains_key(name) {
            let t = self.now;
            self.displace(name, t);
        } else if self
            .aux_pods
            .get(name)
            .is_some_and(|p| p.namespace == namespace)
        {
            self.aux_pods.remove(name);
        }
    }

    /// Deleting a Node: the pod garbage collector deletes the pods bound to it.
    pub fn delete_node(&mut self, name: &str) {
        if self.nodes.remove(name).is_some() {
            let t = self.now;
            self.kill_pods_on(name, t);
        }
    }

    /// A short-lived pod that pulls `images` on `node`; it has finished at once.
    pub fn image_puller(
        &mut self,
        cluster: &str,
        namespace: &str,
        node: &str,
        images: &[String],
    ) -> String {
        self.seq += 1;
        let name = format!("nodewright-image-puller-{}", self.seq);
        let mut p = PodInfo::new(namespace, &name);
        p.node_name = Some(node.to_string());
        p.phase = PodPhase::Succeeded;
        p.labels.insert(
            nodewright_core::model::LABEL_IMAGE_PULLER.to_string(),
            cluster.to_string(),
        );
        p.images = images.to_vec();
        p.created = at(self.now);
        if let Some(n) = self.nodes.get_mut(node) {
            n.info
                .images
                .extend(images.iter().map(|i| crate::model::normalize_image(i)));
        }
        self.aux_pods.insert(name.clone(), p);
        name
    }

    /// A new VM of `group`, booting; named `<cluster>-<group>-<n>` in creation order so
    /// that a replay is the same every time.
    pub fn create_vm(&mut self, group: &str, provider: &str) -> Option<Server> {
        let boot_at = self.now + self.groups.get(group)?.boot_delay;
        let server = self.new_server(group, provider, false, None)?;
        self.vm_stats.push(VmStat {
            group: group.to_string(),
            created: self.now,
            ready: None,
            deleted: None,
        });
        let stat = self.vm_stats.len() - 1;
        self.vms.insert(
            server.id.clone(),
            Vm {
                server: server.clone(),
                stat,
            },
        );
        self.push(boot_at, Event::Boot(server.id.clone()));
        Some(server)
    }

    /// The next VM of `group` as the cloud lists it, made now; named
    /// `<cluster>-<group>-<n>` in creation order so that a replay is the same every time.
    /// A warm one is made stopped, any other booting.
    pub(super) fn new_server(
        &mut self,
        group: &str,
        provider: &str,
        warm: bool,
        settings_hash: Option<&str>,
    ) -> Option<Server> {
        let memory = self.groups.get(group)?.shape.memory;
        self.next_vm += 1;
        let n = self.next_vm;
        Some(Server {
            id: format!("{provider}-{n}"),
            name: format!("{}-{group}-{n:05}", self.cluster_name),
            cluster: Some(self.cluster_name.clone()),
            group: Some(group.to_string()),
            warm,
            status: if warm {
                ServerStatus::Stopped
            } else {
                ServerStatus::Building
            },
            created: at(self.now),
            memory_bytes: memory,
            provider: provider.to_string(),
            size: None,
            settings_hash: settings_hash.filter(|h| !h.is_empty()).map(str::to_string),
            fault: None,
            filling: false,
            joined: None,
            restarted: None,
            fenced: None,
            removing_since: None,
        })
    }

    /// Deletes VM `id`; its node, if still there, stops reporting.
    pub fn delete_vm(&mut self, id: &str) {
        let Some(vm) = self.vms.remove(id) else {
            return;
        };
        let t = self.now;
        if let Some(s) = self.vm_stats.get_mut(vm.stat) {
            s.deleted = Some(t);
        }
        // The VM's disk goes with it: local volumes of rows still at work are lost.
        let lost = self
            .local_volumes
            .iter()
            .filter(|(row, node)| {
                **node == vm.server.name
                    && self
                        .row_stats
                        .get(**row)
                        .is_some_and(|s| s.finished.is_none() && !s.lost)
            })
            .count();
        self.counters.volumes_lost += lost as u32;
        self.node_lost(&vm.server.name, t);
    }
}

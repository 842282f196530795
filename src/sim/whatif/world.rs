//! The in-memory world of a replay: a cluster whose scheduler decides with the
//! planner's scheduling model ([`crate::plan::sched`], as the simulated API server's
//! scheduler does), kubelets that run each pod for its duration, and clouds whose VMs
//! register as Ready nodes after a boot delay. Time is virtual: nothing here reads a
//! clock; the driver moves time forward with [`World::advance_to`].
//!
//! The cluster and the clouds are reached through the same traits as production
//! ([`crate::cluster::ClusterApi`], [`crate::cloud::CloudProvider`]; see [`super::api`]).
//!
//! A new node carries the labels the group config gives it
//! ([`crate::plan::sched::well_known_labels`]: the kubelet's os and arch, the provider's
//! instance type, zone and region, the group's labels, nodewright's ownership labels),
//! the settings hash and its hostname, which is what its rendered user data says; and
//! the group's taints plus the startup taint. Its allocatable is the group's shape
//! minus the group's `reserved` ([`allocatable_from_shape`]).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::report::Sample;
use super::workload::{PodKind, WorkloadRow};
use crate::cloud::{GroupShape, Server, ServerStatus};
use crate::config::{Config, NodeGroupConfig, ProviderKind};
use crate::plan::sched::template::{allocatable_from_shape, LABEL_HOSTNAME};
use crate::plan::sched::{well_known_labels, Model, Resources, Slot};
use crate::plan::{NodeInfo, PdbInfo, PodInfo, PodPhase, Taint, Toleration};
use crate::{LABEL_SETTINGS_HASH, STARTUP_TAINT_KEY};

/// Virtual milliseconds since the start of the replay.
pub type Ms = u64;

/// Virtual time 0: Monday 2025-01-06 00:00:00 UTC, so schedules in the config (buffers,
/// disruption budgets) see an ordinary week.
pub const EPOCH_UNIX_S: u64 = 1_736_121_600;

/// The namespace every workload pod lives in.
pub const NAMESPACE: &str = "default";

/// The instant `t` of the replay.
pub fn at(t: Ms) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(EPOCH_UNIX_S) + Duration::from_millis(t)
}

fn ms(d: Duration) -> Ms {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// How the world behaves beyond what the config says.
#[derive(Debug, Clone, PartialEq)]
pub struct WorldOptions {
    /// From a VM's creation to its node registering, Ready, with the startup taint.
    pub boot_delay: Duration,
    /// Per group, overriding `boot_delay`.
    pub group_boot_delay: BTreeMap<String, Duration>,
    /// The fraction of nodes (0 to 1) that go NotReady at some point within
    /// `failure_window` after they joined; which ones and when is drawn from `seed`.
    pub node_failures: f64,
    pub failure_window: Duration,
    pub seed: u64,
    /// A NotReady node's pods are taken off it this long after it went NotReady (the
    /// default `tolerationSeconds` of the `not-ready` NoExecute taint).
    pub not_ready_eviction: Duration,
}

impl Default for WorldOptions {
    fn default() -> Self {
        WorldOptions {
            boot_delay: Duration::from_secs(60),
            group_boot_delay: BTreeMap::new(),
            node_failures: 0.0,
            failure_window: Duration::from_secs(24 * 3600),
            seed: 1,
            not_ready_eviction: Duration::from_secs(300),
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum WorldError {
    #[error("group {group}: the what-if cannot tell {what} of a node ({why}); set nodeGroups[].resources.{key} (e.g. {example})")]
    UnknownShape {
        group: String,
        what: &'static str,
        why: String,
        key: &'static str,
        example: &'static str,
    },
    #[error("--boot-delay names group {0}, which the config does not have")]
    UnknownGroup(String),
    #[error("--node-failures must be between 0 and 1, not {0}")]
    BadFailureFraction(f64),
}

/// Nova's classic flavors, for OpenStack groups whose config says no size.
const KNOWN_FLAVORS: &[(&str, u64, u64)] = &[
    ("m1.tiny", 1, 512),
    ("m1.small", 1, 2048),
    ("m1.medium", 2, 4096),
    ("m1.large", 4, 8192),
    ("m1.xlarge", 8, 16384),
];

/// What the in-memory provider says of one new VM of `g`, from its settings as the real
/// providers read them (flavor, cores and memory, Kamatera's `cpu` and `ram`).
pub fn shape_of(g: &NodeGroupConfig) -> GroupShape {
    let mut shape = GroupShape::default();
    match g.provider {
        ProviderKind::Openstack => {
            if let Some(o) = &g.openstack {
                if let Some((_, cpus, mib)) = KNOWN_FLAVORS.iter().find(|f| f.0 == o.flavor) {
                    shape.cpu_milli = Some(cpus * 1000);
                    shape.memory = Some(mib << 20);
                }
                shape.instance_type = Some(o.flavor.clone());
                shape.zone = o.availability_zone.clone();
            }
        }
        ProviderKind::Proxmox => {
            if let Some(p) = &g.proxmox {
                shape.cpu_milli = p.cores.map(|c| u64::from(c) * 1000);
                shape.memory = p.memory.map(|m| m.as_u64());
                shape.instance_type = Some(p.template.to_string());
                if let [one] = p.nodes.as_slice() {
                    shape.zone = Some(one.clone());
                }
            }
        }
        ProviderKind::Kamatera => {
            if let Some(k) = &g.kamatera {
                shape.cpu_milli = k
                    .cpu
                    .trim_end_matches(|c: char| c.is_ascii_alphabetic())
                    .parse::<u64>()
                    .ok()
                    .map(|c| c * 1000);
                shape.memory = Some(k.ram.bytes());
                shape.instance_type = Some(format!("{}-{}", k.cpu, k.ram.0));
                shape.zone = Some(k.datacenter.clone());
            }
        }
    }
    shape
}

/// One node group as the world builds its nodes.
#[derive(Debug, Clone)]
pub struct GroupSpec {
    pub provider: ProviderKind,
    pub shape: GroupShape,
    pub allocatable: Resources,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub boot_delay: Ms,
    pub price: Option<f64>,
}

fn group_spec(
    config: &Config,
    g: &NodeGroupConfig,
    boot: Duration,
) -> Result<GroupSpec, WorldError> {
    let shape = shape_of(g);
    let allocatable = allocatable_from_shape(g, Some(&shape));
    let why = || match g.provider {
        ProviderKind::Openstack => format!(
            "flavor {} is not one of {}",
            g.openstack.as_ref().map_or("?", |o| o.flavor.as_str()),
            KNOWN_FLAVORS
                .iter()
                .map(|f| f.0)
                .collect::<Vec<_>>()
                .join(", ")
        ),
        ProviderKind::Proxmox => {
            "proxmox.cores / proxmox.memory are not set (the template's are not known offline)"
                .into()
        }
        ProviderKind::Kamatera => format!(
            "kamatera.cpu {} does not start with a CPU count",
            g.kamatera.as_ref().map_or("?", |k| k.cpu.as_str())
        ),
    };
    if allocatable.cpu == 0 {
        return Err(WorldError::UnknownShape {
            group: g.name.clone(),
            what: "the CPU",
            why: why(),
            key: "cpu",
            example: "cpu: 4",
        });
    }
    if allocatable.memory == 0 {
        return Err(WorldError::UnknownShape {
            group: g.name.clone(),
            what: "the memory",
            why: why(),
            key: "memory",
            example: "memory: 16Gi",
        });
    }
    let mut labels = well_known_labels(g, &config.cluster_name, Some(&shape));
    labels.insert(LABEL_SETTINGS_HASH.to_string(), g.settings_hash.clone());
    let mut taints: Vec<Taint> = g
        .taints
        .iter()
        .map(|t| Taint {
            key: t.key.clone(),
            value: (!t.value.is_empty()).then(|| t.value.clone()),
            effect: t.effect.as_str().to_string(),
        })
        .collect();
    taints.push(Taint {
        key: STARTUP_TAINT_KEY.to_string(),
        value: Some("true".into()),
        effect: "NoSchedule".into(),
    });
    Ok(GroupSpec {
        provider: g.provider,
        shape,
        allocatable,
        labels,
        taints,
        boot_delay: ms(boot),
        price: g.price,
    })
}

/// The workload pod of `row`, named `name`, created at `created`, not yet scheduled.
/// The workload file has no tolerations: a pod whose `node_selector` picks a group's
/// nodes tolerates that group's taints (as its real manifest would have to).
pub fn pod_info(
    row: &WorkloadRow,
    name: &str,
    created: SystemTime,
    groups: &BTreeMap<String, GroupSpec>,
) -> PodInfo {
    let mut p = PodInfo::new(NAMESPACE, name);
    if !row.node_selector.is_empty() {
        for g in groups.values() {
            if row
                .node_selector
                .iter()
                .all(|(k, v)| g.labels.get(k) == Some(v))
            {
                for t in g.taints.iter().filter(|t| t.key != STARTUP_TAINT_KEY) {
                    let tol = Toleration {
                        key: Some(t.key.clone()),
                        operator: Some("Equal".into()),
                        value: t.value.clone(),
                        effect: Some(t.effect.clone()),
                    };
                    if !p.tolerations.contains(&tol) {
                        p.tolerations.push(tol);
                    }
                }
            }
        }
    }
    p.requests.cpu = row.cpu_m;
    p.requests.memory = row.mem_mib.saturating_mul(1 << 20);
    if row.gpu > 0 {
        p.requests.set("nvidia.com/gpu", f64::from(row.gpu));
    }
    p.priority = row.priority;
    p.node_selector = row.node_selector.clone();
    p.labels.insert("app".into(), row.name.clone());
    let kind = match row.kind {
        PodKind::Deployment => Some("ReplicaSet"),
        PodKind::Job => Some("Job"),
        PodKind::Pod => None,
    };
    p.controller_kind = kind.map(str::to_string);
    p.controller_name = kind.map(|_| row.name.clone());
    p.created = created;
    p
}

/// What became of one row of the workload.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RowStat {
    pub first_start: Option<Ms>,
    pub finished: Option<Ms>,
    /// A bare pod evicted or killed with its node: nothing recreates it.
    pub lost: bool,
    /// Pods of this row made after one was evicted or killed.
    pub replacements: u32,
}

/// One VM's life, for node-hours.
#[derive(Debug, Clone, PartialEq)]
pub struct VmStat {
    pub group: String,
    pub created: Ms,
    pub deleted: Option<Ms>,
}

/// What the world counted while it ran.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Counters {
    /// Pods evicted through the Eviction API.
    pub evictions: u32,
    /// Evictions refused by a PodDisruptionBudget.
    pub evictions_refused: u32,
    /// Pods taken off a node that failed or was deleted under them.
    pub pods_killed: u32,
    /// Job pods that started their run again after an eviction or a failure.
    pub job_restarts: u32,
    /// Bare pods evicted or killed: lost.
    pub pods_lost: u32,
    /// Nodes that went NotReady on their own (`node_failures`).
    pub node_failures: u32,
}

struct LivePod {
    info: PodInfo,
    row: usize,
    /// The room count at which the scheduler last refused it.
    refused_at: Option<u64>,
    /// Run time still to do.
    remaining: Ms,
    /// When the current run started.
    started: Option<Ms>,
}

pub(super) struct Vm {
    pub server: Server,
    pub stat: usize,
}

struct NodeRec {
    info: NodeInfo,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    PodDone(String),
    Boot(String),
    Fail(String),
    NotReadyEviction(String),
}

struct Pdb {
    info: PdbInfo,
    allowed: i32,
}

/// Everything in the world, behind one lock.
pub(super) struct State {
    pub now: Ms,
    pub cluster_name: String,
    pub groups: BTreeMap<String, GroupSpec>,
    pub vms: BTreeMap<String, Vm>,
    pub vm_stats: Vec<VmStat>,
    pub counters: Counters,
    rows: Arc<[WorkloadRow]>,
    next_row: usize,
    row_stats: Vec<RowStat>,
    pods: BTreeMap<String, LivePod>,
    /// Pods that are not the workload's (image pullers).
    aux_pods: BTreeMap<String, PodInfo>,
    nodes: BTreeMap<String, NodeRec>,
    pdbs: Vec<Pdb>,
    events: BinaryHeap<Reverse<(Ms, u64, Event)>>,
    seq: u64,
    next_vm: u64,
    /// A pod arrived or room may have appeared: a scheduling round is due.
    dirty: bool,
    /// Room may have appeared (a pod left, a node joined or changed): pods refused
    /// before are tried again. Otherwise a round tries only pods not yet refused.
    room_changed: bool,
    /// Counts the times room changed; a refused pod remembers the count it was
    /// refused at.
    room_gen: u64,
    /// The last time a pod started or finished.
    pub last_pod_change: Ms,
    options: WorldOptions,
}

/// The world: a cheap handle on shared state.
#[derive(Clone)]
pub struct World {
    pub(super) state: Arc<Mutex<State>>,
}

/// Where the replay stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Every row has arrived.
    pub all_arrived: bool,
    pub running: usize,
    pub pending: usize,
    /// VMs created and not booted yet.
    pub booting: usize,
}

impl World {
    /// A world with no node yet, whose workload is `rows` (put in arrival order).
    pub fn new(
        config: &Config,
        mut rows: Vec<WorkloadRow>,
        options: WorldOptions,
    ) -> Result<World, WorldError> {
        rows.sort_by_key(|r| r.arrival_s);
        let rows: Arc<[WorkloadRow]> = rows.into();
        if !(0.0..=1.0).contains(&options.node_failures) {
            return Err(WorldError::BadFailureFraction(options.node_failures));
        }
        if let Some(g) = options
            .group_boot_delay
            .keys()
            .find(|g| config.group(g).is_none())
        {
            return Err(WorldError::UnknownGroup(g.clone()));
        }
        let mut groups = BTreeMap::new();
        for g in &config.node_groups {
            let boot = options
                .group_boot_delay
                .get(&g.name)
                .copied()
                .unwrap_or(options.boot_delay);
            groups.insert(g.name.clone(), group_spec(config, g, boot)?);
        }
        let state = State {
            now: 0,
            cluster_name: config.cluster_name.clone(),
            groups,
            vms: BTreeMap::new(),
            vm_stats: Vec::new(),
            counters: Counters::default(),
            row_stats: vec![RowStat::default(); rows.len()],
            rows,
            next_row: 0,
            pods: BTreeMap::new(),
            aux_pods: BTreeMap::new(),
            nodes: BTreeMap::new(),
            pdbs: Vec::new(),
            events: BinaryHeap::new(),
            seq: 0,
            next_vm: 0,
            dirty: false,
            room_changed: false,
            room_gen: 0,
            last_pod_change: 0,
            options,
        };
        Ok(World {
            state: Arc::new(Mutex::new(state)),
        })
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Plays every arrival and event up to and including `t`, scheduling pending pods
    /// after each instant at which something happened, then sets the clock to `t`.
    pub fn advance_to(&self, t: Ms) {
        self.lock().advance_to(t);
    }

    pub fn now(&self) -> Ms {
        self.lock().now
    }

    pub fn progress(&self) -> Progress {
        let s = self.lock();
        let running = s.pods.values().filter(|p| p.started.is_some()).count();
        Progress {
            all_arrived: s.next_row >= s.rows.len(),
            running,
            pending: s.pods.len() - running,
            booting: s
                .vms
                .values()
                .filter(|v| v.server.status == ServerStatus::Building)
                .count(),
        }
    }

    /// When the next arrival or event is due, if any.
    pub fn next_due(&self) -> Option<Ms> {
        self.lock().next_due()
    }

    /// Adds a PodDisruptionBudget (the workload file has none).
    pub fn add_pdb(&self, pdb: PdbInfo) {
        let allowed = pdb.disruptions_allowed;
        self.lock().pdbs.push(Pdb { info: pdb, allowed });
    }

    /// The state at this instant, for the timeline.
    pub fn sample(&self) -> Sample {
        let s = self.lock();
        let mut sample = Sample {
            t_s: s.now / 1000,
            ..Sample::default()
        };
        for g in s.groups.keys() {
            sample.nodes.insert(g.clone(), 0);
        }
        for vm in s.vms.values() {
            if let Some(g) = &vm.server.group {
                *sample.nodes.entry(g.clone()).or_default() += 1;
            }
        }
        for p in s.pods.values() {
            if p.started.is_none() {
                sample.pending_pods += 1;
            }
            sample.cpu_requested_m += p.info.requests.cpu;
            sample.mem_requested_bytes += p.info.requests.memory;
        }
        for n in s.nodes.values().filter(|n| n.info.ready) {
            sample.cpu_allocatable_m += n.info.allocatable.cpu;
            sample.mem_allocatable_bytes += n.info.allocatable.memory;
        }
        sample
    }

    /// The workload, in arrival order (the order of [`Self::row_stats`]).
    pub fn rows(&self) -> Arc<[WorkloadRow]> {
        self.lock().rows.clone()
    }

    pub fn row_stats(&self) -> Vec<RowStat> {
        self.lock().row_stats.clone()
    }

    pub fn vm_stats(&self) -> Vec<VmStat> {
        self.lock().vm_stats.clone()
    }

    pub fn counters(&self) -> Counters {
        self.lock().counters.clone()
    }

    pub fn groups(&self) -> BTreeMap<String, GroupSpec> {
        self.lock().groups.clone()
    }

    /// The node each workload pod runs on now, by pod name (for tests).
    pub fn placements(&self) -> BTreeMap<String, Option<String>> {
        self.lock()
            .pods
            .iter()
            .map(|(k, p)| (k.clone(), p.info.node_name.clone()))
            .collect()
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

/// The NodeResourcesFit "LeastAllocated" score: the free share of CPU and memory left
/// after placing the pod.
fn least_allocated(slot: &Slot<'_>, pod: &PodInfo) -> f64 {
    let free = |alloc: u64, used: u64| {
        if alloc > 0 {
            alloc.saturating_sub(used) as f64 / alloc as f64
        } else {
            0.0
        }
    };
    free(
        slot.allocatable.memory,
        slot.used.memory.saturating_add(pod.requests.memory),
    ) + free(
        slot.allocatable.cpu,
        slot.used.cpu.saturating_add(pod.requests.cpu),
    )
}

impl State {
    fn push(&mut self, t: Ms, e: Event) {
        self.seq += 1;
        self.events.push(Reverse((t, self.seq, e)));
    }

    fn next_arrival(&self) -> Option<Ms> {
        self.rows
            .get(self.next_row)
            .map(|r| r.arrival_s.saturating_mul(1000))
    }

    fn next_due(&self) -> Option<Ms> {
        let e = self.events.peek().map(|Reverse((t, _, _))| *t);
        match (self.next_arrival(), e) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    pub fn advance_to(&mut self, t: Ms) {
        // What changed at the current instant (an eviction, a taint off) comes first.
        self.schedule();
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
        }
        self.now = self.now.max(t);
        self.schedule();
    }

    fn arrive(&mut self, t: Ms) {
        let i = self.next_row;
        self.next_row += 1;
        let Some(row) = self.rows.get(i) else {
            return;
        };
        let name = format!("{}-{i}", row.name);
        let info = pod_info(row, &name, at(t), &self.groups);
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
        if vm.server.status != ServerStatus::Building {
            return;
        }
        vm.server.status = ServerStatus::Active;
        let name = vm.server.name.clone();
        let ordinal = vm.stat as u64;
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
            deleting: false,
            ready_changed: Some(at(t)),
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
        let info = pod_info(&row, &name, at(t), &self.groups);
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
    /// priority first, then age; the least allocated node that passes every check wins;
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
        for pod in pending {
            let mut best: Option<(f64, usize)> = None;
            for i in 0..model.slots.len() {
                let slot = &model.slots[i];
                // Resources first: cheap, and what most refusals are.
                if slot.allocatable.fits(&slot.used, &pod.requests) && model.check(pod, i).is_ok() {
                    let score = least_allocated(&model.slots[i], pod);
                    if best.is_none_or(|(s, _)| score > s) {
                        best = Some((score, i));
                    }
                }
            }
            match best {
                Some((_, i)) => {
                    placed.push((pod.name.clone(), model.slots[i].name.to_string()));
                    model.place(pod, i);
                }
                None => refused.push(pod.name.clone()),
            }
        }
        (placed, refused)
    }

    fn start(&mut self, pod: &str, node: String, t: Ms) {
        let Some(p) = self.pods.get_mut(pod) else {
            return;
        };
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
    pub fn evict(&mut self, namespace: &str, name: &str) -> crate::cluster::Eviction {
        use crate::cluster::Eviction;
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
        p.labels
            .insert(crate::LABEL_IMAGE_PULLER.to_string(), cluster.to_string());
        p.images = images.to_vec();
        p.created = at(self.now);
        if let Some(n) = self.nodes.get_mut(node) {
            n.info
                .images
                .extend(images.iter().map(|i| crate::plan::normalize_image(i)));
        }
        self.aux_pods.insert(name.clone(), p);
        name
    }

    /// A new VM of `group`, booting; named `<cluster>-<group>-<n>` in creation order so
    /// that a replay is the same every time.
    pub fn create_vm(&mut self, group: &str, provider: &str) -> Option<Server> {
        let spec = self.groups.get(group)?;
        let boot_at = self.now + spec.boot_delay;
        let memory = spec.shape.memory;
        self.next_vm += 1;
        let n = self.next_vm;
        let server = Server {
            id: format!("{provider}-{n}"),
            name: format!("{}-{group}-{n:05}", self.cluster_name),
            cluster: Some(self.cluster_name.clone()),
            group: Some(group.to_string()),
            status: ServerStatus::Building,
            created: at(self.now),
            memory_bytes: memory,
            provider: provider.to_string(),
        };
        self.vm_stats.push(VmStat {
            group: group.to_string(),
            created: self.now,
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

    /// Deletes VM `id`; its node, if still there, stops reporting.
    pub fn delete_vm(&mut self, id: &str) {
        let Some(vm) = self.vms.remove(id) else {
            return;
        };
        let t = self.now;
        if let Some(s) = self.vm_stats.get_mut(vm.stat) {
            s.deleted = Some(t);
        }
        self.node_lost(&vm.server.name, t);
    }
}

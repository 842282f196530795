//! The in-memory world of a replay: a cluster whose scheduler decides with the
//! planner's scheduling model ([`crate::plan::sched`], as the simulated API server's
//! scheduler does), kubelets that run each pod for its duration, and clouds whose VMs
//! register as Ready nodes after a boot delay. Time is virtual: nothing here reads a
//! clock; the driver moves time forward with [`World::advance_to`].
//!
//! The cluster and the clouds are reached through the same traits as production
//! ([`nodewright_core::cluster::ClusterApi`], [`crate::cloud::CloudProvider`]; see [`super::api`]).
//!
//! A new node carries the labels the group config gives it
//! ([`crate::plan::sched::well_known_labels`]: the kubelet's os and arch, the provider's
//! instance type, zone and region, the group's labels, nodewright's ownership labels),
//! the settings hash and its hostname, which is what its rendered user data says; and
//! the group's taints plus the startup taint. Its allocatable is the group's shape
//! minus the group's `reserved` ([`allocatable_from_shape`]).

use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::report::Sample;
use super::state::{Pdb, State};
use super::workload::{PodKind, WorkloadRow};
use crate::config::{Config, NodeGroupConfig, ProviderKind};
use crate::model::{GroupShape, PdbInfo, PodInfo, Resources, ServerStatus, Taint, Toleration};
use crate::plan::sched::template::allocatable_from_shape;
use crate::plan::sched::well_known_labels;
use nodewright_core::model::{LABEL_SETTINGS_HASH, STARTUP_TAINT_KEY};

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

pub(super) fn ms(d: Duration) -> Ms {
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

/// What the in-memory provider says of one new VM of `g`: the shape its provider's
/// settings imply without asking a cloud (flavor, cores and memory, Kamatera's `cpu` and
/// `ram`; see [`nodewright_core::cloud::registry::Settings::offline_shape`]).
pub fn shape_of(g: &NodeGroupConfig) -> GroupShape {
    g.provider_settings()
        .map(|s| s.as_settings().offline_shape())
        .unwrap_or_default()
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
    let why = || {
        g.provider_settings()
            .map_or_else(|| "?".to_string(), |s| s.as_settings().unknown_shape())
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
    p.images.extend(row.image.iter().cloned());
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
    /// Warm VMs started by a scale-up instead of a create.
    pub warm_starts: u32,
    /// Boot time those starts did not wait for (create or clone), summed.
    pub warm_wait_saved_ms: u64,
    /// Local volumes whose node's VM was deleted while their pod still had work to do:
    /// the data is gone and the pod can never run again.
    pub volumes_lost: u32,
}

/// The world: a cheap handle on shared state.
#[derive(Clone)]
pub struct World {
    pub(super) state: Arc<Mutex<State>>,
}

/// Pods of one workload name by state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PodCount {
    pub running: u32,
    pub pending: u32,
    pub finished: u32,
}

/// Nodes and pods at one instant.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Census {
    pub nodes: u32,
    pub ready: u32,
    pub cordoned: u32,
    pub running: u32,
    pub pending: u32,
    pub finished: u32,
    pub by_name: BTreeMap<String, PodCount>,
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
            stuck: BTreeSet::new(),
            local_volumes: BTreeMap::new(),
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

    /// The name VM `id` got (the world names VMs in creation order, whatever name the
    /// create asked for, so that a replay is the same every time).
    pub fn vm_name(&self, id: &str) -> Option<String> {
        self.lock().vms.get(id).map(|v| v.server.name.clone())
    }

    /// Nodes and pods as they are now.
    pub fn census(&self) -> Census {
        let s = self.lock();
        let mut c = Census::default();
        for n in s.nodes.values() {
            c.nodes += 1;
            c.ready += u32::from(n.info.ready);
            c.cordoned += u32::from(n.info.unschedulable);
        }
        for p in s.pods.values() {
            let Some(row) = s.rows.get(p.row) else {
                continue;
            };
            let e = c.by_name.entry(row.name.clone()).or_default();
            if p.started.is_some() {
                c.running += 1;
                e.running += 1;
            } else {
                c.pending += 1;
                e.pending += 1;
            }
        }
        for (row, stat) in s.rows.iter().zip(&s.row_stats) {
            if stat.finished.is_some() {
                c.finished += 1;
                c.by_name.entry(row.name.clone()).or_default().finished += 1;
            }
        }
        c
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

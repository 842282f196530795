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
use std::time::Duration;

use super::report::Sample;
pub(super) use super::spec::ms;
pub use super::spec::{
    at, pod_info, Counters, GroupSpec, Ms, RowStat, VmStat, WorldOptions, EPOCH_UNIX_S, NAMESPACE,
};
use super::state::{Pdb, State};
use super::workload::WorkloadRow;
use crate::config::{Config, NodeGroupConfig};
use crate::model::{GroupShape, PdbInfo, ServerStatus, Taint};
use crate::plan::sched::template::allocatable_from_shape;
use crate::plan::sched::well_known_labels;
use nodewright_core::model::{LABEL_SETTINGS_HASH, STARTUP_TAINT_KEY};

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
        rows.sort_by_key(|r| r.arrival_ms);
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
            empty_log: Vec::new(),
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

    /// Node-hours of Ready nodes running no workload pod, from the start to `end`.
    pub fn empty_node_hours(&self, end: Ms) -> f64 {
        let s = self.lock();
        let log = &s.empty_log;
        let mut node_ms: u128 = 0;
        for (i, (since, count)) in log.iter().enumerate() {
            let until = log.get(i + 1).map_or(end, |(next, _)| *next).min(end);
            node_ms += u128::from(*count) * u128::from(until.saturating_sub((*since).min(end)));
        }
        node_ms as f64 / 3_600_000.0
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

//! The vocabulary of the in-memory world: virtual time, the options and group specs it
//! is built from, the workload pods it makes and what it counts. A leaf: the world
//! ([`super::world`]) and its state (`super::state`) both speak it, so neither imports
//! the other for it.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::scoring::Scoring;
use super::workload::{PodKind, WorkloadRow};
use crate::config::ProviderKind;
use crate::model::{GroupShape, PodInfo, Resources, Taint, Toleration};
use nodewright_core::model::STARTUP_TAINT_KEY;

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
    /// How the cluster's scheduler scores nodes (NodeResourcesFit's strategy).
    pub scoring: Scoring,
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
            scoring: Scoring::default(),
        }
    }
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
    /// When its node registered Ready (the end of its boot); None while booting.
    pub ready: Option<Ms>,
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
    /// Job pods evicted (Eviction API) while running: their run starts again.
    pub running_jobs_evicted: u32,
}

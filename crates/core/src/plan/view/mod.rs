//! Derived facts the steps share: which nodes and VMs are ours, what state each VM is
//! in, what a new node of each group looks like, the scheduling model of the cluster
//! and where the pending pods could go. Computed once per plan.
//!
//! - `members`: which VMs are ours and their [`ServerState`].
//! - `groups`: what a new node of each group offers ([`GroupInfo`]).
//! - `model`: the scheduling model the steps copy.
//! - `pending`: where the pods the scheduler could not place could go ([`Pending`]).
//!
//! This file holds the [`View`] itself, its making, and the counts the steps ask it.

use std::cell::OnceCell;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::sched::index::{FxHashMap, FxHashSet};
use super::sched::Model;
use super::snapshot::Snapshot;
use crate::config::Config;
use crate::model::{
    HeldVolume, KubeVersion, NodeInfo, PodInfo, Resources, Server, ServerStatus, LABEL_CLUSTER,
    LABEL_GROUP,
};

mod groups;
mod members;
mod model;
mod pending;

pub use groups::GroupInfo;
pub use members::{Member, ServerState};
pub use pending::Pending;

pub struct View<'a> {
    pub config: &'a Config,
    pub now: SystemTime,
    pub members: Vec<Member<'a>>,
    /// VMs of ours parked in a warm pool: never members, never capacity.
    pub warm: Vec<&'a Server>,
    pub pods_by_node: BTreeMap<&'a str, Vec<&'a PodInfo>>,
    /// Pods the scheduler could not place that some node or group could host.
    pub unschedulable: Vec<&'a PodInfo>,
    pub pods: &'a [Arc<PodInfo>],
    pub nodes: &'a [NodeInfo],
    /// Every VM the providers listed, ours or not, of known groups or not.
    pub servers: &'a [Server],
    pub pdbs: &'a [crate::model::PdbInfo],
    pub volume_attachments: &'a [(String, String)],
    /// Bound volumes only one node can reach, by that node, pod or no pod (see
    /// [`crate::plan::volumes::held_volumes`]).
    pub held_volumes: BTreeMap<String, Vec<HeldVolume>>,
    pub group_backoff: &'a BTreeMap<String, SystemTime>,
    /// Actions held back on the objects they keep failing on (see [`crate::plan::backoff`]).
    pub action_backoff: &'a BTreeMap<String, SystemTime>,
    /// Groups whose provider could not be listed this cycle, with the error.
    pub frozen: BTreeMap<&'a str, &'a str>,
    /// VMs per frozen group as their provider's last good listing showed them.
    pub frozen_sizes: &'a BTreeMap<String, u32>,
    /// Nodes of ours (by their labels) in a frozen group: their VMs are not in the
    /// snapshot, so they are no members, but the cluster shows they are there. Their
    /// room counts as capacity, so an outage of one provider does not make the others
    /// scale up for the free-capacity targets.
    pub frozen_nodes: Vec<&'a NodeInfo>,
    pub groups: BTreeMap<&'a str, GroupInfo>,
    pub pending: Pending<'a>,
    pub last_node_deleted: Option<SystemTime>,
    pub last_disruption_failure: Option<SystemTime>,
    /// When VMs were last removed for not joining (see [`Snapshot::not_joined_removed`]).
    pub not_joined_removed: &'a [SystemTime],
    /// The API server's version (see [`Snapshot::server_version`]), when readable.
    pub server_version: Option<KubeVersion>,
    /// [`Self::model`], built once per plan and cloned for each step that needs it.
    base_model: Model<'a>,
    /// [`Self::requested_on`] of every node with pods.
    requested: BTreeMap<&'a str, Resources>,
    /// [`Self::active_size`] of every group, counted on first use.
    active_sizes: OnceCell<BTreeMap<String, u32>>,
    /// [`Self::free_total`], summed on first use (steps ask it once per candidate node).
    free_totals: OnceCell<(i64, i64)>,
    /// Scale-down's screening, once per plan: the disrupt and mark-unneeded steps and
    /// the report of kept nodes read it.
    pub(in crate::plan) unneeded: OnceCell<crate::plan::unremovable::Screened>,
}

impl<'a> View<'a> {
    pub fn new(s: &'a Snapshot, config: &'a Config, now: SystemTime) -> View<'a> {
        let (members, warm) = members::ours(s, config, now);

        let mut frozen = BTreeMap::new();
        for g in &config.node_groups {
            if let Some(err) = s.unavailable_providers.get(g.provider.as_str()) {
                frozen.insert(g.name.as_str(), err.as_str());
            }
        }

        let frozen_nodes: Vec<&NodeInfo> = s
            .nodes
            .iter()
            .filter(|n| n.labels.get(LABEL_CLUSTER) == Some(&config.cluster_name))
            .filter(|n| {
                n.labels
                    .get(LABEL_GROUP)
                    .is_some_and(|g| frozen.contains_key(g.as_str()))
            })
            .collect();

        // Hashed first, sorted once: far cheaper than a tree insert per pod.
        let mut by_node: FxHashMap<&str, Vec<&PodInfo>> = FxHashMap::default();
        let mut unschedulable = Vec::new();
        for pod in s.pods.iter().map(Arc::as_ref) {
            if pod.is_terminal() {
                continue;
            }
            match &pod.node_name {
                Some(node) => by_node.entry(node.as_str()).or_default().push(pod),
                // DaemonSet pods wait for their own node, never for a new one.
                None if pod.unschedulable && !pod.deleting && !pod.is_daemonset() => {
                    unschedulable.push(pod)
                }
                None => {}
            }
        }

        let pods_by_node: BTreeMap<&str, Vec<&PodInfo>> = by_node.into_iter().collect();
        let requested = pods_by_node
            .iter()
            .map(|(&node, pods)| {
                let mut r = Resources::default();
                for p in pods {
                    r.add(&p.requests);
                }
                (node, r)
            })
            .collect();

        let groups = groups::group_infos(s, config, &members, &frozen_nodes);
        let new_nodes = super::volumes::new_nodes(config, &s.group_shapes);
        let held_volumes = super::volumes::held_volumes(&s.volumes, &s.nodes, &new_nodes);

        let mut view = View {
            config,
            now,
            members,
            warm,
            pods_by_node,
            unschedulable: Vec::new(),
            pods: &s.pods,
            nodes: &s.nodes,
            servers: &s.servers,
            pdbs: &s.pdbs,
            volume_attachments: &s.volume_attachments,
            held_volumes,
            group_backoff: &s.group_backoff,
            action_backoff: &s.action_backoff,
            frozen,
            frozen_sizes: &s.frozen_sizes,
            frozen_nodes,
            groups,
            pending: Pending::default(),
            last_node_deleted: s.last_node_deleted,
            last_disruption_failure: s.last_disruption_failure,
            not_joined_removed: &s.not_joined_removed,
            server_version: s.server_version.as_deref().and_then(KubeVersion::parse),
            base_model: Model::new(),
            requested,
            active_sizes: OnceCell::new(),
            free_totals: OnceCell::new(),
            unneeded: OnceCell::new(),
        };
        view.base_model = view.build_model(&unschedulable);
        view.pending = view.place_pending(unschedulable.clone());
        let unhostable: FxHashSet<*const PodInfo> = view
            .pending
            .unhostable
            .iter()
            .map(|(u, _)| *u as *const PodInfo)
            .collect();
        view.unschedulable = unschedulable
            .into_iter()
            .filter(|p| !unhostable.contains(&(*p as *const PodInfo)))
            .collect();
        view
    }

    /// A PodDisruptionBudget that allows no disruption of `pod` right now, if any.
    pub fn blocking_pdb(&self, pod: &PodInfo) -> Option<&'a crate::model::PdbInfo> {
        self.pdbs
            .iter()
            .find(|b| b.disruptions_allowed <= 0 && b.selects(pod))
    }

    /// Until when `group` is left alone after failures, if it is now.
    pub fn backed_off_until(&self, group: &str) -> Option<SystemTime> {
        self.group_backoff
            .get(group)
            .copied()
            .filter(|until| *until > self.now)
    }

    pub fn group(&self, group: &str) -> Option<&GroupInfo> {
        self.groups.get(group)
    }

    pub fn pods_on(&self, node: &str) -> &[&'a PodInfo] {
        self.pods_by_node
            .get(node)
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    /// Sum of requests of the (non-terminal) pods on `node`.
    pub fn requested_on(&self, node: &str) -> Resources {
        self.requested.get(node).cloned().unwrap_or_default()
    }

    pub fn free_on(&self, node: &NodeInfo) -> Resources {
        let mut f = node.allocatable.clone();
        f.sub(&self.requested_on(&node.name));
        f
    }

    pub fn schedulable(&self) -> impl Iterator<Item = &Member<'a>> {
        self.members.iter().filter(|m| m.schedulable())
    }

    pub fn provisioning(&self) -> impl Iterator<Item = &Member<'a>> {
        self.members
            .iter()
            .filter(|m| m.state == ServerState::Provisioning)
    }

    /// Managed nodes that count as capacity: schedulable ones, those NotReady for less
    /// than `health.notReadyGrace` (a blip does not call for a new node), and the Ready,
    /// schedulable Nodes of a frozen group (its provider's outage takes no room away).
    pub fn capacity_nodes(&self) -> impl Iterator<Item = &'a NodeInfo> + '_ {
        let grace = self.config.health.not_ready_grace;
        self.members
            .iter()
            .filter(move |m| {
                m.schedulable()
                    || (m.state == ServerState::Joined
                        && m.node.is_some_and(|n| {
                            !n.ready
                                && !n.unschedulable
                                && !n.deleting
                                && n.ready_changed.is_some_and(|t| self.age(t) < grace)
                        }))
            })
            .filter_map(|m| m.node)
            .chain(
                self.frozen_nodes
                    .iter()
                    .copied()
                    .filter(|n| n.ready && !n.unschedulable && !n.deleting),
            )
    }

    /// Free (memory, CPU milli) on managed nodes that count as capacity minus what the
    /// pending pods that will land there or on VMs on their way ask for; signed, so a
    /// shortfall shows. Pods that need new nodes (or fit nowhere) are not taken off:
    /// they will not use this room, and the room they need is not counted either.
    pub fn free_total(&self) -> (i64, i64) {
        // Not asked before `pending` is final (the end of `View::new`).
        *self.free_totals.get_or_init(|| {
            let mut mem = 0i64;
            let mut cpu = 0i64;
            for n in self.capacity_nodes() {
                let used = self.requested_on(&n.name);
                mem += n.allocatable.memory as i64 - used.memory as i64;
                cpu += n.allocatable.cpu as i64 - used.cpu as i64;
            }
            for (p, _) in self
                .pending
                .on_nodes
                .iter()
                .chain(&self.pending.on_provisioning)
            {
                mem -= p.requests.memory as i64;
                cpu -= p.requests.cpu as i64;
            }
            (mem, cpu)
        })
    }

    /// (memory, CPU milli) that VMs still provisioning will bring.
    pub fn provisioning_capacity(&self) -> (i64, i64) {
        let mut mem = 0i64;
        let mut cpu = 0i64;
        for m in self.provisioning() {
            if let Some(g) = self.group(&m.group.name) {
                let u = g.of_size(m.size()).usable();
                mem += u.memory as i64;
                cpu += u.cpu as i64;
            }
        }
        (mem, cpu)
    }

    /// All VMs of a group that count against `maxSize`: running, provisioning and warm
    /// (parked or filling) alike; only those the cloud is already deleting are left out.
    pub fn group_size(&self, group: &str) -> u32 {
        let members = self
            .members
            .iter()
            .filter(|m| m.group.name == group && m.state != ServerState::Deleting)
            .count();
        let warm = self
            .warm_in(group)
            .filter(|s| s.status != ServerStatus::Deleting)
            .count();
        (members + warm) as u32
    }

    /// The warm VMs of `group` (parked or filling).
    pub fn warm_in<'s>(&'s self, group: &'s str) -> impl Iterator<Item = &'a Server> + 's {
        self.warm
            .iter()
            .copied()
            .filter(move |s| s.group.as_deref() == Some(group))
    }

    /// VMs of a group that count toward `minSize`: not failed and not cordoned for removal.
    pub fn active_size(&self, group: &str) -> u32 {
        let sizes = self.active_sizes.get_or_init(|| {
            let mut sizes = BTreeMap::new();
            for m in self
                .members
                .iter()
                .filter(|m| {
                    matches!(
                        m.state,
                        ServerState::Provisioning | ServerState::Joined | ServerState::Vanished
                    )
                })
                .filter(|m| !m.cordoned())
            {
                *sizes.entry(m.group.name.clone()).or_insert(0) += 1;
            }
            sizes
        });
        sizes.get(group).copied().unwrap_or(0)
    }

    pub fn age(&self, t: SystemTime) -> Duration {
        self.now.duration_since(t).unwrap_or_default()
    }
}

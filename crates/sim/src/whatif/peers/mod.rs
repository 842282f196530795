//! Peer policies: other autoscalers' decisions over the same world, so that a what-if
//! compares nodewright with what its users would otherwise run, on the same workload,
//! nodes, boot delays and scheduler (`simulate --workload … --policy ca-like`).
//!
//! They are small **approximations** written from the peers' documented behaviour and
//! defaults, not ports: [`ca`] (Cluster Autoscaler) and [`karpenter`] (Karpenter). Both
//! see the world as a copy ([`View`]) and act on it directly (create a VM, taint, evict,
//! delete), every [`SCAN`] of virtual time; both use the config's node groups only
//! (their size, `minSize`/`maxSize`, labels, taints and `price`), none of nodewright's
//! own settings (free targets, buffers, budgets, timers). Nodes join without
//! nodewright's startup taint, which no peer removes.

pub mod ca;
pub mod karpenter;

use std::collections::BTreeMap;
use std::sync::Arc;

use super::replay::{finish, horizon, stop, Replay, SAMPLE_EVERY};
use super::report::{Mark, Report, Timeline};
use super::state::State;
use super::workload::{PodKind, WorkloadRow};
use super::world::{Ms, World, WorldError, WorldOptions, NAMESPACE};
use crate::config::{Config, NodeGroupConfig};
use crate::model::{NodeInfo, PodInfo, Resources, ServerStatus, Taint};
use crate::plan::sched::{group_template, static_check, Model, Slot, SlotKind};
use nodewright_core::cluster::Eviction;
use nodewright_core::model::STARTUP_TAINT_KEY;

/// How often a peer looks at the world: Cluster Autoscaler's default `scan-interval`
/// (10 s), and about Karpenter's batching window (1 s idle, 10 s at most).
pub const SCAN: Ms = 10_000;

/// Booting VMs' slots in a model are numbered from here, new nodes' from 0.
const BOOTING_SLOTS: usize = 1_000_000;

/// Who decides in a what-if.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    /// nodewright's own loop (the `Reconciler`), with the config as given.
    #[default]
    Nodewright,
    /// [`ca::CaLike`].
    CaLike,
    /// [`karpenter::KarpenterLike`].
    KarpenterLike,
}

impl Policy {
    /// From `--policy`: `nodewright`, `ca-like` or `karpenter-like`.
    pub fn parse(text: &str) -> Option<Policy> {
        match text.trim().to_ascii_lowercase().as_str() {
            "nodewright" => Some(Policy::Nodewright),
            "ca-like" | "ca" => Some(Policy::CaLike),
            "karpenter-like" | "karpenter" => Some(Policy::KarpenterLike),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Policy::Nodewright => "nodewright",
            Policy::CaLike => "ca-like",
            Policy::KarpenterLike => "karpenter-like",
        }
    }
}

/// One node group as a peer sees it.
#[derive(Debug, Clone)]
pub struct Group {
    pub name: String,
    pub provider: String,
    pub min: u32,
    pub max: u32,
    /// `price` from the config; without one, the node's CPU cores stand in, so that a
    /// smaller node is still the cheaper one.
    pub price: f64,
    pub allocatable: Resources,
    /// A new node of the group, for the scheduling model.
    pub template: Slot<'static>,
    config: NodeGroupConfig,
    labels: BTreeMap<String, String>,
}

impl Group {
    /// A node of this group that does not exist yet (or is booting), the `n`-th such
    /// slot of a model (names must differ within one model).
    pub fn slot(&self, kind: SlotKind, n: usize) -> Slot<'static> {
        group_template(
            &self.config,
            &self.labels,
            self.allocatable.clone(),
            kind,
            n,
        )
    }

    /// Whether `pod` could run on an empty node of this group.
    pub fn hosts(&self, pod: &PodInfo) -> bool {
        self.allocatable.fits(&Resources::default(), &pod.requests)
            && static_check(pod, &self.template, false).is_ok()
    }
}

/// The config's groups as the world builds their nodes.
pub fn groups(config: &Config, world: &World) -> Vec<Group> {
    let specs = world.groups();
    config
        .node_groups
        .iter()
        .filter_map(|g| {
            let spec = specs.get(&g.name)?;
            let template = group_template(
                g,
                &spec.labels,
                spec.allocatable.clone(),
                SlotKind::New(g.name.clone()),
                0,
            );
            Some(Group {
                name: g.name.clone(),
                provider: g.provider.as_str().to_string(),
                min: g.min_size,
                max: g.max_size,
                price: spec.price.unwrap_or(spec.allocatable.cpu as f64 / 1000.0),
                allocatable: spec.allocatable.clone(),
                template,
                config: g.clone(),
                labels: spec.labels.clone(),
            })
        })
        .collect()
}

/// A copy of the world at one instant, as a peer reads it from the API server and the
/// cloud.
#[derive(Debug, Clone, Default)]
pub struct View {
    /// Every node, in name order.
    pub nodes: Vec<NodeInfo>,
    /// Node name → (VM id, group).
    pub vm_of: BTreeMap<String, (String, String)>,
    /// Pods bound to a node and running.
    pub running: Vec<PodInfo>,
    /// What each running pod is (by pod name): a bare pod has no controller to make it
    /// again.
    pub kinds: BTreeMap<String, PodKind>,
    /// Pods the scheduler could not place.
    pub pending: Vec<PodInfo>,
    /// Pods not running: those the scheduler could not place and those it has not
    /// looked at yet (just made, or evicted a moment ago).
    pub unstarted: usize,
    /// VMs booting (created, no node yet), per group.
    pub booting: BTreeMap<String, u32>,
    /// VMs per group, booting ones included.
    pub size: BTreeMap<String, u32>,
}

impl View {
    pub(super) fn of(s: &State) -> View {
        let mut v = View {
            nodes: s.nodes.values().map(|n| n.info.clone()).collect(),
            ..View::default()
        };
        for (id, vm) in &s.vms {
            let Some(group) = vm.server.group.clone() else {
                continue;
            };
            if vm.server.status == ServerStatus::Stopped {
                continue;
            }
            *v.size.entry(group.clone()).or_default() += 1;
            if vm.server.status == ServerStatus::Building {
                *v.booting.entry(group.clone()).or_default() += 1;
            }
            v.vm_of.insert(vm.server.name.clone(), (id.clone(), group));
        }
        for p in s.pods.values() {
            if p.started.is_some() {
                v.running.push(p.info.clone());
                if let Some(row) = s.rows.get(p.row) {
                    v.kinds.insert(p.info.name.clone(), row.kind);
                }
            } else {
                v.unstarted += 1;
                if p.info.unschedulable {
                    v.pending.push(p.info.clone());
                }
            }
        }
        v
    }

    /// The scheduling model of the cluster as it is, with a slot for each booting VM
    /// (capacity that is coming) after the nodes.
    pub fn model<'a>(&'a self, groups: &[Group]) -> Model<'a> {
        let mut m = Model::of_cluster(&self.nodes, &self.running);
        for g in groups {
            for n in 0..self.booting.get(&g.name).copied().unwrap_or(0) {
                let kind = SlotKind::Provisioning(g.name.clone());
                m.add_slot(g.slot(kind, BOOTING_SLOTS + n as usize));
            }
        }
        m
    }

    /// The running pods on `node`.
    pub fn pods_on<'a>(&'a self, node: &'a str) -> impl Iterator<Item = &'a PodInfo> + 'a {
        self.running
            .iter()
            .filter(move |p| p.node_name.as_deref() == Some(node))
    }

    /// Whether a pod on `node` has no controller (evicting it loses it).
    pub fn has_bare_pod(&self, node: &str) -> bool {
        self.pods_on(node)
            .any(|p| self.kinds.get(&p.name) == Some(&PodKind::Pod))
    }
}

/// What one peer cycle did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Step {
    /// Action kinds, as in the report (`scale-up`, `delete-node`, …), with how many.
    pub actions: Vec<&'static str>,
    /// VMs created, per group.
    pub created: BTreeMap<String, u32>,
    /// Nodes deleted.
    pub removed: u32,
}

/// A peer: looks at the world every [`SCAN`] and acts on it.
pub trait Peer {
    fn cycle(&mut self, world: &World, groups: &[Group], t: Ms) -> Step;
}

// --- what a peer does to the world, as the API server and the cloud would take it ---

/// Creates `n` VMs of `g`.
pub(super) fn create(s: &mut State, g: &Group, n: u32) -> u32 {
    (0..n)
        .filter(|_| s.create_vm(&g.name, &g.provider).is_some())
        .count() as u32
}

/// Puts `taint` on `node` (once) or takes it off.
pub(super) fn set_taint(s: &mut State, node: &str, taint: &Taint, on: bool) {
    let Some(n) = s.node_mut(node) else {
        return;
    };
    let had = n.taints.iter().any(|t| t.key == taint.key);
    if on && !had {
        n.taints.push(taint.clone());
    } else if !on && had {
        n.taints.retain(|t| t.key != taint.key);
        s.room();
    }
}

/// Evicts every running workload pod of `node`; at the first refusal (a
/// PodDisruptionBudget) stops and says which pod.
pub(super) fn drain(s: &mut State, node: &str) -> Result<(), String> {
    let names: Vec<String> = s
        .pods
        .iter()
        .filter(|(_, p)| p.started.is_some() && p.info.node_name.as_deref() == Some(node))
        .map(|(k, _)| k.clone())
        .collect();
    for name in names {
        if let Eviction::Blocked(why) = s.evict(NAMESPACE, &name) {
            return Err(format!("{name}: {why}"));
        }
    }
    Ok(())
}

/// Deletes the Node object and its VM.
pub(super) fn delete(s: &mut State, node: &str) {
    let id = s
        .vms
        .iter()
        .find(|(_, v)| v.server.name == node)
        .map(|(id, _)| id.clone());
    s.delete_node(node);
    if let Some(id) = id {
        s.delete_vm(&id);
    }
}

/// Drains `node` under `taint` (NoSchedule) and deletes it; on a refused eviction the
/// taint comes off again and the node stays. True when it was deleted.
pub(super) fn drain_and_delete(s: &mut State, node: &str, taint: &Taint) -> bool {
    set_taint(s, node, taint, true);
    if drain(s, node).is_err() {
        set_taint(s, node, taint, false);
        return false;
    }
    delete(s, node);
    true
}

/// Nodes' `requested / allocatable` share: the larger of CPU and memory.
pub fn utilization(slot: &Slot<'_>) -> f64 {
    let share = |used: u64, alloc: u64| {
        if alloc == 0 {
            0.0
        } else {
            used as f64 / alloc as f64
        }
    };
    share(slot.used.cpu, slot.allocatable.cpu).max(share(slot.used.memory, slot.allocatable.memory))
}

/// Replays `rows` with `policy` deciding instead of nodewright (see [`ca`] and
/// [`karpenter`]): the same world, scheduler and figures as [`super::replay::replay`].
pub fn replay_peer(
    config: Arc<Config>,
    label: &str,
    rows: Vec<WorkloadRow>,
    options: &WorldOptions,
    policy: Policy,
) -> Result<Replay, WorldError> {
    let world = World::new(&config, rows, options.clone())?;
    for g in world.lock().groups.values_mut() {
        g.taints.retain(|t| t.key != STARTUP_TAINT_KEY);
    }
    let groups = groups(&config, &world);
    let mut peer: Box<dyn Peer> = match policy {
        Policy::CaLike => Box::new(ca::CaLike::default()),
        Policy::KarpenterLike | Policy::Nodewright => Box::new(karpenter::KarpenterLike::default()),
    };
    let mut report = Report {
        config: label.to_string(),
        pods: u32::try_from(world.rows().len()).unwrap_or(u32::MAX),
        ..Report::default()
    };
    let mut timeline = Timeline::default();
    // Every group starts at its minimum size, as its cloud-side group would.
    {
        let mut s = world.lock();
        for g in &groups {
            let made = create(&mut s, g, g.min);
            if made > 0 {
                timeline.marks.push((
                    0,
                    Mark::ScaleUp {
                        group: g.name.clone(),
                        count: made,
                    },
                ));
            }
        }
    }
    let horizon = horizon(&world);
    let (mut t, mut last_action, mut peak): (Ms, Ms, u32) = (0, 0, 0);
    let mut last_sample: Option<Ms> = None;
    let end = loop {
        world.advance_to(t);
        if let Some(end) = stop(&world, t, last_action, horizon) {
            break end;
        }
        let step = peer.cycle(&world, &groups, t);
        world.advance_to(t);
        report.cycles += 1;
        if !step.actions.is_empty() {
            last_action = t;
        }
        for kind in &step.actions {
            *report.actions.entry(kind.to_string()).or_default() += 1;
        }
        for (group, count) in step.created {
            timeline
                .marks
                .push((t / 1000, Mark::ScaleUp { group, count }));
        }
        if step.removed > 0 {
            timeline.marks.push((
                t / 1000,
                Mark::Removal {
                    nodes: step.removed,
                },
            ));
        }
        let sample = world.sample();
        peak = peak.max(sample.nodes.values().sum());
        if last_sample.is_none_or(|s| t >= s + SAMPLE_EVERY) {
            timeline.samples.push(sample);
            last_sample = Some(t);
        }
        t += SCAN;
    };
    Ok(finish(&world, &config, report, timeline, peak, end))
}

#[cfg(test)]
mod tests;

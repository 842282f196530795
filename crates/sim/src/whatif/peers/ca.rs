//! A Cluster-Autoscaler-like policy: an approximation of Cluster Autoscaler's loop with
//! its documented defaults, written from its FAQ and flags, not from its code.
//!
//! Every [`SCAN`] (`--scan-interval` 10 s):
//! - **Scale-up**: the pods the scheduler marked unschedulable that fit neither an
//!   existing node nor a booting one (CA counts upcoming nodes) are estimated per group
//!   with first-fit-decreasing bin packing onto new nodes (the binpacking estimator:
//!   pods sorted by their CPU plus memory share of a node, largest first), at most up to
//!   `maxSize`. One group grows per loop, the one the expander picks: `least-waste`
//!   (the least idle CPU plus memory share on the new nodes; then the most pods helped;
//!   then the group name). CA's default expander is `random`; `least-waste` is the
//!   common choice and keeps a replay the same every time. A loop that scaled up does not
//!   scale down.
//! - **Unneeded nodes**: a Ready, uncordoned node above its group's `minSize` is
//!   unneeded when the larger of its requested CPU and memory shares is under
//!   `scale-down-utilization-threshold` (0.5) and its pods all fit on the other nodes
//!   (simulated one node after another, each removed node's pods placed for the next);
//!   a bare pod (no controller) keeps a node. Unneeded nodes carry the soft taint
//!   `DeletionCandidateOfClusterAutoscaler` (PreferNoSchedule), taken off when they stop
//!   being unneeded.
//! - **Scale-down**, unless in cooldown (`scale-down-delay-after-add` 10 min after a
//!   scale-up, `scale-down-delay-after-delete` one scan after a deletion,
//!   `scale-down-delay-after-failure` 3 min after a refused drain): nodes unneeded for
//!   `scale-down-unneeded-time` (10 min) go; empty ones up to `max-empty-bulk-delete`
//!   (10) at once, otherwise one non-empty node, tainted `ToBeDeletedByClusterAutoscaler`
//!   (NoSchedule) and drained through the Eviction API (running Jobs included; a
//!   PodDisruptionBudget refusal aborts it).
//!
//! Not modelled: `balance-similar-node-groups`, `max-node-provision-time`, scale-up
//! backoff, the pod's non-zero default requests, graceful termination (evicted pods
//! leave at once), the soft-taint bulk limits.

use std::collections::BTreeMap;

use super::{create, drain_and_delete, set_taint, utilization, Group, Peer, Step, View, SCAN};
use crate::model::{PodInfo, Resources, Taint};
use crate::plan::sched::{first_fit, first_fit_all, Model, SlotKind};
use crate::whatif::world::{Ms, World};

pub const UNNEEDED_TIME: Ms = 600_000;
pub const UTILIZATION_THRESHOLD: f64 = 0.5;
pub const DELAY_AFTER_ADD: Ms = 600_000;
pub const DELAY_AFTER_FAILURE: Ms = 180_000;
pub const MAX_EMPTY_BULK_DELETE: usize = 10;

fn candidate_taint() -> Taint {
    Taint {
        key: "DeletionCandidateOfClusterAutoscaler".into(),
        value: None,
        effect: "PreferNoSchedule".into(),
    }
}

fn to_be_deleted_taint() -> Taint {
    Taint {
        key: "ToBeDeletedByClusterAutoscaler".into(),
        value: None,
        effect: "NoSchedule".into(),
    }
}

/// The CA-like policy's memory between loops (CA keeps the same in its process).
#[derive(Debug, Default)]
pub struct CaLike {
    /// Unneeded node → since when.
    pub unneeded_since: BTreeMap<String, Ms>,
    last_scale_up: Option<Ms>,
    last_delete: Option<Ms>,
    last_failure: Option<Ms>,
}

/// One group's scale-up option.
#[derive(Debug, Clone, PartialEq)]
pub struct ScaleUpOption {
    pub group: usize,
    pub nodes: u32,
    pub pods: usize,
    /// Idle CPU share plus idle memory share of the new nodes.
    pub waste: f64,
}

/// First-fit-decreasing of `pods` onto new nodes of `g`, at most `limit` of them: how
/// many nodes, how many pods they take and the waste (the estimator's answer).
pub fn estimate(pods: &[&PodInfo], g: &Group, gi: usize, limit: u32) -> Option<ScaleUpOption> {
    let share = |p: &PodInfo| {
        let c = p.requests.cpu as f64 / g.allocatable.cpu.max(1) as f64;
        let m = p.requests.memory as f64 / g.allocatable.memory.max(1) as f64;
        c + m
    };
    let mut sorted: Vec<&PodInfo> = pods.iter().copied().filter(|p| g.hosts(p)).collect();
    sorted.sort_by(|a, b| {
        share(b)
            .total_cmp(&share(a))
            .then_with(|| a.name.cmp(&b.name))
    });
    let mut m = Model::new();
    let mut used = Resources::default();
    let mut helped = 0;
    for p in sorted {
        let placed = (0..m.slots.len()).find(|&i| m.check(p, i).is_ok());
        let i = match placed {
            Some(i) => i,
            None if (m.slots.len() as u32) < limit => {
                let cp = m.checkpoint();
                let i = m.add_slot(g.slot(SlotKind::New(g.name.clone()), m.slots.len()));
                if m.check(p, i).is_err() {
                    m.rollback(cp);
                    continue;
                }
                i
            }
            None => continue,
        };
        m.place(p, i);
        used.add(&p.requests);
        helped += 1;
    }
    let nodes = m.slots.len() as u32;
    if nodes == 0 {
        return None;
    }
    let idle = |used: u64, per: u64| {
        let total = per as f64 * f64::from(nodes);
        if total > 0.0 {
            (total - used as f64) / total
        } else {
            0.0
        }
    };
    Some(ScaleUpOption {
        group: gi,
        nodes,
        pods: helped,
        waste: idle(used.cpu, g.allocatable.cpu) + idle(used.memory, g.allocatable.memory),
    })
}

/// The expander: least waste, then most pods, then the first group.
pub fn least_waste(options: &[ScaleUpOption]) -> Option<&ScaleUpOption> {
    options.iter().min_by(|a, b| {
        a.waste
            .total_cmp(&b.waste)
            .then_with(|| b.pods.cmp(&a.pods))
            .then_with(|| a.group.cmp(&b.group))
    })
}

impl CaLike {
    fn scale_up(&mut self, view: &View, groups: &[Group]) -> Option<(usize, u32)> {
        if view.pending.is_empty() {
            return None;
        }
        let mut m = view.model(groups);
        let pending: Vec<&PodInfo> = view.pending.iter().collect();
        let (_, left) = first_fit(&mut m, &pending, |_| true);
        if left.is_empty() {
            return None;
        }
        let options: Vec<ScaleUpOption> = groups
            .iter()
            .enumerate()
            .filter_map(|(gi, g)| {
                let size = view.size.get(&g.name).copied().unwrap_or(0);
                estimate(&left, g, gi, g.max.saturating_sub(size))
            })
            .collect();
        least_waste(&options).map(|o| (o.group, o.nodes))
    }

    /// The unneeded nodes now, in name order.
    fn unneeded(&self, view: &View, groups: &[Group]) -> Vec<String> {
        let mut m = Model::of_cluster(&view.nodes, &view.running);
        let mut left: BTreeMap<&str, u32> = groups
            .iter()
            .map(|g| {
                let size = view.size.get(&g.name).copied().unwrap_or(0);
                (g.name.as_str(), size.saturating_sub(g.min))
            })
            .collect();
        // Utilization as the nodes are, before any removal is simulated.
        let used: Vec<f64> = m.slots.iter().map(utilization).collect();
        let mut out = Vec::new();
        for n in &view.nodes {
            let Some(i) = m.slot_index(&n.name) else {
                continue;
            };
            let Some((_, group)) = view.vm_of.get(&n.name) else {
                continue;
            };
            let slot = &m.slots[i];
            if !slot.usable
                || slot.unschedulable
                || left.get(group.as_str()).copied().unwrap_or(0) == 0
                || used[i] >= UTILIZATION_THRESHOLD
                || view.has_bare_pod(&n.name)
            {
                continue;
            }
            let pods: Vec<&PodInfo> = m.pods_on(i).to_vec();
            m.slots[i].usable = false;
            let cp = m.checkpoint();
            if first_fit_all(&mut m, &pods, |s| s.kind == SlotKind::Node).is_ok() {
                out.push(n.name.clone());
                if let Some(l) = left.get_mut(group.as_str()) {
                    *l -= 1;
                }
            } else {
                m.rollback(cp);
                m.slots[i].usable = true;
            }
        }
        out
    }
}

impl Peer for CaLike {
    fn cycle(&mut self, world: &World, groups: &[Group], t: Ms) -> Step {
        let view = View::of(&world.lock());
        let mut step = Step::default();
        if let Some((gi, n)) = self.scale_up(&view, groups) {
            let made = create(&mut world.lock(), &groups[gi], n);
            if made > 0 {
                step.actions.push("scale-up");
                step.created.insert(groups[gi].name.clone(), made);
                self.last_scale_up = Some(t);
                // No scale-down in a loop that scaled up.
                return step;
            }
        }
        let unneeded = self.unneeded(&view, groups);
        let mut s = world.lock();
        let soft = candidate_taint();
        for n in self.unneeded_since.keys() {
            if !unneeded.contains(n) {
                set_taint(&mut s, n, &soft, false);
            }
        }
        self.unneeded_since.retain(|n, _| unneeded.contains(n));
        for n in &unneeded {
            self.unneeded_since.entry(n.clone()).or_insert(t);
            set_taint(&mut s, n, &soft, true);
        }
        let cooldown = self.last_scale_up.is_some_and(|a| t < a + DELAY_AFTER_ADD)
            || self.last_delete.is_some_and(|d| t < d + SCAN)
            || self
                .last_failure
                .is_some_and(|f| t < f + DELAY_AFTER_FAILURE);
        if cooldown {
            return step;
        }
        let ripe: Vec<String> = self
            .unneeded_since
            .iter()
            .filter(|(_, since)| t >= **since + UNNEEDED_TIME)
            .map(|(n, _)| n.clone())
            .collect();
        let hard = to_be_deleted_taint();
        let (empty, busy): (Vec<&String>, Vec<&String>) =
            ripe.iter().partition(|n| view.pods_on(n).next().is_none());
        let mut gone = Vec::new();
        for n in empty.into_iter().take(MAX_EMPTY_BULK_DELETE) {
            if drain_and_delete(&mut s, n, &hard) {
                gone.push(n.clone());
            }
        }
        if gone.is_empty() {
            if let Some(n) = busy.first() {
                if drain_and_delete(&mut s, n, &hard) {
                    step.actions.push("drain");
                    gone.push((*n).clone());
                } else {
                    self.last_failure = Some(t);
                }
            }
        }
        if !gone.is_empty() {
            step.actions.push("delete-node");
            step.removed = gone.len() as u32;
            self.last_delete = Some(t);
            for n in &gone {
                self.unneeded_since.remove(n);
            }
        }
        step
    }
}

//! The scheduling model: "does this pod fit on this node, or on a new node of this
//! group?", answered as kube-scheduler's default filter plugins would (NodeResourcesFit,
//! NodeUnschedulable, NodeAffinity, TaintToleration, NodePorts, InterPodAffinity,
//! PodTopologySpread). Pure and deterministic; the planning steps call it instead of
//! re-deriving fits, and the simulated cluster's scheduler uses the same checks.
//!
//! A [`Model`] holds slots (nodes that exist, VMs still provisioning, and new nodes
//! being considered) with what is already placed on them. Pods are tried with
//! [`Model::check`] and placed with [`Model::place`]; a [`Checkpoint`] undoes trial
//! placements so several node groups can be compared from the same starting point.
//!
//! Volumes as VolumeBinding does it: a pod fits only nodes its bound PersistentVolumes'
//! node affinity (or its unbound WaitForFirstConsumer claims' `allowedTopologies`)
//! allow, and CSI attach limits count as a resource (see [`super::volumes`]).
//!
//! Not modelled, and so treated conservatively and named in the plan:
//! `namespaceSelector` by labels (counted as every namespace), pod-level resources.

mod affinity;
pub(crate) mod index;
mod pack;
pub mod template;

#[cfg(test)]
mod tests;

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

use crate::model::{HostPort, NodeInfo, PodInfo, Resources, Taint};
use index::{FxHashMap, RoomTree};
pub use pack::{
    first_fit, first_fit_all, pack_new_nodes, sort_for_packing, trial_new_nodes, why_not,
    GroupOption, NewNodes,
};
pub use template::{daemonset_overhead, group_template, well_known_labels};

/// Taint every cordoned node carries in the scheduler's eyes.
pub const UNSCHEDULABLE_TAINT: &str = "node.kubernetes.io/unschedulable";

/// What a slot is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlotKind {
    /// A node that exists.
    Node,
    /// A VM of this group still booting: capacity that is coming.
    Provisioning(String),
    /// A node of this group that does not exist yet.
    New(String),
}

/// A node, existing or hypothetical, with what is placed on it.
#[derive(Debug, Clone)]
pub struct Slot<'a> {
    pub name: Cow<'a, str>,
    pub labels: Cow<'a, BTreeMap<String, String>>,
    pub taints: Cow<'a, [Taint]>,
    pub unschedulable: bool,
    /// False for nodes that are not Ready or are being deleted: their pods still count
    /// for affinity and spread, but nothing new lands there.
    pub usable: bool,
    pub allocatable: Resources,
    pub used: Resources,
    pub kind: SlotKind,
    host_ports: Vec<HostPort>,
}

impl<'a> Slot<'a> {
    pub fn for_node(n: &'a NodeInfo) -> Slot<'a> {
        Slot {
            name: Cow::Borrowed(&n.name),
            labels: Cow::Borrowed(&n.labels),
            taints: Cow::Borrowed(&n.taints),
            unschedulable: n.unschedulable,
            usable: n.ready && !n.deleting,
            allocatable: n.allocatable.clone(),
            used: Resources::default(),
            kind: SlotKind::Node,
            host_ports: Vec::new(),
        }
    }

    /// Room left, resource by resource.
    pub fn free(&self) -> Resources {
        let mut f = self.allocatable.clone();
        f.sub(&self.used);
        f
    }
}

/// Why a pod does not fit a slot, in the scheduler's words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unfit {
    NotReady,
    Unschedulable,
    NodeSelector,
    NodeAffinity,
    /// A taint (`key=value:Effect`) the pod does not tolerate.
    Taint(String),
    /// Resources short, by name (`cpu`, `memory`, `pods`, ...).
    Insufficient(Vec<&'static str>),
    HostPort,
    PodAffinity,
    PodAntiAffinity,
    /// An existing pod's anti-affinity rejects this one.
    ExistingAntiAffinity,
    TopologySpread,
    /// A required label for spread or affinity is missing on the node.
    MissingTopologyLabel(String),
    /// A bound volume's node affinity (or an unbound claim's `allowedTopologies`)
    /// excludes the node.
    VolumeNodeAffinity,
    /// Its claims let it run on no node (claim missing, unbound Immediate claim, ...).
    Volume(String),
}

impl Unfit {
    /// Failures that more capacity elsewhere cannot fix on this same slot shape.
    pub fn is_static(&self) -> bool {
        matches!(
            self,
            Unfit::NodeSelector
                | Unfit::NodeAffinity
                | Unfit::Taint(_)
                | Unfit::VolumeNodeAffinity
                | Unfit::Volume(_)
        )
    }
}

impl fmt::Display for Unfit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unfit::NotReady => write!(f, "node is not ready"),
            Unfit::Unschedulable => write!(f, "node is unschedulable"),
            Unfit::NodeSelector => write!(f, "nodeSelector does not match its labels"),
            Unfit::NodeAffinity => write!(f, "required node affinity does not match"),
            Unfit::Taint(t) => write!(f, "taint {t} not tolerated"),
            Unfit::Insufficient(r) => write!(f, "insufficient {}", r.join(", ")),
            Unfit::HostPort => write!(f, "host port already in use"),
            Unfit::PodAffinity => write!(f, "pod affinity not satisfied"),
            Unfit::PodAntiAffinity => write!(f, "pod anti-affinity not satisfied"),
            Unfit::ExistingAntiAffinity => {
                write!(f, "anti-affinity of a pod already there rejects it")
            }
            Unfit::TopologySpread => write!(f, "topology spread constraint would be violated"),
            Unfit::MissingTopologyLabel(k) => write!(f, "no {k} label for its topology rules"),
            Unfit::VolumeNodeAffinity => {
                write!(f, "its volumes' node affinity does not allow this node")
            }
            Unfit::Volume(why) => write!(f, "{why}"),
        }
    }
}

/// Placement rules that do not depend on what runs where: node selector, required
/// node affinity, taints, cordon. `ignore_named` skips `matchFields` on node names
/// (DaemonSet pods are pinned to their node that way, and are judged for a new node).
pub fn static_check(pod: &PodInfo, slot: &Slot<'_>, ignore_named: bool) -> Result<(), Unfit> {
    if !slot.usable {
        return Err(Unfit::NotReady);
    }
    if !pod
        .node_selector
        .iter()
        .all(|(k, v)| slot.labels.get(k) == Some(v))
    {
        return Err(Unfit::NodeSelector);
    }
    if let Some(terms) = &pod.node_affinity {
        let ok = terms.iter().any(|t| {
            if ignore_named && t.names_a_node() {
                let mut t = t.clone();
                t.fields.clear();
                t.expressions.is_empty() || t.matches(&slot.name, &slot.labels)
            } else {
                t.matches(&slot.name, &slot.labels)
            }
        });
        if !ok {
            return Err(Unfit::NodeAffinity);
        }
    }
    if let Some(why) = &pod.volume_problem {
        return Err(Unfit::Volume(why.clone()));
    }
    // Terms naming a node (a local volume's) hold for DaemonSet pods judged for a new
    // node too: their data is on that one node.
    if !pod
        .volume_affinity
        .iter()
        .all(|terms| terms.iter().any(|t| t.matches(&slot.name, &slot.labels)))
    {
        return Err(Unfit::VolumeNodeAffinity);
    }
    if slot.unschedulable {
        let cordon = Taint {
            key: UNSCHEDULABLE_TAINT.into(),
            value: None,
            effect: "NoSchedule".into(),
        };
        if !pod.tolerations.iter().any(|t| t.tolerates(&cordon)) {
            return Err(Unfit::Unschedulable);
        }
    }
    if let Some(t) = slot
        .taints
        .iter()
        .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
        .find(|t| !pod.tolerations.iter().any(|tol| tol.tolerates(t)))
    {
        return Err(Unfit::Taint(fmt_taint(t)));
    }
    Ok(())
}

pub fn fmt_taint(t: &Taint) -> String {
    match &t.value {
        Some(v) if !v.is_empty() => format!("{}={}:{}", t.key, v, t.effect),
        _ => format!("{}:{}", t.key, t.effect),
    }
}

/// Slots with their placed pods, and the indexes that make affinity and spread cheap.
///
/// Change slots' resources only through the model ([`Model::place`], [`Model::rollback`]):
/// it keeps an index of the room left on each slot. `usable` may be flipped directly.
#[derive(Clone)]
pub struct Model<'a> {
    pub slots: Vec<Slot<'a>>,
    /// Pods on each slot (existing and placed), for affinity and spread counting.
    pods_on: Vec<Vec<&'a PodInfo>>,
    /// Domain counts per rule and anti-affinity terms of placed pods, kept current as
    /// pods are placed and rolled back.
    index: affinity::Index<'a>,
    /// Room left on every slot, for first-fit to skip full ones.
    room: RoomTree,
    /// While building from the cluster: placements are final and the room index is
    /// built once at the end.
    bulk: bool,
    journal: Vec<(usize, &'a PodInfo)>,
    by_name: FxHashMap<String, usize>,
}

/// A point to return to with [`Model::rollback`].
#[derive(Debug, Clone, Copy)]
pub struct Checkpoint {
    slots: usize,
    journal: usize,
}

impl<'a> Model<'a> {
    pub fn new() -> Model<'a> {
        Model {
            slots: Vec::new(),
            pods_on: Vec::new(),
            index: affinity::Index::default(),
            room: RoomTree::default(),
            bulk: false,
            journal: Vec::new(),
            by_name: FxHashMap::default(),
        }
    }

    /// Builds the model of the cluster as it is: every node, with the non-terminal pods
    /// bound to it.
    pub fn of_cluster(
        nodes: &'a [NodeInfo],
        pods: impl IntoIterator<Item = &'a PodInfo>,
    ) -> Model<'a> {
        let mut m = Model::with_nodes(nodes);
        for p in pods.into_iter().filter(|p| !p.is_terminal()) {
            if let Some(i) = p.node_name.as_deref().and_then(|n| m.slot_index(n)) {
                m.record(i, p);
            }
        }
        m.finish_bulk();
        m
    }

    /// As [`Self::of_cluster`], with the pods already grouped by the name of their node
    /// (`pods_on`), which saves looking each pod's node up again.
    pub fn of_grouped_pods<'p>(
        nodes: &'a [NodeInfo],
        pods_on: impl Fn(&str) -> &'p [&'a PodInfo],
    ) -> Model<'a>
    where
        'a: 'p,
    {
        let mut m = Model::with_nodes(nodes);
        for (i, n) in nodes.iter().enumerate() {
            // A name given twice: its pods go to the last node of that name, as above.
            if m.slot_index(&n.name) != Some(i) {
                continue;
            }
            let pods = pods_on(&n.name);
            m.pods_on[i].reserve_exact(pods.len());
            for &p in pods.iter().filter(|p| !p.is_terminal()) {
                m.record(i, p);
            }
        }
        m.finish_bulk();
        m
    }

    fn with_nodes(nodes: &'a [NodeInfo]) -> Model<'a> {
        let mut m = Model::new();
        m.bulk = true;
        m.slots.reserve(nodes.len());
        m.pods_on.reserve(nodes.len());
        m.by_name.reserve(nodes.len());
        for n in nodes {
            m.add_slot(Slot::for_node(n));
        }
        m
    }

    fn finish_bulk(&mut self) {
        for (i, s) in self.slots.iter().enumerate() {
            self.room.set(i, index::room(&s.allocatable, &s.used), true);
        }
        self.room.rebuild();
        self.bulk = false;
        self.journal.clear();
    }

    pub fn slot_index(&self, name: &str) -> Option<usize> {
        self.by_name.get(name).copied()
    }

    pub fn pods_on(&self, slot: usize) -> &[&'a PodInfo] {
        self.pods_on.get(slot).map(Vec::as_slice).unwrap_or(&[])
    }

    pub fn add_slot(&mut self, slot: Slot<'a>) -> usize {
        let i = self.slots.len();
        self.by_name.insert(slot.name.to_string(), i);
        self.room
            .push(index::room(&slot.allocatable, &slot.used), self.bulk);
        self.slots.push(slot);
        self.pods_on.push(Vec::new());
        // Spread counts know their domains: a new slot may bring one.
        self.index.slot_added(&self.slots);
        i
    }

    pub fn checkpoint(&self) -> Checkpoint {
        Checkpoint {
            slots: self.slots.len(),
            journal: self.journal.len(),
        }
    }

    /// Undoes every placement and slot since `cp`.
    pub fn rollback(&mut self, cp: Checkpoint) {
        while self.journal.len() > cp.journal {
            let Some((slot, pod)) = self.journal.pop() else {
                break;
            };
            let s = &mut self.slots[slot];
            s.used.sub(&pod.requests);
            let ports = pod.host_ports.len();
            s.host_ports
                .truncate(s.host_ports.len().saturating_sub(ports));
            self.room
                .set(slot, index::room(&s.allocatable, &s.used), false);
            self.pods_on[slot].pop();
            self.index.placed(&self.slots, slot, pod, false);
        }
        while self.slots.len() > cp.slots {
            let i = self.slots.len() - 1;
            self.index.slot_removing(i);
            if let Some(s) = self.slots.pop() {
                self.by_name.remove(s.name.as_ref());
            }
        }
        self.pods_on.truncate(cp.slots);
        self.room.truncate(cp.slots);
    }

    /// Runs `f` as a trial: every pod it places and every slot it adds is undone after,
    /// so a step can ask "where would these pods go?" and find the model as it was.
    pub fn trial<R>(&mut self, f: impl FnOnce(&mut Model<'a>) -> R) -> R {
        let cp = self.checkpoint();
        let out = f(self);
        self.rollback(cp);
        out
    }

    /// As [`Self::trial`], with slot `i` out of use meanwhile: where its pods would go
    /// if its node were gone.
    pub fn trial_without<R>(&mut self, i: usize, f: impl FnOnce(&mut Model<'a>) -> R) -> R {
        let was = self.slots[i].usable;
        self.slots[i].usable = false;
        let out = self.trial(f);
        self.slots[i].usable = was;
        out
    }

    /// Whether `pod` may go on slot `i` now, and why not.
    pub fn check(&mut self, pod: &'a PodInfo, i: usize) -> Result<(), Unfit> {
        static_check(pod, &self.slots[i], false)?;
        self.dynamic_check(pod, i)
    }

    /// The checks that depend on what is placed: resources, ports, affinity, spread.
    pub fn dynamic_check(&mut self, pod: &'a PodInfo, i: usize) -> Result<(), Unfit> {
        let slot = &self.slots[i];
        if !slot.allocatable.fits(&slot.used, &pod.requests) {
            return Err(Unfit::Insufficient(
                slot.allocatable.shortfalls(&slot.used, &pod.requests),
            ));
        }
        if pod
            .host_ports
            .iter()
            .any(|p| slot.host_ports.iter().any(|q| p.conflicts(q)))
        {
            return Err(Unfit::HostPort);
        }
        self.index.check(&self.slots, &self.pods_on, pod, i)
    }

    /// The first slot at or after `from` and before `end` with room for `request` in
    /// CPU, memory, ephemeral storage and pod slots (other resources and every rule are
    /// still to be checked).
    pub fn next_with_room(&self, from: usize, end: usize, request: &Resources) -> Option<usize> {
        self.room.first(from, end, &index::need(request))
    }

    /// Resolves the affinity and spread rules of `pods` now (the counts they need, the
    /// anti-affinity terms that reject them), so that copies of this model share that
    /// work instead of each doing it on first check. Changes no answer.
    pub fn prepare(&mut self, pods: &[&'a PodInfo]) {
        for &p in pods {
            self.index.prepare(&self.slots, &self.pods_on, p);
        }
    }

    /// Appends to `out`, in order, up to `max` slots from `from` to before `end` with
    /// room for `request` as [`Self::next_with_room`] finds them, in one walk.
    pub fn slots_with_room(
        &self,
        from: usize,
        end: usize,
        request: &Resources,
        max: usize,
        out: &mut Vec<usize>,
    ) {
        self.room
            .collect(from, end, &index::need(request), max, out);
    }

    /// Puts `pod` on slot `i` (after a successful [`Self::check`]).
    pub fn place(&mut self, pod: &'a PodInfo, i: usize) {
        self.record(i, pod);
    }

    fn record(&mut self, i: usize, pod: &'a PodInfo) {
        let s = &mut self.slots[i];
        s.used.add(&pod.requests);
        s.host_ports.extend(pod.host_ports.iter().cloned());
        if !self.bulk {
            self.room
                .set(i, index::room(&s.allocatable, &s.used), false);
            self.journal.push((i, pod));
        }
        self.pods_on[i].push(pod);
        self.index.placed(&self.slots, i, pod, true);
    }
}

impl Default for Model<'_> {
    fn default() -> Self {
        Model::new()
    }
}

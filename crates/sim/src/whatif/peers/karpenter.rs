//! A Karpenter-like policy: an approximation of Karpenter's provisioner and disruption
//! controller with a NodePool's defaults, written from its documentation, not its code.
//! Each node group stands for an instance type of one NodePool; `price` is its price.
//!
//! Every [`SCAN`](super::SCAN) (about Karpenter's batching window):
//! - **Provisioning**: the pods the scheduler marked unschedulable that fit neither an
//!   existing node nor one being launched are packed, largest first (CPU, then memory),
//!   into new node claims; a pod joins the first claim for which some group still fits
//!   all its pods, else opens one. Each claim is launched as the **cheapest** group that
//!   fits what it holds (right-sized), within `maxSize`.
//! - **Disruption** (consolidation, `consolidationPolicy: WhenEmptyOrUnderutilized`,
//!   `consolidateAfter: 0s`), when nothing waits for capacity and no replacement is in
//!   flight, within the NodePool's default budget `nodes: 10%` (of the nodes, rounded
//!   up, less the nodes not Ready or being disrupted). One method per pass, in order:
//!   empty nodes are deleted; else **multi-node** consolidation: the largest prefix
//!   (up to 100) of the candidates, cheapest to disrupt first (fewest pods), whose pods
//!   fit on the other nodes plus at most one new node cheaper than them all, found by
//!   binary search; else **single-node**: the first candidate whose pods fit on the
//!   others (delete), or on one new node of a cheaper group (replace). A decision is
//!   acted on only when the same one is found again at least 15 s later (Karpenter
//!   re-validates after 15 s). Disrupted nodes are tainted `karpenter.sh/disrupted`
//!   (NoSchedule); a replacement is launched first and the old nodes are drained
//!   (Eviction API; running Jobs included; a PodDisruptionBudget refusal leaves that
//!   node) and deleted once it is Ready.
//!
//! A node with a bare pod (no controller) is not a candidate, nor one whose group is at
//! its `minSize`. Consolidation waits while nodes boot (the provisioner's nodes are
//! nominated for pods) and while pods wait that the scheduler has not tried yet. Not
//! modelled: drift, expiry, spot interruption, the
//! `do-not-disrupt` annotation, disruption cost weighting by pod priority and age,
//! graceful termination.

use std::collections::BTreeMap;

use super::{create, delete, drain, set_taint, Group, Peer, Step, View};
use crate::model::{PodInfo, Resources, ServerStatus, Taint};
use crate::plan::sched::{first_fit, Model, SlotKind};
use crate::whatif::world::{Ms, World};

/// The NodePool's default disruption budget: `nodes: 10%`.
pub const BUDGET_SHARE: f64 = 0.10;
/// Karpenter re-validates a consolidation decision after this long.
pub const VALIDATION: Ms = 15_000;
/// Multi-node consolidation looks at most at this many candidates.
pub const MAX_MULTI: usize = 100;

fn disrupted_taint() -> Taint {
    Taint {
        key: "karpenter.sh/disrupted".into(),
        value: None,
        effect: "NoSchedule".into(),
    }
}

/// A new node being filled with pods during provisioning.
#[derive(Debug, Clone)]
pub struct Claim<'a> {
    pub used: Resources,
    pub pods: Vec<&'a PodInfo>,
    /// Groups (indexes) that fit every pod of the claim.
    pub fits: Vec<usize>,
}

/// Packs `pods` into new node claims over `groups` (only those with `room`, group index
/// → VMs it may still add).
pub fn pack<'a>(
    pods: &[&'a PodInfo],
    groups: &[Group],
    room: &BTreeMap<usize, u32>,
) -> Vec<Claim<'a>> {
    let mut sorted: Vec<&PodInfo> = pods.to_vec();
    sorted.sort_by(|a, b| {
        b.requests
            .cpu
            .cmp(&a.requests.cpu)
            .then_with(|| b.requests.memory.cmp(&a.requests.memory))
            .then_with(|| a.name.cmp(&b.name))
    });
    let open: Vec<usize> = (0..groups.len())
        .filter(|g| room.get(g).copied().unwrap_or(0) > 0)
        .collect();
    let mut claims: Vec<Claim<'a>> = Vec::new();
    for p in sorted {
        let hosts: Vec<usize> = open
            .iter()
            .copied()
            .filter(|&g| groups[g].hosts(p))
            .collect();
        let joined = claims.iter_mut().any(|c| {
            let fits: Vec<usize> = c
                .fits
                .iter()
                .copied()
                .filter(|g| hosts.contains(g) && groups[*g].allocatable.fits(&c.used, &p.requests))
                .collect();
            if fits.is_empty() {
                return false;
            }
            c.fits = fits;
            c.used.add(&p.requests);
            c.pods.push(p);
            true
        });
        if !joined && !hosts.is_empty() {
            claims.push(Claim {
                used: p.requests.clone(),
                pods: vec![p],
                fits: hosts,
            });
        }
    }
    claims
}

/// The cheapest group of `claim` with room left (then the first).
pub fn cheapest(claim: &Claim<'_>, groups: &[Group], room: &BTreeMap<usize, u32>) -> Option<usize> {
    claim
        .fits
        .iter()
        .copied()
        .filter(|g| room.get(g).copied().unwrap_or(0) > 0)
        .min_by(|a, b| groups[*a].price.total_cmp(&groups[*b].price).then(a.cmp(b)))
}

/// What consolidation decided.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    Delete(Vec<String>),
    /// Replace these nodes by one new node of the group (index).
    Replace(Vec<String>, usize),
}

/// The Karpenter-like policy's memory between passes.
#[derive(Debug, Default)]
pub struct KarpenterLike {
    /// The last decision and when it was first found.
    proposal: Option<(Command, Ms)>,
    /// Launched replacements (VM id) and the nodes they replace.
    replacing: Vec<(String, Vec<String>)>,
}

/// Room per group index: `maxSize` less the VMs it has.
fn room(view: &View, groups: &[Group]) -> BTreeMap<usize, u32> {
    groups
        .iter()
        .enumerate()
        .map(|(i, g)| {
            (
                i,
                g.max
                    .saturating_sub(view.size.get(&g.name).copied().unwrap_or(0)),
            )
        })
        .collect()
}

/// With `nodes` gone, where their pods go: `Some(None)` all on the other nodes,
/// `Some(Some(g))` with one new node of group `g` cheaper than `price` (what the gone
/// nodes cost), None otherwise.
pub fn simulate(
    view: &View,
    groups: &[Group],
    nodes: &[String],
    price: f64,
) -> Option<Option<usize>> {
    let mut m = Model::of_cluster(&view.nodes, &view.running);
    let mut pods: Vec<&PodInfo> = Vec::new();
    for n in nodes {
        let i = m.slot_index(n)?;
        pods.extend(m.pods_on(i).iter().copied());
        m.slots[i].usable = false;
    }
    let (_, left) = first_fit(&mut m, &pods, |s| s.kind == SlotKind::Node);
    if left.is_empty() {
        return Some(None);
    }
    let room = room(view, groups);
    match pack(&left, groups, &room).as_slice() {
        [one] if one.pods.len() == left.len() => {
            let g = cheapest(one, groups, &room)?;
            (groups[g].price < price).then_some(Some(g))
        }
        _ => None,
    }
}

impl KarpenterLike {
    /// Replacements that are Ready: their old nodes are drained and deleted.
    fn finish_replacements(&mut self, world: &World, step: &mut Step) {
        let mut s = world.lock();
        let taint = disrupted_taint();
        let mut still = Vec::new();
        for (vm, old) in std::mem::take(&mut self.replacing) {
            let status = s
                .vms
                .get(&vm)
                .map(|v| (v.server.status, v.server.name.clone()));
            let ready = status
                .as_ref()
                .and_then(|(_, name)| s.node(name))
                .is_some_and(|n| n.ready);
            match status {
                Some((ServerStatus::Building, _)) => still.push((vm, old)),
                Some(_) if ready => {
                    for n in &old {
                        if drain(&mut s, n).is_ok() {
                            delete(&mut s, n);
                            step.removed += 1;
                        } else {
                            set_taint(&mut s, n, &taint, false);
                        }
                    }
                    step.actions.push("drain");
                    step.actions.push("delete-node");
                }
                _ => {
                    for n in &old {
                        set_taint(&mut s, n, &taint, false);
                    }
                }
            }
        }
        self.replacing = still;
    }

    fn provision(&self, view: &View, groups: &[Group], world: &World, step: &mut Step) -> bool {
        if view.pending.is_empty() {
            return false;
        }
        let mut m = view.model(groups);
        let pending: Vec<&PodInfo> = view.pending.iter().collect();
        let (_, left) = first_fit(&mut m, &pending, |_| true);
        if left.is_empty() {
            return false;
        }
        let mut room = room(view, groups);
        let mut s = world.lock();
        for claim in pack(&left, groups, &room) {
            let Some(g) = cheapest(&claim, groups, &room) else {
                continue;
            };
            if create(&mut s, &groups[g], 1) == 1 {
                *step.created.entry(groups[g].name.clone()).or_default() += 1;
                if let Some(r) = room.get_mut(&g) {
                    *r -= 1;
                }
            }
        }
        if step.created.is_empty() {
            return false;
        }
        step.actions.push("scale-up");
        true
    }

    /// The consolidation decision now, if any.
    fn decide(&self, view: &View, groups: &[Group]) -> Option<Command> {
        let taint = disrupted_taint();
        let group_of = |n: &str| {
            let (_, g) = view.vm_of.get(n)?;
            groups.iter().position(|x| &x.name == g)
        };
        let disrupting = view
            .nodes
            .iter()
            .filter(|n| !n.ready || n.taints.iter().any(|t| t.key == taint.key))
            .count();
        let allowed =
            ((view.nodes.len() as f64 * BUDGET_SHARE).ceil() as usize).saturating_sub(disrupting);
        if allowed == 0 {
            return None;
        }
        // Above minSize: how many each group may lose.
        let mut spare: BTreeMap<usize, u32> = groups
            .iter()
            .enumerate()
            .map(|(i, g)| {
                (
                    i,
                    view.size
                        .get(&g.name)
                        .copied()
                        .unwrap_or(0)
                        .saturating_sub(g.min),
                )
            })
            .collect();
        let mut candidates: Vec<(usize, String, usize)> = view
            .nodes
            .iter()
            .filter(|n| n.ready && !n.unschedulable && !n.taints.iter().any(|t| t.key == taint.key))
            .filter(|n| !view.has_bare_pod(&n.name))
            .filter_map(|n| {
                Some((
                    view.pods_on(&n.name).count(),
                    n.name.clone(),
                    group_of(&n.name)?,
                ))
            })
            .collect();
        candidates.sort();
        let mut take = |list: &[(usize, String, usize)], max: usize| -> Vec<(String, usize)> {
            let mut out = Vec::new();
            for (_, n, g) in list {
                if out.len() >= max {
                    break;
                }
                if let Some(s) = spare.get_mut(g).filter(|s| **s > 0) {
                    *s -= 1;
                    out.push((n.clone(), *g));
                }
            }
            out
        };
        let (empty, busy): (Vec<_>, Vec<_>) = candidates.iter().cloned().partition(|c| c.0 == 0);
        let empties = take(&empty, allowed);
        if !empties.is_empty() {
            return Some(Command::Delete(
                empties.into_iter().map(|(n, _)| n).collect(),
            ));
        }
        let busy = take(&busy, allowed.min(MAX_MULTI));
        let price =
            |list: &[(String, usize)]| list.iter().map(|(_, g)| groups[*g].price).sum::<f64>();
        let names =
            |list: &[(String, usize)]| list.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
        // Multi-node: the largest prefix (at least two) that consolidates.
        let (mut lo, mut hi) = (2usize, busy.len());
        let mut best: Option<Command> = None;
        while lo <= hi {
            let mid = (lo + hi) / 2;
            let prefix = &busy[..mid];
            match simulate(view, groups, &names(prefix), price(prefix)) {
                Some(r) => {
                    best = Some(match r {
                        None => Command::Delete(names(prefix)),
                        Some(g) => Command::Replace(names(prefix), g),
                    });
                    lo = mid + 1;
                }
                None => hi = mid - 1,
            }
        }
        if best.is_some() {
            return best;
        }
        // Single node.
        for one in busy.iter().map(std::slice::from_ref) {
            match simulate(view, groups, &names(one), price(one)) {
                Some(None) => return Some(Command::Delete(names(one))),
                Some(Some(g)) => return Some(Command::Replace(names(one), g)),
                None => {}
            }
        }
        None
    }

    fn act(&mut self, command: Command, world: &World, groups: &[Group], step: &mut Step) {
        let mut s = world.lock();
        let taint = disrupted_taint();
        match command {
            Command::Delete(nodes) => {
                let mut drained = false;
                for n in &nodes {
                    let empty = !s
                        .pods
                        .values()
                        .any(|p| p.started.is_some() && p.info.node_name.as_deref() == Some(n));
                    set_taint(&mut s, n, &taint, true);
                    if drain(&mut s, n).is_ok() {
                        drained |= !empty;
                        delete(&mut s, n);
                        step.removed += 1;
                    } else {
                        set_taint(&mut s, n, &taint, false);
                    }
                }
                if drained {
                    step.actions.push("drain");
                }
                if step.removed > 0 {
                    step.actions.push("delete-node");
                }
            }
            Command::Replace(nodes, g) => {
                for n in &nodes {
                    set_taint(&mut s, n, &taint, true);
                }
                match s.create_vm(&groups[g].name, &groups[g].provider) {
                    Some(vm) => {
                        step.actions.push("replace");
                        *step.created.entry(groups[g].name.clone()).or_default() += 1;
                        self.replacing.push((vm.id, nodes));
                    }
                    None => {
                        for n in &nodes {
                            set_taint(&mut s, n, &taint, false);
                        }
                    }
                }
            }
        }
    }
}

impl Peer for KarpenterLike {
    fn cycle(&mut self, world: &World, groups: &[Group], t: Ms) -> Step {
        let mut step = Step::default();
        self.finish_replacements(world, &mut step);
        let view = View::of(&world.lock());
        let waiting = self.provision(&view, groups, world, &mut step);
        // Pods the scheduler has not looked at yet (just made or evicted): where they go
        // is not known. Pods no group can host do not hold consolidation up.
        let unsettled = view.unstarted > view.pending.len() || !view.booting.is_empty();
        if waiting || unsettled || !self.replacing.is_empty() {
            self.proposal = None;
            return step;
        }
        let Some(command) = self.decide(&view, groups) else {
            self.proposal = None;
            return step;
        };
        match self.proposal.take() {
            Some((same, since)) if same == command && t >= since + VALIDATION => {
                self.act(command, world, groups, &mut step);
            }
            Some((same, since)) if same == command => self.proposal = Some((same, since)),
            _ => self.proposal = Some((command, t)),
        }
        step
    }
}

//! The soft taint on deletion candidates: every node scale-down finds unneeded carries
//! nodewright's `PreferNoSchedule` taint ([`DELETION_CANDIDATE_TAINT_KEY`]), so the
//! scheduler fills other nodes first and the candidate empties instead of taking new
//! pods, as Cluster Autoscaler does with `DeletionCandidateOfClusterAutoscaler`. It
//! never blocks placement: a pod that fits only there still goes there, and then the
//! node is needed and the taint goes. The taint is the only record: what should carry
//! it is worked out again each cycle, so none is left behind.

use super::movable;
use super::screen::unneeded;
use crate::model::{NodeInfo, ObjectRef, DELETION_CANDIDATE_TAINT_KEY};
use crate::plan::policy;
use crate::plan::sched::{self, SlotKind};
use crate::plan::steps::StepResult;
use crate::plan::view::View;
use crate::plan::{Action, Reason, ReasonCode, Target};

/// Whether `n` carries nodewright's soft taint.
pub(crate) fn soft_tainted(n: &NodeInfo) -> bool {
    n.taints
        .iter()
        .any(|t| t.key == DELETION_CANDIDATE_TAINT_KEY)
}

/// The unneeded nodes that may go together, in removal order: each one's pods fit on
/// the nodes left after the ones before it went. The screening judges each node alone,
/// so two half-empty nodes are each unneeded while only one of them can go; tainting
/// both would steer pods from each to the other and from neither.
fn candidates<'a>(v: &View<'a>) -> Vec<&'a str> {
    let unneeded = unneeded(v);
    if unneeded.is_empty() {
        return Vec::new();
    }
    let mut model = v.model();
    let reference = v.reference_node();
    let mut out = Vec::new();
    for u in unneeded {
        let Some(i) = model.slot_index(&u.node.name) else {
            continue;
        };
        let mut pods = movable(v, u.node);
        sched::sort_for_packing(&mut pods, &reference);
        let cp = model.checkpoint();
        let was = model.slots[i].usable;
        model.slots[i].usable = false;
        let fits = sched::first_fit_all(&mut model, &pods, |s| s.kind == SlotKind::Node);
        if fits.is_ok() {
            out.push(u.node.name.as_str());
        } else {
            model.rollback(cp);
            model.slots[i].usable = was;
        }
    }
    out
}

/// Adds the soft taint to the nodes that became unneeded and removes it from the nodes
/// of ours that no longer are, in one batch. Nodes nodewright cordoned for removal
/// keep it (they are going), and nodes being deleted are left alone.
pub fn soft_taint(v: &View<'_>, _notes: &mut Vec<Reason>) -> StepResult {
    let candidates = candidates(v);
    let kinds = [
        Action::SoftTaint {
            add: Vec::new(),
            remove: Vec::new(),
        }
        .kind(),
        Action::MarkUnneeded {
            mark: Vec::new(),
            clear: Vec::new(),
            at: 0,
        }
        .kind(),
    ];
    let mut add = Vec::new();
    let mut remove = Vec::new();
    for n in v.members.iter().filter_map(|m| m.node) {
        if n.deleting || policy::cordoned_by_us(n) {
            continue;
        }
        // A node whose patches fail (its soft taint, or its unneeded mark: the same
        // object) waits out its own backoff; the others go on.
        if kinds.iter().any(|kind| {
            crate::plan::backoff::is_held_back(kind, Target::Node(&n.name), v.action_backoff, v.now)
        }) {
            continue;
        }
        let is = candidates.contains(&n.name.as_str());
        match (is, soft_tainted(n)) {
            (true, false) => add.push(n.name.clone()),
            (false, true) => remove.push(n.name.clone()),
            _ => {}
        }
    }
    if add.is_empty() && remove.is_empty() {
        return None;
    }
    let mut reasons = Vec::new();
    if !add.is_empty() {
        reasons.push(
            Reason::new(
                ReasonCode::NodeUnneeded,
                format!(
                    "{} may be removed (unneeded); soft taint {DELETION_CANDIDATE_TAINT_KEY}:PreferNoSchedule steers new pods to other nodes",
                    add.join(", ")
                ),
            )
            .about(add.iter().map(|n| ObjectRef::node(n))),
        );
    }
    if !remove.is_empty() {
        reasons.push(
            Reason::new(
                ReasonCode::CapacitySufficient,
                format!(
                    "{} no longer candidate(s) for removal; soft taint {DELETION_CANDIDATE_TAINT_KEY} removed",
                    remove.join(", ")
                ),
            )
            .about(remove.iter().map(|n| ObjectRef::node(n))),
        );
    }
    Some((Action::SoftTaint { add, remove }, reasons))
}

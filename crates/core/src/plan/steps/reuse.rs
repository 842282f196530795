//! Reuse before buying: nodes nodewright cordoned to scale them down (`empty`,
//! `underutilized`) are still there, booted and paid for; when pending pods need room,
//! those whose room the scheduling model gives them are uncordoned (their removal
//! record cleared) before any VM is created, so a scale-up never follows its own
//! scale-down by minutes. A drain in progress is no obstacle: the node is given back and
//! its drain ends. Nodes a person cordoned, and nodes cordoned to be replaced
//! (unhealthy, expired, drifted), are never taken back.

use super::{list_pods, StepResult};
use crate::config::DisruptionReason;
use crate::model::{NodeInfo, ObjectRef, PodInfo};
use crate::plan::policy;
use crate::plan::sched::{self, SlotKind};
use crate::plan::view::{ServerState, View};
use crate::plan::{Action, Reason, ReasonCode};

/// The nodes nodewright cordoned for scale-down that may take pods again: joined, Ready,
/// not being deleted, their VM not in error.
fn reusable<'a>(v: &View<'a>) -> Vec<&'a NodeInfo> {
    v.members
        .iter()
        .filter(|m| m.state == ServerState::Joined && !m.vm_error)
        .filter_map(|m| m.node)
        .filter(|n| n.ready && !n.deleting && policy::cordoned_by_us(n))
        .filter(|n| {
            matches!(
                policy::disruption_of(n),
                DisruptionReason::Empty | DisruptionReason::Underutilized
            )
        })
        .collect()
}

/// Gives back the cordoned-for-scale-down nodes the pods needing new nodes fit on, as
/// if uncordoned, after what the scheduler will place and what provisioning VMs will
/// take. Pods left over get new nodes in a later cycle.
pub(super) fn reuse_cordoned(v: &View<'_>, _notes: &mut Vec<Reason>) -> StepResult {
    let pending = &v.pending;
    if pending.needing_nodes.is_empty() {
        return None;
    }
    let reusable = reusable(v);
    if reusable.is_empty() {
        return None;
    }
    let mut model = v.model();
    for (pod, slot) in pending.on_nodes.iter().chain(&pending.on_provisioning) {
        if let Some(i) = model.slot_index(slot) {
            model.place(pod, i);
        }
    }
    let mut slots = Vec::new();
    for n in &reusable {
        if let Some(i) = model.slot_index(&n.name) {
            model.slots[i].unschedulable = false;
            slots.push(i);
        }
    }
    // nodewright's own image pullers never call a node back: they warm nodes, they are
    // no work of the cluster's.
    let mut pods: Vec<&PodInfo> = pending
        .needing_nodes
        .iter()
        .copied()
        .filter(|p| !policy::own_puller(v, p))
        .collect();
    if pods.is_empty() {
        return None;
    }
    sched::sort_for_packing(&mut pods, &v.reference_node());
    let names: Vec<&str> = reusable.iter().map(|n| n.name.as_str()).collect();
    let (placed, _) = sched::first_fit(&mut model, &pods, |s| {
        s.kind == SlotKind::Node && names.contains(&s.name.as_ref())
    });
    if placed.is_empty() {
        return None;
    }
    let mut nodes: Vec<String> = Vec::new();
    for (_, i) in &placed {
        let name = model.slots[*i].name.to_string();
        if !nodes.contains(&name) {
            nodes.push(name);
        }
    }
    nodes.sort();
    let pods: Vec<&PodInfo> = placed.iter().map(|(p, _)| *p).collect();
    let reason = Reason::new(
        ReasonCode::UnschedulablePods,
        format!(
            "{} pod(s) fit on no schedulable node but on {}, cordoned for scale-down; given back instead of a new VM: {}",
            pods.len(),
            nodes.join(", "),
            list_pods(&pods)
        ),
    )
    .about(
        nodes
            .iter()
            .map(|n| ObjectRef::node(n))
            .chain(pods.iter().map(|p| ObjectRef::pod(p))),
    );
    Some((Action::ReuseCordoned { nodes }, vec![reason]))
}

//! Giving back a node nodewright cordoned to scale down when the fresh view says it is
//! needed after all. The cordon was decided on an earlier view: one read before a slow
//! cloud answered could miss the pods bound meanwhile, and pods can go pending after it
//! for want of the very room the node has. Draining it then would evict pods that need
//! it, and a new VM would be bought for them.

use super::deadlines::remaining;
use super::{list_pods, StepResult};
use crate::config::DisruptionReason;
use crate::model::{NodeInfo, ObjectRef, PodInfo};
use crate::plan::sched::UNSCHEDULABLE_TAINT;
use crate::plan::view::View;
use crate::plan::{policy, Action, Reason, ReasonCode};

/// The uncordon reason of a node given back because the fresh view needs it.
pub const NEEDED_AGAIN: &str = "needed again";

/// Gives back (uncordons, its cordon record and unneeded clock cleared) each node
/// nodewright cordoned as empty or underutilized that the fresh view needs: cordoned
/// as empty, it runs pods that need it; or pending pods that need a new node would
/// fit it were it schedulable. Nodes cordoned as drifted, expired or unhealthy are
/// replaced whatever runs on them, so they are left to their drain.
pub fn give_back_needed(v: &View<'_>, _notes: &mut Vec<Reason>) -> StepResult {
    let mut nodes = Vec::new();
    let mut reasons = Vec::new();
    for n in v.members.iter().filter_map(|m| m.node) {
        if !policy::cordoned_by_us(n) || n.deleting || !n.ready {
            continue;
        }
        let disruption = policy::disruption_of(n);
        if !matches!(
            disruption,
            DisruptionReason::Empty | DisruptionReason::Underutilized
        ) {
            continue;
        }
        let why = if disruption == DisruptionReason::Empty {
            // A pod on its way out does not need it.
            let left: Vec<&PodInfo> = remaining(v, n)
                .into_iter()
                .filter(|p| !p.deleting)
                .collect();
            (!left.is_empty()).then(|| {
                format!(
                    "{} was cordoned as empty but runs {} pod(s) that need it: {}",
                    n.name,
                    left.len(),
                    list_pods(&left)
                )
            })
        } else {
            None
        };
        let why = why.or_else(|| {
            let fit = pending_that_fit(v, n);
            (!fit.is_empty()).then(|| {
                format!(
                    "{} was cordoned to scale down ({}) but {} pending pod(s) that need a node fit it: {}",
                    n.name,
                    disruption.as_str(),
                    fit.len(),
                    list_pods(&fit)
                )
            })
        });
        if let Some(why) = why {
            reasons.push(
                Reason::new(
                    ReasonCode::NodeNeededAgain,
                    format!("{why}; giving it back"),
                )
                .about([ObjectRef::node(&n.name)]),
            );
            nodes.push(n.name.clone());
        }
    }
    if nodes.is_empty() {
        return None;
    }
    Some((
        Action::Uncordon {
            nodes,
            reason: NEEDED_AGAIN.into(),
        },
        reasons,
    ))
}

/// The pending pods that need a new node and would fit `n` were it not cordoned.
fn pending_that_fit<'a>(v: &View<'a>, n: &NodeInfo) -> Vec<&'a PodInfo> {
    if v.pending.needing_nodes.is_empty() {
        return Vec::new();
    }
    let mut m = v.model();
    let Some(i) = m.slot_index(&n.name) else {
        return Vec::new();
    };
    let slot = &mut m.slots[i];
    slot.unschedulable = false;
    let taints: Vec<_> = slot
        .taints
        .iter()
        .filter(|t| t.key != UNSCHEDULABLE_TAINT)
        .cloned()
        .collect();
    slot.taints = taints.into();
    let mut fit = Vec::new();
    for &pod in &v.pending.needing_nodes {
        if m.check(pod, i).is_ok() {
            m.place(pod, i);
            fit.push(pod);
        }
    }
    fit
}

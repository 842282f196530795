//! Giving back a node nodewright cordoned to scale down when the fresh view says it is
//! needed after all. The cordon was decided on an earlier view: one read before a slow
//! cloud answered could miss the pods bound meanwhile, and pods can go pending after it
//! for want of the very room the node has. Draining it then would evict pods that need
//! it, and a new VM would be bought for them.

use super::deadlines::remaining;
use super::{list_pods, StepResult};
use crate::config::DisruptionReason;
use crate::model::{ObjectRef, PodInfo};
use crate::plan::view::View;
use crate::plan::{policy, Action, Reason, ReasonCode};

/// The uncordon reason of a node given back because the fresh view needs it.
pub const NEEDED_AGAIN: &str = "needed again";

/// Gives back (uncordons, its cordon record and unneeded clock cleared) each node
/// nodewright cordoned as empty that the fresh view finds running pods that need it.
/// A node cordoned to scale down that pending pods would fit is taken back by scale-up's
/// reuse step instead (`reuse-cordoned`, before any VM is bought). Nodes cordoned as
/// drifted, expired or unhealthy are replaced whatever runs on them, so they are left to
/// their drain.
pub fn give_back_needed(v: &View<'_>, _notes: &mut Vec<Reason>) -> StepResult {
    let mut nodes = Vec::new();
    let mut reasons = Vec::new();
    for n in v.members.iter().filter_map(|m| m.node) {
        if !policy::cordoned_by_us(n) || n.deleting || !n.ready {
            continue;
        }
        if policy::disruption_of(n) != DisruptionReason::Empty {
            continue;
        }
        // A pod on its way out does not need it.
        let left: Vec<&PodInfo> = remaining(v, n)
            .into_iter()
            .filter(|p| !p.deleting)
            .collect();
        let why = (!left.is_empty()).then(|| {
            format!(
                "{} was cordoned as empty but runs {} pod(s) that need it: {}",
                n.name,
                left.len(),
                list_pods(&left)
            )
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

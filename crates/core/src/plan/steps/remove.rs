//! Deleting the nodes nodewright cordoned once they are empty (or, for a broken node,
//! once its drain deadline passed), all in one action: the Node first, then the VM, and
//! only after their volumes detached. A node a person cordoned is never touched.

use super::drain::{past_deadline, remaining};
use super::StepResult;
use crate::plan::policy;
use crate::plan::view::{ServerState, View};
use crate::plan::{Action, NodeTarget, ObjectRef, Reason, ReasonCode};

pub fn remove_empty(v: &View<'_>, notes: &mut Vec<Reason>) -> StepResult {
    let mut targets = Vec::new();
    let mut reasons = Vec::new();
    for m in &v.members {
        let Some(n) = m.node else { continue };
        if m.state != ServerState::Joined || !policy::cordoned_by_us(n) {
            continue;
        }
        let left = remaining(v, n);
        let forced = policy::disruption_of(n).forced() && past_deadline(v, n);
        if !left.is_empty() && !forced {
            continue;
        }
        let attached: Vec<&str> = v
            .volume_attachments
            .iter()
            .filter(|(_, node)| *node == n.name)
            .map(|(name, _)| name.as_str())
            .collect();
        // A broken node past its deadline will never detach them itself.
        if !attached.is_empty() && !forced {
            notes.push(
                Reason::new(
                    ReasonCode::VolumesAttached,
                    format!(
                        "{} is empty but {} volume(s) are still attached ({}); waiting for them to detach",
                        n.name,
                        attached.len(),
                        attached.join(", ")
                    ),
                )
                .about([ObjectRef::node(&n.name)]),
            );
            continue;
        }
        let message = if forced {
            format!(
                "{} is unhealthy and its drain passed drain.timeout; deleting it with {} pod(s) left",
                n.name,
                left.len()
            )
        } else {
            format!("{} is cordoned and runs no pods that need it", n.name)
        };
        let code = if forced {
            ReasonCode::NodeUnhealthy
        } else {
            ReasonCode::NodeEmpty
        };
        reasons.push(Reason::new(code, message).about([ObjectRef::node(&n.name)]));
        targets.push(NodeTarget {
            node: n.name.clone(),
            server: m.server_ref(),
        });
    }
    if targets.is_empty() {
        return None;
    }
    Some((Action::DeleteNodes { nodes: targets }, reasons))
}

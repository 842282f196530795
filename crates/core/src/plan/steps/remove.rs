//! Deleting the nodes nodewright cordoned once they are empty (or, for a broken node,
//! once its drain deadline passed; for an expired one, once its hard limit passed and
//! nothing more can be evicted), all in one action: the Node first, then the VM, and
//! only after their volumes detached. A node a person cordoned is never touched.

use super::deadlines::{hard_limit_overdue, hard_limit_reached, past_deadline, remaining};
use super::StepResult;
use crate::model::{ObjectRef, PodRef};
use crate::plan::policy;
use crate::plan::view::{ServerState, View};
use crate::plan::{Action, NodeTarget, Reason, ReasonCode};

pub fn remove_empty(v: &View<'_>, notes: &mut Vec<Reason>) -> StepResult {
    let mut targets = Vec::new();
    let mut reasons = Vec::new();
    for m in &v.members {
        let Some(n) = m.node else { continue };
        if m.state != ServerState::Joined || !policy::cordoned_by_us(n) {
            continue;
        }
        // Cordoned as unhealthy and recovered since: given back by the drain step.
        if policy::recovered(n, m.vm_error) {
            continue;
        }
        let left = remaining(v, n);
        // A broken node past its deadline, or an expired one past its hard limit with
        // nothing more to evict, goes with what is left.
        let expired_limit = hard_limit_reached(v, n, &left);
        let broken = policy::broken_now(n) && past_deadline(v, n);
        let forced = broken || expired_limit;
        if !left.is_empty() && !forced {
            continue;
        }
        // Data only this node holds (a pod's local volume, or one no pod uses now): its
        // VM is never destroyed, broken or past a hard limit; the drain step gives back
        // a node cordoned for a voluntary reason.
        if let Some(data) = policy::kept_data(v, n) {
            notes.push(
                Reason::new(
                    ReasonCode::DrainBlocked,
                    format!("{} is not deleted: {data}", n.name),
                )
                .about([ObjectRef::node(&n.name)]),
            );
            continue;
        }
        let attached: Vec<&str> = v
            .volume_attachments
            .iter()
            .filter(|(_, node)| *node == n.name)
            .map(|(name, _)| name.as_str())
            .collect();
        // A broken node past its deadline will never detach them itself; an expired one
        // waits for them up to drain.timeout past its hard limit.
        if !attached.is_empty() && !broken && !hard_limit_overdue(v, n) {
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
        let (code, message) = if left.is_empty() {
            (
                ReasonCode::NodeEmpty,
                format!("{} is cordoned and runs no pods that need it", n.name),
            )
        } else if broken {
            (
                ReasonCode::NodeUnhealthy,
                format!(
                    "{} is unhealthy and its drain passed drain.timeout; deleting it with {} pod(s) left",
                    n.name,
                    left.len()
                ),
            )
        } else {
            (
                ReasonCode::NodeTooOld,
                format!(
                    "{} is expired and its drain passed drain.terminationGracePeriod; deleting it with {} pod(s) left: {}",
                    n.name,
                    left.len(),
                    super::list_pods(&left)
                ),
            )
        };
        reasons.push(Reason::new(code, message).about([ObjectRef::node(&n.name)]));
        let parked = targets.iter().filter(|t: &&NodeTarget| t.park).count() as u32;
        // By name, not in the order the API listed them: the same pods, the same action.
        let mut leaving: Vec<PodRef> = left
            .iter()
            .map(|p| PodRef {
                namespace: p.namespace.clone(),
                name: p.name.clone(),
            })
            .collect();
        leaving.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        targets.push(NodeTarget {
            node: n.name.clone(),
            server: m.server_ref(),
            park: super::pools::parks(v, m, parked),
            leaving,
        });
    }
    if targets.is_empty() {
        return None;
    }
    Some((Action::DeleteNodes { nodes: targets }, reasons))
}

//! Nodes NotReady past `health.unhealthyAfter` that hold data only they can reach are
//! never replaced (see `disrupt::replace`): their VM is kept for a person. In a group
//! with `unreachableWithLocalData: stop` the VM is also stopped, once per NotReady spell,
//! so a guest cut off from the cluster cannot go on writing to that data out of sight.
//! The stop is recorded on the VM ([`crate::cloud::FENCED_TAG`]): a VM a person started
//! again is never stopped again for the same spell, and nothing is ever deleted.

use std::time::SystemTime;

use super::StepResult;
use crate::config::UnreachableData;
use crate::model::{unix_secs, NodeInfo, ObjectRef, ServerStatus};
use crate::plan::policy;
use crate::plan::view::{Member, ServerState, View};
use crate::plan::{Action, Reason, ReasonCode};

/// When `n`'s current NotReady spell began, if it is NotReady.
fn not_ready_since(n: &NodeInfo) -> Option<SystemTime> {
    (!n.ready).then(|| n.ready_changed.unwrap_or(n.created))
}

/// Whether `m` is a running VM to stop now, and why (the data its node holds).
fn due(v: &View<'_>, m: &Member<'_>) -> Option<String> {
    if m.group.unreachable_with_local_data != UnreachableData::Stop
        || m.state != ServerState::Joined
        || m.server.status != ServerStatus::Active
        || v.frozen.contains_key(m.group.name.as_str())
    {
        return None;
    }
    let n = m.node?;
    let since = not_ready_since(n)?;
    if n.deleting || v.age(since) <= v.config.health.unhealthy_after {
        return None;
    }
    // Stopped in this spell already: started again since by a person, it is theirs.
    if m.server.fenced.is_some_and(|at| at >= since) {
        return None;
    }
    policy::kept_data(v, n)
}

/// Stops the VMs of NotReady nodes holding data only they can reach, in groups that ask
/// for it; never while so many nodes are unready that the fault is likelier on this
/// side (the same guard that stops every disruption).
pub fn stop_unreachable(v: &View<'_>, notes: &mut Vec<Reason>) -> StepResult {
    let due: Vec<(&Member<'_>, String)> = v
        .members
        .iter()
        .filter_map(|m| due(v, m).map(|d| (m, d)))
        .collect();
    if due.is_empty() {
        return None;
    }
    if let Some((unready, total)) = policy::unready_guard(v) {
        notes.push(Reason::new(
            ReasonCode::TooManyUnready,
            format!(
                "{unready} of {total} managed nodes are unready; no VM is stopped for unreachableWithLocalData until they recover ({} due)",
                due.len()
            ),
        ));
        return None;
    }
    let reasons = due
        .iter()
        .map(|(m, data)| {
            Reason::new(
                ReasonCode::NodeUnhealthy,
                format!(
                    "{} is NotReady past health.unhealthyAfter holding {data}; its VM is stopped (group {}: unreachableWithLocalData: stop) and kept, never deleted",
                    m.server.name, m.group.name
                ),
            )
            .about([ObjectRef::node(&m.server.name)])
        })
        .collect();
    let servers = due.iter().map(|(m, _)| m.server_ref()).collect();
    Some((
        Action::StopUnreachable {
            servers,
            at: unix_secs(v.now),
        },
        reasons,
    ))
}

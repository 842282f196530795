//! VMs that joined and whose Node is gone ([`ServerState::Vanished`] without a Node): a
//! kubelet registers its Node only when it starts, so such a VM never comes back by
//! itself. It is restarted once (its disks stay), the restart recorded on the VM; if no
//! Node is back `provisionTimeout` after, it is reported, never deleted nor restarted
//! again.

use std::time::{Duration, SystemTime};

use super::StepResult;
use crate::model::{unix_secs, ObjectRef, ServerStatus};
use crate::plan::view::{Member, ServerState, View};
use crate::plan::{Action, Reason, ReasonCode};

/// Where a VM that joined and lost its Node is in its one restart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Restart {
    /// Not restarted for it yet: restart it now.
    Due,
    /// Restarted at this time, less than `provisionTimeout` ago: its Node may come back.
    Waiting(SystemTime),
    /// Restarted at this time, `provisionTimeout` or more ago, and still no Node: left
    /// to a person.
    GaveUp(SystemTime),
    /// Not one to restart: its Node is there (not Ready or tainted yet), the VM does
    /// not run (a person stopped it; stopping and starting is theirs), or its group is
    /// frozen.
    No,
}

/// Where `m`, a member that joined and has no Ready untainted Node of ours now, is in its
/// restart.
pub(super) fn restart_of(v: &View<'_>, m: &Member<'_>) -> Restart {
    if m.state != ServerState::Vanished
        || m.node.is_some()
        || v.frozen.contains_key(m.group.name.as_str())
    {
        return Restart::No;
    }
    match m.server.restarted {
        Some(at) if v.age(at) >= v.config.provision_timeout => Restart::GaveUp(at),
        Some(at) => Restart::Waiting(at),
        None if m.server.status == ServerStatus::Active => Restart::Due,
        None => Restart::No,
    }
}

/// The note for a member that joined and lost its Node, by where it is in its restart.
pub(super) fn vanished_note(v: &View<'_>, m: &Member<'_>) -> Reason {
    let vm = format!("VM {} of group {}", m.server.name, m.group.name);
    let timeout = humantime::format_duration(v.config.provision_timeout);
    let (code, said) = match restart_of(v, m) {
        Restart::GaveUp(at) => (
            ReasonCode::NodeLostAfterRestart,
            format!(
                "{vm} joined as a node, lost its Node, and was restarted once {} ago; no Node came back within provisionTimeout ({timeout}). It is left running, never deleted nor restarted again for it: look at the VM (its kubelet, its join), or delete it yourself",
                ago(v, at)
            ),
        ),
        Restart::Waiting(at) => (
            ReasonCode::NodeVanished,
            format!(
                "{vm} joined as a node and lost its Node; it was restarted {} ago so its kubelet registers the Node again, and is waited on until provisionTimeout ({timeout}) after the restart",
                ago(v, at)
            ),
        ),
        Restart::Due => (
            ReasonCode::NodeVanished,
            format!(
                "{vm} joined as a node but has no Node now; it is restarted once so its kubelet registers the Node again (a kubelet registers only when it starts), never removed for it"
            ),
        ),
        Restart::No if m.node.is_some() => (
            ReasonCode::NodeVanished,
            format!(
                "{vm} joined as a node but has a Node again that is not Ready and untainted yet; it is waited on, never removed for it"
            ),
        ),
        Restart::No => (
            ReasonCode::NodeVanished,
            format!(
                "{vm} joined as a node but has no Node now and is not running; it is left as it is, never removed for it (start it to have its kubelet register the Node again, or delete it yourself)"
            ),
        ),
    };
    Reason::new(code, said).about([ObjectRef::node(&m.server.name)])
}

fn ago(v: &View<'_>, at: SystemTime) -> humantime::FormattedDuration {
    humantime::format_duration(Duration::from_secs(v.age(at).as_secs()))
}

/// VMs that joined, lost their Node and were not restarted for it yet: restart them (all
/// at once), each recording the restart on itself first. Never while the cluster lists
/// no node of ours at all (the view looks wrong: a wrong kubeconfig, an API server that
/// lists no nodes, see `clean_up_failed`).
pub fn restart_vanished(v: &View<'_>, _notes: &mut Vec<Reason>) -> StepResult {
    if v.members.iter().all(|m| m.node.is_none()) {
        return None;
    }
    let due: Vec<&Member<'_>> = v
        .members
        .iter()
        .filter(|m| restart_of(v, m) == Restart::Due)
        .collect();
    if due.is_empty() {
        return None;
    }
    let reasons = due
        .iter()
        .map(|m| {
            Reason::new(
                ReasonCode::NodeVanished,
                format!(
                    "VM {} of group {} joined as a node but its Node is gone; restarting it once so its kubelet registers the Node again (its disks stay)",
                    m.server.name, m.group.name
                ),
            )
            .about([ObjectRef::node(&m.server.name)])
        })
        .collect();
    // Never before a VM's own clock or joined mark: the restart is of this life.
    let at = unix_secs(v.now).max(
        due.iter()
            .map(|m| unix_secs(m.server.created).max(m.server.joined.map_or(0, unix_secs)))
            .max()
            .unwrap_or(0),
    );
    let servers = due.iter().map(|m| m.server_ref()).collect();
    Some((Action::RestartVanished { servers, at }, reasons))
}

//! New nodes becoming usable, and VMs that failed to become nodes.

use std::time::Duration;

use super::StepResult;
use crate::plan::view::{Member, ServerState, View};
use crate::plan::{Action, ObjectRef, Reason, ReasonCode};
use crate::STARTUP_TAINT_KEY;

/// New nodes are Ready: take the startup taint off all of them at once, so pods can land.
pub fn finish_provisioning(v: &View<'_>, _notes: &mut Vec<Reason>) -> StepResult {
    let ready: Vec<&Member<'_>> = v
        .members
        .iter()
        .filter(|m| {
            !matches!(m.state, ServerState::Deleting)
                && m.node
                    .is_some_and(|n| n.ready && n.has_taint(STARTUP_TAINT_KEY) && !n.deleting)
        })
        .collect();
    if ready.is_empty() {
        return None;
    }
    let reasons = ready
        .iter()
        .map(|m| {
            Reason::new(
                ReasonCode::NodeReady,
                format!("node {} of group {} is Ready", m.server.name, m.group.name),
            )
            .about([ObjectRef::node(&m.server.name)])
        })
        .collect();
    let nodes = ready.iter().map(|m| m.server.name.clone()).collect();
    Some((Action::RemoveStartupTaint { nodes }, reasons))
}

/// VMs in error, or that never joined in time, are deleted with any node they left.
pub fn clean_up_failed(v: &View<'_>, notes: &mut Vec<Reason>) -> StepResult {
    for m in v
        .members
        .iter()
        .filter(|m| m.state == ServerState::Disowned)
    {
        notes.push(
            Reason::new(
                ReasonCode::NodeDisowned,
                format!(
                    "node {} no longer carries nodewright's labels for group {}; its VM {} is left alone (put the labels back to manage it again, or delete both yourself)",
                    m.server.name, m.group.name, m.server.id
                ),
            )
            .about([ObjectRef::node(&m.server.name)]),
        );
    }
    let failed: Vec<&Member<'_>> = v
        .members
        .iter()
        .filter(|m| m.state == ServerState::Failed)
        .collect();
    if failed.is_empty() {
        return None;
    }
    let mut reasons = Vec::new();
    for m in &failed {
        let about = m.node.map(|n| ObjectRef::node(&n.name));
        let age =
            humantime::format_duration(Duration::from_secs(v.age(m.server.created).as_secs()));
        reasons.push(
            match m.server.status {
                crate::cloud::ServerStatus::Error => Reason::new(
                    ReasonCode::ServerError,
                    match &m.server.fault {
                        Some(fault) => {
                            format!("VM {} reports an error state: {fault}", m.server.name)
                        }
                        None => format!("VM {} reports an error state", m.server.name),
                    },
                ),
                crate::cloud::ServerStatus::Incomplete => Reason::new(
                    ReasonCode::ServerError,
                    format!(
                        "VM {} was left half-made: the process creating it stopped before configuring it",
                        m.server.name
                    ),
                ),
                _ if m.node.is_none() => Reason::new(
                    ReasonCode::ProvisionTimeout,
                    format!(
                        "VM {} has no node of ours after {age} (provisionTimeout {})",
                        m.server.name,
                        humantime::format_duration(v.config.provision_timeout)
                    ),
                ),
                _ => Reason::new(
                    ReasonCode::ProvisionTimeout,
                    format!(
                        "node {} is not Ready {age} after its VM was created (provisionTimeout {})",
                        m.server.name,
                        humantime::format_duration(v.config.provision_timeout)
                    ),
                ),
            }
            .about(about),
        );
    }
    let nodes = failed
        .iter()
        .filter_map(|m| m.node.map(|n| n.name.clone()))
        .collect();
    let servers = failed.iter().map(|m| m.server_ref()).collect();
    Some((Action::DeleteServers { servers, nodes }, reasons))
}

//! New nodes becoming usable, and VMs that failed to become nodes.

use std::time::Duration;

use super::StepResult;
use crate::model::{unix_secs, ObjectRef, ServerStatus, STARTUP_TAINT_KEY};
use crate::plan::view::{Member, ServerState, View};
use crate::plan::{backoff, Action, Reason, ReasonCode, Target};

/// At most this many VMs are removed for not joining (no Ready node `provisionTimeout`
/// after creation) per `provisionTimeout`, oldest first, counted from the times the
/// cluster records and this process remembers (see [`crate::plan::Snapshot::not_joined_removed`]);
/// the rest wait. A view of the cluster that lost its nodes for a moment then costs a VM
/// or two, not all of them, however many cycles it lasts, and a burst of VMs that really
/// failed still goes. VMs the cloud itself reports in error, or still building (never
/// booted), are not counted: the cloud's word is not a blind spot.
pub const MAX_NOT_JOINED_PER_ACTION: usize = 2;

/// How many names a note about many VMs lists.
const SHOWN: usize = 10;

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

/// VMs in error, or that never joined in time, are deleted with any node they left; at
/// most [`MAX_NOT_JOINED_PER_ACTION`] per `provisionTimeout` for not joining, and none
/// that booted while the cluster lists no managed node at all although VMs that joined,
/// or that have run for over twice `provisionTimeout`, exist (the view looks wrong,
/// whatever the VMs' marks say). Before any is, the joined marks
/// due are written (after an upgrade, VMs of an older release carry none). VMs that
/// joined once and lost their Node ([`ServerState::Vanished`]) are only reported here
/// (their one restart is [`super::restart_vanished`]'s). VMs
/// whose removing mark is stale ([`Server::removal_is_stale`](crate::model::Server::removal_is_stale): older than `provisionTimeout`, or
/// written by an older release with no time) and whose Node is gone go with the VMs
/// that never joined, under the same rate and blind-view guard: a `kubectl delete node`
/// or a blind moment years after a failed delete never destroys them at once.
pub fn clean_up_failed(v: &View<'_>, notes: &mut Vec<Reason>) -> StepResult {
    for m in v
        .members
        .iter()
        .filter(|m| m.state == ServerState::Disowned)
    {
        let said = if m.node.is_some() {
            format!(
                "VM {} ({}) of node {} lost its cloud marks (the cloud shows it unconfigured, yet its node registered); it is left alone with its node (put its tags back to manage it again, or delete both yourself)",
                m.server.name, m.server.id, m.server.name
            )
        } else {
            format!(
                "node {} no longer carries nodewright's labels for group {}; its VM {} is left alone (put the labels back to manage it again, or delete both yourself)",
                m.server.name, m.group.name, m.server.id
            )
        };
        notes.push(
            Reason::new(ReasonCode::NodeDisowned, said).about([ObjectRef::node(&m.server.name)]),
        );
    }
    let blind = report_vanished(v, notes);
    let failed: Vec<&Member<'_>> = v
        .members
        .iter()
        .filter(|m| m.state == ServerState::Failed)
        .collect();
    let (cloud_says, mut not_joined): (Vec<&Member<'_>>, Vec<&Member<'_>>) =
        failed.into_iter().partition(|m| {
            matches!(
                m.server.status,
                ServerStatus::Error | ServerStatus::Incomplete
            )
        });
    not_joined.extend(stale_removals(v));
    // A VM that never booted (the cloud still builds it) is no node whatever the view;
    // one that booted may be a node the view does not show. One that has run for twice
    // `provisionTimeout` outlived the time a VM that never joined is removed in: with no
    // node of ours in view, it is far likelier a node out of sight (an API server that
    // lists no nodes) than a failed create, whatever its marks say.
    let no_node_in_view = v.members.iter().all(|m| m.node.is_none());
    let (booted, never_booted): (Vec<&Member<'_>>, Vec<&Member<'_>>) = not_joined
        .iter()
        .copied()
        .partition(|m| m.server.status != ServerStatus::Building);
    let long_running = booted
        .iter()
        .filter(|m| v.age(m.server.created) > v.config.provision_timeout * 2)
        .count();
    if blind && !booted.is_empty() {
        notes.push(Reason::new(
            ReasonCode::ClusterViewSuspect,
            format!(
                "{} VM(s) past provisionTimeout without a Ready node are kept this cycle: {}",
                booted.len(),
                names(&booted)
            ),
        ));
        not_joined = never_booted;
    } else if no_node_in_view && long_running > 0 {
        notes.push(Reason::new(
            ReasonCode::ClusterViewSuspect,
            format!(
                "the cluster view looks wrong: the cluster lists no node of ours while {} VM(s) run without one, {long_running} of them for over twice provisionTimeout; none is removed for not joining until nodes of ours are seen (check the kubeconfig and that the API server lists the nodes; if they really never joined, delete them yourself): {}",
                booted.len(),
                names(&booted)
            ),
        ));
        not_joined = never_booted;
    }
    // Oldest first; the name breaks ties so the choice is stable from cycle to cycle. VMs
    // whose delete keeps failing and is held back go last: taken first, two of them would
    // hold back the whole action, and every other VM that never joined with it.
    let kind = Action::DeleteServers {
        servers: Vec::new(),
        nodes: Vec::new(),
    }
    .kind();
    let held = |m: &Member<'_>| {
        backoff::is_held_back(
            kind,
            Target::Server(&m.server_ref()),
            v.action_backoff,
            v.now,
        )
    };
    not_joined.sort_by(|a, b| {
        (held(a), a.server.created, &a.server.name).cmp(&(
            held(b),
            b.server.created,
            &b.server.name,
        ))
    });
    let timeout = v.config.provision_timeout;
    let recent = v
        .not_joined_removed
        .iter()
        .filter(|t| v.now.duration_since(**t).unwrap_or_default() < timeout)
        .count();
    let allowed = MAX_NOT_JOINED_PER_ACTION.saturating_sub(recent);
    if not_joined.len() > allowed {
        let later = not_joined.split_off(allowed);
        notes.push(Reason::new(
            ReasonCode::ProvisionTimeout,
            format!(
                "{} more VM(s) past provisionTimeout without a Ready node wait (at most {MAX_NOT_JOINED_PER_ACTION} are removed for not joining per provisionTimeout of {}; {recent} were in the last one): {}",
                later.len(),
                humantime::format_duration(timeout),
                names(&later)
            ),
        ));
    }
    // Marks first: a VM whose node is in view but unmarked would be taken for one that
    // never joined the next time the view goes blind.
    if !not_joined.is_empty() {
        if let Some(marking) = mark_joined(v, notes) {
            notes.push(Reason::new(
                ReasonCode::ProvisionTimeout,
                format!(
                    "{} VM(s) past provisionTimeout without a Ready node wait until the joined marks are written: {}",
                    not_joined.len(),
                    names(&not_joined)
                ),
            ));
            return Some(marking);
        }
    }
    let failed: Vec<&Member<'_>> = cloud_says.into_iter().chain(not_joined).collect();
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
                ServerStatus::Removing => Reason::new(
                    ReasonCode::RemovalStale,
                    format!(
                        "VM {} of group {} was marked as being removed {} and has no Node; deleting it under the rate of VMs that never joined",
                        m.server.name,
                        m.group.name,
                        match m.server.removing_since {
                            Some(at) => format!(
                                "{} ago",
                                humantime::format_duration(Duration::from_secs(
                                    v.age(at).as_secs()
                                ))
                            ),
                            None => "by an older release (the mark has no time)".to_string(),
                        }
                    ),
                ),
                ServerStatus::Error => Reason::new(
                    ReasonCode::ServerError,
                    match &m.server.fault {
                        Some(fault) => {
                            format!("VM {} reports an error state: {fault}", m.server.name)
                        }
                        None => format!("VM {} reports an error state", m.server.name),
                    },
                ),
                ServerStatus::Incomplete => Reason::new(
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

/// VMs whose removal began within `provisionTimeout` (marked removing, their Node gone)
/// and did not finish: their delete is made again. A failed delete is held back per VM
/// (see [`crate::plan::backoff`]), and the VM is never capacity nor a failed create
/// meanwhile. Stale marks are left to [`clean_up_failed`].
pub fn finish_removal(v: &View<'_>, _notes: &mut Vec<Reason>) -> StepResult {
    let removing: Vec<&Member<'_>> = v
        .members
        .iter()
        .filter(|m| m.state == ServerState::Removing)
        .filter(|m| !v.frozen.contains_key(m.group.name.as_str()))
        .filter(|m| !m.server.removal_is_stale(v.config.provision_timeout, v.now))
        .collect();
    if removing.is_empty() {
        return None;
    }
    let reasons = removing
        .iter()
        .map(|m| {
            Reason::new(
                ReasonCode::RemovalUnfinished,
                format!(
                    "VM {} of group {} was being removed and is still there; deleting it again",
                    m.server.name, m.group.name
                ),
            )
        })
        .collect();
    let servers = removing.iter().map(|m| m.server_ref()).collect();
    Some((
        Action::DeleteServers {
            servers,
            nodes: Vec::new(),
        },
        reasons,
    ))
}

/// VMs marked as being removed, with no Node, whose mark is older than
/// `provisionTimeout` or has no time: no removal of this process is in flight for them.
fn stale_removals<'v, 'a>(v: &'v View<'a>) -> impl Iterator<Item = &'v Member<'a>> {
    v.members.iter().filter(|m| {
        m.state == ServerState::Removing
            && !v.frozen.contains_key(m.group.name.as_str())
            && m.server.removal_is_stale(v.config.provision_timeout, v.now)
    })
}

/// Notes for the VMs that joined once and have no Ready node of ours now; true when no
/// managed node is in view at all while some of them have none: the cluster view looks
/// wrong (a wrong kubeconfig, an etcd restore, an API server that lists no nodes), as
/// when every node of a cluster would have vanished at once.
fn report_vanished(v: &View<'_>, notes: &mut Vec<Reason>) -> bool {
    let vanished: Vec<&Member<'_>> = v
        .members
        .iter()
        .filter(|m| m.state == ServerState::Vanished)
        .collect();
    let nodeless: Vec<&Member<'_>> = vanished
        .iter()
        .copied()
        .filter(|m| m.node.is_none())
        .collect();
    let blind = !nodeless.is_empty() && v.members.iter().all(|m| m.node.is_none());
    if blind {
        notes.push(Reason::new(
            ReasonCode::ClusterViewSuspect,
            format!(
                "the cluster view looks wrong: {} joined VM(s) have no Node and the cluster lists no node of ours at all; nothing is removed for not joining until nodes are seen again (check the kubeconfig and that the API server lists the nodes): {}",
                nodeless.len(),
                names(&nodeless)
            ),
        ));
        return true;
    }
    for m in vanished {
        notes.push(super::restart::vanished_note(v, m));
    }
    false
}

/// Up to [`SHOWN`] VM names, and how many more.
fn names(members: &[&Member<'_>]) -> String {
    let mut out: Vec<String> = members
        .iter()
        .take(SHOWN)
        .map(|m| m.server.name.clone())
        .collect();
    if members.len() > SHOWN {
        out.push(format!("and {} more", members.len() - SHOWN));
    }
    out.join(", ")
}

/// Nodes of ours that are Ready on VMs without the joined mark: record it on the cloud
/// (all at once), so a later process, whatever the cluster shows it, knows they ran. Low
/// in priority: a provider that refuses the mark never holds back scale-up or removal.
/// A VM still marked as being removed whose node is in service again (Ready, untainted,
/// not cordoned: its kubelet registered it again and it was let in, or a person
/// uncordoned it) is marked the same way, which takes its removing mark off: an old
/// removing mark would otherwise have it deleted at once, uncapped, the moment its Node
/// is lost again. A VM restarted because its Node was gone whose node is back is marked
/// the same way, which takes its restart mark off: a later loss of its Node is answered
/// by a restart again.
pub fn mark_joined(v: &View<'_>, _notes: &mut Vec<Reason>) -> StepResult {
    let due: Vec<&Member<'_>> = v
        .members
        .iter()
        .filter(|m| {
            m.state == ServerState::Joined
                && !v.frozen.contains_key(m.group.name.as_str())
                && m.node.is_some_and(|n| {
                    n.ready
                        && (!m.server.ever_joined()
                            || m.server.restarted.is_some()
                            || (m.server.status == ServerStatus::Removing && !n.unschedulable))
                })
        })
        .collect();
    if due.is_empty() {
        return None;
    }
    // Never before a VM's own clock, so the mark always counts as this life's.
    let at = due
        .iter()
        .map(|m| unix_secs(m.server.created))
        .fold(unix_secs(v.now), u64::max);
    let reasons = due
        .iter()
        .map(|m| {
            Reason::new(
                ReasonCode::NodeReady,
                if m.server.restarted.is_some() && m.server.ever_joined() {
                    format!(
                        "node {} of group {} is back after its VM's restart; the restart mark is taken off",
                        m.server.name, m.group.name
                    )
                } else if m.server.status == ServerStatus::Removing {
                    format!(
                        "node {} of group {} is in service again; its VM's removing mark is taken off",
                        m.server.name, m.group.name
                    )
                } else {
                    format!(
                        "node {} of group {} is Ready; its VM carries no joined mark yet",
                        m.server.name, m.group.name
                    )
                },
            )
            .about([ObjectRef::node(&m.server.name)])
        })
        .collect();
    let servers = due.iter().map(|m| m.server_ref()).collect();
    Some((Action::MarkJoined { servers, at }, reasons))
}

/// VMs started for a join by script that a process gone never saw run
/// ([`ServerStatus::JoinPending`]): the script is run again, well before
/// `provisionTimeout`; a VM whose node registered meanwhile is only recorded as joined.
/// VMs past `provisionTimeout` are left to [`clean_up_failed`].
pub fn finish_joins(v: &View<'_>, _notes: &mut Vec<Reason>) -> StepResult {
    let due: Vec<&Member<'_>> = v
        .members
        .iter()
        .filter(|m| {
            m.server.status == ServerStatus::JoinPending
                && !v.frozen.contains_key(m.group.name.as_str())
                && matches!(
                    m.state,
                    ServerState::Provisioning | ServerState::Joined | ServerState::Vanished
                )
        })
        .collect();
    if due.is_empty() {
        return None;
    }
    let registered: Vec<String> = due
        .iter()
        .filter(|m| m.node.is_some() || m.state != ServerState::Provisioning)
        .map(|m| m.server.name.clone())
        .collect();
    let reasons = due
        .iter()
        .map(|m| {
            let said = if registered.contains(&m.server.name) {
                format!(
                    "VM {} of group {}: the process that started it stopped before its join script was seen to run, and its node registered; recording the join as done",
                    m.server.name, m.group.name
                )
            } else {
                format!(
                    "VM {} of group {}: the process that started it stopped before its join script ran; running it again",
                    m.server.name, m.group.name
                )
            };
            Reason::new(ReasonCode::JoinUnfinished, said)
        })
        .collect();
    let servers = due.iter().map(|m| m.server_ref()).collect();
    Some((
        Action::FinishJoin {
            servers,
            registered,
        },
        reasons,
    ))
}

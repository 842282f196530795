//! Which Kubernetes Events a cycle's decision and result produce. Pure, so the mapping
//! is tested without an API server; posting is [`crate::cluster::events`].

use super::Outcome;
use crate::cluster::events::EventSpec;
use crate::plan::{Action, Decision, ObjectRef, ReasonCode};

fn ev(object: ObjectRef, reason: &str, message: String, warning: bool) -> EventSpec {
    EventSpec {
        object,
        reason: reason.to_string(),
        message,
        warning,
    }
}

/// The objects an action touches, for failure events.
fn action_objects(action: &Action) -> Vec<ObjectRef> {
    match action {
        Action::RemoveStartupTaint { node }
        | Action::Cordon { node, .. }
        | Action::Drain { node, .. }
        | Action::DeleteNode { node, .. }
        | Action::PullImages { node, .. } => vec![ObjectRef::node(node)],
        Action::DeleteServers { nodes, .. } => nodes.iter().map(|n| ObjectRef::node(n)).collect(),
        Action::ScaleUp { .. } | Action::None | Action::DeletePods { .. } => Vec::new(),
    }
}

pub fn events_for(decision: &Decision, result: Result<&Outcome, &str>) -> Vec<EventSpec> {
    let mut out = Vec::new();
    for note in &decision.notes {
        let (reason, warning) = match note.code {
            ReasonCode::NoGroupFits => ("NotTriggerScaleUp", true),
            ReasonCode::DrainBlocked => ("DrainBlocked", true),
            _ => continue,
        };
        for o in &note.objects {
            out.push(ev(o.clone(), reason, note.message.clone(), warning));
        }
    }
    let outcome = match result {
        Ok(o) => o,
        Err(error) => {
            let failing: Vec<ObjectRef> = action_objects(&decision.action)
                .into_iter()
                .chain(
                    decision
                        .reasons
                        .iter()
                        .filter(|r| r.code == ReasonCode::UnschedulablePods)
                        .flat_map(|r| r.objects.iter().cloned()),
                )
                .collect();
            for o in failing {
                out.push(ev(
                    o,
                    "ActionFailed",
                    format!("{} failed: {error}", decision.action),
                    true,
                ));
            }
            return out;
        }
    };
    match &decision.action {
        Action::ScaleUp { group, count } => {
            for r in decision
                .reasons
                .iter()
                .filter(|r| r.code == ReasonCode::UnschedulablePods)
            {
                for o in &r.objects {
                    out.push(ev(
                        o.clone(),
                        "TriggeredScaleUp",
                        format!("pod triggered scale-up: group {group} +{count}"),
                        false,
                    ));
                }
            }
        }
        Action::RemoveStartupTaint { node } => out.push(ev(
            ObjectRef::node(node),
            "StartupTaintRemoved",
            "node is Ready; startup taint removed, pods may schedule".into(),
            false,
        )),
        Action::Cordon { node, reason } => out.push(ev(
            ObjectRef::node(node),
            "Cordoned",
            format!("cordoned by nodewright: {reason}"),
            false,
        )),
        Action::Drain { node, .. } => {
            let mut msg = format!("evicted {} pod(s)", outcome.done.len());
            if !outcome.deferred.is_empty() {
                msg.push_str(&format!("; {}", outcome.deferred.join("; ")));
            }
            out.push(ev(
                ObjectRef::node(node),
                "Draining",
                msg,
                !outcome.deferred.is_empty(),
            ));
        }
        Action::DeleteNode { node, server } => out.push(ev(
            ObjectRef::node(node),
            "NodeDeleted",
            format!("empty cordoned node deleted with its VM {}", server.id),
            false,
        )),
        Action::DeleteServers { .. } => {
            for r in &decision.reasons {
                for o in &r.objects {
                    out.push(ev(o.clone(), "ProvisioningFailed", r.message.clone(), true));
                }
            }
        }
        Action::PullImages { node, images } => out.push(ev(
            ObjectRef::node(node),
            "PullingImages",
            format!("warming image cache: {}", images.join(", ")),
            false,
        )),
        Action::None | Action::DeletePods { .. } => {}
    }
    out
}

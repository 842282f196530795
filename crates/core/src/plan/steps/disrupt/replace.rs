//! Replacing nodes for a reason that does not depend on load (unhealthy, expired,
//! drifted): which candidates go, within the budget and the drain policy, and the group
//! whose new nodes take their pods when the others cannot. Apart from consolidation,
//! which judges nodes by how little they are needed.

use super::evict::evict_in_model;
use super::{cordon, first_blocking, movable, targets_hold};
use crate::config::DisruptionReason;
use crate::model::{NodeInfo, ObjectRef, PodInfo};
use crate::plan::policy;
use crate::plan::sched::{self, Model};
use crate::plan::steps::reasons::replacement_reason;
use crate::plan::steps::{deadlines, list_pods, room, StepResult};
use crate::plan::view::{Member, ServerState, View};
use crate::plan::{Action, Reason, ReasonCode};

/// Replaces nodes for a reason that does not depend on load.
pub(super) fn replace(
    v: &View<'_>,
    notes: &mut Vec<Reason>,
    reason: DisruptionReason,
) -> StepResult {
    let mut candidates: Vec<(&Member<'_>, &NodeInfo, Reason)> = v
        .members
        .iter()
        .filter(|m| m.state == ServerState::Joined)
        .filter_map(|m| m.node.map(|n| (m, n)))
        .filter(|(_, n)| !n.unschedulable && !n.deleting)
        .filter_map(|(m, n)| replacement_reason(v, m, n, reason).map(|r| (m, n, r)))
        .collect();
    // A broken node holding data no other node can reach keeps its VM: the node may be
    // back after maintenance or a host reboot, and its data with it. It is reported for
    // a person, never replaced for being NotReady.
    candidates.retain(|(m, n, why)| {
        if n.ready || reason != DisruptionReason::Unhealthy {
            return true;
        }
        let Some(data) = policy::kept_data(v, n) else {
            return true;
        };
        notes.push(why.clone());
        let vm = if m.group.unreachable_with_local_data == crate::config::UnreachableData::Stop
        {
            "its VM is stopped (unreachableWithLocalData: stop) and kept"
        } else {
            "its VM is kept"
        };
        notes.push(
            Reason::new(
                ReasonCode::DrainBlocked,
                format!(
                    "{} is not replaced though NotReady: {data}; {vm} for a person to bring back (or delete the claim, or let the data go by annotation or allowLocalVolumeLoss)",
                    n.name
                ),
            )
            .about([ObjectRef::node(&n.name)]),
        );
        false
    });
    if candidates.is_empty() {
        return None;
    }
    // Broken (not Ready) nodes are cordoned at once and drained whatever blocks; a Ready
    // node whose VM the cloud calls in error still runs its pods, so it is replaced by
    // the voluntary rules (one at a time, blockers honoured, room made first), and only
    // once no node is broken.
    let forced = reason.forced() && candidates.iter().any(|(_, n, _)| !n.ready);
    if forced {
        candidates.retain(|(_, n, _)| !n.ready);
    }
    candidates.sort_by_key(|(_, n, _)| n.created);
    let room = policy::budget_room(v, reason, v.now);
    if room == 0 {
        notes.push(Reason::new(
            ReasonCode::DisruptionBudgetExhausted,
            format!(
                "{} node(s) to replace ({}), but the disruption budget for `{}` allows no more now",
                candidates.len(),
                reason.as_str(),
                reason.as_str()
            ),
        ));
        return None;
    }
    let sd = &v.config.scale_down;
    if !forced {
        // One voluntary replacement at a time: pods still leaving another node need
        // the room the model would otherwise count as free. And after a drain had to
        // be abandoned, wait before trying again.
        if deadlines::draining(v) {
            return None;
        }
        if v.last_disruption_failure
            .is_some_and(|t| v.age(t) < sd.delay_after_failure)
        {
            notes.push(Reason::new(
                ReasonCode::DrainTimedOut,
                format!(
                    "{} node(s) to replace ({}) wait for scaleDown.delayAfterFailure {} after an abandoned drain",
                    candidates.len(),
                    reason.as_str(),
                    humantime::format_duration(sd.delay_after_failure)
                ),
            ));
            return None;
        }
    }
    if forced {
        // Broken nodes: cordon them all (within the budget); their drain has a deadline
        // after which they are deleted anyway.
        let take: Vec<_> = candidates.into_iter().take(room as usize).collect();
        let nodes = take.iter().map(|(_, n, _)| n.name.clone()).collect();
        let why = take.into_iter().map(|(_, _, r)| r).collect();
        return cordon(nodes, v, reason, "replacing: unhealthy", why);
    }
    // Pods whose local volumes the user let go are judged as they will come back: free
    // of the node their old volume was on (their claim is made anew).
    let released: Vec<PodInfo> = candidates
        .iter()
        .flat_map(|(_, n, _)| movable(v, n))
        .filter(|p| {
            policy::pinning_volume(v, p).is_some() && policy::unreleased_volume(v, p).is_none()
        })
        .map(|p| {
            let mut c = p.clone();
            let local = std::mem::take(&mut c.local_volumes);
            c.volume_affinity
                .retain(|terms| !local.iter().any(|l| l.affinity == *terms));
            c
        })
        .collect();
    let mut model: Option<Model<'_>> = None;
    for (m, n, why) in candidates {
        if policy::opted_out(n) {
            notes.push(why.clone());
            notes.push(
                Reason::new(
                    ReasonCode::DrainBlocked,
                    format!("{} opted out of removal by annotation; left alone", n.name),
                )
                .about([ObjectRef::node(&n.name)]),
            );
            continue;
        }
        let pods = movable(v, n);
        let blocking = first_blocking(v, &pods, false);
        // Data only this node holds is never given up for a hard limit: only the user's
        // opt-in (annotation or allowLocalVolumeLoss) lets such a pod go, or a volume no
        // pod uses now.
        let idle = policy::idle_volume(v, n);
        let keeps_data = idle.is_some()
            || blocking
                .as_ref()
                .is_some_and(|(_, code, _)| *code == "local-volume");
        let blocker = blocking
            .map(|(_, _, why)| why)
            .or_else(|| idle.map(ToString::to_string));
        let grace = deadlines::limit_for(v, reason).filter(|_| !keeps_data);
        if let (Some(b), Some(grace)) = (&blocker, grace) {
            // Past its life with a hard limit: what blocks it is evicted at the limit.
            notes.push(
                Reason::new(
                    ReasonCode::DrainBlocked,
                    format!(
                        "{} is replaced though {b}: its drain is forced after drain.terminationGracePeriod {}",
                        n.name,
                        humantime::format_duration(grace)
                    ),
                )
                .about([ObjectRef::node(&n.name)]),
            );
        } else if let Some(b) = blocker {
            notes.push(why.clone());
            notes.push(
                Reason::new(
                    ReasonCode::DrainBlocked,
                    format!("{} is not replaced now: {b}", n.name),
                )
                .about([ObjectRef::node(&n.name)]),
            );
            continue;
        }
        let pods: Vec<&PodInfo> = pods
            .into_iter()
            .map(|p| released.iter().find(|r| r.key() == p.key()).unwrap_or(p))
            .collect();
        let model = model.get_or_insert_with(|| v.model());
        let (left, _) = evict_in_model(v, model, &n.name, &pods);
        let targets = targets_hold(v, &[n]);
        if left.is_empty() && targets.is_ok() {
            let label = format!("replacing: {}", reason.as_str());
            return cordon(vec![n.name.clone()], v, reason, &label, vec![why]);
        }
        if v.provisioning().next().is_some() {
            notes.push(why);
            notes.push(Reason::new(
                ReasonCode::WaitingForProvisioning,
                format!(
                    "waiting for provisioning nodes before moving the pods of {}",
                    n.name
                ),
            ));
            return None;
        }
        // Add a node first, in a group that can really host what must move.
        let need: Vec<&PodInfo> = if left.is_empty() {
            pods.clone()
        } else {
            left.clone()
        };
        match replacement_group(v, m, &need) {
            Some((group, count)) => {
                let detail = match targets {
                    Err(t) if left.is_empty() => format!("without {}: {t}", n.name),
                    _ => format!(
                        "{} of its pods fit on no other node: {}",
                        left.len(),
                        list_pods(&left)
                    ),
                };
                return Some((
                    Action::ScaleUp {
                        group,
                        count,
                        size: None,
                    },
                    vec![
                        why,
                        Reason::new(ReasonCode::ReplacementNeedsCapacity, detail),
                    ],
                ));
            }
            None => {
                notes.push(why);
                notes.push(
                    Reason::new(
                        ReasonCode::ReplacementNeedsCapacity,
                        format!(
                            "{} stays: no group with room can host what it runs ({})",
                            n.name,
                            list_pods(&need)
                        ),
                    )
                    .about([ObjectRef::node(&n.name)]),
                );
            }
        }
    }
    None
}

/// The group (the node's own first) whose new nodes take every pod in `pods`, and how
/// many are needed; none when no group with room can.
fn replacement_group(v: &View<'_>, m: &Member<'_>, pods: &[&PodInfo]) -> Option<(String, u32)> {
    let mut model = v.model_for_new_nodes();
    let mut sorted = pods.to_vec();
    sched::sort_for_packing(&mut sorted, &v.reference_node());
    let own = std::iter::once(m.group).chain(
        v.config
            .node_groups
            .iter()
            .filter(|g| g.name != m.group.name),
    );
    for g in own {
        let room = room(v, g);
        let Some(info) = v.group(&g.name) else {
            continue;
        };
        if room == 0 {
            continue;
        }
        let nodes = sched::trial_new_nodes(
            &mut model,
            &sorted,
            &info.template,
            &info.overhead,
            room,
            info.zones(),
        );
        if nodes.count > 0 && nodes.placed.len() == sorted.len() {
            return Some((g.name.clone(), nodes.count));
        }
    }
    None
}

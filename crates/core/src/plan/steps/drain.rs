//! Draining the nodes nodewright cordoned, all at once, within a deadline: pods are
//! evicted as PodDisruptionBudgets allow, Job pods are waited for, and a voluntary
//! drain that cannot finish in time is abandoned (the node is uncordoned) instead of
//! wedging every later removal. An expired node with a hard limit
//! (`drain.terminationGracePeriod`) is never given back: past the limit its drain is forced.

use std::collections::BTreeSet;
use std::time::Duration;

use super::deadlines::{
    draining_for, forced_now, hard_limit, past_deadline, past_hard_limit, remaining,
};
use super::{list_pods, pod_ref, StepResult};
use crate::model::{ObjectRef, PodInfo, ANNOTATION_CORDONED};
use crate::plan::policy::{self, Blocker};
use crate::plan::view::View;
use crate::plan::{Action, Reason, ReasonCode};

/// Evicts what may go now from every node nodewright cordoned; abandons voluntary
/// drains past `drain.timeout` (forced ones end in deletion instead) and gives back
/// nodes cordoned as unhealthy that have recovered.
pub fn drain(v: &View<'_>, notes: &mut Vec<Reason>) -> StepResult {
    let mut give_back = Vec::new();
    let mut nodes = Vec::new();
    let mut evict: Vec<&PodInfo> = Vec::new();
    let mut reasons = Vec::new();
    let healed: Vec<String> = v
        .members
        .iter()
        .filter_map(|m| m.node.filter(|n| policy::recovered(n, m.vm_error)))
        .map(|n| n.name.clone())
        .collect();
    if !healed.is_empty() {
        let reason = Reason::new(
            ReasonCode::NodeReady,
            format!(
                "{} cordoned as unhealthy but Ready again with its VM running; giving the node(s) back",
                healed.join(", ")
            ),
        )
        .about(healed.iter().map(|n| ObjectRef::node(n)));
        return Some((
            Action::Uncordon {
                nodes: healed,
                reason: "recovered".into(),
            },
            vec![reason],
        ));
    }
    let mut keeps_data: Vec<(String, String)> = Vec::new();
    // Past the hard limit: pods PodDisruptionBudgets hold, deleted instead of evicted.
    let mut delete_nodes = Vec::new();
    let mut delete: Vec<&PodInfo> = Vec::new();
    let mut delete_reasons = Vec::new();
    for m in &v.members {
        let Some(n) = m.node.filter(|n| policy::cordoned_by_us(n)) else {
            continue;
        };
        let left = remaining(v, n);
        if left.is_empty() {
            // Cordoned for a voluntary reason (by a release before volumes no pod uses
            // pinned their node): such a node is not removed, so it is given back.
            if !policy::disruption_of(n).forced() {
                if let Some(h) = policy::idle_volume(v, n) {
                    keeps_data.push((n.name.clone(), h.to_string()));
                }
            }
            continue;
        }
        let limit = hard_limit(v, n);
        // A node with a hard limit is never given back: it drains until the limit.
        if limit.is_none() && past_deadline(v, n) {
            if policy::broken_now(n) {
                // remove-empty deletes it with what is left.
                continue;
            }
            give_back.push(n.name.clone());
            continue;
        }
        let forced = forced_now(v, n);
        let job_wait =
            !past_hard_limit(v, n) && draining_for(v, n) < v.config.drain.job_grace_period;
        let past_limit = past_hard_limit(v, n);
        let mut waiting_jobs = Vec::new();
        let mut blocked = Vec::new();
        let mut here = Vec::new();
        let mut held = Vec::new();
        for p in left.iter().copied().filter(|p| !p.deleting) {
            if policy::is_job(p) && job_wait {
                waiting_jobs.push(p);
                continue;
            }
            if past_limit && policy::pdb_held(v, p) && policy::unreleased_volume(v, p).is_none() {
                held.push(p);
                continue;
            }
            match policy::blocker(v, p) {
                None => here.push(p),
                // The eviction API refuses these anyway; the deadline ends the wait.
                Some(b @ Blocker::Budget(_)) => blocked.push((p, b)),
                // Data only this node holds: neither a hard limit nor a broken node lets
                // it go (a node NotReady now may come back with its disk).
                Some(b @ Blocker::LocalVolume(_)) => blocked.push((p, b)),
                // A broken node's pods, or an expired one's past its hard limit, go
                // whatever their annotations say.
                Some(_) if forced => here.push(p),
                Some(b) => blocked.push((p, b)),
            }
        }
        if !waiting_jobs.is_empty() {
            notes.push(
                Reason::new(
                    ReasonCode::DrainInProgress,
                    format!(
                        "{}: waiting for {} Job pod(s) to finish (drain.jobGracePeriod {}): {}",
                        n.name,
                        waiting_jobs.len(),
                        humantime::format_duration(v.config.drain.job_grace_period),
                        list_pods(&waiting_jobs)
                    ),
                )
                .about([ObjectRef::node(&n.name)]),
            );
        }
        if !blocked.is_empty() {
            let why: BTreeSet<String> = blocked
                .iter()
                .map(|(p, b)| format!("{} {b}", p.key()))
                .collect();
            notes.push(
                Reason::new(
                    ReasonCode::DrainBlocked,
                    format!(
                        "{}: waiting to evict ({} left before {}): {}",
                        n.name,
                        humantime::format_duration(Duration::from_secs(
                            limit
                                .unwrap_or(v.config.drain.timeout)
                                .saturating_sub(draining_for(v, n))
                                .as_secs()
                        )),
                        if limit.is_some() {
                            "drain.terminationGracePeriod"
                        } else {
                            "drain.timeout"
                        },
                        why.into_iter().collect::<Vec<_>>().join("; ")
                    ),
                )
                .about([ObjectRef::node(&n.name)]),
            );
        }
        if !held.is_empty() {
            delete_reasons.push(
                Reason::new(
                    ReasonCode::DrainInProgress,
                    format!(
                        "{} passed drain.terminationGracePeriod {}; deleting {} pod(s) a PodDisruptionBudget keeps from eviction, each with its grace period, before the node goes: {}",
                        n.name,
                        humantime::format_duration(limit.unwrap_or_default()),
                        held.len(),
                        list_pods(&held)
                    ),
                )
                .about([ObjectRef::node(&n.name)]),
            );
            delete_nodes.push(n.name.clone());
            delete.extend(held);
        }
        if here.is_empty() {
            continue;
        }
        reasons.push(
            Reason::new(
                ReasonCode::DrainInProgress,
                format!(
                    "{} is cordoned ({}) and still runs {} pod(s)",
                    n.name,
                    n.annotations
                        .get(ANNOTATION_CORDONED)
                        .map_or("", String::as_str),
                    left.len()
                ),
            )
            .about([ObjectRef::node(&n.name)]),
        );
        nodes.push(n.name.clone());
        evict.extend(here);
    }
    if !keeps_data.is_empty() {
        let nodes: Vec<String> = keeps_data.iter().map(|(n, _)| n.clone()).collect();
        let reasons = keeps_data
            .into_iter()
            .map(|(n, why)| {
                Reason::new(
                    ReasonCode::DrainBlocked,
                    format!("{n} is cordoned for removal but {why}; giving it back"),
                )
                .about([ObjectRef::node(&n)])
            })
            .collect();
        return Some((
            Action::Uncordon {
                nodes,
                reason: "holds a local volume".into(),
            },
            reasons,
        ));
    }
    if !give_back.is_empty() {
        let reason = Reason::new(
            ReasonCode::DrainTimedOut,
            format!(
                "drain of {} did not finish within drain.timeout {}; giving the node(s) back (scale-down pauses for scaleDown.delayAfterFailure)",
                give_back.join(", "),
                humantime::format_duration(v.config.drain.timeout)
            ),
        )
        .about(give_back.iter().map(|n| ObjectRef::node(n)));
        return Some((
            Action::Uncordon {
                nodes: give_back,
                reason: "drain did not finish in time".into(),
            },
            vec![reason],
        ));
    }
    if evict.is_empty() {
        if delete.is_empty() {
            return None;
        }
        let mut pods: Vec<_> = delete.iter().map(|p| pod_ref(p)).collect();
        pods.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        return Some((
            Action::DeletePodsPastLimit {
                nodes: delete_nodes,
                pods,
            },
            delete_reasons,
        ));
    }
    // By name, not in the order the API listed them: the same pods, the same action.
    let mut pods: Vec<_> = evict.iter().map(|p| pod_ref(p)).collect();
    pods.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    Some((Action::Drain { nodes, pods }, reasons))
}

/// Nodes of ours that someone uncordoned while nodewright's cordon record stayed: the
/// record goes first, before anything could read a later cordon as nodewright's.
pub fn forget_stale_cordons(v: &View<'_>, _notes: &mut Vec<Reason>) -> StepResult {
    let nodes: Vec<String> = v
        .members
        .iter()
        .filter_map(|m| m.node)
        .filter(|n| policy::stale_cordon(n))
        .map(|n| n.name.clone())
        .collect();
    if nodes.is_empty() {
        return None;
    }
    let reason = Reason::new(
        ReasonCode::DrainTimedOut,
        format!(
            "{} were uncordoned by someone else; nodewright stops removing them",
            nodes.join(", ")
        ),
    )
    .about(nodes.iter().map(|n| ObjectRef::node(n)));
    Some((Action::ForgetCordon { nodes }, vec![reason]))
}

//! Consolidation: which unneeded nodes go this cycle (empty ones together, then one
//! underutilized), within the disruption budgets, minSize, the free-capacity targets,
//! the group preference, and outside the delays after adds, deletes and failures. The
//! screening that finds them unneeded is apart, in `screen`.

use std::collections::BTreeMap;

use super::clock::unneeded_since;
use super::screen::{group_rank, unneeded, Unneeded};
use super::{cordon, in_service, movable, targets_hold, whole};
use crate::config::DisruptionReason;
use crate::model::{NodeInfo, ObjectRef};
use crate::plan::policy;
use crate::plan::steps::{deadlines, StepResult};
use crate::plan::unremovable::KeptReason;
use crate::plan::view::View;
use crate::plan::{Reason, ReasonCode};

/// Why no node may be consolidated this cycle, if so (the delay after an add holds only
/// its own group: see [`added_recently`]). Pending pods the scheduler is about
/// to place (or that wait for a VM on its way) will take room the model counts as free:
/// no scale-down until they have. Pods no scale-up can help (groups full or frozen) do
/// not hold it back: a frozen provider must not stop the others from scaling down.
pub(super) fn consolidation_held(v: &View<'_>) -> Option<(KeptReason, String)> {
    let sd = &v.config.scale_down;
    if let Some(p) = v.provisioning().next() {
        return Some((
            KeptReason::ScaleUpInProgress,
            format!("VM {} is still provisioning", p.server.name),
        ));
    }
    let placing = v.pending.on_nodes.len() + v.pending.on_provisioning.len();
    if placing > 0 {
        return Some((
            KeptReason::ScaleUpInProgress,
            format!(
                "{placing} pending pod(s) are about to take room a removal would count as free"
            ),
        ));
    }
    if deadlines::draining(v) {
        return Some((
            KeptReason::DrainInProgress,
            "another node is being drained; one voluntary removal at a time".into(),
        ));
    }
    for (at, delay, what, setting) in [
        (
            v.last_node_deleted,
            sd.delay_after_delete,
            "a node was deleted",
            "delayAfterDelete",
        ),
        (
            v.last_disruption_failure,
            sd.delay_after_failure,
            "a drain was abandoned",
            "delayAfterFailure",
        ),
    ] {
        if let Some(age) = at.map(|t| v.age(t)).filter(|a| *a < delay) {
            return Some((
                KeptReason::ScaleDownDelay,
                format!(
                    "{what} {} ago, within scaleDown.{setting} {}",
                    whole(age),
                    whole(delay)
                ),
            ));
        }
    }
    None
}

/// Why the nodes of `group` are kept this cycle though the cluster's scale-down is not
/// held: the group's newest node is younger than `scaleDown.delayAfterAdd`. The delay
/// is the group's own, as Cluster Autoscaler's per-group cooldown: a burst in one group
/// does not keep another group's idle nodes running.
pub(super) fn added_recently(v: &View<'_>, group: &str) -> Option<(KeptReason, String)> {
    let delay = v.config.scale_down.delay_after_add;
    let age = v
        .members
        .iter()
        .filter(|m| m.group.name == group)
        .filter_map(|m| m.node.map(|n| v.age(n.created)))
        .min()
        .filter(|a| *a < delay)?;
    Some((
        KeptReason::ScaleDownDelay,
        format!(
            "the newest node of group {group} is {} old, within scaleDown.delayAfterAdd {}",
            whole(age),
            whole(delay)
        ),
    ))
}

/// Whether `u` has been unneeded for `scaleDown.unneededTime`.
pub(super) fn ripe(v: &View<'_>, u: &Unneeded<'_, '_>) -> bool {
    unneeded_since(u.node).is_some_and(|t| v.age(t) >= v.config.scale_down.unneeded_time)
}

/// The empty nodes to remove together, why, and why each other ripe empty node stays.
pub(super) struct EmptyChoice<'a> {
    pub(super) taken: Vec<&'a NodeInfo>,
    pub(super) why: Vec<Reason>,
    pub(super) kept: Vec<(&'a str, KeptReason, String)>,
}

/// Empty nodes, as many as the budget, minSize and the targets allow.
pub(super) fn choose_empty<'a>(v: &View<'a>, ripe: &[Unneeded<'_, 'a>]) -> EmptyChoice<'a> {
    let sd = &v.config.scale_down;
    let empty_room = policy::budget_room(v, DisruptionReason::Empty, v.now);
    let mut c = EmptyChoice {
        taken: Vec::new(),
        why: Vec::new(),
        kept: Vec::new(),
    };
    let mut per_group: BTreeMap<&str, u32> = BTreeMap::new();
    for u in ripe.iter().filter(|u| u.empty) {
        let name = u.node.name.as_str();
        if c.taken.len() as u32 >= empty_room {
            c.kept.push((
                name,
                KeptReason::DisruptionBudget,
                "the disruption budget for `empty` allows no more now".into(),
            ));
            continue;
        }
        let g = u.member.group;
        // With priorities (or prices), an idle node of a preferred group stays while a
        // less preferred group's nodes still run pods: on-prem outlives the cloud.
        let rank = group_rank(v, &g.name);
        let busier = in_service(v)
            .find(|(m, n)| group_rank(v, &m.group.name) > rank && !movable(v, n).is_empty());
        if let Some((m, _)) = busier {
            c.kept.push((
                name,
                KeptReason::PreferredGroup,
                format!(
                    "group {} is preferred over group {}, whose nodes still run pods",
                    g.name, m.group.name
                ),
            ));
            continue;
        }
        let gone = per_group.get(g.name.as_str()).copied().unwrap_or(0);
        if v.active_size(&g.name).saturating_sub(gone + 1) < g.min_size {
            c.kept.push((
                name,
                KeptReason::GroupAtMinSize,
                format!(
                    "with the other removals group {} would fall below minSize {}",
                    g.name, g.min_size
                ),
            ));
            continue;
        }
        let mut with = c.taken.clone();
        with.push(u.node);
        if let Err(t) = targets_hold(v, &with) {
            c.kept.push((
                name,
                KeptReason::FreeCapacityTarget,
                format!("with the other removals, {t}"),
            ));
            continue;
        }
        c.taken = with;
        *per_group.entry(g.name.as_str()).or_insert(0) += 1;
        c.why.push(
            Reason::new(
                ReasonCode::NodeEmpty,
                format!(
                    "{} runs no pods that need it and has been unneeded for scaleDown.unneededTime {}",
                    u.node.name,
                    humantime::format_duration(sd.unneeded_time)
                ),
            )
            .about([ObjectRef::node(&u.node.name)]),
        );
    }
    c
}

/// Scale-down: empty nodes (several at once) then one underutilized node, once each
/// has been unneeded for `unneededTime`, outside the delays after adds, deletes and
/// failures, while no scale-up is under way.
pub(super) fn consolidate(v: &View<'_>, notes: &mut Vec<Reason>) -> StepResult {
    let sd = &v.config.scale_down;
    if !sd.enabled || consolidation_held(v).is_some() {
        return None;
    }
    let ripe: Vec<Unneeded<'_, '_>> = unneeded(v)
        .into_iter()
        .filter(|u| ripe(v, u) && added_recently(v, &u.member.group.name).is_none())
        .collect();
    if ripe.is_empty() {
        return None;
    }
    let empty = choose_empty(v, &ripe);
    if !empty.taken.is_empty() {
        let nodes = empty.taken.iter().map(|n| n.name.clone()).collect();
        return cordon(
            nodes,
            v,
            DisruptionReason::Empty,
            "scale-down: empty",
            empty.why,
        );
    }
    if empty
        .kept
        .iter()
        .any(|(_, r, _)| *r == KeptReason::DisruptionBudget)
    {
        notes.push(Reason::new(
            ReasonCode::DisruptionBudgetExhausted,
            "empty nodes wait: the disruption budget for `empty` allows no more now",
        ));
    }
    let u = ripe.iter().find(|u| !u.empty)?;
    if policy::budget_room(v, DisruptionReason::Underutilized, v.now) == 0 {
        notes.push(Reason::new(
            ReasonCode::DisruptionBudgetExhausted,
            "underutilized nodes wait: the disruption budget for `underutilized` allows no more now",
        ));
        return None;
    }
    let reason = Reason::new(
        ReasonCode::NodeUnneeded,
        format!(
            "{} requests {:.0}% of its capacity (below scaleDown.utilizationThreshold {:.0}%) and its pods fit on the other nodes; unneeded for {}",
            u.node.name,
            u.utilization * 100.0,
            sd.utilization_threshold * 100.0,
            humantime::format_duration(sd.unneeded_time)
        ),
    )
    .about([ObjectRef::node(&u.node.name)]);
    cordon(
        vec![u.node.name.clone()],
        v,
        DisruptionReason::Underutilized,
        "scale-down: not needed",
        vec![reason],
    )
}

//! The report of kept nodes: every node in service that scale-down keeps this cycle,
//! with why (`nodewright plan`, status and metrics read it). Apart from the steps, which
//! decide; this explains what they did not take.

use super::clock::unneeded_since;
use super::consolidate::{added_recently, choose_empty, consolidation_held, ripe};
use super::screen::{screen_unneeded, unneeded, Unneeded};
use super::whole;
use crate::config::DisruptionReason;
use crate::plan::policy;
use crate::plan::unremovable::{KeptReason, Unremovable};
use crate::plan::view::View;
use crate::plan::Action;

/// Every node in service that scale-down keeps this cycle, with why: those the
/// screening found needed, and the unneeded ones `action` does not remove. Sorted by
/// reason, then node.
pub fn unremovable(v: &View<'_>, action: &Action) -> Vec<Unremovable> {
    let Some(screened) = v.unneeded.get() else {
        return unremovable_unscreened(v, action);
    };
    let sd = &v.config.scale_down;
    let mut out = screened.kept.clone();
    let removed: Vec<&str> = action.cordons().iter().map(String::as_str).collect();
    let unneeded = unneeded(v);
    let held = match policy::unready_guard(v) {
        Some((unready, total)) => Some((
            KeptReason::TooManyUnready,
            format!(
                "{unready} of {total} managed nodes are unready; no node is taken away until they recover"
            ),
        )),
        None => consolidation_held(v),
    };
    let ripe_ones: Vec<Unneeded<'_, '_>> = unneeded
        .iter()
        .filter(|u| ripe(v, u) && added_recently(v, &u.member.group.name).is_none())
        .copied()
        .collect();
    let empty = choose_empty(v, &ripe_ones);
    let under_room = policy::budget_room(v, DisruptionReason::Underutilized, v.now);
    for u in &unneeded {
        let name = u.node.name.as_str();
        if removed.contains(&name) {
            continue;
        }
        let (reason, detail) = if let Some(h) = &held {
            h.clone()
        } else if let Some(h) = added_recently(v, &u.member.group.name) {
            h
        } else if !ripe(v, u) {
            let detail = match unneeded_since(u.node) {
                Some(t) => format!(
                    "{name} is unneeded for {}, less than scaleDown.unneededTime {}",
                    whole(v.age(t)),
                    whole(sd.unneeded_time)
                ),
                None => format!(
                    "{name} became unneeded this cycle; removal after scaleDown.unneededTime {}",
                    whole(sd.unneeded_time)
                ),
            };
            (KeptReason::UnneededTooShort, detail)
        } else if let Some((_, r, d)) = empty.kept.iter().find(|(n, _, _)| *n == name) {
            (*r, d.clone())
        } else if !u.empty && under_room == 0 {
            (
                KeptReason::DisruptionBudget,
                "the disruption budget for `underutilized` allows no more now".into(),
            )
        } else {
            (
                KeptReason::OtherActionFirst,
                format!("{name} is unneeded; this cycle does: {action} (one action per cycle)"),
            )
        };
        out.push(Unremovable::new(name, &u.member.group.name, reason, detail));
    }
    out.sort_by(|a, b| a.reason.cmp(&b.reason).then(a.node.cmp(&b.node)));
    out
}

/// The kept nodes of a cycle an earlier step claimed before scale-down looked (a
/// scale-up, a drain, provisioning): the checks without the scheduling model, which
/// would cost a model run per candidate for nothing, and for the nodes that pass them
/// what holds scale-down this cycle.
fn unremovable_unscreened(v: &View<'_>, action: &Action) -> Vec<Unremovable> {
    let cheap = screen_unneeded(v, false);
    let mut out = cheap.kept;
    let held = match policy::unready_guard(v) {
        Some((unready, total)) => Some((
            KeptReason::TooManyUnready,
            format!(
                "{unready} of {total} managed nodes are unready; no node is taken away until they recover"
            ),
        )),
        None => consolidation_held(v),
    };
    let fallback = || {
        let kind = if action.scale_up().is_some() {
            KeptReason::ScaleUpInProgress
        } else {
            KeptReason::OtherActionFirst
        };
        (
            kind,
            format!("scale-down did not run: this cycle does: {action}"),
        )
    };
    for i in cheap.unchecked {
        let Some((m, n)) = v.members.get(i).and_then(|m| m.node.map(|n| (m, n))) else {
            continue;
        };
        let (reason, detail) = held
            .clone()
            .or_else(|| added_recently(v, &m.group.name))
            .unwrap_or_else(fallback);
        out.push(Unremovable::new(&n.name, &m.group.name, reason, detail));
    }
    out.sort_by(|a, b| a.reason.cmp(&b.reason).then(a.node.cmp(&b.node)));
    out
}

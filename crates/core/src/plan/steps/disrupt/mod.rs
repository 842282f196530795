//! Choosing nodes to take away, in Karpenter's order of methods: unhealthy, expired and
//! drifted nodes are replaced (a node added first when the others cannot hold the
//! pods); empty and underutilized ones are consolidated once they stayed unneeded for
//! `scaleDown.unneededTime`. Every choice honours the drain policy (a node whose drain
//! could not finish is never picked), the disruption budgets and the unready guard.
//!
//! - `replace`: unhealthy, expired and drifted nodes, and the group that takes their pods.
//! - `screen`: which nodes in service are unneeded, in removal order, and why each other
//!   one is needed (done once per plan).
//! - `consolidate`: which unneeded nodes go this cycle (budgets, minSize, targets, the
//!   delays after adds, deletes and failures).
//! - `clock`: the unneeded clock in node annotations (the mark-unneeded step).
//! - `candidates`: the soft taint on the nodes that may go (the soft-taint step).
//! - `kept`: the report of every node scale-down keeps, with why.
//! - `evict`: moving a node's pods off it in the scheduling model, and undoing it.
//!
//! This file holds the step itself and the small judgements the parts share.

mod candidates;
mod clock;
mod consolidate;
mod evict;
mod kept;
mod replace;
mod screen;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::StepResult;
use crate::config::DisruptionReason;
use crate::model::{NodeInfo, PodInfo};
use crate::plan::policy;
use crate::plan::units::{fmt_bytes, fmt_u};
use crate::plan::view::{Member, ServerState, View};
use crate::plan::{Action, Reason, ReasonCode};

use consolidate::consolidate;
use replace::replace;

pub use candidates::soft_taint;
pub use clock::mark_unneeded;
pub use kept::unremovable;

fn secs(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs()
}

/// Joined, schedulable nodes of ours that nothing is removing yet.
fn in_service<'v, 'a>(v: &'v View<'a>) -> impl Iterator<Item = (&'v Member<'a>, &'a NodeInfo)> {
    v.members
        .iter()
        .filter(|m| m.state == ServerState::Joined)
        .filter_map(|m| m.node.map(|n| (m, n)))
        .filter(|(_, n)| !n.unschedulable && !n.deleting)
}

/// Pods that must move for `n` to go.
fn movable<'a>(v: &View<'a>, n: &NodeInfo) -> Vec<&'a PodInfo> {
    v.pods_on(&n.name)
        .iter()
        .copied()
        .filter(|p| !policy::ignored(v, p))
        .collect()
}

/// The first pod that keeps `n` from a voluntary removal, with a stable code for why it
/// blocks and why in words. Job pods are waited for by the drain, so they do not block a
/// replacement; they do block consolidation.
fn first_blocking<'a>(
    v: &View<'_>,
    pods: &[&'a PodInfo],
    jobs_block: bool,
) -> Option<(&'a PodInfo, &'static str, String)> {
    pods.iter().find_map(|p| {
        if jobs_block && policy::is_job(p) {
            return Some((*p, "job", format!("{} is a running Job pod", p.key())));
        }
        policy::blocker(v, p).map(|b| (*p, b.code(), format!("{} {b}", p.key())))
    })
}

/// Free memory and CPU after removing these nodes, against the targets.
fn targets_hold(v: &View<'_>, removed: &[&NodeInfo]) -> Result<(), String> {
    let (mut mem, mut cpu) = v.free_total();
    for n in removed {
        mem -= n.allocatable.memory as i64;
        cpu -= n.allocatable.cpu as i64;
    }
    let mem_target = v.config.free_memory_target.as_u64() as i64;
    let cpu_target = v
        .config
        .free_cpu_target
        .as_ref()
        .map_or(0, |q| q.milli() as i64);
    if mem < mem_target {
        return Err(format!(
            "free memory would be {}, below freeMemoryTarget {}",
            fmt_bytes(mem),
            fmt_u(mem_target as u64)
        ));
    }
    if cpu < cpu_target {
        return Err(format!(
            "free CPU would be {}m, below freeCpuTarget {}m",
            cpu, cpu_target
        ));
    }
    Ok(())
}

/// Takes nodes away when they are broken, old, drifted, empty or underused.
pub fn disrupt(v: &View<'_>, notes: &mut Vec<Reason>) -> StepResult {
    if let Some((unready, total)) = policy::unready_guard(v) {
        notes.push(Reason::new(
            ReasonCode::TooManyUnready,
            format!(
                "{unready} of {total} managed nodes are unready (more than health.okUnreadyCount {} and health.maxUnreadyPercentage {}%); no node is taken away until they recover",
                v.config.health.ok_unready_count, v.config.health.max_unready_percentage
            ),
        ));
        return None;
    }
    for reason in [
        DisruptionReason::Unhealthy,
        DisruptionReason::Expired,
        DisruptionReason::Drifted,
    ] {
        if let Some(r) = replace(v, notes, reason) {
            return Some(r);
        }
    }
    consolidate(v, notes)
}

fn cordon(
    nodes: Vec<String>,
    v: &View<'_>,
    disruption: DisruptionReason,
    reason: &str,
    why: Vec<Reason>,
) -> StepResult {
    Some((
        Action::Cordon {
            nodes,
            reason: reason.to_string(),
            disruption,
            at: secs(v.now),
        },
        why,
    ))
}

/// A duration to whole seconds, for messages.
fn whole(d: Duration) -> humantime::FormattedDuration {
    humantime::format_duration(Duration::from_secs(d.as_secs()))
}

//! A drain's clock: when nodewright cordoned a node, its deadline (`drain.timeout`), its
//! hard limit (`drain.terminationGracePeriod` for an expired node) and the pods still to
//! leave it. The drain step acts on these; the removal of drained nodes and the
//! disruption steps (which wait while a drain is under way) read them, so they are here
//! rather than in any one step.

use std::time::{Duration, SystemTime};

use crate::config::DisruptionReason;
use crate::model::{NodeInfo, PodInfo, ANNOTATION_CORDONED_AT};
use crate::plan::policy;
use crate::plan::view::View;

/// When nodewright cordoned `n`, from its annotation.
pub fn cordoned_at(n: &NodeInfo) -> Option<SystemTime> {
    n.annotations
        .get(ANNOTATION_CORDONED_AT)
        .and_then(|t| humantime::parse_rfc3339_weak(t).ok())
}

/// How long `n` has been draining; a cordon without the time (from an older version)
/// counts from the node's creation, so it gets a deadline too.
pub fn draining_for(v: &View<'_>, n: &NodeInfo) -> Duration {
    v.age(cordoned_at(n).unwrap_or(n.created))
}

/// The hard limit of a drain for `reason`, if it has one: `drain.terminationGracePeriod`
/// for expired nodes, so what blocks them does not keep them. It replaces
/// `drain.timeout` for such a node.
pub fn limit_for(v: &View<'_>, reason: DisruptionReason) -> Option<Duration> {
    let grace = v.config.drain.termination_grace_period?;
    (reason == DisruptionReason::Expired).then_some(grace)
}

/// The hard limit of the drain of `n`, by why nodewright cordoned it.
pub fn hard_limit(v: &View<'_>, n: &NodeInfo) -> Option<Duration> {
    limit_for(v, policy::disruption_of(n))
}

/// Whether `n` has drained past its hard limit: its pods go whatever blocks them.
pub fn past_hard_limit(v: &View<'_>, n: &NodeInfo) -> bool {
    hard_limit(v, n).is_some_and(|limit| draining_for(v, n) > limit)
}

/// Whether `n`'s pods are evicted whatever their annotations, controller or storage say:
/// a broken node's while it is broken (see [`policy::broken_now`]), an expired one's past
/// its hard limit.
pub fn forced_now(v: &View<'_>, n: &NodeInfo) -> bool {
    policy::broken_now(n) || past_hard_limit(v, n)
}

/// Whether an expired node past its hard limit may be deleted with what is left. Past
/// the limit every pod is evicted, or deleted when a PodDisruptionBudget holds it (the
/// Eviction API would refuse it for ever), so the node goes once they are gone; pods
/// still terminating (or not going) and volumes still attached are waited for at most
/// `drain.timeout` more, so nothing holds it for ever.
pub fn hard_limit_reached(v: &View<'_>, n: &NodeInfo, left: &[&PodInfo]) -> bool {
    let Some(limit) = hard_limit(v, n) else {
        return false;
    };
    // Data only this node holds is never given up for a hard limit.
    if left
        .iter()
        .any(|p| policy::unreleased_volume(v, p).is_some())
        || policy::idle_volume(v, n).is_some()
    {
        return false;
    }
    let drained = draining_for(v, n);
    drained > limit && (left.is_empty() || drained > limit + v.config.drain.timeout)
}

/// Whether `n` past its hard limit has waited `drain.timeout` more (for volumes to detach).
pub fn hard_limit_overdue(v: &View<'_>, n: &NodeInfo) -> bool {
    hard_limit(v, n).is_some_and(|limit| draining_for(v, n) > limit + v.config.drain.timeout)
}

/// Whether the drain of `n` is past its deadline: `drain.timeout`, counted after the
/// Job grace period when a voluntary drain still waits for Job pods (so the grace is
/// never cut short by the deadline).
pub fn past_deadline(v: &View<'_>, n: &NodeInfo) -> bool {
    let d = &v.config.drain;
    let jobs_waited = !policy::broken_now(n) && remaining(v, n).iter().any(|p| policy::is_job(p));
    let deadline = if jobs_waited {
        d.timeout + d.job_grace_period
    } else {
        d.timeout
    };
    draining_for(v, n) > deadline
}

/// Whether a node nodewright cordoned still has pods to move (a drain under way).
pub fn draining(v: &View<'_>) -> bool {
    v.members
        .iter()
        .filter_map(|m| m.node)
        .any(|n| policy::cordoned_by_us(n) && !remaining(v, n).is_empty())
}

/// The pods still to leave `n` (not DaemonSet, mirror, finished or puller pods).
pub fn remaining<'a>(v: &View<'a>, n: &NodeInfo) -> Vec<&'a PodInfo> {
    v.pods_on(&n.name)
        .iter()
        .copied()
        .filter(|p| !policy::ignored(v, p))
        .collect()
}

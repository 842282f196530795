//! Choosing nodes to take away, in Karpenter's order of methods: unhealthy, expired and
//! drifted nodes are replaced (a node added first when the others cannot hold the
//! pods); empty and underutilized ones are consolidated once they stayed unneeded for
//! `scaleDown.unneededTime`. Every choice honours the drain policy (a node whose drain
//! could not finish is never picked), the disruption budgets and the unready guard.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::reasons::replacement_reason;
use super::{list_pods, room, StepResult};
use crate::config::{DisruptionReason, ExpanderKind};
use crate::model::{NodeInfo, ObjectRef, PodInfo, ANNOTATION_UNNEEDED_SINCE};
use crate::plan::buffers;
use crate::plan::policy;
use crate::plan::sched::{self, Model, SlotKind};
use crate::plan::units::{fmt_bytes, fmt_u};
use crate::plan::unremovable::{KeptReason, Screened, Unremovable};
use crate::plan::view::{Member, ServerState, View};
use crate::plan::{Action, Reason, ReasonCode};

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

/// Replaces nodes for a reason that does not depend on load.
fn replace(v: &View<'_>, notes: &mut Vec<Reason>, reason: DisruptionReason) -> StepResult {
    let mut candidates: Vec<(&Member<'_>, &NodeInfo, Reason)> = v
        .members
        .iter()
        .filter(|m| m.state == ServerState::Joined)
        .filter_map(|m| m.node.map(|n| (m, n)))
        .filter(|(_, n)| !n.unschedulable && !n.deleting)
        .filter_map(|(m, n)| replacement_reason(v, m, n, reason).map(|r| (m, n, r)))
        .collect();
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
        if super::drain::draining(v) {
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
        // opt-in (annotation or allowLocalVolumeLoss) lets such a pod go.
        let keeps_data = blocking
            .as_ref()
            .is_some_and(|(_, code, _)| *code == "local-volume");
        let blocker = blocking.map(|(_, _, why)| why);
        let grace = super::drain::limit_for(v, reason).filter(|_| !keeps_data);
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
                    Action::ScaleUp { group, count },
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

/// A node that could go now but for its unneeded clock.
#[derive(Clone, Copy)]
struct Unneeded<'v, 'a> {
    member: &'v Member<'a>,
    node: &'a NodeInfo,
    empty: bool,
    utilization: f64,
}

/// Removal order among groups: the lower a group's priority (or the higher its price),
/// the earlier its nodes go, so on-prem capacity outlives cloud capacity.
fn group_rank(v: &View<'_>, group: &str) -> i64 {
    let cfg = &v.config.expander;
    match cfg.kind {
        ExpanderKind::Priority => cfg
            .priorities
            .iter()
            .position(|p| regex::Regex::new(&format!("^(?:{p})$")).is_ok_and(|r| r.is_match(group)))
            .map_or(i64::MAX, |i| i as i64),
        ExpanderKind::Price => v
            .config
            .group(group)
            .and_then(|g| g.price)
            .map_or(0, |p| (p * 1_000_000.0) as i64),
        ExpanderKind::LeastWaste => 0,
    }
}

/// Nodes that are unneeded now: requests under `utilizationThreshold`, nothing that
/// blocks a drain, everything they run fits on the other nodes, targets and buffers
/// hold without them, their group stays at or above minSize. Sorted in removal order.
fn unneeded<'v, 'a>(v: &'v View<'a>) -> Vec<Unneeded<'v, 'a>> {
    screened(v)
        .unneeded
        .iter()
        .filter_map(|&(i, empty, utilization)| {
            let member = v.members.get(i)?;
            Some(Unneeded {
                member,
                node: member.node?,
                empty,
                utilization,
            })
        })
        .collect()
}

/// The screening of every node in service, done once per plan: both the disrupt and
/// the mark-unneeded steps read it, and the report of kept nodes.
pub(super) fn screened<'v>(v: &'v View<'_>) -> &'v Screened {
    v.unneeded.get_or_init(|| screen_unneeded(v, true))
}

/// The screening behind [`unneeded`]: the unneeded nodes, and every other node in
/// service with why it is needed. Without `full`, the checks that need the scheduling
/// model (where the pods would go, minimums, buffers) are skipped: the nodes that pass
/// the others are listed in `unchecked`.
fn screen_unneeded(v: &View<'_>, full: bool) -> Screened {
    let sd = &v.config.scale_down;
    let mut out = Screened::default();
    let index = |m: &Member<'_>| v.members.iter().position(|x| std::ptr::eq(x, m));
    let keep = |out: &mut Screened, m: &Member<'_>, n: &NodeInfo, r: KeptReason, d: String| {
        out.kept
            .push(Unremovable::new(&n.name, &m.group.name, r, d));
    };
    if !sd.enabled {
        for (m, n) in in_service(v) {
            keep(
                &mut out,
                m,
                n,
                KeptReason::ScaleDownDisabled,
                "scaleDown.enabled is false".into(),
            );
        }
        return out;
    }
    let buffer_pods = buffers::active_pods(v.config, v.now);
    let buffer: Vec<&PodInfo> = buffer_pods.iter().collect();
    let mut model: Option<Model<'_>> = None;
    let mut buffer_baseline = None;
    let reference = v.reference_node();
    let mut screened = Vec::new();
    for (m, n) in in_service(v) {
        if !m.schedulable() {
            keep(
                &mut out,
                m,
                n,
                KeptReason::NotReady,
                format!("{} is not Ready", n.name),
            );
            continue;
        }
        if policy::opted_out(n) {
            keep(
                &mut out,
                m,
                n,
                KeptReason::ScaleDownDisabledAnnotation,
                format!("{} opted out of removal by annotation", n.name),
            );
            continue;
        }
        if v.active_size(&m.group.name) <= m.group.min_size {
            keep(
                &mut out,
                m,
                n,
                KeptReason::GroupAtMinSize,
                format!(
                    "group {} has {} node(s), its minSize is {}",
                    m.group.name,
                    v.active_size(&m.group.name),
                    m.group.min_size
                ),
            );
            continue;
        }
        let pods = movable(v, n);
        if let Some((pod, l)) = pods
            .iter()
            .find_map(|p| policy::pinning_volume(v, p).map(|l| (*p, l)))
        {
            let mut k = Unremovable::new(
                &n.name,
                &m.group.name,
                KeptReason::LocalVolume,
                format!("{} {}", pod.key(), policy::Blocker::LocalVolume(l.clone())),
            );
            k.pod = Some(super::pod_ref(pod));
            k.pod_reason = Some("local-volume".to_string());
            out.kept.push(k);
            continue;
        }
        let mut requested = crate::model::Resources::default();
        for p in &pods {
            requested.add(&p.requests);
        }
        let u = requested.dominant_share(&n.allocatable);
        if u >= sd.utilization_threshold {
            keep(
                &mut out,
                m,
                n,
                KeptReason::NotUnderutilized,
                format!(
                    "{} requests {:.0}% of its capacity, not below scaleDown.utilizationThreshold {:.0}%",
                    n.name,
                    u * 100.0,
                    sd.utilization_threshold * 100.0
                ),
            );
            continue;
        }
        screened.push((m, n, pods, u));
    }
    screened.sort_by(|a, b| {
        group_rank(v, &b.0.group.name)
            .cmp(&group_rank(v, &a.0.group.name))
            .then(a.3.total_cmp(&b.3))
            .then(a.1.name.cmp(&b.1.name))
    });
    for (m, n, pods, u) in screened {
        if let Some((pod, code, why)) = first_blocking(v, &pods, true) {
            let mut k = Unremovable::new(
                &n.name,
                &m.group.name,
                KeptReason::BlockedByPod,
                format!("{} is underused but cannot be drained: {why}", n.name),
            );
            k.pod = Some(super::pod_ref(pod));
            k.pod_reason = Some(code.to_string());
            out.kept.push(k);
            continue;
        }
        if let Err(t) = targets_hold(v, &[n]) {
            keep(
                &mut out,
                m,
                n,
                KeptReason::FreeCapacityTarget,
                format!("without {}: {t}", n.name),
            );
            continue;
        }
        if !full {
            out.unchecked.extend(index(m));
            continue;
        }
        let model = model.get_or_insert_with(|| v.model());
        let (left, keeps_minimum) = evict_in_model(v, model, &n.name, &pods);
        if !left.is_empty() {
            keep(
                &mut out,
                m,
                n,
                KeptReason::NoPlaceToMovePods,
                format!(
                    "{} of its pods fit on no other node: {}",
                    left.len(),
                    list_pods(&left)
                ),
            );
            continue;
        }
        if !keeps_minimum {
            keep(
                &mut out,
                m,
                n,
                KeptReason::MinimumFreeNode,
                format!(
                    "without {}, no other node keeps minimumFreeNodeMemory / minimumFreeNodeCpu free",
                    n.name
                ),
            );
            continue;
        }
        if !buffers::removal_keeps(
            model,
            &n.name,
            &pods,
            &buffer,
            &reference,
            &mut buffer_baseline,
        ) {
            keep(
                &mut out,
                m,
                n,
                KeptReason::CapacityBuffer,
                format!("an active capacity buffer needs the room of {}", n.name),
            );
            continue;
        }
        if let Some(i) = index(m) {
            out.unneeded.push((i, pods.is_empty(), u));
        }
    }
    out
}

/// Since when `n` has been unneeded, from its annotation.
fn unneeded_since(n: &NodeInfo) -> Option<SystemTime> {
    n.annotations
        .get(ANNOTATION_UNNEEDED_SINCE)
        .and_then(|t| humantime::parse_rfc3339_weak(t).ok())
}

/// A duration to whole seconds, for messages.
fn whole(d: Duration) -> humantime::FormattedDuration {
    humantime::format_duration(Duration::from_secs(d.as_secs()))
}

/// Why no node may be consolidated this cycle, if so. Pending pods the scheduler is about
/// to place (or that wait for a VM on its way) will take room the model counts as free:
/// no scale-down until they have. Pods no scale-up can help (groups full or frozen) do
/// not hold it back: a frozen provider must not stop the others from scaling down.
fn consolidation_held(v: &View<'_>) -> Option<(KeptReason, String)> {
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
    if super::drain::draining(v) {
        return Some((
            KeptReason::DrainInProgress,
            "another node is being drained; one voluntary removal at a time".into(),
        ));
    }
    let newest = v
        .members
        .iter()
        .filter_map(|m| m.node.map(|n| v.age(n.created)))
        .min();
    if let Some(age) = newest.filter(|a| *a < sd.delay_after_add) {
        return Some((
            KeptReason::ScaleDownDelay,
            format!(
                "the newest node is {} old, within scaleDown.delayAfterAdd {}",
                whole(age),
                whole(sd.delay_after_add)
            ),
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

/// Whether `u` has been unneeded for `scaleDown.unneededTime`.
fn ripe(v: &View<'_>, u: &Unneeded<'_, '_>) -> bool {
    unneeded_since(u.node).is_some_and(|t| v.age(t) >= v.config.scale_down.unneeded_time)
}

/// The empty nodes to remove together, why, and why each other ripe empty node stays.
struct EmptyChoice<'a> {
    taken: Vec<&'a NodeInfo>,
    why: Vec<Reason>,
    kept: Vec<(&'a str, KeptReason, String)>,
}

/// Empty nodes, as many as the budget, minSize and the targets allow.
fn choose_empty<'a>(v: &View<'a>, ripe: &[Unneeded<'_, 'a>]) -> EmptyChoice<'a> {
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
fn consolidate(v: &View<'_>, notes: &mut Vec<Reason>) -> StepResult {
    let sd = &v.config.scale_down;
    if !sd.enabled || consolidation_held(v).is_some() {
        return None;
    }
    let ripe: Vec<Unneeded<'_, '_>> = unneeded(v).into_iter().filter(|u| ripe(v, u)).collect();
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
    let ripe_ones: Vec<Unneeded<'_, '_>> =
        unneeded.iter().filter(|u| ripe(v, u)).copied().collect();
    let empty = choose_empty(v, &ripe_ones);
    let under_room = policy::budget_room(v, DisruptionReason::Underutilized, v.now);
    for u in &unneeded {
        let name = u.node.name.as_str();
        if removed.contains(&name) {
            continue;
        }
        let (reason, detail) = if let Some(h) = &held {
            h.clone()
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
        Some((unready, total)) => (
            KeptReason::TooManyUnready,
            format!(
                "{unready} of {total} managed nodes are unready; no node is taken away until they recover"
            ),
        ),
        None => consolidation_held(v).unwrap_or_else(|| {
            let kind = if action.scale_up().is_some() {
                KeptReason::ScaleUpInProgress
            } else {
                KeptReason::OtherActionFirst
            };
            (
                kind,
                format!("scale-down did not run: this cycle does: {action}"),
            )
        }),
    };
    for i in cheap.unchecked {
        let Some((m, n)) = v.members.get(i).and_then(|m| m.node.map(|n| (m, n))) else {
            continue;
        };
        out.push(Unremovable::new(
            &n.name,
            &m.group.name,
            held.0,
            held.1.clone(),
        ));
    }
    out.sort_by(|a, b| a.reason.cmp(&b.reason).then(a.node.cmp(&b.node)));
    out
}

/// Starts the unneeded clock on nodes that became unneeded and stops it on those that
/// no longer are, in node annotations.
///
/// An annotation that is no time (edited by hand, written by another tool) is never read
/// as "long ago": the node counts as unneeded since now, the clock is written anew and
/// the plan notes it.
pub fn mark_unneeded(v: &View<'_>, notes: &mut Vec<Reason>) -> StepResult {
    let now_unneeded: Vec<&str> = unneeded(v).iter().map(|u| u.node.name.as_str()).collect();
    let mut mark = Vec::new();
    let mut clear = Vec::new();
    for (_, n) in in_service(v) {
        let raw = n.annotations.get(ANNOTATION_UNNEEDED_SINCE);
        let has = raw.is_some();
        let garbage = raw.is_some() && unneeded_since(n).is_none();
        let is = now_unneeded.contains(&n.name.as_str());
        if garbage {
            notes.push(
                Reason::new(
                    ReasonCode::NodeUnneeded,
                    format!(
                        "{}: annotation {ANNOTATION_UNNEEDED_SINCE} {:?} is not an RFC 3339 time; {}",
                        n.name,
                        raw.map(String::as_str).unwrap_or_default(),
                        if is {
                            "its unneeded clock restarts now"
                        } else {
                            "removed"
                        }
                    ),
                )
                .about([ObjectRef::node(&n.name)]),
            );
        }
        if is && (!has || garbage) {
            mark.push(n.name.clone());
        } else if has && !is {
            clear.push(n.name.clone());
        }
    }
    if mark.is_empty() && clear.is_empty() {
        return None;
    }
    let mut reasons = Vec::new();
    if !mark.is_empty() {
        reasons.push(
            Reason::new(
                ReasonCode::NodeUnneeded,
                format!(
                    "{} became unneeded; removal after scaleDown.unneededTime {}",
                    mark.join(", "),
                    humantime::format_duration(v.config.scale_down.unneeded_time)
                ),
            )
            .about(mark.iter().map(|n| ObjectRef::node(n))),
        );
    }
    if !clear.is_empty() {
        reasons.push(Reason::new(
            ReasonCode::CapacitySufficient,
            format!("{} needed again; unneeded clock stopped", clear.join(", ")),
        ));
    }
    Some((
        Action::MarkUnneeded {
            mark,
            clear,
            at: secs(v.now),
        },
        reasons,
    ))
}

/// Moves `pods` off `node` in the model, onto nodes that exist (pods evicted onto a VM
/// still booting would wait), and undoes it. Returns the pods that fit nowhere, and
/// whether some other node still has `minimumFreeNodeMemory` / `minimumFreeNodeCpu`
/// free afterwards.
pub(super) fn evict_in_model<'m>(
    v: &View<'_>,
    m: &mut Model<'m>,
    node: &str,
    pods: &[&'m PodInfo],
) -> (Vec<&'m PodInfo>, bool) {
    let Some(i) = m.slot_index(node) else {
        return (pods.to_vec(), false);
    };
    let mut sorted = pods.to_vec();
    sched::sort_for_packing(&mut sorted, &v.reference_node());
    m.trial_without(i, |m| {
        let (_, left) = sched::first_fit(m, &sorted, |s| s.kind == SlotKind::Node);
        let min_mem = v.config.minimum_free_node_memory.as_u64();
        let min_cpu = v
            .config
            .minimum_free_node_cpu
            .as_ref()
            .map_or(0, |q| q.milli());
        let keeps_minimum = (min_mem == 0 && min_cpu == 0)
            || v.schedulable().filter_map(|mem| mem.node).any(|n| {
                n.name != node
                    && m.slot_index(&n.name).is_some_and(|j| {
                        let f = m.slots[j].free();
                        f.memory >= min_mem && f.cpu >= min_cpu
                    })
            });
        (left, keeps_minimum)
    })
}

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
use crate::plan::buffers;
use crate::plan::model::{NodeInfo, PodInfo};
use crate::plan::policy;
use crate::plan::sched::{self, Model, SlotKind};
use crate::plan::units::{fmt_bytes, fmt_u};
use crate::plan::view::{Member, ServerState, View};
use crate::plan::{Action, ObjectRef, Reason, ReasonCode};
use crate::ANNOTATION_UNNEEDED_SINCE;

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

/// The first pod that keeps `n` from a voluntary removal, with why. Job pods are waited
/// for by the drain, so they do not block a replacement; they do block consolidation.
fn first_blocker(v: &View<'_>, pods: &[&PodInfo], jobs_block: bool) -> Option<String> {
    pods.iter().find_map(|p| {
        if jobs_block && policy::is_job(p) {
            return Some(format!("{} is a running Job pod", p.key()));
        }
        policy::blocker(v, p).map(|b| format!("{} {b}", p.key()))
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
    if !reason.forced() {
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
    if reason.forced() {
        // Broken nodes: cordon them all (within the budget); their drain has a deadline
        // after which they are deleted anyway.
        let take: Vec<_> = candidates.into_iter().take(room as usize).collect();
        let nodes = take.iter().map(|(_, n, _)| n.name.clone()).collect();
        let why = take.into_iter().map(|(_, _, r)| r).collect();
        return cordon(nodes, v, reason, "replacing: unhealthy", why);
    }
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
        let blocker = first_blocker(v, &pods, false);
        if let (Some(b), Some(grace)) = (&blocker, super::drain::limit_for(v, reason)) {
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
        let cp = model.checkpoint();
        let nodes = sched::pack_new_nodes(
            &mut model,
            &sorted,
            &info.template,
            &info.overhead,
            room,
            info.hosts.as_ref().map_or(&[][..], |h| &h.zones[..]),
        );
        model.rollback(cp);
        if nodes.count > 0 && nodes.placed.len() == sorted.len() {
            return Some((g.name.clone(), nodes.count));
        }
    }
    None
}

/// A node that could go now but for its unneeded clock.
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
    v.unneeded
        .get_or_init(|| {
            screen_unneeded(v)
                .iter()
                .filter_map(|u| {
                    let i = v.members.iter().position(|m| std::ptr::eq(m, u.member))?;
                    Some((i, u.empty, u.utilization))
                })
                .collect()
        })
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

/// The screening behind [`unneeded`], done once per plan.
fn screen_unneeded<'v, 'a>(v: &'v View<'a>) -> Vec<Unneeded<'v, 'a>> {
    let sd = &v.config.scale_down;
    if !sd.enabled {
        return Vec::new();
    }
    let mut candidates: Vec<Unneeded<'v, 'a>> = Vec::new();
    let buffer_pods = buffers::active_pods(v.config, v.now);
    let buffer: Vec<&PodInfo> = buffer_pods.iter().collect();
    let mut model: Option<Model<'_>> = None;
    let mut buffer_baseline = None;
    let reference = v.reference_node();
    let mut screened: Vec<(&Member<'a>, &'a NodeInfo, Vec<&'a PodInfo>, f64)> = in_service(v)
        .filter(|(m, n)| m.schedulable() && !policy::opted_out(n))
        .filter(|(m, _)| v.active_size(&m.group.name) > m.group.min_size)
        .filter_map(|(m, n)| {
            let pods = movable(v, n);
            let mut requested = sched::Resources::default();
            for p in &pods {
                requested.add(&p.requests);
            }
            let u = requested.dominant_share(&n.allocatable);
            (u < sd.utilization_threshold).then_some((m, n, pods, u))
        })
        .collect();
    screened.sort_by(|a, b| {
        group_rank(v, &b.0.group.name)
            .cmp(&group_rank(v, &a.0.group.name))
            .then(a.3.total_cmp(&b.3))
            .then(a.1.name.cmp(&b.1.name))
    });
    for (m, n, pods, u) in screened {
        if first_blocker(v, &pods, true).is_some() || targets_hold(v, &[n]).is_err() {
            continue;
        }
        let model = model.get_or_insert_with(|| v.model());
        let (left, keeps_minimum) = evict_in_model(v, model, &n.name, &pods);
        if !left.is_empty() || !keeps_minimum {
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
            continue;
        }
        candidates.push(Unneeded {
            member: m,
            node: n,
            empty: pods.is_empty(),
            utilization: u,
        });
    }
    candidates
}

/// Since when `n` has been unneeded, from its annotation.
fn unneeded_since(n: &NodeInfo) -> Option<SystemTime> {
    n.annotations
        .get(ANNOTATION_UNNEEDED_SINCE)
        .and_then(|t| humantime::parse_rfc3339_weak(t).ok())
}

/// Scale-down: empty nodes (several at once) then one underutilized node, once each
/// has been unneeded for `unneededTime`, outside the delays after adds, deletes and
/// failures, while no scale-up is under way.
fn consolidate(v: &View<'_>, notes: &mut Vec<Reason>) -> StepResult {
    let sd = &v.config.scale_down;
    // Pending pods the scheduler is about to place (or that wait for a VM on its way)
    // will take room the model counts as free: no scale-down until they have. Pods no
    // scale-up can help (groups full or frozen) do not hold it back: a frozen provider
    // must not stop the others from scaling down.
    if !sd.enabled
        || v.provisioning().next().is_some()
        || !v.pending.on_nodes.is_empty()
        || !v.pending.on_provisioning.is_empty()
        || super::drain::draining(v)
    {
        return None;
    }
    let newest = v
        .members
        .iter()
        .filter_map(|m| m.node.map(|n| v.age(n.created)))
        .min()?;
    if newest < sd.delay_after_add {
        return None;
    }
    let recent = |t: Option<SystemTime>, d: Duration| t.is_some_and(|t| v.age(t) < d);
    if recent(v.last_node_deleted, sd.delay_after_delete)
        || recent(v.last_disruption_failure, sd.delay_after_failure)
    {
        return None;
    }
    let ripe: Vec<Unneeded<'_, '_>> = unneeded(v)
        .into_iter()
        .filter(|u| unneeded_since(u.node).is_some_and(|t| v.age(t) >= sd.unneeded_time))
        .collect();
    if ripe.is_empty() {
        return None;
    }
    // Empty nodes first, as many as the budget, minSize and the targets allow.
    let empty_room = policy::budget_room(v, DisruptionReason::Empty, v.now);
    let mut taken: Vec<&NodeInfo> = Vec::new();
    let mut per_group: BTreeMap<&str, u32> = BTreeMap::new();
    let mut why = Vec::new();
    for u in ripe.iter().filter(|u| u.empty) {
        if taken.len() as u32 >= empty_room {
            break;
        }
        let g = u.member.group;
        // With priorities (or prices), an idle node of a preferred group stays while a
        // less preferred group's nodes still run pods: on-prem outlives the cloud.
        let rank = group_rank(v, &g.name);
        let busier_elsewhere = in_service(v)
            .any(|(m, n)| group_rank(v, &m.group.name) > rank && !movable(v, n).is_empty());
        if busier_elsewhere {
            continue;
        }
        let gone = per_group.get(g.name.as_str()).copied().unwrap_or(0);
        if v.active_size(&g.name).saturating_sub(gone + 1) < g.min_size {
            continue;
        }
        let mut with = taken.clone();
        with.push(u.node);
        if targets_hold(v, &with).is_err() {
            continue;
        }
        taken = with;
        *per_group.entry(g.name.as_str()).or_insert(0) += 1;
        why.push(
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
    if !taken.is_empty() {
        let nodes = taken.iter().map(|n| n.name.clone()).collect();
        return cordon(nodes, v, DisruptionReason::Empty, "scale-down: empty", why);
    }
    if ripe.iter().any(|u| u.empty) && empty_room == 0 {
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

/// Starts the unneeded clock on nodes that became unneeded and stops it on those that
/// no longer are, in node annotations.
pub fn mark_unneeded(v: &View<'_>, _notes: &mut Vec<Reason>) -> StepResult {
    let now_unneeded: Vec<&str> = unneeded(v).iter().map(|u| u.node.name.as_str()).collect();
    let mut mark = Vec::new();
    let mut clear = Vec::new();
    for (_, n) in in_service(v) {
        let has = n.annotations.contains_key(ANNOTATION_UNNEEDED_SINCE);
        let is = now_unneeded.contains(&n.name.as_str());
        if is && !has {
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
pub(super) fn evict_in_model<'a>(
    v: &View<'a>,
    m: &mut Model<'a>,
    node: &str,
    pods: &[&'a PodInfo],
) -> (Vec<&'a PodInfo>, bool) {
    let Some(i) = m.slot_index(node) else {
        return (pods.to_vec(), false);
    };
    let was = m.slots[i].usable;
    m.slots[i].usable = false;
    let cp = m.checkpoint();
    let mut sorted = pods.to_vec();
    sched::sort_for_packing(&mut sorted, &v.reference_node());
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
    m.rollback(cp);
    m.slots[i].usable = was;
    (left, keeps_minimum)
}

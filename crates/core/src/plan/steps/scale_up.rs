//! Adding capacity: groups below `minSize`, pods the scheduler could not place (first on
//! nodes cordoned for scale-down, given back; then packed onto new nodes of the group
//! the expander picks), and headroom targets.

use super::expander::choose;
use super::{at_max, general_group, list_pods, room, StepResult};
use crate::config::NodeGroupConfig;
use crate::model::{fmt_cpu, ObjectRef, PodInfo};
use crate::plan::sched::{self, GroupOption};
use crate::plan::units::{fmt_bytes, fmt_u};
use crate::plan::view::{GroupInfo, ServerState, View};
use crate::plan::{Action, Reason, ReasonCode};

/// Unhostable pods reported one by one (each gets its own Event); the rest together.
const NAMED_UNHOSTABLE: usize = 20;

/// How many more nodes of `g` the cluster-wide `limits` allow, and which limit binds.
pub(super) fn limit_room(v: &View<'_>, g: &NodeGroupConfig) -> (u32, Option<String>) {
    let limits = &v.config.limits;
    let mut room = u32::MAX;
    let mut why = None;
    let active = v
        .members
        .iter()
        .filter(|m| m.state != ServerState::Deleting);
    // Warm VMs (parked or filling) count as the nodes they become.
    let warm: Vec<&str> = v
        .warm
        .iter()
        .filter(|s| s.status != crate::model::ServerStatus::Deleting)
        .filter_map(|s| s.group.as_deref())
        .collect();
    // A frozen provider's VMs are missing from the snapshot: each of its groups counts
    // with its last known VMs, or as full (at maxSize) when this process never listed
    // it (a restart during the outage), so the limits hold whatever it runs now.
    let frozen: Vec<(&NodeGroupConfig, u32)> = v
        .config
        .node_groups
        .iter()
        .filter(|f| v.frozen.contains_key(f.name.as_str()))
        .map(|f| {
            (
                f,
                v.frozen_sizes.get(&f.name).copied().unwrap_or(f.max_size),
            )
        })
        .collect();
    let frozen_nodes: u32 = frozen.iter().map(|(_, n)| n).sum();
    if let Some(max) = limits.nodes {
        let total = ((active.clone().count() + warm.len()) as u32).saturating_add(frozen_nodes);
        let r = max.saturating_sub(total);
        if r < room {
            room = r;
            why = Some(format!(
                "limits.nodes {max} reached ({total} managed nodes)"
            ));
        }
    }
    let Some(info) = v.group(&g.name) else {
        return (room, why);
    };
    let (mut cpu, mut mem) = (0u64, 0u64);
    for m in active {
        let a = match m.node {
            Some(n) => n.allocatable.clone(),
            None => v
                .group(&m.group.name)
                .map(|i| i.of_size(m.size()).allocatable.clone())
                .unwrap_or_default(),
        };
        cpu += a.cpu;
        mem += a.memory;
    }
    for group in &warm {
        if let Some(i) = v.group(group) {
            cpu += i.allocatable.cpu;
            mem += i.allocatable.memory;
        }
    }
    for (f, n) in &frozen {
        let a = v.group(&f.name).map(|i| &i.allocatable);
        let n = u64::from(*n);
        cpu = cpu.saturating_add(a.map_or(0, |a| a.cpu).saturating_mul(n));
        mem = mem.saturating_add(a.map_or(0, |a| a.memory).saturating_mul(n));
    }
    let per_node = &info.allocatable;
    if let Some(q) = &limits.cpu {
        let max = q.milli();
        let r = max
            .saturating_sub(cpu)
            .checked_div(per_node.cpu)
            .map_or(u32::MAX, |n| n.min(u64::from(u32::MAX)) as u32);
        if r < room {
            room = r;
            why = Some(format!(
                "limits.cpu {} reached ({} on managed nodes, a node of group {} has {})",
                fmt_cpu(max),
                fmt_cpu(cpu),
                g.name,
                fmt_cpu(per_node.cpu)
            ));
        }
    }
    if let Some(q) = &limits.memory {
        let max = q.whole();
        let r = max
            .saturating_sub(mem)
            .checked_div(per_node.memory)
            .map_or(u32::MAX, |n| n.min(u64::from(u32::MAX)) as u32);
        if r < room {
            room = r;
            why = Some(format!(
                "limits.memory {} reached ({} on managed nodes, a node of group {} has {})",
                fmt_u(max),
                fmt_u(mem),
                g.name,
                fmt_u(per_node.memory)
            ));
        }
    }
    (room, why)
}

/// Add nodes when a group is below its minimum, pods cannot be scheduled, or headroom
/// is short, counting VMs still provisioning as capacity.
pub fn scale_up(v: &View<'_>, notes: &mut Vec<Reason>) -> StepResult {
    if let Some(r) = min_size(v, notes) {
        return Some(r);
    }
    report_unhostable(v, notes);
    // Room nodewright is taking away comes back before any VM is bought.
    if let Some(r) = super::reuse::reuse_cordoned(v, notes) {
        return Some(r);
    }
    if let Some(r) = pending_pods(v, notes) {
        return Some(r);
    }
    // Capacity buffers: after every real pending pod, before the headroom targets.
    if let Some(r) = super::buffers::scale_up_for_buffers(v, notes) {
        return Some(r);
    }
    headroom(v, notes)
}

fn min_size(v: &View<'_>, notes: &mut Vec<Reason>) -> StepResult {
    for g in &v.config.node_groups {
        let active = v.active_size(&g.name);
        if active >= g.min_size {
            continue;
        }
        let room = room(v, g);
        if room == 0 {
            notes.push(at_max(v, g));
            continue;
        }
        let count = (g.min_size - active).min(room);
        let reason = Reason::new(
            ReasonCode::GroupBelowMinSize,
            format!(
                "group {} has {active} active node(s), minSize is {}",
                g.name, g.min_size
            ),
        );
        return Some((
            Action::ScaleUp {
                group: g.name.clone(),
                count,
                size: None,
            },
            vec![reason],
        ));
    }
    None
}

fn report_unhostable(v: &View<'_>, notes: &mut Vec<Reason>) {
    let unhostable = &v.pending.unhostable;
    for (pod, why) in unhostable.iter().take(NAMED_UNHOSTABLE) {
        let groups: Vec<&str> = why.iter().map(|(_, w)| w.as_str()).collect();
        notes.push(
            Reason::new(
                ReasonCode::NoGroupFits,
                format!(
                    "no node group can host {}: {}",
                    pod.key(),
                    groups.join("; ")
                ),
            )
            .about([ObjectRef::pod(pod)]),
        );
    }
    if unhostable.len() > NAMED_UNHOSTABLE {
        let rest: Vec<&PodInfo> = unhostable[NAMED_UNHOSTABLE..]
            .iter()
            .map(|(p, _)| *p)
            .collect();
        notes.push(Reason::new(
            ReasonCode::NoGroupFits,
            format!(
                "no node group can host {} more pod(s): {}",
                rest.len(),
                list_pods(&rest)
            ),
        ));
    }
    for (pod, node) in &v.pending.mismatched {
        notes.push(
            Reason::new(
                ReasonCode::ModelMismatch,
                format!(
                    "the scheduler calls {} unschedulable, but by nodewright's model it fits {node}; giving it a new node after modelMismatchGrace {}",
                    pod.key(),
                    humantime::format_duration(v.config.model_mismatch_grace)
                ),
            )
            .about([ObjectRef::pod(pod)]),
        );
    }
}

/// Packs the pods that fit no existing or provisioning node onto new nodes of each
/// group with room, and lets the expander pick one group.
fn pending_pods(v: &View<'_>, notes: &mut Vec<Reason>) -> StepResult {
    let pending = &v.pending;
    if pending.needing_nodes.is_empty() {
        return None;
    }
    let mut model = v.model_for_new_nodes();
    // What the scheduler will place and what provisioning nodes will take, first.
    for (pod, slot) in pending.on_nodes.iter().chain(&pending.on_provisioning) {
        if let Some(i) = model.slot_index(slot) {
            model.place(pod, i);
        }
    }
    let mut pods = pending.needing_nodes.clone();
    sched::sort_for_packing(&mut pods, &v.reference_node());
    let mut options = Vec::new();
    // The size each group of several sizes would be scaled up with.
    let mut sizes: Vec<(&str, String)> = Vec::new();
    for g in &v.config.node_groups {
        let Some(info) = v.group(&g.name) else {
            continue;
        };
        let room = room(v, g);
        if room == 0 {
            let could = v.frozen.contains_key(g.name.as_str())
                || pods.iter().any(|p| {
                    std::iter::once(info)
                        .chain(info.sizes.iter().map(|(_, i)| i))
                        .any(|i| sched::why_not(p, &i.template, &i.overhead).is_none())
                });
            if could {
                notes.push(at_max(v, g));
            }
            continue;
        }
        let nodes = if info.sizes.is_empty() {
            sched::trial_new_nodes(
                &mut model,
                &pods,
                &info.template,
                &info.overhead,
                room,
                info.zones(),
            )
        } else {
            let Some((size, nodes)) = least_wasting_size(&mut model, &pods, info, room) else {
                continue;
            };
            sizes.push((g.name.as_str(), size));
            nodes
        };
        if nodes.count > 0 {
            options.push(GroupOption {
                group: g.name.clone(),
                nodes,
                price: g.price,
            });
        }
    }
    // Pods no option takes at all: their affinity or spread rules fit no new node of any
    // group with room. Said per pod, so none waits unexplained.
    let anywhere = |p: &PodInfo| {
        options.iter().any(|o: &GroupOption<'_>| {
            o.nodes
                .placed
                .iter()
                .chain(&o.nodes.over_room)
                .any(|q| std::ptr::eq(*q, p))
        })
    };
    let stuck: Vec<&PodInfo> = pods.iter().copied().filter(|p| !anywhere(p)).collect();
    let blocked_groups = notes.iter().any(|n| {
        matches!(
            n.code,
            ReasonCode::GroupAtMaxSize
                | ReasonCode::GroupBackedOff
                | ReasonCode::ClusterLimitReached
                | ReasonCode::HostsFull
                | ReasonCode::ProviderUnavailable
        )
    });
    if !stuck.is_empty() && !blocked_groups {
        notes.push(
            Reason::new(
                ReasonCode::NoGroupFits,
                format!(
                    "no new node of any group with room satisfies the pod affinity, anti-affinity or topology spread of {}",
                    list_pods(&stuck)
                ),
            )
            .about(stuck.iter().map(|p| ObjectRef::pod(p))),
        );
    }
    let others_take = |p: &PodInfo, chosen: &str| {
        options.iter().any(|o: &GroupOption<'_>| {
            o.group != chosen && o.nodes.placed.iter().any(|q| std::ptr::eq(*q, p))
        })
    };
    let best = choose(v, options.clone())?;
    let g = v.config.group(&best.group)?;
    let placed = &best.nodes.placed;
    let mut requested = crate::model::Resources::default();
    for p in placed {
        requested.add(&p.requests);
    }
    let mut reasons = vec![Reason::new(
        ReasonCode::UnschedulablePods,
        format!(
            "{} pod(s) requesting {} fit on no existing or provisioning node; {} new node(s) of group {} take them: {}",
            placed.len(),
            requested,
            best.nodes.count,
            g.name,
            list_pods(placed)
        ),
    )
    .about(placed.iter().map(|p| ObjectRef::pod(p)))];
    // Pods this group has no room for but another group takes: the next scale-up.
    let left_over: Vec<&PodInfo> = best
        .nodes
        .over_room
        .iter()
        .copied()
        .filter(|p| !others_take(p, &best.group))
        .collect();
    if !left_over.is_empty() {
        let by_limit = limit_room(v, g);
        let by_hosts = super::host_room(v, g);
        let by_size = g.max_size.saturating_sub(v.group_size(&g.name));
        let mut r = if by_hosts.0 < by_size && by_hosts.0 <= by_limit.0 {
            let h = v.group(&g.name).and_then(|i| i.hosts.as_ref());
            super::hosts_full(
                g,
                &format!(
                    "{} more VM(s) fit ({})",
                    by_hosts.0,
                    h.map(|h| h.zones.join(", ")).unwrap_or_default()
                ),
            )
        } else if by_limit.0 < by_size {
            Reason::new(
                ReasonCode::ClusterLimitReached,
                by_limit.1.unwrap_or_default(),
            )
        } else {
            Reason::new(
                ReasonCode::GroupAtMaxSize,
                format!("group {} reaches maxSize {}", g.name, g.max_size),
            )
        };
        r.message = format!(
            "{}; {} more pod(s) wait for room: {}",
            r.message,
            left_over.len(),
            list_pods(&left_over)
        );
        reasons.push(r.about(left_over.iter().map(|p| ObjectRef::pod(p))));
    }
    let size = sizes
        .into_iter()
        .find(|(group, _)| *group == g.name)
        .map(|(_, size)| size);
    if let Some(size) = &size {
        reasons[0].message = format!(
            "{} (size {size}: the one of the group's {} that wastes least for them)",
            reasons[0].message,
            g.sizes().join(", ")
        );
    }
    Some((
        Action::ScaleUp {
            group: g.name.clone(),
            count: best.nodes.count,
            size,
        },
        reasons,
    ))
}

/// The size of a group of several sizes that wastes least for `pods`, with the new nodes
/// it takes them on: the one that places the most of them, then at the least node-cost
/// (each node costs its CPU and memory as shares of the group's largest size, so four
/// nodes of a quarter cost one of the whole), then the smaller. `None`: no size takes
/// any of them.
pub(super) fn least_wasting_size<'a>(
    model: &mut sched::Model<'a>,
    pods: &[&'a PodInfo],
    info: &GroupInfo,
    room: u32,
) -> Option<(String, sched::NewNodes<'a>)> {
    let mut largest = crate::model::Resources::default();
    for (_, i) in &info.sizes {
        largest.max_with(&i.allocatable);
    }
    let share = |part: u64, whole: u64| {
        if whole == 0 {
            0.0
        } else {
            part as f64 / whole as f64
        }
    };
    let cost = |i: &GroupInfo| {
        share(i.allocatable.cpu, largest.cpu) + share(i.allocatable.memory, largest.memory)
    };
    let mut best: Option<(&str, &GroupInfo, sched::NewNodes<'a>, f64)> = None;
    for (name, i) in &info.sizes {
        let nodes = sched::trial_new_nodes(model, pods, &i.template, &i.overhead, room, i.zones());
        if nodes.count == 0 {
            continue;
        }
        let total = f64::from(nodes.count) * cost(i);
        let better = match &best {
            None => true,
            Some((_, bi, bn, bt)) => nodes
                .placed
                .len()
                .cmp(&bn.placed.len())
                .then(bt.total_cmp(&total))
                .then(
                    (bi.allocatable.cpu, bi.allocatable.memory)
                        .cmp(&(i.allocatable.cpu, i.allocatable.memory)),
                )
                .is_gt(),
        };
        if better {
            best = Some((name, i, nodes, total));
        }
    }
    best.map(|(name, _, nodes, _)| (name.to_string(), nodes))
}

/// Free memory and CPU targets over managed nodes, counting provisioning capacity;
/// then the largest free node.
fn headroom(v: &View<'_>, notes: &mut Vec<Reason>) -> StepResult {
    let cfg = v.config;
    let (free_mem, free_cpu) = v.free_total();
    let (prov_mem, prov_cpu) = v.provisioning_capacity();
    let mem_target = cfg.free_memory_target.as_u64() as i64;
    let cpu_target = cfg.free_cpu_target.as_ref().map_or(0, |q| q.milli() as i64);
    let mem_short = (mem_target - free_mem - prov_mem).max(0);
    let cpu_short = (cpu_target - free_cpu - prov_cpu).max(0);
    if mem_short > 0 || cpu_short > 0 {
        let g = general_group(v, notes)?;
        let usable = v.group(&g.name).map(|i| i.usable()).unwrap_or_default();
        let need = |short: i64, per: u64| {
            if short <= 0 {
                0
            } else if per == 0 {
                1
            } else {
                (short as u64).div_ceil(per).min(u64::from(u32::MAX)) as u32
            }
        };
        let count = need(mem_short, usable.memory)
            .max(need(cpu_short, usable.cpu))
            .max(1)
            .min(room(v, g));
        let mut reasons = Vec::new();
        if mem_short > 0 {
            reasons.push(Reason::new(
                ReasonCode::FreeMemoryBelowTarget,
                format!(
                    "free memory {} (plus {} provisioning) is below freeMemoryTarget {}",
                    fmt_bytes(free_mem),
                    fmt_bytes(prov_mem),
                    fmt_u(mem_target as u64)
                ),
            ));
        }
        if cpu_short > 0 {
            reasons.push(Reason::new(
                ReasonCode::FreeCpuBelowTarget,
                format!(
                    "free CPU {} (plus {} provisioning) is below freeCpuTarget {}",
                    fmt_signed_cpu(free_cpu),
                    fmt_signed_cpu(prov_cpu),
                    fmt_cpu(cpu_target as u64)
                ),
            ));
        }
        return Some((
            Action::ScaleUp {
                group: g.name.clone(),
                count,
                size: None,
            },
            reasons,
        ));
    }
    largest_free_node(v, notes)
}

fn fmt_signed_cpu(milli: i64) -> String {
    if milli < 0 {
        format!("-{}", fmt_cpu(milli.unsigned_abs()))
    } else {
        fmt_cpu(milli as u64)
    }
}

/// `minimumFreeNodeMemory` / `minimumFreeNodeCpu`: some node (or VM on its way) keeps
/// that much room, so a large pod can start without waiting for a new node.
fn largest_free_node(v: &View<'_>, notes: &mut Vec<Reason>) -> StepResult {
    let cfg = v.config;
    let min_mem = cfg.minimum_free_node_memory.as_u64();
    let min_cpu = cfg.minimum_free_node_cpu.as_ref().map_or(0, |q| q.milli());
    if min_mem == 0 && min_cpu == 0 {
        return None;
    }
    let mut frees: Vec<crate::model::Resources> = v
        .schedulable()
        .filter_map(|m| m.node)
        .map(|n| v.free_on(n))
        .collect();
    frees.extend(
        v.provisioning()
            .filter_map(|m| Some(v.group(&m.group.name)?.of_size(m.size())))
            .map(|i| i.usable()),
    );
    if frees
        .iter()
        .any(|f| f.memory >= min_mem && f.cpu >= min_cpu)
    {
        return None;
    }
    let largest_mem = frees.iter().map(|f| f.memory).max().unwrap_or(0);
    let largest_cpu = frees.iter().map(|f| f.cpu).max().unwrap_or(0);
    let want = format!(
        "no node has {} free memory and {} free CPU (largest free: {}, {} CPU); minimumFreeNodeMemory / minimumFreeNodeCpu",
        fmt_u(min_mem),
        fmt_cpu(min_cpu),
        fmt_u(largest_mem),
        fmt_cpu(largest_cpu)
    );
    let g = general_group(v, notes)?;
    let usable = v.group(&g.name).map(|i| i.usable()).unwrap_or_default();
    if usable.memory < min_mem || usable.cpu < min_cpu {
        notes.push(Reason::new(
            ReasonCode::NodeFreeMemoryBelowMinimum,
            format!(
                "{want}, but a new node of group {} would not have that much either",
                g.name
            ),
        ));
        return None;
    }
    Some((
        Action::ScaleUp {
            group: g.name.clone(),
            count: 1,
            size: None,
        },
        vec![Reason::new(ReasonCode::NodeFreeMemoryBelowMinimum, want)],
    ))
}

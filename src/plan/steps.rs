//! The planning steps, in the order [`super::STEPS`] runs them. Each looks at the shared
//! [`View`] and either claims the cycle with an action or adds notes and passes.

use std::collections::BTreeSet;
use std::time::Duration;

use super::capacity::{self, fmt_bytes, fmt_u, Bin};
use super::model::{normalize_image, PodInfo};
use super::view::{Member, ServerState, View};
use super::{Action, ObjectRef, PodRef, Reason, ReasonCode};
use crate::config::NodeGroupConfig;
use crate::{ANNOTATION_CORDONED, STARTUP_TAINT_KEY};

type StepResult = Option<(Action, Vec<Reason>)>;

/// Puller pods that have not finished by then are assumed stuck and removed.
const PULLER_DEADLINE: Duration = Duration::from_secs(300);

fn pod_ref(p: &PodInfo) -> PodRef {
    PodRef {
        namespace: p.namespace.clone(),
        name: p.name.clone(),
    }
}

fn list_pods(pods: &[&PodInfo]) -> String {
    const SHOWN: usize = 5;
    let mut names: Vec<String> = pods.iter().take(SHOWN).map(|p| p.key()).collect();
    if pods.len() > SHOWN {
        names.push(format!("and {} more", pods.len() - SHOWN));
    }
    names.join(", ")
}

/// A new node is Ready: take the startup taint off so pods can land.
pub fn finish_provisioning(v: &View<'_>, _notes: &mut Vec<Reason>) -> StepResult {
    let m = v.members.iter().find(|m| {
        !matches!(m.state, ServerState::Deleting)
            && m.node
                .is_some_and(|n| n.ready && n.has_taint(STARTUP_TAINT_KEY) && !n.deleting)
    })?;
    let node = m.server.name.clone();
    let reason = Reason::new(
        ReasonCode::NodeReady,
        format!("node {node} of group {} is Ready", m.group.name),
    )
    .about([ObjectRef::node(&node)]);
    Some((Action::RemoveStartupTaint { node }, vec![reason]))
}

/// VMs in error, or that never joined in time, are deleted with any node they left.
pub fn clean_up_failed(v: &View<'_>, _notes: &mut Vec<Reason>) -> StepResult {
    let failed: Vec<&Member<'_>> = v
        .members
        .iter()
        .filter(|m| m.state == ServerState::Failed)
        .collect();
    if failed.is_empty() {
        return None;
    }
    let mut reasons = Vec::new();
    for m in &failed {
        let about = m.node.map(|n| ObjectRef::node(&n.name));
        let age =
            humantime::format_duration(Duration::from_secs(v.age(m.server.created).as_secs()));
        reasons.push(
            match m.server.status {
                crate::cloud::ServerStatus::Error => Reason::new(
                    ReasonCode::ServerError,
                    format!("VM {} reports an error state", m.server.name),
                ),
                _ if m.node.is_none() => Reason::new(
                    ReasonCode::ProvisionTimeout,
                    format!(
                        "VM {} has no node of ours after {age} (provisionTimeout {})",
                        m.server.name,
                        humantime::format_duration(v.config.provision_timeout)
                    ),
                ),
                _ => Reason::new(
                    ReasonCode::ProvisionTimeout,
                    format!(
                        "node {} is not Ready {age} after its VM was created (provisionTimeout {})",
                        m.server.name,
                        humantime::format_duration(v.config.provision_timeout)
                    ),
                ),
            }
            .about(about),
        );
    }
    let nodes = failed
        .iter()
        .filter_map(|m| m.node.map(|n| n.name.clone()))
        .collect();
    let servers = failed.iter().map(|m| m.server_ref()).collect();
    Some((Action::DeleteServers { servers, nodes }, reasons))
}

/// How many VMs `g` may get now: none while backed off after failures.
fn room(v: &View<'_>, g: &NodeGroupConfig) -> u32 {
    if v.backed_off_until(&g.name).is_some() {
        return 0;
    }
    g.max_size.saturating_sub(v.group_size(&g.name))
}

/// Why `g` has no room: backed off, or at its maximum.
fn at_max(v: &View<'_>, g: &NodeGroupConfig) -> Reason {
    match v.backed_off_until(&g.name) {
        Some(until) => Reason::new(
            ReasonCode::GroupBackedOff,
            format!(
                "group {} is left alone for {} after failed creates",
                g.name,
                humantime::format_duration(Duration::from_secs(
                    until.duration_since(v.now).unwrap_or_default().as_secs()
                ))
            ),
        ),
        None => Reason::new(
            ReasonCode::GroupAtMaxSize,
            format!("group {} is at maxSize {}", g.name, g.max_size),
        ),
    }
}

/// The group general capacity goes to: the first one with room, preferring untainted ones.
fn general_group<'c>(v: &View<'c>, notes: &mut Vec<Reason>) -> Option<&'c NodeGroupConfig> {
    let groups = &v.config.node_groups;
    let with_room: Vec<&NodeGroupConfig> = groups.iter().filter(|g| room(v, g) > 0).collect();
    if with_room.is_empty() {
        notes.extend(groups.iter().map(|g| at_max(v, g)));
        return None;
    }
    with_room
        .iter()
        .find(|g| g.taints.is_empty())
        .or(with_room.first())
        .copied()
}

fn ceil_div(a: u64, b: u64) -> u32 {
    if b == 0 {
        return 1;
    }
    a.div_ceil(b).min(u32::MAX as u64) as u32
}

/// Add nodes when a group is below its minimum, pods cannot be scheduled, or free memory
/// is short, counting VMs still provisioning as capacity.
pub fn scale_up(v: &View<'_>, notes: &mut Vec<Reason>) -> StepResult {
    let cfg = v.config;
    let cluster = cfg.cluster_name.as_str();

    for g in &cfg.node_groups {
        let active = v.active_size(&g.name);
        if active < g.min_size {
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
                },
                vec![reason],
            ));
        }
    }

    if !v.unhostable.is_empty() {
        notes.push(
            Reason::new(
                ReasonCode::NoGroupFits,
                format!(
                    "no node group can host {} (nodeSelector, taints or memory request): {}",
                    if v.unhostable.len() == 1 {
                        "this pod"
                    } else {
                        "these pods"
                    },
                    list_pods(&v.unhostable)
                ),
            )
            .about(v.unhostable.iter().map(|p| ObjectRef::pod(p))),
        );
    }
    let mut bins = v.bins();
    let unplaced = capacity::place(&mut bins, &v.unschedulable);
    for g in cfg.node_groups.iter().filter(|_| !unplaced.is_empty()) {
        let memory = v.group_memory(&g.name);
        let shape = Bin::for_group(g, cluster, memory.map_or(i64::MAX, |m| m as i64));
        let accepted: Vec<&PodInfo> = unplaced
            .iter()
            .copied()
            .filter(|p| shape.accepts(p))
            .filter(|p| memory.is_none_or(|m| p.memory_request <= m))
            .collect();
        if accepted.is_empty() {
            continue;
        }
        let room = room(v, g);
        if room == 0 {
            notes.push(at_max(v, g));
            continue;
        }
        let needed = memory
            .and_then(|m| capacity::nodes_needed(g, cluster, m, &accepted))
            .unwrap_or(1);
        let requested: u64 = accepted.iter().map(|p| p.memory_request).sum();
        let mut reasons = vec![Reason::new(
            ReasonCode::UnschedulablePods,
            format!(
                "{} pod(s) requesting {} fit on no existing or provisioning node: {}",
                accepted.len(),
                fmt_u(requested),
                list_pods(&accepted)
            ),
        )
        .about(accepted.iter().map(|p| ObjectRef::pod(p)))];
        if needed > room {
            reasons.push(Reason::new(
                ReasonCode::GroupAtMaxSize,
                format!(
                    "{needed} node(s) needed but group {} has room for {room} (maxSize {})",
                    g.name, g.max_size
                ),
            ));
        }
        return Some((
            Action::ScaleUp {
                group: g.name.clone(),
                count: needed.min(room),
            },
            reasons,
        ));
    }

    let target = cfg.free_memory_target.as_u64() as i64;
    let free = v.free_total();
    let provisioning = v.provisioning_memory() as i64;
    if free + provisioning < target {
        let g = general_group(v, notes)?;
        let deficit = (target - free - provisioning) as u64;
        let count = v
            .group_memory(&g.name)
            .map_or(1, |m| ceil_div(deficit, m))
            .min(room(v, g));
        let reason = Reason::new(
            ReasonCode::FreeMemoryBelowTarget,
            format!(
                "free memory {} (plus {} provisioning) is below freeMemoryTarget {}",
                fmt_bytes(free),
                fmt_bytes(provisioning),
                fmt_u(target as u64)
            ),
        );
        return Some((
            Action::ScaleUp {
                group: g.name.clone(),
                count,
            },
            vec![reason],
        ));
    }

    let minimum = cfg.minimum_free_node_memory.as_u64() as i64;
    if minimum > 0 {
        let largest = v.bins().iter().map(|b| b.free).max().unwrap_or(0);
        if largest < minimum {
            let g = general_group(v, notes)?;
            if v.group_memory(&g.name)
                .is_some_and(|m| (m as i64) < minimum)
            {
                notes.push(Reason::new(
                    ReasonCode::NodeFreeMemoryBelowMinimum,
                    format!(
                        "largest free memory on a node is {}, below minimumFreeNodeMemory {}, but a new node of group {} would not have that much either",
                        fmt_bytes(largest),
                        fmt_u(minimum as u64),
                        g.name
                    ),
                ));
                return None;
            }
            let reason = Reason::new(
                ReasonCode::NodeFreeMemoryBelowMinimum,
                format!(
                    "largest free memory on a node is {}, below minimumFreeNodeMemory {}",
                    fmt_bytes(largest),
                    fmt_u(minimum as u64)
                ),
            );
            return Some((
                Action::ScaleUp {
                    group: g.name.clone(),
                    count: 1,
                },
                vec![reason],
            ));
        }
    }
    None
}

fn cordoned_by_us<'m>(v: &'m View<'_>) -> impl Iterator<Item = &'m Member<'m>> {
    v.members.iter().filter(|m| {
        m.node
            .is_some_and(|n| n.unschedulable && n.annotations.contains_key(ANNOTATION_CORDONED))
    })
}

/// Evict what is left on a node nodewright cordoned, one node at a time.
pub fn drain(v: &View<'_>, notes: &mut Vec<Reason>) -> StepResult {
    for m in cordoned_by_us(v) {
        let node = &m.server.name;
        let remaining: Vec<&PodInfo> = v
            .pods_on(node)
            .iter()
            .copied()
            .filter(|p| !p.ignored_by_drain())
            .collect();
        if remaining.is_empty() {
            continue;
        }
        let evictable: Vec<&PodInfo> = remaining.iter().copied().filter(|p| !p.deleting).collect();
        if evictable.is_empty() {
            notes.push(Reason::new(
                ReasonCode::DrainInProgress,
                format!("waiting for {} pod(s) to leave {node}", remaining.len()),
            ));
            continue;
        }
        let bare: Vec<&PodInfo> = evictable
            .iter()
            .copied()
            .filter(|p| p.controller_kind.is_none())
            .collect();
        if !bare.is_empty() {
            notes.push(Reason::new(
                ReasonCode::DrainBlocked,
                format!(
                    "{node} keeps pods without a controller, which eviction would lose: {}; delete or move them to let the replacement finish",
                    list_pods(&bare)
                ),
            )
            .about([ObjectRef::node(node)])
            .about(bare.iter().map(|p| ObjectRef::pod(p))));
            continue;
        }
        let reason = Reason::new(
            ReasonCode::DrainInProgress,
            format!(
                "{node} is cordoned ({}) and still runs {} pod(s)",
                m.node
                    .and_then(|n| n.annotations.get(ANNOTATION_CORDONED))
                    .map_or("", String::as_str),
                evictable.len()
            ),
        )
        .about([ObjectRef::node(node)]);
        let (blocked, allowed): (Vec<&PodInfo>, Vec<&PodInfo>) = evictable
            .iter()
            .copied()
            .partition(|p| v.blocking_pdb(p).is_some());
        if !blocked.is_empty() {
            let budgets: BTreeSet<String> = blocked
                .iter()
                .filter_map(|p| v.blocking_pdb(p))
                .map(|b| format!("{}/{}", b.namespace, b.name))
                .collect();
            notes.push(
                Reason::new(
                    ReasonCode::DrainBlocked,
                    format!(
                        "{node}: PodDisruptionBudget {} allows no disruption now; waiting to evict {}",
                        budgets.into_iter().collect::<Vec<_>>().join(", "),
                        list_pods(&blocked)
                    ),
                )
                .about([ObjectRef::node(node)]),
            );
        }
        if allowed.is_empty() {
            continue;
        }
        let pods = allowed.iter().map(|p| pod_ref(p)).collect();
        return Some((
            Action::Drain {
                node: node.clone(),
                pods,
            },
            vec![reason],
        ));
    }
    None
}

/// Cordon the oldest node past `oldNodeAgeLimit` once the rest can hold its pods; add a
/// node first when they cannot.
pub fn replace_old(v: &View<'_>, notes: &mut Vec<Reason>) -> StepResult {
    let limit = v.config.old_node_age_limit?;
    if cordoned_by_us(v).next().is_some() {
        return None;
    }
    let oldest = v
        .schedulable()
        .filter_map(|m| m.node.map(|n| (m, n)))
        .filter(|(_, n)| v.age(n.created) > limit)
        .min_by_key(|(_, n)| n.created)?;
    let (m, node) = oldest;
    let age = humantime::format_duration(Duration::from_secs(v.age(node.created).as_secs()));
    let too_old = Reason::new(
        ReasonCode::NodeTooOld,
        format!(
            "node {} is {age} old, past oldNodeAgeLimit {}",
            node.name,
            humantime::format_duration(limit)
        ),
    )
    .about([ObjectRef::node(&node.name)]);
    let pods: Vec<&PodInfo> = v
        .pods_on(&node.name)
        .iter()
        .copied()
        .filter(|p| !p.ignored_by_drain())
        .collect();
    // Only nodes that exist count here: pods evicted onto a node still booting would wait.
    let mut bins = v.node_bins(Some(&node.name));
    let left = capacity::place(&mut bins, &pods);
    let free_after = v.free_total() - node.allocatable_memory as i64;
    let target = v.config.free_memory_target.as_u64() as i64;
    if left.is_empty() && free_after >= target {
        let reason = format!(
            "replacing: older than {}",
            humantime::format_duration(limit)
        );
        return Some((
            Action::Cordon {
                node: node.name.clone(),
                reason,
            },
            vec![too_old],
        ));
    }
    if v.provisioning().next().is_some() {
        notes.push(too_old);
        notes.push(Reason::new(
            ReasonCode::WaitingForProvisioning,
            format!(
                "waiting for provisioning nodes before moving the pods of {}",
                node.name
            ),
        ));
        return None;
    }
    let group = if room(v, m.group) > 0 {
        m.group
    } else {
        general_group(v, notes)?
    };
    let why = if left.is_empty() {
        format!(
            "without {} free memory would be {}, below freeMemoryTarget {}",
            node.name,
            fmt_bytes(free_after),
            fmt_u(target as u64)
        )
    } else {
        format!(
            "{} of its pods fit on no other node: {}",
            left.len(),
            list_pods(&left)
        )
    };
    Some((
        Action::ScaleUp {
            group: group.name.clone(),
            count: 1,
        },
        vec![
            too_old,
            Reason::new(ReasonCode::ReplacementNeedsCapacity, why),
        ],
    ))
}

/// Cordon a node that is not needed: everything it runs fits on the others, free memory
/// stays at target (and a node keeps `minimumFreeNodeMemory`) without it, the group stays
/// at or above `minSize`, and no node was added within `scaleDown.delayAfterAdd`. The
/// same memory rule that triggers scale-up guards this, so the two cannot flap.
pub fn scale_down(v: &View<'_>, _notes: &mut Vec<Reason>) -> StepResult {
    let sd = &v.config.scale_down;
    if !sd.enabled
        || cordoned_by_us(v).next().is_some()
        || v.provisioning().next().is_some()
        || !v.unschedulable.is_empty()
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
    let target = v.config.free_memory_target.as_u64() as i64;
    let minimum = v.config.minimum_free_node_memory.as_u64() as i64;
    let mut candidates: Vec<&Member<'_>> = v
        .schedulable()
        .filter(|m| v.active_size(&m.group.name) > m.group.min_size)
        .collect();
    candidates.sort_by_key(|m| v.requested_on(&m.server.name));
    let free_total = v.free_total();
    for m in candidates {
        let Some(node) = m.node else { continue };
        let pods: Vec<&PodInfo> = v
            .pods_on(&node.name)
            .iter()
            .copied()
            .filter(|p| !p.ignored_by_drain())
            .collect();
        if pods
            .iter()
            .any(|p| p.controller_kind.is_none() || v.blocking_pdb(p).is_some())
        {
            continue;
        }
        let free_after = free_total - node.allocatable_memory as i64;
        if free_after < target {
            continue;
        }
        let mut bins = v.node_bins(Some(&node.name));
        if !capacity::place(&mut bins, &pods).is_empty() {
            continue;
        }
        if minimum > 0 && bins.iter().map(|b| b.free).max().unwrap_or(0) < minimum {
            continue;
        }
        let load = if pods.is_empty() {
            "runs no pods that need it".to_string()
        } else {
            format!(
                "runs {} pod(s) requesting {} that fit on the other nodes",
                pods.len(),
                fmt_u(pods.iter().map(|p| p.memory_request).sum())
            )
        };
        let reason = Reason::new(
            ReasonCode::NodeUnneeded,
            format!(
                "{} {load}; without it free memory is {} (target {})",
                node.name,
                fmt_bytes(free_after),
                fmt_u(target as u64)
            ),
        )
        .about([ObjectRef::node(&node.name)]);
        return Some((
            Action::Cordon {
                node: node.name.clone(),
                reason: "scale-down: not needed".into(),
            },
            vec![reason],
        ));
    }
    None
}

/// A cordoned node of ours with nothing left but DaemonSet, mirror or finished pods,
/// once no volume is attached to it any more (deleting the VM earlier could corrupt data).
pub fn remove_empty(v: &View<'_>, notes: &mut Vec<Reason>) -> StepResult {
    for m in &v.members {
        let Some(n) = m.node else { continue };
        let empty = n.unschedulable && v.pods_on(&n.name).iter().all(|p| p.ignored_by_drain());
        if m.state != ServerState::Joined || !empty {
            continue;
        }
        let attached: Vec<&str> = v
            .volume_attachments
            .iter()
            .filter(|(_, node)| *node == n.name)
            .map(|(name, _)| name.as_str())
            .collect();
        if !attached.is_empty() {
            notes.push(
                Reason::new(
                    ReasonCode::VolumesAttached,
                    format!(
                        "{} is empty but {} volume(s) are still attached ({}); waiting for them to detach",
                        n.name,
                        attached.len(),
                        attached.join(", ")
                    ),
                )
                .about([ObjectRef::node(&n.name)]),
            );
            continue;
        }
        let node = n.name.clone();
        let reason = Reason::new(
            ReasonCode::NodeEmpty,
            format!("{node} is cordoned and runs no pods that need it"),
        )
        .about([ObjectRef::node(&node)]);
        return Some((
            Action::DeleteNode {
                node,
                server: m.server_ref(),
            },
            vec![reason],
        ));
    }
    None
}

fn ignored_image(v: &View<'_>, raw: &str, normalized: &str) -> bool {
    v.config
        .image_puller
        .ignore
        .iter()
        .any(|p| raw.starts_with(p.as_str()) || normalized.starts_with(p.as_str()))
}

/// Pull images that pods in the cluster use onto managed nodes that lack them.
pub fn warm_images(v: &View<'_>, _notes: &mut Vec<Reason>) -> StepResult {
    if !v.config.image_puller.enabled {
        return None;
    }
    let pullers: Vec<&PodInfo> = v.pods.iter().filter(|p| p.is_image_puller()).collect();
    let done: Vec<&PodInfo> = pullers
        .iter()
        .copied()
        .filter(|p| !p.deleting && (p.is_terminal() || v.age(p.created) > PULLER_DEADLINE))
        .collect();
    if !done.is_empty() {
        let reason = Reason::new(
            ReasonCode::PullerFinished,
            format!("{} image puller pod(s) finished or timed out", done.len()),
        );
        let pods = done.iter().map(|p| pod_ref(p)).collect();
        return Some((Action::DeletePods { pods }, vec![reason]));
    }
    if pullers.iter().any(|p| !p.is_terminal()) {
        return None;
    }
    // Only images of pods that could run on a node are worth pulling there: a node
    // tainted for batch jobs does not need the web tier's images. Pods with the same
    // constraints are checked once.
    let mut wanted: Vec<(&PodInfo, BTreeSet<String>)> = Vec::new();
    for p in v
        .pods
        .iter()
        .filter(|p| !p.is_terminal() && !p.is_image_puller() && !p.is_daemonset())
    {
        let images = p.images.iter().filter_map(|raw| {
            let n = normalize_image(raw);
            (!ignored_image(v, raw, &n)).then_some(n)
        });
        let same = wanted
            .iter_mut()
            .find(|(q, _)| q.node_selector == p.node_selector && q.tolerations == p.tolerations);
        match same {
            Some((_, set)) => set.extend(images),
            None => wanted.push((p, images.collect())),
        }
    }
    for m in v.schedulable() {
        let Some(node) = m.node else { continue };
        let bin = Bin::for_node(node, 0);
        let missing: BTreeSet<String> = wanted
            .iter()
            .filter(|(p, _)| bin.accepts(p))
            .flat_map(|(_, images)| images.iter())
            .filter(|n| !node.images.contains(*n))
            .cloned()
            .collect();
        if missing.is_empty() {
            continue;
        }
        let missing: Vec<String> = missing.into_iter().collect();
        let reason = Reason::new(
            ReasonCode::ImageMissing,
            format!(
                "{} lacks {} image(s) used by pods that could run there",
                node.name,
                missing.len()
            ),
        )
        .about([ObjectRef::node(&node.name)]);
        return Some((
            Action::PullImages {
                node: node.name.clone(),
                images: missing,
            },
            vec![reason],
        ));
    }
    None
}

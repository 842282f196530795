//! Removing capacity: draining what nodewright cordoned, replacing old nodes, removing
//! unneeded ones, and deleting empty cordoned nodes with their VMs.

use std::collections::BTreeSet;
use std::time::Duration;

use super::{general_group, list_pods, pod_ref, room, StepResult};
use crate::plan::buffers;
use crate::plan::model::PodInfo;
use crate::plan::sched::{self, Model, Resources, SlotKind};
use crate::plan::units::{fmt_bytes, fmt_u};
use crate::plan::view::{Member, ServerState, View};
use crate::plan::{Action, ObjectRef, Reason, ReasonCode};
use crate::ANNOTATION_CORDONED;

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
    let mut model = v.model();
    let (left, _) = evict_in_model(v, &mut model, &node.name, &pods);
    let free_after = v.free_total().0 - node.allocatable.memory as i64;
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
    let cpu_target = v
        .config
        .free_cpu_target
        .as_ref()
        .map_or(0, |q| q.milli() as i64);
    let mut candidates: Vec<(&Member<'_>, f64)> = v
        .schedulable()
        .filter(|m| v.active_size(&m.group.name) > m.group.min_size)
        .filter_map(|m| {
            let n = m.node?;
            Some((m, v.requested_on(&n.name).dominant_share(&n.allocatable)))
        })
        .collect();
    candidates.sort_by(|a, b| a.1.total_cmp(&b.1));
    let (free_mem, free_cpu) = v.free_total();
    // Active capacity buffers must stay schedulable without the node.
    let buffer_pods = buffers::active_pods(v.config, v.now);
    let buffer: Vec<&PodInfo> = buffer_pods.iter().collect();
    let mut buffer_baseline = None;
    let mut model: Option<Model<'_>> = None;
    for (m, _) in candidates {
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
        let free_after = free_mem - node.allocatable.memory as i64;
        let cpu_after = free_cpu - node.allocatable.cpu as i64;
        if free_after < target || cpu_after < cpu_target {
            continue;
        }
        let model = model.get_or_insert_with(|| v.model());
        let (left, keeps_minimum) = evict_in_model(v, model, &node.name, &pods);
        if !left.is_empty() || !keeps_minimum {
            continue;
        }
        let reference = v.reference_node();
        if !buffers::removal_keeps(
            model,
            &node.name,
            &pods,
            &buffer,
            &reference,
            &mut buffer_baseline,
        ) {
            continue;
        }
        let load = if pods.is_empty() {
            "runs no pods that need it".to_string()
        } else {
            let mut requested = Resources::default();
            for p in &pods {
                requested.add(&p.requests);
            }
            format!(
                "runs {} pod(s) requesting {requested} that fit on the other nodes",
                pods.len(),
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

/// Moves `pods` off `node` in the model, onto nodes that exist (pods evicted onto a VM
/// still booting would wait), and undoes it. Returns the pods that fit nowhere, and
/// whether some other node still has `minimumFreeNodeMemory` / `minimumFreeNodeCpu`
/// free afterwards.
fn evict_in_model<'a>(
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

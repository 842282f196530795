//! Warm pools: stopped VMs per group, started by a scale-up instead of creating, refilled
//! when nothing more pressing is to be done, and dropped when they no longer match the
//! group. Warm VMs count toward `maxSize` (the group never holds more VMs than that,
//! warm or not) and never as capacity.

use super::StepResult;
use crate::config::{DisruptionReason, NodeGroupConfig, ScaleDownMode};
use crate::model::{NodeInfo, Server, ServerRef, ServerStatus, LABEL_CLUSTER, LABEL_GROUP};
use crate::plan::view::{Member, View};
use crate::plan::{Action, Reason, ReasonCode};

fn server_ref(s: &Server, group: &str) -> ServerRef {
    ServerRef {
        provider: s.provider.clone(),
        id: s.id.clone(),
        name: s.name.clone(),
        group: group.to_string(),
    }
}

/// Why warm VM `s` of `g` must not be reused, if so: made from other settings, older
/// than `oldNodeAgeLimit`, or not stopped (in error, or started behind our back).
pub(crate) fn stale(v: &View<'_>, g: &NodeGroupConfig, s: &Server) -> Option<String> {
    if !g.settings_hash.is_empty()
        && !s
            .settings_hash
            .as_deref()
            .is_some_and(|h| g.hash_is_current(h))
    {
        return Some(format!(
            "warm VM {} was made from other settings ({}) than group {}'s current ones ({})",
            s.name,
            s.settings_hash.as_deref().unwrap_or("none recorded"),
            g.name,
            g.settings_hash
        ));
    }
    if let Some(limit) = v.config.old_node_age_limit {
        if v.age(s.created) >= limit {
            return Some(format!(
                "warm VM {} is older than oldNodeAgeLimit {}",
                s.name,
                humantime::format_duration(limit)
            ));
        }
    }
    if s.filling && !matches!(s.status, ServerStatus::Error | ServerStatus::Incomplete) {
        // On its one boot to join: given `provisionTimeout` for its Node to be Ready.
        let joined = warm_node(v, g, s).is_some_and(|n| n.ready);
        let late = v.age(s.created) >= v.config.provision_timeout;
        return (late && !joined && s.status != ServerStatus::Deleting).then(|| {
            format!(
                "warm VM {} did not join within provisionTimeout {} on its first boot",
                s.name,
                humantime::format_duration(v.config.provision_timeout)
            )
        });
    }
    match s.status {
        ServerStatus::Error => Some(match &s.fault {
            Some(f) => format!("warm VM {} reports an error state: {f}", s.name),
            None => format!("warm VM {} reports an error state", s.name),
        }),
        ServerStatus::Active | ServerStatus::JoinPending => Some(format!(
            "warm VM {} is running (started by someone else)",
            s.name
        )),
        ServerStatus::Incomplete => Some(format!("warm VM {} was left half-made", s.name)),
        ServerStatus::Removing => Some(format!(
            "warm VM {} carries the mark of a removal that did not finish",
            s.name
        )),
        // Stopped; or busy for a moment (a backup's lock, being deleted): kept, and not
        // started until it is stopped and unlocked again.
        ServerStatus::Stopped
        | ServerStatus::Building
        | ServerStatus::Deleting
        | ServerStatus::Unknown => None,
    }
}

/// How many warm VMs of `g` a scale-up can start now.
pub(super) fn startable(v: &View<'_>, g: &NodeGroupConfig) -> u32 {
    let n = warm_of(v, g)
        .into_iter()
        .filter(|(s, _)| usable(v, g, s))
        .count();
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Whether warm VM `s` can be started now: current, parked, and stopped.
fn usable(v: &View<'_>, g: &NodeGroupConfig, s: &Server) -> bool {
    s.status == ServerStatus::Stopped && !s.filling && stale(v, g, s).is_none()
}

/// The Node of warm VM `s` of `g`, if one named like it carries our cluster and group
/// labels (a fill that joined, or one left behind by a stop).
fn warm_node<'a>(v: &View<'a>, g: &NodeGroupConfig, s: &Server) -> Option<&'a NodeInfo> {
    v.nodes.iter().find(|n| {
        n.name == s.name
            && n.labels.get(LABEL_CLUSTER) == Some(&v.config.cluster_name)
            && n.labels.get(LABEL_GROUP) == Some(&g.name)
    })
}

/// Warm VMs with a Node of ours: a fill whose one boot joined (its Node Ready, under the
/// startup taint), or a stopped warm VM whose Node outlived the stop (a crash between
/// the two). Each is stopped (again) and its Node deleted after the stop.
pub fn park_warm(v: &View<'_>, _notes: &mut Vec<Reason>) -> StepResult {
    let mut servers = Vec::new();
    let mut reasons = Vec::new();
    for g in &v.config.node_groups {
        if v.frozen.contains_key(g.name.as_str()) {
            continue;
        }
        for (s, _) in warm_of(v, g) {
            let Some(node) = warm_node(v, g, s) else {
                continue;
            };
            let why = match s.status {
                ServerStatus::Stopped => format!(
                    "warm VM {} is stopped but its node is still there; deleting the node",
                    s.name
                ),
                ServerStatus::Active | ServerStatus::Building if s.filling && node.ready => {
                    format!(
                        "warm VM {} joined on its first boot (node Ready); stopping it into the pool and deleting its node",
                        s.name
                    )
                }
                _ => continue,
            };
            servers.push(server_ref(s, &g.name));
            reasons.push(Reason::new(ReasonCode::WarmPoolPark, why));
        }
    }
    if servers.is_empty() {
        return None;
    }
    Some((Action::ParkWarm { servers }, reasons))
}

/// The warm VMs of group `g`, as (server, why it is stale).
fn warm_of<'a>(v: &View<'a>, g: &NodeGroupConfig) -> Vec<(&'a Server, Option<String>)> {
    v.warm
        .iter()
        .copied()
        .filter(|s| s.group.as_deref() == Some(g.name.as_str()))
        .map(|s| (s, stale(v, g, s)))
        .collect()
}

/// Warm VMs that no longer match their group are deleted, not reused.
pub fn drop_stale_warm(v: &View<'_>, _notes: &mut Vec<Reason>) -> StepResult {
    let mut servers = Vec::new();
    let mut nodes = Vec::new();
    let mut reasons = Vec::new();
    for g in &v.config.node_groups {
        for (s, why) in warm_of(v, g) {
            let Some(why) = why else { continue };
            // Already going: asking again would only repeat the delete.
            if s.status == ServerStatus::Deleting || v.frozen.contains_key(g.name.as_str()) {
                continue;
            }
            // Its Node (a fill that joined, or one someone started) goes with it.
            nodes.extend(warm_node(v, g, s).map(|n| n.name.clone()));
            servers.push(server_ref(s, &g.name));
            reasons.push(Reason::new(
                ReasonCode::WarmVmStale,
                format!("{why}; deleting it instead of reusing it"),
            ));
        }
    }
    if servers.is_empty() {
        return None;
    }
    Some((Action::DeleteServers { servers, nodes }, reasons))
}

/// A scale-up of a group with usable warm VMs starts those (oldest first, so they are
/// used before they age out) instead of creating; the rest of the count is created by a
/// later cycle once no warm VM is left. Any other action passes unchanged.
pub fn from_warm_pool(
    v: &View<'_>,
    action: Action,
    mut reasons: Vec<Reason>,
) -> (Action, Vec<Reason>) {
    let Action::ScaleUp { group, count, size } = &action else {
        return (action, reasons);
    };
    let Some(g) = v.config.group(group) else {
        return (action, reasons);
    };
    // A size chosen among several: only warm VMs of that size stand in for it.
    let of_size = |s: &Server| {
        size.is_none() || s.settings_hash.as_deref() == Some(g.hash_of_size(size.as_deref()))
    };
    let mut usable: Vec<&Server> = warm_of(v, g)
        .into_iter()
        .map(|(s, _)| s)
        .filter(|s| usable(v, g, s) && of_size(s))
        .collect();
    if usable.is_empty() {
        return (action, reasons);
    }
    usable.sort_by(|a, b| a.created.cmp(&b.created).then(a.name.cmp(&b.name)));
    let take = usable.len().min(*count as usize);
    let servers: Vec<ServerRef> = usable[..take]
        .iter()
        .map(|s| server_ref(s, &g.name))
        .collect();
    let names: Vec<&str> = servers.iter().map(|s| s.name.as_str()).collect();
    reasons.push(Reason::new(
        ReasonCode::WarmPoolStart,
        format!(
            "group {} has {} warm VM(s): starting {} instead of creating {count}",
            g.name,
            usable.len(),
            names.join(", ")
        ),
    ));
    (
        Action::StartWarm {
            group: g.name.clone(),
            servers,
        },
        reasons,
    )
}

/// Groups whose warm pool is short get stopped VMs made, as many as `maxSize` leaves
/// room for (running and warm VMs together); never while the group is backed off or its
/// provider is unavailable.
pub fn fill_warm_pools(v: &View<'_>, _notes: &mut Vec<Reason>) -> StepResult {
    for g in &v.config.node_groups {
        let size = g.warm_pool_size();
        if size == 0
            || v.frozen.contains_key(g.name.as_str())
            || v.backed_off_until(&g.name).is_some()
        {
            continue;
        }
        let warm = u32::try_from(warm_of(v, g).len()).unwrap_or(u32::MAX);
        // Running and warm VMs together.
        let held = v.group_size(&g.name);
        let count = size
            .saturating_sub(warm)
            .min(g.max_size.saturating_sub(held));
        if count == 0 {
            continue;
        }
        let reason = Reason::new(
            ReasonCode::WarmPoolShort,
            format!(
                "warm pool of group {} holds {warm} of {size} stopped VM(s); {held} of maxSize {} in use, so making {count}",
                g.name, g.max_size
            ),
        );
        return Some((
            Action::FillWarmPool {
                group: g.name.clone(),
                count,
            },
            vec![reason],
        ));
    }
    None
}

/// Whether the VM of member `m`, being removed, is parked instead of deleted: with
/// `scaleDown.mode: stop`, when its group's pool has room (counting the `parked` ones
/// this action already parks) and the VM is current and healthy.
pub fn parks(v: &View<'_>, m: &Member<'_>, parked: u32) -> bool {
    let g = m.group;
    if v.config.scale_down.mode != ScaleDownMode::Stop || g.warm_pool_size() == 0 || m.vm_error {
        return false;
    }
    // A node that is not Ready, or was cordoned for being broken, may have a broken VM
    // under it: the next scale-up would start it.
    if m.node.is_some_and(|n| {
        !n.ready || crate::plan::policy::disruption_of(n) == DisruptionReason::Unhealthy
    }) {
        return false;
    }
    let warm = u32::try_from(warm_of(v, g).len()).unwrap_or(u32::MAX);
    if warm.saturating_add(parked) >= g.warm_pool_size() {
        return false;
    }
    let mut as_warm = m.server.clone();
    as_warm.status = ServerStatus::Stopped;
    stale(v, g, &as_warm).is_none()
}

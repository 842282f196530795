//! The planning steps, in the order [`super::STEPS`] runs them. Each looks at the shared
//! [`View`] and either claims the cycle with an action or adds notes and passes.

mod buffers;
mod deadlines;
mod disrupt;
mod drain;
mod expander;
mod fence;
mod give_back;
mod images;
mod orphans;
mod pools;
mod provisioning;
mod reasons;
mod relabel;
mod remove;
mod restart;
mod reuse;
mod scale_up;

pub use disrupt::{disrupt, mark_unneeded, soft_taint, unremovable};
pub use drain::{drain, forget_stale_cordons};
pub use fence::stop_unreachable;
pub use give_back::give_back_needed;
pub use images::warm_images;
pub use orphans::{delete_nodes_without_vm, note_unknown_groups, unknown_group_vms};
pub use pools::{drop_stale_warm, fill_warm_pools, from_warm_pool, park_warm};
pub use provisioning::{
    clean_up_failed, finish_joins, finish_provisioning, finish_removal, mark_joined,
    MAX_NOT_JOINED_PER_ACTION,
};
pub use reasons::note_pins_newer_than_server;
pub use relabel::relabel_hash;
pub use remove::remove_empty;
pub use restart::restart_vanished;
pub use scale_up::scale_up;

use super::view::View;
use super::{Action, Reason, ReasonCode};
use crate::config::NodeGroupConfig;
use crate::model::{PodInfo, PodRef};

pub(super) type StepResult = Option<(Action, Vec<Reason>)>;

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

/// How many VMs `g` may get now: none while its provider is unavailable or it is backed
/// off after failures; never past `maxSize` or the cluster-wide limits, which count every
/// VM of a group, warm ones too. Starting a warm VM adds none, so the group's usable warm
/// VMs are room on top.
fn room(v: &View<'_>, g: &NodeGroupConfig) -> u32 {
    if v.frozen.contains_key(g.name.as_str()) || v.backed_off_until(&g.name).is_some() {
        return 0;
    }
    let startable = pools::startable(v, g);
    g.max_size
        .saturating_sub(v.group_size(&g.name))
        .saturating_add(startable)
        .min(scale_up::limit_room(v, g).0.saturating_add(startable))
        .min(host_room(v, g).0)
}

/// How many more VMs of `g` its hypervisor hosts take under the group's overcommit,
/// reserve and `maxPerHost` (unlimited without hosts), and why no more when they are full.
fn host_room<'v>(v: &'v View<'_>, g: &NodeGroupConfig) -> (u32, Option<&'v str>) {
    match v.group(&g.name).and_then(|i| i.hosts.as_ref()) {
        Some(h) => (h.zones.len() as u32, h.full.as_deref()),
        None => (u32::MAX, None),
    }
}

/// The reason when the hosts of `g` are full.
fn hosts_full(g: &NodeGroupConfig, why: &str) -> Reason {
    Reason::new(
        ReasonCode::HostsFull,
        format!(
            "group {}: its {} hosts are full: {why}",
            g.name,
            g.provider.as_str()
        ),
    )
}

/// Why `g` has no room: provider down, backed off, a cluster limit, or at its maximum.
fn at_max(v: &View<'_>, g: &NodeGroupConfig) -> Reason {
    if let Some(err) = v.frozen.get(g.name.as_str()) {
        return Reason::new(
            ReasonCode::ProviderUnavailable,
            format!(
                "group {} is frozen: provider {} could not be listed ({err})",
                g.name,
                g.provider.as_str()
            ),
        );
    }
    if let Some(until) = v.backed_off_until(&g.name) {
        return Reason::new(
            ReasonCode::GroupBackedOff,
            format!(
                "group {} is left alone for {} after failed creates",
                g.name,
                humantime::format_duration(std::time::Duration::from_secs(
                    until.duration_since(v.now).unwrap_or_default().as_secs()
                ))
            ),
        );
    }
    if g.max_size > v.group_size(&g.name) {
        if let (0, Some(why)) = scale_up::limit_room(v, g) {
            return Reason::new(ReasonCode::ClusterLimitReached, why);
        }
        if let (0, Some(why)) = host_room(v, g) {
            return hosts_full(g, why);
        }
    }
    Reason::new(
        ReasonCode::GroupAtMaxSize,
        format!("group {} is at maxSize {}", g.name, g.max_size),
    )
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

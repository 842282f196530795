//! What one new node of each group offers, as the scheduler will see it: its labels,
//! allocatable (learned from live nodes, else from the flavor), DaemonSet overhead, an
//! empty template slot, and the hypervisor hosts the next VMs go to. Apart from the
//! members, which it reads, and from the model, which adds the templates as slots.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::members::{Member, ServerState};
use crate::config::{Config, NodeGroupConfig};
use crate::model::{
    GroupShape, NodeInfo, PodInfo, Resources, VmSize, LABEL_GROUP, LABEL_SETTINGS_HASH,
};
use crate::plan::sched::{
    self, daemonset_overhead, group_template, well_known_labels, Slot, SlotKind,
};
use crate::plan::snapshot::Snapshot;

/// What one new node of a group offers, as the scheduler will see it.
#[derive(Clone)]
pub struct GroupInfo {
    /// Labels but the hostname.
    pub labels: BTreeMap<String, String>,
    /// Allocatable: learned from the group's live nodes, else flavor minus reservation.
    pub allocatable: Resources,
    /// Whether `allocatable` comes from a live node (true) or from the flavor (false).
    pub learned: bool,
    /// Requests of the DaemonSet pods that will land on it.
    pub overhead: Resources,
    /// An empty new node (hostname `<group>-new-0`).
    pub template: Slot<'static>,
    /// The group's hypervisor hosts (Proxmox), where the provider reports them.
    pub hosts: Option<HostRoom>,
    /// A group of several sizes: what one new node of each size offers, by size name, the
    /// default first (the fields above are the default size's). Empty for one size.
    pub sizes: Vec<(String, GroupInfo)>,
}

impl GroupInfo {
    /// What a node of size `size` offers: that size's, else the group's own.
    pub fn of_size(&self, size: Option<&str>) -> &GroupInfo {
        size.and_then(|n| self.sizes.iter().find(|(s, _)| s == n))
            .map_or(self, |(_, i)| i)
    }
}

impl GroupInfo {
    /// The hypervisor hosts the group's next new nodes go to, in order (empty without
    /// hosts): the zone of each.
    pub fn zones(&self) -> &[String] {
        self.hosts.as_ref().map_or(&[][..], |h| &h.zones[..])
    }
}

/// What the hosts of a group allow now (see [`crate::model::hosts`]).
#[derive(Debug, Clone)]
pub struct HostRoom {
    /// The hosts the next VMs go to, in order (as many as fit, up to `maxSize`): the
    /// zone of each new node.
    pub zones: Vec<String>,
    /// Why no more fit, once they are full.
    pub full: Option<String>,
}

impl GroupInfo {
    /// CPU and memory left for pods on an empty new node.
    pub fn usable(&self) -> Resources {
        let mut r = self.allocatable.clone();
        r.sub(&self.overhead);
        r
    }
}

/// [`GroupInfo`] of every configured group, from the snapshot's shapes, the joined
/// members and the Nodes of frozen groups.
pub(super) fn group_infos<'a>(
    s: &'a Snapshot,
    config: &'a Config,
    members: &[Member<'a>],
    frozen_nodes: &[&'a NodeInfo],
) -> BTreeMap<&'a str, GroupInfo> {
    // One pass for every group's DaemonSet overhead.
    let daemonset_pods: Vec<&PodInfo> = s
        .pods
        .iter()
        .map(Arc::as_ref)
        .filter(|p| p.is_daemonset() && !p.is_terminal())
        .collect();
    let mut groups = BTreeMap::new();
    for g in &config.node_groups {
        let shape = s.group_shapes.get(&g.name);
        let mut live: Vec<(Option<&str>, &NodeInfo)> = members
            .iter()
            .filter(|m| m.group.name == g.name && m.state == ServerState::Joined)
            .filter_map(|m| {
                let size =
                    g.size_of_vm(m.server.size.as_deref(), m.server.settings_hash.as_deref());
                Some((size, m.node?))
            })
            .collect();
        // A frozen group has no members: its Nodes still tell what a node offers.
        live.extend(
            frozen_nodes
                .iter()
                .filter(|n| n.labels.get(LABEL_GROUP) == Some(&g.name) && n.ready)
                .map(|n| {
                    let hash = n.labels.get(LABEL_SETTINGS_HASH).map(String::as_str);
                    (g.size_of_vm(None, hash), *n)
                }),
        );
        let sizes: Vec<(String, GroupInfo)> = shape
            .filter(|_| !g.size_hashes.is_empty())
            .map(|sh| {
                sh.sizes
                    .iter()
                    .map(|size| {
                        let of_size: Vec<&NodeInfo> = live
                            .iter()
                            .filter(|(s, _)| *s == Some(size.name.as_str()))
                            .map(|(_, n)| *n)
                            .collect();
                        let shape = sh.of_size(&size.name);
                        let hash = g.hash_of_size(Some(&size.name));
                        let info = one_size(
                            s,
                            config,
                            g,
                            Some(&shape),
                            hash,
                            &of_size,
                            members,
                            &daemonset_pods,
                        );
                        (size.name.clone(), info)
                    })
                    .collect()
            })
            .unwrap_or_default();
        if let Some((_, default)) = sizes.first() {
            let mut info = default.clone();
            info.sizes = sizes;
            groups.insert(g.name.as_str(), info);
            continue;
        }
        let live: Vec<&NodeInfo> = live.into_iter().map(|(_, n)| n).collect();
        let info = one_size(
            s,
            config,
            g,
            shape,
            &g.settings_hash,
            &live,
            members,
            &daemonset_pods,
        );
        groups.insert(g.name.as_str(), info);
    }
    groups
}

/// What one new node of `g` made as `shape` (stamped `hash`) offers, given the live nodes
/// made so (`live`).
#[allow(clippy::too_many_arguments)]
fn one_size<'a>(
    s: &'a Snapshot,
    config: &'a Config,
    g: &'a NodeGroupConfig,
    shape: Option<&GroupShape>,
    hash: &str,
    live: &[&NodeInfo],
    members: &[Member<'a>],
    daemonset_pods: &[&PodInfo],
) -> GroupInfo {
    let labels = well_known_labels(g, &config.cluster_name, shape);
    let (allocatable, learned) = if live.is_empty() {
        match s.learned_allocatable.get(&format!("{}/{hash}", g.name)) {
            Some(a) => (a.clone(), true),
            None => (sched::template::allocatable_from_shape(g, shape), false),
        }
    } else {
        let mut a = Resources::default();
        for n in live {
            a.max_with(&n.allocatable);
        }
        (a, true)
    };
    let template = group_template(
        g,
        &labels,
        allocatable.clone(),
        SlotKind::New(g.name.clone()),
        0,
    );
    let overhead = daemonset_overhead(daemonset_pods.iter().copied(), &template);
    let hosts = shape.and_then(|sh| {
        let h = sh.hosts.as_ref()?;
        let vm = VmSize {
            cpu_milli: sh.cpu_milli.unwrap_or(0),
            memory: sh.memory.unwrap_or(0),
        };
        let size = members
            .iter()
            .filter(|m| m.group.name == g.name && m.state != ServerState::Deleting)
            .count() as u32;
        let zones = h.plan(vm, g.max_size.saturating_sub(size));
        let mut after = h.clone();
        for z in &zones {
            if let Some(i) = after.index(z) {
                after.place(i, vm);
            }
        }
        let full = after.choose(vm).is_none().then(|| after.full_reason(vm));
        Some(HostRoom { zones, full })
    });
    GroupInfo {
        labels,
        allocatable,
        learned,
        overhead,
        template,
        hosts,
        sizes: Vec::new(),
    }
}

//! Per-group counts of what the planner sees, for metrics and the status ConfigMap.

use std::collections::BTreeMap;
use std::time::SystemTime;

use serde::Serialize;

use super::snapshot::Snapshot;
use super::view::{ServerState, View};
use crate::config::Config;

/// Node states as metrics and status report them: every [`ServerState`] of a VM of ours
/// (a joined one as ready, unready or cordoned), and the VMs with this cluster's marks
/// left alone as not ours to act on (`disowned`: a node whose labels, or a VM whose
/// cluster tag, a person removed; `copied`: a person's copy of a VM of the group).
pub const NODE_STATES: &[&str] = &[
    "ready",
    "unready",
    "provisioning",
    "cordoned",
    "deleting",
    "failed",
    "removing",
    "vanished",
    "disowned",
    "copied",
];

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupSummary {
    pub min_size: u32,
    pub max_size: u32,
    /// VMs counting against maxSize.
    pub size: u32,
    /// Count per state in [`NODE_STATES`] (`vanished`: a VM that joined whose Node is
    /// gone; `removing`: a VM whose removal began and did not finish).
    pub states: BTreeMap<String, u32>,
    /// VMs still provisioning, by name.
    pub provisioning: Vec<String>,
    /// Cordoned nodes waiting to be drained and removed.
    pub cordoned: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    pub groups: BTreeMap<String, GroupSummary>,
    pub unschedulable_pods: usize,
    pub free_memory_bytes: i64,
    pub free_memory_target_bytes: u64,
    /// VMs tagged with this cluster whose group the config does not have.
    pub unknown_group_vms: usize,
}

pub fn summarize(snapshot: &Snapshot, config: &Config, now: SystemTime) -> Summary {
    let view = View::new(snapshot, config, now);
    let mut groups = BTreeMap::new();
    for g in &config.node_groups {
        let mut s = GroupSummary {
            min_size: g.min_size,
            max_size: g.max_size,
            size: view.group_size(&g.name),
            ..GroupSummary::default()
        };
        for state in NODE_STATES {
            s.states.insert(state.to_string(), 0);
        }
        for m in view.members.iter().filter(|m| m.group.name == g.name) {
            let state = match m.state {
                ServerState::Deleting => "deleting",
                ServerState::Failed => "failed",
                ServerState::Disowned => "disowned",
                ServerState::Vanished => "vanished",
                ServerState::Removing => "removing",
                ServerState::Provisioning => {
                    s.provisioning.push(m.server.name.clone());
                    "provisioning"
                }
                ServerState::Joined if m.cordoned() => {
                    s.cordoned.push(m.server.name.clone());
                    "cordoned"
                }
                ServerState::Joined if m.node.is_some_and(|n| n.ready) => "ready",
                ServerState::Joined => "unready",
            };
            *s.states.entry(state.to_string()).or_default() += 1;
        }
        for stray in snapshot
            .strays
            .iter()
            .filter(|x| x.group.as_deref() == Some(g.name.as_str()))
        {
            let state = match stray.kind {
                crate::model::StrayKind::Disowned => "disowned",
                crate::model::StrayKind::Copied { .. } => "copied",
            };
            *s.states.entry(state.to_string()).or_default() += 1;
        }
        groups.insert(g.name.clone(), s);
    }
    Summary {
        unknown_group_vms: super::unknown_group_vms(&snapshot.servers, config)
            .values()
            .map(Vec::len)
            .sum(),
        groups,
        unschedulable_pods: view.unschedulable.len() + view.pending.unhostable.len(),
        free_memory_bytes: view.free_total().0,
        free_memory_target_bytes: config.free_memory_target.as_u64(),
    }
}

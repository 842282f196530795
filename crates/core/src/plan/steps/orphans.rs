//! What lost its other half: a Node of ours whose VM is gone, and VMs of ours whose
//! group the config no longer has.

use std::collections::BTreeMap;

use super::StepResult;
use crate::config::Config;
use crate::model::{ObjectRef, Server, LABEL_CLUSTER, LABEL_GROUP};
use crate::plan::view::View;
use crate::plan::{Action, Reason, ReasonCode};

/// Deletes the Node objects of ours that have been NotReady past `health.unhealthyAfter`
/// while their provider (listed fine this cycle) has no VM of their name: nothing will
/// ever make them Ready, and their pods (a StatefulSet's above all) wait until the Node
/// goes. The actuator lists the provider again just before (the second look) and the
/// Node must still be ours and NotReady. A frozen provider, or a VM of the name in any
/// state, keeps the Node.
pub fn delete_nodes_without_vm(v: &View<'_>, _notes: &mut Vec<Reason>) -> StepResult {
    let mut nodes = Vec::new();
    let mut reasons = Vec::new();
    for n in v.nodes {
        if n.labels.get(LABEL_CLUSTER) != Some(&v.config.cluster_name) || n.ready || n.deleting {
            continue;
        }
        let Some(group) = n.labels.get(LABEL_GROUP).and_then(|g| v.config.group(g)) else {
            continue;
        };
        if v.frozen.contains_key(group.name.as_str()) || v.servers.iter().any(|s| s.name == n.name)
        {
            continue;
        }
        let since = n.ready_changed.unwrap_or(n.created);
        let unhealthy_after = v.config.health.unhealthy_after;
        if v.age(since) <= unhealthy_after {
            continue;
        }
        reasons.push(
            Reason::new(
                ReasonCode::NodeWithoutServer,
                format!(
                    "{} has been NotReady for {} (health.unhealthyAfter {}) and provider {} has no VM of that name; deleting the Node so its pods are made again elsewhere",
                    n.name,
                    humantime::format_duration(std::time::Duration::from_secs(
                        v.age(since).as_secs()
                    )),
                    humantime::format_duration(unhealthy_after),
                    group.provider.as_str()
                ),
            )
            .about([ObjectRef::node(&n.name)]),
        );
        nodes.push(n.name.clone());
    }
    if nodes.is_empty() {
        return None;
    }
    Some((Action::DeleteNodesWithoutVm { nodes }, reasons))
}

/// VMs tagged with this cluster whose group tag names no group of `config` (removed or
/// renamed), by that group (`""` for a VM with no group tag).
pub fn unknown_group_vms<'s>(
    servers: &'s [Server],
    config: &Config,
) -> BTreeMap<&'s str, Vec<&'s Server>> {
    let mut out: BTreeMap<&str, Vec<&Server>> = BTreeMap::new();
    for s in servers {
        if s.cluster.as_deref() != Some(config.cluster_name.as_str()) {
            continue;
        }
        let group = s.group.as_deref().unwrap_or("");
        if config.group(group).is_none() {
            out.entry(group).or_default().push(s);
        }
    }
    out
}

/// Notes every cycle the VMs of a group the config no longer has: nodewright never
/// touches them (their nodes are not managed any more), so a person must decide. Each
/// note says how to remove them, or to take them back.
pub fn note_unknown_groups(v: &View<'_>, notes: &mut Vec<Reason>) {
    for (group, vms) in unknown_group_vms(v.servers, v.config) {
        let names: Vec<String> = vms
            .iter()
            .map(|s| format!("{} ({})", s.name, s.id))
            .collect();
        let named = if group.is_empty() {
            "no group tag".to_string()
        } else {
            format!("group '{group}', which the config does not have (removed or renamed)")
        };
        notes.push(
            Reason::new(
                ReasonCode::UnknownGroupVms,
                format!(
                    "{} VM(s) of cluster {} carry {named}: {}; nodewright leaves them alone. To remove them, drain their nodes (kubectl drain) and delete the nodes and VMs yourself; to manage them again, put the group back in the config under its old name",
                    vms.len(),
                    v.config.cluster_name,
                    names.join(", ")
                ),
            ),
        );
    }
}

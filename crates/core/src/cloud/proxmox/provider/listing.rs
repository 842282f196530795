//! Reading VMs back as [`Server`]s: ownership from the tags (or a half-made VM's
//! description, or for a clone still nameless the clone task's template), state from the
//! lock, the power state and this process's joins.

use std::collections::{BTreeSet, HashMap};
use std::time::SystemTime;

use super::{meta_ctime, JoinState, ProxmoxProvider};
use crate::cloud::proxmox::allocate::{vm_config, VmResource};
use crate::cloud::proxmox::halfmade::{untagged, Untagged};
use crate::cloud::proxmox::hosts::template_copies;
use crate::cloud::proxmox::tags::{ownership, Ownership};
use crate::cloud::proxmox::tasks::ListedTask;
use crate::cloud::proxmox::PROVIDER;
use crate::cloud::CloudError;
use crate::model::{Server, ServerStatus, Stray, StrayKind};

impl ProxmoxProvider {
    /// VM `v` as a [`Server`] with ownership `o` (from its tags, or the description of a
    /// `half_made` VM).
    pub(super) async fn vm_server(&self, v: &VmResource, o: Ownership, half_made: bool) -> Server {
        let in_creation = self
            .inner
            .creating
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&v.vmid);
        let created = match o.created {
            // Still copying, or being configured: its provisioning clock starts when
            // its tags are written after the copy, and the clone's own deadline is its
            // task's (see `judge_clones`), not the planner's `provisionTimeout` from the
            // clone's start.
            _ if half_made && (v.lock.as_deref() == Some("clone") || in_creation) => {
                SystemTime::now()
            }
            Some(t) => t,
            None => match vm_config(&self.inner.api, &v.node, v.vmid)
                .await
                .ok()
                .and_then(|c| meta_ctime(&c))
            {
                Some(t) => t,
                None => {
                    tracing::warn!(
                        vmid = v.vmid,
                        "no creation time in tags or config meta; treating it as new"
                    );
                    SystemTime::now()
                }
            },
        };
        let join = self
            .inner
            .joins
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&v.vmid)
            .cloned();
        // Why the guest-agent join failed (a 403 names the privilege): the plan's reason
        // for the VM in error says it.
        let fault = match &join {
            Some(JoinState::Failed(e)) => Some(format!("guest-agent join failed: {e}")),
            _ => None,
        };
        let status = match (v.lock.as_deref(), v.status.as_str(), join) {
            // Cloned, unlocked, untagged and nobody here configuring it: left half-made.
            (None, _, _) if half_made && !in_creation => ServerStatus::Incomplete,
            (_, _, _) if half_made => ServerStatus::Building,
            (Some("destroyed"), _, _) => ServerStatus::Deleting,
            _ if o.removing => ServerStatus::Removing,
            (_, _, Some(JoinState::Failed(_))) => ServerStatus::Error,
            (Some(_), _, _) => ServerStatus::Building,
            (None, "running", Some(JoinState::Running | JoinState::Unknown(_))) => {
                ServerStatus::Building
            }
            // Started for a guest-agent join no process here runs: the one that started
            // it stopped before the script ran (see `joining`).
            (None, "running", None) if o.joining => ServerStatus::JoinPending,
            (None, "running", _) => ServerStatus::Active,
            (None, "stopped", _) => ServerStatus::Stopped,
            _ => ServerStatus::Unknown,
        };
        Server {
            id: v.vmid.to_string(),
            name: v.name.clone().unwrap_or_else(|| format!("VM {}", v.vmid)),
            cluster: o.cluster,
            group: o.group,
            status,
            created,
            memory_bytes: v.maxmem,
            provider: PROVIDER.into(),
            warm: o.warm,
            filling: false,
            size: None,
            settings_hash: o.settings_hash,
            fault,
            joined: o.joined,
            restarted: o.restarted,
            fenced: o.fenced,
            removing_since: o.removing_since,
        }
    }

    /// The VMs of `vms` that are `cluster`'s, as servers: by their tags, when they are the
    /// VM made (not a person's copy, see [`Ownership::copy_of`]); half-made (a half-made
    /// VM whose clone is done is finished here, see [`Self::spawn_finish`]); and clones
    /// still copying that show no name yet (see [`Self::clones_in_flight`]). With them,
    /// the VMs that carry the cluster's marks but are not its: copies, and VMs that lost
    /// their cluster tag.
    pub(super) async fn servers_in(
        &self,
        vms: &[VmResource],
        cluster: &str,
        in_flight: &[ListedTask],
    ) -> Result<(Vec<Server>, Vec<Stray>), CloudError> {
        let mut out = Vec::new();
        let mut strays = Vec::new();
        let mut named_cloning = Vec::new();
        let stray = |v: &VmResource, group: Option<String>, kind: StrayKind| Stray {
            provider: PROVIDER.into(),
            id: v.vmid.to_string(),
            name: v.name.clone().unwrap_or_else(|| format!("VM {}", v.vmid)),
            group,
            kind,
        };
        for v in vms.iter().filter(|v| !v.template) {
            let o = ownership(v.tags());
            if o.cluster.as_deref() == Some(cluster) {
                match o.copy_of(v.vmid) {
                    None => out.push(self.vm_server(v, o, false).await),
                    Some(of) => strays.push(stray(v, o.group, copied(of))),
                }
                continue;
            }
            match untagged(&self.inner.api, v, cluster).await? {
                Untagged::Other => {}
                Untagged::Disowned(o) => strays.push(stray(v, o.group, StrayKind::Disowned)),
                Untagged::Copy { marks, of } => strays.push(stray(v, marks.group, copied(of))),
                Untagged::HalfMade(o) => {
                    if let Some(g) = o.group.as_deref() {
                        if v.lock.as_deref() == Some("clone") {
                            named_cloning.push((v.node.as_str(), g.to_string()));
                        } else if !self.inner.options.read_only && self.can_finish(v, g) {
                            self.spawn_finish(v, cluster, g);
                        }
                    }
                    out.push(self.vm_server(v, o, true).await);
                }
            }
        }
        for s in &strays {
            tracing::warn!("proxmox: {s}");
        }
        out.extend(self.clones_in_flight(vms, cluster, in_flight, &named_cloning));
        Ok((out, strays))
    }

    /// Clones of processes gone that still copy their first disk: Proxmox shows such a VM
    /// with its temporary config only (`lock: clone`, no name, no description), on the
    /// host the clone runs on. It is tied to a running clone task of this process's user
    /// (`in_flight`) on that host, whose id is the template's VM id, and so to the groups
    /// cloning that template; it counts as building for them, so no second VM is made for
    /// the same scale-up. Tasks and nameless VMs of a host are paired in order: only the
    /// count matters, as nothing is ever done to a VM locked by a clone. A clone of a
    /// template that several groups use counts for each of them (a scale-up may wait for
    /// it; none is made twice); one of a template no group uses counts for none. Clones
    /// already named are half-made VMs of a group and take their task out of the pairing.
    fn clones_in_flight(
        &self,
        vms: &[VmResource],
        cluster: &str,
        in_flight: &[ListedTask],
        named_cloning: &[(&str, String)],
    ) -> Vec<Server> {
        let groups_of = |t: &ListedTask| -> Vec<String> {
            let Ok(id) = t.upid.id.parse::<u32>() else {
                return Vec::new();
            };
            self.inner
                .groups
                .iter()
                .filter(|(_, s)| {
                    template_copies(vms, &s.template).is_ok_and(|c| c.iter().any(|v| v.vmid == id))
                })
                .map(|(g, _)| g.clone())
                .collect()
        };
        let mut tasks: Vec<(&ListedTask, Vec<String>)> =
            in_flight.iter().map(|t| (t, groups_of(t))).collect();
        tasks.sort_by_key(|(t, _)| (t.starttime, t.upid.raw.clone()));
        for (node, group) in named_cloning {
            if let Some(i) = tasks
                .iter()
                .position(|(t, g)| t.upid.node == *node && g.contains(group))
            {
                tasks.remove(i);
            }
        }
        let mut out = Vec::new();
        let nodes: BTreeSet<&str> = tasks.iter().map(|(t, _)| t.upid.node.as_str()).collect();
        for node in nodes {
            let mut copying: Vec<&VmResource> = vms
                .iter()
                .filter(|v| nameless_clone(v) && v.node == node)
                .collect();
            copying.sort_by_key(|v| v.vmid);
            let on_node = tasks.iter().filter(|(t, _)| t.upid.node == node);
            for ((t, groups), v) in on_node.zip(copying) {
                for g in groups {
                    tracing::debug!(vmid = v.vmid, group = %g, task = %t.upid, "a clone an earlier process started counts as building");
                    out.push(Server {
                        id: v.vmid.to_string(),
                        name: format!("VM {}", v.vmid),
                        cluster: Some(cluster.to_string()),
                        group: Some(g.clone()),
                        status: ServerStatus::Building,
                        // Its provisioning clock starts when the copy is done.
                        created: SystemTime::now(),
                        memory_bytes: v.maxmem,
                        provider: PROVIDER.into(),
                        warm: false,
                        filling: false,
                        size: None,
                        settings_hash: None,
                        fault: None,
                        joined: None,
                        restarted: None,
                        fenced: None,
                        removing_since: None,
                    });
                }
            }
        }
        out
    }
}

/// A VM that a clone still copies its first disk into: locked, with the temporary
/// config only (no name, no nodewright tag).
fn nameless_clone(v: &VmResource) -> bool {
    !v.template
        && !v.is_nodewright()
        && v.lock.as_deref() == Some("clone")
        && v.name
            .as_deref()
            .is_none_or(|n| n.is_empty() || n == format!("VM {}", v.vmid))
}

/// Whether some host shows more nameless clones (see [`nameless_clone`]) than running
/// clone tasks `in_flight` of this process's user. The listing comes before the task
/// lists, so a clone of ours that ended between the two reads shows nameless in the
/// listing with no task left to tie it to: counted for nothing, it would be made again.
/// Listed again, it shows its name and tags (a half-made VM of its group). A person's
/// clone under another user keeps this true while it copies, at one listing a cycle.
pub(super) fn unpaired_nameless(vms: &[VmResource], in_flight: &[ListedTask]) -> bool {
    let mut per_host: HashMap<&str, isize> = HashMap::new();
    for v in vms.iter().filter(|v| nameless_clone(v)) {
        *per_host.entry(v.node.as_str()).or_default() += 1;
    }
    for t in in_flight {
        *per_host.entry(t.upid.node.as_str()).or_default() -= 1;
    }
    per_host.values().any(|n| *n > 0)
}

fn copied(of: u32) -> StrayKind {
    StrayKind::Copied {
        of: match of {
            0 => "(unreadable id mark)".into(),
            id => id.to_string(),
        },
    }
}

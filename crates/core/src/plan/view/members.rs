//! Which VMs are ours and where each is in its life: the members of the view (a VM
//! tagged for this cluster and a known group, with the Node of its name when that Node's
//! labels agree) and their [`ServerState`]. Apart from what the groups offer and from the
//! scheduling model, which read the members.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use serde::Serialize;

use crate::config::{Config, NodeGroupConfig};
use crate::model::{
    NodeInfo, Server, ServerRef, ServerStatus, LABEL_CLUSTER, LABEL_GROUP, STARTUP_TAINT_KEY,
};
use crate::plan::snapshot::Snapshot;

/// Where a VM of ours is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ServerState {
    /// Booting, or its node has not become Ready and untainted yet.
    Provisioning,
    /// Its node is Ready and took the startup taint off.
    Joined,
    /// The cloud reports an error, or it did not join within `provisionTimeout`.
    Failed,
    /// The cloud is already deleting it.
    Deleting,
    /// nodewright began removing it ([`ServerStatus::Removing`]) and its Node is gone, but
    /// the VM is not (a failed delete, a process killed in between). Never capacity and
    /// never a failed create; counts against `maxSize` (it still runs); its delete is
    /// retried, held back per object when it keeps failing.
    Removing,
    /// A node of its name exists but no longer carries our labels, or the cloud shows the
    /// VM half-made although a node of its name registered (its tags were taken away):
    /// someone took it over. Never deleted, only reported.
    Disowned,
    /// It joined once (the cloud carries its joined mark, [`Server::ever_joined`]) but
    /// has no Ready, untainted Node of ours now: deleted with `kubectl delete node` (its
    /// kubelet registers only when it starts, so the VM is restarted once), or out of
    /// sight of an API server that lists no nodes. Never removed for not joining; waited
    /// on and reported. Counts against `maxSize` and toward `minSize`, never as capacity.
    Vanished,
}

/// A VM of ours with the node it became, if any.
pub struct Member<'a> {
    pub server: &'a Server,
    pub group: &'a NodeGroupConfig,
    /// The node with the same name, only when its labels also say it is ours.
    pub node: Option<&'a NodeInfo>,
    pub state: ServerState,
    /// The cloud reports the VM in error while its node still runs: replaced through
    /// cordon and drain, never deleted under its pods.
    pub vm_error: bool,
}

impl Member<'_> {
    /// Its size in a group of several sizes (see [`NodeGroupConfig::size_of_vm`]).
    pub fn size(&self) -> Option<&str> {
        self.group.size_of_vm(
            self.server.size.as_deref(),
            self.server.settings_hash.as_deref(),
        )
    }

    pub fn server_ref(&self) -> ServerRef {
        ServerRef {
            provider: self.server.provider.clone(),
            id: self.server.id.clone(),
            name: self.server.name.clone(),
            group: self.group.name.clone(),
        }
    }

    pub fn cordoned(&self) -> bool {
        self.node.is_some_and(|n| n.unschedulable)
    }

    /// Joined, schedulable, not going away: counts as capacity.
    pub fn schedulable(&self) -> bool {
        self.state == ServerState::Joined
            && self
                .node
                .is_some_and(|n| n.ready && !n.unschedulable && !n.deleting)
    }
}

/// The VMs of ours in `s` as members, sorted by name, and the warm ones apart (never
/// members): ownership is checked on both sides, the cloud's tags and the Node's labels.
pub(super) fn ours<'a>(
    s: &'a Snapshot,
    config: &'a Config,
    now: SystemTime,
) -> (Vec<Member<'a>>, Vec<&'a Server>) {
    let nodes: BTreeMap<&str, &NodeInfo> = s.nodes.iter().map(|n| (n.name.as_str(), n)).collect();
    let mut members = Vec::new();
    let mut warm = Vec::new();
    for server in &s.servers {
        // Ownership, cloud side: our cluster tag and a group we know.
        if server.cluster.as_deref() != Some(config.cluster_name.as_str()) {
            continue;
        }
        let Some(group) = server.group.as_deref().and_then(|g| config.group(g)) else {
            continue;
        };
        if server.warm {
            warm.push(server);
            continue;
        }
        // Ownership, cluster side: the node's labels must agree.
        let same_name = nodes.get(server.name.as_str()).copied();
        let node = same_name.filter(|n| {
            n.labels.get(LABEL_CLUSTER) == Some(&config.cluster_name)
                && n.labels.get(LABEL_GROUP) == Some(&group.name)
        });
        let mut state = server_state(server, node, config.provision_timeout, now);
        if same_name.is_some() && node.is_none() {
            state = ServerState::Disowned;
        }
        // A half-made VM never booted, so never registered a Node: one whose name a
        // Node carries ran as a node, and only looks half-made because a person took
        // its cloud marks away. Never removed as half-made with its node and pods.
        if server.status == ServerStatus::Incomplete && same_name.is_some() {
            state = ServerState::Disowned;
        }
        let vm_error = server.status == ServerStatus::Error;
        // A VM in error whose node joined may still run pods: it is replaced through
        // cordon and drain (ready or not), never deleted under them.
        if vm_error && node.is_some_and(|n| !n.has_taint(STARTUP_TAINT_KEY) && !n.deleting) {
            state = ServerState::Joined;
        }
        members.push(Member {
            server,
            group,
            node,
            state,
            vm_error,
        });
    }
    members.sort_by(|a, b| a.server.name.cmp(&b.server.name));
    (members, warm)
}

fn server_state(
    server: &Server,
    node: Option<&NodeInfo>,
    timeout: Duration,
    now: SystemTime,
) -> ServerState {
    if server.status == ServerStatus::Deleting {
        return ServerState::Deleting;
    }
    let joined = node.is_some_and(|n| !n.has_taint(STARTUP_TAINT_KEY) && !n.deleting);
    // Marked before its Node is deleted: while the Node is there, the removal that
    // marked it (cordoned, drained) is still the one to finish it.
    if server.status == ServerStatus::Removing && !joined {
        return ServerState::Removing;
    }
    if joined
        && !matches!(
            server.status,
            ServerStatus::Error | ServerStatus::Incomplete
        )
    {
        return ServerState::Joined;
    }
    // A VM that ran as a node is never taken for one that failed to join, whatever the
    // cluster shows now (its Node deleted, re-registering, or not listed at all).
    if server.ever_joined() && !joined {
        return ServerState::Vanished;
    }
    if matches!(
        server.status,
        ServerStatus::Error | ServerStatus::Incomplete
    ) {
        return ServerState::Failed;
    }
    let age = now.duration_since(server.created).unwrap_or_default();
    if age > timeout {
        ServerState::Failed
    } else {
        ServerState::Provisioning
    }
}

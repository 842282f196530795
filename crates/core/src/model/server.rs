//! VMs as every part speaks of them: a server read back from a cloud, its lifecycle,
//! the VMs that carry the cluster's marks but are not its own, and the shape of a new VM
//! of a group. Providers map their own states onto these; the planner reads only these.

use std::time::SystemTime;

use super::hosts;

/// Lifecycle of a VM as the planner needs to know it; provider states map onto this.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ServerStatus {
    Building,
    Active,
    Error,
    Deleting,
    Stopped,
    Unknown,
    /// Created, but the process creating it stopped before configuring it (Proxmox: a
    /// clone that never got its size and ownership tags, recognised by the name and
    /// description set in the clone call). Nothing will finish it: it is removed.
    Incomplete,
    /// Marked [`REMOVING_TAG`](crate::cloud::REMOVING_TAG): nodewright began removing it and the delete has not
    /// happened (yet). Never capacity and never a failed create; its delete is retried.
    Removing,
    /// Running in a group that joins by a script run after the start (Proxmox `join:
    /// guestAgent`), the script not seen to run, and no join of this process under way:
    /// the process that started it stopped in between. Building as far as capacity goes;
    /// the planner has the script run again ([`CloudProvider::finish_join`](crate::cloud::CloudProvider::finish_join)).
    JoinPending,
}

/// A VM as read back from the cloud on every cycle.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Server {
    pub id: String,
    /// Equals the Kubernetes node name of the VM once it joins.
    pub name: String,
    /// Value of [`CLUSTER_TAG`](crate::cloud::CLUSTER_TAG), if any.
    pub cluster: Option<String>,
    /// Value of [`GROUP_TAG`](crate::cloud::GROUP_TAG), if any.
    pub group: Option<String>,
    pub status: ServerStatus,
    pub created: SystemTime,
    /// RAM of the VM's flavor/size in bytes, when the provider knows it.
    pub memory_bytes: Option<u64>,
    /// Provider name this server was listed from (e.g. "openstack").
    pub provider: String,
    /// Value of [`SETTINGS_HASH_TAG`](crate::cloud::SETTINGS_HASH_TAG), if any (VMs made before it was stamped have none).
    pub settings_hash: Option<String>,
    /// Value of [`SIZE_TAG`](crate::model::SIZE_TAG): the size a scale-up chose for it in
    /// a group of several sizes (none: the group's default size).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<String>,
    /// Why the cloud says the VM failed (Nova's `fault.message`), read back every cycle so
    /// the planner's reason, the Event and `plan` can say it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fault: Option<String>,
    /// Parked in its group's warm pool (the provider's warm mark, e.g. a Proxmox tag):
    /// stopped, never capacity, started by a scale-up instead of a create.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub warm: bool,
    /// A warm VM still on its one boot before it is parked (OpenStack, Kamatera): user data
    /// runs only at a server's first boot, so a pool VM joins once (its Node under the
    /// startup taint, so no workload pod lands) and is stopped once its Node is Ready. Never
    /// started by a scale-up; removed if it does not join within `provisionTimeout`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub filling: bool,
    /// When its node was recorded Ready ([`JOINED_TAG`](crate::cloud::JOINED_TAG)), if ever: read back from the
    /// cloud, so a restarted process behind an API server that lists no nodes still knows
    /// the VM is a node that ran, not one that failed to join. A mark older than
    /// [`Server::created`] (the provisioning clock, restarted when a warm VM is started)
    /// is from an earlier life and does not count (see [`Server::ever_joined`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub joined: Option<SystemTime>,
    /// When nodewright restarted the VM because its Node was gone
    /// ([`RESTARTED_TAG`](crate::cloud::RESTARTED_TAG)), if it did: read back from the
    /// cloud, so no process restarts it twice. Taken off once its node is Ready again.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restarted: Option<SystemTime>,
    /// When nodewright stopped the VM because its node was NotReady past
    /// `health.unhealthyAfter` holding data only it can reach, with the group's
    /// `unreachableWithLocalData: stop` ([`FENCED_TAG`](crate::cloud::FENCED_TAG)): read
    /// back from the cloud, so it is stopped once per NotReady spell, never again after a
    /// person started it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fenced: Option<SystemTime>,
    /// When nodewright marked it as being removed ([`ServerStatus::Removing`]), as its
    /// removing mark records it; `None` when the mark carries no time (written by an
    /// older release) or there is no mark. A mark older than `provisionTimeout`, or
    /// without a time, is not a removal in progress: its delete goes under the rate and
    /// the blind-view guard of VMs that never joined (see [`Server::removal_is_stale`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub removing_since: Option<SystemTime>,
}

impl Server {
    /// Its node was recorded Ready since its provisioning clock last started.
    pub fn ever_joined(&self) -> bool {
        self.joined.is_some_and(|j| {
            // Whole seconds on both sides: the marks keep no more.
            unix_secs(j) >= unix_secs(self.created)
        })
    }
}

impl Server {
    /// Marked as being removed, and that removal did not begin within `fresh` of `now`
    /// (or its mark says nothing of when it began): not the removal nodewright has in
    /// flight, but a leftover of one long ago (a delete that kept failing, a node that
    /// came back and was never let in again).
    pub fn removal_is_stale(&self, fresh: std::time::Duration, now: SystemTime) -> bool {
        self.status == ServerStatus::Removing
            && self
                .removing_since
                .is_none_or(|at| now.duration_since(at).unwrap_or_default() > fresh)
    }
}

/// Whole seconds since the Unix epoch (0 before it).
pub fn unix_secs(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// A VM that carries this cluster's marks but is not one nodewright may act on, found by a
/// listing: never a server of the cluster, never touched, reported every cycle (plan
/// note, log, the `disowned` and `copied` counts of its group's metrics).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Stray {
    pub provider: String,
    pub id: String,
    pub name: String,
    /// The group its marks name, if they name one.
    pub group: Option<String>,
    pub kind: StrayKind,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StrayKind {
    /// Made by nodewright, then its cluster tag was removed (a person took it over).
    Disowned,
    /// A person's copy of VM `of` (the cloud copied its marks into the clone): its marks
    /// record another VM's id.
    Copied { of: String },
}

impl std::fmt::Display for Stray {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let vm = format!("{} VM {} ({})", self.provider, self.name, self.id);
        match &self.kind {
            StrayKind::Disowned => write!(
                f,
                "{vm} was made by nodewright but no longer carries this cluster's tag; it is left alone with its node (put the tag back to manage it again, or remove both yourself)"
            ),
            StrayKind::Copied { of } => write!(
                f,
                "{vm} is a copy of VM {of} (its nodewright marks were made for VM {of}); it is left alone (remove its nodewright tags to keep it, or delete it yourself)"
            ),
        }
    }
}

/// What the provider knows of one new VM of a group before it exists, to shape the
/// planner's picture of a node that is not there yet.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct GroupShape {
    /// vCPUs × 1000.
    pub cpu_milli: Option<u64>,
    /// RAM in bytes.
    pub memory: Option<u64>,
    /// Flavor, size or template name, for `node.kubernetes.io/instance-type`.
    pub instance_type: Option<String>,
    pub zone: Option<String>,
    pub region: Option<String>,
    /// The hypervisor hosts a new VM of the group may go to (Proxmox); `None` for a
    /// cloud that places VMs itself.
    pub hosts: Option<hosts::GroupHosts>,
    /// Every size of a group that lists several (the first is the one above); empty for
    /// a group of one size. A scale-up picks among them (see
    /// [`crate::model::sizes`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sizes: Vec<super::sizes::SizeShape>,
}

impl GroupShape {
    /// The shape of one new VM of size `name`: this one with that size's CPU, memory and
    /// instance type (itself when the group has one size or `name` is not one of them).
    pub fn of_size(&self, name: &str) -> GroupShape {
        match self.sizes.iter().find(|s| s.name == name) {
            Some(s) => GroupShape {
                cpu_milli: s.cpu_milli,
                memory: s.memory,
                instance_type: Some(s.name.clone()),
                sizes: Vec::new(),
                ..self.clone()
            },
            None => self.clone(),
        }
    }
}

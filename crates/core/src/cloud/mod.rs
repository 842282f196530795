//! Cloud adapters. Each provider hides its API behind [`CloudProvider`], so the
//! planner and the loop never see provider-specific shapes.

pub mod build;
pub mod http;
pub mod in_use;
pub mod instrumented;
pub mod kamatera;
pub mod openstack;
pub mod proxmox;
pub mod registry;
pub(crate) mod warm;

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};
use std::time::SystemTime;

use async_trait::async_trait;

use crate::model::{GroupShape, Server, Stray};

/// Cloud-side metadata key naming the cluster a VM belongs to. Together with the
/// node label this is the double ownership check: both must agree.
pub const CLUSTER_TAG: &str = "nodewright-cluster";
/// Cloud-side metadata key naming the node group a VM belongs to.
pub const GROUP_TAG: &str = "nodewright-group";
/// Cloud-side metadata key for the hash of the group settings a VM was made from, the
/// same value as the node label [`crate::model::LABEL_SETTINGS_HASH`]: written in the create
/// call, so drift is still seen on a node that lost (or never got) its label.
pub const SETTINGS_HASH_TAG: &str = "nodewright-settings-hash";
/// Cloud-side metadata key recording when the VM's node was first seen Ready (Unix
/// seconds): a VM that ever joined is never taken for one that never did, by this process
/// or the next (see [`Server::joined`]). Proxmox and Kamatera keep it as a tag.
pub const JOINED_TAG: &str = "nodewright-joined";
/// Cloud-side metadata key marking a VM nodewright has begun to remove (written before its
/// Node is deleted, read back as [`ServerStatus::Removing`](crate::model::ServerStatus::Removing)): should the delete fail or
/// the process die, this process or the next knows the VM is on its way out, never
/// capacity on its way in, and deletes it again. Its value is when (Unix seconds): a mark
/// older than `provisionTimeout` is a leftover, whose delete goes under the rate and the
/// blind-view guard of VMs that never joined. Proxmox and Kamatera keep it as a tag.
pub const REMOVING_TAG: &str = "nodewright-removing";
/// Cloud-side metadata key recording when nodewright restarted a VM that had joined and
/// whose Node was gone (Unix seconds): a kubelet registers its Node only when it starts,
/// so a restart is the one way to get the Node back with the VM's disks. Read back as
/// [`Server::restarted`], so no process restarts a VM twice for it; taken off once its
/// node is Ready again ([`CloudProvider::mark_joined`] with a time). Proxmox and Kamatera
/// keep it as a tag.
pub const RESTARTED_TAG: &str = "nodewright-restarted";
/// Cloud-side metadata key recording when nodewright stopped a VM whose node was NotReady
/// past `health.unhealthyAfter` holding data only it can reach (Unix seconds), for a group
/// with `unreachableWithLocalData: stop`. Read back as [`Server::fenced`]: a VM is stopped
/// once per NotReady spell, and one a person started again is left running. Proxmox and
/// Kamatera keep it as a tag.
pub const FENCED_TAG: &str = "nodewright-fenced";

/// The cluster's own identity: the UID of its `kube-system` namespace, made with the
/// cluster, stable for its life and unique to it, so two clusters given the same
/// `clusterName` are still told apart (a Proxmox cloud-init seed carries it). Nothing is
/// stored: the loop reads it from the Kubernetes adapter and hands it, as plain text, to
/// the providers built with it (see [`BuildOptions::identity`]); unknown until read.
#[derive(Debug, Clone, Default)]
pub struct ClusterIdentity(Arc<OnceLock<String>>);

impl ClusterIdentity {
    /// An identity known from the start (tests, tools that read it themselves).
    pub fn known(uid: &str) -> Self {
        let id = ClusterIdentity::default();
        id.learn(uid);
        id
    }

    /// The identity, once read.
    pub fn get(&self) -> Option<&str> {
        self.0.get().map(String::as_str)
    }

    /// Records the identity read from the cluster; it never changes, so a second read
    /// changes nothing. An empty one is no identity.
    pub fn learn(&self, uid: &str) {
        if !uid.is_empty() {
            let _ = self.0.set(uid.to_string());
        }
    }
}

/// What building a provider's client takes besides its credentials and groups: the
/// config's provisioning deadline, in plain durations (the loop reads them from the
/// config, so no provider imports it), whether the process only reads, and the
/// cluster's identity.
#[derive(Debug, Clone, Default)]
pub struct BuildOptions {
    /// `provisionTimeout`: a provisioning task is given up then unless it shows progress.
    pub provision_timeout: std::time::Duration,
    /// The ceiling of a provisioning task that keeps making progress.
    pub provision_deadline_max: std::time::Duration,
    /// How long a provisioning task may go without progress once past its timeout.
    pub provision_stall: std::time::Duration,
    /// A process that only reads (`plan`, `run --dry-run`): reading a cloud then never
    /// changes it (see the Proxmox provider's `read_only`).
    pub read_only: bool,
    /// The cluster's identity, shared with the loop that reads it (see
    /// [`ClusterIdentity`]).
    pub identity: ClusterIdentity,
}

/// Why a provider's client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("node group(s) {groups} use provider {provider}, but {env} is not set; expected the path of the credentials file")]
    MissingEnv {
        provider: &'static str,
        groups: String,
        env: &'static str,
    },
    #[error("{0}")]
    Credentials(String),
    #[error(transparent)]
    Cloud(#[from] CloudError),
}

/// What one cycle reads from one provider: its servers of the cluster and the shape of a
/// new VM of each of its groups.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Observed {
    pub servers: Vec<Server>,
    pub shapes: BTreeMap<String, GroupShape>,
    /// Provisioning failures found this cycle that no listed server carries, in the
    /// cloud's words (a Proxmox clone a process gone started, stopped at its deadline or
    /// failed, with the last lines of its log): they reach the plan's notes and an Event,
    /// not only the log.
    pub failures: Vec<String>,
    /// VMs carrying this cluster's marks that are not its to act on (see [`Stray`]).
    pub strays: Vec<Stray>,
}

/// Renders the [`CreateRequest`] of a VM for its zone (its hypervisor host), as a scale-up
/// would have: only the caller has the config and templates, only the provider knows where
/// the VM is (see [`CloudProvider::finish_join`], [`CloudProvider::start_warm`]). `None`:
/// the group's shape decides, as for a create without a host. The error is the user
/// data's, in words.
pub type RenderJoin<'a> = dyn Fn(Option<&str>) -> Result<CreateRequest, String> + Send + Sync + 'a;

/// Everything needed to create one VM of a group.
#[derive(Debug, Clone)]
pub struct CreateRequest {
    pub name: String,
    pub cluster: String,
    pub group: String,
    /// Rendered user data (cloud-init text, Ignition JSON, ...), sent as-is (providers encode it).
    pub user_data: String,
    /// The group's settings hash, stamped on the VM as [`SETTINGS_HASH_TAG`] in the
    /// create call itself (empty: none is written).
    pub settings_hash: String,
    /// The size the plan chose in a group of several sizes (a flavor name, ...), made and
    /// stamped as [`crate::model::SIZE_TAG`]; `None`: the group's default size.
    pub size: Option<String>,
    /// The host the plan put this VM on (its `topology.kubernetes.io/zone`, already in the
    /// user data): a provider with hosts places it there or fails, never elsewhere.
    pub zone: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum CloudError {
    #[error("{provider}: authentication failed: {message}")]
    Auth { provider: String, message: String },
    #[error("{provider}: {what} '{name}' not found{}", in_parentheses(.detail))]
    NotFound {
        provider: String,
        what: String,
        /// Just the name looked for: the explanation goes in `detail`, not in its quotes.
        name: String,
        /// Where it was looked for and what was there instead; may be empty.
        detail: String,
    },
    #[error("{provider}: quota exceeded: {message}")]
    Quota { provider: String, message: String },
    #[error("{provider}: {call} failed with HTTP {status}: {message}")]
    Api {
        provider: String,
        call: String,
        status: u16,
        message: String,
    },
    #[error("{provider}: {call}: {message}")]
    Transport {
        provider: String,
        call: String,
        message: String,
    },
    #[error("{provider}: {message}")]
    Other { provider: String, message: String },
    /// A delete refused because the server, read back just before, is not this
    /// cluster's (see [`check_owned`]).
    #[error("{provider}: refusing to delete {server}: {reason}")]
    Refused {
        provider: String,
        /// `'<name>' (<id>)`.
        server: String,
        reason: String,
    },
}

/// Why `server`, as just read back, is not `cluster`'s to delete: `None` when its
/// [`CLUSTER_TAG`] names `cluster`.
/// ` (detail)`, or nothing for an empty one.
fn in_parentheses(detail: &str) -> String {
    if detail.is_empty() {
        String::new()
    } else {
        format!(" ({detail})")
    }
}

pub fn not_owned_by(server: &Server, cluster: &str) -> Option<String> {
    match server.cluster.as_deref() {
        Some(c) if c == cluster => None,
        Some(other) => Some(format!(
            "its {CLUSTER_TAG} tag names cluster '{other}', not '{cluster}'"
        )),
        None => Some(format!(
            "it carries no {CLUSTER_TAG} tag naming cluster '{cluster}' (missing or ambiguous)"
        )),
    }
}

/// `Err(`[`CloudError::Refused`]`)` unless `server` is `cluster`'s to delete; what every
/// provider's `delete_server` checks on the server it has just read back.
pub fn check_owned(provider: &str, server: &Server, cluster: &str) -> Result<(), CloudError> {
    match not_owned_by(server, cluster) {
        None => Ok(()),
        Some(reason) => Err(refused(provider, &server.name, &server.id, reason)),
    }
}

/// A [`CloudError::Refused`] for server `name` (`id`), logged as it is made.
pub fn refused(provider: &str, name: &str, id: &str, reason: String) -> CloudError {
    tracing::warn!(provider, server = %name, id, %reason, "refusing to delete a server that is not this cluster's");
    CloudError::Refused {
        provider: provider.to_string(),
        server: format!("'{name}' ({id})"),
        reason,
    }
}

/// One cloud account as used by one or more node groups.
///
/// `list_servers` must return only servers whose [`CLUSTER_TAG`] equals `cluster`; the
/// group settings needed by `create_server` are bound when the provider is built.
#[async_trait]
pub trait CloudProvider: Send + Sync {
    /// Short provider name for logs and metrics, e.g. "openstack".
    fn name(&self) -> &str;
    async fn list_servers(&self, cluster: &str) -> Result<Vec<Server>, CloudError>;
    async fn create_server(&self, req: &CreateRequest) -> Result<Server, CloudError>;
    /// Reads one server back by id, now (no cache), whatever its tags say; `None` when
    /// it no longer exists. Its [`Server::cluster`] and [`Server::group`] are what its
    /// tags say now; a provider whose tags cannot name another cluster (Kamatera's flat
    /// tags) reports `cluster` only when the server is tagged for it, and `None` otherwise.
    /// The actuator checks this just before every destructive call.
    async fn get_server(&self, cluster: &str, id: &str) -> Result<Option<Server>, CloudError>;
    /// Deletes server `id` of `cluster`: its tags are read back first and a server not
    /// tagged for `cluster` is refused with [`CloudError::Refused`] (see [`check_owned`]).
    /// Deleting a server that is already gone is success.
    async fn delete_server(&self, cluster: &str, id: &str) -> Result<(), CloudError>;
    /// CPU, memory, instance type and zone of one new VM of `group` (its flavor, size or
    /// template), as far as the provider can tell before any VM exists; used to size
    /// scale-ups and to label the node-to-be.
    async fn group_shape(&self, _group: &str) -> Result<GroupShape, CloudError> {
        Ok(GroupShape::default())
    }
    /// Everything a cycle reads from this provider: the servers of `cluster` and the shape
    /// of each of `groups`. Called once per provider per cycle; a provider whose listing
    /// also answers the shapes (Proxmox: one `/cluster/resources` for both) overrides it so
    /// that a cycle costs one listing, not one per group.
    async fn observe(&self, cluster: &str, groups: &[String]) -> Result<Observed, CloudError> {
        let servers = self.list_servers(cluster).await?;
        let mut shapes = BTreeMap::new();
        for g in groups {
            shapes.insert(g.clone(), self.group_shape(g).await?);
        }
        Ok(Observed {
            servers,
            shapes,
            failures: Vec::new(),
            strays: Vec::new(),
        })
    }
    /// Verifies credentials and that everything the groups refer to exists (`nodewright
    /// check`): one line per thing verified, in the provider's own terms.
    async fn verify(&self) -> Result<Vec<String>, CloudError> {
        Ok(Vec::new())
    }
    /// Creates a VM of `req.group` for its warm pool: made, never started, marked warm
    /// ([`Server::warm`]), so it never joins until a scale-up starts it.
    async fn create_warm(&self, _req: &CreateRequest) -> Result<Server, CloudError> {
        Err(no_warm_pools(self.name()))
    }
    /// Takes warm VM `id` out of its pool and starts it: read back first and refused
    /// unless it is `cluster`'s and warm; its provisioning clock restarts now. `render`
    /// gives its name and freshly rendered user data for the zone the VM is in, the one a
    /// create there would have been given (Proxmox: its host), for providers that pass
    /// the user data at the start (a seed) or join by running a script after it; a
    /// render error fails the start before the VM is changed.
    async fn start_warm(
        &self,
        _cluster: &str,
        _id: &str,
        _render: &RenderJoin<'_>,
    ) -> Result<(), CloudError> {
        Err(no_warm_pools(self.name()))
    }
    /// Stops VM `id` and marks it warm, waiting until it is stopped (the caller deletes
    /// its Node afterwards, so no running kubelet is left to register it again): read
    /// back first and refused unless it is `cluster`'s.
    async fn park(&self, _cluster: &str, _id: &str) -> Result<(), CloudError> {
        Err(no_warm_pools(self.name()))
    }
    /// Records on VM `id` that its node was Ready at `at` ([`JOINED_TAG`], read back as
    /// [`Server::joined`]), or with `None` takes the mark off (before nodewright deletes
    /// the VM's Node itself, so a VM whose delete did not follow is not waited on for
    /// ever): read back first and refused unless it is `cluster`'s. Repeating it only
    /// moves the time; a provider keeps one mark per VM. With a time it also takes the
    /// removing mark off ([`REMOVING_TAG`]): a node let in again is no longer being
    /// removed, and a later loss of its Node must not delete it as if it were; and the
    /// restart mark ([`RESTARTED_TAG`]): its Node came back, so a later loss may be
    /// answered by a restart again.
    async fn mark_joined(
        &self,
        cluster: &str,
        id: &str,
        at: Option<SystemTime>,
    ) -> Result<(), CloudError>;
    /// Restarts VM `id`, whose node joined and whose Node is gone, so its kubelet starts
    /// and registers the Node again (the disks stay): read back first and refused unless
    /// it is `cluster`'s and running; the restart mark ([`RESTARTED_TAG`], at `at`) is
    /// written before the restart call, so a process that dies in between never restarts
    /// it a second time. Returns once the cloud took the restart (not once it booted).
    async fn restart(&self, _cluster: &str, id: &str, _at: SystemTime) -> Result<(), CloudError> {
        Err(CloudError::Other {
            provider: self.name().to_string(),
            message: format!("VM {id}: this provider cannot restart a VM"),
        })
    }
    /// Stops VM `id`, whose node is NotReady past `health.unhealthyAfter` and holds data
    /// only it can reach, so it cannot go on writing out of sight: read back first and
    /// refused unless it is `cluster`'s and running; the fence mark ([`FENCED_TAG`], at
    /// `at`) is written before the stop call (taken off again if the call fails), so no
    /// process stops it twice in one NotReady spell. A hard stop: the guest does not
    /// answer. Never deletes anything.
    async fn fence(&self, _cluster: &str, id: &str, _at: SystemTime) -> Result<(), CloudError> {
        Err(CloudError::Other {
            provider: self.name().to_string(),
            message: format!("VM {id}: this provider cannot stop a VM"),
        })
    }
    /// Marks VM `id` as being removed ([`REMOVING_TAG`], read back as
    /// [`ServerStatus::Removing`](crate::model::ServerStatus::Removing)) before nodewright deletes its Node and the VM: read
    /// back first and refused unless it is `cluster`'s. The mark records the time now
    /// ([`Server::removing_since`]); an earlier mark is replaced, as the removal beginning
    /// now is the one in flight.
    async fn mark_removing(&self, cluster: &str, id: &str) -> Result<(), CloudError>;
    /// Finishes the join of VM `id` ([`ServerStatus::JoinPending`](crate::model::ServerStatus::JoinPending)), read back first and
    /// refused unless it is `cluster`'s: with `render`, runs its join script again (in the
    /// background, the VM building meanwhile) with user data rendered anew; without (its
    /// node registered), only records that the join is done. A VM whose join is no longer
    /// pending is left as it is.
    async fn finish_join(
        &self,
        _cluster: &str,
        id: &str,
        _render: Option<&RenderJoin<'_>>,
    ) -> Result<(), CloudError> {
        Err(CloudError::Other {
            provider: self.name().to_string(),
            message: format!("VM {id}: this provider runs no join script after the start"),
        })
    }
    /// The nodes `names` of `cluster` are Ready and their startup taint goes next: what was
    /// left for their boot only (a Proxmox cloud-init seed, join token inside) is removed.
    /// The caller logs an error and removes the taint all the same.
    async fn nodes_joined(&self, _cluster: &str, _names: &[String]) -> Result<(), CloudError> {
        Ok(())
    }
}

/// The error of a warm-pool call to a provider without warm pools (config validation
/// keeps `warmPool` to the providers that have them).
fn no_warm_pools(provider: &str) -> CloudError {
    CloudError::Other {
        provider: provider.to_string(),
        message: "warm pools are not supported by this provider; remove warmPool from its groups"
            .into(),
    }
}

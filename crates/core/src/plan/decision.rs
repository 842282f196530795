//! What the planner answers and why: the [`Decision`] (the action, its reasons, notes,
//! pending pods and kept nodes) that the actuator, Events, metrics, the status ConfigMap
//! and `nodewright plan` all read, and the [`ReasonCode`]s, which say themselves what
//! they mean for scale-up and removal.

use std::fmt;

use serde::Serialize;

use super::{Action, Unremovable};
use crate::model::{ObjectRef, PodRef};

/// Why something was (or was not) done, as data for logs, events and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub enum ReasonCode {
    NodeReady,
    ServerError,
    ProvisionTimeout,
    /// A node of ours NotReady past `health.unhealthyAfter` whose VM the cloud does not
    /// have: its Node is deleted.
    NodeWithoutServer,
    /// VMs tagged with this cluster name a group the config does not have (removed or
    /// renamed): reported every cycle, never touched.
    UnknownGroupVms,
    GroupBelowMinSize,
    UnschedulablePods,
    FreeMemoryBelowTarget,
    NodeFreeMemoryBelowMinimum,
    FreeCpuBelowTarget,
    /// Pods of an active capacity buffer fit on no node.
    BufferShort,
    GroupAtMaxSize,
    GroupBackedOff,
    ClusterLimitReached,
    /// The group's hypervisor hosts take no more VMs (overcommit, reserve, maxPerHost,
    /// offline or in maintenance).
    HostsFull,
    ProviderUnavailable,
    NoGroupFits,
    ModelMismatch,
    NodeTooOld,
    NodeUnneeded,
    ReplacementNeedsCapacity,
    WaitingForProvisioning,
    DrainInProgress,
    DrainBlocked,
    DrainTimedOut,
    /// A node nodewright cordoned to scale down is needed after all (the fresh view shows
    /// it runs pods, or pending pods that need a node fit it): given back, not drained.
    NodeNeededAgain,
    NodeUnhealthy,
    NodeDrifted,
    NodeDisowned,
    /// A VM nodewright made lost its cluster tag: left alone with its node, reported.
    VmDisowned,
    /// A person's copy of a VM of ours carries its marks: left alone, reported.
    VmCopied,
    /// A VM that joined has no Node of ours now: restarted once (its kubelet registers
    /// at its start), waited on and reported, never removed for it.
    NodeVanished,
    /// A VM that joined lost its Node, was restarted once for it, and no Node came back
    /// within `provisionTimeout`: reported (a Warning Event), never deleted nor restarted
    /// again.
    NodeLostAfterRestart,
    /// Every managed node is missing while VMs that joined exist: the cluster view looks
    /// wrong, so nothing is removed for not joining.
    ClusterViewSuspect,
    DisruptionBudgetExhausted,
    TooManyUnready,
    NodeEmpty,
    VolumesAttached,
    ImageMissing,
    PullerFinished,
    /// An image puller could not pull images (`ErrImagePull`, `ImagePullBackOff`): they
    /// are recorded on the node and not tried again on any node for a long while.
    ImageUnpullable,
    CapacitySufficient,
    /// A scale-up starts warm VMs instead of creating.
    WarmPoolStart,
    /// The warm pool of a group is below its size.
    WarmPoolShort,
    /// A warm VM was made from other settings, or is older than `oldNodeAgeLimit`.
    WarmVmStale,
    /// A VM whose removal began (its removing mark is on) and did not finish: deleted
    /// again, never counted as a failed create.
    RemovalUnfinished,
    /// A VM whose removing mark is older than `provisionTimeout` (or carries no time) and
    /// that has no Node: a leftover of a removal long ago, not one in flight. Deleted
    /// under the rate and blind-view guard of VMs that never joined, never at once.
    RemovalStale,
    /// A warm VM with a Node of ours is stopped and its Node deleted.
    WarmPoolPark,
    /// A VM was started and the process that started it stopped before its join script
    /// ran: the script is run again (or, its node registered, the join recorded done).
    JoinUnfinished,
    /// A node's settings-hash label is one an earlier release stamped for the settings its
    /// group has now: relabelled with today's hash, never replaced for it.
    HashFormatChanged,
    /// A group pins a Kubernetes version newer than the API server's: it makes no node
    /// (none is ever newer than its control plane) until the pin or the server changes.
    VersionNewerThanServer,
    /// An action that failed on its objects is held back for a while; the next step's
    /// action runs meanwhile.
    ActionBackedOff,
}

impl ReasonCode {
    /// A note with this code means pods that need a new node get none from it this
    /// cycle: a group at its size or backed off, a cluster limit, full hypervisor hosts,
    /// a provider that could not be listed.
    pub fn blocks_scale_up(self) -> bool {
        matches!(
            self,
            ReasonCode::GroupAtMaxSize
                | ReasonCode::GroupBackedOff
                | ReasonCode::ClusterLimitReached
                | ReasonCode::HostsFull
                | ReasonCode::ProviderUnavailable
        )
    }

    /// A reason of a scale-up with this code names the pods the scale-up leaves over:
    /// its group, a cluster limit or the group's hosts ran out of room for them.
    pub fn leaves_pods_over(self) -> bool {
        matches!(
            self,
            ReasonCode::GroupAtMaxSize | ReasonCode::ClusterLimitReached | ReasonCode::HostsFull
        )
    }

    /// A VM removed for this failed to provision (its cloud's error, or no node in
    /// time): reported where its node would be, or on the status ConfigMap.
    pub fn is_provisioning_failure(self) -> bool {
        matches!(self, ReasonCode::ServerError | ReasonCode::ProvisionTimeout)
    }

    /// A VM deleted for this is no failure of its group (a stale warm VM, a removal
    /// to finish): the group is not backed off for it.
    pub fn is_routine_removal(self) -> bool {
        matches!(
            self,
            ReasonCode::WarmVmStale | ReasonCode::RemovalUnfinished | ReasonCode::RemovalStale
        )
    }

    /// A VM deleted for this counts toward the rate of removals for not joining (see
    /// [`crate::plan::MAX_NOT_JOINED_PER_ACTION`]): its Node may only be out of sight.
    pub fn counts_toward_not_joined_rate(self) -> bool {
        matches!(
            self,
            ReasonCode::ProvisionTimeout | ReasonCode::RemovalStale
        )
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Reason {
    pub code: ReasonCode,
    pub message: String,
    /// The nodes or pods this reason is about.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub objects: Vec<ObjectRef>,
}

impl Reason {
    pub fn new(code: ReasonCode, message: impl Into<String>) -> Self {
        Reason {
            code,
            message: message.into(),
            objects: Vec::new(),
        }
    }

    /// The same reason, about these objects.
    pub fn about(mut self, objects: impl IntoIterator<Item = ObjectRef>) -> Self {
        self.objects.extend(objects);
        self
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.code, self.message)
    }
}

pub use crate::model::Bucket;

/// One pending pod and its bucket, with where it goes or why it cannot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PendingPod {
    pub pod: PodRef,
    pub bucket: Bucket,
    pub detail: String,
}

/// The planner's answer: one action, why, and what else it noticed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Decision {
    pub action: Action,
    /// Why this action (empty only for `Action::None` when all is well).
    pub reasons: Vec<Reason>,
    /// Things noticed that did not lead to the action (limits hit, pods nothing can host).
    pub notes: Vec<Reason>,
    /// Every pod the scheduler could not place, in its bucket.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pending: Vec<PendingPod>,
    /// Every node in service that scale-down keeps, with why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unremovable: Vec<Unremovable>,
}

impl Decision {
    /// Its action removes VMs for not joining: the loop does not run the next cycle at
    /// once after it (their removal is a rate, and a view gone blind for a moment must
    /// not be read again and again within it).
    pub fn removes_not_joined(&self) -> bool {
        matches!(self.action, Action::DeleteServers { .. })
            && self
                .reasons
                .iter()
                .any(|r| r.code.counts_toward_not_joined_rate())
    }

    pub fn has_reason(&self, code: ReasonCode) -> bool {
        self.reasons
            .iter()
            .chain(&self.notes)
            .any(|r| r.code == code)
    }

    /// The bucket of one pending pod, if it is pending.
    pub fn bucket_of(&self, namespace: &str, name: &str) -> Option<Bucket> {
        self.pending
            .iter()
            .find(|p| p.pod.namespace == namespace && p.pod.name == name)
            .map(|p| p.bucket)
    }

    /// How many pending pods are in each bucket.
    pub fn bucket_counts(&self) -> std::collections::BTreeMap<Bucket, usize> {
        let mut out = std::collections::BTreeMap::new();
        for p in &self.pending {
            *out.entry(p.bucket).or_insert(0) += 1;
        }
        out
    }
}

//! The codes a decision reports, which metrics and Events name as labels: where a pending
//! pod stands, and why a node is kept.

use serde::Serialize;

/// Where a pod the scheduler could not place stands after this cycle: every such pod
/// is in exactly one bucket, so none starves unreported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Bucket {
    /// It fits a node that exists: the scheduler will place it.
    WillSchedule,
    /// It fits a VM still provisioning.
    CapacityComing,
    /// This cycle's scale-up is for it.
    ScalingUp,
    /// Nothing can host it now: no group fits it, or those that do have no room.
    NoCapacity,
}

impl Bucket {
    pub const ALL: [Bucket; 4] = [
        Bucket::WillSchedule,
        Bucket::CapacityComing,
        Bucket::ScalingUp,
        Bucket::NoCapacity,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Bucket::WillSchedule => "will-schedule",
            Bucket::CapacityComing => "capacity-coming",
            Bucket::ScalingUp => "scaling-up",
            Bucket::NoCapacity => "no-capacity",
        }
    }
}

/// The reason a node is kept, as a stable code (the metric's `reason` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum KeptReason {
    /// `scaleDown.enabled: false`.
    ScaleDownDisabled,
    /// The node carries a scale-down-disabled or do-not-disrupt annotation.
    ScaleDownDisabledAnnotation,
    /// Not Ready: the health checks, not scale-down, deal with it.
    NotReady,
    /// Its group would fall below `minSize`.
    GroupAtMinSize,
    /// A pod keeps data on a volume only this node can reach (`local-path`, `local` PV):
    /// see the pod; scale-down never takes such a node.
    LocalVolume,
    /// Its pods request at least `scaleDown.utilizationThreshold` of it.
    NotUnderutilized,
    /// A pod cannot be evicted (PodDisruptionBudget, annotation, no controller, local
    /// storage, kube-system, running Job): see the pod and its reason.
    BlockedByPod,
    /// Without it, free memory or CPU would fall below `freeMemoryTarget` / `freeCpuTarget`.
    FreeCapacityTarget,
    /// Some of its pods fit on no other node.
    NoPlaceToMovePods,
    /// No other node would keep `minimumFreeNodeMemory` / `minimumFreeNodeCpu` free.
    MinimumFreeNode,
    /// An active capacity buffer needs its room.
    CapacityBuffer,
    /// Too many managed nodes are unready to take any away.
    TooManyUnready,
    /// VMs are provisioning, pending pods are about to take room, or this cycle scales up.
    ScaleUpInProgress,
    /// Another node is being drained.
    DrainInProgress,
    /// Inside `scaleDown.delayAfterAdd`, `delayAfterDelete` or `delayAfterFailure`.
    ScaleDownDelay,
    /// Unneeded for less than `scaleDown.unneededTime`.
    UnneededTooShort,
    /// The disruption budget allows no more removals now.
    DisruptionBudget,
    /// With priorities (or prices), a less preferred group's nodes still run pods.
    PreferredGroup,
    /// The cycle's one action is something else (one removal at a time).
    OtherActionFirst,
}

impl KeptReason {
    pub const ALL: [KeptReason; 19] = [
        KeptReason::ScaleDownDisabled,
        KeptReason::ScaleDownDisabledAnnotation,
        KeptReason::NotReady,
        KeptReason::GroupAtMinSize,
        KeptReason::LocalVolume,
        KeptReason::NotUnderutilized,
        KeptReason::BlockedByPod,
        KeptReason::FreeCapacityTarget,
        KeptReason::NoPlaceToMovePods,
        KeptReason::MinimumFreeNode,
        KeptReason::CapacityBuffer,
        KeptReason::TooManyUnready,
        KeptReason::ScaleUpInProgress,
        KeptReason::DrainInProgress,
        KeptReason::ScaleDownDelay,
        KeptReason::UnneededTooShort,
        KeptReason::DisruptionBudget,
        KeptReason::PreferredGroup,
        KeptReason::OtherActionFirst,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            KeptReason::ScaleDownDisabled => "scale-down-disabled",
            KeptReason::ScaleDownDisabledAnnotation => "scale-down-disabled-annotation",
            KeptReason::NotReady => "not-ready",
            KeptReason::GroupAtMinSize => "group-at-min-size",
            KeptReason::LocalVolume => "local-volume",
            KeptReason::NotUnderutilized => "not-underutilized",
            KeptReason::BlockedByPod => "blocked-by-pod",
            KeptReason::FreeCapacityTarget => "free-capacity-target",
            KeptReason::NoPlaceToMovePods => "no-place-to-move-pods",
            KeptReason::MinimumFreeNode => "minimum-free-node",
            KeptReason::CapacityBuffer => "capacity-buffer",
            KeptReason::TooManyUnready => "too-many-unready",
            KeptReason::ScaleUpInProgress => "scale-up-in-progress",
            KeptReason::DrainInProgress => "drain-in-progress",
            KeptReason::ScaleDownDelay => "scale-down-delay",
            KeptReason::UnneededTooShort => "unneeded-too-short",
            KeptReason::DisruptionBudget => "disruption-budget",
            KeptReason::PreferredGroup => "preferred-group",
            KeptReason::OtherActionFirst => "other-action-first",
        }
    }
}

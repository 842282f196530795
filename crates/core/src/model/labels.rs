//! The label, annotation and taint names nodewright writes and reads on Kubernetes
//! objects, its own and those it honours from Cluster Autoscaler and Karpenter.

/// Node label and cloud tag values derive from these; see the planner's view (`plan/view`).
pub const LABEL_CLUSTER: &str = "nodewright.io/cluster";
pub const LABEL_GROUP: &str = "nodewright.io/group";
/// Taint every new node registers with; removed by the autoscaler once the node is Ready.
pub const STARTUP_TAINT_KEY: &str = "nodewright.io/startup";
/// Soft taint (`PreferNoSchedule`) on the nodes scale-down may remove soon, as Cluster
/// Autoscaler's `DeletionCandidateOfClusterAutoscaler`: the scheduler fills other nodes
/// first, so a candidate empties instead of taking new pods; never blocks placement.
/// Removed when the node stops being a candidate.
pub const DELETION_CANDIDATE_TAINT_KEY: &str = "nodewright.io/deletion-candidate";
/// Annotation set when nodewright cordons a node, so it only drains what it cordoned.
pub const ANNOTATION_CORDONED: &str = "nodewright.io/cordoned-reason";
/// When nodewright cordoned the node (RFC 3339): the drain deadline counts from it.
pub const ANNOTATION_CORDONED_AT: &str = "nodewright.io/cordoned-at";
/// Why nodewright is removing the node: `empty`, `underutilized`, `drifted`, `expired`
/// or `unhealthy` (budgets and forced removals read it back).
pub const ANNOTATION_DISRUPTION: &str = "nodewright.io/disruption";
/// Since when the node has been unneeded (RFC 3339); a restart keeps the clock.
pub const ANNOTATION_UNNEEDED_SINCE: &str = "nodewright.io/unneeded-since";
/// `"true"` opts a node out of scale-down (as Cluster Autoscaler's annotation does).
pub const ANNOTATION_SCALE_DOWN_DISABLED: &str = "nodewright.io/scale-down-disabled";
/// Cluster Autoscaler's node opt-out, honoured as users know it.
pub const CA_SCALE_DOWN_DISABLED: &str = "cluster-autoscaler.kubernetes.io/scale-down-disabled";
/// Cluster Autoscaler's pod annotation: `"true"` lets a blocking pod be evicted,
/// `"false"` keeps its node.
pub const CA_SAFE_TO_EVICT: &str = "cluster-autoscaler.kubernetes.io/safe-to-evict";
/// Pod annotation listing (comma-separated) the pod's volumes whose data may be lost when
/// it is evicted; a pod whose local volumes are all listed no longer blocks its node's
/// replacement (Cluster Autoscaler's name and format).
pub const CA_SAFE_TO_EVICT_LOCAL_VOLUMES: &str =
    "cluster-autoscaler.kubernetes.io/safe-to-evict-local-volumes";
/// Karpenter's pod (and node) annotation: `"true"` blocks voluntary disruption.
pub const KARPENTER_DO_NOT_DISRUPT: &str = "karpenter.sh/do-not-disrupt";
/// Hash of the group settings a node was created with (node label); a node whose hash
/// differs from its group's current one has drifted.
pub const LABEL_SETTINGS_HASH: &str = "nodewright.io/settings-hash";
/// Label on the short-lived pods that pull images onto a node.
pub const LABEL_IMAGE_PULLER: &str = "nodewright.io/image-puller";
/// Node annotation: the images an image puller on this node could not pull, as a JSON
/// object of normalized image to when it gave up (Unix seconds). No puller tries them
/// again on any node until long after (see `plan::steps::images`).
pub const ANNOTATION_UNPULLABLE_IMAGES: &str = "nodewright.io/unpullable-images";

/// Unix seconds as RFC 3339 (UTC), the form the annotations keep.
pub fn rfc3339(secs: u64) -> String {
    humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs))
        .to_string()
}

//! Disruption policy as Cluster Autoscaler and Karpenter users know it: which pods keep
//! a node from being removed, which nodes opted out, how many nodes may be disrupted at
//! once (budgets), and when too many nodes are unready to disrupt anything.

use std::fmt;
use std::time::SystemTime;

use super::view::View;
use super::volumes;
use crate::config::DisruptionReason;
use crate::model::{
    HeldVolume, LocalVolume, NodeInfo, PodInfo, ANNOTATION_CORDONED, ANNOTATION_DISRUPTION,
    ANNOTATION_SCALE_DOWN_DISABLED, CA_SAFE_TO_EVICT, CA_SAFE_TO_EVICT_LOCAL_VOLUMES,
    CA_SCALE_DOWN_DISABLED, KARPENTER_DO_NOT_DISRUPT,
};

/// Why a pod keeps its node from being drained voluntarily.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Blocker {
    /// No controller would recreate it: eviction would lose it.
    NoController,
    /// `emptyDir` on disk or `hostPath`: its data would be lost.
    LocalStorage,
    /// A kube-system pod without a PodDisruptionBudget.
    KubeSystem,
    /// `cluster-autoscaler.kubernetes.io/safe-to-evict: "false"`.
    NotSafeToEvict,
    /// `karpenter.sh/do-not-disrupt: "true"`.
    DoNotDisrupt,
    /// A PodDisruptionBudget that allows no disruption now.
    Budget(String),
    /// More than one PodDisruptionBudget selects it: the eviction API refuses it.
    SeveralBudgets(String),
    /// Its data is on a volume only its node can reach; evicting it and removing the node
    /// would lose it (and the pod would stay Pending for ever).
    LocalVolume(LocalVolume),
}

impl fmt::Display for Blocker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Blocker::NoController => write!(f, "has no controller to recreate it"),
            Blocker::LocalStorage => write!(f, "keeps data in emptyDir or hostPath"),
            Blocker::KubeSystem => write!(f, "is a kube-system pod without a PodDisruptionBudget"),
            Blocker::NotSafeToEvict => write!(f, "is annotated {CA_SAFE_TO_EVICT}: \"false\""),
            Blocker::DoNotDisrupt => write!(f, "is annotated {KARPENTER_DO_NOT_DISRUPT}: \"true\""),
            Blocker::Budget(b) => write!(
                f,
                "is protected by PodDisruptionBudget {b}, which allows no disruption now"
            ),
            Blocker::SeveralBudgets(b) => write!(
                f,
                "is selected by several PodDisruptionBudgets ({b}), which the eviction API refuses"
            ),
            Blocker::LocalVolume(l) => write!(
                f,
                "keeps its data on node {} (volume {}, PersistentVolumeClaim {}, PersistentVolume {}), which only that node can reach",
                l.node, l.volume, l.claim, l.pv
            ),
        }
    }
}

impl Blocker {
    /// A stable short code for reports (`podReason` of an unremovable node).
    pub fn code(&self) -> &'static str {
        match self {
            Blocker::NoController => "no-controller",
            Blocker::LocalStorage => "local-storage",
            Blocker::KubeSystem => "kube-system",
            Blocker::NotSafeToEvict => "not-safe-to-evict",
            Blocker::DoNotDisrupt => "do-not-disrupt",
            Blocker::Budget(_) => "pdb",
            Blocker::SeveralBudgets(_) => "several-pdbs",
            Blocker::LocalVolume(_) => "local-volume",
        }
    }
}

fn annotation_is(p: &PodInfo, key: &str, value: &str) -> bool {
    p.annotations.get(key).is_some_and(|v| v == value)
}

/// Whether a drain leaves `pod` alone entirely: DaemonSet, mirror and finished pods, and
/// nodewright's own image pullers (label, namespace and cluster all ours; a user pod
/// that merely carries the label is a pod like any other).
pub fn ignored(v: &View<'_>, pod: &PodInfo) -> bool {
    pod.ignored_by_drain() || own_puller(v, pod)
}

/// An image puller pod this nodewright made.
pub fn own_puller(v: &View<'_>, p: &PodInfo) -> bool {
    p.namespace == v.config.image_puller.namespace
        && p.labels
            .get(crate::model::LABEL_IMAGE_PULLER)
            .map(String::as_str)
            == Some("true")
        && p.labels.get(crate::model::LABEL_CLUSTER) == Some(&v.config.cluster_name)
}

/// Pods owned by a Job are waited for, not evicted (up to `drain.jobGracePeriod`).
pub fn is_job(pod: &PodInfo) -> bool {
    pod.controller_kind.as_deref() == Some("Job")
}

/// The first volume of `pod` whose data only its node holds, whatever the opt-ins say.
/// Scale-down and consolidation never take such a node.
pub fn pinning_volume<'p>(v: &View<'_>, pod: &'p PodInfo) -> Option<&'p LocalVolume> {
    if ignored(v, pod) {
        return None;
    }
    let node = pod.node_name.as_deref()?;
    pod.local_volumes.iter().find(|l| l.node == node)
}

/// The first local volume of `pod` that the user has not let go: the pod's
/// `safe-to-evict-local-volumes` annotation lists every volume of the pod whose data is
/// on its node (as Cluster Autoscaler reads it for emptyDir and hostPath), or the node's
/// group has `allowLocalVolumeLoss`.
pub fn unreleased_volume<'p>(v: &View<'_>, pod: &'p PodInfo) -> Option<&'p LocalVolume> {
    let first = pinning_volume(v, pod)?;
    if pod
        .node_name
        .as_deref()
        .is_some_and(|n| group_allows_loss(v, n))
    {
        return None;
    }
    let listed = volumes::listed_volumes(pod.annotations.get(CA_SAFE_TO_EVICT_LOCAL_VOLUMES));
    let node = pod.node_name.as_deref().unwrap_or_default();
    let all_listed = pod
        .local_volumes
        .iter()
        .filter(|l| l.node == node)
        .all(|l| listed.contains(&l.volume.as_str()));
    (!all_listed).then_some(first)
}

/// Whether the group of `node` lets its local volumes' data go (`allowLocalVolumeLoss`).
fn group_allows_loss(v: &View<'_>, node: &str) -> bool {
    v.members
        .iter()
        .find(|m| m.node.is_some_and(|x| x.name == node))
        .is_some_and(|m| m.group.allow_local_volume_loss)
}

/// The first volume whose data only `n` holds that no pod on `n` uses now (a workload
/// scaled to zero, a CronJob between runs), unless it is marked disposable or the
/// group has `allowLocalVolumeLoss`. It pins `n` as a pod's local volume does: nothing
/// voluntary takes the node, and a broken one keeps its VM.
pub fn idle_volume<'v>(v: &'v View<'_>, n: &NodeInfo) -> Option<&'v HeldVolume> {
    if group_allows_loss(v, &n.name) {
        return None;
    }
    let pods = v.pods_on(&n.name);
    let used = |h: &HeldVolume| {
        pods.iter().any(|p| {
            !ignored(v, p)
                && p.namespace == h.claim.0
                && p.claims.iter().any(|c| c.claim == h.claim.1)
        })
    };
    v.held_volumes.get(&n.name)?.iter().find(|h| !used(h))
}

/// Data only `n` holds that the user has not let go, in words: a pod's local volume or
/// a volume no pod uses now. Such a node is never destroyed, not even when broken.
pub fn kept_data(v: &View<'_>, n: &NodeInfo) -> Option<String> {
    let pod = v
        .pods_on(&n.name)
        .iter()
        .find_map(|p| unreleased_volume(v, p).map(|l| (p, l)));
    if let Some((p, l)) = pod {
        return Some(format!("{} {}", p.key(), Blocker::LocalVolume(l.clone())));
    }
    idle_volume(v, n).map(ToString::to_string)
}

/// What keeps `pod` from being evicted for a voluntary removal, if anything.
pub fn blocker(v: &View<'_>, pod: &PodInfo) -> Option<Blocker> {
    if ignored(v, pod) {
        return None;
    }
    if annotation_is(pod, CA_SAFE_TO_EVICT, "false") {
        return Some(Blocker::NotSafeToEvict);
    }
    if annotation_is(pod, KARPENTER_DO_NOT_DISRUPT, "true") {
        return Some(Blocker::DoNotDisrupt);
    }
    // Before safe-to-evict "true", which lets emptyDir data go but not a PersistentVolume.
    if let Some(l) = unreleased_volume(v, pod) {
        return Some(Blocker::LocalVolume(l.clone()));
    }
    let budgets: Vec<&crate::model::PdbInfo> = v.pdbs.iter().filter(|b| b.selects(pod)).collect();
    if budgets.len() > 1 {
        let names: Vec<String> = budgets
            .iter()
            .map(|b| format!("{}/{}", b.namespace, b.name))
            .collect();
        return Some(Blocker::SeveralBudgets(names.join(", ")));
    }
    let pdb = budgets.first().copied();
    if let Some(b) = pdb.filter(|b| b.disruptions_allowed <= 0) {
        return Some(Blocker::Budget(format!("{}/{}", b.namespace, b.name)));
    }
    if annotation_is(pod, CA_SAFE_TO_EVICT, "true") {
        return None;
    }
    if pod.controller_kind.is_none() {
        return Some(Blocker::NoController);
    }
    if pod.local_storage {
        return Some(Blocker::LocalStorage);
    }
    if pod.namespace == "kube-system" && pdb.is_none() {
        return Some(Blocker::KubeSystem);
    }
    None
}

/// Whether the eviction API refuses `pod` for its PodDisruptionBudgets now: one that
/// allows no disruption selects it, or several do.
pub fn pdb_held(v: &View<'_>, pod: &PodInfo) -> bool {
    let mut budgets = v.pdbs.iter().filter(|b| b.selects(pod));
    match (budgets.next(), budgets.next()) {
        (Some(_), Some(_)) => true,
        (Some(b), None) => b.disruptions_allowed <= 0,
        _ => false,
    }
}

/// The node opted out of voluntary removal by annotation.
pub fn opted_out(n: &NodeInfo) -> bool {
    let yes = |k: &str| n.annotations.get(k).is_some_and(|v| v == "true");
    yes(CA_SCALE_DOWN_DISABLED)
        || yes(ANNOTATION_SCALE_DOWN_DISABLED)
        || yes(KARPENTER_DO_NOT_DISRUPT)
}

/// A node nodewright cordoned itself (never one a person cordoned).
pub fn cordoned_by_us(n: &NodeInfo) -> bool {
    n.unschedulable && n.annotations.contains_key(ANNOTATION_CORDONED)
}

/// A schedulable node still carrying nodewright's cordon record: someone uncordoned
/// it. The record must go, or a later cordon by a person would pass for ours.
pub fn stale_cordon(n: &NodeInfo) -> bool {
    !n.unschedulable
        && (n.annotations.contains_key(ANNOTATION_CORDONED)
            || n.annotations.contains_key(ANNOTATION_DISRUPTION)
            || n.annotations
                .contains_key(crate::model::ANNOTATION_CORDONED_AT))
}

/// Why nodewright is removing a node it cordoned; older cordons without the reason
/// annotation count as voluntary.
pub fn disruption_of(n: &NodeInfo) -> DisruptionReason {
    n.annotations
        .get(ANNOTATION_DISRUPTION)
        .and_then(|r| DisruptionReason::parse(r))
        .unwrap_or(DisruptionReason::Underutilized)
}

/// Whether `n`, cordoned by nodewright as `unhealthy`, is broken now: not Ready. Judged
/// again every cycle, never kept from the cordon: a node Ready again drains by the
/// voluntary rules (its VM may still be in error), and one whose VM is fine too has
/// recovered and is given back (see [`recovered`]).
pub fn broken_now(n: &NodeInfo) -> bool {
    disruption_of(n).forced() && !n.ready
}

/// Whether `n`, cordoned by nodewright as `unhealthy`, has recovered: Ready, and its VM
/// (`vm_error`: the cloud's word this cycle) no longer in error. It is given back.
pub fn recovered(n: &NodeInfo, vm_error: bool) -> bool {
    cordoned_by_us(n) && disruption_of(n).forced() && n.ready && !vm_error && !n.deleting
}

/// How many more nodes may be disrupted for `reason` now: the strictest active budget
/// covering it, minus the nodes being disrupted already (cordoned by us or deleting).
pub fn budget_room(v: &View<'_>, reason: DisruptionReason, now: SystemTime) -> u32 {
    let nodes: Vec<&NodeInfo> = v.members.iter().filter_map(|m| m.node).collect();
    let total = nodes.len() as u32;
    let disrupting = nodes
        .iter()
        .filter(|n| cordoned_by_us(n) || n.deleting)
        .count() as u32;
    v.config
        .disruption
        .budgets
        .iter()
        .filter(|b| b.covers(reason))
        .filter(|b| b.active(now))
        .map(|b| b.nodes.allowed(total).saturating_sub(disrupting))
        .min()
        .unwrap_or(u32::MAX)
}

/// Managed nodes that are not Ready, and whether there are so many that nothing may be
/// disrupted (more than `okUnreadyCount` and more than `maxUnreadyPercentage`).
pub fn unready_guard(v: &View<'_>) -> Option<(u32, u32)> {
    let nodes: Vec<&NodeInfo> = v.members.iter().filter_map(|m| m.node).collect();
    let total = nodes.len() as u32;
    let unready = nodes.iter().filter(|n| !n.ready).count() as u32;
    let h = &v.config.health;
    let tripped = unready > h.ok_unready_count
        && u64::from(unready) * 100 > u64::from(h.max_unready_percentage) * u64::from(total);
    tripped.then_some((unready, total))
}

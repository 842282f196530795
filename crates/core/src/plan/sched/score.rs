//! How the scheduler ranks the nodes a pod passes (kube-scheduler's score plugins, the
//! two that decide here): NodeResourcesFit's LeastAllocated (weight 1) and
//! TaintToleration (weight 3), which prefers nodes with fewer `PreferNoSchedule` taints
//! the pod does not tolerate. Such a taint never filters a node out; with the weights,
//! a node without one wins over any tainted node. The simulated schedulers rank with
//! this; the planner's packing does not rank.

use super::Slot;
use crate::model::PodInfo;

/// TaintToleration's weight in kube-scheduler's default profile (NodeResourcesFit has 1).
const TAINT_TOLERATION_WEIGHT: f64 = 3.0;
/// The highest score a plugin gives a node.
const MAX_NODE_SCORE: f64 = 100.0;

/// The `PreferNoSchedule` taints of `slot` that `pod` does not tolerate.
pub fn intolerable_preferences(pod: &PodInfo, slot: &Slot<'_>) -> usize {
    slot.taints
        .iter()
        .filter(|t| t.effect == "PreferNoSchedule")
        .filter(|t| !pod.tolerations.iter().any(|tol| tol.tolerates(t)))
        .count()
}

/// A node that passed every filter, with what the score plugins look at.
#[derive(Debug, Clone, Copy)]
pub struct Feasible {
    pub slot: usize,
    /// NodeResourcesFit LeastAllocated: the mean free share of CPU and memory after the
    /// pod, 0 to 1.
    pub free_share: f64,
    /// [`intolerable_preferences`] of the node.
    pub intolerable: usize,
}

/// The slot the scheduler picks among `nodes`: the highest weighted sum of the scores,
/// the first such node on a tie. TaintToleration normalizes its count against the most
/// any feasible node has, reversed (fewest taints, highest score).
pub fn pick(nodes: &[Feasible]) -> Option<usize> {
    let most = nodes.iter().map(|n| n.intolerable).max().unwrap_or(0);
    let score = |n: &Feasible| {
        let taints = if most == 0 {
            MAX_NODE_SCORE
        } else {
            MAX_NODE_SCORE * (1.0 - n.intolerable as f64 / most as f64)
        };
        n.free_share * MAX_NODE_SCORE + TAINT_TOLERATION_WEIGHT * taints
    };
    let mut best: Option<(f64, usize)> = None;
    for n in nodes {
        let s = score(n);
        if best.is_none_or(|(b, _)| s > b) {
            best = Some((s, n.slot));
        }
    }
    best.map(|(_, i)| i)
}

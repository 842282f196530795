//! Where kube-scheduler's default profile puts a pod among the nodes that pass every
//! filter: the score plugins that weigh CPU and memory and soft taints, with their
//! default weights, in integers on the 0–100 scale as the real scheduler computes them.
//! Shared by the what-if's cluster and the simulated API server's scheduler.
//!
//! - **NodeResourcesFit** (weight 1), scoring strategy `LeastAllocated` (the default)
//!   or `MostAllocated`: per resource (CPU, memory; weight 1 each), with the pod's
//!   request added to what the node's pods request, `(allocatable − requested) × 100 /
//!   allocatable` (0 when over), or `requested × 100 / allocatable` (capped at 100);
//!   the integer mean of the two.
//! - **NodeResourcesBalancedAllocation** (weight 1): `(1 − σ) × 100` where σ is the
//!   standard deviation of the requested shares of CPU and memory with the pod (each
//!   capped at 1); for two resources `|cpu − mem| / 2`.
//! - **TaintToleration** (weight 3): the `PreferNoSchedule` taints of the node the
//!   pod does not tolerate, counted, then normalized over the feasible nodes in
//!   reverse: `100 − count × 100 / max count` (all 100 when no node has one).
//!
//! Left out: ImageLocality (the what-if pulls no images), NodeAffinity's preferred terms,
//! InterPodAffinity and PodTopologySpread scoring (the workload has none), and the
//! non-zero request defaults kube-scheduler scores a pod without requests with (100m,
//! 200 MiB). Ties go to the first node in name order where the real scheduler picks one
//! of the tied at random: a replay is the same every time.

use crate::model::PodInfo;
use crate::plan::sched::{Model, Slot};

/// The highest score a plugin gives a node.
const MAX_NODE_SCORE: i64 = 100;
const FIT_WEIGHT: i64 = 1;
const BALANCED_WEIGHT: i64 = 1;
const TAINT_WEIGHT: i64 = 3;

/// NodeResourcesFit's scoring strategy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scoring {
    /// kube-scheduler's default: spread pods, the emptiest node first.
    #[default]
    LeastAllocated,
    /// Bin packing: the fullest node that fits first.
    MostAllocated,
}

impl Scoring {
    /// From `--scoring`: `least-allocated` or `most-allocated` (any case).
    pub fn parse(text: &str) -> Option<Scoring> {
        match text.trim().to_ascii_lowercase().as_str() {
            "least-allocated" | "leastallocated" => Some(Scoring::LeastAllocated),
            "most-allocated" | "mostallocated" => Some(Scoring::MostAllocated),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Scoring::LeastAllocated => "least-allocated",
            Scoring::MostAllocated => "most-allocated",
        }
    }
}

/// (requested with the pod, allocatable) of CPU and of memory.
fn requested(slot: &Slot<'_>, pod: &PodInfo) -> [(u64, u64); 2] {
    [
        (
            slot.used.cpu.saturating_add(pod.requests.cpu),
            slot.allocatable.cpu,
        ),
        (
            slot.used.memory.saturating_add(pod.requests.memory),
            slot.allocatable.memory,
        ),
    ]
}

/// NodeResourcesFit's score of `slot` for `pod`.
pub fn fit_score(slot: &Slot<'_>, pod: &PodInfo, scoring: Scoring) -> i64 {
    let (mut sum, mut weights) = (0i128, 0i128);
    for (req, alloc) in requested(slot, pod) {
        if alloc == 0 {
            continue;
        }
        let (req, alloc) = (i128::from(req), i128::from(alloc));
        let max = i128::from(MAX_NODE_SCORE);
        let score = match scoring {
            Scoring::LeastAllocated if req > alloc => 0,
            Scoring::LeastAllocated => (alloc - req) * max / alloc,
            Scoring::MostAllocated => req.min(alloc) * max / alloc,
        };
        sum += score;
        weights += 1;
    }
    if weights == 0 {
        return 0;
    }
    i64::try_from(sum / weights).unwrap_or(0)
}

/// NodeResourcesBalancedAllocation's score of `slot` for `pod`.
pub fn balanced_score(slot: &Slot<'_>, pod: &PodInfo) -> i64 {
    let shares: Vec<f64> = requested(slot, pod)
        .iter()
        .filter(|(_, alloc)| *alloc > 0)
        .map(|(req, alloc)| (*req as f64 / *alloc as f64).min(1.0))
        .collect();
    let std = match shares.as_slice() {
        [a, b] => ((a - b) / 2.0).abs(),
        _ => 0.0,
    };
    ((1.0 - std) * MAX_NODE_SCORE as f64) as i64
}

/// How many `PreferNoSchedule` taints of `slot` the pod does not tolerate.
pub fn intolerable_soft_taints(slot: &Slot<'_>, pod: &PodInfo) -> i64 {
    slot.taints
        .iter()
        .filter(|t| t.effect == "PreferNoSchedule")
        .filter(|t| {
            !pod.tolerations.iter().any(|tol| {
                tol.effect
                    .as_deref()
                    .is_none_or(|e| e.is_empty() || e == "PreferNoSchedule")
                    && tol.tolerates(t)
            })
        })
        .count() as i64
}

/// The node (slot index, one of `feasible`, the nodes that passed every filter) the
/// default scheduler puts `pod` on: the highest weighted sum of the scores; the first of
/// the tied.
pub fn pick(model: &Model, pod: &PodInfo, feasible: &[usize], scoring: Scoring) -> Option<usize> {
    let counts: Vec<i64> = feasible
        .iter()
        .map(|&i| intolerable_soft_taints(&model.slots[i], pod))
        .collect();
    let max_count = counts.iter().copied().max().unwrap_or(0);
    let mut best: Option<(i64, usize)> = None;
    for (&i, count) in feasible.iter().zip(counts) {
        let slot = &model.slots[i];
        let taint = if max_count == 0 {
            MAX_NODE_SCORE
        } else {
            MAX_NODE_SCORE - count * MAX_NODE_SCORE / max_count
        };
        let score = FIT_WEIGHT * fit_score(slot, pod, scoring)
            + BALANCED_WEIGHT * balanced_score(slot, pod)
            + TAINT_WEIGHT * taint;
        if best.is_none_or(|(s, _)| score > s) {
            best = Some((score, i));
        }
    }
    best.map(|(_, i)| i)
}

#[cfg(test)]
mod tests;

//! Why scale-down keeps a node: every managed node in service that scale-down looked at
//! and did not take gets one reason with a stable code, as Cluster Autoscaler reports its
//! unremovable nodes. Computed by the planner (pure), shown by `plan`, `plan --json`, the
//! status ConfigMap and `nodewright_unremovable_nodes{reason}`.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::model::PodRef;

pub use crate::model::KeptReason;

/// A node scale-down keeps, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Unremovable {
    pub node: String,
    pub group: String,
    pub reason: KeptReason,
    /// The reason in words, with the figures and settings behind it.
    pub detail: String,
    /// The pod that blocks it ([`KeptReason::BlockedByPod`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod: Option<PodRef>,
    /// Why that pod cannot be evicted, as a stable code (`pdb`, `do-not-disrupt`, ...).
    #[serde(rename = "podReason", skip_serializing_if = "Option::is_none")]
    pub pod_reason: Option<String>,
}

impl Unremovable {
    /// The reason as `plan` shows it: the code, and `(no pod)` for a local volume no
    /// pod uses now (the detail names the volume and its claim).
    pub fn label(&self) -> String {
        match (self.reason, &self.pod) {
            (KeptReason::LocalVolume, None) => format!("{} (no pod)", self.reason.as_str()),
            _ => self.reason.as_str().to_string(),
        }
    }

    pub fn new(node: &str, group: &str, reason: KeptReason, detail: impl Into<String>) -> Self {
        Unremovable {
            node: node.to_string(),
            group: group.to_string(),
            reason,
            detail: detail.into(),
            pod: None,
            pod_reason: None,
        }
    }
}

/// Scale-down's screening of the nodes in service, once per plan: the unneeded ones as
/// (member index, empty, utilization), in removal order, and every other one with why.
#[derive(Debug, Default)]
pub(in crate::plan) struct Screened {
    pub unneeded: Vec<(usize, bool, f64)>,
    /// Member indices of the nodes whose pods request less than
    /// `scaleDown.utilizationThreshold` (and that minSize, an opt-out or the targets do
    /// not keep): the unneeded clock runs on these, from when they fell under it.
    pub under_threshold: Vec<usize>,
    pub kept: Vec<Unremovable>,
    /// Member indices that passed the checks without the scheduling model, when the
    /// screening skipped it.
    pub unchecked: Vec<usize>,
}

/// A bounded view for the status ConfigMap: counts per reason and the first nodes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct UnremovableSummary {
    /// How many nodes are kept for each reason (only reasons with nodes).
    pub counts: BTreeMap<KeptReason, usize>,
    /// The first nodes, in the planner's order.
    pub nodes: Vec<Unremovable>,
    /// How many more were left out of `nodes`.
    #[serde(skip_serializing_if = "is_zero")]
    pub more: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// Counts per reason, every reason present (zero where none), for the metric.
pub fn counts(list: &[Unremovable]) -> BTreeMap<KeptReason, usize> {
    let mut out: BTreeMap<KeptReason, usize> = KeptReason::ALL.iter().map(|r| (*r, 0)).collect();
    for u in list {
        *out.entry(u.reason).or_insert(0) += 1;
    }
    out
}

/// The counts and the first `shown` nodes of `list`.
pub fn summary(list: &[Unremovable], shown: usize) -> UnremovableSummary {
    UnremovableSummary {
        counts: counts(list).into_iter().filter(|(_, n)| *n > 0).collect(),
        nodes: list.iter().take(shown).cloned().collect(),
        more: list.len().saturating_sub(shown),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_unique_and_every_reason_is_listed() {
        let codes: std::collections::BTreeSet<&str> =
            KeptReason::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(codes.len(), KeptReason::ALL.len());
        for r in KeptReason::ALL {
            let json = serde_json::to_value(r).expect("serializes");
            assert_eq!(json, serde_json::json!(r.as_str()));
        }
    }

    #[test]
    fn the_summary_counts_every_node_and_lists_the_first_ones() {
        let list: Vec<Unremovable> = (0..5)
            .map(|i| {
                let reason = if i < 3 {
                    KeptReason::NotUnderutilized
                } else {
                    KeptReason::GroupAtMinSize
                };
                Unremovable::new(&format!("n{i}"), "g", reason, "x")
            })
            .collect();
        let s = summary(&list, 2);
        assert_eq!(s.counts.get(&KeptReason::NotUnderutilized), Some(&3));
        assert_eq!(s.counts.get(&KeptReason::GroupAtMinSize), Some(&2));
        assert_eq!(s.counts.len(), 2);
        assert_eq!(s.nodes.len(), 2);
        assert_eq!(s.more, 3);
        assert_eq!(counts(&list).len(), KeptReason::ALL.len());
    }
}

//! The status ConfigMap the loop writes after each cycle (`data.status`, YAML): who
//! leads, the health, the node summary, the kept nodes and the last action with its
//! decision, every list bounded so the ConfigMap stays far below the API server's 1 MiB
//! whatever the cluster's size. Writing it is [`crate::cluster::status::write_status`].

use std::collections::BTreeMap;

use serde::Serialize;

use crate::act::Outcome;
use crate::cluster::status::write_status;
use crate::model::ObjectRef;
use crate::plan::summary::Summary;
use crate::plan::unremovable::UnremovableSummary;
use crate::plan::{Action, Decision};

/// What one cycle leaves on the status ConfigMap.
pub(super) struct Status<'a> {
    pub leader: &'a str,
    pub dry_run: bool,
    pub summary: &'a Summary,
    pub decision: &'a Decision,
    pub outcome: &'a Outcome,
    /// The error acting returned, if it failed.
    pub error: Option<String>,
}

impl Status<'_> {
    /// Renders and writes the status ConfigMap `ns/name`; a failure is logged, never
    /// stops the loop.
    pub async fn write(self, client: &kube::Client, ns: &str, name: &str) {
        // Every list is bounded: the full ones grow with the cluster;
        // `unremovable` holds its bounded summary.
        let doc = StatusDoc {
            time: k8s_openapi::jiff::Timestamp::now().to_string(),
            leader: self.leader,
            health: if self.error.is_none() {
                "Healthy"
            } else {
                "Degraded"
            },
            dry_run: self.dry_run,
            summary: self.summary,
            unremovable: crate::plan::unremovable::summary(
                &self.decision.unremovable,
                STATUS_UNREMOVABLE_SHOWN,
            ),
            last_action: LastAction {
                kind: self.decision.action.kind(),
                description: self.decision.action.to_string(),
                decision: StatusDecision::of(self.decision),
                done: &self.outcome.done,
                deferred: &self.outcome.deferred,
                error: self.error,
            },
        };
        match crate::yaml::to_string(&doc) {
            Ok(text) => {
                let data = BTreeMap::from([("status".to_string(), text)]);
                if let Err(e) = write_status(client, ns, name, data).await {
                    tracing::warn!(error = %e, "could not write the status ConfigMap");
                }
            }
            Err(e) => tracing::warn!(error = %e, "could not render the status"),
        }
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct StatusDoc<'a> {
    time: String,
    leader: &'a str,
    health: &'a str,
    dry_run: bool,
    summary: &'a Summary,
    /// Nodes scale-down keeps: counts per reason and the first few (bounded).
    unremovable: UnremovableSummary,
    last_action: LastAction<'a>,
}

/// Nodes of the unremovable list the status ConfigMap names; the counts cover all.
const STATUS_UNREMOVABLE_SHOWN: usize = 20;

/// Pending pods, and objects of each reason, the status ConfigMap names; counts cover
/// all. A real API server refuses a ConfigMap over 1 MiB, which the full lists passed
/// from about 6,700 pending pods.
const STATUS_LIST_SHOWN: usize = 20;

/// The decision as the status ConfigMap holds it: bounded whatever the cluster's size.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct StatusDecision<'a> {
    action: &'a Action,
    reasons: Vec<StatusReason<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    notes: Vec<StatusReason<'a>>,
    /// Pods the scheduler could not place, per bucket.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pending_counts: BTreeMap<&'static str, usize>,
    /// The first of them, with where each goes or why it cannot.
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    pending: &'a [crate::plan::PendingPod],
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct StatusReason<'a> {
    code: crate::plan::ReasonCode,
    message: &'a str,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    objects: &'a [ObjectRef],
    /// Objects beyond those named.
    #[serde(skip_serializing_if = "is_zero")]
    more_objects: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl<'a> StatusDecision<'a> {
    fn of(d: &'a Decision) -> Self {
        let reason = |r: &'a crate::plan::Reason| StatusReason {
            code: r.code,
            message: &r.message,
            objects: &r.objects[..r.objects.len().min(STATUS_LIST_SHOWN)],
            more_objects: r.objects.len().saturating_sub(STATUS_LIST_SHOWN),
        };
        StatusDecision {
            action: &d.action,
            reasons: d.reasons.iter().map(reason).collect(),
            notes: d.notes.iter().map(reason).collect(),
            pending_counts: d
                .bucket_counts()
                .into_iter()
                .filter(|(_, n)| *n > 0)
                .map(|(b, n)| (b.as_str(), n))
                .collect(),
            pending: &d.pending[..d.pending.len().min(STATUS_LIST_SHOWN)],
        }
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct LastAction<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    description: String,
    decision: StatusDecision<'a>,
    done: &'a [String],
    deferred: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::PodRef;
    use crate::plan::{Bucket, PendingPod, Reason, ReasonCode};

    /// The status ConfigMap grew about 156 bytes per pending pod, and a real API server
    /// refuses one over 1 MiB (about 6,700 pending pods): its decision is now bounded.
    #[test]
    fn the_status_decision_stays_small_with_ten_thousand_pending_pods() {
        let pods: Vec<PodRef> = (0..10_000)
            .map(|i| PodRef {
                namespace: "default".into(),
                name: format!("web-{i:05}-abcdefghij"),
            })
            .collect();
        let pending = pods
            .iter()
            .enumerate()
            .map(|(i, p)| PendingPod {
                pod: p.clone(),
                bucket: if i % 2 == 0 {
                    Bucket::ScalingUp
                } else {
                    Bucket::NoCapacity
                },
                detail: "fits no group: group web is at maxSize 3".into(),
            })
            .collect();
        let objects: Vec<ObjectRef> = pods
            .iter()
            .map(|p| ObjectRef {
                kind: "Pod".into(),
                namespace: Some(p.namespace.clone()),
                name: p.name.clone(),
            })
            .collect();
        let d = Decision {
            action: Action::ScaleUp {
                group: "web".into(),
                count: 3,
                size: None,
            },
            reasons: vec![Reason::new(
                ReasonCode::UnschedulablePods,
                "10000 pod(s) cannot be scheduled",
            )
            .about(objects.clone())],
            notes: vec![
                Reason::new(ReasonCode::GroupAtMaxSize, "group web is at maxSize 3").about(objects),
            ],
            pending,
            unremovable: Vec::new(),
        };
        let full = crate::yaml::to_string(&d).expect("yaml");
        let text = crate::yaml::to_string(&StatusDecision::of(&d)).expect("yaml");
        assert!(
            full.len() > 1 << 20,
            "the unbounded decision: {} B",
            full.len()
        );
        assert!(
            text.len() < 16 << 10,
            "the status decision: {} B",
            text.len()
        );
        assert!(
            text.contains("scaling-up: 5000") && text.contains("no-capacity: 5000"),
            "{text}"
        );
        assert!(text.contains("moreObjects: 9980"), "{text}");
        assert!(
            text.contains("web-00019-") && !text.contains("web-00020-"),
            "{text}"
        );
    }
}

//! Which Kubernetes Events a cycle's decision and result produce. Pure, so the mapping
//! is tested without an API server; posting is [`crate::cluster::events`].

use std::collections::HashSet;

use super::Outcome;
use crate::cluster::events::EventSpec;
use crate::model::ObjectRef;
use crate::plan::{Action, Bucket, Decision, Reason, ReasonCode};

/// Cluster Autoscaler's name for "this pod did not make nodes appear", which users and
/// their alerts already know.
const NOT_TRIGGERED: &str = "NotTriggerScaleUp";

fn ev(object: ObjectRef, reason: &str, message: String, warning: bool) -> EventSpec {
    EventSpec {
        object,
        reason: reason.to_string(),
        message,
        warning,
    }
}

/// Events for the decision and what acting on it did. Every pod nothing can host now
/// gets a `NotTriggerScaleUp` with the reason (a `NoGroupFits` note's per-group reasons,
/// or its bucket's detail: groups at maxSize, limits, backoff); a pod the scheduler refuses
/// but the model places gets `ModelMismatch`; the pods a scale-up is for get
/// `TriggeredScaleUp` (or `ActionFailed`). At most one Event per object and reason.
///
/// `status` is the status ConfigMap, if there is one: what concerns no Kubernetes object
/// (a VM that failed before it got a node, with its cloud's error text; a provider that
/// cannot be listed) is posted there,
/// as Cluster Autoscaler posts on its own status ConfigMap, so `kubectl describe` of it
/// shows why a scale-up never arrived.
pub fn events_for(
    decision: &Decision,
    result: Result<&Outcome, &str>,
    status: Option<&ObjectRef>,
) -> Vec<EventSpec> {
    let mut seen = HashSet::new();
    let mut out = all_events(decision, result);
    if let Some(status) = status {
        out.extend(status_events(decision, status));
    }
    out.retain(|e| {
        seen.insert((
            e.object.kind.clone(),
            e.object.namespace.clone(),
            e.object.name.clone(),
            e.reason.clone(),
        ))
    });
    out
}

fn all_events(decision: &Decision, result: Result<&Outcome, &str>) -> Vec<EventSpec> {
    let mut out = Vec::new();
    for note in &decision.notes {
        let (reason, warning) = match note.code {
            ReasonCode::NoGroupFits => (NOT_TRIGGERED, true),
            ReasonCode::ModelMismatch => ("ModelMismatch", true),
            ReasonCode::DrainBlocked => ("DrainBlocked", true),
            _ => continue,
        };
        for o in &note.objects {
            out.push(ev(o.clone(), reason, note.message.clone(), warning));
        }
    }
    // Pods the notes name come first, with the per-group reasons; these add the rest.
    for p in &decision.pending {
        let object = ObjectRef {
            kind: "Pod".into(),
            namespace: Some(p.pod.namespace.clone()),
            name: p.pod.name.clone(),
        };
        // Every bucket shows on the pod: a Warning when nothing can host it, a Normal
        // Event saying what it waits for otherwise (the scale-up's own Event covers
        // scaling-up pods).
        match p.bucket {
            Bucket::NoCapacity => out.push(ev(
                object,
                NOT_TRIGGERED,
                format!("pod didn't trigger scale-up: {}", p.detail),
                true,
            )),
            Bucket::CapacityComing => out.push(ev(
                object,
                "CapacityComing",
                format!("waiting for capacity on its way: {}", p.detail),
                false,
            )),
            Bucket::WillSchedule => out.push(ev(
                object,
                "WillSchedule",
                format!(
                    "nodewright's model places it on an existing node: {}",
                    p.detail
                ),
                false,
            )),
            Bucket::ScalingUp => {}
        }
    }
    let outcome = match result {
        Ok(o) => o,
        Err(error) => {
            let failing: Vec<ObjectRef> = decision
                .action
                .objects()
                .into_iter()
                .chain(
                    decision
                        .reasons
                        .iter()
                        .filter(|r| r.code == ReasonCode::UnschedulablePods)
                        .flat_map(|r| r.objects.iter().cloned()),
                )
                .collect();
            for o in failing {
                out.push(ev(
                    o,
                    "ActionFailed",
                    format!("{} failed: {error}", decision.action),
                    true,
                ));
            }
            return out;
        }
    };
    match &decision.action {
        Action::ScaleUp { .. } | Action::StartWarm { .. } => {
            let (group, count) = decision.action.scale_up().unwrap_or_default();
            for r in decision
                .reasons
                .iter()
                .filter(|r| r.code == ReasonCode::UnschedulablePods)
            {
                for o in &r.objects {
                    out.push(ev(
                        o.clone(),
                        "TriggeredScaleUp",
                        format!("pod triggered scale-up: group {group} +{count}"),
                        false,
                    ));
                }
            }
        }
        Action::RemoveStartupTaint { nodes } => {
            for node in nodes {
                out.push(ev(
                    ObjectRef::node(node),
                    "StartupTaintRemoved",
                    "node is Ready; startup taint removed, pods may schedule".into(),
                    false,
                ));
            }
        }
        Action::Cordon {
            nodes,
            reason,
            disruption,
            ..
        } => {
            for node in nodes {
                out.push(ev(
                    ObjectRef::node(node),
                    "Cordoned",
                    format!("cordoned by nodewright ({}): {reason}", disruption.as_str()),
                    false,
                ));
            }
        }
        Action::Uncordon { nodes, reason } => {
            for node in nodes {
                out.push(ev(
                    ObjectRef::node(node),
                    "Uncordoned",
                    format!("given back by nodewright: {reason}"),
                    true,
                ));
            }
        }
        Action::ReuseCordoned { nodes } => {
            for node in nodes {
                out.push(ev(
                    ObjectRef::node(node),
                    "Reused",
                    "uncordoned by nodewright: pending pods need its room, so it stays instead of a new VM".into(),
                    false,
                ));
            }
        }
        Action::Drain { nodes, .. } => {
            let mut msg = format!("evicted {} pod(s)", outcome.done.len());
            if !outcome.deferred.is_empty() {
                msg.push_str(&format!("; {}", outcome.deferred.join("; ")));
            }
            for node in nodes {
                out.push(ev(
                    ObjectRef::node(node),
                    "Draining",
                    msg.clone(),
                    !outcome.deferred.is_empty(),
                ));
            }
        }
        Action::DeleteNodes { nodes } => {
            for t in nodes {
                out.push(ev(
                    ObjectRef::node(&t.node),
                    "NodeDeleted",
                    if t.park {
                        format!(
                            "cordoned node deleted, its VM {} stopped into the warm pool",
                            t.server.id
                        )
                    } else {
                        format!("cordoned node deleted with its VM {}", t.server.id)
                    },
                    false,
                ));
            }
        }
        Action::DeletePodsPastLimit { nodes, pods } => {
            let names: Vec<String> = pods.iter().map(|p| p.to_string()).collect();
            for node in nodes {
                out.push(ev(
                    ObjectRef::node(node),
                    "Draining",
                    format!(
                        "drain.terminationGracePeriod passed: deleting pod(s) a PodDisruptionBudget holds, each with its grace period: {}",
                        names.join(", ")
                    ),
                    true,
                ));
            }
        }
        Action::DeleteNodesWithoutVm { nodes } => {
            for node in nodes {
                out.push(ev(
                    ObjectRef::node(node),
                    "NodeDeleted",
                    "NotReady past health.unhealthyAfter and its VM is gone (listed twice); node deleted so its pods are recreated elsewhere".into(),
                    true,
                ));
            }
        }
        Action::RestartVanished { servers, .. } => {
            for s in servers {
                out.push(ev(
                    ObjectRef::node(&s.name),
                    "VmRestarted",
                    format!(
                        "the Node of VM {} ({}) was gone; the VM was restarted once so its kubelet registers the Node again (a kubelet registers only when it starts)",
                        s.name, s.id
                    ),
                    true,
                ));
            }
        }
        Action::StopUnreachable { servers, .. } => {
            for s in servers {
                out.push(ev(
                    ObjectRef::node(&s.name),
                    "VmStopped",
                    format!(
                        "NotReady past health.unhealthyAfter holding data only it can reach; its VM {} ({}) was stopped (unreachableWithLocalData: stop) and is kept, never deleted: start it once the host is back, or let the data go yourself",
                        s.name, s.id
                    ),
                    true,
                ));
            }
        }
        Action::MarkUnneeded { .. } | Action::SoftTaint { .. } | Action::ForgetCordon { .. } => {}
        Action::DeleteServers { .. } => {
            for r in &decision.reasons {
                for o in &r.objects {
                    out.push(ev(o.clone(), "ProvisioningFailed", r.message.clone(), true));
                }
            }
        }
        Action::PullImages { node, images, .. } => out.push(ev(
            ObjectRef::node(node),
            "PullingImages",
            format!("warming image cache: {}", images.join(", ")),
            false,
        )),
        Action::GiveUpPulls { node, .. } => {
            for r in &decision.reasons {
                out.push(ev(
                    ObjectRef::node(node),
                    "ImageUnpullable",
                    r.message.clone(),
                    true,
                ));
            }
        }
        Action::None
        | Action::DeletePods { .. }
        | Action::FillWarmPool { .. }
        | Action::ParkWarm { .. }
        | Action::MarkJoined { .. }
        | Action::RelabelHash { .. }
        | Action::FinishJoin { .. } => {}
    }
    out
}

/// Warnings on the status ConfigMap for what concerns no Kubernetes object: VMs the
/// decision removes for failing before they had a node, and provisioning failures a
/// provider found that no server carries (`ProvisioningFailed`), and providers that could
/// not be listed (`ProviderUnavailable`), and VMs of a group the config lacks
/// (`UnknownGroupVms`). One Event per reason, the messages joined:
/// Events are deduplicated by object and reason, so separate ones would hide all but the
/// first.
fn status_events(decision: &Decision, status: &ObjectRef) -> Vec<EventSpec> {
    let nodeless = |r: &&Reason| r.objects.is_empty();
    let removed = decision
        .reasons
        .iter()
        .filter(|_| matches!(decision.action, Action::DeleteServers { .. }))
        .filter(nodeless)
        .filter(|r| r.code.is_provisioning_failure());
    let found = decision
        .notes
        .iter()
        .filter(nodeless)
        .filter(|r| r.code == ReasonCode::ServerError);
    let unavailable = decision
        .notes
        .iter()
        .filter(nodeless)
        .filter(|r| r.code == ReasonCode::ProviderUnavailable);
    let unknown_group = decision
        .notes
        .iter()
        .filter(|r| r.code == ReasonCode::UnknownGroupVms);
    let lost = decision
        .notes
        .iter()
        .filter(|r| r.code == ReasonCode::NodeLostAfterRestart);
    let joined = |rs: Vec<&Reason>| -> Option<String> {
        (!rs.is_empty()).then(|| {
            rs.iter()
                .map(|r| r.message.as_str())
                .collect::<Vec<_>>()
                .join("; ")
        })
    };
    let mut out = Vec::new();
    if let Some(m) = joined(removed.chain(found).collect()) {
        out.push(ev(status.clone(), "ProvisioningFailed", m, true));
    }
    if let Some(m) = joined(unavailable.collect()) {
        out.push(ev(status.clone(), "ProviderUnavailable", m, true));
    }
    if let Some(m) = joined(unknown_group.collect()) {
        out.push(ev(status.clone(), "UnknownGroupVms", m, true));
    }
    if let Some(m) = joined(lost.collect()) {
        out.push(ev(status.clone(), "NodeLostAfterRestart", m, true));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{PodRef, ServerRef};
    use crate::plan::{PendingPod, Reason};

    fn pod(name: &str) -> ObjectRef {
        ObjectRef {
            kind: "Pod".into(),
            namespace: Some("default".into()),
            name: name.into(),
        }
    }

    fn pending(name: &str, bucket: Bucket, detail: &str) -> PendingPod {
        PendingPod {
            pod: PodRef {
                namespace: "default".into(),
                name: name.into(),
            },
            bucket,
            detail: detail.into(),
        }
    }

    fn on<'e>(events: &'e [EventSpec], name: &str) -> Vec<&'e EventSpec> {
        events.iter().filter(|e| e.object.name == name).collect()
    }

    #[test]
    fn every_pod_nothing_can_host_gets_one_event_and_mismatches_are_named() {
        let decision = Decision {
            action: Action::ScaleUp {
                group: "web".into(),
                count: 1, size: None },
            reasons: vec![Reason::new(ReasonCode::UnschedulablePods, "1 pod(s) ...")
                .about([pod("mismatched")])],
            notes: vec![
                Reason::new(
                    ReasonCode::NoGroupFits,
                    "no node group can host default/huge: group web: needs cpu 12, a node has 8",
                )
                .about([pod("huge")]),
                Reason::new(
                    ReasonCode::ModelMismatch,
                    "the scheduler calls default/mismatched unschedulable, but by nodewright's model it fits n1",
                )
                .about([pod("mismatched")]),
                // Past the named ones, the rest are only counted in a note.
                Reason::new(ReasonCode::NoGroupFits, "no node group can host 1 more pod(s): default/unnamed"),
            ],
            pending: vec![
                pending("huge", Bucket::NoCapacity, "group web: needs cpu 12, a node has 8"),
                pending("unnamed", Bucket::NoCapacity, "group web: needs cpu 12, a node has 8"),
                pending("maxed", Bucket::NoCapacity, "group web is at maxSize 3"),
                pending("mismatched", Bucket::ScalingUp, "new node of group web"),
                pending("coming", Bucket::CapacityComing, "fits web-x, still provisioning"),
                pending("soon", Bucket::WillSchedule, "fits n1"),
            ],
            unremovable: Vec::new(),
        };
        let events = events_for(&decision, Ok(&Outcome::default()), None);

        let huge = on(&events, "huge");
        assert_eq!(huge.len(), 1, "one event, not one per source: {events:?}");
        assert_eq!(huge[0].reason, "NotTriggerScaleUp");
        assert!(huge[0].warning);
        assert!(huge[0]
            .message
            .contains("group web: needs cpu 12, a node has 8"));

        for name in ["unnamed", "maxed"] {
            let e = on(&events, name);
            assert_eq!(e.len(), 1, "{name}: {events:?}");
            assert_eq!(e[0].reason, "NotTriggerScaleUp");
            assert_eq!(e[0].object.namespace.as_deref(), Some("default"));
        }
        assert!(on(&events, "maxed")[0].message.contains("at maxSize 3"));

        let mismatched: Vec<&str> = on(&events, "mismatched")
            .iter()
            .map(|e| e.reason.as_str())
            .collect();
        assert_eq!(mismatched, ["ModelMismatch", "TriggeredScaleUp"]);

        let coming = on(&events, "coming");
        assert_eq!(coming.len(), 1, "{events:?}");
        assert_eq!(coming[0].reason, "CapacityComing");
        assert!(!coming[0].warning);
        assert_eq!(on(&events, "soon")[0].reason, "WillSchedule");
    }

    #[test]
    fn a_failed_scale_up_still_tells_unhostable_pods_why() {
        let decision = Decision {
            action: Action::ScaleUp {
                group: "web".into(),
                count: 1,
                size: None,
            },
            reasons: vec![Reason::new(ReasonCode::UnschedulablePods, "...").about([pod("a")])],
            notes: vec![],
            pending: vec![
                pending("a", Bucket::ScalingUp, "new node of group web"),
                pending("b", Bucket::NoCapacity, "group gpu is at maxSize 1"),
            ],
            unremovable: Vec::new(),
        };
        let events = events_for(&decision, Err("quota exceeded"), None);
        assert_eq!(on(&events, "a")[0].reason, "ActionFailed");
        assert_eq!(on(&events, "b")[0].reason, "NotTriggerScaleUp");
    }

    fn status_cm() -> ObjectRef {
        ObjectRef {
            kind: "ConfigMap".into(),
            namespace: Some("nodewright".into()),
            name: "nodewright-status".into(),
        }
    }

    /// Regression: a VM that went to ERROR before it had a node (Nova's fault message) or
    /// timed out nodeless produced no Event at all, since Events need an object.
    #[test]
    fn a_vm_failing_before_it_has_a_node_is_reported_on_the_status_configmap() {
        let server = |n: &str| ServerRef {
            provider: "openstack".into(),
            id: format!("id-{n}"),
            name: n.into(),
            group: "web".into(),
        };
        let decision = Decision {
            action: Action::DeleteServers {
                servers: vec![server("web-a"), server("web-b"), server("web-c")],
                nodes: vec!["web-c".into()],
            },
            reasons: vec![
                Reason::new(
                    ReasonCode::ServerError,
                    "VM web-a reports an error state: No valid host was found.",
                ),
                Reason::new(
                    ReasonCode::ProvisionTimeout,
                    "VM web-b has no node of ours after 10m",
                ),
                Reason::new(
                    ReasonCode::ProvisionTimeout,
                    "node web-c is not Ready 10m after",
                )
                .about([ObjectRef::node("web-c")]),
            ],
            notes: vec![],
            pending: vec![],
            unremovable: Vec::new(),
        };
        let events = events_for(&decision, Ok(&Outcome::default()), Some(&status_cm()));
        let on_cm: Vec<&EventSpec> = events.iter().filter(|e| e.object == status_cm()).collect();
        assert_eq!(on_cm.len(), 1, "{events:?}");
        assert_eq!(on_cm[0].reason, "ProvisioningFailed");
        assert!(on_cm[0].warning);
        assert!(
            on_cm[0].message.contains("No valid host was found."),
            "{on_cm:?}"
        );
        assert!(on_cm[0].message.contains("VM web-b"), "{on_cm:?}");
        assert!(
            !on_cm[0].message.contains("web-c"),
            "web-c has its own: {on_cm:?}"
        );
        assert_eq!(on(&events, "web-c")[0].reason, "ProvisioningFailed");
        // Without a status ConfigMap there is nowhere to put it.
        let events = events_for(&decision, Ok(&Outcome::default()), None);
        assert!(events.iter().all(|e| e.object.kind == "Node"), "{events:?}");
    }

    /// Regression: a clone a process gone started, failing or stopped at its deadline,
    /// and a provider that could not be listed, were told in the log only.
    #[test]
    fn provider_findings_and_an_unlisted_provider_are_reported_on_the_status_configmap() {
        let decision = Decision {
            action: Action::None,
            reasons: vec![],
            notes: vec![
                Reason::new(
                    ReasonCode::ServerError,
                    "provider proxmox: clone UPID:pve1:1 failed: exit status 'no space'",
                ),
                Reason::new(
                    ReasonCode::ServerError,
                    "provider proxmox: clone UPID:pve2:2 stuck; stopped it",
                ),
                Reason::new(
                    ReasonCode::ProviderUnavailable,
                    "provider kamatera could not be listed",
                ),
            ],
            pending: vec![],
            unremovable: Vec::new(),
        };
        let events = events_for(&decision, Ok(&Outcome::default()), Some(&status_cm()));
        let reasons: Vec<(&str, bool)> = events
            .iter()
            .filter(|e| e.object == status_cm())
            .map(|e| (e.reason.as_str(), e.warning))
            .collect();
        assert_eq!(
            reasons,
            [("ProvisioningFailed", true), ("ProviderUnavailable", true)],
            "{events:?}"
        );
        assert!(events[0].message.contains("no space") && events[0].message.contains("stopped it"));
        assert!(events[1].message.contains("kamatera"));
    }

    /// Events only ever name what the decision names (its action's objects, the objects
    /// of its reasons and notes, its pending pods) or the status ConfigMap, whatever the
    /// action and whether it failed. So what the planner keeps out of a decision (the
    /// placeholder pods of capacity buffers, see `plan::buffers`) never reaches an Event.
    #[test]
    fn events_name_only_what_the_decision_names() {
        let server = |n: &str| ServerRef {
            provider: "proxmox".into(),
            id: format!("id-{n}"),
            name: n.into(),
            group: "web".into(),
        };
        let pod_ref = |n: &str| PodRef {
            namespace: "default".into(),
            name: n.into(),
        };
        let nodes = || vec!["n1".to_string(), "n2".to_string()];
        let actions = vec![
            Action::None,
            Action::RemoveStartupTaint { nodes: nodes() },
            Action::DeleteServers {
                servers: vec![server("n1"), server("v2")],
                nodes: vec!["n1".into()],
            },
            Action::ScaleUp {
                group: "web".into(),
                count: 2,
                size: None,
            },
            Action::StartWarm {
                group: "web".into(),
                servers: vec![server("w1")],
            },
            Action::FillWarmPool {
                group: "web".into(),
                count: 1,
            },
            Action::ParkWarm {
                servers: vec![server("w2")],
            },
            Action::Cordon {
                nodes: nodes(),
                reason: "underutilized".into(),
                disruption: crate::config::DisruptionReason::Underutilized,
                at: 1,
            },
            Action::Uncordon {
                nodes: nodes(),
                reason: "drain deadline".into(),
            },
            Action::ForgetCordon { nodes: nodes() },
            Action::ReuseCordoned { nodes: nodes() },
            Action::SoftTaint {
                add: vec!["n1".into()],
                remove: vec!["n2".into()],
            },
            Action::Drain {
                nodes: nodes(),
                pods: vec![pod_ref("moved")],
            },
            Action::DeletePodsPastLimit {
                nodes: nodes(),
                pods: vec![pod_ref("held")],
            },
            Action::DeleteNodes {
                nodes: vec![crate::plan::NodeTarget {
                    node: "n1".into(),
                    server: server("n1"),
                    park: false,
                    leaving: vec![pod_ref("leaving")],
                }],
            },
            Action::DeleteNodesWithoutVm { nodes: nodes() },
            Action::MarkUnneeded {
                mark: vec!["n1".into()],
                clear: vec!["n2".into()],
                at: 1,
            },
            Action::MarkJoined {
                servers: vec![server("n1")],
                at: 1,
            },
            Action::FinishJoin {
                servers: vec![server("n1")],
                registered: vec![],
            },
            Action::RestartVanished {
                servers: vec![server("n1")],
                at: 1,
            },
            Action::StopUnreachable {
                servers: vec![server("n1")],
                at: 1,
            },
            Action::PullImages {
                node: "n1".into(),
                images: vec!["img".into()],
                pull_secrets: Vec::new(),
            },
            Action::GiveUpPulls {
                node: "n1".into(),
                unpullable: std::collections::BTreeMap::from([("img".into(), 1)]),
                pods: vec![pod_ref("puller")],
            },
            Action::DeletePods {
                pods: vec![pod_ref("puller")],
            },
        ];
        let outcome = Outcome {
            done: vec!["default/moved".into()],
            deferred: vec!["default/other: PodDisruptionBudget".into()],
            ..Outcome::default()
        };
        for action in actions {
            let decision = Decision {
                action,
                reasons: vec![
                    Reason::new(ReasonCode::UnschedulablePods, "1 pod").about([pod("wants")]),
                    Reason::new(ReasonCode::ProvisionTimeout, "node n1 not Ready")
                        .about([ObjectRef::node("n1")]),
                    Reason::new(ReasonCode::ServerError, "VM v2 failed"),
                ],
                notes: vec![
                    Reason::new(ReasonCode::NoGroupFits, "too big").about([pod("huge")]),
                    Reason::new(ReasonCode::ModelMismatch, "fits n1").about([pod("odd")]),
                    Reason::new(ReasonCode::DrainBlocked, "held").about([ObjectRef::node("n2")]),
                    Reason::new(ReasonCode::ServerError, "clone failed"),
                    Reason::new(ReasonCode::ProviderUnavailable, "kamatera down"),
                    Reason::new(ReasonCode::UnknownGroupVms, "group old"),
                ],
                pending: vec![
                    pending("huge", Bucket::NoCapacity, "too big"),
                    pending("wants", Bucket::ScalingUp, "new node"),
                    pending("coming", Bucket::CapacityComing, "fits v1"),
                    pending("soon", Bucket::WillSchedule, "fits n1"),
                ],
                unremovable: Vec::new(),
            };
            let mut named: Vec<ObjectRef> = decision.action.objects();
            for r in decision.reasons.iter().chain(&decision.notes) {
                named.extend(r.objects.iter().cloned());
            }
            named.extend(decision.pending.iter().map(|p| ObjectRef {
                kind: "Pod".into(),
                namespace: Some(p.pod.namespace.clone()),
                name: p.pod.name.clone(),
            }));
            named.push(status_cm());
            for result in [Ok(&outcome), Err("refused")] {
                let events = events_for(&decision, result, Some(&status_cm()));
                assert!(!events.is_empty(), "{:?}", decision.action);
                for e in &events {
                    assert!(
                        named.contains(&e.object),
                        "{} names {:?}, which the decision does not: {e:?}",
                        decision.action.kind(),
                        e.object
                    );
                }
            }
        }
    }
}

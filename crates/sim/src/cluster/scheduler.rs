//! A small default-scheduler that decides with the planner's scheduling model
//! ([`crate::plan::sched`]), so the simulated cluster and nodewright apply the same
//! rules: every resource (CPU, memory, pods, ephemeral storage, extended resources),
//! nodeSelector and required node affinity, taints, cordons, host ports, pod
//! (anti-)affinity and topology spread. Among the nodes that pass, the one
//! kube-scheduler's default scores put first wins (`crate::whatif::scoring`: least
//! allocated, balanced, soft taints avoided). Pods that fit nowhere get the `PodScheduled=False/Unschedulable` condition
//! with the real scheduler's message ("0/3 nodes are available: 1 Insufficient cpu,
//! ...").

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};
use serde::Deserialize;
use serde_json::Value;

use super::meta::{self, set_condition};
use super::resources::{
    CSINODES, NODES, PERSISTENTVOLUMECLAIMS, PERSISTENTVOLUMES, PODS, STORAGECLASSES,
};
use super::storage;
use super::store::{Change, ChangeKind};
use super::sysevents;
use super::Inner;
use crate::model::{volumes::ATTACH_PREFIX, volumes::HOSTNAME_LABEL, NodeInfo, PodInfo, Taint};
use crate::plan::sched::{Model, Slot, Unfit};
use crate::plan::volumes;
use crate::whatif::scoring::{self, Scoring};
use nodewright_core::cluster::convert::{node_info, pod_info};

/// The taint the node lifecycle controller puts on a node that is not Ready.
const NOT_READY_TAINT: &str = "node.kubernetes.io/not-ready";

/// A node as the scheduler sees it. The real scheduler never reads the Ready
/// condition: a NotReady node carries the lifecycle controller's `not-ready` taint,
/// which only pods tolerating it pass.
fn sched_node(v: &Value) -> Option<NodeInfo> {
    let node = Node::deserialize(v).ok()?;
    let mut info = node_info(&node)?;
    if !info.ready {
        info.taints.push(Taint {
            key: NOT_READY_TAINT.into(),
            value: None,
            effect: "NoSchedule".into(),
        });
        info.ready = true;
    }
    Some(info)
}

/// Why a node was rejected, in the real scheduler's words (several for resources).
fn reasons(unfit: &Unfit, pod: &PodInfo, slot: &Slot<'_>) -> Vec<String> {
    let one = |s: &str| vec![s.to_string()];
    match unfit {
        Unfit::NotReady => one("node(s) had untolerated taint {node.kubernetes.io/not-ready: }"),
        Unfit::Unschedulable => one("node(s) were unschedulable"),
        Unfit::NodeSelector | Unfit::NodeAffinity => {
            one("node(s) didn't match Pod's node affinity/selector")
        }
        Unfit::Taint(t) => {
            // `key=value:Effect` or `key:Effect`; keys hold neither `=` nor `:`.
            let kv = t.rsplit_once(':').map_or(t.as_str(), |(kv, _)| kv);
            let (key, value) = kv.split_once('=').unwrap_or((kv, ""));
            vec![format!("node(s) had untolerated taint {{{key}: {value}}}")]
        }
        Unfit::Insufficient(names) => {
            let mut out = Vec::new();
            for name in names {
                match *name {
                    "pods" => out.push("Too many pods".to_string()),
                    // The model groups extended resources; name each one short here.
                    "extended" => {
                        for (k, want) in &pod.requests.scalar {
                            let Some(&alloc) = slot.allocatable.scalar.get(k) else {
                                if !k.starts_with(ATTACH_PREFIX) {
                                    out.push(format!("Insufficient {k}"));
                                }
                                continue;
                            };
                            if slot.used.get(k).saturating_add(*want) <= alloc {
                                continue;
                            }
                            if k.starts_with(ATTACH_PREFIX) {
                                out.push("node(s) exceed max volume count".to_string());
                            } else {
                                out.push(format!("Insufficient {k}"));
                            }
                        }
                    }
                    other => out.push(format!("Insufficient {other}")),
                }
            }
            out
        }
        Unfit::HostPort => one("node(s) didn't have free ports for the requested pod ports"),
        Unfit::PodAffinity => one("node(s) didn't match pod affinity rules"),
        Unfit::PodAntiAffinity => one("node(s) didn't match pod anti-affinity rules"),
        Unfit::ExistingAntiAffinity => {
            one("node(s) didn't satisfy existing pods anti-affinity rules")
        }
        Unfit::TopologySpread => one("node(s) didn't match pod topology spread constraints"),
        Unfit::VolumeNodeAffinity => one("node(s) had volume node affinity conflict"),
        Unfit::Volume(why) => one(why),
        Unfit::MissingTopologyLabel(key) => {
            if pod.spread.iter().any(|c| &c.topology_key == key) {
                one("node(s) didn't match pod topology spread constraints (missing required label)")
            } else {
                one("node(s) didn't match pod affinity rules")
            }
        }
    }
}

/// The FailedScheduling message, as the real scheduler words it.
fn unschedulable_message(
    total: usize,
    counts: &BTreeMap<String, usize>,
    preemptable: usize,
) -> String {
    if total == 0 {
        return "no nodes available to schedule pods".into();
    }
    let mut parts: Vec<String> = counts.iter().map(|(r, n)| format!("{n} {r}")).collect();
    parts.sort();
    let mut preemption = Vec::new();
    if preemptable > 0 {
        preemption.push(format!(
            "{preemptable} No preemption victims found for incoming pod"
        ));
    }
    if total > preemptable {
        preemption.push(format!(
            "{} Preemption is not helpful for scheduling",
            total - preemptable
        ));
    }
    format!(
        "0/{total} nodes are available: {}. preemption: 0/{total} nodes are available: {}.",
        parts.join(", "),
        preemption.join(", ")
    )
}

fn is_active(pod: &Value) -> bool {
    !matches!(
        meta::path_str(pod, &["status", "phase"]),
        Some("Succeeded" | "Failed")
    )
}

/// A pod the default scheduler has to place.
fn is_pending(pod: &Value) -> bool {
    is_active(pod)
        && meta::path_str(pod, &["spec", "nodeName"]).is_none_or(str::is_empty)
        && meta::path_str(pod, &["spec", "schedulerName"]).unwrap_or("default-scheduler")
            == "default-scheduler"
        && meta::path(pod, &["metadata", "deletionTimestamp"]).is_none()
}

/// Volume objects: a claim, volume, class or attach limit changing can let a pod in.
fn is_volume_kind(res: &str) -> bool {
    [
        &PERSISTENTVOLUMES,
        &PERSISTENTVOLUMECLAIMS,
        &STORAGECLASSES,
        &CSINODES,
    ]
    .iter()
    .any(|r| r.id == res)
}

/// Whether writes can change what the scheduler decides: a new (or re-specified)
/// pending pod, or, while pods wait, any node change and pods leaving or finishing.
fn worth_a_pass(waiting: bool, changes: &[Arc<Change>]) -> bool {
    changes.iter().any(|c| {
        if c.res == NODES.id || is_volume_kind(c.res) {
            return waiting;
        }
        if c.res != PODS.id {
            return false;
        }
        let now_pending = c.kind != ChangeKind::Deleted && is_pending(&c.object);
        let was_pending = c.previous.as_deref().is_some_and(|p| is_pending(p));
        match (was_pending, now_pending) {
            (false, true) => true,
            (true, true) => {
                c.object.get("spec") != c.previous.as_deref().and_then(|p| p.get("spec"))
            }
            _ => waiting && (c.kind == ChangeKind::Deleted || !is_active(&c.object)),
        }
    })
}

/// One scheduling round over every pending pod, against one model of the cluster, when
/// the writes since the last round (`changes`; None when unknown) call for one.
pub fn pass(inner: &Inner, changes: Option<&[Arc<Change>]>) {
    let waiting = inner.pods_waiting.load(Ordering::Relaxed);
    if changes.is_some_and(|cs| !worth_a_pass(waiting, cs)) {
        return;
    }
    let mut txn = inner.store.lock();
    let pod_values = txn.list(&PODS, None);
    if !pod_values.iter().any(|p| is_pending(p)) {
        inner.pods_waiting.store(false, Ordering::Relaxed);
        return;
    }
    let mut left_waiting = false;
    let mut bound: Vec<PodInfo> = Vec::new();
    let mut pending: Vec<PodInfo> = Vec::new();
    for v in pod_values {
        let target = if is_pending(v) {
            &mut pending
        } else if is_active(v)
            && meta::path_str(v, &["spec", "nodeName"]).is_some_and(|n| !n.is_empty())
        {
            &mut bound
        } else {
            continue;
        };
        if let Some(info) = Pod::deserialize(v).ok().as_ref().and_then(pod_info) {
            target.push(info);
        }
    }
    let mut nodes: Vec<NodeInfo> = txn
        .list(&NODES, None)
        .into_iter()
        .filter(|n| meta::path(n, &["metadata", "deletionTimestamp"]).is_none())
        .filter_map(sched_node)
        .collect();
    // VolumeBinding and NodeVolumeLimits: what each pod's claims allow, attach limits.
    let vols = storage::volumes(&txn);
    let mut bound: Vec<Arc<PodInfo>> = bound.into_iter().map(Arc::new).collect();
    let mut pending: Vec<Arc<PodInfo>> = pending.into_iter().map(Arc::new).collect();
    // The scheduler places pods on nodes that exist: no node a group could make counts.
    volumes::resolve(&vols, &mut nodes, &[], &mut bound);
    volumes::resolve(&vols, &mut nodes, &[], &mut pending);
    let bound: Vec<PodInfo> = bound.iter().map(|p| (**p).clone()).collect();
    pending.sort_by(|a, b| {
        b.priority
            .cmp(&a.priority)
            .then_with(|| a.created.cmp(&b.created))
            .then_with(|| a.namespace.cmp(&b.namespace))
            .then_with(|| a.name.cmp(&b.name))
    });
    let mut model = Model::of_cluster(&nodes, &bound);
    let mut feasible = Vec::new();
    for pod in &pending {
        feasible.clear();
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        let mut preemptable = 0;
        for i in 0..model.slots.len() {
            match model.check(pod, i) {
                Ok(()) => feasible.push(i),
                Err(unfit) => {
                    preemptable += usize::from(matches!(unfit, Unfit::Insufficient(_)));
                    for r in reasons(&unfit, pod, &model.slots[i]) {
                        *counts.entry(r).or_default() += 1;
                    }
                }
            }
        }
        let (ns, name) = (pod.namespace.as_str(), pod.name.as_str());
        // kube-scheduler's default scores, LeastAllocated.
        match scoring::pick(&model, pod, &feasible, Scoring::LeastAllocated) {
            Some(i) => {
                let node = model.slots[i].name.to_string();
                let hostname = model.slots[i]
                    .labels
                    .get(HOSTNAME_LABEL)
                    .cloned()
                    .unwrap_or_else(|| node.clone());
                // The claims this pod waits for are provisioned on its node first; a
                // claim no simulated provisioner serves keeps the pod Pending.
                let mut provisioned = true;
                for (claim, class) in storage::unbound_claims(&vols, pod) {
                    provisioned &= matches!(
                        storage::provision(&mut txn, claim, class, &node, &hostname),
                        Ok(true)
                    );
                }
                if !provisioned {
                    left_waiting = true;
                    let message = format!(
                        "waiting for a volume to be created for a claim of this pod on node {node}"
                    );
                    let _ = txn.modify(&PODS, ns, name, |p| {
                        set_condition(p, "PodScheduled", "False", "Unschedulable", &message)
                    });
                    continue;
                }
                let done = txn.modify(&PODS, ns, name, |p| {
                    p["spec"]["nodeName"] = node.as_str().into();
                    set_condition(p, "PodScheduled", "True", "", "");
                });
                if let Ok(Some(bound_pod)) = done {
                    model.place(pod, i);
                    sysevents::post(
                        &mut txn,
                        &bound_pod,
                        "Normal",
                        "Scheduled",
                        &format!("Successfully assigned {ns}/{name} to {node}"),
                        &sysevents::SCHEDULER,
                    );
                }
            }
            None => {
                left_waiting = true;
                // A claim that lets the pod run nowhere fails before any node is looked
                // at: the real scheduler says so once, not per node.
                let message = match &pod.volume_problem {
                    Some(why) => format!(
                        "0/{n} nodes are available: {why}. preemption: 0/{n} nodes are available: {n} Preemption is not helpful for scheduling.",
                        n = nodes.len()
                    ),
                    None => unschedulable_message(nodes.len(), &counts, preemptable),
                };
                let said = txn.get(&PODS, ns, name).and_then(|p| {
                    p.pointer("/status/conditions")?
                        .as_array()?
                        .iter()
                        .find(|c| c["type"] == "PodScheduled")?
                        .get("message")?
                        .as_str()
                        .map(|m| m == message)
                });
                let updated = txn.modify(&PODS, ns, name, |p| {
                    set_condition(p, "PodScheduled", "False", "Unschedulable", &message)
                });
                // Once per new reason, not on every pass.
                if let (Ok(Some(p)), false) = (updated, said == Some(true)) {
                    sysevents::post(
                        &mut txn,
                        &p,
                        "Warning",
                        "FailedScheduling",
                        &message,
                        &sysevents::SCHEDULER,
                    );
                }
            }
        }
    }
    inner.pods_waiting.store(left_waiting, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Resources;
    use serde_json::json;

    #[test]
    fn message_like_the_real_one() {
        let mut counts = BTreeMap::new();
        counts.insert(
            "node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }".to_string(),
            1,
        );
        counts.insert("Insufficient memory".to_string(), 2);
        assert_eq!(
            unschedulable_message(3, &counts, 2),
            "0/3 nodes are available: 1 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }, 2 Insufficient memory. preemption: 0/3 nodes are available: 2 No preemption victims found for incoming pod, 1 Preemption is not helpful for scheduling."
        );
        assert_eq!(
            unschedulable_message(0, &BTreeMap::new(), 0),
            "no nodes available to schedule pods"
        );
    }

    fn node(v: Value) -> NodeInfo {
        sched_node(&v).expect("node converts")
    }

    #[test]
    fn a_not_ready_node_carries_the_not_ready_taint() {
        let n = node(
            json!({"metadata": {"name": "n1"}, "status": {"conditions": [
            {"type": "Ready", "status": "False"}]}}),
        );
        assert!(n.ready);
        assert_eq!(n.taints.len(), 1);
        assert_eq!(n.taints[0].key, NOT_READY_TAINT);
        let ok = node(
            json!({"metadata": {"name": "n2"}, "status": {"conditions": [
            {"type": "Ready", "status": "True"}]}}),
        );
        assert!(ok.taints.is_empty());
    }

    #[test]
    fn reasons_in_the_schedulers_words() {
        let n = node(json!({"metadata": {"name": "n1"}, "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "allocatable": {"cpu": "1", "memory": "1Gi", "pods": "110"}}}));
        let slot = Slot::for_node(&n);
        let mut pod = PodInfo::new("default", "p");
        pod.requests = Resources::cpu_mem(2000, 0);
        pod.requests.set("nvidia.com/gpu", 1.0);
        let r = reasons(
            &Unfit::Insufficient(vec!["pods", "cpu", "extended"]),
            &pod,
            &slot,
        );
        assert_eq!(
            r,
            [
                "Too many pods",
                "Insufficient cpu",
                "Insufficient nvidia.com/gpu"
            ]
        );
        assert_eq!(
            reasons(&Unfit::Taint("a=b:NoSchedule".into()), &pod, &slot),
            ["node(s) had untolerated taint {a: b}"]
        );
        assert_eq!(
            reasons(&Unfit::Taint("a:NoExecute".into()), &pod, &slot),
            ["node(s) had untolerated taint {a: }"]
        );
        assert_eq!(
            reasons(&Unfit::NodeSelector, &pod, &slot),
            ["node(s) didn't match Pod's node affinity/selector"]
        );
    }
}

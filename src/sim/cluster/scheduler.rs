//! A small default-scheduler: binds pending pods to Ready, schedulable nodes whose
//! taints they tolerate, whose labels match their nodeSelector and which have room for
//! their requests, preferring the least allocated node. Pods that fit nowhere get the
//! `PodScheduled=False/Unschedulable` condition with the real scheduler's message.

use std::collections::{BTreeMap, HashMap};

use serde_json::Value;

use super::meta::{self, set_condition};
use super::objects::pod_requests;
use super::resources::{NODES, PODS};
use super::Inner;

#[derive(Debug, Default, Clone, Copy)]
struct Usage {
    cpu: i128,
    mem: i128,
    pods: i128,
}

/// Why a node was rejected; `resources_only` failures could in principle be fixed by
/// preemption, everything else not.
struct Rejection {
    reasons: Vec<String>,
    resources_only: bool,
}

fn taint_tolerated(taint: &Value, tolerations: &[Value]) -> bool {
    let t_key = taint.get("key").and_then(Value::as_str).unwrap_or_default();
    let t_val = taint
        .get("value")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let t_eff = taint
        .get("effect")
        .and_then(Value::as_str)
        .unwrap_or_default();
    tolerations.iter().any(|tol| {
        let key = tol.get("key").and_then(Value::as_str).unwrap_or_default();
        let op = tol
            .get("operator")
            .and_then(Value::as_str)
            .unwrap_or("Equal");
        let val = tol.get("value").and_then(Value::as_str).unwrap_or_default();
        let eff = tol
            .get("effect")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let effect_ok = eff.is_empty() || eff == t_eff;
        let key_ok = (key.is_empty() && op == "Exists") || key == t_key;
        let value_ok = op == "Exists" || val == t_val;
        effect_ok && key_ok && value_ok
    })
}

fn allocatable(node: &Value, res: &str) -> i128 {
    meta::path_str(node, &["status", "allocatable", res])
        .and_then(meta::parse_quantity_milli)
        .unwrap_or(0)
}

fn fit(node: &Value, pod: &Value, used: Usage, want: (i128, i128)) -> Result<f64, Rejection> {
    let tolerations: Vec<Value> = meta::path(pod, &["spec", "tolerations"])
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let reject = |r: &str| {
        Err(Rejection {
            reasons: vec![r.to_string()],
            resources_only: false,
        })
    };
    let unschedulable =
        meta::path(node, &["spec", "unschedulable"]).and_then(Value::as_bool) == Some(true);
    let unsched_taint =
        serde_json::json!({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"});
    if unschedulable && !taint_tolerated(&unsched_taint, &tolerations) {
        return reject("node(s) were unschedulable");
    }
    // The node lifecycle controller would taint a NotReady node; report it that way.
    let not_ready =
        serde_json::json!({"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"});
    if meta::condition_status(node, "Ready") != Some("True")
        && !taint_tolerated(&not_ready, &tolerations)
    {
        return reject("node(s) had untolerated taint {node.kubernetes.io/not-ready: }");
    }
    for taint in meta::path(node, &["spec", "taints"])
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let effect = taint
            .get("effect")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if matches!(effect, "NoSchedule" | "NoExecute") && !taint_tolerated(taint, &tolerations) {
            let key = taint.get("key").and_then(Value::as_str).unwrap_or_default();
            let value = taint
                .get("value")
                .and_then(Value::as_str)
                .unwrap_or_default();
            return reject(&format!("node(s) had untolerated taint {{{key}: {value}}}"));
        }
    }
    let labels = meta::labels(node);
    let selector = meta::string_map(meta::path(pod, &["spec", "nodeSelector"]));
    if selector.iter().any(|(k, v)| labels.get(k) != Some(v)) {
        return reject("node(s) didn't match Pod's node affinity/selector");
    }
    let (cpu, mem) = want;
    let (a_cpu, a_mem, a_pods) = (
        allocatable(node, "cpu"),
        allocatable(node, "memory") / 1000,
        allocatable(node, "pods") / 1000,
    );
    let mut reasons = Vec::new();
    if used.pods + 1 > a_pods {
        reasons.push("Too many pods".to_string());
    }
    if cpu > 0 && used.cpu + cpu > a_cpu {
        reasons.push("Insufficient cpu".to_string());
    }
    if mem > 0 && used.mem + mem > a_mem {
        reasons.push("Insufficient memory".to_string());
    }
    if !reasons.is_empty() {
        return Err(Rejection {
            reasons,
            resources_only: true,
        });
    }
    let free = |alloc: i128, used: i128| {
        if alloc > 0 {
            (alloc - used) as f64 / alloc as f64
        } else {
            0.0
        }
    };
    Ok(free(a_mem, used.mem + mem) + free(a_cpu, used.cpu + cpu))
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

/// One scheduling round over every pending pod.
pub fn pass(inner: &Inner) {
    let mut txn = inner.store.lock();
    let nodes: Vec<Value> = txn
        .list_owned(&NODES, None)
        .into_iter()
        .filter(|n| meta::path(n, &["metadata", "deletionTimestamp"]).is_none())
        .collect();
    let mut usage: HashMap<String, Usage> = HashMap::new();
    let mut pending = Vec::new();
    for pod in txn.list(&PODS, None) {
        if !is_active(pod) {
            continue;
        }
        match meta::path_str(pod, &["spec", "nodeName"]).filter(|n| !n.is_empty()) {
            Some(node) => {
                let (cpu, mem) = pod_requests(pod);
                let u = usage.entry(node.to_string()).or_default();
                u.cpu += cpu;
                u.mem += mem;
                u.pods += 1;
            }
            None => {
                let scheduler =
                    meta::path_str(pod, &["spec", "schedulerName"]).unwrap_or("default-scheduler");
                if scheduler == "default-scheduler"
                    && meta::path(pod, &["metadata", "deletionTimestamp"]).is_none()
                {
                    pending.push(pod.clone());
                }
            }
        }
    }
    pending.sort_by_key(|p| {
        let priority = meta::path(p, &["spec", "priority"])
            .and_then(Value::as_i64)
            .unwrap_or(0);
        let created = meta::path_str(p, &["metadata", "creationTimestamp"])
            .unwrap_or_default()
            .to_string();
        (
            std::cmp::Reverse(priority),
            created,
            meta::namespace(p).to_string(),
            meta::name(p).to_string(),
        )
    });
    for pod in pending {
        let want = pod_requests(&pod);
        let mut best: Option<(f64, &str)> = None;
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        let mut preemptable = 0;
        for node in &nodes {
            let name = meta::name(node);
            let used = usage.get(name).copied().unwrap_or_default();
            match fit(node, &pod, used, want) {
                Ok(score) => {
                    if best.is_none_or(|(s, _)| score > s) {
                        best = Some((score, name));
                    }
                }
                Err(rej) => {
                    preemptable += usize::from(rej.resources_only);
                    for r in rej.reasons {
                        *counts.entry(r).or_default() += 1;
                    }
                }
            }
        }
        let (ns, name) = (meta::namespace(&pod), meta::name(&pod));
        match best {
            Some((_, node)) => {
                let bound = txn.modify(&PODS, ns, name, |p| {
                    p["spec"]["nodeName"] = node.into();
                    set_condition(p, "PodScheduled", "True", "", "");
                });
                if matches!(bound, Ok(Some(_))) {
                    let u = usage.entry(node.to_string()).or_default();
                    u.cpu += want.0;
                    u.mem += want.1;
                    u.pods += 1;
                }
            }
            None => {
                let message = unschedulable_message(nodes.len(), &counts, preemptable);
                let _ = txn.modify(&PODS, ns, name, |p| {
                    set_condition(p, "PodScheduled", "False", "Unschedulable", &message)
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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

    #[test]
    fn tolerations() {
        let taint = json!({"key": "k", "value": "v", "effect": "NoSchedule"});
        assert!(taint_tolerated(&taint, &[json!({"operator": "Exists"})]));
        assert!(taint_tolerated(
            &taint,
            &[json!({"key": "k", "value": "v"})]
        ));
        assert!(!taint_tolerated(
            &taint,
            &[json!({"key": "k", "value": "w"})]
        ));
        assert!(!taint_tolerated(
            &taint,
            &[json!({"key": "k", "operator": "Exists", "effect": "NoExecute"})]
        ));
    }
}

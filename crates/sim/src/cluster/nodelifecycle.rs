//! The node lifecycle controller and the kubelet's node Lease: taints that follow a
//! node's state, as the real controller keeps them (TaintNodesByCondition and
//! taint-based eviction), and a Lease per node in `kube-node-lease`.
//!
//! - cordoned (`spec.unschedulable`): `node.kubernetes.io/unschedulable:NoSchedule`;
//! - Ready `False`: `node.kubernetes.io/not-ready`, `NoSchedule` and `NoExecute`;
//! - Ready `Unknown` (the kubelet stopped reporting): `node.kubernetes.io/unreachable`,
//!   `NoSchedule` and `NoExecute`;
//!
//! and each taint goes when its state does. Other taints are left as they are. Pods on a
//! node with a `NoExecute` taint they do not tolerate (long enough) are deleted by the
//! taint manager (`tainteviction`). A node whose kubelet went silent (its VM stopped or
//! deleted) turns Unknown only after `node_monitor_grace_period` (see `kubelet`).

use std::sync::Arc;

use tokio::time::Instant;

use serde_json::{json, Value};

use super::meta;
use super::resources::{LEASES, NODES};
use super::store::{Change, ChangeKind, Txn};
use super::sysevents;
use super::Inner;

pub const UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";
pub const NOT_READY: &str = "node.kubernetes.io/not-ready";
pub const UNREACHABLE: &str = "node.kubernetes.io/unreachable";
const LEASE_NAMESPACE: &str = "kube-node-lease";

/// The state taints `node` should carry: (key, effect).
fn wanted(node: &Value) -> Vec<(&'static str, &'static str)> {
    let mut out = Vec::new();
    if meta::path(node, &["spec", "unschedulable"]).and_then(Value::as_bool) == Some(true) {
        out.push((UNSCHEDULABLE, "NoSchedule"));
    }
    match meta::condition_status(node, "Ready") {
        Some("False") => {
            out.push((NOT_READY, "NoSchedule"));
            out.push((NOT_READY, "NoExecute"));
        }
        Some("Unknown") => {
            out.push((UNREACHABLE, "NoSchedule"));
            out.push((UNREACHABLE, "NoExecute"));
        }
        _ => {}
    }
    out
}

fn is_state_taint(t: &Value) -> bool {
    matches!(
        t.get("key").and_then(Value::as_str),
        Some(UNSCHEDULABLE | NOT_READY | UNREACHABLE)
    )
}

/// `node`'s taints with the state taints brought in line; None when nothing changes.
fn retainted(node: &Value) -> Option<Vec<Value>> {
    let current: Vec<Value> = meta::path(node, &["spec", "taints"])
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let want = wanted(node);
    let has = |key: &str, effect: &str| {
        current.iter().any(|t| {
            t.get("key").and_then(Value::as_str) == Some(key)
                && t.get("effect").and_then(Value::as_str) == Some(effect)
        })
    };
    let stale = current.iter().any(|t| {
        is_state_taint(t)
            && !want.iter().any(|(k, e)| {
                t.get("key").and_then(Value::as_str) == Some(k)
                    && t.get("effect").and_then(Value::as_str) == Some(e)
            })
    });
    let missing: Vec<&(&str, &str)> = want.iter().filter(|(k, e)| !has(k, e)).collect();
    if !stale && missing.is_empty() {
        return None;
    }
    let mut out: Vec<Value> = current
        .into_iter()
        .filter(|t| {
            !is_state_taint(t)
                || want.iter().any(|(k, e)| {
                    t.get("key").and_then(Value::as_str) == Some(k)
                        && t.get("effect").and_then(Value::as_str) == Some(e)
                })
        })
        .collect();
    let now = meta::now_rfc3339();
    for (k, e) in missing {
        let mut t = json!({"key": k, "effect": e});
        if *e == "NoExecute" {
            t["timeAdded"] = json!(now);
        }
        out.push(t);
    }
    Some(out)
}

/// Seconds a pod stays on a not-ready or unreachable node before the taint manager would
/// evict it, as the DefaultTolerationSeconds admission plugin sets them.
pub const DEFAULT_TOLERATION_SECONDS: i64 = 300;

/// DefaultTolerationSeconds admission: a pod that does not already tolerate the
/// `not-ready` or `unreachable` `NoExecute` taint gets a toleration of it for 300 s.
pub fn default_tolerations(pod: &mut Value) {
    let spec = meta::obj_mut(pod, "spec");
    let list = spec.entry("tolerations").or_insert_with(|| json!([]));
    if !list.is_array() {
        return;
    }
    let Value::Array(ts) = list else { return };
    for key in [NOT_READY, UNREACHABLE] {
        let tolerated = ts.iter().any(|t| {
            let k = t.get("key").and_then(Value::as_str).unwrap_or("");
            let e = t.get("effect").and_then(Value::as_str).unwrap_or("");
            (k == key || k.is_empty()) && (e == "NoExecute" || e.is_empty())
        });
        if !tolerated {
            ts.push(
                json!({"key": key, "operator": "Exists", "effect": "NoExecute",
                "tolerationSeconds": DEFAULT_TOLERATION_SECONDS}),
            );
        }
    }
}

/// The kubelet's Lease for `node`, owned by the Node so it goes with it.
fn lease_for(node: &Value) -> Value {
    let name = meta::name(node);
    json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": LEASE_NAMESPACE,
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": name,
                "uid": meta::uid(node)}]},
        "spec": {"holderIdentity": name, "leaseDurationSeconds": 40,
            "renewTime": now_micro()},
    })
}

/// `metav1.MicroTime` as the kubelet writes it.
fn now_micro() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string()
}

fn ready(node: Option<&Value>) -> Option<&str> {
    node.and_then(|n| meta::condition_status(n, "Ready"))
}

/// Brings the state taints of the nodes written since the last pass (all of them when
/// unknown) in line, gives each new node its Lease, posts the node events, and runs the
/// taint manager; returns when its next eviction is due.
pub fn pass(inner: &Inner, changes: Option<&[Arc<Change>]>) -> Option<Instant> {
    let mut txn = inner.store.lock();
    let names: Vec<String> = match changes {
        None => txn
            .list(&NODES, None)
            .into_iter()
            .map(|n| meta::name(n).to_string())
            .collect(),
        Some(cs) => {
            let mut names = Vec::new();
            for c in cs.iter().filter(|c| c.res == NODES.id) {
                observe(&mut txn, c);
                if c.kind != ChangeKind::Deleted && !names.contains(&c.name) {
                    names.push(c.name.clone());
                }
            }
            names
        }
    };
    for name in names {
        let Some(node) = txn.get(&NODES, "", &name).cloned() else {
            continue;
        };
        if changes.is_none() && txn.get(&LEASES, LEASE_NAMESPACE, &name).is_none() {
            let _ = txn.create(&LEASES, lease_for(&node));
        }
        if let Some(taints) = retainted(&node) {
            let _ = txn.modify(&NODES, "", &name, |n| {
                meta::obj_mut(n, "spec").insert("taints".into(), json!(taints));
            });
        }
    }
    super::tainteviction::pass(inner, &mut txn)
}

/// What one node write means: a new node gets its Lease and `RegisteredNode`, a Ready
/// transition its event.
fn observe(txn: &mut Txn<'_>, c: &Change) {
    let now = c.object.value();
    if c.kind == ChangeKind::Added {
        if txn.get(&LEASES, LEASE_NAMESPACE, &c.name).is_none() {
            let _ = txn.create(&LEASES, lease_for(now));
        }
        sysevents::post(
            txn,
            now,
            "Normal",
            "RegisteredNode",
            &format!(
                "Node {} event: Registered Node {} in Controller",
                c.name, c.name
            ),
            &sysevents::NODE_CONTROLLER,
        );
        return;
    }
    if c.kind != ChangeKind::Modified {
        return;
    }
    let before = ready(c.previous.as_deref().map(|s| s.value()));
    let after = ready(Some(now));
    if before == after {
        return;
    }
    match after {
        Some("True") => sysevents::post(
            txn,
            now,
            "Normal",
            "NodeReady",
            &format!("Node {} status is now: NodeReady", c.name),
            &sysevents::kubelet(&c.name),
        ),
        _ if before == Some("True") => sysevents::post(
            txn,
            now,
            "Normal",
            "NodeNotReady",
            &format!("Node {} status is now: NodeNotReady", c.name),
            &sysevents::NODE_CONTROLLER,
        ),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(v: &[Value]) -> Vec<String> {
        v.iter()
            .map(|t| {
                format!(
                    "{}:{}",
                    t["key"].as_str().unwrap_or(""),
                    t["effect"].as_str().unwrap_or("")
                )
            })
            .collect()
    }

    #[test]
    fn state_taints_follow_cordon_and_ready() {
        let cordoned = json!({"spec": {"unschedulable": true, "taints": [{"key": "a", "effect": "NoSchedule"}]},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}});
        let t = retainted(&cordoned).unwrap_or_default();
        assert_eq!(
            keys(&t),
            [
                "a:NoSchedule",
                "node.kubernetes.io/unschedulable:NoSchedule"
            ]
        );
        let mut uncordoned = cordoned.clone();
        uncordoned["spec"]["taints"] = json!(t);
        uncordoned["spec"]["unschedulable"] = json!(false);
        assert_eq!(
            keys(&retainted(&uncordoned).unwrap_or_default()),
            ["a:NoSchedule"]
        );
        let silent =
            json!({"spec": {}, "status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}});
        let t = retainted(&silent).unwrap_or_default();
        assert_eq!(
            keys(&t),
            [
                "node.kubernetes.io/unreachable:NoSchedule",
                "node.kubernetes.io/unreachable:NoExecute"
            ]
        );
        assert!(t[1].get("timeAdded").is_some());
        let mut pod = json!({"spec": {"tolerations": [
            {"key": NOT_READY, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60}]}});
        default_tolerations(&mut pod);
        let ts = pod["spec"]["tolerations"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert_eq!(ts.len(), 2);
        assert_eq!(ts[0]["tolerationSeconds"], 60);
        assert_eq!(ts[1]["key"], UNREACHABLE);
        assert_eq!(ts[1]["tolerationSeconds"], 300);
        let mut settled = silent.clone();
        settled["spec"]["taints"] = json!(t);
        assert_eq!(retainted(&settled), None);
    }
}

//! The taint manager (taint-based eviction): a pod bound to a node with a `NoExecute`
//! taint it does not tolerate is deleted at once; one that tolerates every such taint
//! for a while (`tolerationSeconds`) is deleted once the shortest of those has passed
//! since the taint was added; one that tolerates them without a limit stays. As the real
//! controller, it posts `TaintManagerEviction` on the pod before deleting it.
//!
//! The time counts from the taint's `timeAdded` (the node lifecycle controller and
//! `kubectl taint` set it), or, for a taint without one, from when this controller
//! first saw it.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use serde_json::Value;

use super::meta;
use super::resources::{NODES, PODS};
use super::store::Txn;
use super::sysevents;
use super::Inner;

/// When each `NoExecute` taint without `timeAdded` was first seen: (node, key, value).
#[derive(Default)]
pub struct TaintEvictionState {
    first_seen: HashMap<(String, String, String), SystemTime>,
}

fn s<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

/// `Toleration.ToleratesTaint`: effect empty or equal; key empty with `Exists`, or
/// equal; `Exists` or (`Equal`, the default) the same value.
pub fn tolerates(toleration: &Value, taint: &Value) -> bool {
    let effect = s(toleration, "effect");
    if !effect.is_empty() && effect != s(taint, "effect") {
        return false;
    }
    let key = s(toleration, "key");
    let exists = s(toleration, "operator") == "Exists";
    if key.is_empty() {
        return exists;
    }
    if key != s(taint, "key") {
        return false;
    }
    exists || s(toleration, "value") == s(taint, "value")
}

/// What to do with a pod against a node's `NoExecute` taints: `None` to leave it, else
/// the seconds it may stay (0: at once).
fn allowed_seconds(pod: &Value, taints: &[&Value]) -> Option<i64> {
    let tolerations: Vec<Value> = meta::path(pod, &["spec", "tolerations"])
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut least: Option<i64> = None;
    for taint in taints {
        // The first toleration that matches is the one used, as the real helper picks it.
        let used = tolerations.iter().find(|t| tolerates(t, taint))?;
        if let Some(secs) = used.get("tolerationSeconds").and_then(Value::as_i64) {
            let secs = secs.max(0);
            least = Some(least.map_or(secs, |l| l.min(secs)));
        }
    }
    least
}

/// `Some(0)` for a pod with an untolerated taint (the `?` above returns `None` there:
/// told apart here).
fn untolerated(pod: &Value, taints: &[&Value]) -> bool {
    let tolerations: Vec<Value> = meta::path(pod, &["spec", "tolerations"])
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    taints
        .iter()
        .any(|taint| !tolerations.iter().any(|t| tolerates(t, taint)))
}

fn added_at(
    state: &mut TaintEvictionState,
    node: &str,
    taint: &Value,
    now: SystemTime,
) -> SystemTime {
    if let Some(t) = taint
        .get("timeAdded")
        .and_then(Value::as_str)
        .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
    {
        return SystemTime::from(t);
    }
    *state
        .first_seen
        .entry((
            node.to_string(),
            s(taint, "key").to_string(),
            s(taint, "value").to_string(),
        ))
        .or_insert(now)
}

/// One round over the nodes with `NoExecute` taints: deletes the pods due, returns when
/// the next one is.
pub fn pass(inner: &Inner, txn: &mut Txn<'_>) -> Option<Instant> {
    let mut state = inner
        .taint_eviction
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    let now = SystemTime::now();
    let mut next: Option<Instant> = None;
    let mut live = std::collections::HashSet::new();
    let tainted: Vec<(String, Vec<Value>)> = txn
        .list(&NODES, None)
        .into_iter()
        .filter_map(|n| {
            let taints: Vec<Value> = meta::path(n, &["spec", "taints"])
                .and_then(Value::as_array)?
                .iter()
                .filter(|t| s(t, "effect") == "NoExecute")
                .cloned()
                .collect();
            (!taints.is_empty()).then(|| (meta::name(n).to_string(), taints))
        })
        .collect();
    if tainted.is_empty() {
        state.first_seen.clear();
        return None;
    }
    // Per tainted node: its NoExecute taints and since when the oldest is there.
    let mut nodes: HashMap<&str, (Vec<&Value>, SystemTime)> = HashMap::new();
    for (node, taints) in &tainted {
        let refs: Vec<&Value> = taints.iter().collect();
        let since = refs
            .iter()
            .map(|t| added_at(&mut state, node, t, now))
            .min()
            .unwrap_or(now);
        for t in &refs {
            live.insert((
                node.clone(),
                s(t, "key").to_string(),
                s(t, "value").to_string(),
            ));
        }
        nodes.insert(node.as_str(), (refs, since));
    }
    let mut due: Vec<(String, String)> = Vec::new();
    for pod in txn.list(&PODS, None) {
        let Some((refs, since)) =
            meta::path_str(pod, &["spec", "nodeName"]).and_then(|n| nodes.get(n))
        else {
            continue;
        };
        if meta::path(pod, &["metadata", "deletionTimestamp"]).is_some()
            || matches!(
                meta::path_str(pod, &["status", "phase"]),
                Some("Succeeded" | "Failed")
            )
        {
            continue;
        }
        let key = (
            meta::namespace(pod).to_string(),
            meta::name(pod).to_string(),
        );
        if untolerated(pod, refs) {
            due.push(key);
            continue;
        }
        let Some(secs) = allowed_seconds(pod, refs) else {
            continue;
        };
        let at = *since + Duration::from_secs(secs.unsigned_abs());
        match at.duration_since(now) {
            Err(_) | Ok(Duration::ZERO) => due.push(key),
            Ok(left) => {
                let wake = Instant::now() + left;
                next = Some(next.map_or(wake, |n| n.min(wake)));
            }
        }
    }
    state.first_seen.retain(|k, _| live.contains(k));
    drop(state);
    for (ns, name) in due {
        let Some(pod) = txn.get(&PODS, &ns, &name).cloned() else {
            continue;
        };
        sysevents::post(
            txn,
            &pod,
            "Normal",
            "TaintManagerEviction",
            &format!("Marking for deletion Pod {ns}/{name}"),
            &sysevents::NODE_CONTROLLER,
        );
        let _ = super::graceful::delete(txn, &PODS, &ns, &name, None);
    }
    next
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tolerations_match_as_the_real_helper_matches() {
        let taint = json!({"key": "k", "value": "v", "effect": "NoExecute"});
        for (t, want) in [
            (json!({"operator": "Exists"}), true),
            (json!({"key": "k", "operator": "Exists"}), true),
            (json!({"key": "k", "value": "v"}), true),
            (json!({"key": "k", "value": "w"}), false),
            (
                json!({"key": "k", "operator": "Exists", "effect": "NoSchedule"}),
                false,
            ),
            (json!({"key": "other", "operator": "Exists"}), false),
            (json!({"value": "v"}), false),
        ] {
            assert_eq!(tolerates(&t, &taint), want, "{t}");
        }
    }

    #[test]
    fn the_shortest_toleration_seconds_of_the_used_tolerations_counts() {
        let a = json!({"key": "a", "effect": "NoExecute"});
        let b = json!({"key": "b", "effect": "NoExecute"});
        let pod = json!({"spec": {"tolerations": [
            {"key": "a", "operator": "Exists", "tolerationSeconds": 60},
            {"key": "b", "operator": "Exists", "tolerationSeconds": 30}]}});
        assert_eq!(allowed_seconds(&pod, &[&a, &b]), Some(30));
        assert!(!untolerated(&pod, &[&a, &b]));
        let forever = json!({"spec": {"tolerations": [{"operator": "Exists"}]}});
        assert_eq!(allowed_seconds(&forever, &[&a]), None);
        let none = json!({"spec": {}});
        assert!(untolerated(&none, &[&a]));
    }
}

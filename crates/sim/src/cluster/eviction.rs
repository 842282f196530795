//! The eviction subresource and the disruption arithmetic of PodDisruptionBudgets,
//! evaluated atomically with the pod deletion so concurrent evictions cannot overshoot.

use serde_json::{json, Value};

use super::meta;
use super::resources::{DAEMONSETS, PDBS, PODS, REPLICASETS};
use super::selectors::LabelSelector;
use super::status::{success_status, ApiError};
use super::store::Txn;

/// Running with a Ready condition: what a PDB counts as healthy.
pub fn pod_healthy(pod: &Value) -> bool {
    meta::path_str(pod, &["status", "phase"]) == Some("Running")
        && meta::condition_status(pod, "Ready") == Some("True")
        && meta::path(pod, &["metadata", "deletionTimestamp"]).is_none()
}

fn terminal(pod: &Value) -> bool {
    matches!(
        meta::path_str(pod, &["status", "phase"]),
        Some("Succeeded" | "Failed")
    )
}

/// An int-or-percent against `total`, rounding up as the disruption controller does.
fn scaled(v: &Value, total: i64) -> Result<i64, String> {
    match v {
        Value::Number(n) => n.as_i64().ok_or_else(|| format!("invalid value {n}")),
        Value::String(s) => {
            let pct: i64 = s
                .strip_suffix('%')
                .and_then(|p| p.parse().ok())
                .ok_or_else(|| format!("invalid value {s:?}: must be an integer or percentage"))?;
            Ok((pct * total + 99) / 100)
        }
        other => Err(format!("invalid value {other}")),
    }
}

/// How many pods should exist: the scale of each owning ReplicaSet (desired count of
/// a DaemonSet), plus one per pod without a known controller. Counting the controller's
/// scale rather than present pods keeps an evicted-but-not-yet-replaced pod counted.
fn expected_pods(txn: &Txn<'_>, pods: &[&Value]) -> i64 {
    let mut owners = std::collections::BTreeMap::new();
    let mut bare = 0;
    for pod in pods {
        let owner = meta::path(pod, &["metadata", "ownerReferences"])
            .and_then(Value::as_array)
            .and_then(|refs| {
                refs.iter()
                    .find(|o| o.get("controller").and_then(Value::as_bool) == Some(true))
            });
        let scale = owner.and_then(|o| {
            let name = o.get("name").and_then(Value::as_str)?;
            match o.get("kind").and_then(Value::as_str)? {
                "ReplicaSet" => txn.get(&REPLICASETS, meta::namespace(pod), name).map(|rs| {
                    meta::path(rs, &["spec", "replicas"])
                        .and_then(Value::as_i64)
                        .unwrap_or(1)
                }),
                "DaemonSet" => txn
                    .get(&DAEMONSETS, meta::namespace(pod), name)
                    .and_then(|ds| {
                        meta::path(ds, &["status", "desiredNumberScheduled"])
                            .and_then(Value::as_i64)
                    }),
                _ => None,
            }
            .map(|scale| {
                (
                    o.get("uid")
                        .and_then(Value::as_str)
                        .unwrap_or(name)
                        .to_string(),
                    scale,
                )
            })
        });
        match scale {
            Some((uid, n)) => {
                owners.insert(uid, n);
            }
            None => bare += 1,
        }
    }
    owners.values().sum::<i64>() + bare
}

/// What the disruption controller reports for one budget.
#[derive(Debug, Clone, PartialEq)]
pub struct Budget {
    pub expected: i64,
    pub current_healthy: i64,
    pub desired_healthy: i64,
    pub disruptions_allowed: i64,
}

/// Computes a PDB's numbers from the pods it selects (non-terminal pods in its
/// namespace). Returns None when its selector is missing or invalid.
pub fn evaluate(txn: &Txn<'_>, pdb: &Value) -> Option<Result<Budget, String>> {
    let ns = meta::namespace(pdb);
    let sel = LabelSelector::from_object(meta::path(pdb, &["spec", "selector"]))?;
    let pods: Vec<&Value> = txn
        .list(&PODS, Some(ns))
        .into_iter()
        .filter(|p| !terminal(p) && sel.matches(&meta::labels(p)))
        .collect();
    let expected = expected_pods(txn, &pods);
    let current_healthy = pods.iter().filter(|p| pod_healthy(p)).count() as i64;
    let spec = pdb.get("spec")?;
    let desired = if let Some(min) = spec.get("minAvailable") {
        scaled(min, expected)
    } else if let Some(max) = spec.get("maxUnavailable") {
        scaled(max, expected).map(|m| expected - m)
    } else {
        Ok(1.min(expected))
    };
    Some(desired.map(|desired_healthy| Budget {
        expected,
        current_healthy,
        desired_healthy: desired_healthy.max(0),
        disruptions_allowed: (current_healthy - desired_healthy).max(0),
    }))
}

/// POST pods/{name}/eviction: deletes the pod unless a budget forbids it (429). Under
/// `dry_run` (the query's, or `deleteOptions.dryRun` in the body) it only checks.
pub fn evict(
    txn: &mut Txn<'_>,
    ns: &str,
    name: &str,
    body: &[u8],
    dry_run: bool,
) -> Result<Value, ApiError> {
    let dry_run = dry_run || super::verbs::delete_options_dry_run(body)?;
    if !body.is_empty() {
        let ev: Value = serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("invalid Eviction body: {e}")))?;
        if ev
            .get("kind")
            .and_then(Value::as_str)
            .is_some_and(|k| k != "Eviction")
        {
            return Err(ApiError::bad_request("the body must be an Eviction"));
        }
        let body_name = meta::name(&ev);
        if !body_name.is_empty() && body_name != name {
            return Err(ApiError::bad_request(format!(
                "name in URL does not match name in Eviction object: {name} != {body_name}"
            )));
        }
    }
    let Some(pod) = txn.get(&PODS, ns, name).cloned() else {
        return Err(ApiError::not_found(&PODS, name));
    };
    let pending = meta::path_str(&pod, &["status", "phase"]) == Some("Pending");
    if !(terminal(&pod)
        || pending
        || meta::path(&pod, &["metadata", "deletionTimestamp"]).is_some())
    {
        let labels = meta::labels(&pod);
        let budgets: Vec<Value> = txn
            .list(&PDBS, Some(ns))
            .into_iter()
            .filter(|b| {
                LabelSelector::from_object(meta::path(b, &["spec", "selector"]))
                    .is_some_and(|s| s.matches(&labels))
            })
            .cloned()
            .collect();
        if budgets.len() > 1 {
            return Err(ApiError::internal(
                "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
            ));
        }
        if let Some(pdb) = budgets.first() {
            let pdb_name = meta::name(pdb);
            let budget = match evaluate(txn, pdb) {
                Some(Ok(b)) => b,
                Some(Err(e)) => {
                    return Err(ApiError::internal(format!(
                        "failed to evaluate PodDisruptionBudget {pdb_name}: {e}"
                    )))
                }
                None => {
                    return Err(ApiError::internal(format!(
                        "PodDisruptionBudget {pdb_name} has an invalid selector"
                    )))
                }
            };
            // An unhealthy pod may go while the budget is met (IfHealthyBudget policy).
            let allowed = if pod_healthy(&pod) {
                budget.disruptions_allowed > 0
            } else {
                budget.current_healthy >= budget.desired_healthy
            };
            if !allowed {
                return Err(too_many_requests(pdb_name, &budget));
            }
        }
    }
    if !dry_run {
        let grace = super::graceful::requested_grace(&Default::default(), body)?;
        if meta::path(&pod, &["metadata", "deletionTimestamp"]).is_none() {
            // What the API server records on a pod it evicts before deleting it.
            txn.modify(&PODS, ns, name, |p| {
                meta::set_condition(
                    p,
                    "DisruptionTarget",
                    "True",
                    "EvictionByEvictionAPI",
                    "Eviction API: evicting",
                )
            })?;
        }
        super::graceful::delete(txn, &PODS, ns, name, grace)?;
    }
    Ok(success_status(201))
}

fn too_many_requests(pdb: &str, b: &Budget) -> ApiError {
    ApiError {
        code: 429,
        reason: "TooManyRequests".into(),
        message: "Cannot evict pod as it would violate the pod's disruption budget.".into(),
        details: Some(json!({"causes": [{
            "reason": "DisruptionBudget",
            "message": format!("The disruption budget {pdb} needs {} healthy pods and has {} currently",
                b.desired_healthy, b.current_healthy),
        }]})),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scaling() {
        assert_eq!(scaled(&json!(2), 10), Ok(2));
        assert_eq!(scaled(&json!("50%"), 3), Ok(2));
        assert_eq!(scaled(&json!("10%"), 10), Ok(1));
        assert!(scaled(&json!("x"), 3).is_err());
    }
}

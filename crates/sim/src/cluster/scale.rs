//! The `scale` subresource (`autoscaling/v1` Scale) of Deployments and ReplicaSets,
//! which `kubectl scale` reads and patches.

use serde_json::{json, Value};

use super::meta;
use super::status::ApiError;

/// A `metav1.LabelSelector` in the string form the real server puts in
/// `status.selector` (requirements sorted by key).
pub fn selector_string(sel: Option<&Value>) -> String {
    let mut reqs: Vec<(String, String)> = Vec::new();
    for (k, v) in meta::string_map(sel.and_then(|s| s.get("matchLabels"))) {
        reqs.push((k.clone(), format!("{k}={v}")));
    }
    let exprs = sel
        .and_then(|s| s.get("matchExpressions"))
        .and_then(Value::as_array);
    for e in exprs.into_iter().flatten() {
        let key = e.get("key").and_then(Value::as_str).unwrap_or_default();
        let values: Vec<&str> = e
            .get("values")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let text = match e.get("operator").and_then(Value::as_str) {
            Some("In") => format!("{key} in ({})", values.join(",")),
            Some("NotIn") => format!("{key} notin ({})", values.join(",")),
            Some("Exists") => key.to_string(),
            Some("DoesNotExist") => format!("!{key}"),
            _ => continue,
        };
        reqs.push((key.to_string(), text));
    }
    reqs.sort();
    reqs.into_iter()
        .map(|(_, t)| t)
        .collect::<Vec<_>>()
        .join(",")
}

/// The Scale of a Deployment or ReplicaSet.
pub fn of(obj: &Value) -> Value {
    let md = |k: &str| {
        meta::path(obj, &["metadata", k])
            .cloned()
            .unwrap_or(Value::Null)
    };
    let mut metadata = json!({"name": md("name"), "namespace": md("namespace"), "uid": md("uid"),
        "resourceVersion": md("resourceVersion"), "creationTimestamp": md("creationTimestamp")});
    if let Some(m) = metadata.as_object_mut() {
        m.retain(|_, v| !v.is_null());
    }
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": metadata,
        "spec": {"replicas": meta::path(obj, &["spec", "replicas"]).and_then(Value::as_i64).unwrap_or(1)},
        "status": {
            "replicas": meta::path(obj, &["status", "replicas"]).and_then(Value::as_i64).unwrap_or(0),
            "selector": selector_string(meta::path(obj, &["spec", "selector"])),
        },
    })
}

/// `spec.replicas` of a Scale written by a client.
pub fn replicas(scale: &Value) -> Result<i64, ApiError> {
    match meta::path(scale, &["spec", "replicas"]) {
        None | Some(Value::Null) => Ok(0),
        Some(v) => v.as_i64().filter(|r| *r >= 0).ok_or_else(|| {
            ApiError::new(
                422,
                "Invalid",
                format!("Scale.autoscaling \"\" is invalid: spec.replicas: Invalid value: {v}: must be greater than or equal to 0"),
            )
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selector_as_the_server_writes_it() {
        let sel = json!({"matchLabels": {"app": "web", "tier": "a"},
            "matchExpressions": [{"key": "env", "operator": "In", "values": ["x", "y"]}]});
        assert_eq!(selector_string(Some(&sel)), "app=web,env in (x,y),tier=a");
        let s = of(&json!({"metadata": {"name": "w", "namespace": "d"}, "spec": {"replicas": 3}}));
        assert_eq!(s["spec"]["replicas"], 3);
        assert_eq!(
            replicas(&json!({"spec": {"replicas": -1}}))
                .err()
                .map(|e| e.code),
            Some(422)
        );
    }
}

//! Ownership as the controllers share it: an object's controlling owner, objects indexed
//! by owner, pods made from an owner's template, and the status a controller writes
//! back. A leaf below `dirty`, `controllers` and `workloads`, which all lean on it.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{json, Value};

use super::eviction;
use super::meta;
use super::nodelifecycle;
use super::objects;
use super::resources::ResourceDef;
use super::store::{Stored, Txn};

/// Objects by the uid of their controlling owner.
pub type ByOwner = HashMap<String, Vec<Arc<Stored>>>;

/// Indexes `res` (in every namespace) by controller uid.
pub fn index_by_owner(txn: &Txn<'_>, res: &ResourceDef) -> ByOwner {
    let mut index = ByOwner::new();
    for o in txn.list_stored(res, None) {
        if let Some((_, uid)) = controller_uid(&o) {
            let uid = uid.to_string();
            index.entry(uid).or_default().push(o);
        }
    }
    index
}

pub fn controller_uid(pod: &Value) -> Option<(&str, &str)> {
    meta::path(pod, &["metadata", "ownerReferences"])?
        .as_array()?
        .iter()
        .find(|o| o.get("controller").and_then(Value::as_bool) == Some(true))
        .and_then(|o| Some((o.get("kind")?.as_str()?, o.get("uid")?.as_str()?)))
}

pub fn active(pod: &Value) -> bool {
    !matches!(
        meta::path_str(pod, &["status", "phase"]),
        Some("Succeeded" | "Failed")
    ) && meta::path(pod, &["metadata", "deletionTimestamp"]).is_none()
}

pub fn owned(index: &ByOwner, owner: &Value) -> Vec<Value> {
    index
        .get(meta::uid(owner))
        .into_iter()
        .flatten()
        .map(|p| p.value().clone())
        .collect()
}

/// A pod from a controller's template, owned by it.
pub fn pod_from_template(
    txn: &mut Txn<'_>,
    owner: &Value,
    res: &ResourceDef,
    node: Option<&str>,
) -> Value {
    let name = format!("{}-{}", meta::name(owner), txn.new_suffix());
    let template = meta::path(owner, &["spec", "template"])
        .cloned()
        .unwrap_or_else(|| json!({}));
    let mut pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": template.get("metadata").cloned().unwrap_or_else(|| json!({})),
        "spec": template.get("spec").cloned().unwrap_or_else(|| json!({})),
    });
    let md = meta::obj_mut(&mut pod, "metadata");
    md.insert("name".into(), json!(name));
    md.insert(
        "generateName".into(),
        json!(format!("{}-", meta::name(owner))),
    );
    md.insert("namespace".into(), json!(meta::namespace(owner)));
    md.insert(
        "ownerReferences".into(),
        json!([{"apiVersion": res.api_version(), "kind": res.kind, "name": meta::name(owner),
                "uid": meta::uid(owner), "controller": true, "blockOwnerDeletion": true}]),
    );
    if let Some(node) = node {
        pod["spec"]["nodeName"] = json!(node);
        // DaemonSet pods run everywhere, whatever the taints.
        let tolerations = meta::obj_mut(&mut pod, "spec")
            .entry("tolerations")
            .or_insert_with(|| json!([]));
        if let Value::Array(ts) = tolerations {
            if !ts.iter().any(|t| {
                t.get("key").is_none()
                    && t.get("operator").and_then(Value::as_str) == Some("Exists")
            }) {
                ts.push(json!({"operator": "Exists"}));
            }
        }
    }
    objects::default_pod(&mut pod);
    nodelifecycle::default_tolerations(&mut pod);
    pod
}

pub fn set_status(txn: &mut Txn<'_>, res: &'static ResourceDef, obj: &Value, status: Value) {
    let mut status = status;
    status["observedGeneration"] = obj["metadata"]["generation"].clone();
    if obj.get("status") != Some(&status) {
        let _ = txn.modify(res, meta::namespace(obj), meta::name(obj), |o| {
            o["status"] = status
        });
    }
}

pub fn ready(pod: &Value) -> bool {
    eviction::pod_healthy(pod)
}

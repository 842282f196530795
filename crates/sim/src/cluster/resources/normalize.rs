//! How each served kind's body is checked on write: decoded into its k8s-openapi type
//! and back (which drops unknown fields), plus the few field rules the real API server
//! enforces that the types alone do not (Job restart policy, RBAC rules and roleRefs,
//! PersistentVolume, PersistentVolumeClaim, StorageClass and CSINode fields). A leaf:
//! the resource table in `resources` points at these functions, so they import
//! nothing of the simulated cluster.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};

/// Decodes `v` into `T` and back: refuses what `T` cannot hold, drops unknown fields.
pub fn roundtrip<T: Serialize + DeserializeOwned>(v: Value) -> Result<Value, String> {
    let typed: T = serde_json::from_value(v).map_err(|e| e.to_string())?;
    serde_json::to_value(typed).map_err(|e| e.to_string())
}

/// A Job's pods must run to completion: the API server refuses other restart policies.
pub fn normalize_job(v: Value) -> Result<Value, String> {
    let v = roundtrip::<Job>(v)?;
    let policy = v
        .pointer("/spec/template/spec/restartPolicy")
        .and_then(Value::as_str);
    match policy {
        Some("OnFailure" | "Never") => Ok(v),
        None => Err("spec.template.spec.restartPolicy: Required value: valid values: \"OnFailure\", \"Never\"".into()),
        Some(other) => Err(format!(
            "spec.template.spec.restartPolicy: Unsupported value: {other:?}: supported values: \"OnFailure\", \"Never\""
        )),
    }
}

/// The real server refuses a binding without a roleRef name or kind it knows.
pub fn normalize_binding<T>(v: Value) -> Result<Value, String>
where
    T: Serialize + DeserializeOwned,
{
    let v = roundtrip::<T>(v)?;
    match v.pointer("/roleRef/kind").and_then(Value::as_str) {
        Some("Role" | "ClusterRole") => {}
        other => {
            return Err(format!(
            "roleRef.kind: Unsupported value: {:?}: supported values: \"Role\", \"ClusterRole\"",
            other.unwrap_or_default()
        ))
        }
    }
    if v.pointer("/roleRef/name")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        return Err("roleRef.name: Required value".into());
    }
    Ok(v)
}

/// A rule without verbs, or without resources and nonResourceURLs, grants nothing: the
/// real server refuses it.
pub fn normalize_role<T>(v: Value) -> Result<Value, String>
where
    T: Serialize + DeserializeOwned,
{
    let v = roundtrip::<T>(v)?;
    for (i, rule) in v
        .get("rules")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let empty = |k: &str| {
            rule.get(k)
                .and_then(Value::as_array)
                .is_none_or(Vec::is_empty)
        };
        if empty("verbs") {
            return Err(format!(
                "rules[{i}].verbs: Required value: verbs must contain at least one value"
            ));
        }
        if empty("resources") && empty("nonResourceURLs") {
            return Err(format!(
                "rules[{i}].resources: Required value: resource rules must supply at least one resource"
            ));
        }
    }
    Ok(v)
}

/// Several field errors in the real server's list form.
fn errors(errs: Vec<String>) -> Result<(), String> {
    match errs.len() {
        0 => Ok(()),
        1 => Err(errs.concat()),
        _ => Err(format!("[{}]", errs.join(", "))),
    }
}

fn has_storage(v: &Value, path: &str) -> bool {
    v.pointer(path)
        .and_then(|q| q.get("storage"))
        .is_some_and(|s| !s.is_null())
}

fn has_access_modes(v: &Value) -> bool {
    v.pointer("/spec/accessModes")
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty())
}

/// The volume sources a PV may have (one exactly).
const PV_SOURCES: [&str; 14] = [
    "hostPath",
    "local",
    "csi",
    "nfs",
    "iscsi",
    "fc",
    "rbd",
    "cephfs",
    "glusterfs",
    "awsElasticBlockStore",
    "gcePersistentDisk",
    "azureDisk",
    "azureFile",
    "cinder",
];

pub fn normalize_pv(v: Value) -> Result<Value, String> {
    let mut v = roundtrip::<PersistentVolume>(v)?;
    let mut errs = Vec::new();
    if !has_storage(&v, "/spec/capacity") {
        errs.push("spec.capacity: Required value".to_string());
    }
    if !has_access_modes(&v) {
        errs.push("spec.accessModes: Required value".to_string());
    }
    let sources = PV_SOURCES
        .iter()
        .filter(|s| {
            v.pointer(&format!("/spec/{s}"))
                .is_some_and(|x| !x.is_null())
        })
        .count();
    match sources {
        0 => errs.push("spec: Required value: must specify a volume type".to_string()),
        1 => {}
        _ => errs.push("spec: Forbidden: may not specify more than 1 volume type".to_string()),
    }
    if v.pointer("/spec/local").is_some_and(|x| !x.is_null())
        && v.pointer("/spec/nodeAffinity/required").is_none()
    {
        errs.push("spec.nodeAffinity: Required value: Local volume requires node affinity".into());
    }
    errors(errs)?;
    if let Some(spec) = v.get_mut("spec").and_then(Value::as_object_mut) {
        spec.entry("persistentVolumeReclaimPolicy")
            .or_insert_with(|| json!("Retain"));
        spec.entry("volumeMode")
            .or_insert_with(|| json!("Filesystem"));
    }
    Ok(v)
}

pub fn normalize_pvc(v: Value) -> Result<Value, String> {
    let mut v = roundtrip::<PersistentVolumeClaim>(v)?;
    let mut errs = Vec::new();
    if !has_access_modes(&v) {
        errs.push(
            "spec.accessModes: Required value: at least 1 access mode is required".to_string(),
        );
    }
    if !has_storage(&v, "/spec/resources/requests") {
        errs.push("spec.resources[storage]: Required value".to_string());
    }
    errors(errs)?;
    if let Some(spec) = v.get_mut("spec").and_then(Value::as_object_mut) {
        spec.entry("volumeMode")
            .or_insert_with(|| json!("Filesystem"));
    }
    Ok(v)
}

pub fn normalize_class(v: Value) -> Result<Value, String> {
    let raw_provisioner = v.get("provisioner").and_then(Value::as_str).unwrap_or("");
    if raw_provisioner.is_empty() {
        return Err("provisioner: Required value".into());
    }
    let mut v = roundtrip::<StorageClass>(v)?;
    let mode = v.get("volumeBindingMode").and_then(Value::as_str);
    if let Some(m) = mode.filter(|m| !matches!(*m, "Immediate" | "WaitForFirstConsumer")) {
        return Err(format!(
            "volumeBindingMode: Unsupported value: {m:?}: supported values: \"Immediate\", \"WaitForFirstConsumer\""
        ));
    }
    if let Some(m) = v.as_object_mut() {
        m.entry("volumeBindingMode")
            .or_insert_with(|| json!("Immediate"));
        m.entry("reclaimPolicy").or_insert_with(|| json!("Delete"));
    }
    Ok(v)
}

pub fn normalize_csinode(v: Value) -> Result<Value, String> {
    if v.pointer("/spec/drivers").is_none() {
        return Err("spec.drivers: Required value".into());
    }
    let v = roundtrip::<CSINode>(v)?;
    let mut errs = Vec::new();
    for (i, d) in v
        .pointer("/spec/drivers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        if d.get("nodeID")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            errs.push(format!("spec.drivers[{i}].nodeID: Required value"));
        }
        if d.pointer("/allocatable/count")
            .and_then(Value::as_i64)
            .is_some_and(|c| c < 0)
        {
            errs.push(format!(
                "spec.drivers[{i}].allocatable.count: Invalid value: must be greater than or equal to 0"
            ));
        }
    }
    errors(errs)?;
    Ok(v)
}

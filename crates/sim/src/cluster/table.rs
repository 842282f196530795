//! `meta.k8s.io/v1` Table responses: kubectl asks for these and prints the server's
//! columns, so `kubectl get nodes/pods` looks as it does against a real cluster.

use k8s_openapi::jiff::Timestamp;
use serde_json::{json, Value};

use super::meta;
use super::resources::ResourceDef;

/// How much of each object a row carries (`includeObject` query parameter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IncludeObject {
    None,
    Metadata,
    Object,
}

impl IncludeObject {
    pub fn parse(s: Option<&str>) -> Self {
        match s {
            Some("None") => IncludeObject::None,
            Some("Object") => IncludeObject::Object,
            _ => IncludeObject::Metadata,
        }
    }
}

fn col(name: &str, kind: &str, format: &str, description: &str, priority: u8) -> Value {
    json!({"name": name, "type": kind, "format": format, "description": description, "priority": priority})
}

/// Ages as kubectl prints them ("45s", "5m3s", "3h", "12d").
pub fn human_duration(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".into();
    }
    let s = seconds.max(0);
    if s < 120 {
        return format!("{s}s");
    }
    let minutes = s / 60;
    if minutes < 10 {
        return match s % 60 {
            0 => format!("{minutes}m"),
            rem => format!("{minutes}m{rem}s"),
        };
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = s / 3600;
    if hours < 8 {
        return match minutes % 60 {
            0 => format!("{hours}h"),
            rem => format!("{hours}h{rem}m"),
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        return match hours % 24 {
            0 => format!("{}d", hours / 24),
            rem => format!("{}d{rem}h", hours / 24),
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        return match (hours / 24) % 365 {
            0 => format!("{}y", hours / 24 / 365),
            rem => format!("{}y{rem}d", hours / 24 / 365),
        };
    }
    format!("{}y", hours / 24 / 365)
}

fn age(obj: &Value, field: &[&str]) -> String {
    match meta::path_str(obj, field).and_then(meta::parse_time) {
        Some(t) => human_duration(Timestamp::now().as_second() - t.as_second()),
        None => "<unknown>".into(),
    }
}

fn node_row(n: &Value) -> Vec<Value> {
    let status = match meta::condition_status(n, "Ready") {
        Some("True") => "Ready",
        Some(_) => "NotReady",
        None => "Unknown",
    };
    let mut status = status.to_string();
    if meta::path(n, &["spec", "unschedulable"]).and_then(Value::as_bool) == Some(true) {
        status.push_str(",SchedulingDisabled");
    }
    let mut roles: Vec<String> = meta::labels(n)
        .into_iter()
        .filter_map(|(k, v)| match k.strip_prefix("node-role.kubernetes.io/") {
            Some(role) => Some(role.to_string()),
            None if k == "kubernetes.io/role" => Some(v),
            None => None,
        })
        .filter(|r| !r.is_empty())
        .collect();
    roles.sort();
    roles.dedup();
    let roles = if roles.is_empty() {
        "<none>".to_string()
    } else {
        roles.join(",")
    };
    let internal_ip = meta::path(n, &["status", "addresses"])
        .and_then(Value::as_array)
        .and_then(|a| {
            a.iter()
                .find(|x| x.get("type").and_then(Value::as_str) == Some("InternalIP"))
        })
        .and_then(|x| x.get("address"))
        .and_then(Value::as_str)
        .unwrap_or("<none>");
    let info = |k: &str| {
        meta::path_str(n, &["status", "nodeInfo", k])
            .unwrap_or_default()
            .to_string()
    };
    vec![
        json!(meta::name(n)),
        json!(status),
        json!(roles),
        json!(age(n, &["metadata", "creationTimestamp"])),
        json!(info("kubeletVersion")),
        json!(internal_ip),
        json!("<none>"),
        json!(info("osImage")),
        json!(info("kernelVersion")),
        json!(info("containerRuntimeVersion")),
    ]
}

/// The STATUS column: a reason when there is one, else the phase.
pub fn pod_status(p: &Value) -> String {
    if meta::path(p, &["metadata", "deletionTimestamp"]).is_some() {
        return "Terminating".into();
    }
    let mut status = meta::path_str(p, &["status", "reason"])
        .or_else(|| meta::path_str(p, &["status", "phase"]))
        .unwrap_or("Pending")
        .to_string();
    for cs in meta::path(p, &["status", "containerStatuses"])
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(r) = meta::path_str(cs, &["state", "waiting", "reason"]) {
            status = r.to_string();
        } else if let Some(r) = meta::path_str(cs, &["state", "terminated", "reason"]) {
            status = r.to_string();
        }
    }
    status
}

fn pod_row(p: &Value) -> Vec<Value> {
    let total = meta::path(p, &["spec", "containers"])
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    let statuses = meta::path(p, &["status", "containerStatuses"]).and_then(Value::as_array);
    let ready = statuses
        .into_iter()
        .flatten()
        .filter(|c| c.get("ready").and_then(Value::as_bool) == Some(true))
        .count();
    let restarts: i64 = statuses
        .into_iter()
        .flatten()
        .filter_map(|c| c.get("restartCount").and_then(Value::as_i64))
        .sum();
    let or_none = |keys: &[&str]| meta::path_str(p, keys).unwrap_or("<none>").to_string();
    vec![
        json!(meta::name(p)),
        json!(format!("{ready}/{total}")),
        json!(pod_status(p)),
        json!(restarts.to_string()),
        json!(age(p, &["metadata", "creationTimestamp"])),
        json!(or_none(&["status", "podIP"])),
        json!(or_none(&["spec", "nodeName"])),
        json!(or_none(&["status", "nominatedNodeName"])),
        json!("<none>"),
    ]
}

fn event_row(e: &Value) -> Vec<Value> {
    let last = ["lastTimestamp", "eventTime", "firstTimestamp"]
        .iter()
        .find(|k| meta::path_str(e, &[k]).is_some())
        .map_or("<unknown>".to_string(), |k| age(e, &[k]));
    let kind = meta::path_str(e, &["involvedObject", "kind"])
        .unwrap_or_default()
        .to_lowercase();
    let name = meta::path_str(e, &["involvedObject", "name"]).unwrap_or_default();
    vec![
        json!(last),
        json!(e.get("type").and_then(Value::as_str).unwrap_or_default()),
        json!(e.get("reason").and_then(Value::as_str).unwrap_or_default()),
        json!(format!("{kind}/{name}")),
        json!(e.get("message").and_then(Value::as_str).unwrap_or_default()),
    ]
}

/// Renders one object into its row's cells.
type RowFn = fn(&Value) -> Vec<Value>;

fn columns(res: &ResourceDef) -> (Vec<Value>, RowFn) {
    match (res.group, res.plural) {
        ("", "nodes") => (
            vec![
                col("Name", "string", "name", "Name must be unique within a namespace.", 0),
                col("Status", "string", "", "The status of the node", 0),
                col("Roles", "string", "", "The roles of the node", 0),
                col("Age", "string", "", "CreationTimestamp is a timestamp representing the server time when this object was created.", 0),
                col("Version", "string", "", "Kubelet Version reported by the node.", 0),
                col("Internal-IP", "string", "", "List of addresses reachable to the node.", 1),
                col("External-IP", "string", "", "List of addresses reachable to the node.", 1),
                col("OS-Image", "string", "", "OS Image reported by the node.", 1),
                col("Kernel-Version", "string", "", "Kernel Version reported by the node.", 1),
                col("Container-Runtime", "string", "", "Container Runtime Version reported by the node.", 1),
            ],
            node_row,
        ),
        ("", "pods") => (
            vec![
                col("Name", "string", "name", "Name must be unique within a namespace.", 0),
                col("Ready", "string", "", "The aggregate readiness state of this pod for accepting traffic.", 0),
                col("Status", "string", "", "The aggregate status of the containers in this pod.", 0),
                col("Restarts", "string", "", "The number of times the containers in this pod have been restarted.", 0),
                col("Age", "string", "", "CreationTimestamp is a timestamp representing the server time when this object was created.", 0),
                col("IP", "string", "", "IP address allocated to the pod.", 1),
                col("Node", "string", "", "Name of the node this pod runs on.", 1),
                col("Nominated Node", "string", "", "Name of the node where the pod is nominated to run.", 1),
                col("Readiness Gates", "string", "", "All readiness gates of the pod.", 1),
            ],
            pod_row,
        ),
        ("", "events") => (
            vec![
                col("Last Seen", "string", "", "The last time this event was seen.", 0),
                col("Type", "string", "", "Type of this event.", 0),
                col("Reason", "string", "", "Reason why this event was generated.", 0),
                col("Object", "string", "", "The object this event is about.", 0),
                col("Message", "string", "", "A human-readable description of the status of this operation.", 0),
            ],
            event_row,
        ),
        _ => (
            vec![
                col("Name", "string", "name", "Name must be unique within a namespace.", 0),
                col("Created At", "date", "", "CreationTimestamp is a timestamp representing the server time when this object was created.", 0),
            ],
            |o| vec![json!(meta::name(o)), json!(meta::path_str(o, &["metadata", "creationTimestamp"]).unwrap_or_default())],
        ),
    }
}

/// A Table of `objects` (full objects with kind/apiVersion).
pub fn table(
    res: &ResourceDef,
    objects: &[&Value],
    list_meta: Value,
    include: IncludeObject,
) -> Value {
    let (cols, row) = columns(res);
    let rows: Vec<Value> = objects
        .iter()
        .map(|o| {
            let mut r = json!({"cells": row(o)});
            match include {
                IncludeObject::None => {}
                IncludeObject::Metadata => {
                    r["object"] = json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                        "metadata": o.get("metadata").cloned().unwrap_or_else(|| json!({}))});
                }
                IncludeObject::Object => r["object"] = (*o).clone(),
            }
            r
        })
        .collect();
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": list_meta, "columnDefinitions": cols, "rows": rows})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(human_duration(45), "45s");
        assert_eq!(human_duration(5 * 60 + 3), "5m3s");
        assert_eq!(human_duration(42 * 60), "42m");
        assert_eq!(human_duration(3 * 3600 + 60), "3h1m");
        assert_eq!(human_duration(20 * 3600), "20h");
        assert_eq!(human_duration(3 * 86400), "3d");
        assert_eq!(human_duration(40 * 86400), "40d");
    }

    #[test]
    fn pod_status_column() {
        let p = json!({"status": {"phase": "Pending", "containerStatuses": [{"state": {"waiting": {"reason": "ContainerCreating"}}}]}});
        assert_eq!(pod_status(&p), "ContainerCreating");
        assert_eq!(
            pod_status(&json!({"status": {"phase": "Running"}})),
            "Running"
        );
    }
}

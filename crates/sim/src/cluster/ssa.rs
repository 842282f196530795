//! Server-side apply's field ownership between appliers: each apply records the fields
//! its configuration sets under its `fieldManager` in `metadata.managedFields`
//! (`operation: Apply`, `fieldsType: FieldsV1`), and an apply that would change a field
//! another applier owns is refused with the real 409 (`Apply failed with 1 conflict:
//! conflict with "M" using apps/v1: .spec.replicas`) unless `force=true`, which takes the
//! field over.
//!
//! Lists of objects with a `name` are keyed by it (`k:{"name":"web"}`), other lists are
//! atomic. Not modelled: ownership taken by non-apply writes (`operation: Update`), and
//! removing fields an applier stops setting.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Map, Value};

use super::meta;
use super::status::ApiError;

/// A field path: `f:spec`, `f:replicas`, or `k:{"name":"web"}` segments.
type Path = Vec<String>;

fn leaves(v: &Value, prefix: &mut Path, out: &mut BTreeSet<Path>) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, child) in m {
                prefix.push(format!("f:{k}"));
                leaves(child, prefix, out);
                prefix.pop();
            }
        }
        Value::Array(items)
            if !items.is_empty()
                && items
                    .iter()
                    .all(|i| i.get("name").and_then(Value::as_str).is_some()) =>
        {
            for item in items {
                let key = json!({"name": item["name"]}).to_string();
                prefix.push(format!("k:{key}"));
                leaves(item, prefix, out);
                prefix.pop();
            }
        }
        _ => {
            out.insert(prefix.clone());
        }
    }
}

/// The fields an applied configuration sets (identity and type fields left out).
fn applied_fields(config: &Value) -> BTreeSet<Path> {
    let mut c = config.clone();
    if let Some(m) = c.as_object_mut() {
        m.remove("apiVersion");
        m.remove("kind");
        m.remove("status");
    }
    if let Some(md) = c.get_mut("metadata").and_then(Value::as_object_mut) {
        for f in [
            "name",
            "namespace",
            "uid",
            "resourceVersion",
            "managedFields",
            "creationTimestamp",
        ] {
            md.remove(f);
        }
        if md.is_empty() {
            if let Some(m) = c.as_object_mut() {
                m.remove("metadata");
            }
        }
    }
    let mut out = BTreeSet::new();
    if c.as_object().is_some_and(|m| !m.is_empty()) {
        leaves(&c, &mut Vec::new(), &mut out);
    }
    out
}

/// `fieldsV1`: the paths as nested objects.
fn encode(fields: &BTreeSet<Path>) -> Value {
    let mut root = Map::new();
    for path in fields {
        let mut node = &mut root;
        for seg in path {
            let entry = node.entry(seg.clone()).or_insert_with(|| json!({}));
            if seg.starts_with("k:") {
                if let Some(m) = entry.as_object_mut() {
                    m.entry(".").or_insert_with(|| json!({}));
                }
            }
            let Some(next) = entry.as_object_mut() else {
                break;
            };
            node = next;
        }
    }
    Value::Object(root)
}

fn decode(v: &Value, prefix: &mut Path, out: &mut BTreeSet<Path>) {
    let Some(m) = v.as_object() else { return };
    let children: Vec<(&String, &Value)> = m.iter().filter(|(k, _)| *k != ".").collect();
    if children.is_empty() {
        if !prefix.is_empty() {
            out.insert(prefix.clone());
        }
        return;
    }
    for (k, child) in children {
        prefix.push(k.clone());
        decode(child, prefix, out);
        prefix.pop();
    }
}

fn value_at<'a>(v: &'a Value, path: &Path) -> Option<&'a Value> {
    let mut cur = v;
    for seg in path {
        cur = if let Some(f) = seg.strip_prefix("f:") {
            cur.get(f)?
        } else if let Some(k) = seg.strip_prefix("k:") {
            let key: Value = serde_json::from_str(k).ok()?;
            cur.as_array()?
                .iter()
                .find(|i| i.get("name") == key.get("name"))?
        } else {
            return None;
        };
    }
    Some(cur)
}

/// `.spec.template.spec.containers[name="web"].image`, as conflicts name fields.
fn display(path: &Path) -> String {
    let mut s = String::new();
    for seg in path {
        if let Some(f) = seg.strip_prefix("f:") {
            s.push('.');
            s.push_str(f);
        } else if let Some(k) = seg.strip_prefix("k:") {
            let key: Value = serde_json::from_str(k).unwrap_or(Value::Null);
            s.push_str(&format!("[name={}]", key["name"]));
        }
    }
    s
}

/// The `managedFields` after `manager` applies `config` to `live` (None: a create), or
/// the 409 when it would change fields another applier owns and `force` is off.
pub fn apply(
    live: Option<&Value>,
    config: &Value,
    manager: &str,
    force: bool,
    api_version: &str,
    kind: &str,
    name: &str,
) -> Result<Value, ApiError> {
    let mine = applied_fields(config);
    let entries: Vec<Value> = live
        .and_then(|l| meta::path(l, &["metadata", "managedFields"]))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut conflicts: BTreeMap<String, Vec<Path>> = BTreeMap::new();
    let mut kept = Vec::new();
    for mut e in entries {
        let who = e
            .get("manager")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        if who == manager && e.get("operation").and_then(Value::as_str) == Some("Apply") {
            continue;
        }
        let mut theirs = BTreeSet::new();
        if let Some(f) = e.get("fieldsV1") {
            decode(f, &mut Vec::new(), &mut theirs);
        }
        let contested: Vec<Path> = theirs
            .iter()
            .filter(|p| mine.contains(*p))
            .filter(|p| live.and_then(|l| value_at(l, p)) != value_at(config, p))
            .cloned()
            .collect();
        if !contested.is_empty() {
            if force {
                for p in &contested {
                    theirs.remove(p);
                }
                e["fieldsV1"] = encode(&theirs);
            } else {
                conflicts.entry(who).or_default().extend(contested);
            }
        }
        if !theirs.is_empty() {
            kept.push(e);
        }
    }
    if !conflicts.is_empty() {
        return Err(conflict(&conflicts, api_version, kind, name));
    }
    kept.push(json!({
        "manager": manager,
        "operation": "Apply",
        "apiVersion": api_version,
        "time": meta::now_rfc3339(),
        "fieldsType": "FieldsV1",
        "fieldsV1": encode(&mine),
    }));
    Ok(Value::Array(kept))
}

fn conflict(
    by_manager: &BTreeMap<String, Vec<Path>>,
    api_version: &str,
    kind: &str,
    name: &str,
) -> ApiError {
    let total: usize = by_manager.values().map(Vec::len).sum();
    let mut lines = Vec::new();
    let mut causes = Vec::new();
    for (who, paths) in by_manager {
        for p in paths {
            causes.push(json!({"reason": "FieldManagerConflict",
                "message": format!("conflict with {who:?} using {api_version}"),
                "field": display(p)}));
        }
        if total == 1 {
            lines.push(format!(
                "conflict with {who:?} using {api_version}: {}",
                display(&paths[0])
            ));
        } else {
            let mut s = format!("conflicts with {who:?} using {api_version}:");
            for p in paths {
                s.push_str(&format!("\n- {}", display(p)));
            }
            lines.push(s);
        }
    }
    let plural = if total == 1 { "" } else { "s" };
    ApiError {
        details: Some(json!({"name": name, "kind": kind, "causes": causes})),
        ..ApiError::new(
            409,
            "Conflict",
            format!(
                "Apply failed with {total} conflict{plural}: {}",
                lines.join("\n")
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appliers_conflict_on_a_changed_field_unless_forced() {
        let a = json!({"spec": {"replicas": 2, "template": {"spec": {"containers": [
            {"name": "web", "image": "nginx:1"}]}}}});
        let mf = apply(None, &a, "alice", false, "apps/v1", "Deployment", "d").unwrap_or_default();
        let live = json!({"metadata": {"managedFields": mf}, "spec": a["spec"].clone()});
        // Same value: shared ownership, no conflict.
        assert!(apply(
            Some(&live),
            &json!({"spec": {"replicas": 2}}),
            "bob",
            false,
            "apps/v1",
            "Deployment",
            "d"
        )
        .is_ok());
        let e = apply(
            Some(&live),
            &json!({"spec": {"replicas": 3}}),
            "bob",
            false,
            "apps/v1",
            "Deployment",
            "d",
        )
        .err()
        .unwrap_or_else(|| ApiError::new(0, "", ""));
        assert_eq!(e.code, 409);
        assert_eq!(
            e.message,
            "Apply failed with 1 conflict: conflict with \"alice\" using apps/v1: .spec.replicas"
        );
        let forced = apply(
            Some(&live),
            &json!({"spec": {"replicas": 3}}),
            "bob",
            true,
            "apps/v1",
            "Deployment",
            "d",
        )
        .unwrap_or_default();
        let managers: Vec<&str> = forced
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| e["manager"].as_str())
            .collect();
        assert_eq!(managers, ["alice", "bob"]);
        assert!(forced[0]["fieldsV1"]["f:spec"].get("f:replicas").is_none());
        assert!(
            forced[0]["fieldsV1"]["f:spec"]["f:template"]["f:spec"]["f:containers"]
                .get("k:{\"name\":\"web\"}")
                .is_some()
        );
    }
}

//! The three PATCH flavours clients send: JSON merge patch (RFC 7386), strategic merge
//! patch (merge patch plus keyed list merging for the lists that need it), and JSON
//! patch (RFC 6902).

use serde_json::{Map, Value};

/// RFC 7386: objects merge recursively, `null` deletes, anything else replaces.
pub fn merge(target: &mut Value, patch: &Value) {
    let Value::Object(patch_map) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    if let Value::Object(t) = target {
        for (k, v) in patch_map {
            if v.is_null() {
                t.remove(k);
            } else {
                merge(t.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
    }
}

/// The merge key of lists that strategic merge patch merges element-wise instead of
/// replacing (from the Kubernetes types' `patchMergeKey` tags).
fn merge_key(field: &str) -> Option<&'static str> {
    Some(match field {
        "conditions" | "addresses" => "type",
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "volumes"
        | "env"
        | "imagePullSecrets"
        | "containerStatuses"
        | "initContainerStatuses" => "name",
        "volumeMounts" => "mountPath",
        "ownerReferences" => "uid",
        "ports" => "containerPort",
        _ => return None,
    })
}

/// Lists of scalars that strategic merge patch unions instead of replacing.
fn is_merged_scalar_list(field: &str) -> bool {
    field == "finalizers"
}

/// Strategic merge patch, for the shapes clients send against the simulated types:
/// keyed lists merge by their merge key (`$patch: delete` removes an element),
/// `$patch: replace` on a map replaces it, and `$setElementOrder/`, `$retainKeys`
/// directives are accepted and ignored.
pub fn strategic(target: &mut Value, patch: &Value) {
    let Value::Object(patch_map) = patch else {
        *target = patch.clone();
        return;
    };
    if patch_map.get("$patch").and_then(Value::as_str) == Some("replace") {
        let mut clean = patch_map.clone();
        clean.remove("$patch");
        *target = Value::Object(clean);
        return;
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(t) = target else { return };
    for (k, v) in patch_map {
        if k.starts_with('$') {
            continue;
        }
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(Value::Array(list)), Value::Array(gone)) = (t.get_mut(field), v) {
                list.retain(|x| !gone.contains(x));
            }
            continue;
        }
        if v.is_null() {
            t.remove(k);
            continue;
        }
        match (merge_key(k), v) {
            (Some(mk), Value::Array(items)) => {
                let existing = t
                    .entry(k.clone())
                    .or_insert_with(|| Value::Array(Vec::new()));
                if !existing.is_array() {
                    *existing = Value::Array(Vec::new());
                }
                if let Value::Array(list) = existing {
                    merge_keyed_list(list, items, mk);
                }
            }
            (None, Value::Array(items)) if is_merged_scalar_list(k) => {
                let existing = t
                    .entry(k.clone())
                    .or_insert_with(|| Value::Array(Vec::new()));
                if let Value::Array(list) = existing {
                    for item in items {
                        if !list.contains(item) {
                            list.push(item.clone());
                        }
                    }
                } else {
                    *existing = Value::Array(items.clone());
                }
            }
            (_, Value::Object(_)) => strategic(t.entry(k.clone()).or_insert(Value::Null), v),
            _ => {
                t.insert(k.clone(), v.clone());
            }
        }
    }
}

fn merge_keyed_list(list: &mut Vec<Value>, items: &[Value], mk: &str) {
    if items
        .iter()
        .any(|i| i.get("$patch").and_then(Value::as_str) == Some("replace"))
    {
        *list = items
            .iter()
            .filter(|i| i.get("$patch").is_none())
            .cloned()
            .collect();
        return;
    }
    for item in items {
        let id = item.get(mk).cloned();
        let pos = id
            .as_ref()
            .and_then(|id| list.iter().position(|e| e.get(mk) == Some(id)));
        let delete = item.get("$patch").and_then(Value::as_str) == Some("delete");
        match (pos, delete) {
            (Some(i), true) => {
                list.remove(i);
            }
            (None, true) => {}
            (Some(i), false) => strategic(&mut list[i], item),
            (None, false) => {
                let mut fresh = Value::Null;
                strategic(&mut fresh, item);
                list.push(fresh);
            }
        }
    }
}

/// Decodes a JSON pointer ("/a/b~1c") into its unescaped tokens.
fn pointer_tokens(ptr: &str) -> Result<Vec<String>, String> {
    if ptr.is_empty() {
        return Ok(Vec::new());
    }
    let rest = ptr
        .strip_prefix('/')
        .ok_or_else(|| format!("invalid JSON pointer {ptr:?}"))?;
    Ok(rest
        .split('/')
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect())
}

fn parent_mut<'a>(doc: &'a mut Value, tokens: &[String]) -> Result<&'a mut Value, String> {
    let mut cur = doc;
    for t in tokens {
        cur = match cur {
            Value::Object(m) => m
                .get_mut(t)
                .ok_or_else(|| format!("path element {t:?} not found"))?,
            Value::Array(a) => {
                let i: usize = t
                    .parse()
                    .map_err(|_| format!("invalid array index {t:?}"))?;
                a.get_mut(i)
                    .ok_or_else(|| format!("array index {i} out of range"))?
            }
            _ => return Err(format!("cannot descend into {t:?}")),
        };
    }
    Ok(cur)
}

fn add(doc: &mut Value, path: &str, value: Value) -> Result<(), String> {
    let tokens = pointer_tokens(path)?;
    let Some((last, parents)) = tokens.split_last() else {
        *doc = value;
        return Ok(());
    };
    match parent_mut(doc, parents)? {
        Value::Object(m) => {
            m.insert(last.clone(), value);
        }
        Value::Array(a) => {
            if last == "-" {
                a.push(value);
            } else {
                let i: usize = last
                    .parse()
                    .map_err(|_| format!("invalid array index {last:?}"))?;
                if i > a.len() {
                    return Err(format!("array index {i} out of range"));
                }
                a.insert(i, value);
            }
        }
        _ => return Err(format!("cannot add at {path:?}")),
    }
    Ok(())
}

fn remove(doc: &mut Value, path: &str) -> Result<Value, String> {
    let tokens = pointer_tokens(path)?;
    let Some((last, parents)) = tokens.split_last() else {
        return Err("cannot remove the whole document".into());
    };
    match parent_mut(doc, parents)? {
        Value::Object(m) => m
            .remove(last)
            .ok_or_else(|| format!("path {path:?} not found")),
        Value::Array(a) => {
            let i: usize = last
                .parse()
                .map_err(|_| format!("invalid array index {last:?}"))?;
            if i >= a.len() {
                return Err(format!("array index {i} out of range"));
            }
            Ok(a.remove(i))
        }
        _ => Err(format!("cannot remove {path:?}")),
    }
}

fn get(doc: &Value, path: &str) -> Result<Value, String> {
    doc.pointer(path)
        .cloned()
        .ok_or_else(|| format!("path {path:?} not found"))
}

/// RFC 6902; the whole patch fails if one operation does.
pub fn json_patch(doc: &mut Value, ops: &Value) -> Result<(), String> {
    let ops = ops
        .as_array()
        .ok_or("a JSON patch must be an array of operations")?;
    let mut work = doc.clone();
    for op in ops {
        let field = |name: &str| -> Result<&str, String> {
            op.get(name)
                .and_then(Value::as_str)
                .ok_or_else(|| format!("operation is missing {name:?}"))
        };
        let value = || {
            op.get("value")
                .cloned()
                .ok_or_else(|| "operation is missing \"value\"".to_string())
        };
        let path = field("path")?;
        match field("op")? {
            "add" => add(&mut work, path, value()?)?,
            "remove" => {
                remove(&mut work, path)?;
            }
            "replace" => {
                remove(&mut work, path)?;
                add(&mut work, path, value()?)?;
            }
            "move" => {
                let v = remove(&mut work, field("from")?)?;
                add(&mut work, path, v)?;
            }
            "copy" => {
                let v = get(&work, field("from")?)?;
                add(&mut work, path, v)?;
            }
            "test" => {
                if get(&work, path)? != value()? {
                    return Err(format!("test operation failed at {path:?}"));
                }
            }
            other => return Err(format!("unknown operation {other:?}")),
        }
    }
    *doc = work;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_patch() {
        let mut doc = json!({"spec": {"unschedulable": false, "taints": [{"key": "a"}]}, "x": 1});
        merge(
            &mut doc,
            &json!({"spec": {"unschedulable": true, "taints": [{"key": "b"}]}, "x": null}),
        );
        assert_eq!(
            doc,
            json!({"spec": {"unschedulable": true, "taints": [{"key": "b"}]}})
        );
    }

    #[test]
    fn strategic_patch() {
        let mut doc = json!({"status": {"conditions": [
            {"type": "Ready", "status": "False"}, {"type": "A", "status": "True"}]},
            "metadata": {"finalizers": ["x"]}, "spec": {"taints": [{"key": "t"}]}});
        strategic(
            &mut doc,
            &json!({
            "$setElementOrder/conditions": [{"type": "Ready"}],
            "status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "A", "$patch": "delete"}]},
            "metadata": {"finalizers": ["y"]},
            "spec": {"taints": []}}),
        );
        assert_eq!(
            doc,
            json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]},
            "metadata": {"finalizers": ["x", "y"]}, "spec": {"taints": []}})
        );
    }

    #[test]
    fn json_patch_ops() {
        let mut doc =
            json!({"metadata": {"labels": {"a/b": "1"}}, "spec": {"taints": [{"key": "x"}]}});
        json_patch(
            &mut doc,
            &json!([
                {"op": "test", "path": "/metadata/labels/a~1b", "value": "1"},
                {"op": "remove", "path": "/metadata/labels/a~1b"},
                {"op": "add", "path": "/spec/taints/-", "value": {"key": "y"}},
                {"op": "replace", "path": "/spec/taints/0", "value": {"key": "z"}},
                {"op": "copy", "from": "/spec/taints/0", "path": "/spec/first"},
            ]),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            doc,
            json!({"metadata": {"labels": {}}, "spec": {"taints": [{"key": "z"}, {"key": "y"}], "first": {"key": "z"}}})
        );
        assert!(json_patch(
            &mut doc,
            &json!([{"op": "test", "path": "/spec/first/key", "value": "q"}])
        )
        .is_err());
        assert!(json_patch(&mut doc, &json!({"op": "add"})).is_err());
    }
}

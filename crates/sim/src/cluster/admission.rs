//! Validation the real API server does beyond decoding, with its 422 field paths:
//! label keys and values on every object, and resource quantities of pods and pod
//! templates (well-formed, not negative) and of nodes.

use std::sync::OnceLock;

use regex::Regex;
use serde_json::Value;

use super::meta;
use super::resources::ResourceDef;
use super::status::ApiError;

const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
const NAME_PART_MSG: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
const PREFIX_MSG: &str = "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const QUANTITY_MSG: &str =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";

fn re(cell: &'static OnceLock<Regex>, pattern: &str) -> &'static Regex {
    // The patterns are constants of this file.
    cell.get_or_init(|| Regex::new(pattern).expect("a valid constant pattern"))
}

fn name_part() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    re(&R, r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
}

fn dns_subdomain() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    re(
        &R,
        r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
    )
}

fn quantity() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    re(
        &R,
        r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+|[numkMGTPE]|[KMGTPE]i)?$",
    )
}

fn invalid(path: &str, value: &str, why: &str) -> String {
    format!("{path}: Invalid value: {value:?}: {why}")
}

/// Problems with a label key (`prefix/name`), as the real server words them.
fn label_key_error(key: &str) -> Option<String> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix {
        if p.is_empty() {
            return Some("prefix part must be non-empty".into());
        }
        if p.len() > 253 || !dns_subdomain().is_match(p) {
            return Some(PREFIX_MSG.into());
        }
    }
    if name.is_empty() {
        return Some("name part must be non-empty".into());
    }
    if name.len() > 63 {
        return Some("name part must be no more than 63 characters".into());
    }
    if !name_part().is_match(name) {
        return Some(NAME_PART_MSG.into());
    }
    None
}

fn check_labels(obj: &Value, out: &mut Vec<String>) {
    for (k, v) in meta::labels(obj) {
        if let Some(why) = label_key_error(&k) {
            out.push(invalid("metadata.labels", &k, &why));
        }
        if v.len() > 63 {
            out.push(invalid(
                "metadata.labels",
                &v,
                "must be no more than 63 characters",
            ));
        } else if !v.is_empty() && !name_part().is_match(&v) {
            out.push(invalid("metadata.labels", &v, LABEL_VALUE_MSG));
        }
    }
}

/// Checks each quantity of the map at `v` (`requests`, `capacity`, ...).
fn check_quantities(v: Option<&Value>, path: &str, out: &mut Vec<String>) {
    let Some(map) = v.and_then(Value::as_object) else {
        return;
    };
    for (name, q) in map {
        let text = match q {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            other => other.to_string(),
        };
        let at = format!("{path}[{name}]");
        if !quantity().is_match(text.trim()) {
            out.push(invalid(&at, &text, QUANTITY_MSG));
        } else if text.trim().starts_with('-')
            && text
                .trim()
                .trim_start_matches('-')
                .chars()
                .any(|c| ('1'..='9').contains(&c))
        {
            out.push(invalid(&at, &text, "must be greater than or equal to 0"));
        }
    }
}

fn check_pod_spec(spec: &Value, path: &str, out: &mut Vec<String>) {
    for list in ["initContainers", "containers"] {
        for (i, c) in spec
            .get(list)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            for part in ["requests", "limits"] {
                check_quantities(
                    c.pointer(&format!("/resources/{part}")),
                    &format!("{path}.{list}[{i}].resources.{part}"),
                    out,
                );
            }
        }
    }
    for part in ["requests", "limits"] {
        check_quantities(
            spec.pointer(&format!("/overhead/{part}")),
            &format!("{path}.overhead"),
            out,
        );
    }
}

/// Refuses `obj` with the real server's 422 when it has problems: one field's message, or
/// several in brackets, with a cause per field.
pub fn check(res: &ResourceDef, obj: &Value) -> Result<(), ApiError> {
    let found = problems(res.kind, obj);
    if found.is_empty() {
        return Ok(());
    }
    let name = meta::name(obj);
    let causes: Vec<Value> = found
        .iter()
        .map(|p| {
            let (field, detail) = p.split_once(": ").unwrap_or(("", p));
            serde_json::json!({"reason": "FieldValueInvalid", "message": detail, "field": field})
        })
        .collect();
    let what = if found.len() == 1 {
        found[0].clone()
    } else {
        format!("[{}]", found.join(", "))
    };
    let mut details = serde_json::json!({"name": name, "kind": res.kind, "causes": causes});
    if !res.group.is_empty() {
        details["group"] = res.group.into();
    }
    Err(ApiError {
        details: Some(details),
        ..ApiError::new(
            422,
            "Invalid",
            format!("{} {name:?} is invalid: {what}", res.kind),
        )
    })
}

/// Every problem of `obj` (of kind `kind`), each `path: Invalid value: ...`.
pub fn problems(kind: &str, obj: &Value) -> Vec<String> {
    let mut out = Vec::new();
    check_labels(obj, &mut out);
    match kind {
        "Pod" => {
            if let Some(spec) = obj.get("spec") {
                check_pod_spec(spec, "spec", &mut out);
            }
        }
        "Deployment" | "ReplicaSet" | "DaemonSet" | "Job" => {
            if let Some(t) = obj.pointer("/spec/template") {
                let mut inner = Vec::new();
                check_labels(t, &mut inner);
                out.extend(inner.into_iter().map(|p| format!("spec.template.{p}")));
                if let Some(spec) = t.get("spec") {
                    check_pod_spec(spec, "spec.template.spec", &mut out);
                }
            }
        }
        "Node" => {
            check_quantities(obj.pointer("/status/capacity"), "status.capacity", &mut out);
            check_quantities(
                obj.pointer("/status/allocatable"),
                "status.allocatable",
                &mut out,
            );
        }
        _ => {}
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn bad_labels_and_quantities_are_found_with_their_paths() {
        let pod = json!({"metadata": {"labels": {"ok": "fine", "bad key": "x", "v": "no!"}},
            "spec": {"containers": [{"name": "c", "resources": {
                "requests": {"memory": "-1Gi", "cpu": "NaN"}, "limits": {"memory": "1Gi"}}}]}});
        let p = problems("Pod", &pod);
        assert_eq!(p.len(), 4, "{p:#?}");
        assert!(p
            .iter()
            .any(|m| m.starts_with("metadata.labels: Invalid value: \"bad key\"")));
        assert!(p
            .iter()
            .any(|m| m.starts_with("metadata.labels: Invalid value: \"no!\"")));
        assert!(p.contains(&"spec.containers[0].resources.requests[memory]: Invalid value: \"-1Gi\": must be greater than or equal to 0".to_string()));
        assert!(p.iter().any(
            |m| m.starts_with("spec.containers[0].resources.requests[cpu]: Invalid value: \"NaN\"")
        ));
        let ok = json!({"metadata": {"labels": {"app.kubernetes.io/name": "web", "e": ""}},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "100m", "memory": "1.5Gi", "x": "1e3", "z": "0"}}}]}});
        assert!(problems("Pod", &ok).is_empty());
        let d = json!({"spec": {"template": {"metadata": {"labels": {"-x": "y"}},
            "spec": {"containers": [{"name": "c", "resources": {"limits": {"cpu": "-2"}}}]}}}});
        let p = problems("Deployment", &d);
        assert_eq!(p.len(), 2, "{p:#?}");
        assert!(p[0].starts_with("spec.template.metadata.labels"));
    }
}

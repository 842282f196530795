//! Server-side field validation (`fieldValidation=Ignore|Warn|Strict`): fields the
//! resource's type does not have are found by comparing the body with its round trip
//! through the k8s-openapi type, which drops what it does not know. Strict refuses the
//! request with the real server's wording (kubectl's default since it sends
//! `fieldValidation=Strict`), Warn (the server's default) answers with warnings.

use serde_json::Value;

use super::query::Query;
use super::resources::ResourceDef;
use super::status::ApiError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldValidation {
    Ignore,
    Warn,
    Strict,
}

impl FieldValidation {
    pub fn from_query(q: &Query) -> Result<Self, ApiError> {
        match q.get("fieldValidation") {
            None | Some("") | Some("Warn") => Ok(FieldValidation::Warn),
            Some("Ignore") => Ok(FieldValidation::Ignore),
            Some("Strict") => Ok(FieldValidation::Strict),
            Some(other) => Err(ApiError::bad_request(format!(
                "fieldValidation: Unsupported value: {other:?}: supported values: \"Ignore\", \"Strict\", \"Warn\""
            ))),
        }
    }
}

/// Paths (`spec.template.spec.containers[0].imagee`) present in `input` with a value but
/// missing from `known`, its round trip through the typed object.
pub fn unknown_fields(input: &Value, known: &Value) -> Vec<String> {
    let mut out = Vec::new();
    walk(input, known, "", &mut out);
    out
}

fn walk(input: &Value, known: &Value, path: &str, out: &mut Vec<String>) {
    match (input, known) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in a {
                if v.is_null() {
                    continue;
                }
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                match b.get(k) {
                    Some(kv) => walk(v, kv, &p, out),
                    None => out.push(p),
                }
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            for (i, (v, kv)) in a.iter().zip(b).enumerate() {
                walk(v, kv, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

fn listed(unknown: &[String]) -> String {
    unknown
        .iter()
        .map(|f| format!("unknown field {f:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// How the request's body reached the object being checked.
pub enum Origin<'a> {
    /// POST or PUT of a whole object.
    Body,
    /// A JSON, merge or strategic merge patch (the patch as sent).
    Patch(&'a [u8]),
    /// A server-side apply patch of object `ns/name`.
    Apply { ns: &'a str, name: &'a str },
}

/// Applies the mode to the unknown fields found: `Err` for Strict, the warnings to
/// send for Warn.
pub fn check(
    mode: FieldValidation,
    res: &ResourceDef,
    origin: Origin<'_>,
    unknown: &[String],
) -> Result<Vec<String>, ApiError> {
    if unknown.is_empty() || mode == FieldValidation::Ignore {
        return Ok(Vec::new());
    }
    if mode == FieldValidation::Warn {
        return Ok(unknown
            .iter()
            .map(|f| format!("unknown field {f:?}"))
            .collect());
    }
    let kind = res.kind;
    Err(match origin {
        Origin::Body => ApiError::bad_request(format!(
            "{kind} in version {:?} cannot be handled as a {kind}: strict decoding error: {}",
            res.version,
            listed(unknown)
        )),
        Origin::Patch(patch) => {
            let patch = String::from_utf8_lossy(patch);
            let message = format!(
                "Invalid value: {:?}: strict decoding error: {}",
                patch.trim(),
                listed(unknown)
            );
            let mut e = ApiError::new(
                422,
                "Invalid",
                format!("The request is invalid: patch: {message}"),
            );
            e.details = Some(serde_json::json!({"causes": [
                {"reason": "FieldValueInvalid", "message": message, "field": "patch"}]}));
            e
        }
        Origin::Apply { ns, name } => {
            let fields: Vec<String> = unknown
                .iter()
                .map(|f| format!(".{f}: field not declared in schema"))
                .collect();
            ApiError::bad_request(format!(
                "failed to create typed patch object ({ns}/{name}; {}, Kind={kind}): {}",
                res.api_version(),
                fields.join(", ")
            ))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::resources::DEPLOYMENTS;
    use serde_json::json;

    #[test]
    fn finds_fields_the_type_dropped() {
        let input = json!({"metadata": {"name": "a", "labels": {"x": "y"}, "creationTimestamp": null},
            "spec": {"replica": 2, "template": {"spec": {"containers": [{"name": "c", "imagee": "x"}]}}}});
        let known = json!({"metadata": {"name": "a", "labels": {"x": "y"}},
            "spec": {"template": {"spec": {"containers": [{"name": "c"}]}}}});
        assert_eq!(
            unknown_fields(&input, &known),
            ["spec.replica", "spec.template.spec.containers[0].imagee"]
        );
    }

    #[test]
    fn strict_words_it_as_the_real_server() {
        let unknown = vec!["spec.replica".to_string()];
        let err = check(
            FieldValidation::Strict,
            &DEPLOYMENTS,
            Origin::Body,
            &unknown,
        )
        .err();
        assert_eq!(
            err.map(|e| (e.code, e.message)),
            Some((400, "Deployment in version \"v1\" cannot be handled as a Deployment: strict decoding error: unknown field \"spec.replica\"".to_string()))
        );
        let warned = check(FieldValidation::Warn, &DEPLOYMENTS, Origin::Body, &unknown).ok();
        assert_eq!(
            warned,
            Some(vec!["unknown field \"spec.replica\"".to_string()])
        );
    }
}

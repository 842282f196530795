//! Label and field selectors, as given in list/watch query strings and in
//! `metav1.LabelSelector` objects (PDBs, ReplicaSets).

use std::collections::BTreeMap;

use serde_json::Value;

use super::meta;

#[derive(Debug, Clone, PartialEq)]
enum Req {
    Eq(String, String),
    NotEq(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed `labelSelector` query parameter.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector(Vec<Req>);

/// Splits on commas that are not inside parentheses.
fn split_top(s: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
        .into_iter()
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect()
}

fn set_values(rest: &str) -> Result<Vec<String>, String> {
    let inner = rest
        .trim()
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| format!("expected a parenthesized set of values, got {rest:?}"))?;
    Ok(inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect())
}

impl LabelSelector {
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut reqs = Vec::new();
        for part in split_top(s) {
            let req = if let Some(key) = part.strip_prefix('!') {
                Req::NotExists(key.trim().to_string())
            } else if let Some((k, v)) = part.split_once("!=") {
                Req::NotEq(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
                Req::Eq(k.trim().into(), v.trim().into())
            } else if let Some((k, rest)) = part.split_once(" notin ") {
                Req::NotIn(k.trim().into(), set_values(rest)?)
            } else if let Some((k, rest)) = part.split_once(" in ") {
                Req::In(k.trim().into(), set_values(rest)?)
            } else if part.contains(char::is_whitespace) || part.contains(['(', ')']) {
                return Err(format!("unable to parse requirement: {part:?}"));
            } else {
                Req::Exists(part.to_string())
            };
            reqs.push(req);
        }
        Ok(LabelSelector(reqs))
    }

    /// From a `metav1.LabelSelector` JSON object. An absent selector matches nothing,
    /// an empty one everything, as for PDBs.
    pub fn from_object(sel: Option<&Value>) -> Option<Self> {
        let sel = sel?;
        let mut reqs: Vec<Req> = meta::string_map(sel.get("matchLabels"))
            .into_iter()
            .map(|(k, v)| Req::Eq(k, v))
            .collect();
        for e in sel
            .get("matchExpressions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let key = e
                .get("key")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            let values: Vec<String> = e
                .get("values")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect();
            reqs.push(match e.get("operator").and_then(Value::as_str) {
                Some("In") => Req::In(key, values),
                Some("NotIn") => Req::NotIn(key, values),
                Some("Exists") => Req::Exists(key),
                Some("DoesNotExist") => Req::NotExists(key),
                _ => return None,
            });
        }
        Some(LabelSelector(reqs))
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|r| match r {
            Req::Eq(k, v) => labels.get(k) == Some(v),
            Req::NotEq(k, v) => labels.get(k) != Some(v),
            Req::In(k, vs) => labels.get(k).is_some_and(|l| vs.contains(l)),
            Req::NotIn(k, vs) => labels.get(k).is_none_or(|l| !vs.contains(l)),
            Req::Exists(k) => labels.contains_key(k),
            Req::NotExists(k) => !labels.contains_key(k),
        })
    }
}

/// A parsed `fieldSelector`: `path=value`, `path==value`, `path!=value`, comma separated.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSelector(Vec<(String, bool, String)>);

impl FieldSelector {
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut reqs = Vec::new();
        for part in split_top(s) {
            let (path, eq, value) = if let Some((k, v)) = part.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
                (k, true, v)
            } else {
                return Err(format!("invalid field selector: {part:?}"));
            };
            reqs.push((path.trim().to_string(), eq, value.trim().to_string()));
        }
        Ok(FieldSelector(reqs))
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(path, eq, want)| {
            let keys: Vec<&str> = path.split('.').collect();
            let have = match meta::path(obj, &keys) {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Bool(b)) => b.to_string(),
                Some(Value::Number(n)) => n.to_string(),
                // Unset booleans such as spec.unschedulable read as false.
                None if path == "spec.unschedulable" => "false".into(),
                _ => String::new(),
            };
            (have == *want) == *eq
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn label_selectors() {
        let l = labels(&[("app", "web"), ("tier", "fe")]);
        let ok = |s: &str| LabelSelector::parse(s).map(|sel| sel.matches(&l));
        assert_eq!(ok("app=web"), Ok(true));
        assert_eq!(ok("app==web,tier!=be"), Ok(true));
        assert_eq!(ok("app in (web, db),!gone"), Ok(true));
        assert_eq!(ok("app notin (web)"), Ok(false));
        assert_eq!(ok("tier"), Ok(true));
        assert_eq!(ok(""), Ok(true));
        assert!(ok("app in web").is_err());
        let sel = LabelSelector::from_object(Some(&json!({"matchLabels": {"app": "web"},
            "matchExpressions": [{"key": "tier", "operator": "In", "values": ["fe"]}]})));
        assert_eq!(sel.map(|s| s.matches(&l)), Some(true));
        assert_eq!(LabelSelector::from_object(None), None);
    }

    #[test]
    fn field_selectors() {
        let pod = json!({"metadata": {"name": "p"}, "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}});
        let ok = |s: &str| FieldSelector::parse(s).map(|f| f.matches(&pod));
        assert_eq!(ok("spec.nodeName=n1,metadata.name=p"), Ok(true));
        assert_eq!(ok("status.phase!=Succeeded,status.phase!=Failed"), Ok(true));
        assert_eq!(ok("spec.nodeName=n2"), Ok(false));
        assert_eq!(ok("spec.nodeName="), Ok(false));
        assert_eq!(ok("spec.unschedulable=false"), Ok(true));
    }
}

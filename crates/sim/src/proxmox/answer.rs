//! Checks the simulator's own answers against the schema's `returns`: every documented field
//! it sends has the documented JSON type, no required field is missing, and an object the
//! schema closes (`additionalProperties: 0`) carries nothing else. (Undocumented fields
//! are allowed otherwise: the real server sends some, e.g. `bridge_fd`, and indexed keys
//! such as `net0` are documented as `net[n]`.) A mismatch is recorded as a violation, like
//! a bad request.

use serde_json::Value;

use super::schema::Schema;

/// Violations of `data` (the `data` member of an answer) against `method template`.
pub fn check_answer(schema: &Schema, method: &str, template: &str, data: &Value) -> Vec<String> {
    let Some(returns) = schema.returns(template, method) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    check(returns, data, "data", &mut out);
    out.into_iter()
        .map(|e| format!("answer of {method} {template}: {e}"))
        .collect()
}

fn flag(v: &Value, key: &str) -> Option<bool> {
    match v.get(key) {
        Some(Value::Number(n)) => Some(n.as_i64() == Some(1)),
        Some(Value::Bool(b)) => Some(*b),
        _ => None,
    }
}

fn check(schema: &Value, v: &Value, at: &str, out: &mut Vec<String>) {
    if v.is_null() {
        return;
    }
    let ok = match schema.get("type").and_then(Value::as_str) {
        Some("string") => v.is_string(),
        // The real server sends some numbers as strings (`/cluster/nextid`: `"100"`).
        Some("integer") => {
            v.is_i64() || v.is_u64() || v.as_str().is_some_and(|s| s.parse::<i64>().is_ok())
        }
        Some("number") => v.is_number() || v.as_str().is_some_and(|s| s.parse::<f64>().is_ok()),
        // Proxmox writes booleans as 0/1 as often as true/false.
        Some("boolean") => v.is_boolean() || v.as_u64().is_some_and(|n| n <= 1),
        Some("array") => v.is_array(),
        Some("object") => v.is_object(),
        _ => true,
    };
    if !ok {
        out.push(format!("{at} is {v}, expected {}", schema["type"]));
        return;
    }
    if let (Some(items), Some(list)) = (schema.get("items"), v.as_array()) {
        for (i, item) in list.iter().enumerate() {
            check(items, item, &format!("{at}[{i}]"), out);
        }
    }
    let (Some(props), Some(obj)) = (
        schema.get("properties").and_then(Value::as_object),
        v.as_object(),
    ) else {
        return;
    };
    let open = flag(schema, "additionalProperties") != Some(false);
    for (k, val) in obj {
        match props.get(k) {
            Some(p) => check(p, val, &format!("{at}.{k}"), out),
            None if !open => out.push(format!("{at}.{k} is not a documented field")),
            None => {}
        }
    }
    for (k, p) in props {
        if flag(p, "optional") != Some(true) && !obj.contains_key(k) {
            out.push(format!("{at}.{k} is required but missing"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn answers_are_checked_against_the_real_schema() {
        let s = Schema::load().expect(
            "the Proxmox API schema (../shared/proxmox/pve-api-schema.json or PVE_API_SCHEMA)",
        );
        let good = json!([{ "id": "node/pve1", "type": "node", "node": "pve1", "maxcpu": 16,
            "maxmem": 1u64 << 36, "status": "online" }]);
        assert!(check_answer(&s, "GET", "/cluster/resources", &good).is_empty());
        // `id` is required; `maxcpu` is a number.
        let bad = json!([{ "type": "node", "node": "pve1", "maxcpu": "many" }]);
        let e = check_answer(&s, "GET", "/cluster/resources", &bad);
        assert!(
            e.iter().any(|e| e.contains("data[0].id is required")),
            "{e:?}"
        );
        assert!(
            e.iter().any(|e| e.contains("data[0].maxcpu is \"many\"")),
            "{e:?}"
        );
        // An LRM entry of the HA status needs its id, node, status and type.
        let e = check_answer(
            &s,
            "GET",
            "/cluster/ha/status/current",
            &json!([{ "type": "lrm", "node": "pve1" }]),
        );
        assert!(e.iter().any(|e| e.contains("status is required")), "{e:?}");
        // `/cluster/nextid` answers a string on the real server.
        assert!(check_answer(&s, "GET", "/cluster/nextid", &json!("100")).is_empty());
    }
}

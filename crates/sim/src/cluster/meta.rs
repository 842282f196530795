//! Small shared helpers: ids, timestamps, resource quantities and JSON field access.

use std::collections::hash_map::RandomState;
use std::collections::BTreeMap;
use std::hash::{BuildHasher, Hasher};

use k8s_openapi::jiff::Timestamp;
use serde_json::{Map, Value};

/// Pseudo-random ids (uids, generated name suffixes); uniqueness, not secrecy, matters.
#[derive(Debug)]
pub struct IdGen {
    state: u64,
}

impl IdGen {
    pub fn new() -> Self {
        let mut h = RandomState::new().build_hasher();
        h.write_i128(Timestamp::now().as_nanosecond());
        IdGen { state: h.finish() }
    }

    fn next(&mut self) -> u64 {
        // splitmix64
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn uid(&mut self) -> String {
        let a = self.next();
        let b = self.next();
        format!(
            "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0xfff,
            0x8000 | ((b >> 48) & 0x3fff),
            b & 0xffff_ffff_ffff
        )
    }

    /// A suffix from the alphabet Kubernetes uses for generated names (no vowels).
    pub fn suffix(&mut self, len: usize) -> String {
        const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        (0..len)
            .map(|_| ALPHABET[(self.next() % ALPHABET.len() as u64) as usize] as char)
            .collect()
    }
}

/// RFC 3339 with whole seconds, as `metav1.Time` is serialized.
pub fn rfc3339(ts: Timestamp) -> String {
    Timestamp::from_second(ts.as_second())
        .unwrap_or(ts)
        .to_string()
}

pub fn now_rfc3339() -> String {
    rfc3339(Timestamp::now())
}

pub fn parse_time(s: &str) -> Option<Timestamp> {
    s.parse().ok()
}

/// Parses a Kubernetes quantity ("128Mi", "1.5", "100m", "2e3") into thousandths.
pub fn parse_quantity_milli(s: &str) -> Option<i128> {
    nodewright_core::model::quantity_value(s).map(|v| (v * 1000.0).round() as i128)
}

/// Memory quantity in the kubelet's style ("8148200Ki").
pub fn format_memory(bytes: u64) -> String {
    if bytes.is_multiple_of(1024) {
        format!("{}Ki", bytes / 1024)
    } else {
        bytes.to_string()
    }
}

/// Walks a dotted path of object keys.
pub fn path<'a>(v: &'a Value, keys: &[&str]) -> Option<&'a Value> {
    keys.iter().try_fold(v, |v, k| v.get(*k))
}

pub fn path_str<'a>(v: &'a Value, keys: &[&str]) -> Option<&'a str> {
    path(v, keys).and_then(Value::as_str)
}

pub fn name(v: &Value) -> &str {
    path_str(v, &["metadata", "name"]).unwrap_or_default()
}

pub fn namespace(v: &Value) -> &str {
    path_str(v, &["metadata", "namespace"]).unwrap_or_default()
}

pub fn uid(v: &Value) -> &str {
    path_str(v, &["metadata", "uid"]).unwrap_or_default()
}

pub fn labels(v: &Value) -> BTreeMap<String, String> {
    string_map(path(v, &["metadata", "labels"]))
}

pub fn string_map(v: Option<&Value>) -> BTreeMap<String, String> {
    v.and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect()
        })
        .unwrap_or_default()
}

/// A mutable object at `key` inside `v`, created (replacing non-objects) when missing.
pub fn obj_mut<'a>(v: &'a mut Value, key: &str) -> &'a mut Map<String, Value> {
    if !v.is_object() {
        *v = Value::Object(Map::new());
    }
    let Value::Object(map) = v else {
        unreachable!("just made an object")
    };
    let entry = map
        .entry(key.to_string())
        .or_insert_with(|| Value::Object(Map::new()));
    if !entry.is_object() {
        *entry = Value::Object(Map::new());
    }
    match entry {
        Value::Object(m) => m,
        _ => unreachable!("just made an object"),
    }
}

/// The `status` of condition `kind` in `status.conditions`, if present.
pub fn condition_status<'a>(v: &'a Value, kind: &str) -> Option<&'a str> {
    path(v, &["status", "conditions"])?
        .as_array()?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(kind))?
        .get("status")?
        .as_str()
}

/// Sets a condition, keeping `lastTransitionTime` when the status does not change.
pub fn set_condition(v: &mut Value, kind: &str, status: &str, reason: &str, message: &str) {
    let status_obj = obj_mut(v, "status");
    let conds = status_obj
        .entry("conditions")
        .or_insert_with(|| Value::Array(Vec::new()));
    if !conds.is_array() {
        *conds = Value::Array(Vec::new());
    }
    let Value::Array(list) = conds else { return };
    let now = now_rfc3339();
    let pos = list
        .iter()
        .position(|c| c.get("type").and_then(Value::as_str) == Some(kind));
    let mut cond = serde_json::json!({"type": kind, "status": status, "lastTransitionTime": now});
    if !reason.is_empty() {
        cond["reason"] = reason.into();
    }
    if !message.is_empty() {
        cond["message"] = message.into();
    }
    match pos {
        Some(i) => {
            let old = &list[i];
            if old.get("status").and_then(Value::as_str) == Some(status) {
                if let Some(t) = old.get("lastTransitionTime") {
                    cond["lastTransitionTime"] = t.clone();
                }
            }
            for extra in ["lastHeartbeatTime", "lastProbeTime"] {
                if old.get(extra).is_some() {
                    cond[extra] = now.clone().into();
                }
            }
            list[i] = cond;
        }
        None => list.push(cond),
    }
}

/// Decodes `%XX` escapes (and `+` as space when `plus_is_space`); invalid escapes are
/// kept literally, invalid UTF-8 is replaced.
pub fn percent_decode(s: &str, plus_is_space: bool) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        let hex = |c: u8| (c as char).to_digit(16);
        match b {
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push((h * 16 + l) as u8);
                    i += 3;
                    continue;
                }
                _ => out.push(b),
            },
            b'+' if plus_is_space => out.push(b' '),
            _ => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities() {
        assert_eq!(
            parse_quantity_milli("128Mi"),
            Some(128 * 1024 * 1024 * 1000)
        );
        assert_eq!(parse_quantity_milli("100m"), Some(100));
        assert_eq!(parse_quantity_milli("2"), Some(2000));
        assert_eq!(
            parse_quantity_milli("1.5Gi"),
            Some(1536 * 1024 * 1024 * 1000)
        );
        assert_eq!(parse_quantity_milli("1e3"), Some(1_000_000));
        assert_eq!(parse_quantity_milli("1G"), Some(1_000_000_000_000));
        assert_eq!(parse_quantity_milli("x"), None);
    }

    #[test]
    fn ids_look_right() {
        let mut g = IdGen::new();
        let u = g.uid();
        assert_eq!(u.len(), 36);
        assert_eq!(g.suffix(5).len(), 5);
        assert!(now_rfc3339().ends_with('Z'));
    }

    #[test]
    fn percent() {
        assert_eq!(percent_decode("a%3Db%2Cc+d", true), "a=b,c d");
        assert_eq!(percent_decode("100%", false), "100%");
        assert_eq!(percent_decode("%4", false), "%4");
    }
}

//! Deletion as the real API server does it: graceful for pods, held by finalizers for
//! every object.
//!
//! - A pod bound to a node and not finished gets a grace period (the delete options'
//!   `gracePeriodSeconds`, else its `terminationGracePeriodSeconds`, default 30): the
//!   delete only sets `deletionTimestamp` (now + grace) and `deletionGracePeriodSeconds`,
//!   and the pod stays, shown as Terminating, until its kubelet has stopped it and deletes
//!   it with grace 0. A second delete may shorten the grace period, never lengthen it.
//! - An unbound or finished pod, and every other object, goes at once (grace 0).
//! - An object with finalizers is only marked (`deletionTimestamp`, grace 0) and goes when
//!   an update removes its last finalizer; no finalizer may be added meanwhile.

use serde_json::Value;

use super::meta;
use super::query::Query;
use super::resources::{ResourceDef, PODS};
use super::status::ApiError;
use super::store::Txn;

/// A pod's `terminationGracePeriodSeconds` when it sets none.
pub const DEFAULT_GRACE_SECONDS: i64 = 30;

fn has_finalizers(obj: &Value) -> bool {
    meta::path(obj, &["metadata", "finalizers"])
        .and_then(Value::as_array)
        .is_some_and(|f| !f.is_empty())
}

fn deleting(obj: &Value) -> bool {
    meta::path(obj, &["metadata", "deletionTimestamp"]).is_some()
}

/// The grace period a delete leaves a stored object, when it is being deleted.
pub fn grace_left(obj: &Value) -> Option<i64> {
    if !deleting(obj) {
        return None;
    }
    Some(
        meta::path(obj, &["metadata", "deletionGracePeriodSeconds"])
            .and_then(Value::as_i64)
            .unwrap_or(0),
    )
}

/// Being deleted, past its grace period, and no finalizer left: it goes now.
pub fn finished(obj: &Value) -> bool {
    grace_left(obj) == Some(0) && !has_finalizers(obj)
}

/// An update of an object being deleted may remove finalizers, never add one (422, as
/// the real server's metadata validation answers).
pub fn check_new_finalizers(
    res: &ResourceDef,
    name: &str,
    old: &Value,
    new: &Value,
) -> Result<(), ApiError> {
    if !deleting(old) {
        return Ok(());
    }
    let list = |o: &Value| -> Vec<String> {
        meta::path(o, &["metadata", "finalizers"])
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|f| f.as_str().map(str::to_string))
            .collect()
    };
    let before = list(old);
    let added: Vec<String> = list(new)
        .into_iter()
        .filter(|f| !before.contains(f))
        .collect();
    if added.is_empty() {
        return Ok(());
    }
    Err(ApiError::invalid(
        res,
        name,
        &format!(
            "metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers {added:?}"
        ),
    ))
}

/// The grace period a DELETE asks for: the `gracePeriodSeconds` query parameter, else
/// the DeleteOptions body's (for an Eviction, its `deleteOptions`).
pub fn requested_grace(query: &Query, body: &[u8]) -> Result<Option<i64>, ApiError> {
    if let Some(g) = query.int("gracePeriodSeconds")? {
        return Ok(Some(g));
    }
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    let opts: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("couldn't decode DeleteOptions: {e}")))?;
    let grace = opts
        .get("gracePeriodSeconds")
        .or_else(|| opts.pointer("/deleteOptions/gracePeriodSeconds"));
    match grace {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_i64().map(Some).ok_or_else(|| {
            ApiError::bad_request(format!(
                "gracePeriodSeconds: must be an integer number of seconds, got {v}"
            ))
        }),
    }
}

/// The grace period a delete gives `pod`: none for a pod no kubelet runs (unbound) or
/// one already finished; a negative request counts as 1 s.
fn pod_grace(pod: &Value, requested: Option<i64>) -> i64 {
    let unbound = meta::path_str(pod, &["spec", "nodeName"]).is_none_or(str::is_empty);
    let finished = matches!(
        meta::path_str(pod, &["status", "phase"]),
        Some("Succeeded" | "Failed")
    );
    if unbound || finished {
        return 0;
    }
    let period = requested.unwrap_or_else(|| {
        meta::path(pod, &["spec", "terminationGracePeriodSeconds"])
            .and_then(Value::as_i64)
            .unwrap_or(DEFAULT_GRACE_SECONDS)
    });
    if period < 0 {
        1
    } else {
        period
    }
}

/// `now + seconds` as an RFC 3339 timestamp (second precision, as metav1.Time).
fn in_seconds(seconds: i64) -> String {
    let now = k8s_openapi::jiff::Timestamp::now();
    let at = now
        .checked_add(k8s_openapi::jiff::SignedDuration::from_secs(seconds))
        .unwrap_or(now);
    at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Deletes an object as the API server does (see the module): returns it as stored
/// after the delete (marked, or as last stored when it is gone).
pub fn delete(
    txn: &mut Txn<'_>,
    res: &'static ResourceDef,
    ns: &str,
    name: &str,
    requested: Option<i64>,
) -> Result<Value, ApiError> {
    let Some(current) = txn.get(res, ns, name).cloned() else {
        return Err(ApiError::not_found(res, name));
    };
    let period = if std::ptr::eq(res, &PODS) {
        pod_grace(&current, requested)
    } else {
        0
    };
    if let Some(left) = grace_left(&current) {
        // Already being deleted: only a shorter grace period changes anything.
        if period >= left {
            return Ok(current);
        }
    }
    if period > 0 {
        return txn.mark_deleting(res, ns, name, &in_seconds(period), period);
    }
    if has_finalizers(&current) {
        return txn.mark_deleting(res, ns, name, &in_seconds(0), 0);
    }
    txn.delete(res, ns, name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_bound_running_pod_gets_its_own_grace_period_or_the_requested_one() {
        let pod = json!({"spec": {"nodeName": "n1", "terminationGracePeriodSeconds": 45},
            "status": {"phase": "Running"}});
        assert_eq!(pod_grace(&pod, None), 45);
        assert_eq!(pod_grace(&pod, Some(5)), 5);
        assert_eq!(pod_grace(&pod, Some(-1)), 1);
        let no_period = json!({"spec": {"nodeName": "n1"}, "status": {"phase": "Running"}});
        assert_eq!(pod_grace(&no_period, None), DEFAULT_GRACE_SECONDS);
    }

    #[test]
    fn unbound_and_finished_pods_have_no_grace_period() {
        let unbound = json!({"spec": {"terminationGracePeriodSeconds": 45},
            "status": {"phase": "Pending"}});
        assert_eq!(pod_grace(&unbound, None), 0);
        let done = json!({"spec": {"nodeName": "n1"}, "status": {"phase": "Succeeded"}});
        assert_eq!(pod_grace(&done, Some(10)), 0);
    }

    #[test]
    fn finalizers_may_only_be_removed_while_deleting() {
        let old = json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z",
            "finalizers": ["a"]}});
        let fewer = json!({"metadata": {"finalizers": []}});
        let more = json!({"metadata": {"finalizers": ["a", "b"]}});
        assert!(check_new_finalizers(&PODS, "p", &old, &fewer).is_ok());
        let e = check_new_finalizers(&PODS, "p", &old, &more).err();
        assert_eq!(e.map(|e| e.code), Some(422));
        assert!(finished(&json!({"metadata": {"deletionTimestamp": "x",
            "deletionGracePeriodSeconds": 0}})));
        assert!(!finished(&json!({"metadata": {"deletionTimestamp": "x",
            "deletionGracePeriodSeconds": 30}})));
    }
}

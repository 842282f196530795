//! The Deployment and Job controllers.
//!
//! A Deployment owns one ReplicaSet per pod template (named `<deployment>-<hash>`, the
//! hash also in the `pod-template-hash` label, as the real controller names them). The
//! current template's ReplicaSet gets all the replicas and older ones are scaled to
//! zero at once (no surge or unavailability budget: a template change replaces the
//! pods); the ReplicaSet controller then makes the pods, owned by the ReplicaSet, which
//! is owned by the Deployment, so drain rules see a controller.
//!
//! A Job keeps `parallelism` pods running until `completions` of them succeeded. Its
//! pods finish when the kubelet says so: after the duration in the pod annotation
//! `sim.nodewright.io/run-for` (default 1s; `never` for pods that run until deleted),
//! set in the Job's pod template.

use serde_json::{json, Value};

use super::dirty::Dirty;
use super::meta;
use super::owners::{self, active, pod_from_template, ready, set_status, ByOwner};
use super::resources::{DEPLOYMENTS, JOBS, PODS, REPLICASETS};
use super::store::Txn;

/// The label carrying the template hash on ReplicaSets and their pods.
const TEMPLATE_HASH: &str = "pod-template-hash";

/// A stable short hash of a pod template, in the alphabet generated names use.
fn template_hash(template: &Value) -> String {
    // FNV-1a over the canonical (sorted-key) JSON: the same template, the same hash.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in template.to_string().bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    (0..10)
        .map(|i| {
            let digit = (h >> (i * 6)) % ALPHABET.len() as u64;
            ALPHABET[usize::try_from(digit).unwrap_or(0)] as char
        })
        .collect()
}

fn replicas_of(obj: &Value) -> i64 {
    meta::path(obj, &["spec", "replicas"])
        .and_then(Value::as_i64)
        .unwrap_or(1)
        .max(0)
}

fn status_count(obj: &Value, field: &str) -> i64 {
    meta::path(obj, &["status", field])
        .and_then(Value::as_i64)
        .unwrap_or(0)
}

/// The ReplicaSet a Deployment wants for its current template.
fn replicaset_for(d: &Value, hash: &str, revision: i64) -> Value {
    let mut template = meta::path(d, &["spec", "template"])
        .cloned()
        .unwrap_or_else(|| json!({}));
    meta::obj_mut(&mut template["metadata"], "labels").insert(TEMPLATE_HASH.into(), json!(hash));
    let mut selector = meta::path(d, &["spec", "selector"])
        .cloned()
        .unwrap_or_else(|| json!({}));
    meta::obj_mut(&mut selector, "matchLabels").insert(TEMPLATE_HASH.into(), json!(hash));
    let mut labels = meta::path(d, &["spec", "template", "metadata", "labels"])
        .cloned()
        .unwrap_or_else(|| json!({}));
    if !labels.is_object() {
        labels = json!({});
    }
    if let Some(m) = labels.as_object_mut() {
        m.insert(TEMPLATE_HASH.into(), json!(hash));
    }
    json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {
            "name": format!("{}-{hash}", meta::name(d)),
            "namespace": meta::namespace(d),
            "labels": labels,
            "annotations": {"deployment.kubernetes.io/revision": revision.to_string(),
                            "deployment.kubernetes.io/desired-replicas": replicas_of(d).to_string()},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": meta::name(d),
                "uid": meta::uid(d), "controller": true, "blockOwnerDeletion": true}],
        },
        "spec": {"replicas": replicas_of(d), "selector": selector, "template": template},
    })
}

fn revision(rs: &Value) -> i64 {
    meta::path_str(
        rs,
        &[
            "metadata",
            "annotations",
            "deployment.kubernetes.io/revision",
        ],
    )
    .and_then(|r| r.parse().ok())
    .unwrap_or(0)
}

/// Reconciles every Deployment with its ReplicaSets.
pub fn deployments(txn: &mut Txn<'_>, dirty: &Dirty) {
    let todo: Vec<Value> = txn
        .list_owned(&DEPLOYMENTS, None)
        .into_iter()
        .filter(|d| dirty.owner(meta::uid(d)))
        .collect();
    if todo.is_empty() {
        return;
    }
    let sets_by_owner = owners::index_by_owner(txn, &REPLICASETS);
    for d in todo {
        let want = replicas_of(&d);
        let template = meta::path(&d, &["spec", "template"])
            .cloned()
            .unwrap_or_default();
        let hash = template_hash(&template);
        let owned: Vec<Value> = sets_by_owner
            .get(meta::uid(&d))
            .into_iter()
            .flatten()
            .map(|s| s.value().clone())
            .collect();
        let current = owned
            .iter()
            .find(|rs| meta::path_str(rs, &["metadata", "labels", TEMPLATE_HASH]) == Some(&hash));
        let newest = owned.iter().map(revision).max().unwrap_or(0);
        let mut sets: Vec<Value> = Vec::new();
        match current {
            Some(rs) => {
                let rs = if replicas_of(rs) != want {
                    txn.modify(&REPLICASETS, meta::namespace(rs), meta::name(rs), |o| {
                        o["spec"]["replicas"] = json!(want)
                    })
                    .ok()
                    .flatten()
                    .unwrap_or_else(|| rs.clone())
                } else {
                    rs.clone()
                };
                sets.push(rs);
            }
            None => {
                let rs = replicaset_for(&d, &hash, newest + 1);
                if let Ok(rs) = txn.create(&REPLICASETS, rs) {
                    sets.push(rs);
                }
            }
        }
        let new_rs = sets.first().cloned().unwrap_or_default();
        for old in owned
            .iter()
            .filter(|rs| meta::uid(rs) != meta::uid(&new_rs))
        {
            if replicas_of(old) != 0 {
                let _ = txn.modify(&REPLICASETS, meta::namespace(old), meta::name(old), |o| {
                    o["spec"]["replicas"] = json!(0)
                });
            }
            sets.push(old.clone());
        }
        let total = |f: &str| sets.iter().map(|rs| status_count(rs, f)).sum::<i64>();
        let updated = status_count(&new_rs, "replicas");
        let available = total("availableReplicas");
        let complete = updated == want && total("replicas") == want && available == want;
        let status = json!({
            "replicas": total("replicas"),
            "updatedReplicas": updated,
            "readyReplicas": total("readyReplicas"),
            "availableReplicas": available,
            "unavailableReplicas": (want - available).max(0),
            "conditions": [
                {"type": "Available", "status": if available >= want { "True" } else { "False" },
                 "reason": if available >= want { "MinimumReplicasAvailable" } else { "MinimumReplicasUnavailable" },
                 "message": if available >= want { "Deployment has minimum availability." } else { "Deployment does not have minimum availability." }},
                {"type": "Progressing", "status": "True",
                 "reason": if complete { "NewReplicaSetAvailable" } else { "ReplicaSetUpdated" },
                 "message": format!("ReplicaSet \"{}\" {}.", meta::name(&new_rs),
                     if complete { "has successfully progressed" } else { "is progressing" })},
            ],
        });
        set_status(txn, &DEPLOYMENTS, &d, keep_condition_times(&d, status));
    }
}

/// Conditions keep their transition times while their status stays.
fn keep_condition_times(obj: &Value, mut status: Value) -> Value {
    let now = meta::now_rfc3339();
    let old = meta::path(obj, &["status", "conditions"])
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if let Some(Value::Array(conds)) = status.get_mut("conditions") {
        for c in conds.iter_mut() {
            let same = old
                .iter()
                .find(|o| o.get("type") == c.get("type") && o.get("status") == c.get("status"));
            let since = same
                .and_then(|o| o.get("lastTransitionTime").cloned())
                .unwrap_or_else(|| json!(now));
            c["lastTransitionTime"] = since.clone();
            c["lastUpdateTime"] = same
                .and_then(|o| o.get("lastUpdateTime").cloned())
                .unwrap_or(since);
        }
    }
    status
}

fn job_int(job: &Value, field: &str, default: i64) -> i64 {
    meta::path(job, &["spec", field])
        .and_then(Value::as_i64)
        .unwrap_or(default)
        .max(0)
}

/// The selector and pod labels the API server gives a Job without a manual selector.
fn default_job_selector(txn: &mut Txn<'_>, job: &Value) -> Option<Value> {
    if meta::path(job, &["spec", "selector"]).is_some() {
        return Some(job.clone());
    }
    let uid = meta::uid(job).to_string();
    let name = meta::name(job).to_string();
    txn.modify(&JOBS, meta::namespace(job), &name, |j| {
        j["spec"]["selector"] = json!({"matchLabels": {"batch.kubernetes.io/controller-uid": uid}});
        let labels = meta::obj_mut(&mut j["spec"]["template"]["metadata"], "labels");
        for (k, v) in [
            ("batch.kubernetes.io/controller-uid", &uid),
            ("batch.kubernetes.io/job-name", &name),
            ("controller-uid", &uid),
            ("job-name", &name),
        ] {
            labels.insert(k.into(), json!(v));
        }
    })
    .ok()
    .flatten()
}

/// Reconciles every Job with its pods.
pub fn jobs(txn: &mut Txn<'_>, pods_by_owner: &ByOwner, dirty: &Dirty) {
    for job in txn.list_owned(&JOBS, None) {
        if !dirty.owner(meta::uid(&job)) {
            continue;
        }
        let Some(job) = default_job_selector(txn, &job) else {
            continue;
        };
        let completions = job_int(&job, "completions", 1);
        let parallelism = job_int(&job, "parallelism", 1);
        let pods: Vec<Value> = pods_by_owner
            .get(meta::uid(&job))
            .into_iter()
            .flatten()
            .map(|p| p.value().clone())
            .collect();
        let phase_count = |phase: &str| {
            pods.iter()
                .filter(|p| meta::path_str(p, &["status", "phase"]) == Some(phase))
                .count() as i64
        };
        let (succeeded, failed) = (phase_count("Succeeded"), phase_count("Failed"));
        let mut running: Vec<&Value> = pods.iter().filter(|p| active(p)).collect();
        let done = succeeded >= completions;
        let suspended =
            meta::path(&job, &["spec", "suspend"]).and_then(Value::as_bool) == Some(true);
        if done || suspended {
            for p in running.drain(..) {
                let _ =
                    super::graceful::delete(txn, &PODS, meta::namespace(p), meta::name(p), None);
            }
        }
        let want = if done || suspended {
            0
        } else {
            parallelism.min(completions - succeeded)
        };
        let mut active_now = running.len() as i64;
        while active_now < want {
            let pod = pod_from_template(txn, &job, &JOBS, None);
            if txn.create(&PODS, pod).is_err() {
                break;
            }
            active_now += 1;
        }
        let now = meta::now_rfc3339();
        let old = job.get("status").cloned().unwrap_or_else(|| json!({}));
        let mut status = json!({
            "active": active_now,
            "succeeded": succeeded,
            "failed": failed,
            "ready": running.iter().filter(|p| ready(p)).count(),
            "startTime": old.get("startTime").cloned().unwrap_or_else(|| json!(now)),
            "uncountedTerminatedPods": {},
        });
        if done {
            status["completionTime"] = old
                .get("completionTime")
                .cloned()
                .unwrap_or_else(|| json!(now));
            status["conditions"] = json!([
                {"type": "SuccessCriteriaMet", "status": "True", "reason": "CompletionsReached",
                 "message": "Reached expected number of succeeded pods"},
                {"type": "Complete", "status": "True", "reason": "CompletionsReached",
                 "message": "Reached expected number of succeeded pods"}]);
            status = keep_condition_times(&job, status);
        }
        if let Some(m) = status.as_object_mut() {
            m.retain(|k, v| !(v == &json!(0) && k != "ready"));
        }
        set_status(txn, &JOBS, &job, status);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_hash_is_stable_and_short() {
        let a = json!({"spec": {"containers": [{"name": "a", "image": "x:1"}]}});
        let b = json!({"spec": {"containers": [{"name": "a", "image": "x:2"}]}});
        assert_eq!(template_hash(&a), template_hash(&a.clone()));
        assert_ne!(template_hash(&a), template_hash(&b));
        assert_eq!(template_hash(&a).len(), 10);
    }

    #[test]
    fn replicaset_carries_hash_and_owner() {
        let d = json!({"metadata": {"name": "web", "namespace": "d", "uid": "u1"},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}}, "spec": {}}}});
        let rs = replicaset_for(&d, "abc", 2);
        assert_eq!(rs["metadata"]["name"], "web-abc");
        assert_eq!(
            rs["spec"]["selector"]["matchLabels"]["pod-template-hash"],
            "abc"
        );
        assert_eq!(
            rs["spec"]["template"]["metadata"]["labels"]["pod-template-hash"],
            "abc"
        );
        assert_eq!(rs["metadata"]["ownerReferences"][0]["uid"], "u1");
        assert_eq!(
            rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"],
            "2"
        );
    }
}

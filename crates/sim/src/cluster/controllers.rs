//! The controllers a cluster runs for the workloads tests need: ReplicaSets keep their
//! pod count (recreating evicted pods as new pending pods), DaemonSets keep one pod per
//! node, the garbage collector removes objects whose owner is gone, and the disruption
//! controller keeps PodDisruptionBudget status current. Deployments and Jobs are in
//! `workloads`.
//!
//! A pass reconciles only what the writes since the previous pass touched (see
//! `dirty`), so an idle or lightly changing large cluster costs little.

use std::collections::HashSet;
use std::sync::Arc;

use serde_json::{json, Value};

use super::dirty::Dirty;
use super::eviction;
use super::graceful;
use super::meta;
use super::owners::{
    active, controller_uid, index_by_owner, owned, pod_from_template, ready, set_status, ByOwner,
};
use super::resources::{
    ResourceDef, DAEMONSETS, DEPLOYMENTS, JOBS, NODES, PDBS, PODS, REPLICASETS,
};
use super::selectors::LabelSelector;
use super::store::{Change, Stored, Txn};
use super::workloads;
use super::Inner;

fn replicasets(txn: &mut Txn<'_>, pods_by_owner: &ByOwner, dirty: &Dirty) {
    for rs in txn.list_stored(&REPLICASETS, None) {
        if !dirty.owner(meta::uid(&rs)) {
            continue;
        }
        let want = meta::path(&rs, &["spec", "replicas"])
            .and_then(Value::as_i64)
            .unwrap_or(1)
            .max(0) as usize;
        let selector = LabelSelector::from_object(meta::path(&rs, &["spec", "selector"]));
        let mut pods: Vec<Arc<Stored>> = pods_by_owner
            .get(meta::uid(&rs))
            .into_iter()
            .flatten()
            .filter(|p| active(p))
            .cloned()
            .collect();
        if pods.len() < want {
            for _ in pods.len()..want {
                let pod = pod_from_template(txn, &rs, &REPLICASETS, None);
                if let Ok(p) = txn.create(&PODS, pod) {
                    pods.push(Stored::new(p));
                }
            }
        } else if pods.len() > want {
            // Scale down the least useful first: unscheduled, then pending, then newest.
            pods.sort_by_key(|p| {
                let unscheduled =
                    meta::path_str(p, &["spec", "nodeName"]).is_none_or(str::is_empty);
                let pending = meta::path_str(p, &["status", "phase"]) == Some("Pending");
                let created = meta::path_str(p, &["metadata", "creationTimestamp"])
                    .unwrap_or_default()
                    .to_string();
                (
                    std::cmp::Reverse(unscheduled),
                    std::cmp::Reverse(pending),
                    std::cmp::Reverse(created),
                )
            });
            for p in pods.drain(..pods.len() - want) {
                let _ = graceful::delete(txn, &PODS, meta::namespace(&p), meta::name(&p), None);
            }
        }
        let labeled = pods
            .iter()
            .filter(|p| {
                selector
                    .as_ref()
                    .is_some_and(|s| s.matches(&meta::labels(p)))
            })
            .count();
        let ready_count = pods.iter().filter(|p| ready(p)).count();
        let status = json!({"replicas": pods.len(), "fullyLabeledReplicas": labeled,
            "readyReplicas": ready_count, "availableReplicas": ready_count});
        set_status(txn, &REPLICASETS, &rs, status);
    }
}

fn daemonsets(txn: &mut Txn<'_>, pods_by_owner: &ByOwner, dirty: &Dirty) {
    let sets = txn.list_owned(&DAEMONSETS, None);
    let sets: Vec<Value> = sets
        .into_iter()
        .filter(|ds| dirty.nodes || dirty.owner(meta::uid(ds)))
        .collect();
    if sets.is_empty() {
        return;
    }
    let nodes: Vec<String> = txn
        .list(&NODES, None)
        .into_iter()
        .filter(|n| meta::path(n, &["metadata", "deletionTimestamp"]).is_none())
        .map(|n| meta::name(n).to_string())
        .collect();
    for ds in sets {
        let mut pods: Vec<Value> = Vec::new();
        let mut covered = HashSet::new();
        for p in owned(pods_by_owner, &ds) {
            let node = meta::path_str(&p, &["spec", "nodeName"]).unwrap_or_default();
            if !active(&p) || !covered.insert(node.to_string()) {
                // A finished or duplicate daemon pod is replaced / removed.
                let _ = graceful::delete(txn, &PODS, meta::namespace(&p), meta::name(&p), None);
            } else {
                pods.push(p);
            }
        }
        for node in &nodes {
            if !covered.contains(node) {
                let pod = pod_from_template(txn, &ds, &DAEMONSETS, Some(node));
                if let Ok(p) = txn.create(&PODS, pod) {
                    pods.push(p);
                }
            }
        }
        let ready_count = pods.iter().filter(|p| ready(p)).count();
        let status = json!({"desiredNumberScheduled": nodes.len(), "currentNumberScheduled": pods.len(),
            "updatedNumberScheduled": pods.len(), "numberMisscheduled": 0,
            "numberReady": ready_count, "numberAvailable": ready_count,
            "numberUnavailable": pods.len().saturating_sub(ready_count)});
        set_status(txn, &DAEMONSETS, &ds, status);
    }
}

/// Background-propagation garbage collection: ReplicaSets whose Deployment is gone,
/// then pods whose ReplicaSet, DaemonSet or Job is gone. A full pass looks at every
/// object; otherwise only at the dependents of deleted owners and at new pods.
fn garbage_collect(txn: &mut Txn<'_>, dirty: &Dirty, pods_by_owner: &ByOwner) {
    let collected = |o: &Value| {
        controller_uid(o)
            .is_some_and(|(kind, _)| matches!(kind, "ReplicaSet" | "DaemonSet" | "Job"))
    };
    if !dirty.all && dirty.deleted_owners.is_empty() && dirty.new_pods.is_empty() {
        return;
    }
    let uids = |txn: &Txn<'_>, kinds: &[&ResourceDef]| -> HashSet<String> {
        kinds
            .iter()
            .flat_map(|r| txn.list(r, None))
            .map(|o| meta::uid(o).to_string())
            .collect()
    };
    let deployments = uids(txn, &[&DEPLOYMENTS]);
    for (uid, sets) in index_by_owner(txn, &REPLICASETS) {
        let by_deployment = sets
            .iter()
            .all(|rs| controller_uid(rs).is_some_and(|(kind, _)| kind == "Deployment"));
        if by_deployment && !deployments.contains(&uid) {
            for rs in sets {
                let _ = txn.delete(&REPLICASETS, meta::namespace(&rs), meta::name(&rs));
            }
        }
    }
    let owners = uids(txn, &[&REPLICASETS, &DAEMONSETS, &JOBS]);
    let doomed: Vec<Arc<Stored>> = if dirty.all {
        index_by_owner(txn, &PODS)
            .into_iter()
            .filter(|(uid, _)| !owners.contains(uid))
            .flat_map(|(_, pods)| pods)
            .collect()
    } else {
        let of_deleted = dirty
            .deleted_owners
            .iter()
            .filter(|uid| !owners.contains(*uid))
            .flat_map(|uid| pods_by_owner.get(uid).into_iter().flatten().cloned());
        let orphans = dirty
            .new_pods
            .iter()
            .filter(|p| controller_uid(p).is_some_and(|(_, uid)| !owners.contains(uid)))
            .cloned();
        of_deleted.chain(orphans).collect()
    };
    for pod in doomed.iter().filter(|p| collected(p)) {
        let _ = graceful::delete(txn, &PODS, meta::namespace(pod), meta::name(pod), None);
    }
}

fn disruption_budgets(txn: &mut Txn<'_>, dirty: &Dirty) {
    for pdb in txn.list_owned(&PDBS, None) {
        if !dirty.namespace(meta::namespace(&pdb)) {
            continue;
        }
        let Some(Ok(b)) = eviction::evaluate(txn, &pdb) else {
            continue;
        };
        let allowed = b.disruptions_allowed > 0;
        let old_cond = meta::path(&pdb, &["status", "conditions"])
            .and_then(Value::as_array)
            .and_then(|c| c.first())
            .cloned();
        let since = old_cond
            .filter(|c| {
                c.get("status").and_then(Value::as_str)
                    == Some(if allowed { "True" } else { "False" })
            })
            .and_then(|c| c.get("lastTransitionTime").cloned())
            .unwrap_or_else(|| json!(meta::now_rfc3339()));
        let status = json!({
            "disruptionsAllowed": b.disruptions_allowed,
            "currentHealthy": b.current_healthy,
            "desiredHealthy": b.desired_healthy,
            "expectedPods": b.expected,
            "conditions": [{
                "type": "DisruptionAllowed",
                "status": if allowed { "True" } else { "False" },
                "reason": if allowed { "SufficientPods" } else { "InsufficientPods" },
                "message": "",
                "observedGeneration": pdb["metadata"]["generation"],
                "lastTransitionTime": since,
            }],
        });
        set_status(txn, &PDBS, &pdb, status);
    }
}

/// One round of every controller over what `changes` (the writes since the last
/// round; None when unknown) touched.
pub fn pass(inner: &Inner, changes: Option<&[Arc<Change>]>) {
    let mut state = inner.controllers.lock().unwrap_or_else(|p| p.into_inner());
    let mut txn = inner.store.lock();
    let dirty = state.absorb(&txn, changes);
    if dirty.nothing() && dirty.new_pods.is_empty() {
        return;
    }
    let pods_by_owner = state.pods_of_dirty(&txn, &dirty);
    garbage_collect(&mut txn, &dirty, &pods_by_owner);
    workloads::deployments(&mut txn, &dirty);
    workloads::jobs(&mut txn, &pods_by_owner, &dirty);
    replicasets(&mut txn, &pods_by_owner, &dirty);
    daemonsets(&mut txn, &pods_by_owner, &dirty);
    disruption_budgets(&mut txn, &dirty);
}

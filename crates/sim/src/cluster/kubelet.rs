//! The kubelets (and the pod garbage collector): registers nodes for booted VMs, flips
//! them Ready, runs bound pods (pulling their images onto the node), completes
//! run-to-completion pods, and reacts to VMs going away.
//!
//! A kubelet registers its Node once, when it starts (the VM boots, reboots, or its
//! service restarts), and never again while it runs: a Node deleted under a running VM
//! stays gone until the VM's kubelet starts again, as a real kubelet does (upstream
//! kubernetes issues 71398, 115761, 116485: it keeps failing to post the status of a
//! Node that is gone).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::time::Instant;

use super::graceful;
use super::meta::{self, set_condition};
use super::objects::{self, NodeBuild};
use super::registry::{self, Registries, MAX_PULL_BACKOFF, PULL_BACKOFF};
use super::resources::{NODES, PODS};
use super::store::{Change, ChangeKind, Txn};
use super::sysevents;
use super::userdata;
use super::Inner;
use crate::VmEvent;

/// Annotation giving how long a run-to-completion pod (restartPolicy `OnFailure` or
/// `Never`, e.g. a Job's) runs before it succeeds: a humantime duration (default 1s),
/// or `never` for a pod that runs until it is deleted.
pub const ANNOTATION_RUN_FOR: &str = "sim.nodewright.io/run-for";

/// Annotation giving how long a pod's containers take to stop once it is deleted (a
/// humantime duration; default [`super::SimClusterOptions::pod_stop_delay`]). Its grace
/// period bounds it: a pod still running then is killed.
pub const ANNOTATION_STOP_AFTER: &str = "sim.nodewright.io/stop-after";

#[derive(Debug, Default)]
pub struct KubeletState {
    /// Nodes whose VM is gone: never Ready again, run nothing.
    dead: HashSet<String>,
    /// Nodes whose kubelet went silent, by when: the node lifecycle controller sets them
    /// Unknown once its grace period is over.
    silent_since: HashMap<String, Instant>,
    /// Bound pods by uid: when their (ready) node's kubelet first saw them.
    seen: HashMap<String, Instant>,
    /// Running run-to-completion pods by uid: when they started.
    started: HashMap<String, Instant>,
    /// Pods being deleted by uid: when their kubelet began stopping them.
    stopping: HashMap<String, Instant>,
    /// Bound pods a kubelet still has to start or finish (or collect): what a pass
    /// looks at, kept current from the writes since the last pass.
    todo: BTreeSet<(String, String)>,
    next_ip: u32,
    /// VMs whose kubelet refused to start, with its error: they never register.
    refused: BTreeMap<String, String>,
    /// What the registries hold and whom they let pull.
    pub registries: Registries,
    /// Every image each node holds; `status.images` lists only the largest 50.
    pub node_images: HashMap<String, BTreeSet<String>>,
    /// Pods whose last pull failed by uid: how many times in a row, and when the next
    /// try is due.
    pull_backoff: HashMap<String, (u32, Instant)>,
}

impl KubeletState {
    pub fn next_address(&mut self, prefix: &str) -> String {
        self.next_ip += 1;
        format!("{prefix}.{}.{}", self.next_ip / 250, self.next_ip % 250 + 1)
    }
}

pub fn lock(m: &Mutex<KubeletState>) -> MutexGuard<'_, KubeletState> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Handles a cloud's VM event (the `VmHook`).
pub fn on_vm_event(inner: &Arc<Inner>, event: VmEvent) {
    match event {
        VmEvent::Booted {
            name,
            user_data,
            memory_bytes,
            cpus,
        } => {
            {
                let mut k = lock(&inner.kubelet);
                k.dead.remove(&name);
                k.silent_since.remove(&name);
            }
            let weak = Arc::downgrade(inner);
            let register_delay = inner.opts.node_register_delay;
            inner.runtime.spawn(async move {
                tokio::time::sleep(register_delay).await;
                let Some(inner) = weak.upgrade().filter(|i| !i.is_shut_down()) else { return };
                if lock(&inner.kubelet).dead.contains(&name) {
                    return;
                }
                if refuses_to_start(&inner, &name, &user_data) {
                    // A kubelet that never starts registers nothing, now or later.
                    return;
                }
                // Its one registration: a Node deleted from now on stays gone until
                // this VM's kubelet starts again.
                if let Err(e) = register(&inner, &name, &user_data, memory_bytes, cpus) {
                    tracing::warn!(node = %name, error = %e, "simulated kubelet could not register");
                    return;
                }
                let ready_delay = inner.opts.node_ready_delay;
                drop(inner);
                tokio::time::sleep(ready_delay).await;
                let Some(inner) = weak.upgrade().filter(|i| !i.is_shut_down()) else { return };
                if !lock(&inner.kubelet).dead.contains(&name) {
                    let _ = set_ready(&mut inner.store.lock(), &name, true);
                }
            });
        }
        VmEvent::Deleted { name } | VmEvent::Stopped { name } => {
            // The kubelet stops posting; the node lifecycle controller notices once its
            // grace period is over (unless the VM booted again meanwhile).
            let since = Instant::now();
            {
                let mut k = lock(&inner.kubelet);
                k.dead.insert(name.clone());
                k.silent_since.insert(name.clone(), since);
            }
            let weak = Arc::downgrade(inner);
            let grace = inner.opts.node_monitor_grace_period;
            inner.runtime.spawn(async move {
                tokio::time::sleep(grace).await;
                let Some(inner) = weak.upgrade().filter(|i| !i.is_shut_down()) else {
                    return;
                };
                let still_silent = {
                    let mut k = lock(&inner.kubelet);
                    let silent = k.silent_since.get(&name) == Some(&since);
                    if silent {
                        k.silent_since.remove(&name);
                    }
                    silent
                };
                if still_silent {
                    mark_unknown(&mut inner.store.lock(), &name);
                }
            });
        }
    }
}

/// What the node lifecycle controller does to a node whose kubelet stopped posting for
/// its grace period: every condition Unknown, and the node's pods not Ready.
fn mark_unknown(txn: &mut Txn<'_>, name: &str) {
    let _ = txn.modify(&NODES, "", name, |node| {
        let conds: Vec<String> = meta::path(node, &["status", "conditions"])
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|c| c.get("type").and_then(Value::as_str).map(str::to_string))
            .collect();
        for c in conds {
            set_condition(
                node,
                &c,
                "Unknown",
                "NodeStatusUnknown",
                "Kubelet stopped posting node status.",
            );
        }
    });
    for pod in txn.list_owned(&PODS, None) {
        if meta::path_str(&pod, &["spec", "nodeName"]) == Some(name) {
            let _ = txn.modify(
                &PODS,
                meta::namespace(&pod),
                meta::name(&pod),
                mark_not_ready,
            );
        }
    }
}

/// A VM whose user data starts no kubelet never registers (the same rule for every
/// simulated cloud); a real kubelet validates its flags before anything else and exits
/// on a bad one (systemd restarts it, to fail again): the node never registers either.
/// Records why.
fn refuses_to_start(inner: &Inner, name: &str, user_data: &str) -> bool {
    let Some(why) = userdata::start_error(user_data)
        .or_else(|| userdata::flag_error(&userdata::scan(user_data)))
        .or_else(|| super::bootstrap::join_error(&inner.store.lock(), user_data, inner.now()))
    else {
        return false;
    };
    tracing::warn!(node = %name, error = %why, "simulated kubelet refuses to start");
    lock(&inner.kubelet).refused.insert(name.to_string(), why);
    true
}

fn register(
    inner: &Inner,
    name: &str,
    user_data: &str,
    memory: u64,
    cpus: u32,
) -> Result<(), super::ApiError> {
    let address = {
        let mut k = lock(&inner.kubelet);
        // A new VM's disk holds the base images; a kubelet restarting keeps what it has.
        k.node_images
            .entry(name.to_string())
            .or_insert_with(|| inner.opts.base_images.iter().cloned().collect());
        k.next_address("10.77")
    };
    let mut txn = inner.store.lock();
    register_in(inner, &mut txn, name, user_data, memory, cpus, address)
}

/// Registers (or refreshes) Node `name` in `txn` as its kubelet does at start: the labels
/// and taints of its user data, NotReady until its runtime is up.
fn register_in(
    inner: &Inner,
    txn: &mut Txn<'_>,
    name: &str,
    user_data: &str,
    memory: u64,
    cpus: u32,
    address: String,
) -> Result<(), super::ApiError> {
    let reg = userdata::scan(user_data);
    if txn.get(&NODES, "", name).is_some() {
        // Re-registration keeps the existing taints, as a real kubelet does.
        txn.modify(&NODES, "", name, |node| {
            let labels = meta::obj_mut(&mut node["metadata"], "labels");
            for (k, v) in &reg.labels {
                labels.insert(k.clone(), json!(v));
            }
            objects::set_extended(node, &reg.extended);
            for (kind, reason) in [
                ("MemoryPressure", "KubeletHasSufficientMemory"),
                ("DiskPressure", "KubeletHasNoDiskPressure"),
                ("PIDPressure", "KubeletHasSufficientPID"),
            ] {
                set_condition(node, kind, "False", reason, "");
            }
            set_condition(
                node,
                "Ready",
                "False",
                "KubeletNotReady",
                "container runtime status check may not have completed yet",
            );
        })?;
        return Ok(());
    }
    let node = objects::node_object(NodeBuild {
        name,
        labels: reg.labels,
        taints: reg.taints,
        memory,
        reserve: inner.opts.memory_reserve,
        cpus,
        unschedulable: false,
        ready: false,
        images: &inner.opts.base_images,
        created: None,
        // The version its user data installed; without one, the control plane's.
        kubelet_version: &reg
            .kubelet_version
            .unwrap_or_else(|| inner.server_version()),
        address,
        provider_id: reg.provider_id,
        extended: reg.extended,
    });
    let node = txn.create(&NODES, node)?;
    sysevents::post(
        txn,
        &node,
        "Normal",
        "Starting",
        "Starting kubelet.",
        &sysevents::kubelet(name),
    );
    Ok(())
}

/// Sets a node's Ready condition as its kubelet would report it.
pub fn set_ready(
    txn: &mut Txn<'_>,
    name: &str,
    ready: bool,
) -> Result<Option<Value>, super::ApiError> {
    txn.modify(&NODES, "", name, |node| {
        if ready {
            set_condition(
                node,
                "Ready",
                "True",
                "KubeletReady",
                "kubelet is posting ready status",
            );
        } else {
            set_condition(
                node,
                "Ready",
                "False",
                "KubeletNotReady",
                "container runtime is down",
            );
        }
    })
}

fn mark_not_ready(pod: &mut Value) {
    if meta::condition_status(pod, "Ready") == Some("False") {
        return;
    }
    set_condition(pod, "Ready", "False", "", "");
    set_condition(pod, "ContainersReady", "False", "", "");
    if let Some(Value::Array(cs)) = pod
        .get_mut("status")
        .and_then(|s| s.get_mut("containerStatuses"))
    {
        for c in cs {
            c["ready"] = json!(false);
        }
    }
}

/// The image names a node's `status.images` lists.
fn listed_names(node: &Value) -> BTreeSet<String> {
    meta::path(node, &["status", "images"])
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|e| e.get("names").and_then(Value::as_array))
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_string)
        .collect()
}

/// A pod whose images could not all be pulled stays Pending: the containers of those
/// images wait with `ErrImagePull` on the try that failed and `ImagePullBackOff` on
/// the later ones (the kubelet shows the back-off between tries), the others run;
/// each failed try posts a `Failed` Warning Event.
fn fail_pull(txn: &mut Txn<'_>, pod: &Value, node: &str, failed: &registry::Failed, tries: u32) {
    let reason = if tries == 1 {
        "ErrImagePull"
    } else {
        "ImagePullBackOff"
    };
    let (ns, name) = (meta::namespace(pod), meta::name(pod));
    let updated = txn.modify(&PODS, ns, name, |p| {
        let now = meta::now_rfc3339();
        let mut cs = container_statuses(p, json!({"running": {"startedAt": now}}), false);
        for c in &mut cs {
            let cname = c.get("name").and_then(Value::as_str).unwrap_or_default();
            if let Some((_, image, why)) = failed.iter().find(|(n, _, _)| n == cname) {
                let message = if tries == 1 {
                    why.clone()
                } else {
                    format!("Back-off pulling image \"{image}\": {why}")
                };
                c["state"] = json!({"waiting": {"reason": reason, "message": message}});
                c["started"] = json!(false);
                c["imageID"] = json!("");
                if let Some(o) = c.as_object_mut() {
                    o.remove("containerID");
                }
            }
        }
        p["status"]["containerStatuses"] = json!(cs);
        set_condition(p, "Ready", "False", "ContainersNotReady", "");
        set_condition(p, "ContainersReady", "False", "ContainersNotReady", "");
    });
    if let Ok(Some(p)) = updated {
        for (_, image, why) in failed {
            sysevents::post(
                txn,
                &p,
                "Warning",
                "Failed",
                &format!("Failed to pull image \"{image}\": {why}"),
                &sysevents::kubelet(node),
            );
        }
    }
}

fn container_statuses(pod: &Value, state: Value, ready: bool) -> Vec<Value> {
    meta::path(pod, &["spec", "containers"])
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|c| {
            let name = c.get("name").and_then(Value::as_str).unwrap_or_default();
            let image = c.get("image").and_then(Value::as_str).unwrap_or_default();
            json!({"name": name, "image": image, "imageID": format!("{image}@sha256:0"),
                   "containerID": format!("containerd://{}", meta::uid(pod).replace('-', "")),
                   "ready": ready, "started": ready, "restartCount": 0, "state": state})
        })
        .collect()
}

fn start_pod(pod: &mut Value, host_ip: &str, pod_ip: &str) {
    let now = meta::now_rfc3339();
    let status = meta::obj_mut(pod, "status");
    status.insert("phase".into(), json!("Running"));
    status.insert("hostIP".into(), json!(host_ip));
    status.insert("hostIPs".into(), json!([{"ip": host_ip}]));
    status.insert("podIP".into(), json!(pod_ip));
    status.insert("podIPs".into(), json!([{"ip": pod_ip}]));
    status.insert("startTime".into(), json!(now));
    for c in [
        "PodReadyToStartContainers",
        "Initialized",
        "Ready",
        "ContainersReady",
        "PodScheduled",
    ] {
        set_condition(pod, c, "True", "", "");
    }
    let cs = container_statuses(pod, json!({"running": {"startedAt": now}}), true);
    pod["status"]["containerStatuses"] = json!(cs);
}

fn complete_pod(pod: &mut Value) {
    let now = meta::now_rfc3339();
    let started = meta::path_str(pod, &["status", "startTime"])
        .unwrap_or(&now)
        .to_string();
    pod["status"]["phase"] = json!("Succeeded");
    for c in ["Ready", "ContainersReady", "PodReadyToStartContainers"] {
        set_condition(pod, c, "False", "PodCompleted", "");
    }
    let state = json!({"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": started, "finishedAt": now}});
    let cs = container_statuses(pod, state, false);
    pod["status"]["containerStatuses"] = json!(cs);
}

/// How long a run-to-completion pod runs; None for `never`.
fn run_for(pod: &Value) -> Option<Duration> {
    match meta::path_str(pod, &["metadata", "annotations", ANNOTATION_RUN_FOR]) {
        Some(s) if s.trim().eq_ignore_ascii_case("never") => None,
        Some(s) => Some(humantime::parse_duration(s.trim()).unwrap_or(Duration::from_secs(1))),
        None => Some(Duration::from_secs(1)),
    }
}

fn bound(pod: &Value) -> bool {
    meta::path_str(pod, &["spec", "nodeName"]).is_some_and(|n| !n.is_empty())
}

/// Whether a kubelet has something left to do with a bound pod: start it, finish it, or
/// stop it (deleted, its grace period not yet given up).
fn pending_work(pod: &Value) -> bool {
    bound(pod)
        && match graceful::grace_left(pod) {
            Some(left) => left > 0,
            None => match meta::path_str(pod, &["status", "phase"]).unwrap_or("Pending") {
                "Pending" => true,
                "Running" => restarts_never(pod),
                _ => false,
            },
        }
}

/// How long `pod`'s containers take to stop after SIGTERM.
fn stop_after(pod: &Value, default: Duration) -> Duration {
    meta::path_str(pod, &["metadata", "annotations", ANNOTATION_STOP_AFTER])
        .and_then(|s| humantime::parse_duration(s.trim()).ok())
        .unwrap_or(default)
}

/// A deleted pod's containers as its kubelet leaves them: exited on SIGTERM (0), or
/// `killed` at the end of the grace period (137); the pod's phase turns terminal.
fn stop_pod(pod: &mut Value, killed: bool) {
    let now = meta::now_rfc3339();
    let started = meta::path_str(pod, &["status", "startTime"])
        .unwrap_or(&now)
        .to_string();
    let (phase, code, reason) = if killed {
        ("Failed", 137, "Error")
    } else {
        ("Succeeded", 0, "Completed")
    };
    if meta::path_str(pod, &["status", "phase"]) == Some("Running") {
        let state = json!({"terminated": {"exitCode": code, "reason": reason,
            "startedAt": started, "finishedAt": now}});
        let cs = container_statuses(pod, state, false);
        pod["status"]["containerStatuses"] = json!(cs);
    }
    meta::obj_mut(pod, "status").insert("phase".into(), json!(phase));
    for c in ["Ready", "ContainersReady", "PodReadyToStartContainers"] {
        set_condition(pod, c, "False", "PodCompleted", "");
    }
}

/// Brings the to-do set up to date with `changes` (None: rebuild it from every pod).
fn update_todo(k: &mut KubeletState, txn: &Txn<'_>, changes: Option<&[Arc<Change>]>) {
    let rescan = match changes {
        None => true,
        Some(cs) => cs
            .iter()
            .any(|c| c.res == NODES.id && c.kind == ChangeKind::Deleted),
    };
    if rescan {
        // Every bound pod once, so pods of a deleted node are collected.
        k.todo = txn
            .list_stored(&PODS, None)
            .iter()
            .filter(|p| bound(p))
            .map(|p| (meta::namespace(p).to_string(), meta::name(p).to_string()))
            .collect();
        return;
    }
    for c in changes.into_iter().flatten().filter(|c| c.res == PODS.id) {
        let key = (c.ns.clone(), c.name.clone());
        if c.kind != ChangeKind::Deleted && bound(&c.object) {
            k.todo.insert(key);
        } else {
            k.todo.remove(&key);
        }
    }
}

/// One round of every kubelet plus the pod GC over the pods with work left. Returns
/// when a pod's start or finish is next due, so the loop can sleep until then while
/// nothing changes.
pub fn pass(inner: &Inner, changes: Option<&[Arc<Change>]>) -> Option<Instant> {
    let mut k = lock(&inner.kubelet);
    let mut txn = inner.store.lock();
    update_todo(&mut k, &txn, changes);
    let now = Instant::now();
    let mut next: Option<Instant> = None;
    let mut due = |at: Instant| next = Some(next.map_or(at, |n: Instant| n.min(at)));
    let mut live = HashSet::new();
    let todo: Vec<(String, String)> = k.todo.iter().cloned().collect();
    for (ns, name) in todo {
        let Some(pod) = txn.get_stored(&PODS, &ns, &name).cloned() else {
            k.todo.remove(&(ns, name));
            continue;
        };
        if !pending_work(&pod) {
            k.todo.remove(&(ns.clone(), name.clone()));
        }
        let Some(node_name) = meta::path_str(&pod, &["spec", "nodeName"]).filter(|n| !n.is_empty())
        else {
            continue;
        };
        let (ns, name, uid) = (meta::namespace(&pod), meta::name(&pod), meta::uid(&pod));
        let Some(node) = txn.get_stored(&NODES, "", node_name).cloned() else {
            // Orphaned by a deleted node: the pod GC removes it (force, grace 0).
            let _ = graceful::delete(&mut txn, &PODS, ns, name, Some(0));
            continue;
        };
        let phase = meta::path_str(&pod, &["status", "phase"]).unwrap_or("Pending");
        if let Some(left) = graceful::grace_left(&pod) {
            // Being deleted: a live kubelet stops it (SIGTERM, then SIGKILL at the end
            // of its grace period) and then deletes it for good; a dead one never does.
            if left <= 0 || k.dead.contains(node_name) {
                continue;
            }
            live.insert(uid.to_string());
            let since = *k.stopping.entry(uid.to_string()).or_insert(now);
            let limit = Duration::from_secs(left.unsigned_abs());
            let wanted = stop_after(&pod, inner.opts.pod_stop_delay);
            let takes = if phase == "Running" {
                wanted.min(limit)
            } else {
                Duration::ZERO
            };
            if now.duration_since(since) < takes {
                due(since + takes);
                continue;
            }
            let killed = phase == "Running" && wanted > limit;
            let _ = txn.modify(&PODS, ns, name, |p| stop_pod(p, killed));
            let _ = graceful::delete(&mut txn, &PODS, ns, name, Some(0));
            continue;
        }
        if matches!(phase, "Succeeded" | "Failed")
            || meta::path(&pod, &["metadata", "deletionTimestamp"]).is_some()
        {
            continue;
        }
        if k.dead.contains(node_name) || meta::condition_status(&node, "Ready") != Some("True") {
            continue;
        }
        match phase {
            "Pending" => {
                live.insert(uid.to_string());
                let first = *k.seen.entry(uid.to_string()).or_insert(now);
                if now.duration_since(first) < inner.opts.pod_start_delay {
                    due(first + inner.opts.pod_start_delay);
                    continue;
                }
                if let Some((_, next)) = k.pull_backoff.get(uid) {
                    if now < *next {
                        due(*next);
                        continue;
                    }
                }
                let have = k
                    .node_images
                    .entry(node_name.to_string())
                    .or_insert_with(|| listed_names(&node))
                    .clone();
                let (pulled, failed) = k.registries.pull(&txn, &have, &pod);
                if !pulled.is_empty() {
                    let all = k.node_images.entry(node_name.to_string()).or_default();
                    all.extend(pulled);
                    let listing = registry::listing(all.iter());
                    let _ = txn.modify(&NODES, "", node_name, |n| {
                        meta::obj_mut(n, "status").insert("images".into(), Value::Array(listing));
                    });
                }
                if !failed.is_empty() {
                    let tries = k.pull_backoff.get(uid).map_or(0, |(t, _)| *t) + 1;
                    let wait = PULL_BACKOFF
                        .saturating_mul(1 << (tries - 1).min(10))
                        .min(MAX_PULL_BACKOFF);
                    k.pull_backoff.insert(uid.to_string(), (tries, now + wait));
                    due(now + wait);
                    fail_pull(&mut txn, &pod, node_name, &failed, tries);
                    continue;
                }
                k.pull_backoff.remove(uid);
                let host_ip = meta::path(&node, &["status", "addresses"])
                    .and_then(Value::as_array)
                    .and_then(|a| a.first())
                    .and_then(|a| a.get("address"))
                    .and_then(Value::as_str)
                    .unwrap_or("10.77.0.1")
                    .to_string();
                let pod_ip = k.next_address("10.88");
                let started = txn.modify(&PODS, ns, name, |p| start_pod(p, &host_ip, &pod_ip));
                if let Ok(Some(p)) = started {
                    let container = p
                        .pointer("/spec/containers/0/name")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string();
                    sysevents::post(
                        &mut txn,
                        &p,
                        "Normal",
                        "Started",
                        &format!("Started container {container}"),
                        &sysevents::kubelet(node_name),
                    );
                }
                k.started.insert(uid.to_string(), now);
                if let Some(d) = run_for(&pod).filter(|_| restarts_never(&pod)) {
                    due(now + d);
                }
            }
            "Running" if restarts_never(&pod) => {
                live.insert(uid.to_string());
                let started = *k.started.entry(uid.to_string()).or_insert(now);
                match run_for(&pod) {
                    Some(d) if now.duration_since(started) >= d => {
                        let _ = txn.modify(&PODS, ns, name, complete_pod);
                    }
                    Some(d) => due(started + d),
                    None => {}
                }
            }
            _ => {}
        }
    }
    k.seen.retain(|uid, _| live.contains(uid));
    k.started.retain(|uid, _| live.contains(uid));
    k.stopping.retain(|uid, _| live.contains(uid));
    k.pull_backoff.retain(|uid, _| live.contains(uid));
    next
}

/// A run-to-completion pod (restartPolicy `OnFailure` or `Never`).
fn restarts_never(pod: &Value) -> bool {
    meta::path_str(pod, &["spec", "restartPolicy"]).unwrap_or("Always") != "Always"
}

impl KubeletState {
    /// VMs whose kubelet refused to start (so never registered), with the error it
    /// exited with.
    pub fn refused(&self) -> BTreeMap<String, String> {
        self.refused.clone()
    }

    /// A node added in-process has a live kubelet even if a VM of that name died.
    pub fn revive(&mut self, node: &str) {
        self.dead.remove(node);
        self.silent_since.remove(node);
    }
}

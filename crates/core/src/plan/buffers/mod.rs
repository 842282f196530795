//! Capacity buffers in the planner. An active buffer (see [`crate::config::BufferConfig`])
//! becomes synthetic pending pods, namespace [`BUFFER_NAMESPACE`], named `<buffer>-<i>`,
//! that must fit on schedulable nodes or provisioning VMs after every real pod. Scale-up
//! adds nodes for those that do not fit (after the real pending pods); scale-down keeps
//! a node they would need.
//!
//! The pods exist only inside one plan: they are never in the snapshot, so they never
//! reach `Decision::pending`, Events, or an eviction.

use std::collections::BTreeMap;
use std::time::SystemTime;

use super::sched::{self, Model, Slot};
use crate::config::{BufferConfig, Config, TolerationOperator};
use crate::model::{PodInfo, PodPhase, Resources, Toleration};

/// Namespace of the synthetic pods (no such namespace needs to exist).
pub const BUFFER_NAMESPACE: &str = "nodewright-buffer";
/// Label naming the buffer a synthetic pod stands for.
pub const LABEL_BUFFER: &str = "nodewright.io/buffer";

/// The pods of every buffer active at `now`, in config order.
pub fn active_pods(config: &Config, now: SystemTime) -> Vec<PodInfo> {
    config
        .buffers
        .iter()
        .filter(|b| b.active(now))
        .flat_map(|b| (0..b.replicas).map(move |i| buffer_pod(b, i, now)))
        .collect()
}

/// One replica of a buffer, as the scheduler would see a pod of its shape.
fn buffer_pod(b: &BufferConfig, i: u32, now: SystemTime) -> PodInfo {
    let mut p = PodInfo::new(BUFFER_NAMESPACE, &format!("{}-{i}", b.name));
    p.phase = PodPhase::Pending;
    for (name, q) in &b.resources {
        p.requests.set(name, q.value());
    }
    p.requests.pods = 1;
    p.node_selector = b.node_selector.clone();
    p.tolerations = b
        .tolerations
        .iter()
        .map(|t| Toleration {
            key: t.key.clone(),
            operator: Some(
                match t.operator {
                    TolerationOperator::Exists => "Exists",
                    TolerationOperator::Equal => "Equal",
                }
                .to_string(),
            ),
            value: t.value.clone(),
            effect: t.effect.map(|e| e.as_str().to_string()),
        })
        .collect();
    p.labels.insert(LABEL_BUFFER.to_string(), b.name.clone());
    p.controller_kind = Some("CapacityBuffer".to_string());
    p.controller_name = Some(b.name.clone());
    p.created = now;
    p
}

/// Places `pods` (packing order) on the usable slots `eligible` admits, keeping them
/// there; returns those that fit nowhere.
pub fn place<'a>(
    m: &mut Model<'a>,
    pods: &[&'a PodInfo],
    reference: &Resources,
    eligible: impl Fn(&Slot<'_>) -> bool,
) -> Vec<&'a PodInfo> {
    let mut sorted = pods.to_vec();
    sched::sort_for_packing(&mut sorted, reference);
    sched::first_fit(m, &sorted, eligible).1
}

/// The scale-down guard: whether removing `node` (its `evicted` pods moving to the
/// other nodes that exist) leaves no more of the `buffer` pods without room than now.
/// `baseline` keeps the count for now across candidates. The model is left as it was.
pub fn removal_keeps<'a>(
    m: &mut Model<'a>,
    node: &str,
    evicted: &[&'a PodInfo],
    buffer: &[&'a PodInfo],
    reference: &Resources,
    baseline: &mut Option<usize>,
) -> bool {
    if buffer.is_empty() {
        return true;
    }
    let existing = |s: &Slot<'_>| s.kind == sched::SlotKind::Node;
    let now = match *baseline {
        Some(n) => n,
        None => {
            let n = m.trial(|m| place(m, buffer, reference, existing).len());
            *baseline.insert(n)
        }
    };
    let Some(i) = m.slot_index(node) else {
        return false;
    };
    let without = m.trial_without(i, |m| {
        place(m, evicted, reference, existing);
        place(m, buffer, reference, existing).len()
    });
    without <= now
}

/// The buffer a synthetic pod stands for.
pub fn buffer_of(p: &PodInfo) -> &str {
    p.labels
        .get(LABEL_BUFFER)
        .map_or(p.name.as_str(), String::as_str)
}

/// "morning-warmup: 2 of 4 pod(s) of cpu 2, memory 4.0 GiB" per buffer, in config order.
pub fn describe(config: &Config, pods: &[&PodInfo]) -> String {
    let mut count: BTreeMap<&str, (usize, &Resources)> = BTreeMap::new();
    for p in pods {
        count.entry(buffer_of(p)).or_insert((0, &p.requests)).0 += 1;
    }
    config
        .buffers
        .iter()
        .filter_map(|b| {
            let (n, shape) = count.get(b.name.as_str())?;
            Some(format!(
                "buffer {}: {n} of {} pod(s) of {shape}",
                b.name, b.replicas
            ))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests;

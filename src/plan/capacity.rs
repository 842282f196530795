//! Memory arithmetic by *requests*, and a first-fit-decreasing placement that answers
//! "would these pods fit there?" the way the scheduler would, roughly: memory,
//! nodeSelector and taints.

use std::borrow::Cow;
use std::collections::BTreeMap;

use super::model::{NodeInfo, PodInfo, Taint};
use crate::config::NodeGroupConfig;
use crate::{LABEL_CLUSTER, LABEL_GROUP};

/// Room on one node, existing or hypothetical.
#[derive(Debug, Clone)]
pub struct Bin<'a> {
    pub free: i64,
    labels: Cow<'a, BTreeMap<String, String>>,
    taints: Cow<'a, [Taint]>,
}

impl<'a> Bin<'a> {
    pub fn for_node(node: &'a NodeInfo, free: i64) -> Bin<'a> {
        Bin {
            free,
            labels: Cow::Borrowed(&node.labels),
            taints: Cow::Borrowed(&node.taints),
        }
    }

    /// A node of `group` that does not exist yet, as its user data will register it.
    pub fn for_group(group: &NodeGroupConfig, cluster: &str, memory: i64) -> Bin<'static> {
        let mut labels = group.labels.clone();
        labels.insert(LABEL_GROUP.to_string(), group.name.clone());
        labels.insert(LABEL_CLUSTER.to_string(), cluster.to_string());
        let taints = group
            .taints
            .iter()
            .map(|t| Taint {
                key: t.key.clone(),
                value: (!t.value.is_empty()).then(|| t.value.clone()),
                effect: t.effect.as_str().to_string(),
            })
            .collect::<Vec<_>>();
        Bin {
            free: memory,
            labels: Cow::Owned(labels),
            taints: Cow::Owned(taints),
        }
    }

    /// Whether `pod` may land here, ignoring memory.
    pub fn accepts(&self, pod: &PodInfo) -> bool {
        pod.selects(&self.labels) && pod.tolerates_all(&self.taints)
    }

    fn fits(&self, pod: &PodInfo) -> bool {
        self.accepts(pod) && self.free >= pod.memory_request as i64
    }
}

/// Places pods (largest first) into the first bin that fits; returns the pods that fit
/// nowhere. Bins are consumed as pods are placed.
pub fn place<'p>(bins: &mut [Bin<'_>], pods: &[&'p PodInfo]) -> Vec<&'p PodInfo> {
    let mut sorted: Vec<&PodInfo> = pods.to_vec();
    sorted.sort_by_key(|p| std::cmp::Reverse(p.memory_request));
    let mut left = Vec::new();
    for pod in sorted {
        match bins.iter_mut().find(|b| b.fits(pod)) {
            Some(bin) => bin.free -= pod.memory_request as i64,
            None => left.push(pod),
        }
    }
    left
}

/// How many new nodes of `memory` bytes (shaped by `group`) the pods need, if every pod
/// can go on such a node at all.
pub fn nodes_needed(
    group: &NodeGroupConfig,
    cluster: &str,
    memory: u64,
    pods: &[&PodInfo],
) -> Option<u32> {
    let template = Bin::for_group(group, cluster, memory as i64);
    if pods.iter().any(|p| !template.fits(p)) {
        return None;
    }
    let mut bins: Vec<Bin<'_>> = Vec::new();
    let mut sorted: Vec<&PodInfo> = pods.to_vec();
    sorted.sort_by_key(|p| std::cmp::Reverse(p.memory_request));
    for pod in sorted {
        match bins.iter_mut().find(|b| b.fits(pod)) {
            Some(bin) => bin.free -= pod.memory_request as i64,
            None => {
                let mut bin = template.clone();
                bin.free -= pod.memory_request as i64;
                bins.push(bin);
            }
        }
    }
    Some(bins.len() as u32)
}

/// Human-readable signed byte count (`-1.5 GiB`).
pub fn fmt_bytes(v: i64) -> String {
    let s = bytesize::ByteSize(v.unsigned_abs())
        .display()
        .iec()
        .to_string();
    if v < 0 {
        format!("-{s}")
    } else {
        s
    }
}

/// Human-readable byte count.
pub fn fmt_u(v: u64) -> String {
    bytesize::ByteSize(v).display().iec().to_string()
}

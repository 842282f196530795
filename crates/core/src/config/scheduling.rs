//! Settings of the scheduling model and scale-up: node shapes (resources, reservation,
//! pods per node), how groups are chosen (the expander), cluster-wide limits and the
//! CPU side of headroom.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::model::{Quantity, Resources};

/// Capacity a node keeps for the system (kubelet reservations, eviction threshold,
/// kernel), taken off a new node's flavor before any node of the group exists. Once
/// one exists, its reported allocatable is used instead.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReservedConfig {
    /// Default 0.
    #[serde(default)]
    pub cpu: Option<Quantity>,
    /// Default: 100 MiB (kubelet's eviction threshold) plus 5 % (what the kernel keeps).
    #[serde(default)]
    pub memory: Option<Quantity>,
}

impl ReservedConfig {
    pub fn resolve(&self, memory: u64) -> Resources {
        let mem = match &self.memory {
            Some(q) => q.whole(),
            None => (100 << 20) + memory / 20,
        };
        Resources::cpu_mem(self.cpu.as_ref().map_or(0, Quantity::milli), mem)
    }
}

/// How scale-up chooses among groups that could host the pending pods.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ExpanderKind {
    /// The group whose new nodes would be left least idle (CPU and memory).
    #[default]
    LeastWaste,
    /// The first group matching the earliest pattern in `priorities`.
    Priority,
    /// The cheapest per pod placed, by each group's `price`.
    Price,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExpanderConfig {
    #[serde(default, rename = "type")]
    pub kind: ExpanderKind,
    /// Regular expressions over group names, most preferred first (for `priority`).
    /// With on-prem groups first, they fill before cloud groups take the rest.
    #[serde(default)]
    pub priorities: Vec<String>,
}

/// Cluster-wide ceilings over every managed node (existing, provisioning and new).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LimitsConfig {
    #[serde(default)]
    pub nodes: Option<u32>,
    #[serde(default)]
    pub cpu: Option<Quantity>,
    #[serde(default)]
    pub memory: Option<Quantity>,
}

pub fn default_max_pods() -> u32 {
    110
}

pub fn default_arch() -> String {
    "amd64".to_string()
}

pub fn default_mismatch_grace() -> Duration {
    Duration::from_secs(60)
}

/// Per-group resources as written (`nvidia.com/gpu: 1`, `cpu: 8`).
pub type ResourceMap = BTreeMap<String, Quantity>;

/// Resources measured in bytes: their quantities follow the byte-size rule
/// ([`crate::model::Bytes`]) rather than Kubernetes' (where `8` is bytes and `8G` decimal).
pub const BYTE_RESOURCES: &[&str] = &["memory", "ephemeral-storage"];

/// A problem for each byte quantity among `items` (path, quantity) that the byte-size
/// rule refuses: a bare number, a decimal unit.
pub(super) fn check_byte_quantities<'a>(
    p: &mut Vec<super::ConfigProblem>,
    items: impl IntoIterator<Item = (String, &'a Quantity)>,
) {
    for (path, q) in items {
        if let Err(why) = crate::model::Bytes::parse(q.text()) {
            p.push(super::ConfigProblem::new(path, why));
        }
    }
}

/// The byte-valued entries of a resource map, with their paths under `at`.
pub(super) fn byte_entries<'a>(
    at: &'a str,
    map: &'a ResourceMap,
) -> impl Iterator<Item = (String, &'a Quantity)> + 'a {
    map.iter()
        .filter(|(k, _)| BYTE_RESOURCES.contains(&k.as_str()))
        .map(move |(k, q)| (format!("{at}.{k}"), q))
}

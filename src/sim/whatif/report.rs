//! What a replay measured, and the timeline the plot is drawn from.

use std::collections::BTreeMap;

use serde::Serialize;

/// The state of the world at one instant of the replay.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Sample {
    pub t_s: u64,
    /// Nodes (VMs that exist, booting or not) per group.
    pub nodes: BTreeMap<String, u32>,
    pub pending_pods: u32,
    pub cpu_requested_m: u64,
    pub cpu_allocatable_m: u64,
    pub mem_requested_bytes: u64,
    pub mem_allocatable_bytes: u64,
}

/// An action worth marking on the plot.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum Mark {
    ScaleUp { group: String, count: u32 },
    Removal { nodes: u32 },
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Timeline {
    pub samples: Vec<Sample>,
    pub marks: Vec<(u64, Mark)>,
}

/// The figures of one replay; `--json` prints exactly this object.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Report {
    pub config: String,
    pub node_hours: f64,
    /// Only when every group has a price.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost: Option<f64>,
    pub lower_bound_node_hours: f64,
    pub wait_p50_s: f64,
    pub wait_p95_s: f64,
    pub wait_max_s: f64,
    pub never_started: u32,
    pub evictions: u32,
    /// Action kind (as in metrics) → count.
    pub actions: BTreeMap<String, u32>,
    pub pods: u32,
    pub cycles: u64,
    pub virtual_seconds: u64,
}

//! The workload file: CSV with a header. Required columns, exactly these names:
//! `arrival_s,name,cpu_m,mem_mib,duration_s`; optional: `kind` (`Deployment` default,
//! `Job`, `Pod`), `node_selector` (`k=v;k2=v2`), `gpu`, `priority`. Unknown columns are
//! an error naming them; a bad row is an error naming its line.

use std::collections::BTreeMap;

/// What owns the pod, which decides what happens when it is evicted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub enum PodKind {
    /// Recreated by its controller when evicted; runs for `duration_s` in all.
    #[default]
    Deployment,
    /// Recreated when evicted and starts its run again from the beginning.
    Job,
    /// A bare pod: evicting it loses it.
    Pod,
}

/// One pod of the workload.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct WorkloadRow {
    /// 1-based line in the file, for errors and reports.
    pub line: usize,
    pub arrival_s: u64,
    pub name: String,
    pub cpu_m: u64,
    pub mem_mib: u64,
    pub duration_s: u64,
    pub kind: PodKind,
    pub node_selector: BTreeMap<String, String>,
    pub gpu: u32,
    pub priority: i32,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum WorkloadError {
    #[error("workload header: {0}")]
    Header(String),
    #[error("workload line {line}: {message}")]
    Row { line: usize, message: String },
}

/// Parses a workload file; rows come back sorted by arrival (stable for ties).
pub fn parse_workload(text: &str) -> Result<Vec<WorkloadRow>, WorkloadError> {
    let _ = text;
    Err(WorkloadError::Header("not implemented yet".into()))
}

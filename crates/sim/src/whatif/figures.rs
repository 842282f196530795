//! What one crash-and-fault run counted and found: the run ([`super::crash`]) and the
//! invariant checks after each of its cycles ([`super::invariants`]) both write here, so
//! neither needs the other's module.

use std::collections::BTreeMap;

use super::faults::FaultStats;

/// What one run counted and found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunFigures {
    pub seed: u64,
    pub fault_rate: f64,
    pub cycles: u32,
    /// Fresh processes started after a crash.
    pub restarts: u32,
    pub faults: FaultStats,
    /// Invariant checks made (one per invariant per cycle).
    pub checks: u64,
    /// Every invariant violation, with its virtual time.
    pub violations: Vec<String>,
    /// Cycles from the end of the fault phase until the world was consistent again.
    pub cycles_to_converge: Option<u32>,
    /// The longest any VM went without a node beyond `provisionTimeout`.
    pub max_nodeless_beyond_timeout_s: u64,
    pub peak_vms: u32,
    pub pods: u32,
    pub pods_finished: u32,
    pub pods_lost: u32,
    pub evictions: u32,
    pub evictions_refused: u32,
    /// Our VMs per group when the run ended.
    pub final_vms: BTreeMap<String, u32>,
}

impl RunFigures {
    /// How to run this one again on its own.
    pub fn rerun(&self) -> String {
        format!(
            "cargo run --example reliability -- --seed {} --faults {} --runs 1 --trace",
            self.seed, self.fault_rate
        )
    }
}

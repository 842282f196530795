//! Warm pools: stopped VMs kept ready per group, and what scale-down does with a VM.

use serde::{Deserialize, Serialize};

use super::{Config, ConfigProblem, NodeGroupConfig};
use crate::cloud::registry::PROVIDERS;

/// `warmPool` of a group: `size` stopped VMs kept ready, started by a scale-up instead
/// of creating one. They count toward `maxSize` (everything the cloud holds for the
/// group), never as capacity.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WarmPoolConfig {
    pub size: u32,
}

/// `scaleDown.mode`: what happens to the VM of a removed node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ScaleDownMode {
    /// The VM is deleted.
    #[default]
    Delete,
    /// The VM is stopped and parked in its group's warm pool when the pool has room and
    /// the VM's settings hash is current; deleted otherwise.
    Stop,
}

/// `unreachableWithLocalData` of a group: what happens to the VM of a node that is
/// NotReady past `health.unhealthyAfter` and holds data on volumes only it can reach.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum UnreachableData {
    /// Left as it is, for a person.
    #[default]
    Keep,
    /// Stopped once per NotReady spell (a hard stop: the guest does not answer), the time
    /// recorded on the VM; never started again nor deleted by nodewright.
    Stop,
}

pub(super) fn validate_pool(p: &mut Vec<ConfigProblem>, at: &str, g: &NodeGroupConfig) {
    let Some(pool) = &g.warm_pool else { return };
    if pool.size > 0 && !g.provider.row().warm_pools {
        let pooled: Vec<&str> = PROVIDERS
            .iter()
            .filter(|p| p.warm_pools)
            .map(|p| p.name)
            .collect();
        p.push(ConfigProblem::new(
            format!("{at}.warmPool"),
            format!(
                "warm pools are supported for providers {} only, this group uses {}; expected no warmPool here",
                pooled.join(", "),
                g.provider.as_str()
            ),
        ));
    }
    if pool.size > g.max_size {
        p.push(ConfigProblem::new(
            format!("{at}.warmPool.size"),
            format!(
                "got {}, more than maxSize {}; warm VMs count toward maxSize, expected at most {}",
                pool.size, g.max_size, g.max_size
            ),
        ));
    }
}

pub(super) fn validate_mode(p: &mut Vec<ConfigProblem>, c: &Config) {
    let pooled = c
        .node_groups
        .iter()
        .any(|g| g.warm_pool.as_ref().is_some_and(|w| w.size > 0));
    if c.scale_down.mode == ScaleDownMode::Stop && !pooled {
        p.push(ConfigProblem::new(
            "scaleDown.mode",
            "got stop, but no group has a warmPool to park VMs in; expected delete, or a group with `warmPool: {size: N}`",
        ));
    }
}

//! Timings that parse but make no sense together: refused when nodewright could not work
//! with them, warned about when they only make it work badly (tests and simulators run
//! with timeouts of seconds on purpose).

use std::time::Duration;

use super::{Config, ConfigProblem};

/// Above this, a cycle is so rare that a VM that never joins, an expired node or a
/// broken one would be acted on hours late.
const MAX_SCAN_INTERVAL: Duration = Duration::from_secs(3600);
/// A real VM takes about this long at least to boot, install its agent and join.
const SHORTEST_BOOT: Duration = Duration::from_secs(60);

/// `d` in the largest unit that states it exactly (`365d`, not humantime's `11months
/// 30days 3h 50m 56s`, which counts in average months).
fn show(d: Duration) -> String {
    let s = d.as_secs();
    if d.subsec_nanos() != 0 || s == 0 {
        humantime::format_duration(d).to_string()
    } else if s.is_multiple_of(86_400) {
        format!("{}d", s / 86_400)
    } else if s.is_multiple_of(3600) {
        format!("{}h", s / 3600)
    } else if s.is_multiple_of(60) {
        format!("{}m", s / 60)
    } else {
        format!("{s}s")
    }
}

/// Refusals.
pub(super) fn validate_timings(p: &mut Vec<ConfigProblem>, c: &Config) {
    if c.scan_interval > MAX_SCAN_INTERVAL {
        p.push(ConfigProblem::new(
            "scanInterval",
            format!(
                "got {}; a VM that never joins, an expired node or a broken one would be acted on only that long after, at the next cycle; expected at most {} (default 30s)",
                show(c.scan_interval),
                show(MAX_SCAN_INTERVAL)
            ),
        ));
    }
}

/// Warnings: the config loads, and `check` and the log say what is likely wrong.
pub(super) fn timing_warnings(c: &Config) -> Vec<ConfigProblem> {
    let mut w = Vec::new();
    if c.provision_timeout < SHORTEST_BOOT {
        w.push(ConfigProblem::new(
            "provisionTimeout",
            format!(
                "got {}, shorter than a VM takes to boot and join (a minute or more): every new VM would be deleted before its node is Ready; expected several minutes (default 15m)",
                show(c.provision_timeout)
            ),
        ));
    }
    if let Some(age) = c.old_node_age_limit {
        if age < c.provision_timeout {
            w.push(ConfigProblem::new(
                "oldNodeAgeLimit",
                format!(
                    "got {}, shorter than provisionTimeout ({}): nodes would be replaced for their age before a new VM is even given up on, one after another; expected days, e.g. `720h`",
                    show(age),
                    show(c.provision_timeout)
                ),
            ));
        }
    }
    w
}

//! What a replay measured, and the timeline the plot is drawn from.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

use serde::Serialize;

/// The state of the world at one instant of the replay.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Sample {
    pub t_s: u64,
    /// Nodes (VMs that exist, booting or not) per group.
    pub nodes: BTreeMap<String, u32>,
    pub pending_pods: u32,
    /// Requests of every pod in the cluster, running or pending (the demand).
    pub cpu_requested_m: u64,
    /// Allocatable of the Ready nodes (the capacity).
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
    /// Node-hours of Ready nodes that ran no workload pod (part of `node_hours`).
    pub empty_node_hours: f64,
    /// Node-hours of VMs from their creation until their node was Ready (part of
    /// `node_hours`).
    pub booting_node_hours: f64,
    pub wait_p50_s: f64,
    pub wait_p95_s: f64,
    pub wait_max_s: f64,
    pub never_started: u32,
    pub evictions: u32,
    /// Job pods evicted while running (their run starts again).
    pub running_jobs_evicted: u32,
    /// Action kind (as in metrics) → count.
    pub actions: BTreeMap<String, u32>,
    pub pods: u32,
    pub cycles: u64,
    pub virtual_seconds: u64,
    /// Node-hours per group.
    pub node_hours_by_group: BTreeMap<String, f64>,
    /// VMs created.
    pub nodes_created: u32,
    /// Largest number of VMs at once.
    pub peak_nodes: u32,
    /// Evictions a PodDisruptionBudget refused.
    pub evictions_refused: u32,
    /// Pods taken off nodes that failed or were deleted under them.
    pub pods_killed: u32,
    /// Job pods that started their run again after an eviction or a node failure.
    pub job_restarts: u32,
    /// Bare pods (`kind: Pod`) evicted or killed: nothing recreated them.
    pub pods_lost: u32,
    /// Local volumes (`local_volume` rows) destroyed with their node's VM while their
    /// pod still had work to do.
    pub volumes_lost: u32,
    /// Nodes that went NotReady (`--node-failures`).
    pub node_failures: u32,
    /// Scale-ups served by starting a warm VM instead of creating one.
    pub warm_starts: u32,
    /// Boot time (create or clone) those starts did not wait for, summed: what the warm
    /// pools saved the pods waiting on them.
    pub warm_wait_saved_s: f64,
    /// Cycles whose action failed (retried by the next cycle, as in `run`).
    pub cycle_errors: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_error: Option<String>,
}

/// The `p`-th percentile (0 < p ≤ 100) of `sorted` by nearest rank: the smallest value
/// with at least p % of the values at or below it; 0 for no values.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let n = sorted.len();
    let rank = ((p / 100.0) * n as f64).ceil() as usize;
    sorted[rank.clamp(1, n) - 1]
}

/// One pod's run as it would be with instant capacity: from its arrival for its duration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run {
    pub start_ms: u64,
    pub end_ms: u64,
    pub cpu_m: u64,
    pub mem_bytes: u64,
}

/// The offline lower bound: the integral over time of
/// `ceil(max(Σcpu / node cpu, Σmem / node mem))` over the pods running at each instant,
/// in node-hours. No packing can use fewer nodes of that size at any instant.
pub fn lower_bound_node_hours(runs: &[Run], node_cpu_m: u64, node_mem_bytes: u64) -> f64 {
    // (time, +1 start / -1 end, cpu, mem); ends before starts at the same instant.
    let mut edges: Vec<(u64, i8, u64, u64)> = Vec::with_capacity(runs.len() * 2);
    for r in runs.iter().filter(|r| r.end_ms > r.start_ms) {
        edges.push((r.start_ms, 1, r.cpu_m, r.mem_bytes));
        edges.push((r.end_ms, -1, r.cpu_m, r.mem_bytes));
    }
    edges.sort_unstable();
    let nodes_for = |cpu: u128, mem: u128| -> u128 {
        let c = if node_cpu_m > 0 {
            cpu.div_ceil(u128::from(node_cpu_m))
        } else {
            0
        };
        let m = if node_mem_bytes > 0 {
            mem.div_ceil(u128::from(node_mem_bytes))
        } else {
            0
        };
        c.max(m)
    };
    let (mut cpu, mut mem) = (0u128, 0u128);
    let mut node_ms: u128 = 0;
    let mut last = 0u64;
    for (t, sign, c, m) in edges {
        node_ms += nodes_for(cpu, mem) * u128::from(t - last);
        last = t;
        if sign > 0 {
            cpu += u128::from(c);
            mem += u128::from(m);
        } else {
            cpu -= u128::from(c);
            mem -= u128::from(m);
        }
    }
    node_ms as f64 / 3_600_000.0
}

fn hours(h: f64) -> String {
    format!("{h:.2}")
}

fn secs(s: f64) -> String {
    if s.fract() == 0.0 {
        format!("{s:.0}")
    } else {
        format!("{s:.1}")
    }
}

/// `1d 2h 3m 4s` (units that are zero left out).
pub fn duration_text(seconds: u64) -> String {
    let (d, h, m, s) = (
        seconds / 86_400,
        seconds / 3600 % 24,
        seconds / 60 % 60,
        seconds % 60,
    );
    let mut parts = Vec::new();
    for (v, u) in [(d, "d"), (h, "h"), (m, "m"), (s, "s")] {
        if v > 0 {
            parts.push(format!("{v}{u}"));
        }
    }
    if parts.is_empty() {
        "0s".into()
    } else {
        parts.join(" ")
    }
}

/// The reports side by side, one column each, one figure per line.
pub fn render_table(reports: &[&Report]) -> String {
    let mut rows: Vec<(String, Vec<String>)> = Vec::new();
    let mut row = |label: &str, f: &dyn Fn(&Report) -> String| {
        rows.push((label.to_string(), reports.iter().map(|r| f(r)).collect()));
    };
    row("", &|r| r.config.clone());
    row("pods", &|r| r.pods.to_string());
    row("node-hours", &|r| hours(r.node_hours));
    let groups: BTreeSet<&String> = reports
        .iter()
        .flat_map(|r| r.node_hours_by_group.keys())
        .collect();
    if groups.len() > 1 {
        for g in groups {
            row(&format!("  group {g}"), &|r| {
                r.node_hours_by_group
                    .get(g)
                    .map_or("-".into(), |h| hours(*h))
            });
        }
    }
    row("  on empty Ready nodes", &|r| hours(r.empty_node_hours));
    row("  booting", &|r| hours(r.booting_node_hours));
    row("lower bound node-hours", &|r| {
        hours(r.lower_bound_node_hours)
    });
    row("node-hours / lower bound", &|r| {
        if r.lower_bound_node_hours > 0.0 {
            format!("{:.2}x", r.node_hours / r.lower_bound_node_hours)
        } else {
            "-".into()
        }
    });
    row("cost", &|r| {
        r.cost.map_or("-".into(), |c| format!("{c:.2}"))
    });
    row("nodes created / peak", &|r| {
        format!("{} / {}", r.nodes_created, r.peak_nodes)
    });
    row("pod wait p50 (s)", &|r| secs(r.wait_p50_s));
    row("pod wait p95 (s)", &|r| secs(r.wait_p95_s));
    row("pod wait max (s)", &|r| secs(r.wait_max_s));
    row("never started", &|r| r.never_started.to_string());
    row("evictions", &|r| r.evictions.to_string());
    row("running Jobs evicted", &|r| {
        r.running_jobs_evicted.to_string()
    });
    type Count = fn(&Report) -> u32;
    let optional: [(&str, Count); 6] = [
        ("evictions refused (PDB)", |r| r.evictions_refused),
        ("node failures", |r| r.node_failures),
        ("pods killed with a node", |r| r.pods_killed),
        ("job restarts", |r| r.job_restarts),
        ("pods lost", |r| r.pods_lost),
        ("local volumes lost", |r| r.volumes_lost),
    ];
    for (label, f) in optional {
        if reports.iter().any(|r| f(r) > 0) {
            row(label, &|r| f(r).to_string());
        }
    }
    if reports.iter().any(|r| r.warm_starts > 0) {
        row("warm starts", &|r| r.warm_starts.to_string());
        row("boot waiting saved by warm pools (s)", &|r| {
            secs(r.warm_wait_saved_s)
        });
    }
    let kinds: BTreeSet<&String> = reports.iter().flat_map(|r| r.actions.keys()).collect();
    for k in kinds {
        row(&format!("actions: {k}"), &|r| {
            r.actions.get(k).copied().unwrap_or(0).to_string()
        });
    }
    row("cycles", &|r| r.cycles.to_string());
    row("virtual time", &|r| duration_text(r.virtual_seconds));
    if reports.iter().any(|r| r.cycle_errors > 0) {
        row("failed actions", &|r| r.cycle_errors.to_string());
    }

    let label_w = rows.iter().map(|(l, _)| l.len()).max().unwrap_or(0);
    let col_w: Vec<usize> = (0..reports.len())
        .map(|i| {
            rows.iter()
                .map(|(_, v)| v.get(i).map_or(0, String::len))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for (label, values) in &rows {
        let _ = write!(out, "{label:<label_w$}");
        for (i, v) in values.iter().enumerate() {
            let w = col_w.get(i).copied().unwrap_or(0);
            let _ = write!(out, "  {v:>w$}");
        }
        out.push('\n');
    }
    for r in reports {
        if let Some(e) = &r.first_error {
            let _ = writeln!(
                out,
                "{}: {} action(s) failed, the first: {e}",
                r.config, r.cycle_errors
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_by_nearest_rank() {
        let v: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), 10.0);
        assert_eq!(percentile(&v, 95.0), 19.0);
        assert_eq!(percentile(&v, 100.0), 20.0);
        assert_eq!(percentile(&[7.0], 95.0), 7.0);
        assert_eq!(percentile(&[], 50.0), 0.0);
    }

    #[test]
    fn lower_bound_integrates_the_nodes_needed_over_time() {
        const H: u64 = 3_600_000;
        const GI: u64 = 1 << 30;
        let run = |s, e, cpu, mem| Run {
            start_ms: s,
            end_ms: e,
            cpu_m: cpu,
            mem_bytes: mem,
        };
        // Nodes of 4 CPU, 8 GiB. [0,1h): 3 CPU → 1 node; [1h,2h): 5 CPU, 10 GiB → 2;
        // [2h,3h): 2 CPU but 9 GiB → 2; [3h,4h): nothing; a run of no time counts
        // for nothing.
        let runs = [
            run(0, 2 * H, 3000, GI),
            run(H, 3 * H, 2000, 9 * GI),
            run(4 * H, 4 * H, 1000, GI),
        ];
        assert_eq!(lower_bound_node_hours(&runs, 4000, 8 * GI), 5.0);
        assert_eq!(lower_bound_node_hours(&[], 4000, 8 * GI), 0.0);
    }

    #[test]
    fn table_puts_reports_side_by_side() {
        let a = Report {
            config: "a.yaml".into(),
            node_hours: 10.0,
            lower_bound_node_hours: 8.0,
            actions: BTreeMap::from([("scale-up".to_string(), 3)]),
            ..Report::default()
        };
        let b = Report {
            config: "b.yaml".into(),
            node_hours: 12.5,
            lower_bound_node_hours: 8.0,
            cost: Some(4.2),
            pods_lost: 1,
            ..Report::default()
        };
        let t = render_table(&[&a, &b]);
        assert!(t.contains("a.yaml  b.yaml"), "{t}");
        assert!(
            t.contains("node-hours                 10.00   12.50"),
            "{t}"
        );
        assert!(
            t.contains("node-hours / lower bound   1.25x   1.56x"),
            "{t}"
        );
        assert!(
            t.contains("actions: scale-up              3       0"),
            "{t}"
        );
        assert!(t.contains("pods lost"), "{t}");
        assert!(
            t.contains("cost                           -    4.20"),
            "{t}"
        );
        assert_eq!(duration_text(7 * 86_400 + 61), "7d 1m 1s");
    }
}

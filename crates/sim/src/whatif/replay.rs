//! The replay: the unmodified [`Reconciler`] (observe → plan → act) against the
//! in-memory world, on a virtual clock. Each cycle runs at virtual time `t` with
//! `reconciler.cycle(at(t))`; the next one is `scanInterval` later, or at once after an
//! action (as `run` does: the same action twice in a row waits `scanInterval`). Between
//! cycles the world plays every arrival, boot, completion and failure at its own
//! instant, so a pod starts the moment room for it appears.
//!
//! The replay ends when every pod of the workload has finished (at that instant), or
//! when nothing runs, nothing boots and the pods left pending have seen no action and
//! no pod start for [`IDLE_STOP`], or at the latest [`TAIL`] after the last pod would
//! have finished with instant capacity.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::api::{self, MemCluster};
use super::report::{lower_bound_node_hours, percentile, Mark, Report, Run, Timeline};
use super::workload::WorkloadRow;
use super::world::{at, pod_info, Census, Ms, World, WorldError, WorldOptions};
use crate::config::Config;
use crate::model::Resources;
use crate::plan::sched::{group_template, static_check, SlotKind};
use crate::plan::Action;
use crate::run::{Cycle, CycleError, Reconciler};

/// A replay whose remaining pods wait with nothing happening stops after this.
pub const IDLE_STOP: Duration = Duration::from_secs(3600);
/// The latest end: this long after the last pod would have finished with instant capacity.
pub const TAIL: Duration = Duration::from_secs(24 * 3600);
/// Cycles run back to back (after actions) before one waits `scanInterval` regardless.
const MAX_BACK_TO_BACK: u32 = 100;
/// At most one timeline sample per this much virtual time.
pub(super) const SAMPLE_EVERY: Ms = 60_000;

fn ms(d: Duration) -> Ms {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The figures and the timeline of one replay.
#[derive(Debug, Clone)]
pub struct Replay {
    pub report: Report,
    pub timeline: Timeline,
    /// Nodes and pods when the replay ended.
    pub census: Census,
}

/// What an observer of the replay is shown after each cycle.
pub struct Step<'a> {
    pub t: Ms,
    pub cycle: Result<&'a Cycle, &'a CycleError>,
    pub world: &'a World,
}

/// Replays `rows` against `config` (named `label` in the report).
pub async fn replay(
    config: Arc<Config>,
    label: &str,
    rows: Vec<WorkloadRow>,
    options: &WorldOptions,
) -> Result<Replay, WorldError> {
    replay_with(config, label, rows, options, None, &mut |_| {}).await
}

/// As [`replay`], stopping at `until` at the latest, and showing `observe` every cycle
/// (after what the cycle did has been played).
pub async fn replay_with(
    config: Arc<Config>,
    label: &str,
    rows: Vec<WorkloadRow>,
    options: &WorldOptions,
    until: Option<Ms>,
    observe: &mut dyn FnMut(Step<'_>),
) -> Result<Replay, WorldError> {
    let world = World::new(&config, rows, options.clone())?;
    let reconciler = Reconciler {
        config: config.clone(),
        cluster: Arc::new(MemCluster {
            world: world.clone(),
        }),
        clouds: api::clouds(&world, &config),
        memory: Default::default(),
        dry_run: false,
    };
    let rows = world.rows();
    let horizon = horizon(&world);
    let scan = ms(config.scan_interval).max(1);

    let mut report = Report {
        config: label.to_string(),
        pods: u32::try_from(rows.len()).unwrap_or(u32::MAX),
        ..Report::default()
    };
    let mut timeline = Timeline::default();
    let mut t: Ms = 0;
    let mut previous: Option<Action> = None;
    let mut back_to_back = 0;
    let mut last_action: Ms = 0;
    let mut last_sample: Option<Ms> = None;
    let mut peak = 0u32;
    let end = loop {
        if let Some(u) = until.filter(|u| t >= *u) {
            world.advance_to(u);
            break u;
        }
        world.advance_to(t);
        if let Some(end) = stop(&world, t, last_action, horizon) {
            break end;
        }
        let cycle = reconciler.cycle_detailed(at(t)).await;
        // What the action changed (a taint off, a node uncordoned) lets pods in now.
        world.advance_to(t);
        observe(Step {
            t,
            cycle: cycle.as_ref(),
            world: &world,
        });
        let acted = match cycle {
            Ok(c) => {
                let action = c.decision.action;
                if action != Action::None {
                    *report.actions.entry(action.kind().to_string()).or_default() += 1;
                    last_action = t;
                }
                match &c.result {
                    Ok(outcome) => {
                        for (group, count) in &outcome.created {
                            timeline.marks.push((
                                t / 1000,
                                Mark::ScaleUp {
                                    group: group.clone(),
                                    count: *count,
                                },
                            ));
                        }
                        let removed: u32 = outcome.deleted.values().sum();
                        if removed > 0 {
                            timeline
                                .marks
                                .push((t / 1000, Mark::Removal { nodes: removed }));
                        }
                    }
                    Err(e) => {
                        report.cycle_errors += 1;
                        report.first_error.get_or_insert_with(|| e.to_string());
                    }
                }
                report.cycles += 1;
                let acted = action != Action::None && c.result.is_ok();
                let again = acted && previous.as_ref() != Some(&action);
                previous = Some(action);
                again
            }
            Err(e) => {
                // Observing the in-memory world cannot fail; count it all the same.
                report.cycles += 1;
                report.cycle_errors += 1;
                report.first_error.get_or_insert_with(|| e.to_string());
                false
            }
        };
        let sample = world.sample();
        peak = peak.max(sample.nodes.values().sum());
        if last_sample.is_none_or(|s| t >= s + SAMPLE_EVERY) {
            timeline.samples.push(sample);
            last_sample = Some(t);
        }
        if acted && back_to_back < MAX_BACK_TO_BACK {
            back_to_back += 1;
        } else {
            back_to_back = 0;
            t += scan;
        }
    };
    Ok(finish(&world, &config, report, timeline, peak, end))
}

/// The latest instant a replay of the world's workload runs to: [`TAIL`] after the last
/// pod would have finished with instant capacity.
pub(super) fn horizon(world: &World) -> Ms {
    let instant_finish = world
        .rows()
        .iter()
        .map(|r| {
            r.arrival_ms
                .saturating_add(r.duration_s.saturating_mul(1000))
        })
        .max()
        .unwrap_or(0);
    instant_finish.saturating_add(ms(TAIL))
}

/// Whether the replay ends at `t` (the world advanced to it; the last action was at
/// `last_action`), and at which instant: when every pod has finished, when the pods left
/// wait with nothing running, booting or happening for [`IDLE_STOP`], or past `horizon`.
pub(super) fn stop(world: &World, t: Ms, last_action: Ms, horizon: Ms) -> Option<Ms> {
    let p = world.progress();
    if p.all_arrived && p.running == 0 && p.pending == 0 {
        return Some(world.lock().last_pod_change.min(t));
    }
    let quiet_since = last_action.max(world.lock().last_pod_change);
    if p.all_arrived
        && p.running == 0
        && p.booting == 0
        && t.saturating_sub(quiet_since) >= ms(IDLE_STOP)
    {
        return Some(t);
    }
    (t > horizon).then_some(t)
}

/// The replay that ended at `end`: the last sample, and the figures.
pub(super) fn finish(
    world: &World,
    config: &Config,
    mut report: Report,
    mut timeline: Timeline,
    peak: u32,
    end: Ms,
) -> Replay {
    let mut last = world.sample();
    last.t_s = end / 1000;
    if timeline.samples.last().is_none_or(|s| s.t_s < last.t_s) {
        timeline.samples.push(last);
    }
    report.peak_nodes = peak;
    report.virtual_seconds = end / 1000;
    fill_figures(&mut report, world, config, end);
    Replay {
        report,
        timeline,
        census: world.census(),
    }
}

/// Node-hours, cost, the lower bound, waits and the world's counters, up to `end`.
fn fill_figures(report: &mut Report, world: &World, config: &Config, end: Ms) {
    let vms = world.vm_stats();
    report.nodes_created = u32::try_from(vms.len()).unwrap_or(u32::MAX);
    let mut by_group: BTreeMap<String, f64> = config
        .node_groups
        .iter()
        .map(|g| (g.name.clone(), 0.0))
        .collect();
    let mut booting_ms: u64 = 0;
    for vm in &vms {
        let gone = vm.deleted.unwrap_or(end).min(end);
        let h = gone.saturating_sub(vm.created) as f64 / 3_600_000.0;
        *by_group.entry(vm.group.clone()).or_default() += h;
        let booted = vm.ready.unwrap_or(gone).min(gone);
        booting_ms += booted.saturating_sub(vm.created);
    }
    report.booting_node_hours = booting_ms as f64 / 3_600_000.0;
    report.empty_node_hours = world.empty_node_hours(end);
    report.node_hours = by_group.values().sum();
    let prices: Option<Vec<(String, f64)>> = config
        .node_groups
        .iter()
        .map(|g| g.price.map(|p| (g.name.clone(), p)))
        .collect();
    report.cost = prices.map(|prices| {
        prices
            .iter()
            .map(|(g, p)| by_group.get(g).copied().unwrap_or(0.0) * p)
            .sum()
    });
    report.node_hours_by_group = by_group;

    let rows = world.rows();
    let groups = world.groups();
    // The lower bound's node: the largest CPU and the largest memory of any group (one
    // group: its node); pods no group can host are left out (they never run); runs are
    // cut at the end of the replay.
    let node_cpu = groups
        .values()
        .map(|g| g.allocatable.cpu)
        .max()
        .unwrap_or(0);
    let node_mem = groups
        .values()
        .map(|g| g.allocatable.memory)
        .max()
        .unwrap_or(0);
    let templates: Vec<_> = config
        .node_groups
        .iter()
        .filter_map(|g| {
            let spec = groups.get(&g.name)?;
            Some(group_template(
                g,
                &spec.labels,
                spec.allocatable.clone(),
                SlotKind::New(g.name.clone()),
                0,
            ))
        })
        .collect();
    let empty = Resources::default();
    let runs: Vec<Run> = rows
        .iter()
        .filter(|r| {
            let pod = pod_info(r, &r.name, at(0), &groups);
            templates.iter().any(|slot| {
                slot.allocatable.fits(&empty, &pod.requests)
                    && static_check(&pod, slot, false).is_ok()
            })
        })
        .map(|r| Run {
            start_ms: r.arrival_ms.min(end),
            end_ms: r
                .arrival_ms
                .saturating_add(r.duration_s.saturating_mul(1000))
                .min(end),
            cpu_m: r.cpu_m,
            mem_bytes: r.mem_mib.saturating_mul(1 << 20),
        })
        .collect();
    report.lower_bound_node_hours = lower_bound_node_hours(&runs, node_cpu, node_mem);

    let stats = world.row_stats();
    let mut waits: Vec<f64> = rows
        .iter()
        .zip(&stats)
        .filter_map(|(r, s)| {
            let start = s.first_start?;
            Some(start.saturating_sub(r.arrival_ms) as f64 / 1000.0)
        })
        .collect();
    waits.sort_by(f64::total_cmp);
    report.wait_p50_s = percentile(&waits, 50.0);
    report.wait_p95_s = percentile(&waits, 95.0);
    report.wait_max_s = waits.last().copied().unwrap_or(0.0);
    report.never_started = stats.iter().filter(|s| s.first_start.is_none()).count() as u32;

    let c = world.counters();
    report.evictions = c.evictions;
    report.running_jobs_evicted = c.running_jobs_evicted;
    report.evictions_refused = c.evictions_refused;
    report.pods_killed = c.pods_killed;
    report.job_restarts = c.job_restarts;
    report.pods_lost = c.pods_lost;
    report.volumes_lost = c.volumes_lost;
    report.node_failures = c.node_failures;
    report.warm_starts = c.warm_starts;
    report.warm_wait_saved_s = c.warm_wait_saved_ms as f64 / 1000.0;
}

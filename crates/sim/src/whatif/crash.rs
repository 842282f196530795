//! Crash points and faults in virtual time: the real `Reconciler` over the in-memory
//! world through [`super::faults`], killed between any two external calls and started
//! afresh from what it can read back (the world keeps its state, the new process
//! keeps nothing: no backoff, no disruption times), with a share of calls failing or
//! half-done. After every cycle the invariants are checked ([`super::invariants`]).
//!
//! One run is one seed at one fault rate: a generated workload (Deployments under a
//! PodDisruptionBudget, Jobs, a bare pod) on two providers, with nodes ageing out so
//! that drains happen under faults; nodes, VMs and nodes of other clusters that are not
//! ours are seeded in. Faults and crashes stop after [`FAULT_PHASE`]; the run goes on
//! to [`RUN_END`] and must have converged by then.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::faults::{faulty_apis, mix, Injector};
pub use super::figures::RunFigures;
use super::invariants::{Checker, Foreign};
use super::workload::{PodKind, WorkloadRow};
use super::world::{at, Ms, World, WorldError, WorldOptions};
use crate::config::Config;
use crate::model::{LabelSelector, PdbInfo};
use crate::plan::Action;
use crate::run::Reconciler;

/// Faults and crashes happen in the first this long of a run.
pub const FAULT_PHASE: Ms = 90 * 60_000;
/// A run ends here; every pod has long finished and the groups are back at `minSize`.
pub const RUN_END: Ms = 4 * 3_600_000;
/// A process that died starts again this much later.
const RESTART_DELAY: Ms = 10_000;
/// Cycles run back to back (after actions) before one waits `scanInterval` regardless.
const MAX_BACK_TO_BACK: u32 = 100;

/// The scenario's config: group `w` (OpenStack, 4 CPU / 8 GiB, 1 to 5 nodes) and
/// group `b` (Proxmox, 2 CPU / 4 GiB, 0 to 3, for `workload=batch` pods, tainted), at
/// most 7 nodes in all; nodes expire after 45 minutes, so replacements drain under
/// faults. `templates_dir` holds `t.sh.j2`.
pub fn scenario_config(templates_dir: &std::path::Path) -> Result<Config, String> {
    std::fs::write(
        templates_dir.join("t.sh.j2"),
        "#!/bin/sh\n{% for a in k3s_node_args %}{{ a }}\n{% endfor %}",
    )
    .map_err(|e| format!("writing the template: {e}"))?;
    let yaml = format!(
        "clusterName: c
freeMemoryTarget: 2 GiB
scanInterval: 30s
provisionTimeout: 10m
oldNodeAgeLimit: 45m
templatesDir: {}
limits: {{nodes: 7}}
scaleDown: {{unneededTime: 5m, delayAfterAdd: 5m}}
drain: {{timeout: 10m, jobGracePeriod: 20m}}
nodeGroups:
- name: w
  provider: openstack
  minSize: 1
  maxSize: 5
  reserved: {{cpu: 0, memory: 0}}
  openstack: {{flavor: m1.large, image: i, network: n}}
  userData: {{template: t.sh.j2}}
- name: b
  provider: proxmox
  maxSize: 3
  reserved: {{cpu: 0, memory: 0}}
  proxmox: {{template: t, cores: 2, memory: 4 GiB}}
  userData: {{template: t.sh.j2}}
  labels: {{workload: batch}}
  taints: [{{key: dedicated, value: batch, effect: NoSchedule}}]
",
        templates_dir.display()
    );
    Config::parse(&yaml, templates_dir).map_err(|e| e.to_string())
}

/// Draws from `seed`, in order.
struct Draw(u64);

impl Draw {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = mix(self.0);
        self.0 % n.max(1)
    }

    fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }
}

fn row(
    name: &str,
    arrival_s: u64,
    cpu_m: u64,
    mem_mib: u64,
    minutes: u64,
    kind: PodKind,
) -> WorkloadRow {
    WorkloadRow {
        line: 0,
        arrival_ms: arrival_s * 1000,
        name: name.into(),
        cpu_m,
        mem_mib,
        duration_s: minutes * 60,
        kind,
        node_selector: BTreeMap::new(),
        gpu: 0,
        priority: 0,
        image: None,
        local_volume: false,
    }
}

/// The workload of one seed: 4 `web` replicas (under a budget of one disruption) for
/// 2.5 h, one bare pod for 2 h, 5 to 9 `api` replicas and 8 to 14 Jobs arriving over the
/// first hour, half of them for the batch group.
pub fn scenario_workload(seed: u64) -> Vec<WorkloadRow> {
    let mut d = Draw(mix(seed));
    let mut rows = Vec::new();
    for i in 0..4 {
        rows.push(row("web", i * 20, 1000, 1024, 150, PodKind::Deployment));
    }
    rows.push(row("solo", 60, 500, 512, 120, PodKind::Pod));
    for _ in 0..d.between(5, 9) {
        let (at, cpu, min) = (
            d.between(0, 2400),
            d.between(5, 15) * 100,
            d.between(60, 100),
        );
        rows.push(row("api", at, cpu, 1024, min, PodKind::Deployment));
    }
    for i in 0..d.between(8, 14) {
        let (at, cpu, min) = (
            d.between(0, 3600),
            d.between(5, 20) * 100,
            d.between(10, 40),
        );
        let mut r = row("job", at, cpu, 512, min, PodKind::Job);
        if i % 2 == 0 {
            r.name = "batch".into();
            r.node_selector = BTreeMap::from([("workload".to_string(), "batch".to_string())]);
        }
        rows.push(r);
    }
    rows
}

/// One run's settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunOptions {
    pub seed: u64,
    /// Share of calls (0 to 1) that fail or half-happen during the fault phase.
    pub fault_rate: f64,
    /// Mean calls between crashes during the fault phase (0: none).
    pub crash_every: u64,
    /// Print every cycle to stderr.
    pub trace: bool,
}

/// Seeds in nodes and VMs that are not this cluster's: a node with no labels, one
/// labelled for another cluster, one labelled as ours with no VM of ours; another
/// cluster's VM in the same group name, and an untagged VM with a name like ours.
pub(super) fn seed_foreign(world: &World) -> Foreign {
    use crate::model::{NodeInfo, Resources, Server, ServerStatus};
    let mut s = world.lock();
    let node = |name: &str, labels: &[(&str, &str)]| {
        let mut allocatable = Resources::cpu_mem(2000, 2 << 30);
        allocatable.pods = 110;
        NodeInfo {
            name: name.into(),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .chain([("kubernetes.io/hostname".to_string(), name.to_string())])
                .collect(),
            annotations: BTreeMap::new(),
            created: at(0),
            unschedulable: false,
            ready: true,
            taints: Vec::new(),
            allocatable,
            images: BTreeSet::new(),
            image_listing: Default::default(),
            deleting: false,
            ready_changed: Some(at(0)),
            kubelet_version: None,
        }
    };
    let nodes = [
        node("legacy-1", &[]),
        node(
            "other-w-1",
            &[
                (nodewright_core::model::LABEL_CLUSTER, "other"),
                (nodewright_core::model::LABEL_GROUP, "w"),
            ],
        ),
        node(
            "c-w-impostor",
            &[
                (nodewright_core::model::LABEL_CLUSTER, "c"),
                (nodewright_core::model::LABEL_GROUP, "w"),
            ],
        ),
    ];
    let server = |id: &str, name: &str, cluster: Option<&str>, provider: &str| Server {
        id: id.into(),
        name: name.into(),
        cluster: cluster.map(str::to_string),
        group: cluster.map(|_| "w".to_string()),
        status: ServerStatus::Active,
        created: at(0),
        memory_bytes: Some(8 << 30),
        provider: provider.into(),
        size: None,
        settings_hash: None,
        fault: None,
        warm: false,
        filling: false,
        joined: None,
        restarted: None,
        fenced: None,
        removing_since: None,
    };
    let vms = [
        server("foreign-1", "other-w-1", Some("other"), "openstack"),
        server("foreign-2", "c-w-handmade", None, "openstack"),
        server("foreign-3", "other-b-1", Some("other"), "proxmox"),
    ];
    let mut foreign = Foreign::default();
    for n in nodes {
        foreign.nodes.insert(n.name.clone(), n.clone());
        s.nodes
            .insert(n.name.clone(), super::state::NodeRec { info: n });
    }
    for v in vms {
        foreign.vms.insert(v.id.clone(), v.clone());
        s.vm_stats.push(super::world::VmStat {
            group: "foreign".into(),
            created: 0,
            ready: Some(0),
            deleted: None,
        });
        let stat = s.vm_stats.len() - 1;
        s.vms
            .insert(v.id.clone(), super::state::Vm { server: v, stat });
    }
    s.room();
    foreign
}

fn web_budget() -> PdbInfo {
    PdbInfo {
        namespace: super::world::NAMESPACE.into(),
        name: "web".into(),
        selector: Some(LabelSelector {
            match_labels: BTreeMap::from([("app".to_string(), "web".to_string())]),
            ..LabelSelector::default()
        }),
        disruptions_allowed: 1,
    }
}

/// Runs one seed at one fault rate against `config` (see [`scenario_config`]).
pub async fn run(config: &Arc<Config>, opts: RunOptions) -> Result<RunFigures, WorldError> {
    let rows = scenario_workload(opts.seed);
    let world = World::new(
        config,
        rows,
        WorldOptions {
            seed: opts.seed,
            ..WorldOptions::default()
        },
    )?;
    world.add_pdb(web_budget());
    let foreign = seed_foreign(&world);
    let injector = Injector::new(opts.seed, opts.fault_rate, opts.crash_every);
    injector.set_foreign(
        foreign.nodes.keys().cloned().collect(),
        foreign.vms.keys().cloned().collect(),
    );
    let mut checker = Checker::new(config, foreign);
    let fresh = || {
        let (cluster, clouds) = faulty_apis(&world, config, &injector);
        Reconciler {
            config: config.clone(),
            cluster,
            clouds,
            memory: Default::default(),
            dry_run: false,
        }
    };
    let mut reconciler = fresh();
    let scan = u64::try_from(config.scan_interval.as_millis())
        .unwrap_or(30_000)
        .max(1);
    let mut figures = RunFigures {
        seed: opts.seed,
        fault_rate: opts.fault_rate,
        ..RunFigures::default()
    };
    let mut t: Ms = 0;
    let mut previous: Option<Action> = None;
    let mut back_to_back = 0;
    let mut converge_from: Option<u32> = None;
    while t <= RUN_END {
        let faulty = t < FAULT_PHASE;
        injector.set_on(faulty);
        world.advance_to(t);
        let cycle = reconciler.cycle_detailed(at(t)).await;
        world.advance_to(t);
        figures.cycles += 1;
        let crashed = injector.take_crash();
        let (action, acted) = match &cycle {
            Ok(c) => (
                Some(c.decision.action.clone()),
                c.decision.action != Action::None && c.result.is_ok(),
            ),
            Err(_) => (None, false),
        };
        if opts.trace {
            trace(t, &cycle, crashed, &world);
        }
        checker.check(&world, t, &mut figures);
        if !faulty {
            let since = *converge_from.get_or_insert(figures.cycles);
            if figures.cycles_to_converge.is_none() && checker.consistent(&world) {
                figures.cycles_to_converge = Some(figures.cycles - since);
            }
        }
        if crashed {
            // The process died: a new one starts from what it can read back.
            figures.restarts += 1;
            reconciler = fresh();
            previous = None;
            back_to_back = 0;
            t += RESTART_DELAY;
            continue;
        }
        let again = acted && previous != action;
        previous = action;
        if again && back_to_back < MAX_BACK_TO_BACK {
            back_to_back += 1;
        } else {
            back_to_back = 0;
            t += scan;
        }
    }
    checker.finish(&world, &mut figures);
    figures.faults = injector.stats();
    figures
        .violations
        .extend(figures.faults.violations.iter().cloned());
    let c = world.counters();
    figures.evictions = c.evictions;
    figures.evictions_refused = c.evictions_refused;
    Ok(figures)
}

fn trace(
    t: Ms,
    cycle: &Result<crate::run::Cycle, crate::run::CycleError>,
    crashed: bool,
    world: &World,
) {
    let what = match cycle {
        Ok(c) => match &c.result {
            Ok(_) => c.decision.action.to_string(),
            Err(e) => format!("{} (failed: {e})", c.decision.action),
        },
        Err(e) => format!("cycle failed: {e}"),
    };
    let mut what: String = what.chars().take(160).collect();
    if crashed {
        what.push_str("  << crashed, restarting");
    }
    let vms: Vec<String> = {
        let s = world.lock();
        s.vms
            .values()
            .filter(|v| v.server.cluster.as_deref() == Some(s.cluster_name.as_str()))
            .map(|v| {
                let node = match s.nodes.get(&v.server.name) {
                    Some(n) if n.info.unschedulable => "cordoned",
                    Some(_) => "node",
                    None => "no node",
                };
                format!("{} ({node})", v.server.name)
            })
            .collect()
    };
    eprintln!("{:>6}s  {what}\n         VMs: {}", t / 1000, vms.join(", "));
}

/// The sum of one fault rate's runs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Totals {
    pub fault_rate: f64,
    pub runs: u32,
    pub calls: u64,
    pub cycles: u64,
    pub crash_points: u64,
    pub crash_points_by_call: BTreeMap<&'static str, u32>,
    pub faults: u64,
    pub faults_by_kind: BTreeMap<&'static str, u32>,
    pub checks: u64,
    pub violations: u64,
    pub max_cycles_to_converge: u32,
    pub not_converged: u32,
    pub max_nodeless_beyond_timeout_s: u64,
    pub pods: u64,
    pub pods_finished: u64,
    pub pods_lost: u64,
    pub evictions: u64,
    pub evictions_refused: u64,
}

impl Totals {
    pub fn add(&mut self, f: &RunFigures) {
        self.fault_rate = f.fault_rate;
        self.runs += 1;
        self.calls += f.faults.calls;
        self.cycles += u64::from(f.cycles);
        for (k, n) in &f.faults.crash_points {
            self.crash_points += u64::from(*n);
            *self.crash_points_by_call.entry(k).or_default() += n;
        }
        for (k, n) in &f.faults.faults {
            self.faults += u64::from(*n);
            *self.faults_by_kind.entry(k).or_default() += n;
        }
        self.checks += f.checks;
        self.violations += f.violations.len() as u64;
        match f.cycles_to_converge {
            Some(c) => self.max_cycles_to_converge = self.max_cycles_to_converge.max(c),
            None => self.not_converged += 1,
        }
        self.max_nodeless_beyond_timeout_s = self
            .max_nodeless_beyond_timeout_s
            .max(f.max_nodeless_beyond_timeout_s);
        self.pods += u64::from(f.pods);
        self.pods_finished += u64::from(f.pods_finished);
        self.pods_lost += u64::from(f.pods_lost);
        self.evictions += u64::from(f.evictions);
        self.evictions_refused += u64::from(f.evictions_refused);
    }
}

/// Runs `runs` seeds from `seed` at each of `rates`, every run with a crash every
/// `crash_every` calls on average; `each` sees every run as it ends.
pub async fn campaign(
    seed: u64,
    runs: u32,
    rates: &[f64],
    crash_every: u64,
    each: &mut dyn FnMut(&RunFigures),
) -> Result<Vec<Totals>, String> {
    let dir = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
    let config = Arc::new(scenario_config(dir.path())?);
    let mut all = Vec::new();
    for &rate in rates {
        let mut totals = Totals {
            fault_rate: rate,
            ..Totals::default()
        };
        for i in 0..runs {
            let opts = RunOptions {
                seed: seed.wrapping_add(u64::from(i)),
                fault_rate: rate,
                crash_every,
                trace: false,
            };
            let f = run(&config, opts).await.map_err(|e| e.to_string())?;
            each(&f);
            totals.add(&f);
        }
        all.push(totals);
    }
    Ok(all)
}

/// The figures as a table, one line per fault rate, then crash points by call and
/// faults by kind over all of them.
pub fn render(totals: &[Totals]) -> String {
    let mut out = String::new();
    out.push_str(
        "faults  runs  crash points  faults injected   calls  cycles  invariant checks  violations  converged (max cycles)  pods  finished  lost  evictions (refused by PDB)\n",
    );
    for t in totals {
        out.push_str(&format!(
            "{:>5.0}%  {:>4}  {:>12}  {:>15}  {:>6}  {:>6}  {:>16}  {:>10}  {:>13} ({:>3})    {:>4}  {:>8}  {:>4}  {:>9} ({})\n",
            t.fault_rate * 100.0,
            t.runs,
            t.crash_points,
            t.faults,
            t.calls,
            t.cycles,
            t.checks,
            t.violations,
            format!("{}/{}", t.runs - t.not_converged, t.runs),
            t.max_cycles_to_converge,
            t.pods,
            t.pods_finished,
            t.pods_lost,
            t.evictions,
            t.evictions_refused,
        ));
    }
    let mut by_call: BTreeMap<&str, u32> = BTreeMap::new();
    let mut by_kind: BTreeMap<&str, u32> = BTreeMap::new();
    for t in totals {
        for (k, n) in &t.crash_points_by_call {
            *by_call.entry(k).or_default() += n;
        }
        for (k, n) in &t.faults_by_kind {
            *by_kind.entry(k).or_default() += n;
        }
    }
    let list = |m: &BTreeMap<&str, u32>| {
        m.iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    out.push_str(&format!(
        "crash points by the call that never happened: {}\n",
        list(&by_call)
    ));
    out.push_str(&format!("faults by kind: {}\n", list(&by_kind)));
    let nodeless = totals
        .iter()
        .map(|t| t.max_nodeless_beyond_timeout_s)
        .max()
        .unwrap_or(0);
    out.push_str(&format!(
        "longest a VM went without a node beyond provisionTimeout: {nodeless} s\n"
    ));
    out
}

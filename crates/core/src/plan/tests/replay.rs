//! Workloads replayed through `plan()` cycle by cycle in a tiny world that schedules
//! with the same model the planner uses, boots VMs after a delay and runs pods for
//! their duration. Measures pod waits and node-hours against the offline lower bound.

use super::*;
use crate::model::Resources;
use crate::plan::sched::Model;

const CYCLE: u64 = 10;
const BOOT: u64 = 60;

/// One pod of the workload: arrives at `at`, runs `run` seconds once started.
struct Job {
    /// Owned by a Job (else by a ReplicaSet).
    batch: bool,
    at: u64,
    run: u64,
    cpu: u64,
    mem: u64,
}

struct World {
    now: u64,
    snapshot: Snapshot,
    /// When each pod first started.
    first_start: BTreeMap<String, u64>,
    /// When each pod must finish, once running.
    ends: BTreeMap<String, u64>,
    /// VM name → (created, deleted).
    vm_life: BTreeMap<String, (u64, Option<u64>)>,
    node_alloc: Resources,
    evictions: u32,
    job_evictions: u32,
    scale_downs: Vec<u64>,
    scale_ups: Vec<u64>,
    /// Pods a drain evicted that have not started again yet.
    evicted: BTreeSet<String>,
    /// Scale-ups while evicted pods waited, within 10 minutes after a scale-down.
    flaps: usize,
    next_vm: u32,
}

fn at(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_800_000_000 + secs)
}

impl World {
    fn new(node_alloc: Resources) -> World {
        World {
            now: 0,
            snapshot: Snapshot::default(),
            first_start: BTreeMap::new(),
            ends: BTreeMap::new(),
            vm_life: BTreeMap::new(),
            node_alloc,
            evictions: 0,
            job_evictions: 0,
            scale_downs: Vec::new(),
            scale_ups: Vec::new(),
            evicted: BTreeSet::new(),
            flaps: 0,
            next_vm: 0,
        }
    }

    fn arrive(&mut self, name: &str, job: &Job) {
        let mut p = mk_pod(name, None, job.mem);
        p.requests.cpu = job.cpu;
        p.unschedulable = false;
        p.unschedulable_since = None;
        p.created = at(self.now);
        if job.batch {
            p.controller_kind = Some("Job".into());
        }
        self.snapshot.pods.push(p.into());
    }

    /// VMs past their boot delay register as Ready nodes with the startup taint.
    fn boot(&mut self) {
        for s in &self.snapshot.servers {
            let (created, _) = self.vm_life[&s.name];
            if self.now >= created + BOOT && !self.snapshot.nodes.iter().any(|n| n.name == s.name) {
                let mut n = mk_node(&s.name, at(self.now));
                n.allocatable = self.node_alloc.clone();
                n.taints.push(Taint {
                    key: STARTUP_TAINT_KEY.into(),
                    value: Some("true".into()),
                    effect: "NoSchedule".into(),
                });
                n.images.insert(normalize_image("nginx:1.25"));
                self.snapshot.nodes.push(n);
            }
        }
    }

    /// Finished pods leave; pending pods are bound where the model says they fit,
    /// oldest first, as the scheduler would; the rest are marked Unschedulable.
    fn schedule(&mut self) {
        let now = self.now;
        if !self.snapshot.pods.iter().any(|p| p.node_name.is_none())
            && !self.ends.values().any(|e| *e <= now)
        {
            return;
        }
        let ends = &self.ends;
        self.snapshot
            .pods
            .retain(|p| p.node_name.is_none() || ends.get(&p.name).is_none_or(|e| *e > now));
        let mut binds = Vec::new();
        {
            let s = &self.snapshot;
            let mut m = Model::of_cluster(&s.nodes, s.pods.iter().map(|p| &**p));
            for p in s.pods.iter().filter(|p| p.node_name.is_none()) {
                let slot = (0..m.slots.len()).find(|&i| m.check(p, i).is_ok());
                if let Some(i) = slot {
                    m.place(p, i);
                    binds.push((p.name.clone(), Some(m.slots[i].name.to_string())));
                } else {
                    binds.push((p.name.clone(), None));
                }
            }
        }
        for (name, node) in binds {
            let Some(p) = self
                .snapshot
                .pods
                .iter_mut()
                .find(|p| p.name == name)
                .map(std::sync::Arc::make_mut)
            else {
                continue;
            };
            match node {
                Some(node) => {
                    self.evicted.remove(&name);
                    p.node_name = Some(node);
                    p.phase = PodPhase::Running;
                    p.unschedulable = false;
                    p.unschedulable_since = None;
                    self.first_start.entry(name.clone()).or_insert(now);
                }
                None if !p.unschedulable => {
                    p.unschedulable = true;
                    p.unschedulable_since = Some(at(now));
                }
                None => {}
            }
        }
    }

    fn apply(&mut self, d: &Decision) {
        let now = self.now;
        match &d.action {
            Action::ScaleUp { group, count, .. } => {
                self.scale_ups.push(now);
                let after_scale_down = self.scale_downs.iter().any(|d| now - d <= 600);
                if after_scale_down && !self.evicted.is_empty() {
                    self.flaps += 1;
                }
                for _ in 0..*count {
                    self.next_vm += 1;
                    let name = format!("dev-{group}-{:05}", self.next_vm);
                    let mut s = mk_server(&name, at(now));
                    s.group = Some(group.clone());
                    self.snapshot.servers.push(s);
                    self.vm_life.insert(name, (now, None));
                }
            }
            Action::RemoveStartupTaint { nodes } => {
                for n in self
                    .snapshot
                    .nodes
                    .iter_mut()
                    .filter(|n| nodes.contains(&n.name))
                {
                    n.taints.retain(|t| t.key != STARTUP_TAINT_KEY);
                }
            }
            Action::Cordon {
                nodes,
                reason,
                disruption,
                at: t,
            } => {
                if matches!(
                    disruption,
                    crate::config::DisruptionReason::Empty
                        | crate::config::DisruptionReason::Underutilized
                ) {
                    self.scale_downs.push(now);
                }
                let at = crate::model::rfc3339(*t);
                for n in self
                    .snapshot
                    .nodes
                    .iter_mut()
                    .filter(|n| nodes.contains(&n.name))
                {
                    n.unschedulable = true;
                    n.annotations
                        .insert(ANNOTATION_CORDONED.into(), reason.clone());
                    n.annotations
                        .insert(crate::model::ANNOTATION_CORDONED_AT.into(), at.clone());
                    n.annotations.insert(
                        crate::model::ANNOTATION_DISRUPTION.into(),
                        disruption.as_str().into(),
                    );
                }
            }
            Action::Uncordon { nodes, .. } | Action::ReuseCordoned { nodes } => {
                for n in self
                    .snapshot
                    .nodes
                    .iter_mut()
                    .filter(|n| nodes.contains(&n.name))
                {
                    n.unschedulable = false;
                    n.annotations
                        .retain(|k, _| !k.starts_with("nodewright.io/"));
                }
            }
            Action::SoftTaint { add, remove } => {
                for n in self.snapshot.nodes.iter_mut() {
                    if add.contains(&n.name) {
                        n.taints.push(crate::model::Taint {
                            key: crate::model::DELETION_CANDIDATE_TAINT_KEY.into(),
                            value: None,
                            effect: "PreferNoSchedule".into(),
                        });
                    } else if remove.contains(&n.name) {
                        n.taints
                            .retain(|t| t.key != crate::model::DELETION_CANDIDATE_TAINT_KEY);
                    }
                }
            }
            Action::MarkUnneeded { mark, clear, at: t } => {
                let at = crate::model::rfc3339(*t);
                for n in self.snapshot.nodes.iter_mut() {
                    if mark.contains(&n.name) {
                        n.annotations
                            .insert(crate::model::ANNOTATION_UNNEEDED_SINCE.into(), at.clone());
                    } else if clear.contains(&n.name) {
                        n.annotations
                            .remove(crate::model::ANNOTATION_UNNEEDED_SINCE);
                    }
                }
            }
            Action::Drain { pods, .. } => {
                for r in pods {
                    if let Some(p) = self
                        .snapshot
                        .pods
                        .iter_mut()
                        .find(|p| p.name == r.name)
                        .map(std::sync::Arc::make_mut)
                    {
                        // Evicted: recreated by its controller, starts its run again.
                        p.node_name = None;
                        p.phase = PodPhase::Pending;
                        self.evictions += 1;
                        self.evicted.insert(p.name.clone());
                        if p.controller_kind.as_deref() == Some("Job") {
                            self.job_evictions += 1;
                        }
                        self.ends.remove(&p.name);
                    }
                }
            }
            Action::DeleteNodes { nodes } => {
                for t in nodes {
                    self.snapshot.nodes.retain(|n| n.name != t.node);
                    self.snapshot.servers.retain(|s| s.name != t.node);
                    if let Some(l) = self.vm_life.get_mut(&t.node) {
                        l.1 = Some(now);
                    }
                }
            }
            Action::DeleteServers { servers, nodes } => {
                self.snapshot.nodes.retain(|n| !nodes.contains(&n.name));
                for s in servers {
                    self.snapshot.servers.retain(|x| x.name != s.name);
                    if let Some(l) = self.vm_life.get_mut(&s.name) {
                        l.1 = Some(now);
                    }
                }
            }
            _ => {}
        }
    }

    fn node_hours(&self) -> f64 {
        self.vm_life
            .values()
            .map(|(c, d)| (d.unwrap_or(self.now) - c) as f64 / 3600.0)
            .sum()
    }
}

struct Outcome {
    waits: Vec<u64>,
    node_hours: f64,
    lower_bound: f64,
    never_started: usize,
    evictions: u32,
    job_evictions: u32,
    /// Scale-ups for pods a scale-down evicted, within 10 minutes after it.
    flaps: usize,
    /// Scale-ups (`+t`) and scale-downs (`-t`) in order, for failure messages.
    timeline: String,
    ups: Vec<u64>,
    downs: Vec<u64>,
}

/// Replays `jobs` for `horizon` seconds with `config` and nodes of `alloc`.
fn replay(config: &Config, alloc: Resources, jobs: &[Job], horizon: u64) -> Outcome {
    let mut w = World::new(alloc.clone());
    let runs: BTreeMap<String, u64> = jobs
        .iter()
        .enumerate()
        .map(|(i, j)| (format!("job-{i}"), j.run))
        .collect();
    let mut next = 0;
    while w.now <= horizon {
        while next < jobs.len() && jobs[next].at <= w.now {
            w.arrive(&format!("job-{next}"), &jobs[next]);
            next += 1;
        }
        w.boot();
        w.schedule();
        // Pods that just started run for their duration (unless evicted since).
        for p in &w.snapshot.pods {
            if p.node_name.is_some() && !w.ends.contains_key(&p.name) {
                w.ends.insert(p.name.clone(), w.now + runs[&p.name]);
            }
        }
        let d = plan(&w.snapshot, config, at(w.now));
        w.apply(&d);
        // The real scheduler reacts within a second to a node losing its taint.
        w.schedule();
        for p in &w.snapshot.pods {
            if p.node_name.is_some() && !w.ends.contains_key(&p.name) {
                w.ends.insert(p.name.clone(), w.now + runs[&p.name]);
            }
        }
        w.now += CYCLE;
    }
    let waits = jobs
        .iter()
        .enumerate()
        .filter_map(|(i, j)| w.first_start.get(&format!("job-{i}")).map(|s| s - j.at))
        .collect();
    // Offline lower bound: every minute, the nodes the running set needs by CPU or
    // memory if capacity were instant and packing perfect.
    let mut lower = 0.0;
    let mut t = 0;
    while t <= horizon {
        let (mut cpu, mut mem) = (0u64, 0u64);
        for j in jobs.iter().filter(|j| j.at <= t && t < j.at + j.run) {
            cpu += j.cpu;
            mem += j.mem;
        }
        let need = (cpu as f64 / alloc.cpu as f64)
            .max(mem as f64 / alloc.memory as f64)
            .ceil();
        lower += need * 60.0 / 3600.0;
        t += 60;
    }
    Outcome {
        never_started: jobs.len() - w.first_start.len(),
        waits,
        node_hours: w.node_hours(),
        lower_bound: lower,
        evictions: w.evictions,
        job_evictions: w.job_evictions,
        timeline: {
            let mut t: Vec<(u64, char)> = w
                .scale_ups
                .iter()
                .map(|u| (*u, '+'))
                .chain(w.scale_downs.iter().map(|d| (*d, '-')))
                .collect();
            t.sort();
            t.iter()
                .map(|(at, k)| format!("{k}{at}"))
                .collect::<Vec<_>>()
                .join(" ")
        },
        flaps: w.flaps,
        ups: w.scale_ups.clone(),
        downs: w.scale_downs.clone(),
    }
}

fn replay_config(cpu: &str, memory: &str) -> Config {
    super::scale_up::mk_config_groups(
        "imagePuller: {enabled: false}\nscaleDown: {delayAfterAdd: 2m}",
        &super::scale_up::group("workers", 200, cpu, memory, ""),
    )
}

/// A CPU-bound web service: replicas of 1 CPU and 256 MiB each, arriving faster and
/// then slower; every replica lives for half an hour.
fn cpu_bound_web() -> Vec<Job> {
    let mut jobs = Vec::new();
    for minute in 0..(3 * 60u64) {
        // 0..=4 arrivals a minute, peaking mid-replay.
        let phase = minute as f64 / (3.0 * 60.0) * std::f64::consts::PI;
        let per_minute = (phase.sin() * 4.0).round() as u64;
        for k in 0..per_minute {
            jobs.push(Job {
                batch: false,
                at: minute * 60 + k * 7,
                run: 1800,
                cpu: 1000,
                mem: 256 << 20,
            });
        }
    }
    jobs
}

#[test]
fn cpu_bound_pods_wait_no_longer_than_boot_plus_two_cycles() {
    let c = replay_config("4", "8Gi");
    let alloc = mk_alloc(4000, 8 * GI);
    let jobs = cpu_bound_web();
    let o = replay(&c, alloc, &jobs, 4 * 3600);
    let max = o.waits.iter().copied().max().unwrap_or(0);
    assert_eq!(o.never_started, 0);
    assert!(
        max <= BOOT + 2 * CYCLE,
        "max wait {max}s over {} pods (node-hours {:.1}, lower bound {:.1})",
        o.waits.len(),
        o.node_hours,
        o.lower_bound
    );
}

#[test]
fn memory_bound_sessions_stay_within_ten_percent_of_the_node_hours_lower_bound() {
    let c = replay_config("4", "16Gi");
    let alloc = mk_alloc(4000, 16 * GI);
    // Notebook sessions: 4 GiB and a quarter CPU each (four to a node, so a perfect
    // packing exists), two hours, a steady stream that ramps up and down.
    let mut jobs = Vec::new();
    for minute in 0..(10 * 60u64) {
        let phase = minute as f64 / 600.0 * std::f64::consts::PI;
        if minute % ((3.0 - 2.0 * phase.sin()).round() as u64).max(1) == 0 {
            jobs.push(Job {
                batch: false,
                at: minute * 60,
                run: 2 * 3600,
                cpu: 250,
                mem: 4 * GI,
            });
        }
    }
    let o = replay(&c, alloc, &jobs, 13 * 3600);
    assert_eq!(o.never_started, 0);
    let ratio = o.node_hours / o.lower_bound;
    assert!(
        ratio <= 1.10,
        "node-hours {:.1} vs lower bound {:.1} ({ratio:.2}×), {} evictions",
        o.node_hours,
        o.lower_bound,
        o.evictions
    );
}

#[test]
fn a_steady_workload_never_flaps_over_a_thousand_cycles() {
    let c = replay_config("4", "8Gi");
    let alloc = mk_alloc(4000, 8 * GI);
    // Thirty replicas of odd sizes, there from the start, running for ever.
    let jobs: Vec<Job> = (0..30u64)
        .map(|i| Job {
            batch: false,
            at: 0,
            run: u64::MAX / 4,
            cpu: 300 + (i % 4) * 250,
            mem: (512 + (i % 3) * 700) << 20,
        })
        .collect();
    let o = replay(&c, alloc, &jobs, 1000 * CYCLE);
    assert_eq!(o.never_started, 0);
    assert_eq!(o.flaps, 0, "scale-ups right after scale-downs");
    // Not a single scale-up after any scale-down: no pair at all.
    let first_down = o.downs.first().copied().unwrap_or(u64::MAX);
    assert!(
        o.ups.iter().all(|u| *u < first_down),
        "scale-up after a scale-down: {}",
        o.timeline
    );
}

#[test]
fn bursty_jobs_are_never_evicted_by_scale_down_and_cause_no_flap() {
    let c = replay_config("4", "8Gi");
    let alloc = mk_alloc(4000, 8 * GI);
    // A burst of 24 one-CPU Job pods every 40 minutes, each running 5 to 20 minutes,
    // beside a small steady service.
    let mut jobs: Vec<Job> = (0..4)
        .map(|_| Job {
            batch: false,
            at: 0,
            run: u64::MAX / 4,
            cpu: 500,
            mem: GI,
        })
        .collect();
    for burst in 0..6u64 {
        for k in 0..24u64 {
            jobs.push(Job {
                batch: true,
                at: burst * 2400 + k * 5,
                run: 300 + (k % 4) * 300,
                cpu: 1000,
                mem: 512 << 20,
            });
        }
    }
    jobs.sort_by_key(|j| j.at);
    let o = replay(&c, alloc, &jobs, 6 * 2400);
    assert_eq!(o.never_started, 0);
    assert_eq!(o.job_evictions, 0, "running Job pods evicted by scale-down");
    assert_eq!(
        o.flaps, 0,
        "scale-ups within 10 minutes after a scale-down: {}",
        o.timeline
    );
}

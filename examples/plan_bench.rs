//! How long one planning decision takes on a large cluster (the planner is pure, so this
//! is the whole decide step), and how fast the scheduling model packs pods.
//!
//! Run: `cargo run --release --example plan_bench [nodes] [runs] [scenario]` (default
//! 5,000 nodes, 30 pods per node, 5 runs per figure, every scenario; pending pods are 2
//! per 5 nodes: 2,000 at 5,000).
//! A benchmark, not a test: it prints numbers and asserts nothing about speed.
//!
//! Scenarios (every node: 16 CPU, 64 GiB, 110 pods; three zones, one group per zone):
//! - `pending`: pending pods of 50 shapes (CPU- and memory-heavy mixes); those up to one
//!   CPU fit the room left on existing nodes, the 2-CPU ones need new nodes (a scale-up).
//! - `affinity`: the same pods, of 50 deployments with required hostname anti-affinity
//!   and a zone topology spread (maxSkew 1), with existing replicas that carry both.
//! - `scale-down`: no pending pods; a tenth of the nodes are under the consolidation
//!   threshold but run a database pod (one per host) that nothing else can take, and
//!   1% are under it with pods that fit elsewhere, unneeded for an hour: every candidate
//!   is evicted in the model, then the removable ones are cordoned.
//! - `full`: no pending pods, every node 98% full: a cycle with nothing to do.
//!
//! Figures per scenario: one plan (median of the runs), and the packing alone through
//! the public `nodewright::plan::sched` API: first-fit of the pending pods over the
//! existing nodes then onto new nodes of one group (pods/s = pending pods / that time),
//! or for the scale-down scenarios, evicting each underused node's pods in the model.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant, SystemTime};

use nodewright::config::Config;
use nodewright::model::{
    GroupShape, LabelSelector, Namespaces, NodeInfo, PodAffinityTerm, PodInfo, PodPhase, Resources,
    Server, ServerStatus, SpreadConstraint, LABEL_CLUSTER, LABEL_GROUP,
};
use nodewright::plan::sched::{self, Model, SlotKind};
use nodewright::plan::{self, Snapshot};

const GI: u64 = 1 << 30;
const MI: u64 = 1 << 20;
const ZONES: [&str; 3] = ["a", "b", "c"];
const HOST: &str = "kubernetes.io/hostname";
const ZONE: &str = "topology.kubernetes.io/zone";
const PODS_PER_NODE: usize = 30;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let nodes: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(5000);
    let runs: usize = args
        .next()
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(5)
        .max(1);
    let only = args.next();
    let pending = nodes * 2 / 5;
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("t.j2"), "#cloud-config\n")?;
    let mut yaml = format!(
        "clusterName: bench\nfreeMemoryTarget: 8 GiB\noldNodeAgeLimit: 72h\ntemplatesDir: {}\nnodeGroups:\n",
        dir.path().display()
    );
    for z in ZONES {
        yaml.push_str(&format!(
            "- {{name: workers-{z}, provider: openstack, maxSize: {}, openstack: {{flavor: f, image: i}}, userData: {{template: t.j2}}}}\n",
            nodes * 2
        ));
    }
    let config = Config::parse(&yaml, dir.path())?;
    let now = SystemTime::now();
    println!(
        "plan_bench: {nodes} nodes x {PODS_PER_NODE} pods, {pending} pending pods of 50 shapes, median of {runs} run(s)"
    );
    for kind in [Kind::Pending, Kind::Affinity, Kind::ScaleDown, Kind::Full] {
        if only.as_deref().is_some_and(|o| o != kind.name()) {
            continue;
        }
        let s = build(kind, nodes, pending, now);
        scenario(kind, &s, &config, now, runs)?;
    }
    Ok(())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Pending,
    Affinity,
    ScaleDown,
    Full,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Pending => "pending",
            Kind::Affinity => "affinity",
            Kind::ScaleDown => "scale-down",
            Kind::Full => "full",
        }
    }
}

fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort();
    xs[xs.len() / 2]
}

fn scenario(
    kind: Kind,
    s: &Snapshot,
    config: &Config,
    now: SystemTime,
    runs: usize,
) -> anyhow::Result<()> {
    let mut times = Vec::new();
    let mut decision = None;
    for _ in 0..runs {
        let start = Instant::now();
        let d = plan::plan(s, config, now);
        times.push(start.elapsed());
        decision = Some(d);
    }
    let unschedulable = s.pods.iter().filter(|p| p.unschedulable).count();
    println!(
        "\n[{}] {} nodes, {} pods ({} pending)",
        kind.name(),
        s.nodes.len(),
        s.pods.len(),
        unschedulable
    );
    println!("  one plan: {:?} (median)", median(times));
    if let Some(d) = decision {
        let buckets: Vec<String> = d
            .bucket_counts()
            .iter()
            .map(|(b, n)| format!("{} {n}", b.as_str()))
            .collect();
        println!("  decision: {}", d.action);
        if !buckets.is_empty() {
            println!("  pending pods: {}", buckets.join(", "));
        }
    }
    match kind {
        Kind::Pending | Kind::Affinity => pack_pending(s, config, runs),
        Kind::ScaleDown | Kind::Full => pack_evictions(s, runs),
    }
}

/// First-fit of the pending pods over the existing nodes, then the rest onto new nodes
/// of the first group, as the planner's scale-up does.
fn pack_pending(s: &Snapshot, config: &Config, runs: usize) -> anyhow::Result<()> {
    let g = config
        .group("workers-a")
        .ok_or_else(|| anyhow::anyhow!("no group workers-a"))?;
    let shape = s.group_shapes.get(&g.name);
    let labels = sched::well_known_labels(g, &config.cluster_name, shape);
    let allocatable = sched::template::allocatable_from_shape(g, shape);
    let template = sched::group_template(
        g,
        &labels,
        allocatable.clone(),
        SlotKind::New(g.name.clone()),
        0,
    );
    let overhead = sched::daemonset_overhead(s.pods.iter().map(|p| &**p), &template);
    let mut pending: Vec<&PodInfo> = s
        .pods
        .iter()
        .map(|p| &**p)
        .filter(|p| p.unschedulable)
        .collect();
    sched::sort_for_packing(&mut pending, &allocatable);
    let mut times = Vec::new();
    let mut model_times = Vec::new();
    let mut outcome = (0, 0, 0, 0);
    for _ in 0..runs {
        let start = Instant::now();
        let mut m = Model::of_cluster(&s.nodes, s.pods.iter().map(|p| &**p));
        model_times.push(start.elapsed());
        let start = Instant::now();
        let (placed, left) = sched::first_fit(&mut m, &pending, |_| true);
        let new = sched::pack_new_nodes(&mut m, &left, &template, &overhead, u32::MAX, &[]);
        times.push(start.elapsed());
        outcome = (
            placed.len(),
            new.placed.len(),
            new.count,
            left.len() - new.placed.len(),
        );
    }
    let t = median(times);
    let (existing, on_new, count, unplaced) = outcome;
    println!(
        "  model of the cluster: {:?}; packing {} pods: {:?} = {:.0} pods/s ({existing} on existing nodes, {on_new} on {count} new node(s), {unplaced} unplaced)",
        median(model_times),
        pending.len(),
        t,
        pending.len() as f64 / t.as_secs_f64().max(1e-9),
    );
    Ok(())
}

/// For every tenth node (in `scale-down`, the underused ones with a database pod): its
/// pods first-fit onto the other nodes and back, as scale-down tries a candidate.
fn pack_evictions(s: &Snapshot, runs: usize) -> anyhow::Result<()> {
    let mut on_node: BTreeMap<&str, Vec<&PodInfo>> = BTreeMap::new();
    for p in &s.pods {
        if let Some(n) = &p.node_name {
            on_node.entry(n.as_str()).or_default().push(p);
        }
    }
    let candidates: Vec<&NodeInfo> = s.nodes.iter().step_by(10).collect();
    let mut times = Vec::new();
    let mut tried = 0;
    let mut moved = 0;
    for _ in 0..runs {
        let mut m = Model::of_cluster(&s.nodes, s.pods.iter().map(|p| &**p));
        let start = Instant::now();
        tried = 0;
        moved = 0;
        for n in &candidates {
            let Some(i) = m.slot_index(&n.name) else {
                continue;
            };
            let mut pods = on_node.get(n.name.as_str()).cloned().unwrap_or_default();
            sched::sort_for_packing(&mut pods, &n.allocatable);
            m.slots[i].usable = false;
            let cp = m.checkpoint();
            let (placed, _) = sched::first_fit(&mut m, &pods, |s| s.kind == SlotKind::Node);
            m.rollback(cp);
            m.slots[i].usable = true;
            tried += pods.len();
            moved += placed.len();
        }
        times.push(start.elapsed());
    }
    let t = median(times);
    println!(
        "  evicting {} candidate nodes in the model: {:?} = {:.0} pods/s ({tried} pods tried, {moved} fit elsewhere)",
        candidates.len(),
        t,
        tried as f64 / t.as_secs_f64().max(1e-9),
    );
    Ok(())
}

/// 50 shapes: CPU 100m..2 by memory 256 MiB..16 GiB.
fn shape(k: usize) -> (u64, u64) {
    const CPU: [u64; 5] = [100, 250, 500, 1000, 2000];
    const MEM: [u64; 10] = [
        256 * MI,
        512 * MI,
        GI,
        2 * GI,
        3 * GI,
        4 * GI,
        6 * GI,
        8 * GI,
        12 * GI,
        16 * GI,
    ];
    (CPU[k % 5], MEM[(k / 5) % 10])
}

fn build(kind: Kind, nodes: usize, pending: usize, now: SystemTime) -> Snapshot {
    let mut s = Snapshot::default();
    for z in ZONES {
        s.group_shapes.insert(
            format!("workers-{z}"),
            GroupShape {
                cpu_milli: Some(16000),
                memory: Some(64 * GI),
                instance_type: Some("f".into()),
                zone: Some(format!("zone-{z}")),
                region: Some("bench".into()),
                hosts: None,
                sizes: Vec::new(),
            },
        );
    }
    let affinity = kind == Kind::Affinity;
    for i in 0..nodes {
        let zone = ZONES[i % ZONES.len()];
        let group = format!("workers-{zone}");
        let name = format!("bench-{group}-{i:05}");
        let created = now - Duration::from_secs(3600 + i as u64);
        s.servers.push(Server {
            id: format!("id-{i}"),
            name: name.clone(),
            cluster: Some("bench".into()),
            group: Some(group.clone()),
            status: ServerStatus::Active,
            created,
            memory_bytes: Some(64 * GI),
            provider: "openstack".into(),
            settings_hash: None,
            size: None,
            fault: None,
            warm: false,
            filling: false,
            joined: Some(created),
            restarted: None,
            fenced: None,
            removing_since: None,
        });
        s.nodes.push(NodeInfo {
            name: name.clone(),
            labels: BTreeMap::from([
                (LABEL_CLUSTER.to_string(), "bench".to_string()),
                (LABEL_GROUP.to_string(), group),
                (HOST.to_string(), name.clone()),
                (ZONE.to_string(), format!("zone-{zone}")),
                ("kubernetes.io/os".to_string(), "linux".to_string()),
            ]),
            annotations: BTreeMap::new(),
            created,
            unschedulable: false,
            ready: true,
            taints: vec![],
            allocatable: {
                let mut r = Resources::cpu_mem(16000, 64 * GI);
                r.pods = 110;
                r
            },
            images: BTreeSet::from([nodewright::model::normalize_image("nginx:1.25")]),
            image_listing: Default::default(),
            deleting: false,
            ready_changed: None,
            kubelet_version: None,
        });
        // Filler pods of 500 deployments: 30 x (500m, 2 GiB) fill a node to 15 CPU and
        // 60 GiB; one node in ten has holes instead.
        let underused = i % 10 == 0 && kind != Kind::Full;
        match kind {
            Kind::Pending | Kind::Affinity if underused => {
                for j in 0..PODS_PER_NODE {
                    let mem = if j < 20 { 2 * GI } else { 256 * MI };
                    let app = format!("svc-{}", (i * PODS_PER_NODE + j) % 500);
                    s.pods
                        .push(pod(&format!("p-{i}-{j}"), Some(&name), 500, mem, &app, now).into());
                }
            }
            Kind::ScaleDown if underused => {
                // One 28 GiB database pod, one per host (anti-affinity): 44% used, so
                // a consolidation candidate, yet no other node can take it.
                let mut p = pod(&format!("db-{i}"), Some(&name), 500, 28 * GI, "db", now);
                p.pod_anti_affinity.push(PodAffinityTerm {
                    selector: LabelSelector {
                        match_labels: BTreeMap::from([("app".to_string(), "db".to_string())]),
                        ..LabelSelector::default()
                    },
                    namespaces: Namespaces::Listed(vec!["default".into()]),
                    topology_key: HOST.into(),
                });
                s.pods.push(p.into());
            }
            Kind::ScaleDown if i % 100 == 5 => {
                // 5 x (500m, 2 GiB) and a small pod: 16% used, and the pods fit the
                // others' room; unneeded for an hour already, so consolidation takes it.
                if let Some(n) = s.nodes.last_mut() {
                    n.annotations.insert(
                        "nodewright.io/unneeded-since".into(),
                        humantime::format_rfc3339_seconds(now - Duration::from_secs(3600))
                            .to_string(),
                    );
                }
                for j in 0..5 {
                    let app = format!("svc-{}", (i * PODS_PER_NODE + j) % 500);
                    s.pods.push(
                        pod(&format!("p-{i}-{j}"), Some(&name), 500, 2 * GI, &app, now).into(),
                    );
                }
                // A small pod of the database's app keeps database pods off it.
                s.pods.push(
                    pod(
                        &format!("db-agent-{i}"),
                        Some(&name),
                        100,
                        256 * MI,
                        "db",
                        now,
                    )
                    .into(),
                );
            }
            _ => {
                // Full nodes: 30 x (500m, 2 GiB), 94% used, 1 CPU and 4 GiB free; in
                // "full", 2.1 GiB pods leave 1 GiB.
                let mem = if kind == Kind::Full {
                    2 * GI + 100 * MI
                } else {
                    2 * GI
                };
                for j in 0..PODS_PER_NODE {
                    let app = format!("svc-{}", (i * PODS_PER_NODE + j) % 500);
                    s.pods
                        .push(pod(&format!("p-{i}-{j}"), Some(&name), 500, mem, &app, now).into());
                }
            }
        }
        if affinity && i % 4 == 1 {
            // Existing replicas of the 50 deployments, on distinct hosts of every zone.
            let k = (i / 4) % 50;
            let mut p = pod(
                &format!("web-{k}-old-{i}"),
                Some(&name),
                100,
                256 * MI,
                "",
                now,
            );
            rules(&mut p, k);
            s.pods.push(p.into());
        }
    }
    if matches!(kind, Kind::Pending | Kind::Affinity) {
        for j in 0..pending {
            let k = j % 50;
            let (cpu, mem) = shape(k);
            let mut p = pod(&format!("pending-{j}"), None, cpu, mem, "", now);
            if affinity {
                rules(&mut p, k);
            } else {
                p.labels.insert("app".into(), format!("batch-{k}"));
            }
            s.pods.push(p.into());
        }
    }
    s
}

/// Deployment `web-k`: one pod per host, spread over zones with maxSkew 1.
fn rules(p: &mut PodInfo, k: usize) {
    let selector = LabelSelector {
        match_labels: BTreeMap::from([("app".to_string(), format!("web-{k}"))]),
        ..LabelSelector::default()
    };
    p.labels.insert("app".into(), format!("web-{k}"));
    p.pod_anti_affinity.push(PodAffinityTerm {
        selector: selector.clone(),
        namespaces: Namespaces::Listed(vec!["default".into()]),
        topology_key: HOST.into(),
    });
    p.spread.push(SpreadConstraint {
        max_skew: 1,
        topology_key: ZONE.into(),
        selector,
        min_domains: None,
        honor_node_affinity: true,
        honor_taints: false,
    });
}

fn pod(
    name: &str,
    node: Option<&str>,
    cpu: u64,
    memory: u64,
    app: &str,
    now: SystemTime,
) -> PodInfo {
    let mut p = PodInfo::new("default", name);
    p.node_name = node.map(str::to_string);
    p.phase = if node.is_some() {
        PodPhase::Running
    } else {
        PodPhase::Pending
    };
    p.requests.memory = memory;
    p.requests.cpu = cpu;
    p.requests.pods = 1;
    p.unschedulable = node.is_none();
    p.controller_kind = Some("ReplicaSet".into());
    if !app.is_empty() {
        p.labels.insert("app".into(), app.into());
    }
    p.images = vec!["nginx:1.25".into()];
    p.created = now;
    p
}

//! How long one planning decision takes on a large cluster (the planner is pure, so this
//! is the whole decide step). Run: `cargo run --release --example plan_bench [nodes]`.
//! A benchmark, not a test: it prints numbers and asserts nothing about speed.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant, SystemTime};

use nodewright::cloud::{Server, ServerStatus};
use nodewright::config::Config;
use nodewright::plan::sched::Resources;
use nodewright::plan::{self, NodeInfo, PodInfo, PodPhase, Snapshot};
use nodewright::{LABEL_CLUSTER, LABEL_GROUP};

const GI: u64 = 1 << 30;

fn main() -> anyhow::Result<()> {
    let nodes: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(500);
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("t.j2"), "#cloud-config\n")?;
    let config = Config::parse(
        &format!(
            "clusterName: bench\nfreeMemoryTarget: 8 GiB\noldNodeAgeLimit: 72h\ntemplatesDir: {}\nnodeGroups:\n- {{name: workers, provider: openstack, maxSize: {}, openstack: {{flavor: f, image: i}}, userData: {{template: t.j2}}}}\n",
            dir.path().display(),
            nodes * 2
        ),
        dir.path(),
    )?;
    let now = SystemTime::now();
    let mut s = Snapshot::default();
    for i in 0..nodes {
        let name = format!("bench-workers-{i:05}");
        s.servers.push(Server {
            id: format!("id-{i}"),
            name: name.clone(),
            cluster: Some("bench".into()),
            group: Some("workers".into()),
            status: ServerStatus::Active,
            created: now - Duration::from_secs(3600 + i as u64),
            memory_bytes: Some(16 * GI),
            provider: "openstack".into(),
        });
        s.nodes.push(NodeInfo {
            name: name.clone(),
            labels: BTreeMap::from([
                (LABEL_CLUSTER.to_string(), "bench".to_string()),
                (LABEL_GROUP.to_string(), "workers".to_string()),
            ]),
            annotations: BTreeMap::new(),
            created: now - Duration::from_secs(3600 + i as u64),
            unschedulable: false,
            ready: true,
            taints: vec![],
            allocatable: {
                let mut r = Resources::cpu_mem(8000, 16 * GI);
                r.pods = 110;
                r
            },
            images: BTreeSet::from([plan::normalize_image("nginx:1.25")]),
            deleting: false,
        });
        for j in 0..30 {
            s.pods
                .push(pod(&format!("p-{i}-{j}"), Some(&name), GI / 2, now));
        }
    }
    for j in 0..200 {
        s.pods.push(pod(&format!("pending-{j}"), None, GI, now));
    }
    let runs = 20;
    let start = Instant::now();
    let mut decision = None;
    for _ in 0..runs {
        decision = Some(plan::plan(&s, &config, now));
    }
    let each = start.elapsed() / runs;
    println!(
        "{} nodes, {} pods: one plan takes {:?}",
        s.nodes.len(),
        s.pods.len(),
        each
    );
    if let Some(d) = decision {
        println!("decision: {}", d.action);
    }
    Ok(())
}

fn pod(name: &str, node: Option<&str>, memory: u64, now: SystemTime) -> PodInfo {
    let mut p = PodInfo::new("default", name);
    p.node_name = node.map(str::to_string);
    p.phase = if node.is_some() {
        PodPhase::Running
    } else {
        PodPhase::Pending
    };
    p.requests.memory = memory;
    p.requests.cpu = 100;
    p.unschedulable = node.is_none();
    p.controller_kind = Some("ReplicaSet".into());
    p.images = vec!["nginx:1.25".into()];
    p.created = now;
    p
}

//! Hybrid burst (issue 7), end to end over real loopback HTTP: with the `priority`
//! expander an on-prem Proxmox group fills to its `maxSize` first and an OpenStack group
//! takes only what does not fit; scale-down takes the cloud nodes first; a cluster-wide
//! `limits.memory` cuts the burst short and says so.

use nodewright_testkit as common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime};

use common::{has_startup_taint, phase, ready, scale_ups, unschedulable};
use k8s_openapi::api::core::v1::Pod;
use nodewright::model::{parse_quantity, LABEL_GROUP};
use nodewright::plan::{Action, Bucket, Decision, ReasonCode};
use nodewright::run::Reconciler;
use nodewright::sim::cluster::SimPodTemplate;
use nodewright::sim::env::{SimEnv, SimTimings};

const GI: u64 = 1 << 30;
const MI: u64 = 1 << 20;

/// One pod of the burst: CPU-bound on a Proxmox node (2 cores: two pods), memory-bound on
/// an OpenStack m1.large (4 vCPU, 8 GiB: three pods), so the two groups pack differently.
/// Ten pods fill every node exactly (2 + 2 on Proxmox, 3 + 3 on OpenStack), so whichever
/// VMs boot first, the scheduler leaves no node empty for scale-down to take early.
const POD_MEMORY: u64 = 2 * GI;
const POD_CPU_MILLI: u32 = 900;
const PODS: usize = 10;
const PVE_MAX: usize = 2;

/// A new node as the planner sizes it before one of its group exists: the template or
/// flavor, minus the default reservation (100 MiB + 5 % of memory); 110 pods.
fn new_node(cpu_milli: u64, memory: u64) -> Shape {
    Shape {
        cpu: cpu_milli,
        memory: memory - (100 * MI + memory / 20),
        pods: 110,
    }
}

#[derive(Debug, Clone, Copy)]
struct Shape {
    cpu: u64,
    memory: u64,
    pods: u64,
}

/// First-fit decreasing of `pods` (CPU milli, memory) onto at most `max_bins` nodes of
/// `node`: how many nodes it opens, and the pods left over.
fn first_fit_decreasing(
    pods: &[(u64, u64)],
    node: Shape,
    max_bins: usize,
) -> (usize, Vec<(u64, u64)>) {
    let mut sorted = pods.to_vec();
    let share =
        |&(c, m): &(u64, u64)| (c as f64 / node.cpu as f64).max(m as f64 / node.memory as f64);
    sorted.sort_by(|a, b| share(b).total_cmp(&share(a)));
    let mut bins: Vec<Shape> = Vec::new();
    let mut left = Vec::new();
    for (c, m) in sorted {
        let fits = |b: &Shape| b.cpu >= c && b.memory >= m && b.pods >= 1;
        let slot = match bins.iter().position(fits) {
            Some(i) => Some(i),
            None if bins.len() < max_bins && fits(&node) => {
                bins.push(node);
                Some(bins.len() - 1)
            }
            None => None,
        };
        match slot {
            Some(i) => {
                bins[i].cpu -= c;
                bins[i].memory -= m;
                bins[i].pods -= 1;
            }
            None => left.push((c, m)),
        }
    }
    (bins.len(), left)
}

fn config(extra: &str) -> String {
    let join = r#"{template: k3s-agent.join.sh.j2, variables: {k3s_url: "https://192.0.2.1:6443", k3s_token: "e2e-secret-token"}}"#;
    format!(
        r#"clusterName: e2e
freeMemoryTarget: 0 B
provisionTimeout: 60s
scanInterval: 200ms
expander: {{type: priority, priorities: ["pve", "os"]}}
scaleDown: {{delayAfterAdd: 1s, unneededTime: 0s}}
{extra}
nodeGroups:
  - name: os
    provider: openstack
    maxSize: 5
    openstack: {{flavor: m1.large, image: ubuntu-24.04, network: private}}
    userData:
      template: k3s-agent.cloud-init.yaml.j2
      variables: {{k3s_url: "https://192.0.2.1:6443", k3s_token: "e2e-secret-token"}}
  - name: pve
    provider: proxmox
    maxSize: {PVE_MAX}
    proxmox: {{template: agent-shared, memory: 8 GiB, cores: 2, join: guestAgent}}
    userData: {join}
"#
    )
}

/// Environment, reconciler and the burst ReplicaSet, with every pod already marked
/// Unschedulable by the simulated scheduler, so the first cycle sees the whole burst.
async fn setup(extra: &str) -> (SimEnv, Reconciler) {
    let env = SimEnv::start(None, SimTimings::default())
        .await
        .expect("simulated environment starts");
    // The groups are listed OpenStack first: the order in the config must not matter.
    let (_, cfg) = env.write_config(&config(extra)).expect("config loads");
    let rec = env.reconciler(cfg).await.expect("reconciler builds");
    env.cluster
        .add_replicaset(
            "default",
            "burst",
            PODS as i32,
            SimPodTemplate::new("nginx:1.25", POD_MEMORY).cpu(POD_CPU_MILLI),
        )
        .expect("replicaset");
    let start = Instant::now();
    while burst_pods(&env).iter().filter(|p| unschedulable(p)).count() < PODS {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the simulated scheduler never marked the burst Unschedulable"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (env, rec)
}

fn burst_pods(env: &SimEnv) -> Vec<Pod> {
    env.cluster
        .pods()
        .into_iter()
        .filter(|p| {
            p.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("app"))
                .map(String::as_str)
                == Some("burst")
        })
        .collect()
}

fn running(env: &SimEnv) -> usize {
    burst_pods(env)
        .iter()
        .filter(|p| phase(p) == "Running")
        .count()
}

/// Managed node name -> group, for every node registered so far.
fn node_groups(env: &SimEnv) -> BTreeMap<String, String> {
    env.cluster
        .nodes()
        .into_iter()
        .filter_map(|n| {
            let group = n.metadata.labels.as_ref()?.get(LABEL_GROUP)?.clone();
            Some((n.metadata.name?, group))
        })
        .collect()
}

/// Ready, untainted nodes of `group`.
fn ready_nodes(env: &SimEnv, group: &str) -> usize {
    env.cluster
        .nodes()
        .iter()
        .filter(|n| {
            ready(n)
                && !has_startup_taint(n)
                && n.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(LABEL_GROUP))
                    .map(String::as_str)
                    == Some(group)
        })
        .count()
}

fn vms(env: &SimEnv) -> (usize, usize) {
    (env.proxmox.guests().len(), env.cloud.servers().len())
}

/// Runs cycles (30 s at most) until `done` holds; returns every decision that acted,
/// in order. `watch` sees the world after every cycle (e.g. to learn node names before
/// they go).
async fn drive(
    env: &SimEnv,
    rec: &Reconciler,
    watch: impl FnMut(&SimEnv),
    done: impl Fn(&SimEnv) -> bool,
) -> Vec<Decision> {
    common::drive(env, rec, Duration::from_secs(30), watch, done, |env| {
        format!("VMs (pve, os): {:?}", vms(env))
    })
    .await
}

/// The burst as the planner sees it before any node exists: how many OpenStack nodes
/// first-fit decreasing needs for what two Proxmox nodes leave over.
fn expected_openstack_nodes() -> usize {
    let pods = vec![(u64::from(POD_CPU_MILLI), POD_MEMORY); PODS];
    let (pve, rest) = first_fit_decreasing(&pods, new_node(2000, 8 * GI), PVE_MAX);
    assert_eq!(pve, PVE_MAX, "the burst needs every Proxmox node");
    assert!(!rest.is_empty(), "the burst must overflow Proxmox");
    let (os, none_left) = first_fit_decreasing(&rest, new_node(4000, 8 * GI), usize::MAX);
    assert!(none_left.is_empty());
    os
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hybrid_burst_fills_proxmox_first_then_bursts_to_openstack() {
    let want_os = expected_openstack_nodes();
    // 2 per Proxmox node (CPU), 3 per m1.large (memory): 4 on Proxmox, 6 on 2 m1.large.
    assert_eq!(want_os, 2);
    let (env, rec) = setup("").await;

    let mut names = BTreeMap::new();
    let up = drive(
        &env,
        &rec,
        |env| names.extend(node_groups(env)),
        // Every pod runs and every VM is a Ready node that takes pods (the scheduler
        // may start all pods before the last node loses its startup taint).
        |env| {
            running(env) == PODS && {
                let (pve, os) = vms(env);
                ready_nodes(env, "pve") == pve && ready_nodes(env, "os") == os
            }
        },
    )
    .await;
    let ups = scale_ups(&up);
    assert_eq!(
        ups,
        vec![
            ("pve".to_string(), PVE_MAX as u32),
            ("os".to_string(), want_os as u32)
        ],
        "Proxmox fills to maxSize first, OpenStack takes the rest in one action"
    );
    // The first scale-up is for the whole burst the Proxmox group can take; the one that
    // follows says Proxmox is full.
    let first = up
        .iter()
        .find(|d| matches!(d.action, Action::ScaleUp { .. }))
        .expect("a scale-up");
    assert!(
        first.has_reason(ReasonCode::UnschedulablePods),
        "{first:#?}"
    );
    let second = up
        .iter()
        .filter(|d| matches!(d.action, Action::ScaleUp { .. }))
        .nth(1)
        .expect("a second scale-up");
    assert!(second.has_reason(ReasonCode::GroupAtMaxSize), "{second:#?}");
    assert_eq!(vms(&env), (PVE_MAX, want_os), "no VM beyond the packing");
    assert_eq!(ready_nodes(&env, "pve"), PVE_MAX);
    assert_eq!(ready_nodes(&env, "os"), want_os);
    assert!(burst_pods(&env).iter().all(|p| phase(p) == "Running"));

    // A few more cycles change nothing: no headroom or stray scale-up.
    for _ in 0..3 {
        let report = rec.cycle(SystemTime::now()).await.expect("cycle");
        assert!(
            !matches!(report.decision.action, Action::ScaleUp { .. }),
            "{:#?}",
            report.decision
        );
    }
    assert_eq!(vms(&env), (PVE_MAX, want_os));
    assert!(
        env.proxmox.violations().is_empty(),
        "{:?}",
        env.proxmox.violations()
    );

    // Scale down: every node empties; OpenStack (lower priority) goes before Proxmox.
    env.cluster
        .scale_replicaset("default", "burst", 0)
        .expect("scale");
    let down = drive(
        &env,
        &rec,
        |env| names.extend(node_groups(env)),
        |env| vms(env) == (0, 0),
    )
    .await;
    let group_of = |n: &String| names.get(n).cloned().unwrap_or_else(|| format!("?{n}"));
    let mut cordoned = Vec::new();
    let mut deleted = Vec::new();
    for d in &down {
        match &d.action {
            Action::Cordon { nodes, .. } => cordoned.extend(nodes.iter().map(group_of)),
            Action::DeleteNodes { nodes } => {
                deleted.extend(nodes.iter().map(|t| group_of(&t.node)))
            }
            Action::ScaleUp { .. } => panic!("scale-up while scaling down: {d:#?}"),
            _ => {}
        }
    }
    let expected: Vec<String> = std::iter::repeat_n("os".to_string(), want_os)
        .chain(std::iter::repeat_n("pve".to_string(), PVE_MAX))
        .collect();
    assert_eq!(cordoned, expected, "cordon order by group");
    assert_eq!(deleted, expected, "deletion order by group");
    assert!(
        env.proxmox.violations().is_empty(),
        "{:?}",
        env.proxmox.violations()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hybrid_burst_stops_at_the_cluster_memory_limit() {
    // 24 GiB over all managed nodes: two Proxmox nodes (about 7.5 GiB each as planned,
    // 7.75 GiB as registered) leave room for one m1.large, not two.
    let limit = 24 * GI;
    let (env, rec) = setup("limits: {memory: 24Gi}").await;
    let pve_node = new_node(2000, 8 * GI).memory;
    let os_node = new_node(4000, 8 * GI).memory;
    let allowed_os = ((limit - PVE_MAX as u64 * pve_node) / os_node) as usize;
    assert_eq!(allowed_os, 1);

    // Two Proxmox pods each, three on the one OpenStack node.
    let fits = 2 * PVE_MAX + 3;
    let up = drive(&env, &rec, |_| {}, |env| running(env) == fits).await;
    assert_eq!(
        scale_ups(&up),
        vec![
            ("pve".to_string(), PVE_MAX as u32),
            ("os".to_string(), allowed_os as u32)
        ],
    );
    let limited = up
        .iter()
        .find(|d| matches!(&d.action, Action::ScaleUp { group, .. } if group == "os"))
        .expect("OpenStack scale-up");
    assert!(
        limited.has_reason(ReasonCode::ClusterLimitReached),
        "{limited:#?}"
    );

    // Once everything that fits runs, nothing more is created, and the plan says why.
    for _ in 0..5 {
        let report = rec.cycle(SystemTime::now()).await.expect("cycle");
        assert!(
            !matches!(report.decision.action, Action::ScaleUp { .. }),
            "{:#?}",
            report.decision
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(vms(&env), (PVE_MAX, allowed_os));
    let total: u64 = env
        .cluster
        .nodes()
        .iter()
        .filter(|n| {
            n.metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key(LABEL_GROUP))
        })
        .filter_map(|n| n.status.as_ref()?.allocatable.as_ref()?.get("memory"))
        .map(|q| parse_quantity(&q.0).expect("a memory quantity"))
        .sum();
    assert!(
        total <= limit,
        "managed nodes hold {total} bytes, limit {limit}"
    );

    let (_, decision) = rec.plan(SystemTime::now()).await.expect("plan");
    assert!(
        decision.has_reason(ReasonCode::ClusterLimitReached),
        "{decision:#?}"
    );
    let waiting: Vec<String> = burst_pods(&env)
        .into_iter()
        .filter(|p| phase(p) != "Running")
        .filter_map(|p| p.metadata.name)
        .collect();
    assert_eq!(waiting.len(), PODS - fits);
    for name in &waiting {
        let pending = decision
            .pending
            .iter()
            .find(|p| p.pod.namespace == "default" && &p.pod.name == name)
            .unwrap_or_else(|| panic!("{name} is not reported: {decision:#?}"));
        assert_eq!(pending.bucket, Bucket::NoCapacity, "{decision:#?}");
        assert!(
            pending.detail.contains("limits.memory"),
            "{name}: {}",
            pending.detail
        );
    }
    assert_eq!(running(&env), fits);
}

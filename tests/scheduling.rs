//! End to end, one test per scheduling rule: the reconciler (or the real binary) against
//! the simulated cluster, whose scheduler applies the same model as the planner and
//! whose kubelets register the labels and resources a real kubelet would.

use nodewright_testkit as common;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Stdio;
use std::time::Duration;

use common::{app_pods, nodewright_for, phase, ready, scale_ups, Killed};
use k8s_openapi::api::core::v1::{Node, Pod};
use nodewright::model::LABEL_GROUP;
use nodewright::plan::{Decision, ReasonCode};
use nodewright::run::Reconciler;
use nodewright::sim::cluster::{SimNodeSpec, SimPodTemplate};
use nodewright::sim::env::{SimEnv, SimTimings};
use serde_json::json;

const GI: u64 = 1 << 30;
const MI: u64 = 1 << 20;
const ZONE: &str = "topology.kubernetes.io/zone";

/// One OpenStack node group; `openstack` and `vars` are extra flow-map entries (each
/// starting with `, `), `extra` further YAML lines of the group.
fn group(name: &str, flavor: &str, openstack: &str, vars: &str, extra: &str) -> String {
    format!(
        r#"  - name: {name}
    provider: openstack
    minSize: 0
    maxSize: 4
    openstack: {{flavor: {flavor}, image: ubuntu-24.04, network: private{openstack}}}
    userData:
      template: k3s-agent.cloud-init.yaml.j2
      variables: {{k3s_url: "https://192.0.2.1:6443", k3s_token: "e2e-secret-token"{vars}}}
{extra}"#
    )
}

/// A config with no headroom targets, so only pending pods make nodes appear.
fn config(groups: &[String]) -> String {
    format!(
        "clusterName: sched\nfreeMemoryTarget: 0\nprovisionTimeout: 30s\nscanInterval: 200ms\nnodeGroups:\n{}",
        groups.concat()
    )
}

async fn setup(groups: &[String]) -> (SimEnv, Reconciler) {
    let env = SimEnv::start(None, SimTimings::default())
        .await
        .expect("simulated environment starts");
    let (_, cfg) = env.write_config(&config(groups)).expect("config loads");
    let rec = env.reconciler(cfg).await.expect("reconciler builds");
    (env, rec)
}

fn all_running(env: &SimEnv, app: &str, n: usize) -> bool {
    let pods = app_pods(env, app);
    pods.len() == n && pods.iter().all(|p| phase(p) == "Running")
}

fn node_of(p: &Pod) -> String {
    p.spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default()
}

fn labels(n: &Node) -> BTreeMap<String, String> {
    n.metadata.labels.clone().unwrap_or_default()
}

/// The scheduler's Unschedulable message of a pod, if it has one.
fn unschedulable_message(p: &Pod) -> Option<String> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| {
            c.type_ == "PodScheduled"
                && c.status == "False"
                && c.reason.as_deref() == Some("Unschedulable")
        })
        .and_then(|c| c.message.clone())
}

/// VM names by group.
fn vms(env: &SimEnv) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for s in env.cloud.servers() {
        let g = s
            .metadata
            .get("nodewright-group")
            .cloned()
            .unwrap_or_default();
        out.entry(g).or_default().insert(s.name);
    }
    out
}

/// Runs cycles until `done` holds; on timeout shows the VMs and every pod's state.
async fn drive(
    env: &SimEnv,
    rec: &Reconciler,
    timeout: Duration,
    watch: impl FnMut(&SimEnv),
    done: impl Fn(&SimEnv) -> bool,
) -> Vec<Decision> {
    common::drive(env, rec, timeout, watch, done, |env| {
        let pods: Vec<_> = env
            .cluster
            .pods()
            .iter()
            .map(|p| {
                (
                    p.metadata.name.clone(),
                    phase(p).to_string(),
                    unschedulable_message(p),
                )
            })
            .collect();
        format!("VMs: {:?}\npods: {pods:?}", vms(env))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_short_of_cpu_whose_memory_fits_gets_a_node() {
    let (env, rec) = setup(&[group("workers", "m1.large", "", "", "")]).await;
    // An unmanaged worker with plenty of memory but two CPUs.
    env.cluster
        .add_node(SimNodeSpec::new("worker-1", 16 * GI))
        .expect("worker");
    env.cluster
        .add_replicaset(
            "default",
            "crunch",
            2,
            SimPodTemplate::new("crunch:1", 256 * MI).cpu(1500),
        )
        .expect("replicaset");
    let mut messages = BTreeSet::new();
    let decisions = drive(
        &env,
        &rec,
        Duration::from_secs(30),
        |env| {
            messages.extend(
                app_pods(env, "crunch")
                    .iter()
                    .filter_map(unschedulable_message),
            )
        },
        |env| all_running(env, "crunch", 2),
    )
    .await;

    // The scheduler refused the second pod for CPU alone, memory was plenty.
    assert!(
        messages
            .iter()
            .any(|m| m.contains("1 Insufficient cpu") && !m.contains("memory")),
        "{messages:?}"
    );
    assert_eq!(scale_ups(&decisions), [("workers".to_string(), 1)]);
    assert!(decisions[0].has_reason(ReasonCode::UnschedulablePods));
    let vm = vms(&env)["workers"].iter().next().cloned().expect("one VM");
    let nodes: BTreeSet<String> = app_pods(&env, "crunch").iter().map(node_of).collect();
    assert_eq!(nodes, BTreeSet::from(["worker-1".to_string(), vm.clone()]));
    // The new node reports the VM's CPUs (m1.large: 4).
    let node = env.cluster.node(&vm).expect("node");
    let cpu = node
        .status
        .and_then(|s| s.allocatable)
        .and_then(|a| a.get("cpu").cloned())
        .map(|q| q.0);
    assert_eq!(cpu.as_deref(), Some("4"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_selecting_kubernetes_io_os_linux_gets_a_node() {
    let (env, rec) = setup(&[group("workers", "m1.large", "", "", "")]).await;
    env.cluster
        .add_replicaset(
            "default",
            "chart",
            1,
            SimPodTemplate::new("chart:1", 3 * GI).node_selector("kubernetes.io/os", "linux"),
        )
        .expect("replicaset");
    let decisions = drive(
        &env,
        &rec,
        Duration::from_secs(30),
        |_| {},
        |env| all_running(env, "chart", 1),
    )
    .await;
    assert_eq!(scale_ups(&decisions), [("workers".to_string(), 1)]);
    let pod = &app_pods(&env, "chart")[0];
    let node = env.cluster.node(&node_of(pod)).expect("its node");
    let l = labels(&node);
    assert_eq!(l.get(LABEL_GROUP).map(String::as_str), Some("workers"));
    // What a real kubelet sets, as the simulated one does.
    for (k, v) in [
        ("kubernetes.io/os", "linux"),
        ("kubernetes.io/arch", "amd64"),
        ("beta.kubernetes.io/os", "linux"),
        ("beta.kubernetes.io/arch", "amd64"),
        ("kubernetes.io/hostname", node_of(pod).as_str()),
    ] {
        assert_eq!(l.get(k).map(String::as_str), Some(v), "{k} on {l:?}");
    }
    // And the allocatable a kubelet reports: the VM's CPUs, its memory less the
    // reserve (256 MiB in the simulator), 110 pods, ephemeral storage.
    let alloc = node.status.and_then(|s| s.allocatable).unwrap_or_default();
    let get = |k: &str| alloc.get(k).map(|q| q.0.clone());
    assert_eq!(get("cpu").as_deref(), Some("4"));
    assert_eq!(
        get("memory").and_then(|m| nodewright::model::parse_quantity(&m)),
        Some(8 * GI - 256 * MI)
    );
    assert_eq!(get("pods").as_deref(), Some("110"));
    assert!(get("ephemeral-storage").is_some(), "{alloc:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_selecting_instance_type_and_zone_gets_a_node_whose_user_data_sets_them() {
    let (env, rec) = setup(&[group(
        "workers",
        "m1.large",
        ", availabilityZone: az-2",
        "",
        "",
    )])
    .await;
    env.cluster
        .add_replicaset(
            "default",
            "pinned",
            1,
            SimPodTemplate::new("pinned:1", GI)
                .node_selector("node.kubernetes.io/instance-type", "m1.large")
                .node_selector(ZONE, "az-2"),
        )
        .expect("replicaset");
    let decisions = drive(
        &env,
        &rec,
        Duration::from_secs(30),
        |_| {},
        |env| all_running(env, "pinned", 1),
    )
    .await;
    assert_eq!(scale_ups(&decisions), [("workers".to_string(), 1)]);
    let servers = env.cloud.servers();
    let user_data = servers[0].user_data.clone().unwrap_or_default();
    assert!(
        user_data.contains("node.kubernetes.io/instance-type=m1.large")
            && user_data.contains("topology.kubernetes.io/zone=az-2"),
        "{user_data}"
    );
    // The kubelet sets os and arch itself; user data does not carry them.
    assert!(!user_data.contains("kubernetes.io/os="), "{user_data}");
    let node = env.cluster.node(&servers[0].name).expect("node");
    assert_eq!(labels(&node).get(ZONE).map(String::as_str), Some("az-2"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gpu_pod_is_placed_only_in_the_gpu_group() {
    let gpu_vars =
        r#", k3s_extra_config: {"sim.nodewright.io/extended-resource": ["nvidia.com/gpu=1"]}"#;
    let (env, rec) = setup(&[
        group("cpu", "m1.large", "", "", ""),
        group(
            "gpu",
            "m1.large",
            "",
            gpu_vars,
            "    resources: {nvidia.com/gpu: 1}\n",
        ),
    ])
    .await;
    env.cluster
        .add_replicaset(
            "default",
            "train",
            2,
            SimPodTemplate::new("train:1", GI).request("nvidia.com/gpu", "1"),
        )
        .expect("replicaset");
    let decisions = drive(
        &env,
        &rec,
        Duration::from_secs(30),
        |_| {},
        |env| all_running(env, "train", 2),
    )
    .await;
    // One GPU per node: two GPU nodes in one action, no CPU node.
    assert_eq!(scale_ups(&decisions), [("gpu".to_string(), 2)]);
    let by_group = vms(&env);
    assert!(!by_group.contains_key("cpu"), "{by_group:?}");
    let nodes: BTreeSet<String> = app_pods(&env, "train").iter().map(node_of).collect();
    assert_eq!(&nodes, &by_group["gpu"]);
    for name in &nodes {
        let node = env.cluster.node(name).expect("node");
        let gpus = node
            .status
            .and_then(|s| s.allocatable)
            .and_then(|a| a.get("nvidia.com/gpu").cloned())
            .map(|q| q.0);
        assert_eq!(gpus.as_deref(), Some("1"), "{name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostname_anti_affinity_gives_one_node_per_pod() {
    let (env, rec) = setup(&[group("workers", "m1.large", "", "", "")]).await;
    let anti = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "kubernetes.io/hostname"}]}});
    env.cluster
        .add_replicaset(
            "default",
            "db",
            3,
            SimPodTemplate::new("db:1", 512 * MI).spec_field("affinity", anti),
        )
        .expect("replicaset");
    let decisions = drive(
        &env,
        &rec,
        Duration::from_secs(30),
        |_| {},
        |env| all_running(env, "db", 3),
    )
    .await;
    // All three nodes in one action, though one node would hold them all by memory.
    assert_eq!(scale_ups(&decisions), [("workers".to_string(), 3)]);
    let nodes: BTreeSet<String> = app_pods(&env, "db").iter().map(node_of).collect();
    assert_eq!(nodes.len(), 3, "{nodes:?}");
    assert_eq!(&nodes, &vms(&env)["workers"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zone_spread_spreads_new_nodes_over_the_zones() {
    let zone = |z: &str| format!("    labels: {{{ZONE}: {z}}}\n");
    let (env, rec) = setup(&[
        group("zone-a", "m1.large", "", "", &zone("a")),
        group("zone-b", "m1.large", "", "", &zone("b")),
    ])
    .await;
    let spread = json!([{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "web"}}}]);
    // Two pods of 3 GiB per 8 GiB node.
    env.cluster
        .add_replicaset(
            "default",
            "web",
            4,
            SimPodTemplate::new("web:1", 3 * GI).spec_field("topologySpreadConstraints", spread),
        )
        .expect("replicaset");
    let decisions = drive(
        &env,
        &rec,
        Duration::from_secs(45),
        |_| {},
        |env| all_running(env, "web", 4),
    )
    .await;
    let mut per_zone: BTreeMap<String, usize> = BTreeMap::new();
    for p in app_pods(&env, "web") {
        let node = env.cluster.node(&node_of(&p)).expect("node");
        let z = labels(&node).get(ZONE).cloned().unwrap_or_default();
        *per_zone.entry(z).or_default() += 1;
    }
    assert_eq!(
        per_zone,
        BTreeMap::from([("a".to_string(), 2), ("b".to_string(), 2)]),
        "{:?}",
        scale_ups(&decisions)
    );
    let by_group = vms(&env);
    assert_eq!(
        by_group.get("zone-a").map(BTreeSet::len),
        Some(1),
        "{by_group:?}"
    );
    assert_eq!(
        by_group.get("zone-b").map(BTreeSet::len),
        Some(1),
        "{by_group:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn daemonset_overhead_sends_a_pod_to_a_bigger_group() {
    // m1.medium: 4 GiB, minus the reserve about 3.7 GiB; m1.large: 8 GiB.
    let (env, rec) = setup(&[
        group("small", "m1.medium", "", "", ""),
        group("big", "m1.large", "", "", ""),
    ])
    .await;
    // A 1 GiB DaemonSet pod on every node (the control plane's stands for new nodes).
    env.cluster
        .add_daemonset("kube-system", "agent", "agent:1", GI)
        .expect("daemonset");
    let ds_running = env
        .cluster
        .wait_until(
            |c| {
                c.pods().iter().any(|p| {
                    p.metadata
                        .name
                        .as_deref()
                        .is_some_and(|n| n.starts_with("agent"))
                        && phase(p) == "Running"
                })
            },
            Duration::from_secs(10),
        )
        .await;
    assert!(ds_running, "DaemonSet pod did not start");
    // 3 GiB: fits a small node's flavor, not what the DaemonSet leaves of it.
    env.cluster
        .add_replicaset("default", "app", 1, SimPodTemplate::new("app:1", 3 * GI))
        .expect("replicaset");
    let decisions = drive(
        &env,
        &rec,
        Duration::from_secs(30),
        |_| {},
        |env| all_running(env, "app", 1),
    )
    .await;
    assert_eq!(scale_ups(&decisions), [("big".to_string(), 1)]);
    assert!(!vms(&env).contains_key("small"));
    let node = node_of(&app_pods(&env, "app")[0]);
    assert!(vms(&env)["big"].contains(&node), "{node}");
    // The new node runs the DaemonSet pod beside it.
    let on_node: Vec<String> = env
        .cluster
        .pods_on(&node)
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    assert!(
        on_node.iter().any(|n| n.starts_with("agent")),
        "{on_node:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_bigger_than_every_group_gets_an_event_and_no_vm() {
    let env = SimEnv::start(None, SimTimings::default())
        .await
        .expect("env");
    let (config_path, _) = env
        .write_config(&config(&[
            group("small", "m1.medium", "", "", ""),
            group("big", "m1.large", "", "", ""),
        ]))
        .expect("config");
    env.cluster
        .add_pod("default", "huge", SimPodTemplate::new("huge:1", 64 * GI))
        .expect("pod");
    let mut cmd = nodewright_for!(&env, &config_path);
    cmd.args(["run", "--metrics-addr", "127.0.0.1:0"])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let _run = Killed(cmd.spawn().expect("start nodewright run"));
    let event = |c: &nodewright::sim::cluster::SimCluster| {
        c.events().into_iter().find(|e| {
            e.involved_object.name.as_deref() == Some("huge")
                && e.reason.as_deref() == Some("NotTriggerScaleUp")
        })
    };
    let posted = env
        .cluster
        .wait_until(|c| event(c).is_some(), Duration::from_secs(30))
        .await;
    assert!(
        posted,
        "no NotTriggerScaleUp event: {:?}",
        env.cluster.events()
    );
    let e = event(&env.cluster).expect("event");
    assert_eq!(e.type_.as_deref(), Some("Warning"));
    let message = e.message.unwrap_or_default();
    // Each group's reason, in numbers.
    assert!(
        message.contains("group small: needs memory")
            && message.contains("group big: needs memory"),
        "{message}"
    );
    // Several more cycles: still no VM, and the pod still pending.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(env.cloud.servers().is_empty(), "{:?}", vms(&env));
    let pod = env.cluster.pod("default", "huge").expect("pod");
    assert_eq!(phase(&pod), "Pending");
    assert!(
        unschedulable_message(&pod).is_some_and(|m| m.starts_with("0/1 nodes are available")),
        "{:?}",
        unschedulable_message(&pod)
    );
    // The control plane is Ready all along.
    assert!(env.cluster.nodes().iter().all(ready));
}

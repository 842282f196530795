//! The simulated cluster over real loopback HTTP, driven by the kube-rs client the
//! autoscaler uses.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::phase;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{
    Api, DeleteParams, EvictParams, ListParams, Patch, PatchParams, PostParams, WatchEvent,
    WatchParams,
};
use kube::{Client, ResourceExt};
use nodewright::sim::cluster::{
    ApiCall, PdbBudget, SimCluster, SimClusterOptions, SimNodeSpec, SimPodTemplate,
};
use nodewright::sim::VmEvent;
use serde_json::json;

const GIB: u64 = 1 << 30;
const WAIT: Duration = Duration::from_secs(10);

async fn start() -> (SimCluster, Client) {
    start_with(SimClusterOptions::default()).await
}

async fn start_with(opts: SimClusterOptions) -> (SimCluster, Client) {
    let sim = SimCluster::start(opts)
        .await
        .expect("start simulated cluster");
    let mut config = sim
        .kube_config()
        .await
        .expect("kube config from generated kubeconfig");
    // Surface 429s (PDB-blocked evictions) instead of retrying them for minutes.
    config.default_retry = false;
    let client = Client::try_from(config).expect("kube client");
    (sim, client)
}

fn api_error(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn node_of(p: &Pod) -> Option<&str> {
    p.spec.as_ref().and_then(|s| s.node_name.as_deref())
}

fn running_pods(sim: &SimCluster, prefix: &str) -> Vec<Pod> {
    sim.pods()
        .into_iter()
        .filter(|p| {
            p.metadata
                .name
                .as_deref()
                .unwrap_or_default()
                .starts_with(prefix)
                && phase(p) == "Running"
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubeconfig_works_for_kube_from_a_file() {
    let (sim, _) = start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("kubeconfig");
    sim.write_kubeconfig(&path).expect("write kubeconfig");
    let kubeconfig = kube::config::Kubeconfig::read_from(&path).expect("read kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("config");
    assert_eq!(
        config.cluster_url.to_string().trim_end_matches('/'),
        sim.url()
    );
    let client = Client::try_from(config).expect("client");
    let version = client.apiserver_version().await.expect("version");
    assert_eq!(version.git_version, "v1.35.0");
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let names: Vec<String> = namespaces
        .list(&ListParams::default())
        .await
        .expect("list namespaces")
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    assert_eq!(
        names,
        ["default", "kube-node-lease", "kube-public", "kube-system"]
    );
    let core = client
        .list_core_api_resources("v1")
        .await
        .expect("core discovery");
    let eviction = core
        .resources
        .iter()
        .find(|r| r.name == "pods/eviction")
        .expect("pods/eviction listed");
    assert_eq!(
        (eviction.group.as_deref(), eviction.kind.as_str()),
        (Some("policy"), "Eviction")
    );
    let nodes = core
        .resources
        .iter()
        .find(|r| r.name == "nodes")
        .expect("nodes listed");
    assert_eq!(nodes.short_names.as_deref(), Some(&["no".to_string()][..]));
    assert!(!nodes.namespaced);
    assert!(core.resources.iter().any(|r| r.name == "nodes/status"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_list_get_patch_cordon_delete() {
    let (sim, client) = start().await;
    sim.add_node(
        SimNodeSpec::new("cp-1", 4 * GIB).label("node-role.kubernetes.io/control-plane", ""),
    )
    .expect("add cp");
    sim.add_node(SimNodeSpec::new("worker-1", 8 * GIB))
        .expect("add worker");
    let nodes: Api<Node> = Api::all(client.clone());

    let list = nodes
        .list(&ListParams::default())
        .await
        .expect("list nodes");
    assert_eq!(list.items.len(), 2);
    let list_rv: u64 = list
        .metadata
        .resource_version
        .as_deref()
        .unwrap_or_default()
        .parse()
        .expect("numeric rv");
    assert!(list_rv > 0);
    let selected = nodes
        .list(&ListParams::default().labels("node-role.kubernetes.io/control-plane"))
        .await
        .expect("by label");
    assert_eq!(selected.items.len(), 1);
    let by_field = nodes
        .list(&ListParams::default().fields("metadata.name=worker-1"))
        .await
        .expect("by field");
    assert_eq!(by_field.items.len(), 1);

    let worker = nodes.get("worker-1").await.expect("get node");
    assert!(worker.metadata.uid.is_some() && worker.metadata.creation_timestamp.is_some());
    let alloc = worker
        .status
        .as_ref()
        .and_then(|s| s.allocatable.as_ref())
        .expect("allocatable");
    assert_eq!(alloc["memory"].0, format!("{}Ki", 8 * GIB / 1024));

    let patched = nodes
        .patch(
            "worker-1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"team": "a"}}})),
        )
        .await
        .expect("merge patch labels");
    assert_eq!(patched.labels().get("team").map(String::as_str), Some("a"));
    assert_ne!(
        patched.metadata.resource_version,
        worker.metadata.resource_version
    );

    nodes
        .patch(
            "worker-1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"unschedulable": true}})),
        )
        .await
        .expect("cordon by merge patch");
    assert_eq!(
        sim.node("worker-1")
            .and_then(|n| n.spec)
            .and_then(|s| s.unschedulable),
        Some(true)
    );
    nodes
        .uncordon("worker-1")
        .await
        .expect("uncordon (strategic merge)");
    assert_eq!(
        sim.node("worker-1")
            .and_then(|n| n.spec)
            .and_then(|s| s.unschedulable),
        Some(false)
    );

    // JSON patch replaces the taint list.
    let ops = json!([{"op": "add", "path": "/spec/taints", "value": [{"key": "k", "effect": "NoSchedule"}]}]);
    let req = axum::http::Request::patch("/api/v1/nodes/worker-1")
        .header("Content-Type", "application/json-patch+json")
        .body(serde_json::to_vec(&ops).expect("ops"))
        .expect("request");
    client.request_text(req).await.expect("json patch");
    let taints = sim
        .node("worker-1")
        .and_then(|n| n.spec)
        .and_then(|s| s.taints)
        .unwrap_or_default();
    assert_eq!(taints.len(), 1);

    // Status subresource: the main resource ignores status, nodes/status takes it.
    nodes
        .patch_status(
            "worker-1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"capacity": {"pods": "42"}}})),
        )
        .await
        .expect("status patch");
    let got = nodes.get_status("worker-1").await.expect("get status");
    assert_eq!(
        got.status
            .and_then(|s| s.capacity)
            .map(|c| c["pods"].0.clone()),
        Some("42".into())
    );
    nodes
        .patch(
            "worker-1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"capacity": {"pods": "7"}}})),
        )
        .await
        .expect("main patch");
    assert_eq!(
        sim.node("worker-1")
            .and_then(|n| n.status)
            .and_then(|s| s.capacity)
            .map(|c| c["pods"].0.clone()),
        Some("42".into())
    );

    nodes
        .delete("worker-1", &DeleteParams::default())
        .await
        .expect("delete");
    let err = api_error(nodes.get("worker-1").await.expect_err("gone"));
    assert_eq!((err.code, err.reason.as_str()), (404, "NotFound"));
    assert_eq!(err.message, "nodes \"worker-1\" not found");
    assert_eq!(
        err.details.map(|d| (d.name, d.kind)),
        Some(("worker-1".into(), "nodes".into()))
    );

    let calls = sim.calls();
    let has = |verb: &str, resource: &str, sub: Option<&str>| {
        calls.iter().any(|c: &ApiCall| {
            c.verb == verb && c.resource == resource && c.subresource.as_deref() == sub
        })
    };
    assert!(
        has("list", "nodes", None) && has("patch", "nodes", None) && has("delete", "nodes", None)
    );
    assert!(has("patch", "nodes", Some("status")) && has("get", "nodes", Some("status")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_resource_version_conflicts() {
    let (sim, client) = start().await;
    sim.add_node(SimNodeSpec::new("n1", 4 * GIB))
        .expect("add node");
    let nodes: Api<Node> = Api::all(client.clone());
    let old = nodes.get("n1").await.expect("get");
    nodes
        .patch(
            "n1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"a": "1"}}})),
        )
        .await
        .expect("patch");
    let err = api_error(
        nodes
            .replace("n1", &PostParams::default(), &old)
            .await
            .expect_err("stale replace"),
    );
    assert_eq!((err.code, err.reason.as_str()), (409, "Conflict"));
    assert!(
        err.message.contains("the object has been modified"),
        "{}",
        err.message
    );
    let stale_patch = json!({"metadata": {"resourceVersion": old.metadata.resource_version, "labels": {"b": "2"}}});
    let err = api_error(
        nodes
            .patch("n1", &PatchParams::default(), &Patch::Merge(stale_patch))
            .await
            .expect_err("stale patch"),
    );
    assert_eq!(err.code, 409);
    let fresh = nodes.get("n1").await.expect("get");
    nodes
        .replace("n1", &PostParams::default(), &fresh)
        .await
        .expect("fresh replace");

    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(client.clone(), "default");
    let cm =
        serde_json::from_value(json!({"metadata": {"name": "c"}, "data": {"k": "v"}})).expect("cm");
    cms.create(&PostParams::default(), &cm)
        .await
        .expect("create cm");
    let err = api_error(
        cms.create(&PostParams::default(), &cm)
            .await
            .expect_err("duplicate"),
    );
    assert_eq!((err.code, err.reason.as_str()), (409, "AlreadyExists"));
    let missing: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client, "nope");
    assert_eq!(
        api_error(
            missing
                .create(&PostParams::default(), &cm)
                .await
                .expect_err("no ns")
        )
        .code,
        404
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eviction_honours_disruption_budgets() {
    let (sim, client) = start().await;
    sim.add_node(SimNodeSpec::new("n1", 8 * GIB)).expect("node");
    let labels = |app: &str| BTreeMap::from([("app".to_string(), app.to_string())]);
    sim.add_replicaset(
        "default",
        "strict",
        2,
        SimPodTemplate::new("nginx:1.27", 128 << 20),
    )
    .expect("rs strict");
    sim.add_replicaset(
        "default",
        "loose",
        2,
        SimPodTemplate::new("redis:7", 128 << 20),
    )
    .expect("rs loose");
    sim.add_pdb(
        "default",
        "strict",
        labels("strict"),
        PdbBudget::MinAvailable(IntOrString::Int(2)),
    )
    .expect("pdb");
    sim.add_pdb(
        "default",
        "loose",
        labels("loose"),
        PdbBudget::MaxUnavailable(IntOrString::String("50%".into())),
    )
    .expect("pdb");
    assert!(
        sim.wait_until(
            |s| running_pods(s, "strict-").len() == 2 && running_pods(s, "loose-").len() == 2,
            WAIT
        )
        .await
    );

    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let strict = running_pods(&sim, "strict-")[0]
        .metadata
        .name
        .clone()
        .unwrap_or_default();
    let err = api_error(
        pods.evict(&strict, &EvictParams::default())
            .await
            .expect_err("blocked by PDB"),
    );
    assert_eq!((err.code, err.reason.as_str()), (429, "TooManyRequests"));
    assert_eq!(
        err.message,
        "Cannot evict pod as it would violate the pod's disruption budget."
    );
    let cause = err
        .details
        .and_then(|d| d.causes.into_iter().next())
        .expect("cause");
    assert_eq!(cause.reason, "DisruptionBudget");
    assert!(
        cause
            .message
            .contains("needs 2 healthy pods and has 2 currently"),
        "{}",
        cause.message
    );

    assert!(
        sim.wait_until(
            |s| s
                .pdbs()
                .iter()
                .any(|p| p.metadata.name.as_deref() == Some("loose")
                    && p.status
                        .as_ref()
                        .is_some_and(|st| st.disruptions_allowed == Some(1))),
            WAIT
        )
        .await
    );
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), "default");
    assert_eq!(
        pdbs.list(&ListParams::default())
            .await
            .expect("pdbs")
            .items
            .len(),
        2
    );

    let loose = running_pods(&sim, "loose-");
    let (first, second) = (
        loose[0].metadata.name.clone().unwrap_or_default(),
        loose[1].metadata.name.clone().unwrap_or_default(),
    );
    let ok = pods
        .evict(&first, &EvictParams::default())
        .await
        .expect("allowed eviction");
    assert!(ok.is_success());
    // The budget is spent until the replacement is Running and Ready.
    let err = api_error(
        pods.evict(&second, &EvictParams::default())
            .await
            .expect_err("budget spent"),
    );
    assert_eq!(err.code, 429);
    assert!(sim.pod("default", &first).is_none());
    assert!(
        sim.wait_until(|s| running_pods(s, "loose-").len() == 2, WAIT)
            .await,
        "ReplicaSet replaced the evicted pod"
    );
    assert!(running_pods(&sim, "loose-")
        .iter()
        .all(|p| p.metadata.name.as_deref() != Some(first.as_str())));
    pods.evict(&second, &EvictParams::default())
        .await
        .expect("allowed again");
    let missing = api_error(
        pods.evict("nope", &EvictParams::default())
            .await
            .expect_err("missing"),
    );
    assert_eq!(missing.code, 404);
    assert!(sim.calls().iter().any(|c| c.verb == "create"
        && c.resource == "pods"
        && c.subresource.as_deref() == Some("eviction")
        && c.namespace.as_deref() == Some("default")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_delivers_changes() {
    let (sim, client) = start().await;
    sim.add_node(SimNodeSpec::new("n1", 4 * GIB)).expect("node");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let rv = pods
        .list(&ListParams::default())
        .await
        .expect("list")
        .metadata
        .resource_version
        .unwrap_or_default();
    let mut stream = pods
        .watch(&WatchParams::default().timeout(20), &rv)
        .await
        .expect("watch")
        .boxed();
    sim.add_pod("default", "w1", SimPodTemplate::new("busybox:1", 0))
        .expect("pod");
    let mut seen = Vec::new();
    while let Ok(Some(ev)) = tokio::time::timeout(WAIT, stream.try_next())
        .await
        .expect("event in time")
    {
        let (kind, pod) = match ev {
            WatchEvent::Added(p) => ("ADDED", p),
            WatchEvent::Modified(p) => ("MODIFIED", p),
            WatchEvent::Deleted(p) => ("DELETED", p),
            other => panic!("unexpected {other:?}"),
        };
        seen.push(kind);
        if kind == "MODIFIED" && phase(&pod) == "Running" {
            pods.delete("w1", &DeleteParams::default())
                .await
                .expect("delete");
        }
        if kind == "DELETED" {
            break;
        }
    }
    assert_eq!(seen.first(), Some(&"ADDED"));
    assert_eq!(seen.last(), Some(&"DELETED"));
    assert!(seen.contains(&"MODIFIED"));

    // A selector-filtered watch sees a pod leave its selection as DELETED.
    sim.add_pod(
        "default",
        "w2",
        SimPodTemplate::new("busybox:1", 0).label("watched", "yes"),
    )
    .expect("pod");
    let rv = pods
        .list(&ListParams::default())
        .await
        .expect("list")
        .metadata
        .resource_version
        .unwrap_or_default();
    let mut filtered = pods
        .watch(
            &WatchParams::default().labels("watched=yes").timeout(20),
            &rv,
        )
        .await
        .expect("watch")
        .boxed();
    pods.patch(
        "w2",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"watched": "no"}}})),
    )
    .await
    .expect("relabel");
    loop {
        match tokio::time::timeout(WAIT, filtered.try_next())
            .await
            .expect("event in time")
        {
            Ok(Some(WatchEvent::Deleted(p))) => {
                assert_eq!(p.metadata.name.as_deref(), Some("w2"));
                break;
            }
            Ok(Some(WatchEvent::Modified(_))) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_from_forgotten_version_expires() {
    let (sim, client) = start_with(SimClusterOptions {
        watch_history: 16,
        ..Default::default()
    })
    .await;
    for i in 0..40 {
        sim.add_namespace(&format!("ns-{i}")).expect("namespace");
    }
    let pods: Api<Pod> = Api::all(client);
    let mut stream = pods
        .watch(&WatchParams::default().timeout(5), "2")
        .await
        .expect("watch")
        .boxed();
    match tokio::time::timeout(WAIT, stream.try_next())
        .await
        .expect("event in time")
    {
        Ok(Some(WatchEvent::Error(status))) => {
            assert_eq!((status.code, status.reason.as_str()), (410, "Expired"))
        }
        other => panic!("expected a 410 error event, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_waits_for_a_vm_node_and_its_startup_taint() {
    let (sim, client) = start().await;
    sim.add_node(
        SimNodeSpec::new("cp-1", 4 * GIB)
            .label("node-role.kubernetes.io/control-plane", "")
            .taint("node-role.kubernetes.io/control-plane", None, "NoSchedule"),
    )
    .expect("control plane");
    sim.add_replicaset(
        "default",
        "app",
        1,
        SimPodTemplate::new("registry.example/app:2", GIB),
    )
    .expect("rs");
    let unschedulable = |s: &SimCluster, needle: &str| {
        s.pods().iter().any(|p| {
            p.status
                .as_ref()
                .and_then(|st| st.conditions.as_ref())
                .into_iter()
                .flatten()
                .any(|c| {
                    c.type_ == "PodScheduled"
                        && c.status == "False"
                        && c.reason.as_deref() == Some("Unschedulable")
                        && c.message.as_deref().unwrap_or_default().contains(needle)
                })
        })
    };
    assert!(sim.wait_until(|s| unschedulable(s, "0/1 nodes are available: 1 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }."), WAIT).await,
        "pods: {:?}", sim.pods());

    let user_data = "#!/bin/sh\ncurl -sfL https://get.k3s.io | sh -s - agent --node-label nodewright.io/group=small \
                     --node-taint nodewright.io/startup=true:NoExecute\n";
    let hook = sim.vm_hook();
    hook(VmEvent::Booted {
        name: "small-1".into(),
        user_data: user_data.into(),
        memory_bytes: 4 * GIB,
        cpus: 2,
    });
    assert!(sim.wait_until(|s| s.node("small-1").is_some(), WAIT).await);
    let node = sim.node("small-1").expect("registered");
    assert_eq!(
        node.labels().get("nodewright.io/group").map(String::as_str),
        Some("small")
    );
    assert_eq!(
        node.labels()
            .get("kubernetes.io/hostname")
            .map(String::as_str),
        Some("small-1")
    );
    let taints = node.spec.and_then(|s| s.taints).unwrap_or_default();
    assert_eq!(
        taints
            .iter()
            .map(|t| (t.key.as_str(), t.effect.as_str()))
            .collect::<Vec<_>>(),
        [("nodewright.io/startup", "NoExecute")]
    );
    let ready = |s: &SimCluster| {
        s.node("small-1")
            .and_then(|n| n.status)
            .and_then(|st| st.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
    };
    assert!(sim.wait_until(ready, WAIT).await);
    assert!(
        sim.wait_until(
            |s| unschedulable(
                s,
                "1 node(s) had untolerated taint {nodewright.io/startup: true}"
            ),
            WAIT
        )
        .await
    );

    // What the autoscaler does once the node is Ready: replace the taint list.
    let nodes: Api<Node> = Api::all(client);
    nodes
        .patch(
            "small-1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"taints": null}})),
        )
        .await
        .expect("untaint");
    assert!(
        sim.wait_until(
            |s| running_pods(s, "app-")
                .iter()
                .any(|p| node_of(p) == Some("small-1")),
            WAIT
        )
        .await
    );
    let images: Vec<String> = sim
        .node("small-1")
        .and_then(|n| n.status)
        .and_then(|s| s.images)
        .unwrap_or_default()
        .into_iter()
        .flat_map(|i| i.names.unwrap_or_default())
        .collect();
    assert_eq!(images, ["registry.example/app:2"]);

    // A second pod does not fit in the remaining memory.
    sim.scale_replicaset("default", "app", 4).expect("scale");
    assert!(
        sim.wait_until(|s| unschedulable(s, "1 Insufficient memory"), WAIT)
            .await,
        "pods: {:?}",
        sim.pods()
    );

    hook(VmEvent::Deleted {
        name: "small-1".into(),
    });
    let node = sim.node("small-1").expect("node object stays");
    let cond = node
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .expect("ready cond");
    assert_eq!(cond.status, "Unknown");
    sim.delete_node("small-1").expect("delete node");
    assert!(
        sim.wait_until(|s| s.pods_on("small-1").is_empty(), WAIT)
            .await,
        "pod GC"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ignition_user_data_without_startup_taint_registers_untainted() {
    let (sim, _) = start().await;
    let unit =
        "[Service]\nExecStart=/usr/local/bin/k3s agent --node-label=nodewright.io/group=ign\n";
    let ignition = json!({"ignition": {"version": "3.3.0"}, "systemd": {"units": [{"name": "k3s.service", "enabled": true, "contents": unit}]}});
    (sim.vm_hook())(VmEvent::Booted {
        name: "ign-1".into(),
        user_data: ignition.to_string(),
        memory_bytes: 2 * GIB,
        cpus: 1,
    });
    assert!(sim.wait_until(|s| s.node("ign-1").is_some(), WAIT).await);
    let node = sim.node("ign-1").expect("node");
    assert_eq!(
        node.labels().get("nodewright.io/group").map(String::as_str),
        Some("ign")
    );
    assert!(node
        .spec
        .and_then(|s| s.taints)
        .unwrap_or_default()
        .is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_to_completion_pods_and_daemonsets() {
    let (sim, client) = start().await;
    sim.add_node(SimNodeSpec::new("n1", 4 * GIB)).expect("node");
    sim.add_node(SimNodeSpec::new("n2", 4 * GIB).taint("dedicated", Some("x"), "NoSchedule"))
        .expect("node");
    sim.add_daemonset("kube-system", "agent", "agent:1", 64 << 20)
        .expect("ds");
    sim.add_pod(
        "default",
        "job",
        SimPodTemplate::new("puller:1", 0)
            .restart_policy("Never")
            .annotation(nodewright::sim::cluster::ANNOTATION_RUN_FOR, "200ms"),
    )
    .expect("pod");
    assert!(
        sim.wait_until(
            |s| s
                .pod("default", "job")
                .is_some_and(|p| phase(&p) == "Succeeded"),
            WAIT
        )
        .await
    );
    assert!(
        sim.wait_until(|s| running_pods(s, "agent-").len() == 2, WAIT)
            .await,
        "one daemon pod per node, taints tolerated"
    );

    // Pods created over HTTP get the API server's defaults and are scheduled.
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "api-pod"},
        "spec": {"containers": [{"name": "c", "image": "nginx:1", "resources": {"requests": {"memory": "64Mi"}}}]}}))
        .expect("pod");
    let created = pods
        .create(&PostParams::default(), &pod)
        .await
        .expect("create pod");
    assert_eq!(phase(&created), "Pending");
    assert_eq!(
        created
            .spec
            .as_ref()
            .and_then(|s| s.restart_policy.as_deref()),
        Some("Always")
    );
    assert!(
        sim.wait_until(
            |s| s
                .pod("default", "api-pod")
                .is_some_and(|p| phase(&p) == "Running" && node_of(&p) == Some("n1")),
            WAIT
        )
        .await
    );
    let on_n1 = pods
        .list(&ListParams::default().fields("spec.nodeName=n1,status.phase!=Succeeded"))
        .await
        .expect("by node");
    assert_eq!(
        on_n1
            .items
            .iter()
            .filter_map(|p| p.metadata.name.clone())
            .collect::<Vec<_>>(),
        ["api-pod"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_style_table_responses() {
    let (sim, client) = start().await;
    sim.add_node(SimNodeSpec::new("n1", 4 * GIB).label("node-role.kubernetes.io/worker", ""))
        .expect("node");
    let req = axum::http::Request::get("/api/v1/nodes?limit=500")
        .header(
            "Accept",
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
        )
        .body(Vec::new())
        .expect("request");
    let table: serde_json::Value =
        serde_json::from_str(&client.request_text(req).await.expect("table")).expect("json");
    assert_eq!(table["kind"], "Table");
    let cols: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["priority"] == 0)
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(cols, ["Name", "Status", "Roles", "Age", "Version"]);
    assert_eq!(table["rows"][0]["cells"][0], "n1");
    assert_eq!(table["rows"][0]["cells"][1], "Ready");
    assert_eq!(table["rows"][0]["cells"][2], "worker");
    assert_eq!(table["rows"][0]["object"]["kind"], "PartialObjectMetadata");
    drop(sim);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_events_and_configmaps() {
    use k8s_openapi::api::coordination::v1::Lease;
    use k8s_openapi::api::core::v1::{ConfigMap, Event};
    use k8s_openapi::api::events::v1::Event as EventV1;

    let (sim, client) = start().await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
    let lease: Lease = serde_json::from_value(json!({"metadata": {"name": "nodewright"},
        "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}}))
    .expect("lease");
    let created = leases
        .create(&PostParams::default(), &lease)
        .await
        .expect("create lease");
    let mut taken = created.clone();
    taken
        .spec
        .get_or_insert_with(Default::default)
        .holder_identity = Some("b".into());
    let replaced = leases
        .replace("nodewright", &PostParams::default(), &taken)
        .await
        .expect("replace");
    assert_eq!(
        replaced.spec.and_then(|s| s.holder_identity).as_deref(),
        Some("b")
    );
    let err = api_error(
        leases
            .replace("nodewright", &PostParams::default(), &created)
            .await
            .expect_err("stale"),
    );
    assert_eq!(err.code, 409);
    leases
        .delete("nodewright", &DeleteParams::default())
        .await
        .expect("delete lease");
    assert!(sim.get::<Lease>("kube-system", "nodewright").is_none());

    let events: Api<EventV1> = Api::namespaced(client.clone(), "default");
    let ev: EventV1 = serde_json::from_value(json!({
        "metadata": {"generateName": "w1."},
        "eventTime": "2025-01-01T00:00:00.000000Z",
        "reportingController": "nodewright.io/autoscaler", "reportingInstance": "nodewright-0",
        "action": "ScaleUp", "reason": "ScaledUp", "type": "Normal", "note": "added small-1",
        "regarding": {"kind": "Node", "name": "small-1", "apiVersion": "v1"}}))
    .expect("event");
    let created = events
        .create(&PostParams::default(), &ev)
        .await
        .expect("create event");
    assert!(created
        .metadata
        .name
        .as_deref()
        .unwrap_or_default()
        .starts_with("w1."));
    events
        .patch(
            created.metadata.name.as_deref().unwrap_or_default(),
            &PatchParams::default(),
            &Patch::Merge(
                json!({"series": {"count": 2, "lastObservedTime": "2025-01-01T00:01:00.000000Z"}}),
            ),
        )
        .await
        .expect("patch event");
    let core: Api<Event> = Api::namespaced(client.clone(), "default");
    core.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "e2"},
        "involvedObject": {"kind": "Pod", "name": "p"}, "reason": "Evicted", "message": "m", "type": "Normal"})).expect("ev"))
        .await
        .expect("core event");
    let seen = sim.events();
    assert_eq!(seen.len(), 2);
    let scaled = seen
        .iter()
        .find(|e| e.reason.as_deref() == Some("ScaledUp"))
        .expect("converted");
    assert_eq!(scaled.message.as_deref(), Some("added small-1"));
    assert_eq!(scaled.count, Some(2));
    assert_eq!(scaled.involved_object.name.as_deref(), Some("small-1"));

    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "state"}, "data": {"a": "1"}}))
            .expect("cm");
    cms.create(&PostParams::default(), &cm)
        .await
        .expect("create");
    cms.patch(
        "state",
        &PatchParams::default(),
        &Patch::Strategic(json!({"data": {"b": "2"}})),
    )
    .await
    .expect("patch");
    let got = cms.get("state").await.expect("get");
    assert_eq!(got.data.map(|d| d.len()), Some(2));

    sim.shutdown();
    let stopped = tokio::time::timeout(WAIT, async {
        loop {
            if cms.get("state").await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(stopped.is_ok(), "server still answering after shutdown");
}

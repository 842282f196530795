//! The simulated cluster over real loopback HTTP, driven by the kube-rs client the
//! autoscaler uses.

use nodewright_testkit as common;

mod graceful;
mod images;
mod lifecycle;
mod objects;
mod scheduler;
mod storage;
mod tainteviction;

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
    // Evicted, it terminates (its grace period), then goes.
    assert!(sim
        .pod("default", &first)
        .is_some_and(|p| p.metadata.deletion_timestamp.is_some()));
    assert!(
        sim.wait_until(|s| s.pod("default", &first).is_none(), WAIT)
            .await
    );
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
    // Pod writes: the server keeps a window per resource, as the real watch cache does,
    // so writes to other resources would not expire a pod watch.
    for i in 0..40 {
        sim.add_pod(
            "default",
            &format!("p-{i}"),
            SimPodTemplate::new("busybox:1", 0),
        )
        .expect("pod");
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

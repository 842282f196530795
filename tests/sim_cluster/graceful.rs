//! Graceful deletion as the real API server and kubelet do it: a deleted pod stays,
//! Terminating, until its kubelet stopped it (within its grace period); finalizers hold
//! any object until they are removed.

use super::*;
use k8s_openapi::api::core::v1::ConfigMap;
use nodewright::sim::cluster::ANNOTATION_STOP_AFTER;

/// A Running pod `name` on node `n1`, with `grace` seconds of grace period and
/// `stop_after` as its containers' time to stop.
async fn running_pod(sim: &SimCluster, name: &str, grace: i64, stop_after: &str) {
    if sim.node("n1").is_none() {
        sim.add_node(SimNodeSpec::new("n1", 8 * GIB)).expect("node");
    }
    sim.add_pod(
        "default",
        name,
        SimPodTemplate::new("nginx:1.27", 64 << 20)
            .annotation(ANNOTATION_STOP_AFTER, stop_after)
            .spec_field("terminationGracePeriodSeconds", json!(grace)),
    )
    .expect("pod");
    assert!(
        sim.wait_until(
            |s| s
                .pod("default", name)
                .is_some_and(|p| phase(&p) == "Running"),
            WAIT
        )
        .await,
        "pod {name} never ran"
    );
}

fn deletion(p: &Pod) -> (bool, Option<i64>) {
    (
        p.metadata.deletion_timestamp.is_some(),
        p.metadata.deletion_grace_period_seconds,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_pod_stays_terminating_until_its_kubelet_stopped_it() {
    let (sim, client) = start().await;
    running_pod(&sim, "slow", 30, "3s").await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let mut watch = pods
        .watch(&WatchParams::default().fields("metadata.name=slow"), "0")
        .await
        .expect("watch")
        .boxed();
    let answer = pods
        .delete("slow", &DeleteParams::default())
        .await
        .expect("delete");
    let marked = answer
        .left()
        .expect("the pod is returned, marked, not gone");
    assert_eq!(deletion(&marked), (true, Some(30)));
    let now = pods
        .get("slow")
        .await
        .expect("still there after the delete");
    assert_eq!(deletion(&now), (true, Some(30)));
    assert_eq!(phase(&now), "Running");
    // The watch sees it marked, stopped (a terminal phase), then removed.
    let mut seen = Vec::new();
    let end = tokio::time::Instant::now() + WAIT;
    while let Ok(Some(ev)) = tokio::time::timeout_at(end, watch.next()).await {
        match ev.expect("watch event") {
            WatchEvent::Added(p) => seen.push(format!("ADDED {}", phase(&p))),
            WatchEvent::Modified(p) => seen.push(format!(
                "MODIFIED {} deleting={}",
                phase(&p),
                p.metadata.deletion_timestamp.is_some()
            )),
            WatchEvent::Deleted(p) => {
                seen.push(format!("DELETED {}", phase(&p)));
                break;
            }
            _ => {}
        }
    }
    assert_eq!(
        seen,
        [
            "ADDED Running",
            "MODIFIED Running deleting=true",
            "MODIFIED Succeeded deleting=true",
            "DELETED Succeeded"
        ]
    );
    assert!(sim.pod("default", "slow").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_later_delete_may_shorten_the_grace_period_never_lengthen_it_and_its_end_kills_the_pod() {
    let (sim, client) = start().await;
    running_pod(&sim, "stubborn", 60, "1h").await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let with_grace = |s: u32| DeleteParams {
        grace_period_seconds: Some(s),
        ..DeleteParams::default()
    };
    pods.delete("stubborn", &DeleteParams::default())
        .await
        .expect("delete");
    assert_eq!(
        deletion(&pods.get("stubborn").await.expect("pod")),
        (true, Some(60))
    );
    pods.delete("stubborn", &with_grace(120))
        .await
        .expect("delete again");
    assert_eq!(
        deletion(&pods.get("stubborn").await.expect("pod")),
        (true, Some(60))
    );
    pods.delete("stubborn", &with_grace(1))
        .await
        .expect("delete, shorter");
    let last = pods.get("stubborn").await.expect("pod");
    assert_eq!(deletion(&last), (true, Some(1)));
    // A pod that does not stop on SIGTERM is killed at the end of its grace period.
    let mut watch = pods
        .watch(
            &WatchParams::default().fields("metadata.name=stubborn"),
            last.metadata.resource_version.as_deref().unwrap_or("0"),
        )
        .await
        .expect("watch")
        .boxed();
    let mut killed = None;
    let end = tokio::time::Instant::now() + WAIT;
    while let Ok(Some(ev)) = tokio::time::timeout_at(end, watch.next()).await {
        match ev.expect("watch event") {
            WatchEvent::Modified(p) => killed = Some(p),
            WatchEvent::Deleted(_) => break,
            _ => {}
        }
    }
    let killed = killed.expect("the kubelet's last status");
    assert_eq!(phase(&killed), "Failed");
    let exit = killed
        .status
        .and_then(|s| s.container_statuses)
        .and_then(|cs| cs.into_iter().next())
        .and_then(|c| c.state)
        .and_then(|s| s.terminated)
        .map(|t| t.exit_code);
    assert_eq!(exit, Some(137));
    assert!(sim.pod("default", "stubborn").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unscheduled_pod_is_deleted_at_once() {
    let (sim, client) = start().await;
    sim.add_pod(
        "default",
        "nowhere",
        SimPodTemplate::new("nginx:1.27", 64 << 20).node_selector("zone", "none"),
    )
    .expect("pod");
    let pods: Api<Pod> = Api::namespaced(client, "default");
    pods.delete("nowhere", &DeleteParams::default())
        .await
        .expect("delete");
    assert!(sim.pod("default", "nowhere").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicted_pod_is_terminating_with_a_disruption_condition() {
    let (sim, client) = start().await;
    running_pod(&sim, "evicted", 30, "3s").await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    pods.evict("evicted", &EvictParams::default())
        .await
        .expect("evict");
    let p = pods.get("evicted").await.expect("still there, terminating");
    assert_eq!(deletion(&p), (true, Some(30)));
    let cond = p
        .status
        .and_then(|s| s.conditions)
        .into_iter()
        .flatten()
        .find(|c| c.type_ == "DisruptionTarget")
        .map(|c| (c.status, c.reason));
    assert_eq!(
        cond,
        Some((
            "True".to_string(),
            Some("EvictionByEvictionAPI".to_string())
        ))
    );
    assert!(
        sim.wait_until(|s| s.pod("default", "evicted").is_none(), WAIT)
            .await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_on_a_stopped_vm_stay_terminating_until_its_node_is_deleted() {
    let (sim, client) = start().await;
    running_pod(&sim, "stranded", 1, "0s").await;
    (sim.vm_hook())(VmEvent::Stopped { name: "n1".into() });
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.delete("stranded", &DeleteParams::default())
        .await
        .expect("delete");
    // Far past its grace period: no kubelet runs to stop it.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let p = pods.get("stranded").await.expect("still Terminating");
    assert_eq!(deletion(&p), (true, Some(1)));
    let nodes: Api<Node> = Api::all(client);
    nodes
        .delete("n1", &DeleteParams::default())
        .await
        .expect("delete node");
    assert!(
        sim.wait_until(|s| s.pod("default", "stranded").is_none(), WAIT)
            .await,
        "the pod GC removes pods of a deleted node"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finalizers_hold_a_deleted_object_until_the_last_is_removed() {
    let (_sim, client) = start().await;
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "held",
        "finalizers": ["example.com/a", "example.com/b"]}, "data": {"k": "v"}}))
    .expect("configmap");
    maps.create(&PostParams::default(), &cm)
        .await
        .expect("create");
    maps.delete("held", &DeleteParams::default())
        .await
        .expect("delete");
    let held = maps.get("held").await.expect("held by its finalizers");
    assert!(held.metadata.deletion_timestamp.is_some());
    assert_eq!(held.metadata.deletion_grace_period_seconds, Some(0));
    let add = Patch::Merge(json!({"metadata": {"finalizers":
        ["example.com/a", "example.com/b", "example.com/c"]}}));
    let err = api_error(
        maps.patch("held", &PatchParams::default(), &add)
            .await
            .expect_err("no finalizer may be added while deleting"),
    );
    assert_eq!(err.code, 422, "{}", err.message);
    assert!(err.message.contains("no new finalizers"), "{}", err.message);
    let one_left = Patch::Merge(json!({"metadata": {"finalizers": ["example.com/b"]}}));
    maps.patch("held", &PatchParams::default(), &one_left)
        .await
        .expect("remove one");
    assert!(
        maps.get("held").await.is_ok(),
        "one finalizer still holds it"
    );
    let none = Patch::Merge(json!({"metadata": {"finalizers": null}}));
    maps.patch("held", &PatchParams::default(), &none)
        .await
        .expect("remove the last");
    let gone = api_error(maps.get("held").await.expect_err("gone"));
    assert_eq!(gone.code, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_pod_with_a_finalizer_stays_until_it_is_removed() {
    let (sim, client) = start().await;
    running_pod(&sim, "kept", 30, "0s").await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let add = Patch::Merge(json!({"metadata": {"finalizers": ["example.com/keep"]}}));
    pods.patch("kept", &PatchParams::default(), &add)
        .await
        .expect("add a finalizer");
    pods.delete("kept", &DeleteParams::default())
        .await
        .expect("delete");
    assert!(
        sim.wait_until(
            |s| s
                .pod("default", "kept")
                .is_some_and(|p| phase(&p) == "Succeeded"
                    && p.metadata.deletion_grace_period_seconds == Some(0)),
            WAIT
        )
        .await,
        "its kubelet stops it; the finalizer keeps the object: {:?}",
        sim.pod("default", "kept")
    );
    let none = Patch::Merge(json!({"metadata": {"finalizers": null}}));
    pods.patch("kept", &PatchParams::default(), &none)
        .await
        .expect("remove the finalizer");
    assert!(sim.pod("default", "kept").is_none());
}

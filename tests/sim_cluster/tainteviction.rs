//! The taint manager: a `NoExecute` taint put on a node (a PATCH, as `kubectl taint`
//! sends one) deletes the pods there that do not tolerate it at once, those that
//! tolerate it for `tolerationSeconds` once that has passed, and leaves those that
//! tolerate it without a limit.

use super::*;

/// A pod bound to `node` (as a client creates one with `spec.nodeName`), with
/// `tolerations`.
fn bound_pod(name: &str, node: &str, tolerations: serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"nodeName": node, "tolerations": tolerations,
            "containers": [{"name": "c", "image": "nginx:1.25",
                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]},
    }))
    .expect("pod")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_noexecute_taint_evicts_the_pods_that_do_not_tolerate_it_after_their_seconds() {
    let (sim, client) = start().await;
    sim.add_node(SimNodeSpec::new("n1", 8 * GIB)).expect("node");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let maint = |seconds: Option<i64>| {
        let mut t = json!({"key": "maint", "operator": "Exists", "effect": "NoExecute"});
        if let Some(s) = seconds {
            t["tolerationSeconds"] = json!(s);
        }
        json!([t])
    };
    for (name, tolerations) in [
        ("plain", json!([])),
        ("brief", maint(Some(2))),
        ("forever", maint(None)),
    ] {
        pods.create(&PostParams::default(), &bound_pod(name, "n1", tolerations))
            .await
            .expect("create pod");
    }
    let started = std::time::Instant::now();
    while running_pods(&sim, "").len() < 3 {
        assert!(
            started.elapsed() < WAIT,
            "pods not running: {:?}",
            sim.pods()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .patch(
            "n1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"taints": [
                {"key": "maint", "value": "true", "effect": "NoExecute"}]}})),
        )
        .await
        .expect("taint the node");
    let tainted = std::time::Instant::now();
    // Deleted: marked for deletion (then Terminating for its grace period) or gone.
    let gone = |name: &str| {
        sim.pod("default", name)
            .is_none_or(|p| p.metadata.deletion_timestamp.is_some())
    };
    while !gone("plain") {
        assert!(
            tainted.elapsed() < Duration::from_secs(2),
            "the pod that does not tolerate the taint is still there"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!gone("brief"), "evicted before its 2 s");
    while !gone("brief") {
        assert!(
            tainted.elapsed() < Duration::from_secs(6),
            "the pod tolerating the taint for 2 s is still there"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        tainted.elapsed() >= Duration::from_millis(1900),
        "{:?}",
        tainted.elapsed()
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !gone("forever"),
        "a pod tolerating it without a limit stays"
    );
    let reasons: Vec<(String, String)> = sim
        .events()
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("TaintManagerEviction"))
        .map(|e| {
            (
                e.involved_object.name.unwrap_or_default(),
                e.message.unwrap_or_default(),
            )
        })
        .collect();
    assert!(
        reasons.contains(&(
            "plain".into(),
            "Marking for deletion Pod default/plain".into()
        )),
        "{reasons:?}"
    );
}

//! The simulated scheduler: VM nodes and their startup taint, run-to-completion pods and
//! DaemonSets.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_waits_for_a_vm_node_and_its_startup_taint() {
    let (sim, client) = start_with(SimClusterOptions {
        node_monitor_grace_period: Duration::from_secs(1),
        ..SimClusterOptions::default()
    })
    .await;
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
    // Unknown once the node lifecycle controller's grace period is over.
    let unknown = |s: &SimCluster| {
        s.node("small-1")
            .and_then(|n| n.status)
            .and_then(|st| st.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "Unknown")
    };
    assert!(sim.wait_until(unknown, WAIT).await);
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

/// kube-scheduler's TaintToleration score: a node with a `PreferNoSchedule` taint the
/// pod does not tolerate is never filtered out, but every untainted node that fits ranks
/// above it, however much emptier it is (issue 28: pods steered off removal candidates).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefer_no_schedule_taint_ranks_a_node_last_but_never_keeps_a_pod_off_it() {
    let (sim, _client) = start().await;
    sim.add_node(SimNodeSpec::new("busy", 8 * GIB))
        .expect("node");
    sim.add_node(SimNodeSpec::new("going", 8 * GIB).taint(
        "nodewright.io/deletion-candidate",
        None,
        "PreferNoSchedule",
    ))
    .expect("node");
    let on = |node: &str, t: SimPodTemplate| SimPodTemplate {
        node_name: Some(node.to_string()),
        ..t
    };
    sim.add_replicaset(
        "default",
        "filler",
        1,
        on(
            "busy",
            SimPodTemplate::new("registry.example/app:2", 4 * GIB),
        ),
    )
    .expect("rs");
    let node_of = |s: &SimCluster, app: &str| -> Vec<String> {
        s.pods()
            .into_iter()
            .filter(|p| {
                p.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("app"))
                    .is_some_and(|a| a == app)
            })
            .filter_map(|p| p.spec.and_then(|s| s.node_name))
            .collect()
    };
    assert!(
        sim.wait_until(|s| node_of(s, "filler").len() == 1, WAIT)
            .await
    );
    // Half full against empty: LeastAllocated alone would pick `going`.
    sim.add_replicaset(
        "default",
        "web",
        1,
        SimPodTemplate::new("registry.example/app:2", GIB),
    )
    .expect("rs");
    assert!(sim.wait_until(|s| node_of(s, "web").len() == 1, WAIT).await);
    assert_eq!(node_of(&sim, "web"), ["busy"]);
    // Too big for `busy`: the tainted node takes it rather than leaving it pending.
    sim.add_replicaset(
        "default",
        "big",
        1,
        SimPodTemplate::new("registry.example/app:2", 5 * GIB),
    )
    .expect("rs");
    assert!(sim.wait_until(|s| node_of(s, "big").len() == 1, WAIT).await);
    assert_eq!(node_of(&sim, "big"), ["going"]);
}

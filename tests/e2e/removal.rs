//! Removing nodes: draining, disruption budgets, volumes that must detach first.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_is_no_longer_needed_is_drained_and_removed() {
    let (env, rec) = setup("scaleDown: {delayAfterAdd: 1s, unneededTime: 0s}").await;
    env.cluster
        .add_replicaset(
            "default",
            "web",
            4,
            SimPodTemplate::new("nginx:1.25", 3 * GI),
        )
        .expect("rs");
    drive(
        &env,
        &rec,
        Duration::from_secs(30),
        |_| {},
        |env| {
            let pods = app_pods(env, "web");
            pods.len() == 4 && pods.iter().all(|p| phase(p) == "Running")
        },
    )
    .await;
    assert_eq!(env.cloud.servers().len(), 2);
    env.cluster
        .scale_replicaset("default", "web", 1)
        .expect("scale down");
    let mut stuck = BTreeSet::new();
    let actions = drive(
        &env,
        &rec,
        Duration::from_secs(30),
        |env| {
            for p in app_pods(env, "web") {
                if unschedulable(&p) {
                    stuck.insert(p.metadata.name.clone().unwrap_or_default());
                }
            }
        },
        |env| {
            let pods = app_pods(env, "web");
            env.cloud.servers().len() == 1
                && worker_names(env).len() == 1
                && pods.len() == 1
                && pods.iter().all(|p| phase(p) == "Running")
        },
    )
    .await;
    assert!(stuck.is_empty(), "{stuck:?}");
    assert!(
        actions.iter().any(
            |a| matches!(a, Action::Cordon { reason, .. } if reason.starts_with("scale-down"))
        ),
        "{actions:?}"
    );
    assert!(actions
        .iter()
        .any(|a| matches!(a, Action::DeleteNodes { .. })));
    // And it stays at one: no flapping back up.
    for _ in 0..10 {
        let r = rec.cycle(SystemTime::now()).await.expect("cycle");
        assert!(
            !matches!(r.decision.action, Action::ScaleUp { .. }),
            "{:?}",
            r.decision
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Regression: kube's default client retried the 429 of a PDB-refused eviction (which
/// has no Retry-After) for minutes, stalling the whole cycle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pdb_refused_eviction_returns_at_once_instead_of_retrying_for_minutes() {
    use nodewright::cluster::{ClusterApi, Eviction, KubeCluster};
    use nodewright::model::PodRef;
    use nodewright::sim::cluster::PdbBudget;
    let (env, _rec) = setup("").await;
    env.cluster
        .add_node(nodewright::sim::cluster::SimNodeSpec::new("n1", 8 * GI))
        .expect("node");
    env.cluster
        .add_replicaset("default", "db", 1, SimPodTemplate::new("postgres:16", GI))
        .expect("rs");
    env.cluster
        .add_pdb(
            "default",
            "db",
            std::collections::BTreeMap::from([("app".to_string(), "db".to_string())]),
            PdbBudget::MinAvailable(
                k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(1),
            ),
        )
        .expect("pdb");
    assert!(
        env.cluster
            .wait_until(
                |c| {
                    let pods = c.pods();
                    !pods.is_empty() && pods.iter().all(|p| phase(p) == "Running")
                },
                Duration::from_secs(10)
            )
            .await
    );
    let pod = app_pods(&env, "db")[0].metadata.name.clone().expect("name");
    let kube = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&env.kubeconfig).expect("kubeconfig"),
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .expect("config");
    let cluster = KubeCluster::new(nodewright::cluster::client_from_config(kube).expect("client"));
    let started = Instant::now();
    let r = tokio::time::timeout(
        Duration::from_secs(10),
        cluster.evict(&PodRef {
            namespace: "default".into(),
            name: pod,
        }),
    )
    .await
    .expect("eviction answered within 10s")
    .expect("no error");
    assert!(
        matches!(r, Eviction::Blocked(ref m) if m.contains("disruption budget")),
        "{r:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_node_is_deleted_only_after_its_volumes_detach() {
    let (env, rec) = setup("freeMemoryTarget: 0 B").await;
    let mut cfg = (*rec.config).clone();
    cfg.node_groups[0].min_size = 1;
    let rec = env.reconciler(cfg.clone()).await.expect("reconciler");
    drive(
        &env,
        &rec,
        Duration::from_secs(30),
        |_| {},
        |env| {
            env.cluster.nodes().iter().any(|n| {
                n.metadata
                    .name
                    .as_deref()
                    .is_some_and(|m| m.starts_with("e2e-"))
                    && ready(n)
                    && !has_startup_taint(n)
            })
        },
    )
    .await;
    let node = env.cloud.servers()[0].name.clone();
    env.cluster
        .attach_volume("csi-pv-1", &node, "pv-1")
        .expect("attach");
    cfg.node_groups[0].min_size = 0;
    let rec = env.reconciler(cfg).await.expect("reconciler");
    let nodes: Api<Node> = Api::all(env.cluster.kube_client().await.expect("client"));
    nodes
        .patch(
            &node,
            &PatchParams::default(),
            &Patch::Merge(cordon_patch(true)),
        )
        .await
        .expect("cordon");
    for _ in 0..5 {
        let r = rec.cycle(SystemTime::now()).await.expect("cycle");
        assert!(
            !matches!(r.decision.action, Action::DeleteNodes { .. }),
            "{:?}",
            r.decision
        );
        assert!(r
            .decision
            .has_reason(nodewright::plan::ReasonCode::VolumesAttached));
    }
    assert_eq!(env.cloud.servers().len(), 1);
    env.cluster.detach_volume("csi-pv-1").expect("detach");
    drive(
        &env,
        &rec,
        Duration::from_secs(20),
        |_| {},
        |env| env.cloud.servers().is_empty() && env.cluster.node(&node).is_none(),
    )
    .await;
}

/// Issue 18: with a `do-not-disrupt` pod holding an underused node, `plan` said only
/// "nothing to replace, remove or warm". Now `plan` names the node, the pod and the
/// reason, `plan --json` has it as data, and a running `nodewright` exports it as
/// `nodewright_unremovable_nodes{reason}` and in its status ConfigMap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_names_the_node_the_pod_and_the_reason_an_underused_node_is_kept() {
    use k8s_openapi::api::core::v1::ConfigMap;
    use std::collections::BTreeMap;

    let env = SimEnv::start(None, SimTimings::default())
        .await
        .expect("simulated environment starts");
    let (config_path, _) = env
        .write_config(&config(
            "freeMemoryTarget: 0 B\nscaleDown: {delayAfterAdd: 0s}\nimagePuller: {enabled: false}",
        ))
        .expect("config");
    let (busy, held) = ("e2e-workers-busy", "e2e-workers-held");
    for name in [busy, held] {
        env.cloud.insert_server(
            name,
            BTreeMap::from([
                ("nodewright-cluster".to_string(), "e2e".to_string()),
                ("nodewright-group".to_string(), "workers".to_string()),
            ]),
        );
        env.cluster
            .add_node(
                SimNodeSpec::new(name, 8 * GI)
                    .label(LABEL_CLUSTER, "e2e")
                    .label(LABEL_GROUP, "workers"),
            )
            .expect("node");
    }
    let on = |node: &str, t: SimPodTemplate| SimPodTemplate {
        node_name: Some(node.to_string()),
        ..t
    };
    env.cluster
        .add_replicaset(
            "default",
            "busy",
            1,
            on(busy, SimPodTemplate::new("nginx:1.25", 6 * GI)),
        )
        .expect("rs");
    env.cluster
        .add_replicaset(
            "default",
            "keeper",
            1,
            on(
                held,
                SimPodTemplate::new("nginx:1.25", GI)
                    .annotation("karpenter.sh/do-not-disrupt", "true"),
            ),
        )
        .expect("rs");
    common::wait_for("both pods running", Duration::from_secs(20), || {
        ["busy", "keeper"]
            .iter()
            .all(|app| app_pods(&env, app).iter().any(|p| phase(p) == "Running"))
    })
    .await;
    let keeper = app_pods(&env, "keeper")[0]
        .metadata
        .name
        .clone()
        .unwrap_or_default();

    let plan = nodewright_for!(&env, &config_path)
        .arg("plan")
        .output()
        .expect("plan runs");
    let text = String::from_utf8_lossy(&plan.stdout).to_string();
    assert!(
        plan.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&plan.stderr)
    );
    // The action may be recording that these VMs joined (they were made by the test, not
    // by nodewright, so carry no joined mark yet): the kept-node line is another one.
    let line = text
        .lines()
        .find(|l| l.contains(held) && l.contains("blocked-by-pod"))
        .unwrap_or_else(|| panic!("plan does not name {held}:\n{text}"));
    assert!(line.contains("blocked-by-pod"), "{line}");
    assert!(line.contains(&format!("default/{keeper}")), "{line}");
    assert!(line.contains("karpenter.sh/do-not-disrupt"), "{line}");
    assert!(text.contains("kept by scale-down: 2 node(s)"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.contains(busy) && l.contains("not-underutilized")),
        "{text}"
    );

    let json = nodewright_for!(&env, &config_path)
        .args(["plan", "--json"])
        .output()
        .expect("plan --json runs");
    assert!(json.status.success());
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).expect("JSON");
    let entry = v["unremovable"]
        .as_array()
        .and_then(|l| l.iter().find(|u| u["node"] == held))
        .cloned()
        .unwrap_or_else(|| panic!("{held} not in plan --json: {v:#}"));
    assert_eq!(entry["reason"], "blocked-by-pod");
    assert_eq!(entry["podReason"], "do-not-disrupt");
    assert_eq!(entry["pod"]["name"], keeper.as_str());
    assert_eq!(entry["group"], "workers");

    // The metric and the status ConfigMap, from a running process.
    let port = common::free_port();
    let mut run = Killed(
        nodewright_for!(&env, &config_path)
            .args([
                "run",
                "--metrics-addr",
                &format!("127.0.0.1:{port}"),
                "--lease-namespace",
                "nodewright",
                "--status-configmap",
                "nodewright-status",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("run starts"),
    );
    let url = format!("http://127.0.0.1:{port}/metrics");
    let _ = rustls::crypto::ring::default_provider().install_default();
    let want = "nodewright_unremovable_nodes{reason=\"blocked-by-pod\"} 1";
    let started = Instant::now();
    let metrics = loop {
        let body = match reqwest::get(&url).await {
            Ok(r) => r.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        };
        if body.contains(want) || started.elapsed() > Duration::from_secs(30) {
            break body;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(metrics.contains(want), "{metrics}");
    assert!(
        metrics.contains("nodewright_unremovable_nodes{reason=\"not-underutilized\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("nodewright_unremovable_nodes{reason=\"group-at-min-size\"} 0"),
        "{metrics}"
    );
    let mut status = String::new();
    common::wait_for("the status ConfigMap", Duration::from_secs(10), || {
        status = env
            .cluster
            .get::<ConfigMap>("nodewright", "nodewright-status")
            .and_then(|cm| cm.data)
            .and_then(|d| d.get("status").cloned())
            .unwrap_or_default();
        status.contains("blocked-by-pod")
    })
    .await;
    let doc: serde_json::Value = serde_yaml::from_str(&status).expect("status is YAML");
    assert_eq!(
        doc["unremovable"]["counts"]["blocked-by-pod"], 1,
        "{status}"
    );
    let named = doc["unremovable"]["nodes"].as_array().is_some_and(|l| {
        l.iter()
            .any(|u| u["node"] == held && u["podReason"] == "do-not-disrupt")
    });
    assert!(named, "{status}");
    run.kill();
}

/// What a watch saw removed: (resourceVersion of the removal, kind, name, the node a
/// pod was on, its last phase).
type Removal = (u64, &'static str, String, String, String);

/// Every removal of a pod or a Node from now on, in the order the API server made them
/// (one resourceVersion sequence orders both).
async fn watch_removals(env: &SimEnv) -> std::sync::Arc<std::sync::Mutex<Vec<Removal>>> {
    use futures::StreamExt;
    use kube::api::{WatchEvent, WatchParams};
    use kube::ResourceExt;
    let client = env.cluster.kube_client().await.expect("client");
    let seen: std::sync::Arc<std::sync::Mutex<Vec<Removal>>> = std::sync::Arc::default();
    let rv = |m: &kube::api::ObjectMeta| {
        m.resource_version
            .as_deref()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let pods = Api::<Pod>::all(client.clone())
        .watch(&WatchParams::default(), "0")
        .await
        .expect("watch pods");
    let nodes = Api::<Node>::all(client)
        .watch(&WatchParams::default(), "0")
        .await
        .expect("watch nodes");
    let out = seen.clone();
    tokio::spawn(async move {
        let mut pods = pods.boxed();
        while let Some(Ok(ev)) = pods.next().await {
            if let WatchEvent::Deleted(p) = ev {
                let node = p
                    .spec
                    .as_ref()
                    .and_then(|s| s.node_name.clone())
                    .unwrap_or_default();
                let entry = (
                    rv(&p.metadata),
                    "Pod",
                    p.name_any(),
                    node,
                    phase(&p).to_string(),
                );
                out.lock().unwrap_or_else(|e| e.into_inner()).push(entry);
            }
        }
    });
    let out = seen.clone();
    tokio::spawn(async move {
        let mut nodes = nodes.boxed();
        while let Some(Ok(ev)) = nodes.next().await {
            if let WatchEvent::Deleted(n) = ev {
                let entry = (
                    rv(&n.metadata),
                    "Node",
                    n.name_any(),
                    String::new(),
                    String::new(),
                );
                out.lock().unwrap_or_else(|e| e.into_inner()).push(entry);
            }
        }
    });
    seen
}

/// A drained node's pods take seconds to stop (Terminating meanwhile, as on a real
/// kubelet): its Node and VM are deleted only once they are gone, stopped by their
/// kubelet, never while they still terminate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drained_node_and_its_vm_are_deleted_only_after_its_terminating_pods_are_gone() {
    use nodewright::sim::cluster::ANNOTATION_STOP_AFTER;
    let (env, rec) = setup("scaleDown: {delayAfterAdd: 1s, unneededTime: 0s}").await;
    env.cluster
        .add_replicaset(
            "default",
            "web",
            4,
            SimPodTemplate::new("nginx:1.25", 3 * GI).annotation(ANNOTATION_STOP_AFTER, "3s"),
        )
        .expect("rs");
    drive(
        &env,
        &rec,
        Duration::from_secs(30),
        |_| {},
        |env| {
            let pods = app_pods(env, "web");
            pods.len() == 4 && pods.iter().all(|p| phase(p) == "Running")
        },
    )
    .await;
    assert_eq!(env.cloud.servers().len(), 2);
    let removals = watch_removals(&env).await;
    // An earlier nodewright process cordoned one node for scale-down: this one drains it
    // (evictions) and removes it.
    let gone_vm = env.cloud.servers()[0].name.clone();
    let nodes: Api<Node> = Api::all(env.cluster.kube_client().await.expect("client"));
    nodes
        .patch(
            &gone_vm,
            &PatchParams::default(),
            // Cordoned as underutilized: a node cordoned as empty that runs pods is given
            // back (issue 29 item 9).
            &Patch::Merge(cordon_patch_as("underutilized")),
        )
        .await
        .expect("cordon");
    let mut terminating_seen = false;
    drive(
        &env,
        &rec,
        Duration::from_secs(60),
        |env| {
            terminating_seen |= env
                .cluster
                .pods_on(&gone_vm)
                .iter()
                .any(|p| p.metadata.deletion_timestamp.is_some());
        },
        |env| !env.cloud.servers().iter().any(|s| s.name == gone_vm),
    )
    .await;
    assert!(
        terminating_seen,
        "no pod of {gone_vm} was ever seen Terminating"
    );
    let removals = removals.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let node_removed = removals
        .iter()
        .find(|(_, kind, name, _, _)| *kind == "Node" && *name == gone_vm)
        .map(|(rv, ..)| *rv)
        .unwrap_or_else(|| panic!("the Node of {gone_vm} was never seen removed: {removals:?}"));
    let its_pods: Vec<&Removal> = removals
        .iter()
        .filter(|(_, kind, _, node, _)| *kind == "Pod" && *node == gone_vm)
        .collect();
    assert!(!its_pods.is_empty(), "{removals:?}");
    for (rv, _, name, _, phase) in its_pods {
        assert!(
            *rv < node_removed,
            "pod {name} was still there (Terminating) when the Node of {gone_vm} was deleted: {removals:?}"
        );
        // Stopped by its kubelet (a terminal phase), not collected with its Node.
        assert_eq!(phase, "Succeeded", "{name}: {removals:?}");
    }
}

//! Issue 19: a VM that ran as a node is never deleted as one that "never joined", whatever
//! the cluster shows: an API server that lists no nodes, or `kubectl delete node`.

use super::*;
use nodewright::cloud::JOINED_TAG;
use nodewright::plan::ReasonCode;
use nodewright::sim::cluster::{SimCluster, SimClusterOptions};

/// The servers of the cloud that carry the joined mark.
fn marked(env: &SimEnv) -> usize {
    env.cloud
        .servers()
        .iter()
        .filter(|s| s.metadata.contains_key(JOINED_TAG))
        .count()
}

/// Two nodes running 4 pods, both VMs marked joined; then the config is rewritten with
/// `extra` and `provisionTimeout: 1s` (every VM is past it two seconds later). The
/// environment, a reconciler for the new config and its path.
async fn two_joined_nodes(extra: &str) -> (SimEnv, Reconciler, std::path::PathBuf) {
    let env = SimEnv::start(None, SimTimings::default())
        .await
        .expect("simulated environment starts");
    let (_, cfg) = env.write_config(&config(extra)).expect("config loads");
    let rec = env.reconciler(cfg).await.expect("reconciler builds");
    env.cluster
        .add_replicaset(
            "default",
            "web",
            4,
            SimPodTemplate::new("nginx:1.25", 3 * GI),
        )
        .expect("replicaset");
    drive(
        &env,
        &rec,
        Duration::from_secs(30),
        |_| {},
        |env| {
            let pods = app_pods(env, "web");
            pods.len() == 4 && pods.iter().all(|p| phase(p) == "Running") && marked(env) == 2
        },
    )
    .await;
    assert_eq!(env.cloud.servers().len(), 2);
    let (path, cfg) = env
        .write_config(&config(&format!("{extra}\nprovisionTimeout: 1s")))
        .expect("config loads");
    let rec = env.reconciler(cfg).await.expect("reconciler builds");
    tokio::time::sleep(Duration::from_secs(2)).await;
    (env, rec, path)
}

/// Regression: restarted behind an API server that listed no nodes (a wrong kubeconfig),
/// `nodewright run` deleted every VM as "never joined" while pods ran on them. Now the
/// plan says the view looks wrong and nothing is deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_server_listing_no_nodes_deletes_no_vm() {
    let (env, rec, cfg) = two_joined_nodes("freeMemoryTarget: 0 B").await;
    drop(rec);
    let before: BTreeSet<String> = env.cloud.servers().into_iter().map(|s| s.id).collect();
    // A second API server, with no nodes at all, and a kubeconfig pointing at it.
    let blind = SimCluster::start(SimClusterOptions::default())
        .await
        .expect("second cluster starts");
    let kubeconfig = env.dir.join("blind-kubeconfig");
    blind.write_kubeconfig(&kubeconfig).expect("kubeconfig");

    let plan = nodewright_for!(&env, &cfg)
        .env("KUBECONFIG_FILE", &kubeconfig)
        .args(["plan", "--json"])
        .output()
        .expect("plan runs");
    let out = String::from_utf8_lossy(&plan.stdout);
    assert!(
        plan.status.success(),
        "{out}\n{}",
        String::from_utf8_lossy(&plan.stderr)
    );
    assert!(
        out.contains("the cluster view looks wrong: 2 joined VM(s) have no Node"),
        "{out}"
    );
    assert!(!out.contains("delete-failed-servers"), "{out}");

    let log = env.dir.join("blind-run.log");
    let mut run = Killed(
        nodewright_for!(&env, &cfg)
            .env("KUBECONFIG_FILE", &kubeconfig)
            .arg("run")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log"))
            .spawn()
            .expect("nodewright run starts"),
    );
    // Many cycles (scanInterval 200ms) with every VM past provisionTimeout.
    tokio::time::sleep(Duration::from_secs(5)).await;
    run.kill();
    let after: BTreeSet<String> = env.cloud.servers().into_iter().map(|s| s.id).collect();
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(
        after, before,
        "VMs deleted behind a blind API server:\n{text}"
    );
    assert!(
        !env.cloud
            .calls()
            .iter()
            .any(|c| c.method == "DELETE" && c.path.contains("/servers/")),
        "a delete was sent"
    );
    assert!(text.contains("cluster view looks wrong"), "{text}");
    // The pods never stopped.
    let pods = app_pods(&env, "web");
    assert!(pods.iter().all(|p| phase(p) == "Running"), "{pods:?}");
    blind.shutdown();
}

/// Regression: `kubectl delete node` on a running managed node had its VM destroyed about
/// a second later. A kubelet registers only when it starts, so the VM is restarted (once)
/// and its kubelet registers the Node again; meanwhile the VM is waited on (and
/// reported), then let in again, never deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_node_object_gets_its_vm_a_grace_and_comes_back() {
    let (env, rec, _) = two_joined_nodes("").await;
    let vm = env.cloud.servers()[0].clone();
    let nodes: Api<Node> = Api::all(env.cluster.kube_client().await.expect("client"));
    nodes
        .delete(&vm.name, &Default::default())
        .await
        .expect("kubectl delete node");
    let mut vanished_noted = false;
    let mut gone_seen = false;
    let start = Instant::now();
    loop {
        let report = rec.cycle(SystemTime::now()).await.expect("cycle");
        vanished_noted |= report
            .decision
            .notes
            .iter()
            .any(|n| n.code == ReasonCode::NodeVanished && n.message.contains(&vm.name));
        assert!(
            env.cloud.servers().iter().any(|s| s.id == vm.id),
            "VM {} deleted after its Node object was: {:?}",
            vm.name,
            report.decision
        );
        let node = env.cluster.node(&vm.name);
        gone_seen |= node.is_none();
        if gone_seen && node.is_some_and(|n| ready(&n) && !has_startup_taint(&n)) {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(40),
            "node {} did not come back",
            vm.name
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(gone_seen);
    assert!(vanished_noted, "the vanished node was never reported");
    // Down once, for its restart; never deleted.
    let downs = env
        .vm_log
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .filter(|e| !e.booted && e.name == vm.name)
        .count();
    assert_eq!(downs, 1, "the VM went down once, for its one restart");
}

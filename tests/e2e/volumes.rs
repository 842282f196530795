//! Issue 19, volumes: on k3s the default StorageClass (`local-path`) keeps a claim's data
//! on the node's own disk. A node holding such data is never consolidated away, nor
//! replaced for its age, while an equivalent node without such a pod is; and `plan` names
//! the pod and the volume that keep it. Black box: the simulated cluster provisions and
//! binds the claim as k3s does, and the real `nodewright run` decides.

use super::*;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};

/// A `db` ReplicaSet of one 1 GiB pod whose volume `data` is claim `db-data` (of the
/// default class, `local-path`); waits until it runs, and returns (pod, node, PV).
async fn start_db(env: &SimEnv) -> (String, String, String) {
    env.cluster
        .add_claim("default", "db-data", None, "1Gi")
        .expect("claim");
    env.cluster
        .add_replicaset(
            "default",
            "db",
            1,
            SimPodTemplate::new("postgres:16", GI).claim("data", "db-data"),
        )
        .expect("db");
    common::wait_for("db running", Duration::from_secs(20), || {
        app_pods(env, "db").iter().any(|p| phase(p) == "Running")
    })
    .await;
    let pod = app_pods(env, "db").remove(0);
    let node = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .expect("db is bound");
    let claim = env
        .cluster
        .get::<PersistentVolumeClaim>("default", "db-data")
        .expect("claim exists");
    let pv = claim
        .spec
        .and_then(|s| s.volume_name)
        .expect("the local-path provisioner bound the claim");
    (pod.metadata.name.unwrap_or_default(), node, pv)
}

/// The PV's required node affinity names `node` alone, as local-path makes it.
fn pv_on(env: &SimEnv, pv: &str) -> Vec<String> {
    let pv = env
        .cluster
        .get::<PersistentVolume>("", pv)
        .expect("the PV still exists");
    pv.spec
        .and_then(|s| s.node_affinity)
        .and_then(|a| a.required)
        .map(|r| {
            r.node_selector_terms
                .into_iter()
                .flat_map(|t| t.match_expressions.unwrap_or_default())
                .flat_map(|e| e.values.unwrap_or_default())
                .collect()
        })
        .unwrap_or_default()
}

/// Watches `db_node` and the db pod while `run` works: the node is never cordoned and
/// the pod is never evicted.
fn never_disturbed(env: &SimEnv, db_node: &str, db_pod: &str, seen: &mut Vec<String>) {
    match env.cluster.node(db_node) {
        None => seen.push(format!("{db_node} deleted")),
        Some(n) if n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true) => {
            seen.push(format!("{db_node} cordoned"))
        }
        Some(_) => {}
    }
    let pods = app_pods(env, "db");
    if !pods
        .iter()
        .any(|p| p.metadata.name.as_deref() == Some(db_pod) && phase(p) == "Running")
    {
        seen.push(format!("db pod {db_pod} not running: {:?}", pods.len()));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_holding_a_local_path_volume_is_kept_while_an_equivalent_node_is_consolidated() {
    let extra = "freeMemoryTarget: 0 B\nscaleDown: {delayAfterAdd: 1s, unneededTime: 0s}";
    let (env, rec) = setup(extra).await;
    // Three nodes, each with one 5 GiB web pod.
    env.cluster
        .add_replicaset(
            "default",
            "web",
            3,
            SimPodTemplate::new("nginx:1.25", 5 * GI),
        )
        .expect("web");
    drive(
        &env,
        &rec,
        Duration::from_secs(30),
        |_| {},
        |env| {
            app_pods(env, "web")
                .iter()
                .filter(|p| phase(p) == "Running")
                .count()
                == 3
        },
    )
    .await;
    assert_eq!(worker_names(&env).len(), 3);
    let (db_pod, db_node, pv) = start_db(&env).await;
    assert_eq!(pv_on(&env, &pv), vec![db_node.clone()]);
    // Two web pods go: the nodes are now underused; one web pod and the db pod would fit
    // on a single node.
    env.cluster
        .scale_replicaset("default", "web", 1)
        .expect("scale down");
    common::wait_for("web scaled down", Duration::from_secs(10), || {
        app_pods(&env, "web").len() == 1
    })
    .await;
    let (config_path, _) = env.write_config(&config(extra)).expect("config");

    let plan = nodewright_for!(&env, &config_path)
        .arg("plan")
        .output()
        .expect("plan runs");
    let text = String::from_utf8_lossy(&plan.stdout).to_string();
    assert!(plan.status.success(), "{text}");
    let line = text
        .lines()
        .find(|l| l.contains(&db_node) && l.contains("local-volume"))
        .unwrap_or_else(|| panic!("plan does not say why {db_node} is kept:\n{text}"));
    assert!(line.contains(&format!("default/{db_pod}")), "{line}");
    assert!(line.contains(&pv), "{line}");

    let mut run = Killed(
        nodewright_for!(&env, &config_path)
            .args(["run", "--metrics-addr", "127.0.0.1:0"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("run starts"),
    );
    let mut disturbed = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(40);
    // At least one node without the data goes (every node but db's and the web pod's).
    let web_node = || {
        app_pods(&env, "web")
            .first()
            .and_then(|p| p.spec.as_ref().and_then(|s| s.node_name.clone()))
    };
    loop {
        never_disturbed(&env, &db_node, &db_pod, &mut disturbed);
        let workers = worker_names(&env);
        let web_running = app_pods(&env, "web").iter().all(|p| phase(p) == "Running");
        let wanted: BTreeSet<String> = [Some(db_node.clone()), web_node()]
            .into_iter()
            .flatten()
            .collect();
        if workers == wanted && web_running && env.cloud.servers().len() == wanted.len() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "nodes {workers:?}, wanted {wanted:?}; disturbed: {disturbed:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A while longer: the db node stays though it is underused and its pod would fit
    // elsewhere.
    let until = Instant::now() + Duration::from_secs(4);
    while Instant::now() < until {
        never_disturbed(&env, &db_node, &db_pod, &mut disturbed);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    run.kill();
    assert!(disturbed.is_empty(), "{disturbed:?}");
    assert!(worker_names(&env).contains(&db_node));
    assert_eq!(pv_on(&env, &pv), vec![db_node]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_node_holding_a_local_path_volume_is_kept_while_an_equally_old_one_is_replaced() {
    let extra = "freeMemoryTarget: 0 B\noldNodeAgeLimit: 10s";
    let (env, rec) = setup(extra).await;
    env.cluster
        .add_replicaset(
            "default",
            "web",
            2,
            SimPodTemplate::new("nginx:1.25", 5 * GI),
        )
        .expect("web");
    drive(
        &env,
        &rec,
        Duration::from_secs(30),
        |_| {},
        |env| {
            app_pods(env, "web")
                .iter()
                .filter(|p| phase(p) == "Running")
                .count()
                == 2
        },
    )
    .await;
    let (db_pod, db_node, pv) = start_db(&env).await;
    let old: BTreeSet<String> = worker_names(&env);
    assert_eq!(old.len(), 2);
    let other = old
        .iter()
        .find(|n| **n != db_node)
        .cloned()
        .expect("a second node");
    let (config_path, _) = env.write_config(&config(extra)).expect("config");
    let mut run = Killed(
        nodewright_for!(&env, &config_path)
            .args(["run", "--metrics-addr", "127.0.0.1:0"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("run starts"),
    );
    let mut disturbed = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        never_disturbed(&env, &db_node, &db_pod, &mut disturbed);
        let replaced = env.cluster.node(&other).is_none()
            && !env.cloud.servers().iter().any(|s| s.name == other);
        let web_ok = app_pods(&env, "web")
            .iter()
            .filter(|p| phase(p) == "Running")
            .count()
            == 2;
        if replaced && web_ok {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{other} not replaced: nodes {:?}; disturbed: {disturbed:?}",
            worker_names(&env)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        never_disturbed(&env, &db_node, &db_pod, &mut disturbed);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    run.kill();
    assert!(disturbed.is_empty(), "{disturbed:?}");
    assert_eq!(pv_on(&env, &pv), vec![db_node.clone()]);
    // `plan` says what keeps the old node: the pod and its volume (asked a few times:
    // while the replacement, old in its turn, drains, no replacement is weighed).
    let says = |text: &str| {
        text.lines().any(|l| {
            l.contains(&db_node)
                && l.contains("is not replaced now")
                && l.contains(&format!("default/{db_pod}"))
                && l.contains(&pv)
        })
    };
    let mut text = String::new();
    for _ in 0..5 {
        let plan = nodewright_for!(&env, &config_path)
            .arg("plan")
            .output()
            .expect("plan runs");
        text = String::from_utf8_lossy(&plan.stdout).to_string();
        if says(&text) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(says(&text), "{text}");
}

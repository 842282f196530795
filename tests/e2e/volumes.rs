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

/// Runs `cycles` cycles, each `step` later than the one before (from now), sleeping a
/// little between them so the watch caches see what the last action did; `check` sees
/// the world after each.
async fn cycles_ahead(
    env: &SimEnv,
    rec: &Reconciler,
    cycles: u32,
    step: Duration,
    mut check: impl FnMut(&SimEnv, &nodewright::plan::Decision),
) {
    let start = SystemTime::now();
    for i in 1..=cycles {
        let report = rec
            .cycle(start + step * i)
            .await
            .expect("cycle succeeds against the simulators");
        check(env, &report.decision);
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
}

/// Whether `node` is cordoned, gone, or its VM gone.
fn disturbed(env: &SimEnv, node: &str) -> Option<String> {
    match env.cluster.node(node) {
        None => Some(format!("{node} deleted")),
        Some(n) if n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true) => {
            Some(format!("{node} cordoned"))
        }
        Some(_) if !env.cloud.servers().iter().any(|s| s.name == node) => {
            Some(format!("VM {node} deleted"))
        }
        Some(_) => None,
    }
}

/// Issue 29, item 1: a `local-path` claim whose ReplicaSet is scaled to zero for the
/// night left its node "empty": cordoned and deleted with its VM seconds later, and the
/// pod scaled back was Pending for ever. The bound volume pins its node, pod or no pod,
/// `plan` says `local-volume (no pod)`; once the claim is deleted the node may go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item_1_a_local_volume_whose_claim_has_no_pod_pins_its_node() {
    let extra = "freeMemoryTarget: 0 B\nscaleDown: {delayAfterAdd: 0s, unneededTime: 5s}";
    let (env, rec) = setup(extra).await;
    env.cluster
        .add_replicaset("default", "web", 1, SimPodTemplate::new("nginx:1.25", GI))
        .expect("web");
    drive(
        &env,
        &rec,
        Duration::from_secs(30),
        |_| {},
        |env| app_pods(env, "web").iter().any(|p| phase(p) == "Running"),
    )
    .await;
    let (_, db_node, pv) = start_db(&env).await;
    assert_eq!(pv_on(&env, &pv), vec![db_node.clone()]);
    // The night: both workloads scaled to zero; the claim and its volume stay.
    for rs in ["web", "db"] {
        env.cluster
            .scale_replicaset("default", rs, 0)
            .expect("scale to zero");
    }
    common::wait_for("no app pods", Duration::from_secs(10), || {
        app_pods(&env, "web").is_empty() && app_pods(&env, "db").is_empty()
    })
    .await;

    // Hours of cycles, a minute apart: the node stays, untouched.
    let mut seen = Vec::new();
    cycles_ahead(&env, &rec, 8, Duration::from_secs(60), |env, d| {
        seen.extend(disturbed(env, &db_node));
        if matches!(d.action, Action::Cordon { .. } | Action::DeleteNodes { .. }) {
            seen.push(d.action.to_string());
        }
    })
    .await;
    assert!(seen.is_empty(), "{seen:?}");
    let (config_path, _) = env.write_config(&config(extra)).expect("config");
    let plan = nodewright_for!(&env, &config_path)
        .arg("plan")
        .output()
        .expect("plan runs");
    let text = String::from_utf8_lossy(&plan.stdout).to_string();
    assert!(plan.status.success(), "{text}");
    let line = text
        .lines()
        .find(|l| l.contains(&db_node) && l.contains("local-volume (no pod)"))
        .unwrap_or_else(|| panic!("plan does not say why {db_node} is kept:\n{text}"));
    assert!(
        line.contains(&pv) && line.contains("default/db-data"),
        "{line}"
    );

    // The claim is deleted: its data is given up, and the node may go.
    let claims: Api<PersistentVolumeClaim> =
        Api::namespaced(env.cluster.kube_client().await.expect("client"), "default");
    claims
        .delete("db-data", &Default::default())
        .await
        .expect("claim deleted");
    drive(
        &env,
        &rec,
        Duration::from_secs(30),
        |_| {},
        |env| env.cluster.node(&db_node).is_none() && env.cloud.servers().is_empty(),
    )
    .await;
}

/// Issue 29, item 5: a node NotReady for `health.unhealthyAfter` plus `drain.timeout`
/// (a VM shut down for maintenance, a host rebooted) lost its VM and its local volume:
/// its pod was evicted and its VM deleted. It is kept, never cordoned, drained or
/// deleted for being NotReady, and the plan says so for a person.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item_5_a_not_ready_node_holding_a_local_volume_keeps_its_vm_and_its_pod() {
    let extra = "freeMemoryTarget: 0 B\nhealth: {unhealthyAfter: 1m}\ndrain: {timeout: 2m}";
    let (env, rec) = setup(extra).await;
    env.cluster
        .add_replicaset("default", "web", 1, SimPodTemplate::new("nginx:1.25", GI))
        .expect("web");
    drive(
        &env,
        &rec,
        Duration::from_secs(30),
        |_| {},
        |env| app_pods(env, "web").iter().any(|p| phase(p) == "Running"),
    )
    .await;
    let (db_pod, db_node, pv) = start_db(&env).await;
    env.cluster
        .set_node_ready(&db_node, false)
        .expect("the node stops reporting");
    // Half an hour of cycles, five minutes apart: far past unhealthyAfter + drain.timeout.
    let mut seen = Vec::new();
    let mut reported = false;
    cycles_ahead(&env, &rec, 6, Duration::from_secs(300), |env, d| {
        seen.extend(disturbed(env, &db_node));
        if env.cluster.pod("default", &db_pod).is_none() {
            seen.push(format!("pod {db_pod} evicted"));
        }
        reported |= d.notes.iter().any(|n| {
            n.message.contains(&db_node)
                && n.message.contains("not replaced though NotReady")
                && n.message.contains(&pv)
        });
    })
    .await;
    assert!(seen.is_empty(), "{seen:?}");
    assert!(reported, "the plan never said why {db_node} is kept");
    assert_eq!(pv_on(&env, &pv), vec![db_node.clone()]);
    // Back after the maintenance: Ready, its pod and data where they were.
    env.cluster.set_node_ready(&db_node, true).expect("Ready");
    assert!(env.cloud.servers().iter().any(|s| s.name == db_node));
}

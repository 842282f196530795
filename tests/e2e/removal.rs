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
    use nodewright::plan::PodRef;
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

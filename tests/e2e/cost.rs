//! Issue 28, fewer node-hours, end to end: room being taken away is given back before a
//! VM is bought, the nodes that may go carry a soft taint the scheduler steers around,
//! and the delay after an add holds only its own group.

use super::*;
use std::collections::BTreeMap;

use k8s_openapi::jiff::Timestamp;
use nodewright::model::DELETION_CANDIDATE_TAINT_KEY;

/// A VM of `group` and its Ready node, as nodewright would have made them, its node
/// registered `age` ago.
fn managed_node(env: &SimEnv, name: &str, group: &str, age: Duration) {
    env.cloud.insert_server(
        name,
        BTreeMap::from([
            ("nodewright-cluster".to_string(), "e2e".to_string()),
            ("nodewright-group".to_string(), group.to_string()),
        ]),
    );
    let created = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .saturating_sub(age);
    let spec = SimNodeSpec {
        created: Timestamp::from_second(created.as_secs() as i64).ok(),
        ..SimNodeSpec::new(name, 8 * GI)
            .label(LABEL_CLUSTER, "e2e")
            .label(LABEL_GROUP, group)
    };
    env.cluster.add_node(spec).expect("node");
}

/// `count` pods of `memory` each, bound to `node` by name (not through the scheduler).
fn pods_on(env: &SimEnv, app: &str, node: &str, memory: u64) {
    let t = SimPodTemplate {
        node_name: Some(node.to_string()),
        ..SimPodTemplate::new("nginx:1.25", memory)
    };
    env.cluster
        .add_replicaset("default", app, 1, t)
        .expect("replicaset");
}

fn nodes_of(env: &SimEnv, app: &str) -> BTreeSet<String> {
    app_pods(env, app)
        .into_iter()
        .filter(|p| phase(p) == "Running")
        .filter_map(|p| p.spec.and_then(|s| s.node_name))
        .collect()
}

fn soft_tainted(env: &SimEnv, node: &str) -> bool {
    env.cluster.node(node).is_some_and(|n| {
        n.spec
            .and_then(|s| s.taints)
            .unwrap_or_default()
            .iter()
            .any(|t| t.key == DELETION_CANDIDATE_TAINT_KEY && t.effect == "PreferNoSchedule")
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reuse_before_you_buy_a_node_cordoned_for_scale_down_takes_the_new_pods_and_no_vm_is_made()
{
    let (env, rec) = setup("freeMemoryTarget: 0 B\nimagePuller: {enabled: false}").await;
    let (busy, spare) = ("e2e-workers-busy", "e2e-workers-spare");
    managed_node(&env, busy, "workers", Duration::from_secs(3600));
    managed_node(&env, spare, "workers", Duration::from_secs(3600));
    pods_on(&env, "filler", busy, 7 * GI);
    common::wait_for("the filler runs", Duration::from_secs(20), || {
        nodes_of(&env, "filler").len() == 1
    })
    .await;
    // nodewright's scale-down cordoned the spare node as empty, on its way out.
    let nodes: Api<Node> = Api::all(env.cluster.kube_client().await.expect("client"));
    nodes
        .patch(
            spare,
            &PatchParams::default(),
            &Patch::Merge(cordon_patch(true)),
        )
        .await
        .expect("cordon as nodewright's scale-down does");
    // A burst lands just then: it fits no schedulable node, but the spare one.
    env.cluster
        .add_replicaset(
            "default",
            "burst",
            2,
            SimPodTemplate::new("nginx:1.25", 2 * GI),
        )
        .expect("replicaset");
    // The scheduler says so first: a plan made before would see an empty cordoned node
    // and no pod that needs it.
    common::wait_for(
        "the burst marked unschedulable",
        Duration::from_secs(20),
        || {
            let pods = app_pods(&env, "burst");
            pods.len() == 2 && pods.iter().all(unschedulable)
        },
    )
    .await;
    let servers_before = env.cloud.servers().len();
    let actions = drive(
        &env,
        &rec,
        Duration::from_secs(30),
        |_| {},
        |env| {
            let pods = app_pods(env, "burst");
            pods.len() == 2 && pods.iter().all(|p| phase(p) == "Running")
        },
    )
    .await;
    assert!(
        actions
            .iter()
            .any(|a| matches!(a, Action::ReuseCordoned { nodes } if nodes == &[spare.to_string()])),
        "{actions:?}"
    );
    assert!(
        !actions.iter().any(|a| a.scale_up().is_some()),
        "{actions:?}"
    );
    assert_eq!(env.cloud.servers().len(), servers_before, "a VM was made");
    assert_eq!(nodes_of(&env, "burst"), BTreeSet::from([spare.to_string()]));
    let node = env.cluster.node(spare).expect("the spare node stays");
    assert!(!node.spec.and_then(|s| s.unschedulable).unwrap_or(false));
    let annotations = node.metadata.annotations.unwrap_or_default();
    assert!(
        !annotations
            .keys()
            .any(|k| k.starts_with("nodewright.io/cordon")
                || k == nodewright::model::ANNOTATION_DISRUPTION),
        "its removal record stays: {annotations:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steer_pods_off_a_removal_candidate_carries_the_soft_taint_until_pods_arrive() {
    let (env, rec) = setup(
        "freeMemoryTarget: 0 B\nimagePuller: {enabled: false}\nscaleDown: {unneededTime: 10m}",
    )
    .await;
    let (kept, going) = ("e2e-workers-kept", "e2e-workers-going");
    managed_node(&env, kept, "workers", Duration::from_secs(3600));
    managed_node(&env, going, "workers", Duration::from_secs(3600));
    pods_on(&env, "big", kept, 3 * GI);
    pods_on(&env, "small", going, GI);
    // Both are under the threshold; only one can go (its pod fits on the other).
    drive(
        &env,
        &rec,
        Duration::from_secs(30),
        |_| {},
        |env| soft_tainted(env, going),
    )
    .await;
    assert!(!soft_tainted(&env, kept), "both nodes tainted");
    // A pod that fits only the candidate: the taint steers, never blocks; once there,
    // the node is needed and its taint goes.
    env.cluster
        .add_replicaset(
            "default",
            "large",
            1,
            SimPodTemplate::new("nginx:1.25", 6 * GI),
        )
        .expect("replicaset");
    let actions = drive(
        &env,
        &rec,
        Duration::from_secs(30),
        |_| {},
        |env| nodes_of(env, "large").len() == 1 && !soft_tainted(env, going),
    )
    .await;
    assert_eq!(nodes_of(&env, "large"), BTreeSet::from([going.to_string()]));
    assert!(
        actions.iter().any(
            |a| matches!(a, Action::SoftTaint { remove, .. } if remove == &[going.to_string()])
        ),
        "{actions:?}"
    );
    assert!(
        !actions.iter().any(|a| a.scale_up().is_some()),
        "{actions:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_delay_after_an_add_of_one_group_does_not_hold_scale_down_of_another() {
    let env = SimEnv::start(None, SimTimings::default())
        .await
        .expect("simulated environment starts");
    let group = |name: &str| {
        format!(
            r#"  - name: {name}
    provider: openstack
    minSize: 0
    maxSize: 4
    openstack: {{flavor: m1.large, image: ubuntu-24.04, network: private}}
    userData:
      template: k3s-agent.cloud-init.yaml.j2
      variables: {{k3s_url: "https://192.0.2.1:6443", k3s_token: "e2e-secret-token"}}
"#
        )
    };
    let text = format!(
        "clusterName: e2e\nfreeMemoryTarget: 0 B\nprovisionTimeout: 30s\nscanInterval: 200ms\nimagePuller: {{enabled: false}}\nscaleDown: {{delayAfterAdd: 10m, unneededTime: 0s}}\nnodeGroups:\n{}{}",
        group("workers"),
        group("batch")
    );
    let (_, cfg) = env.write_config(&text).expect("config loads");
    let rec = env.reconciler(cfg).await.expect("reconciler builds");
    let (idle, added) = ("e2e-workers-idle", "e2e-batch-added");
    managed_node(&env, idle, "workers", Duration::from_secs(2 * 3600));
    // Batch just added a node (empty too): its own group waits for delayAfterAdd.
    managed_node(&env, added, "batch", Duration::ZERO);
    let actions = drive(
        &env,
        &rec,
        Duration::from_secs(30),
        |_| {},
        |env| !env.cloud.servers().iter().any(|s| s.name == idle),
    )
    .await;
    assert!(
        actions
            .iter()
            .any(|a| matches!(a, Action::Cordon { nodes, .. } if nodes == &[idle.to_string()])),
        "{actions:?}"
    );
    assert!(env.cloud.servers().iter().any(|s| s.name == added));
    for _ in 0..5 {
        let r = rec.cycle(SystemTime::now()).await.expect("cycle");
        assert!(
            !r.decision.action.cordons().contains(&added.to_string()),
            "{:?}",
            r.decision
        );
    }
}

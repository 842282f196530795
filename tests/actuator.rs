//! The actuator against the simulated API server and OpenStack over loopback HTTP: its
//! last look at a node before deleting it (issue 8).

mod common;

use std::collections::BTreeMap;
use std::time::SystemTime;

use common::cordon_patch;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use nodewright::act::events::events_for;
use nodewright::act::ActError;
use nodewright::plan::Action;
use nodewright::reconcile::Reconciler;
use nodewright::sim::cluster::SimNodeSpec;
use nodewright::sim::env::{SimEnv, SimTimings};
use nodewright::{ANNOTATION_CORDONED, LABEL_CLUSTER, LABEL_GROUP};

const GI: u64 = 1 << 30;

const CONFIG: &str = r#"clusterName: e2e
freeMemoryTarget: 0 B
scanInterval: 200ms
nodeGroups:
  - name: workers
    provider: openstack
    minSize: 0
    maxSize: 4
    openstack: {flavor: m1.large, image: ubuntu-24.04, network: private}
    userData:
      template: k3s-agent.cloud-init.yaml.j2
      variables: {k3s_url: "https://192.0.2.1:6443", k3s_token: "e2e-secret-token"}
"#;

async fn setup() -> (SimEnv, Reconciler) {
    let env = SimEnv::start(None, SimTimings::default())
        .await
        .expect("simulated environment starts");
    let (_, cfg) = env.write_config(CONFIG).expect("config loads");
    let rec = env.reconciler(cfg).await.expect("reconciler builds");
    (env, rec)
}

/// A joined node of ours: its VM tagged for the cluster and group, its Node labelled.
fn managed_node(env: &SimEnv, name: &str) -> String {
    let id = env.cloud.insert_server(
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
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_uncordoned_by_a_person_between_plan_and_act_is_not_deleted() {
    let (env, rec) = setup().await;
    let names = [
        "e2e-workers-uncordoned",
        "e2e-workers-recordoned",
        "e2e-workers-ours",
    ];
    let ids: Vec<String> = names.iter().map(|n| managed_node(&env, n)).collect();
    let nodes: Api<Node> = Api::all(env.cluster.kube_client().await.expect("client"));
    for name in names {
        nodes
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(cordon_patch(true)),
            )
            .await
            .expect("cordon as nodewright does");
    }
    let (snapshot, decision) = rec.plan(SystemTime::now()).await.expect("plan");
    match &decision.action {
        Action::DeleteNodes { nodes } => assert_eq!(nodes.len(), 3, "{decision:#?}"),
        other => panic!("expected the three emptied nodes to be deleted, got {other:?}"),
    }

    // Between the plan and the act: a person uncordons one node, and cordons another
    // as their own (nodewright's record gone, the node still unschedulable).
    nodes
        .patch(
            names[0],
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"unschedulable": false}})),
        )
        .await
        .expect("uncordon");
    nodes
        .patch(
            names[1],
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({
                "metadata": {"annotations": {ANNOTATION_CORDONED: null}}
            })),
        )
        .await
        .expect("drop the record");

    let err = match rec.act(&snapshot, &decision, SystemTime::now()).await {
        Err(e @ ActError::Refused { .. }) => e.to_string(),
        other => panic!("expected a refusal, got {other:?}"),
    };
    for want in [
        format!("node {} is schedulable again", names[0]),
        format!(
            "node {} is cordoned but no longer carries nodewright's annotation",
            names[1]
        ),
        format!("done meanwhile: deleted node {}", names[2]),
    ] {
        assert!(err.contains(&want), "{want:?} not in: {err}");
    }
    // Neither the given-back nodes nor their VMs were touched; the third went.
    for (name, id) in names.iter().zip(&ids).take(2) {
        assert!(env.cluster.node(name).is_some(), "{name} deleted: {err}");
        assert!(
            env.cloud.servers().iter().any(|s| &s.id == id),
            "VM of {name} deleted: {err}"
        );
    }
    assert!(env.cluster.node(names[2]).is_none());
    assert!(!env.cloud.servers().iter().any(|s| s.id == ids[2]));
    // The refusal is posted on the node, with the check that failed.
    let events = events_for(&decision, Err(&err));
    let on_first = events
        .iter()
        .find(|e| e.object.name == names[0])
        .expect("an Event on the uncordoned node");
    assert!(on_first.warning && on_first.message.contains("schedulable again"));
}

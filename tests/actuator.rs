//! The actuator against the simulated API server and OpenStack over loopback HTTP: its
//! last look at a node before deleting it, and the disruption records it leaves for the
//! next process (issue 8).

use nodewright_testkit as common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use common::cordon_patch;
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::api::{Api, Patch, PatchParams};
use nodewright::act::events::events_for;
use nodewright::act::ActError;
use nodewright::cluster::{kubeconfig_from_file, KubeCluster};
use nodewright::model::{
    ANNOTATION_CORDONED, ANNOTATION_UNNEEDED_SINCE, LABEL_CLUSTER, LABEL_GROUP,
};
use nodewright::plan::Action;
use nodewright::run::Reconciler;
use nodewright::sim::cluster::SimNodeSpec;
use nodewright::sim::env::{SimEnv, SimTimings};

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
    let events = events_for(&decision, Err(&err), None);
    let on_first = events
        .iter()
        .find(|e| e.object.name == names[0])
        .expect("an Event on the uncordoned node");
    assert!(on_first.warning && on_first.message.contains("schedulable again"));
}

/// A reconciler as `run` builds it: disruption records in the status ConfigMap
/// `nodewright/nodewright-status` (`records: false`: kept nowhere, as before).
async fn process(env: &SimEnv, extra: &str, records: bool) -> Reconciler {
    let (_, cfg) = env
        .write_config(&CONFIG.replace("nodeGroups:", &format!("{extra}\nnodeGroups:")))
        .expect("config loads");
    let mut rec = env.reconciler(cfg).await.expect("reconciler builds");
    let kube = kubeconfig_from_file(&env.kubeconfig)
        .await
        .expect("kubeconfig");
    let client = nodewright::cluster::client_from_config(kube).expect("client");
    let mut cluster = KubeCluster::new(client);
    if records {
        cluster = cluster.with_records("nodewright", "nodewright-status");
    }
    rec.cluster = Arc::new(cluster);
    rec
}

fn cordoned(action: &Action) -> Vec<String> {
    match action {
        Action::Cordon { nodes, .. } => nodes.clone(),
        _ => Vec::new(),
    }
}

/// Issue 8: `delayAfterDelete` (and `delayAfterFailure`) were kept in memory, so a
/// restarted process removed the next node at once. The deletion is recorded in the
/// status ConfigMap and a fresh process reads it back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_process_still_honours_delay_after_delete() {
    let env = SimEnv::start(None, SimTimings::default())
        .await
        .expect("simulated environment starts");
    let delays = "scaleDown: {delayAfterAdd: 0s, delayAfterDelete: 1h, unneededTime: 1m}";
    let names = ["e2e-workers-a", "e2e-workers-b", "e2e-workers-c"];
    for n in names {
        managed_node(&env, n);
    }
    let nodes: Api<Node> = Api::all(env.cluster.kube_client().await.expect("client"));
    nodes
        .patch(
            names[0],
            &PatchParams::default(),
            &Patch::Merge(cordon_patch(true)),
        )
        .await
        .expect("cordon");
    // The other two have been unneeded for long enough to go.
    let since = humantime::format_rfc3339_seconds(SystemTime::now() - Duration::from_secs(3600))
        .to_string();
    for n in &names[1..] {
        nodes
            .patch(
                n,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({
                    "metadata": {"annotations": {ANNOTATION_UNNEEDED_SINCE: since}}
                })),
            )
            .await
            .expect("annotate");
    }

    let first = process(&env, delays, true).await;
    let report = first.cycle(SystemTime::now()).await.expect("cycle");
    assert!(
        matches!(&report.decision.action, Action::DeleteNodes { nodes } if nodes.len() == 1),
        "{:#?}",
        report.decision
    );
    assert!(env.cluster.node(names[0]).is_none());
    let cms: Api<ConfigMap> = Api::namespaced(
        env.cluster.kube_client().await.expect("client"),
        "nodewright",
    );
    let data = cms
        .get("nodewright-status")
        .await
        .expect("the status ConfigMap holds the record")
        .data
        .unwrap_or_default();
    assert!(data.contains_key("lastNodeDeleted.workers"), "{data:?}");
    drop(first);

    // A process that kept nothing would remove the next node at once...
    let forgetful = process(&env, delays, false).await;
    let (_, d) = forgetful.plan(SystemTime::now()).await.expect("plan");
    assert!(!cordoned(&d.action).is_empty(), "{d:#?}");
    // ...the restarted one reads the deletion back and waits.
    let restarted = process(&env, delays, true).await;
    let (snapshot, d) = restarted.plan(SystemTime::now()).await.expect("plan");
    assert!(snapshot.last_node_deleted.is_some(), "{snapshot:#?}");
    assert!(cordoned(&d.action).is_empty(), "{d:#?}");
    // Without the delay the same snapshot would go on.
    let (_, cfg) = env
        .write_config(&CONFIG.replace(
            "nodeGroups:",
            "scaleDown: {delayAfterAdd: 0s, unneededTime: 1m}\nnodeGroups:",
        ))
        .expect("config");
    let d = nodewright::plan::plan(&snapshot, &cfg, SystemTime::now());
    assert!(!cordoned(&d.action).is_empty(), "{d:#?}");
}

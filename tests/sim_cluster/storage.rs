//! Storage in the simulated API server, as k3s has it: PersistentVolumes, claims,
//! StorageClasses and CSINodes over HTTP, validated as the real server validates them;
//! the default `local-path` class provisioning a claim on the node its pod is placed on;
//! and the scheduler keeping such a pod to that node.

use super::*;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};

fn claim_body(name: &str, spec: serde_json::Value) -> PersistentVolumeClaim {
    serde_json::from_value(json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": name}, "spec": spec}))
    .expect("claim")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_volumes_classes_and_csinodes_are_served_and_validated_like_the_real_server() {
    let (_sim, client) = start().await;
    // k3s's default class is there from the start.
    let classes: Api<StorageClass> = Api::all(client.clone());
    let lp = classes.get("local-path").await.expect("local-path class");
    assert_eq!(lp.provisioner, "rancher.io/local-path");
    assert_eq!(
        lp.volume_binding_mode.as_deref(),
        Some("WaitForFirstConsumer")
    );
    assert_eq!(
        lp.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("storageclass.kubernetes.io/is-default-class"))
            .map(String::as_str),
        Some("true")
    );

    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    let refused = claims
        .create(&PostParams::default(), &claim_body("bad", json!({})))
        .await
        .map_err(api_error)
        .expect_err("a claim without accessModes or size is refused");
    assert_eq!(refused.code, 422);
    assert!(
        refused.message.contains("spec.accessModes")
            && refused.message.contains("spec.resources[storage]"),
        "{}",
        refused.message
    );
    // A claim naming no class gets the default one (DefaultStorageClass admission).
    let made = claims
        .create(
            &PostParams::default(),
            &claim_body(
                "data",
                json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}),
            ),
        )
        .await
        .expect("claim created");
    assert_eq!(
        made.spec.and_then(|s| s.storage_class_name).as_deref(),
        Some("local-path")
    );
    let listed = claims.list(&ListParams::default()).await.expect("list");
    assert_eq!(listed.items.len(), 1);

    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let no_source: PersistentVolume = serde_json::from_value(json!({"metadata": {"name": "x"},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"]}}))
    .expect("pv");
    let refused = pvs
        .create(&PostParams::default(), &no_source)
        .await
        .map_err(api_error)
        .expect_err("a PV without a volume source is refused");
    assert!(
        refused.message.contains("must specify a volume type"),
        "{}",
        refused.message
    );
    let local_without_affinity: PersistentVolume = serde_json::from_value(json!({"metadata": {"name": "x"},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "local": {"path": "/mnt/disk"}}}))
    .expect("pv");
    let refused = pvs
        .create(&PostParams::default(), &local_without_affinity)
        .await
        .map_err(api_error)
        .expect_err("a local PV needs node affinity");
    assert!(
        refused.message.contains("nodeAffinity"),
        "{}",
        refused.message
    );

    let no_provisioner: StorageClass =
        serde_json::from_value(json!({"metadata": {"name": "x"}, "provisioner": ""}))
            .expect("class");
    let refused = classes
        .create(&PostParams::default(), &no_provisioner)
        .await
        .map_err(api_error)
        .expect_err("a class needs a provisioner");
    assert!(
        refused.message.contains("provisioner"),
        "{}",
        refused.message
    );

    let csinodes: Api<CSINode> = Api::all(client.clone());
    let csi: CSINode = serde_json::from_value(json!({"metadata": {"name": "n1"},
        "spec": {"drivers": [{"name": "ebs.csi.aws.com", "nodeID": "i-1", "allocatable": {"count": 25}}]}}))
    .expect("csinode");
    csinodes
        .create(&PostParams::default(), &csi)
        .await
        .expect("csinode created");
    let got = csinodes.get("n1").await.expect("csinode");
    assert_eq!(
        got.spec.drivers[0]
            .allocatable
            .as_ref()
            .and_then(|a| a.count),
        Some(25)
    );
    // Watches of the new kinds work as the others' do.
    let mut events = kube::runtime::watcher(pvs.clone(), Default::default()).boxed();
    let first = tokio::time::timeout(WAIT, events.try_next()).await;
    assert!(matches!(first, Ok(Ok(Some(_)))), "{first:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_path_claim_is_provisioned_on_the_pods_node_and_keeps_the_pod_there() {
    let (sim, client) = start().await;
    sim.add_node(SimNodeSpec::new("n1", 4 * GIB)).expect("n1");
    sim.add_node(SimNodeSpec::new("n2", 4 * GIB)).expect("n2");
    sim.add_claim("default", "db-data", None, "1Gi")
        .expect("claim");
    sim.add_replicaset(
        "default",
        "db",
        1,
        SimPodTemplate::new("postgres:16", GIB).claim("data", "db-data"),
    )
    .expect("db");
    assert!(
        sim.wait_until(|s| running_pods(s, "db").len() == 1, WAIT)
            .await
    );
    let pod = running_pods(&sim, "db").remove(0);
    let node = node_of(&pod).expect("bound").to_string();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    let claim = claims.get("db-data").await.expect("claim");
    assert_eq!(
        claim
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("volume.kubernetes.io/selected-node"))
            .map(String::as_str),
        Some(node.as_str())
    );
    assert_eq!(
        claim.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Bound")
    );
    let pv_name = claim
        .spec
        .and_then(|s| s.volume_name)
        .expect("bound to a PV");
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let pv = pvs.get(&pv_name).await.expect("pv");
    let values: Vec<String> = pv
        .spec
        .as_ref()
        .and_then(|s| s.node_affinity.as_ref())
        .and_then(|a| a.required.as_ref())
        .map(|r| {
            r.node_selector_terms
                .iter()
                .flat_map(|t| t.match_expressions.iter().flatten())
                .filter(|e| e.key == "kubernetes.io/hostname")
                .flat_map(|e| e.values.clone().unwrap_or_default())
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(values, vec![node.clone()]);
    assert_eq!(
        pv.spec
            .and_then(|s| s.claim_ref)
            .and_then(|c| c.name)
            .as_deref(),
        Some("db-data")
    );

    // Its node goes (a VM destroyed with its disk): the replacement pod stays Pending,
    // as the real scheduler keeps it, though the other node has room.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    sim.delete_node(&node).expect("node deleted");
    pods.delete(
        pod.metadata.name.as_deref().unwrap_or_default(),
        &DeleteParams::default(),
    )
    .await
    .expect("pod deleted");
    let stuck = |s: &SimCluster| {
        s.pods().iter().any(|p| {
            p.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with("db"))
                && node_of(p).is_none()
                && p.status
                    .as_ref()
                    .and_then(|st| st.conditions.as_ref())
                    .into_iter()
                    .flatten()
                    .any(|c| {
                        c.type_ == "PodScheduled"
                            && c.status == "False"
                            && c.message
                                .as_deref()
                                .unwrap_or_default()
                                .contains("volume node affinity conflict")
                    })
        })
    };
    assert!(sim.wait_until(stuck, WAIT).await, "pods: {:?}", sim.pods());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(running_pods(&sim, "db").is_empty());
}

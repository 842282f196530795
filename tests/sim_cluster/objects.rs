//! kubectl-style table answers, Leases, Events and ConfigMaps.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_style_table_responses() {
    let (sim, client) = start().await;
    sim.add_node(SimNodeSpec::new("n1", 4 * GIB).label("node-role.kubernetes.io/worker", ""))
        .expect("node");
    let req = axum::http::Request::get("/api/v1/nodes?limit=500")
        .header(
            "Accept",
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
        )
        .body(Vec::new())
        .expect("request");
    let table: serde_json::Value =
        serde_json::from_str(&client.request_text(req).await.expect("table")).expect("json");
    assert_eq!(table["kind"], "Table");
    let cols: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["priority"] == 0)
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(cols, ["Name", "Status", "Roles", "Age", "Version"]);
    assert_eq!(table["rows"][0]["cells"][0], "n1");
    assert_eq!(table["rows"][0]["cells"][1], "Ready");
    assert_eq!(table["rows"][0]["cells"][2], "worker");
    assert_eq!(table["rows"][0]["object"]["kind"], "PartialObjectMetadata");
    drop(sim);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_events_and_configmaps() {
    use k8s_openapi::api::coordination::v1::Lease;
    use k8s_openapi::api::core::v1::{ConfigMap, Event};
    use k8s_openapi::api::events::v1::Event as EventV1;

    let (sim, client) = start().await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
    let lease: Lease = serde_json::from_value(json!({"metadata": {"name": "nodewright"},
        "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}}))
    .expect("lease");
    let created = leases
        .create(&PostParams::default(), &lease)
        .await
        .expect("create lease");
    let mut taken = created.clone();
    taken
        .spec
        .get_or_insert_with(Default::default)
        .holder_identity = Some("b".into());
    let replaced = leases
        .replace("nodewright", &PostParams::default(), &taken)
        .await
        .expect("replace");
    assert_eq!(
        replaced.spec.and_then(|s| s.holder_identity).as_deref(),
        Some("b")
    );
    let err = api_error(
        leases
            .replace("nodewright", &PostParams::default(), &created)
            .await
            .expect_err("stale"),
    );
    assert_eq!(err.code, 409);
    leases
        .delete("nodewright", &DeleteParams::default())
        .await
        .expect("delete lease");
    assert!(sim.get::<Lease>("kube-system", "nodewright").is_none());

    let events: Api<EventV1> = Api::namespaced(client.clone(), "default");
    let ev: EventV1 = serde_json::from_value(json!({
        "metadata": {"generateName": "w1."},
        "eventTime": "2025-01-01T00:00:00.000000Z",
        "reportingController": "nodewright.io/autoscaler", "reportingInstance": "nodewright-0",
        "action": "ScaleUp", "reason": "ScaledUp", "type": "Normal", "note": "added small-1",
        "regarding": {"kind": "Node", "name": "small-1", "apiVersion": "v1"}}))
    .expect("event");
    let created = events
        .create(&PostParams::default(), &ev)
        .await
        .expect("create event");
    assert!(created
        .metadata
        .name
        .as_deref()
        .unwrap_or_default()
        .starts_with("w1."));
    events
        .patch(
            created.metadata.name.as_deref().unwrap_or_default(),
            &PatchParams::default(),
            &Patch::Merge(
                json!({"series": {"count": 2, "lastObservedTime": "2025-01-01T00:01:00.000000Z"}}),
            ),
        )
        .await
        .expect("patch event");
    let core: Api<Event> = Api::namespaced(client.clone(), "default");
    core.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "e2"},
        "involvedObject": {"kind": "Pod", "name": "p"}, "reason": "Evicted", "message": "m", "type": "Normal"})).expect("ev"))
        .await
        .expect("core event");
    let seen = sim.events();
    assert_eq!(seen.len(), 2);
    let scaled = seen
        .iter()
        .find(|e| e.reason.as_deref() == Some("ScaledUp"))
        .expect("converted");
    assert_eq!(scaled.message.as_deref(), Some("added small-1"));
    assert_eq!(scaled.count, Some(2));
    assert_eq!(scaled.involved_object.name.as_deref(), Some("small-1"));

    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "state"}, "data": {"a": "1"}}))
            .expect("cm");
    cms.create(&PostParams::default(), &cm)
        .await
        .expect("create");
    cms.patch(
        "state",
        &PatchParams::default(),
        &Patch::Strategic(json!({"data": {"b": "2"}})),
    )
    .await
    .expect("patch");
    let got = cms.get("state").await.expect("get");
    assert_eq!(got.data.map(|d| d.len()), Some(2));

    sim.shutdown();
    let stopped = tokio::time::timeout(WAIT, async {
        loop {
            if cms.get("state").await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(stopped.is_ok(), "server still answering after shutdown");
}

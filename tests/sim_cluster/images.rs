//! The simulated kubelet's image pulls, as a real kubelet reports them: private
//! registries need a matching pull secret, images that do not exist fail with
//! `ErrImagePull` then `ImagePullBackOff`, and `status.images` lists the largest 50.

use super::*;
use base64::Engine as _;

/// The waiting reason of the first container of the pod of ReplicaSet `rs`, if any.
fn waiting_reason(sim: &SimCluster, rs: &str) -> Option<String> {
    sim.pods()
        .into_iter()
        .filter(|p| {
            p.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with(rs))
        })
        .find_map(|p| {
            p.status?
                .container_statuses?
                .first()?
                .state
                .as_ref()?
                .waiting
                .as_ref()?
                .reason
                .clone()
        })
}

fn running(sim: &SimCluster, rs: &str) -> bool {
    sim.pods().iter().any(|p| {
        p.metadata
            .name
            .as_deref()
            .is_some_and(|n| n.starts_with(rs))
            && phase(p) == "Running"
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_private_image_pulls_only_with_a_matching_pull_secret() {
    let (sim, _client) = start().await;
    sim.add_node(SimNodeSpec::new("n1", 8 * GIB)).expect("node");
    sim.private_registry("registry.example", "robot", "s3cret");
    let b64 = base64::engine::general_purpose::STANDARD;
    let secret = |name: &str, password: &str| {
        let auth = b64.encode(format!("robot:{password}"));
        let config = json!({"auths": {"registry.example": {"auth": auth}}}).to_string();
        json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "namespace": "default"},
            "type": "kubernetes.io/dockerconfigjson",
            "data": {".dockerconfigjson": b64.encode(config)}})
    };
    sim.add_object(secret("wrong", "guess")).expect("secret");
    sim.add_object(secret("right", "s3cret")).expect("secret");
    let template = |secrets: serde_json::Value| {
        SimPodTemplate::new("registry.example/team/app:1", GIB)
            .spec_field("imagePullSecrets", secrets)
    };
    sim.add_replicaset("default", "none", 1, template(json!([])))
        .expect("rs");
    sim.add_replicaset(
        "default",
        "wrong",
        1,
        template(json!([{"name": "wrong"}, {"name": "absent"}])),
    )
    .expect("rs");
    common::wait_for(
        "pulls refused without credentials",
        Duration::from_secs(10),
        || {
            waiting_reason(&sim, "none-").as_deref() == Some("ErrImagePull")
                && waiting_reason(&sim, "wrong-").as_deref() == Some("ErrImagePull")
        },
    )
    .await;
    assert!(!running(&sim, "none-") && !running(&sim, "wrong-"));
    assert!(!sim
        .node_images("n1")
        .contains("registry.example/team/app:1"));
    sim.add_replicaset("default", "right", 1, template(json!([{"name": "right"}])))
        .expect("rs");
    common::wait_for(
        "the pod with the right secret runs",
        Duration::from_secs(10),
        || running(&sim, "right-"),
    )
    .await;
    assert!(sim
        .node_images("n1")
        .contains("registry.example/team/app:1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_that_does_not_exist_fails_with_err_image_pull_then_backs_off() {
    let (sim, _client) = start().await;
    sim.add_node(SimNodeSpec::new("n1", 8 * GIB)).expect("node");
    sim.missing_image("registry.example/ghost:404");
    sim.add_replicaset(
        "default",
        "ghost",
        1,
        SimPodTemplate::new("registry.example/ghost:404", GIB),
    )
    .expect("rs");
    common::wait_for("ErrImagePull", Duration::from_secs(10), || {
        waiting_reason(&sim, "ghost-").as_deref() == Some("ErrImagePull")
    })
    .await;
    // The kubelet tries again after 10 s, and shows the back-off from then on.
    common::wait_for("ImagePullBackOff", Duration::from_secs(20), || {
        waiting_reason(&sim, "ghost-").as_deref() == Some("ImagePullBackOff")
    })
    .await;
    let pod = sim
        .pods()
        .into_iter()
        .find(|p| {
            p.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with("ghost-"))
        })
        .expect("pod");
    assert_eq!(phase(&pod), "Pending");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_lists_its_50_largest_images_largest_first() {
    let (sim, _client) = start().await;
    let mut spec = SimNodeSpec::new("n1", 8 * GIB);
    spec.images = (0..60)
        .map(|i| format!("registry.example/tool-{i}:1"))
        .collect();
    sim.add_node(spec).expect("node");
    let node = sim.node("n1").expect("node");
    let listed = node.status.and_then(|s| s.images).unwrap_or_default();
    assert_eq!(listed.len(), 50);
    let sizes: Vec<i64> = listed.iter().filter_map(|i| i.size_bytes).collect();
    let mut sorted = sizes.clone();
    sorted.sort_by(|a, b| b.cmp(a));
    assert_eq!(sizes, sorted, "largest first");
    assert_eq!(sim.node_images("n1").len(), 60, "the node keeps them all");
}

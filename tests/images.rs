//! Image warming over real loopback HTTP against the simulated API server, kubelets and
//! OpenStack (issue 30): a private image is warmed with its pods' pull secret, an image
//! that cannot be pulled makes no puller loop while the rest is warmed, a node whose
//! image listing is full gets no puller for images it has, and a new node is warmed
//! while it still carries the startup taint.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use base64::Engine as _;
use k8s_openapi::api::core::v1::{Node, Pod, Secret};
use k8s_openapi::ByteString;
use kube::api::{Api, PostParams};
use nodewright::model::{ANNOTATION_UNPULLABLE_IMAGES, LABEL_IMAGE_PULLER, STARTUP_TAINT_KEY};
use nodewright::run::Reconciler;
use nodewright::sim::cluster::SimPodTemplate;
use nodewright::sim::env::{SimEnv, SimTimings};
use nodewright_testkit as common;
use serde_json::json;

const GI: u64 = 1 << 30;

fn config(min_size: u32) -> String {
    format!(
        r#"clusterName: img
freeMemoryTarget: 0 B
provisionTimeout: 60s
scanInterval: 200ms
scaleDown: {{enabled: false}}
nodeGroups:
  - name: workers
    provider: openstack
    minSize: {min_size}
    maxSize: 4
    openstack: {{flavor: m1.large, image: ubuntu-24.04, network: private}}
    userData:
      template: k3s-agent.cloud-init.yaml.j2
      variables: {{k3s_url: "https://192.0.2.1:6443", k3s_token: "img-secret-token"}}
"#
    )
}

async fn setup(min_size: u32, timings: SimTimings) -> (SimEnv, Reconciler) {
    let env = SimEnv::start(None, timings)
        .await
        .expect("simulated environment starts");
    let rec = common::reconciler_for(&env, &config(min_size)).await;
    (env, rec)
}

fn workers(env: &SimEnv) -> Vec<Node> {
    env.cluster
        .nodes()
        .into_iter()
        .filter(|n| {
            n.metadata
                .name
                .as_deref()
                .is_some_and(|m| m.starts_with("img-"))
        })
        .collect()
}

fn name(n: &Node) -> String {
    n.metadata.name.clone().unwrap_or_default()
}

/// Image puller pods now: (uid, node, images).
fn pullers(env: &SimEnv) -> Vec<(String, String, Vec<String>)> {
    env.cluster
        .pods()
        .into_iter()
        .filter(|p| {
            p.metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key(LABEL_IMAGE_PULLER))
        })
        .map(|p: Pod| {
            let spec = p.spec.unwrap_or_default();
            let images = spec
                .containers
                .into_iter()
                .filter_map(|c| c.image)
                .collect();
            (
                p.metadata.uid.unwrap_or_default(),
                spec.node_name.unwrap_or_default(),
                images,
            )
        })
        .collect()
}

/// Runs cycles until `done`; `watch` sees the world after each.
async fn drive(
    env: &SimEnv,
    rec: &Reconciler,
    timeout: Duration,
    watch: impl FnMut(&SimEnv),
    done: impl Fn(&SimEnv) -> bool,
) {
    common::drive(env, rec, timeout, watch, done, |env| {
        let nodes: Vec<(String, BTreeSet<String>)> = workers(env)
            .iter()
            .map(|n| (name(n), env.cluster.node_images(&name(n))))
            .collect();
        format!(
            "nodes and their images: {nodes:?}\npullers: {:?}",
            pullers(env)
        )
    })
    .await;
}

/// A `kubernetes.io/dockerconfigjson` Secret granting `user`:`password` on `host`.
fn pull_secret(name: &str, host: &str, user: &str, password: &str) -> Secret {
    let b64 = base64::engine::general_purpose::STANDARD;
    let auth = b64.encode(format!("{user}:{password}"));
    let config = json!({"auths": {host: {"auth": auth}}}).to_string();
    Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        type_: Some("kubernetes.io/dockerconfigjson".into()),
        data: Some(BTreeMap::from([(
            ".dockerconfigjson".to_string(),
            ByteString(config.into_bytes()),
        )])),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_private_image_is_warmed_with_the_pull_secret_of_its_pods() {
    let (env, rec) = setup(2, SimTimings::default()).await;
    env.cluster
        .private_registry("registry.example", "robot", "s3cret");
    let client = env.cluster.kube_client().await.expect("client");
    // The Secret the pods name, in their namespace, and under the same name in
    // nodewright's namespace, where the pullers run (see README: image warming).
    for ns in ["default", "nodewright"] {
        Api::<Secret>::namespaced(client.clone(), ns)
            .create(
                &PostParams::default(),
                &pull_secret("regcred", "registry.example", "robot", "s3cret"),
            )
            .await
            .expect("secret created");
    }
    let image = "registry.example/team/app:1";
    env.cluster
        .add_replicaset(
            "default",
            "app",
            1,
            SimPodTemplate::new(image, GI)
                .spec_field("imagePullSecrets", json!([{"name": "regcred"}])),
        )
        .expect("replicaset");
    let mut puller_nodes = BTreeSet::new();
    drive(
        &env,
        &rec,
        Duration::from_secs(40),
        |env| {
            for (_, node, images) in pullers(env) {
                if images.iter().any(|i| i.contains("team/app")) {
                    puller_nodes.insert(node);
                }
            }
        },
        |env| {
            let ws = workers(env);
            ws.len() == 2
                && ws
                    .iter()
                    .all(|n| env.cluster.node_images(&name(n)).contains(image))
        },
    )
    .await;
    // The node without the app's pod has it from a puller, not from the pod.
    assert!(!puller_nodes.is_empty(), "no puller pulled {image}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unpullable_image_makes_no_puller_loop_and_other_images_and_nodes_are_warmed() {
    let (env, rec) = setup(3, SimTimings::default()).await;
    env.cluster.missing_image("registry.example/ghost:404");
    for (rs, image) in [
        ("ghost", "registry.example/ghost:404"),
        ("web", "nginx:1.25"),
    ] {
        env.cluster
            .add_replicaset("default", rs, 1, SimPodTemplate::new(image, GI))
            .expect("replicaset");
    }
    // Every puller ever made with the ghost image, and on which node.
    let mut ghost_pullers: BTreeMap<String, String> = BTreeMap::new();
    drive(
        &env,
        &rec,
        Duration::from_secs(40),
        |env| {
            for (uid, node, images) in pullers(env) {
                if images.iter().any(|i| i.contains("ghost")) {
                    ghost_pullers.insert(uid, node);
                }
            }
        },
        |env| {
            let ws = workers(env);
            ws.len() == 3
                && ws.iter().all(|n| {
                    env.cluster
                        .node_images(&name(n))
                        .iter()
                        .any(|i| i.contains("nginx:1.25"))
                })
        },
    )
    .await;
    // Some more cycles: a loop would make the ghost's puller again.
    let before = ghost_pullers.len();
    for _ in 0..20 {
        rec.cycle(std::time::SystemTime::now())
            .await
            .expect("cycle succeeds");
        for (uid, node, images) in pullers(&env) {
            if images.iter().any(|i| i.contains("ghost")) {
                ghost_pullers.insert(uid, node);
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        ghost_pullers.len(),
        before,
        "pullers for the unpullable image made again: {ghost_pullers:?}"
    );
    let nodes: BTreeSet<&String> = ghost_pullers.values().collect();
    assert_eq!(
        nodes.len(),
        ghost_pullers.len(),
        "a node got the unpullable image twice: {ghost_pullers:?}"
    );
    let recorded = workers(&env).iter().any(|n| {
        n.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANNOTATION_UNPULLABLE_IMAGES))
            .is_some_and(|v| v.contains("registry.example/ghost:404"))
    });
    assert!(recorded, "the unpullable image is recorded on no node");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_with_60_images_gets_no_puller_for_images_it_has() {
    let (env, rec) = setup(1, SimTimings::default()).await;
    // One pod of 60 containers, each of its own image: its node holds 60 images and
    // lists the largest 50.
    let containers: Vec<serde_json::Value> = (0..60)
        .map(|i| {
            let mut c =
                json!({"name": format!("c{i}"), "image": format!("registry.example/tool-{i}:1")});
            if i == 0 {
                c["resources"] = json!({"requests": {"memory": GI.to_string()}});
            }
            c
        })
        .collect();
    env.cluster
        .add_replicaset(
            "default",
            "many",
            1,
            SimPodTemplate::new("unused", 0).spec_field("containers", json!(containers)),
        )
        .expect("replicaset");
    let running = |env: &SimEnv| {
        env.cluster.pods().iter().any(|p| {
            p.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with("many-"))
                && common::phase(p) == "Running"
        })
    };
    let mut puller_nodes: BTreeSet<String> = BTreeSet::new();
    drive(
        &env,
        &rec,
        Duration::from_secs(30),
        |_| {},
        |env| running(env),
    )
    .await;
    let node = workers(&env).first().map(name).expect("a worker");
    assert_eq!(env.cluster.node_images(&node).len(), 60);
    let listed = workers(&env)[0]
        .status
        .as_ref()
        .and_then(|s| s.images.as_ref())
        .map_or(0, Vec::len);
    assert_eq!(listed, 50, "the kubelet lists 50 images");
    // Pullers made before the pod ran (the node was warmed while it joined) are not
    // what this is about: only new ones from now on.
    let earlier: BTreeSet<String> = pullers(&env).into_iter().map(|(uid, _, _)| uid).collect();
    for _ in 0..20 {
        rec.cycle(std::time::SystemTime::now())
            .await
            .expect("cycle succeeds");
        puller_nodes.extend(
            pullers(&env)
                .into_iter()
                .filter(|(uid, _, _)| !earlier.contains(uid))
                .map(|(_, n, _)| n),
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        puller_nodes.is_empty(),
        "pullers made on {puller_nodes:?} for images the node has"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_node_is_warmed_under_its_startup_taint() {
    let timings = SimTimings {
        node_ready_delay: Duration::from_secs(3),
        ..SimTimings::default()
    };
    let (env, rec) = setup(1, timings).await;
    env.cluster
        .add_replicaset("default", "web", 1, SimPodTemplate::new("nginx:1.25", GI))
        .expect("replicaset");
    // Pullers seen bound to a node that still carried the startup taint.
    let mut under_taint = BTreeSet::new();
    drive(
        &env,
        &rec,
        Duration::from_secs(30),
        |env| {
            let tainted: BTreeSet<String> = workers(env)
                .iter()
                .filter(|n| common::has_startup_taint(n))
                .map(name)
                .collect();
            for (_, node, _) in pullers(env) {
                if tainted.contains(&node) {
                    under_taint.insert(node);
                }
            }
        },
        |env| {
            workers(env).iter().any(|n| {
                !common::has_startup_taint(n)
                    && env
                        .cluster
                        .node_images(&name(n))
                        .iter()
                        .any(|i| i.contains("nginx:1.25"))
            })
        },
    )
    .await;
    assert!(
        !under_taint.is_empty(),
        "no puller was made while the node carried {STARTUP_TAINT_KEY}"
    );
}

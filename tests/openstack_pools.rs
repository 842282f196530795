//! Warm pools on the simulated OpenStack over loopback HTTP, the whole loop (plan and
//! act) against the simulated API server. Nova boots a server at create and runs its
//! user data then, so a pool server joins once, is stopped (`os-stop`) once its Node is
//! Ready and its Node deleted; a scale-up `os-start`s it and its kubelet registers again.

mod common;

use std::time::Duration;

use common::{act_until, act_until_placed, cordon_patch, env_with_config, reconciler_for};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use nodewright::plan::Action;
use nodewright::reconcile::Reconciler;
use nodewright::sim::cluster::SimPodTemplate;
use nodewright::sim::env::SimEnv;
use nodewright::sim::openstack::SimServer;

const GI: u64 = 1 << 30;

fn config(flavor: &str, max: u32, size: u32, mode: &str) -> String {
    format!(
        r#"clusterName: prod
freeMemoryTarget: 0 B
scaleDown: {{mode: {mode}}}
nodeGroups:
  - name: os
    provider: openstack
    maxSize: {max}
    warmPool: {{size: {size}}}
    openstack: {{flavor: {flavor}, image: ubuntu-24.04, network: private}}
    userData:
      template: k3s-agent.cloud-init.yaml.j2
      variables: {{k3s_url: "https://192.0.2.1:6443", k3s_token: "pool-secret-token"}}
"#
    )
}

fn warm_mark(s: &SimServer) -> Option<&str> {
    s.metadata.get("nodewright-warm").map(String::as_str)
}

fn server(env: &SimEnv, name: &str) -> SimServer {
    env.cloud
        .servers()
        .into_iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("server {name}"))
}

/// `POST /servers` calls so far: creates.
fn creates(env: &SimEnv) -> usize {
    env.cloud
        .calls()
        .iter()
        .filter(|c| c.method == "POST" && c.path == "/compute/v2.1/servers")
        .count()
}

/// Fills the pool of one and waits until its server is parked: the name.
async fn filled_and_parked(env: &SimEnv, rec: &Reconciler) -> String {
    act_until(rec, "pool fill", |a| {
        matches!(a, Action::FillWarmPool { count: 1, .. })
    })
    .await;
    let servers = env.cloud.servers();
    assert_eq!(servers.len(), 1);
    let name = servers[0].name.clone();
    assert_eq!(warm_mark(&servers[0]), Some("filling"));
    let acted = act_until(rec, "the fill parked", |a| {
        matches!(a, Action::ParkWarm { .. })
    })
    .await;
    let Some(Action::ParkWarm { servers }) = acted.last().map(|d| &d.action) else {
        unreachable!("until returns on ParkWarm")
    };
    assert_eq!(servers.len(), 1);
    assert_eq!(servers[0].name, name);
    let s = server(env, &name);
    assert_eq!(
        (s.status.as_str(), warm_mark(&s)),
        ("SHUTOFF", Some("parked"))
    );
    assert!(env.cluster.node(&name).is_none(), "its Node is deleted");
    name
}

/// The stop reached the VM while its Node still existed: the VM went first.
fn stopped_before_its_node_went(env: &SimEnv, name: &str) -> bool {
    env.vm_log
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .any(|e| !e.booted && e.name == name && e.node_existed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scale_up_starts_a_parked_server_without_a_create_and_the_pool_refills() {
    let (env, rec) = env_with_config(&config("m1.large", 3, 1, "delete")).await;
    let name = filled_and_parked(&env, &rec).await;
    assert!(stopped_before_its_node_went(&env, &name));

    env.cluster
        .add_pod("default", "waits", SimPodTemplate::new("nginx:1.25", GI))
        .expect("pod");
    let before = creates(&env);
    let acted = act_until(&rec, "start of the parked server", |a| {
        matches!(a, Action::StartWarm { .. })
    })
    .await;
    let Some(Action::StartWarm { servers, .. }) = acted.last().map(|d| &d.action) else {
        unreachable!("until returns on StartWarm")
    };
    assert_eq!(servers.len(), 1);
    assert_eq!(servers[0].name, name);
    assert_eq!(creates(&env), before, "a warm start makes no create");
    let started = server(&env, &name);
    assert_eq!(warm_mark(&started), None, "out of the pool");
    assert!(started.metadata.contains_key("nodewright-started"));
    assert!(env
        .cloud
        .calls()
        .iter()
        .any(|c| c.method == "POST" && c.path.ends_with("/action")));

    // Its kubelet registers again; the pod lands there; the pool refills.
    act_until(&rec, "pool refill", |a| {
        matches!(a, Action::FillWarmPool { count: 1, .. })
    })
    .await;
    assert_eq!(creates(&env), before + 1);
    act_until_placed(&rec, &env, "waits", &name).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filling_server_is_never_capacity_and_never_started() {
    let (env, rec) = env_with_config(&config("m1.large", 3, 1, "delete")).await;
    act_until(&rec, "pool fill", |a| {
        matches!(a, Action::FillWarmPool { count: 1, .. })
    })
    .await;
    let fill = env.cloud.servers()[0].name.clone();
    env.cluster
        .add_pod("default", "waits", SimPodTemplate::new("nginx:1.25", GI))
        .expect("pod");
    // The pod gets a server of its own: created, as the pool has no parked server yet.
    let acted = act_until(&rec, "a scale-up", |a| {
        matches!(a, Action::ScaleUp { .. } | Action::StartWarm { .. })
    })
    .await;
    assert!(
        matches!(
            acted.last().map(|d| &d.action),
            Some(Action::ScaleUp { .. })
        ),
        "{acted:#?}"
    );
    let other = env
        .cloud
        .servers()
        .into_iter()
        .find(|s| s.name != fill)
        .expect("the new server")
        .name;
    let acted = act_until_placed(&rec, &env, "waits", &other).await;
    assert!(
        acted
            .iter()
            .all(|d| !matches!(&d.action, Action::StartWarm { .. })),
        "{acted:#?}"
    );
    assert!(env.cluster.pods_on(&fill).is_empty(), "no pod on the fill");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_down_mode_stop_parks_the_server_of_a_removed_node() {
    // maxSize 1: once the parked server runs, the pool has no room to refill.
    let (env, rec) = env_with_config(&config("m1.large", 1, 1, "stop")).await;
    let name = filled_and_parked(&env, &rec).await;
    env.cluster
        .add_replicaset("default", "web", 1, SimPodTemplate::new("nginx:1.25", GI))
        .expect("replicaset");
    act_until(&rec, "start", |a| matches!(a, Action::StartWarm { .. })).await;
    act_until(&rec, "startup taint removed", |a| {
        matches!(a, Action::RemoveStartupTaint { .. })
    })
    .await;
    env.cluster
        .scale_replicaset("default", "web", 0)
        .expect("scale");
    common::wait_for("pods gone", Duration::from_secs(10), || {
        env.cluster.pods_on(&name).is_empty()
    })
    .await;
    let nodes: Api<Node> = Api::all(env.cluster.kube_client().await.expect("client"));
    nodes
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(cordon_patch(true)),
        )
        .await
        .expect("cordon as nodewright does");
    env.vm_log.lock().unwrap_or_else(|p| p.into_inner()).clear();

    let acted = act_until(&rec, "removal", |a| matches!(a, Action::DeleteNodes { .. })).await;
    let Some(Action::DeleteNodes { nodes: targets }) = acted.last().map(|d| &d.action) else {
        unreachable!("until returns on DeleteNodes")
    };
    assert_eq!(targets.len(), 1);
    assert!(targets[0].park, "{targets:?}");
    assert!(env.cluster.node(&name).is_none(), "the Node is deleted");
    let s = server(&env, &name);
    assert_eq!(
        (s.status.as_str(), warm_mark(&s)),
        ("SHUTOFF", Some("parked"))
    );
    assert!(stopped_before_its_node_went(&env, &name));
    assert!(!env
        .cloud
        .calls()
        .iter()
        .any(|c| c.method == "DELETE" && c.path == format!("/compute/v2.1/servers/{}", s.id)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drifted_parked_server_is_deleted_instead_of_reused() {
    let (env, rec) = env_with_config(&config("m1.large", 3, 1, "delete")).await;
    let old = filled_and_parked(&env, &rec).await;
    // New group settings (flavor): the parked server was made from the old ones.
    let rec = reconciler_for(&env, &config("m1.medium", 3, 1, "delete")).await;
    env.cluster
        .add_pod("default", "waits", SimPodTemplate::new("nginx:1.25", GI))
        .expect("pod");
    let acted = act_until(&rec, "the stale server deleted", |a| {
        matches!(a, Action::DeleteServers { .. })
    })
    .await;
    let Some(Action::DeleteServers { servers, .. }) = acted.last().map(|d| &d.action) else {
        unreachable!("until returns on DeleteServers")
    };
    assert_eq!(servers.len(), 1);
    assert_eq!(servers[0].name, old);
    assert!(acted.last().is_some_and(|d| d
        .reasons
        .iter()
        .any(|r| r.message.contains("other settings"))));
    common::wait_for("the stale server gone", Duration::from_secs(10), || {
        env.cloud.servers().iter().all(|s| s.name != old)
    })
    .await;
    let acted = act_until(&rec, "a scale-up", |a| {
        matches!(a, Action::ScaleUp { .. } | Action::StartWarm { .. })
    })
    .await;
    assert!(
        acted.iter().all(|d| !matches!(&d.action, Action::StartWarm { servers, .. } if servers.iter().any(|s| s.name == old))),
        "{acted:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nova_refuses_a_stop_of_a_stopped_server_with_409() {
    let (env, rec) = env_with_config(&config("m1.large", 3, 1, "delete")).await;
    let name = filled_and_parked(&env, &rec).await;
    let s = server(&env, &name);
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::new();
    let o = env.cloud.options();
    let resp = client
        .post(format!("{}/auth/tokens", env.cloud.auth_url()))
        .json(&serde_json::json!({ "auth": {
            "identity": { "methods": ["password"], "password": { "user": {
                "name": o.username, "domain": { "name": o.domain }, "password": o.password } } },
            "scope": { "project": { "name": o.project, "domain": { "id": "default" } } },
        } }))
        .send()
        .await
        .expect("token request");
    assert_eq!(resp.status().as_u16(), 201);
    let token = resp.headers()["x-subject-token"]
        .to_str()
        .expect("token header")
        .to_string();
    let url = format!(
        "{}/servers/{}/action",
        env.cloud
            .auth_url()
            .replace("/identity/v3", "/compute/v2.1"),
        s.id
    );
    let resp = client
        .post(&url)
        .header("X-Auth-Token", &token)
        .json(&serde_json::json!({ "os-stop": null }))
        .send()
        .await
        .expect("request");
    assert_eq!(resp.status().as_u16(), 409);
    let body: serde_json::Value = resp.json().await.expect("json");
    assert!(
        body["conflictingRequest"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("vm_state stopped")),
        "{body}"
    );
}

//! Warm pools on the simulated OpenStack over loopback HTTP, the whole loop (plan and
//! act) against the simulated API server. Nova boots a server at create and runs its
//! user data then, so a pool server joins once, is stopped (`os-stop`) once its Node is
//! Ready and its Node deleted; a scale-up `os-start`s it and its kubelet registers again.

use nodewright_testkit as common;

use common::env_with_config;
use common::pools::{self, PoolCloud, PoolVm};
use nodewright::sim::env::SimEnv;

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

const OPENSTACK: PoolCloud = PoolCloud {
    config,
    shapes: ["m1.large", "m1.medium"],
    servers,
    parked_power: "SHUTOFF",
    creates,
    started_call: |env| {
        env.cloud
            .calls()
            .iter()
            .any(|c| c.method == "POST" && c.path.ends_with("/action"))
    },
    deleted_call: |env, id| {
        env.cloud
            .calls()
            .iter()
            .any(|c| c.method == "DELETE" && c.path == format!("/compute/v2.1/servers/{id}"))
    },
};

fn servers(env: &SimEnv) -> Vec<PoolVm> {
    env.cloud
        .servers()
        .into_iter()
        .map(|s| PoolVm {
            mark: match s.metadata.get("nodewright-warm").map(String::as_str) {
                Some("filling") => Some("filling"),
                Some("parked") => Some("parked"),
                Some(_) => Some("unknown"),
                None => None,
            },
            started: s.metadata.contains_key("nodewright-started"),
            id: s.id,
            name: s.name,
            power: s.status,
        })
        .collect()
}

/// `POST /servers` calls so far: creates.
fn creates(env: &SimEnv) -> usize {
    env.cloud
        .calls()
        .iter()
        .filter(|c| c.method == "POST" && c.path == "/compute/v2.1/servers")
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scale_up_starts_a_parked_server_without_a_create_and_the_pool_refills() {
    pools::a_scale_up_starts_a_parked_server_without_a_create_and_the_pool_refills(&OPENSTACK)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filling_server_is_never_capacity_and_never_started() {
    pools::a_filling_server_is_never_capacity_and_never_started(&OPENSTACK).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_down_mode_stop_parks_the_server_of_a_removed_node() {
    pools::scale_down_mode_stop_parks_the_server_of_a_removed_node(&OPENSTACK).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drifted_parked_server_is_deleted_instead_of_reused() {
    pools::a_drifted_parked_server_is_deleted_instead_of_reused(&OPENSTACK).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nova_refuses_a_stop_of_a_stopped_server_with_409() {
    let (env, rec) = env_with_config(&OPENSTACK.config_of(3, "delete")).await;
    let name = OPENSTACK.filled_and_parked(&env, &rec).await;
    let s = OPENSTACK.server(&env, &name);
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

//! Warm pools on the simulated Kamatera over loopback HTTP, the whole loop (plan and act)
//! against the simulated API server. A pool server is created (and boots, running its
//! init script) tagged `nodewright_wfill`, joins once, is powered off once its Node is
//! Ready (tagged `nodewright_wpark`) and its Node deleted; a scale-up powers it on and its
//! kubelet registers again.

use nodewright_testkit as common;

use common::pools::{self, PoolCloud, PoolVm};
use nodewright::sim::env::SimEnv;

fn config(cpu: &str, max: u32, size: u32, mode: &str) -> String {
    format!(
        r#"clusterName: prod
freeMemoryTarget: 0 B
scaleDown: {{mode: {mode}}}
nodeGroups:
  - name: kam
    provider: kamatera
    maxSize: {max}
    warmPool: {{size: {size}}}
    kamatera: {{datacenter: EU, image: ubuntu_server_24.04_64-bit, cpu: {cpu}, ram: 8 GiB}}
    userData:
      template: k3s-agent.join.sh.j2
      variables: {{k3s_url: "https://192.0.2.1:6443", k3s_token: "pool-secret-token"}}
"#
    )
}

const KAMATERA: PoolCloud = PoolCloud {
    config,
    shapes: ["2B", "4B"],
    servers,
    parked_power: "off",
    creates,
    started_call: |env| {
        env.kamatera
            .calls()
            .iter()
            .any(|c| c.method == "POST" && c.path == "/service/server/poweron")
    },
    deleted_call: |env, _| {
        env.kamatera
            .calls()
            .iter()
            .any(|c| c.path == "/service/server/terminate")
    },
};

fn servers(env: &SimEnv) -> Vec<PoolVm> {
    env.kamatera
        .servers()
        .into_iter()
        .map(|s| PoolVm {
            // `filling` or `parked`, from the warm tags.
            mark: if s.tags.iter().any(|t| t == "nodewright_wfill") {
                Some("filling")
            } else if s.tags.iter().any(|t| t == "nodewright_wpark") {
                Some("parked")
            } else {
                None
            },
            started: s.tags.iter().any(|t| t.starts_with("nodewright_s")),
            id: s.id,
            name: s.name,
            power: s.power,
        })
        .collect()
}

/// `POST /service/server` calls so far: creates.
fn creates(env: &SimEnv) -> usize {
    env.kamatera
        .calls()
        .iter()
        .filter(|c| c.method == "POST" && c.path == "/service/server")
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scale_up_starts_a_parked_server_without_a_create_and_the_pool_refills() {
    pools::a_scale_up_starts_a_parked_server_without_a_create_and_the_pool_refills(&KAMATERA).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filling_server_is_never_capacity_and_never_started() {
    pools::a_filling_server_is_never_capacity_and_never_started(&KAMATERA).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_down_mode_stop_parks_the_server_of_a_removed_node() {
    pools::scale_down_mode_stop_parks_the_server_of_a_removed_node(&KAMATERA).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drifted_parked_server_is_deleted_instead_of_reused() {
    pools::a_drifted_parked_server_is_deleted_instead_of_reused(&KAMATERA).await;
}

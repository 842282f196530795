//! A Proxmox VM stopped or shut down takes its guest down, kubelet included: its node
//! goes Unknown once the node lifecycle controller's grace period is over; started
//! again, its kubelet starts and registers (once, at its start), Ready again.

use std::time::Duration;

use nodewright_testkit as common;

use common::pve::{self as e2e, drive, group, ready_joined};
use k8s_openapi::api::core::v1::Node;
use nodewright::sim::cluster::SimClusterOptions;
use nodewright::sim::proxmox::SimProxmoxOptions;

fn ready_status(n: &Node) -> Option<String> {
    n.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status.clone())
}

/// A call a person makes with the API token.
async fn post(pve: &nodewright::sim::proxmox::SimProxmox, path: &str) {
    let o = pve.options();
    let answer = common::proxmox_client(pve)
        .post(format!("{}/api2/json{path}", pve.url()))
        .header(
            "Authorization",
            format!("PVEAPIToken={}={}", o.token_id, o.token_secret),
        )
        .send()
        .await
        .expect("the simulated Proxmox answers");
    assert!(answer.status().is_success(), "{path}: {}", answer.status());
}

async fn stopping_the_vm_stops_its_kubelet(action: &str, settings: &str) {
    let env = e2e::env_with_cluster(
        SimProxmoxOptions::default(),
        SimClusterOptions {
            node_ready_delay: Duration::from_millis(200),
            node_monitor_grace_period: Duration::from_secs(2),
            ..SimClusterOptions::default()
        },
    )
    .await;
    let rec = e2e::reconciler(&env, &group("pve", 1, settings)).await;
    let cluster = env.cluster.clone();
    drive(&rec, Duration::from_secs(60), || {
        cluster.nodes().iter().any(|n| {
            n.metadata
                .name
                .as_deref()
                .is_some_and(|m| m.starts_with("e2e-"))
                && ready_joined(n)
        })
    })
    .await;
    drop(rec);
    let vm = env
        .pve
        .vms()
        .into_iter()
        .find(|v| v.name.starts_with("e2e-"))
        .expect("the group's VM");
    let node_path = format!("/nodes/{}/qemu/{}", vm.node, vm.vmid);
    let uid = env
        .cluster
        .node(&vm.name)
        .and_then(|n| n.metadata.uid)
        .expect("its Node");
    post(&env.pve, &format!("{node_path}/status/{action}")).await;
    let name = vm.name.clone();
    assert!(
        env.cluster
            .wait_until(
                |c| c.node(&name).and_then(|n| ready_status(&n)).as_deref() == Some("Unknown"),
                Duration::from_secs(20)
            )
            .await,
        "the node of a {action} VM never went Unknown: {:?}",
        env.cluster.node(&name)
    );
    post(&env.pve, &format!("{node_path}/status/start")).await;
    assert!(
        env.cluster
            .wait_until(
                |c| c.node(&name).and_then(|n| ready_status(&n)).as_deref() == Some("True"),
                Duration::from_secs(20)
            )
            .await,
        "started again, its kubelet never registered: {:?}",
        env.cluster.node(&name)
    );
    // The same Node object: the kubelet registered against the one there.
    assert_eq!(
        env.cluster.node(&name).and_then(|n| n.metadata.uid),
        Some(uid)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_proxmox_vm_takes_its_node_down_and_its_start_brings_it_back() {
    stopping_the_vm_stops_its_kubelet("stop", "{template: k3s-shared}").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shut_down_guest_agent_vm_takes_its_node_down_and_its_start_brings_it_back() {
    stopping_the_vm_stops_its_kubelet("shutdown", "{template: agent-shared, join: guestAgent}")
        .await;
}

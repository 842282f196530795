//! The node lifecycle controller's grace period: a node whose kubelet stopped posting
//! (its VM stopped or deleted) turns Unknown only once `--node-monitor-grace-period` is
//! over, not at once.

use super::*;

fn ready_status(sim: &SimCluster, node: &str) -> Option<String> {
    sim.node(node)?
        .status?
        .conditions?
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_node_turns_unknown_only_after_the_node_monitor_grace_period() {
    // The real default since Kubernetes 1.32; this test shortens it.
    assert_eq!(
        SimClusterOptions::default().node_monitor_grace_period,
        Duration::from_secs(50)
    );
    let (sim, _client) = start_with(SimClusterOptions {
        node_monitor_grace_period: Duration::from_secs(3),
        ..SimClusterOptions::default()
    })
    .await;
    sim.add_node(SimNodeSpec::new("n1", 8 * GIB)).expect("node");
    sim.add_pod("default", "app", SimPodTemplate::new("nginx:1.27", GIB))
        .expect("pod");
    assert!(
        sim.wait_until(
            |s| s
                .pod("default", "app")
                .is_some_and(|p| phase(&p) == "Running"),
            WAIT
        )
        .await
    );
    (sim.vm_hook())(VmEvent::Stopped { name: "n1".into() });
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        ready_status(&sim, "n1").as_deref(),
        Some("True"),
        "Unknown within the grace period"
    );
    assert!(
        sim.wait_until(
            |s| ready_status(s, "n1").as_deref() == Some("Unknown"),
            WAIT
        )
        .await
    );
    let pod_ready = sim
        .pod("default", "app")
        .and_then(|p| p.status)
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status);
    assert_eq!(pod_ready.as_deref(), Some("False"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vm_started_again_within_the_grace_period_never_turns_unknown() {
    let (sim, _client) = start_with(SimClusterOptions {
        node_monitor_grace_period: Duration::from_secs(2),
        ..SimClusterOptions::default()
    })
    .await;
    let hook = sim.vm_hook();
    let boot = || VmEvent::Booted {
        name: "vm-1".into(),
        user_data: "#!/bin/sh\nk3s agent --node-label=a=b\n".into(),
        memory_bytes: 2 * GIB,
        cpus: 1,
    };
    hook(boot());
    assert!(
        sim.wait_until(|s| ready_status(s, "vm-1").as_deref() == Some("True"), WAIT)
            .await
    );
    hook(VmEvent::Stopped {
        name: "vm-1".into(),
    });
    hook(boot());
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(ready_status(&sim, "vm-1").as_deref(), Some("True"));
}

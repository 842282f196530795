//! The lost-Node tests every provider shares, the whole loop over loopback HTTP: a VM
//! whose node joined loses its Node (`kubectl delete node`); a kubelet registers only
//! when it starts, so nodewright restarts the VM once, the restart recorded on the VM.
//! Each test file describes its cloud in a [`LostNodeCloud`] and calls these.

use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use nodewright_core::plan::{Action, ReasonCode};
use nodewright_core::run::Reconciler;
use nodewright_sim::cluster::SimPodTemplate;
use nodewright_sim::env::SimEnv;

use super::{app_pods, env_with_config, has_startup_taint, phase, ready};

/// The `provisionTimeout` of [`LostNodeCloud::config`]: how long a restarted VM is waited
/// on for its Node.
pub const PROVISION_TIMEOUT: Duration = Duration::from_secs(600);

/// What the shared tests need to know of one simulated cloud.
pub struct LostNodeCloud {
    /// The config of one group `g` of cluster `prod`, `minSize: 2`, `provisionTimeout:
    /// 10m`, with user data that joins. Two nodes: with none of ours in view at all, the
    /// view looks wrong (a blind API server) and nothing is restarted.
    pub config: &'static str,
    /// The VMs of the cloud: (id, name).
    pub vms: fn(&SimEnv) -> Vec<(String, String)>,
    /// Restart (reboot) calls the cloud took so far.
    pub restarts: fn(&SimEnv) -> usize,
    /// Whether VM `name` carries nodewright's restart mark.
    pub restart_mark: fn(&SimEnv, &str) -> bool,
    /// Delete calls the cloud took so far.
    pub deletes: fn(&SimEnv) -> usize,
    /// Stop (power-off) calls the cloud took so far.
    pub stops: fn(&SimEnv) -> usize,
    /// Whether VM `name` carries nodewright's fence mark (stopped for its unreachable
    /// node's data).
    pub fence_mark: fn(&SimEnv, &str) -> bool,
}

/// Cycles (plan and act) until `done`, at most 30 s; every decision acted on.
async fn cycle_until(
    rec: &Reconciler,
    what: &str,
    mut done: impl FnMut() -> bool,
) -> Vec<nodewright_core::plan::Decision> {
    let start = Instant::now();
    let mut acted = Vec::new();
    while !done() {
        let report = rec.cycle(SystemTime::now()).await.expect("cycle");
        acted.push(report.decision);
        let actions: Vec<String> = acted
            .iter()
            .map(|d| d.action.to_string())
            .filter(|a| a != "nothing to do")
            .collect();
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no {what}; acted: {actions:#?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    acted
}

async fn delete_node(env: &SimEnv, name: &str) {
    let nodes: Api<Node> = Api::all(env.cluster.kube_client().await.expect("client"));
    nodes
        .delete(name, &Default::default())
        .await
        .expect("kubectl delete node");
}

/// Cycles until one decides nothing: every joined mark written, nothing in flight.
async fn settle(rec: &Reconciler) {
    let start = Instant::now();
    loop {
        let report = rec.cycle(SystemTime::now()).await.expect("cycle");
        if report.decision.action == Action::None {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "never settled: {}",
            report.decision.action
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn in_service(env: &SimEnv, name: &str) -> bool {
    env.cluster
        .node(name)
        .is_some_and(|n| ready(&n) && !has_startup_taint(&n))
}

/// A VM whose node joined loses its Node: it is restarted once and its Node comes back
/// (the restart mark taken off); it loses it again, is restarted again, and its Node,
/// registered at the restart, is deleted before it is let in: waited on, never restarted
/// a third time, reported past `provisionTimeout` after the restart, and never deleted.
pub async fn a_joined_vm_whose_node_is_gone_is_restarted_once_then_reported_never_deleted(
    c: &LostNodeCloud,
) {
    let (env, rec) = env_with_config(c.config).await;
    cycle_until(&rec, "two nodes in service", || {
        let vms = (c.vms)(&env);
        vms.len() == 2 && vms.iter().all(|(_, n)| in_service(&env, n))
    })
    .await;
    settle(&rec).await;
    let vms = (c.vms)(&env);
    assert_eq!(vms.len(), 2, "{vms:?}");
    let (id, name) = vms[0].clone();
    let vm_there = |env: &SimEnv| (c.vms)(env).iter().any(|(i, _)| *i == id);

    // Lost once: restarted, and its kubelet registers the Node at its start.
    delete_node(&env, &name).await;
    let acted = cycle_until(&rec, "restart", || (c.restarts)(&env) == 1).await;
    assert!(
        acted.iter().any(|d| matches!(&d.action,
            Action::RestartVanished { servers, .. } if servers.iter().any(|s| s.id == id))),
        "{acted:#?}"
    );
    assert!(
        (c.restart_mark)(&env, &name),
        "the restart is recorded on the VM"
    );
    cycle_until(&rec, "the Node back and the restart mark off", || {
        in_service(&env, &name) && !(c.restart_mark)(&env, &name)
    })
    .await;
    assert_eq!((c.restarts)(&env), 1);

    // Lost again: a new loss, so restarted again, once.
    delete_node(&env, &name).await;
    cycle_until(&rec, "second restart", || (c.restarts)(&env) == 2).await;
    assert!((c.restart_mark)(&env, &name));
    // Its Node registers at the restart and is deleted before it is let in.
    let start = Instant::now();
    while env.cluster.node(&name).is_none() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no Node after the restart"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    delete_node(&env, &name).await;
    // Waited on within provisionTimeout of the restart, then reported; never restarted
    // a third time, never deleted.
    let mut lost_noted = false;
    for i in 0..20u64 {
        let later = if i < 10 {
            SystemTime::now()
        } else {
            SystemTime::now() + PROVISION_TIMEOUT + Duration::from_secs(i)
        };
        let report = rec.cycle(later).await.expect("cycle");
        let d = &report.decision;
        assert!(
            !matches!(
                &d.action,
                Action::RestartVanished { .. } | Action::DeleteServers { .. }
            ),
            "{d:#?}"
        );
        let lost = d
            .notes
            .iter()
            .any(|n| n.code == ReasonCode::NodeLostAfterRestart && n.message.contains(&name));
        assert_eq!(lost, i >= 10, "cycle {i}: {:#?}", d.notes);
        lost_noted |= lost;
        assert!(vm_there(&env), "VM {name} deleted: {d:#?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(lost_noted);
    assert_eq!((c.restarts)(&env), 2, "restarted once per loss");
    assert_eq!((c.deletes)(&env), 0, "a delete was sent");
    assert!(env.cluster.node(&name).is_none());
}

/// Issue 29, item 5, the part a user asks for: with `unreachableWithLocalData: stop`, a
/// node NotReady past `health.unhealthyAfter` whose pod keeps data on a `local-path`
/// volume has its VM stopped, once, the stop recorded on the VM; the VM, its Node, the
/// pod and the volume all stay, through an hour of later cycles.
pub async fn item_5_a_not_ready_node_holding_local_data_has_its_vm_stopped_once_never_deleted(
    c: &LostNodeCloud,
) {
    let config = c.config.replace(
        "    minSize: 2\n",
        "    minSize: 2\n    unreachableWithLocalData: stop\n",
    );
    assert_ne!(config, c.config, "the group's minSize line moved");
    let (env, rec) = env_with_config(&config).await;
    cycle_until(&rec, "two nodes in service", || {
        (c.vms)(&env)
            .iter()
            .filter(|(_, n)| in_service(&env, n))
            .count()
            == 2
    })
    .await;
    settle(&rec).await;
    env.cluster
        .add_claim("default", "db-data", None, "1Gi")
        .expect("claim");
    env.cluster
        .add_replicaset(
            "default",
            "db",
            1,
            SimPodTemplate::new("postgres:16", 1 << 30).claim("data", "db-data"),
        )
        .expect("db");
    super::wait_for("db running", Duration::from_secs(20), || {
        app_pods(&env, "db").iter().any(|p| phase(p) == "Running")
    })
    .await;
    let pod = app_pods(&env, "db").remove(0);
    let node = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .expect("db is bound");
    env.cluster
        .set_node_ready(&node, false)
        .expect("the node stops reporting");
    let (stops, deletes) = ((c.stops)(&env), (c.deletes)(&env));
    // Six cycles, 20 minutes apart: past health.unhealthyAfter (15m) from the first.
    let start = SystemTime::now();
    let mut stopped_by = Vec::new();
    for i in 1..=6u32 {
        let report = rec
            .cycle(start + Duration::from_secs(1200) * i)
            .await
            .expect("cycle");
        if let Action::StopUnreachable { servers, .. } = &report.decision.action {
            stopped_by.extend(servers.iter().map(|s| s.name.clone()));
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    assert_eq!(
        stopped_by,
        vec![node.clone()],
        "stopped once, this VM alone"
    );
    assert_eq!((c.stops)(&env) - stops, 1, "one stop call");
    assert!(
        (c.fence_mark)(&env, &node),
        "the stop is recorded on the VM"
    );
    assert_eq!((c.deletes)(&env), deletes, "nothing deleted");
    assert!(
        (c.vms)(&env).iter().any(|(_, n)| *n == node),
        "the VM stays"
    );
    assert!(env.cluster.node(&node).is_some(), "the Node stays");
    assert!(
        app_pods(&env, "db")
            .iter()
            .any(|p| p.metadata.name == pod.metadata.name),
        "the pod stays"
    );
}

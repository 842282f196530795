//! Warm pools on the simulated Kamatera over loopback HTTP, the whole loop (plan and act)
//! against the simulated API server. A pool server is created (and boots, running its
//! init script) tagged `nodewright_wfill`, joins once, is powered off once its Node is
//! Ready (tagged `nodewright_wpark`) and its Node deleted; a scale-up powers it on and its
//! kubelet registers again.

mod common;

use std::time::Duration;

use common::{act_until, act_until_placed, cordon_patch, env_with_config, reconciler_for};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use nodewright::plan::Action;
use nodewright::reconcile::Reconciler;
use nodewright::sim::cluster::SimPodTemplate;
use nodewright::sim::env::SimEnv;
use nodewright::sim::kamatera::SimServer;

const GI: u64 = 1 << 30;

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

/// `filling` or `parked`, from the warm tags.
fn warm_mark(s: &SimServer) -> Option<&str> {
    if s.tags.iter().any(|t| t == "nodewright_wfill") {
        Some("filling")
    } else if s.tags.iter().any(|t| t == "nodewright_wpark") {
        Some("parked")
    } else {
        None
    }
}

fn server(env: &SimEnv, name: &str) -> SimServer {
    env.kamatera
        .servers()
        .into_iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("server {name}"))
}

/// `POST /service/server` calls so far: creates.
fn creates(env: &SimEnv) -> usize {
    env.kamatera
        .calls()
        .iter()
        .filter(|c| c.method == "POST" && c.path == "/service/server")
        .count()
}

/// Fills the pool of one and waits until its server is parked: the name.
async fn filled_and_parked(env: &SimEnv, rec: &Reconciler) -> String {
    act_until(rec, "pool fill", |a| {
        matches!(a, Action::FillWarmPool { count: 1, .. })
    })
    .await;
    let servers = env.kamatera.servers();
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
    assert_eq!((s.power.as_str(), warm_mark(&s)), ("off", Some("parked")));
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
    let (env, rec) = env_with_config(&config("2B", 3, 1, "delete")).await;
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
    assert!(started.tags.iter().any(|t| t.starts_with("nodewright_s")));
    assert!(env
        .kamatera
        .calls()
        .iter()
        .any(|c| c.method == "POST" && c.path == "/service/server/poweron"));

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
    let (env, rec) = env_with_config(&config("2B", 3, 1, "delete")).await;
    act_until(&rec, "pool fill", |a| {
        matches!(a, Action::FillWarmPool { count: 1, .. })
    })
    .await;
    let fill = env.kamatera.servers()[0].name.clone();
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
        .kamatera
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
    let (env, rec) = env_with_config(&config("2B", 1, 1, "stop")).await;
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
    assert_eq!((s.power.as_str(), warm_mark(&s)), ("off", Some("parked")));
    assert!(stopped_before_its_node_went(&env, &name));
    assert!(!env
        .kamatera
        .calls()
        .iter()
        .any(|c| c.path == "/service/server/terminate"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drifted_parked_server_is_deleted_instead_of_reused() {
    let (env, rec) = env_with_config(&config("2B", 3, 1, "delete")).await;
    let old = filled_and_parked(&env, &rec).await;
    // New group settings (CPU): the parked server was made from the old ones.
    let rec = reconciler_for(&env, &config("4B", 3, 1, "delete")).await;
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
        env.kamatera.servers().iter().all(|s| s.name != old)
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

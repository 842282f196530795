//! Warm pools on the simulated Proxmox VE over loopback HTTP, the whole loop (plan and
//! act) against the simulated API server; every Proxmox request checked against the
//! official schema.

use nodewright_testkit as common;

use std::sync::Mutex;
use std::time::Duration;

use common::{act_until, cordon_patch, env_with_config, reconciler_for};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use nodewright::cloud::{CloudError, CloudProvider, CreateRequest};
use nodewright::plan::Action;
use nodewright::sim::cluster::SimPodTemplate;
use nodewright::sim::env::SimEnv;
use nodewright::sim::proxmox::{SimProxmoxOptions, SimVm};

const GI: u64 = 1 << 30;

fn config(cores: u32, max: u32, size: u32, mode: &str) -> String {
    format!(
        r#"clusterName: prod
freeMemoryTarget: 0 B
scaleDown: {{mode: {mode}}}
nodeGroups:
  - name: pve
    provider: proxmox
    maxSize: {max}
    warmPool: {{size: {size}}}
    proxmox: {{template: k3s-shared, memory: 4 GiB, cores: {cores}}}
    userData:
      template: k3s-agent.cloud-init.yaml.j2
      variables: {{k3s_url: "https://192.0.2.1:6443", k3s_token: "pool-secret-token"}}
"#
    )
}

fn is_warm(vm: &SimVm) -> bool {
    vm.config
        .get("tags")
        .is_some_and(|t| t.split(';').any(|t| t == "nw-warm"))
}

fn clones(env: &SimEnv) -> usize {
    env.proxmox
        .calls()
        .iter()
        .filter(|c| c.endpoint.as_deref() == Some("/nodes/{node}/qemu/{vmid}/clone"))
        .count()
}

fn assert_clean(env: &SimEnv) {
    let v = env.proxmox.violations();
    assert!(v.is_empty(), "schema violations: {v:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scale_up_starts_a_warm_vm_without_a_create_and_the_pool_refills() {
    let (env, rec) = env_with_config(&config(2, 3, 1, "delete")).await;
    act_until(&rec, "pool fill", |a| {
        matches!(a, Action::FillWarmPool { count: 1, .. })
    })
    .await;
    let guests = env.proxmox.guests();
    assert_eq!(guests.len(), 1);
    assert!(is_warm(&guests[0]), "{:?}", guests[0].config);
    assert_eq!(guests[0].status, "stopped");
    let warm_name = guests[0].name.clone();
    // Never started, so it never joined, and has no seed yet (its user data is rendered
    // when it is started).
    assert!(env.cluster.node(&warm_name).is_none());
    assert_eq!(guests[0].config.get("ide3"), None, "{:?}", guests[0].config);

    env.cluster
        .add_pod("default", "waits", SimPodTemplate::new("nginx:1.25", GI))
        .expect("pod");
    let before = clones(&env);
    let acted = act_until(&rec, "start of the warm VM", |a| {
        matches!(a, Action::StartWarm { .. })
    })
    .await;
    let Some(Action::StartWarm { servers, .. }) = acted.last().map(|d| &d.action) else {
        unreachable!("until returns on StartWarm")
    };
    assert_eq!(servers.len(), 1);
    assert_eq!(servers[0].name, warm_name);
    assert_eq!(clones(&env), before, "a warm start makes no clone");
    let started = env
        .proxmox
        .guests()
        .into_iter()
        .find(|g| g.name == warm_name)
        .expect("the warm VM");
    assert_eq!(started.status, "running");
    assert!(!is_warm(&started));
    // Its seed went with the start.
    let uid = common::pve::identity_of(&env.cluster).await;
    let seed = format!(
        "local:iso/nw-prod-{uid}-{}-seed.iso,media=cdrom",
        started.vmid
    );
    assert_eq!(
        started.config.get("ide3"),
        Some(&seed),
        "{:?}",
        started.config
    );

    // The pool refills with a new stopped VM while the started one joins.
    act_until(&rec, "pool refill", |a| {
        matches!(a, Action::FillWarmPool { count: 1, .. })
    })
    .await;
    assert_eq!(clones(&env), before + 1);
    let guests = env.proxmox.guests();
    assert_eq!(guests.len(), 2);
    assert_eq!(guests.iter().filter(|g| is_warm(g)).count(), 1);
    common::wait_for("the started VM's node", Duration::from_secs(10), || {
        env.cluster.node(&warm_name).is_some()
    })
    .await;
    let joined = env
        .proxmox
        .guests()
        .into_iter()
        .find(|g| g.name == warm_name)
        .and_then(|g| g.installed)
        .expect("joined through cloud-init");
    assert!(
        joined.starts_with("#cloud-config") && joined.contains(&warm_name),
        "joined with the user data rendered at the start: {joined}"
    );
    assert_clean(&env);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_down_mode_stop_parks_the_vm_of_a_removed_node() {
    // maxSize 1: once the warm VM runs, the pool has no room to refill.
    let (env, rec) = env_with_config(&config(2, 1, 1, "stop")).await;
    act_until(&rec, "pool fill", |a| {
        matches!(a, Action::FillWarmPool { .. })
    })
    .await;
    env.cluster
        .add_replicaset("default", "web", 1, SimPodTemplate::new("nginx:1.25", GI))
        .expect("replicaset");
    act_until(&rec, "start", |a| matches!(a, Action::StartWarm { .. })).await;
    let name = env.proxmox.guests()[0].name.clone();
    act_until(&rec, "startup taint removed", |a| {
        matches!(a, Action::RemoveStartupTaint { .. })
    })
    .await;
    env.cluster
        .scale_replicaset("default", "web", 0)
        .expect("scale");
    // The ReplicaSet controller deletes its pod a moment after the scale, bound or not:

    // until it has, the pod still waits for a node and may call the node back.

    common::wait_for("pods gone", Duration::from_secs(10), || {
        env.cluster.pods().iter().all(|p| {
            !p.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with("web-"))
        })
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

    let acted = act_until(&rec, "removal", |a| matches!(a, Action::DeleteNodes { .. })).await;
    let Some(Action::DeleteNodes { nodes: targets }) = acted.last().map(|d| &d.action) else {
        unreachable!("until returns on DeleteNodes")
    };
    assert_eq!(targets.len(), 1);
    assert!(targets[0].park, "{targets:?}");
    assert!(
        env.cluster.node(&name).is_none(),
        "the Node object is deleted"
    );
    let vm = env
        .proxmox
        .guests()
        .into_iter()
        .find(|g| g.name == name)
        .expect("the VM is kept");
    assert_eq!(vm.status, "stopped");
    assert!(is_warm(&vm), "{:?}", vm.config);
    assert!(!env.proxmox.calls().iter().any(
        |c| c.method == "DELETE" && c.endpoint.as_deref() == Some("/nodes/{node}/qemu/{vmid}")
    ));
    assert_clean(&env);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drifted_warm_vm_is_deleted_instead_of_reused() {
    let (env, rec) = env_with_config(&config(2, 3, 1, "delete")).await;
    act_until(&rec, "pool fill", |a| {
        matches!(a, Action::FillWarmPool { .. })
    })
    .await;
    let old = env.proxmox.guests()[0].name.clone();
    // New group settings (cores): the parked VM was made from the old ones.
    let rec = reconciler_for(&env, &config(4, 3, 1, "delete")).await;
    env.cluster
        .add_pod("default", "waits", SimPodTemplate::new("nginx:1.25", GI))
        .expect("pod");
    let acted = act_until(&rec, "the stale VM deleted", |a| {
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
    common::wait_for("the stale VM gone", Duration::from_secs(10), || {
        env.proxmox.guests().iter().all(|g| g.name != old)
    })
    .await;
    // The pod gets a new VM of the current settings, never the stale one.
    let acted = act_until(&rec, "a scale-up", |a| {
        matches!(a, Action::ScaleUp { .. } | Action::StartWarm { .. })
    })
    .await;
    assert!(
        acted.iter().all(|d| !matches!(&d.action, Action::StartWarm { servers, .. } if servers.iter().any(|s| s.name == old))),
        "{acted:#?}"
    );
    let fresh = env
        .proxmox
        .guests()
        .into_iter()
        .find(|g| g.status == "running")
        .expect("a running VM");
    assert_eq!(fresh.config.get("cores").map(String::as_str), Some("4"));
    assert_clean(&env);
}

/// Regression: a warm VM was started with user data rendered for no host, so a VM on
/// pve2 joined without `topology.kubernetes.io/zone`, while a VM cloned onto pve2 joins
/// with `zone=pve2` (and the planner counts on it for topology spread and anti-affinity).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warm_vm_started_on_pve2_joins_with_zone_pve2() {
    // Two hosts, so the group's shape names no zone: each VM's is the host it is on.
    let text = config(2, 3, 1, "delete").replace("cores: 2}", "cores: 2, nodes: [pve1, pve2]}");
    assert!(text.contains("nodes: [pve1, pve2]"), "{text}");
    let (env, rec) = env_with_config(&text).await;
    // Someone else's VM makes pve2 the fuller host, where a new VM is packed.
    env.proxmox.insert_vm("pve2", "database", "", None);
    act_until(&rec, "pool fill", |a| {
        matches!(a, Action::FillWarmPool { count: 1, .. })
    })
    .await;
    let warm = env
        .proxmox
        .guests()
        .into_iter()
        .find(is_warm)
        .expect("a warm VM");
    assert_eq!(warm.node, "pve2", "the warm VM sits on pve2");
    let name = warm.name.clone();

    env.cluster
        .add_pod("default", "waits", SimPodTemplate::new("nginx:1.25", GI))
        .expect("pod");
    let acted = act_until(&rec, "start of the warm VM", |a| {
        matches!(a, Action::StartWarm { .. })
    })
    .await;
    assert!(
        matches!(&acted.last().map(|d| &d.action), Some(Action::StartWarm { servers, .. }) if servers.iter().any(|s| s.name == name)),
        "{acted:#?}"
    );
    common::wait_for("the started VM's node", Duration::from_secs(10), || {
        env.cluster.node(&name).is_some()
    })
    .await;
    let node = env.cluster.node(&name).expect("registered");
    let zone = node
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("topology.kubernetes.io/zone"))
        .cloned();
    assert_eq!(zone.as_deref(), Some("pve2"), "{:?}", node.metadata.labels);
    let seeded = env
        .proxmox
        .guests()
        .into_iter()
        .find(|g| g.name == name)
        .and_then(|g| g.installed)
        .expect("joined through the seed");
    assert!(
        seeded.contains("topology.kubernetes.io/zone=pve2"),
        "the seed's user data names its host: {seeded}"
    );
    assert_clean(&env);
}

/// A warm VM whose user data does not render stays in the pool: the start fails with the
/// template's error, asked for the VM's host, before the VM is changed.
#[tokio::test]
async fn a_warm_start_whose_user_data_does_not_render_fails_and_leaves_the_vm_parked() {
    let pve = common::pve::sim_with(SimProxmoxOptions::default()).await;
    let p = common::pve::provider_with(
        common::pve::token_creds(&pve),
        &[("pve", "template: k3s-shared\n")],
    );
    let made = p
        .create_warm(&CreateRequest {
            name: "prod-pve-aaaaa".into(),
            cluster: "prod".into(),
            group: "pve".into(),
            user_data: String::new(),
            size: None,
            settings_hash: String::new(),
            zone: None,
        })
        .await
        .expect("a warm VM");
    let asked: Mutex<Vec<Option<String>>> = Mutex::default();
    let render = |zone: Option<&str>| {
        asked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(zone.map(str::to_string));
        Err::<CreateRequest, _>("user data for group pve: undefined value `k3s_url`".to_string())
    };
    let err = p
        .start_warm("prod", &made.id, &render)
        .await
        .expect_err("not started");
    assert!(matches!(err, CloudError::Other { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains("user data for group pve: undefined value `k3s_url`"),
        "{err}"
    );
    let vm = pve
        .guests()
        .into_iter()
        .find(|g| g.vmid.to_string() == made.id)
        .expect("the VM is kept");
    assert_eq!(
        *asked.lock().unwrap_or_else(|e| e.into_inner()),
        [Some(vm.node.clone())],
        "rendered once, for its host"
    );
    assert_eq!(vm.status, "stopped");
    assert!(is_warm(&vm), "still in the pool: {:?}", vm.config);
    assert_eq!(vm.config.get("ide3"), None, "no seed: {:?}", vm.config);
    assert!(!pve
        .calls()
        .iter()
        .any(|c| c.endpoint.as_deref() == Some("/nodes/{node}/qemu/{vmid}/status/start")));
    let v = pve.violations();
    assert!(v.is_empty(), "schema violations: {v:#?}");
}

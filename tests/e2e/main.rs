//! End to end, over real loopback HTTP: the reconciler (and the real binary) against the
//! simulated Kubernetes API server and the simulated OpenStack.

use nodewright_testkit as common;

mod cost;
mod joined;
mod providers;
mod removal;
mod volumes;

use std::collections::BTreeSet;
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime};

use common::{
    app_pods, cordon_patch, cordon_patch_as, has_startup_taint, nodewright_for, phase, ready,
    unschedulable, Killed,
};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, Patch, PatchParams};
use nodewright::model::{LABEL_CLUSTER, LABEL_GROUP, LABEL_IMAGE_PULLER};
use nodewright::plan::Action;
use nodewright::run::Reconciler;
use nodewright::sim::cluster::{SimNodeSpec, SimPodTemplate};
use nodewright::sim::env::{SimEnv, SimTimings};

const GI: u64 = 1 << 30;

/// A config for these tests; `extra` may override the defaults given here.
fn config(extra: &str) -> String {
    let default = |key: &str, line: &'static str| if extra.contains(key) { "" } else { line };
    let target = default("freeMemoryTarget", "freeMemoryTarget: 1 GiB");
    let timeout = default("provisionTimeout", "provisionTimeout: 30s");
    format!(
        r#"clusterName: e2e
{target}
{timeout}
scanInterval: 200ms
{extra}
nodeGroups:
  - name: workers
    provider: openstack
    minSize: 0
    maxSize: 4
    openstack: {{flavor: m1.large, image: ubuntu-24.04, network: private}}
    userData:
      template: k3s-agent.cloud-init.yaml.j2
      variables: {{k3s_url: "https://192.0.2.1:6443", k3s_token: "e2e-secret-token"}}
"#
    )
}

async fn setup(extra: &str) -> (SimEnv, Reconciler) {
    let env = SimEnv::start(None, SimTimings::default())
        .await
        .expect("simulated environment starts");
    let (_, cfg) = env.write_config(&config(extra)).expect("config loads");
    let rec = env.reconciler(cfg).await.expect("reconciler builds");
    (env, rec)
}

fn worker_names(env: &SimEnv) -> BTreeSet<String> {
    env.cluster
        .nodes()
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .filter(|n| n.starts_with("e2e-"))
        .collect()
}

/// Runs cycles until `done` holds; `watch` sees the world after every cycle. Returns
/// the actions taken.
async fn drive(
    env: &SimEnv,
    rec: &Reconciler,
    timeout: Duration,
    watch: impl FnMut(&SimEnv),
    done: impl Fn(&SimEnv) -> bool,
) -> Vec<Action> {
    common::drive(env, rec, timeout, watch, done, |env| {
        format!("nodes: {:?}", worker_names(env))
    })
    .await
    .into_iter()
    .map(|d| d.action)
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_that_do_not_fit_get_a_tainted_node_that_is_untainted_when_ready() {
    let (env, rec) = setup("").await;
    env.cluster
        .add_replicaset(
            "default",
            "web",
            3,
            SimPodTemplate::new("nginx:1.25", 2 * GI),
        )
        .expect("replicaset");
    let mut seen_tainted = BTreeSet::new();
    let actions = drive(
        &env,
        &rec,
        Duration::from_secs(30),
        |env| {
            for n in env.cluster.nodes() {
                if has_startup_taint(&n) {
                    seen_tainted.insert(n.metadata.name.clone().unwrap_or_default());
                }
            }
        },
        |env| {
            let pods = app_pods(env, "web");
            pods.len() == 3 && pods.iter().all(|p| phase(p) == "Running")
        },
    )
    .await;

    // One VM, created with rendered user data that carries the startup taint and labels.
    let servers = env.cloud.servers();
    assert_eq!(servers.len(), 1, "{servers:?}");
    let vm = &servers[0];
    let user_data = vm.user_data.clone().unwrap_or_default();
    assert!(user_data.starts_with("#cloud-config"), "{user_data}");
    assert!(user_data.contains("nodewright.io/startup=true:NoSchedule"));
    assert_eq!(
        vm.metadata.get("nodewright-cluster").map(String::as_str),
        Some("e2e")
    );
    assert_eq!(
        vm.metadata.get("nodewright-group").map(String::as_str),
        Some("workers")
    );
    // The node registered tainted, and the taint is gone now that it is Ready.
    assert!(
        seen_tainted.contains(&vm.name),
        "node never seen with the startup taint"
    );
    let node = env.cluster.node(&vm.name).expect("node registered");
    assert!(ready(&node) && !has_startup_taint(&node));
    let labels = node.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels.get(LABEL_CLUSTER).map(String::as_str), Some("e2e"));
    assert_eq!(labels.get(LABEL_GROUP).map(String::as_str), Some("workers"));
    assert!(actions.contains(&Action::ScaleUp {
        group: "workers".into(),
        count: 1,
        size: None
    }));
    assert!(actions.contains(&Action::RemoveStartupTaint {
        nodes: vec![vm.name.clone()]
    }));
    // All web pods run on the new node.
    for p in app_pods(&env, "web") {
        assert_eq!(p.spec.and_then(|s| s.node_name), Some(vm.name.clone()));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_node_is_replaced_without_leaving_pods_unschedulable() {
    let (env, rec) = setup("oldNodeAgeLimit: 6s").await;
    env.cluster
        .add_replicaset(
            "default",
            "web",
            3,
            SimPodTemplate::new("nginx:1.25", 2 * GI),
        )
        .expect("replicaset");
    // First: the initial node, all pods running.
    drive(
        &env,
        &rec,
        Duration::from_secs(30),
        |_| {},
        |env| {
            let pods = app_pods(env, "web");
            pods.iter().filter(|p| phase(p) == "Running").count() == 3
        },
    )
    .await;
    let first = env.cloud.servers()[0].clone();
    // Then: wait for it to age out and be replaced, watching that no pod is ever stuck.
    let mut stuck = BTreeSet::new();
    let actions = drive(
        &env,
        &rec,
        Duration::from_secs(60),
        |env| {
            for p in app_pods(env, "web") {
                if unschedulable(&p) {
                    stuck.insert(p.metadata.name.clone().unwrap_or_default());
                }
            }
        },
        |env| {
            let gone = !env.cloud.servers().iter().any(|s| s.id == first.id);
            let pods = app_pods(env, "web");
            gone && pods.len() == 3 && pods.iter().all(|p| phase(p) == "Running")
        },
    )
    .await;
    assert!(stuck.is_empty(), "pods left unschedulable: {stuck:?}");
    assert!(
        env.cluster.node(&first.name).is_none(),
        "old node object deleted"
    );
    assert!(
        actions
            .iter()
            .any(|a| matches!(a, Action::Cordon { nodes, .. } if nodes.contains(&first.name))),
        "{actions:?}"
    );
    assert!(actions
        .iter()
        .any(|a| matches!(a, Action::Drain { nodes, .. } if nodes.contains(&first.name))));
    // The replacement came up before the old node was cordoned.
    let cordon_at = actions
        .iter()
        .position(|a| matches!(a, Action::Cordon { .. }))
        .unwrap_or(usize::MAX);
    let scale_at = actions
        .iter()
        .position(|a| matches!(a, Action::ScaleUp { .. }))
        .unwrap_or(usize::MAX);
    assert!(scale_at < cordon_at, "{actions:?}");
    for p in app_pods(&env, "web") {
        assert_ne!(p.spec.and_then(|s| s.node_name), Some(first.name.clone()));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_cordoned_managed_node_is_deleted_but_unmanaged_one_is_not() {
    let (env, rec) = setup("freeMemoryTarget: 0 B").await;
    // An unmanaged node that even carries our labels, but has no VM tagged ours.
    env.cluster
        .add_node(
            SimNodeSpec::new("e2e-workers-imposter", 8 * GI)
                .label(LABEL_CLUSTER, "e2e")
                .label(LABEL_GROUP, "workers"),
        )
        .expect("node");
    env.cluster
        .add_node(SimNodeSpec::new("someone-elses", 8 * GI))
        .expect("node");
    env.cluster
        .add_daemonset("kube-system", "agent", "busybox:1.36", 64 << 20)
        .expect("daemonset");
    env.cluster
        .add_pod("default", "one", SimPodTemplate::new("nginx:1.25", GI))
        .expect("pod");
    // Give us a managed node: the pending pod... is already placed on the unmanaged
    // nodes, so ask for capacity with minSize instead.
    let mut cfg = (*rec.config).clone();
    cfg.node_groups[0].min_size = 1;
    let rec = env.reconciler(cfg.clone()).await.expect("reconciler");
    drive(
        &env,
        &rec,
        Duration::from_secs(30),
        |_| {},
        |env| {
            env.cloud.servers().len() == 1
                && env.cluster.nodes().iter().any(|n| {
                    n.metadata
                        .name
                        .as_deref()
                        .is_some_and(|m| m.starts_with("e2e-workers-"))
                        && ready(n)
                        && !has_startup_taint(n)
                        && n.metadata.name.as_deref() != Some("e2e-workers-imposter")
                })
        },
    )
    .await;
    let managed = env.cloud.servers()[0].name.clone();
    // minSize back to 0; an earlier nodewright process cordoned the managed node (and
    // died), a human cordons the two others.
    cfg.node_groups[0].min_size = 0;
    let rec = env.reconciler(cfg).await.expect("reconciler");
    let client = env.cluster.kube_client().await.expect("client");
    let nodes: Api<Node> = Api::all(client);
    for name in [managed.as_str(), "e2e-workers-imposter", "someone-elses"] {
        nodes
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(cordon_patch(name == managed)),
            )
            .await
            .expect("cordon");
    }
    let actions = drive(
        &env,
        &rec,
        Duration::from_secs(30),
        |_| {},
        |env| env.cluster.node(&managed).is_none() && env.cloud.servers().is_empty(),
    )
    .await;
    assert!(actions.iter().any(
        |a| matches!(a, Action::DeleteNodes { nodes } if nodes.iter().any(|t| t.node == managed))
    ));
    // Node object first, then the VM: when the VM went, its node was already gone.
    let log = env.vm_log.lock().expect("log").clone();
    let deleted = log
        .iter()
        .find(|e| !e.booted && e.name == managed)
        .expect("VM deletion seen by the cloud");
    assert!(!deleted.node_existed, "VM deleted before its Node: {log:?}");
    // A few more cycles: the unmanaged ones stay.
    for _ in 0..5 {
        rec.cycle(SystemTime::now()).await.expect("cycle");
    }
    assert!(env.cluster.node("e2e-workers-imposter").is_some());
    assert!(env.cluster.node("someone-elses").is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_images_are_pulled_but_ignored_prefixes_are_not() {
    let (env, rec) = setup("imagePuller: {ignore: [docker.io/library/busybox]}").await;
    let mut cfg = (*rec.config).clone();
    cfg.node_groups[0].min_size = 2;
    let rec = env.reconciler(cfg).await.expect("reconciler");
    env.cluster
        .add_replicaset("default", "web", 1, SimPodTemplate::new("nginx:1.25", GI))
        .expect("rs");
    env.cluster
        .add_replicaset(
            "default",
            "tool",
            1,
            SimPodTemplate::new("busybox:1.36", GI),
        )
        .expect("rs");
    let mut puller_images = BTreeSet::new();
    let mut puller_namespaces = BTreeSet::new();
    let images_of = |n: &Node| -> BTreeSet<String> {
        n.status
            .as_ref()
            .and_then(|s| s.images.as_ref())
            .map(|imgs| {
                imgs.iter()
                    .flat_map(|i| i.names.clone().unwrap_or_default())
                    .collect()
            })
            .unwrap_or_default()
    };
    drive(
        &env,
        &rec,
        Duration::from_secs(40),
        |env| {
            for p in env.cluster.pods() {
                let puller = p
                    .metadata
                    .labels
                    .as_ref()
                    .is_some_and(|l| l.contains_key(LABEL_IMAGE_PULLER));
                if puller {
                    puller_namespaces.insert(p.metadata.namespace.clone().unwrap_or_default());
                    for c in p.spec.map(|s| s.containers).unwrap_or_default() {
                        puller_images.insert(c.image.unwrap_or_default());
                    }
                }
            }
        },
        |env| {
            let workers: Vec<Node> = env
                .cluster
                .nodes()
                .into_iter()
                .filter(|n| {
                    n.metadata
                        .name
                        .as_deref()
                        .is_some_and(|m| m.starts_with("e2e-"))
                })
                .collect();
            // Pullers now warm a node from its registration: nginx may be on both
            // before the busybox pod ran anywhere.
            workers.len() == 2
                && workers
                    .iter()
                    .all(|n| images_of(n).iter().any(|i| i.contains("nginx:1.25")))
                && app_pods(env, "tool").iter().any(|p| phase(p) == "Running")
        },
    )
    .await;
    assert!(
        puller_images.iter().any(|i| i.contains("nginx:1.25")),
        "{puller_images:?}"
    );
    // In nodewright's own namespace, which enforces the restricted Pod Security Standard
    // (the simulated API server admits pods there as the real one does).
    assert_eq!(
        puller_namespaces,
        BTreeSet::from(["nodewright".to_string()]),
        "image pullers outside nodewright's namespace"
    );
    assert!(
        !puller_images.iter().any(|i| i.contains("busybox")),
        "ignored image pulled: {puller_images:?}"
    );
    // Exactly one node ran the busybox pod; the other never got busybox.
    let without_busybox = env
        .cluster
        .nodes()
        .iter()
        .filter(|n| {
            n.metadata
                .name
                .as_deref()
                .is_some_and(|m| m.starts_with("e2e-"))
        })
        .filter(|n| !images_of(n).iter().any(|i| i.contains("busybox")))
        .count();
    assert_eq!(without_busybox, 1);
}

fn spawn_run(env: &SimEnv, config: &std::path::Path) -> Killed {
    let mut cmd = nodewright_for!(env, config);
    cmd.args(["run", "--metrics-addr", "127.0.0.1:0"])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    Killed(cmd.spawn().expect("start nodewright run"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_mid_scale_up_the_restarted_process_converges_without_orphans_or_duplicates() {
    let env = SimEnv::start(
        None,
        SimTimings {
            boot_delay: Duration::from_secs(2),
            ..SimTimings::default()
        },
    )
    .await
    .expect("env");
    let (config_path, _) = env.write_config(&config("")).expect("config");
    // 5 pods of 3 GiB: two per 8 GiB node, so three nodes in one scale-up.
    env.cluster
        .add_replicaset(
            "default",
            "web",
            5,
            SimPodTemplate::new("nginx:1.25", 3 * GI),
        )
        .expect("rs");
    let first = spawn_run(&env, &config_path);
    // Kill it as soon as the cloud has accepted a VM, while the VMs are still booting.
    let started = Instant::now();
    while env.cloud.servers().is_empty() {
        assert!(started.elapsed() < Duration::from_secs(30), "no VM created");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(first);
    let at_kill = env.cloud.servers().len();
    assert!(
        env.cloud.servers().iter().all(|s| s.status == "BUILD"),
        "killed before any VM booted"
    );
    let _second = spawn_run(&env, &config_path);
    let converged = env
        .cluster
        .wait_until(
            |c| {
                let pods: Vec<Pod> = c
                    .pods()
                    .into_iter()
                    .filter(|p| {
                        p.metadata
                            .name
                            .as_deref()
                            .is_some_and(|n| n.starts_with("web"))
                    })
                    .collect();
                pods.len() == 5 && pods.iter().all(|p| phase(p) == "Running")
            },
            Duration::from_secs(60),
        )
        .await;
    assert!(converged, "pods not all running after restart");
    // Let the new process run a few more cycles, then look for orphans and duplicates.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let servers = env.cloud.servers();
    let names: BTreeSet<String> = servers.iter().map(|s| s.name.clone()).collect();
    assert_eq!(names.len(), servers.len(), "duplicate VM names");
    assert_eq!(
        servers.len(),
        3,
        "exactly the VMs needed (had {at_kill} at kill): {names:?}"
    );
    for s in &servers {
        let node = env.cluster.node(&s.name).expect("every VM became a node");
        assert!(
            ready(&node) && !has_startup_taint(&node),
            "{} not joined",
            s.name
        );
    }
}

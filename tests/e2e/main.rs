//! End to end, over real loopback HTTP: the reconciler (and the real binary) against the
//! simulated Kubernetes API server and the simulated OpenStack.

mod common;

use std::collections::BTreeSet;
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime};

use common::{
    app_pods, cordon_patch, has_startup_taint, nodewright_for, phase, ready, unschedulable, Killed,
};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, Patch, PatchParams};
use nodewright::plan::Action;
use nodewright::reconcile::Reconciler;
use nodewright::sim::cluster::{SimNodeSpec, SimPodTemplate};
use nodewright::sim::env::{SimEnv, SimTimings};
use nodewright::{LABEL_CLUSTER, LABEL_GROUP, LABEL_IMAGE_PULLER};

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
        count: 1
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
            workers.len() == 2
                && workers
                    .iter()
                    .all(|n| images_of(n).iter().any(|i| i.contains("nginx:1.25")))
        },
    )
    .await;
    assert!(
        puller_images.iter().any(|i| i.contains("nginx:1.25")),
        "{puller_images:?}"
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
    let mut cmd = nodewright_for(env, config);
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_is_no_longer_needed_is_drained_and_removed() {
    let (env, rec) = setup("scaleDown: {delayAfterAdd: 1s, unneededTime: 0s}").await;
    env.cluster
        .add_replicaset(
            "default",
            "web",
            4,
            SimPodTemplate::new("nginx:1.25", 3 * GI),
        )
        .expect("rs");
    drive(
        &env,
        &rec,
        Duration::from_secs(30),
        |_| {},
        |env| {
            let pods = app_pods(env, "web");
            pods.len() == 4 && pods.iter().all(|p| phase(p) == "Running")
        },
    )
    .await;
    assert_eq!(env.cloud.servers().len(), 2);
    env.cluster
        .scale_replicaset("default", "web", 1)
        .expect("scale down");
    let mut stuck = BTreeSet::new();
    let actions = drive(
        &env,
        &rec,
        Duration::from_secs(30),
        |env| {
            for p in app_pods(env, "web") {
                if unschedulable(&p) {
                    stuck.insert(p.metadata.name.clone().unwrap_or_default());
                }
            }
        },
        |env| {
            let pods = app_pods(env, "web");
            env.cloud.servers().len() == 1
                && worker_names(env).len() == 1
                && pods.len() == 1
                && pods.iter().all(|p| phase(p) == "Running")
        },
    )
    .await;
    assert!(stuck.is_empty(), "{stuck:?}");
    assert!(
        actions.iter().any(
            |a| matches!(a, Action::Cordon { reason, .. } if reason.starts_with("scale-down"))
        ),
        "{actions:?}"
    );
    assert!(actions
        .iter()
        .any(|a| matches!(a, Action::DeleteNodes { .. })));
    // And it stays at one: no flapping back up.
    for _ in 0..10 {
        let r = rec.cycle(SystemTime::now()).await.expect("cycle");
        assert!(
            !matches!(r.decision.action, Action::ScaleUp { .. }),
            "{:?}",
            r.decision
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Regression: kube's default client retried the 429 of a PDB-refused eviction (which
/// has no Retry-After) for minutes, stalling the whole cycle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pdb_refused_eviction_returns_at_once_instead_of_retrying_for_minutes() {
    use nodewright::cluster::{ClusterApi, Eviction, KubeCluster};
    use nodewright::plan::PodRef;
    use nodewright::sim::cluster::PdbBudget;
    let (env, _rec) = setup("").await;
    env.cluster
        .add_node(nodewright::sim::cluster::SimNodeSpec::new("n1", 8 * GI))
        .expect("node");
    env.cluster
        .add_replicaset("default", "db", 1, SimPodTemplate::new("postgres:16", GI))
        .expect("rs");
    env.cluster
        .add_pdb(
            "default",
            "db",
            std::collections::BTreeMap::from([("app".to_string(), "db".to_string())]),
            PdbBudget::MinAvailable(
                k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(1),
            ),
        )
        .expect("pdb");
    assert!(
        env.cluster
            .wait_until(
                |c| {
                    let pods = c.pods();
                    !pods.is_empty() && pods.iter().all(|p| phase(p) == "Running")
                },
                Duration::from_secs(10)
            )
            .await
    );
    let pod = app_pods(&env, "db")[0].metadata.name.clone().expect("name");
    let kube = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&env.kubeconfig).expect("kubeconfig"),
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .expect("config");
    let cluster = KubeCluster::new(nodewright::cluster::client_from_config(kube).expect("client"));
    let started = Instant::now();
    let r = tokio::time::timeout(
        Duration::from_secs(10),
        cluster.evict(&PodRef {
            namespace: "default".into(),
            name: pod,
        }),
    )
    .await
    .expect("eviction answered within 10s")
    .expect("no error");
    assert!(
        matches!(r, Eviction::Blocked(ref m) if m.contains("disruption budget")),
        "{r:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_node_is_deleted_only_after_its_volumes_detach() {
    let (env, rec) = setup("freeMemoryTarget: 0 B").await;
    let mut cfg = (*rec.config).clone();
    cfg.node_groups[0].min_size = 1;
    let rec = env.reconciler(cfg.clone()).await.expect("reconciler");
    drive(
        &env,
        &rec,
        Duration::from_secs(30),
        |_| {},
        |env| {
            env.cluster.nodes().iter().any(|n| {
                n.metadata
                    .name
                    .as_deref()
                    .is_some_and(|m| m.starts_with("e2e-"))
                    && ready(n)
                    && !has_startup_taint(n)
            })
        },
    )
    .await;
    let node = env.cloud.servers()[0].name.clone();
    env.cluster
        .attach_volume("csi-pv-1", &node, "pv-1")
        .expect("attach");
    cfg.node_groups[0].min_size = 0;
    let rec = env.reconciler(cfg).await.expect("reconciler");
    let nodes: Api<Node> = Api::all(env.cluster.kube_client().await.expect("client"));
    nodes
        .patch(
            &node,
            &PatchParams::default(),
            &Patch::Merge(cordon_patch(true)),
        )
        .await
        .expect("cordon");
    for _ in 0..5 {
        let r = rec.cycle(SystemTime::now()).await.expect("cycle");
        assert!(
            !matches!(r.decision.action, Action::DeleteNodes { .. }),
            "{:?}",
            r.decision
        );
        assert!(r
            .decision
            .has_reason(nodewright::plan::ReasonCode::VolumesAttached));
    }
    assert_eq!(env.cloud.servers().len(), 1);
    env.cluster.detach_volume("csi-pv-1").expect("detach");
    drive(
        &env,
        &rec,
        Duration::from_secs(20),
        |_| {},
        |env| env.cloud.servers().is_empty() && env.cluster.node(&node).is_none(),
    )
    .await;
}

/// Issue 3: one cluster, three node groups on three clouds, each scaled up and down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_groups_on_three_providers_each_scale_up_and_down() {
    let env = SimEnv::start(None, SimTimings::default())
        .await
        .expect("env");
    let join = r#"{template: k3s-agent.join.sh.j2, variables: {k3s_url: "https://192.0.2.1:6443", k3s_token: "e2e-secret-token"}}"#;
    let text = format!(
        r#"clusterName: e2e
freeMemoryTarget: 0 B
provisionTimeout: 60s
scanInterval: 200ms
scaleDown: {{delayAfterAdd: 1s, unneededTime: 0s}}
nodeGroups:
  - name: os
    provider: openstack
    maxSize: 2
    openstack: {{flavor: m1.large, image: ubuntu-24.04, network: private}}
    userData:
      template: k3s-agent.cloud-init.yaml.j2
      variables: {{k3s_url: "https://192.0.2.1:6443", k3s_token: "e2e-secret-token"}}
  - name: pve
    provider: proxmox
    maxSize: 2
    proxmox: {{template: agent-shared, memory: 8 GiB, cores: 2, join: guestAgent}}
    userData: {join}
  - name: kam
    provider: kamatera
    maxSize: 2
    kamatera: {{datacenter: EU, image: ubuntu_server_24.04_64-bit, cpu: 2B, ram: 8 GiB}}
    userData: {join}
"#
    );
    let (_, cfg) = env.write_config(&text).expect("config");
    let rec = env.reconciler(cfg).await.expect("reconciler");
    for g in ["os", "pve", "kam"] {
        env.cluster
            .add_replicaset(
                "default",
                &format!("app-{g}"),
                2,
                SimPodTemplate::new("nginx:1.25", 3 * GI).node_selector(LABEL_GROUP, g),
            )
            .expect("rs");
    }
    let group_nodes = |env: &SimEnv, g: &str| -> usize {
        env.cluster
            .nodes()
            .iter()
            .filter(|n| {
                n.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(LABEL_GROUP))
                    .map(String::as_str)
                    == Some(g)
                    && ready(n)
                    && !has_startup_taint(n)
            })
            .count()
    };
    drive(
        &env,
        &rec,
        Duration::from_secs(60),
        |_| {},
        |env| {
            ["os", "pve", "kam"].iter().all(|g| {
                let pods = app_pods(env, &format!("app-{g}"));
                pods.len() == 2 && pods.iter().all(|p| phase(p) == "Running")
            })
        },
    )
    .await;
    for g in ["os", "pve", "kam"] {
        assert_eq!(group_nodes(&env, g), 1, "group {g}");
    }
    assert_eq!(env.cloud.servers().len(), 1);
    assert_eq!(env.proxmox.guests().len(), 1);
    assert_eq!(env.kamatera.servers().len(), 1);
    assert!(
        env.proxmox.violations().is_empty(),
        "{:?}",
        env.proxmox.violations()
    );

    for g in ["os", "pve", "kam"] {
        env.cluster
            .scale_replicaset("default", &format!("app-{g}"), 0)
            .expect("scale");
    }
    drive(
        &env,
        &rec,
        Duration::from_secs(60),
        |_| {},
        |env| {
            env.cloud.servers().is_empty()
                && env.proxmox.guests().is_empty()
                && env.kamatera.servers().is_empty()
        },
    )
    .await;
    assert!(worker_names(&env).is_empty(), "{:?}", worker_names(&env));
    assert!(
        env.proxmox.violations().is_empty(),
        "{:?}",
        env.proxmox.violations()
    );
}

/// Issue 3: a cloud that refuses creates gets a backoff for that group, never a loop of
/// creates; when it accepts again the pods get their node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_creates_back_the_group_off_instead_of_looping() {
    use nodewright::sim::openstack::CreateFailure;
    let (env, rec) = setup("scaleUpBackoff: {initial: 1s, max: 2s}").await;
    env.cloud.fail_next_creates(3, CreateFailure::Quota);
    env.cluster
        .add_replicaset(
            "default",
            "web",
            1,
            SimPodTemplate::new("nginx:1.25", 2 * GI),
        )
        .expect("rs");
    let posts = |env: &SimEnv| {
        env.cloud
            .calls()
            .iter()
            .filter(|c| c.method == "POST" && c.path.ends_with("/servers"))
            .count()
    };
    // 3 s of cycles every ~150 ms: without backoff that would be ~20 creates.
    let start = Instant::now();
    let mut backed_off = false;
    while start.elapsed() < Duration::from_secs(3) {
        let c = rec
            .cycle_detailed(SystemTime::now())
            .await
            .expect("observe");
        backed_off |= c
            .decision
            .has_reason(nodewright::plan::ReasonCode::GroupBackedOff);
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    assert!(backed_off, "the plan says the group is backed off");
    let attempts = posts(&env);
    assert!(
        (2..=3).contains(&attempts),
        "{attempts} create attempts in 3 s"
    );
    // The fourth create is accepted: the pod runs.
    let start = Instant::now();
    while !app_pods(&env, "web").iter().all(|p| phase(p) == "Running") {
        assert!(start.elapsed() < Duration::from_secs(30), "pod never ran");
        rec.cycle_detailed(SystemTime::now())
            .await
            .expect("observe");
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    assert_eq!(posts(&env), 4, "three refused, one accepted");
    assert_eq!(env.cloud.servers().len(), 1);
}

/// Issue 3 for OpenStack through the loop: a VM that never becomes ready and a VM left
/// behind by a crash are both removed after provisionTimeout (a failing delete is retried);
/// another cluster's VM is never touched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_ready_and_leftover_vms_are_removed_and_a_failed_delete_is_retried() {
    let (env, rec) = setup("provisionTimeout: 2s\nscaleUpBackoff: {initial: 1s, max: 1s}").await;
    let ours = |cluster: &str| {
        std::collections::BTreeMap::from([
            ("nodewright-cluster".to_string(), cluster.to_string()),
            ("nodewright-group".to_string(), "workers".to_string()),
        ])
    };
    let leftover = env.cloud.insert_server("e2e-workers-crash", ours("e2e"));
    let foreign = env.cloud.insert_server("prod-workers-keep", ours("prod"));
    env.cloud.never_boot("e2e-workers-");
    env.cloud.fail_next_deletes(1);
    env.cluster
        .add_replicaset("default", "web", 1, SimPodTemplate::new("nginx:1.25", GI))
        .expect("rs");
    let mut created = BTreeSet::new();
    let mut failed_cycles = 0;
    let start = Instant::now();
    loop {
        match rec.cycle(SystemTime::now()).await {
            Ok(r) => {
                if let Action::DeleteServers { servers, .. } = &r.decision.action {
                    assert!(
                        servers.iter().all(|s| s.id != foreign),
                        "foreign VM touched"
                    );
                }
            }
            Err(_) => failed_cycles += 1,
        }
        for s in env.cloud.servers() {
            if s.name.starts_with("e2e-workers-") && s.id != leftover {
                created.insert(s.id.clone());
            }
        }
        let servers = env.cloud.servers();
        let done = !servers.iter().any(|s| s.id == leftover)
            && created
                .iter()
                .any(|id| !servers.iter().any(|s| &s.id == id));
        if done {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "not cleaned up: {servers:?}"
        );
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    assert_eq!(
        failed_cycles, 1,
        "the one failing delete surfaced once, then was retried"
    );
    assert!(env.cloud.servers().iter().any(|s| s.id == foreign));
}

/// Issue 8, defence in depth, over HTTP: between the plan and the act, one VM is moved to
/// another group, one handed to another cluster, and a Node not labelled ours registers
/// under a third one's name. The actuator reads each VM back from the cloud and its Node
/// from the API server just before deleting: those three are left alone and the error
/// names each and the check that failed; the fourth, unchanged, is deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn actuator_rechecks_tags_and_labels_before_deleting() {
    use nodewright::act::ActError;
    let (env, rec) = setup("provisionTimeout: 1s\nfreeMemoryTarget: 0 B").await;
    let ours = || {
        std::collections::BTreeMap::from([
            ("nodewright-cluster".to_string(), "e2e".to_string()),
            ("nodewright-group".to_string(), "workers".to_string()),
        ])
    };
    let ids: Vec<String> = ["a", "b", "c", "d"]
        .iter()
        .map(|x| {
            env.cloud
                .insert_server(&format!("e2e-workers-crash-{x}"), ours())
        })
        .collect();
    // Left behind by a crash, never joined: past provisionTimeout they are failed VMs.
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let (snapshot, decision) = rec.plan(SystemTime::now()).await.expect("plan");
    match &decision.action {
        Action::DeleteServers { servers, .. } => {
            let planned: BTreeSet<&str> = servers.iter().map(|s| s.id.as_str()).collect();
            assert!(
                ids.iter().all(|id| planned.contains(id.as_str())),
                "{decision:?}"
            );
        }
        other => panic!("expected the crashed VMs to be deleted, got {other:?}"),
    }

    // What changes between the plan and the act.
    env.cloud
        .set_metadata(&ids[0], "nodewright-group", Some("gpu"));
    env.cloud
        .set_metadata(&ids[1], "nodewright-cluster", Some("prod"));
    env.cluster
        .add_node(
            SimNodeSpec::new("e2e-workers-crash-c", 8 * GI)
                .label(LABEL_CLUSTER, "prod")
                .label(LABEL_GROUP, "workers"),
        )
        .expect("node");

    let deletes_before = env
        .cloud
        .calls()
        .iter()
        .filter(|c| c.method == "DELETE")
        .count();
    let err = match rec.act(&snapshot, &decision, SystemTime::now()).await {
        Err(e @ ActError::Refused { .. }) => e.to_string(),
        other => panic!("expected a refusal, got {other:?}"),
    };
    for want in [
        format!(
            "VM e2e-workers-crash-a ({}): its nodewright-group tag is 'gpu', the plan says 'workers'",
            ids[0]
        ),
        format!(
            "VM e2e-workers-crash-b ({}): its nodewright-cluster tag names cluster 'prod', not 'e2e'",
            ids[1]
        ),
        "node e2e-workers-crash-c of VM e2e-workers-crash-c".to_string(),
        "it is not ours: its label nodewright.io/cluster is 'prod', expected 'e2e'".to_string(),
        format!("done meanwhile: deleted VM e2e-workers-crash-d ({})", ids[3]),
    ] {
        assert!(err.contains(&want), "{want:?} not in: {err}");
    }
    let servers: BTreeSet<String> = env.cloud.servers().into_iter().map(|s| s.id).collect();
    for id in &ids[..3] {
        assert!(servers.contains(id), "{id} deleted: {err}");
    }
    assert!(!servers.contains(&ids[3]), "the unchanged VM stays: {err}");
    let deletes: Vec<String> = env
        .cloud
        .calls()
        .into_iter()
        .filter(|c| c.method == "DELETE")
        .map(|c| c.path)
        .collect();
    assert_eq!(
        deletes[deletes_before..],
        [format!("/compute/v2.1/servers/{}", ids[3])],
        "only the unchanged VM got a DELETE"
    );
    assert!(env.cluster.node("e2e-workers-crash-c").is_some());
}

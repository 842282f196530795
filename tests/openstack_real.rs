//! The real-OpenStack tier: the OpenStack provider, and one scale-up/scale-down cycle of
//! the loop, against a real Keystone + Nova (fake virt driver) + Placement + Glance +
//! Neutron started on 127.0.0.1 by `tests/openstack-real/setup.sh`.
//!
//! Runs when `NODEWRIGHT_REAL_OPENSTACK` names the base directory setup.sh wrote (or the
//! files exist at its default, /tmp/nodewright-os); otherwise every test says loudly on
//! stderr that it was skipped, and passes. When the variable is set but the stack is not
//! usable, the tests fail: CI sets it after running setup.sh.
//!
//! Every test uses its own cluster name, so tests run in parallel without seeing each
//! other's servers, and a guard deletes every server of that cluster however the test
//! ends.

use nodewright_testkit as common;
use nodewright_testkit::real_os;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use common::{ready, running};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, Patch, PatchParams};
use nodewright::cloud::{
    CloudError, CloudProvider, CreateRequest, CLUSTER_TAG, GROUP_TAG, SETTINGS_HASH_TAG,
};
use nodewright::cluster::KubeCluster;
use nodewright::config::{Config, ProviderKind};
use nodewright::model::{Server, ServerStatus};
use nodewright::plan::Action;
use nodewright::run::clouds::build_clouds_with;
use nodewright::run::Reconciler;
use nodewright::sim::cluster::{SimCluster, SimClusterOptions, SimNodeSpec, SimPodTemplate};
use nodewright::sim::env::SHIPPED_TEMPLATES;
use nodewright::sim::{VmEvent, VmHook};
use real_os::*;
use serde_json::json;

// ---------------------------------------------------------------------------
// Provider tests

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_server_group_by_name_and_id_and_tags() {
    let os = real_os_or_skip!("real_server_group_by_name_and_id_and_tags");
    let admin = Admin::login(&os).await;
    let user = Admin::login_with(&os.password).await;
    let cluster = unique_cluster("sg");
    let group_name = format!("{cluster}-spread");
    let group_id = user
        .create_server_group(&group_name, "soft-anti-affinity")
        .await;
    // Dropped in reverse order: servers first, then the group.
    let _group = ServerGroupGuard {
        session: user.clone(),
        id: group_id.clone(),
    };
    let _servers = ClusterGuard {
        admin: admin.clone(),
        cluster: cluster.clone(),
    };

    // A missing group is named by check, before any create.
    let mut s = settings("m1.small", "nodewright-test-image", Some("nodewright-net"));
    s.server_group = Some(format!("{cluster}-nope"));
    let err = provider(&os.password, s)
        .verify()
        .await
        .expect_err("missing server group");
    assert!(
        matches!(&err, CloudError::NotFound { what, name, .. } if what == "server group" && name == &format!("{cluster}-nope")),
        "{err:?}"
    );

    for (i, wanted) in [group_name.clone(), group_id.clone()].iter().enumerate() {
        let mut s = settings("m1.small", "nodewright-test-image", Some("nodewright-net"));
        s.server_group = Some(wanted.clone());
        let p = provider(&os.password, s);
        p.verify().await.expect("verify with a server group");
        let name = format!("{cluster}-workers-g{i}");
        let created = p
            .create_server(&request(&name, &cluster, "#!/bin/sh\n"))
            .await
            .expect("create_server in a server group");
        wait_for_status(&p, &cluster, &created.id, ServerStatus::Active).await;
        // Nova put it in the group (server_groups: microversion ≥2.71) ...
        let v = user.server_json(&created.id).await;
        assert_eq!(
            v["server"]["server_groups"],
            json!([group_id]),
            "server group of {name} (asked for {wanted})"
        );
        // ... and kept the ownership tags.
        let stored = admin.server(&created.id).await;
        assert_eq!(
            stored.tags,
            vec![
                format!("{CLUSTER_TAG}={cluster}"),
                format!("{GROUP_TAG}=workers"),
                format!("{SETTINGS_HASH_TAG}={HASH}")
            ]
        );
        p.delete_server(&cluster, &created.id)
            .await
            .expect("delete_server");
        assert!(
            admin.server_gone(&created.id).await,
            "server still there after delete_server"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_password_auth_verifies_and_lists() {
    let os = real_os_or_skip!("real_password_auth_verifies_and_lists");
    let p = provider(
        &os.password,
        settings("m1.small", "nodewright-test-image", Some("nodewright-net")),
    );
    p.verify().await.expect("verify with password credentials");
    let cluster = unique_cluster("pw");
    assert!(p.list_servers(&cluster).await.expect("list").is_empty());
    assert_eq!(
        p.group_shape("workers").await.expect("group_shape").memory,
        Some(2 * GI)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_application_credential_auth_creates_and_deletes() {
    let os = real_os_or_skip!("real_application_credential_auth_creates_and_deletes");
    let p = provider(
        &os.appcred,
        settings("m1.small", "nodewright-test-image", None),
    );
    p.verify()
        .await
        .expect("verify with an application credential");
    let cluster = unique_cluster("ac");
    full_lifecycle(&os, &p, &cluster, 2048).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_server_lifecycle_by_names_with_network() {
    let os = real_os_or_skip!("real_server_lifecycle_by_names_with_network");
    let p = provider(
        &os.password,
        settings("m1.small", "nodewright-test-image", Some("nodewright-net")),
    );
    let cluster = unique_cluster("nm");
    full_lifecycle(&os, &p, &cluster, 2048).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_server_lifecycle_by_ids() {
    let os = real_os_or_skip!("real_server_lifecycle_by_ids");
    let p = provider(
        &os.password,
        settings(
            &os.id("FLAVOR_LARGE_ID"),
            &os.id("IMAGE_ID"),
            Some(&os.id("NETWORK_ID")),
        ),
    );
    p.verify().await.expect("verify by ids");
    assert_eq!(
        p.group_shape("workers").await.expect("group_shape").memory,
        Some(8 * GI)
    );
    let cluster = unique_cluster("id");
    full_lifecycle(&os, &p, &cluster, 8192).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_missing_flavor_is_named_in_the_error() {
    let os = real_os_or_skip!("real_missing_flavor_is_named_in_the_error");
    let p = provider(
        &os.password,
        settings("m1.humongous", "nodewright-test-image", None),
    );
    let cluster = unique_cluster("mf");
    let admin = Admin::login(&os).await;
    let _guard = ClusterGuard {
        admin,
        cluster: cluster.clone(),
    };
    let err = p
        .create_server(&request(
            &format!("{cluster}-workers-x"),
            &cluster,
            "#!/bin/sh\n",
        ))
        .await
        .expect_err("a missing flavor fails the create");
    assert!(
        matches!(&err, CloudError::NotFound { what, name, .. } if what == "flavor" && name == "m1.humongous"),
        "{err:?}"
    );
    assert!(err.to_string().contains("m1.humongous"), "{err}");
    let err = p.verify().await.expect_err("verify fails");
    assert!(err.to_string().contains("flavor 'm1.humongous'"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_verify_names_a_missing_image_and_network() {
    let os = real_os_or_skip!("real_verify_names_a_missing_image_and_network");
    let p = provider(
        &os.password,
        settings("m1.small", "no-such-image", Some("nodewright-net")),
    );
    let err = p.verify().await.expect_err("verify fails");
    assert!(
        matches!(&err, CloudError::NotFound { what, name, .. } if what == "image" && name == "no-such-image"),
        "{err:?}"
    );
    assert!(err.to_string().contains("no-such-image"), "{err}");
    // An image id that does not exist (Glance answers 404 in plain text).
    let p = provider(
        &os.password,
        settings(
            "m1.small",
            "00000000-0000-4000-8000-000000000000",
            Some("nodewright-net"),
        ),
    );
    let err = p.verify().await.expect_err("verify fails");
    assert!(
        matches!(&err, CloudError::NotFound { what, .. } if what == "image"),
        "{err:?}"
    );
    let p = provider(
        &os.password,
        settings("m1.small", "nodewright-test-image", Some("no-such-net")),
    );
    let err = p.verify().await.expect_err("verify fails");
    assert!(
        matches!(&err, CloudError::NotFound { what, name, .. } if what == "network" && name == "no-such-net"),
        "{err:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_quota_exceeded_is_a_quota_error() {
    let os = real_os_or_skip!("real_quota_exceeded_is_a_quota_error");
    let admin = Admin::login(&os).await;
    let project = os.id("QUOTA_PROJECT_ID");
    let cluster = unique_cluster("qt");
    // Dropped in reverse order: servers go first, then the quota is reset.
    let _quota = QuotaGuard {
        admin: admin.clone(),
        project: project.clone(),
    };
    let _servers = ClusterGuard {
        admin: admin.clone(),
        cluster: cluster.clone(),
    };
    admin.set_instance_quota(&project, 1).await;
    let p = provider(
        &os.quota,
        settings("m1.small", "nodewright-test-image", None),
    );
    let first = p
        .create_server(&request(
            &format!("{cluster}-workers-00001"),
            &cluster,
            "#!/bin/sh\n",
        ))
        .await
        .expect("the first server fits the quota");
    // Nova counts a server against the quota once it is in a cell: until then a second
    // create is accepted and fails later (ERROR, "Quota exceeded" fault, on the recheck).
    wait_for_status(&p, &cluster, &first.id, ServerStatus::Active).await;
    let err = p
        .create_server(&request(
            &format!("{cluster}-workers-00002"),
            &cluster,
            "#!/bin/sh\n",
        ))
        .await
        .expect_err("the second server is over the quota");
    assert!(matches!(err, CloudError::Quota { .. }), "{err:?}");
    assert!(err.to_string().contains("instances"), "{err}");
    p.delete_server(&cluster, &first.id).await.expect("delete");
    wait_gone(&p, &cluster, &first.id).await;

    // Creates at the same moment race past the API's check: Nova accepts them and its
    // recheck after scheduling puts the extra ones in ERROR with a 413 fault. Either
    // way, no more than the quota ever becomes ACTIVE.
    let requests: Vec<CreateRequest> = (3..6)
        .map(|i| {
            request(
                &format!("{cluster}-workers-0000{i}"),
                &cluster,
                "#!/bin/sh\n",
            )
        })
        .collect();
    let results = futures::future::join_all(requests.iter().map(|r| p.create_server(r))).await;
    let accepted: Vec<Server> = results
        .into_iter()
        .filter_map(|r| match r {
            Ok(s) => Some(s),
            Err(CloudError::Quota { .. }) => None,
            Err(e) => panic!("a create over the quota failed otherwise: {e:?}"),
        })
        .collect();
    assert!(!accepted.is_empty(), "one of them fits");
    let start = Instant::now();
    let settled = loop {
        let listed = p.list_servers(&cluster).await.expect("list");
        let mine: Vec<&Server> = listed
            .iter()
            .filter(|s| accepted.iter().any(|a| a.id == s.id))
            .collect();
        if mine.len() == accepted.len()
            && mine
                .iter()
                .all(|s| matches!(s.status, ServerStatus::Active | ServerStatus::Error))
        {
            break listed;
        }
        assert!(start.elapsed() < BOOT_TIMEOUT, "not settled: {listed:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let active = settled
        .iter()
        .filter(|s| s.status == ServerStatus::Active)
        .count();
    assert!(active <= 1, "over the quota: {settled:?}");
    for listed in admin.servers(&cluster).await {
        let s = admin.server(&listed.id).await;
        if s.status == "ERROR" {
            assert_eq!(s.fault_code, Some(413), "{s:?}");
            assert!(s.fault.starts_with("Quota exceeded for instances"), "{s:?}");
        }
    }
    eprintln!(
        "concurrent creates over a quota of 1: {} accepted, {active} ACTIVE, {} ERROR",
        accepted.len(),
        accepted.len() - active
    );
    admin.delete_cluster(&cluster).await;
    admin.reset_quota(&project).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_no_valid_host_shows_as_error_status() {
    let os = real_os_or_skip!("real_no_valid_host_shows_as_error_status");
    let admin = Admin::login(&os).await;
    let cluster = unique_cluster("nv");
    let _guard = ClusterGuard {
        admin: admin.clone(),
        cluster: cluster.clone(),
    };
    // m1.toobig wants more memory than the fake hypervisor has: accepted, then ERROR.
    let p = provider(
        &os.password,
        settings("m1.toobig", "nodewright-test-image", None),
    );
    let s = p
        .create_server(&request(
            &format!("{cluster}-workers-big01"),
            &cluster,
            "#!/bin/sh\n",
        ))
        .await
        .expect("Nova accepts it");
    let failed = wait_for_status(&p, &cluster, &s.id, ServerStatus::Error).await;
    assert_eq!(failed.name, s.name);
    // Never scheduled, so in cell0: the detail list has no fault, GET has it, with the
    // text the simulator uses for CreateFailure::NoValidHost.
    let listed = admin.servers(&cluster).await;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].fault, "", "{listed:?}");
    let shown = admin.server(&s.id).await;
    assert_eq!(shown.fault, "No valid host was found. ", "{shown:?}");
    assert_eq!(shown.fault_code, Some(500));
    p.delete_server(&cluster, &s.id).await.expect("delete");
    wait_gone(&p, &cluster, &s.id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_wrong_password_or_secret_is_an_auth_error() {
    let os = real_os_or_skip!("real_wrong_password_or_secret_is_an_auth_error");
    let dir = tempfile::tempdir().expect("tempdir");
    for (file, key) in [
        (&os.password, "OS_PASSWORD"),
        (&os.appcred, "OS_APPLICATION_CREDENTIAL_SECRET"),
    ] {
        let text = std::fs::read_to_string(file).expect("credentials file");
        let bad: String = text
            .lines()
            .map(|l| {
                if l.starts_with(&format!("{key}:")) {
                    format!("{key}: \"not-the-secret\"\n")
                } else {
                    format!("{l}\n")
                }
            })
            .collect();
        let path = dir.path().join("bad.yaml");
        std::fs::write(&path, bad).expect("write");
        let p = provider(&path, settings("m1.small", "nodewright-test-image", None));
        let err = p.verify().await.expect_err("wrong credentials are refused");
        assert!(matches!(err, CloudError::Auth { .. }), "{key}: {err:?}");
        assert!(err.to_string().contains("401"), "{err}");
    }
}

// ---------------------------------------------------------------------------
// The loop: simulated cluster, real Nova

/// Feeds the simulated cluster's kubelet from the real Nova: a server of the cluster
/// that goes ACTIVE boots a node with the user data Nova holds; one that disappears
/// is reported deleted. Stops when dropped.
struct NovaKubeletBridge {
    task: tokio::task::JoinHandle<()>,
    log: Arc<Mutex<Vec<String>>>,
}

impl NovaKubeletBridge {
    fn start(admin: Admin, cluster: String, hook: VmHook) -> NovaKubeletBridge {
        let log: Arc<Mutex<Vec<String>>> = Arc::default();
        let events = log.clone();
        let task = tokio::spawn(async move {
            let mut booted: BTreeMap<String, String> = BTreeMap::new(); // id -> name
            loop {
                let servers = admin.servers(&cluster).await;
                for s in &servers {
                    if s.status == "ACTIVE" && !booted.contains_key(&s.id) {
                        booted.insert(s.id.clone(), s.name.clone());
                        events.lock().unwrap().push(format!("booted {}", s.name));
                        hook(VmEvent::Booted {
                            name: s.name.clone(),
                            user_data: s.user_data.clone().unwrap_or_default(),
                            memory_bytes: s.ram_mib << 20,
                            cpus: s.vcpus,
                        });
                    }
                }
                let gone: Vec<String> = booted
                    .keys()
                    .filter(|id| !servers.iter().any(|s| &s.id == *id))
                    .cloned()
                    .collect();
                for id in gone {
                    if let Some(name) = booted.remove(&id) {
                        events.lock().unwrap().push(format!("deleted {name}"));
                        hook(VmEvent::Deleted { name });
                    }
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        });
        NovaKubeletBridge { task, log }
    }

    fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
}

impl Drop for NovaKubeletBridge {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn drive(
    rec: &Reconciler,
    what: &str,
    timeout: Duration,
    mut done: impl FnMut() -> bool,
) -> Vec<Action> {
    let start = Instant::now();
    let mut actions = Vec::new();
    loop {
        match rec.cycle(SystemTime::now()).await {
            Ok(report) if report.decision.action != Action::None => {
                actions.push(report.decision.action.clone())
            }
            Ok(_) => {}
            Err(e) => panic!("{what}: cycle failed against the real OpenStack: {e}"),
        }
        if done() {
            return actions;
        }
        assert!(
            start.elapsed() < timeout,
            "{what}: not done after {timeout:?}; actions: {actions:#?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_loop_scales_up_and_down_against_real_nova() {
    let os = real_os_or_skip!("real_loop_scales_up_and_down_against_real_nova");
    let admin = Admin::login(&os).await;
    let cluster_name = unique_cluster("lp");
    let _guard = ClusterGuard {
        admin: admin.clone(),
        cluster: cluster_name.clone(),
    };

    let cluster = SimCluster::start(SimClusterOptions {
        node_ready_delay: Duration::from_millis(300),
        pod_start_delay: Duration::from_millis(200),
        ..SimClusterOptions::default()
    })
    .await
    .expect("simulated cluster starts");
    cluster
        .add_node(
            SimNodeSpec::new("control-plane", 4 * GI)
                .label("node-role.kubernetes.io/control-plane", "true")
                .taint("node-role.kubernetes.io/control-plane", None, "NoSchedule"),
        )
        .expect("control-plane node");
    let bridge = NovaKubeletBridge::start(admin.clone(), cluster_name.clone(), cluster.vm_hook());

    let dir = tempfile::tempdir().expect("tempdir");
    let templates = dir.path().join("templates");
    std::fs::create_dir_all(&templates).expect("templates dir");
    for (name, text) in SHIPPED_TEMPLATES {
        std::fs::write(templates.join(name), text).expect("template");
    }
    let config_path = dir.path().join("autoscaler.yaml");
    std::fs::write(
        &config_path,
        format!(
            r#"clusterName: {cluster_name}
templatesDir: {templates}
freeMemoryTarget: 0 B
provisionTimeout: 5m
scanInterval: 1s
imagePuller: {{enabled: false}}
nodeGroups:
  - name: workers
    provider: openstack
    minSize: 0
    maxSize: 2
    openstack: {{flavor: m1.large, image: nodewright-test-image, network: nodewright-net}}
    userData:
      template: k3s-agent.cloud-init.yaml.j2
      variables: {{k3s_url: "https://192.0.2.1:6443", k3s_token: "real-tier-token"}}
"#,
            templates = templates.display()
        ),
    )
    .expect("config written");
    let config = Config::load(&config_path).expect("config loads");
    let creds = os.password.clone();
    let clouds = build_clouds_with(&config, |kind| {
        (kind == ProviderKind::Openstack).then(|| creds.clone())
    })
    .expect("clouds build");
    let rec = Reconciler {
        config: Arc::new(config),
        cluster: Arc::new(KubeCluster::new(
            cluster.kube_client().await.expect("kube client"),
        )),
        clouds,
        memory: Default::default(),
        dry_run: false,
    };

    // Scale up: two 3 GiB pods fit on no node (the control plane is tainted).
    cluster
        .add_replicaset(
            "default",
            "web",
            2,
            SimPodTemplate::new("nginx:1.25", 3 * GI),
        )
        .expect("replicaset");
    let web_running = || {
        let pods: Vec<Pod> = cluster
            .pods()
            .into_iter()
            .filter(|p| {
                p.metadata
                    .name
                    .as_deref()
                    .is_some_and(|n| n.starts_with("web"))
            })
            .collect();
        pods.len() == 2 && pods.iter().all(running)
    };
    let up = drive(&rec, "scale-up", Duration::from_secs(180), web_running).await;
    assert!(
        up.contains(&Action::ScaleUp {
            group: "workers".into(),
            count: 1,
            size: None
        }),
        "{up:?}"
    );
    let servers = admin.servers(&cluster_name).await;
    assert_eq!(servers.len(), 1, "one VM in the real Nova: {servers:?}");
    let vm = servers[0].clone();
    assert_eq!(vm.status, "ACTIVE");
    assert_eq!(vm.ram_mib, 8192);
    let user_data = vm.user_data.clone().unwrap_or_default();
    assert!(user_data.starts_with("#cloud-config"), "{user_data}");
    assert!(user_data.contains("nodewright.io/startup=true:NoSchedule"));
    let node = cluster.node(&vm.name).expect("the VM joined as a node");
    assert!(ready(&node));
    assert!(up.contains(&Action::RemoveStartupTaint {
        nodes: vec![vm.name.clone()]
    }));
    for p in cluster.pods().into_iter().filter(|p| {
        p.metadata
            .name
            .as_deref()
            .is_some_and(|n| n.starts_with("web"))
    }) {
        assert_eq!(p.spec.and_then(|s| s.node_name), Some(vm.name.clone()));
    }

    // Scale down: the pods go and nodewright's cordon is on the node (as a process that
    // died after cordoning leaves it); nodewright deletes the Node, then the VM.
    cluster
        .scale_replicaset("default", "web", 0)
        .expect("scale to 0");
    // Cordoned once its pods are on their way out (a node cordoned as empty that still
    // runs pods is given back, issue 29 item 9).
    common::wait_until_app_pods_leave(&cluster, &vm.name, "web").await;
    let nodes: Api<Node> = Api::all(cluster.kube_client().await.expect("client"));
    nodes
        .patch(
            &vm.name,
            &PatchParams::default(),
            &Patch::Merge(common::cordon_patch(true)),
        )
        .await
        .expect("cordon");
    let vm_gone = Arc::new(Mutex::new(false));
    let down = {
        let (admin, cluster_name, flag) = (admin.clone(), cluster_name.clone(), vm_gone.clone());
        let watcher = tokio::spawn(async move {
            loop {
                if admin.servers(&cluster_name).await.is_empty() {
                    *flag.lock().unwrap() = true;
                    return;
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        });
        let actions = drive(&rec, "scale-down", Duration::from_secs(180), || {
            cluster.node(&vm.name).is_none() && *vm_gone.lock().unwrap()
        })
        .await;
        watcher.abort();
        actions
    };
    assert!(
        down.iter()
            .any(|a| matches!(a, Action::DeleteNodes { nodes } if nodes.iter().any(|t| t.node == vm.name))),
        "{down:?}"
    );
    assert!(
        admin.server_gone(&vm.id).await,
        "server still there after delete_server"
    );
    assert_eq!(
        admin.servers(&cluster_name).await.len(),
        0,
        "no VM left in the real Nova"
    );
    // The bridge saw the boot, then (on its next poll) the deletion.
    let start = Instant::now();
    while bridge.log().len() < 2 && start.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let seen = bridge.log();
    assert_eq!(
        seen,
        vec![
            format!("booted {}", vm.name),
            format!("deleted {}", vm.name)
        ],
        "{seen:?}"
    );
    cluster.shutdown();
}

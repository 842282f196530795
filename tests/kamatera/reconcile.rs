//! The loop: a provider: kamatera group scaled up and down through the reconciler.

use super::*;

// ---------------------------------------------------------------------------
// The loop: a `provider: kamatera` group scaled up and down.

struct Env {
    cluster: SimCluster,
    cloud: SimKamatera,
    events: Events,
    dir: tempfile::TempDir,
}

impl Drop for Env {
    fn drop(&mut self) {
        self.cluster.shutdown();
    }
}

const TEMPLATE: &str = "#!/bin/sh\n# k3s agent for a Kamatera server\ncurl -sfL https://get.k3s.io | K3S_URL={{ k3s_url }} K3S_TOKEN={{ k3s_token }} sh -s - agent{% for a in k3s_node_args %} {{ a }}{% endfor %}\n";

async fn env() -> Env {
    let cluster = SimCluster::start(SimClusterOptions {
        node_ready_delay: Duration::from_millis(200),
        pod_start_delay: Duration::from_millis(150),
        ..SimClusterOptions::default()
    })
    .await
    .expect("cluster starts");
    cluster
        .add_node(
            SimNodeSpec::new("control-plane", 4 * GI)
                .label("node-role.kubernetes.io/control-plane", "true")
                .taint("node-role.kubernetes.io/control-plane", None, "NoSchedule"),
        )
        .expect("control plane");
    // Image pullers run in nodewright's own namespace, as deployed.
    cluster.add_namespace("nodewright").expect("namespace");
    let events: Events = Arc::default();
    let (sink, kubelet) = (events.clone(), cluster.vm_hook());
    let hook: VmHook = Arc::new(move |e: VmEvent| {
        sink.lock().expect("events").push(e.clone());
        kubelet(e)
    });
    let cloud = SimKamatera::start(SimKamateraOptions {
        hook: Some(hook),
        step: Duration::from_millis(50),
        ..SimKamateraOptions::default()
    })
    .await
    .expect("kamatera starts");
    let dir = tempfile::tempdir().expect("tempdir");
    let templates = dir.path().join("templates");
    std::fs::create_dir_all(&templates).expect("templates dir");
    for (name, text) in SHIPPED_TEMPLATES {
        std::fs::write(templates.join(name), text).expect("template");
    }
    std::fs::write(templates.join("k3s-agent.sh.j2"), TEMPLATE).expect("template");
    cluster
        .write_kubeconfig(&dir.path().join("kubeconfig"))
        .expect("kubeconfig");
    cloud
        .write_credentials_file(&dir.path().join("kamatera.yaml"))
        .expect("credentials");
    Env {
        cluster,
        cloud,
        events,
        dir,
    }
}

impl Env {
    fn config(&self, min_size: u32, extra: &str) -> Config {
        let text = format!(
            r#"templatesDir: {}
clusterName: kt
freeMemoryTarget: 0 B
provisionTimeout: 3s
scanInterval: 200ms
{extra}
nodeGroups:
  - name: workers
    provider: kamatera
    minSize: {min_size}
    maxSize: 3
    kamatera:
      datacenter: EU
      image: ubuntu_server_24.04_64-bit
      cpu: 4B
      ram: 8 GiB
      disks: ["size=40"]
    userData:
      template: k3s-agent.sh.j2
      variables: {{k3s_url: "https://192.0.2.1:6443", k3s_token: "kt-secret-token"}}
"#,
            self.dir.path().join("templates").display()
        );
        let path = self.dir.path().join("autoscaler.yaml");
        std::fs::write(&path, text).expect("config written");
        Config::load(&path).expect("config loads")
    }

    /// A reconciler like `SimEnv::reconciler`, with the Kamatera provider built from the
    /// credentials file (fast queue polling for the test).
    async fn reconciler(&self, config: Config) -> Reconciler {
        let kube = kubeconfig_from_file(&self.dir.path().join("kubeconfig"))
            .await
            .expect("kubeconfig");
        let client = kube::Client::try_from(kube).expect("client");
        let creds_path: PathBuf = self.dir.path().join("kamatera.yaml");
        let creds = KamateraCredentials::from_file(&creds_path).expect("credentials");
        let groups: BTreeMap<String, KamateraSettings> = config
            .node_groups
            .iter()
            .filter_map(|g| {
                g.settings
                    .of::<nodewright::cloud::kamatera::KamateraSettings>()
                    .cloned()
                    .map(|k| (g.name.clone(), k))
            })
            .collect();
        let provider: Arc<dyn CloudProvider> =
            Arc::new(KamateraProvider::with_options(creds, groups, fast()).expect("provider"));
        let mut clouds = Clouds::new();
        for g in &config.node_groups {
            clouds.add_group(&g.name, provider.clone());
        }
        Reconciler {
            config: Arc::new(config),
            cluster: Arc::new(KubeCluster::new(client)),
            clouds,
            memory: Default::default(),
            dry_run: false,
        }
    }
}

async fn drive(
    env: &Env,
    rec: &Reconciler,
    timeout: Duration,
    done: impl Fn(&Env) -> bool,
) -> Vec<Action> {
    let start = Instant::now();
    let mut actions = Vec::new();
    loop {
        let report = rec
            .cycle(SystemTime::now())
            .await
            .expect("cycle succeeds against the simulators");
        if report.decision.action != Action::None {
            actions.push(report.decision.action.clone());
        }
        if done(env) {
            return actions;
        }
        assert!(
            start.elapsed() < timeout,
            "did not converge in {timeout:?}; actions so far: {actions:#?}\nservers: {:?}",
            env.cloud
                .servers()
                .iter()
                .map(|s| &s.name)
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_loop_scales_a_kamatera_group_up_and_down() {
    let env = env().await;
    let rec = env.reconciler(env.config(0, "")).await;
    env.cluster
        .add_replicaset(
            "default",
            "web",
            3,
            SimPodTemplate::new("nginx:1.25", 2 * GI),
        )
        .expect("replicaset");
    let actions = drive(&env, &rec, Duration::from_secs(40), |env| {
        let pods: Vec<Pod> = env.cluster.pods();
        pods.iter().filter(|p| running(p)).count() >= 3
    })
    .await;
    assert!(
        actions.contains(&Action::ScaleUp {
            group: "workers".into(),
            count: 1,
            size: None
        }),
        "{actions:#?}"
    );
    let servers = env.cloud.servers();
    assert_eq!(servers.len(), 1, "{servers:?}");
    let vm = servers[0].clone();
    assert!(vm.name.starts_with("kt-workers-"));
    assert_eq!(vm.tags[..2], ["nodewright-kt", "nodewright-workers"]);
    // Then the creation time and the settings hash the loop stamped, and the mark
    // that its node joined (issue 19).
    assert!(
        vm.tags.len() == 5
            && vm.tags[2].starts_with("nodewright-t")
            && vm.tags[3].starts_with("nodewright_h")
            && vm.tags[4].starts_with("nodewright_j"),
        "{:?}",
        vm.tags
    );
    assert!(vm.script.starts_with("#!/bin/sh"));
    assert!(vm
        .script
        .contains("--node-taint=nodewright.io/startup=true:NoSchedule"));
    let node = env.cluster.node(&vm.name).expect("node registered");
    assert!(ready(&node) && !has_startup_taint(&node));

    // The work goes away and nodewright's cordon is on the node (as a process that
    // died after cordoning leaves it): it is drained, its Node deleted, then its
    // server terminated.
    env.cluster
        .scale_replicaset("default", "web", 0)
        .expect("scale down");
    // Cordoned once its pods are on their way out (a node cordoned as empty that still
    // runs pods is given back, issue 29 item 9).
    common::wait_until_app_pods_leave(&env.cluster, &vm.name, "web").await;
    let client = env.cluster.kube_client().await.expect("client");
    let nodes: Api<Node> = Api::all(client);
    nodes
        .patch(
            &vm.name,
            &PatchParams::default(),
            &Patch::Merge(common::cordon_patch(true)),
        )
        .await
        .expect("cordon");
    let actions = drive(&env, &rec, Duration::from_secs(40), |env| {
        env.cluster.node(&vm.name).is_none() && env.cloud.servers().is_empty()
    })
    .await;
    assert!(
        actions
            .iter()
            .any(|a| matches!(a, Action::DeleteNodes { nodes } if nodes.iter().any(|t| t.node == vm.name))),
        "{actions:#?}"
    );
    let terminate = env
        .cloud
        .calls()
        .into_iter()
        .filter(|c| c.path == "/service/server/terminate")
        .filter_map(|c| c.body)
        .next()
        .expect("terminate called");
    assert_eq!(terminate["force"], true);
    assert!(
        matches!(env.events.lock().expect("events").last(), Some(VmEvent::Deleted { name }) if *name == vm.name)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kamatera_tags_in_current_api_shape_keep_every_cycle_working() {
    // Issue 11: with tag rows `{"id", "tagName"}` every cycle after the first create
    // failed. The loop over loopback HTTP: create, then keep cycling, and a restarted
    // process (no tag cache) too.
    let env = env().await;
    let rec = env.reconciler(env.config(1, "")).await;
    let joined = |env: &Env| {
        env.cluster.nodes().iter().any(|n| {
            n.metadata
                .name
                .as_deref()
                .is_some_and(|m| m.starts_with("kt-workers-"))
                && ready(n)
                && !has_startup_taint(n)
        })
    };
    let actions = drive(&env, &rec, Duration::from_secs(40), joined).await;
    assert!(
        actions.contains(&Action::ScaleUp {
            group: "workers".into(),
            count: 1,
            size: None
        }),
        "{actions:#?}"
    );
    let vm = env.cloud.servers()[0].clone();
    let (status, rows) = raw(
        &env.cloud,
        reqwest::Method::POST,
        "/server/tags",
        Some(serde_json::json!({ "id": vm.id })),
    )
    .await;
    assert_eq!(status, 200);
    assert!(
        rows.as_array()
            .is_some_and(|r| !r.is_empty() && r.iter().all(|r| r["tagName"].is_string())),
        "{rows}"
    );
    let tag_calls = |env: &Env| {
        env.cloud
            .calls()
            .iter()
            .filter(|c| c.path == "/server/tags")
            .count()
    };
    let restarted = env.reconciler(env.config(1, "")).await;
    let before = tag_calls(&env);
    for r in [&rec, &restarted, &rec, &restarted, &rec] {
        let report = r
            .cycle(SystemTime::now())
            .await
            .expect("a cycle after the create succeeds");
        assert!(
            !matches!(
                report.decision.action,
                Action::ScaleUp { .. } | Action::DeleteServers { .. } | Action::DeleteNodes { .. }
            ),
            "{:?}",
            report.decision.action
        );
    }
    // The restarted process read the tags itself (in the current shape) and kept the
    // server as the group's one node.
    assert!(tag_calls(&env) > before);
    let servers = env.cloud.servers();
    assert_eq!(servers.len(), 1, "{servers:?}");
    assert_eq!(servers[0].id, vm.id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_never_boots_is_replaced_after_the_provision_timeout() {
    let env = env().await;
    env.cloud.never_boot("");
    let rec = env
        .reconciler(env.config(1, "scaleUpBackoff: {initial: 300ms, max: 1s}"))
        .await;
    // The first server never joins: it is deleted after provisionTimeout (3s) and
    // another is created.
    let first = Arc::new(Mutex::new(None::<String>));
    let seen = first.clone();
    drive(&env, &rec, Duration::from_secs(40), move |env| {
        let servers = env.cloud.servers();
        let mut f = seen.lock().expect("first");
        if f.is_none() {
            *f = servers.first().map(|s| s.name.clone());
        }
        let Some(name) = f.clone() else { return false };
        !servers.iter().any(|s| s.name == name) && !servers.is_empty()
    })
    .await;
    let gone = first.lock().expect("first").clone().expect("first server");
    assert!(env.cluster.node(&gone).is_none());
    assert!(env
        .events
        .lock()
        .expect("events")
        .iter()
        .any(|e| matches!(e, VmEvent::Deleted { name } if *name == gone)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provision_timeout_counts_from_the_real_creation_after_a_restart() {
    let env = env().await;
    env.cloud.never_boot("");
    let config = env.config(1, "");
    // Process A creates a server that never boots, then goes away.
    let groups: BTreeMap<String, KamateraSettings> = config
        .node_groups
        .iter()
        .filter_map(|g| {
            g.settings
                .of::<nodewright::cloud::kamatera::KamateraSettings>()
                .cloned()
                .map(|k| (g.name.clone(), k))
        })
        .collect();
    let a = KamateraProvider::with_options(creds(&env.cloud), groups, fast()).expect("provider");
    let made = a
        .create_server(&CreateRequest {
            name: "kt-workers-first".into(),
            cluster: "kt".into(),
            group: "workers".into(),
            user_data: "#!/bin/sh\n".into(),
            size: None,
            settings_hash: HASH.into(),
            zone: None,
        })
        .await
        .expect("create");
    drop(a);
    let at = |secs: f64| made.created + Duration::from_secs_f64(secs);
    let sleep_until = |t: SystemTime| async move {
        if let Ok(d) = t.duration_since(SystemTime::now()) {
            tokio::time::sleep(d).await;
        }
    };
    // Process B starts 1.5s later (provisionTimeout is 3s): not timed out yet...
    sleep_until(at(1.5)).await;
    let rec = env.reconciler(env.config(1, "")).await;
    let report = rec.cycle(SystemTime::now()).await.expect("cycle");
    assert!(
        !matches!(report.decision.action, Action::DeleteServers { .. }),
        "{:?}",
        report.decision.action
    );
    // ...but 3s after the real creation it is, although B has seen it for under 2s.
    sleep_until(at(3.3)).await;
    let report = rec.cycle(SystemTime::now()).await.expect("cycle");
    match &report.decision.action {
        Action::DeleteServers { servers, .. } => {
            assert!(servers.iter().any(|s| s.id == made.id), "{servers:?}")
        }
        other => panic!("expected the never-booted server deleted, got {other:?}"),
    }
    let started = Instant::now();
    while env.cloud.servers().iter().any(|s| s.id == made.id) {
        assert!(started.elapsed() < Duration::from_secs(10), "not deleted");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leftover_server_found_by_its_tags_is_removed() {
    let env = env().await;
    // A crashed process left a server with our tags; it never joined.
    let leftover = env.cloud.insert_server(
        "kt-workers-crash",
        &["nodewright-kt", "nodewright-workers"],
        true,
    );
    // Someone else's server with similar tags must stay.
    env.cloud.insert_server(
        "kt-workers-other",
        &["nodewright-other", "nodewright-workers"],
        true,
    );
    let rec = env.reconciler(env.config(0, "")).await;
    let actions = drive(&env, &rec, Duration::from_secs(30), |env| {
        !env.cloud.servers().iter().any(|s| s.id == leftover)
    })
    .await;
    assert!(!actions.is_empty());
    assert_eq!(env.cloud.servers().len(), 1);
    assert_eq!(env.cloud.servers()[0].name, "kt-workers-other");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_creates_and_a_failed_delete_are_retried_by_the_loop() {
    let env = env().await;
    env.cloud.fail_next_creates(1, CreateFailure::Refused);
    env.cloud.fail_next_creates(1, CreateFailure::CommandError);
    // Each failed create backs the group off (30s, then 60s by default): keep it short.
    let rec = env
        .reconciler(env.config(1, "scaleUpBackoff: {initial: 200ms, max: 500ms}"))
        .await;
    let start = Instant::now();
    // Errors of a cycle are reported, not fatal: keep cycling until a node joins.
    loop {
        let _ = rec.cycle(SystemTime::now()).await;
        let joined = env.cluster.nodes().iter().any(|n| {
            n.metadata
                .name
                .as_deref()
                .is_some_and(|m| m.starts_with("kt-workers-"))
                && ready(n)
                && !has_startup_taint(n)
        });
        if joined {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(40), "no node joined");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(env.cloud.servers().len(), 1);
    let vm = env.cloud.servers()[0].clone();

    // Scale down with a terminate that fails once.
    env.cloud.fail_next_deletes(1);
    let rec = env.reconciler(env.config(0, "")).await;
    let client = env.cluster.kube_client().await.expect("client");
    Api::<Node>::all(client)
        .patch(
            &vm.name,
            &PatchParams::default(),
            &Patch::Merge(common::cordon_patch(true)),
        )
        .await
        .expect("cordon");
    let start = Instant::now();
    while !env.cloud.servers().is_empty() {
        let _ = rec.cycle(SystemTime::now()).await;
        assert!(
            start.elapsed() < Duration::from_secs(40),
            "server not removed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let terminates = env
        .cloud
        .calls()
        .iter()
        .filter(|c| c.path == "/service/server/terminate")
        .count();
    assert!(terminates >= 2, "{terminates}");
}

/// Issue 8: Kamatera terminated by id without reading the server's tags back. Now
/// `delete_server` reads the server list and the server's tags afresh (not from the
/// cache) and refuses a server that is not this cluster's by its name and its tags;
/// no terminate is sent for any of them.
#[tokio::test]
async fn kamatera_delete_refuses_a_server_of_another_cluster() {
    let (sim, _) = start_sim().await;
    let p = provider(&sim, &[("workers", settings(""))]);
    let theirs = sim.insert_server(
        "c2-workers-aaaaa",
        &["nodewright-c2", "nodewright-workers"],
        true,
    );
    let their_tag = sim.insert_server(
        "c1-workers-bbbbb",
        &["nodewright-c2", "nodewright-workers"],
        true,
    );
    let untagged = sim.insert_server("c1-workers-manual", &[], true);
    // Ours when listed (its tags now cached), then handed to another cluster.
    let made = p
        .create_server(&req("c1-workers-ccccc", "workers"))
        .await
        .expect("create");
    assert_eq!(p.list_servers("c1").await.expect("list").len(), 1);
    for (key, tag) in [("remove", "nodewright-c1"), ("add", "nodewright-c2")] {
        let (status, _) = raw(
            &sim,
            reqwest::Method::POST,
            "/server/tags",
            Some(serde_json::json!({ "id": made.id, key: tag })),
        )
        .await;
        assert_eq!(status, 200);
    }

    for (id, cause) in [
        (&theirs, "its name does not start with 'c1-'"),
        (&their_tag, "it has no tag nodewright-c1"),
        (&untagged, "it has no tag nodewright-c1 (its tags: none)"),
        (&made.id, "it has no tag nodewright-c1"),
    ] {
        match p.delete_server("c1", id).await {
            Err(e @ CloudError::Refused { .. }) => {
                let text = e.to_string();
                assert!(
                    text.contains(&format!("({id})")),
                    "names the server: {text}"
                );
                assert!(text.contains(cause), "names the cause: {text}");
            }
            other => panic!("{id}: expected a refusal, got {other:?}"),
        }
        assert!(sim.servers().iter().any(|s| &s.id == id), "{id} terminated");
    }
    assert!(
        post_bodies(&sim, "/service/server/terminate").is_empty(),
        "a terminate was sent"
    );

    // Read back afresh: not ours → no cluster; ours → cluster and group.
    let read = p
        .get_server("c1", &made.id)
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(read.cluster, None);
    assert_eq!(read.name, "c1-workers-ccccc");
    let theirs_read = p
        .get_server("c2", &theirs)
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(theirs_read.cluster.as_deref(), Some("c2"));
    assert_eq!(theirs_read.group.as_deref(), Some("workers"));
    assert!(p
        .get_server("c1", "no-such-id")
        .await
        .expect("get")
        .is_none());

    // Its own cluster may delete it.
    p.delete_server("c2", &theirs)
        .await
        .expect("c2 deletes its own server");
    assert!(!sim.servers().iter().any(|s| s.id == theirs));
}

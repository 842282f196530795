//! Health, secrets, config reload, dry run and the pace of cycles, with the real binary.

use super::*;

/// Accepts connections and never answers: an API server that hangs.
fn black_hole() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in l.incoming().flatten() {
            held.push(s);
        }
    });
    port
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_fails_when_the_loop_is_stuck() {
    let env = SimEnv::start(None, SimTimings::default())
        .await
        .expect("env");
    let (cfg, _) = env.write_config(&config()).expect("config");
    let hole = black_hole();
    let kubeconfig = env.dir.join("stuck-kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: \"http://127.0.0.1:{hole}\"}}\nusers:\n- name: u\n  user: {{token: t}}\ncontexts:\n- name: x\n  context: {{cluster: c, user: u}}\ncurrent-context: x\n"
        ),
    )
    .expect("kubeconfig");
    let port = free_port();
    let stderr = env.dir.join("stuck.log");
    let mut cmd = nodewright_for!(&env, &cfg);
    cmd.args([
        "run",
        "--metrics-addr",
        &format!("127.0.0.1:{port}"),
        "--stuck-after",
        "2s",
    ])
    // The API server is the black hole, not the simulated cluster.
    .env("KUBECONFIG_FILE", &kubeconfig)
    .stdout(Stdio::null())
    .stderr(std::fs::File::create(&stderr).expect("log"));
    let _p = Proc {
        child: Killed(cmd.spawn().expect("start")),
        stderr,
    };
    wait_for("/healthz to answer", Duration::from_secs(20), || {
        get(port, "/healthz").is_some()
    })
    .await;
    assert_eq!(
        get(port, "/healthz").map(|r| r.0),
        Some(200),
        "healthy at first"
    );
    assert_eq!(
        get(port, "/readyz").map(|r| r.0),
        Some(503),
        "no cycle completed yet"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (status, body) = get(port, "/healthz").expect("healthz");
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("reconcile loop"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_never_appear_in_logs_events_status_or_plan() {
    let env = SimEnv::start(None, SimTimings::default())
        .await
        .expect("env");
    let (cfg, _) = env.write_config(&config()).expect("config");
    let password = env.cloud.options().password.clone();
    let port = free_port();
    let mut p = spawn(
        &env,
        &cfg,
        "secrets",
        port,
        &["--log-format", "json", "--lease-namespace", "default"],
    );
    env.cluster
        .add_replicaset(
            "default",
            "web",
            2,
            SimPodTemplate::new("nginx:1.25", 3 * GI),
        )
        .expect("rs");
    wait_for("pods running", Duration::from_secs(30), || {
        all_running(&env, 2)
    })
    .await;
    // The VM really got the token: it is in the user data, and only there.
    assert!(env.cloud.servers().iter().any(|s| s
        .user_data
        .as_deref()
        .is_some_and(|u| u.contains(JOIN_TOKEN))));
    wait_for("status ConfigMap", Duration::from_secs(10), || {
        env.cluster
            .get::<ConfigMap>("default", "nodewright-status")
            .is_some()
    })
    .await;
    p.kill();
    let log = p.log();
    assert!(log.contains("scale-up"), "the log shows the action:\n{log}");
    // Regression: without --leader-elect the dropped election channel read as "lost
    // leadership" and every cycle was abandoned.
    assert!(!log.contains("lost leadership"), "{log}");
    let plan = nodewright_for!(&env, &cfg)
        .args(["plan", "--json"])
        .env("RUST_LOG", "debug")
        .output()
        .expect("plan");
    assert!(
        plan.status.success(),
        "{}",
        String::from_utf8_lossy(&plan.stderr)
    );
    let status = env
        .cluster
        .get::<ConfigMap>("default", "nodewright-status")
        .and_then(|c| c.data)
        .map(|d| format!("{d:?}"))
        .unwrap_or_default();
    assert!(status.contains("workers"), "status lists groups: {status}");
    let events = format!("{:?}", env.cluster.events());
    assert!(events.contains("TriggeredScaleUp"), "{events}");
    let outputs = [
        ("log", log),
        (
            "plan stdout",
            String::from_utf8_lossy(&plan.stdout).to_string(),
        ),
        (
            "plan stderr",
            String::from_utf8_lossy(&plan.stderr).to_string(),
        ),
        ("status ConfigMap", status),
        ("events", events),
    ];
    for (what, text) in &outputs {
        for secret in [JOIN_TOKEN, password.as_str()] {
            assert!(!text.contains(secret), "{what} contains a secret");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_changes_apply_without_restart_and_a_bad_one_is_rejected() {
    let env = SimEnv::start(None, SimTimings::default())
        .await
        .expect("env");
    let (cfg, _) = env.write_config(&config()).expect("config");
    let port = free_port();
    let p = spawn(&env, &cfg, "reload", port, &["--status-configmap", "off"]);
    wait_for("first cycle", Duration::from_secs(20), || {
        get(port, "/readyz").is_some_and(|r| r.0 == 200)
    })
    .await;
    assert!(env.cloud.servers().is_empty());
    // minSize 0 → 1, written the way a mounted ConfigMap changes: a new file renamed in.
    let text = std::fs::read_to_string(&cfg).expect("read config");
    let replace = |from: &str, to: &str| {
        let tmp = cfg.with_extension("new");
        std::fs::write(&tmp, text.replacen(from, to, 1)).expect("write");
        std::fs::rename(&tmp, &cfg).expect("rename");
    };
    replace("minSize: 0", "minSize: 1");
    wait_for("the new minSize to act", Duration::from_secs(20), || {
        env.cloud.servers().len() == 1
    })
    .await;
    // An invalid config is refused; the last good one (minSize 1) stays in force.
    replace("minSize: 0", "minSize: 1\n    bogusKey: 1");
    wait_for(
        "the rejection to be logged",
        Duration::from_secs(10),
        || p.log().contains("config changed but is invalid"),
    )
    .await;
    assert!(p.log().contains("bogusKey"), "the error names the key");
    env.cluster
        .add_replicaset(
            "default",
            "web",
            3,
            SimPodTemplate::new("nginx:1.25", 3 * GI),
        )
        .expect("rs");
    wait_for(
        "scale-up under the last good config",
        Duration::from_secs(30),
        || all_running(&env, 3),
    )
    .await;
    assert!(env.cloud.servers().len() >= 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_decides_and_logs_but_changes_nothing() {
    let env = SimEnv::start(None, SimTimings::default())
        .await
        .expect("env");
    let (cfg, _) = env.write_config(&config()).expect("config");
    let port = free_port();
    let mut p = spawn(
        &env,
        &cfg,
        "dry",
        port,
        &["--dry-run", "--lease-namespace", "default"],
    );
    env.cluster
        .add_replicaset(
            "default",
            "web",
            2,
            SimPodTemplate::new("nginx:1.25", 3 * GI),
        )
        .expect("rs");
    wait_for(
        "the would-be action in the log",
        Duration::from_secs(20),
        || p.log().contains("dry run: would add"),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    p.kill();
    assert!(
        env.cloud.servers().is_empty(),
        "a VM was created in dry run"
    );
    assert!(env.proxmox.guests().is_empty() && env.kamatera.servers().is_empty());
    let writes: Vec<String> = env
        .cluster
        .calls()
        .iter()
        .filter(|c| matches!(c.verb.as_str(), "create" | "patch" | "update" | "delete"))
        .filter(|c| c.resource != "configmaps" && c.resource != "events")
        .map(|c| format!("{} {} {:?}", c.verb, c.resource, c.name))
        .collect();
    assert!(
        writes.is_empty(),
        "dry run wrote to the cluster: {writes:?}"
    );
}

/// Pods of ReplicaSet `app` (by their `app` label) with the node each is bound to.
fn placed(env: &SimEnv, app: &str) -> Vec<(String, Option<String>)> {
    env.cluster
        .pods()
        .into_iter()
        .filter(|p| {
            p.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("app"))
                .is_some_and(|a| a == app)
                && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
        })
        .map(|p| {
            (
                p.metadata.name.unwrap_or_default(),
                p.spec.and_then(|s| s.node_name),
            )
        })
        .collect()
}

/// With `scanInterval: 1m`, a node nodewright should take away goes mark-unneeded →
/// cordon → drain → delete in one burst of cycles: after an action the next cycle
/// starts at once (it sees what the action did) instead of a minute later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_an_action_the_next_cycle_starts_at_once_so_a_removal_takes_seconds() {
    let env = SimEnv::start(None, SimTimings::default())
        .await
        .expect("env");
    let body = |min_size: u32| {
        format!(
            r#"clusterName: prod
freeMemoryTarget: 0 B
provisionTimeout: 30s
scanInterval: 1m
imagePuller: {{enabled: false}}
scaleDown: {{delayAfterAdd: 1s, unneededTime: 0s}}
nodeGroups:
  - name: workers
    provider: openstack
    minSize: {min_size}
    maxSize: 4
    openstack: {{flavor: m1.large, image: ubuntu-24.04, network: private}}
    userData:
      template: k3s-agent.cloud-init.yaml.j2
      variables: {{k3s_url: "https://192.0.2.1:6443", k3s_token: "{JOIN_TOKEN}"}}
"#
        )
    };
    // Two managed nodes, made by the reconciler in this process (minSize 2 keeps both).
    let (_, setup) = env.write_config(&body(2)).expect("config");
    let rec = env.reconciler(setup).await.expect("reconciler");
    let joined = |env: &SimEnv| {
        env.cluster
            .nodes()
            .iter()
            .filter(|n| {
                n.metadata
                    .name
                    .as_deref()
                    .is_some_and(|m| m.starts_with("prod-workers-"))
                    && common::ready(n)
                    && !common::has_startup_taint(n)
            })
            .count()
    };
    let start = Instant::now();
    while !(env.cloud.servers().len() == 2 && joined(&env) == 2) {
        let r = rec
            .cycle(std::time::SystemTime::now())
            .await
            .expect("setup cycle");
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no two nodes: {:?} {:#?}",
            env.cloud
                .servers()
                .iter()
                .map(|s| &s.name)
                .collect::<Vec<_>>(),
            r.decision
        );
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    // 5 GiB on one node keeps it above utilizationThreshold (0.5); 1 GiB lands on the
    // other (the least allocated), which is then unneeded: its pod fits beside the 5 GiB.
    env.cluster
        .add_replicaset(
            "default",
            "big",
            1,
            SimPodTemplate::new("nginx:1.25", 5 * GI),
        )
        .expect("rs");
    wait_for("the big pod to run", Duration::from_secs(20), || {
        placed(&env, "big").len() == 1
    })
    .await;
    env.cluster
        .add_replicaset("default", "small", 1, SimPodTemplate::new("nginx:1.25", GI))
        .expect("rs");
    wait_for("the small pod to run", Duration::from_secs(20), || {
        placed(&env, "small").len() == 1
    })
    .await;
    let keep = placed(&env, "big")[0].1.clone().expect("big pod is bound");
    let remove = placed(&env, "small")[0]
        .1
        .clone()
        .expect("small pod is bound");
    assert_ne!(keep, remove, "the pods share a node");
    assert_eq!(
        rec.cycle(std::time::SystemTime::now())
            .await
            .expect("cycle")
            .decision
            .action,
        nodewright::plan::Action::None
    );

    // Now the real binary, minSize 0, one cycle a minute.
    let (cfg, _) = env.write_config(&body(0)).expect("config");
    env.cluster.clear_calls();
    let port = free_port();
    let started = Instant::now();
    let mut p = spawn(&env, &cfg, "at-once", port, &["--status-configmap", "off"]);
    let gone = |env: &SimEnv| {
        env.cluster.node(&remove).is_none() && env.cloud.servers().iter().all(|s| s.name != remove)
    };
    let deadline = Duration::from_secs(20);
    while !gone(&env) {
        assert!(
            started.elapsed() < deadline,
            "{remove} not removed within {deadline:?} (scanInterval 1m):\n{}",
            p.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let took = started.elapsed();
    let reasons = || -> Vec<String> {
        env.cluster
            .events()
            .into_iter()
            .filter(|e| e.involved_object.name.as_deref() == Some(remove.as_str()))
            .filter_map(|e| e.reason)
            .collect()
    };
    // The Events of the last action are posted after it.
    wait_for("the NodeDeleted Event", Duration::from_secs(10), || {
        reasons().iter().any(|r| r == "NodeDeleted")
    })
    .await;
    p.kill();
    // Cordon, then the eviction of its pod, then the Node's deletion, in that order.
    let calls = env.cluster.calls();
    let at = |f: &dyn Fn(&nodewright::sim::cluster::ApiCall) -> bool| calls.iter().position(f);
    let evicted = at(&|c| c.subresource.as_deref() == Some("eviction"))
        .unwrap_or_else(|| panic!("no eviction: {calls:?}"));
    let deleted = at(&|c| {
        c.verb == "delete" && c.resource == "nodes" && c.name.as_deref() == Some(remove.as_str())
    })
    .unwrap_or_else(|| panic!("node not deleted through the API: {calls:?}"));
    assert!(evicted < deleted, "node deleted before its pod was evicted");
    let reasons = reasons();
    for r in ["Cordoned", "Draining", "NodeDeleted"] {
        assert!(reasons.iter().any(|x| x == r), "no {r} Event: {reasons:?}");
    }
    // Nothing lost: the evicted pod runs again on the node that stays, which stays.
    wait_for(
        "the small pod to run again",
        Duration::from_secs(10),
        || {
            placed(&env, "small")
                .iter()
                .any(|(_, n)| n.as_deref() == Some(keep.as_str()))
        },
    )
    .await;
    assert!(env.cluster.node(&keep).is_some());
    assert_eq!(env.cloud.servers().len(), 1, "{:?}", env.cloud.servers());
    eprintln!("{remove} removed {took:?} after start");
}

//! The deployed shape of `nodewright run`, as real processes over loopback: leader
//! election between replicas, /metrics, /healthz, and secrets kept out of every output.

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{free_port, nodewright_for, wait_for, Killed};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use nodewright::sim::cluster::SimPodTemplate;
use nodewright::sim::env::{SimEnv, SimTimings};

const GI: u64 = 1 << 30;
const JOIN_TOKEN: &str = "K10-very-secret-join-token-4f2a9c";

/// `freeMemoryTarget: 0 B`: only pods that cannot be scheduled trigger a scale-up.
fn config() -> String {
    format!(
        r#"clusterName: prod
freeMemoryTarget: 0 B
provisionTimeout: 30s
scanInterval: 300ms
nodeGroups:
  - name: workers
    provider: openstack
    minSize: 0
    maxSize: 4
    openstack: {{flavor: m1.large, image: ubuntu-24.04, network: private}}
    userData:
      template: k3s-agent.cloud-init.yaml.j2
      variables: {{k3s_url: "https://192.0.2.1:6443", k3s_token: "{JOIN_TOKEN}"}}
"#
    )
}

struct Proc {
    child: Killed,
    stderr: PathBuf,
}

impl Proc {
    fn kill(&mut self) {
        self.child.kill();
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }
}

fn spawn(env: &SimEnv, config: &Path, name: &str, port: u16, extra: &[&str]) -> Proc {
    let stderr = env.dir.join(format!("{name}.log"));
    let file = std::fs::File::create(&stderr).expect("log file");
    let mut cmd = nodewright_for(env, config);
    cmd.arg("run")
        .args(["--metrics-addr", &format!("127.0.0.1:{port}")])
        .args(extra)
        .env("POD_NAME", name)
        .stdout(Stdio::null())
        .stderr(file);
    Proc {
        child: Killed(cmd.spawn().expect("start nodewright")),
        stderr,
    }
}

/// A plain HTTP/1.0 GET; returns (status, body).
fn get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let status = out.split_whitespace().nth(1)?.parse().ok()?;
    let body = out.split_once("\r\n\r\n").map(|(_, b)| b.to_string())?;
    Some((status, body))
}

/// The value of a metric sample line starting with `prefix`, summed over matches.
fn metric(body: &str, prefix: &str) -> f64 {
    body.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn all_running(env: &SimEnv, n: usize) -> bool {
    let pods: Vec<Pod> = env
        .cluster
        .pods()
        .into_iter()
        .filter(|p| {
            p.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with("web"))
        })
        .collect();
    pods.len() == n
        && pods
            .iter()
            .all(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
}

fn holder(env: &SimEnv) -> Option<String> {
    env.cluster
        .get::<Lease>("default", "nodewright")
        .and_then(|l| l.spec?.holder_identity)
}

const ELECT: &[&str] = &[
    "--leader-elect",
    "--lease-namespace",
    "default",
    "--lease-duration",
    "3s",
    "--renew-deadline",
    "2s",
    "--retry-period",
    "300ms",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_one_acts_and_the_other_takes_over_when_the_leader_dies() {
    let env = SimEnv::start(
        None,
        SimTimings {
            boot_delay: Duration::from_secs(2),
            ..SimTimings::default()
        },
    )
    .await
    .expect("env");
    let (cfg, _) = env.write_config(&config()).expect("config");
    let (pa, pb) = (free_port(), free_port());
    let mut a = spawn(&env, &cfg, "replica-a", pa, ELECT);
    let mut b = spawn(&env, &cfg, "replica-b", pb, ELECT);
    wait_for("a leader", Duration::from_secs(20), || {
        holder(&env).is_some()
    })
    .await;
    let first = holder(&env).unwrap_or_default();
    let (leader, leader_port, standby_port) = if first.starts_with("replica-a") {
        (&mut a, pa, pb)
    } else {
        (&mut b, pb, pa)
    };
    // 4 pods of 3 GiB need two 8 GiB nodes; kill the leader while they boot.
    env.cluster
        .add_replicaset(
            "default",
            "web",
            4,
            SimPodTemplate::new("nginx:1.25", 3 * GI),
        )
        .expect("rs");
    wait_for("the leader to create a VM", Duration::from_secs(20), || {
        !env.cloud.servers().is_empty()
    })
    .await;
    let standby_metrics = get(standby_port, "/metrics")
        .expect("standby serves metrics")
        .1;
    assert_eq!(metric(&standby_metrics, "nodewright_leader "), 0.0);
    assert_eq!(
        metric(&standby_metrics, "nodewright_actions_total"),
        0.0,
        "the standby acted:\n{standby_metrics}"
    );
    let leader_metrics = get(leader_port, "/metrics")
        .expect("leader serves metrics")
        .1;
    assert_eq!(metric(&leader_metrics, "nodewright_leader "), 1.0);
    leader.kill();
    let killed = Instant::now();
    wait_for("the standby to take over", Duration::from_secs(15), || {
        holder(&env).is_some_and(|h| h != first)
    })
    .await;
    let handover = killed.elapsed();
    assert!(
        handover < Duration::from_secs(3) + Duration::from_secs(2),
        "handover took {handover:?}, more than the lease duration plus a retry"
    );
    wait_for("the work to complete", Duration::from_secs(40), || {
        all_running(&env, 4)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let servers = env.cloud.servers();
    assert_eq!(servers.len(), 2, "work done once, not twice: {servers:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_move_during_a_scale_up() {
    let env = SimEnv::start(None, SimTimings::default())
        .await
        .expect("env");
    let (cfg, _) = env.write_config(&config()).expect("config");
    let port = free_port();
    let p = spawn(&env, &cfg, "metrics", port, &[]);
    wait_for("/metrics", Duration::from_secs(20), || {
        get(port, "/metrics")
            .is_some_and(|(s, b)| s == 200 && b.contains("nodewright_free_memory_target_bytes 0"))
    })
    .await;
    let before = get(port, "/metrics").expect("scrape").1;
    assert_eq!(
        metric(&before, "nodewright_scale_ups_total"),
        0.0,
        "{before}"
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
    let mut after = String::new();
    wait_for("counters to move", Duration::from_secs(10), || {
        after = get(port, "/metrics").map(|r| r.1).unwrap_or_default();
        metric(&after, "nodewright_scale_ups_total{group=\"workers\"}") >= 1.0
            && metric(
                &after,
                "nodewright_actions_total{action=\"remove-startup-taint\"}",
            ) >= 1.0
            // Gauges describe the snapshot a cycle saw: the node counts as ready from the
            // cycle after its taint came off.
            && metric(&after, "nodewright_nodes{group=\"workers\",state=\"ready\"}") >= 1.0
    })
    .await;
    assert!(
        metric(&after, "nodewright_actions_total{action=\"scale-up\"}") >= 1.0,
        "{after}"
    );
    assert!(
        metric(
            &after,
            "nodewright_actions_total{action=\"remove-startup-taint\"}"
        ) >= 1.0,
        "{after}"
    );
    assert!(
        metric(&after, "nodewright_cloud_api_duration_seconds_count{provider=\"openstack\",call=\"create_server\"}") >= 1.0,
        "{after}"
    );
    assert!(
        metric(
            &after,
            "nodewright_nodes{group=\"workers\",state=\"ready\"}"
        ) >= 1.0
    );
    assert!(metric(&after, "nodewright_cycle_duration_seconds_count") > 0.0);
    assert!(metric(&after, "nodewright_last_successful_cycle_timestamp_seconds") > 1.0e9);
    assert_eq!(get(port, "/healthz").map(|r| r.0), Some(200));
    assert_eq!(get(port, "/readyz").map(|r| r.0), Some(200));
    drop(p);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_pods_are_counted_by_bucket_and_unhostable_ones_get_an_event() {
    let env = SimEnv::start(None, SimTimings::default())
        .await
        .expect("env");
    let (cfg, _) = env.write_config(&config()).expect("config");
    let port = free_port();
    let p = spawn(&env, &cfg, "buckets", port, &[]);
    wait_for("/metrics", Duration::from_secs(20), || {
        get(port, "/metrics").is_some_and(|(s, _)| s == 200)
    })
    .await;
    // Every bucket is exported, at zero while nothing is pending.
    let before = get(port, "/metrics").expect("scrape").1;
    for bucket in [
        "will-schedule",
        "capacity-coming",
        "scaling-up",
        "no-capacity",
    ] {
        let line = format!("nodewright_pending_pods{{bucket=\"{bucket}\"}} 0");
        assert!(before.contains(&line), "{line} missing:\n{before}");
    }
    // No group has the label this pod selects: nothing can host it.
    env.cluster
        .add_pod(
            "default",
            "nowhere",
            SimPodTemplate::new("nginx:1.25", 64 << 20).node_selector("disktype", "nvme"),
        )
        .expect("pod");
    env.cluster
        .add_replicaset(
            "default",
            "web",
            2,
            SimPodTemplate::new("nginx:1.25", 3 * GI),
        )
        .expect("rs");
    let mut body = String::new();
    wait_for("the no-capacity gauge", Duration::from_secs(20), || {
        body = get(port, "/metrics").map(|r| r.1).unwrap_or_default();
        metric(&body, "nodewright_pending_pods{bucket=\"no-capacity\"}") == 1.0
    })
    .await;
    wait_for("the web pods to run", Duration::from_secs(30), || {
        all_running(&env, 2)
    })
    .await;
    // Once the web pods run, only the unhostable one is pending, every cycle.
    wait_for(
        "the other buckets to empty",
        Duration::from_secs(10),
        || {
            body = get(port, "/metrics").map(|r| r.1).unwrap_or_default();
            metric(&body, "nodewright_pending_pods{bucket=\"scaling-up\"}") == 0.0
                && metric(&body, "nodewright_pending_pods{bucket=\"capacity-coming\"}") == 0.0
                && metric(&body, "nodewright_pending_pods{bucket=\"will-schedule\"}") == 0.0
        },
    )
    .await;
    assert_eq!(
        metric(&body, "nodewright_pending_pods{bucket=\"no-capacity\"}"),
        1.0,
        "{body}"
    );
    let events: Vec<_> = env
        .cluster
        .events()
        .into_iter()
        .filter(|e| {
            e.involved_object.kind.as_deref() == Some("Pod")
                && e.involved_object.name.as_deref() == Some("nowhere")
        })
        .collect();
    assert_eq!(events.len(), 1, "one Event, its count bumped: {events:?}");
    let e = &events[0];
    assert_eq!(e.reason.as_deref(), Some("NotTriggerScaleUp"), "{e:?}");
    assert_eq!(e.type_.as_deref(), Some("Warning"), "{e:?}");
    assert_eq!(e.involved_object.namespace.as_deref(), Some("default"));
    assert!(
        e.message
            .as_deref()
            .is_some_and(|m| m.contains("group workers: nodeSelector does not match")),
        "the Event names each group's reason: {e:?}"
    );
    drop(p);
}

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
    let mut cmd = nodewright_for(&env, &cfg);
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
    let plan = nodewright_for(&env, &cfg)
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

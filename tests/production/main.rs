//! The deployed shape of `nodewright run`, as real processes over loopback: leader
//! election between replicas, /metrics, /healthz, and secrets kept out of every output.

use nodewright_testkit as common;

mod operations;

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
use nodewright::sim::openstack::CreateFailure;

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
    let mut cmd = nodewright_for!(env, config);
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
        // nodewright's, not the scheduler's FailedScheduling.
        .filter(|e| e.reporting_component.as_deref() == Some("nodewright"))
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

/// Regression: a VM that Nova put in ERROR before it ever had a node produced no Event
/// (Events need an object, and there was no node): its fault message now reaches a
/// Warning on the status ConfigMap, where `kubectl describe` shows it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vm_failing_before_it_has_a_node_is_reported_on_the_status_configmap() {
    let env = SimEnv::start(None, SimTimings::default())
        .await
        .expect("env");
    env.cloud.fail_next_creates(1, CreateFailure::NoValidHost);
    let (cfg, _) = env.write_config(&config()).expect("config");
    let port = free_port();
    let p = spawn(&env, &cfg, "nodeless", port, &[]);
    env.cluster
        .add_replicaset(
            "default",
            "web",
            1,
            SimPodTemplate::new("nginx:1.25", 3 * GI),
        )
        .expect("rs");
    // The failed VM is removed and a second create brings the pod up.
    wait_for("the web pod to run", Duration::from_secs(40), || {
        all_running(&env, 1)
    })
    .await;
    let on_status: Vec<_> = env
        .cluster
        .events()
        .into_iter()
        .filter(|e| {
            e.involved_object.kind.as_deref() == Some("ConfigMap")
                && e.involved_object.name.as_deref() == Some("nodewright-status")
        })
        .collect();
    assert_eq!(on_status.len(), 1, "{on_status:?}\n{}", p.log());
    let e = &on_status[0];
    assert_eq!(e.reason.as_deref(), Some("ProvisioningFailed"), "{e:?}");
    assert_eq!(e.type_.as_deref(), Some("Warning"), "{e:?}");
    assert!(
        e.message
            .as_deref()
            .is_some_and(|m| m.contains("No valid host was found.")),
        "Nova's fault message is in the Event: {e:?}"
    );
    drop(p);
}

/// SIGTERM could hang for as long as the API server held the last calls (the lease
/// release): a stop now ends the process within its shutdown grace (10 s) even when every
/// lease write drips its answer a byte a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_within_the_grace_while_the_api_server_hangs() {
    use nodewright::sim::faults::{FaultKind, FaultSpec};
    let spec = FaultSpec {
        drip: Duration::from_secs(1),
        ..FaultSpec::rate(0.0)
    };
    let env = SimEnv::start_with_faults(None, SimTimings::default(), Some(&spec))
        .await
        .expect("env");
    let (cfg, _) = env.write_config(&config()).expect("config");
    let port = free_port();
    // Renewals 5 s apart: the next lease write after the SIGTERM is the release.
    let elect = [
        "--leader-elect",
        "--lease-namespace",
        "default",
        "--lease-duration",
        "15s",
        "--renew-deadline",
        "10s",
        "--retry-period",
        "5s",
    ];
    let mut p = spawn(&env, &cfg, "term", port, &elect);
    wait_for("leadership", Duration::from_secs(20), || {
        holder(&env).is_some_and(|h| h.starts_with("term"))
    })
    .await;
    env.faults.cluster.force(
        FaultKind::Drip,
        "PUT /apis/coordination.k8s.io/v1/namespaces/default/leases/nodewright",
        1,
    );
    let pid = p.child.0.id().to_string();
    let sent = Instant::now();
    let term = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill -TERM");
    assert!(term.success());
    let mut exited = None;
    while sent.elapsed() < Duration::from_secs(25) {
        if let Some(status) = p.child.0.try_wait().expect("wait") {
            exited = Some((sent.elapsed(), status));
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (took, _) =
        exited.unwrap_or_else(|| panic!("still running 25 s after SIGTERM:\n{}", p.log()));
    assert!(
        took < Duration::from_secs(13),
        "stopped {took:?} after SIGTERM; the grace is 10 s:\n{}",
        p.log()
    );
    assert!(
        took >= Duration::from_secs(9),
        "stopped {took:?} after SIGTERM: the release did not drip, so this test shows nothing"
    );
    assert_eq!(env.faults.cluster.counts().drips, 1, "the release dripped");
    assert!(
        p.log().contains("shutdown took longer than 10s"),
        "{}",
        p.log()
    );
}

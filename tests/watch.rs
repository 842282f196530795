//! Watch caches and wake-ups (issue 10), over real loopback HTTP against the simulated
//! API server: a pod becoming Unschedulable starts a cycle within the batching window
//! whatever `scanInterval` says; a watch cut by the network recovers and the next
//! decision sees what changed meanwhile; a resume too old for the server's history
//! (`410 Gone`) leads to a fresh list; nothing is decided before the caches are synced.

use nodewright_testkit as common;

use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use common::proxy::Proxy;
use common::{free_port, nodewright_for, wait_for, Killed};
use nodewright::act::Clouds;
use nodewright::cluster::{CacheOptions, CacheStats, KubeCluster};
use nodewright::config::Config;
use nodewright::plan::Action;
use nodewright::run::clouds::build_clouds_with;
use nodewright::run::Reconciler;
use nodewright::sim::cluster::{SimCluster, SimClusterOptions, SimNodeSpec, SimPodTemplate};
use nodewright::sim::env::{SimEnv, SimTimings};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const GI: u64 = 1 << 30;

fn config(scan: &str) -> String {
    format!(
        r#"clusterName: w
freeMemoryTarget: 0 B
scanInterval: {scan}
nodeGroups:
  - name: workers
    provider: openstack
    maxSize: 4
    openstack: {{flavor: m1.large, image: ubuntu-24.04, network: private}}
    userData:
      template: k3s-agent.cloud-init.yaml.j2
      variables: {{k3s_url: "https://192.0.2.1:6443", k3s_token: "secret"}}
"#
    )
}

/// The HTTP status of `GET path` on `addr`, `None` when nothing answers.
async fn http_status(addr: SocketAddr, path: &str) -> Option<u16> {
    let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .ok()?;
    let mut head = vec![0u8; 64];
    let n = s.read(&mut head).await.ok()?;
    let line = String::from_utf8_lossy(&head[..n]).to_string();
    line.split_whitespace().nth(1)?.parse().ok()
}

/// A kubeconfig for `cluster` that goes through `proxy`, written in `dir`.
async fn client_via(cluster: &SimCluster, proxy: &Proxy) -> kube::Client {
    // The proxy only relays bytes: the address changes, the scheme (HTTPS in SimEnv,
    // whose certificate names 127.0.0.1) stays.
    let yaml = cluster.kubeconfig_yaml().replace(
        &cluster.addr().to_string(),
        proxy.url().trim_start_matches("http://"),
    );
    let kc = kube::config::Kubeconfig::from_yaml(&yaml).expect("kubeconfig");
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("config");
    nodewright::cluster::client_from_config(cfg).expect("client")
}

fn stats(cluster: &KubeCluster, resource: &str) -> CacheStats {
    cluster
        .cache_stats()
        .into_iter()
        .find(|s| s.resource == resource)
        .expect("a cache of that resource")
}

/// Calls of `verb` on `resource` the simulated API server recorded from `from` on.
fn calls(cluster: &SimCluster, from: usize, verb: &str, resource: &str) -> usize {
    cluster.calls()[from..]
        .iter()
        .filter(|c| c.verb == verb && c.resource == resource)
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unschedulable_pod_causes_a_create_within_the_batching_window_despite_a_10m_scan() {
    let env = SimEnv::start(None, SimTimings::default())
        .await
        .expect("env");
    let (path, cfg) = env.write_config(&config("10m")).expect("config");
    assert_eq!(cfg.batch_idle_duration, Duration::from_secs(1));
    assert_eq!(cfg.batch_max_duration, Duration::from_secs(10));
    let port = free_port();
    let log = std::fs::File::create(env.dir.join("run.log")).expect("log");
    let mut cmd = nodewright_for!(&env, &path);
    cmd.args(["run", "--metrics-addr", &format!("127.0.0.1:{port}")])
        .env("RUST_LOG", "nodewright=debug")
        .stdout(Stdio::null())
        .stderr(log);
    let _run = Killed(cmd.spawn().expect("start nodewright run"));
    // Ready once the first cycle (on synced caches, nothing to do) has completed: the
    // next periodic one is ten minutes away.
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let start = Instant::now();
    while http_status(addr, "/readyz").await != Some(200) {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "not ready: {}",
            std::fs::read_to_string(env.dir.join("run.log")).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(env.cloud.servers().is_empty(), "nothing to create yet");

    // No node at all: the scheduler marks the pod Unschedulable, which wakes the loop.
    let marked = Instant::now();
    env.cluster
        .add_pod("default", "big", SimPodTemplate::new("nginx:1.25", 2 * GI))
        .expect("pod");
    let limit = Duration::from_secs(20);
    while env.cloud.servers().is_empty() {
        assert!(
            marked.elapsed() < limit,
            "no create within {limit:?} of the pod (scanInterval 10m):\n{}",
            std::fs::read_to_string(env.dir.join("run.log")).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let took = marked.elapsed();
    // Idle window (1 s) plus a cycle, well inside the 10 s maximum.
    assert!(
        took >= Duration::from_millis(900),
        "{took:?}: before the idle window closed"
    );
    let servers = env.cloud.servers();
    assert_eq!(servers.len(), 1, "{servers:?}");
}

/// The reconciler `run` would build, reading caches through `client`.
fn reconciler(env: &SimEnv, client: kube::Client, config: Config) -> (Reconciler, KubeCluster) {
    let cluster = KubeCluster::watching(client, CacheOptions::default());
    let clouds: Clouds =
        build_clouds_with(&config, |kind| Some(env.credentials_for(kind))).expect("clouds");
    let rec = Reconciler {
        config: Arc::new(config),
        cluster: Arc::new(cluster.clone()),
        clouds,
        memory: Default::default(),
        dry_run: false,
    };
    (rec, cluster)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_watch_recovers_and_the_next_decision_sees_changes_made_meanwhile() {
    let env = SimEnv::start(None, SimTimings::default())
        .await
        .expect("env");
    let (_, cfg) = env.write_config(&config("30s")).expect("config");
    let proxy = Proxy::start(env.cluster.addr()).await;
    let (rec, cluster) = reconciler(&env, client_via(&env.cluster, &proxy).await, cfg);
    let (_, first) = rec.plan(SystemTime::now()).await.expect("plan");
    assert_eq!(first.action, Action::None);
    let lists_before = stats(&cluster, "pods").lists;
    let calls_before = env.cluster.calls().len();

    proxy.cut();
    env.cluster
        .add_replicaset(
            "default",
            "web",
            2,
            SimPodTemplate::new("nginx:1.25", 2 * GI),
        )
        .expect("rs");
    wait_for("pods marked unschedulable", Duration::from_secs(10), || {
        env.cluster
            .pods()
            .iter()
            .filter(|p| common::unschedulable(p))
            .count()
            == 2
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    // Still cut: the cache holds what it had.
    let (snap, _) = rec
        .plan(SystemTime::now())
        .await
        .expect("plan on the cache");
    assert!(snap.pods.iter().all(|p| !p.name.starts_with("web")));
    assert!(stats(&cluster, "pods").errors > 0, "the cut was noticed");

    proxy.restore();
    let start = Instant::now();
    loop {
        let (snap, d) = rec.plan(SystemTime::now()).await.expect("plan");
        if matches!(d.action, Action::ScaleUp { .. }) {
            assert_eq!(snap.pods.iter().filter(|p| p.unschedulable).count(), 2);
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(45),
            "the caches did not recover: {:?}",
            cluster.cache_stats()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Resumed from the last version seen: no second list with a long enough history.
    assert_eq!(stats(&cluster, "pods").lists, lists_before);
    assert_eq!(calls(&env.cluster, calls_before, "list", "pods"), 0);
    assert!(calls(&env.cluster, calls_before, "watch", "pods") >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_older_than_the_servers_history_gets_410_and_relists() {
    let sim = SimCluster::start(SimClusterOptions {
        watch_history: 16,
        ..SimClusterOptions::default()
    })
    .await
    .expect("cluster");
    sim.add_node(SimNodeSpec::new("n0", 8 * GI)).expect("node");
    let proxy = Proxy::start(sim.addr()).await;
    let cluster = KubeCluster::watching(client_via(&sim, &proxy).await, CacheOptions::default());
    cluster.synced().await.expect("synced");
    assert_eq!(stats(&cluster, "nodes").objects, 1);
    assert_eq!(stats(&cluster, "nodes").lists, 1);

    proxy.cut();
    let from = sim.calls().len();
    // Far more changes than the 16 the server keeps.
    for i in 1..=40 {
        sim.add_node(SimNodeSpec::new(format!("n{i}"), 8 * GI))
            .expect("node");
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    proxy.restore();
    wait_for("a relist with every node", Duration::from_secs(45), || {
        let s = stats(&cluster, "nodes");
        s.lists >= 2 && s.objects == 41
    })
    .await;
    assert!(calls(&sim, from, "list", "nodes") >= 1, "listed again");
    let s = stats(&cluster, "nodes");
    assert!(
        s.last_error
            .as_deref()
            .is_some_and(|e| e.contains("410") || e.contains("Expired") || e.contains("too old")),
        "{s:?}"
    );
    let nodes = nodewright::cluster::ClusterApi::nodes(&cluster)
        .await
        .expect("nodes");
    assert_eq!(nodes.len(), 41);
    sim.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_decision_waits_for_complete_caches() {
    let sim = SimCluster::start(SimClusterOptions::default())
        .await
        .expect("cluster");
    sim.add_node(SimNodeSpec::new("n0", 64 * GI)).expect("node");
    // More than one page (500) of pods, so a partial cache is possible.
    for i in 0..1200 {
        sim.add_pod(
            "default",
            &format!("p{i}"),
            SimPodTemplate::new("nginx:1.25", 1 << 20),
        )
        .expect("pod");
    }
    let client = sim.kube_client().await.expect("client");
    let cluster = KubeCluster::watching(client, CacheOptions::default());
    // Read at once, while the first list is still running: the read waits for it.
    let pods = nodewright::cluster::ClusterApi::pods(&cluster)
        .await
        .expect("pods");
    assert_eq!(pods.len(), 1200);
    assert!(stats(&cluster, "pods").synced);
    sim.shutdown();
}

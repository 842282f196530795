//! How fast the deployed loop reacts, over loopback HTTP (issue 10): the real
//! `nodewright run` (a separate process, so its memory is its own) against the simulated
//! API server and OpenStack, with `scanInterval` left at its default (30 s).
//!
//! Run: `cargo build --release && cargo run --release --example react_bench -- NODES [BURSTS]`
//! (default 100 nodes, 50 bursts). The cluster has NODES nodes of 16 GiB with 30 running
//! pods each (not nodewright's nodes, so nothing is scaled down). It prints:
//! - start to first decision: from spawning the process to `/readyz` answering 200
//!   (ready is set when the first cycle completes, on synced caches);
//! - reaction: for each burst (5 pods of 6 GiB that only a new `workers` node can host),
//!   the time from the first pod marked Unschedulable to the cloud's first create
//!   request, p50 / p99 / max; each burst waits until its pods run before the next;
//! - a steady-state cycle: duration (from the process's own histogram) and the API
//!   requests made during two periodic cycles, by verb and resource;
//! - the process's peak RSS (VmHWM).
//!
//! A benchmark, not a test: it asserts nothing about speed. The binary is taken from
//! `NODEWRIGHT_BIN`, else next to this example's directory (`target/release/nodewright`).
//! `BENCH_DIR` keeps the environment (and the process's `run.log`), `BENCH_LOG` sets its
//! `RUST_LOG`, `BENCH_VERBOSE` prints each burst.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use nodewright::sim::cluster::{SimNodeSpec, SimPodTemplate};
use nodewright::sim::env::{SimEnv, SimTimings};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const GI: u64 = 1 << 30;
const PODS_PER_NODE: usize = 30;
const BURST_PODS: usize = 5;

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn binary() -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os("NODEWRIGHT_BIN") {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe()?;
    let dir = exe
        .parent()
        .and_then(|d| d.parent())
        .context("no directory above the example")?;
    Ok(dir.join("nodewright"))
}

/// The whole answer to `GET path`, `None` when nothing answers.
async fn http_get(addr: SocketAddr, path: &str) -> Option<String> {
    let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .ok()?;
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.ok()?;
    Some(String::from_utf8_lossy(&out).into_owned())
}

fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or(0.0)
}

fn peak_rss_mib(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb / 1024.0)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

fn unschedulable(env: &SimEnv, name: &str) -> bool {
    env.cluster.pod("default", name).is_some_and(|p| {
        p.status.and_then(|s| s.conditions).is_some_and(|cs| {
            cs.iter().any(|c| {
                c.type_ == "PodScheduled"
                    && c.status == "False"
                    && c.reason.as_deref() == Some("Unschedulable")
            })
        })
    })
}

fn running(env: &SimEnv, name: &str) -> bool {
    env.cluster
        .pod("default", name)
        .is_some_and(|p| p.status.and_then(|s| s.phase).as_deref() == Some("Running"))
}

fn creates(env: &SimEnv) -> usize {
    env.cloud
        .calls()
        .iter()
        .filter(|c| c.method == "POST" && c.path.ends_with("/servers"))
        .count()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let nodes: usize = args.first().map(|a| a.parse()).transpose()?.unwrap_or(100);
    let bursts: usize = args.get(1).map(|a| a.parse()).transpose()?.unwrap_or(50);
    let bin = binary()?;
    anyhow::ensure!(
        bin.exists(),
        "{} not found: cargo build --release first, or set NODEWRIGHT_BIN",
        bin.display()
    );
    let keep = std::env::var_os("BENCH_DIR").map(PathBuf::from);
    let env = SimEnv::start(
        keep,
        SimTimings {
            boot_delay: Duration::from_millis(500),
            ..SimTimings::default()
        },
    )
    .await?;
    let setup = Instant::now();
    for n in 0..nodes {
        let name = format!("base-{n:05}");
        let mut spec = SimNodeSpec::new(&name, 16 * GI);
        spec.cpus = 8;
        env.cluster.add_node(spec).map_err(anyhow::Error::msg)?;
        for p in 0..PODS_PER_NODE {
            let template = SimPodTemplate::new("nginx:1.25", 256 << 20)
                .cpu(100)
                .label("app", format!("app-{}", p % 10))
                .spec_field("nodeName", json!(name));
            env.cluster
                .add_pod("default", &format!("{name}-{p:02}"), template)
                .map_err(anyhow::Error::msg)?;
        }
    }
    println!(
        "cluster: {nodes} nodes, {} pods, built in {:.1}s",
        nodes * PODS_PER_NODE,
        setup.elapsed().as_secs_f64()
    );
    let (config, _) = env.write_config(&format!(
        r#"clusterName: bench
freeMemoryTarget: 0 B
nodeGroups:
  - name: workers
    provider: openstack
    maxSize: {max}
    openstack: {{flavor: m1.large, image: ubuntu-24.04, network: private}}
    userData:
      template: k3s-agent.cloud-init.yaml.j2
      variables: {{k3s_url: "https://192.0.2.1:6443", k3s_token: "bench"}}
"#,
        max = bursts * BURST_PODS + 10
    ))?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let log = std::fs::File::create(env.dir.join("run.log"))?;
    let mut cmd = Command::new(&bin);
    cmd.envs(env.env_vars(&config))
        .env_remove("KUBECONFIG")
        .env_remove("POD_NAMESPACE")
        .env(
            "RUST_LOG",
            std::env::var("BENCH_LOG").unwrap_or_else(|_| "nodewright=info".into()),
        )
        .args(["run", "--metrics-addr", &addr.to_string()])
        .stdout(Stdio::null())
        .stderr(log);
    let started = Instant::now();
    let child = Killed(
        cmd.spawn()
            .with_context(|| format!("starting {}", bin.display()))?,
    );
    let pid = child.0.id();
    loop {
        let ready = http_get(addr, "/readyz")
            .await
            .is_some_and(|r| r.starts_with("HTTP/1.1 200") || r.starts_with("HTTP/1.0 200"));
        if ready {
            break;
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(600),
            "not ready in 10 min"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let first_decision = started.elapsed();
    println!(
        "start to first decision: {:.2}s",
        first_decision.as_secs_f64()
    );

    let mut reactions = Vec::new();
    for b in 0..bursts {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let before = creates(&env);
        let names: Vec<String> = (0..BURST_PODS)
            .map(|i| format!("burst-{b:03}-{i}"))
            .collect();
        for name in &names {
            let t = SimPodTemplate::new("nginx:1.25", 6 * GI)
                .node_selector(nodewright::model::LABEL_GROUP, "workers");
            env.cluster
                .add_pod("default", name, t)
                .map_err(anyhow::Error::msg)?;
        }
        let t0 = Instant::now();
        let mut marked = None;
        let mut created = None;
        while created.is_none() {
            if marked.is_none() && names.iter().any(|n| unschedulable(&env, n)) {
                marked = Some(Instant::now());
            }
            if creates(&env) > before {
                created = Some(Instant::now());
            }
            anyhow::ensure!(
                t0.elapsed() < Duration::from_secs(120),
                "burst {b}: no create"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let (Some(m), Some(c)) = (marked, created) else {
            anyhow::bail!("burst {b}: created before the pod was seen unschedulable");
        };
        reactions.push(c.saturating_duration_since(m));
        while !names.iter().all(|n| running(&env, n)) {
            anyhow::ensure!(
                t0.elapsed() < Duration::from_secs(180),
                "burst {b}: pods never ran"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    reactions.sort();
    println!(
        "unschedulable -> create over {} bursts: p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms",
        reactions.len(),
        percentile(&reactions, 0.50).as_secs_f64() * 1000.0,
        percentile(&reactions, 0.99).as_secs_f64() * 1000.0,
        reactions.last().copied().unwrap_or_default().as_secs_f64() * 1000.0
    );

    // Steady state: let the last wake-ups settle, then two periodic cycles.
    tokio::time::sleep(Duration::from_secs(15)).await;
    let m0 = http_get(addr, "/metrics").await.unwrap_or_default();
    let calls0 = env.cluster.calls().len();
    let window = Duration::from_secs(61);
    tokio::time::sleep(window).await;
    let m1 = http_get(addr, "/metrics").await.unwrap_or_default();
    let sum = metric(&m1, "nodewright_cycle_duration_seconds_sum")
        - metric(&m0, "nodewright_cycle_duration_seconds_sum");
    let count = metric(&m1, "nodewright_cycle_duration_seconds_count")
        - metric(&m0, "nodewright_cycle_duration_seconds_count");
    let mut by_call: BTreeMap<String, usize> = BTreeMap::new();
    for c in &env.cluster.calls()[calls0..] {
        let what = match &c.subresource {
            Some(s) => format!("{} {}/{s}", c.verb, c.resource),
            None => format!("{} {}", c.verb, c.resource),
        };
        *by_call.entry(what).or_default() += 1;
    }
    println!(
        "steady state over {}s: {count} cycles, mean {:.1} ms; API requests: {:?}",
        window.as_secs(),
        if count > 0.0 {
            sum / count * 1000.0
        } else {
            0.0
        },
        by_call
    );
    println!(
        "peak RSS of nodewright run: {:.0} MiB",
        peak_rss_mib(pid).unwrap_or(0.0)
    );
    Ok(())
}

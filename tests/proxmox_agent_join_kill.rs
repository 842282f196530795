//! Issue 20: a process killed between a Proxmox VM's start and its guest-agent join left
//! the VM to wait out `provisionTimeout` (nothing ran its join script), then removed it.
//! The VM carries the joining mark (`nw-joining`) from before its start until its script was
//! sent; the next process runs the script again and the VM joins, well before
//! `provisionTimeout`. A VM whose node registered before the mark came off is only
//! recorded as joined. Over loopback HTTP: the Proxmox simulator (schema-checked) and the
//! simulated API server with kubelets.

use nodewright_testkit as common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use common::pve as e2e;
use nodewright::act::Clouds;
use nodewright::cloud::proxmox::{ProxmoxProvider, ProxmoxSettings};
use nodewright::cluster::{kubeconfig_from_file, KubeCluster};
use nodewright::config::Config;
use nodewright::plan::Action;
use nodewright::run::Reconciler;
use nodewright::sim::proxmox::{SimProxmox, SimProxmoxOptions};

const PROVISION_TIMEOUT: Duration = Duration::from_secs(600);

/// One `join: guestAgent` group of `minSize: 1`, `provisionTimeout: 10m`, as a freshly
/// started process builds it.
async fn process(dir: &Path, pve: &SimProxmox) -> Reconciler {
    let path = dir.join("autoscaler.yaml");
    std::fs::write(
        &path,
        format!(
            "clusterName: e2e\nfreeMemoryTarget: 0 B\nprovisionTimeout: 10m\ntemplatesDir: {}\nnodeGroups:\n{}",
            dir.join("templates").display(),
            e2e::group("ga", 1, "{template: agent-shared, join: guestAgent}")
        ),
    )
    .expect("config");
    let config = Config::load(&path).expect("config loads");
    assert_eq!(config.provision_timeout, PROVISION_TIMEOUT);
    let settings: BTreeMap<String, ProxmoxSettings> = config
        .node_groups
        .iter()
        .filter_map(|g| {
            g.settings
                .of::<ProxmoxSettings>()
                .cloned()
                .map(|s| (g.name.clone(), s))
        })
        .collect();
    let provider = ProxmoxProvider::with_options(e2e::token_creds(pve), settings, e2e::fast())
        .expect("provider");
    let mut clouds = Clouds::new();
    clouds.add_group("ga", Arc::new(provider));
    let kube = kubeconfig_from_file(&dir.join("kubeconfig"))
        .await
        .expect("kubeconfig");
    Reconciler {
        config: Arc::new(config),
        cluster: Arc::new(KubeCluster::new(
            kube::Client::try_from(kube).expect("client"),
        )),
        clouds,
        memory: Default::default(),
        dry_run: false,
    }
}

/// Runs a first process's cycle on its own runtime and drops the runtime right after, as a
/// kill would: whatever it left running in the background (the join) dies with it.
async fn one_cycle_then_killed(dir: &Path, pve: &SimProxmox) -> Action {
    let (dir, pve) = (dir.to_path_buf(), pve.clone());
    tokio::task::spawn_blocking(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let action = rt.block_on(async {
            let rec = process(&dir, &pve).await;
            let report = rec.cycle(SystemTime::now()).await.expect("cycle");
            report.decision.action
        });
        rt.shutdown_background();
        action
    })
    .await
    .expect("first process")
}

/// Cycles of `rec` until `done`, at most `within`; the kinds of the actions taken.
async fn drive(rec: &Reconciler, within: Duration, done: impl Fn() -> bool) -> Vec<String> {
    let start = Instant::now();
    let mut kinds = Vec::new();
    while !done() {
        assert!(
            start.elapsed() < within,
            "not done within {within:?}; actions: {kinds:?}"
        );
        match rec.cycle(SystemTime::now()).await {
            Ok(r) => kinds.push(r.decision.action.kind().to_string()),
            Err(e) => kinds.push(format!("error: {e}")),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    kinds
}

fn agent_execs(pve: &SimProxmox) -> usize {
    pve.calls()
        .iter()
        .filter(|c| c.method == "POST" && c.path.ends_with("/agent/exec"))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxmox_vm_started_by_a_killed_process_joins_without_waiting_out_provision_timeout() {
    // The guest agent answers 2 s after the start: the first process is gone by then.
    let env = e2e::env_with(SimProxmoxOptions {
        boot_delay: Duration::from_secs(2),
        ..SimProxmoxOptions::default()
    })
    .await;
    let action = one_cycle_then_killed(env.dir.path(), &env.pve).await;
    assert!(
        matches!(&action, Action::ScaleUp { group, count: 1, .. } if group == "ga"),
        "{action:?}"
    );
    let started = env.pve.guests();
    assert_eq!(started.len(), 1, "{started:?}");
    let vm = &started[0];
    assert_eq!(vm.status, "running", "{vm:?}");
    assert!(
        vm.tags().split(';').any(|t| t == "nw-joining"),
        "marked before the start: {vm:?}"
    );
    assert!(vm.files.is_empty(), "the script never reached it: {vm:?}");
    assert_eq!(agent_execs(&env.pve), 0);

    // A fresh process: the VM joins, its script run once, well before provisionTimeout.
    let t0 = Instant::now();
    let rec = process(env.dir.path(), &env.pve).await;
    let name = vm.name.clone();
    let joined = || {
        env.cluster
            .node(&name)
            .is_some_and(|n| e2e::ready_joined(&n))
    };
    let kinds = drive(&rec, Duration::from_secs(30), joined).await;
    assert!(t0.elapsed() < PROVISION_TIMEOUT / 20, "{:?}", t0.elapsed());
    assert!(kinds.iter().any(|k| k == "finish-join"), "{kinds:?}");
    assert!(
        !kinds
            .iter()
            .any(|k| k.starts_with("delete") || k == "scale-up"),
        "neither destroyed nor replaced: {kinds:?}"
    );
    // The same VM, never destroyed; the script it ran is the one rendered anew.
    let now = env.pve.guests();
    assert_eq!(now.len(), 1, "{now:?}");
    assert_eq!(now[0].vmid, vm.vmid);
    assert_eq!(agent_execs(&env.pve), 1);
    let script = now[0].files.values().next().expect("script written");
    assert!(script.contains("nodewright.io/group=ga"), "{script}");
    // The mark comes off once the script ran; no further join is made.
    drive(&rec, Duration::from_secs(10), || {
        env.pve
            .guests()
            .iter()
            .all(|v| !v.tags().contains("nw-joining"))
    })
    .await;
    for _ in 0..3 {
        let r = rec.cycle(SystemTime::now()).await.expect("cycle");
        assert!(
            !matches!(
                r.decision.action,
                Action::FinishJoin { .. } | Action::DeleteServers { .. }
            ),
            "{:?}",
            r.decision
        );
    }
    assert_eq!(agent_execs(&env.pve), 1);
    assert!(
        env.pve.violations().is_empty(),
        "{:#?}",
        env.pve.violations()
    );
}

/// Killed after the script ran but before the mark came off: the next process sees the
/// node registered and only takes the mark off; the script is not run a second time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxmox_vm_whose_node_joined_before_its_joining_mark_came_off_is_only_marked_done() {
    let env = e2e::env().await;
    let first = process(env.dir.path(), &env.pve).await;
    let joined = |env: &e2e::Env| {
        env.pve.guests().iter().any(|v| {
            env.cluster
                .node(&v.name)
                .is_some_and(|n| e2e::ready_joined(&n))
        })
    };
    drive(&first, Duration::from_secs(30), || joined(&env)).await;
    drop(first);
    let vm = env.pve.guests().remove(0);
    assert!(!vm.tags().contains("nw-joining"), "{vm:?}");
    assert_eq!(agent_execs(&env.pve), 1);
    // As a kill between the script's run and the mark's removal leaves it.
    env.pve
        .set_config(vm.vmid, "tags", &format!("{};nw-joining", vm.tags()));

    let next = process(env.dir.path(), &env.pve).await;
    let kinds = drive(&next, Duration::from_secs(10), || {
        env.pve
            .guests()
            .iter()
            .all(|v| !v.tags().contains("nw-joining"))
    })
    .await;
    assert!(kinds.iter().any(|k| k == "finish-join"), "{kinds:?}");
    assert_eq!(agent_execs(&env.pve), 1, "the script is not run again");
    assert_eq!(env.pve.guests().len(), 1);
    assert!(joined(&env));
    assert!(env.pve.violations().is_empty());
}

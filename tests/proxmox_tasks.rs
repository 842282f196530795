//! Task-aware deadlines against the simulated Proxmox VE over loopback HTTP: a clone is
//! followed through its task log, every request checked against the official schema.

use nodewright_testkit as common;

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use common::pve::LOOP_CONFIG as CONFIG;
use nodewright::act::events::events_for;
use nodewright::cloud::proxmox::client::Api;
use nodewright::cloud::proxmox::{
    ProviderOptions, ProxmoxCredentials, ProxmoxProvider, ProxmoxSettings, TaskDeadline,
};
use nodewright::cloud::{CloudProvider, CreateRequest};
use nodewright::model::ServerStatus;
use nodewright::plan::Action;
use nodewright::sim::cluster::SimPodTemplate;
use nodewright::sim::env::{SimEnv, SimTimings};
use nodewright::sim::proxmox::{SimProxmox, SimProxmoxOptions};

async fn sim() -> SimProxmox {
    SimProxmox::start(SimProxmoxOptions::default())
        .await
        .expect("simulator starts (needs ../shared/proxmox/pve-api-schema.json or PVE_API_SCHEMA)")
}

/// A provider whose clones are given up after `nominal` unless their log grew within
/// `stall`, and never run past `max`.
fn provider(s: &SimProxmox, nominal: u64, stall: u64, max: u64) -> ProxmoxProvider {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("pve.yaml");
    s.write_credentials_file(&path).expect("write");
    let creds = ProxmoxCredentials::from_file(&path).expect("credentials load");
    let settings: ProxmoxSettings =
        nodewright::yaml::from_str("template: k3s-shared\ncores: 2\nmemory: 4 GiB\n")
            .expect("settings parse");
    let ms = Duration::from_millis;
    let options = ProviderOptions {
        poll_interval: ms(20),
        task_timeout: Duration::from_secs(10),
        clone_deadline: Some(TaskDeadline {
            nominal: ms(nominal),
            max: ms(max),
            stall: ms(stall),
        }),
        identity: nodewright::cloud::ClusterIdentity::known(nodewright_testkit::pve::TEST_IDENTITY),
        ..ProviderOptions::default()
    };
    ProxmoxProvider::with_options(
        creds,
        BTreeMap::from([("workers".to_string(), settings)]),
        options,
    )
    .expect("provider builds")
}

fn req(name: &str) -> CreateRequest {
    CreateRequest {
        name: name.into(),
        cluster: "prod".into(),
        group: "workers".into(),
        user_data: String::new(),
        size: None,
        settings_hash: "0a1b2c3d4e5f".into(),
        zone: None,
    }
}

fn assert_clean(s: &SimProxmox) {
    let v = s.violations();
    assert!(v.is_empty(), "schema violations: {v:#?}");
}

#[tokio::test]
async fn a_slow_clone_that_keeps_logging_is_not_killed_at_the_nominal_deadline() {
    let s = sim().await;
    // Twelve progress lines 60 ms apart: about 720 ms of copying against a nominal
    // deadline of 150 ms; each line comes well within the 2 s stall window.
    s.slow_next_clones(1, 12, Duration::from_millis(60));
    let p = provider(&s, 150, 2_000, 20_000);
    let vm = p
        .create_server(&req("prod-workers-slow1"))
        .await
        .expect("create");
    assert_eq!(vm.name, "prod-workers-slow1");
    let logs = s.task_logs("qmclone");
    assert_eq!(logs.len(), 1);
    assert_eq!(logs[0].last().map(String::as_str), Some("TASK OK"));
    assert!(logs[0].iter().any(|l| l.contains("(100.00%)")), "{logs:?}");
    assert!(s.guests().iter().any(|g| g.name == "prod-workers-slow1"));
    assert_clean(&s);
}

#[tokio::test]
async fn a_stuck_clone_is_given_up_at_the_nominal_deadline_and_stopped() {
    let s = sim().await;
    s.stick_next_clones(1);
    let p = provider(&s, 150, 100, 60_000);
    let err = p
        .create_server(&req("prod-workers-stuck"))
        .await
        .expect_err("a stuck clone fails")
        .to_string();
    // Given up for want of progress, not at the hard maximum, and stopped.
    assert!(err.contains("no progress in its log"), "{err}");
    assert!(!err.contains("hard maximum"), "{err}");
    assert!(
        err.contains("last log lines: create full clone of drive scsi0"),
        "{err}"
    );
    let logs = s.task_logs("qmclone");
    assert_eq!(
        logs[0].last().map(String::as_str),
        Some("TASK ERROR: interrupted by signal")
    );
    assert!(s.guests().iter().all(|g| g.name != "prod-workers-stuck"));
    assert!(s.calls().iter().any(
        |c| c.method == "DELETE" && c.endpoint.as_deref() == Some("/nodes/{node}/tasks/{upid}")
    ));
    assert_clean(&s);
}

#[tokio::test]
async fn a_clone_still_progressing_at_the_hard_maximum_is_given_up() {
    let s = sim().await;
    // The stall window (2 s) is longer than the maximum (400 ms): only the maximum can
    // end this one.
    s.slow_next_clones(1, 1000, Duration::from_millis(20));
    let p = provider(&s, 100, 2_000, 400);
    let err = p
        .create_server(&req("prod-workers-long"))
        .await
        .expect_err("stopped at its maximum")
        .to_string();
    assert!(err.contains("its hard maximum"), "{err}");
    assert!(err.contains("transferred"), "{err}");
    assert_clean(&s);
}

#[tokio::test]
async fn a_failed_clone_reports_its_exit_status_and_the_last_lines_of_its_log() {
    let s = sim().await;
    let exit = "clone failed: cfs-lock 'storage-ceph' error: got lock request timeout";
    s.fail_next_tasks("qmclone", 1, exit);
    let p = provider(&s, 5_000, 1_000, 10_000);
    let err = p
        .create_server(&req("prod-workers-fail"))
        .await
        .expect_err("the clone fails")
        .to_string();
    assert!(err.contains(&format!("exit status '{exit}'")), "{err}");
    assert!(
        err.contains("last log lines: create full clone of drive scsi0"),
        "{err}"
    );
    assert_clean(&s);
}

/// Regression for issue 12: the Event of a failed scale-up carries the Proxmox task's
/// exit status and the last lines of its log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_clone_task_log_reaches_the_scale_up_event() {
    let env = SimEnv::start(None, SimTimings::default())
        .await
        .expect("simulated environment starts");
    let (_, cfg) = env.write_config(CONFIG).expect("config loads");
    let rec = env.reconciler(cfg).await.expect("reconciler builds");
    let exit = "clone failed: storage 'ceph' does not have enough free space";
    env.proxmox.fail_next_tasks("qmclone", 1, exit);
    env.cluster
        .add_pod(
            "default",
            "waits",
            SimPodTemplate::new("nginx:1.25", 1 << 30),
        )
        .expect("pod");
    // Once the scheduler has called the pod Unschedulable, it asks for a node.
    let mut planned = None;
    for _ in 0..100 {
        let (snapshot, decision) = rec.plan(SystemTime::now()).await.expect("plan");
        if matches!(&decision.action, Action::ScaleUp { group, .. } if group == "pve") {
            planned = Some((snapshot, decision));
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (snapshot, decision) = planned.expect("a scale-up of pve for the pending pod");
    let err = rec
        .act(&snapshot, &decision, SystemTime::now())
        .await
        .expect_err("the clone fails")
        .to_string();
    let events = events_for(&decision, Err(&err), None);
    let event = events
        .iter()
        .find(|e| e.warning && e.object.name == "waits")
        .expect("a warning Event on the pod the scale-up was for");
    assert!(event.message.contains(exit), "{}", event.message);
    assert!(
        event.message.contains("create full clone of drive scsi0"),
        "{}",
        event.message
    );
    let v = env.proxmox.violations();
    assert!(v.is_empty(), "schema violations: {v:#?}");
}

/// Starts a create with `a` and kills it (drops the call, as a killed process would)
/// once its clone task runs; the clone goes on in Proxmox.
async fn start_clone_and_kill(s: &SimProxmox, a: ProxmoxProvider, name: &str) {
    let name = name.to_string();
    let create = tokio::spawn(async move { a.create_server(&req(&name)).await });
    for _ in 0..500 {
        if !s.task_logs("qmclone").is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(s.task_logs("qmclone").len(), 1, "the clone started");
    create.abort();
    assert!(create.await.is_err(), "the create was killed mid-clone");
}

/// Lists with `b` every 40 ms until the one clone task has ended; its log.
async fn list_until_the_clone_ends(s: &SimProxmox, b: &ProxmoxProvider) -> Vec<String> {
    for _ in 0..250 {
        let before = SystemTime::now();
        let listed = b.list_servers("prod").await.expect("list");
        // While it copies, the clone's VM is not on the provisioning clock.
        for vm in listed.iter().filter(|v| v.status == ServerStatus::Building) {
            assert!(vm.created >= before, "{vm:?}");
        }
        let logs = s.task_logs("qmclone");
        if logs[0].last().is_some_and(|l| l.starts_with("TASK ")) {
            return logs[0].clone();
        }
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
    panic!("the clone never ended: {:?}", s.task_logs("qmclone"));
}

fn task_list_read(s: &SimProxmox) -> bool {
    s.calls()
        .iter()
        .any(|c| c.method == "GET" && c.endpoint.as_deref() == Some("/nodes/{node}/tasks"))
}

fn task_stopped(s: &SimProxmox) -> bool {
    s.calls().iter().any(|c| {
        c.method == "DELETE" && c.endpoint.as_deref() == Some("/nodes/{node}/tasks/{upid}")
    })
}

/// Regression for issue 12: the clone's UPID lived in the memory of the process that
/// started it, so a fresh process lost the extension for progress.
#[tokio::test]
async fn a_slow_clone_that_keeps_logging_survives_a_restart_past_the_nominal_deadline() {
    let s = sim().await;
    // Fifteen lines 60 ms apart: about 900 ms of copying against a nominal 150 ms.
    s.slow_next_clones(1, 15, Duration::from_millis(60));
    start_clone_and_kill(&s, provider(&s, 150, 2_000, 20_000), "prod-workers-slow2").await;
    // A fresh process, with a progress window well above the lines' pace.
    let b = provider(&s, 150, 400, 20_000);
    let log = list_until_the_clone_ends(&s, &b).await;
    assert_eq!(log.last().map(String::as_str), Some("TASK OK"), "{log:?}");
    assert!(log.iter().any(|l| l.contains("(100.00%)")), "{log:?}");
    assert!(
        task_list_read(&s),
        "the fresh process found the clone in the task list"
    );
    assert!(!task_stopped(&s));
    assert_clean(&s);
}

#[tokio::test]
async fn a_stuck_clone_is_still_stopped_after_a_restart() {
    let s = sim().await;
    s.stick_next_clones(1);
    start_clone_and_kill(&s, provider(&s, 150, 100, 60_000), "prod-workers-stuck2").await;
    let b = provider(&s, 150, 100, 60_000);
    let log = list_until_the_clone_ends(&s, &b).await;
    assert_eq!(
        log.last().map(String::as_str),
        Some("TASK ERROR: interrupted by signal"),
        "{log:?}"
    );
    assert!(task_stopped(&s), "the fresh process stopped it");
    // Proxmox removes what a stopped clone left.
    assert!(s.guests().iter().all(|g| g.name != "prod-workers-stuck2"));
    assert_clean(&s);
}

/// Regression for issue 12: a clone a process gone started that then failed was told in
/// the log only. A fresh process's `observe` hands its exit status and log to the plan
/// (and from there to an Event on the status ConfigMap), once.
#[tokio::test]
async fn a_clone_failing_after_a_restart_is_handed_to_the_plan_with_its_log() {
    let s = sim().await;
    let exit = "clone failed: storage 'ceph' does not have enough free space";
    s.slow_next_clones(1, 6, Duration::from_millis(60));
    s.fail_next_tasks("qmclone", 1, exit);
    start_clone_and_kill(
        &s,
        provider(&s, 5_000, 2_000, 20_000),
        "prod-workers-fails2",
    )
    .await;
    let b = provider(&s, 5_000, 2_000, 20_000);
    let groups = ["workers".to_string()];
    let mut found = Vec::new();
    for _ in 0..100 {
        let o = b.observe("prod", &groups).await.expect("observe");
        found.extend(o.failures);
        let ended = s.task_logs("qmclone")[0]
            .last()
            .is_some_and(|l| l.starts_with("TASK "));
        if ended && !found.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
    assert_eq!(found.len(), 1, "told once: {found:?}");
    assert!(
        found[0].contains(&format!("exit status '{exit}'")),
        "{found:?}"
    );
    assert!(
        found[0].contains("transferred"),
        "the log's last lines: {found:?}"
    );
    let again = b.observe("prod", &groups).await.expect("observe");
    assert!(again.failures.is_empty(), "{:?}", again.failures);
    assert_clean(&s);
}

#[tokio::test]
async fn a_process_leaves_the_clone_it_follows_to_itself() {
    let s = sim().await;
    s.stick_next_clones(1);
    let a = provider(&s, 150, 100, 60_000);
    let a2 = a.clone();
    let create = tokio::spawn(async move { a2.create_server(&req("prod-workers-own")).await });
    // Listing meanwhile (as the loop's next cycle would) judges only clones nobody here
    // follows: the create itself gives its clone up, once.
    while !create.is_finished() {
        a.list_servers("prod").await.expect("list");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let err = create
        .await
        .expect("joins")
        .expect_err("the stuck clone is given up")
        .to_string();
    assert!(err.contains("no progress in its log"), "{err}");
    let stops = s
        .calls()
        .iter()
        .filter(|c| {
            c.method == "DELETE" && c.endpoint.as_deref() == Some("/nodes/{node}/tasks/{upid}")
        })
        .count();
    assert_eq!(stops, 1);
    assert_clean(&s);
}

/// Regression for issue 12, through the loop: a fresh runner neither deletes the VM of a
/// clone another process started nor stops the clone while its log keeps growing, though
/// `provisionTimeout` passes meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_runner_lets_a_slow_clone_run_past_provision_timeout() {
    let env = SimEnv::start(None, SimTimings::default())
        .await
        .expect("simulated environment starts");
    let config = CONFIG.replace(
        "provisionTimeout: 2m\nprovisionTimeoutMax: 10m",
        "provisionTimeout: 1s\nprovisionTimeoutMax: 30s\nprovisionProgressWindow: 1s",
    );
    let (_, cfg) = env.write_config(&config).expect("config loads");
    let first = env.reconciler(cfg).await.expect("reconciler builds");
    // Twenty lines 150 ms apart: three seconds of copying.
    env.proxmox
        .slow_next_clones(1, 20, Duration::from_millis(150));
    let act = common::begin_scale_up(&env, first, "pve").await;
    let running = |env: &SimEnv| {
        let logs = env.proxmox.task_logs("qmclone");
        logs.len() == 1 && logs[0].last().is_some_and(|l| !l.starts_with("TASK "))
    };
    for _ in 0..500 {
        if running(&env) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(running(&env), "the clone started");
    act.abort();
    let _ = act.await;

    let (_, cfg) = env.write_config(&config).expect("config loads");
    let fresh = env.reconciler(cfg).await.expect("reconciler builds");
    let mut cycles = 0;
    while running(&env) && cycles < 100 {
        let (snapshot, decision) = fresh.plan(SystemTime::now()).await.expect("plan");
        if running(&env) {
            assert!(
                !matches!(decision.action, Action::DeleteServers { .. }),
                "a VM deleted while its clone copies: {:?}",
                decision.reasons
            );
        }
        let _ = fresh.act(&snapshot, &decision, SystemTime::now()).await;
        cycles += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let logs = env.proxmox.task_logs("qmclone");
    assert_eq!(
        logs[0].last().map(String::as_str),
        Some("TASK OK"),
        "{logs:?}"
    );
    let v = env.proxmox.violations();
    assert!(v.is_empty(), "schema violations: {v:#?}");
}

/// The simulated task list filters as Proxmox does: by source (running or ended), type,
/// the UPID's id (a clone's is its template), user (a case-insensitive substring) and
/// failure; ended tasks carry their exit status and end time.
#[tokio::test]
async fn the_task_list_filters_as_proxmox_does() {
    let s = sim().await;
    let p = provider(&s, 5_000, 1_000, 10_000);
    p.create_server(&req("prod-workers-ok"))
        .await
        .expect("create");
    s.fail_next_tasks("qmclone", 1, "clone failed: no space");
    p.create_server(&req("prod-workers-bad"))
        .await
        .expect_err("the clone fails");
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("pve.yaml");
    s.write_credentials_file(&path).expect("write");
    let creds = ProxmoxCredentials::from_file(&path).expect("credentials load");
    let api = Api::new(&creds, Duration::from_secs(5), Duration::from_secs(5)).expect("api");
    let list = |q: &'static [(&'static str, &'static str)]| {
        let api = &api;
        async move {
            let q: Vec<(String, String)> = q
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            let data = api.get("/nodes/pve2/tasks", &q).await.expect("task list");
            data.as_array().cloned().unwrap_or_default()
        }
    };
    let clones = list(&[("typefilter", "qmclone"), ("vmid", "9001")]).await;
    assert_eq!(clones.len(), 2, "{clones:?}");
    // Newest first; ended ones have their exit status.
    assert_eq!(clones[0]["status"], "clone failed: no space");
    assert_eq!(clones[1]["status"], "OK");
    assert!(clones.iter().all(|t| t["endtime"].is_u64()));
    let failed = list(&[("typefilter", "qmclone"), ("errors", "1")]).await;
    assert_eq!(failed.len(), 1);
    let mine = list(&[("typefilter", "qmclone"), ("userfilter", "NODEWRIGHT@PVE")]).await;
    assert_eq!(mine.len(), 2);
    assert!(list(&[("userfilter", "root@pam")]).await.is_empty());
    assert!(list(&[("source", "active")]).await.is_empty());
    assert!(list(&[("typefilter", "qmclone"), ("vmid", "9000")])
        .await
        .is_empty());
    assert_clean(&s);
}

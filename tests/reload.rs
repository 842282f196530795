//! Issue 29, item 8: a config reload keeps the loop's memory and the providers' work in
//! flight when their settings did not change. Over loopback HTTP: the Proxmox simulator
//! (schema-checked) and the simulated API server with kubelets; the reload is the one
//! `run` does (`Reconciler::reload`).

use nodewright_testkit as common;

use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use common::pve as e2e;
use nodewright::config::Config;
use nodewright::plan::Action;
use nodewright::run::{ProviderInputs, Reconciler};
use nodewright::sim::proxmox::{SimProxmox, SimProxmoxOptions};

/// The config `e2e::reconciler` wrote, with `from` replaced by `to`.
fn edited(env: &e2e::Env, from: &str, to: &str) -> Config {
    let path = env.dir.path().join("autoscaler.yaml");
    let text = std::fs::read_to_string(&path).expect("config");
    assert!(text.contains(from), "{from} not in {text}");
    Config::parse(&text.replacen(from, to, 1), env.dir.path()).expect("edited config is valid")
}

/// The simulator's credentials file, as `PROXMOX_CREDENTIALS_FILE` names it.
fn credentials(env: &e2e::Env) -> PathBuf {
    let path = env.dir.path().join("pve.yaml");
    env.pve.write_credentials_file(&path).expect("credentials");
    path
}

/// What `rec`'s providers are built from, with `creds` as the credentials file.
fn inputs(config: &Config, creds: &Path) -> ProviderInputs {
    ProviderInputs::of(config, |_| Some(creds.to_path_buf()), false)
}

/// Reloads `new` as `run` does, building any provider again on the simulator; the
/// providers built again.
fn reload(
    rec: &mut Reconciler,
    env: &e2e::Env,
    built: &mut ProviderInputs,
    creds: &Path,
    new: Config,
) -> Vec<&'static str> {
    let now = inputs(&new, creds);
    rec.reload(new, built, now, |c| {
        Ok::<_, Infallible>(e2e::clouds(c, &env.pve))
    })
    .expect("reload")
    .iter()
    .map(|k| k.as_str())
    .collect()
}

fn agent_execs(pve: &SimProxmox) -> usize {
    pve.calls()
        .iter()
        .filter(|c| c.method == "POST" && c.path.ends_with("/agent/exec"))
        .count()
}

/// Issue 29 item 8, "A config reload forgets the providers' in-flight state": a reload
/// that changes nothing of the Proxmox provider's (only `scanInterval`) while a VM's
/// guest-agent join waits for its agent keeps that provider, and the join with it: the
/// script runs once, and no cycle takes the VM for one whose join was left to finish.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item_8_a_config_reload_keeps_the_providers_in_flight_state() {
    // The guest agent answers 2 s after the start: the join is in flight at the reload.
    let env = e2e::env_with(SimProxmoxOptions {
        boot_delay: Duration::from_secs(2),
        ..SimProxmoxOptions::default()
    })
    .await;
    let mut rec = e2e::reconciler(
        &env,
        &e2e::group("ga", 1, "{template: agent-shared, join: guestAgent}"),
    )
    .await;
    // provisionTimeout far off: only a second join, not a timeout, could touch the VM.
    rec.config = Arc::new(edited(
        &env,
        "provisionTimeout: 4s",
        "provisionTimeout: 10m",
    ));
    let creds = credentials(&env);
    let mut built = inputs(&rec.config, &creds);
    let first = rec.cycle(SystemTime::now()).await.expect("cycle");
    assert!(
        matches!(&first.decision.action, Action::ScaleUp { group, count: 1, .. } if group == "ga"),
        "{:?}",
        first.decision
    );
    assert_eq!(agent_execs(&env.pve), 0, "the agent does not answer yet");

    let mut new = edited(&env, "provisionTimeout: 4s", "provisionTimeout: 10m");
    new.scan_interval = Duration::from_millis(300);
    let rebuilt = reload(&mut rec, &env, &mut built, &creds, new);

    let name = env.pve.guests()[0].name.clone();
    let joined = || {
        env.cluster
            .node(&name)
            .is_some_and(|n| e2e::ready_joined(&n))
            && env
                .pve
                .guests()
                .iter()
                .all(|v| !v.tags().contains("nw-joining"))
    };
    let mut kinds = Vec::new();
    let start = std::time::Instant::now();
    while !joined() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "not joined: {kinds:?}"
        );
        match rec.cycle(SystemTime::now()).await {
            Ok(r) => kinds.push(r.decision.action.kind().to_string()),
            Err(e) => kinds.push(format!("error: {e}")),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for _ in 0..3 {
        let r = rec.cycle(SystemTime::now()).await.expect("cycle");
        kinds.push(r.decision.action.kind().to_string());
    }
    assert!(!kinds.iter().any(|k| k == "finish-join"), "{kinds:?}");
    assert_eq!(
        agent_execs(&env.pve),
        1,
        "the join script ran once: {kinds:?}"
    );
    assert_eq!(env.pve.guests().len(), 1);
    assert!(rebuilt.is_empty(), "the provider was kept: {rebuilt:?}");
    assert!(
        env.pve.violations().is_empty(),
        "{:#?}",
        env.pve.violations()
    );
}

/// Issue 29 item 8, "A config reload forgets ... the loop's memory": a group whose create
/// failed (the clone task failed) is backed off; a reload that changes another field
/// (`scanInterval`) keeps the backoff, so the next cycle does not try again. A reload that
/// changes the group's own settings (its template) lets it try at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item_8_a_config_reload_keeps_the_loops_memory() {
    let env = e2e::env().await;
    let mut rec = e2e::reconciler(&env, &e2e::group("bad", 1, "{template: agent-shared}")).await;
    let long_backoff = |from: &str, to: &str| {
        let path = env.dir.path().join("autoscaler.yaml");
        let text = std::fs::read_to_string(&path).expect("config");
        let text = text
            .replacen(
                "scaleUpBackoff: {initial: 500ms, max: 1s}",
                "scaleUpBackoff: {initial: 10m, max: 10m}",
                1,
            )
            .replacen(from, to, 1);
        Config::parse(&text, env.dir.path()).expect("config is valid")
    };
    rec.config = Arc::new(long_backoff("", ""));
    let creds = credentials(&env);
    let mut built = inputs(&rec.config, &creds);

    env.pve
        .fail_next_tasks("qmclone", 1, "clone failed: storage unavailable");
    let failed = rec.cycle_detailed(SystemTime::now()).await.expect("cycle");
    assert!(
        matches!(&failed.decision.action, Action::ScaleUp { group, .. } if group == "bad"),
        "{:?}",
        failed.decision
    );
    assert!(
        failed.result.is_err(),
        "no such template: {:?}",
        failed.result
    );
    let creates_bad = |a: &Action| matches!(a, Action::ScaleUp { group, .. } if group == "bad");
    let held = rec.cycle(SystemTime::now()).await.expect("cycle");
    assert!(!creates_bad(&held.decision.action), "{:?}", held.decision);

    let rebuilt = reload(
        &mut rec,
        &env,
        &mut built,
        &creds,
        long_backoff("scanInterval: 200ms", "scanInterval: 300ms"),
    );
    for _ in 0..3 {
        let r = rec.cycle(SystemTime::now()).await.expect("cycle");
        assert!(
            !creates_bad(&r.decision.action),
            "still backed off: {:?}",
            r.decision
        );
    }
    assert!(rebuilt.is_empty(), "the provider was kept: {rebuilt:?}");

    // The group's own settings changed: what failed may be fixed, so it tries at once.
    let rebuilt = reload(
        &mut rec,
        &env,
        &mut built,
        &creds,
        long_backoff("template: agent-shared", "template: k3s-shared"),
    );
    assert_eq!(rebuilt, ["proxmox"]);
    let retried = rec.cycle_detailed(SystemTime::now()).await.expect("cycle");
    assert!(
        creates_bad(&retried.decision.action),
        "{:?}",
        retried.decision
    );
    assert!(retried.result.is_ok(), "{:?}", retried.result);
}

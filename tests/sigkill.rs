//! Real SIGKILLs of `nodewright run` over the HTTP simulators with faults injected: the
//! binary is killed at seeded random moments while it scales three groups (OpenStack,
//! Proxmox VE, Kamatera) up and down, and started again at once. Checked at every poll:
//! never above maxSize, no two VMs of one name, no VM deleted while its node was there;
//! at the end of each phase: every pod running, no VM without its node, the VM count
//! the pods need.
//!
//! `NODEWRIGHT_KILL_SEED=N` reruns it from another seed.

use nodewright_testkit as common;

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::faulty::{add_app, config, orphans, running_of, scale_app, violations, vms};
use common::{nodewright_for, Killed};
use nodewright::sim::env::{SimEnv, SimTimings};
use nodewright::sim::faults::FaultSpec;

const CLUSTER: &str = "sk";

/// SplitMix64, for the kill times.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A duration between `lo` and `hi`.
    fn between(&mut self, lo: Duration, hi: Duration) -> Duration {
        let span = (hi - lo).as_millis() as u64;
        lo + Duration::from_millis(self.next() % span.max(1))
    }
}

#[derive(Default)]
struct Figures {
    kills: usize,
    /// Kills while a VM of ours had no Ready node (a create or a delete under way).
    mid_change: usize,
    /// Kills while a node was cordoned (a drain or a removal under way).
    mid_removal: usize,
}

fn spawn(env: &SimEnv, cfg: &Path, n: usize) -> Killed {
    let log = std::fs::File::create(env.dir.join(format!("run-{n}.log"))).expect("log");
    let mut cmd = nodewright_for!(env, cfg);
    cmd.arg("run")
        .env("POD_NAME", format!("nodewright-{n}"))
        .stdout(Stdio::null())
        .stderr(log);
    Killed(cmd.spawn().expect("start nodewright"))
}

fn cordoned(env: &SimEnv) -> bool {
    env.cluster.nodes().iter().any(|n| {
        n.spec
            .as_ref()
            .and_then(|s| s.unschedulable)
            .unwrap_or(false)
    })
}

/// Kills and restarts the binary at random moments until `done`, checking the
/// invariants every 100 ms; after `kills` kills it is left to finish.
#[allow(clippy::too_many_arguments)]
async fn phase(
    env: &SimEnv,
    cfg: &Path,
    proc: &mut Killed,
    spawned: &mut usize,
    rng: &mut Rng,
    figures: &mut Figures,
    kills: usize,
    what: &str,
    done: impl Fn(&SimEnv) -> bool,
) {
    let start = Instant::now();
    let mut next_kill =
        Instant::now() + rng.between(Duration::from_millis(500), Duration::from_secs(3));
    let mut killed_here = 0;
    loop {
        let bad = violations(env, CLUSTER);
        assert!(bad.is_empty(), "{what}: invariants broken: {bad:#?}");
        if killed_here >= kills && done(env) {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{what}: not within 60 s; VMs {:?}, orphans {:?}\n{}\nlogs in {}",
            vms(env, CLUSTER),
            orphans(env, CLUSTER),
            env.faults.report(),
            env.dir.display()
        );
        if killed_here < kills && Instant::now() >= next_kill {
            let booting = !orphans(env, CLUSTER).is_empty();
            let removing = cordoned(env);
            proc.kill(); // SIGKILL
            env.faults.forget_retry_afters();
            figures.kills += 1;
            figures.mid_change += usize::from(booting);
            figures.mid_removal += usize::from(removing);
            killed_here += 1;
            *spawned += 1;
            *proc = spawn(env, cfg, *spawned);
            next_kill =
                Instant::now() + rng.between(Duration::from_millis(700), Duration::from_secs(4));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkills_during_scale_up_and_down_with_faults_leave_no_orphan_duplicate_or_lost_pod() {
    let seed = std::env::var("NODEWRIGHT_KILL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let spec = FaultSpec {
        seed,
        retry_after: Duration::from_secs(1),
        hold: Duration::from_millis(300),
        slow: Duration::from_millis(300),
        ..FaultSpec::rate(0.1)
    };
    let env = SimEnv::start_with_faults(None, SimTimings::default(), Some(&spec))
        .await
        .expect("env");
    let (cfg, _) = env.write_config(&config(CLUSTER, "300ms")).expect("config");
    let mut rng = Rng(seed);
    let mut figures = Figures::default();
    let mut spawned = 0;
    let mut proc = spawn(&env, &cfg, spawned);
    let started = Instant::now();

    add_app(&env, "workers", 3);
    add_app(&env, "batch", 2);
    add_app(&env, "cache", 1);
    let settled = |want: &'static [(&'static str, usize)]| {
        move |e: &SimEnv| {
            want.iter().all(|(g, n)| running_of(e, g) == *n)
                && orphans(e, CLUSTER).is_empty()
                && vms(e, CLUSTER).len() == want.iter().map(|(_, n)| n).sum::<usize>()
        }
    };
    const UP: &[(&str, usize)] = &[("workers", 3), ("batch", 2), ("cache", 1)];
    phase(
        &env,
        &cfg,
        &mut proc,
        &mut spawned,
        &mut rng,
        &mut figures,
        6,
        "scale-up",
        settled(UP),
    )
    .await;

    scale_app(&env, "workers", 1);
    scale_app(&env, "batch", 0);
    scale_app(&env, "cache", 0);
    const DOWN: &[(&str, usize)] = &[("workers", 1), ("batch", 0), ("cache", 0)];
    phase(
        &env,
        &cfg,
        &mut proc,
        &mut spawned,
        &mut rng,
        &mut figures,
        6,
        "scale-down",
        settled(DOWN),
    )
    .await;
    proc.kill();

    let counts = env.faults.total();
    println!(
        "seed {seed}: {} SIGKILLs ({} while a VM had no Ready node, {} while a node was cordoned), {} processes, {:.0} s\n{}\ntotal: {counts}",
        figures.kills,
        figures.mid_change,
        figures.mid_removal,
        spawned + 1,
        started.elapsed().as_secs_f64(),
        env.faults.report(),
    );
    assert_eq!(figures.kills, 12);
    assert!(counts.faults() >= 10, "faults were injected: {counts}");
    assert_eq!(env.faults.early_retries(), Vec::<String>::new());
}

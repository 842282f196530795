//! The unmodified loop (`Reconciler`, over loopback HTTP) against simulators that fail:
//! 5xx, dropped connections, 429 with Retry-After, slow answers and half-done operations
//! on the Kubernetes API server, OpenStack, Proxmox VE and Kamatera at once; and each
//! half-done operation forced alone, with what the loop must make of it.
//!
//! `NODEWRIGHT_FAULT_SEED=N` reruns the random suite from another seed.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use common::faulty::{add_app, config, orphans, running_of, scale_app, violations, vms, GROUPS};
use common::has_startup_taint;
use nodewright::cloud::build::build_clouds_with;
use nodewright::cluster::{client_from_config, kubeconfig_from_file, CacheOptions, KubeCluster};
use nodewright::reconcile::Reconciler;
use nodewright::sim::env::{SimEnv, SimTimings};
use nodewright::sim::faults::{FaultKind, FaultSpec, HalfDone};
use nodewright::telemetry::metrics::Metrics;

const CLUSTER: &str = "ft";

fn seed() -> u64 {
    std::env::var("NODEWRIGHT_FAULT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(11)
}

/// Starts the simulators with `spec` (random faults off until the test turns them on)
/// and a reconciler whose cloud calls are counted in `metrics`.
async fn start(spec: &FaultSpec) -> (SimEnv, Reconciler, Arc<Metrics>) {
    let env = SimEnv::start_with_faults(None, SimTimings::default(), Some(spec))
        .await
        .expect("env");
    env.faults.set_enabled(false);
    let (_, cfg) = env.write_config(&config(CLUSTER, "300ms")).expect("config");
    let metrics = Arc::new(Metrics::new());
    // Built as `run` builds it: watch caches, the clouds instrumented.
    let kube = kubeconfig_from_file(&env.kubeconfig)
        .await
        .expect("kubeconfig");
    let cluster = KubeCluster::watching(
        client_from_config(kube).expect("client"),
        CacheOptions::default(),
    );
    cluster.synced().await.expect("caches synced");
    let clouds = build_clouds_with(&cfg, |kind| Some(env.credentials_for(kind)))
        .expect("clouds")
        .instrumented(&metrics);
    let rec = Reconciler {
        config: Arc::new(cfg),
        cluster: Arc::new(cluster),
        clouds,
        dry_run: false,
    };
    (env, rec, metrics)
}

/// Cycles until `done`, checking the invariants after every cycle; a failed cycle is
/// expected under faults and retried. Returns (cycles, failed cycles).
async fn drive(
    env: &SimEnv,
    rec: &Reconciler,
    what: &str,
    limit: Duration,
    done: impl Fn(&SimEnv) -> bool,
) -> (usize, usize) {
    let start = Instant::now();
    let (mut cycles, mut failed) = (0, 0);
    let mut recent: Vec<String> = Vec::new();
    loop {
        cycles += 1;
        let line = match rec.cycle(SystemTime::now()).await {
            Ok(r) if r.decision.action == nodewright::plan::Action::None => None,
            Ok(r) => Some(format!("{cycles}: {}", r.decision.action)),
            Err(e) => {
                failed += 1;
                Some(format!("{cycles}: failed (retried): {e}"))
            }
        };
        if let Some(l) = line {
            recent.push(l);
            if recent.len() > 25 {
                recent.remove(0);
            }
        }
        let bad = violations(env, CLUSTER);
        assert!(bad.is_empty(), "{what}: invariants broken: {bad:#?}");
        if done(env) {
            return (cycles, failed);
        }
        assert!(
            start.elapsed() < limit,
            "{what}: not within {limit:?}; VMs {:?}, orphans {:?}\n{}\nlast actions:\n{}",
            vms(env, CLUSTER),
            orphans(env, CLUSTER),
            env.faults.report(),
            recent.join("\n")
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Every group's pods running, no VM without its node.
fn settled(env: &SimEnv, want: &[(&str, usize)]) -> bool {
    want.iter().all(|(g, n)| running_of(env, g) == *n)
        && orphans(env, CLUSTER).is_empty()
        && vms(env, CLUSTER).len() == want.iter().map(|(_, n)| n).sum::<usize>()
}

fn metric(metrics: &Metrics, prefix: &str) -> f64 {
    metrics
        .encode()
        .lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_percent_faults_everywhere_the_loop_scales_up_and_down_with_no_orphan_duplicate_or_lost_pod(
) {
    let spec = FaultSpec {
        seed: seed(),
        retry_after: Duration::from_secs(1),
        hold: Duration::from_millis(300),
        slow: Duration::from_millis(300),
        ..FaultSpec::rate(0.2)
    };
    let (env, rec, metrics) = start(&spec).await;
    for (g, _) in GROUPS {
        add_app(&env, g, 2);
    }
    env.faults.set_enabled(true);
    let up = drive(
        &env,
        &rec,
        "scale-up under faults",
        Duration::from_secs(90),
        |e| settled(e, &[("workers", 2), ("batch", 2), ("cache", 2)]),
    )
    .await;
    // Down to one node of workers, none of the others.
    scale_app(&env, "workers", 1);
    scale_app(&env, "batch", 0);
    scale_app(&env, "cache", 0);
    let down = drive(
        &env,
        &rec,
        "scale-down under faults",
        Duration::from_secs(90),
        |e| settled(e, &[("workers", 1), ("batch", 0), ("cache", 0)]),
    )
    .await;
    let counts = env.faults.total();
    println!(
        "seed {}: scale-up {} cycles ({} failed), scale-down {} cycles ({} failed)\n{}\ntotal: {counts}",
        spec.seed,
        up.0,
        up.1,
        down.0,
        down.1,
        env.faults.report()
    );
    assert!(
        counts.faults() >= 20,
        "too few faults to prove anything: {counts}"
    );
    let early = env.faults.early_retries();
    assert!(early.is_empty(), "Retry-After not honoured: {early:#?}");
    assert!(
        metric(&metrics, "nodewright_api_errors_total") >= 1.0,
        "errors reported in the metrics:\n{}",
        metrics.encode()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_is_honoured_by_every_client_and_counted() {
    let spec = FaultSpec {
        retry_after: Duration::from_secs(2),
        ..FaultSpec::rate(0.0)
    };
    let (env, rec, metrics) = start(&spec).await;
    // The listings every cycle makes, and the node patch (startup taint) of a scale-up.
    env.faults
        .cluster
        .force(FaultKind::TooManyRequests, "PATCH /api/v1/nodes/", 1);
    env.faults.openstack.force(
        FaultKind::TooManyRequests,
        "GET /compute/v2.1/servers/detail",
        1,
    );
    env.faults.proxmox.force(
        FaultKind::TooManyRequests,
        "GET /api2/json/cluster/resources",
        1,
    );
    env.faults
        .kamatera
        .force(FaultKind::TooManyRequests, "GET /service/servers", 1);
    add_app(&env, "workers", 1);
    let start = Instant::now();
    // Cycles every 300 ms: a client ignoring the 2 s would come back early.
    let (cycles, _) = drive(
        &env,
        &rec,
        "a worker despite the 429s",
        Duration::from_secs(40),
        |e| {
            start.elapsed() > Duration::from_secs(4)
                && running_of(e, "workers") == 1
                && e.cluster.nodes().iter().any(|n| {
                    n.metadata
                        .name
                        .as_deref()
                        .is_some_and(|n| n.starts_with("ft-workers-"))
                        && !has_startup_taint(n)
                })
        },
    )
    .await;
    for (name, f) in env.faults.all() {
        let c = f.counts();
        assert_eq!(c.too_many_requests, 1, "{name}: the 429 was served: {c}");
    }
    assert_eq!(env.faults.early_retries(), Vec::<String>::new());
    // The endpoints were called again after the wait (every provider is listed each cycle).
    let lists = env
        .cloud
        .calls()
        .iter()
        .filter(|c| c.path == "/compute/v2.1/servers/detail")
        .count();
    assert!(
        lists >= 1,
        "listed again after the wait: {lists} in {cycles} cycles"
    );
    let waits = metric(&metrics, "nodewright_retry_after_waits_total");
    assert!(
        waits >= 4.0,
        "{waits} waits in {cycles} cycles:\n{}",
        metrics.encode()
    );
    assert!(
        metric(
            &metrics,
            "nodewright_api_errors_total{api=\"kubernetes\",kind=\"rate-limited\"}"
        ) >= 1.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_409_conflict_on_a_node_patch_is_retried_and_the_startup_taint_still_goes() {
    let (env, rec, metrics) = start(&FaultSpec::rate(0.0)).await;
    env.faults
        .cluster
        .force_half_done(HalfDone::NodePatchConflict, 2);
    add_app(&env, "workers", 1);
    drive(
        &env,
        &rec,
        "a node despite the conflicts",
        Duration::from_secs(40),
        |e| {
            running_of(e, "workers") == 1
                && e.cluster.nodes().iter().any(|n| {
                    n.metadata
                        .name
                        .as_deref()
                        .is_some_and(|n| n.starts_with("ft-workers-"))
                        && !has_startup_taint(n)
                })
        },
    )
    .await;
    let c = env.faults.cluster.counts();
    assert_eq!(c.half_done.get("node-patch-conflict"), Some(&2), "{c}");
    assert!(
        metric(
            &metrics,
            "nodewright_api_errors_total{api=\"kubernetes\",kind=\"conflict\"}"
        ) >= 2.0,
        "{}",
        metrics.encode()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_that_answered_500_while_the_server_appeared_leaves_no_orphan_and_no_duplicate() {
    let (env, rec, _) = start(&FaultSpec::rate(0.0)).await;
    env.faults
        .openstack
        .force_half_done(HalfDone::CreateFailsButServerAppears, 1);
    env.faults
        .kamatera
        .force_half_done(HalfDone::CreateFailsButServerAppears, 1);
    add_app(&env, "workers", 1);
    add_app(&env, "cache", 1);
    drive(&env, &rec, "one node each", Duration::from_secs(40), |e| {
        settled(e, &[("workers", 1), ("cache", 1)])
    })
    .await;
    for (name, f) in [
        ("openstack", &env.faults.openstack),
        ("kamatera", &env.faults.kamatera),
    ] {
        let c = f.counts();
        assert_eq!(
            c.half_done.get("create-fails-but-server-appears"),
            Some(&1),
            "{name}: {c}"
        );
    }
    // The server that appeared is the group's one node: no second create.
    assert_eq!(env.cloud.servers().len(), 1, "{:?}", env.cloud.servers());
    assert_eq!(
        env.kamatera.servers().len(),
        1,
        "{:?}",
        env.kamatera.servers()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_accepted_but_never_done_is_retried_on_every_provider() {
    let (env, rec, _) = start(&FaultSpec::rate(0.0)).await;
    for g in ["workers", "batch", "cache"] {
        add_app(&env, g, 1);
    }
    let all = [("workers", 1), ("batch", 1), ("cache", 1)];
    drive(&env, &rec, "one node each", Duration::from_secs(60), |e| {
        settled(e, &all)
    })
    .await;
    for f in [
        &env.faults.openstack,
        &env.faults.proxmox,
        &env.faults.kamatera,
    ] {
        f.force_half_done(HalfDone::DeleteNeverHappens, 1);
    }
    for g in ["workers", "batch", "cache"] {
        scale_app(&env, g, 0);
    }
    drive(
        &env,
        &rec,
        "every VM deleted",
        Duration::from_secs(90),
        |e| vms(e, CLUSTER).is_empty(),
    )
    .await;
    for (name, f) in [
        ("openstack", &env.faults.openstack),
        ("proxmox", &env.faults.proxmox),
        ("kamatera", &env.faults.kamatera),
    ] {
        let c = f.counts();
        assert_eq!(
            c.half_done.get("delete-never-happens"),
            Some(&1),
            "{name}: {c}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxmox_clone_task_failing_after_the_vm_exists_leaves_no_orphan() {
    let (env, rec, _) = start(&FaultSpec::rate(0.0)).await;
    env.faults
        .proxmox
        .force_half_done(HalfDone::CloneFailsAfterVmExists, 1);
    add_app(&env, "batch", 1);
    drive(
        &env,
        &rec,
        "one batch node, the failed clone gone",
        Duration::from_secs(60),
        |e| settled(e, &[("batch", 1)]),
    )
    .await;
    let c = env.faults.proxmox.counts();
    assert_eq!(
        c.half_done.get("clone-fails-after-vm-exists"),
        Some(&1),
        "{c}"
    );
    assert_eq!(env.proxmox.guests().len(), 1, "{:?}", env.proxmox.guests());
}

/// A proxy or API server that drips its answer a byte a second held one GET (and so the
/// loop) for minutes: the client's read timeout restarts with every byte. Every call that
/// is not a watch now fails at its deadline, answer body included, and the next call works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dripping_kubernetes_answer_fails_at_the_call_deadline_instead_of_holding_the_loop() {
    use nodewright::cluster::{client_with_deadline, ClusterApi};
    let spec = FaultSpec {
        drip: Duration::from_millis(500),
        ..FaultSpec::rate(0.0)
    };
    let env = SimEnv::start_with_faults(None, SimTimings::default(), Some(&spec))
        .await
        .expect("env");
    let kube = kubeconfig_from_file(&env.kubeconfig)
        .await
        .expect("kubeconfig");
    let deadline = Duration::from_secs(2);
    let cluster = KubeCluster::new(client_with_deadline(kube, deadline).expect("client"));
    let before = cluster.node("control-plane").await.expect("plain GET");
    assert!(
        before.is_some(),
        "the simulated cluster has its control plane"
    );

    env.faults
        .cluster
        .force(FaultKind::Drip, "GET /api/v1/nodes/control-plane", 1);
    let started = Instant::now();
    let err = cluster
        .node("control-plane")
        .await
        .expect_err("a dripping answer (a node object is ~1 KiB: ~10 min at 2 B/s) must fail");
    let took = started.elapsed();
    assert!(
        took >= deadline && took < deadline + Duration::from_secs(3),
        "the call ended after {took:?}, its deadline is {deadline:?}"
    );
    let text = format!("{err:#}");
    assert!(
        text.contains("within 2s") && text.contains("/api/v1/nodes/control-plane"),
        "the error names the call and the deadline: {text}"
    );
    assert_eq!(env.faults.cluster.counts().drips, 1);
    // The next call is answered as usual.
    assert!(cluster.node("control-plane").await.expect("GET").is_some());
}

/// One hung cloud (a Nova listing that drips its answer) and one rate-limited cloud
/// (Kamatera's listing answering 429 with a Retry-After of 60 s) stalled every group for
/// minutes. Each provider's listing now has a deadline: the two are frozen for the cycle,
/// and the Proxmox group still scales up in the first cycles, each cycle within about the
/// deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_and_a_rate_limited_cloud_freeze_their_own_groups_not_the_others() {
    let spec = FaultSpec {
        drip: Duration::from_secs(1),
        retry_after: Duration::from_secs(60),
        ..FaultSpec::rate(0.0)
    };
    let (env, mut rec, _) = start(&spec).await;
    let deadline = Duration::from_secs(2);
    rec.clouds = rec.clouds.clone().with_observe_deadline(deadline);
    env.faults
        .openstack
        .force(FaultKind::Drip, "GET /compute/v2.1/servers/detail", 1000);
    env.faults
        .kamatera
        .force(FaultKind::TooManyRequests, "/service/servers", 1000);
    add_app(&env, "batch", 1);
    let mut scaled = false;
    for cycle in 0..4 {
        let started = Instant::now();
        let c = rec.cycle_detailed(SystemTime::now()).await.expect("cycle");
        let took = started.elapsed();
        assert!(
            took < deadline + Duration::from_secs(4),
            "cycle {cycle} took {took:?} with a hung and a rate-limited cloud"
        );
        let frozen: Vec<&String> = c.snapshot.unavailable_providers.keys().collect();
        assert_eq!(
            frozen.len(),
            2,
            "both broken providers are frozen: {frozen:?}"
        );
        if let nodewright::plan::Action::ScaleUp { group, .. } = &c.decision.action {
            assert_eq!(group, "batch");
            c.result.expect("the Proxmox create works");
            scaled = true;
            break;
        }
    }
    assert!(
        scaled,
        "the Proxmox group scaled up while the others were frozen"
    );
    assert_eq!(
        env.proxmox
            .guests()
            .iter()
            .filter(|v| v.name.starts_with(CLUSTER))
            .count(),
        1
    );
}

/// One node whose PATCH answered 500 was chosen again every cycle (its startup taint
/// removal) and blocked every other action in every group for as long as it failed. A
/// failing action is now held back per object, and the next step's action runs meanwhile:
/// here the Proxmox group's scale-up, while the OpenStack node's taint waits its turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unpatchable_node_does_not_block_other_groups_actions() {
    use nodewright::plan::Action;
    let (env, rec, _) = start(&FaultSpec::rate(0.0)).await;
    add_app(&env, "workers", 1);
    // The workers VM, then its node Ready with the startup taint, whose PATCH fails.
    let mut node = None;
    let started = Instant::now();
    while node.is_none() {
        assert!(started.elapsed() < Duration::from_secs(30), "no workers VM");
        let c = rec.cycle_detailed(SystemTime::now()).await.expect("cycle");
        if let Action::ScaleUp { group, .. } = &c.decision.action {
            assert_eq!(group, "workers");
            let name = vms(&env, CLUSTER)
                .into_iter()
                .find(|(g, _)| g == "workers")
                .map(|(_, n)| n)
                .expect("the workers VM");
            env.faults.cluster.force(
                FaultKind::ServerError,
                &format!("PATCH /api/v1/nodes/{name}"),
                1000,
            );
            node = Some(name);
        }
    }
    let node = node.unwrap_or_default();
    // Until the taint removal has failed as often as a failure is retried at once, and
    // once more.
    let started = Instant::now();
    let mut failed = 0;
    while failed <= nodewright::plan::backoff::RETRIED_AT_ONCE {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{node}: {failed} failure(s)"
        );
        let c = rec.cycle_detailed(SystemTime::now()).await.expect("cycle");
        if let Action::RemoveStartupTaint { nodes } = &c.decision.action {
            assert_eq!(nodes, &vec![node.clone()]);
            assert!(c.result.is_err(), "the PATCH of {node} is made to fail");
            failed += 1;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Before, every cycle now chose the same failing removal again.
    add_app(&env, "batch", 1);
    let (mut failed_again, mut batch_scaled) = (0, false);
    let started = Instant::now();
    while !batch_scaled {
        assert!(
            started.elapsed() < Duration::from_secs(8),
            "the batch group did not scale up within the taint removal's backoff; it failed again {failed_again} time(s)"
        );
        let c = rec.cycle_detailed(SystemTime::now()).await.expect("cycle");
        match &c.decision.action {
            Action::RemoveStartupTaint { .. } => failed_again += 1,
            Action::ScaleUp { group, .. } if group == "batch" => {
                batch_scaled = c.result.is_ok();
                assert!(
                    c.decision
                        .notes
                        .iter()
                        .any(|n| n.message.contains(&node) && n.message.contains("tried again in")),
                    "the plan says the taint removal is held back: {:?}",
                    c.decision.notes
                );
            }
            _ => {}
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        failed_again, 0,
        "held back after its fifth failure in a row"
    );
    assert!(has_startup_taint(
        &env.cluster
            .nodes()
            .into_iter()
            .find(|n| n.metadata.name.as_deref() == Some(node.as_str()))
            .expect("the node")
    ));
}

/// A VM delete that failed right after nodewright deleted its Node left the VM running,
/// and its kubelet registered the Node again, back in service. The VM delete is now tried
/// twice more at once, so one failed call does not bring the node back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vm_delete_failing_once_after_its_node_is_deleted_still_removes_the_vm() {
    use nodewright::plan::Action;
    let (env, rec, _) = start(&FaultSpec::rate(0.0)).await;
    add_app(&env, "cache", 1);
    drive(&env, &rec, "scale-up", Duration::from_secs(60), |e| {
        running_of(e, "cache") == 1
    })
    .await;
    scale_app(&env, "cache", 0);
    // Kamatera's terminate: the one call of the removal on that path.
    env.faults
        .kamatera
        .force(FaultKind::ServerError, "POST /service/server/terminate", 1);
    let started = Instant::now();
    loop {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no node removal; VMs {:?}",
            vms(&env, CLUSTER)
        );
        let c = rec.cycle_detailed(SystemTime::now()).await.expect("cycle");
        if let Action::DeleteNodes { .. } = &c.decision.action {
            let out = c
                .result
                .expect("the removal succeeds despite one failed delete");
            assert!(
                out.done.iter().any(|l| l.starts_with("deleted VM")),
                "{out:?}"
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        env.faults.kamatera.counts().server_errors,
        1,
        "the forced failure happened"
    );
    assert!(vms(&env, CLUSTER).iter().all(|(g, _)| g != "cache"));
}

/// Issue 19 A and B under 20 % faults: a person clones one Proxmox node VM and removes
/// this cluster's tag from the other; while the group scales down under faults, neither
/// the copy nor the disowned VM (with its node) is stopped or destroyed, and the group's
/// own VMs still go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persons_copy_and_a_disowned_proxmox_vm_are_never_touched_under_faults() {
    let spec = FaultSpec {
        seed: seed(),
        ..FaultSpec::rate(0.2)
    };
    let (env, rec, _) = start(&spec).await;
    add_app(&env, "batch", 2);
    drive(
        &env,
        &rec,
        "two batch nodes",
        Duration::from_secs(60),
        |e| settled(e, &[("batch", 2)]),
    )
    .await;
    let mut ours = env.proxmox.guests();
    ours.sort_by_key(|v| v.vmid);
    let (disowned, copied) = (&ours[0], &ours[1]);
    let tags: Vec<&str> = disowned
        .tags()
        .split(';')
        .filter(|t| !t.starts_with("nw-c-"))
        .collect();
    // What nodewright did to them before is not the question.
    let before = env.proxmox.calls().len();
    env.proxmox
        .set_config(disowned.vmid, "tags", &tags.join(";"));
    let copy = 4343;
    let o = env.proxmox.options();
    let made = reqwest::Client::new()
        .post(format!(
            "{}/api2/json/nodes/{}/qemu/{}/clone",
            env.proxmox.url(),
            copied.node,
            copied.vmid
        ))
        .header(
            "Authorization",
            format!("PVEAPIToken={}={}", o.token_id, o.token_secret),
        )
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body(common::form_body(&[
            ("newid", &copy.to_string()),
            ("full", "1"),
        ]))
        .send()
        .await
        .expect("clone");
    assert!(made.status().is_success(), "{}", made.status());
    common::wait_for("the copy", Duration::from_secs(20), || {
        env.proxmox
            .guests()
            .iter()
            .any(|v| v.vmid == copy && v.lock.is_none())
    })
    .await;
    env.faults.set_enabled(true);
    scale_app(&env, "batch", 0);
    // The group's own VM goes; the disowned one stays (with its node), as does the copy.
    drive(
        &env,
        &rec,
        "scale-down beside a copy and a disowned VM",
        Duration::from_secs(90),
        |e| !e.proxmox.guests().iter().any(|v| v.vmid == copied.vmid),
    )
    .await;
    for _ in 0..10 {
        let _ = rec.cycle(SystemTime::now()).await;
    }
    let left: Vec<u32> = env.proxmox.guests().iter().map(|v| v.vmid).collect();
    assert!(
        left.contains(&disowned.vmid) && left.contains(&copy),
        "{left:?}"
    );
    for vmid in [disowned.vmid, copy] {
        let touched: Vec<String> = env
            .proxmox
            .calls()
            .into_iter()
            .skip(before)
            .filter(|c| {
                c.path.contains(&format!("/qemu/{vmid}/"))
                    || c.path.ends_with(&format!("/qemu/{vmid}"))
            })
            .filter(|c| c.method != "GET")
            .map(|c| format!("{} {}", c.method, c.path))
            .collect();
        assert!(touched.is_empty(), "VM {vmid} touched: {touched:?}");
    }
    assert!(env.cluster.node(&disowned.name).is_some(), "its node stays");
}

//! Issue 29, items 9 and 10: a hung or rate-limited cloud slows no other group and no
//! cycle acts on a view read before the wait; a node cordoned to scale down that the
//! fresh view needs is given back; an action over several nodes applies to each on its
//! own. The unmodified `Reconciler`, built as `run` builds it, over loopback HTTP against
//! the simulators and their fault layer.

use nodewright_testkit as common;

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use common::faulty::{add_app, config, running_of, scale_app, vms};
use common::{cordon_patch, has_startup_taint};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use nodewright::cluster::{client_from_config, kubeconfig_from_file, CacheOptions, KubeCluster};
use nodewright::plan::Action;
use nodewright::run::clouds::build_clouds_with;
use nodewright::run::Reconciler;
use nodewright::sim::env::{SimEnv, SimTimings};
use nodewright::sim::faults::{FaultKind, FaultSpec};

const CLUSTER: &str = "fv";

/// The simulators with `spec` (random faults off) and a reconciler as a freshly started
/// `run` builds it against them (watch caches, nothing remembered), its providers' listing
/// deadline `deadline`.
async fn start(spec: &FaultSpec, deadline: Duration) -> (SimEnv, Reconciler) {
    let env = SimEnv::start_with_faults(None, SimTimings::default(), Some(spec))
        .await
        .expect("env");
    env.faults.set_enabled(false);
    let (_, cfg) = env.write_config(&config(CLUSTER, "300ms")).expect("config");
    let kube = kubeconfig_from_file(&env.kubeconfig)
        .await
        .expect("kubeconfig");
    let cluster = KubeCluster::watching(
        client_from_config(kube).expect("client"),
        CacheOptions::default(),
    );
    cluster.synced().await.expect("caches synced");
    let metrics = Arc::new(nodewright::telemetry::metrics::Metrics::new());
    let clouds = build_clouds_with(&cfg, |kind| Some(env.credentials_for(kind)))
        .expect("clouds")
        .instrumented(&metrics)
        .with_observe_deadline(deadline);
    let rec = Reconciler {
        config: Arc::new(cfg),
        cluster: Arc::new(cluster),
        clouds,
        memory: Default::default(),
        dry_run: false,
    };
    (env, rec)
}

/// The VM (and node) name of `group`'s one VM, if it has one.
fn vm_of(env: &SimEnv, group: &str) -> Option<String> {
    vms(env, CLUSTER)
        .into_iter()
        .find(|(g, _)| g == group)
        .map(|(_, n)| n)
}

fn node(env: &SimEnv, name: &str) -> Node {
    env.cluster
        .nodes()
        .into_iter()
        .find(|n| n.metadata.name.as_deref() == Some(name))
        .unwrap_or_else(|| panic!("node {name}"))
}

/// Cycles (plan, then act) until `done`, at most `max` cycles with a pause between them.
async fn cycle_until(
    env: &SimEnv,
    rec: &Reconciler,
    what: &str,
    max: usize,
    done: impl Fn(&SimEnv) -> bool,
) {
    let mut last = Vec::new();
    for _ in 0..max {
        if done(env) {
            return;
        }
        let c = rec.cycle_detailed(SystemTime::now()).await.expect("cycle");
        last.push(format!(
            "{} -> {:?}",
            c.decision.action,
            c.result.as_ref().err().map(|e| e.to_string())
        ));
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert!(
        done(env),
        "{what}: not within {max} cycles; actions:\n{}",
        last.join("\n")
    );
}

/// One cycle with both broken clouds frozen: whether observing waited out `deadline`,
/// and the decision (whose action must work).
async fn timed_cycle(rec: &Reconciler, deadline: Duration) -> (bool, nodewright::plan::Decision) {
    let now = SystemTime::now();
    let started = Instant::now();
    let (snapshot, decision) = rec.plan(now).await.expect("plan");
    let observed_for = started.elapsed();
    assert_eq!(
        snapshot.unavailable_providers.len(),
        2,
        "both broken clouds are frozen: {:?}",
        snapshot.unavailable_providers
    );
    let result = rec.act(&snapshot, &decision, now).await;
    result.as_ref().expect("the action works");
    (observed_for >= deadline, decision)
}

/// Item 9: with Nova's server listing hung, every cycle waited out the listing deadline
/// (and asked the hung listing again); with Kamatera rate-limited (429, Retry-After
/// 999,999 s) the same. A listing past its deadline now goes on in the background, one
/// per provider at a time, and no later cycle waits for it: at most one cycle waits out
/// the deadline, the hung listing is asked once, and the Proxmox group's pending pod gets
/// its VM in the first cycle that sees it, as with nothing broken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item_9_a_hung_or_rate_limited_listing_is_waited_for_once_and_other_groups_scale_up_in_their_first_cycle(
) {
    let spec = FaultSpec {
        drip: Duration::from_secs(1),
        retry_after: Duration::from_secs(999_999),
        ..FaultSpec::rate(0.0)
    };
    // Long enough that no cycle reaches it but by waiting for a listing.
    let deadline = Duration::from_secs(4);
    let (env, rec) = start(&spec, deadline).await;
    env.faults
        .openstack
        .force(FaultKind::Drip, "GET /compute/v2.1/servers/detail", 10_000);
    env.faults
        .kamatera
        .force(FaultKind::TooManyRequests, "/service/servers", 10_000);
    // The groups of the broken clouds have pending pods too.
    add_app(&env, "workers", 1);
    add_app(&env, "cache", 1);
    // Cycles waiting out the deadline, out of all cycles so far.
    let mut waited = 0;
    let mut cycles = 0;
    let one = || timed_cycle(&rec, deadline);
    // The broken clouds, seen for a few cycles first.
    for _ in 0..3 {
        let (w, d) = one().await;
        cycles += 1;
        waited += usize::from(w);
        assert_eq!(
            d.action,
            Action::None,
            "nothing to do but for the frozen groups"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // A Proxmox pod: its VM in the first cycle that sees it pending.
    add_app(&env, "batch", 1);
    let started = Instant::now();
    loop {
        let (w, d) = one().await;
        cycles += 1;
        waited += usize::from(w);
        let seen = d
            .pending
            .iter()
            .any(|p| p.pod.name.starts_with("batch-app"));
        if seen {
            assert_eq!(
                d.action,
                Action::ScaleUp {
                    group: "batch".into(),
                    count: 1,
                    size: None
                },
                "the first cycle that sees the batch pod pending makes its VM: {:?}",
                d.notes
            );
            break;
        }
        assert_eq!(d.action, Action::None);
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the batch pod pending"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A few more, as the loop runs on.
    for _ in 0..3 {
        let (w, _) = one().await;
        cycles += 1;
        waited += usize::from(w);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let drips = env.faults.openstack.counts().drips;
    println!(
        "{cycles} cycles, {waited} waited out the deadline; Nova's listing asked {drips} time(s)"
    );
    assert!(
        waited <= 1,
        "{waited} of {cycles} cycles waited out the {deadline:?} listing deadline; only the first to find Nova hung may"
    );
    assert_eq!(
        drips, 1,
        "the hung listing goes on, asked once, not once per cycle ({cycles} cycles)"
    );
    assert_eq!(running_of(&env, "workers"), 0);
    assert_eq!(running_of(&env, "cache"), 0);
}

/// Item 9: the cycle read the cluster, then waited out a hung cloud's listing deadline,
/// then acted on what it had read: a Kamatera node that took pods meanwhile was cordoned
/// as empty, drained and deleted. The cluster is now read after the providers answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item_9_a_node_that_took_pods_while_a_listing_hung_is_never_cordoned_as_empty() {
    let spec = FaultSpec {
        drip: Duration::from_secs(1),
        ..FaultSpec::rate(0.0)
    };
    let deadline = Duration::from_secs(3);
    let (env, rec) = start(&spec, deadline).await;
    add_app(&env, "cache", 1);
    cycle_until(&env, &rec, "the cache node", 200, |e| {
        running_of(e, "cache") == 1
    })
    .await;
    let cache = vm_of(&env, "cache").expect("the cache VM");
    // Its pod goes; plan (without acting on it) until the node is to be cordoned as empty.
    scale_app(&env, "cache", 0);
    let mut ripe = false;
    for _ in 0..100 {
        let now = SystemTime::now();
        let (snapshot, d) = rec.plan(now).await.expect("plan");
        if d.action.cordons().contains(&cache) {
            ripe = true;
            break;
        }
        rec.act(&snapshot, &d, now).await.expect("act");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert!(ripe, "{cache} was never found empty");
    // Now Nova's listing hangs, and while the cycle waits for it the cache pod comes back
    // on the same node.
    env.faults
        .openstack
        .force(FaultKind::Drip, "GET /compute/v2.1/servers/detail", 10_000);
    let cycle = rec.cycle_detailed(SystemTime::now());
    let meanwhile = async {
        let started = Instant::now();
        while env.faults.openstack.counts().drips == 0 {
            assert!(started.elapsed() < deadline, "the listing was never asked");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        scale_app(&env, "cache", 1);
        while env.cluster.pods_on(&cache).iter().all(|p| {
            !p.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with("cache-app"))
        }) {
            assert!(
                started.elapsed() < deadline,
                "the cache pod was not bound to {cache} while the listing hung"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let (c, ()) = tokio::join!(cycle, meanwhile);
    let c = c.expect("cycle");
    assert!(
        !c.decision.action.cordons().contains(&cache),
        "{cache} runs the cache pod, bound while the listing hung, yet: {}",
        c.decision.action
    );
    // And later cycles leave it in service with its pod.
    for _ in 0..10 {
        let c = rec.cycle_detailed(SystemTime::now()).await.expect("cycle");
        assert!(
            !c.decision.action.cordons().contains(&cache)
                && !matches!(
                    c.decision.action,
                    Action::Drain { .. } | Action::DeleteNodes { .. }
                ),
            "{cache} runs the cache pod: {}",
            c.decision.action
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert!(node(&env, &cache).spec.and_then(|s| s.unschedulable) != Some(true));
    assert_eq!(running_of(&env, "cache"), 1);
}

/// Item 9: once cordoned for scale-down, a node's drain went on whatever the fresh view
/// said: cordoned as empty on a stale view, its pods were evicted; cordoned empty, a new
/// VM was bought for a pending pod that fits it. Such a node is now given back
/// (uncordoned, nodewright's cordon record and unneeded clock cleared).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item_9_a_node_cordoned_for_scale_down_that_the_fresh_view_needs_is_given_back() {
    let (env, rec) = start(&FaultSpec::rate(0.0), Duration::from_secs(20)).await;
    add_app(&env, "cache", 1);
    cycle_until(&env, &rec, "the cache node", 200, |e| {
        running_of(e, "cache") == 1
    })
    .await;
    let cache = vm_of(&env, "cache").expect("the cache VM");
    let pod = |env: &SimEnv| -> Vec<String> {
        env.cluster
            .pods_on(&cache)
            .into_iter()
            .filter_map(|p| p.metadata.name)
            .filter(|n| n.starts_with("cache-app"))
            .collect()
    };
    let running = pod(&env);
    assert_eq!(running.len(), 1);
    let nodes: Api<Node> = Api::all(env.cluster.kube_client().await.expect("client"));
    let given_back = |env: &SimEnv| {
        let n = node(env, &cache);
        let annotations = n.metadata.annotations.unwrap_or_default();
        n.spec.and_then(|s| s.unschedulable) != Some(true)
            && !annotations
                .keys()
                .any(|k| k.starts_with("nodewright.io/cordoned") || k == "nodewright.io/disruption")
    };

    // Cordoned as empty (on a view that missed its pod): given back, its pod never evicted.
    nodes
        .patch(
            &cache,
            &PatchParams::default(),
            &Patch::Merge(cordon_patch(true)),
        )
        .await
        .expect("cordon as nodewright does");
    for _ in 0..5 {
        let c = rec.cycle_detailed(SystemTime::now()).await.expect("cycle");
        assert!(
            !matches!(
                c.decision.action,
                Action::Drain { .. } | Action::DeleteNodes { .. }
            ),
            "{cache} runs {running:?}: {}",
            c.decision.action
        );
        if given_back(&env) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert!(given_back(&env), "{cache} given back");
    assert_eq!(pod(&env), running, "the same pod, never evicted");

    // Empty and cordoned as such, then a cache pod is pending that only it can take (the
    // group has room for a new VM): the node is given back, no VM is bought.
    scale_app(&env, "cache", 0);
    let started = Instant::now();
    while !pod(&env).is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the cache pod goes"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    nodes
        .patch(
            &cache,
            &PatchParams::default(),
            &Patch::Merge(cordon_patch(true)),
        )
        .await
        .expect("cordon as nodewright does");
    scale_app(&env, "cache", 1);
    // Planned (not acted on) until the plan sees the pod pending: before the scheduler has
    // refused it, nothing says it needs a node.
    let started = Instant::now();
    loop {
        let (_, d) = rec.plan(SystemTime::now()).await.expect("plan");
        if !d.pending.is_empty() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the cache pod pending"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for _ in 0..5 {
        let c = rec.cycle_detailed(SystemTime::now()).await.expect("cycle");
        assert!(
            c.decision.action.scale_up().is_none()
                && !matches!(c.decision.action, Action::DeleteNodes { .. }),
            "a cache pod is pending that fits {cache}: {}",
            c.decision.action
        );
        if given_back(&env) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert!(given_back(&env), "{cache} given back");
    cycle_until(&env, &rec, "the cache pod on its node", 30, |e| {
        running_of(e, "cache") == 1
    })
    .await;
    assert_eq!(
        vms(&env, CLUSTER)
            .iter()
            .filter(|(g, _)| g == "cache")
            .count(),
        1
    );
}

/// Item 10: `remove-startup-taint` covered every Ready node in name order and stopped at
/// the first PATCH that failed: the nodes after an unpatchable one never got theirs, never
/// took pods, and were deleted at `provisionTimeout`. Each node is now patched on its own,
/// and only the one that failed is held back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item_10_one_unpatchable_node_does_not_hold_back_the_startup_taint_removal_of_the_others() {
    let (env, rec) = start(&FaultSpec::rate(0.0), Duration::from_secs(20)).await;
    add_app(&env, "batch", 1);
    add_app(&env, "cache", 1);
    // Acting on everything but a startup taint removal, until one covers both new nodes.
    let mut both = None;
    for _ in 0..200 {
        let now = SystemTime::now();
        let (snapshot, d) = rec.plan(now).await.expect("plan");
        match &d.action {
            Action::RemoveStartupTaint { nodes } if nodes.len() >= 2 => {
                both = Some((snapshot, d.clone(), nodes.clone()));
                break;
            }
            Action::RemoveStartupTaint { .. } => {}
            _ => {
                rec.act(&snapshot, &d, now).await.expect("act");
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let (snapshot, d, nodes) = both.expect("one startup taint removal covering both nodes");
    // The first it patches refuses every PATCH.
    let unpatchable = nodes[0].clone();
    env.faults.cluster.force(
        FaultKind::ServerError,
        &format!("PATCH /api/v1/nodes/{unpatchable}"),
        10_000,
    );
    let result = rec.act(&snapshot, &d, SystemTime::now()).await;
    assert!(result.is_err(), "the PATCH of {unpatchable} fails");
    for other in &nodes[1..] {
        assert!(
            !has_startup_taint(&node(&env, other)),
            "{other} was never let in: {unpatchable}, before it, could not be patched"
        );
    }
    assert!(has_startup_taint(&node(&env, &unpatchable)));
    // The next plans retry the unpatchable node alone.
    let (_, d) = rec.plan(SystemTime::now()).await.expect("plan");
    if let Action::RemoveStartupTaint { nodes } = &d.action {
        assert_eq!(nodes, &vec![unpatchable.clone()]);
    }
}

/// Item 10: an eviction that failed held back the whole drain (its node was not named
/// with the failure), so the drain of every other node waited behind one pod. Now the
/// failed pod's node alone is held back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item_10_a_failed_eviction_holds_back_the_drain_of_its_own_node_alone() {
    use nodewright::model::PodRef;
    use nodewright::sim::cluster::{SimNodeSpec, SimPodTemplate};
    let (env, rec) = start(&FaultSpec::rate(0.0), Duration::from_secs(20)).await;
    let (a, b) = ("drain-node-a", "drain-node-b");
    for n in [a, b] {
        env.cluster
            .add_node(SimNodeSpec::new(n, 8 << 30))
            .expect("node");
        let mut t = SimPodTemplate::new("nginx", 1 << 20);
        t.node_name = Some(n.to_string());
        env.cluster
            .add_pod("default", &format!("{n}-pod"), t)
            .expect("pod");
    }
    env.faults.cluster.force(
        FaultKind::ServerError,
        &format!("POST /api/v1/namespaces/default/pods/{a}-pod/eviction"),
        10_000,
    );
    let now = SystemTime::now();
    let (snapshot, planned) = rec.plan(now).await.expect("plan");
    let pod = |n: &str| PodRef {
        namespace: "default".into(),
        name: format!("{n}-pod"),
    };
    let drain = nodewright::plan::Decision {
        action: Action::Drain {
            nodes: vec![a.to_string(), b.to_string()],
            pods: vec![pod(a), pod(b)],
        },
        ..planned
    };
    let result = rec.act(&snapshot, &drain, now).await;
    assert!(result.is_err(), "the eviction on {a} fails");
    let held = rec.memory.action_backoffs();
    assert!(held.contains_key(&format!("drain node/{a}")), "{held:?}");
    assert!(
        !held.contains_key(&format!("drain node/{b}")),
        "the drain of {b} is held back for a pod on {a}: {held:?}"
    );
}

//! Issue 19: removal paths that could lose pods or leave nodes behind, each against the
//! simulated API server and OpenStack over loopback HTTP.

use nodewright_testkit as common;

use std::collections::BTreeMap;
use std::time::SystemTime;

use common::cordon_patch;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use nodewright::act::ActError;
use nodewright::model::{LABEL_CLUSTER, LABEL_GROUP};
use nodewright::plan::{Action, ReasonCode};
use nodewright::run::Reconciler;
use nodewright::sim::cluster::{SimNodeSpec, SimPodTemplate};
use nodewright::sim::env::{SimEnv, SimTimings};

const GI: u64 = 1 << 30;

const CONFIG: &str = r#"clusterName: e2e
freeMemoryTarget: 0 B
scanInterval: 200ms
nodeGroups:
  - name: workers
    provider: openstack
    minSize: 0
    maxSize: 4
    openstack: {flavor: m1.large, image: ubuntu-24.04, network: private}
    userData:
      template: k3s-agent.cloud-init.yaml.j2
      variables: {k3s_url: "https://192.0.2.1:6443", k3s_token: "e2e-secret-token"}
"#;

async fn setup(config: &str) -> (SimEnv, Reconciler) {
    let env = SimEnv::start(None, SimTimings::default())
        .await
        .expect("simulated environment starts");
    let (_, cfg) = env.write_config(config).expect("config loads");
    let rec = env.reconciler(cfg).await.expect("reconciler builds");
    (env, rec)
}

/// A joined node of ours: its VM tagged for the cluster and group, its Node labelled.
fn managed_node(env: &SimEnv, name: &str) -> String {
    let id = env.cloud.insert_server(
        name,
        BTreeMap::from([
            ("nodewright-cluster".to_string(), "e2e".to_string()),
            ("nodewright-group".to_string(), "workers".to_string()),
        ]),
    );
    env.cluster
        .add_node(
            SimNodeSpec::new(name, 8 * GI)
                .label(LABEL_CLUSTER, "e2e")
                .label(LABEL_GROUP, "workers"),
        )
        .expect("node");
    id
}

async fn nodes_api(env: &SimEnv) -> Api<Node> {
    Api::all(env.cluster.kube_client().await.expect("client"))
}

/// Item K: the plan is made on the watch caches; a pods watch that keeps failing leaves
/// the pod cache stale, and a node that runs pods by now was deleted as "empty". The
/// actuator lists the node's pods from the API server just before the delete and stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_empty_only_in_a_stale_pod_cache_is_not_deleted() {
    let (env, rec) = setup(CONFIG).await;
    let name = "e2e-workers-stale";
    let id = managed_node(&env, name);
    nodes_api(&env)
        .await
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(cordon_patch(true)),
        )
        .await
        .expect("cordon as nodewright does");
    let (snapshot, decision) = rec.plan(SystemTime::now()).await.expect("plan");
    assert!(
        matches!(&decision.action, Action::DeleteNodes { nodes } if nodes.len() == 1 && nodes[0].leaving.is_empty()),
        "{decision:#?}"
    );
    // The cache the plan was made on missed this pod (bound to the node since): a
    // mirror pod is there too, and never holds a node.
    let mut t = SimPodTemplate::new("postgres:16", GI);
    t.node_name = Some(name.to_string());
    env.cluster
        .add_pod("default", "postgres-0", t)
        .expect("pod");
    env.cluster
        .add_mirror_pod(
            "kube-system",
            "static-agent",
            name,
            SimPodTemplate::new("agent:1", 1 << 20),
        )
        .expect("mirror pod");

    let err = match rec.act(&snapshot, &decision, SystemTime::now()).await {
        Err(e @ ActError::Refused { .. }) => e.to_string(),
        other => panic!("expected a refusal, got {other:?}"),
    };
    assert!(
        err.contains(&format!(
            "node {name} runs 1 pod(s) the plan did not see (default/postgres-0)"
        )),
        "{err}"
    );
    assert!(env.cluster.node(name).is_some(), "node deleted: {err}");
    assert!(
        env.cloud.servers().iter().any(|s| s.id == id),
        "VM deleted: {err}"
    );
    // With the pod gone, the same plan goes through (a mirror pod does not hold it).
    let pods: Api<Pod> =
        Api::namespaced(env.cluster.kube_client().await.expect("client"), "default");
    pods.delete("postgres-0", &DeleteParams::default().grace_period(0))
        .await
        .expect("delete the pod");
    let (snapshot, decision) = rec.plan(SystemTime::now()).await.expect("plan");
    rec.act(&snapshot, &decision, SystemTime::now())
        .await
        .expect("the emptied node is deleted");
    assert!(env.cluster.node(name).is_none());
}

/// Low: the cordon was a blind merge patch, so a person's cordon made between the plan
/// and the patch became nodewright's (annotated, then drained and deleted). The cordon
/// now reads the node, leaves a person's cordon alone, and patches under the node's
/// resourceVersion, so a change in between is a 409 Conflict and the next cycle reads
/// again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cordon_made_by_a_person_after_the_plan_is_not_taken_over() {
    let config = CONFIG.replace(
        "nodeGroups:",
        "scaleDown: {delayAfterAdd: 0s, unneededTime: 1m}\nnodeGroups:",
    );
    let (env, rec) = setup(&config).await;
    let names = ["e2e-workers-a", "e2e-workers-b"];
    for n in names {
        managed_node(&env, n);
    }
    let nodes = nodes_api(&env).await;
    let since =
        humantime::format_rfc3339_seconds(SystemTime::now() - std::time::Duration::from_secs(3600))
            .to_string();
    for n in names {
        nodes
            .patch(
                n,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({
                    "metadata": {"annotations": {nodewright::model::ANNOTATION_UNNEEDED_SINCE: since}}
                })),
            )
            .await
            .expect("annotate");
    }
    let (snapshot, decision) = rec.plan(SystemTime::now()).await.expect("plan");
    let target = match &decision.action {
        Action::Cordon { nodes, .. } => nodes[0].clone(),
        other => panic!("expected a cordon, got {other:?}"),
    };
    // A person cordons it first, for their own maintenance.
    nodes
        .patch(
            &target,
            &PatchParams::default(),
            &Patch::Merge(cordon_patch(false)),
        )
        .await
        .expect("a person's cordon");
    let err = rec
        .act(&snapshot, &decision, SystemTime::now())
        .await
        .expect_err("the cordon must not take the person's over");
    assert!(
        err.to_string()
            .contains("cordoned by someone else since the plan"),
        "{err}"
    );
    let node = env.cluster.node(&target).expect("node");
    let annotations = node.metadata.annotations.unwrap_or_default();
    assert!(
        !annotations.contains_key(nodewright::model::ANNOTATION_CORDONED),
        "{annotations:?}"
    );
    // The next plan sees a person's cordon and leaves the node alone.
    let (_, d) = rec.plan(SystemTime::now()).await.expect("plan");
    assert!(
        !matches!(&d.action, Action::Cordon { nodes, .. } | Action::Drain { nodes, .. } if nodes.contains(&target)),
        "{d:#?}"
    );
}

/// Item M: a NotReady node whose VM is gone was never removed (no VM, so no member):
/// its StatefulSet pods waited for ever. Past `health.unhealthyAfter` with no VM in the
/// listing, and none again when listed just before, its Node is deleted and its pods go
/// with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_not_ready_node_whose_vm_is_gone_is_deleted_after_unhealthy_after() {
    let config = CONFIG.replace("nodeGroups:", "health: {unhealthyAfter: 10m}\nnodeGroups:");
    let (env, rec) = setup(&config).await;
    let ghost = "e2e-workers-ghost";
    let late = "e2e-workers-late";
    for name in [ghost, late] {
        env.cluster
            .add_node(
                SimNodeSpec::new(name, 8 * GI)
                    .label(LABEL_CLUSTER, "e2e")
                    .label(LABEL_GROUP, "workers"),
            )
            .expect("node");
        env.cluster.set_node_ready(name, false).expect("NotReady");
    }
    let mut t = SimPodTemplate::new("postgres:16", GI);
    t.node_name = Some(ghost.to_string());
    env.cluster
        .add_pod("default", "postgres-0", t)
        .expect("pod");
    let is_without_vm = |a: &Action| matches!(a, Action::DeleteNodesWithoutVm { .. });

    // NotReady for less than unhealthyAfter: left alone.
    let (_, d) = rec.plan(SystemTime::now()).await.expect("plan");
    assert!(!is_without_vm(&d.action), "{d:#?}");

    // Past it: both Nodes go, but between the plan and the act a VM named like one of
    // them appears (the listing the plan saw missed it): that one stays.
    let later = SystemTime::now() + std::time::Duration::from_secs(3600);
    let (snapshot, d) = rec.plan(later).await.expect("plan");
    match &d.action {
        Action::DeleteNodesWithoutVm { nodes } => {
            assert_eq!(nodes, &[ghost.to_string(), late.to_string()], "{d:#?}")
        }
        other => panic!("expected the Nodes without VM to be deleted, got {other:?}"),
    }
    assert!(
        d.reasons[0].message.contains("has no VM of that name"),
        "{d:#?}"
    );
    managed_vm(&env, late);
    let err = rec
        .act(&snapshot, &d, later)
        .await
        .expect_err("the node whose VM showed up is refused");
    assert!(
        err.to_string().contains(&format!("lists VM {late}")),
        "{err}"
    );
    assert!(env.cluster.node(ghost).is_none(), "{err}");
    assert!(env.cluster.node(late).is_some(), "{err}");
    // Its pod is garbage collected with it, so its controller makes it again elsewhere.
    common::wait_for(
        "the pod of the deleted node to go",
        std::time::Duration::from_secs(10),
        || env.cluster.pod("default", "postgres-0").is_none(),
    )
    .await;
    // The node whose VM exists is not deleted this way any more.
    let (_, d) = rec.plan(later).await.expect("plan");
    assert!(!is_without_vm(&d.action), "{d:#?}");
}

/// A VM of ours in group `workers`, named `name`, with no node of its own made here.
fn managed_vm(env: &SimEnv, name: &str) -> String {
    env.cloud.insert_server(
        name,
        BTreeMap::from([
            ("nodewright-cluster".to_string(), "e2e".to_string()),
            ("nodewright-group".to_string(), "workers".to_string()),
        ]),
    )
}

/// Item N: VMs of a group removed from (or renamed in) the config were ignored for
/// ever, silently. They are reported every cycle (the plan's notes, the status
/// ConfigMap's Event, the `nodewright_unknown_group_vms` metric), with how to remove
/// them, and never touched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vms_of_a_group_gone_from_the_config_are_reported_every_cycle_and_never_touched() {
    let (env, rec) = setup(CONFIG).await;
    let id = env.cloud.insert_server(
        "e2e-batch-old",
        BTreeMap::from([
            ("nodewright-cluster".to_string(), "e2e".to_string()),
            ("nodewright-group".to_string(), "batch".to_string()),
        ]),
    );
    env.cluster
        .add_node(
            SimNodeSpec::new("e2e-batch-old", 8 * GI)
                .label(LABEL_CLUSTER, "e2e")
                .label(LABEL_GROUP, "batch"),
        )
        .expect("node");
    for _ in 0..3 {
        let report = rec.cycle(SystemTime::now()).await.expect("cycle");
        let d = &report.decision;
        let note = d
            .notes
            .iter()
            .find(|n| n.code == ReasonCode::UnknownGroupVms)
            .unwrap_or_else(|| panic!("no note on the VM of group batch: {d:#?}"));
        assert!(
            note.message.contains(&format!("e2e-batch-old ({id})")),
            "{note:?}"
        );
        assert!(
            note.message
                .contains("group 'batch', which the config does not have"),
            "{note:?}"
        );
        assert!(note.message.contains("To remove them"), "{note:?}");
        let status = nodewright::model::ObjectRef {
            kind: "ConfigMap".into(),
            namespace: Some("nodewright".into()),
            name: "nodewright-status".into(),
        };
        let events = nodewright::act::events::events_for(d, Ok(&report.outcome), Some(&status));
        assert!(
            events
                .iter()
                .any(|e| e.reason == "UnknownGroupVms" && e.warning),
            "{events:#?}"
        );
        let summary = nodewright::plan::summary::summarize(
            &rec.observe().await.expect("observe"),
            &rec.config,
            SystemTime::now(),
        );
        assert_eq!(summary.unknown_group_vms, 1);
    }
    assert!(env.cloud.servers().iter().any(|s| s.id == id));
    assert!(env.cluster.node("e2e-batch-old").is_some());
}

/// An OpenStack group and a Kamatera group (one node at least) under `limits.nodes: 2`.
const OS_AND_KAM: &str = r#"clusterName: e2e
freeMemoryTarget: 4 GiB
provisionTimeout: 60s
scanInterval: 200ms
limits: {nodes: 2}
scaleDown: {enabled: false}
nodeGroups:
  - name: os
    provider: openstack
    maxSize: 3
    openstack: {flavor: m1.large, image: ubuntu-24.04, network: private}
    userData:
      template: k3s-agent.cloud-init.yaml.j2
      variables: {k3s_url: "https://192.0.2.1:6443", k3s_token: "e2e-secret-token"}
  - name: kam
    provider: kamatera
    minSize: 1
    maxSize: 2
    kamatera: {datacenter: EU, image: ubuntu_server_24.04_64-bit, cpu: 2B, ram: 8 GiB}
    userData: {template: k3s-agent.join.sh.j2, variables: {k3s_url: "https://192.0.2.1:6443", k3s_token: "e2e-secret-token"}}
"#;

/// Item I: while a provider could not be listed its VMs were missing from the picture:
/// its nodes' free room vanished (the free-memory target made the other provider scale
/// up during the outage) and its groups counted at 0 CPU and memory in `limits`. Its
/// Nodes' room still counts, and the limits count its last known VMs (a process that
/// restarted during the outage, knowing none, counts its groups at `maxSize`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_provider_keeps_its_room_and_its_last_known_vms_in_the_limits() {
    let env = SimEnv::start(None, SimTimings::default())
        .await
        .expect("env");
    let text = OS_AND_KAM;
    // The kam group's one node joins first, with no free-memory target yet.
    let (_, quiet) = env
        .write_config(&text.replace("freeMemoryTarget: 4 GiB", "freeMemoryTarget: 0 B"))
        .expect("config");
    let mut rec = env.reconciler(quiet).await.expect("reconciler");
    let ready_kam = |env: &SimEnv| {
        env.cluster.nodes().iter().any(|n| {
            common::ready(n)
                && !common::has_startup_taint(n)
                && n.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(LABEL_GROUP))
                    .map(String::as_str)
                    == Some("kam")
        })
    };
    common::drive(
        &env,
        &rec,
        std::time::Duration::from_secs(60),
        |_| {},
        ready_kam,
        |env| format!("{:#?}", env.cluster.nodes().len()),
    )
    .await;
    // Its free room (8 GiB) meets the target of 4 GiB.
    let (_, cfg) = env.write_config(text).expect("config");
    rec.config = std::sync::Arc::new(cfg.clone());
    let (_, d) = rec.plan(SystemTime::now()).await.expect("plan");
    assert!(d.action.scale_up().is_none(), "{d:#?}");
    assert!(env.cloud.servers().is_empty());

    env.kamatera.set_listing_down(true);
    for _ in 0..5 {
        let report = rec.cycle(SystemTime::now()).await.expect("cycle");
        let d = &report.decision;
        assert!(d.has_reason(ReasonCode::ProviderUnavailable), "{d:#?}");
        assert!(
            d.action.scale_up().is_none(),
            "the outage of kam took its node's room away: {d:#?}"
        );
    }
    assert!(
        env.cloud.servers().is_empty(),
        "OpenStack scaled up during the outage"
    );

    // A pod that needs a new node: one kam VM known, limits.nodes 2, so os gets one.
    env.cluster
        .add_pod(
            "default",
            "big",
            SimPodTemplate::new("nginx:1.25", 7 * GI).node_selector(LABEL_GROUP, "os"),
        )
        .expect("pod");
    let mut scaled = None;
    for _ in 0..50 {
        let (_, d) = rec.plan(SystemTime::now()).await.expect("plan");
        if let Some((g, n)) = d.action.scale_up() {
            scaled = Some((g.to_string(), n));
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(scaled, Some(("os".to_string(), 1)));
    // A process started during the outage knows no kam VM: kam counts at maxSize 2,
    // and limits.nodes 2 holds the scale-up.
    let fresh = env.reconciler(cfg).await.expect("reconciler");
    let (_, d) = fresh.plan(SystemTime::now()).await.expect("plan");
    assert!(d.action.scale_up().is_none(), "{d:#?}");
    assert!(d.has_reason(ReasonCode::ClusterLimitReached), "{d:#?}");
}

/// The crash suite found a cluster one VM past `limits.nodes`: a VM made in one cycle,
/// then its provider's listing failed in the next, which counted the provider's last
/// good listing (from before the VM was made), and another provider's group grew into
/// the room the new VM had taken. A VM made since the last good listing counts too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vm_made_just_before_its_provider_goes_dark_still_counts_in_the_limits() {
    let env = SimEnv::start(None, SimTimings::default())
        .await
        .expect("env");
    // kam may grow to 3: the limit, not its maxSize, must hold the os group.
    let text = OS_AND_KAM
        .replace("freeMemoryTarget: 4 GiB", "freeMemoryTarget: 0 B")
        .replace("maxSize: 2\n", "maxSize: 3\n");
    let text = text.as_str();
    let (_, cfg) = env.write_config(text).expect("config");
    let mut rec = env.reconciler(cfg).await.expect("reconciler");
    // kam's first VM, then a good listing that shows it.
    let report = rec.cycle(SystemTime::now()).await.expect("cycle");
    assert_eq!(
        report.decision.action.scale_up(),
        Some(("kam", 1)),
        "{:#?}",
        report.decision
    );
    rec.observe().await.expect("observe");
    // kam's second VM (minSize 2 now), made after that listing.
    let (_, cfg) = env
        .write_config(&text.replace("minSize: 1", "minSize: 2"))
        .expect("config");
    rec.config = std::sync::Arc::new(cfg);
    let report = rec.cycle(SystemTime::now()).await.expect("cycle");
    assert_eq!(
        report.decision.action.scale_up(),
        Some(("kam", 1)),
        "{:#?}",
        report.decision
    );
    assert_eq!(env.kamatera.servers().len(), 2);
    // Then Kamatera cannot be listed, and a pod needs an os node.
    env.kamatera.set_listing_down(true);
    env.cluster
        .add_pod(
            "default",
            "big",
            SimPodTemplate::new("nginx:1.25", 7 * GI).node_selector(LABEL_GROUP, "os"),
        )
        .expect("pod");
    let mut held = false;
    for _ in 0..30 {
        let report = rec.cycle(SystemTime::now()).await.expect("cycle");
        let d = &report.decision;
        assert!(
            d.action.scale_up().is_none(),
            "grown past limits.nodes 2 while kam's new VM was out of sight: {d:#?}"
        );
        if d.has_reason(ReasonCode::ClusterLimitReached) {
            held = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(held, "the limit is given as the reason");
    assert!(env.cloud.servers().is_empty(), "no os VM");
}

/// Item L: Nova lists the servers of a cell it cannot reach as partial records (status
/// UNKNOWN, no name or metadata); they were dropped as not ours, the group looked
/// smaller than it is and grew past maxSize. A partial listing is a failed one: the
/// provider is frozen until the cell is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_of_a_down_nova_cell_freeze_the_provider_instead_of_vanishing() {
    let config = CONFIG.replace("maxSize: 4", "maxSize: 2");
    let (env, rec) = setup(&config).await;
    let ids = [
        managed_node(&env, "e2e-workers-a"),
        managed_node(&env, "e2e-workers-b"),
    ];
    // Fits no node there (2 CPUs each), but a new m1.large (4 vCPUs).
    env.cluster
        .add_pod(
            "default",
            "big",
            SimPodTemplate::new("nginx:1.25", GI).cpu(3000),
        )
        .expect("pod");
    env.cloud.set_cell_down(&ids[1], true);
    let mut frozen = 0;
    for _ in 0..30 {
        let (_, d) = rec.plan(SystemTime::now()).await.expect("plan");
        assert!(
            d.action.scale_up().is_none(),
            "a group with a server in a down cell grew: {d:#?}"
        );
        if d.notes.iter().any(|n| {
            n.code == ReasonCode::ProviderUnavailable && n.message.contains("a cell is down")
        }) {
            frozen += 1;
            if frozen == 3 {
                break;
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(frozen, 3, "the partial listing never froze the provider");
    assert_eq!(env.cloud.servers().len(), 2);
    // The cell is back: both are seen, and the group is at maxSize.
    env.cloud.set_cell_down(&ids[1], false);
    let (snapshot, d) = rec.plan(SystemTime::now()).await.expect("plan");
    assert_eq!(snapshot.servers.len(), 2, "{snapshot:#?}");
    assert!(d.action.scale_up().is_none(), "{d:#?}");
}

/// Item S: with `drain.terminationGracePeriod`, an expired node past it was deleted, VM
/// and all, under the pods a PodDisruptionBudget held, still running. They are deleted
/// first (gracefully, with their grace period, as Karpenter does), waited for, and only
/// then the node and its VM go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_a_pdb_holds_are_deleted_and_gone_before_the_expired_node_and_its_vm() {
    let config = CONFIG.replace(
        "nodeGroups:",
        "oldNodeAgeLimit: 72h\ndrain: {timeout: 10m, terminationGracePeriod: 1h}\nnodeGroups:",
    );
    let (env, rec) = setup(&config).await;
    let name = "e2e-workers-old";
    let id = managed_node(&env, name);
    let mut t = SimPodTemplate::new("postgres:16", GI).label("app", "db");
    t.node_name = Some(name.to_string());
    env.cluster.add_pod("default", "db-0", t).expect("pod");
    env.cluster
        .add_pdb(
            "default",
            "db",
            BTreeMap::from([("app".to_string(), "db".to_string())]),
            nodewright::sim::cluster::PdbBudget::MinAvailable(
                k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(1),
            ),
        )
        .expect("pdb");
    // Cordoned by nodewright as expired 65 minutes ago: past the hard limit (1h), not
    // yet past it and drain.timeout (10m), when the node goes whatever is left.
    let at = humantime::format_rfc3339_seconds(
        SystemTime::now() - std::time::Duration::from_secs(65 * 60),
    )
    .to_string();
    nodes_api(&env)
        .await
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({
                "metadata": {"annotations": {
                    nodewright::model::ANNOTATION_CORDONED: "expired: older than oldNodeAgeLimit",
                    nodewright::model::ANNOTATION_CORDONED_AT: at,
                    nodewright::model::ANNOTATION_DISRUPTION: "expired",
                }},
                "spec": {"unschedulable": true}
            })),
        )
        .await
        .expect("cordon as nodewright does");
    // The budget allows no disruption once the simulated controller counted the pod.
    common::wait_for(
        "the PDB to allow no disruption",
        std::time::Duration::from_secs(10),
        || {
            env.cluster.pdbs().iter().any(|p| {
                p.status.as_ref().is_some_and(|s| {
                    s.current_healthy == Some(1) && s.disruptions_allowed == Some(0)
                })
            })
        },
    )
    .await;

    let mut deleted_pods = false;
    let start = std::time::Instant::now();
    loop {
        let (snapshot, d) = rec.plan(SystemTime::now()).await.expect("plan");
        match &d.action {
            Action::DeletePodsPastLimit { pods, .. } => {
                assert_eq!(pods.len(), 1, "{d:#?}");
                assert_eq!(pods[0].name, "db-0");
                deleted_pods = true;
            }
            Action::DeleteNodes { nodes } => {
                assert!(
                    deleted_pods,
                    "the node went before its pods were deleted: {d:#?}"
                );
                assert!(
                    env.cluster.pod("default", "db-0").is_none(),
                    "the node goes while db-0 still runs: {d:#?}"
                );
                assert_eq!(nodes[0].node, name);
                rec.act(&snapshot, &d, SystemTime::now())
                    .await
                    .expect("delete the node");
                break;
            }
            _ => {}
        }
        if d.action != Action::None {
            rec.act(&snapshot, &d, SystemTime::now())
                .await
                .unwrap_or_else(|e| panic!("{} failed: {e}", d.action));
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(30),
            "the node was never removed; last plan: {d:#?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(env.cluster.node(name).is_none());
    assert!(!env.cloud.servers().iter().any(|s| s.id == id));
}

/// Items M and N as a user sees them, with the real `nodewright run`: the Node of a VM
/// that is gone goes once NotReady past `health.unhealthyAfter`; a VM of a group removed
/// from the config is reported (log, metric) and left alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodewright_run_deletes_the_node_of_a_gone_vm_and_reports_a_removed_groups_vm() {
    let env = SimEnv::start(None, SimTimings::default())
        .await
        .expect("simulated environment starts");
    let config = CONFIG.replace("nodeGroups:", "health: {unhealthyAfter: 2s}\nnodeGroups:");
    let (cfg, _) = env.write_config(&config).expect("config");
    let ghost = "e2e-workers-ghost";
    env.cluster
        .add_node(
            SimNodeSpec::new(ghost, 8 * GI)
                .label(LABEL_CLUSTER, "e2e")
                .label(LABEL_GROUP, "workers"),
        )
        .expect("node");
    env.cluster.set_node_ready(ghost, false).expect("NotReady");
    let old = env.cloud.insert_server(
        "e2e-batch-old",
        BTreeMap::from([
            ("nodewright-cluster".to_string(), "e2e".to_string()),
            ("nodewright-group".to_string(), "batch".to_string()),
        ]),
    );
    let metrics_port = common::free_port();
    let log_path = env.dir.join("run-removal.log");
    let log = std::fs::File::create(&log_path).expect("log");
    let mut cmd = common::nodewright_for!(&env, &cfg);
    cmd.arg("run")
        .arg("--metrics-addr")
        .arg(format!("127.0.0.1:{metrics_port}"))
        .stdout(std::process::Stdio::null())
        .stderr(log);
    let _run = common::Killed(cmd.spawn().expect("start nodewright"));
    common::wait_for(
        "the Node of the gone VM to be deleted",
        std::time::Duration::from_secs(60),
        || env.cluster.node(ghost).is_none(),
    )
    .await;
    let logged = || std::fs::read_to_string(&log_path).unwrap_or_default();
    common::wait_for(
        "the VM of group batch to be reported",
        std::time::Duration::from_secs(30),
        || logged().contains("e2e-batch-old") && logged().contains("does not have"),
    )
    .await;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let metrics = reqwest::get(format!("http://127.0.0.1:{metrics_port}/metrics"))
        .await
        .expect("metrics")
        .text()
        .await
        .expect("metrics text");
    assert!(
        metrics.contains("nodewright_unknown_group_vms 1"),
        "{metrics}"
    );
    assert!(
        env.cloud.servers().iter().any(|s| s.id == old),
        "{}",
        logged()
    );
}

/// Issue 29, item 6: the removing mark was never cleared. A VM whose delete failed after
/// nodewright deleted its Node (a Proxmox backup lock, a cloud outage) kept the mark
/// when its kubelet registered the Node again and the node went back into service; a
/// later `kubectl delete node` (or a blind moment) then had it deleted at once, with no
/// cap. Letting the node in again takes the mark off, and the VM is waited on as any
/// joined VM that lost its Node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item_6_a_vm_let_in_again_loses_its_removing_mark_and_survives_a_node_delete() {
    use nodewright::cloud::{JOINED_TAG, REMOVING_TAG};
    let (env, rec) = setup(CONFIG).await;
    let name = "e2e-workers-back";
    let secs = nodewright::model::unix_secs(SystemTime::now()).to_string();
    // Joined once, then marked for removal; its Node was deleted and the VM's delete
    // failed, so it still carries both marks.
    let id = env.cloud.insert_server(
        name,
        BTreeMap::from([
            ("nodewright-cluster".to_string(), "e2e".to_string()),
            ("nodewright-group".to_string(), "workers".to_string()),
            (JOINED_TAG.to_string(), secs.clone()),
            (REMOVING_TAG.to_string(), secs),
        ]),
    );
    // Its kubelet registers the Node again, under the startup taint of its user data.
    env.cluster
        .add_node(
            SimNodeSpec::new(name, 8 * GI)
                .label(LABEL_CLUSTER, "e2e")
                .label(LABEL_GROUP, "workers")
                .taint(
                    nodewright::model::STARTUP_TAINT_KEY,
                    Some("true"),
                    "NoSchedule",
                ),
        )
        .expect("node registers again");
    let vm_there = |env: &SimEnv| env.cloud.servers().iter().any(|s| s.id == id);
    let mut let_in = false;
    for _ in 0..4 {
        let report = rec.cycle(SystemTime::now()).await.expect("cycle");
        let_in |= matches!(&report.decision.action, Action::RemoveStartupTaint { nodes } if nodes.contains(&name.to_string()));
        assert!(vm_there(&env), "{:#?}", report.decision);
    }
    assert!(let_in, "the node registered again was never let in");
    let node = env.cluster.node(name).expect("node");
    assert!(
        node.spec
            .and_then(|s| s.taints)
            .unwrap_or_default()
            .iter()
            // nodewright's soft taint (a preference, PreferNoSchedule) may be there: an
            // empty node is a removal candidate.
            .all(|t| t.effect == "PreferNoSchedule"),
        "the node is in service again"
    );
    let server = env
        .cloud
        .servers()
        .into_iter()
        .find(|s| s.id == id)
        .expect("VM");
    assert!(
        !server.metadata.contains_key(REMOVING_TAG),
        "a VM back in service still carries the removing mark: {:?}",
        server.metadata
    );

    // A person deletes the Node object: the VM ran as a node, so it is waited on.
    nodes_api(&env)
        .await
        .delete(name, &DeleteParams::default())
        .await
        .expect("kubectl delete node");
    for _ in 0..4 {
        let report = rec.cycle(SystemTime::now()).await.expect("cycle");
        assert!(
            !matches!(&report.decision.action, Action::DeleteServers { servers, .. } if servers.iter().any(|s| s.id == id)),
            "{:#?}",
            report.decision
        );
        assert!(vm_there(&env), "{:#?}", report.decision);
    }
    assert!(
        !env.cloud
            .calls()
            .iter()
            .any(|c| c.method == "DELETE" && c.path.ends_with(&format!("/servers/{id}"))),
        "a delete was sent for the VM"
    );
}

/// VMs of ours that ran without the joined mark (made by an older release, or whose
/// mark write failed), with no Node, `provisionTimeout` behind them.
fn unmarked_vms(env: &SimEnv, n: usize) -> Vec<String> {
    (0..n)
        .map(|i| managed_vm(env, &format!("e2e-workers-old-{i}")))
        .collect()
}

/// Issue 29, item 3 (the blind view): with VMs that carry no joined mark, an API server
/// that lists no nodes (a wrong kubeconfig, an etcd restore) had 5 of 5 VMs deleted
/// within 1.5 s, two per action, the next cycle at once. With no node of ours in view
/// while VMs past `provisionTimeout` run, the view is blind whatever their marks: none
/// is removed for not joining, and the plan says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item_3_unmarked_vms_behind_an_api_server_listing_no_nodes_are_all_kept() {
    let (env, rec) =
        setup(&CONFIG.replace("nodeGroups:", "provisionTimeout: 10m\nnodeGroups:")).await;
    let ids = unmarked_vms(&env, 5);
    let later = SystemTime::now() + std::time::Duration::from_secs(3600);
    for _ in 0..6 {
        let report = rec.cycle(later).await.expect("cycle");
        assert!(
            !matches!(report.decision.action, Action::DeleteServers { .. }),
            "{:#?}",
            report.decision
        );
        assert!(
            report
                .decision
                .notes
                .iter()
                .any(|n| n.code == ReasonCode::ClusterViewSuspect
                    && n.message.contains("the cluster view looks wrong")),
            "{:#?}",
            report.decision
        );
    }
    let left: Vec<String> = env.cloud.servers().into_iter().map(|s| s.id).collect();
    for id in &ids {
        assert!(
            left.contains(id),
            "VM {id} deleted behind a blind API server"
        );
    }
}

/// Issue 29, item 3 (the rate): "at most 2 per action" was no rate, the next cycle ran at
/// once. With nodes of ours in view (the view is not blind), VMs that never joined go at
/// most 2 per `provisionTimeout`, counted from what the cluster records, so a restarted
/// process holds to it too; and a node in view whose VM has no joined mark (an older
/// release's) gets it before any VM is removed for not joining.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item_3_vms_that_never_joined_go_at_most_two_per_provision_timeout_across_restarts() {
    use nodewright::cloud::JOINED_TAG;
    use nodewright::cluster::KubeCluster;
    let config = CONFIG.replace(
        "nodeGroups:",
        "provisionTimeout: 10m\nscaleDown: {enabled: false}\nnodeGroups:",
    );
    let (env, _) = setup(&config).await;
    // A reconciler keeping its records in the status ConfigMap, as `run` does.
    let reconciler = || async {
        let (_, cfg) = env.write_config(&config).expect("config loads");
        let base = env.reconciler(cfg).await.expect("reconciler builds");
        let client = env.cluster.kube_client().await.expect("client");
        Reconciler {
            cluster: std::sync::Arc::new(
                KubeCluster::new(client).with_records("default", "nodewright-status"),
            ),
            ..base
        }
    };
    let in_view = managed_node(&env, "e2e-workers-live");
    let ids = unmarked_vms(&env, 5);
    let count_left = |env: &SimEnv| {
        let left: Vec<String> = env.cloud.servers().into_iter().map(|s| s.id).collect();
        ids.iter().filter(|id| left.contains(id)).count()
    };
    let t0 = SystemTime::now() + std::time::Duration::from_secs(3600);

    let rec = reconciler().await;
    let first = rec.cycle(t0).await.expect("cycle");
    assert!(
        matches!(&first.decision.action, Action::MarkJoined { servers, .. } if servers.iter().any(|s| s.id == in_view)),
        "the joined mark goes first: {:#?}",
        first.decision
    );
    let marked = env
        .cloud
        .servers()
        .into_iter()
        .find(|s| s.id == in_view)
        .expect("VM in view");
    assert!(marked.metadata.contains_key(JOINED_TAG), "{marked:?}");
    for _ in 0..5 {
        rec.cycle(t0).await.expect("cycle");
    }
    assert_eq!(
        count_left(&env),
        3,
        "two removed in the first provisionTimeout"
    );
    // A restart within the same provisionTimeout: the cluster's record holds it.
    drop(rec);
    let rec = reconciler().await;
    let t1 = t0 + std::time::Duration::from_secs(300);
    for _ in 0..5 {
        let report = rec.cycle(t1).await.expect("cycle");
        assert!(
            !matches!(report.decision.action, Action::DeleteServers { .. }),
            "{:#?}",
            report.decision
        );
    }
    assert_eq!(
        count_left(&env),
        3,
        "none more within the same provisionTimeout"
    );
    // One provisionTimeout later, two more.
    let t2 = t0 + std::time::Duration::from_secs(601);
    for _ in 0..5 {
        rec.cycle(t2).await.expect("cycle");
    }
    assert_eq!(count_left(&env), 1);
    assert!(env.cloud.servers().iter().any(|s| s.id == in_view));
}

/// Issue 29, item 6: a removing mark from a removal long ago (a delete that kept failing,
/// a node that came back and was never let in again) had its VM deleted at once, with no
/// cap, the moment its Node was gone: a `kubectl delete node`, or a blind moment. The mark
/// carries its time; one older than `provisionTimeout` is no removal in flight, and its
/// VM goes under the blind-view guard and the rate of VMs that never joined.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item_6_a_vm_with_an_old_removing_mark_is_not_destroyed_at_once() {
    use nodewright::cloud::{JOINED_TAG, REMOVING_TAG};
    let config = CONFIG.replace(
        "nodeGroups:",
        "provisionTimeout: 10m\nscaleDown: {enabled: false}\nnodeGroups:",
    );
    let (env, rec) = setup(&config).await;
    let now = SystemTime::now();
    let hour_ago = nodewright::model::unix_secs(now - std::time::Duration::from_secs(3600));
    // A node in service, and four VMs that joined once and were marked for removal an
    // hour ago; their Nodes are gone and their deletes never went through.
    let live = "e2e-workers-live";
    managed_node(&env, live);
    let old: Vec<String> = (0..4)
        .map(|i| {
            env.cloud.insert_server(
                &format!("e2e-workers-old-{i}"),
                BTreeMap::from([
                    ("nodewright-cluster".to_string(), "e2e".to_string()),
                    ("nodewright-group".to_string(), "workers".to_string()),
                    (JOINED_TAG.to_string(), hour_ago.to_string()),
                    (REMOVING_TAG.to_string(), hour_ago.to_string()),
                ]),
            )
        })
        .collect();
    let left = |env: &SimEnv| {
        let ids: Vec<String> = env.cloud.servers().into_iter().map(|s| s.id).collect();
        old.iter().filter(|id| ids.contains(id)).count()
    };
    // The live node's VM gets its joined mark first.
    rec.cycle(SystemTime::now()).await.expect("cycle");
    // A person deletes the live node's Node: no node of ours is in view while VMs that
    // joined run. A blind view: none of the old VMs goes.
    nodes_api(&env)
        .await
        .delete(live, &DeleteParams::default())
        .await
        .expect("kubectl delete node");
    for _ in 0..4 {
        let report = rec.cycle(SystemTime::now()).await.expect("cycle");
        assert!(
            !matches!(report.decision.action, Action::DeleteServers { .. }),
            "{:#?}",
            report.decision
        );
    }
    assert_eq!(
        left(&env),
        4,
        "VMs with an old removing mark deleted behind a blind view"
    );

    // Its kubelet registers the Node again: the view is whole, and the old VMs go at the
    // rate of VMs that never joined, two per provisionTimeout, never all at once.
    env.cluster
        .add_node(
            SimNodeSpec::new(live, 8 * GI)
                .label(LABEL_CLUSTER, "e2e")
                .label(LABEL_GROUP, "workers"),
        )
        .expect("node registers again");
    let mut stale = 0;
    for _ in 0..6 {
        let report = rec.cycle(SystemTime::now()).await.expect("cycle");
        if let Action::DeleteServers { servers, .. } = &report.decision.action {
            assert!(servers.len() <= 2, "{:#?}", report.decision);
            stale += report
                .decision
                .reasons
                .iter()
                .filter(|r| r.code == ReasonCode::RemovalStale)
                .count();
        }
    }
    assert_eq!(stale, 2, "two deleted as stale removals");
    assert_eq!(left(&env), 2, "two per provisionTimeout, the others wait");
    assert!(
        !rec.memory.backoffs().contains_key("workers"),
        "the group is never backed off for it: {:?}",
        rec.memory.backoffs()
    );
}

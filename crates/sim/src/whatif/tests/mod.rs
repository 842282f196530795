//! The what-if end to end on small workloads whose figures are worked out by hand.
//! Virtual time only: nothing here waits on or measures the wall clock.
//! `crash`: crash points and faults; `warm`: warm pools in the replay.

mod crash;
mod warm;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::api::{self, MemCluster};
use super::replay::replay;
use super::workload::{PodKind, WorkloadRow};
use super::world::{World, WorldOptions};
use crate::config::Config;
use crate::model::PodRef;
use crate::plan::ServerState;
use nodewright_core::cluster::{ClusterApi, Eviction};
use nodewright_core::model::STARTUP_TAINT_KEY;

const GROUP: &str = "w";

/// One group `w` of m1.large nodes (4 CPU, 8 GiB, nothing reserved), scale-down off
/// unless `extra` says otherwise, written with a template into `dir`.
fn write_config(dir: &Path, file: &str, extra: &str) -> PathBuf {
    std::fs::write(
        dir.join("t.sh.j2"),
        "#!/bin/sh\n{% for a in k3s_node_args %}{{ a }}\n{% endfor %}",
    )
    .expect("template");
    let yaml = format!(
        "clusterName: c\nfreeMemoryTarget: 0 B\nscanInterval: 30s\ntemplatesDir: {}\n{extra}\nnodeGroups:\n- name: {GROUP}\n  provider: openstack\n  maxSize: 10\n  reserved: {{cpu: 0, memory: 0}}\n  openstack: {{flavor: m1.large, image: i, network: n}}\n  userData: {{template: t.sh.j2}}\n",
        dir.display()
    );
    let path = dir.join(file);
    std::fs::write(&path, yaml).expect("config");
    path
}

fn load(path: &Path) -> Arc<Config> {
    Arc::new(Config::load(path).expect("config loads"))
}

fn row(arrival_s: u64, name: &str, cpu_m: u64, duration_s: u64, kind: PodKind) -> WorkloadRow {
    WorkloadRow {
        line: 0,
        arrival_ms: arrival_s * 1000,
        name: name.into(),
        cpu_m,
        mem_mib: 1024,
        duration_s,
        kind,
        node_selector: BTreeMap::new(),
        gpu: 0,
        priority: 0,
        image: None,
        local_volume: false,
    }
}

/// `a` (3 CPU, 1 h) and `b` (2 CPU, 30 min) arrive together and cannot share a 4-CPU
/// node: the first cycle (t=0) adds two nodes, they boot at 60 s, that cycle takes the
/// startup taint off and both pods start at once (wait 60 s each). `c` (1 CPU, 10
/// min) arrives at 600 s and starts at once on the emptier node (wait 0). With
/// scale-down off both nodes live until `a` ends at 3660 s: 2 × 3660 s = 2.0333 node-h.
/// Lower bound (4-CPU nodes): 2 nodes for [0, 1800) (5, 6 then 5 CPU), 1 for
/// [1800, 3600) (3 CPU) = 1.5 node-h.
#[tokio::test]
async fn hand_computed_workload_gives_exact_figures() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = load(&write_config(
        dir.path(),
        "a.yaml",
        "scaleDown: {enabled: false}",
    ));
    let rows = vec![
        row(0, "a", 3000, 3600, PodKind::Deployment),
        row(0, "b", 2000, 1800, PodKind::Deployment),
        row(600, "c", 1000, 600, PodKind::Deployment),
    ];
    let r = replay(config, "a.yaml", rows, &WorldOptions::default())
        .await
        .expect("replays");
    let rep = &r.report;
    assert_eq!(rep.virtual_seconds, 3660, "{rep:#?}");
    assert!(
        (rep.node_hours - 2.0 * 3660.0 / 3600.0).abs() < 1e-9,
        "{rep:#?}"
    );
    assert_eq!(rep.lower_bound_node_hours, 1.5, "{rep:#?}");
    // Booting: two VMs from 0 to 60 s. Empty while Ready: the pods start the instant
    // the nodes are Ready (60 s); `c` (600..1200 s) goes to `b`'s node, the emptier;
    // `b`'s node runs nothing from 1860 s to the end at 3660 s: 1800 s.
    assert!(
        (rep.booting_node_hours - 120.0 / 3600.0).abs() < 1e-9,
        "{rep:#?}"
    );
    assert!((rep.empty_node_hours - 0.5).abs() < 1e-9, "{rep:#?}");
    assert_eq!(
        (rep.wait_p50_s, rep.wait_p95_s, rep.wait_max_s),
        (60.0, 60.0, 60.0),
        "{rep:#?}"
    );
    assert_eq!(rep.never_started, 0);
    assert_eq!(rep.evictions, 0);
    assert_eq!(
        rep.actions,
        BTreeMap::from([
            ("remove-startup-taint".to_string(), 1),
            ("scale-up".to_string(), 1)
        ]),
        "{rep:#?}"
    );
    assert_eq!((rep.nodes_created, rep.peak_nodes), (2, 2));
    assert_eq!(rep.cost, None);
    // The timeline: a scale-up of 2 at 0, two nodes and 6 CPU asked for at 600 s.
    assert_eq!(
        r.timeline.marks,
        vec![(
            0,
            super::report::Mark::ScaleUp {
                group: GROUP.into(),
                count: 2
            }
        )]
    );
    let s = r
        .timeline
        .samples
        .iter()
        .find(|s| s.t_s == 600)
        .expect("a sample at 600 s");
    assert_eq!(s.nodes.get(GROUP), Some(&2));
    assert_eq!((s.cpu_requested_m, s.cpu_allocatable_m), (6000, 8000));
    assert_eq!(s.pending_pods, 0);
}

/// The same workload with scale-down on: the node `b` leaves empty at 1860 s goes
/// (unneeded 10 min, then cordon and delete), so fewer node-hours; and with a price
/// the cost is node-hours × price.
#[tokio::test]
async fn scale_down_removes_the_empty_node_and_prices_give_a_cost() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write_config(dir.path(), "a.yaml", "");
    let text = std::fs::read_to_string(&path).expect("read") + "  price: 0.5\n";
    std::fs::write(&path, text).expect("write");
    let rows = vec![
        row(0, "a", 3000, 3600, PodKind::Deployment),
        row(0, "b", 2000, 1800, PodKind::Deployment),
    ];
    let r = replay(load(&path), "a.yaml", rows, &WorldOptions::default())
        .await
        .expect("replays");
    let rep = &r.report;
    assert_eq!(rep.actions.get("delete-node"), Some(&1), "{rep:#?}");
    assert!(rep.node_hours < 2.0 * 3660.0 / 3600.0, "{rep:#?}");
    // The second node lives from 0 until 1860 s + unneededTime (10 min): marked
    // unneeded at 1860 s, cordoned and deleted in the cycles at 2460 s.
    assert!(
        (rep.node_hours - (3660.0 + 2460.0) / 3600.0).abs() < 1e-9,
        "{rep:#?}"
    );
    let cost = rep.cost.expect("every group has a price");
    assert!((cost - rep.node_hours * 0.5).abs() < 1e-9);
    assert!(r
        .timeline
        .marks
        .iter()
        .any(|(_, m)| *m == super::report::Mark::Removal { nodes: 1 }));
}

/// The world on its own: one node, one pod of each kind evicted 240 s into its run.
#[tokio::test]
async fn an_evicted_job_starts_its_run_again_a_deployment_keeps_its_progress() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = load(&write_config(dir.path(), "a.yaml", ""));
    let rows = vec![
        row(0, "job", 1000, 600, PodKind::Job),
        row(0, "web", 1000, 600, PodKind::Deployment),
        row(0, "bare", 1000, 600, PodKind::Pod),
    ];
    let world = World::new(&config, rows, WorldOptions::default()).expect("world");
    let cluster = MemCluster {
        world: world.clone(),
    };
    let clouds = api::clouds(&world, &config);
    let provider = clouds.for_group(GROUP).expect("provider").clone();
    let server = provider
        .create_server(&crate::cloud::CreateRequest {
            name: "ignored".into(),
            cluster: "c".into(),
            group: GROUP.into(),
            user_data: String::new(),
            settings_hash: String::new(),
            zone: None,
        })
        .await
        .expect("created");
    world.advance_to(60_000);
    let nodes = cluster.nodes().await.expect("nodes");
    assert_eq!(nodes.len(), 1);
    assert!(nodes[0].ready && nodes[0].has_taint(STARTUP_TAINT_KEY));
    assert_eq!(
        nodes[0]
            .labels
            .get(nodewright_core::model::LABEL_GROUP)
            .map(String::as_str),
        Some(GROUP)
    );
    assert_eq!(nodes[0].allocatable.cpu, 4000);
    // Nothing lands before the startup taint is off.
    assert!(world.placements().values().all(Option::is_none));
    cluster
        .remove_taint(&server.name, STARTUP_TAINT_KEY)
        .await
        .expect("untainted");
    world.advance_to(60_000);
    assert!(world
        .placements()
        .values()
        .all(|n| n.as_deref() == Some(server.name.as_str())));

    world.advance_to(300_000);
    for name in ["job-0", "web-1", "bare-2"] {
        let pod = PodRef {
            namespace: "default".into(),
            name: name.into(),
        };
        assert_eq!(cluster.evict(&pod).await.expect("evict"), Eviction::Evicted);
        assert_eq!(cluster.evict(&pod).await.expect("evict"), Eviction::Gone);
    }
    world.advance_to(2_000_000);
    let stats = world.row_stats();
    // Started at 60 s, evicted at 300 s, started again at once.
    assert_eq!(stats[0].first_start, Some(60_000));
    assert_eq!(stats[0].finished, Some(900_000), "the Job ran 600 s again");
    assert_eq!(
        stats[1].finished,
        Some(660_000),
        "the Deployment ran the 360 s left"
    );
    assert!(
        stats[2].lost && stats[2].finished.is_none(),
        "the bare pod is lost"
    );
    let c = world.counters();
    assert_eq!((c.evictions, c.job_restarts, c.pods_lost), (3, 1, 1));
    // Of the three evicted, one was a running Job.
    assert_eq!(c.running_jobs_evicted, 1);
    // The node ran nothing from 60 s (Ready, startup-tainted) until the taint came off
    // at 60 s, and nothing once the Job finished at 900 s: to 2000 s, 1100 s empty.
    assert!((world.empty_node_hours(2_000_000) - 1100.0 / 3600.0).abs() < 1e-9);
    // Cut at an earlier end: empty only from 900 s to 1000 s.
    assert!((world.empty_node_hours(1_000_000) - 100.0 / 3600.0).abs() < 1e-9);
}

/// Through the loop: an old node is replaced; its Job pod is waited for up to
/// `drain.jobGracePeriod`, then evicted, and runs again from the start elsewhere.
#[tokio::test]
async fn the_loop_evicts_a_job_from_an_old_node_and_it_restarts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = load(&write_config(
        dir.path(),
        "a.yaml",
        "oldNodeAgeLimit: 30m\ndrain: {jobGracePeriod: 5m}\nscaleDown: {enabled: false}",
    ));
    let rows = vec![row(0, "job", 1000, 7200, PodKind::Job)];
    let r = replay(config, "a.yaml", rows, &WorldOptions::default())
        .await
        .expect("replays");
    let rep = &r.report;
    assert!(rep.evictions >= 1, "{rep:#?}");
    assert_eq!(rep.job_restarts, rep.evictions, "{rep:#?}");
    assert!(
        rep.actions.get("drain").is_some_and(|n| *n >= 1),
        "{rep:#?}"
    );
    // It restarted at least once, so it ended well after 60 s + 2 h.
    assert!(rep.virtual_seconds > 60 + 7200 + 1800, "{rep:#?}");
    assert_eq!(rep.never_started, 0);
}

/// Node failures: every node fails; its pods come off after 5 minutes and the
/// planner replaces the node.
#[tokio::test]
async fn failed_nodes_lose_their_pods_and_get_replaced() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = load(&write_config(
        dir.path(),
        "a.yaml",
        "scaleDown: {enabled: false}",
    ));
    let rows = vec![row(0, "web", 1000, 6 * 3600, PodKind::Deployment)];
    let options = WorldOptions {
        node_failures: 1.0,
        failure_window: std::time::Duration::from_secs(3600),
        ..WorldOptions::default()
    };
    let r = replay(config.clone(), "a.yaml", rows.clone(), &options)
        .await
        .expect("replays");
    let rep = &r.report;
    assert!(rep.node_failures >= 1, "{rep:#?}");
    assert!(rep.pods_killed + rep.evictions >= 1, "{rep:#?}");
    assert!(rep.nodes_created >= 2, "{rep:#?}");
    assert_eq!(rep.never_started, 0);
    // Seeded: the same replay twice gives the same figures.
    let again = replay(config, "a.yaml", rows, &options)
        .await
        .expect("replays");
    assert_eq!(again.report, r.report);
    let _ = ServerState::Joined;
}

/// A per-group boot delay moves the first start, and so the waits.
#[tokio::test]
async fn boot_delay_per_group_sets_the_wait() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = load(&write_config(
        dir.path(),
        "a.yaml",
        "scaleDown: {enabled: false}",
    ));
    let mut options = WorldOptions::default();
    super::command::boot_delays(&["w=150s".to_string()], &mut options).expect("parses");
    let rows = vec![row(0, "a", 1000, 600, PodKind::Deployment)];
    let r = replay(config, "a.yaml", rows, &options)
        .await
        .expect("replays");
    // Booted at 150 s, the cycle at 150 s takes the taint off.
    assert_eq!(r.report.wait_max_s, 150.0, "{:#?}", r.report);
    assert_eq!(r.report.virtual_seconds, 750);
}

/// A pod selecting a tainted group's nodes tolerates its taints; one that selects
/// nothing never lands there.
#[tokio::test]
async fn a_pod_selecting_a_tainted_group_runs_there() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write_config(dir.path(), "a.yaml", "scaleDown: {enabled: false}");
    let text = std::fs::read_to_string(&path).expect("read")
        + "- name: batch\n  provider: proxmox\n  maxSize: 2\n  proxmox: {template: t, cores: 2, memory: 4 GiB}\n  userData: {template: t.sh.j2}\n  labels: {workload: batch}\n  taints: [{key: dedicated, value: batch, effect: NoSchedule}]\n";
    std::fs::write(&path, text).expect("write");
    let mut batch = row(0, "job", 1000, 600, PodKind::Job);
    batch.node_selector = BTreeMap::from([("workload".to_string(), "batch".to_string())]);
    let rows = vec![batch, row(0, "web", 1000, 600, PodKind::Deployment)];
    let r = replay(load(&path), "a.yaml", rows, &WorldOptions::default())
        .await
        .expect("replays");
    let rep = &r.report;
    assert_eq!(rep.never_started, 0, "{rep:#?}");
    assert_eq!(rep.nodes_created, 2, "{rep:#?}");
    for g in ["batch", GROUP] {
        assert!(
            rep.node_hours_by_group.get(g).is_some_and(|h| *h > 0.0),
            "{rep:#?}"
        );
    }
    // Two groups: the bound's node is the larger one (4 CPU, 8 GiB): 2 CPU for 600 s.
    assert!(
        (rep.lower_bound_node_hours - 600.0 / 3600.0).abs() < 1e-9,
        "{rep:#?}"
    );
}

/// `simulate` with no workload: the scripted story, in virtual time, tells what
/// happened and why and ends with every workload where the script leaves it. It shows
/// a scale-up, an expired node replaced, image caches warmed and an unneeded node removed.
#[tokio::test]
async fn the_demo_runs_in_virtual_time() {
    let text = super::demo::run().await.expect("demo runs");
    for want in [
        "scale-up               add 1 node(s) to group workers",
        "because group workers has 0 active node(s), minSize is 1",
        "-> created VM demo-workers-00001 (openstack-1) in group workers",
        "add 1 node(s) to group batch",
        "add 1 node(s) to group cache",
        "cordon demo-workers-00001 (expired)",
        // The four things the loop exists for: add, replace (above), warm image caches
        // and remove what is not needed.
        "pull-images            pull docker.io/library/nginx:1.25 on demo-workers-00001",
        "because demo-batch-00003 became unneeded",
        "cordon demo-batch-00003 (empty)",
        "-> deleted VM demo-batch-00003",
        "end of scenario after 120s (virtual)",
        "batch 0 running, 0 pending, 4 finished",
        "cache 2 running, 0 pending, 0 finished",
        "web 3 running, 0 pending, 5 finished",
        "never started                      0",
    ] {
        assert!(text.contains(want), "no `{want}` in\n{text}");
    }
}

/// Issue 19: a pod whose data is on a `local-path` volume keeps its old node; with the
/// group's `allowLocalVolumeLoss` the node is replaced and the replay counts the volume
/// as lost (its pod can never run again).
#[tokio::test]
async fn an_old_node_holding_a_local_volume_is_kept_unless_the_group_allows_losing_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let extra = "oldNodeAgeLimit: 30m\nscaleDown: {enabled: false}";
    let kept = load(&write_config(dir.path(), "kept.yaml", extra));
    let mut db = row(0, "db", 1000, 3 * 3600, PodKind::Deployment);
    db.local_volume = true;
    let rows = vec![db, row(0, "web", 1000, 3 * 3600, PodKind::Deployment)];
    let r = replay(kept, "kept.yaml", rows.clone(), &WorldOptions::default())
        .await
        .expect("replays");
    let rep = &r.report;
    assert_eq!(rep.volumes_lost, 0, "{rep:#?}");
    assert_eq!(rep.never_started, 0, "{rep:#?}");

    let text = std::fs::read_to_string(write_config(dir.path(), "lose.yaml", extra))
        .expect("config")
        .replace(
            "  userData: {template: t.sh.j2}\n",
            "  userData: {template: t.sh.j2}\n  allowLocalVolumeLoss: true\n",
        );
    assert!(text.contains("allowLocalVolumeLoss"), "{text}");
    let path = dir.path().join("lose.yaml");
    std::fs::write(&path, text).expect("write");
    let r = replay(load(&path), "lose.yaml", rows, &WorldOptions::default())
        .await
        .expect("replays");
    let rep = &r.report;
    assert!(rep.volumes_lost >= 1, "{rep:#?}");
    assert!(rep.evictions >= 1, "{rep:#?}");
}

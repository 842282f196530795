//! Crash points and faults in virtual time: at 0 %, 10 % and 20 % faults, over 1,000
//! crash points in all, every invariant holds after every cycle. The checks are shown
//! to bite: the audit flags writes on objects that are not ours, and the checker flags
//! a changed foreign node and a group over its maximum.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::model::{LabelSelector, PdbInfo, PodRef};
use crate::whatif::crash::{campaign, render, run, scenario_config, RunFigures, RunOptions};
use crate::whatif::faults::{faulty_apis, Injector};
use crate::whatif::invariants::{Checker, Foreign};
use crate::whatif::world::{World, WorldOptions};

/// The base seed: `NODEWRIGHT_CRASH_SEED` or 1.
fn base_seed() -> u64 {
    std::env::var("NODEWRIGHT_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
}

#[tokio::test]
async fn crash_points_and_faults_keep_every_invariant() {
    let seed = base_seed();
    let mut failed: Vec<RunFigures> = Vec::new();
    let totals = campaign(seed, 15, &[0.0, 0.1, 0.2], 60, &mut |f| {
        if !f.violations.is_empty() {
            failed.push(f.clone());
        }
    })
    .await
    .expect("runs");
    eprintln!("base seed {seed}\n{}", render(&totals));
    for f in &failed {
        eprintln!(
            "seed {} at {} % faults:\n  {}\n  rerun: {}",
            f.seed,
            f.fault_rate * 100.0,
            f.violations.join("\n  "),
            f.rerun()
        );
    }
    assert!(
        failed.is_empty(),
        "{} run(s) broke an invariant (base seed {seed}; NODEWRIGHT_CRASH_SEED={seed} reruns them all)",
        failed.len()
    );
    let crash_points: u64 = totals.iter().map(|t| t.crash_points).sum();
    assert!(crash_points >= 1000, "only {crash_points} crash points");
    for t in &totals[1..] {
        assert!(t.faults > 0, "{t:?}");
    }
    assert!(totals
        .iter()
        .all(|t| t.not_converged == 0 && t.pods_lost == 0));
}

#[tokio::test]
async fn a_seed_replays_the_same_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = Arc::new(scenario_config(dir.path()).expect("config"));
    let opts = RunOptions {
        seed: 7,
        fault_rate: 0.2,
        crash_every: 40,
        trace: false,
    };
    let a = run(&config, opts).await.expect("runs");
    let b = run(&config, opts).await.expect("runs");
    assert!(a.restarts > 0 && a.faults.calls > 0, "{a:#?}");
    assert_eq!(a, b);
}

#[tokio::test]
async fn the_audit_flags_writes_on_what_is_not_ours() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = scenario_config(dir.path()).expect("config");
    let rows = crate::whatif::crash::scenario_workload(1);
    let world = World::new(&config, rows, WorldOptions::default()).expect("world");
    world.add_pdb(PdbInfo {
        namespace: crate::whatif::world::NAMESPACE.into(),
        name: "web".into(),
        selector: Some(LabelSelector {
            match_labels: BTreeMap::from([("app".to_string(), "web".to_string())]),
            ..LabelSelector::default()
        }),
        disruptions_allowed: 0,
    });
    let foreign = crate::whatif::crash::seed_foreign(&world);
    // A web pod running on the unlabelled node.
    world.advance_to(60_000);
    let on_legacy = world
        .placements()
        .into_iter()
        .find(|(name, node)| name.starts_with("web") && node.as_deref() == Some("legacy-1"))
        .map(|(name, _)| name)
        .expect("a web pod on legacy-1");
    let injector = Injector::new(1, 0.0, 0);
    injector.set_foreign(
        foreign.nodes.keys().cloned().collect(),
        foreign.vms.keys().cloned().collect(),
    );
    let (cluster, clouds) = faulty_apis(&world, &config, &injector);
    cluster
        .cordon("legacy-1", &BTreeMap::new())
        .await
        .expect("cordon");
    let pod = PodRef {
        namespace: crate::whatif::world::NAMESPACE.into(),
        name: on_legacy.clone(),
    };
    cluster.evict(&pod).await.expect("evict");
    let p = clouds.for_group("w").expect("w");
    let refused = p.delete_server("c", "foreign-1").await;
    assert!(refused.is_err(), "the provider's own check refuses it too");
    let v = injector.stats().violations;
    assert!(
        v.iter().any(|v| v.contains("cordon of node legacy-1")),
        "{v:?}"
    );
    assert!(
        v.iter()
            .any(|v| v.contains(&format!("evict of pod default/{on_legacy}"))),
        "{v:?}"
    );
    assert!(
        v.iter().any(|v| v.contains("delete of VM foreign-1")),
        "{v:?}"
    );
    // The checker sees the cordon: a node that is not ours changed.
    let mut checker = Checker::new(&config, foreign);
    let mut figures = RunFigures::default();
    checker.check(&world, world.now(), &mut figures);
    assert!(
        figures
            .violations
            .iter()
            .any(|v| v.contains("node legacy-1, not ours, was changed")),
        "{:?}",
        figures.violations
    );
}

#[tokio::test]
async fn the_checker_flags_a_group_above_its_maximum() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = scenario_config(dir.path()).expect("config");
    let world = World::new(&config, Vec::new(), WorldOptions::default()).expect("world");
    for _ in 0..4 {
        world.lock().create_vm("b", "proxmox");
    }
    let mut checker = Checker::new(&config, Foreign::default());
    let mut figures = RunFigures::default();
    checker.check(&world, 0, &mut figures);
    assert!(
        figures
            .violations
            .iter()
            .any(|v| v.contains("group b has 4 VMs, above maxSize 3")),
        "{:?}",
        figures.violations
    );
}

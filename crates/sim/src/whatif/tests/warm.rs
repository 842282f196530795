//! Warm pools in the what-if replay: how much boot waiting a pool saves. Virtual time
//! only.

use std::path::Path;
use std::sync::Arc;

use crate::config::Config;
use crate::whatif::replay::replay;
use crate::whatif::workload::{PodKind, WorkloadRow};
use crate::whatif::world::WorldOptions;

/// One Proxmox group `w` (4 cores, 8 GiB), scale-down off, with a warm pool of `size`.
fn config(dir: &Path, size: u32) -> Arc<Config> {
    std::fs::write(dir.join("t.sh.j2"), "#!/bin/sh\n").expect("template");
    let pool = if size > 0 {
        format!("  warmPool: {{size: {size}}}\n")
    } else {
        String::new()
    };
    let yaml = format!(
        "clusterName: c\nfreeMemoryTarget: 0 B\nscanInterval: 30s\ntemplatesDir: {}\nscaleDown: {{enabled: false}}\nnodeGroups:\n- name: w\n  provider: proxmox\n  maxSize: 10\n{pool}  reserved: {{cpu: 0, memory: 0}}\n  proxmox: {{template: k3s, cores: 4, memory: 8 GiB}}\n  userData: {{template: t.sh.j2}}\n",
        dir.display()
    );
    let path = dir.join(format!("pool{size}.yaml"));
    std::fs::write(&path, yaml).expect("config");
    Arc::new(Config::load(&path).expect("config loads"))
}

/// Two pods of 3 CPU (each needs its own node) arriving at 10 min, an hour long.
fn rows() -> Vec<WorkloadRow> {
    ["a", "b"]
        .into_iter()
        .map(|name| WorkloadRow {
            line: 0,
            arrival_ms: 600_000,
            name: name.into(),
            cpu_m: 3000,
            mem_mib: 1024,
            duration_s: 3600,
            kind: PodKind::Deployment,
            node_selector: Default::default(),
            gpu: 0,
            priority: 0,
            image: None,
            local_volume: false,
        })
        .collect()
}

#[tokio::test]
async fn a_warm_pool_saves_the_boot_waiting_of_the_nodes_it_serves() {
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = WorldOptions::default();
    let cold = replay(config(dir.path(), 0), "cold", rows(), &opts)
        .await
        .expect("replays")
        .report;
    let warm = replay(config(dir.path(), 2), "warm", rows(), &opts)
        .await
        .expect("replays")
        .report;
    assert_eq!((cold.warm_starts, cold.warm_wait_saved_s), (0, 0.0));
    // Both nodes come from the pool, each 40 s sooner (a 60 s boot becomes 20 s).
    assert_eq!(warm.warm_starts, 2, "{warm:#?}");
    assert_eq!(warm.warm_wait_saved_s, 80.0, "{warm:#?}");
    assert_eq!(warm.actions.get("start-warm"), Some(&1), "{warm:#?}");
    assert_eq!(warm.actions.get("scale-up"), None, "{warm:#?}");
    // Filled once at the start, refilled after the starts.
    assert_eq!(warm.actions.get("fill-warm-pool"), Some(&2), "{warm:#?}");
    // Cold: the nodes boot at 660 s, that cycle lets the pods in (60 s). Warm: they boot
    // at 620 s, the next 30 s cycle (630 s) lets them in: 30 s, the rest of the 40 s saved
    // lost to the cycle's pace.
    assert_eq!((cold.wait_max_s, warm.wait_max_s), (60.0, 30.0));
    let text = crate::whatif::report::render_table(&[&cold, &warm]);
    assert!(text.contains("warm starts"), "{text}");
    assert!(
        text.contains("boot waiting saved by warm pools (s)"),
        "{text}"
    );
}

/// The crash scenario's OpenStack group with a warm pool of 2 and `scaleDown.mode: stop`.
fn pooled_scenario(dir: &Path) -> Arc<Config> {
    let mut config = crate::whatif::crash::scenario_config(dir).expect("config");
    let g = &mut config.node_groups[0];
    g.warm_pool = Some(crate::config::WarmPoolConfig { size: 2 });
    config.scale_down.mode = crate::config::ScaleDownMode::Stop;
    Arc::new(config)
}

#[tokio::test]
async fn faulty_cloud_forwards_the_warm_pool_calls() {
    use crate::cloud::CreateRequest;
    use crate::whatif::faults::{faulty_apis, Injector};
    let dir = tempfile::tempdir().expect("tempdir");
    let config = pooled_scenario(dir.path());
    let world = crate::whatif::world::World::new(&config, Vec::new(), WorldOptions::default())
        .expect("world");
    let injector = Injector::new(1, 0.0, 0);
    let (_, clouds) = faulty_apis(&world, &config, &injector);
    let p = clouds.for_group("w").expect("w");
    let req = CreateRequest {
        name: "c-w-warm".into(),
        cluster: "c".into(),
        group: "w".into(),
        user_data: String::new(),
        size: None,
        settings_hash: config.node_groups[0].settings_hash.clone(),
        zone: None,
    };
    let made = p.create_warm(&req).await.expect("create_warm is forwarded");
    let listed = |servers: Vec<crate::model::Server>| {
        servers
            .into_iter()
            .find(|s| s.id == made.id)
            .map(|s| s.warm)
    };
    assert_eq!(listed(p.list_servers("c").await.expect("list")), Some(true));
    p.start_warm("c", &made.id, &|_: Option<&str>| {
        Ok::<_, String>(req.clone())
    })
    .await
    .expect("start_warm is forwarded");
    assert_eq!(
        listed(p.list_servers("c").await.expect("list")),
        Some(false)
    );
    p.park("c", &made.id).await.expect("park is forwarded");
    assert_eq!(listed(p.list_servers("c").await.expect("list")), Some(true));
    assert!(injector.stats().calls >= 6, "{:?}", injector.stats());
}

#[tokio::test]
async fn a_what_if_with_faults_and_a_warm_pool_keeps_every_invariant() {
    use crate::whatif::crash::{run, RunOptions};
    let dir = tempfile::tempdir().expect("tempdir");
    let config = pooled_scenario(dir.path());
    let mut warm_faults = 0;
    for seed in 1..=4 {
        let f = run(
            &config,
            RunOptions {
                seed,
                fault_rate: 0.2,
                crash_every: 40,
                trace: false,
            },
        )
        .await
        .expect("runs");
        assert!(f.violations.is_empty(), "seed {seed}: {:#?}", f.violations);
        assert_eq!(f.pods_lost, 0, "seed {seed}: {f:#?}");
        warm_faults += f
            .faults
            .crash_points
            .iter()
            .filter(|(call, _)| call.contains("warm") || call.contains("park"))
            .map(|(_, n)| *n)
            .sum::<u32>();
    }
    // The pool's calls went through the injector: some of them were crash points.
    assert!(
        warm_faults > 0,
        "no crash point ever fell on a warm-pool call"
    );
}

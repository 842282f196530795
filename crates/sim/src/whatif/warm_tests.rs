//! Warm pools in the what-if replay: how much boot waiting a pool saves. Virtual time
//! only.

use std::path::Path;
use std::sync::Arc;

use super::replay::replay;
use super::workload::{PodKind, WorkloadRow};
use super::world::WorldOptions;
use crate::config::Config;

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
            arrival_s: 600,
            name: name.into(),
            cpu_m: 3000,
            mem_mib: 1024,
            duration_s: 3600,
            kind: PodKind::Deployment,
            node_selector: Default::default(),
            gpu: 0,
            priority: 0,
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
    let text = super::report::render_table(&[&cold, &warm]);
    assert!(text.contains("warm starts"), "{text}");
    assert!(
        text.contains("boot waiting saved by warm pools (s)"),
        "{text}"
    );
}

//! `simulate --workload` as the command line runs it: `--compare`, `--json` and the
//! errors a user sees for bad workload files, configs and options (virtual time).

use std::path::{Path, PathBuf};

use nodewright::cli::{simulate_workload, CliError, SimulateArgs};

const GROUP: &str = "w";

/// The hand-computed workload of the what-if's own tests (nodewright-sim `whatif::tests`):
/// lower bound 1.5 node-h, both first pods wait 60 s.
const CSV: &str = "arrival_s,name,cpu_m,mem_mib,duration_s\n0,a,3000,1024,3600\n0,b,2000,1024,1800\n600,c,1000,1024,600\n";

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

fn args(workload: &Path) -> SimulateArgs {
    SimulateArgs {
        workload: Some(workload.to_path_buf()),
        ..SimulateArgs::default()
    }
}

#[tokio::test]
async fn compare_prints_both_configs_side_by_side() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a = write_config(dir.path(), "a.yaml", "scaleDown: {enabled: false}");
    let b = write_config(dir.path(), "b.yaml", "");
    let workload = dir.path().join("w.csv");
    std::fs::write(&workload, CSV).expect("workload");
    let mut args = args(&workload);
    args.compare = Some(b);
    let text = simulate_workload(&a, &args).await.expect("runs");
    assert!(text.contains("3 pods"), "{text}");
    let header = text
        .lines()
        .find(|l| l.trim_start().starts_with("a.yaml"))
        .expect("a header naming both configs");
    assert!(header.contains("b.yaml"), "{text}");
    let line = |label: &str| {
        text.lines()
            .find(|l| l.starts_with(label))
            .unwrap_or_else(|| panic!("no `{label}` line in\n{text}"))
            .split_whitespace()
            .rev()
            .take(2)
            .collect::<Vec<_>>()
    };
    // Same workload, same lower bound; scale-down on makes b cheaper.
    assert_eq!(line("lower bound node-hours"), ["1.50", "1.50"], "{text}");
    assert_eq!(line("node-hours /")[1], "1.36x", "{text}");
    assert_eq!(line("pod wait max (s)"), ["60", "60"], "{text}");
    assert_eq!(line("actions: scale-up"), ["1", "1"], "{text}");

    args.json = true;
    let json = simulate_workload(&a, &args).await.expect("runs");
    let v: serde_json::Value = serde_json::from_str(&json).expect("one JSON object");
    assert_eq!(v["config"]["lower_bound_node_hours"], 1.5);
    assert_eq!(v["compare"]["config"], "b.yaml");
    for key in [
        "node_hours",
        "lower_bound_node_hours",
        "wait_p50_s",
        "wait_p95_s",
        "wait_max_s",
        "never_started",
        "evictions",
        "actions",
    ] {
        assert!(v["config"].get(key).is_some(), "no {key} in {json}");
    }
    args.compare = None;
    let one: serde_json::Value =
        serde_json::from_str(&simulate_workload(&a, &args).await.expect("runs")).expect("json");
    assert_eq!(one["actions"]["scale-up"], 1);
    assert_eq!(one["wait_p50_s"], 60.0);
}

#[tokio::test]
async fn bad_inputs_get_clear_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a = write_config(dir.path(), "a.yaml", "");
    let usage = |r: Result<String, CliError>| match r {
        Err(CliError::Usage(m)) => m,
        other => panic!("expected a usage error, got {other:?}"),
    };

    let missing = dir.path().join("nope.csv");
    let m = usage(simulate_workload(&a, &args(&missing)).await);
    assert!(m.contains("nope.csv") && m.contains("No such file"), "{m}");

    let bad = dir.path().join("bad.csv");
    std::fs::write(
        &bad,
        "arrival_s,name,cpu_m,mem_mib,duration_s\n0,a,1000,512,60\nx,b,1,1,1\n",
    )
    .expect("write");
    let m = usage(simulate_workload(&a, &args(&bad)).await);
    assert!(m.contains("bad.csv") && m.contains("line 3"), "{m}");

    let empty = dir.path().join("empty.csv");
    std::fs::write(&empty, "arrival_s,name,cpu_m,mem_mib,duration_s\n").expect("write");
    let m = usage(simulate_workload(&a, &args(&empty)).await);
    assert!(m.contains("no pods"), "{m}");

    let good = dir.path().join("w.csv");
    std::fs::write(&good, CSV).expect("write");
    match simulate_workload(&dir.path().join("missing.yaml"), &args(&good)).await {
        Err(e @ CliError::Config(_)) => assert!(e.to_string().contains("missing.yaml"), "{e}"),
        other => panic!("expected a config error, got {other:?}"),
    }

    // A flavor the what-if does not know, and no resources to say the size.
    let odd = dir.path().join("odd.yaml");
    let text = std::fs::read_to_string(&a)
        .expect("read")
        .replace("m1.large", "c9.huge");
    std::fs::write(&odd, text).expect("write");
    let m = usage(simulate_workload(&odd, &args(&good)).await);
    assert!(
        m.contains("odd.yaml") && m.contains("group w") && m.contains("resources.cpu"),
        "{m}"
    );

    let mut with = args(&good);
    with.boot_delay = vec!["nogroup=5m".into()];
    let m = usage(simulate_workload(&a, &with).await);
    assert!(m.contains("nogroup"), "{m}");
    with.boot_delay = vec!["soon".into()];
    let m = usage(simulate_workload(&a, &with).await);
    assert!(m.contains("--boot-delay `soon`"), "{m}");
}

/// `--policy` replays with a peer policy instead of nodewright; `--scoring` changes the
/// scheduler's scoring; a value neither knows is a usage error naming the option.
#[tokio::test]
async fn policy_and_scoring_options() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a = write_config(dir.path(), "a.yaml", "");
    let good = dir.path().join("w.csv");
    std::fs::write(&good, CSV).expect("write");
    let mut with = args(&good);
    with.policy = Some("ca-like".into());
    with.scoring = Some("most-allocated".into());
    let text = simulate_workload(&a, &with).await.expect("runs");
    assert!(text.contains("ca-like a.yaml"), "{text}");
    assert!(text.contains("running Jobs evicted"), "{text}");

    let usage = |r: Result<String, CliError>| match r {
        Err(CliError::Usage(m)) => m,
        other => panic!("expected a usage error, got {other:?}"),
    };
    let mut bad = args(&good);
    bad.policy = Some("kproximate".into());
    let m = usage(simulate_workload(&a, &bad).await);
    assert!(
        m.contains("--policy `kproximate`") && m.contains("ca-like"),
        "{m}"
    );
    let mut bad = args(&good);
    bad.scoring = Some("binpack".into());
    let m = usage(simulate_workload(&a, &bad).await);
    assert!(
        m.contains("--scoring `binpack`") && m.contains("most-allocated"),
        "{m}"
    );
}

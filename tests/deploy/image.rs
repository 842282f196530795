//! The container image and the Grafana dashboard.

use super::*;

// ---------------------------------------------------------------------------------
// Image and dashboard

#[test]
fn dockerfile_is_multi_stage_and_runs_as_non_root() {
    let text = read(&repo().join("deploy/Dockerfile"));
    let stages: Vec<&str> = text
        .lines()
        .filter(|l| l.trim_start().to_ascii_uppercase().starts_with("FROM "))
        .collect();
    assert!(stages.len() >= 2, "{stages:?}");
    let last = text.rsplit_once("\nFROM ").expect("final stage").1;
    let user = last
        .lines()
        .find_map(|l| l.trim().strip_prefix("USER "))
        .expect("USER in the final stage");
    assert!(
        user.split(':')
            .next()
            .and_then(|u| u.parse::<u32>().ok())
            .is_some_and(|u| u != 0),
        "numeric non-root USER: {user}"
    );
    assert!(text.contains("--locked"));
    assert!(text.contains("ENTRYPOINT"));
    let ignore = read(&repo().join(".dockerignore"));
    for needed in ["Cargo.toml", "Cargo.lock", "src", "crates", "templates"] {
        assert!(
            ignore.lines().any(|l| l.trim() == format!("!{needed}")),
            "{needed}"
        );
    }
}

/// The image carries only what runs in a cluster (issue 22): the Dockerfile builds without
/// the `simulate` feature, and with its own flags the binary's dependency tree has no
/// simulator, plotting or certificate-minting crate (`cargo tree`, no compile).
#[test]
fn the_image_is_built_without_the_simulator() {
    let text = read(&repo().join("deploy/Dockerfile"));
    let build = text
        .lines()
        .find(|l| l.contains("cargo build"))
        .expect("a `cargo build` in deploy/Dockerfile");
    let words: Vec<&str> = build.split_whitespace().collect();
    assert!(
        words.contains(&"--no-default-features"),
        "the image's build keeps the default `simulate` feature: {build}"
    );
    let mut args = vec!["tree", "--offline", "-e", "normal", "-p", "nodewright"];
    // The build's own feature flags, so that a `--features simulate` added there counts.
    for (i, w) in words.iter().enumerate() {
        match *w {
            "--locked" | "--no-default-features" | "--all-features" => args.push(w),
            w if w.starts_with("--features=") => args.push(w),
            "--features" | "-F" => args.extend([*w, words.get(i + 1).copied().unwrap_or("")]),
            _ => {}
        }
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(&cargo)
        .args(&args)
        .current_dir(repo())
        .output()
        .expect("runs cargo tree");
    let tree = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "cargo {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(tree.contains("nodewright-core"), "{tree}");
    for left_out in ["nodewright-sim", "plotters", "rcgen"] {
        assert!(
            !tree.contains(&format!("{left_out} v")),
            "the image's binary links {left_out}:\n{tree}"
        );
    }
}

/// The metrics the binary exports (issue 4); histograms without their suffixes.
const METRICS: &[&str] = &[
    "nodewright_cycle_duration_seconds",
    "nodewright_last_successful_cycle_timestamp_seconds",
    "nodewright_actions_total",
    "nodewright_nodes",
    "nodewright_unschedulable_pods",
    "nodewright_pending_pods",
    "nodewright_free_memory_bytes",
    "nodewright_free_memory_target_bytes",
    "nodewright_scale_ups_total",
    "nodewright_scale_downs_total",
    "nodewright_failed_creates_total",
    "nodewright_cloud_api_duration_seconds",
    "nodewright_cloud_api_errors_total",
    "nodewright_evictions_total",
    "nodewright_leader",
];

fn collect_exprs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                match (k.as_str(), v) {
                    ("expr" | "query", Value::String(s)) => out.push(s.clone()),
                    _ => collect_exprs(v, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|v| collect_exprs(v, out)),
        _ => {}
    }
}

#[test]
fn grafana_dashboard_queries_exactly_the_exported_metrics() {
    let text = read(&repo().join("deploy/grafana/nodewright.json"));
    let dash: Value = serde_json::from_str(&text).expect("dashboard is JSON");
    assert!(dash["title"].as_str().is_some_and(|t| !t.is_empty()));
    assert!(dash["panels"].as_array().is_some_and(|p| !p.is_empty()));
    let mut exprs = Vec::new();
    collect_exprs(&dash, &mut exprs);
    let mut used = BTreeSet::new();
    for e in &exprs {
        let mut rest = e.as_str();
        while let Some(i) = rest.find("nodewright_") {
            let name: String = rest[i..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            rest = &rest[i + name.len()..];
            let base = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| name.strip_suffix(s))
                .filter(|b| METRICS.contains(b))
                .unwrap_or(&name);
            used.insert(base.to_string());
        }
    }
    let known: BTreeSet<String> = METRICS.iter().map(|s| s.to_string()).collect();
    let unknown: Vec<_> = used.difference(&known).collect();
    assert!(
        unknown.is_empty(),
        "dashboard queries metrics nodewright does not export: {unknown:?}"
    );
    let unused: Vec<_> = known.difference(&used).collect();
    assert!(unused.is_empty(), "metrics without a panel: {unused:?}");
}

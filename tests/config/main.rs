//! Config loading: the shipped example loads, and a corpus of bad configs each gets its
//! own clear error naming the field, the bad value and what is expected.

use nodewright_testkit as common;

mod actionable;
mod buffers;
mod checks;
mod disruption;
mod proxmox;

use std::path::Path;
use std::process::Command;

use common::repo;
use nodewright::config::Config;

const GOOD: &str = r#"
clusterName: dev
freeMemoryTarget: 9 GiB
minimumFreeNodeMemory: 4 GiB
oldNodeAgeLimit: 72h
provisionTimeout: 15m
scanInterval: 30s
templatesDir: templates
imagePuller:
  ignore: [docker.io/foo]
nodeGroups:
- name: workers
  provider: openstack
  minSize: 1
  maxSize: 3
  openstack: {flavor: m1.large, image: ubuntu-24.04, network: private}
  userData:
    template: k3s-agent.cloud-init.yaml.j2
    variables: {k3s_url: "https://10.0.0.1:6443", k3s_token: "t"}
  labels: {role: worker}
  taints: [{key: dedicated, value: batch, effect: NoSchedule}]
"#;

fn parse(text: &str) -> Result<Config, nodewright::config::ConfigError> {
    Config::parse(text, &repo())
}

#[test]
fn example_config_and_good_config_load() {
    let c = Config::load(&repo().join("config/autoscaler.yaml")).expect("example loads");
    assert_eq!(c.cluster_name, "dev-cluster");
    assert_eq!(c.free_memory_target.as_u64(), 9 << 30);
    assert_eq!(
        c.old_node_age_limit,
        Some(std::time::Duration::from_secs(72 * 3600))
    );
    let c = parse(GOOD).expect("good config loads");
    assert_eq!(
        c.node_groups[0].taints[0].to_flag(),
        "dedicated=batch:NoSchedule"
    );
}

/// (case, replace this, with this, expected path, fragments the message must contain)
const BAD: &[(&str, &str, &str, &str, &[&str])] = &[
    (
        "provisionTimeoutMax shorter than provisionTimeout",
        "provisionTimeout: 15m",
        "provisionTimeout: 15m\nprovisionTimeoutMax: 5m",
        "provisionTimeoutMax",
        &[
            "got 5m",
            "shorter than provisionTimeout (15m)",
            "expected at least",
        ],
    ),
    (
        "provisionTimeoutMax not a duration",
        "provisionTimeout: 15m",
        "provisionTimeout: 15m\nprovisionTimeoutMax: soon",
        "provisionTimeoutMax",
        &[],
    ),
    (
        "provisionProgressWindow under a second",
        "provisionTimeout: 15m",
        "provisionTimeout: 15m\nprovisionProgressWindow: 500ms",
        "provisionProgressWindow",
        &["500ms"],
    ),
    (
        "provisionProgressWindow longer than provisionTimeoutMax",
        "provisionTimeout: 15m",
        "provisionTimeout: 15m\nprovisionTimeoutMax: 20m\nprovisionProgressWindow: 30m",
        "provisionProgressWindow",
        &[
            "got 30m",
            "longer than provisionTimeoutMax (20m)",
            "expected at most",
        ],
    ),
    (
        "provisionProgressWindow not a duration",
        "provisionTimeout: 15m",
        "provisionTimeout: 15m\nprovisionProgressWindow: a while",
        "provisionProgressWindow",
        &[],
    ),
    (
        "typo in top-level key",
        "freeMemoryTarget:",
        "freeMemoryTaget:",
        "freeMemoryTaget",
        &[
            "unknown key `freeMemoryTaget`",
            "did you mean `freeMemoryTarget`",
        ],
    ),
    (
        "typo in group key",
        "  maxSize: 3",
        "  maxSzie: 3",
        "nodeGroups[0].maxSzie",
        &["did you mean `maxSize`"],
    ),
    (
        "bad size",
        "9 GiB",
        "nine gigs",
        "freeMemoryTarget",
        &["nine gigs"],
    ),
    (
        "bad duration",
        "oldNodeAgeLimit: 72h",
        "oldNodeAgeLimit: 72 hours please",
        "oldNodeAgeLimit",
        &["duration"],
    ),
    (
        "negative max",
        "maxSize: 3",
        "maxSize: -1",
        "nodeGroups[0].maxSize",
        &["-1"],
    ),
    (
        "min above max",
        "minSize: 1",
        "minSize: 7",
        "nodeGroups[0].minSize",
        &["got 7", "at most maxSize (3)"],
    ),
    (
        "zero max",
        "maxSize: 3",
        "maxSize: 0",
        "nodeGroups[0].maxSize",
        &["got 0", "at least 1"],
    ),
    (
        "unknown provider",
        "provider: openstack",
        "provider: openstak",
        "nodeGroups[0].provider",
        &["`openstak`", "did you mean `openstack`"],
    ),
    (
        "missing provider block",
        "  openstack: {flavor: m1.large, image: ubuntu-24.04, network: private}\n",
        "",
        "nodeGroups[0].openstack",
        &["needs a `openstack:` block"],
    ),
    (
        "empty flavor",
        "flavor: m1.large",
        "flavor: \"\"",
        "nodeGroups[0].openstack.flavor",
        &["empty"],
    ),
    (
        "bad cluster name",
        "clusterName: dev",
        "clusterName: Dev_Cluster",
        "clusterName",
        &["`Dev_Cluster`", "lowercase"],
    ),
    (
        "missing template",
        "template: k3s-agent.cloud-init.yaml.j2",
        "template: nope.j2",
        "nodeGroups[0].userData.template",
        &["`nope.j2` not found"],
    ),
    (
        "bad taint effect",
        "effect: NoSchedule",
        "effect: NoScheduel",
        "nodeGroups[0].taints[0].effect",
        &["did you mean `NoSchedule`"],
    ),
    (
        "reserved label",
        "labels: {role: worker}",
        "labels: {nodewright.io/group: x}",
        "nodeGroups[0].labels.nodewright.io/group",
        &["reserved"],
    ),
    (
        "bad label value",
        "labels: {role: worker}",
        "labels: {role: \"a b\"}",
        "nodeGroups[0].labels.role",
        &["`a b`"],
    ),
    (
        "scan interval too short",
        "scanInterval: 30s",
        "scanInterval: 1ms",
        "scanInterval",
        &["got 1ms", "at least 100ms"],
    ),
    (
        "batch idle too short",
        "scanInterval: 30s",
        "scanInterval: 30s\nbatchIdleDuration: 1ms",
        "batchIdleDuration",
        &["got 1ms", "at least 10ms"],
    ),
    (
        "batch max shorter than idle",
        "scanInterval: 30s",
        "scanInterval: 30s\nbatchIdleDuration: 5s\nbatchMaxDuration: 2s",
        "batchMaxDuration",
        &["got 2s", "batchIdleDuration (5s)"],
    ),
    (
        "batch duration not a duration",
        "scanInterval: 30s",
        "scanInterval: 30s\nbatchMaxDuration: soon",
        "batchMaxDuration",
        &["soon"],
    ),
    (
        "missing required key",
        "clusterName: dev\n",
        "",
        "",
        &["`clusterName` is missing"],
    ),
    (
        "wrong type for list",
        "ignore: [docker.io/foo]",
        "ignore: docker.io/foo",
        "imagePuller.ignore",
        &["docker.io/foo"],
    ),
    (
        "name too long",
        "clusterName: dev",
        "clusterName: a-very-long-cluster-name-that-goes-on-and-on-and-on-and-on",
        "nodeGroups[0].name",
        &["at most"],
    ),
    (
        "duplicate key",
        "scanInterval: 30s",
        "scanInterval: 30s\nscanInterval: 10s",
        "scanInterval",
        &["appears more than once"],
    ),
    (
        "variable file missing",
        "    variables:",
        // A variable the template reads (one it never reads is refused as unread first).
        "    variableFiles: {k3s_extra_config: /nonexistent/ca}\n    variables:",
        "nodeGroups[0].userData.variableFiles.k3s_extra_config",
        &["/nonexistent/ca", "not a readable file"],
    ),
    (
        "variable in two places",
        "    variables:",
        "    variableFiles: {k3s_token: Cargo.toml}\n    variables:",
        "nodeGroups[0].userData.variableFiles.k3s_token",
        &["also in userData.variables"],
    ),
    (
        "unknown userData key",
        "    variables:",
        "    variabels:",
        "nodeGroups[0].userData.variabels",
        &["did you mean `variables`"],
    ),
];

#[test]
fn every_bad_config_gets_its_own_clear_error() {
    let mut failures = Vec::new();
    for (case, from, to, path, fragments) in BAD {
        assert!(
            GOOD.contains(from),
            "case {case}: base config lacks {from:?}"
        );
        let text = GOOD.replacen(from, to, 1);
        failures.extend(common::config_case_failures(
            case,
            parse(&text),
            path,
            true,
            fragments,
        ));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn all_semantic_problems_are_reported_at_once() {
    let text = GOOD.replacen("minSize: 1", "minSize: 9", 1).replacen(
        "clusterName: dev",
        "clusterName: DEV",
        1,
    );
    let err = parse(&text).expect_err("two problems");
    let paths: Vec<&str> = err.problems().iter().map(|p| p.path.as_str()).collect();
    assert!(paths.contains(&"clusterName"), "{paths:?}");
    assert!(paths.contains(&"nodeGroups[0].minSize"), "{paths:?}");
}

#[test]
fn binary_exits_2_with_the_field_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("autoscaler.yaml");
    let text = GOOD.replacen("maxSize: 3", "maxSize: 0", 1).replacen(
        "templatesDir: templates",
        &format!("templatesDir: {}", repo().join("templates").display()),
        1,
    );
    std::fs::write(&file, text).expect("write config");
    let out = Command::new(env!("CARGO_BIN_EXE_nodewright"))
        .args(["check", "--offline"])
        .env("AUTOSCALER_CONFIG_FILE", &file)
        .output()
        .expect("run nodewright");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("nodeGroups[0].maxSize"), "{stderr}");
    assert!(stderr.contains(&file.display().to_string()), "{stderr}");
}

#[test]
fn unreadable_config_is_a_clear_error() {
    let err = Config::load(Path::new("/nonexistent/autoscaler.yaml")).expect_err("missing file");
    assert!(
        err.to_string().contains("/nonexistent/autoscaler.yaml"),
        "{err}"
    );
}

#[test]
fn secret_variables_come_from_files_relative_to_the_config() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("token"), "from-a-secret\n").expect("write");
    let text = GOOD
        .replacen(
            "variables: {k3s_url: \"https://10.0.0.1:6443\", k3s_token: \"t\"}",
            "variables: {k3s_url: \"https://10.0.0.1:6443\"}\n    variableFiles: {k3s_token: token}",
            1,
        )
        .replacen(
            "templatesDir: templates",
            &format!("templatesDir: {}", repo().join("templates").display()),
            1,
        );
    assert!(text.contains("variableFiles"));
    let c = Config::parse(&text, dir.path()).expect("valid");
    let rendered = nodewright::act::render_user_data(&c, &c.node_groups[0], "dev-workers-abcde")
        .expect("renders");
    assert!(rendered.content.contains("from-a-secret"));
    assert!(
        !rendered.content.contains("from-a-secret\n\""),
        "trailing newline trimmed"
    );
}

#[test]
fn example_config_sets_every_scheduling_field() {
    use nodewright::config::ExpanderKind;
    let c = Config::load(&repo().join("config/autoscaler.yaml")).expect("example loads");
    assert_eq!(c.free_cpu_target.as_ref().map(|q| q.milli()), Some(2000));
    assert_eq!(
        c.minimum_free_node_cpu.as_ref().map(|q| q.milli()),
        Some(500)
    );
    assert_eq!(c.expander.kind, ExpanderKind::LeastWaste);
    assert_eq!(c.limits.nodes, Some(9));
    assert_eq!(c.limits.cpu.as_ref().map(|q| q.milli()), Some(36_000));
    assert_eq!(c.limits.memory.as_ref().map(|q| q.whole()), Some(72 << 30));
    assert_eq!(c.model_mismatch_grace, std::time::Duration::from_secs(60));
    let workers = &c.node_groups[0];
    assert_eq!(workers.reserved.cpu.as_ref().map(|q| q.milli()), Some(100));
    assert_eq!(
        workers.reserved.memory.as_ref().map(|q| q.whole()),
        Some(512 << 20)
    );
    assert_eq!((workers.max_pods, workers.arch.as_str()), (110, "amd64"));
    assert_eq!(workers.price, Some(0.12));
    let coreos = &c.node_groups[1];
    assert_eq!(
        coreos.resources.get("ephemeral-storage").map(|q| q.whole()),
        Some(30 << 30)
    );
}

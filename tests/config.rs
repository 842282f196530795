//! Config loading: the shipped example loads, and a corpus of bad configs each gets its
//! own clear error naming the field, the bad value and what is expected.

mod common;

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
        "    variableFiles: {k3s_ca: /nonexistent/ca}\n    variables:",
        "nodeGroups[0].userData.variableFiles.k3s_ca",
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

// ---- capacity buffers (`buffers:`) ----

const BUFFERS: &str = r#"
buffers:
- name: morning-warmup
  replicas: 4
  resources: {cpu: "2", memory: 4Gi}
  nodeSelector: {role: worker}
  tolerations: [{key: dedicated, operator: Equal, value: batch, effect: NoSchedule}]
  schedule: {cron: "0 7 * * 1-5", duration: 10h, timeZone: Europe/Berlin}
- name: always
  replicas: 1
  resources: {memory: 1Gi}
"#;

fn with_buffers(buffers: &str) -> String {
    GOOD.replacen(
        "nodeGroups:",
        &format!("{}nodeGroups:", buffers.trim_start()),
        1,
    )
}

#[test]
fn buffers_load() {
    let c = parse(&with_buffers(BUFFERS)).expect("buffers load");
    assert_eq!(c.buffers.len(), 2);
    let b = &c.buffers[0];
    assert_eq!(b.replicas, 4);
    let s = b.schedule.as_ref().expect("a schedule");
    assert_eq!(s.cron.as_str(), "0 7 * * 1-5");
    assert_eq!(s.duration, std::time::Duration::from_secs(10 * 3600));
    assert_eq!(s.time_zone.name(), "Europe/Berlin");
    assert!(c.buffers[1].schedule.is_none());
    assert!(c.buffers[1].tolerations.is_empty());
}

#[test]
fn every_bad_buffer_gets_its_own_clear_error() {
    // (case, replace this, with this, expected path, fragments the message must contain)
    let cases: &[(&str, &str, &str, &str, &[&str])] = &[
        (
            "bad cron field",
            "0 7 * * 1-5",
            "0 7 * * 1-8",
            "buffers[0].schedule.cron",
            &["day-of-week field `1-8`", "0-7"],
        ),
        (
            "cron with seconds",
            "0 7 * * 1-5",
            "0 0 7 * * 1-5",
            "buffers[0].schedule.cron",
            &["6 field(s)", "expected five"],
        ),
        (
            "unknown time zone",
            "timeZone: Europe/Berlin",
            "timeZone: Europe/Berln",
            "buffers[0].schedule.timeZone",
            &[
                "unknown time zone `Europe/Berln`",
                "did you mean `Europe/Berlin`",
            ],
        ),
        (
            "zero duration",
            "duration: 10h",
            "duration: 0s",
            "buffers[0].schedule.duration",
            &["got 0s"],
        ),
        (
            "bad duration",
            "duration: 10h",
            "duration: ten hours",
            "buffers[0].schedule.duration",
            &["duration"],
        ),
        (
            "missing duration",
            ", duration: 10h",
            "",
            "buffers[0].schedule",
            &["`duration` is missing"],
        ),
        (
            "typo in schedule key",
            "timeZone:",
            "timezone:",
            "buffers[0].schedule.timezone",
            &["did you mean `timeZone`"],
        ),
        (
            "typo in buffer key",
            "  replicas: 4",
            "  replica: 4",
            "buffers[0].replica",
            &["did you mean `replicas`"],
        ),
        (
            "zero replicas",
            "replicas: 4",
            "replicas: 0",
            "buffers[0].replicas",
            &["got 0", "at least 1"],
        ),
        (
            "bad quantity",
            "cpu: \"2\"",
            "cpu: two",
            "buffers[0].resources.cpu",
            &["`two` is not a Kubernetes quantity"],
        ),
        (
            "no resources",
            "resources: {memory: 1Gi}",
            "resources: {}",
            "buffers[1].resources",
            &["no resource requested"],
        ),
        (
            "pods as a resource",
            "resources: {memory: 1Gi}",
            "resources: {memory: 1Gi, pods: 3}",
            "buffers[1].resources.pods",
            &["each replica counts as one pod"],
        ),
        (
            "bad buffer name",
            "name: always",
            "name: Always_On",
            "buffers[1].name",
            &["`Always_On`", "lowercase"],
        ),
        (
            "duplicate buffer name",
            "name: always",
            "name: morning-warmup",
            "buffers[1].name",
            &["duplicate buffer name `morning-warmup`"],
        ),
        (
            "bad toleration operator",
            "operator: Equal",
            "operator: Exist",
            "buffers[0].tolerations[0].operator",
            &["did you mean `Exists`"],
        ),
        (
            "Exists with a value",
            "operator: Equal",
            "operator: Exists",
            "buffers[0].tolerations[0].value",
            &["operator Exists takes no value"],
        ),
        (
            "bad node selector value",
            "nodeSelector: {role: worker}",
            "nodeSelector: {role: \"a b\"}",
            "buffers[0].nodeSelector.role",
            &["`a b`"],
        ),
    ];
    let base = with_buffers(BUFFERS);
    let mut failures = Vec::new();
    for (case, from, to, path, fragments) in cases {
        assert!(base.contains(from), "case {case}: base lacks {from:?}");
        let text = base.replacen(from, to, 1);
        let err = match parse(&text) {
            Ok(_) => {
                failures.push(format!("{case}: accepted"));
                continue;
            }
            Err(e) => e,
        };
        let Some(problem) = err.problems().first().cloned() else {
            failures.push(format!("{case}: no problem listed in {err}"));
            continue;
        };
        if problem.path != *path {
            failures.push(format!(
                "{case}: path {:?}, expected {path:?} ({problem})",
                problem.path
            ));
        }
        for f in *fragments {
            if !problem.message.contains(f) {
                failures.push(format!("{case}: message {:?} lacks {f:?}", problem.message));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

// ---- disruption: scaleDown, drain, disruption, health ----

const DISRUPTION: &str = r#"
scaleDown:
  utilizationThreshold: 0.5
  unneededTime: 10m
  delayAfterFailure: 3m
drain:
  timeout: 10m
  jobGracePeriod: 1h
disruption:
  budgets:
  - nodes: 10%
    reasons: [empty, underutilized]
  - nodes: 1
    schedule: "0 9 * * 1-5"
    duration: 8h
    timeZone: Europe/Berlin
  drift: true
health:
  maxUnreadyPercentage: 45
  okUnreadyCount: 3
  unhealthyAfter: 15m
"#;

fn with_disruption(block: &str) -> String {
    GOOD.replacen(
        "nodeGroups:",
        &format!("{}nodeGroups:", block.trim_start()),
        1,
    )
}

#[test]
fn disruption_settings_load() {
    use nodewright::config::{BudgetNodes, DisruptionReason};
    let c = parse(&with_disruption(DISRUPTION)).expect("disruption settings load");
    let b = &c.disruption.budgets;
    assert_eq!(b.len(), 2);
    assert_eq!(b[0].nodes, BudgetNodes::Percent(10));
    assert_eq!(
        b[0].reasons,
        [DisruptionReason::Empty, DisruptionReason::Underutilized]
    );
    assert_eq!(b[1].nodes, BudgetNodes::Count(1));
    assert_eq!(
        b[1].schedule.as_ref().map(|c| c.as_str()),
        Some("0 9 * * 1-5")
    );
    assert_eq!(
        b[1].duration,
        Some(std::time::Duration::from_secs(8 * 3600))
    );
    assert_eq!(
        b[1].time_zone.as_ref().map(|z| z.name()),
        Some("Europe/Berlin")
    );
    assert!(b[0].schedule.is_none() && b[0].duration.is_none());
    assert!(b[1].reasons.is_empty(), "no reasons: every reason");
}

#[test]
fn every_bad_disruption_setting_gets_its_own_clear_error() {
    // (case, replace this, with this, expected path, fragments the message must contain)
    let cases: &[(&str, &str, &str, &str, &[&str])] = &[
        (
            "utilization threshold above 1",
            "utilizationThreshold: 0.5",
            "utilizationThreshold: 1.5",
            "scaleDown.utilizationThreshold",
            &["got 1.5", "between 0 and 1"],
        ),
        (
            "negative utilization threshold",
            "utilizationThreshold: 0.5",
            "utilizationThreshold: -0.1",
            "scaleDown.utilizationThreshold",
            &["got -0.1", "between 0 and 1"],
        ),
        (
            "utilization threshold as a percentage",
            "utilizationThreshold: 0.5",
            "utilizationThreshold: 50%",
            "scaleDown.utilizationThreshold",
            &["50%"],
        ),
        (
            "unready percentage above 100",
            "maxUnreadyPercentage: 45",
            "maxUnreadyPercentage: 150",
            "health.maxUnreadyPercentage",
            &["got 150", "from 0 to 100"],
        ),
        (
            "budget percentage above 100",
            "nodes: 10%",
            "nodes: 150%",
            "disruption.budgets[0].nodes",
            &["`150%`", "percentage from 0% to 100%"],
        ),
        (
            "budget nodes not a number",
            "nodes: 10%",
            "nodes: abc",
            "disruption.budgets[0].nodes",
            &[
                "`abc` is not a node count",
                "whole number (`2`)",
                "percentage from 0% to 100% (`10%`)",
            ],
        ),
        (
            "unknown disruption reason",
            "reasons: [empty, underutilized]",
            "reasons: [empty, underutilised]",
            "disruption.budgets[0].reasons[1]",
            &["`underutilised`", "did you mean `underutilized`", "expired"],
        ),
        (
            "bad cron in a budget schedule",
            "0 9 * * 1-5",
            "0 25 * * 1-5",
            "disruption.budgets[1].schedule",
            &["hour field `25`", "0-23"],
        ),
        (
            "zero budget duration",
            "duration: 8h",
            "duration: 0s",
            "disruption.budgets[1].duration",
            &["got 0", "e.g. `8h`"],
        ),
        (
            "budget schedule without a duration",
            "    duration: 8h\n",
            "",
            "disruption.budgets[1].duration",
            &["missing", "`duration: 8h`"],
        ),
        (
            "budget duration without a schedule",
            "    schedule: \"0 9 * * 1-5\"\n",
            "",
            "disruption.budgets[1].schedule",
            &["missing", "cron `schedule`"],
        ),
        (
            "budget time zone without a schedule",
            "  - nodes: 10%\n",
            "  - nodes: 10%\n    timeZone: UTC\n",
            "disruption.budgets[0].timeZone",
            &[
                "only matters with a `schedule`",
                "add `schedule` and `duration`",
            ],
        ),
        (
            "unknown time zone in a budget",
            "timeZone: Europe/Berlin",
            "timeZone: Europe/Berln",
            "disruption.budgets[1].timeZone",
            &["did you mean `Europe/Berlin`"],
        ),
        (
            "zero drain timeout",
            "timeout: 10m",
            "timeout: 0s",
            "drain.timeout",
            &["got 0s", "at least 1s"],
        ),
        (
            "bad drain timeout",
            "timeout: 10m",
            "timeout: ten minutes",
            "drain.timeout",
            &["ten minutes", "expected a duration"],
        ),
        (
            "typo in a drain key",
            "jobGracePeriod: 1h",
            "jobGracePeriode: 1h",
            "drain.jobGracePeriode",
            &["did you mean `jobGracePeriod`"],
        ),
        (
            "typo in a budget key",
            "  - nodes: 1\n",
            "  - node: 1\n",
            "disruption.budgets[1].node",
            &["did you mean `nodes`"],
        ),
        (
            "typo in a health key",
            "okUnreadyCount: 3",
            "okUnreadyCnt: 3",
            "health.okUnreadyCnt",
            &["did you mean `okUnreadyCount`"],
        ),
        (
            "drift not a boolean",
            "drift: true",
            "drift: sometimes",
            "disruption.drift",
            &["sometimes"],
        ),
    ];
    let base = with_disruption(DISRUPTION);
    let mut failures = Vec::new();
    for (case, from, to, path, fragments) in cases {
        assert!(base.contains(from), "case {case}: base lacks {from:?}");
        let text = base.replacen(from, to, 1);
        let err = match parse(&text) {
            Ok(_) => {
                failures.push(format!("{case}: accepted"));
                continue;
            }
            Err(e) => e,
        };
        let Some(problem) = err.problems().first().cloned() else {
            failures.push(format!("{case}: no problem listed in {err}"));
            continue;
        };
        if problem.path != *path {
            failures.push(format!(
                "{case}: path {:?}, expected {path:?} ({problem})",
                problem.path
            ));
        }
        for f in *fragments {
            if !problem.message.contains(f) {
                failures.push(format!("{case}: message {:?} lacks {f:?}", problem.message));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The disruption rows of README's configuration table, as (key, default): one key per
/// row, the default the first `code` span of the second column.
fn readme_disruption_defaults() -> Vec<(String, String)> {
    let readme = std::fs::read_to_string(repo().join("README.md")).expect("README.md");
    let code = |cell: &str| cell.split('`').nth(1).map(str::to_string);
    readme
        .lines()
        .filter_map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            // "", key, default, meaning, ""
            let key = code(cells.get(1)?)?;
            let section = key.split('.').next()?;
            if !["scaleDown", "drain", "disruption", "health"].contains(&section) {
                return None;
            }
            Some((key, code(cells.get(2)?)?))
        })
        .collect()
}

#[test]
fn disruption_defaults_are_what_readme_says() {
    let rows = readme_disruption_defaults();
    let keys: Vec<&str> = rows.iter().map(|(k, _)| k.as_str()).collect();
    for key in [
        "scaleDown.enabled",
        "scaleDown.delayAfterAdd",
        "scaleDown.delayAfterDelete",
        "scaleDown.delayAfterFailure",
        "scaleDown.utilizationThreshold",
        "scaleDown.unneededTime",
        "drain.timeout",
        "drain.jobGracePeriod",
        "disruption.budgets",
        "disruption.drift",
        "health.maxUnreadyPercentage",
        "health.okUnreadyCount",
        "health.unhealthyAfter",
        "health.notReadyGrace",
    ] {
        assert!(keys.contains(&key), "README documents no default for {key}");
    }
    // Writing each documented default out changes nothing.
    let defaults = parse(GOOD).expect("good config loads");
    for (key, value) in &rows {
        let Some((section, field)) = key.split_once('.') else {
            panic!("README key {key} is not section.field");
        };
        let text = with_disruption(&format!("{section}:\n  {field}: {value}\n"));
        let explicit = parse(&text)
            .unwrap_or_else(|e| panic!("README default `{value}` of {key} is rejected: {e}"));
        assert!(
            explicit == defaults,
            "README says {key} defaults to `{value}`, the code disagrees"
        );
    }
    // And the values themselves, so the README cannot drift along with the code.
    use nodewright::config::BudgetNodes;
    use std::time::Duration;
    let m = |n: u64| Duration::from_secs(60 * n);
    let sd = &defaults.scale_down;
    assert!(sd.enabled);
    assert_eq!(
        (
            sd.delay_after_add,
            sd.delay_after_delete,
            sd.delay_after_failure,
            sd.unneeded_time
        ),
        (m(10), Duration::ZERO, m(3), m(10))
    );
    assert_eq!(sd.utilization_threshold, 0.5);
    assert_eq!(
        (defaults.drain.timeout, defaults.drain.job_grace_period),
        (m(10), m(60))
    );
    let budgets = &defaults.disruption.budgets;
    assert_eq!(budgets.len(), 1);
    assert_eq!(budgets[0].nodes, BudgetNodes::Percent(10));
    assert!(budgets[0].reasons.is_empty() && budgets[0].schedule.is_none());
    assert!(budgets[0].duration.is_none() && budgets[0].time_zone.is_none());
    assert!(defaults.disruption.drift);
    let h = &defaults.health;
    assert_eq!((h.max_unready_percentage, h.ok_unready_count), (45, 3));
    assert_eq!((h.unhealthy_after, h.not_ready_grace), (m(15), m(2)));
}

#[test]
fn example_config_shows_every_disruption_setting_at_its_default() {
    let text = std::fs::read_to_string(repo().join("config/autoscaler.yaml")).expect("example");
    for key in readme_disruption_defaults().iter().map(|(k, _)| k) {
        let field = key.split('.').next_back().unwrap_or(key);
        assert!(
            text.contains(&format!("{field}:")),
            "config/autoscaler.yaml does not show {key}"
        );
    }
    let example = Config::load(&repo().join("config/autoscaler.yaml")).expect("example loads");
    let defaults = parse(GOOD).expect("good config loads");
    assert_eq!(example.scale_down, defaults.scale_down);
    assert_eq!(example.drain, defaults.drain);
    assert_eq!(example.health, defaults.health);
    assert_eq!(example.disruption.drift, defaults.disruption.drift);
    // The default budget comes first; the example adds a scheduled one after it.
    assert_eq!(
        example.disruption.budgets.first(),
        defaults.disruption.budgets.first()
    );
}

/// The Proxmox host settings: (case, the group's `proxmox:` block, expected path, fragments).
const BAD_PROXMOX: &[(&str, &str, &str, &[&str])] = &[
    (
        "cpu overcommit of zero",
        "{template: 9000, overcommit: {cpu: 0}}",
        "nodeGroups[0].proxmox.overcommit.cpu",
        &["got 0", "above 0"],
    ),
    (
        "negative memory overcommit",
        "{template: 9000, overcommit: {memory: -1.5}}",
        "nodeGroups[0].proxmox.overcommit.memory",
        &["got -1.5"],
    ),
    (
        "maxPerHost zero",
        "{template: 9000, maxPerHost: 0}",
        "nodeGroups[0].proxmox.maxPerHost",
        &["got 0", "at least 1"],
    ),
    (
        "template tag outside Proxmox's alphabet",
        "{template: {tag: \"k8s 1.30\"}}",
        "nodeGroups[0].proxmox.template.tag",
        &["`k8s 1.30`", "not a Proxmox tag"],
    ),
    (
        "typo in overcommit",
        "{template: 9000, overcommit: {cpus: 2}}",
        "nodeGroups[0].proxmox",
        &["cpus"],
    ),
    (
        "reserve memory that is not a size",
        "{template: 9000, reserve: {memory: lots}}",
        "nodeGroups[0].proxmox",
        &["lots"],
    ),
];

fn proxmox_config(block: &str) -> String {
    GOOD.replacen("provider: openstack", "provider: proxmox", 1)
        .replacen(
            "openstack: {flavor: m1.large, image: ubuntu-24.04, network: private}",
            &format!("proxmox: {block}"),
            1,
        )
}

#[test]
fn proxmox_host_settings_parse_and_bad_ones_name_the_field() {
    let c = parse(&proxmox_config(
        "{template: {tag: k8s-1-30}, overcommit: {cpu: 3.0}, reserve: {cpu: 2, memory: 8 GiB}, maxPerHost: 2}",
    ))
    .expect("good Proxmox settings load");
    let px = c.node_groups[0].proxmox.as_ref().expect("proxmox block");
    assert_eq!((px.overcommit.cpu, px.overcommit.memory), (3.0, 1.0));
    assert_eq!(px.reserve.memory.map(|m| m.as_u64()), Some(8 << 30));
    assert_eq!(px.max_per_host, Some(2));
    let mut failures = Vec::new();
    for (case, block, path, fragments) in BAD_PROXMOX {
        failures.extend(common::config_case_failures(
            case,
            parse(&proxmox_config(block)),
            path,
            false,
            fragments,
        ));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

//! Capacity buffers (buffers:) load, and each bad one gets its own clear error.

use super::*;

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

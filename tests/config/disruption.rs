//! Disruption settings (scaleDown, drain, disruption, health): load, errors, and defaults as README says.

use super::*;

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

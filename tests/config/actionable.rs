//! Errors a person can act on: the key's own line (not its enclosing block's), a
//! misspelt template variable with its likely meaning, a duration without a unit, and
//! timings that make no sense refused or warned about with the reason. Each message is
//! asserted whole.

use super::*;

/// The first problem of `text`, rendered as the user sees it (`path (line N): message`).
fn first_problem(text: &str) -> String {
    match parse(text) {
        Ok(_) => "accepted".to_string(),
        Err(e) => e
            .problems()
            .first()
            .map(|p| p.to_string())
            .unwrap_or_else(|| format!("no problem listed in {e}")),
    }
}

fn edited(from: &str, to: &str) -> String {
    assert!(GOOD.contains(from), "GOOD lacks {from:?}");
    GOOD.replacen(from, to, 1)
}

#[test]
fn size_quantity_and_duplicate_key_errors_give_the_keys_own_line() {
    let cases: &[(&str, String, &str)] = &[
        (
            "a size",
            edited("freeMemoryTarget: 9 GiB", "freeMemoryTarget: nine gigs"),
            "freeMemoryTarget (line 3): `nine gigs` is not a size; expected a number and a binary unit such as `8 GiB`, `512 MiB` or `16Gi`",
        ),
        (
            "a quantity, second key of its block",
            edited(
                "  maxSize: 3\n",
                "  maxSize: 3\n  reserved:\n    memory: 1Gi\n    cpu: lots\n",
            ),
            "nodeGroups[0].reserved.cpu (line 18): `lots` is not a Kubernetes quantity; expected e.g. `4`, `500m` or `16Gi`",
        ),
        (
            "a key repeated in a group",
            edited("  maxSize: 3\n", "  maxSize: 3\n  maxSize: 4\n"),
            "nodeGroups[0].maxSize (line 16): key `maxSize` appears more than once; expected each key once",
        ),
        (
            "a key repeated at the top",
            edited("scanInterval: 30s", "scanInterval: 30s\nscanInterval: 10s"),
            "scanInterval (line 8): key `scanInterval` appears more than once; expected each key once",
        ),
    ];
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|(case, text, want)| {
            let got = first_problem(text);
            (got != *want).then(|| format!("{case}:\n  got  {got}\n  want {want}"))
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_misspelt_optional_template_variable_gets_a_did_you_mean() {
    let text = edited(
        "k3s_token: \"t\"}",
        "k3s_token: \"t\", k3s_versoin: \"v1.31.4+k3s1\"}",
    );
    assert_eq!(
        first_problem(&text),
        "nodeGroups[0].userData.variables.k3s_versoin (line 19): template `k3s-agent.cloud-init.yaml.j2` never reads `k3s_versoin`; did you mean `k3s_version`? (it reads: k3s_extra_config, k3s_token, k3s_url, k3s_version, ssh_authorized_keys)"
    );
}

#[test]
fn a_variable_the_template_never_reads_and_resembles_nothing_is_warned_about() {
    let text = edited(
        "k3s_token: \"t\"}",
        "k3s_token: \"t\", datacenter: \"fra1\"}",
    );
    assert_eq!(
        warnings(&text),
        ["nodeGroups[0].userData.variables.datacenter (line 19): template `k3s-agent.cloud-init.yaml.j2` never reads `datacenter`; remove it, or check `userData.template` (it reads: k3s_extra_config, k3s_token, k3s_url, k3s_version, ssh_authorized_keys)"]
    );
}

#[test]
fn a_duration_without_a_unit_says_add_a_unit() {
    assert_eq!(
        first_problem(&edited("scanInterval: 30s", "scanInterval: 30")),
        "scanInterval (line 7): `30` has no unit; add a unit, e.g. `30s` (or `30m`, `30h`)"
    );
}

#[test]
fn a_scan_interval_of_days_is_refused_with_the_reason() {
    assert_eq!(
        first_problem(&edited("scanInterval: 30s", "scanInterval: 365d")),
        "scanInterval (line 7): got 365d; a VM that never joins, an expired node or a broken one would be acted on only that long after, at the next cycle; expected at most 1h (default 30s)"
    );
}

/// The warnings of a config that loads.
fn warnings(text: &str) -> Vec<String> {
    parse(text)
        .expect("loads, with warnings")
        .warnings
        .iter()
        .map(|w| w.to_string())
        .collect()
}

#[test]
fn a_provision_timeout_shorter_than_a_boot_is_warned_about() {
    assert_eq!(
        warnings(&edited("provisionTimeout: 15m", "provisionTimeout: 10s")),
        ["provisionTimeout (line 6): got 10s, shorter than a VM takes to boot and join (a minute or more): every new VM would be deleted before its node is Ready; expected several minutes (default 15m)"]
    );
}

#[test]
fn an_age_limit_shorter_than_the_provision_timeout_is_warned_about() {
    assert_eq!(
        warnings(&edited("oldNodeAgeLimit: 72h", "oldNodeAgeLimit: 5m")),
        ["oldNodeAgeLimit (line 5): got 5m, shorter than provisionTimeout (15m): nodes would be replaced for their age before a new VM is even given up on, one after another; expected days, e.g. `720h`"]
    );
}

#[test]
fn sensible_timings_load_without_warnings() {
    assert_eq!(warnings(GOOD), Vec::<String>::new());
}

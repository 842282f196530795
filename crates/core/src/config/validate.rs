//! Semantic checks serde cannot express. Each returns every problem, not just the first.

use std::collections::BTreeSet;
use std::time::Duration;

use super::names::{check_dns_label, check_qualified_name, is_label_value};
use super::{Config, ConfigProblem, NodeGroupConfig, ProviderKind};
use crate::cloud::registry::GroupContext;

/// Kubernetes node names are DNS labels; VM names are `<cluster>-<group>-<5 chars>`.
const MAX_NODE_NAME: usize = 63;
const NAME_SUFFIX_LEN: usize = 6;

pub(super) fn validate(c: &Config) -> Vec<ConfigProblem> {
    let mut p = Vec::new();
    check_dns_label(&mut p, "clusterName", &c.cluster_name);
    validate_disruption(&mut p, c);
    super::timings::validate_timings(&mut p, c);
    p.extend(
        super::variables::unused_variables(c)
            .into_iter()
            .filter(|u| u.likely_typo)
            .map(|u| u.problem),
    );
    check_min_duration(
        &mut p,
        "scanInterval",
        c.scan_interval,
        Duration::from_millis(100),
    );
    check_min_duration(
        &mut p,
        "batchIdleDuration",
        c.batch_idle_duration,
        Duration::from_millis(10),
    );
    if c.batch_max_duration < c.batch_idle_duration {
        p.push(ConfigProblem::new(
            "batchMaxDuration",
            format!(
                "got {}, shorter than batchIdleDuration ({}); expected at least batchIdleDuration (defaults 1s and 10s)",
                humantime::format_duration(c.batch_max_duration),
                humantime::format_duration(c.batch_idle_duration)
            ),
        ));
    }
    check_min_duration(
        &mut p,
        "provisionTimeout",
        c.provision_timeout,
        Duration::from_secs(1),
    );
    if let Some(max) = c.provision_timeout_max {
        if max < c.provision_timeout {
            p.push(ConfigProblem::new(
                "provisionTimeoutMax",
                format!(
                    "got {}, shorter than provisionTimeout ({}); expected at least provisionTimeout, or leave it out for 3 × provisionTimeout",
                    humantime::format_duration(max),
                    humantime::format_duration(c.provision_timeout)
                ),
            ));
        }
    }
    if let Some(w) = c.provision_progress_window {
        check_min_duration(&mut p, "provisionProgressWindow", w, Duration::from_secs(1));
        if w > c.provision_deadline_max() {
            p.push(ConfigProblem::new(
                "provisionProgressWindow",
                format!(
                    "got {}, longer than provisionTimeoutMax ({}); expected at most provisionTimeoutMax (a clone silent that long is past its hard maximum anyway), or leave it out for 2m",
                    humantime::format_duration(w),
                    humantime::format_duration(c.provision_deadline_max())
                ),
            ));
        }
    }
    if let Some(age) = c.old_node_age_limit {
        check_min_duration(&mut p, "oldNodeAgeLimit", age, Duration::from_secs(1));
    }
    check_dns_label(&mut p, "imagePuller.namespace", &c.image_puller.namespace);
    for (i, prefix) in c.image_puller.ignore.iter().enumerate() {
        if prefix.trim().is_empty() {
            p.push(ConfigProblem::new(
                format!("imagePuller.ignore[{i}]"),
                "empty prefix would ignore every image; expected an image prefix such as `docker.io/library/`",
            ));
        }
    }
    if c.node_groups.is_empty() {
        p.push(ConfigProblem::new(
            "nodeGroups",
            "no node groups; expected at least one group with name, provider, maxSize and userData",
        ));
    }
    if let Some(m) = &c.limits.memory {
        super::scheduling::check_byte_quantities(&mut p, [("limits.memory".to_string(), m)]);
    }
    validate_expander(&mut p, c);
    super::pools::validate_mode(&mut p, c);
    super::buffers::validate_buffers(&mut p, &c.buffers);
    let mut seen = BTreeSet::new();
    for (i, g) in c.node_groups.iter().enumerate() {
        let at = format!("nodeGroups[{i}]");
        if !seen.insert(g.name.as_str()) {
            p.push(ConfigProblem::new(
                format!("{at}.name"),
                format!(
                    "duplicate group name `{}`; expected each group name once",
                    g.name
                ),
            ));
        }
        validate_group(&mut p, c, &at, g);
    }
    p
}

fn validate_disruption(p: &mut Vec<ConfigProblem>, c: &Config) {
    let t = c.scale_down.utilization_threshold;
    if !(0.0..=1.0).contains(&t) {
        p.push(ConfigProblem::new(
            "scaleDown.utilizationThreshold",
            format!("got {t}; expected a share between 0 and 1 (default 0.5)"),
        ));
    }
    if c.health.max_unready_percentage > 100 {
        p.push(ConfigProblem::new(
            "health.maxUnreadyPercentage",
            format!(
                "got {}; expected a percentage from 0 to 100 (default 45)",
                c.health.max_unready_percentage
            ),
        ));
    }
    check_min_duration(p, "drain.timeout", c.drain.timeout, Duration::from_secs(1));
    if let Some(grace) = c.drain.termination_grace_period {
        check_min_duration(
            p,
            "drain.terminationGracePeriod",
            grace,
            Duration::from_secs(1),
        );
        if c.old_node_age_limit.is_none() {
            p.push(ConfigProblem::new(
                "drain.terminationGracePeriod",
                "applies only to nodes past `oldNodeAgeLimit`, which is not set; set `oldNodeAgeLimit` (e.g. `720h`) or remove `drain.terminationGracePeriod`",
            ));
        }
    }
    for (i, b) in c.disruption.budgets.iter().enumerate() {
        let at = format!("disruption.budgets[{i}]");
        match (&b.schedule, b.duration) {
            (Some(_), None) => p.push(ConfigProblem::new(
                format!("{at}.duration"),
                "missing; a budget with a `schedule` needs how long each window lasts, e.g. `duration: 8h`",
            )),
            (None, Some(_)) => p.push(ConfigProblem::new(
                format!("{at}.schedule"),
                "missing; `duration` needs a cron `schedule` saying when each window starts, e.g. `schedule: \"0 9 * * 1-5\"`",
            )),
            (Some(_), Some(d)) if d.is_zero() => p.push(ConfigProblem::new(
                format!("{at}.duration"),
                "got 0; expected how long the budget applies after each cron start, e.g. `8h`",
            )),
            _ => {}
        }
        if b.time_zone.is_some() && b.schedule.is_none() {
            p.push(ConfigProblem::new(
                format!("{at}.timeZone"),
                "a time zone only matters with a `schedule`; remove it or add `schedule` and `duration`",
            ));
        }
    }
}

fn validate_expander(p: &mut Vec<ConfigProblem>, c: &Config) {
    use super::ExpanderKind;
    for (i, pattern) in c.expander.priorities.iter().enumerate() {
        if let Err(e) = regex::Regex::new(pattern) {
            p.push(ConfigProblem::new(
                format!("expander.priorities[{i}]"),
                format!("`{pattern}` is not a valid regular expression ({e}); expected e.g. `proxmox-.*`"),
            ));
        }
    }
    match c.expander.kind {
        ExpanderKind::Priority if c.expander.priorities.is_empty() => {
            p.push(ConfigProblem::new(
                "expander.priorities",
                "empty; the priority expander needs group-name patterns, most preferred first",
            ));
        }
        ExpanderKind::Price => {
            for (i, g) in c.node_groups.iter().enumerate() {
                if g.price.is_none() {
                    p.push(ConfigProblem::new(
                        format!("nodeGroups[{i}].price"),
                        "missing; the price expander needs an hourly price for every group",
                    ));
                }
            }
        }
        _ => {}
    }
}

fn validate_group(p: &mut Vec<ConfigProblem>, c: &Config, at: &str, g: &NodeGroupConfig) {
    super::pools::validate_pool(p, at, g);
    super::sizes::validate_sizes(p, at, g);
    if let Some(price) = g.price {
        if !price.is_finite() || price < 0.0 {
            p.push(ConfigProblem::new(
                format!("{at}.price"),
                format!("got {price}; expected an hourly price of 0 or more"),
            ));
        }
    }
    if g.max_pods == 0 {
        p.push(ConfigProblem::new(
            format!("{at}.maxPods"),
            "got 0; expected the kubelet's maxPods (default 110)",
        ));
    }
    let resources_at = format!("{at}.resources");
    super::scheduling::check_byte_quantities(
        p,
        super::scheduling::byte_entries(&resources_at, &g.resources),
    );
    if let Some(m) = &g.reserved.memory {
        super::scheduling::check_byte_quantities(p, [(format!("{at}.reserved.memory"), m)]);
    }
    for name in g.resources.keys() {
        if let Err(why) = check_qualified_name(name) {
            p.push(ConfigProblem::new(
                format!("{at}.resources.{name}"),
                format!("invalid resource name `{name}`: {why}; expected e.g. `cpu`, `memory` or `nvidia.com/gpu`"),
            ));
        }
    }
    check_dns_label(p, &format!("{at}.name"), &g.name);
    let longest = c.cluster_name.len() + 1 + g.name.len() + NAME_SUFFIX_LEN;
    if longest > MAX_NODE_NAME {
        p.push(ConfigProblem::new(
            format!("{at}.name"),
            format!(
                "node names `{}-{}-xxxxx` would be {longest} characters; expected clusterName and group name to total at most {} characters",
                c.cluster_name,
                g.name,
                MAX_NODE_NAME - NAME_SUFFIX_LEN - 1
            ),
        ));
    }
    if g.max_size == 0 {
        p.push(ConfigProblem::new(
            format!("{at}.maxSize"),
            "got 0; expected at least 1 (remove the group to disable it)",
        ));
    }
    if g.min_size > g.max_size {
        p.push(ConfigProblem::new(
            format!("{at}.minSize"),
            format!(
                "got {}; expected at most maxSize ({})",
                g.min_size, g.max_size
            ),
        ));
    }
    // Exactly the settings block of the group's provider, no other.
    for &kind in ProviderKind::ALL {
        let name = kind.as_str();
        let present = g.settings.get(kind).is_some();
        if kind == g.provider && !present {
            p.push(ConfigProblem::new(
                format!("{at}.{name}"),
                format!("missing; provider `{name}` needs a `{name}:` block with its settings"),
            ));
        } else if kind != g.provider && present {
            p.push(ConfigProblem::new(
                format!("{at}.{name}"),
                format!(
                    "the group's provider is `{}`; expected no `{name}:` block (or `provider: {name}`)",
                    g.provider.as_str()
                ),
            ));
        }
    }
    let group = GroupContext {
        cluster: &c.cluster_name,
        group: &g.name,
        max_size: g.max_size,
    };
    for block in g.settings.iter() {
        for (field, problem) in block.as_settings().validate(&group) {
            p.push(ConfigProblem::new(format!("{at}.{field}"), problem));
        }
    }
    let template = c.templates_dir.join(&g.user_data.template);
    if g.user_data.template.trim().is_empty() {
        p.push(ConfigProblem::new(
            format!("{at}.userData.template"),
            "empty; expected a template file name in the templates directory",
        ));
    } else if !template.is_file() {
        let available = crate::userdata::template_names(&c.templates_dir).unwrap_or_default();
        let hint = match super::error::did_you_mean(&g.user_data.template, &available) {
            Some(best) => format!("; did you mean `{best}`?"),
            None => String::new(),
        };
        let listing = if available.is_empty() {
            format!(
                "templatesDir ({}) holds no template; the shipped ones are in the repository's templates/: {}",
                c.templates_dir.display(),
                crate::userdata::SHIPPED_TEMPLATES.join(", ")
            )
        } else {
            format!(
                "templatesDir ({}) holds: {}",
                c.templates_dir.display(),
                available.join(", ")
            )
        };
        p.push(ConfigProblem::new(
            format!("{at}.userData.template"),
            format!(
                "`{}` not found at {}{hint}; {listing}",
                g.user_data.template,
                template.display(),
            ),
        ));
    }
    for (name, path) in &g.user_data.variable_files {
        let at_var = format!("{at}.userData.variableFiles.{name}");
        if g.user_data.variables.contains_key(name) {
            p.push(ConfigProblem::new(
                &at_var,
                format!("`{name}` is also in userData.variables; expected it in one place"),
            ));
        }
        if !path.is_file() {
            p.push(ConfigProblem::new(
                &at_var,
                format!("{} is not a readable file; expected a path such as a mounted Secret's key (relative paths are relative to the config file)", path.display()),
            ));
        }
    }
    for name in g
        .user_data
        .variables
        .keys()
        .chain(g.user_data.variable_files.keys())
    {
        if crate::userdata::BUILTIN_VARIABLES.contains(&name.as_str()) {
            p.push(ConfigProblem::new(
                format!("{at}.userData.variables.{name}"),
                format!("`{name}` is provided by nodewright to every template; expected another variable name"),
            ));
        }
    }
    for (key, value) in &g.labels {
        let path = format!("{at}.labels.{key}");
        if let Err(why) = check_qualified_name(key) {
            p.push(ConfigProblem::new(
                &path,
                format!("invalid label key `{key}`: {why}"),
            ));
        } else if key.starts_with("nodewright.io/") {
            p.push(ConfigProblem::new(
                &path,
                "the `nodewright.io/` prefix is reserved for nodewright's own labels; expected another prefix",
            ));
        } else if super::labels::kubelet_refuses(key) {
            p.push(ConfigProblem::new(
                &path,
                super::labels::refusal(&g.name, key, value),
            ));
        }
        if !value.is_empty() && !is_label_value(value) {
            p.push(ConfigProblem::new(
                &path,
                format!("invalid label value `{value}`; expected at most 63 characters of [A-Za-z0-9._-], starting and ending alphanumeric"),
            ));
        }
    }
    for (i, t) in g.taints.iter().enumerate() {
        let path = format!("{at}.taints[{i}].key");
        if let Err(why) = check_qualified_name(&t.key) {
            p.push(ConfigProblem::new(
                &path,
                format!("invalid taint key `{}`: {why}", t.key),
            ));
        } else if t.key == crate::model::STARTUP_TAINT_KEY {
            p.push(ConfigProblem::new(
                &path,
                "this taint is added and removed by nodewright itself; expected another key",
            ));
        }
        if !t.value.is_empty() && !is_label_value(&t.value) {
            p.push(ConfigProblem::new(
                format!("{at}.taints[{i}].value"),
                format!(
                    "invalid taint value `{}`; expected at most 63 characters of [A-Za-z0-9._-]",
                    t.value
                ),
            ));
        }
    }
}

fn check_min_duration(p: &mut Vec<ConfigProblem>, path: &str, got: Duration, min: Duration) {
    if got < min {
        p.push(ConfigProblem::new(
            path,
            format!(
                "got {}; expected at least {}",
                humantime::format_duration(got),
                humantime::format_duration(min)
            ),
        ));
    }
}

//! Capacity buffers: named sets of "N pods of shape X" kept schedulable at all times, or
//! only inside a [`Schedule`] (warm capacity before working hours). The planner treats an
//! active buffer's pods as pending after every real pod: scale-up adds nodes when they
//! do not fit, scale-down never removes a node they would need.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::names::{check_dns_label, check_qualified_name, is_label_value};
use super::schedule::Schedule;
use super::scheduling::ResourceMap;
use super::{ConfigProblem, TaintEffect};

/// Most replicas one buffer may ask for: the planner packs each one.
pub const MAX_BUFFER_REPLICAS: u32 = 10_000;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BufferConfig {
    /// DNS label; the buffer's pods are `<name>-<i>` in plans and messages.
    pub name: String,
    pub replicas: u32,
    /// Requests of one pod (`cpu`, `memory`, `ephemeral-storage`, `nvidia.com/gpu`, ...).
    pub resources: ResourceMap,
    #[serde(default)]
    pub node_selector: BTreeMap<String, String>,
    #[serde(default)]
    pub tolerations: Vec<TolerationConfig>,
    /// When the buffer is kept; absent means always.
    #[serde(default)]
    pub schedule: Option<Schedule>,
}

/// A toleration, in the shape of a Kubernetes pod's.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TolerationConfig {
    #[serde(default)]
    pub key: Option<String>,
    #[serde(default)]
    pub operator: TolerationOperator,
    #[serde(default)]
    pub value: Option<String>,
    #[serde(default)]
    pub effect: Option<TaintEffect>,
    /// Accepted for copy-paste from pod specs; it only matters for eviction, which a
    /// buffer's pods never see.
    #[serde(default)]
    pub toleration_seconds: Option<i64>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
pub enum TolerationOperator {
    #[default]
    Equal,
    Exists,
}

impl BufferConfig {
    /// Whether the buffer is kept at `now`.
    pub fn active(&self, now: std::time::SystemTime) -> bool {
        self.schedule.as_ref().is_none_or(|s| s.active(now))
    }
}

pub(super) fn validate_buffers(p: &mut Vec<ConfigProblem>, buffers: &[BufferConfig]) {
    let mut seen = BTreeSet::new();
    for (i, b) in buffers.iter().enumerate() {
        let at = format!("buffers[{i}]");
        check_dns_label(p, &format!("{at}.name"), &b.name);
        if !seen.insert(b.name.as_str()) {
            p.push(ConfigProblem::new(
                format!("{at}.name"),
                format!(
                    "duplicate buffer name `{}`; expected each buffer name once",
                    b.name
                ),
            ));
        }
        if b.replicas == 0 {
            p.push(ConfigProblem::new(
                format!("{at}.replicas"),
                "got 0; expected at least 1 (remove the buffer to disable it)",
            ));
        } else if b.replicas > MAX_BUFFER_REPLICAS {
            p.push(ConfigProblem::new(
                format!("{at}.replicas"),
                format!("got {}; expected at most {MAX_BUFFER_REPLICAS}", b.replicas),
            ));
        }
        if b.resources.values().all(|q| q.value() <= 0.0) {
            p.push(ConfigProblem::new(
                format!("{at}.resources"),
                "no resource requested; expected the requests of one pod, e.g. `{cpu: \"2\", memory: 4Gi}`",
            ));
        }
        let resources_at = format!("{at}.resources");
        super::scheduling::check_byte_quantities(
            p,
            super::scheduling::byte_entries(&resources_at, &b.resources),
        );
        for (name, q) in &b.resources {
            let path = format!("{at}.resources.{name}");
            if name == "pods" {
                p.push(ConfigProblem::new(
                    &path,
                    "each replica counts as one pod; expected `cpu`, `memory`, `ephemeral-storage` or an extended resource",
                ));
            } else if let Err(why) = check_qualified_name(name) {
                p.push(ConfigProblem::new(
                    &path,
                    format!("invalid resource name `{name}`: {why}; expected e.g. `cpu`, `memory` or `nvidia.com/gpu`"),
                ));
            }
            if q.value() < 0.0 {
                p.push(ConfigProblem::new(
                    &path,
                    format!("got {q:?}; expected a request of 0 or more"),
                ));
            }
        }
        for (key, value) in &b.node_selector {
            let path = format!("{at}.nodeSelector.{key}");
            if let Err(why) = check_qualified_name(key) {
                p.push(ConfigProblem::new(
                    &path,
                    format!("invalid label key `{key}`: {why}"),
                ));
            }
            if !value.is_empty() && !is_label_value(value) {
                p.push(ConfigProblem::new(
                    &path,
                    format!("invalid label value `{value}`; expected at most 63 characters of [A-Za-z0-9._-], starting and ending alphanumeric"),
                ));
            }
        }
        for (j, t) in b.tolerations.iter().enumerate() {
            let path = format!("{at}.tolerations[{j}]");
            let key = t.key.as_deref().unwrap_or("");
            match t.operator {
                TolerationOperator::Exists if t.value.as_deref().is_some_and(|v| !v.is_empty()) => {
                    p.push(ConfigProblem::new(
                        format!("{path}.value"),
                        "operator Exists takes no value; expected no `value` (or `operator: Equal`)",
                    ));
                }
                TolerationOperator::Equal if key.is_empty() => {
                    p.push(ConfigProblem::new(
                        format!("{path}.key"),
                        "missing; operator Equal needs a taint key (or `operator: Exists` to tolerate every taint)",
                    ));
                }
                _ => {}
            }
            if !key.is_empty() {
                if let Err(why) = check_qualified_name(key) {
                    p.push(ConfigProblem::new(
                        format!("{path}.key"),
                        format!("invalid taint key `{key}`: {why}"),
                    ));
                }
            }
        }
        if let Some(s) = &b.schedule {
            let path = format!("{at}.schedule.duration");
            if s.duration.is_zero() {
                p.push(ConfigProblem::new(
                    path,
                    "got 0s; expected how long the buffer is kept after each start, e.g. `10h`",
                ));
            } else if s.duration > Schedule::MAX_DURATION {
                p.push(ConfigProblem::new(
                    path,
                    format!(
                        "got {:.0} days; expected at most 366d (leave out `schedule` to keep the buffer always)",
                        s.duration.as_secs_f64() / 86400.0
                    ),
                ));
            }
        }
    }
}

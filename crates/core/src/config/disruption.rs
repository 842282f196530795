//! Settings for taking capacity away safely: when a node counts as unneeded, how a
//! drain is bounded, how many nodes may be disrupted at once, and the health guards.
//! The names follow Cluster Autoscaler and Karpenter where users know them.

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize};

use super::schedule::{Cron, Schedule, Zone};

/// Why a node is being taken away; budgets can name the reasons they cover.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum DisruptionReason {
    /// Runs nothing that needs it.
    Empty,
    /// Requests below `utilizationThreshold` and its pods fit elsewhere.
    Underutilized,
    /// Its group's settings changed since it was created.
    Drifted,
    /// Older than `oldNodeAgeLimit`.
    Expired,
    /// NotReady past `health.unhealthyAfter`, or its VM in error.
    Unhealthy,
}

impl DisruptionReason {
    pub const ALL: [DisruptionReason; 5] = [
        DisruptionReason::Empty,
        DisruptionReason::Underutilized,
        DisruptionReason::Drifted,
        DisruptionReason::Expired,
        DisruptionReason::Unhealthy,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DisruptionReason::Empty => "empty",
            DisruptionReason::Underutilized => "underutilized",
            DisruptionReason::Drifted => "drifted",
            DisruptionReason::Expired => "expired",
            DisruptionReason::Unhealthy => "unhealthy",
        }
    }

    pub fn parse(s: &str) -> Option<DisruptionReason> {
        DisruptionReason::ALL.into_iter().find(|r| r.as_str() == s)
    }

    /// Removals forced from the start (the node is broken); an expired node's drain is
    /// forced only past `drain.terminationGracePeriod` (see `plan::steps::drain`).
    pub fn forced(self) -> bool {
        matches!(self, DisruptionReason::Unhealthy)
    }
}

/// How many nodes a budget allows: a count, or a percentage of managed nodes
/// (rounded up, as Karpenter does).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub enum BudgetNodes {
    Count(u32),
    Percent(u32),
}

impl BudgetNodes {
    pub fn allowed(self, total: u32) -> u32 {
        match self {
            BudgetNodes::Count(n) => n,
            BudgetNodes::Percent(p) => (u64::from(total) * u64::from(p)).div_ceil(100) as u32,
        }
    }
}

impl<'de> Deserialize<'de> for BudgetNodes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Int(u32),
            Text(String),
        }
        let bad = |s: &str| {
            serde::de::Error::custom(format!(
                "`{s}` is not a node count; expected a whole number (`2`) or a percentage from 0% to 100% (`10%`)"
            ))
        };
        match Raw::deserialize(d)? {
            Raw::Int(n) => Ok(BudgetNodes::Count(n)),
            Raw::Text(s) => match s.trim().strip_suffix('%') {
                Some(p) => match p.trim().parse::<u32>() {
                    Ok(p) if p <= 100 => Ok(BudgetNodes::Percent(p)),
                    _ => Err(bad(&s)),
                },
                None => s
                    .trim()
                    .parse()
                    .map(BudgetNodes::Count)
                    .map_err(|_| bad(&s)),
            },
        }
    }
}

/// At most `nodes` managed nodes disrupted at once for `reasons` (all when empty).
/// As in Karpenter, `schedule` (cron) and `duration` together make the budget apply
/// only in those windows (in `timeZone`, UTC by default); without them it always
/// applies. The strictest active budget wins.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Budget {
    pub nodes: BudgetNodes,
    #[serde(default)]
    pub reasons: Vec<DisruptionReason>,
    #[serde(default)]
    pub schedule: Option<Cron>,
    #[serde(default, with = "humantime_serde")]
    pub duration: Option<Duration>,
    #[serde(default)]
    pub time_zone: Option<Zone>,
}

impl Budget {
    pub fn covers(&self, reason: DisruptionReason) -> bool {
        self.reasons.is_empty() || self.reasons.contains(&reason)
    }

    /// The window this budget applies in, if it has one.
    pub fn window(&self) -> Option<Schedule> {
        Some(Schedule {
            cron: self.schedule.clone()?,
            duration: self.duration?,
            time_zone: self.time_zone.clone().unwrap_or_default(),
        })
    }

    /// Whether the budget applies at `now`.
    pub fn active(&self, now: std::time::SystemTime) -> bool {
        match self.window() {
            Some(w) => w.active(now),
            None => self.schedule.is_none(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DisruptionConfig {
    /// Default: one budget of 10 % of managed nodes for every reason (Karpenter's).
    #[serde(default = "default_budgets")]
    pub budgets: Vec<Budget>,
    /// Replace nodes whose group settings changed since they were created.
    #[serde(default = "default_true")]
    pub drift: bool,
}

impl Default for DisruptionConfig {
    fn default() -> Self {
        DisruptionConfig {
            budgets: default_budgets(),
            drift: true,
        }
    }
}

fn default_budgets() -> Vec<Budget> {
    vec![Budget {
        nodes: BudgetNodes::Percent(10),
        reasons: Vec::new(),
        schedule: None,
        duration: None,
        time_zone: None,
    }]
}

fn default_true() -> bool {
    true
}

/// How a drain is bounded.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DrainConfig {
    /// A voluntary drain not finished by then is abandoned: the node is uncordoned and
    /// its group backs off. Forced removals (unhealthy nodes) go on and delete the node.
    #[serde(default = "default_drain_timeout", with = "humantime_serde")]
    pub timeout: Duration,
    /// Pods owned by a Job are waited for, not evicted, up to this long after the node
    /// was cordoned.
    #[serde(default = "default_job_grace", with = "humantime_serde")]
    pub job_grace_period: Duration,
    /// Hard limit of an expired node's drain (Karpenter's `terminationGracePeriod`):
    /// counted from the cordon, it replaces `timeout` for nodes past `oldNodeAgeLimit`, which
    /// are then drained whatever blocks them and deleted instead of given back, so a pod
    /// that can never be evicted does not keep an old node forever. Unset: no hard limit.
    #[serde(default, with = "humantime_serde")]
    pub termination_grace_period: Option<Duration>,
}

impl Default for DrainConfig {
    fn default() -> Self {
        DrainConfig {
            timeout: default_drain_timeout(),
            job_grace_period: default_job_grace(),
            termination_grace_period: None,
        }
    }
}

fn default_drain_timeout() -> Duration {
    Duration::from_secs(10 * 60)
}
fn default_job_grace() -> Duration {
    Duration::from_secs(60 * 60)
}

/// Guards for unready nodes (Cluster Autoscaler's `max-total-unready-percentage` and
/// `ok-total-unready-count`), and when a NotReady node counts as broken.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HealthConfig {
    #[serde(default = "default_max_unready")]
    pub max_unready_percentage: u32,
    #[serde(default = "default_ok_unready")]
    pub ok_unready_count: u32,
    /// A managed node NotReady this long is replaced.
    #[serde(default = "default_unhealthy_after", with = "humantime_serde")]
    pub unhealthy_after: Duration,
    /// A node NotReady for less than this still counts as capacity (a blip does not
    /// trigger a scale-up).
    #[serde(default = "default_not_ready_grace", with = "humantime_serde")]
    pub not_ready_grace: Duration,
}

impl Default for HealthConfig {
    fn default() -> Self {
        HealthConfig {
            max_unready_percentage: default_max_unready(),
            ok_unready_count: default_ok_unready(),
            unhealthy_after: default_unhealthy_after(),
            not_ready_grace: default_not_ready_grace(),
        }
    }
}

fn default_max_unready() -> u32 {
    45
}
fn default_ok_unready() -> u32 {
    3
}
fn default_unhealthy_after() -> Duration {
    Duration::from_secs(15 * 60)
}
fn default_not_ready_grace() -> Duration {
    Duration::from_secs(2 * 60)
}

//! `autoscaler.yaml`: raw serde types, then validation into a [`Config`] the rest of the
//! program can trust. Every error names the field path, the bad value and what is expected.

mod blocks;
mod buffers;
mod disruption;
pub(crate) mod error;
pub mod hash;
pub mod labels;
mod locate;
mod names;
mod pools;
pub mod reload;
mod schedule;
mod scheduling;
mod sizes;
mod timings;
mod validate;
mod variables;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::model::{Bytes, Quantity};
use crate::userdata::UserDataConfig;

pub use crate::cloud::registry::{ProviderBlocks, ProviderKind, ProviderSettings};
pub use buffers::{BufferConfig, TolerationConfig, TolerationOperator};

pub use disruption::{
    Budget, BudgetNodes, DisruptionConfig, DisruptionReason, DrainConfig, HealthConfig,
};
pub use error::{ConfigError, ConfigProblem};
pub use pools::{ScaleDownMode, UnreachableData, WarmPoolConfig};
pub use schedule::{Cron, Schedule, Zone};
pub use scheduling::{ExpanderConfig, ExpanderKind, LimitsConfig, ReservedConfig, ResourceMap};

/// Environment variable naming the config file.
pub const ENV_CONFIG_FILE: &str = "AUTOSCALER_CONFIG_FILE";
/// Environment variable naming the kubeconfig; falls back to `KUBECONFIG`, then in-cluster.
pub const ENV_KUBECONFIG_FILE: &str = "KUBECONFIG_FILE";

/// The whole autoscaler configuration, validated.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    /// Names this cluster in node labels and cloud tags; part of every VM name.
    pub cluster_name: String,
    /// Scale up when free memory on schedulable managed nodes falls below this.
    pub free_memory_target: Bytes,
    /// Scale up when no managed node has at least this much free memory.
    #[serde(default)]
    pub minimum_free_node_memory: Bytes,
    /// Scale up when free CPU on schedulable managed nodes falls below this (cores).
    #[serde(default)]
    pub free_cpu_target: Option<Quantity>,
    /// Scale up when no managed node has at least this much free CPU.
    #[serde(default)]
    pub minimum_free_node_cpu: Option<Quantity>,
    /// How scale-up picks a group among those that could host the pending pods.
    #[serde(default)]
    pub expander: ExpanderConfig,
    /// Ceilings over all managed nodes together.
    #[serde(default)]
    pub limits: LimitsConfig,
    /// Capacity buffers: N pods of a shape kept schedulable, always or on a schedule.
    #[serde(default)]
    pub buffers: Vec<BufferConfig>,
    /// A pod the scheduler calls Unschedulable while the model says it fits an existing
    /// node is reported as a mismatch; after this long it gets a node anyway.
    #[serde(
        default = "scheduling::default_mismatch_grace",
        with = "humantime_serde"
    )]
    pub model_mismatch_grace: Duration,
    /// Replace managed nodes older than this; absent means never.
    #[serde(default, with = "humantime_serde")]
    pub old_node_age_limit: Option<Duration>,
    /// A VM whose node is not Ready this long after creation is deleted.
    #[serde(default = "default_provision_timeout", with = "humantime_serde")]
    pub provision_timeout: Duration,
    /// Hard ceiling of the task-aware deadline: a provisioning task that keeps making
    /// progress (a Proxmox clone whose log grows) runs past `provisionTimeout` up to
    /// this; a stuck one is still given up at `provisionTimeout`. Absent: 3 × that.
    #[serde(default, with = "humantime_serde")]
    pub provision_timeout_max: Option<Duration>,
    /// How long a provisioning task may go without progress (a Proxmox clone whose log
    /// does not grow) before it is called stuck once past `provisionTimeout`. Absent:
    /// 2 minutes, or `provisionTimeout` when that is shorter.
    #[serde(default, with = "humantime_serde")]
    pub provision_progress_window: Option<Duration>,
    /// Pause between cycles.
    #[serde(default = "default_scan_interval", with = "humantime_serde")]
    pub scan_interval: Duration,
    /// A wake-up (a pod becoming Unschedulable, a node becoming Ready, cordoned or
    /// deleted) starts a cycle once no further wake-up came for this long...
    #[serde(default = "default_batch_idle", with = "humantime_serde")]
    pub batch_idle_duration: Duration,
    /// ...or this long after the first one, so a burst of pods is planned in one go.
    #[serde(default = "default_batch_max", with = "humantime_serde")]
    pub batch_max_duration: Duration,
    /// Directory holding user-data templates; relative paths are relative to the config file.
    #[serde(default = "default_templates_dir")]
    pub templates_dir: PathBuf,
    #[serde(default)]
    pub image_puller: ImagePullerConfig,
    #[serde(default)]
    pub scale_down: ScaleDownConfig,
    /// How drains are bounded.
    #[serde(default)]
    pub drain: DrainConfig,
    /// Disruption budgets and drift replacement.
    #[serde(default)]
    pub disruption: DisruptionConfig,
    /// Unready guards and when a NotReady node counts as broken.
    #[serde(default)]
    pub health: HealthConfig,
    /// After a failed VM create (or a VM that failed to provision), its group is left
    /// alone for `initial`, doubling per further failure up to `max`, so a cloud that
    /// refuses (quota, no valid host) never sees a loop of creates.
    #[serde(default)]
    pub scale_up_backoff: BackoffConfig,
    pub node_groups: Vec<NodeGroupConfig>,
    /// What loads but is likely a mistake (timings that make nodewright work badly, a
    /// variable the template never reads);
    /// `check` prints them, `run` logs them when the config comes into force.
    #[serde(skip)]
    pub warnings: Vec<ConfigProblem>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BackoffConfig {
    #[serde(default = "default_backoff_initial", with = "humantime_serde")]
    pub initial: Duration,
    #[serde(default = "default_backoff_max", with = "humantime_serde")]
    pub max: Duration,
}

impl Default for BackoffConfig {
    fn default() -> Self {
        BackoffConfig {
            initial: default_backoff_initial(),
            max: default_backoff_max(),
        }
    }
}

impl BackoffConfig {
    /// The pause after the `failures`-th failure in a row.
    pub fn after(&self, failures: u32) -> Duration {
        let factor = 1u32 << failures.saturating_sub(1).min(16);
        self.initial.saturating_mul(factor).min(self.max)
    }
}

/// Removing nodes that are not needed (their pods fit elsewhere and free memory stays at
/// target without them).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ScaleDownConfig {
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// No scale-down until the newest node is this old, so a scale-up is not undone
    /// before its pods arrive (like Cluster Autoscaler's scale-down-delay-after-add).
    #[serde(default = "default_scale_down_delay", with = "humantime_serde")]
    pub delay_after_add: Duration,
    /// No scale-down this long after a node was deleted.
    #[serde(default, with = "humantime_serde")]
    pub delay_after_delete: Duration,
    /// No scale-down this long after a drain was abandoned or a removal failed.
    #[serde(default = "default_delay_after_failure", with = "humantime_serde")]
    pub delay_after_failure: Duration,
    /// A node is a candidate only while its pods request less than this share of its
    /// allocatable CPU and memory (the larger of the two counts).
    #[serde(default = "default_utilization_threshold")]
    pub utilization_threshold: f64,
    /// How long a node must stay unneeded before it is removed; the clock is kept in
    /// a node annotation, so a restart keeps it.
    #[serde(default = "default_unneeded_time", with = "humantime_serde")]
    pub unneeded_time: Duration,
    /// What happens to the VM of a removed node: deleted, or stopped into its group's
    /// warm pool.
    #[serde(default)]
    pub mode: ScaleDownMode,
}

impl Default for ScaleDownConfig {
    fn default() -> Self {
        ScaleDownConfig {
            enabled: true,
            delay_after_add: default_scale_down_delay(),
            delay_after_delete: Duration::ZERO,
            delay_after_failure: default_delay_after_failure(),
            utilization_threshold: default_utilization_threshold(),
            unneeded_time: default_unneeded_time(),
            mode: ScaleDownMode::Delete,
        }
    }
}

fn default_delay_after_failure() -> Duration {
    Duration::from_secs(3 * 60)
}
fn default_utilization_threshold() -> f64 {
    0.5
}
fn default_unneeded_time() -> Duration {
    Duration::from_secs(10 * 60)
}

/// Image cache warming.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ImagePullerConfig {
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// Image prefixes never pulled ahead of time (e.g. `docker.io/library/busybox`).
    #[serde(default)]
    pub ignore: Vec<String>,
    /// Namespace for the short-lived puller pods: by default nodewright's own
    /// (`POD_NAMESPACE`, set by the Deployment from the downward API; else `nodewright`),
    /// where its Role allows pod create and delete and nothing else.
    #[serde(default = "default_puller_namespace")]
    pub namespace: String,
}

impl Default for ImagePullerConfig {
    fn default() -> Self {
        ImagePullerConfig {
            enabled: true,
            ignore: Vec::new(),
            namespace: default_puller_namespace(),
        }
    }
}

/// One set of identical VMs. Deserialized through `config/blocks.rs`: the keys named after a
/// provider of [`crate::cloud::registry`] are its settings block, the rest these fields.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(remote = "Self", rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeGroupConfig {
    pub name: String,
    pub provider: ProviderKind,
    #[serde(default)]
    pub min_size: u32,
    pub max_size: u32,
    /// Memory of one node of this group, used to size scale-ups before any of its nodes
    /// exists; when absent the provider's flavor size is used.
    #[serde(default)]
    pub node_memory: Option<Bytes>,
    /// Capacity of one node per resource (`cpu`, `memory`, `pods`, `ephemeral-storage`,
    /// `nvidia.com/gpu`, ...) where the provider cannot tell it or should be overridden.
    #[serde(default)]
    pub resources: ResourceMap,
    /// What a node keeps for the system, taken off the flavor before any node exists.
    #[serde(default)]
    pub reserved: ReservedConfig,
    /// Pods per node (kubelet `maxPods`).
    #[serde(default = "scheduling::default_max_pods")]
    pub max_pods: u32,
    /// CPU architecture of the image (`kubernetes.io/arch`).
    #[serde(default = "scheduling::default_arch")]
    pub arch: String,
    /// Hourly price of one node, for the `price` expander and cost reports.
    #[serde(default)]
    pub price: Option<f64>,
    /// The provider blocks written (`openstack:`, `proxmox:`, ...): after validation,
    /// exactly the one of `provider`.
    #[serde(skip)]
    pub settings: ProviderBlocks,
    /// Stopped VMs kept ready; a scale-up starts one instead of creating.
    #[serde(default)]
    pub warm_pool: Option<WarmPoolConfig>,
    pub user_data: UserDataConfig,
    /// Extra node labels, rendered into user data.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Extra node taints, rendered into user data.
    #[serde(default)]
    pub taints: Vec<TaintConfig>,
    /// The data of this group's node-local volumes (`local-path`, `local` PVs) may be
    /// lost: expiry and drift replace a node even when a pod keeps data on one, a volume
    /// no pod uses pins nothing, and a NotReady node is replaced with its data. Off by
    /// default: such volumes pin their node (scale-down never takes a node whose pod
    /// keeps data on one either way).
    #[serde(default)]
    pub allow_local_volume_loss: bool,
    /// What happens to the VM of a node NotReady for `health.unhealthyAfter` whose
    /// node-local volumes no other node can reach: it is never deleted nor replaced for
    /// it; `stop` also stops it (once per NotReady spell) so it cannot go on writing
    /// out of sight, `keep` (the default) leaves it as it is.
    #[serde(default)]
    pub unreachable_with_local_data: UnreachableData,
    /// Nodes follow the API server's version: one whose kubelet is older than the server
    /// (or than the group's pinned `k3s_version` / `kubernetes_version`, when older) has
    /// drifted and is replaced within the budgets, so upgrading the control plane rolls
    /// the workers. On by default; not part of the settings hash.
    #[serde(default = "yes")]
    pub follow_control_plane_version: bool,
    /// The group's template reads the server's version (`kube_version` or
    /// `server_version`), so a new node gets it: only then is an older node drifted for
    /// its version (a template that installs a fixed one would replace its nodes for
    /// ever). Worked out when the config is read.
    #[serde(skip)]
    pub template_reads_server_version: bool,
    /// Hash of what a node of this group is made from (see [`hash`]); computed when the
    /// config is read.
    #[serde(skip)]
    pub settings_hash: String,
    /// The hashes earlier releases gave the same settings (see [`Self::hash_is_current`]).
    #[serde(skip)]
    pub legacy_settings_hashes: Vec<String>,
    /// A group of several sizes: each size with the settings hash of the group written
    /// with that size alone, the hash a VM of that size is stamped with (so a node of an
    /// allowed size is not drifted, and one made when the group had that size alone is
    /// not either). Empty for a group of one size.
    #[serde(skip)]
    pub size_hashes: Vec<(String, String)>,
}

/// The user-data variables that pin the version a template installs (the shipped k3s
/// and kubeadm templates read them; without one they install the API server's).
pub const PINNED_VERSION_VARIABLES: [&str; 2] = ["k3s_version", "kubernetes_version"];

/// `true`, for serde defaults.
fn yes() -> bool {
    true
}

impl NodeGroupConfig {
    /// The setting that makes the VM run the group's rendered user data as a shell
    /// script (not hand it to cloud-init or Ignition), if any: such a group needs a
    /// template that renders a `#!` script.
    pub fn runs_user_data_as_script(&self) -> Option<&'static str> {
        self.settings
            .iter()
            .find_map(|s| s.as_settings().runs_user_data_as_script())
    }

    /// The group's provider block (validation guarantees it).
    pub fn provider_settings(&self) -> Option<&ProviderSettings> {
        self.settings.get(self.provider)
    }

    /// The Kubernetes version the group pins through its `k3s_version` or
    /// `kubernetes_version` variable, as (variable, value), if it sets one.
    pub fn pinned_version(&self) -> Option<(&'static str, &str)> {
        PINNED_VERSION_VARIABLES.iter().find_map(|name| {
            self.user_data
                .variables
                .get(*name)
                .and_then(|v| v.as_str())
                .map(|v| (*name, v))
        })
    }

    /// Size of the group's warm pool (0: none).
    pub fn warm_pool_size(&self) -> u32 {
        self.warm_pool.as_ref().map_or(0, |w| w.size)
    }

    /// Whether `hash` (from a node's label or its VM) is the group's current one: the
    /// settings hash, or one the releases before it stamped for the same settings
    /// (see [`hash::legacy_settings_hashes`]).
    pub fn hash_is_current(&self, hash: &str) -> bool {
        hash == self.settings_hash
            || self.legacy_settings_hashes.iter().any(|h| h == hash)
            || self.size_hashes.iter().any(|(_, h)| h == hash)
    }

    /// The sizes a scale-up chooses among, the default first; empty for a group of one
    /// size (see [`crate::model::sizes`]).
    pub fn sizes(&self) -> Vec<String> {
        let sizes = self
            .provider_settings()
            .map(|s| s.as_settings().sizes())
            .unwrap_or_default();
        if sizes.len() > 1 {
            sizes
        } else {
            Vec::new()
        }
    }

    /// The size of a VM of this group of several sizes: its size mark when it names one
    /// of them, else the size its settings hash is of, else the default (first). `None`
    /// for a group of one size.
    pub fn size_of_vm(&self, mark: Option<&str>, hash: Option<&str>) -> Option<&str> {
        let (first, _) = self.size_hashes.first()?;
        let by_mark = mark.and_then(|m| self.size_hashes.iter().find(|(n, _)| n == m));
        let by_hash = || hash.and_then(|h| self.size_hashes.iter().find(|(_, x)| x == h));
        Some(
            by_mark
                .or_else(by_hash)
                .map_or(first.as_str(), |(n, _)| n.as_str()),
        )
    }

    /// The settings hash a VM of size `size` is stamped with: the group's own for a group
    /// of one size (or no size named).
    pub fn hash_of_size(&self, size: Option<&str>) -> &str {
        size.and_then(|s| self.size_hashes.iter().find(|(n, _)| n == s))
            .map_or(self.settings_hash.as_str(), |(_, h)| h.as_str())
    }

    /// What a new node is made from, hashed (see [`hash`]): a node labelled with another
    /// hash has drifted. Secrets from `variableFiles` are left out, so rotating a token
    /// does not replace every node.
    fn compute_settings_hashes(&mut self, templates_dir: &Path) {
        let template =
            std::fs::read(templates_dir.join(&self.user_data.template)).unwrap_or_default();
        self.settings_hash = hash::settings_hash(self, &template);
        self.legacy_settings_hashes = hash::legacy_settings_hashes(self, &template);
        self.template_reads_server_version =
            crate::userdata::reads_server_version(templates_dir, &self.user_data.template);
        self.size_hashes.clear();
        let sizes = self.sizes();
        let Some(block) = self.provider_settings().cloned() else {
            return;
        };
        // Each size hashes as the group written with that size alone; the first is the
        // group's own hash (what a VM no scale-up chose a size for is made as).
        for (i, size) in sizes.iter().enumerate() {
            let Some(one) = block.as_settings().with_size(size) else {
                continue;
            };
            let mut alone = self.clone();
            alone.settings = self.settings.replaced(one);
            let h = hash::settings_hash(&alone, &template);
            if i == 0 {
                self.settings_hash = h.clone();
                self.legacy_settings_hashes.clear();
            }
            self.legacy_settings_hashes
                .extend(hash::legacy_settings_hashes(&alone, &template));
            self.size_hashes.push((size.clone(), h));
        }
    }
}

/// A taint as written in config.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TaintConfig {
    pub key: String,
    #[serde(default)]
    pub value: String,
    pub effect: TaintEffect,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
pub enum TaintEffect {
    NoSchedule,
    PreferNoSchedule,
    NoExecute,
}

impl TaintEffect {
    pub fn as_str(self) -> &'static str {
        match self {
            TaintEffect::NoSchedule => "NoSchedule",
            TaintEffect::PreferNoSchedule => "PreferNoSchedule",
            TaintEffect::NoExecute => "NoExecute",
        }
    }
}

impl TaintConfig {
    /// `key=value:Effect`, the form kubelet and k3s flags take.
    pub fn to_flag(&self) -> String {
        if self.value.is_empty() {
            format!("{}:{}", self.key, self.effect.as_str())
        } else {
            format!("{}={}:{}", self.key, self.value, self.effect.as_str())
        }
    }
}

impl Config {
    /// [`Config::provision_timeout_max`], or three times `provisionTimeout` when unset.
    pub fn provision_deadline_max(&self) -> Duration {
        self.provision_timeout_max
            .unwrap_or(self.provision_timeout.saturating_mul(3))
    }

    /// [`Config::provision_progress_window`], or 2 minutes (at most `provisionTimeout`)
    /// when unset: a copying clone writes a log line every few seconds.
    pub fn provision_stall(&self) -> Duration {
        self.provision_progress_window
            .unwrap_or(DEFAULT_PROGRESS_WINDOW.min(self.provision_timeout))
    }
}

const DEFAULT_PROGRESS_WINDOW: Duration = Duration::from_secs(120);

fn default_provision_timeout() -> Duration {
    Duration::from_secs(15 * 60)
}
fn default_backoff_initial() -> Duration {
    Duration::from_secs(30)
}
fn default_backoff_max() -> Duration {
    Duration::from_secs(10 * 60)
}
fn default_scale_down_delay() -> Duration {
    Duration::from_secs(10 * 60)
}
fn default_scan_interval() -> Duration {
    Duration::from_secs(30)
}
fn default_batch_idle() -> Duration {
    Duration::from_secs(1)
}
fn default_batch_max() -> Duration {
    Duration::from_secs(10)
}
fn default_templates_dir() -> PathBuf {
    PathBuf::from("templates")
}
/// The environment variable the Deployment sets to the pod's namespace.
pub const ENV_POD_NAMESPACE: &str = "POD_NAMESPACE";
/// The puller namespace when `POD_NAMESPACE` is not set (the shipped namespace).
pub const DEFAULT_NAMESPACE: &str = "nodewright";

fn default_puller_namespace() -> String {
    std::env::var(ENV_POD_NAMESPACE)
        .ok()
        .filter(|n| !n.trim().is_empty())
        .unwrap_or_else(|| DEFAULT_NAMESPACE.to_string())
}
fn default_true() -> bool {
    true
}

impl Config {
    /// Reads, parses and validates the file at `path`; relative `templatesDir` is resolved
    /// against the file's directory.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Read {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        let base = path.parent().unwrap_or_else(|| Path::new("."));
        Config::parse(&text, base).map_err(|e| e.in_file(path))
    }

    /// Logs [`Config::warnings`], for a config coming into force.
    pub fn log_warnings(&self) {
        for w in &self.warnings {
            tracing::warn!("config: {w}");
        }
    }

    /// Parses and validates YAML text; `base_dir` anchors a relative `templatesDir`.
    pub fn parse(text: &str, base_dir: &Path) -> Result<Config, ConfigError> {
        let mut config: Config =
            crate::yaml::from_str_with_path(text).map_err(|e| ConfigError::from_yaml(e, text))?;
        if config.templates_dir.is_relative() {
            config.templates_dir = base_dir.join(&config.templates_dir);
        }
        for g in &mut config.node_groups {
            for path in g.user_data.variable_files.values_mut() {
                if path.is_relative() {
                    *path = base_dir.join(&*path);
                }
            }
        }
        let mut problems = validate::validate(&config);
        config.warnings = timings::timing_warnings(&config);
        config.warnings.extend(
            variables::unused_variables(&config)
                .into_iter()
                .filter(|u| !u.likely_typo)
                .map(|u| u.problem),
        );
        for p in problems.iter_mut().chain(&mut config.warnings) {
            if p.line.is_none() {
                p.line = locate::key_line(text, &p.path);
            }
        }
        if problems.is_empty() {
            let dir = config.templates_dir.clone();
            for g in &mut config.node_groups {
                g.compute_settings_hashes(&dir);
            }
            Ok(config)
        } else {
            Err(ConfigError::Invalid {
                file: None,
                problems,
            })
        }
    }

    pub fn group(&self, name: &str) -> Option<&NodeGroupConfig> {
        self.node_groups.iter().find(|g| g.name == name)
    }
}

//! Prometheus metrics (OpenMetrics text on `/metrics`). One registry per process.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::model::{Bucket, KeptReason};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ActionLabels {
    pub action: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GroupLabels {
    pub group: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodeStateLabels {
    pub group: String,
    pub state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FailedCreateLabels {
    pub group: String,
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CloudCallLabels {
    pub provider: String,
    pub call: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BucketLabels {
    pub bucket: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KeptLabels {
    /// See [`KeptReason::as_str`].
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ApiErrorLabels {
    /// `kubernetes` or the provider (`openstack`, `proxmox`, `kamatera`).
    pub api: String,
    /// See [`ErrorKind`].
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ApiLabels {
    pub api: String,
}

/// What kind of failure an API call met, for `nodewright_api_errors`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// HTTP 5xx.
    ServerError,
    /// HTTP 429.
    RateLimited,
    /// HTTP 409.
    Conflict,
    /// No answer in time.
    Timeout,
    /// The connection failed or dropped.
    Transport,
    /// Credentials refused.
    Auth,
    /// Any other refusal (4xx) or unexpected answer.
    Other,
}

impl ErrorKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::ServerError => "server-error",
            ErrorKind::RateLimited => "rate-limited",
            ErrorKind::Conflict => "conflict",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Transport => "transport",
            ErrorKind::Auth => "auth",
            ErrorKind::Other => "other",
        }
    }

    /// The kind of an HTTP status that is an error, `None` for success.
    pub fn of_status(status: u16) -> Option<ErrorKind> {
        match status {
            200..=399 => None,
            401 | 403 => Some(ErrorKind::Auth),
            409 => Some(ErrorKind::Conflict),
            429 => Some(ErrorKind::RateLimited),
            500..=599 => Some(ErrorKind::ServerError),
            _ => Some(ErrorKind::Other),
        }
    }
}

/// Process-wide, because the HTTP clients that see the errors and the Retry-After
/// answers are built before and apart from the [`Metrics`] of the loop; every `Metrics`
/// registers the same families.
fn api_errors() -> &'static Family<ApiErrorLabels, Counter> {
    static F: OnceLock<Family<ApiErrorLabels, Counter>> = OnceLock::new();
    F.get_or_init(Family::default)
}

fn retry_after_waits() -> &'static Family<ApiLabels, Counter> {
    static F: OnceLock<Family<ApiLabels, Counter>> = OnceLock::new();
    F.get_or_init(Family::default)
}

/// Counts one failed call to `api` in `nodewright_api_errors`.
pub fn api_error(api: &str, kind: ErrorKind) {
    api_errors()
        .get_or_create(&ApiErrorLabels {
            api: api.to_string(),
            kind: kind.as_str().to_string(),
        })
        .inc();
}

/// Counts one call to `api` held back to honour a Retry-After.
pub fn retry_after_wait(api: &str) {
    retry_after_waits()
        .get_or_create(&ApiLabels {
            api: api.to_string(),
        })
        .inc();
}

fn cloud_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.005, 2.0, 14))
}

pub struct Metrics {
    registry: Registry,
    pub cycle_duration: Histogram,
    pub last_success: Gauge<f64, AtomicU64>,
    pub actions: Family<ActionLabels, Counter>,
    pub nodes: Family<NodeStateLabels, Gauge>,
    pub unschedulable_pods: Gauge,
    pub pending_pods: Family<BucketLabels, Gauge>,
    pub unremovable_nodes: Family<KeptLabels, Gauge>,
    pub unknown_group_vms: Gauge,
    pub free_memory: Gauge,
    pub free_memory_target: Gauge,
    pub scale_ups: Family<GroupLabels, Counter>,
    pub scale_downs: Family<GroupLabels, Counter>,
    pub failed_creates: Family<FailedCreateLabels, Counter>,
    pub cloud_latency: Family<CloudCallLabels, Histogram, fn() -> Histogram>,
    pub cloud_errors: Family<CloudCallLabels, Counter>,
    pub evictions: Family<ResultLabels, Counter>,
    pub leader: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::default();
        let m = Metrics {
            cycle_duration: Histogram::new(exponential_buckets(0.01, 2.0, 14)),
            last_success: Gauge::default(),
            actions: Family::default(),
            nodes: Family::default(),
            unschedulable_pods: Gauge::default(),
            pending_pods: Family::default(),
            unremovable_nodes: Family::default(),
            unknown_group_vms: Gauge::default(),
            free_memory: Gauge::default(),
            free_memory_target: Gauge::default(),
            scale_ups: Family::default(),
            scale_downs: Family::default(),
            failed_creates: Family::default(),
            cloud_latency: Family::new_with_constructor(cloud_histogram),
            cloud_errors: Family::default(),
            evictions: Family::default(),
            leader: Gauge::default(),
            registry: Registry::default(),
        };
        let r = &mut registry;
        r.register(
            "nodewright_cycle_duration_seconds",
            "Duration of one observe-decide-act cycle",
            m.cycle_duration.clone(),
        );
        r.register(
            "nodewright_last_successful_cycle_timestamp_seconds",
            "Unix time of the last cycle that completed without error",
            m.last_success.clone(),
        );
        r.register(
            "nodewright_actions",
            "Actions taken, by type",
            m.actions.clone(),
        );
        r.register(
            "nodewright_nodes",
            "Managed nodes by group and state (disowned and copied: VMs with this cluster's marks left alone)",
            m.nodes.clone(),
        );
        r.register(
            "nodewright_unschedulable_pods",
            "Pods the scheduler marked Unschedulable",
            m.unschedulable_pods.clone(),
        );
        r.register(
            "nodewright_pending_pods",
            "Pods the scheduler could not place, by where they stand: will-schedule, capacity-coming, scaling-up or no-capacity",
            m.pending_pods.clone(),
        );
        r.register(
            "nodewright_unremovable_nodes",
            "Managed nodes scale-down keeps, by reason (e.g. blocked-by-pod, not-underutilized, unneeded-too-short; see docs)",
            m.unremovable_nodes.clone(),
        );
        r.register(
            "nodewright_unknown_group_vms",
            "VMs tagged with this cluster whose group the config does not have (removed or renamed); never touched, see the plan's notes",
            m.unknown_group_vms.clone(),
        );
        r.register(
            "nodewright_free_memory_bytes",
            "Free memory on schedulable managed nodes minus unschedulable pods' requests",
            m.free_memory.clone(),
        );
        r.register(
            "nodewright_free_memory_target_bytes",
            "The configured freeMemoryTarget",
            m.free_memory_target.clone(),
        );
        r.register(
            "nodewright_scale_ups",
            "VMs created, by group",
            m.scale_ups.clone(),
        );
        r.register(
            "nodewright_scale_downs",
            "VMs deleted, by group",
            m.scale_downs.clone(),
        );
        r.register(
            "nodewright_failed_creates",
            "VM creations that failed, by group and reason",
            m.failed_creates.clone(),
        );
        r.register(
            "nodewright_cloud_api_duration_seconds",
            "Cloud API call latency by provider and call",
            m.cloud_latency.clone(),
        );
        r.register(
            "nodewright_cloud_api_errors",
            "Cloud API call errors by provider and call",
            m.cloud_errors.clone(),
        );
        r.register(
            "nodewright_api_errors",
            "Failed Kubernetes and cloud API calls by API and kind: server-error (5xx), rate-limited (429), conflict (409), timeout, transport, auth, other",
            api_errors().clone(),
        );
        r.register(
            "nodewright_retry_after_waits",
            "Calls held back to honour a server's Retry-After, by API",
            retry_after_waits().clone(),
        );
        r.register(
            "nodewright_evictions",
            "Pod evictions by result",
            m.evictions.clone(),
        );
        r.register(
            "nodewright_leader",
            "1 while this replica holds the leader lease",
            m.leader.clone(),
        );
        // Every bucket is present from the start, so a dashboard never sees a gap.
        m.set_pending(&BTreeMap::new());
        m.set_unremovable(&BTreeMap::new());
        Metrics { registry, ..m }
    }

    /// Sets `nodewright_unremovable_nodes` for every reason; reasons missing from
    /// `counts` are zero, so a node no longer kept leaves no stale count behind.
    pub fn set_unremovable(&self, counts: &BTreeMap<KeptReason, usize>) {
        for r in KeptReason::ALL {
            let n = counts.get(&r).copied().unwrap_or(0);
            self.unremovable_nodes
                .get_or_create(&KeptLabels {
                    reason: r.as_str().to_string(),
                })
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }

    /// Sets `nodewright_pending_pods` for every bucket; buckets missing from `counts`
    /// are zero.
    pub fn set_pending(&self, counts: &BTreeMap<Bucket, usize>) {
        for b in Bucket::ALL {
            let n = counts.get(&b).copied().unwrap_or(0);
            self.pending_pods
                .get_or_create(&BucketLabels {
                    bucket: b.as_str().to_string(),
                })
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }

    /// The registry in OpenMetrics text.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    pub fn record_success(&self, took: Duration) {
        self.cycle_duration.observe(took.as_secs_f64());
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        self.last_success.set(now);
    }

    pub fn cloud_call(&self, provider: &str, call: &str, took: Duration, ok: bool) {
        let labels = CloudCallLabels {
            provider: provider.to_string(),
            call: call.to_string(),
        };
        self.cloud_latency
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
        if !ok {
            self.cloud_errors.get_or_create(&labels).inc();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unremovable_nodes_has_every_reason_and_goes_back_to_zero() {
        let m = Metrics::new();
        for r in KeptReason::ALL {
            let line = format!(
                "nodewright_unremovable_nodes{{reason=\"{}\"}} 0",
                r.as_str()
            );
            assert!(m.encode().contains(&line), "{line}");
        }
        m.set_unremovable(&BTreeMap::from([(KeptReason::BlockedByPod, 2)]));
        assert!(m
            .encode()
            .contains("nodewright_unremovable_nodes{reason=\"blocked-by-pod\"} 2"));
        m.set_unremovable(&BTreeMap::new());
        assert!(m
            .encode()
            .contains("nodewright_unremovable_nodes{reason=\"blocked-by-pod\"} 0"));
    }

    #[test]
    fn pending_pods_has_every_bucket_zero_when_empty() {
        let m = Metrics::new();
        let text = m.encode();
        for b in Bucket::ALL {
            let line = format!("nodewright_pending_pods{{bucket=\"{}\"}} 0", b.as_str());
            assert!(text.contains(&line), "{line} missing:\n{text}");
        }
        m.set_pending(&BTreeMap::from([
            (Bucket::NoCapacity, 3),
            (Bucket::ScalingUp, 2),
        ]));
        let text = m.encode();
        assert!(
            text.contains("nodewright_pending_pods{bucket=\"no-capacity\"} 3"),
            "{text}"
        );
        assert!(
            text.contains("nodewright_pending_pods{bucket=\"scaling-up\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("nodewright_pending_pods{bucket=\"will-schedule\"} 0"),
            "{text}"
        );
        // A bucket that empties goes back to zero.
        m.set_pending(&BTreeMap::new());
        assert!(m
            .encode()
            .contains("nodewright_pending_pods{bucket=\"no-capacity\"} 0"));
    }
}

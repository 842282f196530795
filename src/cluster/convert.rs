//! Kubernetes objects → the planner's plain model. Pure functions, so odd objects
//! (no owner, no requests, unparsable quantities) are handled in one tested place.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::{Container, Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::plan::{normalize_image, NodeInfo, PdbInfo, PodInfo, PodPhase, Taint, Toleration};

pub fn time_to_system(t: &Time) -> SystemTime {
    let secs = t.0.as_second();
    let nanos = t.0.subsec_nanosecond().max(0) as u32;
    if secs >= 0 {
        UNIX_EPOCH + Duration::new(secs as u64, nanos)
    } else {
        UNIX_EPOCH
    }
}

/// Parses a Kubernetes quantity (`512Mi`, `1G`, `1.5Gi`, `129e6`, `100m`) into a whole
/// number of units, rounding up as the API server does for byte values.
pub fn parse_quantity(q: &str) -> Option<u64> {
    quantity_value(q).map(|v| v.ceil() as u64)
}

/// The value of a Kubernetes quantity in units (`100m` is 0.1), with decimal (`n` to
/// `E`), binary (`Ki` to `Ei`) and exponent (`129e6`) forms; `None` when it is malformed,
/// negative or not finite.
pub fn quantity_value(q: &str) -> Option<f64> {
    let q = q.trim();
    let split = q
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(q.len());
    let (num, suffix) = q.split_at(split);
    let (num, suffix) = match suffix.strip_prefix(['e', 'E']) {
        Some(exp)
            if !exp.is_empty()
                && exp
                    .chars()
                    .all(|c| c.is_ascii_digit() || c == '-' || c == '+') =>
        {
            let e: i32 = exp.parse().ok()?;
            (num.parse::<f64>().ok()? * 10f64.powi(e), "")
        }
        _ => (num.parse::<f64>().ok()?, suffix),
    };
    let factor: f64 = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        _ => return None,
    };
    let v = num * factor;
    if !v.is_finite() || v < 0.0 {
        return None;
    }
    Some(v)
}

fn memory_request(c: &Container) -> u64 {
    c.resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("memory"))
        .and_then(|q| parse_quantity(&q.0))
        .unwrap_or(0)
}

fn labels(m: &Option<BTreeMap<String, String>>) -> BTreeMap<String, String> {
    m.clone().unwrap_or_default()
}

pub fn node_info(n: &Node) -> Option<NodeInfo> {
    let name = n.metadata.name.clone()?;
    let spec = n.spec.as_ref();
    let status = n.status.as_ref();
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    let taints = spec
        .and_then(|s| s.taints.as_ref())
        .map(|ts| {
            ts.iter()
                .map(|t| Taint {
                    key: t.key.clone(),
                    value: t.value.clone(),
                    effect: t.effect.clone(),
                })
                .collect()
        })
        .unwrap_or_default();
    let allocatable_memory = status
        .and_then(|s| s.allocatable.as_ref())
        .and_then(|a| a.get("memory"))
        .and_then(|q| parse_quantity(&q.0))
        .unwrap_or(0);
    let images = status
        .and_then(|s| s.images.as_ref())
        .map(|imgs| {
            imgs.iter()
                .flat_map(|i| i.names.iter().flatten())
                .map(|n| normalize_image(n))
                .collect()
        })
        .unwrap_or_default();
    Some(NodeInfo {
        name,
        labels: labels(&n.metadata.labels),
        annotations: labels(&n.metadata.annotations),
        created: n
            .metadata
            .creation_timestamp
            .as_ref()
            .map(time_to_system)
            .unwrap_or(UNIX_EPOCH),
        unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
        ready,
        taints,
        allocatable_memory,
        images,
        deleting: n.metadata.deletion_timestamp.is_some(),
    })
}

pub fn pod_info(p: &Pod) -> Option<PodInfo> {
    let name = p.metadata.name.clone()?;
    let spec = p.spec.as_ref();
    let status = p.status.as_ref();
    let phase = match status.and_then(|s| s.phase.as_deref()) {
        Some("Running") => PodPhase::Running,
        Some("Succeeded") => PodPhase::Succeeded,
        Some("Failed") => PodPhase::Failed,
        Some("Pending") | None => PodPhase::Pending,
        Some(_) => PodPhase::Unknown,
    };
    // The scheduler reserves the larger of the containers' sum and the biggest init container.
    let memory_request = spec
        .map(|s| {
            let main: u64 = s.containers.iter().map(memory_request).sum();
            let init = s
                .init_containers
                .iter()
                .flatten()
                .map(memory_request)
                .max()
                .unwrap_or(0);
            main.max(init)
        })
        .unwrap_or(0);
    let unschedulable = status
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.type_ == "PodScheduled"
                    && c.status == "False"
                    && c.reason.as_deref() == Some("Unschedulable")
            })
        });
    let controller_kind = p
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| o.kind.clone());
    let mirror = p
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key("kubernetes.io/config.mirror"));
    let images = spec
        .map(|s| {
            s.init_containers
                .iter()
                .flatten()
                .chain(s.containers.iter())
                .filter_map(|c| c.image.clone())
                .collect()
        })
        .unwrap_or_default();
    let tolerations = spec
        .and_then(|s| s.tolerations.as_ref())
        .map(|ts| {
            ts.iter()
                .map(|t| Toleration {
                    key: t.key.clone(),
                    operator: t.operator.clone(),
                    value: t.value.clone(),
                    effect: t.effect.clone(),
                })
                .collect()
        })
        .unwrap_or_default();
    Some(PodInfo {
        namespace: p
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into()),
        name,
        node_name: spec.and_then(|s| s.node_name.clone()),
        phase,
        memory_request,
        unschedulable,
        controller_kind,
        mirror,
        images,
        node_selector: spec
            .and_then(|s| s.node_selector.clone())
            .unwrap_or_default(),
        tolerations,
        labels: labels(&p.metadata.labels),
        deleting: p.metadata.deletion_timestamp.is_some(),
        created: p
            .metadata
            .creation_timestamp
            .as_ref()
            .map(time_to_system)
            .unwrap_or(UNIX_EPOCH),
    })
}

pub fn pdb_info(b: &PodDisruptionBudget) -> Option<PdbInfo> {
    let selector = b.spec.as_ref().and_then(|s| s.selector.as_ref());
    Some(PdbInfo {
        namespace: b.metadata.namespace.clone()?,
        name: b.metadata.name.clone()?,
        match_labels: selector
            .and_then(|s| s.match_labels.clone())
            .unwrap_or_default(),
        has_expressions: selector
            .and_then(|s| s.match_expressions.as_ref())
            .is_some_and(|e| !e.is_empty()),
        // Without a status the controller has not computed it yet: assume none allowed.
        disruptions_allowed: b
            .status
            .as_ref()
            .and_then(|s| s.disruptions_allowed)
            .unwrap_or(0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities() {
        assert_eq!(parse_quantity("512Mi"), Some(512 << 20));
        assert_eq!(parse_quantity("1Gi"), Some(1 << 30));
        assert_eq!(parse_quantity("1.5Gi"), Some(3 << 29));
        assert_eq!(parse_quantity("1G"), Some(1_000_000_000));
        assert_eq!(parse_quantity("129e6"), Some(129_000_000));
        assert_eq!(parse_quantity("128974848"), Some(128_974_848));
        assert_eq!(parse_quantity("100m"), Some(1));
        assert_eq!(parse_quantity("12Zi"), None);
        assert_eq!(parse_quantity(""), None);
        assert_eq!(parse_quantity("-1Gi"), None);
    }

    #[test]
    fn pod_without_spec_or_owner_converts() {
        let mut p = Pod::default();
        p.metadata.name = Some("bare".into());
        let info = pod_info(&p).expect("named pod converts");
        assert_eq!(info.controller_kind, None);
        assert_eq!(info.memory_request, 0);
        assert_eq!(info.phase, PodPhase::Pending);
        assert!(pod_info(&Pod::default()).is_none());
    }
}

//! The screening of the nodes in service for scale-down: which are unneeded now (in
//! removal order) and why each other one is needed. Done once per plan and read by the
//! disrupt and mark-unneeded steps and the report of kept nodes; apart from the choice
//! of which unneeded nodes go this cycle.

use super::evict::evict_in_model;
use super::{first_blocking, in_service, movable, targets_hold};
use crate::config::ExpanderKind;
use crate::model::{NodeInfo, PodInfo};
use crate::plan::buffers;
use crate::plan::policy;
use crate::plan::sched::Model;
use crate::plan::steps::{list_pods, pod_ref};
use crate::plan::unremovable::{KeptReason, Screened, Unremovable};
use crate::plan::view::{Member, View};

/// A node that could go now but for its unneeded clock.
#[derive(Clone, Copy)]
pub(super) struct Unneeded<'v, 'a> {
    pub(super) member: &'v Member<'a>,
    pub(super) node: &'a NodeInfo,
    pub(super) empty: bool,
    pub(super) utilization: f64,
}

/// Removal order among groups: the lower a group's priority (or the higher its price),
/// the earlier its nodes go, so on-prem capacity outlives cloud capacity.
pub(super) fn group_rank(v: &View<'_>, group: &str) -> i64 {
    let cfg = &v.config.expander;
    match cfg.kind {
        ExpanderKind::Priority => cfg
            .priorities
            .iter()
            .position(|p| regex::Regex::new(&format!("^(?:{p})$")).is_ok_and(|r| r.is_match(group)))
            .map_or(i64::MAX, |i| i as i64),
        ExpanderKind::Price => v
            .config
            .group(group)
            .and_then(|g| g.price)
            .map_or(0, |p| (p * 1_000_000.0) as i64),
        ExpanderKind::LeastWaste => 0,
    }
}

/// Nodes that are unneeded now: requests under `utilizationThreshold`, nothing that
/// blocks a drain, everything they run fits on the other nodes, targets and buffers
/// hold without them, their group stays at or above minSize. Sorted in removal order.
pub(super) fn unneeded<'v, 'a>(v: &'v View<'a>) -> Vec<Unneeded<'v, 'a>> {
    screened(v)
        .unneeded
        .iter()
        .filter_map(|&(i, empty, utilization)| {
            let member = v.members.get(i)?;
            Some(Unneeded {
                member,
                node: member.node?,
                empty,
                utilization,
            })
        })
        .collect()
}

/// The nodes in service whose pods request less than `scaleDown.utilizationThreshold`
/// (and that minSize, an opt-out, a local volume or headroom, the free-capacity targets,
/// the per-node minimums or an active buffer, do not keep): the unneeded clock runs on them, whether or not their pods could move yet (a
/// running Job, pods that fit nowhere else), as the clock of Cluster Autoscaler-like
/// policies runs from the time a node falls under the threshold.
pub(super) fn under_threshold<'a>(v: &View<'a>) -> Vec<&'a NodeInfo> {
    screened(v)
        .under_threshold
        .iter()
        .filter_map(|&i| v.members.get(i)?.node)
        .collect()
}

/// The screening of every node in service, done once per plan: both the disrupt and
/// the mark-unneeded steps read it, and the report of kept nodes.
fn screened<'v>(v: &'v View<'_>) -> &'v Screened {
    v.unneeded.get_or_init(|| screen_unneeded(v, true))
}

/// The screening behind [`unneeded`]: the unneeded nodes, and every other node in
/// service with why it is needed. Without `full`, the checks that need the scheduling
/// model (where the pods would go, minimums, buffers) are skipped: the nodes that pass
/// the others are listed in `unchecked`.
pub(super) fn screen_unneeded(v: &View<'_>, full: bool) -> Screened {
    let sd = &v.config.scale_down;
    let mut out = Screened::default();
    let index = |m: &Member<'_>| v.members.iter().position(|x| std::ptr::eq(x, m));
    let keep = |out: &mut Screened, m: &Member<'_>, n: &NodeInfo, r: KeptReason, d: String| {
        out.kept
            .push(Unremovable::new(&n.name, &m.group.name, r, d));
    };
    if !sd.enabled {
        for (m, n) in in_service(v) {
            keep(
                &mut out,
                m,
                n,
                KeptReason::ScaleDownDisabled,
                "scaleDown.enabled is false".into(),
            );
        }
        return out;
    }
    let buffer_pods = buffers::active_pods(v.config, v.now);
    let buffer: Vec<&PodInfo> = buffer_pods.iter().collect();
    let mut model: Option<Model<'_>> = None;
    let mut buffer_baseline = None;
    let reference = v.reference_node();
    let mut screened = Vec::new();
    for (m, n) in in_service(v) {
        if !m.schedulable() {
            keep(
                &mut out,
                m,
                n,
                KeptReason::NotReady,
                format!("{} is not Ready", n.name),
            );
            continue;
        }
        if policy::opted_out(n) {
            keep(
                &mut out,
                m,
                n,
                KeptReason::ScaleDownDisabledAnnotation,
                format!("{} opted out of removal by annotation", n.name),
            );
            continue;
        }
        if v.active_size(&m.group.name) <= m.group.min_size {
            keep(
                &mut out,
                m,
                n,
                KeptReason::GroupAtMinSize,
                format!(
                    "group {} has {} node(s), its minSize is {}",
                    m.group.name,
                    v.active_size(&m.group.name),
                    m.group.min_size
                ),
            );
            continue;
        }
        let pods = movable(v, n);
        if let Some((pod, l)) = pods
            .iter()
            .find_map(|p| policy::pinning_volume(v, p).map(|l| (*p, l)))
        {
            let mut k = Unremovable::new(
                &n.name,
                &m.group.name,
                KeptReason::LocalVolume,
                format!("{} {}", pod.key(), policy::Blocker::LocalVolume(l.clone())),
            );
            k.pod = Some(pod_ref(pod));
            k.pod_reason = Some("local-volume".to_string());
            out.kept.push(k);
            continue;
        }
        if let Some(h) = policy::idle_volume(v, n) {
            keep(&mut out, m, n, KeptReason::LocalVolume, h.to_string());
            continue;
        }
        let mut requested = crate::model::Resources::default();
        for p in &pods {
            requested.add(&p.requests);
        }
        let u = requested.dominant_share(&n.allocatable);
        if u >= sd.utilization_threshold {
            keep(
                &mut out,
                m,
                n,
                KeptReason::NotUnderutilized,
                format!(
                    "{} requests {:.0}% of its capacity, not below scaleDown.utilizationThreshold {:.0}%",
                    n.name,
                    u * 100.0,
                    sd.utilization_threshold * 100.0
                ),
            );
            continue;
        }
        screened.push((m, n, pods, u));
    }
    screened.sort_by(|a, b| {
        group_rank(v, &b.0.group.name)
            .cmp(&group_rank(v, &a.0.group.name))
            .then(a.3.total_cmp(&b.3))
            .then(a.1.name.cmp(&b.1.name))
    });
    for (m, n, pods, u) in screened {
        // The clock runs while a pod (a Job) still holds the node or its pods fit
        // nowhere else yet; not while the free-capacity targets need it.
        let targets = targets_hold(v, &[n]);
        if targets.is_ok() {
            out.under_threshold.extend(index(m));
        }
        if let Some((pod, code, why)) = first_blocking(v, &pods, true) {
            let mut k = Unremovable::new(
                &n.name,
                &m.group.name,
                KeptReason::BlockedByPod,
                format!("{} is underused but cannot be drained: {why}", n.name),
            );
            k.pod = Some(pod_ref(pod));
            k.pod_reason = Some(code.to_string());
            out.kept.push(k);
            continue;
        }
        if let Err(t) = targets {
            keep(
                &mut out,
                m,
                n,
                KeptReason::FreeCapacityTarget,
                format!("without {}: {t}", n.name),
            );
            continue;
        }
        if !full {
            out.unchecked.extend(index(m));
            continue;
        }
        let model = model.get_or_insert_with(|| v.model());
        let (left, keeps_minimum) = evict_in_model(v, model, &n.name, &pods);
        if !left.is_empty() {
            keep(
                &mut out,
                m,
                n,
                KeptReason::NoPlaceToMovePods,
                format!(
                    "{} of its pods fit on no other node: {}",
                    left.len(),
                    list_pods(&left)
                ),
            );
            continue;
        }
        // Kept as headroom, as for the targets: no clock runs on it.
        let headroom = |out: &mut Screened| out.under_threshold.retain(|&j| Some(j) != index(m));
        if !keeps_minimum {
            headroom(&mut out);
            keep(
                &mut out,
                m,
                n,
                KeptReason::MinimumFreeNode,
                format!(
                    "without {}, no other node keeps minimumFreeNodeMemory / minimumFreeNodeCpu free",
                    n.name
                ),
            );
            continue;
        }
        if !buffers::removal_keeps(
            model,
            &n.name,
            &pods,
            &buffer,
            &reference,
            &mut buffer_baseline,
        ) {
            headroom(&mut out);
            keep(
                &mut out,
                m,
                n,
                KeptReason::CapacityBuffer,
                format!("an active capacity buffer needs the room of {}", n.name),
            );
            continue;
        }
        if let Some(i) = index(m) {
            out.unneeded.push((i, pods.is_empty(), u));
        }
    }
    out
}

//! Image cache warming on managed nodes.

use std::collections::BTreeSet;
use std::time::Duration;

use super::{pod_ref, StepResult};
use crate::model::{normalize_image, ObjectRef, PodInfo};
use crate::plan::policy;
use crate::plan::sched::index::FxHashMap;
use crate::plan::sched::{static_check, Slot};
use crate::plan::view::View;
use crate::plan::{Action, Reason, ReasonCode};

/// Puller pods that have not finished by then are assumed stuck and removed.
const PULLER_DEADLINE: Duration = Duration::from_secs(300);

fn ignored_image(v: &View<'_>, raw: &str, normalized: &str) -> bool {
    v.config
        .image_puller
        .ignore
        .iter()
        .any(|p| raw.starts_with(p.as_str()) || normalized.starts_with(p.as_str()))
}

/// Pull images that pods in the cluster use onto managed nodes that lack them.
pub fn warm_images(v: &View<'_>, _notes: &mut Vec<Reason>) -> StepResult {
    if !v.config.image_puller.enabled {
        return None;
    }
    let pullers: Vec<&PodInfo> = v
        .pods
        .iter()
        .map(std::sync::Arc::as_ref)
        .filter(|p| policy::own_puller(v, p))
        .collect();
    let done: Vec<&PodInfo> = pullers
        .iter()
        .copied()
        .filter(|p| !p.deleting && (p.is_terminal() || v.age(p.created) > PULLER_DEADLINE))
        .collect();
    if !done.is_empty() {
        let reason = Reason::new(
            ReasonCode::PullerFinished,
            format!("{} image puller pod(s) finished or timed out", done.len()),
        );
        let pods = done.iter().map(|p| pod_ref(p)).collect();
        return Some((Action::DeletePods { pods }, vec![reason]));
    }
    if pullers.iter().any(|p| !p.is_terminal()) {
        return None;
    }
    // Only images of pods that could run on a node are worth pulling there: a node
    // tainted for batch jobs does not need the web tier's images. Pods with the same
    // constraints are checked once.
    let mut wanted: Vec<(&PodInfo, BTreeSet<String>)> = Vec::new();
    // Each distinct image reference is normalized once (clusters run few images in
    // many pods); `None` when ignored.
    let mut normalized: FxHashMap<&str, Option<String>> = FxHashMap::default();
    for p in v
        .pods
        .iter()
        .filter(|p| !p.is_terminal() && !policy::own_puller(v, p) && !p.is_daemonset())
    {
        let same = wanted.iter().position(|(q, _)| {
            q.node_selector == p.node_selector
                && q.node_affinity == p.node_affinity
                && q.tolerations == p.tolerations
        });
        let k = match same {
            Some(k) => k,
            None => {
                wanted.push((p, BTreeSet::new()));
                wanted.len() - 1
            }
        };
        let set = &mut wanted[k].1;
        for raw in &p.images {
            let n = normalized.entry(raw.as_str()).or_insert_with(|| {
                let n = normalize_image(raw);
                (!ignored_image(v, raw, &n)).then_some(n)
            });
            if let Some(n) = n {
                if !set.contains(n.as_str()) {
                    set.insert(n.clone());
                }
            }
        }
    }
    for m in v.schedulable() {
        let Some(node) = m.node else { continue };
        let slot = Slot::for_node(node);
        let missing: BTreeSet<String> = wanted
            .iter()
            .filter(|(p, _)| static_check(p, &slot, false).is_ok())
            .flat_map(|(_, images)| images.iter())
            .filter(|n| !node.images.contains(*n))
            .cloned()
            .collect();
        if missing.is_empty() {
            continue;
        }
        let missing: Vec<String> = missing.into_iter().collect();
        let reason = Reason::new(
            ReasonCode::ImageMissing,
            format!(
                "{} lacks {} image(s) used by pods that could run there",
                node.name,
                missing.len()
            ),
        )
        .about([ObjectRef::node(&node.name)]);
        return Some((
            Action::PullImages {
                node: node.name.clone(),
                images: missing,
            },
            vec![reason],
        ));
    }
    None
}

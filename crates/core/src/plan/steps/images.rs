//! Image cache warming on managed nodes.
//!
//! Pullers are short-lived pods, one per node at a time, on up to [`PULLING_NODES`]
//! nodes at once. A new node is warmed from the moment it registers (pullers tolerate
//! the startup taint), so its images are there before pods are let in. Everything the
//! step needs is read back from the cluster each cycle: the pullers themselves, and the
//! images given up on, kept in a node annotation ([`ANNOTATION_UNPULLABLE_IMAGES`]).

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::{pod_ref, StepResult};
use crate::model::{
    normalize_image, unix_secs, NodeInfo, ObjectRef, PodInfo, ANNOTATION_UNPULLABLE_IMAGES,
    STARTUP_TAINT_KEY,
};
use crate::plan::policy;
use crate::plan::sched::index::FxHashMap;
use crate::plan::sched::{static_check, Slot};
use crate::plan::view::{ServerState, View};
use crate::plan::{Action, Reason, ReasonCode};

/// Puller pods that have not finished by then are assumed stuck and removed.
const PULLER_DEADLINE: Duration = Duration::from_secs(300);

/// An image a puller could not pull is not tried again, on any node, for this long: a
/// private image without its Secret or a tag that does not exist fails the same way
/// every time, and each try would hold a node's puller for nothing.
pub const UNPULLABLE_RETRY: Duration = Duration::from_secs(6 * 3600);

/// At most this many nodes pull at once, one puller each: new nodes are warmed
/// together, and the registry sees a bounded number of pulls whatever the cluster's size.
pub const PULLING_NODES: usize = 4;

fn ignored_image(v: &View<'_>, raw: &str, normalized: &str) -> bool {
    v.config
        .image_puller
        .ignore
        .iter()
        .any(|p| raw.starts_with(p.as_str()) || normalized.starts_with(p.as_str()))
}

/// The images given up on, recorded on `node`: image → when (Unix seconds).
fn recorded(node: &NodeInfo) -> BTreeMap<String, u64> {
    node.annotations
        .get(ANNOTATION_UNPULLABLE_IMAGES)
        .and_then(|s| serde_json::from_str(s).ok())
        .unwrap_or_default()
}

/// The images given up on anywhere less than [`UNPULLABLE_RETRY`] ago, with the latest
/// time each was given up and the node that recorded it.
fn given_up(v: &View<'_>) -> BTreeMap<String, (u64, String)> {
    let now = unix_secs(v.now);
    let mut out: BTreeMap<String, (u64, String)> = BTreeMap::new();
    for node in v.members.iter().filter_map(|m| m.node) {
        for (image, at) in recorded(node) {
            if now.saturating_sub(at) >= UNPULLABLE_RETRY.as_secs() {
                continue;
            }
            if out.get(&image).is_none_or(|(t, _)| *t < at) {
                out.insert(image, (at, node.name.clone()));
            }
        }
    }
    out
}

/// Nodes a puller may go to: ours, Ready and schedulable, and new ones from the moment
/// they register (under the startup taint, Ready or not: the kubelet starts the puller
/// once it can), so a node is warmed before pods are let in.
fn warmable<'v>(v: &'v View<'_>) -> impl Iterator<Item = &'v NodeInfo> + 'v {
    v.members.iter().filter_map(|m| {
        let node = m.node?;
        let usable = match m.state {
            ServerState::Joined => m.schedulable(),
            ServerState::Provisioning => node.has_taint(STARTUP_TAINT_KEY) && !node.deleting,
            _ => false,
        };
        usable.then_some(node)
    })
}

/// Whether `node` surely lacks `image`. The kubelet lists a node's images largest first
/// and only the first 50 (`--node-status-max-images`); a node whose listing is that long
/// may have images it does not name. There an unnamed image is known absent only when
/// another node lists it larger than the smallest this node lists (it would be named if
/// the node had it); otherwise it is left to the pods' own pull, never pulled again on
/// a guess.
fn lacks(node: &NodeInfo, image: &str, sizes: &BTreeMap<&str, u64>) -> bool {
    if node.images.contains(image) {
        return false;
    }
    if !node.image_listing.is_full() {
        return true;
    }
    match (sizes.get(image), node.image_listing.smallest()) {
        (Some(size), Some(smallest)) => *size > smallest,
        _ => false,
    }
}

/// Pull images that pods in the cluster use onto managed nodes that lack them.
pub fn warm_images(v: &View<'_>, notes: &mut Vec<Reason>) -> StepResult {
    if !v.config.image_puller.enabled {
        return None;
    }
    let pullers: Vec<&PodInfo> = v
        .pods
        .iter()
        .map(std::sync::Arc::as_ref)
        .filter(|p| policy::own_puller(v, p))
        .collect();
    let given_up = given_up(v);
    if let Some(result) = give_up(v, &pullers, &given_up) {
        return Some(result);
    }
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
    for (image, (at, node)) in &given_up {
        let again = at + UNPULLABLE_RETRY.as_secs();
        notes.push(
            Reason::new(
                ReasonCode::ImageUnpullable,
                format!(
                    "image {image} could not be pulled on {node}; no puller tries it again before {}",
                    crate::model::rfc3339(again)
                ),
            )
            .about([ObjectRef::node(node)]),
        );
    }
    let busy: BTreeSet<&str> = pullers
        .iter()
        .filter(|p| !p.is_terminal())
        .filter_map(|p| p.node_name.as_deref())
        .collect();
    if busy.len() >= PULLING_NODES {
        return None;
    }
    let wanted = wanted_images(v);
    // The size each image has where a node lists it (the largest seen).
    let mut sizes: BTreeMap<&str, u64> = BTreeMap::new();
    for node in v.nodes.iter() {
        for (image, size) in &node.image_listing.sizes {
            let s = sizes.entry(image.as_str()).or_default();
            *s = (*s).max(*size);
        }
    }
    for node in warmable(v).filter(|n| !busy.contains(n.name.as_str())) {
        // The startup taint is not the pods' to tolerate: it comes off once the node
        // is Ready, and the images are for after.
        let mut slot = Slot::for_node(node);
        slot.taints = Cow::Owned(
            node.taints
                .iter()
                .filter(|t| t.key != STARTUP_TAINT_KEY)
                .cloned()
                .collect(),
        );
        slot.usable = true;
        let mut missing: BTreeSet<&str> = BTreeSet::new();
        let mut secrets: BTreeSet<&str> = BTreeSet::new();
        for (p, images) in &wanted {
            if static_check(p, &slot, false).is_err() {
                continue;
            }
            for (image, names) in images {
                if given_up.contains_key(image) || !lacks(node, image, &sizes) {
                    continue;
                }
                missing.insert(image);
                secrets.extend(names.iter().map(String::as_str));
            }
        }
        if missing.is_empty() {
            continue;
        }
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
                images: missing.into_iter().map(str::to_string).collect(),
                pull_secrets: secrets.into_iter().map(str::to_string).collect(),
            },
            vec![reason],
        ));
    }
    None
}

/// The first puller whose containers report a pull error: its images are recorded on
/// its node (with the images given up on there before, still in effect) and it is
/// deleted, rather than left to retry or made again when it times out.
fn give_up(
    v: &View<'_>,
    pullers: &[&PodInfo],
    given_up: &BTreeMap<String, (u64, String)>,
) -> StepResult {
    let p = pullers
        .iter()
        .find(|p| !p.deleting && !p.pull_failures.is_empty() && p.node_name.is_some())?;
    let node_name = p.node_name.as_deref()?;
    let now = unix_secs(v.now);
    let mut unpullable: BTreeMap<String, u64> = v
        .nodes
        .iter()
        .find(|n| n.name == node_name)
        .map(recorded)
        .unwrap_or_default()
        .into_iter()
        .filter(|(image, _)| given_up.contains_key(image))
        .collect();
    let mut said = Vec::new();
    for (image, why) in &p.pull_failures {
        let image = normalize_image(image);
        said.push(format!("{image} ({why})"));
        unpullable.insert(image, now);
    }
    let mut message = format!(
        "image puller {}/{} on {node_name} could not pull {}; not tried again on any node for {}",
        p.namespace,
        p.name,
        said.join(", "),
        humantime::format_duration(UNPULLABLE_RETRY)
    );
    if !p.image_pull_secrets.is_empty() {
        message.push_str(&format!(
            " (it used the imagePullSecrets {} of namespace {}: check they exist there and grant the image)",
            p.image_pull_secrets.join(", "),
            p.namespace
        ));
    }
    let reason =
        Reason::new(ReasonCode::ImageUnpullable, message).about([ObjectRef::node(node_name)]);
    Some((
        Action::GiveUpPulls {
            node: node_name.to_string(),
            unpullable,
            pods: vec![pod_ref(p)],
        },
        vec![reason],
    ))
}

/// Each distinct pod shape (selector, affinity, tolerations) with the images its pods
/// use, each with the `imagePullSecrets` those pods name. Only images of pods that could
/// run on a node are worth pulling there: a node tainted for batch jobs does not need
/// the web tier's images.
type Wanted<'v> = Vec<(&'v PodInfo, BTreeMap<String, BTreeSet<String>>)>;

fn wanted_images<'v>(v: &'v View<'_>) -> Wanted<'v> {
    let mut wanted: Wanted<'v> = Vec::new();
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
                wanted.push((p, BTreeMap::new()));
                wanted.len() - 1
            }
        };
        let images = &mut wanted[k].1;
        for raw in &p.images {
            let n = normalized.entry(raw.as_str()).or_insert_with(|| {
                let n = normalize_image(raw);
                (!ignored_image(v, raw, &n)).then_some(n)
            });
            if let Some(n) = n {
                let names = images.entry(n.clone()).or_default();
                names.extend(p.image_pull_secrets.iter().cloned());
            }
        }
    }
    wanted
}

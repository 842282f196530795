//! First-fit-decreasing packing over the model: pending pods onto the slots that exist,
//! then onto new nodes of one group, honouring every resource and placement rule.
//! Pods with the same placement signature share a cursor, so a packing over thousands
//! of nodes stays linear instead of rescanning full nodes for every pod.

use super::index::FxHashMap;
use super::{static_check, Model, Slot, SlotKind, Unfit};
use crate::model::{HostPort, NodeSelectorTerm, PodAffinityTerm, PodInfo, Resources, Toleration};

/// Everything that decides where a pod may go, borrowed: pods equal in all of it are
/// interchangeable for packing.
#[derive(PartialEq, Eq, Hash, Clone, Copy)]
struct Signature<'p> {
    namespace: &'p str,
    labels: &'p std::collections::BTreeMap<String, String>,
    requests: &'p Resources,
    node_selector: &'p std::collections::BTreeMap<String, String>,
    node_affinity: &'p Option<Vec<NodeSelectorTerm>>,
    tolerations: &'p [Toleration],
    anti: &'p [PodAffinityTerm],
    ports: &'p [HostPort],
}

fn signature(p: &PodInfo) -> Signature<'_> {
    Signature {
        namespace: &p.namespace,
        labels: &p.labels,
        requests: &p.requests,
        node_selector: &p.node_selector,
        node_affinity: &p.node_affinity,
        tolerations: &p.tolerations,
        anti: &p.pod_anti_affinity,
        ports: &p.host_ports,
    }
}

/// Placing pods only ever makes a slot less attractive for pods without positive
/// affinity or spread rules, so for those a slot that refused one copy refuses the next.
fn monotone(p: &PodInfo) -> bool {
    p.pod_affinity.is_empty() && p.spread.is_empty()
}

/// The packing order: higher priority first, then the larger share of a reference
/// node's CPU or memory, then by name so the same input always packs the same way.
pub fn sort_for_packing(pods: &mut [&PodInfo], reference: &Resources) {
    // Each pod's share computed once, not once per comparison.
    let mut keyed: Vec<(f64, &PodInfo)> = pods
        .iter()
        .map(|&p| (p.requests.dominant_share(reference), p))
        .collect();
    keyed.sort_by(|(sa, a), (sb, b)| {
        b.priority
            .cmp(&a.priority)
            .then_with(|| sb.total_cmp(sa))
            .then_with(|| a.namespace.cmp(&b.namespace))
            .then_with(|| a.name.cmp(&b.name))
    });
    for (slot, (_, p)) in pods.iter_mut().zip(keyed) {
        *slot = p;
    }
}

/// Refusals a pod's scan must meet before its cursor is worth a hash.
const CURSOR_AFTER: usize = 2;

/// Most slots fetched from the room index at once while scanning.
const MAX_BATCH: usize = 64;

/// Places each pod (in the given order) on the first slot that takes it among those
/// `eligible` admits; returns (pod, slot) for the placed ones and the rest.
pub fn first_fit<'a>(
    m: &mut Model<'a>,
    pods: &[&'a PodInfo],
    eligible: impl Fn(&Slot<'_>) -> bool,
) -> (Vec<(&'a PodInfo, usize)>, Vec<&'a PodInfo>) {
    fit(m, pods, &eligible, false)
}

/// As [`first_fit`], but gives up at the first pod that fits nowhere: `Err(that pod)`
/// (the pods placed so far stay placed), for callers that only need "do all fit?".
pub fn first_fit_all<'a>(
    m: &mut Model<'a>,
    pods: &[&'a PodInfo],
    eligible: impl Fn(&Slot<'_>) -> bool,
) -> Result<Vec<(&'a PodInfo, usize)>, &'a PodInfo> {
    let (placed, left) = fit(m, pods, &eligible, true);
    match left.first() {
        Some(&p) => Err(p),
        None => Ok(placed),
    }
}

fn fit<'a>(
    m: &mut Model<'a>,
    pods: &[&'a PodInfo],
    eligible: &dyn Fn(&Slot<'_>) -> bool,
    stop_at_first_left: bool,
) -> (Vec<(&'a PodInfo, usize)>, Vec<&'a PodInfo>) {
    let end = m.slots.len();
    // Cursors are slot indexes: a pod starts where the last alike pod was placed (or
    // past the end when it was not).
    let mut cursors: FxHashMap<Signature<'a>, usize> = FxHashMap::default();
    let mut buf = Vec::new();
    let mut placed = Vec::new();
    let mut left = Vec::new();
    for &pod in pods {
        // Hashing a signature costs more than a short scan: a cursor is only kept for
        // pods that had to pass slots that refused them, and only looked up once some
        // cursor exists.
        let (cursor, key) = match monotone(pod).then(|| signature(pod)) {
            Some(k) if !cursors.is_empty() => (Some(cursors.entry(k).or_insert(0)), None),
            k => (None, k),
        };
        let mut pos = cursor.as_deref().copied().unwrap_or(0);
        let mut found = None;
        let mut refused = 0usize;
        // Slots without room for its CPU, memory, storage or pod slot are skipped
        // wholesale; the rest are checked in order, fetched in growing batches.
        let mut batch = 1;
        'scan: loop {
            buf.clear();
            m.slots_with_room(pos, end, &pod.requests, batch, &mut buf);
            if buf.is_empty() {
                break;
            }
            for &i in &buf {
                let s = &m.slots[i];
                if s.usable && eligible(s) && m.check(pod, i).is_ok() {
                    found = Some(i);
                    pos = i;
                    break 'scan;
                }
                refused += 1;
                pos = i + 1;
            }
            batch = (batch * 2).min(MAX_BATCH);
        }
        if found.is_none() {
            pos = end;
        }
        match (cursor, key) {
            (Some(c), _) => *c = pos,
            (None, Some(k)) if refused > CURSOR_AFTER => {
                cursors.insert(k, pos);
            }
            _ => {}
        }
        match found {
            Some(i) => {
                m.place(pod, i);
                placed.push((pod, i));
            }
            None => {
                left.push(pod);
                if stop_at_first_left {
                    break;
                }
            }
        }
    }
    (placed, left)
}

/// New nodes of one group that would take some of the pods.
#[derive(Debug, Clone)]
pub struct NewNodes<'a> {
    pub count: u32,
    pub placed: Vec<&'a PodInfo>,
    /// Pods this group could host on an empty node but that did not fit within `room`.
    pub over_room: Vec<&'a PodInfo>,
    /// Requested share of the new nodes' CPU and memory left unused, 0..=1 (for the
    /// least-waste expander).
    pub waste: f64,
}

/// A scale-up option the expander chooses among.
#[derive(Debug, Clone)]
pub struct GroupOption<'a> {
    pub group: String,
    pub nodes: NewNodes<'a>,
    /// Hourly price of one node, if configured.
    pub price: Option<f64>,
}

/// Packs `pods` (already sorted) onto up to `room` new nodes shaped like `template`
/// (with `overhead` already taken by DaemonSets), adding them to the model. The k-th new
/// node gets `zones[k]` as its `topology.kubernetes.io/zone` when given (the hypervisor
/// host it will be placed on). The caller keeps a checkpoint to undo this.
pub fn pack_new_nodes<'a>(
    m: &mut Model<'a>,
    pods: &[&'a PodInfo],
    template: &Slot<'static>,
    overhead: &Resources,
    room: u32,
    zones: &[String],
) -> NewNodes<'a> {
    let group = match &template.kind {
        SlotKind::New(g) | SlotKind::Provisioning(g) => g.clone(),
        SlotKind::Node => String::new(),
    };
    let mut empty = template.clone();
    empty.used = overhead.clone();
    // New slots are added at the end, one after another: `base + k` is the k-th.
    let base = m.slots.len();
    let mut new_slots: Vec<usize> = Vec::new();
    let mut placed = Vec::new();
    let mut over_room = Vec::new();
    let mut cursors: FxHashMap<Signature<'a>, usize> = FxHashMap::default();
    cursors.reserve(pods.len().min(256));
    let mut buf = Vec::new();
    for &pod in pods {
        // Cheap refusal first: a pod that no empty node of this group takes.
        if static_check(pod, &empty, false).is_err()
            || !empty.allocatable.fits(&empty.used, &pod.requests)
        {
            continue;
        }
        let cursor = monotone(pod).then(|| cursors.entry(signature(pod)).or_insert(0));
        let mut pos = cursor.as_deref().copied().unwrap_or(0);
        let mut found = None;
        let end = base + new_slots.len();
        let mut batch = 1;
        'scan: loop {
            buf.clear();
            m.slots_with_room(base + pos, end, &pod.requests, batch, &mut buf);
            if buf.is_empty() {
                break;
            }
            for &i in &buf {
                if m.dynamic_check(pod, i).is_ok() {
                    found = Some(i);
                    pos = i - base;
                    break 'scan;
                }
                pos = i - base + 1;
            }
            batch = (batch * 2).min(MAX_BATCH);
        }
        if found.is_none() {
            pos = new_slots.len();
        }
        if let Some(c) = cursor {
            *c = pos;
        }
        if found.is_none() {
            if new_slots.len() as u32 >= room {
                over_room.push(pod);
                continue;
            }
            let cp = m.checkpoint();
            let mut slot = empty.clone();
            let index = new_slots.len();
            let name = format!("{group}-new-{index}");
            slot.labels
                .to_mut()
                .insert(super::template::LABEL_HOSTNAME.to_string(), name.clone());
            if let Some(z) = zones.get(index) {
                slot.labels
                    .to_mut()
                    .insert(super::template::LABEL_ZONE.to_string(), z.clone());
            }
            slot.name = name.into();
            let i = m.add_slot(slot);
            match m.dynamic_check(pod, i) {
                Ok(()) => {
                    new_slots.push(i);
                    found = Some(i);
                }
                Err(_) => {
                    // Affinity or spread that no new node of this group satisfies.
                    m.rollback(cp);
                    continue;
                }
            }
        }
        if let Some(i) = found {
            m.place(pod, i);
            placed.push(pod);
        }
    }
    let count = new_slots.len() as u32;
    let waste = if count == 0 {
        1.0
    } else {
        let cap = &template.allocatable;
        let mut used = Resources::default();
        for &i in &new_slots {
            used.add(&m.slots[i].used);
        }
        let frac = |used: u64, cap: u64| {
            if cap == 0 {
                0.0
            } else {
                1.0 - (used as f64 / (cap as f64 * count as f64)).min(1.0)
            }
        };
        (frac(used.cpu, cap.cpu) + frac(used.memory, cap.memory)) / 2.0
    };
    NewNodes {
        count,
        placed,
        over_room,
        waste,
    }
}

/// How many new nodes shaped like `template` `pods` (already sorted) would need, up to
/// `room`, and which of them they take: [`pack_new_nodes`] as a trial, the model left
/// as it was.
pub fn trial_new_nodes<'a>(
    m: &mut Model<'a>,
    pods: &[&'a PodInfo],
    template: &Slot<'static>,
    overhead: &Resources,
    room: u32,
    zones: &[String],
) -> NewNodes<'a> {
    m.trial(|m| pack_new_nodes(m, pods, template, overhead, room, zones))
}

/// Why no empty node shaped like `template` (with `overhead` taken) takes `pod`, if not.
pub fn why_not(pod: &PodInfo, template: &Slot<'_>, overhead: &Resources) -> Option<Unfit> {
    if let Err(e) = static_check(pod, template, false) {
        return Some(e);
    }
    let short = template.allocatable.shortfalls(overhead, &pod.requests);
    (!short.is_empty()).then_some(Unfit::Insufficient(short))
}

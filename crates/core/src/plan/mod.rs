//! The pure planner: a [`Snapshot`] of cluster and cloud plus the [`Config`] and `now`
//! in, exactly one [`Action`] with its reasons out. No I/O, no clock, no randomness, so
//! every decision can be replayed in a test or explained by `nodewright plan`.
//!
//! Steps run in priority order and the first that wants to act wins (see [`STEPS`]).

mod action;
pub mod backoff;
pub mod buffers;
mod decision;
pub mod policy;
pub mod sched;
mod snapshot;
mod steps;
pub mod summary;
mod units;
pub mod unremovable;
mod view;
pub mod volumes;

#[cfg(test)]
mod tests;

use std::time::SystemTime;

use crate::config::Config;
use crate::model::{ObjectRef, PodInfo, PodRef};

pub use action::{Action, NodeTarget, Target};
pub use decision::{Bucket, Decision, PendingPod, Reason, ReasonCode};
pub use snapshot::{shared, Snapshot};
pub use steps::{unknown_group_vms, MAX_NOT_JOINED_PER_ACTION};
pub use unremovable::{KeptReason, Unremovable};
pub use view::ServerState;

/// Sorts the pending pods of `view` into buckets, given the action chosen.
fn buckets(
    view: &view::View<'_>,
    action: &Action,
    reasons: &[Reason],
    notes: &[Reason],
) -> Vec<PendingPod> {
    let mk = |p: &PodInfo, bucket, detail: String| PendingPod {
        pod: PodRef {
            namespace: p.namespace.clone(),
            name: p.name.clone(),
        },
        bucket,
        detail,
    };
    let scaling: std::collections::BTreeSet<(&str, &str)> = match action {
        Action::ScaleUp { .. } | Action::StartWarm { .. } | Action::ReuseCordoned { .. } => reasons
            .iter()
            .filter(|r| r.code == ReasonCode::UnschedulablePods)
            .flat_map(|r| &r.objects)
            .filter_map(|o| Some((o.namespace.as_deref()?, o.name.as_str())))
            .collect(),
        _ => Default::default(),
    };
    let blocked: Vec<&str> = notes
        .iter()
        .filter(|n| n.code.blocks_scale_up())
        .map(|n| n.message.as_str())
        .collect();
    // Pods a scale-up leaves over because its group or a limit is full.
    let over_room: std::collections::BTreeMap<(&str, &str), &str> = reasons
        .iter()
        .filter(|r| r.code.leaves_pods_over())
        .flat_map(|r| {
            r.objects.iter().filter_map(move |o| {
                Some((
                    (o.namespace.as_deref()?, o.name.as_str()),
                    r.message.as_str(),
                ))
            })
        })
        .collect();
    // Pods whose placement rules no group's new node satisfies.
    let unplaceable: std::collections::BTreeMap<(&str, &str), &str> = notes
        .iter()
        .filter(|r| r.code == ReasonCode::NoGroupFits)
        .flat_map(|r| {
            r.objects.iter().filter_map(move |o| {
                Some((
                    (o.namespace.as_deref()?, o.name.as_str()),
                    r.message.as_str(),
                ))
            })
        })
        .collect();
    let p = &view.pending;
    let mut out = Vec::new();
    for (pod, node) in &p.on_nodes {
        out.push(mk(pod, Bucket::WillSchedule, format!("fits {node}")));
    }
    for (pod, node) in &p.on_provisioning {
        out.push(mk(
            pod,
            Bucket::CapacityComing,
            format!("fits {node}, still provisioning"),
        ));
    }
    for pod in &p.needing_nodes {
        if scaling.contains(&(pod.namespace.as_str(), pod.name.as_str())) {
            if let Action::ReuseCordoned { nodes } = action {
                out.push(mk(
                    pod,
                    Bucket::WillSchedule,
                    format!("fits {} once uncordoned", nodes.join(" or ")),
                ));
            } else if let Some((group, _)) = action.scale_up() {
                out.push(mk(
                    pod,
                    Bucket::ScalingUp,
                    format!("new node of group {group}"),
                ));
            }
        } else if let Some(why) = over_room.get(&(pod.namespace.as_str(), pod.name.as_str())) {
            out.push(mk(pod, Bucket::NoCapacity, why.to_string()));
        } else if let Some(why) = unplaceable.get(&(pod.namespace.as_str(), pod.name.as_str())) {
            out.push(mk(pod, Bucket::NoCapacity, why.to_string()));
        } else if action.scale_up().is_some() {
            out.push(mk(
                pod,
                Bucket::CapacityComing,
                "the next scale-up, after this one".into(),
            ));
        } else if blocked.is_empty() {
            out.push(mk(
                pod,
                Bucket::CapacityComing,
                format!("scale-up in a later cycle; this one does: {action}"),
            ));
        } else {
            out.push(mk(pod, Bucket::NoCapacity, blocked.join("; ")));
        }
    }
    for (pod, why) in &p.unhostable {
        let why: Vec<&str> = why.iter().map(|(_, w)| w.as_str()).collect();
        out.push(mk(pod, Bucket::NoCapacity, why.join("; ")));
    }
    out
}

/// Each note once, in first-seen order: steps that pass on the cycle may notice the same
/// thing (a group at maxSize is noted for pending pods and again for headroom), and a
/// repeated note would be logged and printed twice. Objects of repeats are merged.
fn dedup_notes(notes: Vec<Reason>) -> Vec<Reason> {
    let mut out: Vec<Reason> = Vec::with_capacity(notes.len());
    let mut seen: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for note in notes {
        match seen.entry(note.to_string()) {
            std::collections::hash_map::Entry::Occupied(e) => {
                let kept = &mut out[*e.get()];
                for o in note.objects {
                    if !kept.objects.contains(&o) {
                        kept.objects.push(o);
                    }
                }
            }
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(out.len());
                out.push(note);
            }
        }
    }
    out
}

/// A planning step: returns the action it wants, or nothing and lets the next one try.
type Step = fn(&view::View<'_>, &mut Vec<Reason>) -> Option<(Action, Vec<Reason>)>;

/// Priority order: finish what is in flight, then capacity, then replacement and removal,
/// then cache warming.
pub const STEPS: &[(&str, Step)] = &[
    ("finish-provisioning", steps::finish_provisioning),
    ("clean-up-failed", steps::clean_up_failed),
    ("finish-joins", steps::finish_joins),
    ("finish-removal", steps::finish_removal),
    ("restart-vanished", steps::restart_vanished),
    ("stop-unreachable", steps::stop_unreachable),
    ("delete-nodes-without-vm", steps::delete_nodes_without_vm),
    ("park-warm", steps::park_warm),
    ("drop-stale-warm", steps::drop_stale_warm),
    ("forget-stale-cordons", steps::forget_stale_cordons),
    ("give-back-needed", steps::give_back_needed),
    ("scale-up", steps::scale_up),
    ("remove-empty", steps::remove_empty),
    ("drain", steps::drain),
    ("disrupt", steps::disrupt),
    ("mark-unneeded", steps::mark_unneeded),
    ("soft-taint", steps::soft_taint),
    ("mark-joined", steps::mark_joined),
    ("relabel-hash", steps::relabel_hash),
    ("fill-warm-pools", steps::fill_warm_pools),
    ("warm-images", steps::warm_images),
];

/// Decides the one action for this cycle.
pub fn plan(snapshot: &Snapshot, config: &Config, now: SystemTime) -> Decision {
    let view = view::View::new(snapshot, config, now);
    let mut notes = Vec::new();
    for (provider, err) in &snapshot.unavailable_providers {
        notes.push(Reason::new(
            ReasonCode::ProviderUnavailable,
            format!(
                "provider {provider} could not be listed, its groups are frozen this cycle: {err}"
            ),
        ));
    }
    steps::note_unknown_groups(&view, &mut notes);
    steps::note_pins_newer_than_server(&view, &mut notes);
    for (provider, said) in &snapshot.cloud_failures {
        notes.push(Reason::new(
            ReasonCode::ServerError,
            format!("provider {provider}: {said}"),
        ));
    }
    for stray in &snapshot.strays {
        let code = match stray.kind {
            crate::model::StrayKind::Disowned => ReasonCode::VmDisowned,
            crate::model::StrayKind::Copied { .. } => ReasonCode::VmCopied,
        };
        let mut note = Reason::new(code, stray.to_string());
        if snapshot.nodes.iter().any(|n| n.name == stray.name) {
            note = note.about([ObjectRef::node(&stray.name)]);
        }
        notes.push(note);
    }
    for (_, step) in STEPS {
        if let Some((action, reasons)) = step(&view, &mut notes) {
            // Whatever asked for nodes, a group's warm VMs are started before any create.
            let (action, reasons) = steps::from_warm_pool(&view, action, reasons);
            if let Some(until) = backoff::held_back_until(&action, &snapshot.action_backoff, now) {
                let wait = until.duration_since(now).unwrap_or_default().as_secs();
                notes.push(Reason::new(
                    ReasonCode::ActionBackedOff,
                    format!("{action} failed; tried again in {wait}s, the next step's action runs meanwhile"),
                ));
                continue;
            }
            let notes = dedup_notes(notes);
            let pending = buckets(&view, &action, &reasons, &notes);
            let unremovable = steps::unremovable(&view, &action);
            return Decision {
                action,
                reasons,
                notes,
                pending,
                unremovable,
            };
        }
    }
    let unremovable = steps::unremovable(&view, &Action::None);
    let kept = match unremovable.len() {
        0 => String::new(),
        n => format!(" ({n} node(s) kept, each with its reason under unremovable)"),
    };
    let reasons = vec![Reason::new(
        ReasonCode::CapacitySufficient,
        format!(
            "free memory {} meets target {}; nothing to replace, remove or warm{kept}",
            units::fmt_bytes(view.free_total().0),
            bytesize::ByteSize(config.free_memory_target.as_u64())
                .display()
                .iec()
        ),
    )];
    let notes = dedup_notes(notes);
    let pending = buckets(&view, &Action::None, &reasons, &notes);
    Decision {
        action: Action::None,
        reasons,
        notes,
        pending,
        unremovable,
    }
}

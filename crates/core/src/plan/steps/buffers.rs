//! Scale-up for capacity buffers: the pods of active buffers that fit on no existing or
//! provisioning node, after every real pending pod, get new nodes with the same packing
//! and expander as real pods (see [`crate::plan::buffers`]).

use std::collections::BTreeSet;

use super::{at_max, room, StepResult};
use crate::model::{PodInfo, Resources};
use crate::plan::buffers;
use crate::plan::sched::{self, GroupOption};
use crate::plan::view::View;
use crate::plan::{Action, Reason, ReasonCode};

/// Adds nodes for buffer pods that fit nowhere; notes buffers no group can host.
pub fn scale_up_for_buffers(v: &View<'_>, notes: &mut Vec<Reason>) -> StepResult {
    let owned = buffers::active_pods(v.config, v.now);
    if owned.is_empty() {
        return None;
    }
    let pods: Vec<&PodInfo> = owned.iter().collect();
    let mut model = v.model();
    // Real pods first: what the scheduler will place and what provisioning VMs will take.
    let pending = &v.pending;
    for (pod, slot) in pending.on_nodes.iter().chain(&pending.on_provisioning) {
        if let Some(i) = model.slot_index(slot) {
            model.place(pod, i);
        }
    }
    let reference = v.reference_node();
    let left = buffers::place(&mut model, &pods, &reference, |_| true);
    if left.is_empty() {
        return None;
    }
    let mut sorted = left.clone();
    sched::sort_for_packing(&mut sorted, &reference);
    let mut options = Vec::new();
    let mut hostable = vec![false; sorted.len()];
    for g in &v.config.node_groups {
        let Some(info) = v.group(&g.name) else {
            continue;
        };
        let mut fits_group = false;
        for (i, p) in sorted.iter().enumerate() {
            if sched::why_not(p, &info.template, &info.overhead).is_none() {
                hostable[i] = true;
                fits_group = true;
            }
        }
        if !fits_group {
            continue;
        }
        let room = room(v, g);
        if room == 0 {
            notes.push(at_max(v, g));
            continue;
        }
        let nodes = sched::trial_new_nodes(
            &mut model,
            &sorted,
            &info.template,
            &info.overhead,
            room,
            info.zones(),
        );
        if nodes.count > 0 {
            options.push(GroupOption {
                group: g.name.clone(),
                nodes,
                price: g.price,
            });
        }
    }
    let unhostable: Vec<&PodInfo> = sorted
        .iter()
        .zip(&hostable)
        .filter(|(_, h)| !**h)
        .map(|(p, _)| *p)
        .collect();
    if !unhostable.is_empty() {
        let why_not: BTreeSet<String> = unhostable
            .iter()
            .flat_map(|p| {
                v.config.node_groups.iter().filter_map(|g| {
                    let info = v.group(&g.name)?;
                    let why = sched::why_not(p, &info.template, &info.overhead)?;
                    Some(format!("group {}: {why}", g.name))
                })
            })
            .collect();
        let why_not: Vec<String> = why_not.into_iter().collect();
        notes.push(Reason::new(
            ReasonCode::BufferShort,
            format!(
                "{} fit on no node and no node group can host them: {}",
                buffers::describe(v.config, &unhostable),
                why_not.join("; ")
            ),
        ));
    }
    let Some(best) = super::expander::choose(v, options) else {
        if unhostable.len() < sorted.len() {
            let waiting: Vec<&PodInfo> = sorted
                .iter()
                .zip(&hostable)
                .filter(|(_, h)| **h)
                .map(|(p, _)| *p)
                .collect();
            notes.push(Reason::new(
                ReasonCode::BufferShort,
                format!(
                    "{} fit on no existing or provisioning node; no group has room for them",
                    buffers::describe(v.config, &waiting)
                ),
            ));
        }
        return None;
    };
    let g = v.config.group(&best.group)?;
    let placed = &best.nodes.placed;
    let mut requested = Resources::default();
    for p in placed {
        requested.add(&p.requests);
    }
    let mut reasons = vec![Reason::new(
        ReasonCode::BufferShort,
        format!(
            "{} fit on no existing or provisioning node after the real pods; {} new node(s) of group {} take them (requesting {requested})",
            buffers::describe(v.config, placed),
            best.nodes.count,
            g.name,
        ),
    )];
    if !best.nodes.over_room.is_empty() {
        let mut r = at_max(v, g);
        r.message = format!(
            "{}; {} more buffer pod(s) wait for room",
            r.message,
            best.nodes.over_room.len()
        );
        reasons.push(r);
    }
    Some((
        Action::ScaleUp {
            group: g.name.clone(),
            count: best.nodes.count,
            size: None,
        },
        reasons,
    ))
}

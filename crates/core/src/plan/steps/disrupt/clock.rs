//! The unneeded clock: since when a node has been under `scaleDown.utilizationThreshold`,
//! kept in its annotation [`ANNOTATION_UNNEEDED_SINCE`] so that it survives a restart;
//! the mark-unneeded step starts and stops it. It starts when the node falls under the
//! threshold, not when it empties or when its pods first fit elsewhere: a node that
//! drained slowly goes as soon as it may, instead of waiting `unneededTime` more.

use std::time::SystemTime;

use super::screen::under_threshold;
use super::{in_service, secs};
use crate::model::{NodeInfo, ObjectRef, ANNOTATION_UNNEEDED_SINCE};
use crate::plan::steps::StepResult;
use crate::plan::view::View;
use crate::plan::{Action, Reason, ReasonCode};

/// Since when `n` has been unneeded, from its annotation.
pub(super) fn unneeded_since(n: &NodeInfo) -> Option<SystemTime> {
    n.annotations
        .get(ANNOTATION_UNNEEDED_SINCE)
        .and_then(|t| humantime::parse_rfc3339_weak(t).ok())
}

/// Starts the unneeded clock on nodes that fell under the utilization threshold and
/// stops it on those that no longer are, in node annotations.
///
/// An annotation that is no time (edited by hand, written by another tool) is never read
/// as "long ago": the node counts as unneeded since now, the clock is written anew and
/// the plan notes it.
pub fn mark_unneeded(v: &View<'_>, notes: &mut Vec<Reason>) -> StepResult {
    let now_unneeded: Vec<&str> = under_threshold(v).iter().map(|n| n.name.as_str()).collect();
    let mut mark = Vec::new();
    let mut clear = Vec::new();
    for (_, n) in in_service(v) {
        let raw = n.annotations.get(ANNOTATION_UNNEEDED_SINCE);
        let has = raw.is_some();
        let garbage = raw.is_some() && unneeded_since(n).is_none();
        let is = now_unneeded.contains(&n.name.as_str());
        if garbage {
            notes.push(
                Reason::new(
                    ReasonCode::NodeUnneeded,
                    format!(
                        "{}: annotation {ANNOTATION_UNNEEDED_SINCE} {:?} is not an RFC 3339 time; {}",
                        n.name,
                        raw.map(String::as_str).unwrap_or_default(),
                        if is {
                            "its unneeded clock restarts now"
                        } else {
                            "removed"
                        }
                    ),
                )
                .about([ObjectRef::node(&n.name)]),
            );
        }
        if is && (!has || garbage) {
            mark.push(n.name.clone());
        } else if has && !is {
            clear.push(n.name.clone());
        }
    }
    if mark.is_empty() && clear.is_empty() {
        return None;
    }
    let mut reasons = Vec::new();
    if !mark.is_empty() {
        reasons.push(
            Reason::new(
                ReasonCode::NodeUnneeded,
                format!(
                    "{} became unneeded (requests under scaleDown.utilizationThreshold {:.0}%); removed after scaleDown.unneededTime {} once its pods fit elsewhere",
                    mark.join(", "),
                    v.config.scale_down.utilization_threshold * 100.0,
                    humantime::format_duration(v.config.scale_down.unneeded_time)
                ),
            )
            .about(mark.iter().map(|n| ObjectRef::node(n))),
        );
    }
    if !clear.is_empty() {
        reasons.push(Reason::new(
            ReasonCode::CapacitySufficient,
            format!(
                "{} no longer under scaleDown.utilizationThreshold; unneeded clock stopped",
                clear.join(", ")
            ),
        ));
    }
    Some((
        Action::MarkUnneeded {
            mark,
            clear,
            at: secs(v.now),
        },
        reasons,
    ))
}

//! The unneeded clock: since when a node has been unneeded, kept in its annotation
//! [`ANNOTATION_UNNEEDED_SINCE`] so that it survives a restart; the mark-unneeded step
//! starts and stops it.

use std::time::SystemTime;

use super::screen::unneeded;
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

/// Starts the unneeded clock on nodes that became unneeded and stops it on those that
/// no longer are, in node annotations.
///
/// An annotation that is no time (edited by hand, written by another tool) is never read
/// as "long ago": the node counts as unneeded since now, the clock is written anew and
/// the plan notes it.
pub fn mark_unneeded(v: &View<'_>, notes: &mut Vec<Reason>) -> StepResult {
    let now_unneeded: Vec<&str> = unneeded(v).iter().map(|u| u.node.name.as_str()).collect();
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
                    "{} became unneeded; removal after scaleDown.unneededTime {}",
                    mark.join(", "),
                    humantime::format_duration(v.config.scale_down.unneeded_time)
                ),
            )
            .about(mark.iter().map(|n| ObjectRef::node(n))),
        );
    }
    if !clear.is_empty() {
        reasons.push(Reason::new(
            ReasonCode::CapacitySufficient,
            format!("{} needed again; unneeded clock stopped", clear.join(", ")),
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

//! Why a node is replaced whatever the load: broken (NotReady too long, or its VM in
//! error), past its life (`oldNodeAgeLimit`), or made from settings its group no longer
//! has (drift).

use std::time::Duration;

use crate::config::DisruptionReason;
use crate::model::{NodeInfo, ObjectRef, LABEL_SETTINGS_HASH};
use crate::plan::view::{Member, View};
use crate::plan::{Reason, ReasonCode};

/// Why `n` should be replaced for `reason`, if it should.
pub fn replacement_reason(
    v: &View<'_>,
    m: &Member<'_>,
    n: &NodeInfo,
    reason: DisruptionReason,
) -> Option<Reason> {
    let about = [ObjectRef::node(&n.name)];
    match reason {
        DisruptionReason::Unhealthy => {
            if m.vm_error {
                return Some(
                    Reason::new(
                        ReasonCode::NodeUnhealthy,
                        format!("the cloud reports VM {} in error; replacing it through cordon and drain", m.server.name),
                    )
                    .about(about),
                );
            }
            let since = n.ready_changed.unwrap_or(n.created);
            (!n.ready && v.age(since) > v.config.health.unhealthy_after).then(|| {
                Reason::new(
                    ReasonCode::NodeUnhealthy,
                    format!(
                        "{} has been NotReady for {} (health.unhealthyAfter {})",
                        n.name,
                        humantime::format_duration(Duration::from_secs(v.age(since).as_secs())),
                        humantime::format_duration(v.config.health.unhealthy_after)
                    ),
                )
                .about(about)
            })
        }
        DisruptionReason::Expired => {
            let limit = v.config.old_node_age_limit?;
            (v.age(n.created) > limit).then(|| {
                Reason::new(
                    ReasonCode::NodeTooOld,
                    format!(
                        "node {} is {} old, past oldNodeAgeLimit {}",
                        n.name,
                        humantime::format_duration(Duration::from_secs(v.age(n.created).as_secs())),
                        humantime::format_duration(limit)
                    ),
                )
                .about(about)
            })
        }
        DisruptionReason::Drifted => {
            // The node's label first; a node without it (it was removed, or the user
            // data dropped it) still has the hash the VM was tagged with at creation.
            let hash = n
                .labels
                .get(LABEL_SETTINGS_HASH)
                .or(m.server.settings_hash.as_ref())?;
            (v.config.disruption.drift && !m.group.hash_is_current(hash)).then(|| {
                Reason::new(
                    ReasonCode::NodeDrifted,
                    format!(
                        "{} was made from other settings of group {} (hash {hash}, now {})",
                        n.name, m.group.name, m.group.settings_hash
                    ),
                )
                .about(about)
            })
        }
        DisruptionReason::Empty | DisruptionReason::Underutilized => None,
    }
}

//! Why a node is replaced whatever the load: broken (NotReady too long, or its VM in
//! error), past its life (`oldNodeAgeLimit`), or made from settings its group no longer
//! has or a kubelet older than the control plane's (drift).

use std::time::Duration;

use crate::config::DisruptionReason;
use crate::model::{KubeVersion, NodeInfo, ObjectRef, LABEL_SETTINGS_HASH};
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
            if !v.config.disruption.drift {
                return None;
            }
            settings_drift(m, n).or_else(|| version_drift(v, m, n))
        }
        DisruptionReason::Empty | DisruptionReason::Underutilized => None,
    }
}

/// A node made from settings its group no longer has.
fn settings_drift(m: &Member<'_>, n: &NodeInfo) -> Option<Reason> {
    // The node's label first; a node without it (it was removed, or the user data
    // dropped it) still has the hash the VM was tagged with at creation.
    let hash = n
        .labels
        .get(LABEL_SETTINGS_HASH)
        .or(m.server.settings_hash.as_ref())?;
    (!m.group.hash_is_current(hash)).then(|| {
        Reason::new(
            ReasonCode::NodeDrifted,
            format!(
                "{} was made from other settings of group {} (hash {hash}, now {})",
                n.name, m.group.name, m.group.settings_hash
            ),
        )
        .about([ObjectRef::node(&n.name)])
    })
}

/// A node whose kubelet is older than what a new node of its group gets: the API
/// server's version, or the group's pinned one when that is older. Only for a group
/// that follows the control plane and whose template installs the server's version, so
/// the node replacing it is not older again.
fn version_drift(v: &View<'_>, m: &Member<'_>, n: &NodeInfo) -> Option<Reason> {
    if !m.group.follow_control_plane_version || !m.group.template_reads_server_version {
        return None;
    }
    let server = v.server_version.as_ref()?;
    let kubelet = KubeVersion::parse(n.kubelet_version.as_deref()?)?;
    let (target, whose) = match m.group.pinned_version() {
        // A pin that is no version (`stable`, `latest`) says nothing new nodes run.
        Some((var, pin)) => {
            let pin = KubeVersion::parse(pin)?;
            if pin.older_than(server) {
                (pin, format!("the group's pinned {var}"))
            } else {
                (server.clone(), "the API server's".to_string())
            }
        }
        None => (server.clone(), "the API server's".to_string()),
    };
    kubelet.older_than(&target).then(|| {
        Reason::new(
            ReasonCode::NodeDrifted,
            format!(
                "{} runs kubelet {kubelet}, older than {whose} {target}: replaced so the nodes follow the control plane (group {} followControlPlaneVersion)",
                n.name, m.group.name
            ),
        )
        .about([ObjectRef::node(&n.name)])
    })
}

/// Notes every group that pins a version newer than the API server's: its scale-ups
/// are refused (a node is never newer than its control plane), so a person must lower
/// the pin or upgrade the server.
pub fn note_pins_newer_than_server(v: &View<'_>, notes: &mut Vec<Reason>) {
    let Some(server) = &v.server_version else {
        return;
    };
    for g in &v.config.node_groups {
        let Some((var, pin)) = g.pinned_version() else {
            continue;
        };
        if KubeVersion::parse(pin).is_some_and(|p| server.older_than(&p)) {
            notes.push(Reason::new(
                ReasonCode::VersionNewerThanServer,
                format!(
                    "group {} pins {var} {pin}, newer than the API server's {server}: it makes no node (none is newer than its control plane); lower the pin or upgrade the server",
                    g.name
                ),
            ));
        }
    }
}

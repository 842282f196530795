//! Nodes whose settings-hash label an earlier release stamped for the settings their
//! group has now: the hash's format changed, not what the node is made from.

use std::collections::BTreeMap;

use super::StepResult;
use crate::model::{ObjectRef, LABEL_SETTINGS_HASH};
use crate::plan::view::View;
use crate::plan::{Action, Reason, ReasonCode};

/// Nodes of ours labelled with a legacy hash of their group's settings (see
/// [`crate::config::hash::legacy_settings_hashes`]) get today's hash, one label patch per
/// node: a format-only change relabels, it never replaces a node. Low in priority, and
/// harmless meanwhile: a legacy hash already counts as current for drift.
pub fn relabel_hash(v: &View<'_>, _notes: &mut Vec<Reason>) -> StepResult {
    let mut nodes = BTreeMap::new();
    let mut reasons = Vec::new();
    for m in &v.members {
        let Some(n) = m.node.filter(|n| !n.deleting) else {
            continue;
        };
        let Some(hash) = n.labels.get(LABEL_SETTINGS_HASH) else {
            continue;
        };
        if *hash == m.group.settings_hash || !m.group.legacy_settings_hashes.contains(hash) {
            continue;
        }
        nodes.insert(n.name.clone(), m.group.settings_hash.clone());
        reasons.push(
            Reason::new(
                ReasonCode::HashFormatChanged,
                format!(
                    "node {} of group {} carries settings hash {hash}, an earlier release's for the same settings; relabelled {} (never replaced for it)",
                    n.name, m.group.name, m.group.settings_hash
                ),
            )
            .about([ObjectRef::node(&n.name)]),
        );
    }
    if nodes.is_empty() {
        return None;
    }
    Some((Action::RelabelHash { nodes }, reasons))
}

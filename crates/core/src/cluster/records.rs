//! When a node of each group was last deleted and when a removal last failed, kept in
//! the cluster (data keys of the status ConfigMap) so that `scaleDown.delayAfterDelete`
//! and `delayAfterFailure` hold across a restart: the loop stays stateless.

use std::collections::BTreeMap;
use std::time::SystemTime;

/// Data key prefix of the last node deletion of a group: `lastNodeDeleted.<group>`.
pub const LAST_NODE_DELETED: &str = "lastNodeDeleted";
/// Data key prefix of the last failed removal of a group: `lastDisruptionFailure.<group>`.
pub const LAST_FAILURE: &str = "lastDisruptionFailure";

/// Data key of the times VMs were last removed for not joining (comma-separated RFC 3339
/// times, the latest few), so their rate holds across a restart: `notJoinedRemoved`.
pub const NOT_JOINED_REMOVED: &str = "notJoinedRemoved";

/// What is recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordKind {
    /// A node was deleted (`scaleDown.delayAfterDelete`).
    NodeDeleted,
    /// A drain was given up or a removal failed (`scaleDown.delayAfterFailure`).
    Failure,
}

impl RecordKind {
    fn prefix(self) -> &'static str {
        match self {
            RecordKind::NodeDeleted => LAST_NODE_DELETED,
            RecordKind::Failure => LAST_FAILURE,
        }
    }
}

/// The records as read back, per group.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DisruptionRecords {
    pub last_node_deleted: BTreeMap<String, SystemTime>,
    pub last_failure: BTreeMap<String, SystemTime>,
    /// When VMs were last removed for not joining, cluster-wide (see [`NOT_JOINED_REMOVED`]).
    pub not_joined_removed: Vec<SystemTime>,
}

impl DisruptionRecords {
    /// The records among a ConfigMap's data; other keys, and values that are not RFC 3339
    /// times (logged), are left out.
    pub fn from_data(data: &BTreeMap<String, String>) -> DisruptionRecords {
        let mut out = DisruptionRecords::default();
        for (key, value) in data {
            if key == NOT_JOINED_REMOVED {
                out.not_joined_removed = value
                    .split(',')
                    .filter(|t| !t.trim().is_empty())
                    .filter_map(|t| match humantime::parse_rfc3339_weak(t.trim()) {
                        Ok(t) => Some(t),
                        Err(e) => {
                            tracing::warn!(key = %key, value = %t, error = %e, "unreadable removal time; ignored");
                            None
                        }
                    })
                    .collect();
                continue;
            }
            let Some((prefix, group)) = key.split_once('.') else {
                continue;
            };
            let map = match prefix {
                LAST_NODE_DELETED => &mut out.last_node_deleted,
                LAST_FAILURE => &mut out.last_failure,
                _ => continue,
            };
            match humantime::parse_rfc3339_weak(value) {
                Ok(t) => {
                    map.insert(group.to_string(), t);
                }
                Err(e) => {
                    tracing::warn!(key = %key, value = %value, error = %e, "unreadable disruption record; ignored")
                }
            }
        }
        out
    }

    /// The latest of `kind` over every group: the scale-down delays apply cluster-wide.
    pub fn latest(&self, kind: RecordKind) -> Option<SystemTime> {
        match kind {
            RecordKind::NodeDeleted => &self.last_node_deleted,
            RecordKind::Failure => &self.last_failure,
        }
        .values()
        .max()
        .copied()
    }
}

/// The data keys recording `at` as the last `kind` of each of `groups`.
pub fn record_data(
    kind: RecordKind,
    groups: &[String],
    at: SystemTime,
) -> BTreeMap<String, String> {
    let at = humantime::format_rfc3339_seconds(at).to_string();
    groups
        .iter()
        .map(|g| (format!("{}.{g}", kind.prefix()), at.clone()))
        .collect()
}

/// The data key recording `times` as the latest removals for not joining.
pub fn not_joined_data(times: &[SystemTime]) -> BTreeMap<String, String> {
    let value = times
        .iter()
        .map(|t| humantime::format_rfc3339_seconds(*t).to_string())
        .collect::<Vec<_>>()
        .join(",");
    BTreeMap::from([(NOT_JOINED_REMOVED.to_string(), value)])
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn records_round_trip_through_configmap_data_and_ignore_the_rest() {
        let t = |s: u64| SystemTime::UNIX_EPOCH + Duration::from_secs(s);
        let mut data = record_data(
            RecordKind::NodeDeleted,
            &["a".to_string(), "b".to_string()],
            t(1_900_000_000),
        );
        data.extend(record_data(
            RecordKind::Failure,
            &["a".to_string()],
            t(1_900_000_100),
        ));
        assert_eq!(
            data.get("lastNodeDeleted.a").map(String::as_str),
            Some("2030-03-17T17:46:40Z")
        );
        data.insert("status".into(), "health: Healthy\n".into());
        data.insert("lastNodeDeleted.c".into(), "yesterday".into());
        let r = DisruptionRecords::from_data(&data);
        assert_eq!(r.last_node_deleted.len(), 2);
        assert_eq!(r.latest(RecordKind::NodeDeleted), Some(t(1_900_000_000)));
        assert_eq!(r.latest(RecordKind::Failure), Some(t(1_900_000_100)));
        assert_eq!(
            DisruptionRecords::default().latest(RecordKind::Failure),
            None
        );
    }
}

//! Actions that keep failing on the same objects are held back for a while, so the next
//! step's action runs meanwhile: one node whose PATCH answers 500 must not block every
//! other action in every group. The loop remembers the failures (soft state: a restart
//! costs one more attempt) and passes them in the snapshot as `action_backoff`; the
//! planner skips an action whose every object is held back.
//!
//! Creates are not here: a failed create backs its group off (`group_backoff`).

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use super::{Action, Target};

/// Failures in a row tried again at once: most are passing (a 409 Conflict on a node
/// someone else just changed, a dropped connection), and holding them back slowed
/// scale-down under faults more than it helped.
pub const RETRIED_AT_ONCE: u32 = 4;
/// The wait after the first failure past those; doubled at each further one.
pub const FIRST_WAIT: Duration = Duration::from_secs(10);
/// The longest wait.
pub const MAX_WAIT: Duration = Duration::from_secs(300);

/// How long to hold an action back after its `failures`-th failure in a row.
pub fn wait_after(failures: u32) -> Duration {
    if failures <= RETRIED_AT_ONCE {
        return Duration::ZERO;
    }
    let doublings = (failures - RETRIED_AT_ONCE - 1).min(16);
    FIRST_WAIT.saturating_mul(1 << doublings).min(MAX_WAIT)
}

/// The keys an action's failure is remembered under: its kind and each object it acts
/// on (`cordon node/web-1`). Empty for actions on a whole group (their own backoff) and
/// for `None`.
pub fn keys(action: &Action) -> Vec<String> {
    let kind = action.kind();
    action.targets().into_iter().map(|t| key(kind, t)).collect()
}

/// The key of one object of an action of `kind`: the actuator names with it each object
/// an action failed on, so that object alone is held back.
pub fn key(kind: &str, t: Target<'_>) -> String {
    match t {
        Target::Node(n) => format!("{kind} node/{n}"),
        Target::Server(s) => format!("{kind} server/{}/{}", s.group, s.id),
        Target::Pod(p) => format!("{kind} pod/{}/{}", p.namespace, p.name),
    }
}

/// Whether an action of `kind` on `target` is held back at `now`: a step choosing a few
/// of many objects puts these last, so one that keeps failing never keeps the others
/// waiting behind it.
pub fn is_held_back(
    kind: &str,
    target: Target<'_>,
    backoff: &BTreeMap<String, SystemTime>,
    now: SystemTime,
) -> bool {
    backoff
        .get(&key(kind, target))
        .is_some_and(|until| *until > now)
}

/// When `action` may be tried again, if every object it acts on is held back at `now`.
pub fn held_back_until(
    action: &Action,
    backoff: &BTreeMap<String, SystemTime>,
    now: SystemTime,
) -> Option<SystemTime> {
    let keys = keys(action);
    if keys.is_empty() {
        return None;
    }
    let mut latest = now;
    for k in &keys {
        match backoff.get(k) {
            Some(until) if *until > now => latest = latest.max(*until),
            _ => return None,
        }
    }
    Some(latest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_double_up_to_the_longest() {
        assert_eq!(wait_after(1), Duration::ZERO);
        assert_eq!(wait_after(4), Duration::ZERO);
        assert_eq!(wait_after(5), Duration::from_secs(10));
        assert_eq!(wait_after(6), Duration::from_secs(20));
        assert_eq!(wait_after(8), Duration::from_secs(80));
        assert_eq!(wait_after(10), MAX_WAIT);
        assert_eq!(wait_after(u32::MAX), MAX_WAIT);
    }

    #[test]
    fn an_action_is_held_back_only_while_every_object_is() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        let cordon = |ns: &[&str]| Action::Cordon {
            nodes: ns.iter().map(|n| n.to_string()).collect(),
            reason: "r".into(),
            disruption: crate::config::DisruptionReason::Empty,
            at: 0,
        };
        let mut b = BTreeMap::new();
        b.insert("cordon node/a".to_string(), now + Duration::from_secs(30));
        b.insert("cordon node/b".to_string(), now - Duration::from_secs(1));
        assert_eq!(
            held_back_until(&cordon(&["a"]), &b, now),
            Some(now + Duration::from_secs(30))
        );
        // b's wait is over, c never failed: tried.
        assert_eq!(held_back_until(&cordon(&["a", "b"]), &b, now), None);
        assert_eq!(held_back_until(&cordon(&["c"]), &b, now), None);
        // Another kind of action on the same node is not held back.
        let taint = Action::RemoveStartupTaint {
            nodes: vec!["a".into()],
        };
        assert_eq!(held_back_until(&taint, &b, now), None);
        // A create is never held back here (its group backs off instead).
        let up = Action::ScaleUp {
            group: "g".into(),
            count: 1,
            size: None,
        };
        assert!(keys(&up).is_empty());
    }
}

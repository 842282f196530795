//! What the loop remembers between cycles in this process: failures in a row (of a
//! group's creates, of an action on its objects) and until when each is held back, when
//! a node was last deleted and a removal last failed, each provider's last good listing,
//! and each group's allocatable as its nodes showed it. All soft state: a restart
//! forgets it and costs at most one more attempt or one cautious cycle, which is why it
//! may live in memory. The providers themselves are [`crate::act::Clouds`].

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use crate::cloud::Observed;
use crate::model::{GroupShape, NodeInfo, Resources, ServerStatus};
use crate::plan::Action;

/// The loop's memory. Clones share it.
#[derive(Clone, Default)]
pub struct LoopMemory {
    failures: Arc<Mutex<BTreeMap<String, Failures>>>,
    /// When this process last deleted a node and last saw a removal fail, for the
    /// scale-down delays: the cluster keeps the same per group (see
    /// [`crate::cluster::records`]), read back every cycle, so a restart forgets nothing;
    /// this copy covers a cluster whose records cannot be read or written.
    disruption: Arc<Mutex<DisruptionTimes>>,
    /// Actions that failed on their objects (see [`crate::plan::backoff`]), by key: the
    /// failures in a row and until when the action is held back. Soft state, like the
    /// group failures.
    action_failures: Arc<Mutex<BTreeMap<String, Failures>>>,
    /// Each provider's last good listing, as VMs per group and group shapes, for the
    /// cluster-wide limits while it cannot be listed (see [`LastKnown`]). Soft state: a
    /// restart forgets it and the planner then counts the frozen groups at `maxSize`.
    last_known: Arc<Mutex<BTreeMap<String, LastKnown>>>,
    /// Each group's allocatable as its Ready nodes last showed it (see
    /// [`crate::plan::Snapshot::learned_allocatable`]). Soft state: a restart forgets it
    /// and the first node of a group at zero is modelled from its flavor again.
    learned: Arc<Mutex<BTreeMap<String, Resources>>>,
    /// When this process last removed VMs for not joining (the latest few): the cluster
    /// keeps the same (see [`crate::cluster::records`]), read back every cycle; this copy
    /// covers a cluster whose records cannot be read or written.
    not_joined_removed: Arc<Mutex<Vec<SystemTime>>>,
}

/// What a provider's last good listing showed: its VMs (all but those being deleted)
/// per group, and its group shapes.
#[derive(Debug, Clone, Default)]
pub struct LastKnown {
    pub sizes: BTreeMap<String, u32>,
    pub shapes: BTreeMap<String, GroupShape>,
}

#[derive(Debug, Clone, Copy, Default)]
pub struct DisruptionTimes {
    pub last_node_deleted: Option<SystemTime>,
    pub last_failure: Option<SystemTime>,
}

/// Failures in a row of a group's creates, or of one action on one object.
#[derive(Debug, Clone, Copy)]
struct Failures {
    count: u32,
    until: SystemTime,
}

/// Counts one more failure of `key` at `now`, held back for `wait(count)`.
fn count_failure(
    map: &mut BTreeMap<String, Failures>,
    key: String,
    now: SystemTime,
    wait: impl Fn(u32) -> std::time::Duration,
) {
    let count = map.get(&key).map_or(0, |g| g.count) + 1;
    map.insert(
        key,
        Failures {
            count,
            until: now + wait(count),
        },
    );
}

/// A poisoned lock still holds good soft state: a panic elsewhere must not stop the loop.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl LoopMemory {
    /// Records a failed create (or provisioning) in `group`; it is left alone for a while.
    pub fn record_failure(
        &self,
        group: &str,
        backoff: &crate::config::BackoffConfig,
        now: SystemTime,
    ) {
        count_failure(&mut lock(&self.failures), group.to_string(), now, |n| {
            backoff.after(n)
        });
    }

    pub fn record_success(&self, group: &str) {
        lock(&self.failures).remove(group);
    }

    /// Forgets the failed creates of `group`: a reload changed what its VMs are made
    /// from, or removed it.
    pub fn forget_group(&self, group: &str) {
        lock(&self.failures).remove(group);
    }

    /// Groups left alone after failures, and until when.
    pub fn backoffs(&self) -> BTreeMap<String, SystemTime> {
        lock(&self.failures)
            .iter()
            .map(|(g, f)| (g.clone(), f.until))
            .collect()
    }

    /// Remembers `observed` as the last good listing of `provider`.
    pub fn remember_observed(&self, provider: &str, observed: &Observed) {
        let mut sizes = BTreeMap::new();
        for s in &observed.servers {
            if s.status == ServerStatus::Deleting {
                continue;
            }
            if let Some(g) = &s.group {
                *sizes.entry(g.clone()).or_insert(0u32) += 1;
            }
        }
        let known = LastKnown {
            sizes,
            shapes: observed.shapes.clone(),
        };
        lock(&self.last_known).insert(provider.to_string(), known);
    }

    /// The last good listing of `provider` this process saw, if any.
    /// Counts `count` more VMs of `group` in the last good listing of `provider` (see
    /// `Reconciler::act`); the next good listing replaces the guess.
    pub fn remember_creating(&self, provider: &str, group: &str, count: u32) {
        if let Some(k) = lock(&self.last_known).get_mut(provider) {
            *k.sizes.entry(group.to_string()).or_insert(0) += count;
        }
    }

    pub fn last_known(&self, provider: &str) -> Option<LastKnown> {
        lock(&self.last_known).get(provider).cloned()
    }

    /// Learns each group's allocatable from its Ready nodes of `cluster` in `nodes` (the
    /// largest, as the planner takes it), by `<group>/<settings hash>` (a node made from
    /// other settings, another flavor, teaches nothing about the next one), and returns
    /// what is known.
    pub fn learn_allocatable(
        &self,
        cluster: &str,
        nodes: &[NodeInfo],
    ) -> BTreeMap<String, Resources> {
        let mut seen: BTreeMap<String, Resources> = BTreeMap::new();
        for n in nodes.iter().filter(|n| n.ready && !n.deleting) {
            if n.labels
                .get(crate::model::LABEL_CLUSTER)
                .map(String::as_str)
                != Some(cluster)
            {
                continue;
            }
            if n.has_taint(crate::model::STARTUP_TAINT_KEY) {
                continue;
            }
            let (Some(g), Some(h)) = (
                n.labels.get(crate::model::LABEL_GROUP),
                n.labels.get(crate::model::LABEL_SETTINGS_HASH),
            ) else {
                continue;
            };
            seen.entry(format!("{g}/{h}"))
                .or_default()
                .max_with(&n.allocatable);
        }
        let mut learned = lock(&self.learned);
        learned.extend(seen);
        learned.clone()
    }

    /// The removals for not joining this process remembers together with `recorded`
    /// (the cluster's record), the latest first counted once each.
    pub fn not_joined_removed(&self, recorded: &[SystemTime]) -> Vec<SystemTime> {
        let mine = lock(&self.not_joined_removed);
        // Each list holds the latest few; the longer of the two at each time wins, so a
        // removal both hold counts once.
        let mut all: Vec<SystemTime> = mine.clone();
        for t in recorded {
            let theirs = recorded.iter().filter(|x| *x == t).count();
            let have = all.iter().filter(|x| *x == t).count();
            if have < theirs {
                all.push(*t);
            }
        }
        all.sort();
        all
    }

    /// Remembers `times` as the latest removals for not joining.
    pub fn remember_not_joined_removed(&self, times: &[SystemTime]) {
        *lock(&self.not_joined_removed) = times.to_vec();
    }

    pub fn disruption_times(&self) -> DisruptionTimes {
        *lock(&self.disruption)
    }

    pub fn record_node_deleted(&self, now: SystemTime) {
        lock(&self.disruption).last_node_deleted = Some(now);
    }

    pub fn record_disruption_failure(&self, now: SystemTime) {
        lock(&self.disruption).last_failure = Some(now);
    }

    /// Records that `action` failed at `now`: each object it acts on is held back, longer
    /// at each failure in a row.
    pub fn record_action_failure(&self, action: &Action, now: SystemTime) {
        let mut f = lock(&self.action_failures);
        // Objects long gone (a node removed since) are forgotten.
        let forget = crate::plan::backoff::MAX_WAIT * 4;
        f.retain(|_, g| g.until + forget > now);
        for key in crate::plan::backoff::keys(action) {
            count_failure(&mut f, key, now, crate::plan::backoff::wait_after);
        }
    }

    /// Records that `action` failed at `now` on the objects whose keys are `failed` (see
    /// [`crate::plan::backoff::key`]) and was done on the others: only those are held back.
    pub fn record_action_failed_on(&self, action: &Action, failed: &[String], now: SystemTime) {
        let mut f = lock(&self.action_failures);
        for key in crate::plan::backoff::keys(action) {
            if failed.contains(&key) {
                count_failure(&mut f, key, now, crate::plan::backoff::wait_after);
            } else {
                f.remove(&key);
            }
        }
    }

    /// Records that `action` succeeded: its objects are no longer held back.
    pub fn record_action_success(&self, action: &Action) {
        let mut f = lock(&self.action_failures);
        for key in crate::plan::backoff::keys(action) {
            f.remove(&key);
        }
    }

    /// Actions held back after failures, by key, and until when.
    pub fn action_backoffs(&self) -> BTreeMap<String, SystemTime> {
        lock(&self.action_failures)
            .iter()
            .map(|(k, g)| (k.clone(), g.until))
            .collect()
    }
}

//! The stateless loop: observe → decide → act, once per `scanInterval`. Everything a
//! cycle needs is read back from the cluster and the cloud, so a killed process (or a
//! second replica) carries on where the last one stopped.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::SystemTime;

use super::LoopMemory;
use crate::act::{ActError, Actuator, Clouds, Outcome};
use crate::cloud::in_use::Listing;
use crate::cloud::CloudError;
use crate::cluster::{ClusterApi, ClusterError, DisruptionRecords, RecordKind};
use crate::config::Config;
use crate::plan::{self, Decision, Snapshot};

#[derive(Debug, thiserror::Error)]
pub enum CycleError {
    #[error("observing the cluster: {0}")]
    Cluster(#[from] ClusterError),
    #[error("observing the cloud: {0}")]
    Cloud(#[from] CloudError),
    #[error("acting: {0}")]
    Act(#[from] ActError),
}

/// One cycle's record: what was seen, decided and done.
#[derive(Debug, Clone)]
pub struct CycleReport {
    pub decision: Decision,
    pub outcome: Outcome,
}

/// A cycle that observed and decided; acting may still have failed.
pub struct Cycle {
    pub snapshot: Snapshot,
    pub decision: Decision,
    pub result: Result<Outcome, ActError>,
}

pub struct Reconciler {
    pub config: Arc<Config>,
    pub cluster: Arc<dyn ClusterApi>,
    pub clouds: Clouds,
    /// What this process remembers between cycles (backoffs, disruption times, last
    /// listings): a new reconciler (a restart) starts with it empty.
    pub memory: LoopMemory,
    pub dry_run: bool,
}

impl Reconciler {
    /// Reads our servers from every provider, concurrently, then nodes and pods. Providers
    /// fail alone: one that cannot be listed, or whose listing is still running (see
    /// [`crate::act::Clouds::observe_all`]), is named in the snapshot and its groups are
    /// frozen on its last answer, while the others carry on. The cluster is read after
    /// the providers answered, so what the cycle acts on is never older than its start by
    /// the wait for a slow cloud.
    pub async fn observe(&self) -> Result<Snapshot, CycleError> {
        self.learn_identity().await;
        let cluster_name = &self.config.cluster_name;
        // One call per provider (servers and group shapes together), all providers at once,
        // each within its deadline: a hung or rate-limited cloud freezes its own groups.
        let observed = self.clouds.observe_all(cluster_name).await;
        let (nodes, pods, pdbs, volume_attachments, volumes) = tokio::try_join!(
            self.cluster.nodes(),
            self.cluster.pods(),
            self.cluster.pdbs(),
            self.cluster.volume_attachments(),
            self.cluster.volumes()
        )?;
        // Unreadable records (e.g. RBAC not updated) leave what this process remembers:
        // a warning, not a stalled loop.
        let records = self.cluster.disruption_records().await.unwrap_or_else(|e| {
            tracing::warn!(error = %e, "reading the disruption records failed; the scale-down delays count from what this process remembers");
            DisruptionRecords::default()
        });
        let mut servers = Vec::new();
        let mut group_shapes = BTreeMap::new();
        let mut seen = BTreeSet::new();
        let mut unavailable = BTreeMap::new();
        let mut cloud_failures = Vec::new();
        let mut strays = Vec::new();
        let mut frozen_sizes = BTreeMap::new();
        for (provider, _, listing) in observed {
            match listing {
                Listing::Answered(o) => {
                    self.memory.remember_observed(provider.name(), &o);
                    // One VM may be listed once per group it counts for (a Proxmox clone
                    // still copying, of a template several groups use): each group keeps
                    // it, or the other would make a second VM for the same need.
                    for s in o.servers {
                        if seen.insert((s.provider.clone(), s.id.clone(), s.group.clone())) {
                            servers.push(s);
                        }
                    }
                    strays.extend(o.strays);
                    group_shapes.extend(o.shapes);
                    let name = provider.name();
                    cloud_failures.extend(o.failures.into_iter().map(|f| (name.to_string(), f)));
                }
                Listing::Unavailable(e) => {
                    tracing::warn!(provider = provider.name(), error = %e, "reading the provider's VMs or group shapes failed; freezing this provider's groups for the cycle");
                    unavailable.insert(provider.name().to_string(), e);
                    // Its last good figures keep counting in the limits.
                    if let Some(known) = self.memory.last_known(provider.name()) {
                        frozen_sizes.extend(known.sizes);
                        for (g, shape) in known.shapes {
                            group_shapes.entry(g).or_insert(shape);
                        }
                    }
                }
            }
        }
        // Servers of a frozen provider would be half a picture: leave them all out.
        servers.retain(|s| !unavailable.contains_key(&s.provider));
        let remembered = self.memory.disruption_times();
        let learned_allocatable = self.memory.learn_allocatable(cluster_name, &nodes);
        let server_version = self.cluster.server_version().await.unwrap_or_else(|e| {
            tracing::warn!(error = %e, "reading the API server's version (/version) failed; no node is called drifted for its version this cycle, and new nodes' templates get no server_version");
            None
        });
        let mut snapshot = Snapshot {
            nodes,
            server_version,
            pods,
            servers,
            group_shapes,
            unavailable_providers: unavailable,
            frozen_sizes,
            learned_allocatable,
            cloud_failures,
            strays,
            pdbs,
            volume_attachments,
            volumes,
            group_backoff: self.memory.backoffs(),
            action_backoff: self.memory.action_backoffs(),
            last_node_deleted: remembered
                .last_node_deleted
                .max(records.latest(RecordKind::NodeDeleted)),
            last_disruption_failure: remembered
                .last_failure
                .max(records.latest(RecordKind::Failure)),
            not_joined_removed: self.memory.not_joined_removed(&records.not_joined_removed),
        };
        snapshot.resolve_volumes(&self.config);
        Ok(snapshot)
    }

    /// Reads the cluster's identity (see [`crate::cloud::ClusterIdentity`]) for the
    /// providers until it is known: once, as it never changes. Unreadable, the loop goes on
    /// and the providers that need it say so when they do (a Proxmox seed is not made).
    async fn learn_identity(&self) {
        let identity = self.clouds.identity();
        if identity.get().is_some() {
            return;
        }
        match self.cluster.identity().await {
            Ok(Some(uid)) => {
                tracing::info!(identity = %uid, "cluster identity read (the kube-system namespace's UID)");
                identity.learn(&uid);
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(error = %e, "reading the cluster's identity (the kube-system namespace's UID) failed; Proxmox cloud-init seeds are neither made nor swept until it is read (grant get on namespaces/kube-system, see deploy/kustomize/base/rbac.yaml)")
            }
        }
    }

    /// Observe and decide, changing nothing (what `nodewright plan` prints).
    pub async fn plan(&self, now: SystemTime) -> Result<(Snapshot, Decision), CycleError> {
        let snapshot = self.observe().await?;
        let decision = plan::plan(&snapshot, &self.config, now);
        Ok((snapshot, decision))
    }

    /// One full cycle: observe, decide, act.
    pub async fn cycle(&self, now: SystemTime) -> Result<CycleReport, CycleError> {
        let c = self.cycle_detailed(now).await?;
        Ok(CycleReport {
            decision: c.decision,
            outcome: c.result?,
        })
    }

    /// As [`Self::cycle`], keeping the snapshot, and the decision even when acting failed.
    pub async fn cycle_detailed(&self, now: SystemTime) -> Result<Cycle, CycleError> {
        let (snapshot, decision) = self.plan(now).await?;
        let result = self.act(&snapshot, &decision, now).await;
        Ok(Cycle {
            snapshot,
            decision,
            result,
        })
    }

    /// Counts the VMs `action` is about to make in their provider's last good listing,
    /// before the calls (a create that fails half-way may leave its VM): made since that
    /// listing, they would be missing from the limits if the next listing fails, and
    /// another provider's group would grow into their room.
    fn count_creates(&self, action: &plan::Action) {
        let (group, count) = match action {
            plan::Action::ScaleUp { group, count, .. }
            | plan::Action::FillWarmPool { group, count } => (group, *count),
            _ => return,
        };
        if let Ok(p) = self.clouds.for_group(group) {
            self.memory.remember_creating(p.name(), group, count);
        }
    }

    /// Carries out a decision made on `snapshot` at `now` (the loop's clock, virtual in
    /// a replay).
    pub async fn act(
        &self,
        snapshot: &Snapshot,
        decision: &Decision,
        now: SystemTime,
    ) -> Result<Outcome, ActError> {
        let taken_names = snapshot
            .nodes
            .iter()
            .map(|n| n.name.clone())
            .chain(snapshot.servers.iter().map(|s| s.name.clone()))
            .collect();
        let mut actuator = Actuator {
            config: &self.config,
            cluster: self.cluster.as_ref(),
            clouds: &self.clouds,
            taken_names,
            group_shapes: &snapshot.group_shapes,
            server_version: snapshot.server_version.as_deref(),
            dry_run: self.dry_run,
            failed: Vec::new(),
            now,
        };
        if !self.dry_run {
            self.count_creates(&decision.action);
        }
        let result = actuator.execute(&decision.action).await;
        // The objects the action failed on, when it names them: the others were done.
        let failed = actuator.failed;
        let let_in: Vec<String> = if result.is_ok() || !failed.is_empty() {
            let kind = decision.action.kind();
            decision
                .action
                .lets_in()
                .iter()
                .filter(|n| {
                    !failed.contains(&plan::backoff::key(kind, plan::Target::Node(n.as_str())))
                })
                .cloned()
                .collect()
        } else {
            Vec::new()
        };
        if !let_in.is_empty() && !self.dry_run {
            self.mark_joined(snapshot, &let_in, now).await;
        }
        self.record_outcome(snapshot, decision, &result, &let_in, now);
        if !self.dry_run {
            match &result {
                Ok(_) => self.memory.record_action_success(&decision.action),
                Err(_) if failed.is_empty() => {
                    self.memory.record_action_failure(&decision.action, now)
                }
                Err(_) => self
                    .memory
                    .record_action_failed_on(&decision.action, &failed, now),
            }
        }
        if !self.dry_run {
            self.record_disruption(snapshot, decision, &result, now)
                .await;
            self.record_not_joined(snapshot, decision, now).await;
        }
        result
    }

    /// VMs the decision removes for not joining are recorded (attempted or done: the
    /// rate counts attempts) in this process and in the cluster, so the rate of such
    /// removals holds across cycles and restarts (see
    /// [`crate::plan::MAX_NOT_JOINED_PER_ACTION`]).
    async fn record_not_joined(&self, snapshot: &Snapshot, decision: &Decision, now: SystemTime) {
        if !decision.removes_not_joined() {
            return;
        }
        let count = decision
            .reasons
            .iter()
            .filter(|r| r.code.counts_toward_not_joined_rate())
            .count();
        let mut times = snapshot.not_joined_removed.clone();
        times.extend(std::iter::repeat_n(now, count));
        times.sort();
        let keep = times.len().saturating_sub(plan::MAX_NOT_JOINED_PER_ACTION);
        times.drain(..keep);
        self.memory.remember_not_joined_removed(&times);
        if let Err(e) = self.cluster.record_not_joined_removed(&times).await {
            tracing::warn!(error = %e, "could not record the removals for not joining in the cluster; this process still counts them");
        }
    }

    /// Records on the VMs of `nodes`, just let in, that they joined (see
    /// [`crate::cloud::JOINED_TAG`]), so the mark is there from the first moment pods
    /// can land. Best effort: a VM left unmarked is marked by a later plan
    /// (`mark-joined`).
    async fn mark_joined(&self, snapshot: &Snapshot, nodes: &[String], now: SystemTime) {
        let cluster = &self.config.cluster_name;
        for s in snapshot
            .servers
            .iter()
            .filter(|s| nodes.contains(&s.name) && s.cluster.as_deref() == Some(cluster.as_str()))
        {
            let Some(provider) = s
                .group
                .as_deref()
                .and_then(|g| self.clouds.for_group(g).ok())
            else {
                continue;
            };
            let at = now.max(s.created);
            if let Err(e) = provider.mark_joined(cluster, &s.id, Some(at)).await {
                tracing::warn!(vm = %s.name, id = %s.id, error = %e, "could not record that the VM joined; a later cycle tries again");
            }
        }
    }

    /// Node deletions and failed removals are written to the cluster per group, so the
    /// scale-down delays hold after a restart; a failed write is logged (this process
    /// still remembers).
    async fn record_disruption(
        &self,
        snapshot: &Snapshot,
        decision: &Decision,
        result: &Result<Outcome, ActError>,
        now: SystemTime,
    ) {
        let (kind, groups): (RecordKind, BTreeSet<String>) = match (&decision.action, result) {
            (plan::Action::DeleteNodes { nodes }, result) => (
                if result.is_ok() {
                    RecordKind::NodeDeleted
                } else {
                    RecordKind::Failure
                },
                nodes.iter().map(|t| t.server.group.clone()).collect(),
            ),
            (plan::Action::Uncordon { nodes, .. }, _) => (
                RecordKind::Failure,
                snapshot
                    .servers
                    .iter()
                    .filter(|s| nodes.contains(&s.name))
                    .filter_map(|s| s.group.clone())
                    .collect(),
            ),
            _ => return,
        };
        let groups: Vec<String> = groups.into_iter().collect();
        if let Err(e) = self.cluster.record_disruption(kind, &groups, now).await {
            tracing::warn!(error = %e, ?kind, "could not record the disruption in the cluster; a restart may forget its scale-down delay");
        }
    }

    /// Failed creates, and VMs that failed to provision, back their group off; a VM that
    /// joined clears it.
    fn record_outcome(
        &self,
        snapshot: &Snapshot,
        decision: &Decision,
        result: &Result<Outcome, ActError>,
        let_in: &[String],
        now: SystemTime,
    ) {
        let backoff = &self.config.scale_up_backoff;
        if let (Some(group), Err(ActError::Cloud(e))) = (decision.action.group(), result) {
            tracing::warn!(group = %group, error = %e, "create or start failed; backing the group off");
            self.memory.record_failure(group, backoff, now);
            return;
        }
        match (&decision.action, result) {
            // The nodes let in, all of them or those the action did not fail on.
            (plan::Action::RemoveStartupTaint { .. }, _) => {
                let groups: BTreeSet<&str> = snapshot
                    .servers
                    .iter()
                    .filter(|s| let_in.contains(&s.name))
                    .filter_map(|s| s.group.as_deref())
                    .collect();
                for g in groups {
                    self.memory.record_success(g);
                }
            }
            // Stale warm VMs and unfinished removals deleted are no provisioning failure.
            (plan::Action::DeleteServers { .. }, Ok(_))
                if decision.reasons.iter().all(|r| r.code.is_routine_removal()) => {}
            (plan::Action::DeleteNodes { .. }, Ok(_)) => self.memory.record_node_deleted(now),
            (plan::Action::DeleteNodes { .. }, Err(_)) | (plan::Action::Uncordon { .. }, _) => {
                self.memory.record_disruption_failure(now)
            }
            (plan::Action::DeleteServers { servers, .. }, Ok(_)) => {
                let groups: BTreeSet<&str> = servers.iter().map(|s| s.group.as_str()).collect();
                for g in groups {
                    self.memory.record_failure(g, backoff, now);
                }
            }
            _ => {}
        }
    }
}

/// Logs an action once, with its reasons (notes go through [`NoteLog`]).
pub fn log_report(report: &CycleReport) {
    let d = &report.decision;
    let reasons: Vec<String> = d.reasons.iter().map(|r| r.to_string()).collect();
    if d.action == plan::Action::None {
        tracing::debug!(reasons = ?reasons, "no action");
    } else {
        tracing::info!(
            action = d.action.kind(),
            reasons = ?reasons,
            done = ?report.outcome.done,
            deferred = ?report.outcome.deferred,
            "{}",
            d.action
        );
    }
}

/// Logs the planner's notes at most once per `scanInterval` each. After an action the
/// next cycle starts at once and mostly notices the same things; logging every cycle's
/// notes printed each one twice within milliseconds. A note that disappears and comes
/// back is logged again.
#[derive(Debug, Default)]
pub struct NoteLog {
    last: std::collections::HashMap<String, std::time::Instant>,
}

impl NoteLog {
    /// The notes of `d` to log at `now`, remembered as logged; notes no longer made are
    /// forgotten.
    pub fn due<'d>(
        &mut self,
        d: &'d Decision,
        now: std::time::Instant,
        every: std::time::Duration,
    ) -> Vec<&'d plan::Reason> {
        let current: BTreeSet<String> = d.notes.iter().map(|n| n.to_string()).collect();
        self.last.retain(|k, _| current.contains(k));
        d.notes
            .iter()
            .filter(|n| {
                let key = n.to_string();
                let fresh = self
                    .last
                    .get(&key)
                    .is_none_or(|t| now.saturating_duration_since(*t) >= every);
                if fresh {
                    self.last.insert(key, now);
                }
                fresh
            })
            .collect()
    }

    /// Logs the notes of `d` that are due (see [`Self::due`]).
    pub fn log(&mut self, d: &Decision, every: std::time::Duration) {
        for note in self.due(d, std::time::Instant::now(), every) {
            tracing::info!(code = ?note.code, "{}", note.message);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;
    use crate::plan::{Action, Reason, ReasonCode};

    fn decision(notes: &[&str]) -> Decision {
        Decision {
            action: Action::None,
            reasons: Vec::new(),
            notes: notes
                .iter()
                .map(|n| Reason::new(ReasonCode::NoGroupFits, n.to_string()))
                .collect(),
            pending: Vec::new(),
            unremovable: Vec::new(),
        }
    }

    fn messages(v: Vec<&Reason>) -> Vec<String> {
        v.into_iter().map(|r| r.message.clone()).collect()
    }

    /// Issue 11: each planner note was logged twice per cycle, by the acting cycle and
    /// again by the one the action starts at once.
    #[test]
    fn planner_notes_are_logged_once_per_scan_interval() {
        let every = Duration::from_secs(30);
        let t0 = Instant::now();
        let mut log = NoteLog::default();
        let d = decision(&["no group can host a/x", "group g at maxSize"]);
        assert_eq!(log.due(&d, t0, every).len(), 2);
        // The cycle right after an action: the same notes, not logged again.
        assert!(log.due(&d, t0 + Duration::from_millis(5), every).is_empty());
        // A new note is logged at once; the old ones wait for their interval.
        let d2 = decision(&["no group can host a/x", "group g at maxSize", "new"]);
        assert_eq!(
            messages(log.due(&d2, t0 + Duration::from_secs(1), every)),
            ["new"]
        );
        assert_eq!(log.due(&d2, t0 + every, every).len(), 2);
        // Gone, then back: logged again.
        let d3 = decision(&["new"]);
        assert!(log.due(&d3, t0 + every, every).is_empty());
        assert_eq!(log.due(&d, t0 + every, every).len(), 2);
    }
}

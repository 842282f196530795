//! The stateless loop: observe → decide → act, once per `scanInterval`. Everything a
//! cycle needs is read back from the cluster and the cloud, so a killed process (or a
//! second replica) carries on where the last one stopped.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::SystemTime;

use crate::act::{ActError, Actuator, Clouds, Outcome};
use crate::cloud::CloudError;
use crate::cluster::{ClusterApi, ClusterError};
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
    pub dry_run: bool,
}

impl Reconciler {
    /// Reads nodes, pods and our servers from every provider, concurrently. Providers
    /// fail alone: one that cannot be listed is named in the snapshot and its groups
    /// are frozen for the cycle, while the others carry on.
    pub async fn observe(&self) -> Result<Snapshot, CycleError> {
        let cluster_name = &self.config.cluster_name;
        let (nodes, pods, pdbs, volume_attachments) = tokio::try_join!(
            self.cluster.nodes(),
            self.cluster.pods(),
            self.cluster.pdbs(),
            self.cluster.volume_attachments()
        )?;
        // One call per provider (servers and group shapes together), all providers at once.
        let providers = self.clouds.by_provider();
        let observed = futures::future::join_all(
            providers
                .iter()
                .map(|(p, groups)| p.observe(cluster_name, groups)),
        )
        .await;
        let mut servers = Vec::new();
        let mut group_shapes = BTreeMap::new();
        let mut seen = BTreeSet::new();
        let mut unavailable = BTreeMap::new();
        for ((provider, _), result) in providers.iter().zip(observed) {
            match result {
                Ok(o) => {
                    for s in o.servers {
                        if seen.insert((s.provider.clone(), s.id.clone())) {
                            servers.push(s);
                        }
                    }
                    group_shapes.extend(o.shapes);
                }
                Err(e) => {
                    tracing::warn!(provider = provider.name(), error = %e, "reading the provider's VMs or group shapes failed; freezing this provider's groups for the cycle");
                    unavailable.insert(provider.name().to_string(), e.to_string());
                }
            }
        }
        // Servers of a frozen provider would be half a picture: leave them all out.
        servers.retain(|s| !unavailable.contains_key(&s.provider));
        Ok(Snapshot {
            nodes,
            pods,
            servers,
            group_shapes,
            unavailable_providers: unavailable,
            pdbs,
            volume_attachments,
            group_backoff: self.clouds.backoffs(),
            last_node_deleted: self.clouds.disruption_times().last_node_deleted,
            last_disruption_failure: self.clouds.disruption_times().last_failure,
        })
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
            dry_run: self.dry_run,
        };
        let result = actuator.execute(&decision.action).await;
        self.record_outcome(snapshot, decision, &result, now);
        result
    }

    /// Failed creates, and VMs that failed to provision, back their group off; a VM that
    /// joined clears it.
    fn record_outcome(
        &self,
        snapshot: &Snapshot,
        decision: &Decision,
        result: &Result<Outcome, ActError>,
        now: SystemTime,
    ) {
        let backoff = &self.config.scale_up_backoff;
        match (&decision.action, result) {
            (plan::Action::RemoveStartupTaint { nodes }, Ok(_)) => {
                let groups: BTreeSet<&str> = snapshot
                    .servers
                    .iter()
                    .filter(|s| nodes.contains(&s.name))
                    .filter_map(|s| s.group.as_deref())
                    .collect();
                for g in groups {
                    self.clouds.record_success(g);
                }
            }
            (plan::Action::ScaleUp { group, .. }, Err(ActError::Cloud(e))) => {
                tracing::warn!(group = %group, error = %e, "create failed; backing the group off");
                self.clouds.record_failure(group, backoff, now);
            }
            (plan::Action::DeleteNodes { .. }, Ok(_)) => self.clouds.record_node_deleted(now),
            (plan::Action::DeleteNodes { .. }, Err(_)) | (plan::Action::Uncordon { .. }, _) => {
                self.clouds.record_disruption_failure(now)
            }
            (plan::Action::DeleteServers { servers, .. }, Ok(_)) => {
                let groups: BTreeSet<&str> = servers.iter().map(|s| s.group.as_str()).collect();
                for g in groups {
                    self.clouds.record_failure(g, backoff, now);
                }
            }
            _ => {}
        }
    }
}

/// Logs an action once, with its reasons and notes.
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
    log_notes(d);
}

/// Logs each of the decision's notes once.
pub fn log_notes(d: &Decision) {
    for note in &d.notes {
        tracing::info!(code = ?note.code, "{}", note.message);
    }
}

//! `nodewright run` as deployed: leader election, the cycle loop, metrics and health,
//! Events, the status ConfigMap, and config reload. The cycle itself is
//! [`Reconciler::cycle_detailed`]; this module only wires the production concerns around it.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context;
use tokio::sync::watch;

use super::cycle::{log_report, Cycle, CycleError, CycleReport, NoteLog, Reconciler};
use super::status::Status;
use super::wakeup::{next_batch, Batching};
use super::LoopMemory;
use crate::act::events::events_for;
use crate::act::Clouds;
use crate::cluster::events::EventRecorder;
use crate::cluster::leader::{LeaderElector, LeaseSettings};
use crate::cluster::{client_from_env, CacheOptions, KubeCluster};
use crate::config::reload::{ConfigWatch, Reload};
use crate::config::Config;
use crate::model::ObjectRef;
use crate::plan::summary::{summarize, Summary, NODE_STATES};
use crate::plan::Action;
use crate::run::clouds::{build_clouds, build_clouds_read_only, credentials_from_env};
use crate::run::ProviderInputs;
use crate::telemetry::http::{self, Health};
use crate::telemetry::metrics::{
    ActionLabels, FailedCreateLabels, GroupLabels, Metrics, NodeStateLabels, ResultLabels,
};

#[derive(Debug, Clone)]
pub struct LeaderOptions {
    pub name: String,
    pub namespace: String,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

#[derive(Debug, Clone)]
pub struct RunOptions {
    pub config_path: PathBuf,
    pub dry_run: bool,
    pub metrics_addr: Option<SocketAddr>,
    pub leader: Option<LeaderOptions>,
    /// `/healthz` fails when the active loop made no progress for this long.
    pub stuck_after: Duration,
    /// Namespace and name of the status ConfigMap.
    pub status_configmap: Option<(String, String)>,
    /// Identical Events within this window are posted once.
    pub event_window: Duration,
}

/// This replica's name in the Lease: the pod name when running in a pod.
fn identity() -> String {
    let base = std::env::var("POD_NAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "nodewright".into());
    let base: String = base.chars().take(56).collect();
    format!("{base}-{}", crate::act::random_suffix(6))
}

/// `nodewright_nodes`: every group's count in every state of [`NODE_STATES`], zeros
/// included, so a state that empties drops to 0 instead of keeping its last value.
fn record_node_states(m: &Metrics, summary: &Summary) {
    for (group, g) in &summary.groups {
        // Every state, VMs left alone as not ours to act on too, so an alert can see
        // VMs that failed, vanished or were taken over.
        for state in NODE_STATES {
            let n = g.states.get(*state).copied().unwrap_or(0);
            m.nodes
                .get_or_create(&NodeStateLabels {
                    group: group.clone(),
                    state: state.to_string(),
                })
                .set(i64::from(n));
        }
    }
}

fn record_metrics(m: &Metrics, summary: &Summary, cycle: &Cycle) {
    record_node_states(m, summary);
    m.unschedulable_pods.set(summary.unschedulable_pods as i64);
    m.set_pending(&cycle.decision.bucket_counts());
    m.set_unremovable(&crate::plan::unremovable::counts(
        &cycle.decision.unremovable,
    ));
    m.unknown_group_vms
        .set(i64::try_from(summary.unknown_group_vms).unwrap_or(i64::MAX));
    m.free_memory.set(summary.free_memory_bytes);
    m.free_memory_target
        .set(i64::try_from(summary.free_memory_target_bytes).unwrap_or(i64::MAX));
    let action = &cycle.decision.action;
    if *action != Action::None {
        m.actions
            .get_or_create(&ActionLabels {
                action: action.kind().to_string(),
            })
            .inc();
    }
    match &cycle.result {
        Ok(o) => {
            for (group, n) in &o.created {
                m.scale_ups
                    .get_or_create(&GroupLabels {
                        group: group.clone(),
                    })
                    .inc_by(u64::from(*n));
            }
            for (group, n) in &o.deleted {
                m.scale_downs
                    .get_or_create(&GroupLabels {
                        group: group.clone(),
                    })
                    .inc_by(u64::from(*n));
            }
            for (result, n) in &o.evictions {
                m.evictions
                    .get_or_create(&ResultLabels {
                        result: result.to_string(),
                    })
                    .inc_by(u64::from(*n));
            }
        }
        Err(e) => {
            if let Some((group, _)) = action.creates() {
                m.failed_creates
                    .get_or_create(&FailedCreateLabels {
                        group: group.to_string(),
                        reason: failure_reason(e).to_string(),
                    })
                    .inc();
            }
        }
    }
}

fn failure_reason(e: &crate::act::ActError) -> &'static str {
    use crate::cloud::CloudError;
    match e {
        crate::act::ActError::Cloud(c) => match c {
            CloudError::Auth { .. } => "auth",
            CloudError::NotFound { .. } => "not-found",
            CloudError::Quota { .. } => "quota",
            CloudError::Api { .. } => "api",
            CloudError::Transport { .. } => "transport",
            CloudError::Other { .. } => "other",
            CloudError::Refused { .. } => "refused",
        },
        crate::act::ActError::UserData { .. } => "user-data",
        crate::act::ActError::Cluster(_) => "cluster",
        crate::act::ActError::NoProvider(_) => "config",
        crate::act::ActError::Refused { .. } => "refused",
    }
}

/// Waits until `leading` turns false. Without a sender (no election, or the election
/// has ended) leadership can no longer change, so a leader stays one.
async fn lost(leading: &mut watch::Receiver<bool>) {
    while *leading.borrow_and_update() {
        if leading.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

async fn stopped(stop: &mut watch::Receiver<bool>) {
    while !*stop.borrow_and_update() {
        if stop.changed().await.is_err() {
            return;
        }
    }
}

/// The providers; a dry run's only read (see `build_clouds_read_only`).
fn clouds_for(config: &Config, metrics: &Arc<Metrics>, dry_run: bool) -> anyhow::Result<Clouds> {
    let clouds = if dry_run {
        build_clouds_read_only(config)?
    } else {
        build_clouds(config)?
    };
    Ok(clouds.instrumented(metrics))
}

/// Runs until `stop` is set.
pub async fn run(opts: RunOptions, mut stop: watch::Receiver<bool>) -> anyhow::Result<()> {
    let config = Config::load(&opts.config_path)?;
    config.log_warnings();
    let metrics = Arc::new(Metrics::new());
    let health = Health::new(opts.stuck_after);
    if let Some(addr) = opts.metrics_addr {
        let bound = http::serve(addr, metrics.clone(), health.clone())
            .await
            .with_context(|| format!("binding the metrics server to {addr}"))?;
        tracing::info!(addr = %bound, "serving /metrics, /healthz and /readyz");
    }
    let client = client_from_env().await?;
    let mut watch_cfg = ConfigWatch::new(
        opts.config_path.clone(),
        std::fs::read_to_string(&opts.config_path).unwrap_or_default(),
    );
    // Watch caches from the start, so a standby replica is warm when it takes over. The
    // disruption records (scale-down delays) live in the status ConfigMap, beside its
    // status, so a restart honours them; with the ConfigMap off nothing is kept.
    let mut cluster = KubeCluster::watching(client.clone(), CacheOptions::default());
    if let Some((ns, name)) = &opts.status_configmap {
        cluster = cluster.with_records(ns, name);
    }
    let mut wakeups = cluster.wakeups();
    let mut synced_once = false;
    // What the providers are built from, so a reload keeps those it leaves unchanged.
    let mut built = ProviderInputs::of(&config, credentials_from_env, opts.dry_run);
    let mut reconciler = Reconciler {
        clouds: clouds_for(&config, &metrics, opts.dry_run)?,
        memory: LoopMemory::default(),
        config: Arc::new(config),
        cluster: Arc::new(cluster.clone()),
        dry_run: opts.dry_run,
    };
    let recorder = EventRecorder::new(client.clone(), opts.event_window);
    let me = identity();

    let (lead_tx, mut leading) = watch::channel(opts.leader.is_none());
    let election = opts.leader.clone().map(|l| {
        let elector = LeaderElector::new(
            client.clone(),
            LeaseSettings {
                name: l.name,
                namespace: l.namespace,
                identity: me.clone(),
                lease_duration: l.lease_duration,
                renew_deadline: l.renew_deadline,
                retry_period: l.retry_period,
            },
        );
        let stop = stop.clone();
        let health = health.clone();
        tokio::spawn(async move {
            elector
                .run(lead_tx, stop, || {
                    health.election_attempted();
                    health.set_ready();
                })
                .await
        })
    });
    tracing::info!(
        identity = %me,
        cluster = %reconciler.config.cluster_name,
        dry_run = opts.dry_run,
        leader_election = opts.leader.is_some(),
        "nodewright starting"
    );

    // After an action the next cycle starts at once (it sees what the action did);
    // the same action twice in a row waits for scanInterval, so nothing spins.
    let mut previous_action: Option<crate::plan::Action> = None;
    let mut notes = NoteLog::default();
    loop {
        if *stop.borrow() {
            break;
        }
        if !*leading.borrow() {
            health.set_leading(false);
            metrics.leader.set(0);
            tokio::select! {
                changed = leading.changed() => {
                    if changed.is_err() {
                        // The election is over: nothing can make us leader any more.
                        stopped(&mut stop).await;
                    }
                }
                _ = stopped(&mut stop) => {}
            }
            continue;
        }
        health.set_leading(true);
        metrics.leader.set(1);
        if let Reload::New(new) = watch_cfg.poll(SystemTime::now()) {
            let now = ProviderInputs::of(&new, credentials_from_env, opts.dry_run);
            match reconciler.reload(*new, &mut built, now, |c| {
                clouds_for(c, &metrics, opts.dry_run)
            }) {
                Ok(rebuilt) => {
                    let rebuilt: Vec<&str> = rebuilt.iter().map(|k| k.as_str()).collect();
                    tracing::info!(
                        ?rebuilt,
                        "new config in force; providers not listed kept their work in flight"
                    );
                }
                Err(e) => {
                    tracing::error!(error = %e, "new config's providers cannot be built; keeping the last good config")
                }
            }
        }
        let started = Instant::now();
        // This cycle sees every change so far: only later ones should wake the next.
        if let Some(w) = wakeups.as_mut() {
            w.borrow_and_update();
        }
        // Losing the lease (or a stop) abandons the cycle at once.
        let one_cycle = async {
            if !synced_once {
                // The first decision waits for complete caches, never a partial cluster.
                cluster.synced().await?;
                tracing::info!(
                    took_ms = started.elapsed().as_millis() as u64,
                    caches = ?cluster.cache_stats().iter().map(|c| (c.resource, c.objects)).collect::<Vec<_>>(),
                    "watch caches synced"
                );
                synced_once = true;
            }
            let now = SystemTime::now();
            let (snapshot, decision) = reconciler.plan(now).await?;
            // Acting (a VM create, a drain) may take long: the health check allows it up
            // to provisionTimeout on top of --stuck-after.
            health.acting(Some(reconciler.config.provision_timeout));
            let result = reconciler.act(&snapshot, &decision, now).await;
            health.acting(None);
            Ok::<_, CycleError>((
                now,
                Cycle {
                    snapshot,
                    decision,
                    result,
                },
            ))
        };
        let cycle = tokio::select! {
            c = one_cycle => Some(c),
            _ = lost(&mut leading) => {
                tracing::warn!("lost leadership mid-cycle; abandoned it");
                None
            }
            _ = stopped(&mut stop) => None,
        };
        health.acting(None);
        let mut run_again = false;
        match cycle {
            None => continue,
            Some(Err(e)) => tracing::warn!(error = %e, "cycle failed; retrying next cycle"),
            Some(Ok((now, cycle))) => {
                let summary = summarize(&cycle.snapshot, &reconciler.config, now);
                record_metrics(&metrics, &summary, &cycle);
                let outcome = cycle.result.as_ref().ok().cloned().unwrap_or_default();
                let error = cycle.result.as_ref().err().map(|e| e.to_string());
                match &error {
                    None => log_report(&CycleReport {
                        decision: cycle.decision.clone(),
                        outcome: outcome.clone(),
                    }),
                    Some(e) => {
                        tracing::warn!(action = cycle.decision.action.kind(), error = %e, "{} failed; retrying next cycle", cycle.decision.action);
                    }
                }
                notes.log(&cycle.decision, reconciler.config.scan_interval);
                if !opts.dry_run {
                    let status = opts.status_configmap.as_ref().map(|(ns, name)| ObjectRef {
                        kind: "ConfigMap".into(),
                        namespace: Some(ns.clone()),
                        name: name.clone(),
                    });
                    let events = events_for(
                        &cycle.decision,
                        match &error {
                            None => Ok(&outcome),
                            Some(e) => Err(e.as_str()),
                        },
                        status.as_ref(),
                    );
                    recorder.record(&events).await;
                }
                if let Some((ns, name)) = &opts.status_configmap {
                    let status = Status {
                        leader: &me,
                        dry_run: opts.dry_run,
                        summary: &summary,
                        decision: &cycle.decision,
                        outcome: &outcome,
                        error,
                    };
                    status.write(&client, ns, name).await;
                }
                metrics.record_success(started.elapsed());
                health.cycle_completed();
                let acted = cycle.decision.action != crate::plan::Action::None
                    && cycle.result.is_ok()
                    && !opts.dry_run;
                // VMs removed for not joining: no cycle at once (see
                // `Decision::removes_not_joined`).
                run_again = acted
                    && previous_action.as_ref() != Some(&cycle.decision.action)
                    && !cycle.decision.removes_not_joined();
                previous_action = Some(cycle.decision.action.clone());
            }
        }
        let pause = if run_again {
            std::time::Duration::ZERO
        } else {
            reconciler.config.scan_interval
        };
        // Until scanInterval, or sooner when the caches see something worth a cycle.
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = next_batch(wakeups.as_mut(), Batching::of(&reconciler.config)) => {
                tracing::debug!("woken up by a cluster change");
            }
            _ = lost(&mut leading) => {}
            _ = stopped(&mut stop) => {}
        }
    }
    if let Some(handle) = election {
        let _ = handle.await;
    }
    tracing::info!("nodewright stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::summary::GroupSummary;

    /// Regression: `nodewright_nodes` left out VMs that failed, vanished or were being
    /// removed (the status ConfigMap counted them), so no alert could see them.
    #[test]
    fn node_metrics_count_every_state_the_status_counts() {
        let mut g = GroupSummary::default();
        for state in NODE_STATES {
            g.states.insert(state.to_string(), 0);
        }
        g.states.insert("ready".into(), 3);
        g.states.insert("failed".into(), 2);
        g.states.insert("vanished".into(), 1);
        g.states.insert("removing".into(), 1);
        let summary = Summary {
            groups: [("web".to_string(), g.clone())].into(),
            ..Summary::default()
        };
        let m = Metrics::new();
        record_node_states(&m, &summary);
        let text = m.encode();
        for (state, n) in &g.states {
            let line = format!("nodewright_nodes{{group=\"web\",state=\"{state}\"}} {n}");
            assert!(text.contains(&line), "{line} missing from:\n{text}");
        }
    }
}

//! The cloud providers in use: which provider serves which node group, built from the
//! config by [`super::build`] and read by the loop and the actuator.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::{CloudProvider, ClusterIdentity};

/// No provider serves the group named (a group the config does not have).
#[derive(Debug, Clone, thiserror::Error)]
#[error("no cloud provider configured for {0}")]
pub struct NoProvider(pub String);

/// The cloud providers in use, by node group and by provider name. What the loop
/// remembers of them between cycles (backoffs, last listings) is
/// `run::LoopMemory`.
#[derive(Clone, Default)]
pub struct Clouds {
    by_group: BTreeMap<String, Arc<dyn CloudProvider>>,
    /// How long one provider's listing may take (`None`: [`DEFAULT_OBSERVE_DEADLINE`]).
    observe_deadline: Option<std::time::Duration>,
    /// The cluster's identity the providers were built with: the loop fills it in once
    /// it has read it from the cluster.
    identity: ClusterIdentity,
}

/// How long one provider may take to list its VMs and group shapes in a cycle. Past it
/// the provider's groups are frozen for the cycle, as when the listing fails, and the
/// others go on: a hung or rate-limited cloud (a `Retry-After` longer than this) must
/// not stall every group.
pub const DEFAULT_OBSERVE_DEADLINE: std::time::Duration = std::time::Duration::from_secs(20);

impl Clouds {
    pub fn new() -> Self {
        Clouds::default()
    }

    /// Another deadline for each provider's listing (see [`DEFAULT_OBSERVE_DEADLINE`]).
    pub fn with_observe_deadline(mut self, deadline: std::time::Duration) -> Self {
        self.observe_deadline = Some(deadline);
        self
    }

    /// The identity shared with the providers (see [`ClusterIdentity`]).
    pub fn identity(&self) -> &ClusterIdentity {
        &self.identity
    }

    pub fn observe_deadline(&self) -> std::time::Duration {
        self.observe_deadline.unwrap_or(DEFAULT_OBSERVE_DEADLINE)
    }

    pub fn add_group(&mut self, group: &str, provider: Arc<dyn CloudProvider>) {
        self.by_group.insert(group.to_string(), provider);
    }

    pub fn for_group(&self, group: &str) -> Result<&Arc<dyn CloudProvider>, NoProvider> {
        self.by_group
            .get(group)
            .ok_or_else(|| NoProvider(format!("group {group}")))
    }

    /// Each distinct provider once (several groups may share one account).
    pub fn distinct(&self) -> Vec<Arc<dyn CloudProvider>> {
        let mut seen = BTreeSet::new();
        self.by_group
            .values()
            .filter(|p| seen.insert(Arc::as_ptr(p) as *const () as usize))
            .cloned()
            .collect()
    }

    /// Each distinct provider once with the groups it serves, so a cycle can read each
    /// provider with one call.
    pub fn by_provider(&self) -> Vec<(Arc<dyn CloudProvider>, Vec<String>)> {
        let mut out: Vec<(Arc<dyn CloudProvider>, Vec<String>)> = Vec::new();
        for (group, p) in &self.by_group {
            match out.iter_mut().find(|(q, _)| Arc::ptr_eq(q, p)) {
                Some((_, groups)) => groups.push(group.clone()),
                None => out.push((p.clone(), vec![group.clone()])),
            }
        }
        out
    }

    pub fn groups(&self) -> impl Iterator<Item = (&String, &Arc<dyn CloudProvider>)> {
        self.by_group.iter()
    }

    /// The same providers, each wrapped to record call latency and errors.
    pub fn instrumented(&self, metrics: &Arc<crate::telemetry::metrics::Metrics>) -> Clouds {
        let mut wrapped: Vec<(usize, Arc<dyn CloudProvider>)> = Vec::new();
        let mut by_group = BTreeMap::new();
        for (group, p) in &self.by_group {
            let key = Arc::as_ptr(p) as *const () as usize;
            let w = match wrapped.iter().find(|(k, _)| *k == key) {
                Some((_, w)) => w.clone(),
                None => {
                    let w =
                        crate::cloud::instrumented::Instrumented::wrap(p.clone(), metrics.clone());
                    wrapped.push((key, w.clone()));
                    w
                }
            };
            by_group.insert(group.clone(), w);
        }
        Clouds {
            by_group,
            observe_deadline: self.observe_deadline,
            identity: self.identity.clone(),
        }
    }
}

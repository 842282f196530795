//! The cloud providers in use: which provider serves which node group, built from the
//! config by [`super::build`] and read by the loop and the actuator.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::{CloudError, CloudProvider, ClusterIdentity, Observed};

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
    /// Each provider's listing state, by provider name: a listing still running past its
    /// deadline, and whether its last listing answered in time. Shared by clones (and by
    /// [`Self::instrumented`]'s), dropped with the providers on a reload.
    listings: Arc<Mutex<BTreeMap<String, ListingState>>>,
}

/// A provider's listing that ran past its deadline: it goes on in its own task, whose
/// answer a later cycle takes. Aborted when the providers are dropped (a reload).
struct InFlight {
    started: Instant,
    task: JoinHandle<Result<Observed, CloudError>>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[derive(Default)]
struct ListingState {
    in_flight: Option<InFlight>,
    /// The last listing failed or ran past its deadline: the next one is waited for only
    /// a moment ([`RECOVERY_WAIT`]), so a hung cloud costs the other groups one deadline
    /// at most, not one per cycle.
    troubled: bool,
}

/// What one cycle got of one provider's listing.
pub enum Listing {
    /// Its answer, fresh or from a listing an earlier cycle started.
    Answered(Observed),
    /// Its listing failed, or is still running (the provider is frozen on its last
    /// answer); in words.
    Unavailable(String),
}

/// How long a cycle waits for the listing of a provider whose last listing failed or ran
/// past its deadline: long enough for a recovered cloud to answer in the same cycle,
/// short enough that a hung one slows nothing.
pub const RECOVERY_WAIT: Duration = Duration::from_secs(1);

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

    /// Lists every provider (its servers of `cluster` and its groups' shapes), all at once
    /// and each on its own. A provider whose last listing answered is waited for up to
    /// the observe deadline; past it, or when its last listing failed, its listing goes on
    /// in the background, unwaited for, and the cycle that finds it done takes its answer
    /// (one listing per provider at a time): a hung or rate-limited cloud freezes its own
    /// groups and slows no other.
    pub async fn observe_all(
        &self,
        cluster: &str,
    ) -> Vec<(Arc<dyn CloudProvider>, Vec<String>, Listing)> {
        let providers = self.by_provider();
        let deadline = self.observe_deadline();
        let listed = futures::future::join_all(
            providers
                .iter()
                .map(|(p, groups)| self.observe_one(p, groups, cluster, deadline)),
        )
        .await;
        providers
            .into_iter()
            .zip(listed)
            .map(|((p, groups), l)| (p, groups, l))
            .collect()
    }

    async fn observe_one(
        &self,
        p: &Arc<dyn CloudProvider>,
        groups: &[String],
        cluster: &str,
        deadline: Duration,
    ) -> Listing {
        let name = p.name().to_string();
        let (mut running, wait) = {
            let mut all = lock(&self.listings);
            let state = all.entry(name.clone()).or_default();
            match state.in_flight.take() {
                // Started by an earlier cycle: taken if done, never waited for.
                Some(f) => (f, Duration::ZERO),
                None => {
                    let (p, cluster, groups) = (p.clone(), cluster.to_string(), groups.to_vec());
                    let task = tokio::spawn(async move { p.observe(&cluster, &groups).await });
                    let wait = if state.troubled {
                        deadline.min(RECOVERY_WAIT)
                    } else {
                        deadline
                    };
                    (
                        InFlight {
                            started: Instant::now(),
                            task,
                        },
                        wait,
                    )
                }
            }
        };
        // A finished listing answers even with no wait (its task is polled first).
        let answer = tokio::time::timeout(wait, &mut running.task).await.ok();
        let mut all = lock(&self.listings);
        let state = all.entry(name).or_default();
        match answer {
            Some(Ok(Ok(observed))) => {
                state.troubled = false;
                Listing::Answered(observed)
            }
            Some(Ok(Err(e))) => {
                state.troubled = true;
                Listing::Unavailable(e.to_string())
            }
            Some(Err(e)) => {
                state.troubled = true;
                Listing::Unavailable(format!("its listing ended without an answer: {e}"))
            }
            None => {
                state.troubled = true;
                let running_for = running.started.elapsed();
                state.in_flight = Some(running);
                Listing::Unavailable(format!(
                    "its listing has had no answer for {}s (the cloud API is hung, slow, or asked to retry later; the deadline is {deadline:?}); it goes on, and a later cycle takes its answer",
                    running_for.as_secs()
                ))
            }
        }
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
            listings: self.listings.clone(),
        }
    }
}

/// A poisoned lock still holds good soft state: a panic elsewhere must not stop the loop.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

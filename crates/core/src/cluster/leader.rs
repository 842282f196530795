//! Leader election on a `coordination.k8s.io/v1` Lease, so several replicas can run and
//! exactly one acts. The holder renews every `retry_period`; a holder that cannot renew
//! within `renew_deadline` steps down, which is shorter than `lease_duration`, so it has
//! stopped acting before anyone else may take the lease over.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, PostParams};
use kube::Client;
use tokio::sync::watch;

#[derive(Debug, Clone)]
pub struct LeaseSettings {
    pub name: String,
    pub namespace: String,
    /// Unique per replica (pod name plus a random suffix).
    pub identity: String,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

pub struct LeaderElector {
    api: Api<Lease>,
    settings: LeaseSettings,
}

fn now() -> MicroTime {
    MicroTime(Timestamp::now())
}

fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

impl LeaderElector {
    pub fn new(client: Client, settings: LeaseSettings) -> Self {
        LeaderElector {
            api: Api::namespaced(client, &settings.namespace),
            settings,
        }
    }

    pub fn settings(&self) -> &LeaseSettings {
        &self.settings
    }

    fn expired(&self, spec: &LeaseSpec) -> bool {
        let Some(renewed) = spec.renew_time.as_ref().or(spec.acquire_time.as_ref()) else {
            return true;
        };
        let secs = spec
            .lease_duration_seconds
            .map(i64::from)
            .unwrap_or(self.settings.lease_duration.as_secs() as i64);
        let until = renewed.0.saturating_add(SignedDuration::from_secs(secs));
        match until {
            Ok(t) => t < Timestamp::now(),
            Err(_) => true,
        }
    }

    /// One attempt to take or keep the lease; `Ok(true)` when we hold it afterwards.
    pub async fn try_acquire_or_renew(&self) -> Result<bool, kube::Error> {
        let s = &self.settings;
        let duration = i32::try_from(s.lease_duration.as_secs()).unwrap_or(i32::MAX);
        let Some(mut lease) = self.api.get_opt(&s.name).await? else {
            let lease = Lease {
                metadata: kube::api::ObjectMeta {
                    name: Some(s.name.clone()),
                    namespace: Some(s.namespace.clone()),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(s.identity.clone()),
                    lease_duration_seconds: Some(duration),
                    acquire_time: Some(now()),
                    renew_time: Some(now()),
                    lease_transitions: Some(0),
                    ..Default::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(e) if is_conflict(&e) => Ok(false),
                Err(e) => Err(e),
            };
        };
        let mut spec = lease.spec.take().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        if holder == s.identity {
            spec.renew_time = Some(now());
            spec.lease_duration_seconds = Some(duration);
        } else if holder.is_empty() || self.expired(&spec) {
            spec.holder_identity = Some(s.identity.clone());
            spec.acquire_time = Some(now());
            spec.renew_time = Some(now());
            spec.lease_duration_seconds = Some(duration);
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        } else {
            return Ok(false);
        }
        lease.spec = Some(spec);
        // The resourceVersion from the read makes this a compare-and-swap.
        match self
            .api
            .replace(&s.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(true),
            Err(e) if is_conflict(&e) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Gives the lease up so another replica can take over without waiting it out.
    pub async fn release(&self) {
        let s = &self.settings;
        let Ok(Some(mut lease)) = self.api.get_opt(&s.name).await else {
            return;
        };
        let Some(spec) = lease.spec.as_mut() else {
            return;
        };
        if spec.holder_identity.as_deref() != Some(s.identity.as_str()) {
            return;
        }
        spec.holder_identity = None;
        spec.renew_time = None;
        if let Err(e) = self
            .api
            .replace(&s.name, &PostParams::default(), &lease)
            .await
        {
            tracing::warn!(error = %e, "could not release the leader lease");
        }
    }

    /// Keeps trying to lead until `stop` is set, publishing leadership on `leading` and
    /// calling `tick` after each attempt (for liveness).
    pub async fn run(
        &self,
        leading: watch::Sender<bool>,
        mut stop: watch::Receiver<bool>,
        tick: impl Fn(),
    ) {
        let s = &self.settings;
        let mut last_renewal: Option<Instant> = None;
        loop {
            let attempt = tokio::time::timeout(s.renew_deadline, self.try_acquire_or_renew()).await;
            let was_leading = *leading.borrow();
            match attempt {
                Ok(Ok(true)) => {
                    last_renewal = Some(Instant::now());
                    if !was_leading {
                        tracing::info!(identity = %s.identity, lease = %s.name, "became leader");
                        leading.send_replace(true);
                    }
                }
                Ok(Ok(false)) => {
                    if was_leading {
                        tracing::warn!(identity = %s.identity, "lost the leader lease; stopping at once");
                        leading.send_replace(false);
                    }
                    last_renewal = None;
                }
                Ok(Err(e)) => tracing::warn!(error = %e, "leader election attempt failed"),
                Err(_) => tracing::warn!("leader election attempt timed out"),
            }
            let overdue = last_renewal.is_none_or(|t| t.elapsed() > s.renew_deadline);
            if *leading.borrow() && overdue {
                tracing::warn!(identity = %s.identity, "could not renew the lease in time; stepping down");
                leading.send_replace(false);
            }
            tick();
            tokio::select! {
                _ = tokio::time::sleep(s.retry_period) => {}
                _ = stop.changed() => {}
            }
            if *stop.borrow() {
                if *leading.borrow() {
                    leading.send_replace(false);
                    self.release().await;
                }
                return;
            }
        }
    }
}

//! The task that keeps one cache current from a kube-rs watcher.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;

use super::store::Change;
use super::{key_of, Cached, Shared, WakeTx};

/// Pause before a fresh watcher replaces one whose resume was refused with 410.
const RESTART_PAUSE: Duration = Duration::from_secs(1);

/// Watches `api` for ever, applying every event to `shared` and counting wake-ups on
/// `wake`. Errors are retried with client-go's backoff (0.8 s doubling to 30 s).
pub(super) async fn run<K, V>(
    api: Api<K>,
    config: watcher::Config,
    shared: Arc<Shared<V>>,
    convert: fn(&K) -> Option<V>,
    wake: WakeTx,
) where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    V: Cached,
{
    let resource = shared.resource;
    loop {
        let mut events =
            std::pin::pin!(watcher::watcher(api.clone(), config.clone()).default_backoff());
        let mut failing = false;
        while let Some(item) = events.next().await {
            match item {
                Ok(event) => {
                    if failing {
                        tracing::info!(resource, "watch recovered");
                        failing = false;
                    }
                    let change = match event {
                        Event::Init => Change::Init,
                        Event::InitApply(o) => Change::InitItem {
                            key: key_of(&o),
                            version: o.resource_version().unwrap_or_default(),
                            value: convert(&o),
                        },
                        Event::InitDone => {
                            tracing::debug!(resource, "list complete");
                            Change::InitDone
                        }
                        Event::Apply(o) => Change::Apply {
                            key: key_of(&o),
                            version: o.resource_version().unwrap_or_default(),
                            value: convert(&o),
                        },
                        Event::Delete(o) => Change::Delete { key: key_of(&o) },
                    };
                    for t in shared.apply(change) {
                        tracing::debug!(resource, object = %t.key, reason = t.reason, "wake-up");
                        wake.send_modify(|n| *n = n.wrapping_add(1));
                    }
                }
                Err(e) => {
                    if !failing {
                        tracing::warn!(resource, error = %e, "watch failed; retrying with backoff");
                    }
                    failing = true;
                    shared.failed(e.to_string());
                    if resume_refused(&e) {
                        break;
                    }
                }
            }
        }
        // The watcher retries a refused resume with the same version for ever; a fresh
        // one lists again.
        tracing::info!(resource, "watch resume refused as expired; listing again");
        tokio::time::sleep(RESTART_PAUSE).await;
    }
}

/// A watch request answered `410 Gone` as an HTTP status (rather than as an event in
/// the stream, which the watcher handles itself by listing again).
fn resume_refused(e: &watcher::Error) -> bool {
    matches!(e, watcher::Error::WatchStartFailed(kube::Error::Api(s)) if s.code == 410)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_refused_resume_restarts_the_watcher() {
        let status = |code: u16| {
            let mut s = kube::core::Status::failure("expired", "Expired");
            s.code = code;
            s
        };
        assert!(resume_refused(&watcher::Error::WatchStartFailed(
            kube::Error::Api(Box::new(status(410)))
        )));
        assert!(!resume_refused(&watcher::Error::WatchStartFailed(
            kube::Error::Api(Box::new(status(500)))
        )));
        assert!(!resume_refused(&watcher::Error::WatchError(Box::new(
            status(410)
        ))));
    }
}

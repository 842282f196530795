//! Kubernetes Events on the pods and nodes nodewright acts on, deduplicated: the same
//! (object, reason) within the window is not re-posted, and across restarts the
//! deterministic Event name turns a repeat into a count bump instead of a new Event.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::json;

use crate::plan::ObjectRef;

/// Namespace for Events about cluster-scoped objects (nodes), as the kubelet does.
const CLUSTER_SCOPED_NS: &str = "default";
const COMPONENT: &str = "nodewright";

/// One Event to post.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventSpec {
    pub object: ObjectRef,
    /// CamelCase reason, e.g. `TriggeredScaleUp`.
    pub reason: String,
    pub message: String,
    pub warning: bool,
}

pub struct EventRecorder {
    client: Client,
    window: Duration,
    recent: Mutex<HashMap<(String, String, String, String), Instant>>,
}

fn now_time() -> Option<Time> {
    k8s_openapi::jiff::Timestamp::try_from(std::time::SystemTime::now())
        .ok()
        .map(Time)
}

impl EventRecorder {
    pub fn new(client: Client, window: Duration) -> Self {
        EventRecorder {
            client,
            window,
            recent: Mutex::new(HashMap::new()),
        }
    }

    fn fresh(&self, e: &EventSpec) -> bool {
        let key = (
            e.object.kind.clone(),
            e.object.namespace.clone().unwrap_or_default(),
            e.object.name.clone(),
            e.reason.clone(),
        );
        let mut recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        recent.retain(|_, at| now.duration_since(*at) < self.window);
        if recent.contains_key(&key) {
            return false;
        }
        recent.insert(key, now);
        true
    }

    /// Posts the events; failures are logged, never fatal (events are best effort).
    pub async fn record(&self, events: &[EventSpec]) {
        for e in events {
            if !self.fresh(e) {
                continue;
            }
            if let Err(err) = self.post(e).await {
                tracing::warn!(reason = %e.reason, object = %e.object.name, error = %err, "could not post event");
            }
        }
    }

    async fn post(&self, e: &EventSpec) -> Result<(), kube::Error> {
        let ns = e
            .object
            .namespace
            .clone()
            .unwrap_or_else(|| CLUSTER_SCOPED_NS.to_string());
        let api: Api<Event> = Api::namespaced(self.client.clone(), &ns);
        let mut h = DefaultHasher::new();
        (&e.object.kind, &e.object.name, &e.reason).hash(&mut h);
        let name = format!("{}.nw{:016x}", e.object.name, h.finish());
        let now = now_time();
        let event: Event = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": ns},
            "involvedObject": {
                "kind": e.object.kind,
                "name": e.object.name,
                "namespace": e.object.namespace,
                "apiVersion": "v1",
            },
            "reason": e.reason,
            "message": e.message,
            "type": if e.warning { "Warning" } else { "Normal" },
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "count": 1,
        }))
        .map_err(kube::Error::SerdeError)?;
        let event = Event {
            first_timestamp: now.clone(),
            last_timestamp: now.clone(),
            ..event
        };
        match api.create(&PostParams::default(), &event).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => {
                let current = api.get(&name).await?;
                let count = current.count.unwrap_or(1) + 1;
                let patch = json!({
                    "count": count,
                    "message": e.message,
                    "lastTimestamp": now,
                });
                api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .map(|_| ())
            }
            Err(err) => Err(err),
        }
    }
}

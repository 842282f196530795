//! Kubernetes Events on the pods and nodes nodewright acts on, aggregated and rate
//! limited as client-go's event recorder does (its correlator and spam filter), so 10,000
//! pending pods cannot flood the API server (they once gave 20,051 Events in 90 s):
//!
//! - the same (object, reason) within the window is not re-posted, and across restarts
//!   the deterministic Event name turns a repeat into a count bump instead of a new Event;
//! - each object has a bucket of [`OBJECT_BURST`] Events refilled one per
//!   [`OBJECT_REFILL`] (client-go's spam filter: burst 25, one per 5 minutes), kept for
//!   the [`OBJECTS_KEPT`] objects seen last (client-go's LRU size);
//! - all objects together have a bucket of [`BURST`] Events refilled [`PER_SECOND`] a
//!   second (client-go drops Events once 1,000 wait, and its client sends 5 requests a
//!   second): nodes and the status ConfigMap go first, then pods. What is left out is
//!   counted in the log, not posted.

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

use crate::model::ObjectRef;

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

/// Events one object may get at once.
pub const OBJECT_BURST: f64 = 25.0;
/// One more Event for an object every this long.
pub const OBJECT_REFILL: Duration = Duration::from_secs(300);
/// Objects whose buckets are remembered (the least recently seen are forgotten).
pub const OBJECTS_KEPT: usize = 4096;
/// Events all objects together may get at once.
pub const BURST: f64 = 100.0;
/// Events a second all objects together get once the burst is spent.
pub const PER_SECOND: f64 = 2.0;

/// A token bucket: `tokens` at `at`.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn full(burst: f64, now: Instant) -> Self {
        Bucket {
            tokens: burst,
            at: now,
        }
    }

    /// Takes one token if there is one after refilling at `per_second` up to `burst`.
    fn take(&mut self, burst: f64, per_second: f64, now: Instant) -> bool {
        let refill = now.duration_since(self.at).as_secs_f64() * per_second;
        self.tokens = (self.tokens + refill).min(burst);
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// What the recorder remembers between cycles.
struct Limits {
    recent: HashMap<(String, String, String, String), Instant>,
    objects: HashMap<(String, String, String), Bucket>,
    all: Bucket,
}

pub struct EventRecorder {
    client: Client,
    window: Duration,
    limits: Mutex<Limits>,
}

/// Why an Event is not posted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Held {
    /// The same object and reason within the window.
    Repeat,
    /// Its object's bucket is empty.
    Object,
    /// Every object's bucket is empty.
    All,
}

/// Drops the buckets of the objects seen longest ago, down to [`OBJECTS_KEPT`].
fn forget_least_recent(objects: &mut HashMap<(String, String, String), Bucket>) {
    let mut by_age: Vec<Instant> = objects.values().map(|b| b.at).collect();
    by_age.sort_unstable();
    let excess = objects.len().saturating_sub(OBJECTS_KEPT);
    if let Some(cut) = by_age.get(excess) {
        let cut = *cut;
        objects.retain(|_, b| b.at >= cut);
    }
}

fn now_time() -> Option<Time> {
    k8s_openapi::jiff::Timestamp::try_from(std::time::SystemTime::now())
        .ok()
        .map(Time)
}

impl EventRecorder {
    pub fn new(client: Client, window: Duration) -> Self {
        let now = Instant::now();
        EventRecorder {
            client,
            window,
            limits: Mutex::new(Limits {
                recent: HashMap::new(),
                objects: HashMap::new(),
                all: Bucket::full(BURST, now),
            }),
        }
    }

    /// Whether `e` may be posted now, taking its tokens if so.
    fn admit(&self, e: &EventSpec, now: Instant) -> Result<(), Held> {
        let object = (
            e.object.kind.clone(),
            e.object.namespace.clone().unwrap_or_default(),
            e.object.name.clone(),
        );
        let key = (
            object.0.clone(),
            object.1.clone(),
            object.2.clone(),
            e.reason.clone(),
        );
        let mut l = self.limits.lock().unwrap_or_else(|p| p.into_inner());
        let window = self.window;
        l.recent.retain(|_, at| now.duration_since(*at) < window);
        if l.recent.contains_key(&key) {
            return Err(Held::Repeat);
        }
        let mut probe = l.all;
        if !probe.take(BURST, PER_SECOND, now) {
            return Err(Held::All);
        }
        let per_object = 1.0 / OBJECT_REFILL.as_secs_f64();
        let bucket = l
            .objects
            .entry(object)
            .or_insert_with(|| Bucket::full(OBJECT_BURST, now));
        if !bucket.take(OBJECT_BURST, per_object, now) {
            return Err(Held::Object);
        }
        l.all.take(BURST, PER_SECOND, now);
        l.recent.insert(key, now);
        if l.objects.len() > OBJECTS_KEPT {
            forget_least_recent(&mut l.objects);
        }
        Ok(())
    }

    /// Posts the events that the limits let through (nodes and other objects before
    /// pods); failures are logged, never fatal (events are best effort).
    pub async fn record(&self, events: &[EventSpec]) {
        let (pods, others): (Vec<&EventSpec>, Vec<&EventSpec>) =
            events.iter().partition(|e| e.object.kind == "Pod");
        let (mut over_object, mut over_all) = (0usize, 0usize);
        for e in others.into_iter().chain(pods) {
            match self.admit(e, Instant::now()) {
                Ok(()) => {}
                Err(Held::Repeat) => continue,
                Err(Held::Object) => {
                    over_object += 1;
                    continue;
                }
                Err(Held::All) => {
                    over_all += 1;
                    continue;
                }
            }
            if let Err(err) = self.post(e).await {
                tracing::warn!(reason = %e.reason, object = %e.object.name, error = %err, "could not post event");
            }
        }
        if over_object + over_all > 0 {
            tracing::info!(
                over_object,
                over_all,
                "Events not posted: over the rate limits ({OBJECT_BURST} per object, one more every {}s; {BURST} in all, {PER_SECOND} more a second)",
                OBJECT_REFILL.as_secs()
            );
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

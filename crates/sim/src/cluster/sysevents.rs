//! Events the cluster's own components post (scheduler, kubelet, node controller), as
//! core/v1 Events, so `kubectl get events` and `kubectl describe` show what a real
//! cluster shows: `Scheduled` and `FailedScheduling` from default-scheduler, `Starting`,
//! `NodeReady` and `Started` from the kubelet, `RegisteredNode` and `NodeNotReady` from
//! the node controller.

use serde_json::{json, Value};

use super::meta;
use super::resources::EVENTS;
use super::store::Txn;

/// Where an event came from: the component, and the node for kubelet events.
pub struct Source<'a> {
    pub component: &'a str,
    pub host: Option<&'a str>,
}

pub const SCHEDULER: Source<'static> = Source {
    component: "default-scheduler",
    host: None,
};

pub const NODE_CONTROLLER: Source<'static> = Source {
    component: "node-controller",
    host: None,
};

pub fn kubelet(node: &str) -> Source<'_> {
    Source {
        component: "kubelet",
        host: Some(node),
    }
}

/// Posts an event about `object` (its kind, namespace, name, uid); events about
/// cluster-scoped objects go to `default`, as the real components put them.
pub fn post(
    txn: &mut Txn<'_>,
    object: &Value,
    type_: &str,
    reason: &str,
    message: &str,
    source: &Source<'_>,
) {
    let ns = match meta::namespace(object) {
        "" => "default",
        ns => ns,
    };
    let now = meta::now_rfc3339();
    let name = format!("{}.{}", meta::name(object), txn.new_suffix());
    let mut involved = json!({
        "kind": object.get("kind").cloned().unwrap_or(Value::Null),
        "apiVersion": object.get("apiVersion").cloned().unwrap_or(Value::Null),
        "name": meta::name(object),
        "uid": meta::uid(object),
    });
    if !meta::namespace(object).is_empty() {
        involved["namespace"] = json!(meta::namespace(object));
    }
    let mut src = json!({"component": source.component});
    if let Some(h) = source.host {
        src["host"] = json!(h);
    }
    let event = json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": ns},
        "involvedObject": involved,
        "reason": reason,
        "message": message,
        "type": type_,
        "source": src,
        "reportingComponent": source.component,
        "reportingInstance": source.host.unwrap_or(source.component),
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    });
    if let Err(e) = txn.create(&EVENTS, event) {
        tracing::debug!(error = %e, reason, "simulated cluster could not post an event");
    }
}

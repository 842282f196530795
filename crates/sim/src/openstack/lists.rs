//! Server list filters (`name`, `status`, `tags`…) and the plain (not detailed) server
//! and flavor lists, as real Nova answers them.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::to_bytes;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::*;

/// The statuses Nova knows for its `status` filter; any other is refused (≥2.38) or
/// matches nothing (before).
const KNOWN_STATUSES: &[&str] = &[
    "ACTIVE",
    "BUILD",
    "DELETED",
    "ERROR",
    "HARD_REBOOT",
    "MIGRATING",
    "PASSWORD",
    "PAUSED",
    "REBOOT",
    "REBUILD",
    "RESCUE",
    "RESIZE",
    "REVERT_RESIZE",
    "SHELVED",
    "SHELVED_OFFLOADED",
    "SHUTOFF",
    "SOFT_DELETED",
    "SUSPENDED",
    "UNKNOWN",
    "VERIFY_RESIZE",
];

fn tag_list(v: &str) -> Vec<&str> {
    v.split(',').filter(|t| !t.is_empty()).collect()
}

/// Keeps the servers the query asks for: `name` is a regular expression searched in
/// the name (as Nova's database filter), `status` one of Nova's statuses, and from
/// 2.26 `tags` (all of), `tags-any`, `not-tags` (not all of) and `not-tags-any`.
/// `Err` is the answer to send instead.
pub(super) fn filter_servers(
    all: &mut Vec<&SimServer>,
    q: &HashMap<String, String>,
    mv: (u32, u32),
) -> Result<(), Box<Response>> {
    if let Some(name) = q.get("name") {
        let Ok(re) = regex::Regex::new(name) else {
            return Err(Box::new(nova_error(
                StatusCode::BAD_REQUEST,
                "badRequest",
                &format!("Invalid input for query parameters name. Value: {name}. '{name}' is not a 'regex'"),
            )));
        };
        all.retain(|s| re.is_match(&s.name));
    }
    if let Some(status) = q.get("status") {
        let status = status.to_ascii_uppercase();
        if !KNOWN_STATUSES.contains(&status.as_str()) {
            if mv >= (2, 38) {
                return Err(Box::new(nova_error(
                    StatusCode::BAD_REQUEST,
                    "badRequest",
                    "Invalid status value",
                )));
            }
            all.clear();
        }
        all.retain(|s| s.status == status);
    }
    if mv >= (2, 26) {
        let has = |s: &SimServer, t: &str| s.tags.iter().any(|x| x == t);
        if let Some(tags) = q.get("tags") {
            let want = tag_list(tags);
            all.retain(|s| want.iter().all(|t| has(s, t)));
        }
        if let Some(tags) = q.get("tags-any") {
            let want = tag_list(tags);
            all.retain(|s| want.iter().any(|t| has(s, t)));
        }
        if let Some(tags) = q.get("not-tags") {
            let want = tag_list(tags);
            all.retain(|s| !want.iter().all(|t| has(s, t)));
        }
        if let Some(tags) = q.get("not-tags-any") {
            let want = tag_list(tags);
            all.retain(|s| !want.iter().any(|t| has(s, t)));
        }
    }
    Ok(())
}

/// `GET /servers`: the detailed list cut down to id, name and links, with its
/// `servers_links` pointing at `/servers`.
pub(super) async fn list_servers_brief(
    state: State<Arc<Shared>>,
    headers: HeaderMap,
    q: Query<HashMap<String, String>>,
) -> Response {
    let detailed = list_servers(state, headers, q).await;
    if detailed.status() != StatusCode::OK {
        return detailed;
    }
    let (parts, body) = detailed.into_parts();
    let Ok(bytes) = to_bytes(body, usize::MAX).await else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    let Ok(mut v) = serde_json::from_slice::<Value>(&bytes) else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    let brief: Vec<Value> = v["servers"]
        .as_array()
        .map(|list| {
            list.iter()
                .map(|s| json!({ "id": s["id"], "name": s["name"], "links": s["links"] }))
                .collect()
        })
        .unwrap_or_default();
    v["servers"] = json!(brief);
    if let Some(links) = v.get_mut("servers_links").and_then(Value::as_array_mut) {
        for l in links {
            if let Some(h) = l["href"].as_str() {
                l["href"] = json!(h.replace("/servers/detail?", "/servers?"));
            }
        }
    }
    let mut resp = Json(v).into_response();
    for (k, val) in parts.headers.iter() {
        if k != "content-length" && k != "content-type" {
            resp.headers_mut().insert(k.clone(), val.clone());
        }
    }
    resp
}

/// `GET /flavors`: id, name and links of each flavor (and `description` from 2.55).
pub(super) async fn list_flavors_brief(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
) -> Response {
    if let Some(r) = unauthorized_unless_token(&shared, &headers) {
        return r;
    }
    let mv = microversion(&headers);
    let flavors: Vec<Value> = shared
        .opts
        .flavors
        .iter()
        .map(|f| {
            let full = flavor_json(&shared, f, mv);
            let mut v = json!({ "id": full["id"], "name": full["name"], "links": full["links"] });
            if mv >= (2, 55) {
                v["description"] = Value::Null;
            }
            v
        })
        .collect();
    Json(json!({ "flavors": flavors })).into_response()
}

/// `GET /flavors/{id}/os-extra_specs`: the flavor's extra specs.
pub(super) async fn flavor_extra_specs(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    axum::extract::Path(id): axum::extract::Path<String>,
) -> Response {
    if let Some(r) = unauthorized_unless_token(&shared, &headers) {
        return r;
    }
    if !shared.opts.flavors.iter().any(|f| f.id == id) {
        return nova_error(
            StatusCode::NOT_FOUND,
            "itemNotFound",
            &format!("Flavor {id} could not be found."),
        );
    }
    let specs = shared
        .opts
        .flavor_extra_specs
        .get(&id)
        .cloned()
        .unwrap_or_default();
    Json(json!({ "extra_specs": specs })).into_response()
}

//! The simulator's HTTP side: routes, the API key check, listings, tags and the queue
//! (a call's body and the refusals are in `calls`).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Query, Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};

use super::calls::{error, not_object, parse_object, select, text};
use super::catalog::server_options;
use super::commands::{create_server, power_off, power_on, reboot, terminate, valid_tag};
use super::{Shared, SimCall, SimServer};
use crate::faults::{self, Dialect};

pub(super) fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/service/servers", get(list_servers))
        .route("/service/server", post(create_server).get(server_options))
        .route("/service/server/info", post(server_info))
        .route("/service/server/terminate", post(terminate))
        .route("/service/server/poweron", post(power_on))
        .route("/service/server/poweroff", post(power_off))
        .route("/service/server/reboot", post(reboot))
        .route("/server/tags", post(server_tags))
        .route("/service/queue", get(queue))
        .fallback(unknown_path)
        .layer(axum::middleware::from_fn_with_state(
            shared.clone(),
            record_and_authenticate,
        ))
        .layer(axum::middleware::from_fn_with_state(
            (shared.opts.faults.clone(), Dialect::Kamatera),
            faults::inject,
        ))
        .with_state(shared)
}

/// The real service's answer to a path it has no route for (its exception handler turns
/// the router's not-found into this): never a missing server.
async fn unknown_path() -> Response {
    (
        StatusCode::NOT_FOUND,
        Json(json!({ "error": true, "message": "Not Found" })),
    )
        .into_response()
}

/// Logs every request with its JSON body and rejects it without the right API key.
async fn record_and_authenticate(
    State(shared): State<Arc<Shared>>,
    req: Request,
    next: Next,
) -> Response {
    let (parts, body) = req.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, 4 << 20).await else {
        return error(StatusCode::PAYLOAD_TOO_LARGE, "Request body too large");
    };
    let header = |name: &str| {
        parts
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let o = &shared.opts;
    let authorized = header("authclientid").as_deref() == Some(o.client_id.as_str())
        && header("authsecret").as_deref() == Some(o.secret.as_str());
    shared.lock().calls.push(SimCall {
        method: parts.method.to_string(),
        path: parts.uri.path().to_string(),
        query: parts.uri.query().map(str::to_string),
        body: serde_json::from_slice(&bytes).ok(),
        authorized,
    });
    if !authorized {
        return error(
            StatusCode::UNAUTHORIZED,
            "Authentication failed: invalid AuthClientId or AuthSecret",
        );
    }
    next.run(Request::from_parts(parts, axum::body::Body::from(bytes)))
        .await
}

fn server_json(s: &SimServer) -> Value {
    json!({ "id": s.id, "name": s.name, "datacenter": s.datacenter, "power": s.power })
}

async fn list_servers(State(shared): State<Arc<Shared>>) -> Response {
    let st = shared.lock();
    if st.listing_down {
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            Json(json!({"message": "Internal Server Error"})),
        )
            .into_response();
    }
    Json(Value::Array(st.servers.iter().map(server_json).collect())).into_response()
}

/// `POST /service/server/info` row. The WAN network is named `wan-<datacenter>` and has a
/// public address (from 203.0.113.0/24, fixed per server), as clients expect.
fn info_json(s: &SimServer) -> Value {
    let host = s.id.bytes().fold(0u8, |a, b| a.wrapping_add(b)) % 250 + 2;
    let networks: Vec<Value> = s
        .networks
        .iter()
        .map(|n| {
            let name = n
                .split(',')
                .find_map(|kv| kv.strip_prefix("name="))
                .unwrap_or("");
            if name == "wan" {
                json!({ "network": format!("wan-{}", s.datacenter.to_ascii_lowercase()), "ips": [format!("203.0.113.{host}")] })
            } else {
                json!({ "network": name, "ips": [] })
            }
        })
        .collect();
    json!({
        "id": s.id, "name": s.name, "datacenter": s.datacenter, "power": s.power,
        "cpu": s.cpu, "ram": s.ram_mb,
        "diskSizes": s.disks.iter().filter_map(|d| d.split(',').find_map(|kv| kv.strip_prefix("size=")).and_then(|v| v.parse::<u64>().ok())).collect::<Vec<_>>(),
        "networks": networks,
        "billing": s.billing_cycle, "traffic": "t5000",
        "managed": if s.managed { "1" } else { "0" },
        "backup": if s.daily_backup { "1" } else { "0" },
        "priceHourlyOn": "0.0420", "priceHourlyOff": "0.0050", "priceMonthlyOn": "30.00",
    })
}

async fn server_info(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    let Some(m) = parse_object(&body) else {
        return not_object();
    };
    let st = shared.lock();
    let found = match select(&st, &m) {
        Ok(found) => found,
        Err(refused) => return refused.answer(&shared),
    };
    Json(Value::Array(
        found.iter().map(|i| info_json(&st.servers[*i])).collect(),
    ))
    .into_response()
}

async fn server_tags(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    let Some(m) = parse_object(&body) else {
        return not_object();
    };
    let mut st = shared.lock();
    let found = match select(&st, &m) {
        Ok(found) => found,
        Err(refused) => return refused.answer(&shared),
    };
    let i = match found.as_slice() {
        [one] => *one,
        _ => {
            return error(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!(
                    "Too many matching servers (name='{}')",
                    text(&m, "name").unwrap_or_default()
                ),
            )
        }
    };
    let server = &mut st.servers[i];
    if let Some(add) = text(&m, "add").filter(|t| !t.is_empty()) {
        if !valid_tag(&add) {
            return error(StatusCode::BAD_REQUEST, "Invalid tag name");
        }
        if !server.tags.contains(&add) {
            server.tags.push(add);
        }
    }
    if let Some(remove) = text(&m, "remove").filter(|t| !t.is_empty()) {
        server.tags.retain(|t| *t != remove);
    }
    // The current row shape: the server id and the tag name.
    Json(Value::Array(
        server
            .tags
            .iter()
            .map(|t| json!({ "id": server.id, "tagName": t }))
            .collect(),
    ))
    .into_response()
}

async fn queue(
    State(shared): State<Arc<Shared>>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let Some(id) = q.get("id").and_then(|i| i.trim().parse::<u64>().ok()) else {
        return error(StatusCode::BAD_REQUEST, "missing required flag (id)");
    };
    let st = shared.lock();
    let entries: Vec<Value> = st
        .commands
        .iter()
        .filter(|c| c.id == id && !shared.opts.silent_queue)
        .map(|c| {
            // The queue answers ids as numbers, whatever form the command call used.
            let mut e: BTreeMap<&str, Value> = BTreeMap::new();
            e.insert("id", json!(c.id));
            e.insert("status", json!(c.status));
            e.insert("server", json!(c.server_name));
            e.insert("description", json!(format!("{} server", c.kind)));
            e.insert("log", json!(c.log));
            if let Some(t) = c.completed {
                // As the queue writes it: `2024-05-01 12:00:00` (UTC).
                if let Ok(ts) = jiff::Timestamp::try_from(t) {
                    e.insert(
                        "completed",
                        json!(ts.strftime("%Y-%m-%d %H:%M:%S").to_string()),
                    );
                }
            }
            json!(e)
        })
        .collect();
    Json(Value::Array(entries)).into_response()
}

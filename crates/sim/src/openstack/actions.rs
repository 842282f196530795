//! Nova server actions `os-stop` and `os-start` with their state checks and
//! transitions, and server metadata updates (`POST /servers/{id}/metadata`,
//! `DELETE /servers/{id}/metadata/{key}`), as real Nova answers them.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::*;

fn not_found(id: &str) -> Response {
    nova_error(
        StatusCode::NOT_FOUND,
        "itemNotFound",
        &format!("Instance {id} could not be found."),
    )
}

/// Nova's 409 for an action the server's state does not allow.
fn conflict(action: &str, id: &str, what: &str, value: &str) -> Response {
    nova_error(
        StatusCode::CONFLICT,
        "conflictingRequest",
        &format!("Cannot '{action}' instance {id} while it is in {what} {value}"),
    )
}

/// `vm_state` as Nova names it for the conflict message.
fn vm_state(status: &str) -> &'static str {
    match status {
        "BUILD" => "building",
        "ERROR" => "error",
        "SHUTOFF" => "stopped",
        _ => "active",
    }
}

/// `POST /servers/{id}/action`: `{"os-stop": null}` (from ACTIVE or ERROR) and
/// `{"os-start": null}` (from SHUTOFF), each only with no task in progress; anything
/// else is 409. Accepted with 202 and no body; the server passes through
/// `powering-off`/`powering-on` and settles after the boot delay.
pub(super) async fn server_action(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    UrlPath(id): UrlPath<String>,
    body: Bytes,
) -> Response {
    if let Some(r) = unauthorized_unless_token(&shared, &headers) {
        return r;
    }
    let bad = |m: &str| nova_error(StatusCode::BAD_REQUEST, "badRequest", m);
    let Ok(Value::Object(v)) = serde_json::from_slice::<Value>(&body) else {
        return bad("Malformed request body");
    };
    let keys: Vec<&str> = v.keys().map(String::as_str).collect();
    let stop = match keys.as_slice() {
        ["os-stop"] => true,
        ["os-start"] => false,
        ["reboot"] => return reboot(&shared, &id, &v["reboot"]),
        _ => return bad(&format!("There is no such action: {}", keys.join(", "))),
    };
    let (action, allowed, task) = if stop {
        ("stop", &["ACTIVE", "ERROR"][..], "powering-off")
    } else {
        ("start", &["SHUTOFF"][..], "powering-on")
    };
    {
        let mut st = shared.lock();
        let Some(s) = st.servers.iter_mut().find(|s| s.id == id) else {
            return not_found(&id);
        };
        if let Some(t) = &s.task_state {
            return conflict(action, &id, "task_state", t);
        }
        if !allowed.contains(&s.status.as_str()) {
            return conflict(action, &id, "vm_state", vm_state(&s.status));
        }
        s.task_state = Some(task.into());
    }
    let delay = shared.opts.boot_delay;
    let s2 = shared.clone();
    tokio::spawn(async move {
        tokio::time::sleep(delay).await;
        finish_power(&s2, &id, stop);
    });
    StatusCode::ACCEPTED.into_response()
}

/// `{"reboot": {"type": "SOFT"|"HARD"}}`: a soft reboot only from ACTIVE, a hard one
/// also from SHUTOFF or ERROR (as Nova allows), each with no task in progress; an active
/// server shows REBOOT or HARD_REBOOT until it settles ACTIVE after the boot delay.
fn reboot(shared: &Arc<Shared>, id: &str, body: &Value) -> Response {
    let kind = body.get("type").and_then(Value::as_str).unwrap_or("");
    let hard = match kind {
        "HARD" | "Hard" | "hard" => true,
        "SOFT" | "Soft" | "soft" => false,
        _ if body.get("type").is_none() => {
            return nova_error(
                StatusCode::BAD_REQUEST,
                "badRequest",
                "Invalid input for field/attribute reboot. Value: {}. 'type' is a required property",
            )
        }
        other => {
            return nova_error(
                StatusCode::BAD_REQUEST,
                "badRequest",
                &format!("Invalid input for field/attribute type. Value: {other}. '{other}' is not one of ['HARD', 'Hard', 'hard', 'SOFT', 'Soft', 'soft']"),
            )
        }
    };
    let allowed: &[&str] = if hard {
        &["ACTIVE", "SHUTOFF", "ERROR"]
    } else {
        &["ACTIVE"]
    };
    {
        let mut st = shared.lock();
        let Some(s) = st.servers.iter_mut().find(|s| s.id == id) else {
            return not_found(id);
        };
        if let Some(t) = &s.task_state {
            return conflict("reboot", id, "task_state", t);
        }
        if !allowed.contains(&s.status.as_str()) {
            return conflict("reboot", id, "vm_state", vm_state(&s.status));
        }
        s.task_state = Some(if hard { "rebooting_hard" } else { "rebooting" }.into());
        let was_running = s.status == "ACTIVE";
        // Nova's status follows the task only for an active server; a stopped one
        // shows SHUTOFF until it is up.
        if was_running {
            s.status = if hard { "HARD_REBOOT" } else { "REBOOT" }.into();
        }
        let name = s.name.clone();
        drop(st);
        // The kubelet goes down with the guest and comes back at the end.
        if was_running {
            shared.fire(VmEvent::Stopped { name });
        }
    }
    let delay = shared.opts.boot_delay;
    let s2 = shared.clone();
    let id = id.to_string();
    tokio::spawn(async move {
        tokio::time::sleep(delay).await;
        let event = {
            let mut st = s2.lock();
            let Some(s) = st.servers.iter_mut().find(|s| s.id == id) else {
                return;
            };
            if !matches!(
                s.task_state.as_deref(),
                Some("rebooting" | "rebooting_hard")
            ) {
                return;
            }
            s.task_state = None;
            s.status = "ACTIVE".into();
            super::servers::booted(&s2, s)
        };
        s2.fire(event);
    });
    StatusCode::ACCEPTED.into_response()
}

/// The end of a power action: SHUTOFF (its kubelet stops) or ACTIVE (its kubelet
/// starts and registers its Node again, from the user data of the first boot).
fn finish_power(shared: &Shared, id: &str, stop: bool) {
    let event = {
        let mut st = shared.lock();
        let Some(s) = st.servers.iter_mut().find(|s| s.id == id) else {
            return;
        };
        if !matches!(
            s.task_state.as_deref(),
            Some("powering-off" | "powering-on")
        ) {
            return;
        }
        s.task_state = None;
        if stop {
            s.status = "SHUTOFF".into();
            VmEvent::Stopped {
                name: s.name.clone(),
            }
        } else {
            s.status = "ACTIVE".into();
            super::servers::booted(shared, s)
        }
    };
    shared.fire(event);
}

/// `POST /servers/{id}/metadata`: merges `{"metadata": {key: value}}` (string values,
/// keys of 1 to 255 characters) into the server's and answers all of it.
pub(super) async fn update_metadata(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    UrlPath(id): UrlPath<String>,
    body: Bytes,
) -> Response {
    if let Some(r) = unauthorized_unless_token(&shared, &headers) {
        return r;
    }
    let bad = |m: &str| nova_error(StatusCode::BAD_REQUEST, "badRequest", m);
    let Ok(v) = serde_json::from_slice::<Value>(&body) else {
        return bad("Malformed request body");
    };
    let Some(items) = v.get("metadata").and_then(Value::as_object) else {
        return bad("Invalid input for field/attribute metadata.");
    };
    let mut add = Vec::new();
    for (k, val) in items {
        let Some(val) = val.as_str().filter(|x| x.chars().count() <= 255) else {
            return bad("Invalid input for field/attribute metadata.");
        };
        if k.is_empty() || k.chars().count() > 255 {
            return bad("Invalid input for field/attribute metadata.");
        }
        add.push((k.clone(), val.to_string()));
    }
    let mut st = shared.lock();
    let Some(s) = st.servers.iter_mut().find(|s| s.id == id) else {
        return not_found(&id);
    };
    s.metadata.extend(add);
    Json(json!({ "metadata": s.metadata })).into_response()
}

/// `DELETE /servers/{id}/metadata/{key}`: 204, or 404 when the key is not there.
pub(super) async fn delete_metadata_item(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    UrlPath((id, key)): UrlPath<(String, String)>,
) -> Response {
    if let Some(r) = unauthorized_unless_token(&shared, &headers) {
        return r;
    }
    let mut st = shared.lock();
    let Some(s) = st.servers.iter_mut().find(|s| s.id == id) else {
        return not_found(&id);
    };
    if s.metadata.remove(&key).is_none() {
        return nova_error(
            StatusCode::NOT_FOUND,
            "itemNotFound",
            "Metadata item was not found",
        );
    }
    StatusCode::NO_CONTENT.into_response()
}

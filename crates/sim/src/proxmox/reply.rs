//! How the simulated Proxmox VE API answers: results inside its `{"data": ...}`
//! envelope, failures with `data: null` and a message, as the real server sends them.
//! A leaf shared by `http` (the dispatcher) and the handlers it calls.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

/// A successful answer: `v` inside the `data` envelope.
pub(super) fn data(v: Value) -> Response {
    Json(json!({ "data": v })).into_response()
}

/// A failed answer with the HTTP `status` and `message` (newline-terminated, as the
/// real server writes it).
pub(super) fn fail(status: StatusCode, message: &str) -> Response {
    (
        status,
        Json(json!({ "data": null, "message": format!("{message}\n") })),
    )
        .into_response()
}

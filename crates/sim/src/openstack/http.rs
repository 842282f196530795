//! Request logging, microversion negotiation and the error shapes every handler shares.

use std::sync::Arc;
use std::time::SystemTime;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::*;

/// Logs every request; for Nova also negotiates the microversion like the real API
/// (406 outside 2.1..=2.96, the chosen version echoed in the response headers).
pub(super) async fn record_call(
    State(shared): State<Arc<Shared>>,
    req: Request,
    next: Next,
) -> Response {
    let call = call_of(&req);
    let is_nova = call.path.starts_with("/compute/");
    shared.lock().calls.push(call);
    if !is_nova {
        return next.run(req).await;
    }
    let requested = req
        .headers()
        .get("openstack-api-version")
        .or_else(|| req.headers().get("x-openstack-nova-api-version"))
        .is_some();
    let mv = microversion(req.headers());
    if requested && !(MIN_MICROVERSION..=MAX_MICROVERSION).contains(&mv) {
        return (
            StatusCode::NOT_ACCEPTABLE,
            Json(json!({ "computeFault": { "code": 406, "message": format!(
                "Version {}.{} is not supported by the API. Minimum is {}.{} and maximum is {}.{}.",
                mv.0, mv.1, MIN_MICROVERSION.0, MIN_MICROVERSION.1, MAX_MICROVERSION.0, MAX_MICROVERSION.1
            ) } })),
        )
            .into_response();
    }
    let mut resp = next.run(req).await;
    let h = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&format!("compute {}.{}", mv.0, mv.1)) {
        h.insert("OpenStack-API-Version", v);
    }
    if let Ok(v) = HeaderValue::from_str(&format!("{}.{}", mv.0, mv.1)) {
        h.insert("X-OpenStack-Nova-API-Version", v);
    }
    h.insert(
        "Vary",
        HeaderValue::from_static("OpenStack-API-Version, X-OpenStack-Nova-API-Version"),
    );
    resp
}

pub(super) const MIN_MICROVERSION: (u32, u32) = (2, 1);
pub(super) const MAX_MICROVERSION: (u32, u32) = (2, 96);

pub(super) fn call_of(req: &Request) -> SimCall {
    let header = |name: &str| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    SimCall {
        method: req.method().to_string(),
        path: req.uri().path().to_string(),
        query: req.uri().query().map(str::to_string),
        microversion: header("openstack-api-version")
            .or_else(|| header("x-openstack-nova-api-version")),
    }
}

pub(super) fn nova_error(status: StatusCode, kind: &str, message: &str) -> Response {
    (
        status,
        Json(json!({ kind: { "code": status.as_u16(), "message": message } })),
    )
        .into_response()
}

pub(super) fn unauthorized() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        [("WWW-Authenticate", "Keystone uri=\"/identity\"")],
        Json(json!({ "error": {
            "code": 401,
            "title": "Unauthorized",
            "message": "The request you have made requires authentication.",
        } })),
    )
        .into_response()
}

/// Checks `X-Auth-Token`: `Some` is the 401 response to send.
pub(super) fn unauthorized_unless_token(shared: &Shared, headers: &HeaderMap) -> Option<Response> {
    let valid = headers
        .get("x-auth-token")
        .and_then(|v| v.to_str().ok())
        .and_then(|token| shared.lock().tokens.get(token).copied())
        .is_some_and(|exp| exp > shared.now());
    if valid {
        None
    } else {
        Some(unauthorized())
    }
}

/// The requested compute microversion, as (major, minor); 2.1 when absent.
pub(super) fn microversion(headers: &HeaderMap) -> (u32, u32) {
    let raw = headers
        .get("openstack-api-version")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().strip_prefix("compute").map(str::trim))
        .or_else(|| {
            headers
                .get("x-openstack-nova-api-version")
                .and_then(|v| v.to_str().ok())
        });
    match raw.map(str::trim) {
        None => MIN_MICROVERSION,
        Some("latest") => MAX_MICROVERSION,
        Some(v) => v
            .split_once('.')
            .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)))
            // Unparseable: outside the supported range, so rejected with 406.
            .unwrap_or((0, 0)),
    }
}

pub(super) fn domain_matches(want: &str, given: &Value) -> bool {
    if let Some(id) = given.get("id").and_then(Value::as_str) {
        return id == want.to_ascii_lowercase();
    }
    given.get("name").and_then(Value::as_str) == Some(want)
}

/// `v` as Python's `repr` prints it: Nova's schema errors quote the refused value so
/// (`{'a/b': 'v'}`, `'x'`, `['t0', 't1']`).
pub(super) fn py_repr(v: &Value) -> String {
    match v {
        Value::Null => "None".into(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::Number(n) => n.to_string(),
        Value::String(s) if s.contains('\'') && !s.contains('"') => format!("\"{s}\""),
        Value::String(s) => format!("'{}'", s.replace('\'', "\\'")),
        Value::Array(items) => {
            let inner: Vec<String> = items.iter().map(py_repr).collect();
            format!("[{}]", inner.join(", "))
        }
        Value::Object(m) => {
            let inner: Vec<String> = m
                .iter()
                .map(|(k, v)| format!("{}: {}", py_repr(&Value::String(k.clone())), py_repr(v)))
                .collect();
            format!("{{{}}}", inner.join(", "))
        }
    }
}

/// `v` as Nova's schema errors print it after `Value:` (a string bare, else its repr).
pub(super) fn py_str(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => py_repr(other),
    }
}

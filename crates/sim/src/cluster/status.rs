//! `Status` failure bodies shaped like the real API server's, so clients (kube-rs,
//! kubectl) take the same error paths they would against a real cluster.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use super::resources::ResourceDef;

/// An API failure: HTTP code, machine `reason` and human `message`, as in `metav1.Status`.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub code: u16,
    pub reason: String,
    pub message: String,
    pub details: Option<Value>,
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.code, self.reason, self.message)
    }
}

impl std::error::Error for ApiError {}

fn details(res: &ResourceDef, name: &str) -> Value {
    let mut d = json!({ "name": name, "kind": res.plural });
    if !res.group.is_empty() {
        d["group"] = json!(res.group);
    }
    d
}

impl ApiError {
    pub fn new(code: u16, reason: &str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason: reason.to_string(),
            message: message.into(),
            details: None,
        }
    }

    pub fn not_found(res: &ResourceDef, name: &str) -> Self {
        ApiError {
            details: Some(details(res, name)),
            ..Self::new(404, "NotFound", format!("{} \"{name}\" not found", res.id))
        }
    }

    pub fn already_exists(res: &ResourceDef, name: &str) -> Self {
        ApiError {
            details: Some(details(res, name)),
            ..Self::new(
                409,
                "AlreadyExists",
                format!("{} \"{name}\" already exists", res.id),
            )
        }
    }

    /// Optimistic-concurrency failure: the caller's resourceVersion is stale.
    pub fn conflict(res: &ResourceDef, name: &str) -> Self {
        Self::conflict_msg(
            res,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    pub fn conflict_msg(res: &ResourceDef, name: &str, why: &str) -> Self {
        ApiError {
            details: Some(details(res, name)),
            ..Self::new(
                409,
                "Conflict",
                format!(
                    "Operation cannot be fulfilled on {} \"{name}\": {why}",
                    res.id
                ),
            )
        }
    }

    pub fn invalid(res: &ResourceDef, name: &str, why: &str) -> Self {
        let kind = res.kind;
        ApiError {
            details: Some(json!({"name": name, "group": res.group, "kind": kind,
                "causes": [{"reason": "FieldValueInvalid", "message": why}]})),
            ..Self::new(
                422,
                "Invalid",
                format!("{kind} \"{name}\" is invalid: {why}"),
            )
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    pub fn method_not_allowed(what: &str) -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            format!("the server does not allow this method on the requested resource ({what})"),
        )
    }

    pub fn unsupported_media_type(ct: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!("the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json (got {ct:?})"),
        )
    }

    /// The requested watch start is older than the kept event history.
    pub fn expired(rv: u64, oldest: u64) -> Self {
        Self::new(
            410,
            "Expired",
            format!("too old resource version: {rv} ({oldest})"),
        )
    }

    pub fn page_not_found(path: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("the server could not find the requested resource ({path})"),
        )
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }

    /// The `metav1.Status` object as sent on the wire.
    pub fn to_status(&self) -> Value {
        let mut v = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(d) = &self.details {
            v["details"] = d.clone();
        }
        v
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        json_response(code, &self.to_status())
    }
}

/// A JSON body with the content type the API server uses.
pub fn json_response(code: StatusCode, body: &Value) -> Response {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    (code, [(header::CONTENT_TYPE, "application/json")], bytes).into_response()
}

/// An already encoded JSON body.
pub fn bytes_response(code: StatusCode, body: Vec<u8>) -> Response {
    (code, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// The `Status` a successful eviction or delete-collection answers with.
pub fn success_status(code: u16) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code})
}

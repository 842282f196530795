//! Server tags (`/servers/{id}/tags`, microversion ≥2.26), with Nova's limits: at
//! most 50 tags a server, each up to 60 characters without `/` or `,`.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::*;

const MAX_TAGS: usize = 50;

/// What Nova's tag schema says about `tag` (`'x' is too long`, `'a,b' does not match
/// '^[^,/]*$'`), or `None` for a valid tag.
pub(super) fn invalid_tag(tag: &str) -> Option<String> {
    if tag.is_empty() {
        return Some("'' is too short".into());
    }
    if tag.chars().count() > 60 {
        return Some(format!("'{tag}' is too long"));
    }
    if tag.contains(['/', ',']) {
        return Some(format!("'{tag}' does not match '^[^,/]*$'"));
    }
    None
}

/// The 404 Nova answers below 2.26, where the tag routes do not exist, or for an unknown
/// server; `None` when the request may go on.
fn precheck(shared: &Shared, headers: &HeaderMap, id: &str) -> Option<Response> {
    if let Some(r) = unauthorized_unless_token(shared, headers) {
        return Some(r);
    }
    if microversion(headers) < (2, 26) {
        return Some(nova_error(
            StatusCode::NOT_FOUND,
            "itemNotFound",
            "The resource could not be found.",
        ));
    }
    if !shared.lock().servers.iter().any(|s| s.id == id) {
        return Some(nova_error(
            StatusCode::NOT_FOUND,
            "itemNotFound",
            &format!("Instance {id} could not be found."),
        ));
    }
    None
}

fn with_server<T>(shared: &Shared, id: &str, f: impl FnOnce(&mut SimServer) -> T) -> Option<T> {
    let mut st = shared.lock();
    st.servers.iter_mut().find(|s| s.id == id).map(f)
}

/// `GET /servers/{id}/tags`.
pub(super) async fn list_tags(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    UrlPath(id): UrlPath<String>,
) -> Response {
    if let Some(r) = precheck(&shared, &headers, &id) {
        return r;
    }
    let tags = with_server(&shared, &id, |s| s.tags.clone()).unwrap_or_default();
    Json(json!({ "tags": tags })).into_response()
}

/// `PUT /servers/{id}/tags`: replaces all tags (200 with the new list).
pub(super) async fn replace_tags(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    UrlPath(id): UrlPath<String>,
    body: Bytes,
) -> Response {
    if let Some(r) = precheck(&shared, &headers, &id) {
        return r;
    }
    let bad = |m: &str| nova_error(StatusCode::BAD_REQUEST, "badRequest", m);
    let Ok(v) = serde_json::from_slice::<Value>(&body) else {
        return bad("Malformed request body");
    };
    let Some(list) = v.get("tags").and_then(Value::as_array) else {
        return bad("Invalid input for field/attribute tags.");
    };
    if list.len() > MAX_TAGS {
        let r = py_repr(&Value::Array(list.clone()));
        return bad(&format!(
            "Invalid input for field/attribute tags. Value: {r}. {r} is too long"
        ));
    }
    let mut tags: Vec<String> = Vec::new();
    for (i, t) in list.iter().enumerate() {
        let Some(t) = t.as_str() else {
            return bad(&format!(
                "Invalid input for field/attribute {i}. Value: {}. {} is not of type 'string'",
                py_str(t),
                py_repr(t)
            ));
        };
        if let Some(why) = invalid_tag(t) {
            return bad(&format!(
                "Invalid input for field/attribute {i}. Value: {t}. {why}"
            ));
        }
        if !tags.iter().any(|x| x == t) {
            tags.push(t.to_string());
        }
    }
    with_server(&shared, &id, |s| s.tags = tags.clone());
    Json(json!({ "tags": tags })).into_response()
}

/// `DELETE /servers/{id}/tags`: removes all tags (204).
pub(super) async fn delete_tags(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    UrlPath(id): UrlPath<String>,
) -> Response {
    if let Some(r) = precheck(&shared, &headers, &id) {
        return r;
    }
    with_server(&shared, &id, |s| s.tags.clear());
    StatusCode::NO_CONTENT.into_response()
}

/// Nova's 404 for a tag the server does not have: "Server …" when checked, "Instance …"
/// when deleted.
fn tag_not_found(who: &str, id: &str, tag: &str) -> Response {
    nova_error(
        StatusCode::NOT_FOUND,
        "itemNotFound",
        &format!("{who} {id} has no tag '{tag}'"),
    )
}

/// `GET /servers/{id}/tags/{tag}`: 204 when the server has it, else 404.
pub(super) async fn check_tag(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    UrlPath((id, tag)): UrlPath<(String, String)>,
) -> Response {
    if let Some(r) = precheck(&shared, &headers, &id) {
        return r;
    }
    if with_server(&shared, &id, |s| s.tags.contains(&tag)).unwrap_or(false) {
        StatusCode::NO_CONTENT.into_response()
    } else {
        tag_not_found("Server", &id, &tag)
    }
}

/// `PUT /servers/{id}/tags/{tag}`: 201 with a `Location` when added, 204 when the
/// server already had it, 400 past the limit.
pub(super) async fn add_tag(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    UrlPath((id, tag)): UrlPath<(String, String)>,
) -> Response {
    if let Some(r) = precheck(&shared, &headers, &id) {
        return r;
    }
    if let Some(why) = invalid_tag(&tag) {
        return nova_error(
            StatusCode::BAD_REQUEST,
            "badRequest",
            &format!("Tag '{tag}' is invalid. It must be a non empty string without characters '/' and ','. Validation error message: {why}"),
        );
    }
    let added = with_server(&shared, &id, |s| {
        if s.tags.contains(&tag) {
            Ok(false)
        } else if s.tags.len() >= MAX_TAGS {
            Err(())
        } else {
            s.tags.push(tag.clone());
            Ok(true)
        }
    });
    match added {
        Some(Ok(true)) => {
            let mut resp = StatusCode::CREATED.into_response();
            let href = format!("{}/compute/v2.1/servers/{id}/tags/{tag}", shared.base());
            if let Ok(v) = HeaderValue::from_str(&href) {
                resp.headers_mut().insert("Location", v);
            }
            resp
        }
        Some(Ok(false)) => StatusCode::NO_CONTENT.into_response(),
        Some(Err(())) => nova_error(
            StatusCode::BAD_REQUEST,
            "badRequest",
            &format!("The number of tags exceeded the per-server limit {MAX_TAGS}"),
        ),
        None => nova_error(
            StatusCode::NOT_FOUND,
            "itemNotFound",
            &format!("Instance {id} could not be found."),
        ),
    }
}

/// `DELETE /servers/{id}/tags/{tag}`: 204, or 404 when the server does not have it.
pub(super) async fn delete_tag(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    UrlPath((id, tag)): UrlPath<(String, String)>,
) -> Response {
    if let Some(r) = precheck(&shared, &headers, &id) {
        return r;
    }
    let removed = with_server(&shared, &id, |s| {
        let before = s.tags.len();
        s.tags.retain(|t| *t != tag);
        s.tags.len() != before
    });
    if removed == Some(true) {
        StatusCode::NO_CONTENT.into_response()
    } else {
        tag_not_found("Instance", &id, &tag)
    }
}

//! HTTP front: routes requests to resources, records every call and hands the verb to
//! `verbs` (reads and writes), `list` or `watch`. Everything answers JSON, failures as
//! `Status` objects; warnings (unknown fields under `fieldValidation=Warn`) go out as
//! `Warning` headers as from the real server.

use std::cell::RefCell;

use axum::body::Bytes;
use axum::extract::{Extension, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use axum::Router;

use super::query::Query;
use super::rbac::{self, UserInfo};
use super::request::{ApiCall, Request, Shared};
use super::routing::{route, verb_of, Routed};
use super::status::{json_response, ApiError};
use super::{authn, eviction, media};
use super::{discovery, list, openapi, verbs, watches, Inner};

pub fn router(state: Shared) -> Router {
    Router::new()
        .route("/version", get(version))
        .route("/version/", get(version))
        .route("/api", get(core_versions))
        .route("/apis", get(group_list))
        .route("/healthz", get(healthy))
        .route("/readyz", get(healthy))
        .route("/livez", get(healthy))
        .route("/openapi/v3", get(openapi_index))
        .route("/openapi/v3/{*gv}", get(openapi_group_version))
        .route("/api/{*rest}", any(resource_request))
        .route("/apis/{*rest}", any(resource_request))
        .fallback(not_found)
        .with_state(state)
}

fn record_non_resource(state: &Inner, uri: &Uri) {
    state.record(ApiCall {
        verb: "get".into(),
        group: String::new(),
        version: String::new(),
        resource: String::new(),
        subresource: None,
        namespace: None,
        name: None,
        path: uri.path().to_string(),
    });
}

async fn version(State(state): State<Shared>, uri: Uri) -> Response {
    record_non_resource(&state, &uri);
    json_response(StatusCode::OK, &discovery::version(&state.server_version()))
}

async fn core_versions(State(state): State<Shared>, uri: Uri) -> Response {
    record_non_resource(&state, &uri);
    json_response(
        StatusCode::OK,
        &discovery::core_versions(&state.addr.to_string()),
    )
}

async fn group_list(State(state): State<Shared>, uri: Uri) -> Response {
    record_non_resource(&state, &uri);
    json_response(StatusCode::OK, &discovery::group_list())
}

async fn healthy() -> &'static str {
    "ok"
}

async fn openapi_index(State(state): State<Shared>, uri: Uri) -> Response {
    record_non_resource(&state, &uri);
    json_response(StatusCode::OK, &openapi::index())
}

async fn openapi_group_version(State(state): State<Shared>, uri: Uri) -> Response {
    record_non_resource(&state, &uri);
    let gv = uri.path().trim_start_matches("/openapi/v3/");
    match openapi::group_version(gv) {
        Some(doc) => json_response(StatusCode::OK, &doc),
        None => ApiError::page_not_found(uri.path()).into_response(),
    }
}

/// Anything else, including `/openapi/v2`: kubectl uses `/openapi/v3` when it is there.
async fn not_found(State(state): State<Shared>, uri: Uri) -> Response {
    record_non_resource(&state, &uri);
    ApiError::page_not_found(uri.path()).into_response()
}

async fn resource_request(
    State(state): State<Shared>,
    Extension(user): Extension<UserInfo>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let routed = match route(uri.path()) {
        Ok(r) => r,
        Err(e) => {
            record_non_resource(&state, &uri);
            return e.into_response();
        }
    };
    let target = match routed {
        Routed::Discovery(doc) => {
            record_non_resource(&state, &uri);
            return json_response(StatusCode::OK, &doc);
        }
        Routed::Resource(t) => t,
    };
    let query = Query::parse(uri.query());
    let watch = query.flag("watch");
    let verb = match verb_of(&method, &target, watch) {
        Ok(v) => v,
        Err(e) => return e.into_response(),
    };
    let call = ApiCall {
        verb: verb.into(),
        group: target.res.group.into(),
        version: target.res.version.into(),
        resource: target.res.plural.into(),
        subresource: target.sub.clone(),
        namespace: target.ns.clone(),
        name: target.name.clone(),
        path: uri.path().to_string(),
    };
    let allowed = rbac::authorize(&state.store.lock(), &user, &call);
    state.record(call);
    if let Err(e) = allowed {
        return e.into_response();
    }
    if let Err(e) = media::check_accept(&headers) {
        return e.into_response();
    }
    let req = Request {
        state: &state,
        target,
        query,
        headers,
        body,
        warnings: RefCell::new(Vec::new()),
    };
    let result = match verb {
        "get" => verbs::get_one(&req),
        "list" => return list::list(&req).unwrap_or_else(IntoResponse::into_response),
        "watch" => return watches::watch(&req).unwrap_or_else(IntoResponse::into_response),
        "create" if req.target.sub.as_deref() == Some("eviction") => match verbs::dry_run(&req) {
            Ok(dry) => {
                let mut txn = state.store.lock();
                eviction::evict(&mut txn, req.ns(), req.name(), &req.body, dry)
                    .map(|s| (StatusCode::CREATED, s))
            }
            Err(e) => Err(e),
        },
        "create" if req.target.sub.as_deref() == Some("token") => authn::token_request(&req),
        "create" => verbs::create(&req),
        "update" => verbs::update(&req),
        "patch" => verbs::patch_one(&req),
        "delete" => verbs::delete(&req),
        "deletecollection" => verbs::delete_collection(&req),
        _ => Err(ApiError::method_not_allowed(verb)),
    };
    let mut response = match result {
        Ok((code, body)) => json_response(code, &body),
        Err(e) => e.into_response(),
    };
    for w in req.warnings.borrow().iter() {
        let text = format!("299 - {}", serde_json::Value::from(w.as_str()));
        if let Ok(v) = HeaderValue::from_str(&text) {
            response.headers_mut().append(header::WARNING, v);
        }
    }
    response
}

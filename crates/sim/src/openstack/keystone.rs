//! Keystone v3: token issue by password or application credential.

use std::sync::Arc;
use std::time::SystemTime;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::*;

pub(super) async fn issue_token(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    let o = &shared.opts;
    let bad = |m: &str| {
        (
            StatusCode::BAD_REQUEST,
            Json(json!({ "error": { "code": 400, "title": "Bad Request", "message": m } })),
        )
            .into_response()
    };
    let denied = || {
        (
            StatusCode::UNAUTHORIZED,
            Json(json!({ "error": {
                "code": 401,
                "title": "Unauthorized",
                "message": "The request you have made requires authentication.",
            } })),
        )
            .into_response()
    };
    let Ok(v) = serde_json::from_slice::<Value>(&body) else {
        return bad("Expecting to find auth in request body.");
    };
    let identity = &v["auth"]["identity"];
    let Some(methods) = identity["methods"].as_array() else {
        return bad("Expecting to find identity.methods in auth.");
    };
    let method = methods.first().and_then(Value::as_str).unwrap_or("");
    let user_ok = |user: &Value| {
        user["name"].as_str() == Some(o.username.as_str())
            && domain_matches(&o.domain, &user["domain"])
    };
    let (ok, scoped, method_name) = match method {
        "password" => {
            let user = &identity["password"]["user"];
            let ok = user_ok(user) && user["password"].as_str() == Some(o.password.as_str());
            let project = &v["auth"]["scope"]["project"];
            let scoped = if project.is_null() {
                false
            } else if let Some(id) = project["id"].as_str() {
                if id != o.project_id {
                    return denied();
                }
                true
            } else if project["name"].as_str() == Some(o.project.as_str())
                && domain_matches(&o.domain, &project["domain"])
            {
                true
            } else {
                return denied();
            };
            (ok, scoped, "password")
        }
        "application_credential" => {
            let ac = &identity["application_credential"];
            let secret = ac["secret"].as_str();
            let ok = o.app_credentials.iter().any(|a| {
                let who = match ac["id"].as_str() {
                    Some(id) => id == a.id,
                    None => ac["name"].as_str() == Some(a.name.as_str()) && user_ok(&ac["user"]),
                };
                who && secret == Some(a.secret.as_str())
            });
            (ok, true, "application_credential")
        }
        _ => return bad("Unsupported authentication method."),
    };
    if !ok {
        return denied();
    }
    let now = shared.now();
    let (token, expires) = {
        let mut st = shared.lock();
        st.counter += 1;
        st.tokens_issued += 1;
        let token = format!("gAAAAAsim{}", pseudo_uuid(st.counter).replace('-', ""));
        let expires = now + st.token_lifetime;
        st.tokens.insert(token.clone(), expires);
        (token, expires)
    };
    let base = shared.base();
    let endpoints = |path: &str| {
        json!([
            { "id": pseudo_uuid(1), "interface": "public", "region": o.region, "region_id": o.region, "url": format!("{base}{path}") },
            { "id": pseudo_uuid(2), "interface": "internal", "region": o.region, "region_id": o.region, "url": format!("{base}{path}") },
        ])
    };
    let mut tok = json!({
        "methods": [method_name],
        "user": { "id": "0123456789abcdef0123456789abcdef", "name": o.username,
                  "domain": { "id": o.domain.to_ascii_lowercase(), "name": o.domain },
                  "password_expires_at": null },
        "audit_ids": ["sim"],
        "expires_at": humantime::format_rfc3339_micros(expires).to_string(),
        "issued_at": humantime::format_rfc3339_micros(now).to_string(),
    });
    if scoped {
        tok["project"] = json!({ "id": o.project_id, "name": o.project,
            "domain": { "id": o.domain.to_ascii_lowercase(), "name": o.domain } });
        tok["roles"] = json!([{ "id": "r1", "name": "member" }]);
        tok["catalog"] = json!([
            { "type": "identity", "name": "keystone", "id": "s0", "endpoints": endpoints("/identity") },
            { "type": "compute", "name": "nova", "id": "s1", "endpoints": endpoints("/compute/v2.1") },
            { "type": "image", "name": "glance", "id": "s2", "endpoints": endpoints("/image") },
            { "type": "network", "name": "neutron", "id": "s3", "endpoints": endpoints("/network") },
        ]);
    }
    let mut resp = (StatusCode::CREATED, Json(json!({ "token": tok }))).into_response();
    if let Ok(v) = HeaderValue::from_str(&token) {
        resp.headers_mut().insert("X-Subject-Token", v);
    }
    resp
}

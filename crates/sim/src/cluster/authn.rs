//! Authentication. The admin token of the generated kubeconfig authenticates as
//! `kubernetes-admin` in `system:masters`; a token issued by the TokenRequest API
//! (`kubectl create token SA`, `POST .../serviceaccounts/SA/token`) as that
//! ServiceAccount, while it exists and the token has not expired. Any other token answers
//! 401 Unauthorized with the real `Status` body. Tokens are never logged.
//!
//! A request without credentials is a 401, as on a real API server with
//! `--anonymous-auth=false` (with anonymous auth on, a real one would serve it as
//! `system:anonymous`, which RBAC refuses almost everything). kubectl sends its token
//! only over HTTPS, so `simulate --serve` serves HTTPS (see `tls`). With
//! [`super::SimClusterOptions::require_token`] off, such a request is served as the old
//! insecure port served it (user `system:unsecured` in `system:masters`).

use std::collections::HashMap;
use std::sync::Mutex;

use axum::extract::{Request as HttpRequest, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use ring::rand::SecureRandom;
use serde_json::{json, Value};

use super::meta;
use super::rbac::{self, UserInfo};
use super::request::{Answer, ApiCall, Request, Shared};
use super::resources::SERVICEACCOUNTS;
use super::routing::{route, Routed};
use super::status::ApiError;
use super::Inner;

/// Default and bounds of `spec.expirationSeconds`, as the real server applies them.
const DEFAULT_EXPIRY_SECS: i64 = 3600;
const MIN_EXPIRY_SECS: i64 = 600;
const MAX_EXPIRY_SECS: i64 = 48 * 3600;

/// Whose a token is and until when it is good.
#[derive(Debug, Clone)]
struct Issued {
    namespace: String,
    name: String,
    uid: String,
    expires: Timestamp,
}

/// Tokens issued by the TokenRequest API.
#[derive(Debug, Default)]
pub struct Tokens(Mutex<HashMap<String, Issued>>);

impl Tokens {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Issued>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

pub fn unauthorized() -> ApiError {
    ApiError::new(401, "Unauthorized", "Unauthorized")
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    let v = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = v.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

/// The user a request's bearer token belongs to.
pub fn authenticate(inner: &Inner, headers: &HeaderMap) -> Result<UserInfo, ApiError> {
    let Some(token) = bearer(headers) else {
        if inner.opts.require_token || headers.contains_key(header::AUTHORIZATION) {
            return Err(unauthorized());
        }
        return Ok(UserInfo::unsecured());
    };
    if token == inner.opts.token {
        return Ok(UserInfo::admin());
    }
    let issued = inner.tokens.lock().get(token).cloned();
    let issued = issued.ok_or_else(unauthorized)?;
    if Timestamp::now() >= issued.expires {
        return Err(unauthorized());
    }
    // A bound token dies with its ServiceAccount (also one deleted and made again).
    let txn = inner.store.lock();
    let alive = txn
        .get(&SERVICEACCOUNTS, &issued.namespace, &issued.name)
        .is_some_and(|sa| meta::uid(sa) == issued.uid);
    if !alive {
        return Err(unauthorized());
    }
    Ok(UserInfo::service_account(&issued.namespace, &issued.name))
}

/// Issues a token for ServiceAccount `namespace/name`, good for `seconds`.
pub fn issue(
    inner: &Inner,
    namespace: &str,
    name: &str,
    seconds: i64,
) -> Result<(String, Timestamp), ApiError> {
    let uid = {
        let txn = inner.store.lock();
        let sa = txn
            .get(&SERVICEACCOUNTS, namespace, name)
            .ok_or_else(|| ApiError::not_found(&SERVICEACCOUNTS, name))?;
        meta::uid(sa).to_string()
    };
    let mut bytes = [0u8; 32];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| ApiError::internal("no randomness for a token"))?;
    let token = format!(
        "nwsim.{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    );
    let expires = Timestamp::now() + SignedDuration::from_secs(seconds);
    inner.tokens.lock().insert(
        token.clone(),
        Issued {
            namespace: namespace.into(),
            name: name.into(),
            uid,
            expires,
        },
    );
    Ok((token, expires))
}

/// `POST /api/v1/namespaces/NS/serviceaccounts/NAME/token`: a TokenRequest answered
/// with the token in `status.token`.
pub fn token_request(req: &Request<'_>) -> Answer {
    let body: Value = if req.body.iter().all(u8::is_ascii_whitespace) {
        json!({})
    } else {
        serde_json::from_slice(&req.body).map_err(|e| {
            ApiError::bad_request(format!("couldn't decode the TokenRequest as JSON: {e}"))
        })?
    };
    let seconds = match body.pointer("/spec/expirationSeconds") {
        None | Some(Value::Null) => DEFAULT_EXPIRY_SECS,
        Some(v) => v.as_i64().ok_or_else(|| {
            ApiError::bad_request("spec.expirationSeconds: must be an integer number of seconds")
        })?,
    };
    if seconds < MIN_EXPIRY_SECS {
        return Err(ApiError::new(
            422,
            "Invalid",
            format!("TokenRequest.authentication.k8s.io {:?} is invalid: spec.expirationSeconds: Invalid value: {seconds}: may not specify a duration less than 10 minutes", req.name()),
        ));
    }
    let seconds = seconds.min(MAX_EXPIRY_SECS);
    let audiences = body
        .pointer("/spec/audiences")
        .filter(|a| a.as_array().is_some_and(|a| !a.is_empty()))
        .cloned()
        .unwrap_or_else(|| json!(["https://kubernetes.default.svc.cluster.local"]));
    if req.q("dryRun").is_some() {
        return Err(ApiError::bad_request(
            "dryRun is not supported for TokenRequest",
        ));
    }
    let (token, expires) = issue(req.state, req.ns(), req.name(), seconds)?;
    Ok((
        StatusCode::CREATED,
        json!({
            "kind": "TokenRequest",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"name": req.name(), "namespace": req.ns(),
                "creationTimestamp": meta::now_rfc3339()},
            "spec": {"audiences": audiences, "expirationSeconds": seconds, "boundObjectRef": null},
            "status": {"token": token, "expirationTimestamp": meta::rfc3339(expires)},
        }),
    ))
}

/// A non-resource request (`/version`, `/healthz`, discovery under `/api` and `/apis`)
/// as RBAC names it: the lower-case HTTP method and the path.
fn non_resource_call(method: &str, path: &str) -> ApiCall {
    ApiCall {
        verb: method.to_ascii_lowercase(),
        group: String::new(),
        version: String::new(),
        resource: String::new(),
        subresource: None,
        namespace: None,
        name: None,
        path: path.to_string(),
    }
}

/// Authenticates every request (401 without a valid token) and authorizes non-resource
/// ones; resource requests are authorized once routed (`server`).
pub async fn layer(State(state): State<Shared>, mut req: HttpRequest, next: Next) -> Response {
    let user = match authenticate(&state, req.headers()) {
        Ok(u) => u,
        Err(e) => return e.into_response(),
    };
    let path = req.uri().path().to_string();
    let is_resource = (path.starts_with("/api/") || path.starts_with("/apis/"))
        && matches!(route(&path), Ok(Routed::Resource(_)));
    if !is_resource {
        let call = non_resource_call(req.method().as_str(), &path);
        let allowed = rbac::authorize(&state.store.lock(), &user, &call);
        if let Err(e) = allowed {
            state.record(call);
            return e.into_response();
        }
    }
    req.extensions_mut().insert(user);
    next.run(req).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_tokens_are_read_case_insensitively_and_empty_ones_refused() {
        let mut h = HeaderMap::new();
        assert_eq!(bearer(&h), None);
        h.insert(header::AUTHORIZATION, "Bearer abc".parse().expect("header"));
        assert_eq!(bearer(&h), Some("abc"));
        h.insert(header::AUTHORIZATION, "bearer abc".parse().expect("header"));
        assert_eq!(bearer(&h), Some("abc"));
        h.insert(header::AUTHORIZATION, "Bearer ".parse().expect("header"));
        assert_eq!(bearer(&h), None);
        h.insert(header::AUTHORIZATION, "Basic abc".parse().expect("header"));
        assert_eq!(bearer(&h), None);
        let s = unauthorized().to_status();
        assert_eq!(s["reason"], "Unauthorized");
        assert_eq!(s["code"], 401);
    }
}

//! List requests with the real resourceVersion semantics: unset or "0" is the latest
//! state, `NotOlderThan` (the default for a number) at least that version, `Exact` the
//! state at that version; `limit`/`continue` pages are all served at the first page's
//! version, so a paged list is consistent, and a continue token or exact version older
//! than the kept history is a 410 Expired, as etcd's compaction makes it.
//!
//! Each page is a snapshot of shared objects taken under the store lock; encoding
//! happens after the lock is released.

use axum::http::StatusCode;
use axum::response::Response;
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::meta;
use super::query::{ListOptions, VersionMatch};
use super::render;
use super::request::Request;
use super::status::{bytes_response, ApiError};
use super::store::ListKey;

/// What a continue token carries: the version of the first page and the last key sent.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct Continue {
    v: String,
    rv: u64,
    ns: String,
    name: String,
}

const TOKEN_VERSION: &str = "meta.k8s.io/v1";

fn encode_token(rv: u64, (ns, name): ListKey) -> String {
    let token = Continue {
        v: TOKEN_VERSION.into(),
        rv,
        ns,
        name,
    };
    let json = serde_json::to_vec(&token).unwrap_or_default();
    base64::engine::general_purpose::URL_SAFE.encode(json)
}

fn decode_token(s: &str) -> Result<(u64, ListKey), ApiError> {
    let bad = |why: String| ApiError::bad_request(format!("continue key is not valid: {why}"));
    let raw = base64::engine::general_purpose::URL_SAFE
        .decode(s)
        .map_err(|e| bad(e.to_string()))?;
    let token: Continue = serde_json::from_slice(&raw).map_err(|e| bad(e.to_string()))?;
    if token.v != TOKEN_VERSION {
        return Err(bad(format!(
            "server does not recognize this encoding ({:?})",
            token.v
        )));
    }
    Ok((token.rv, (token.ns, token.name)))
}

const CONTINUE_EXPIRED: &str = "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.";

/// A version the store has not reached: the real server waits a few seconds for its
/// cache and then answers this; this store is always current, so it answers at once.
pub fn too_large(rv: u64, current: u64) -> ApiError {
    let mut e = ApiError::new(
        504,
        "Timeout",
        format!("Too large resource version: {rv}, current: {current}"),
    );
    e.details = Some(json!({"causes": [{"reason": "ResourceVersionTooLarge",
        "message": "Too large resource version"}], "retryAfterSeconds": 1}));
    e
}

pub fn list(req: &Request<'_>) -> Result<Response, ApiError> {
    let opts = ListOptions::parse(&req.query, false)?;
    let res = req.target.res;
    let limit = match opts.limit {
        0 => usize::MAX,
        l => usize::try_from(l).unwrap_or(usize::MAX),
    };
    let page = {
        let txn = req.state.store.lock();
        let current = txn.current_rv();
        let (at, after) = match &opts.continue_token {
            Some(token) => {
                if opts.rv.is_some() {
                    return Err(ApiError::bad_request(
                        "specifying resource version is not allowed when using continue",
                    ));
                }
                let (rv, key) = decode_token(token)?;
                (rv, Some(key))
            }
            None => match (opts.rv_number()?, opts.rv_match) {
                (None, _) => (current, None),
                (Some(n), _) if n > current => return Err(too_large(n, current)),
                (Some(n), Some(VersionMatch::Exact)) => (n, None),
                (Some(_), _) => (current, None),
            },
        };
        let keep =
            |o: &serde_json::Value| opts.labels.matches(&meta::labels(o)) && opts.fields.matches(o);
        let ns = req.target.ns.as_deref();
        txn.page(res, ns, after.as_ref(), at, limit, keep)
            .map_err(|_| match opts.continue_token {
                Some(_) => ApiError::new(410, "Expired", CONTINUE_EXPIRED),
                None => ApiError::new(
                    410,
                    "Expired",
                    "The resourceVersion for the provided list is too old.",
                ),
            })?
    };
    let mut list_meta = json!({"resourceVersion": page.rv.to_string()});
    if let Some(next) = page.next {
        list_meta["continue"] = json!(encode_token(page.rv, next));
    }
    let body = render::list_json(res, &page.items, list_meta, req.render());
    Ok(bytes_response(StatusCode::OK, body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip_and_reject_garbage() {
        let t = encode_token(42, ("default".into(), "web-1".into()));
        assert_eq!(
            decode_token(&t).ok(),
            Some((42, ("default".to_string(), "web-1".to_string())))
        );
        assert_eq!(decode_token("%%%").err().map(|e| e.code), Some(400));
        let other = base64::engine::general_purpose::URL_SAFE
            .encode(b"{\"v\":\"x\",\"rv\":1,\"ns\":\"\",\"name\":\"\"}");
        assert_eq!(decode_token(&other).err().map(|e| e.code), Some(400));
    }
}

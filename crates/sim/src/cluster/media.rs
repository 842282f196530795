//! Media types: the simulated server speaks JSON (and reads YAML bodies), not
//! Kubernetes protobuf. A protobuf body is refused with 415 Unsupported Media Type and an
//! `Accept` that allows no JSON with 406 Not Acceptable, the answers the real server
//! gives for a type it does not serve; an `Accept` that lists JSON after protobuf (what
//! client-go and kubectl send) gets JSON.

use axum::http::{header, HeaderMap};
use serde_json::Value;

use super::status::ApiError;

/// The body types create and update take.
const BODY_TYPES: &str = "application/json, application/yaml";

fn essence(v: &str) -> String {
    v.split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase()
}

/// Whether the client takes JSON (no `Accept` means anything).
pub fn check_accept(headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(accept) = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()) else {
        return Ok(());
    };
    if accept.trim().is_empty() {
        return Ok(());
    }
    let ok = accept.split(',').any(|alt| {
        matches!(
            essence(alt).as_str(),
            "application/json" | "application/*" | "*/*" | "*"
        )
    });
    if ok {
        Ok(())
    } else {
        Err(ApiError::new(
            406,
            "NotAcceptable",
            "only the following media types are accepted: application/json, application/json;stream=watch",
        ))
    }
}

/// A create or update body: JSON, or YAML when sent as `application/yaml`.
pub fn decode_body(headers: &HeaderMap, body: &[u8]) -> Result<Value, ApiError> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(essence)
        .unwrap_or_default();
    let v: Value = match ct.as_str() {
        "" | "application/json" => serde_json::from_slice(body).map_err(|e| {
            ApiError::bad_request(format!("couldn't decode the request body as JSON: {e}"))
        })?,
        "application/yaml" => serde_yaml::from_slice(body).map_err(|e| {
            ApiError::bad_request(format!("couldn't decode the request body as YAML: {e}"))
        })?,
        other => {
            return Err(ApiError::new(
                415,
                "UnsupportedMediaType",
                format!("the body of the request was in an unknown format - accepted media types include: {BODY_TYPES} (got {other:?})"),
            ))
        }
    };
    if !v.is_object() {
        return Err(ApiError::bad_request(
            "the request body must be a JSON object",
        ));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(k: header::HeaderName, v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Ok(v) = v.parse() {
            h.insert(k, v);
        }
        h
    }

    #[test]
    fn protobuf_bodies_are_refused_and_json_fallbacks_served() {
        let pb = headers(header::CONTENT_TYPE, "application/vnd.kubernetes.protobuf");
        let e = decode_body(&pb, b"k8s\0").err().map(|e| e.code);
        assert_eq!(e, Some(415));
        let yaml = headers(header::CONTENT_TYPE, "application/yaml");
        assert!(decode_body(&yaml, b"kind: Pod\nmetadata: {name: p}\n").is_ok());
        let both = headers(
            header::ACCEPT,
            "application/vnd.kubernetes.protobuf, application/json",
        );
        assert!(check_accept(&both).is_ok());
        let only_pb = headers(header::ACCEPT, "application/vnd.kubernetes.protobuf");
        assert_eq!(check_accept(&only_pb).err().map(|e| e.code), Some(406));
    }
}

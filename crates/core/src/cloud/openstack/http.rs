//! HTTP client construction and OpenStack error bodies.

use std::time::Duration;

use serde_json::Value;

use super::credentials::OpenStackCredentials;
use super::PROVIDER;
use crate::cloud::{http, CloudError};

/// Builds the HTTP client: rustls with the ring provider, timeouts on every request,
/// `OS_CACERT` added to the trusted roots, verification off only with `OS_INSECURE`.
pub fn build_client(
    creds: &OpenStackCredentials,
    connect_timeout: Duration,
    request_timeout: Duration,
) -> Result<reqwest::Client, CloudError> {
    let mut builder = http::client_builder(connect_timeout, request_timeout);
    if let Some(path) = &creds.cacert {
        let certs =
            http::read_ca_bundle("OS_CACERT", path).map_err(|message| CloudError::Other {
                provider: PROVIDER.into(),
                message,
            })?;
        builder = builder.tls_certs_merge(certs);
    }
    if creds.insecure {
        tracing::warn!("OS_INSECURE: TLS certificate verification is disabled for OpenStack");
        builder = builder.tls_danger_accept_invalid_certs(true);
    }
    http::build(builder, PROVIDER)
}

/// A transport-level failure (connect, TLS, timeout, body read).
pub fn transport(call: &str, e: &reqwest::Error) -> CloudError {
    http::transport(PROVIDER, call, e)
}

/// Extracts the human message from an OpenStack error body:
/// Nova `{"badRequest": {"message": ..}}`, Keystone `{"error": {"message": ..}}`,
/// Neutron `{"NeutronError": {"message": ..}}`, or plain text / HTML (truncated).
pub fn error_message(body: &str) -> String {
    if let Ok(v) = serde_json::from_str::<Value>(body) {
        if let Some(m) = v.get("message").and_then(Value::as_str) {
            return m.to_string();
        }
        if let Some(obj) = v.as_object() {
            for inner in obj.values() {
                if let Some(m) = inner.get("message").and_then(Value::as_str) {
                    return m.to_string();
                }
            }
        }
    }
    http::body_excerpt(body)
}

/// True when an error message says a quota was hit.
pub fn is_quota_message(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("quota") || m.contains("overlimit") || m.contains("over limit")
}

/// Maps a non-success response to a [`CloudError`].
pub fn api_error(call: &str, status: u16, body: &str) -> CloudError {
    let message = error_message(body);
    let refusal =
        if (status == 403 || status == 413) && is_quota_message(&format!("{message} {body}")) {
            http::Refusal::Quota
        } else {
            http::Refusal::of_status(status)
        };
    http::api_error(PROVIDER, call, status, message, refusal)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages() {
        assert_eq!(
            error_message(r#"{"badRequest": {"code": 400, "message": "Invalid flavorRef"}}"#),
            "Invalid flavorRef"
        );
        assert_eq!(
            error_message(
                r#"{"error": {"code": 401, "message": "nope", "title": "Unauthorized"}}"#
            ),
            "nope"
        );
        assert_eq!(error_message(""), "(empty response body)");
        assert!(matches!(
            api_error(
                "POST /servers",
                403,
                r#"{"forbidden": {"message": "Quota exceeded for instances"}}"#
            ),
            CloudError::Quota { .. }
        ));
        assert!(matches!(
            api_error(
                "POST /servers",
                403,
                r#"{"forbidden": {"message": "Policy says no"}}"#
            ),
            CloudError::Api { status: 403, .. }
        ));
    }
}

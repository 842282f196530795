//! HTTP client construction and OpenStack error bodies.

use std::time::Duration;

use serde_json::Value;

use super::credentials::OpenStackCredentials;
use super::PROVIDER;
use crate::cloud::CloudError;

/// Builds the HTTP client: rustls with the ring provider, timeouts on every request,
/// `OS_CACERT` added to the trusted roots, verification off only with `OS_INSECURE`.
pub fn build_client(
    creds: &OpenStackCredentials,
    connect_timeout: Duration,
    request_timeout: Duration,
) -> Result<reqwest::Client, CloudError> {
    // Already installed (by us or another module) is fine.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let other = |message: String| CloudError::Other {
        provider: PROVIDER.into(),
        message,
    };
    let mut builder = reqwest::Client::builder()
        .connect_timeout(connect_timeout)
        .timeout(request_timeout)
        .user_agent(concat!("nodewright/", env!("CARGO_PKG_VERSION")));
    if let Some(path) = &creds.cacert {
        let pem = std::fs::read(path)
            .map_err(|e| other(format!("cannot read OS_CACERT {}: {e}", path.display())))?;
        let certs = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| {
            other(format!(
                "OS_CACERT {} is not a PEM certificate bundle: {e}",
                path.display()
            ))
        })?;
        if certs.is_empty() {
            return Err(other(format!(
                "OS_CACERT {} holds no PEM certificate",
                path.display()
            )));
        }
        builder = builder.tls_certs_merge(certs);
    }
    if creds.insecure {
        tracing::warn!("OS_INSECURE: TLS certificate verification is disabled for OpenStack");
        builder = builder.tls_danger_accept_invalid_certs(true);
    }
    builder
        .build()
        .map_err(|e| other(format!("cannot build HTTP client: {e}")))
}

/// A transport-level failure (connect, TLS, timeout, body read).
pub fn transport(call: &str, e: &reqwest::Error) -> CloudError {
    let kind = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "connection failed"
    } else {
        "request failed"
    };
    // reqwest's Display includes the URL but never headers or bodies.
    let mut message = format!("{kind}: {e}");
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        message.push_str(&format!(": {s}"));
        source = s.source();
    }
    CloudError::Transport {
        provider: PROVIDER.into(),
        call: call.into(),
        message,
    }
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
    let text = body.trim();
    if text.is_empty() {
        return "(empty response body)".into();
    }
    let mut cut: String = text.chars().take(300).collect();
    if cut.len() < text.len() {
        cut.push_str("...");
    }
    cut
}

/// True when an error message says a quota was hit.
pub fn is_quota_message(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("quota") || m.contains("overlimit") || m.contains("over limit")
}

/// Maps a non-success response to a [`CloudError`].
pub fn api_error(call: &str, status: u16, body: &str) -> CloudError {
    let message = error_message(body);
    if (status == 403 || status == 413) && is_quota_message(&format!("{message} {body}")) {
        return CloudError::Quota {
            provider: PROVIDER.into(),
            message,
        };
    }
    if status == 401 {
        return CloudError::Auth {
            provider: PROVIDER.into(),
            message: format!("{call}: {message}"),
        };
    }
    CloudError::Api {
        provider: PROVIDER.into(),
        call: call.into(),
        status,
        message,
    }
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

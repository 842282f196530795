//! HTTP plumbing shared by the cloud adapters: the reqwest client's common settings,
//! CA bundles, transport errors and truncated error bodies. What differs per provider
//! (trust options, error body formats, status mapping) stays in the provider.

use std::path::Path;
use std::time::Duration;

use super::CloudError;

/// A client builder with rustls on the ring provider, both timeouts and our user agent.
pub fn client_builder(
    connect_timeout: Duration,
    request_timeout: Duration,
) -> reqwest::ClientBuilder {
    // Already installed (by us or another module) is fine.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .connect_timeout(connect_timeout)
        .timeout(request_timeout)
        .user_agent(concat!("nodewright/", env!("CARGO_PKG_VERSION")))
}

/// Builds the client; a failure is an [`CloudError::Other`] of `provider`.
pub fn build(
    builder: reqwest::ClientBuilder,
    provider: &str,
) -> Result<reqwest::Client, CloudError> {
    builder.build().map_err(|e| CloudError::Other {
        provider: provider.into(),
        message: format!("cannot build HTTP client: {e}"),
    })
}

/// Reads a PEM bundle of CA certificates; `label` names the setting in error messages
/// (e.g. `OS_CACERT`). The error is the message alone, for the provider to wrap.
pub fn read_ca_bundle(label: &str, path: &Path) -> Result<Vec<reqwest::Certificate>, String> {
    let pem =
        std::fs::read(path).map_err(|e| format!("cannot read {label} {}: {e}", path.display()))?;
    let certs = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| {
        format!(
            "{label} {} is not a PEM certificate bundle: {e}",
            path.display()
        )
    })?;
    if certs.is_empty() {
        return Err(format!(
            "{label} {} holds no PEM certificate",
            path.display()
        ));
    }
    Ok(certs)
}

/// A transport-level failure (connect, TLS, timeout, body read) of `call`.
pub fn transport(provider: &str, call: &str, e: &reqwest::Error) -> CloudError {
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
        provider: provider.into(),
        call: call.into(),
        message,
    }
}

/// The reason phrase of the response's status line as the server wrote it, when it is
/// not the standard one for the status (HTTP/1 only; hyper keeps only such phrases).
/// Proxmox VE before early 2025 put its error message there and nowhere else
/// (`HTTP/1.1 500 QEMU guest agent is not running`), which
/// `StatusCode::canonical_reason` cannot give back.
pub fn reason_phrase(resp: &reqwest::Response) -> Option<String> {
    let phrase = resp.extensions().get::<hyper::ext::ReasonPhrase>()?;
    let text = String::from_utf8_lossy(phrase.as_bytes())
        .trim()
        .to_string();
    (!text.is_empty()).then_some(text)
}

/// An error body with no message the provider understands, as text: trimmed, cut at
/// 300 characters (marked `...`), or `(empty response body)`.
pub fn body_excerpt(body: &str) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excerpts() {
        assert_eq!(body_excerpt("  \n"), "(empty response body)");
        assert_eq!(body_excerpt(" oops "), "oops");
        let long = "x".repeat(301);
        assert_eq!(body_excerpt(&long), format!("{}...", "x".repeat(300)));
    }
}

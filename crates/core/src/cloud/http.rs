//! HTTP plumbing shared by the cloud adapters: the reqwest client's common settings,
//! CA bundles, transport errors, the status → [`CloudError`] mapping, URL path segments,
//! bounded response bodies and truncated error bodies. What differs per provider (trust
//! options, error body formats, which answers mean a quota or an auth refusal) stays in
//! the provider.

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

/// What an error answer means, as the provider reads its status and body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The credentials were refused ([`CloudError::Auth`]).
    Auth,
    /// A quota or capacity limit ([`CloudError::Quota`]).
    Quota,
    /// Anything else ([`CloudError::Api`]).
    Other,
}

impl Refusal {
    /// The reading every provider shares: 401 is an auth refusal, the rest plain errors.
    pub fn of_status(status: u16) -> Refusal {
        if status == 401 {
            Refusal::Auth
        } else {
            Refusal::Other
        }
    }
}

/// The error of `call` answered with `status` and `message` (the provider's reading of
/// the body), of the kind `refusal` says. An auth error names the call; a quota error
/// is the message alone.
pub fn api_error(
    provider: &str,
    call: &str,
    status: u16,
    message: String,
    refusal: Refusal,
) -> CloudError {
    match refusal {
        Refusal::Auth => CloudError::Auth {
            provider: provider.into(),
            message: format!("{call}: {message}"),
        },
        Refusal::Quota => CloudError::Quota {
            provider: provider.into(),
            message,
        },
        Refusal::Other => CloudError::Api {
            provider: provider.into(),
            call: call.into(),
            status,
            message,
        },
    }
}

/// Percent-encodes one URL path segment: every byte but ASCII letters, digits and `-_.~`
/// as `%XX`.
pub fn seg(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A transport-level failure (connect, TLS, timeout, body read) of `call`. A TLS failure
/// says so first, naming the host and the cause (see [`tls_failure`]).
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
    let mut tls = None;
    while let Some(s) = source {
        message.push_str(&format!(": {s}"));
        tls = tls.or_else(|| rustls_error(s));
        source = s.source();
    }
    if let Some(t) = tls {
        message = tls_failure(&host_of(e), t);
    }
    CloudError::Transport {
        provider: provider.into(),
        call: call.into(),
        message,
    }
}

/// `host:port` of the request that failed.
fn host_of(e: &reqwest::Error) -> String {
    match e.url() {
        Some(u) => match (u.host_str(), u.port_or_known_default()) {
            (Some(h), Some(p)) => format!("{h}:{p}"),
            (Some(h), None) => h.to_string(),
            _ => "the server".to_string(),
        },
        None => "the server".to_string(),
    }
}

/// The rustls error in one link of an error chain: rustls's own, or inside the I/O errors
/// the TLS stream and the connector wrap it in (an I/O error's `source` skips its inner
/// error, so those are opened one by one).
fn rustls_error<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    let mut link: &(dyn std::error::Error + 'static) = e;
    for _ in 0..8 {
        if let Some(r) = link.downcast_ref::<rustls::Error>() {
            return Some(r);
        }
        link = link.downcast_ref::<std::io::Error>()?.get_ref()?;
    }
    None
}

/// `TLS handshake with HOST failed: WHY (RUSTLS ERROR)`: what went wrong in words for the
/// certificate problems people meet (a self-signed or private CA, a wrong name, an
/// expired certificate), with rustls's own text for the exact cause.
pub fn tls_failure(host: &str, e: &rustls::Error) -> String {
    use rustls::CertificateError as C;
    let why = match e {
        rustls::Error::InvalidCertificate(c) => match c {
            C::UnknownIssuer => {
                "the server's certificate is not signed by a certificate authority this client trusts"
            }
            C::NotValidForName | C::NotValidForNameContext { .. } => {
                "the server's certificate is not valid for this host name"
            }
            C::Expired | C::ExpiredContext { .. } => "the server's certificate has expired",
            C::NotValidYet | C::NotValidYetContext { .. } => {
                "the server's certificate is not valid yet (check the clocks)"
            }
            C::Revoked => "the server's certificate has been revoked",
            _ => "the server's certificate was refused",
        },
        rustls::Error::InvalidMessage(_) => {
            "the server did not answer with TLS (is it plain HTTP?)"
        }
        rustls::Error::General(_) => "the server's certificate was refused",
        _ => "the TLS handshake did not complete",
    };
    format!("TLS handshake with {host} failed: {why} ({e})")
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

/// How many more times a read (a GET, or a provider's read-only POST) is tried within
/// one call after a transient failure: one dropped connection or 503 in a listing or a
/// task poll should not fail a whole create or cycle. Writes are never repeated here:
/// whether they took effect is for the next cycle to see.
pub const READ_RETRIES: u32 = 2;

/// A failure a read may be tried again for at once: 5xx, 429, no answer in time, a
/// dropped connection.
pub fn transient(e: &CloudError) -> bool {
    match e {
        CloudError::Api { status, .. } => *status == 429 || *status >= 500,
        CloudError::Transport { .. } => true,
        _ => false,
    }
}

/// The pause before the `attempt`-th retry of a read (1-based): 200 ms, doubling. A
/// Retry-After, when given, is waited for on top by the provider's [`RetryAfterGate`].
pub fn read_retry_pause(attempt: u32) -> Duration {
    Duration::from_millis(200) * (1 << attempt.saturating_sub(1).min(4))
}

pub use crate::pacing::{retry_after, RetryAfterGate, MAX_RETRY_AFTER};

/// The most one provider response may hold. A listing of thousands of VMs is a few MiB;
/// more is a wrong endpoint, a proxy's page or a broken server, and is refused before
/// it is read into memory.
pub const MAX_RESPONSE_BYTES: usize = 16 << 20;

/// The body of `resp` to `call`, at most [`MAX_RESPONSE_BYTES`]; larger is a
/// [`CloudError::Transport`] saying so.
pub async fn read_body(
    provider: &str,
    call: &str,
    resp: reqwest::Response,
) -> Result<Vec<u8>, CloudError> {
    read_body_limited(provider, call, resp, MAX_RESPONSE_BYTES).await
}

/// As [`read_body`], as text (invalid UTF-8 replaced): for error bodies and
/// text-first parsers.
pub async fn read_text(
    provider: &str,
    call: &str,
    resp: reqwest::Response,
) -> Result<String, CloudError> {
    let bytes = read_body(provider, call, resp).await?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

async fn read_body_limited(
    provider: &str,
    call: &str,
    mut resp: reqwest::Response,
    limit: usize,
) -> Result<Vec<u8>, CloudError> {
    let too_large = |what: String| {
        CloudError::Transport {
        provider: provider.into(),
        call: call.into(),
        message: format!(
            "response {what}, over the {limit}-byte limit; not read (a wrong endpoint or a proxy's page?)"
        ),
    }
    };
    if let Some(len) = resp.content_length().filter(|l| *l > limit as u64) {
        return Err(too_large(format!("of {len} bytes (Content-Length)")));
    }
    let mut out = Vec::new();
    while let Some(chunk) = resp
        .chunk()
        .await
        .map_err(|e| transport(provider, call, &e))?
    {
        if out.len() + chunk.len() > limit {
            return Err(too_large("still streaming".into()));
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
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

    /// Serves one HTTP response on 127.0.0.1: `head` then `body_len` bytes of `x`.
    async fn serve_once(head: String, body_len: usize) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            if let Ok((mut sock, _)) = listener.accept().await {
                let mut buf = [0u8; 4096];
                let _ = sock.read(&mut buf).await;
                let _ = sock.write_all(head.as_bytes()).await;
                let chunk = vec![b'x'; 64 * 1024];
                let mut left = body_len;
                while left > 0 {
                    let n = left.min(chunk.len());
                    if sock.write_all(&chunk[..n]).await.is_err() {
                        return;
                    }
                    left -= n;
                }
            }
        });
        format!("http://{addr}/")
    }

    async fn fetch(url: &str, limit: usize) -> Result<Vec<u8>, CloudError> {
        let client = build(
            client_builder(Duration::from_secs(5), Duration::from_secs(10)),
            "test",
        )
        .expect("client");
        let resp = client.get(url).send().await.expect("sent");
        read_body_limited("test", "GET /", resp, limit).await
    }

    #[tokio::test]
    async fn oversized_responses_are_refused_with_a_clear_error() {
        let head = |len: Option<usize>| match len {
            Some(n) => {
                format!("HTTP/1.1 200 OK\r\nContent-Length: {n}\r\nConnection: close\r\n\r\n")
            }
            None => "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n".to_string(),
        };
        // Announced too large: refused before reading.
        let url = serve_once(head(Some(2_000_000)), 2_000_000).await;
        let err = fetch(&url, 1_000_000).await.expect_err("too large");
        let msg = err.to_string();
        assert!(msg.contains("2000000 bytes (Content-Length)"), "{msg}");
        assert!(msg.contains("1000000-byte limit"), "{msg}");
        // No length given: cut off once past the limit.
        let url = serve_once(head(None), 3_000_000).await;
        let msg = fetch(&url, 1_000_000)
            .await
            .expect_err("too large")
            .to_string();
        assert!(msg.contains("still streaming"), "{msg}");
        // Within the limit: read whole.
        let url = serve_once(head(Some(1000)), 1000).await;
        assert_eq!(fetch(&url, 1_000_000).await.expect("read").len(), 1000);
    }

    #[test]
    fn tls_failures_say_what_went_wrong() {
        let m = tls_failure(
            "pve1.example.org:8006",
            &rustls::Error::InvalidCertificate(rustls::CertificateError::Expired),
        );
        assert_eq!(
            m,
            "TLS handshake with pve1.example.org:8006 failed: the server's certificate has expired (invalid peer certificate: Expired)"
        );
        let m = tls_failure(
            "h:443",
            &rustls::Error::General(
                "fingerprint AB does not match the pinned fingerprint CD".into(),
            ),
        );
        assert!(
            m.contains("h:443") && m.contains("does not match the pinned"),
            "{m}"
        );
    }

    #[test]
    fn retry_after_reads_seconds_and_dates_only_on_429_and_503() {
        use reqwest::header::{HeaderMap, HeaderValue, RETRY_AFTER};
        let with = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(RETRY_AFTER, HeaderValue::from_str(v).expect("header"));
            h
        };
        assert_eq!(retry_after(429, &with("3")), Some(Duration::from_secs(3)));
        assert_eq!(retry_after(503, &with(" 7 ")), Some(Duration::from_secs(7)));
        assert_eq!(retry_after(500, &with("3")), None);
        assert_eq!(retry_after(429, &HeaderMap::new()), None);
        assert_eq!(retry_after(429, &with("soon")), None);
        assert_eq!(retry_after(429, &with("86400")), Some(MAX_RETRY_AFTER));
        let past = retry_after(429, &with("Sun, 06 Nov 1994 08:49:37 GMT"));
        assert_eq!(past, Some(Duration::ZERO));
        let soon = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(30);
        let date =
            jiff::fmt::rfc2822::to_string(&soon.to_zoned(jiff::tz::TimeZone::UTC)).expect("date");
        let d = retry_after(429, &with(&date)).expect("a date");
        assert!(
            d > Duration::from_secs(25) && d <= Duration::from_secs(30),
            "{d:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_gate_holds_calls_back_until_the_time_asked_for() {
        use reqwest::header::{HeaderMap, HeaderValue, RETRY_AFTER};
        let gate = RetryAfterGate::default();
        let start = tokio::time::Instant::now();
        gate.wait("test").await;
        assert_eq!(start.elapsed(), Duration::ZERO, "nothing asked yet");
        let mut h = HeaderMap::new();
        h.insert(RETRY_AFTER, HeaderValue::from_static("2"));
        assert_eq!(gate.note(429, &h), Some(Duration::from_secs(2)));
        // A shorter one later does not shorten the wait.
        h.insert(RETRY_AFTER, HeaderValue::from_static("1"));
        gate.note(503, &h);
        gate.wait("test").await;
        assert_eq!(start.elapsed(), Duration::from_secs(2));
        gate.wait("test").await;
        assert_eq!(start.elapsed(), Duration::from_secs(2), "once is enough");
    }

    #[test]
    fn excerpts() {
        assert_eq!(body_excerpt("  \n"), "(empty response body)");
        assert_eq!(body_excerpt(" oops "), "oops");
        let long = "x".repeat(301);
        assert_eq!(body_excerpt(&long), format!("{}...", "x".repeat(300)));
    }
}

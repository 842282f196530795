//! Retry-After pacing, shared by the Kubernetes client and the cloud clients: a 429 or
//! 503 that asks for a pause holds back every call to that API until then.

use std::time::Duration;

/// The longest Retry-After honoured: a longer one (or a broken header) must not stall the
/// loop; the next cycle simply tries again.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(120);

/// The delay a 429 or 503 answer asks for in its `Retry-After` header: seconds, or an
/// HTTP date (RFC 9110), capped at [`MAX_RETRY_AFTER`]. `None` for other statuses or
/// without a readable header.
pub fn retry_after(status: u16, headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    if status != 429 && status != 503 {
        return None;
    }
    let value = headers
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim();
    let delay = match value.parse::<u64>() {
        Ok(secs) => Duration::from_secs(secs),
        Err(_) => {
            let at = jiff::fmt::rfc2822::parse(value).ok()?.timestamp();
            let now = jiff::Timestamp::now();
            Duration::try_from(at.duration_since(now)).unwrap_or(Duration::ZERO)
        }
    };
    Some(delay.min(MAX_RETRY_AFTER))
}

/// Holds back every call to one API until the time its last 429 or 503 asked for in
/// `Retry-After` (whole API rather than one endpoint: rate limits are per account).
/// The call that got the answer fails as usual; the loop retries it next cycle.
#[derive(Debug, Default)]
pub struct RetryAfterGate {
    until: std::sync::Mutex<Option<tokio::time::Instant>>,
}

impl RetryAfterGate {
    /// Waits until the time asked for, if it is still ahead (counted in
    /// `nodewright_retry_after_waits{api}`).
    pub async fn wait(&self, api: &str) {
        let until = *self.until.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(t) = until.filter(|t| *t > tokio::time::Instant::now()) {
            crate::telemetry::metrics::retry_after_wait(api);
            tracing::debug!(api, wait = ?(t - tokio::time::Instant::now()), "honouring Retry-After");
            tokio::time::sleep_until(t).await;
        }
    }

    /// Notes the answer's Retry-After, if any; returns the delay asked for.
    pub fn note(&self, status: u16, headers: &reqwest::header::HeaderMap) -> Option<Duration> {
        let delay = retry_after(status, headers)?;
        let t = tokio::time::Instant::now() + delay;
        let mut until = self.until.lock().unwrap_or_else(|p| p.into_inner());
        if until.is_none_or(|u| u < t) {
            *until = Some(t);
        }
        Some(delay)
    }
}

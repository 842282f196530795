//! The Proxmox VE API client: authentication (API token or ticket), requests with
//! form-encoded parameters, `{"data": ..}` unwrapping and error mapping.

use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::Mutex;

use super::credentials::{ProxmoxAuth, ProxmoxCredentials};
use super::tls::build_client;
use super::{seg, PROVIDER};
use crate::cloud::http::reason_phrase;
use crate::cloud::CloudError;

/// Tickets live 2 hours; renew well before that.
pub const TICKET_RENEW_AFTER: Duration = Duration::from_secs(90 * 60);

/// One request parameter; repeated names form an array (e.g. `command` of `agent/exec`).
pub type Params = Vec<(String, String)>;

/// A file sent by [`Api::upload`]. Its bytes may be secret (a seed's join token): it has
/// no `Debug`.
pub struct Upload {
    pub file_name: String,
    pub bytes: Vec<u8>,
}

/// Builds [`Params`] from `(name, value)` pairs.
pub fn params<const N: usize>(pairs: [(&str, String); N]) -> Params {
    pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

#[derive(Clone)]
struct Ticket {
    ticket: String,
    csrf: String,
    renew_at: Instant,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Get,
    Post,
    Put,
    Delete,
}

impl Method {
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Delete => "DELETE",
        }
    }
}

/// Authenticated access to one Proxmox VE cluster.
pub struct Api {
    base: String,
    http: reqwest::Client,
    auth: ProxmoxAuth,
    ticket: Mutex<Option<Ticket>>,
    ticket_lifetime: Duration,
    /// The API's last Retry-After.
    retry_after: crate::cloud::http::RetryAfterGate,
}

impl std::fmt::Debug for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Api")
            .field("base", &self.base)
            .field("auth", &self.auth)
            .finish_non_exhaustive()
    }
}

/// `application/x-www-form-urlencoded` encoding of parameters.
pub fn form_encode(params: &[(String, String)]) -> String {
    params
        .iter()
        .map(|(k, v)| format!("{}={}", seg(k), seg(v)))
        .collect::<Vec<_>>()
        .join("&")
}

fn transport(call: &str, e: &reqwest::Error) -> CloudError {
    crate::cloud::http::transport(PROVIDER, call, e)
}

/// Proxmox's message for a failed request: the body's `message`, else the server's own
/// status-line reason phrase (`reason`: all that servers before early 2025 sent), else
/// `fallback` (the standard phrase); plus the per-parameter `errors` of the body.
pub fn error_message(body: &str, reason: Option<&str>, fallback: &str) -> String {
    let mut parts = Vec::new();
    let mut errors = Vec::new();
    match serde_json::from_str::<Value>(body) {
        Ok(v) => {
            if let Some(m) = v.get("message").and_then(Value::as_str) {
                if !m.trim().is_empty() {
                    parts.push(m.trim().to_string());
                }
            }
            if let Some(errs) = v.get("errors").and_then(Value::as_object) {
                errors = errs
                    .iter()
                    .map(|(k, e)| format!("{k}: {}", e.as_str().unwrap_or("invalid").trim()))
                    .collect();
            }
        }
        Err(_) if !body.trim().is_empty() => {
            parts.push(body.trim().chars().take(300).collect());
        }
        Err(_) => {}
    }
    if parts.is_empty() {
        if let Some(r) = reason.map(str::trim).filter(|r| !r.is_empty()) {
            parts.push(r.to_string());
        }
    }
    if !errors.is_empty() {
        parts.push(errors.join("; "));
    }
    if parts.is_empty() {
        fallback.to_string()
    } else {
        parts.join(": ")
    }
}

/// Maps a non-success response to a [`CloudError`].
pub fn api_error(call: &str, status: u16, message: String) -> CloudError {
    let refusal = crate::cloud::http::Refusal::of_status(status);
    crate::cloud::http::api_error(PROVIDER, call, status, message, refusal)
}

impl Api {
    pub fn new(
        creds: &ProxmoxCredentials,
        connect_timeout: Duration,
        request_timeout: Duration,
    ) -> Result<Api, CloudError> {
        Ok(Api {
            base: creds.url.clone(),
            http: build_client(creds, connect_timeout, request_timeout)?,
            auth: creds.auth.clone(),
            ticket: Mutex::new(None),
            ticket_lifetime: TICKET_RENEW_AFTER,
            retry_after: crate::cloud::http::RetryAfterGate::default(),
        })
    }

    /// Who the requests run as, as Proxmox writes it in a task's UPID: the user, or for a
    /// token `USER@REALM!TOKENID`.
    pub fn identity(&self) -> &str {
        match &self.auth {
            ProxmoxAuth::Token { token_id, .. } => token_id,
            ProxmoxAuth::Password { username, .. } => username,
        }
    }

    /// Renew tickets after `d` instead of 90 minutes (tests).
    pub fn set_ticket_renewal(&mut self, d: Duration) {
        self.ticket_lifetime = d;
    }

    async fn login(&self, username: &str, password: &str) -> Result<Ticket, CloudError> {
        let call = "POST /access/ticket";
        let body = form_encode(&params([
            ("username", username.to_string()),
            ("password", password.to_string()),
        ]));
        self.retry_after.wait(PROVIDER).await;
        let resp = self
            .http
            .post(format!("{}/access/ticket", self.base))
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body(body)
            .send()
            .await
            .map_err(|e| transport(call, &e))?;
        self.retry_after
            .note(resp.status().as_u16(), resp.headers());
        let status = resp.status();
        let reason = reason_phrase(&resp);
        let text = crate::cloud::http::read_text(PROVIDER, call, resp).await?;
        if !status.is_success() {
            return Err(CloudError::Auth {
                provider: PROVIDER.into(),
                message: format!(
                    "Proxmox refused the login of {username} (HTTP {}): {}",
                    status.as_u16(),
                    error_message(
                        &text,
                        reason.as_deref(),
                        status.canonical_reason().unwrap_or("")
                    )
                ),
            });
        }
        let v: Value = serde_json::from_str(&text)
            .map_err(|e| super::other(format!("{call}: unexpected response: {e}")))?;
        let data = &v["data"];
        let (Some(ticket), Some(csrf)) = (
            data["ticket"].as_str(),
            data["CSRFPreventionToken"].as_str(),
        ) else {
            return Err(CloudError::Auth {
                provider: PROVIDER.into(),
                message: format!(
                    "{call}: no ticket in the response (is two-factor authentication enabled for {username}? use an API token)"
                ),
            });
        };
        Ok(Ticket {
            ticket: ticket.to_string(),
            csrf: csrf.to_string(),
            renew_at: Instant::now() + self.ticket_lifetime,
        })
    }

    async fn current_ticket(&self, username: &str, password: &str) -> Result<Ticket, CloudError> {
        let mut guard = self.ticket.lock().await;
        if let Some(t) = guard.as_ref() {
            if Instant::now() < t.renew_at {
                return Ok(t.clone());
            }
            tracing::debug!("renewing the Proxmox ticket before it expires");
        }
        let fresh = self.login(username, password).await?;
        *guard = Some(fresh.clone());
        Ok(fresh)
    }

    async fn forget_ticket(&self, ticket: &str) {
        let mut guard = self.ticket.lock().await;
        if guard.as_ref().is_some_and(|t| t.ticket == ticket) {
            *guard = None;
        }
    }

    /// Sends one request and returns the `data` member of the response. A GET is tried
    /// again after a transient failure (see [`crate::cloud::http::READ_RETRIES`]).
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        params: &[(String, String)],
    ) -> Result<Value, CloudError> {
        use crate::cloud::http::{read_retry_pause, transient, READ_RETRIES};
        let mut attempt = 0;
        loop {
            match self.call_once(method, path, params).await {
                Err(e) if method == Method::Get && attempt < READ_RETRIES && transient(&e) => {
                    attempt += 1;
                    tracing::debug!(path, error = %e, attempt, "Proxmox read failed; trying again");
                    tokio::time::sleep(read_retry_pause(attempt)).await;
                }
                r => return r,
            }
        }
    }

    /// Uploads a file as `multipart/form-data` (`POST .../storage/{storage}/upload`):
    /// `params` as text fields, then the file as the `filename` part. Never retried (a
    /// repeated upload overwrites the same file, but the caller decides).
    pub async fn upload(
        &self,
        path: &str,
        params: &[(String, String)],
        file: &Upload,
    ) -> Result<Value, CloudError> {
        self.send(Method::Post, path, params, Some(file)).await
    }

    async fn call_once(
        &self,
        method: Method,
        path: &str,
        params: &[(String, String)],
    ) -> Result<Value, CloudError> {
        self.send(method, path, params, None).await
    }

    async fn send(
        &self,
        method: Method,
        path: &str,
        params: &[(String, String)],
        upload: Option<&Upload>,
    ) -> Result<Value, CloudError> {
        let call = format!("{} {path}", method.as_str());
        let mut retried = false;
        loop {
            let url = format!("{}{path}", self.base);
            let mut rb = match method {
                Method::Get => self.http.get(&url),
                Method::Post => self.http.post(&url),
                Method::Put => self.http.put(&url),
                Method::Delete => self.http.delete(&url),
            };
            let encoded = form_encode(params);
            rb = match method {
                Method::Get | Method::Delete => {
                    if encoded.is_empty() {
                        rb
                    } else {
                        // Rebuild with the query string (reqwest's `query` would re-encode).
                        let url = format!("{url}?{encoded}");
                        match method {
                            Method::Get => self.http.get(url),
                            _ => self.http.delete(url),
                        }
                    }
                }
                Method::Post | Method::Put => match upload {
                    Some(u) => {
                        let mut form = reqwest::multipart::Form::new();
                        for (k, v) in params {
                            form = form.text(k.clone(), v.clone());
                        }
                        let part = reqwest::multipart::Part::bytes(u.bytes.clone())
                            .file_name(u.file_name.clone())
                            .mime_str("application/octet-stream")
                            .map_err(|e| transport(&call, &e))?;
                        rb.multipart(form.part("filename", part))
                    }
                    None => rb
                        .header("Content-Type", "application/x-www-form-urlencoded")
                        .body(encoded),
                },
            };
            rb = rb.header("Accept", "application/json");
            let mut used_ticket = None;
            match &self.auth {
                ProxmoxAuth::Token { token_id, secret } => {
                    rb = rb.header("Authorization", format!("PVEAPIToken={token_id}={secret}"));
                }
                ProxmoxAuth::Password { username, password } => {
                    let t = self.current_ticket(username, password).await?;
                    rb = rb.header("Cookie", format!("PVEAuthCookie={}", seg(&t.ticket)));
                    if method != Method::Get {
                        rb = rb.header("CSRFPreventionToken", &t.csrf);
                    }
                    used_ticket = Some(t.ticket);
                }
            }
            self.retry_after.wait(PROVIDER).await;
            let resp = rb.send().await.map_err(|e| transport(&call, &e))?;
            self.retry_after
                .note(resp.status().as_u16(), resp.headers());
            let status = resp.status();
            let reason = reason_phrase(&resp);
            let text = crate::cloud::http::read_text(PROVIDER, &call, resp).await?;
            if status == reqwest::StatusCode::UNAUTHORIZED && !retried {
                if let Some(t) = used_ticket {
                    self.forget_ticket(&t).await;
                    tracing::debug!(call, "Proxmox returned 401, logging in again once");
                    retried = true;
                    continue;
                }
            }
            if !status.is_success() {
                let message = error_message(
                    &text,
                    reason.as_deref(),
                    status.canonical_reason().unwrap_or("error"),
                );
                return Err(api_error(&call, status.as_u16(), message));
            }
            let v: Value = serde_json::from_str(&text)
                .map_err(|e| super::other(format!("{call}: unexpected response body: {e}")))?;
            return Ok(v.get("data").cloned().unwrap_or(Value::Null));
        }
    }

    pub async fn get(&self, path: &str, params: &[(String, String)]) -> Result<Value, CloudError> {
        self.call(Method::Get, path, params).await
    }

    pub async fn post(&self, path: &str, params: &[(String, String)]) -> Result<Value, CloudError> {
        self.call(Method::Post, path, params).await
    }

    pub async fn delete(
        &self,
        path: &str,
        params: &[(String, String)],
    ) -> Result<Value, CloudError> {
        self.call(Method::Delete, path, params).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_bodies() {
        assert_eq!(
            error_message(
                r#"{"data":null,"message":"Parameter verification failed.\n","errors":{"vmid":"invalid format"}}"#,
                None,
                "x"
            ),
            "Parameter verification failed.: vmid: invalid format"
        );
        assert_eq!(
            error_message("", None, "Internal Server Error"),
            "Internal Server Error"
        );
    }

    #[test]
    fn error_text_from_the_status_line_is_kept() {
        // Servers before early 2025: the message only in the reason phrase.
        assert_eq!(
            error_message(
                r#"{"data":null}"#,
                Some("QEMU guest agent is not running"),
                "Internal Server Error"
            ),
            "QEMU guest agent is not running"
        );
        assert_eq!(
            error_message(
                r#"{"data":null,"errors":{"vmid":"VM 105 already exists"}}"#,
                Some("Parameter verification failed."),
                "Bad Request"
            ),
            "Parameter verification failed.: vmid: VM 105 already exists"
        );
        // A message in the body wins; the phrase is only the fallback.
        assert_eq!(
            error_message(
                r#"{"data":null,"message":"VM 105 is locked (clone)\n"}"#,
                Some("VM 105 is locked"),
                "Internal Server Error"
            ),
            "VM 105 is locked (clone)"
        );
        assert_eq!(
            form_encode(&params([
                ("command", "/bin/sh".into()),
                ("a b", "c&d".into())
            ])),
            "command=%2Fbin%2Fsh&a%20b=c%26d"
        );
    }
}

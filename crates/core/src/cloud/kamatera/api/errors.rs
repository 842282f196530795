//! The error answers of the cloudcli service: the human message of an error body, and
//! what it says (a missing server, a quota, failed authentication). Apart from the wire
//! shapes of the calls that succeed, since deciding that a server is gone must never
//! rest on a guess.
//!
//! Errors are non-200 answers with `{"message": "..."}` (see [`error_message`]). What the
//! service puts in them (from its source):
//! - HTTP 404 `{"error": true, "message": "Not Found"}` is an **unknown path**, never a
//!   missing server;
//! - a call by `name` that matches nothing: HTTP 500 `No servers found (name='...')`;
//! - a call by `id` is passed to the console service unchecked, and its refusal comes
//!   back as HTTP 500 in one of two forms: `{"message": "INFO (CODE)"}` when the console
//!   answered an `errors` list, else `{"message": "Error response from server: [...]",
//!   "responses": [{"status_code": CONSOLE_STATUS, "response": ...}]}`. What the console
//!   itself says for an unknown server id is not public, so a missing server is never
//!   decided from an error text alone (see [`is_missing_server_error`]).

use serde_json::Value;

/// The human texts of one error object: its `message`, then each `errors[]` entry as
/// `INFO (CODE)` (as the service itself joins them).
fn messages_of(v: &Value) -> Vec<String> {
    let mut parts: Vec<String> = Vec::new();
    if let Some(m) = v.get("message").and_then(Value::as_str) {
        if !m.trim().is_empty() {
            parts.push(m.trim().to_string());
        }
    }
    if let Some(errors) = v.get("errors").and_then(Value::as_array) {
        for e in errors {
            let info = e.get("info").and_then(Value::as_str).unwrap_or("");
            let code = e.get("code").map(|c| match c {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            });
            match (info.is_empty(), code) {
                (false, Some(c)) => parts.push(format!("{info} ({c})")),
                (false, None) => parts.push(info.to_string()),
                (true, Some(c)) => parts.push(format!("error code {c}")),
                (true, None) => {}
            }
        }
    }
    parts
}

/// The human message of an error body: `message`, plus any `errors[].info`; else the
/// (truncated) text.
///
/// When the service wraps the console's refusal (`{"message": "Error response from
/// server: [...]", "responses": [{"status_code", "response"}]}`), the JSON dump in
/// `message` is replaced by each wrapped answer as `console HTTP STATUS: MESSAGE`, so the
/// console's status survives (see [`is_missing_server_error`]).
pub fn error_message(body: &str) -> String {
    if let Ok(v) = serde_json::from_str::<Value>(body) {
        let mut parts = messages_of(&v);
        let wrapped: Vec<String> = v
            .get("responses")
            .and_then(Value::as_array)
            .map(|list| list.iter().filter_map(wrapped_answer).collect())
            .unwrap_or_default();
        if !wrapped.is_empty() {
            if let Some(first) = parts.first_mut() {
                // "Error response from server: [{...}]" → "Error response from server".
                if let Some((lead, _dump)) = first.split_once(": [") {
                    *first = lead.trim().to_string();
                }
            }
            parts.extend(wrapped);
        }
        if !parts.is_empty() {
            return parts.join(". ");
        }
    }
    crate::cloud::http::body_excerpt(body)
}

/// One wrapped console answer `{"status_code", "response"}` as `console HTTP STATUS:
/// MESSAGE`.
fn wrapped_answer(r: &Value) -> Option<String> {
    let status = r.get("status_code").and_then(Value::as_u64);
    let inner = match r.get("response") {
        Some(Value::String(s)) if !s.trim().is_empty() => vec![s.trim().to_string()],
        Some(v @ Value::Object(_)) => messages_of(v),
        _ => Vec::new(),
    };
    let inner = inner.join(". ");
    match (status, inner.is_empty()) {
        (Some(s), false) => Some(format!("console HTTP {s}: {inner}")),
        (Some(s), true) => Some(format!("console HTTP {s}")),
        (None, false) => Some(inner),
        (None, true) => None,
    }
}

/// True when an API message says the account hit a limit or lacks funds.
pub fn is_quota_message(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    [
        "quota",
        "limit exceeded",
        "exceeds the limit",
        "insufficient",
        "balance",
        "credit limit",
    ]
    .iter()
    .any(|k| m.contains(k))
}

/// True when an API message says authentication failed.
pub fn is_auth_message(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("authentication") || m.contains("unauthorized") || m.contains("invalid api key")
}

/// True when an error answer (`status`, and the message [`error_message`] made of the
/// body) says the server it was about does not exist: the service's own `No servers found`
/// (a call by name), a wrapped console answer with HTTP 404, or a console message saying
/// `not found`.
///
/// HTTP 404 from the service itself is **not** such an answer: it means the path is
/// unknown (`{"message": "Not Found"}`). And since the console's own wording for an unknown
/// server id is not public, a `false` here proves nothing: callers confirm with the server
/// list, which is what decides (see `KamateraProvider::terminate`).
pub fn is_missing_server_error(status: u16, message: &str) -> bool {
    if status == 404 {
        return false;
    }
    let m = message.to_ascii_lowercase();
    m.contains("no servers found") || m.contains("console http 404") || m.contains("not found")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_messages() {
        assert_eq!(
            error_message(r#"{"message": "No servers found"}"#),
            "No servers found"
        );
        assert_eq!(
            error_message(
                r#"{"message": "Bad request", "errors": [{"code": 7, "info": "insufficient balance"}]}"#
            ),
            "Bad request. insufficient balance (7)"
        );
        assert_eq!(error_message(""), "(empty response body)");
        assert_eq!(error_message("<html>oops</html>"), "<html>oops</html>");
        assert!(is_quota_message("Insufficient balance to create server"));
        assert!(is_auth_message("Authentication failed"));
    }

    #[test]
    fn kamatera_missing_server_answers_are_recognised() {
        // By name: the service's own answer.
        assert!(is_missing_server_error(
            500,
            &error_message(r#"{"message": "No servers found (name='c1-workers-x')"}"#)
        ));
        // By id: the console's refusal wrapped by the service, its status kept.
        let wrapped = r#"{"message": "Error response from server: [{\"error\":true,\"status_code\":404,\"response\":{\"message\":\"gone\"},\"json_decode_error\":null}]",
                          "responses": [{"status_code": 404, "response": {"message": "gone"}, "json_decode_error": null}]}"#;
        let m = error_message(wrapped);
        assert_eq!(m, "Error response from server. console HTTP 404: gone");
        assert!(is_missing_server_error(500, &m));
        // The same wrapper around a console failure that is not a 404: not missing.
        let m = error_message(
            r#"{"message": "Error response from server: [...]", "responses": [{"status_code": 503, "response": null}]}"#,
        );
        assert_eq!(m, "Error response from server. console HTTP 503");
        assert!(!is_missing_server_error(500, &m));
        // The collapsed form `INFO (CODE)`.
        assert!(is_missing_server_error(
            500,
            &error_message(r#"{"message": "Server not found (1234)"}"#)
        ));
        // The service's own 404 is an unknown path, never a missing server.
        assert!(!is_missing_server_error(
            404,
            &error_message(r#"{"error": true, "message": "Not Found"}"#)
        ));
        assert!(!is_missing_server_error(
            500,
            "Internal error while terminating the server, please try again"
        ));
    }
}

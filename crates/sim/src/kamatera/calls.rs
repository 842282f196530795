//! What the endpoints share about a call: its JSON body read as the service reads it,
//! the servers a call about servers selects, and the service's refusals and error
//! answers. A leaf below `http` (the routes) and the handlers in `commands` and
//! `catalog`.

use axum::body::Bytes;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Map, Value};

use super::{Shared, SimServer, State_, UnknownServerAnswer};

/// An error answer: `{"message": ...}` with `status`.
pub(super) fn error(status: StatusCode, message: &str) -> Response {
    (status, Json(json!({ "message": message }))).into_response()
}

pub(super) fn parse_object(body: &Bytes) -> Option<Map<String, Value>> {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(m)) => Some(m),
        _ => None,
    }
}

pub(super) fn not_object() -> Response {
    error(
        StatusCode::BAD_REQUEST,
        "Invalid request: expected a JSON object",
    )
}

/// A field as text: strings as is, numbers as their decimal form.
pub(super) fn text(m: &Map<String, Value>, key: &str) -> Option<String> {
    match m.get(key)? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// Why the real service refuses a call about servers (all HTTP 500).
pub(super) enum Refusal {
    /// Its own message, e.g. `No servers found (name='x')`.
    Message(String),
    /// An id the console service does not know (see [`UnknownServerAnswer`]).
    UnknownId,
}

impl Refusal {
    pub(super) fn answer(self, shared: &Shared) -> Response {
        match self {
            Refusal::Message(m) => error(StatusCode::INTERNAL_SERVER_ERROR, &m),
            Refusal::UnknownId => unknown_server_id(&shared.opts.unknown_server_answer),
        }
    }
}

/// The servers a call about servers selects, or the real service's refusal: by `id`
/// (exactly one, else the console's refusal, see [`UnknownServerAnswer`]) or by `name`
/// (an anchored regular expression, as the real API takes it: `.*` selects every
/// server, Libcloud's `list_nodes(ex_name_regex=…)` sends one), never both and never
/// neither.
pub(super) fn select(st: &State_, m: &Map<String, Value>) -> Result<Vec<usize>, Refusal> {
    let id = text(m, "id").filter(|s| !s.is_empty());
    let name = text(m, "name").filter(|s| !s.is_empty());
    let matching = |pick: &dyn Fn(&SimServer) -> bool| -> Vec<usize> {
        st.servers
            .iter()
            .enumerate()
            .filter(|(_, s)| pick(s))
            .map(|(i, _)| i)
            .collect()
    };
    let found = match (id, name) {
        (Some(_), Some(_)) => {
            return Err(Refusal::Message(
                "Please specify 'name' or 'id' but not both".into(),
            ))
        }
        (None, None) => return Err(Refusal::Message("Missing server 'id' / 'name'".into())),
        (Some(id), None) => matching(&|s| s.id == id),
        (None, Some(name)) => {
            let Ok(re) = regex::Regex::new(&format!("^(?:{name})$")) else {
                return Err(Refusal::Message(format!(
                    "No servers found (name='{name}')"
                )));
            };
            let found = matching(&|s| re.is_match(&s.name));
            if found.is_empty() {
                return Err(Refusal::Message(format!(
                    "No servers found (name='{name}')"
                )));
            }
            found
        }
    };
    if found.is_empty() {
        return Err(Refusal::UnknownId);
    }
    Ok(found)
}

/// The real service's HTTP 500 for an id the console service does not know, with the
/// simulator's stand-in for the console's answer.
fn unknown_server_id(answer: &UnknownServerAnswer) -> Response {
    let body = match answer {
        UnknownServerAnswer::Wrapped => {
            let console = json!({ "message": "Server not found" });
            let dumped = json!([{ "error": true, "status_code": 404, "response": console, "json_decode_error": null }]);
            json!({
                "message": format!("Error response from server: {dumped}"),
                "responses": [{ "status_code": 404, "response": console, "json_decode_error": null }],
            })
        }
        UnknownServerAnswer::Collapsed(text) => json!({ "message": text }),
    };
    (StatusCode::INTERNAL_SERVER_ERROR, Json(body)).into_response()
}

//! A simulated Kamatera cloudcli API on an in-process axum server on 127.0.0.1, with the
//! request and response shapes of the real one (the `cloudwm/cloudcli-server` service):
//!
//! - every call needs the `AuthClientId` / `AuthSecret` headers (else 401 with a message);
//! - `GET /service/servers`, `POST /service/server/info`, `POST /server/tags`;
//! - `POST /service/server` (flat fields; disks, networks and tags space-joined),
//!   `POST /service/server/terminate`, `/poweron`, `/poweroff` answer command ids, as
//!   strings for some commands and integers for others;
//! - `GET /service/queue?id=` walks each command through `pending` → `running` →
//!   `complete` (or `error` with a log);
//! - errors are non-200 answers with `{"message": ...}`; an unknown path is HTTP 404
//!   `{"error": true, "message": "Not Found"}`, as the real service answers it.
//!
//! When a create command completes the VM "boots" ([`VmEvent::Booted`] with the init
//! script as user data); when a terminate completes it is gone ([`VmEvent::Deleted`]).
//! Like the real API, no answer carries a creation time (`GET /service/servers` has `id`,
//! `name`, `datacenter`, `power`; `/service/server/info` adds the configuration and prices):
//! [`SimServer::created`] is for test inspection only. Tags are stored as sent (space-joined
//! in the create request, one per `add`) and answered by `POST /server/tags` as the current
//! service answers them: one row `{"id": SERVER_ID, "tagName": TAG}` per tag (older
//! versions answered `{"server id", "tag name"}`; clients must read both).
//!
//! Calls about servers (`info`, `tags`, `terminate`, `poweron`, `poweroff`) are refused as
//! the real service refuses them, all with HTTP 500: `id` and `name` together ("Please
//! specify 'name' or 'id' but not both"), neither ("Missing server 'id' / 'name'"), a
//! `name` matching nothing ("No servers found (name='...')"), `tags` for a `name` matching
//! several ("Too many matching servers"), and an `id` no server has. The real service
//! passes an id to the console service unchecked and wraps the console's refusal; the
//! console's own wording is not public, so the simulator stands in for it with
//! [`UnknownServerAnswer`] (a client must not depend on that text).
//!
//! The simulator is stricter than the real API in two ways: unknown create fields are
//! rejected, so a misspelt field fails a test instead of being ignored; and tags longer
//! than [`MAX_TAG_LEN`] (the longest tag known to be accepted) or with characters other
//! than letters, digits, `-` and `_` are refused, so a tag that might not fit fails a test.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use axum::body::Bytes;
use axum::extract::{Query, Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Map, Value};

use super::serve::{self, yaml_str, ServerGuard};
use super::{VmEvent, VmHook};
use crate::cloud::kamatera::MAX_TAG_LEN;

/// What an injected create failure looks like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreateFailure {
    /// The create call itself is refused: HTTP 500 "Insufficient balance ...".
    Refused,
    /// The create command is queued, then ends `error` with a log; no server remains.
    CommandError,
}

/// How the simulator answers a call for a server `id` that no server has (HTTP 500 in both
/// forms, as the real service wraps the console service's refusal).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum UnknownServerAnswer {
    /// The console's answer had no `errors` list: `{"message": "Error response from server:
    /// [...]", "responses": [{"status_code": 404, "response": {"message": "Server not
    /// found"}, "json_decode_error": null}]}`.
    #[default]
    Wrapped,
    /// The console's answer had an `errors` list, which the service joins into the
    /// message alone: `{"message": TEXT}`.
    Collapsed(String),
}

/// Options of [`SimKamatera::start`].
#[derive(Clone)]
pub struct SimKamateraOptions {
    pub client_id: String,
    pub secret: String,
    /// How long a command stays `pending`, and then `running`.
    pub step: Duration,
    /// Told when a server boots (its create command completes) and when it is terminated.
    pub hook: Option<VmHook>,
    pub datacenters: Vec<String>,
    /// Account limit on servers: a create beyond it is refused with a balance message.
    pub max_servers: Option<usize>,
    /// The queue answers `[]` for every command (some accounts see this); commands still
    /// run and take effect.
    pub silent_queue: bool,
    /// The answer to a call for an unknown server id.
    pub unknown_server_answer: UnknownServerAnswer,
}

impl Default for SimKamateraOptions {
    fn default() -> Self {
        SimKamateraOptions {
            client_id: "sim-client-id-0123456789abcdef".into(),
            secret: "sim-secret-fedcba9876543210".into(),
            step: Duration::from_millis(60),
            hook: None,
            datacenters: vec!["EU".into(), "US-NY2".into(), "IL".into(), "AS".into()],
            max_servers: None,
            silent_queue: false,
            unknown_server_answer: UnknownServerAnswer::Wrapped,
        }
    }
}

/// A server as the simulator holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct SimServer {
    pub id: String,
    pub name: String,
    pub datacenter: String,
    pub image: String,
    /// `on` or `off`.
    pub power: String,
    pub tags: Vec<String>,
    pub cpu: String,
    pub ram_mb: u64,
    /// Disk items as sent (`size=50`).
    pub disks: Vec<String>,
    /// Network items as sent (`name=wan,ip=auto`).
    pub networks: Vec<String>,
    pub billing_cycle: String,
    pub daily_backup: bool,
    pub managed: bool,
    /// `script-file` as sent.
    pub script: String,
    /// `userdata-file` as sent.
    pub userdata: String,
    pub ssh_key: String,
    /// The root password the server was created with (test inspection only).
    pub password: String,
    /// When the simulator created it; never sent (the real API reports no creation time).
    pub created: SystemTime,
}

/// One request the simulator received.
#[derive(Debug, Clone, PartialEq)]
pub struct SimCall {
    pub method: String,
    pub path: String,
    pub query: Option<String>,
    /// JSON body, when there was one.
    pub body: Option<Value>,
    /// Both auth headers were present and right.
    pub authorized: bool,
}

/// A queued command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimCommand {
    pub id: u64,
    /// `create`, `create-off` (without power on), `terminate`, `poweron`, `poweroff`.
    pub kind: String,
    pub server_id: String,
    pub server_name: String,
    /// `pending`, `running`, `complete`, `error`.
    pub status: String,
    pub log: String,
    /// The command id was answered as a JSON string (else an integer).
    pub id_as_string: bool,
}

struct State_ {
    servers: Vec<SimServer>,
    commands: Vec<SimCommand>,
    calls: Vec<SimCall>,
    fail_creates: Vec<CreateFailure>,
    fail_deletes: usize,
    /// While set, the server listing answers HTTP 500 (an outage of the API).
    listing_down: bool,
    never_boot: Vec<String>,
    counter: u64,
    commands_issued: u64,
}

struct Shared {
    opts: SimKamateraOptions,
    addr: SocketAddr,
    state: Mutex<State_>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State_> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
    fn fire(&self, event: VmEvent) {
        if let Some(hook) = &self.opts.hook {
            hook(event);
        }
    }
}

/// Handle to a running simulated Kamatera; clones share it. The server stops when the
/// last handle is dropped.
#[derive(Clone)]
pub struct SimKamatera {
    shared: Arc<Shared>,
    _guard: Arc<ServerGuard>,
}

/// A server UUID-like id.
fn server_id(counter: u64) -> String {
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos() as u64;
    let mix = nanos ^ counter.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    format!("{:016x}{:016x}", mix, counter)
}

impl SimKamatera {
    /// Starts the simulator on 127.0.0.1 with an ephemeral port.
    pub async fn start(opts: SimKamateraOptions) -> std::io::Result<SimKamatera> {
        let (listener, addr) = serve::bind_local().await?;
        let shared = Arc::new(Shared {
            state: Mutex::new(State_ {
                servers: Vec::new(),
                commands: Vec::new(),
                calls: Vec::new(),
                fail_creates: Vec::new(),
                fail_deletes: 0,
                listing_down: false,
                never_boot: Vec::new(),
                counter: 1000,
                commands_issued: 0,
            }),
            opts,
            addr,
        });
        let app = router(shared.clone());
        Ok(SimKamatera {
            shared,
            _guard: serve::spawn(listener, app, "simulated Kamatera"),
        })
    }

    /// Base URL, `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.shared.addr)
    }

    pub fn options(&self) -> &SimKamateraOptions {
        &self.shared.opts
    }

    /// Writes a credentials file (`url`, `clientId`, `secret`) for this simulator.
    pub fn write_credentials_file(&self, path: &Path) -> std::io::Result<()> {
        let o = &self.shared.opts;
        let text = format!(
            "url: {}\nclientId: {}\nsecret: {}\n",
            yaml_str(&self.url()),
            yaml_str(&o.client_id),
            yaml_str(&o.secret)
        );
        std::fs::write(path, text)
    }

    /// All servers, oldest first.
    pub fn servers(&self) -> Vec<SimServer> {
        self.shared.lock().servers.clone()
    }

    /// Every request received so far, in order.
    pub fn calls(&self) -> Vec<SimCall> {
        self.shared.lock().calls.clone()
    }

    /// Every command queued so far.
    pub fn commands(&self) -> Vec<SimCommand> {
        self.shared.lock().commands.clone()
    }

    /// The next `n` creates fail as `kind`.
    pub fn fail_next_creates(&self, n: usize, kind: CreateFailure) {
        self.shared
            .lock()
            .fail_creates
            .extend(std::iter::repeat_n(kind, n));
    }

    /// The next `n` terminate calls fail with HTTP 500.
    pub fn fail_next_deletes(&self, n: usize) {
        self.shared.lock().fail_deletes += n;
    }

    /// While `down`, `GET /service/servers` answers HTTP 500, as during an API outage.
    pub fn set_listing_down(&self, down: bool) {
        self.shared.lock().listing_down = down;
    }

    /// Servers whose name starts with `name_prefix` power on but never boot (`""`: all).
    pub fn never_boot(&self, name_prefix: impl Into<String>) {
        self.shared.lock().never_boot.push(name_prefix.into());
    }

    /// Adds a server directly (e.g. one a crashed process left, or someone else's) with
    /// `tags` as given (no creation-time tag unless one is passed); it does not boot.
    /// Returns its id.
    pub fn insert_server(&self, name: &str, tags: &[&str], power_on: bool) -> String {
        let mut st = self.shared.lock();
        st.counter += 1;
        let id = server_id(st.counter);
        st.servers.push(SimServer {
            id: id.clone(),
            name: name.into(),
            datacenter: "EU".into(),
            image: "ubuntu_server_24.04_64-bit".into(),
            power: if power_on { "on" } else { "off" }.into(),
            tags: tags.iter().map(|t| t.to_string()).collect(),
            cpu: "2B".into(),
            ram_mb: 2048,
            disks: vec!["size=20".into()],
            networks: vec!["name=wan,ip=auto".into()],
            billing_cycle: "hourly".into(),
            daily_backup: false,
            managed: false,
            script: String::new(),
            userdata: String::new(),
            ssh_key: String::new(),
            password: String::new(),
            created: SystemTime::now(),
        });
        id
    }
}

// ---------------------------------------------------------------------------
// HTTP

fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/service/servers", get(list_servers))
        .route("/service/server", post(create_server))
        .route("/service/server/info", post(server_info))
        .route("/service/server/terminate", post(terminate))
        .route("/service/server/poweron", post(power_on))
        .route("/service/server/poweroff", post(power_off))
        .route("/server/tags", post(server_tags))
        .route("/service/queue", get(queue))
        .fallback(unknown_path)
        .layer(axum::middleware::from_fn_with_state(
            shared.clone(),
            record_and_authenticate,
        ))
        .with_state(shared)
}

fn error(status: StatusCode, message: &str) -> Response {
    (status, Json(json!({ "message": message }))).into_response()
}

/// The real service's answer to a path it has no route for (its exception handler turns
/// the router's not-found into this): never a missing server.
async fn unknown_path() -> Response {
    (
        StatusCode::NOT_FOUND,
        Json(json!({ "error": true, "message": "Not Found" })),
    )
        .into_response()
}

/// Logs every request with its JSON body and rejects it without the right API key.
async fn record_and_authenticate(
    State(shared): State<Arc<Shared>>,
    req: Request,
    next: Next,
) -> Response {
    let (parts, body) = req.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, 4 << 20).await else {
        return error(StatusCode::PAYLOAD_TOO_LARGE, "Request body too large");
    };
    let header = |name: &str| {
        parts
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let o = &shared.opts;
    let authorized = header("authclientid").as_deref() == Some(o.client_id.as_str())
        && header("authsecret").as_deref() == Some(o.secret.as_str());
    shared.lock().calls.push(SimCall {
        method: parts.method.to_string(),
        path: parts.uri.path().to_string(),
        query: parts.uri.query().map(str::to_string),
        body: serde_json::from_slice(&bytes).ok(),
        authorized,
    });
    if !authorized {
        return error(
            StatusCode::UNAUTHORIZED,
            "Authentication failed: invalid AuthClientId or AuthSecret",
        );
    }
    next.run(Request::from_parts(parts, axum::body::Body::from(bytes)))
        .await
}

fn server_json(s: &SimServer) -> Value {
    json!({ "id": s.id, "name": s.name, "datacenter": s.datacenter, "power": s.power })
}

async fn list_servers(State(shared): State<Arc<Shared>>) -> Response {
    let st = shared.lock();
    if st.listing_down {
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            Json(json!({"message": "Internal Server Error"})),
        )
            .into_response();
    }
    Json(Value::Array(st.servers.iter().map(server_json).collect())).into_response()
}

fn parse_object(body: &Bytes) -> Option<Map<String, Value>> {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(m)) => Some(m),
        _ => None,
    }
}

fn not_object() -> Response {
    error(
        StatusCode::BAD_REQUEST,
        "Invalid request: expected a JSON object",
    )
}

/// A field as text: strings as is, numbers as their decimal form.
fn text(m: &Map<String, Value>, key: &str) -> Option<String> {
    match m.get(key)? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// Why the real service refuses a call about servers (all HTTP 500).
enum Refusal {
    /// Its own message, e.g. `No servers found (name='x')`.
    Message(String),
    /// An id the console service does not know (see [`UnknownServerAnswer`]).
    UnknownId,
}

impl Refusal {
    fn answer(self, shared: &Shared) -> Response {
        match self {
            Refusal::Message(m) => error(StatusCode::INTERNAL_SERVER_ERROR, &m),
            Refusal::UnknownId => unknown_server_id(&shared.opts.unknown_server_answer),
        }
    }
}

/// The servers a call about servers selects, or the real service's refusal: by `id`
/// (exactly one, else the console's refusal, see [`UnknownServerAnswer`]) or by `name`
/// (the real API takes an anchored regular expression; the simulator matches names
/// exactly), never both and never neither.
fn select(st: &State_, m: &Map<String, Value>) -> Result<Vec<usize>, Refusal> {
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
            let found = matching(&|s| s.name == name);
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

const CREATE_FIELDS: &[&str] = &[
    "name",
    "password",
    "passwordValidate",
    "ssh-key",
    "datacenter",
    "image",
    "cpu",
    "ram",
    "disk",
    "dailybackup",
    "managed",
    "network",
    "quantity",
    "billingcycle",
    "monthlypackage",
    "poweronaftercreate",
    "script-file",
    "userdata-file",
    "tag",
];

/// A tag the simulator accepts: 1 to [`MAX_TAG_LEN`] letters, digits, `-` or `_`.
fn valid_tag(t: &str) -> bool {
    (1..=MAX_TAG_LEN).contains(&t.len())
        && t.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

fn valid_password(p: &str) -> bool {
    (10..=20).contains(&p.len())
        && p.chars().any(|c| c.is_ascii_lowercase())
        && p.chars().any(|c| c.is_ascii_uppercase())
        && p.chars().any(|c| c.is_ascii_digit())
        && p.chars()
            .all(|c| c.is_ascii_alphanumeric() || "!@#$^&*()~".contains(c))
}

/// Splits a space-joined list of `k=v,k=v` items, checking keys; at most 4 items.
fn items(value: &str, keys: &[&str], required: &str) -> Result<Vec<String>, String> {
    let list: Vec<String> = value.split(' ').map(str::to_string).collect();
    if list.len() > 4 || list.iter().any(|i| i.is_empty()) {
        return Err(format!("invalid flag value ({value})"));
    }
    for item in &list {
        let mut has_required = false;
        for kv in item.split(',') {
            match kv.split_once('=') {
                Some((k, v)) if keys.contains(&k) && !v.is_empty() => {
                    has_required |= k == required;
                }
                _ => return Err(format!("invalid flag value ({item})")),
            }
        }
        if !has_required {
            return Err(format!("invalid flag value ({item}): missing {required}"));
        }
    }
    Ok(list)
}

fn yes_no(m: &Map<String, Value>, key: &str, default: bool) -> Result<bool, String> {
    match text(m, key).as_deref() {
        None | Some("") => Ok(default),
        Some("yes") => Ok(true),
        Some("no") => Ok(false),
        Some(other) => Err(format!("Invalid argument ({key}={other})")),
    }
}

fn cpu_count(cpu: &str) -> Option<u32> {
    let kind = cpu.chars().last()?;
    if !matches!(kind, 'A' | 'B' | 'T' | 'D') {
        return None;
    }
    cpu[..cpu.len() - 1].parse().ok().filter(|n| *n > 0)
}

/// Answers command ids, alternating between string and integer forms.
fn command_ids_json(cmd: &SimCommand) -> Value {
    if cmd.id_as_string {
        json!([cmd.id.to_string()])
    } else {
        json!([cmd.id])
    }
}

/// Queues a command and runs it in the background: `step` pending, `step` running, then
/// its effect. Returns the command.
fn enqueue(
    shared: &Arc<Shared>,
    st: &mut State_,
    kind: &str,
    server: &SimServer,
    fails: Option<String>,
) -> SimCommand {
    st.counter += 1;
    st.commands_issued += 1;
    let id = st.counter;
    let cmd = SimCommand {
        id,
        kind: kind.into(),
        server_id: server.id.clone(),
        server_name: server.name.clone(),
        status: "pending".into(),
        log: String::new(),
        // Every other command's id is answered as a string.
        id_as_string: st.commands_issued % 2 == 1,
    };
    st.commands.push(cmd.clone());
    let shared = shared.clone();
    let step = shared.opts.step;
    tokio::spawn(async move {
        tokio::time::sleep(step).await;
        set_status(&shared, id, "running", "");
        tokio::time::sleep(step).await;
        finish(&shared, id, fails);
    });
    cmd
}

fn set_status(shared: &Shared, id: u64, status: &str, log: &str) {
    let mut st = shared.lock();
    if let Some(c) = st.commands.iter_mut().find(|c| c.id == id) {
        c.status = status.into();
        if !log.is_empty() {
            c.log = log.into();
        }
    }
}

/// Applies a command's effect and marks it complete (or error with `fails` as log).
fn finish(shared: &Shared, id: u64, fails: Option<String>) {
    let event = {
        let mut st = shared.lock();
        let Some(cmd) = st.commands.iter().find(|c| c.id == id).cloned() else {
            return;
        };
        let pos = st.servers.iter().position(|s| s.id == cmd.server_id);
        let mut event = None;
        let mut log = format!("{} {}: done", cmd.kind, cmd.server_name);
        if let Some(reason) = fails {
            if cmd.kind.starts_with("create") {
                if let Some(p) = pos {
                    st.servers.remove(p);
                }
            }
            if let Some(c) = st.commands.iter_mut().find(|c| c.id == id) {
                c.status = "error".into();
                c.log = reason;
            }
            return;
        }
        match (cmd.kind.as_str(), pos) {
            ("create", Some(p)) => {
                let never = st.never_boot.clone();
                let s = &mut st.servers[p];
                s.power = "on".into();
                log = format!("Server {} created and powered on", s.name);
                if !never.iter().any(|n| s.name.starts_with(n.as_str())) {
                    let user_data = if s.script.is_empty() {
                        s.userdata.clone()
                    } else {
                        s.script.clone()
                    };
                    event = Some(VmEvent::Booted {
                        name: s.name.clone(),
                        user_data,
                        memory_bytes: s.ram_mb.saturating_mul(1024 * 1024),
                        cpus: cpu_count(&s.cpu).unwrap_or(1),
                    });
                }
            }
            ("terminate", Some(p)) => {
                let s = st.servers.remove(p);
                log = format!("Server {} terminated", s.name);
                event = Some(VmEvent::Deleted { name: s.name });
            }
            ("create-off", Some(p)) => log = format!("Server {} created", st.servers[p].name),
            ("poweron", Some(p)) => st.servers[p].power = "on".into(),
            ("poweroff", Some(p)) => st.servers[p].power = "off".into(),
            _ => {}
        }
        if let Some(c) = st.commands.iter_mut().find(|c| c.id == id) {
            c.status = "complete".into();
            c.log = log;
        }
        event
    };
    if let Some(e) = event {
        shared.fire(e);
    }
}

async fn create_server(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    let Some(m) = parse_object(&body) else {
        return not_object();
    };
    let bad = |msg: String| error(StatusCode::BAD_REQUEST, &msg);
    if let Some(k) = m.keys().find(|k| !CREATE_FIELDS.contains(&k.as_str())) {
        return bad(format!("unknown field ({k})"));
    }
    let get = |k: &str| text(&m, k).unwrap_or_default();
    let name = get("name");
    if name.len() < 4
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "()_-".contains(c))
    {
        return bad(format!("invalid flag value (name={name})"));
    }
    let password = get("password");
    if !valid_password(&password) {
        return bad("Invalid password: must be 10-20 characters of a-z, A-Z, 0-9, !@#$^&*()~ with at least 1 capital letter, 1 small letter and 1 digit".into());
    }
    if get("passwordValidate") != password {
        return bad("Password validation does not match".into());
    }
    let datacenter = get("datacenter");
    if !shared.opts.datacenters.contains(&datacenter) {
        return bad(format!("Invalid datacenter: {datacenter}"));
    }
    let image = get("image");
    if image.is_empty() {
        return bad("missing required flag (image)".into());
    }
    let cpu = get("cpu");
    if cpu_count(&cpu).is_none() {
        return bad(format!("invalid flag value (cpu={cpu})"));
    }
    let Ok(ram_mb) = get("ram").parse::<u64>() else {
        return bad(format!("invalid flag value (ram={})", get("ram")));
    };
    let disks = match items(&get("disk"), &["id", "size"], "size") {
        Ok(d) => d,
        Err(e) => return bad(format!("{e} (disk)")),
    };
    let networks = match items(&get("network"), &["id", "name", "ip"], "name") {
        Ok(n) => n,
        Err(e) => return bad(format!("{e} (network)")),
    };
    let billing = match get("billingcycle").as_str() {
        "" | "hourly" => "hourly",
        "monthly" => "monthly",
        other => return bad(format!("Invalid argument (billingcycle={other})")),
    };
    let (backup, managed, power_on) = match (
        yes_no(&m, "dailybackup", false),
        yes_no(&m, "managed", false),
        yes_no(&m, "poweronaftercreate", true),
    ) {
        (Ok(a), Ok(b), Ok(c)) => (a, b, c),
        (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => return bad(e),
    };
    if !matches!(get("quantity").as_str(), "" | "1") {
        return bad("the simulator creates one server per request (quantity=1)".into());
    }
    let tags: Vec<String> = get("tag")
        .split(' ')
        .filter(|t| !t.is_empty())
        .map(str::to_string)
        .collect();
    if let Some(t) = tags.iter().find(|t| !valid_tag(t)) {
        return bad(format!("Invalid tag name ({t})"));
    }

    let mut st = shared.lock();
    let mut fails = None;
    if !st.fail_creates.is_empty() {
        match st.fail_creates.remove(0) {
            CreateFailure::Refused => {
                return error(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "Insufficient balance: your account credit limit does not allow creating more servers",
                )
            }
            CreateFailure::CommandError => {
                fails = Some(format!(
                    "Create server {name} failed: no available resources in datacenter {datacenter}"
                ))
            }
        }
    }
    if let Some(max) = shared.opts.max_servers {
        if st.servers.len() >= max {
            return error(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("Insufficient balance: server limit of {max} reached for this account"),
            );
        }
    }
    st.counter += 1;
    let server = SimServer {
        id: server_id(st.counter),
        name,
        datacenter,
        image,
        power: "off".into(),
        tags,
        cpu,
        ram_mb,
        disks,
        networks,
        billing_cycle: billing.into(),
        daily_backup: backup,
        managed,
        script: get("script-file"),
        userdata: get("userdata-file"),
        ssh_key: get("ssh-key"),
        password,
        created: SystemTime::now(),
    };
    st.servers.push(server.clone());
    let kind = if power_on { "create" } else { "create-off" };
    let cmd = enqueue(&shared, &mut st, kind, &server, fails);
    Json(command_ids_json(&cmd)).into_response()
}

fn info_json(s: &SimServer) -> Value {
    json!({
        "id": s.id, "name": s.name, "datacenter": s.datacenter, "power": s.power,
        "cpu": s.cpu, "ram": s.ram_mb,
        "diskSizes": s.disks.iter().filter_map(|d| d.split(',').find_map(|kv| kv.strip_prefix("size=")).and_then(|v| v.parse::<u64>().ok())).collect::<Vec<_>>(),
        "networks": s.networks.iter().map(|n| json!({ "network": n.split(',').find_map(|kv| kv.strip_prefix("name=")).unwrap_or(""), "ips": [] })).collect::<Vec<_>>(),
        "billing": s.billing_cycle, "traffic": "t5000",
        "managed": if s.managed { "1" } else { "0" },
        "backup": if s.daily_backup { "1" } else { "0" },
    })
}

async fn server_info(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    let Some(m) = parse_object(&body) else {
        return not_object();
    };
    let st = shared.lock();
    let found = match select(&st, &m) {
        Ok(found) => found,
        Err(refused) => return refused.answer(&shared),
    };
    Json(Value::Array(
        found.iter().map(|i| info_json(&st.servers[*i])).collect(),
    ))
    .into_response()
}

async fn server_tags(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    let Some(m) = parse_object(&body) else {
        return not_object();
    };
    let mut st = shared.lock();
    let found = match select(&st, &m) {
        Ok(found) => found,
        Err(refused) => return refused.answer(&shared),
    };
    let i = match found.as_slice() {
        [one] => *one,
        _ => {
            return error(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!(
                    "Too many matching servers (name='{}')",
                    text(&m, "name").unwrap_or_default()
                ),
            )
        }
    };
    let server = &mut st.servers[i];
    if let Some(add) = text(&m, "add").filter(|t| !t.is_empty()) {
        if !valid_tag(&add) {
            return error(StatusCode::BAD_REQUEST, "Invalid tag name");
        }
        if !server.tags.contains(&add) {
            server.tags.push(add);
        }
    }
    if let Some(remove) = text(&m, "remove").filter(|t| !t.is_empty()) {
        server.tags.retain(|t| *t != remove);
    }
    // The current row shape: the server id and the tag name.
    Json(Value::Array(
        server
            .tags
            .iter()
            .map(|t| json!({ "id": server.id, "tagName": t }))
            .collect(),
    ))
    .into_response()
}

async fn terminate(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    let Some(m) = parse_object(&body) else {
        return not_object();
    };
    let force = matches!(m.get("force"), Some(Value::Bool(true)))
        || matches!(text(&m, "force").as_deref(), Some("true" | "1" | "yes"));
    let mut st = shared.lock();
    let found = match select(&st, &m) {
        Ok(found) => found,
        Err(refused) => return refused.answer(&shared),
    };
    if st.fail_deletes > 0 {
        st.fail_deletes -= 1;
        return error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "Internal error while terminating the server, please try again",
        );
    }
    let targets: Vec<SimServer> = found.iter().map(|i| st.servers[*i].clone()).collect();
    if !force && targets.iter().any(|s| s.power == "on") {
        return error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "Server is powered on: power it off first or terminate with force",
        );
    }
    let ids: Vec<Value> = targets
        .iter()
        .map(|s| {
            let cmd = enqueue(&shared, &mut st, "terminate", s, None);
            command_ids_json(&cmd)[0].clone()
        })
        .collect();
    Json(Value::Array(ids)).into_response()
}

async fn power(shared: Arc<Shared>, body: Bytes, kind: &str) -> Response {
    let Some(m) = parse_object(&body) else {
        return not_object();
    };
    let mut st = shared.lock();
    let found = match select(&st, &m) {
        Ok(found) => found,
        Err(refused) => return refused.answer(&shared),
    };
    let targets: Vec<SimServer> = found.iter().map(|i| st.servers[*i].clone()).collect();
    let ids: Vec<Value> = targets
        .iter()
        .map(|s| {
            let cmd = enqueue(&shared, &mut st, kind, s, None);
            command_ids_json(&cmd)[0].clone()
        })
        .collect();
    Json(Value::Array(ids)).into_response()
}

async fn power_on(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    power(shared, body, "poweron").await
}

async fn power_off(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    power(shared, body, "poweroff").await
}

async fn queue(
    State(shared): State<Arc<Shared>>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let Some(id) = q.get("id").and_then(|i| i.trim().parse::<u64>().ok()) else {
        return error(StatusCode::BAD_REQUEST, "missing required flag (id)");
    };
    let st = shared.lock();
    let entries: Vec<Value> = st
        .commands
        .iter()
        .filter(|c| c.id == id && !shared.opts.silent_queue)
        .map(|c| {
            // The queue answers ids as numbers, whatever form the command call used.
            let mut e: BTreeMap<&str, Value> = BTreeMap::new();
            e.insert("id", json!(c.id));
            e.insert("status", json!(c.status));
            e.insert("server", json!(c.server_name));
            e.insert("description", json!(format!("{} server", c.kind)));
            e.insert("log", json!(c.log));
            json!(e)
        })
        .collect();
    Json(Value::Array(entries)).into_response()
}

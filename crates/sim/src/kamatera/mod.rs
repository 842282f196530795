//! A simulated Kamatera cloudcli API on an in-process axum server on 127.0.0.1, with the
//! request and response shapes of the real one (the `cloudwm/cloudcli-server` service):
//!
//! - every call needs the `AuthClientId` / `AuthSecret` headers (else 401 with a message);
//! - `GET /service/servers`, `POST /service/server/info`, `POST /server/tags`;
//! - `GET /service/server` and its lists (`?datacenter=1`, `?images=1&datacenter=`,
//!   `?capabilities=1&datacenter=`, `?sizes=1&datacenter=`): see [`catalog`];
//! - `POST /service/server` (flat fields; disks, networks and tags space-joined; the image
//!   by name or `DC:` id and the CPU and RAM checked against the catalogue; password
//!   `__generate__` answered `{"commandIds", "password"}`),
//!   `POST /service/server/terminate`, `/poweron`, `/poweroff`, `/reboot` answer command
//!   ids, as strings for some commands and integers for others;
//! - `GET /service/queue?id=` walks each command through `pending` → `running` →
//!   `complete` (or `error` with a log), with `completed` (`YYYY-MM-DD HH:MM:SS`) once it
//!   ended; a create's log lists its settings line by line from `Name: <name>`, the line
//!   clients read the created name from;
//! - errors are non-200 answers with `{"message": ...}`; an unknown path is HTTP 404
//!   `{"error": true, "message": "Not Found"}`, as the real service answers it.
//!
//! When a create command completes the VM "boots" ([`VmEvent::Booted`] with the init
//! script as user data); when a terminate completes it is gone ([`VmEvent::Deleted`]).
//! A power-off stops its kubelet ([`VmEvent::Stopped`]); a power-on of a server that
//! booted before starts it again ([`VmEvent::Booted`]: the Node registers anew), and so
//! does a reboot (`Stopped`, then `Booted`).
//! Like the real API, no answer carries a creation time (`GET /service/servers` has `id`,
//! `name`, `datacenter`, `power`; `/service/server/info` adds the configuration and prices):
//! [`SimServer::created`] is for test inspection only. Tags are stored as sent (space-joined
//! in the create request, one per `add`) and answered by `POST /server/tags` as the current
//! service answers them: one row `{"id": SERVER_ID, "tagName": TAG}` per tag (older
//! versions answered `{"server id", "tag name"}`; clients must read both).
//!
//! Calls about servers (`info`, `tags`, `terminate`, `poweron`, `poweroff`, `reboot`) are
//! refused as the real service refuses them, all with HTTP 500: `id` and `name` together
//! ("Please specify 'name' or 'id' but not both"), neither ("Missing server 'id' / 'name'"), a
//! `name` matching nothing ("No servers found (name='...')"), `tags` for a `name` matching
//! several ("Too many matching servers"), and an `id` no server has. The real service
//! passes an id to the console service unchecked and wraps the console's refusal; the
//! console's own wording is not public, so the simulator stands in for it with
//! [`UnknownServerAnswer`] (a client must not depend on that text).
//!
//! The simulator is stricter than the real API in two ways: unknown create fields are
//! rejected, so a misspelt field fails a test instead of being ignored; and tags longer
//! than [`MAX_TAG_LEN`](crate::cloud::kamatera::MAX_TAG_LEN) (the longest tag known to be accepted) or with characters other
//! than letters, digits, `-` and `_` are refused, so a tag that might not fit fails a test.
//!
//! - `http`: routes, the API key check, listings, tags and the queue.
//! - `calls`: a call's body, the servers it selects, and the service's refusals.
//! - `commands`: create, terminate, power and reboot, queued and carried out in the
//!   background.
//! - [`catalog`]: datacenters, images, CPU types and sizes.

mod calls;
pub mod catalog;
mod commands;
mod http;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use serde_json::Value;

use super::faults::Faults;
use super::serve::{self, yaml_str, ServerGuard};
use super::{VmEvent, VmHook};

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
    /// Injected faults (none by default); half-done creates and terminates too.
    pub faults: Faults,
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
            faults: Faults::default(),
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
    /// Reboot commands completed.
    pub reboots: u32,
    /// Booted at least once: its init script ran and installed its kubelet, which starts
    /// again (and registers its Node again) at every later power-on.
    pub booted: bool,
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
    /// `create`, `create-off` (without power on), `terminate`, `poweron`, `poweroff`,
    /// `reboot`.
    pub kind: String,
    pub server_id: String,
    pub server_name: String,
    /// `pending`, `running`, `complete`, `error`.
    pub status: String,
    pub log: String,
    /// When it ended (`complete` or `error`), answered by the queue as `completed`.
    pub completed: Option<SystemTime>,
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
        let app = http::router(shared.clone());
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
            reboots: 0,
            booted: false,
        });
        id
    }
}

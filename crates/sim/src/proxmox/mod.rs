//! A simulated Proxmox VE cluster: the API subset nodewright uses, on one in-process axum
//! server on 127.0.0.1 (plain HTTP, or HTTPS with a given certificate).
//!
//! **Every request is checked against the official API schema** (see [`schema`]): an
//! unknown path, a method the path lacks, an unknown parameter, or a value that violates
//! its type, format, pattern, range or enum fails with 400 and is recorded in
//! [`SimProxmox::violations`], so tests can assert that there were none.
//!
//! Behaviour: responses are wrapped in `{"data": ..}`; clone, config, start, stop and
//! destroy return UPIDs (`UPID:node:pid:pstart:starttime:type:id:user:`) of tasks that
//! finish after a delay, with `exitstatus` `OK` or an injected error. A started VM boots
//! after `boot_delay`; then its guest agent answers (when `agent` is enabled).
//!
//! Joining ([`VmEvent::Booted`] to the hook):
//! - VMs cloned from a template with `cloud_init_join: true` stand for a template that joins
//!   by itself from its own cloud-init configuration: at boot the simulator fires `Booted`
//!   with a generated user data, a k3s agent command line carrying the node name, the
//!   ownership labels (decoded from the VM's `nw-c-`/`nw-g-` tags) and the startup taint,
//!   as such a template's join script would pass them.
//! - Otherwise `Booted` fires when a script written with `agent/file-write` is run with
//!   `agent/exec` and exits 0; its `user_data` is that script.
//!
//! `VmEvent::Deleted` fires when a VM is destroyed.

pub mod schema;

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use serde_json::{json, Value};

use self::schema::{percent_decode, Schema};
use super::serve::{self, yaml_str, ServerGuard};
use super::{VmEvent, VmHook};
use crate::cloud::proxmox::tags;

const MIB: u64 = 1024 * 1024;
const GIB: u64 = 1024 * MIB;

/// A Proxmox host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimHost {
    pub name: String,
    pub maxmem: u64,
    /// Memory used by things other than the simulated VMs.
    pub base_mem: u64,
    pub online: bool,
}

/// A storage; a non-shared one exists separately on every host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimStorage {
    pub name: String,
    pub shared: bool,
}

/// A template VM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimTemplate {
    pub vmid: u32,
    pub name: String,
    pub node: String,
    /// Storage of its disks.
    pub storage: String,
    pub memory_mib: u64,
    pub cores: u32,
    /// The template joins the cluster by itself from cloud-init (see the module docs).
    pub cloud_init_join: bool,
}

/// Serve HTTPS with this certificate chain and key (PEM).
#[derive(Clone)]
pub struct SimTls {
    pub cert_chain_pem: String,
    pub key_pem: String,
}

/// Options of [`SimProxmox::start`].
#[derive(Clone)]
pub struct SimProxmoxOptions {
    pub hosts: Vec<SimHost>,
    pub storages: Vec<SimStorage>,
    pub templates: Vec<SimTemplate>,
    /// API token `USER@REALM!TOKENID` and its secret.
    pub token_id: String,
    pub token_secret: String,
    /// User for ticket authentication.
    pub username: String,
    pub password: String,
    pub ticket_lifetime: Duration,
    pub hook: Option<VmHook>,
    pub clone_delay: Duration,
    /// Duration of config/start/stop/destroy tasks.
    pub task_delay: Duration,
    /// From start until the guest boots (agent answers, cloud-init join fires).
    pub boot_delay: Duration,
    /// How long a guest-agent exec runs.
    pub exec_delay: Duration,
    pub tls: Option<SimTls>,
}

impl Default for SimProxmoxOptions {
    fn default() -> Self {
        let host = |name: &str, maxmem, base_mem| SimHost {
            name: name.into(),
            maxmem,
            base_mem,
            online: true,
        };
        let template = |vmid, name: &str, node: &str, storage: &str, cloud_init_join| SimTemplate {
            vmid,
            name: name.into(),
            node: node.into(),
            storage: storage.into(),
            memory_mib: 4096,
            cores: 2,
            cloud_init_join,
        };
        SimProxmoxOptions {
            hosts: vec![
                host("pve1", 64 * GIB, 8 * GIB),
                host("pve2", 64 * GIB, 16 * GIB),
                host("pve3", 32 * GIB, 4 * GIB),
            ],
            storages: vec![
                SimStorage {
                    name: "local-lvm".into(),
                    shared: false,
                },
                SimStorage {
                    name: "ceph".into(),
                    shared: true,
                },
            ],
            templates: vec![
                template(9000, "k3s-local", "pve1", "local-lvm", true),
                template(9001, "k3s-shared", "pve2", "ceph", true),
                template(9002, "agent-shared", "pve2", "ceph", false),
            ],
            token_id: "nodewright@pve!autoscaler".into(),
            token_secret: "5f0c2a9e-1b7d-4c3e-9a8f-6d2e1c0b9a87".into(),
            username: "nodewright@pve".into(),
            password: "sim-password".into(),
            ticket_lifetime: Duration::from_secs(7200),
            hook: None,
            clone_delay: Duration::from_millis(150),
            task_delay: Duration::from_millis(30),
            boot_delay: Duration::from_millis(200),
            exec_delay: Duration::from_millis(100),
            tls: None,
        }
    }
}

/// A VM as the simulator holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct SimVm {
    pub vmid: u32,
    pub node: String,
    pub name: String,
    pub template: bool,
    /// The VM configuration (`GET .../config`), values as strings.
    pub config: BTreeMap<String, String>,
    /// `running` or `stopped`.
    pub status: String,
    pub lock: Option<String>,
    pub cloud_init_join: bool,
    /// The guest has booted (after start + `boot_delay`).
    pub booted: bool,
    /// `Booted` was sent to the hook.
    pub joined: bool,
    /// Files written with `agent/file-write`.
    pub files: BTreeMap<String, String>,
}

impl SimVm {
    pub fn tags(&self) -> &str {
        self.config.get("tags").map(String::as_str).unwrap_or("")
    }
    fn memory_mib(&self) -> u64 {
        self.config
            .get("memory")
            .map(|m| m.trim_start_matches("current="))
            .and_then(|m| m.split(',').next()?.parse().ok())
            .unwrap_or(512)
    }
    fn cpus(&self) -> u32 {
        let get = |k: &str, d: u32| self.config.get(k).and_then(|v| v.parse().ok()).unwrap_or(d);
        get("cores", 1) * get("sockets", 1)
    }
    fn agent_enabled(&self) -> bool {
        self.config
            .get("agent")
            .is_some_and(|a| a.starts_with('1') || a.contains("enabled=1"))
    }
}

/// How a request authenticated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SimAuth {
    None,
    /// The full `Authorization` header value.
    Token(String),
    /// Ticket cookie, with the `CSRFPreventionToken` header if sent.
    Ticket {
        csrf: Option<String>,
    },
}

/// One request the simulator received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimCall {
    pub method: String,
    /// Path below `/api2/json`.
    pub path: String,
    /// The matched schema path, e.g. `/nodes/{node}/qemu/{vmid}/clone`.
    pub endpoint: Option<String>,
    pub params: Vec<(String, String)>,
    pub auth: SimAuth,
    pub status: u16,
}

struct Task {
    node: String,
    running: bool,
    exitstatus: Option<String>,
    upid: String,
    kind: String,
    id: String,
    user: String,
    starttime: u64,
    pid: u32,
}

struct Exec {
    exited: bool,
    exitcode: i64,
}

struct Ticket {
    csrf: String,
    expires: SystemTime,
}

struct St {
    vms: BTreeMap<u32, SimVm>,
    tasks: HashMap<String, Task>,
    calls: Vec<SimCall>,
    violations: Vec<String>,
    tickets: HashMap<String, Ticket>,
    tickets_issued: usize,
    fail_tasks: Vec<(String, String)>,
    fail_deletes: usize,
    never_ready: Vec<String>,
    vmid_races: usize,
    join_exit_code: i64,
    execs: HashMap<(u32, i64), Exec>,
    counter: u32,
    mac_counter: u32,
}

struct Shared {
    opts: SimProxmoxOptions,
    addr: SocketAddr,
    state: Mutex<St>,
    schema: Result<Arc<Schema>, String>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, St> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
    fn fire(&self, event: VmEvent) {
        if let Some(hook) = &self.opts.hook {
            hook(event);
        }
    }
}

/// Handle to a running simulated Proxmox VE; clones share it. The server stops when the
/// last handle is dropped.
#[derive(Clone)]
pub struct SimProxmox {
    shared: Arc<Shared>,
    _guard: Arc<ServerGuard>,
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl SimProxmox {
    /// Starts the simulator on 127.0.0.1 with an ephemeral port. Fails when the API
    /// schema cannot be read (see [`schema::schema_path`]).
    pub async fn start(opts: SimProxmoxOptions) -> std::io::Result<SimProxmox> {
        let schema = Schema::load();
        if let Err(e) = &schema {
            return Err(std::io::Error::other(e.clone()));
        }
        let (listener, addr) = serve::bind_local().await?;
        let mut vms = BTreeMap::new();
        for t in &opts.templates {
            let mut config = BTreeMap::new();
            for (k, v) in [
                ("name", t.name.clone()),
                ("template", "1".into()),
                ("memory", t.memory_mib.to_string()),
                ("cores", t.cores.to_string()),
                ("sockets", "1".into()),
                ("scsihw", "virtio-scsi-pci".into()),
                (
                    "scsi0",
                    format!("{}:base-{}-disk-0,size=8G", t.storage, t.vmid),
                ),
                (
                    "ide2",
                    format!("{}:vm-{}-cloudinit,media=cdrom", t.storage, t.vmid),
                ),
                (
                    "net0",
                    format!(
                        "virtio=BC:24:11:00:{:02X}:{:02X},bridge=vmbr0",
                        (t.vmid >> 8) & 0xff,
                        t.vmid & 0xff
                    ),
                ),
                ("ipconfig0", "ip=dhcp".into()),
                ("meta", "creation-qemu=9.2.0,ctime=1700000000".into()),
            ] {
                config.insert(k.to_string(), v);
            }
            vms.insert(
                t.vmid,
                SimVm {
                    vmid: t.vmid,
                    node: t.node.clone(),
                    name: t.name.clone(),
                    template: true,
                    config,
                    status: "stopped".into(),
                    lock: None,
                    cloud_init_join: t.cloud_init_join,
                    booted: false,
                    joined: false,
                    files: BTreeMap::new(),
                },
            );
        }
        let tls = opts.tls.clone();
        let shared = Arc::new(Shared {
            state: Mutex::new(St {
                vms,
                tasks: HashMap::new(),
                calls: Vec::new(),
                violations: Vec::new(),
                tickets: HashMap::new(),
                tickets_issued: 0,
                fail_tasks: Vec::new(),
                fail_deletes: 0,
                never_ready: Vec::new(),
                vmid_races: 0,
                join_exit_code: 0,
                execs: HashMap::new(),
                counter: 0x1000,
                mac_counter: 0,
            }),
            opts,
            addr,
            schema,
        });
        let app = Router::new().fallback(handle).with_state(shared.clone());
        let guard = match tls {
            None => serve::spawn(listener, app, "simulated Proxmox"),
            Some(t) => {
                let listener = tls::TlsListener {
                    tcp: listener,
                    acceptor: tls::acceptor(&t)?,
                };
                serve::spawn(listener, app, "simulated Proxmox (TLS)")
            }
        };
        Ok(SimProxmox {
            shared,
            _guard: guard,
        })
    }

    /// Base URL (`http://127.0.0.1:PORT` or `https://...`), without `/api2/json`.
    pub fn url(&self) -> String {
        let scheme = if self.shared.opts.tls.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://{}", self.shared.addr)
    }

    pub fn options(&self) -> &SimProxmoxOptions {
        &self.shared.opts
    }

    /// Writes a credentials file for API-token authentication.
    pub fn write_credentials_file(&self, path: &Path) -> std::io::Result<()> {
        let o = &self.shared.opts;
        std::fs::write(
            path,
            format!(
                "url: {}\ntokenId: {}\ntokenSecret: {}\n",
                yaml_str(&self.url()),
                yaml_str(&o.token_id),
                yaml_str(&o.token_secret)
            ),
        )
    }

    /// Writes a credentials file for ticket (user + password) authentication.
    pub fn write_password_credentials_file(&self, path: &Path) -> std::io::Result<()> {
        let o = &self.shared.opts;
        std::fs::write(
            path,
            format!(
                "url: {}\nusername: {}\npassword: {}\n",
                yaml_str(&self.url()),
                yaml_str(&o.username),
                yaml_str(&o.password)
            ),
        )
    }

    /// Every schema violation seen so far (empty when the client behaved).
    pub fn violations(&self) -> Vec<String> {
        self.shared.lock().violations.clone()
    }

    /// All VMs (templates included), by VM id.
    pub fn vms(&self) -> Vec<SimVm> {
        self.shared.lock().vms.values().cloned().collect()
    }

    /// Non-template VMs.
    pub fn guests(&self) -> Vec<SimVm> {
        self.vms().into_iter().filter(|v| !v.template).collect()
    }

    /// Every request so far, in order.
    pub fn calls(&self) -> Vec<SimCall> {
        self.shared.lock().calls.clone()
    }

    pub fn tickets_issued(&self) -> usize {
        self.shared.lock().tickets_issued
    }

    /// Invalidates every ticket (the next request with one gets 401).
    pub fn expire_tickets(&self) {
        self.shared.lock().tickets.clear();
    }

    /// The next `n` tasks of `kind` (`qmclone`, `qmconfig`, `qmstart`, `qmstop`,
    /// `qmdestroy`) end with `exitstatus` instead of `OK`.
    pub fn fail_next_tasks(&self, kind: &str, n: usize, exitstatus: &str) {
        let mut st = self.shared.lock();
        for _ in 0..n {
            st.fail_tasks
                .push((kind.to_string(), exitstatus.to_string()));
        }
    }

    /// The next `n` `DELETE` of a VM fail with HTTP 500 (VM locked).
    pub fn fail_next_deletes(&self, n: usize) {
        self.shared.lock().fail_deletes += n;
    }

    /// VMs whose name starts with `prefix` never finish booting (`""`: all).
    pub fn never_ready(&self, prefix: impl Into<String>) {
        self.shared.lock().never_ready.push(prefix.into());
    }

    /// The next `n` clones lose a race: just before each, another client takes the VM id
    /// the clone asks for (the clone fails with "already exists").
    pub fn race_next_clones(&self, n: usize) {
        self.shared.lock().vmid_races += n;
    }

    /// Exit code of join scripts run through the guest agent from now on.
    pub fn set_join_exit_code(&self, code: i64) {
        self.shared.lock().join_exit_code = code;
    }

    /// Adds a running VM directly (e.g. one left behind by a crash, or someone else's);
    /// returns its VM id.
    pub fn insert_vm(&self, node: &str, name: &str, tags: &str, ipconfig0: Option<&str>) -> u32 {
        let mut st = self.shared.lock();
        let vmid = next_free(&st, 100);
        let mut config = BTreeMap::new();
        config.insert("name".to_string(), name.to_string());
        config.insert("memory".to_string(), "4096".to_string());
        config.insert("cores".to_string(), "2".to_string());
        config.insert(
            "meta".to_string(),
            format!("creation-qemu=9.2.0,ctime={}", now_secs()),
        );
        if !tags.is_empty() {
            config.insert("tags".to_string(), tags.to_string());
        }
        if let Some(ip) = ipconfig0 {
            config.insert("ipconfig0".to_string(), ip.to_string());
        }
        st.vms.insert(
            vmid,
            SimVm {
                vmid,
                node: node.into(),
                name: name.into(),
                template: false,
                config,
                status: "running".into(),
                lock: None,
                cloud_init_join: false,
                booted: true,
                joined: false,
                files: BTreeMap::new(),
            },
        );
        vmid
    }
}

fn next_free(st: &St, from: u32) -> u32 {
    let mut id = from.max(100);
    while st.vms.contains_key(&id) {
        id += 1;
    }
    id
}

// ---------------------------------------------------------------------------
// HTTP

fn data(v: Value) -> Response {
    Json(json!({ "data": v })).into_response()
}

fn fail(status: StatusCode, message: &str) -> Response {
    (
        status,
        Json(json!({ "data": null, "message": format!("{message}\n") })),
    )
        .into_response()
}

fn parse_form(s: &str) -> Vec<(String, String)> {
    s.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (
                percent_decode(&k.replace('+', " ")),
                percent_decode(&v.replace('+', " ")),
            )
        })
        .collect()
}

fn parse_json_body(body: &[u8]) -> Vec<(String, String)> {
    let Ok(Value::Object(m)) = serde_json::from_slice::<Value>(body) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (k, v) in m {
        match v {
            Value::Array(items) => {
                for i in items {
                    out.push((k.clone(), scalar(&i)));
                }
            }
            other => out.push((k, scalar(&other))),
        }
    }
    out
}

fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Bool(b) => u8::from(*b).to_string(),
        other => other.to_string(),
    }
}

fn cookie_ticket(headers: &HeaderMap) -> Option<String> {
    let cookie = headers.get("cookie")?.to_str().ok()?;
    cookie.split(';').find_map(|c| {
        let (k, v) = c.trim().split_once('=')?;
        (k == "PVEAuthCookie").then(|| percent_decode(v))
    })
}

async fn handle(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let full = uri.path().to_string();
    let Some(path) = full.strip_prefix("/api2/json") else {
        shared
            .lock()
            .violations
            .push(format!("{method} {full}: not under /api2/json"));
        return fail(StatusCode::NOT_FOUND, "not under /api2/json");
    };
    let path = if path.is_empty() { "/" } else { path }.to_string();
    let is_json = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|c| c.starts_with("application/json"));
    let params = match method {
        Method::GET | Method::DELETE => parse_form(uri.query().unwrap_or("")),
        _ if is_json => parse_json_body(&body),
        _ => parse_form(&String::from_utf8_lossy(&body)),
    };
    let schema = match &shared.schema {
        Ok(s) => s.clone(),
        Err(e) => return fail(StatusCode::INTERNAL_SERVER_ERROR, e),
    };
    let (matched, errors) = schema.validate(method.as_str(), &path, &params);

    // Authentication.
    let auth_header = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let csrf = headers
        .get("csrfpreventiontoken")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let ticket = cookie_ticket(&headers);
    let auth = match (&auth_header, &ticket) {
        (Some(h), _) => SimAuth::Token(h.clone()),
        (None, Some(_)) => SimAuth::Ticket { csrf: csrf.clone() },
        _ => SimAuth::None,
    };
    let endpoint = matched.as_ref().map(|m| m.template.clone());
    let response = respond(
        &shared,
        &method,
        &path,
        matched,
        errors,
        &params,
        &auth_header,
        ticket,
        csrf,
    )
    .await;
    shared.lock().calls.push(SimCall {
        method: method.to_string(),
        path,
        endpoint,
        params,
        auth,
        status: response.status().as_u16(),
    });
    response
}

#[allow(clippy::too_many_arguments)]
async fn respond(
    shared: &Arc<Shared>,
    method: &Method,
    path: &str,
    matched: Option<schema::Matched>,
    errors: Vec<String>,
    params: &[(String, String)],
    auth_header: &Option<String>,
    ticket: Option<String>,
    csrf: Option<String>,
) -> Response {
    if !errors.is_empty() {
        let mut st = shared.lock();
        for e in &errors {
            st.violations.push(format!("{method} {path}: {e}"));
        }
        let map: serde_json::Map<String, Value> = errors
            .iter()
            .enumerate()
            .map(|(i, e)| (format!("violation{i}"), Value::String(e.clone())))
            .collect();
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({ "data": null, "errors": map, "message": "Parameter verification failed.\n" })),
        )
            .into_response();
    }
    let Some(m) = matched else {
        return fail(StatusCode::NOT_IMPLEMENTED, "not implemented");
    };
    let o = &shared.opts;
    let get = |k: &str| -> Option<String> {
        m.vars
            .get(k)
            .cloned()
            .or_else(|| params.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()))
    };
    let is_write = *method != Method::GET;

    if m.template == "/access/ticket" && *method == Method::POST {
        let (u, p) = (
            get("username").unwrap_or_default(),
            get("password").unwrap_or_default(),
        );
        if u != o.username || p != o.password {
            return fail(StatusCode::UNAUTHORIZED, "authentication failure");
        }
        let mut st = shared.lock();
        st.counter += 1;
        st.tickets_issued += 1;
        let t = format!("PVE:{u}:{:08X}::c2ltdWxhdGVk{}", now_secs(), st.counter);
        let c = format!("{:08X}:simcsrf{}", now_secs(), st.counter);
        st.tickets.insert(
            t.clone(),
            Ticket {
                csrf: c.clone(),
                expires: SystemTime::now() + o.ticket_lifetime,
            },
        );
        return data(json!({ "ticket": t, "CSRFPreventionToken": c, "username": u }));
    }

    // Everything else needs authentication.
    let user = match (auth_header, ticket) {
        (Some(h), _) => {
            if *h != format!("PVEAPIToken={}={}", o.token_id, o.token_secret) {
                return fail(StatusCode::UNAUTHORIZED, "authentication failure");
            }
            o.token_id.clone()
        }
        (None, Some(t)) => {
            let st = shared.lock();
            let Some(tk) = st
                .tickets
                .get(&t)
                .filter(|tk| tk.expires > SystemTime::now())
            else {
                return fail(StatusCode::UNAUTHORIZED, "authentication failure");
            };
            if is_write && csrf.as_deref() != Some(tk.csrf.as_str()) {
                return fail(
                    StatusCode::UNAUTHORIZED,
                    "Permission denied - invalid csrf token",
                );
            }
            o.username.clone()
        }
        (None, None) => return fail(StatusCode::UNAUTHORIZED, "No ticket"),
    };

    if let Some(node) = m.vars.get("node") {
        if !o.hosts.iter().any(|h| &h.name == node) {
            return fail(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("hostname lookup '{node}' failed - failed to get address info for: {node}: Name or service not known"),
            );
        }
    }
    let vmid: Option<u32> = m.vars.get("vmid").and_then(|v| v.parse().ok());
    let node = m.vars.get("node").cloned().unwrap_or_default();
    // A VM path must name the host the VM is on.
    if let Some(id) = vmid {
        let st = shared.lock();
        if st.vms.get(&id).is_none_or(|v| v.node != node) {
            return fail(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("Configuration file 'nodes/{node}/qemu-server/{id}.conf' does not exist"),
            );
        }
    }
    let vmid = vmid.unwrap_or(0);

    match (method.as_str(), m.template.as_str()) {
        ("GET", "/version") => {
            data(json!({ "version": "9.1.3", "release": "9.1", "repoid": "simulated" }))
        }
        ("GET", "/cluster/resources") => data(resources(shared, get("type").as_deref())),
        ("GET", "/cluster/nextid") => {
            let st = shared.lock();
            match get("vmid").and_then(|v| v.parse::<u32>().ok()) {
                Some(id) if st.vms.contains_key(&id) => (
                    StatusCode::BAD_REQUEST,
                    Json(json!({ "data": null, "errors": { "vmid": format!("VM {id} already exists") }, "message": "Parameter verification failed.\n" })),
                )
                    .into_response(),
                Some(id) => data(json!(id.to_string())),
                None => data(json!(next_free(&st, 100).to_string())),
            }
        }
        ("GET", "/nodes/{node}/storage") => {
            let list: Vec<Value> = o
                .storages
                .iter()
                .map(|s| json!({
                    "storage": s.name, "type": if s.shared { "rbd" } else { "lvmthin" },
                    "shared": u8::from(s.shared), "active": 1, "enabled": 1,
                    "content": "images,rootdir", "total": 1u64 << 40, "used": 1u64 << 38, "avail": 3u64 << 38,
                }))
                .collect();
            data(Value::Array(list))
        }
        ("GET", "/nodes/{node}/tasks/{upid}/status") => {
            let upid = get("upid").unwrap_or_default();
            let st = shared.lock();
            match st.tasks.get(&upid) {
                Some(t) if t.node == node => {
                    let mut v = json!({
                        "upid": t.upid, "node": t.node, "pid": t.pid, "pstart": 1234567,
                        "starttime": t.starttime, "type": t.kind, "id": t.id, "user": t.user,
                        "status": if t.running { "running" } else { "stopped" },
                    });
                    if let Some(e) = &t.exitstatus {
                        v["exitstatus"] = json!(e);
                    }
                    data(v)
                }
                _ => fail(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    &format!("no such task '{upid}'"),
                ),
            }
        }
        ("GET", "/nodes/{node}/qemu/{vmid}/config") => {
            let st = shared.lock();
            let Some(vm) = st.vms.get(&vmid) else {
                return fail(StatusCode::INTERNAL_SERVER_ERROR, "gone");
            };
            let mut cfg = serde_json::Map::new();
            for (k, v) in &vm.config {
                let val = match k.as_str() {
                    "cores" | "sockets" | "template" => v
                        .parse::<u64>()
                        .map(Value::from)
                        .unwrap_or_else(|_| json!(v)),
                    _ => json!(v),
                };
                cfg.insert(k.clone(), val);
            }
            cfg.insert(
                "digest".into(),
                json!("0123456789abcdef0123456789abcdef01234567"),
            );
            data(Value::Object(cfg))
        }
        ("POST", "/nodes/{node}/qemu/{vmid}/clone") => clone(shared, &node, vmid, &get, &user),
        ("POST", "/nodes/{node}/qemu/{vmid}/config")
        | ("PUT", "/nodes/{node}/qemu/{vmid}/config") => {
            {
                let mut st = shared.lock();
                let Some(vm) = st.vms.get_mut(&vmid) else {
                    return fail(StatusCode::INTERNAL_SERVER_ERROR, "gone");
                };
                if let Some(l) = &vm.lock {
                    return fail(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        &format!("VM is locked ({l})"),
                    );
                }
                for (k, v) in params {
                    match k.as_str() {
                        "delete" => {
                            for d in v.split([',', ';', ' ']) {
                                vm.config.remove(d);
                            }
                        }
                        "digest" | "skiplock" | "force" => {}
                        "sshkeys" => {
                            vm.config.insert(k.clone(), v.clone());
                        }
                        "name" => {
                            vm.name = v.clone();
                            vm.config.insert(k.clone(), v.clone());
                        }
                        _ => {
                            vm.config.insert(k.clone(), v.clone());
                        }
                    }
                }
            }
            if *method == Method::PUT {
                data(Value::Null)
            } else {
                data(json!(new_task(
                    shared,
                    &node,
                    "qmconfig",
                    vmid,
                    vmid,
                    &user,
                    Duration::ZERO
                )))
            }
        }
        ("POST", "/nodes/{node}/qemu/{vmid}/status/start") => {
            {
                let st = shared.lock();
                if st.vms.get(&vmid).is_some_and(|v| v.template) {
                    return fail(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "you can't start a vm if it's a template",
                    );
                }
            }
            data(json!(new_task(
                shared,
                &node,
                "qmstart",
                vmid,
                vmid,
                &user,
                o.task_delay
            )))
        }
        ("POST", "/nodes/{node}/qemu/{vmid}/status/stop") => data(json!(new_task(
            shared,
            &node,
            "qmstop",
            vmid,
            vmid,
            &user,
            o.task_delay
        ))),
        ("DELETE", "/nodes/{node}/qemu/{vmid}") => {
            {
                let mut st = shared.lock();
                if st.fail_deletes > 0 {
                    st.fail_deletes -= 1;
                    return fail(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        &format!("VM {vmid} is locked (backup)"),
                    );
                }
                if let Some(vm) = st.vms.get(&vmid) {
                    if vm.status == "running" {
                        return fail(
                            StatusCode::INTERNAL_SERVER_ERROR,
                            &format!("VM {vmid} is running - destroy failed"),
                        );
                    }
                    if vm.template {
                        return fail(
                            StatusCode::INTERNAL_SERVER_ERROR,
                            "refusing to destroy a template in the simulator",
                        );
                    }
                }
            }
            data(json!(new_task(
                shared,
                &node,
                "qmdestroy",
                vmid,
                vmid,
                &user,
                o.task_delay
            )))
        }
        ("POST", "/nodes/{node}/qemu/{vmid}/agent/ping") => {
            let st = shared.lock();
            match st.vms.get(&vmid) {
                Some(vm) if !vm.agent_enabled() => fail(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "No QEMU guest agent configured",
                ),
                Some(vm) if vm.status == "running" && vm.booted => data(json!({ "result": {} })),
                _ => fail(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "QEMU guest agent is not running",
                ),
            }
        }
        ("POST", "/nodes/{node}/qemu/{vmid}/agent/file-write") => {
            let mut st = shared.lock();
            match st.vms.get_mut(&vmid) {
                Some(vm) if vm.agent_enabled() && vm.booted && vm.status == "running" => {
                    vm.files.insert(
                        get("file").unwrap_or_default(),
                        get("content").unwrap_or_default(),
                    );
                    data(Value::Null)
                }
                _ => fail(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "QEMU guest agent is not running",
                ),
            }
        }
        ("POST", "/nodes/{node}/qemu/{vmid}/agent/exec") => {
            let command: Vec<String> = params
                .iter()
                .filter(|(k, _)| k == "command")
                .map(|(_, v)| v.clone())
                .collect();
            agent_exec(shared, vmid, command)
        }
        ("GET", "/nodes/{node}/qemu/{vmid}/agent/exec-status") => {
            let pid: i64 = get("pid").and_then(|p| p.parse().ok()).unwrap_or(-1);
            let st = shared.lock();
            match st.execs.get(&(vmid, pid)) {
                Some(e) if e.exited => {
                    let mut v = json!({ "exited": 1, "exitcode": e.exitcode });
                    if e.exitcode != 0 {
                        v["err-data"] = json!(
                            "simulated join failure: kubelet could not reach the API server\n"
                        );
                    }
                    data(v)
                }
                Some(_) => data(json!({ "exited": 0 })),
                None => fail(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    &format!("Agent error: PID {pid} does not exist"),
                ),
            }
        }
        _ => {
            shared.lock().violations.push(format!(
                "{method} {path}: valid per the schema, but the simulator does not implement {}",
                m.template
            ));
            fail(
                StatusCode::NOT_IMPLEMENTED,
                &format!(
                    "Method '{method} {}' not implemented by the simulator",
                    m.template
                ),
            )
        }
    }
}

fn resources(shared: &Shared, kind: Option<&str>) -> Value {
    let o = &shared.opts;
    let st = shared.lock();
    let mut out = Vec::new();
    if kind.is_none() || kind == Some("vm") {
        for vm in st.vms.values() {
            let mut v = json!({
                "id": format!("qemu/{}", vm.vmid), "type": "qemu", "vmid": vm.vmid, "node": vm.node,
                "name": vm.name, "status": vm.status, "template": u8::from(vm.template),
                "maxmem": vm.memory_mib() * MIB, "mem": if vm.status == "running" { vm.memory_mib() * MIB / 2 } else { 0 },
                "maxcpu": vm.cpus(), "cpu": 0.01, "maxdisk": 8 * GIB, "disk": 0, "uptime": 0,
            });
            if !vm.tags().is_empty() {
                v["tags"] = json!(vm.tags());
            }
            if let Some(l) = &vm.lock {
                v["lock"] = json!(l);
            }
            out.push(v);
        }
    }
    if kind.is_none() || kind == Some("node") {
        for h in &o.hosts {
            let used: u64 = st
                .vms
                .values()
                .filter(|v| v.node == h.name && v.status == "running")
                .map(|v| v.memory_mib() * MIB)
                .sum();
            out.push(json!({
                "id": format!("node/{}", h.name), "type": "node", "node": h.name,
                "status": if h.online { "online" } else { "offline" },
                "maxmem": h.maxmem, "mem": h.base_mem + used, "maxcpu": 32, "cpu": 0.05,
                "level": "", "uptime": 100000,
            }));
        }
    }
    if kind.is_none() || kind == Some("storage") {
        for h in &o.hosts {
            for s in &o.storages {
                out.push(json!({
                    "id": format!("storage/{}/{}", h.name, s.name), "type": "storage", "node": h.name,
                    "storage": s.name, "shared": u8::from(s.shared), "status": "available",
                    "content": "images,rootdir", "plugintype": if s.shared { "rbd" } else { "lvmthin" },
                }));
            }
        }
    }
    Value::Array(out)
}

fn clone(
    shared: &Arc<Shared>,
    node: &str,
    vmid: u32,
    get: &dyn Fn(&str) -> Option<String>,
    user: &str,
) -> Response {
    let o = &shared.opts;
    let newid: u32 = get("newid").and_then(|v| v.parse().ok()).unwrap_or(0);
    let target = get("target").unwrap_or_else(|| node.to_string());
    let full = get("full").is_some_and(|f| f == "1" || f == "true");
    {
        let mut st = shared.lock();
        let Some(tpl) = st.vms.get(&vmid).cloned() else {
            return fail(StatusCode::INTERNAL_SERVER_ERROR, "gone");
        };
        if st.vmid_races > 0 {
            st.vmid_races -= 1;
            // Someone else grabbed the id between our nextid and this clone.
            let racer = SimVm {
                vmid: newid,
                node: node.to_string(),
                name: format!("someone-else-{newid}"),
                template: false,
                config: BTreeMap::from([("name".to_string(), format!("someone-else-{newid}"))]),
                status: "stopped".into(),
                lock: None,
                cloud_init_join: false,
                booted: false,
                joined: false,
                files: BTreeMap::new(),
            };
            st.vms.entry(newid).or_insert(racer);
        }
        if st.vms.contains_key(&newid) {
            return fail(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("unable to create VM {newid}: config file already exists"),
            );
        }
        if !o.hosts.iter().any(|h| h.name == target && h.online) {
            return fail(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("target node '{target}' is not online"),
            );
        }
        let storages: Vec<String> = tpl
            .config
            .iter()
            .filter(|(k, _)| k.starts_with("scsi") && *k != "scsihw" || k.starts_with("ide"))
            .filter_map(|(_, v)| v.split(':').next().map(str::to_string))
            .collect();
        let shared_storage = storages
            .iter()
            .all(|s| o.storages.iter().any(|x| &x.name == s && x.shared));
        if target != node && !shared_storage {
            return fail(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("can't clone VM to node '{target}' (VM uses local storage)"),
            );
        }
        if !full && get("storage").is_some() {
            return fail(
                StatusCode::INTERNAL_SERVER_ERROR,
                "storage migration is only possible with a full clone",
            );
        }
        if !full && !tpl.template {
            return fail(
                StatusCode::INTERNAL_SERVER_ERROR,
                "linked clone feature is not supported for a VM that is not a template",
            );
        }
        if let Some(s) = get("storage") {
            if !o.storages.iter().any(|x| x.name == s) {
                return fail(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    &format!("storage '{s}' does not exist"),
                );
            }
        }
        let mut config = tpl.config.clone();
        config.remove("template");
        let name = get("name").unwrap_or_else(|| format!("Copy-of-VM-{}", tpl.name));
        config.insert("name".into(), name.clone());
        config.insert(
            "meta".into(),
            format!("creation-qemu=9.2.0,ctime={}", now_secs()),
        );
        st.mac_counter += 1;
        let mac = format!(
            "BC:24:11:{:02X}:{:02X}:{:02X}",
            (st.mac_counter >> 16) & 0xff,
            (st.mac_counter >> 8) & 0xff,
            st.mac_counter & 0xff
        );
        if let Some(net0) = config.get("net0").cloned() {
            let rest: Vec<&str> = net0.split(',').skip(1).collect();
            let mut n = format!("virtio={mac}");
            for r in rest {
                n.push(',');
                n.push_str(r);
            }
            config.insert("net0".into(), n);
        }
        st.vms.insert(
            newid,
            SimVm {
                vmid: newid,
                node: target.clone(),
                name,
                template: false,
                config,
                status: "stopped".into(),
                lock: Some("clone".into()),
                cloud_init_join: tpl.cloud_init_join,
                booted: false,
                joined: false,
                files: BTreeMap::new(),
            },
        );
    }
    data(json!(new_task(
        shared,
        node,
        "qmclone",
        vmid,
        newid,
        user,
        o.clone_delay
    )))
}

/// Starts a task; `vmid` names it in the UPID, `target` is the VM its effect applies to
/// (they differ for a clone: the template vs. the new VM).
fn new_task(
    shared: &Arc<Shared>,
    node: &str,
    kind: &str,
    vmid: u32,
    target: u32,
    user: &str,
    delay: Duration,
) -> String {
    let (upid, fail_with) = {
        let mut st = shared.lock();
        st.counter += 1;
        let pid = st.counter;
        let starttime = now_secs();
        let upid = format!(
            "UPID:{node}:{pid:08X}:{:08X}:{starttime:08X}:{kind}:{vmid}:{user}:",
            0x12D687 + pid
        );
        let fail_with = st
            .fail_tasks
            .iter()
            .position(|(k, _)| k == kind)
            .map(|i| st.fail_tasks.remove(i).1);
        st.tasks.insert(
            upid.clone(),
            Task {
                node: node.to_string(),
                running: true,
                exitstatus: None,
                upid: upid.clone(),
                kind: kind.to_string(),
                id: vmid.to_string(),
                user: user.to_string(),
                starttime,
                pid,
            },
        );
        (upid, fail_with)
    };
    let s2 = shared.clone();
    let u2 = upid.clone();
    let kind = kind.to_string();
    tokio::spawn(async move {
        tokio::time::sleep(delay).await;
        finish_task(&s2, &u2, &kind, target, fail_with);
    });
    upid
}

/// Applies a task's effect when it ends.
fn finish_task(shared: &Arc<Shared>, upid: &str, kind: &str, vmid: u32, fail_with: Option<String>) {
    let mut events = Vec::new();
    let mut boot = None;
    {
        let mut st = shared.lock();
        let exit = match (kind, &fail_with) {
            ("qmclone", Some(e)) => {
                // A failed clone leaves nothing behind.
                st.vms.remove(&vmid);
                e.clone()
            }
            (_, Some(e)) => e.clone(),
            ("qmclone", None) => {
                if let Some(vm) = st.vms.get_mut(&vmid) {
                    vm.lock = None;
                }
                "OK".into()
            }
            ("qmstart", None) => {
                if let Some(vm) = st.vms.get_mut(&vmid) {
                    vm.status = "running".into();
                    boot = Some(vmid);
                }
                "OK".into()
            }
            ("qmstop", None) => {
                if let Some(vm) = st.vms.get_mut(&vmid) {
                    vm.status = "stopped".into();
                    vm.booted = false;
                }
                "OK".into()
            }
            ("qmdestroy", None) => {
                if let Some(vm) = st.vms.remove(&vmid) {
                    events.push(VmEvent::Deleted { name: vm.name });
                }
                "OK".into()
            }
            _ => "OK".into(),
        };
        if let Some(t) = st.tasks.get_mut(upid) {
            t.running = false;
            t.exitstatus = Some(exit);
        }
    }
    for e in events {
        shared.fire(e);
    }
    if let Some(id) = boot {
        let s2 = shared.clone();
        let delay = shared.opts.boot_delay;
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            finish_boot(&s2, id);
        });
    }
}

/// The generated user data of a template that joins by itself (see the module docs).
pub fn cloud_init_join_line(name: &str, tags_value: &str) -> String {
    let o = tags::ownership(tags_value);
    format!(
        "#!/bin/sh\n# simulated: the template's own cloud-init join\nk3s agent --node-name={name} --node-label={}={} --node-label={}={} --node-taint={}=true:NoSchedule\n",
        nodewright_core::LABEL_CLUSTER,
        o.cluster.unwrap_or_default(),
        nodewright_core::LABEL_GROUP,
        o.group.unwrap_or_default(),
        nodewright_core::STARTUP_TAINT_KEY,
    )
}

fn finish_boot(shared: &Arc<Shared>, vmid: u32) {
    let event = {
        let mut st = shared.lock();
        let never = st.never_ready.clone();
        let Some(vm) = st.vms.get_mut(&vmid) else {
            return;
        };
        if vm.status != "running" || never.iter().any(|p| vm.name.starts_with(p.as_str())) {
            return;
        }
        vm.booted = true;
        if !vm.cloud_init_join || vm.joined {
            return;
        }
        vm.joined = true;
        VmEvent::Booted {
            name: vm.name.clone(),
            user_data: cloud_init_join_line(&vm.name, vm.tags()),
            memory_bytes: vm.memory_mib() * MIB,
            cpus: vm.cpus(),
        }
    };
    shared.fire(event);
}

fn agent_exec(shared: &Arc<Shared>, vmid: u32, command: Vec<String>) -> Response {
    let (pid, script, code, delay) = {
        let mut st = shared.lock();
        let code = st.join_exit_code;
        st.counter += 1;
        let pid = i64::from(st.counter);
        let Some(vm) = st.vms.get(&vmid) else {
            return fail(StatusCode::INTERNAL_SERVER_ERROR, "gone");
        };
        if !(vm.agent_enabled() && vm.booted && vm.status == "running") {
            return fail(
                StatusCode::INTERNAL_SERVER_ERROR,
                "QEMU guest agent is not running",
            );
        }
        let script = match command.as_slice() {
            [sh, path] if sh.ends_with("sh") => vm.files.get(path).cloned(),
            _ => None,
        };
        st.execs.insert(
            (vmid, pid),
            Exec {
                exited: false,
                exitcode: 0,
            },
        );
        (pid, script, code, shared.opts.exec_delay)
    };
    let s2 = shared.clone();
    tokio::spawn(async move {
        tokio::time::sleep(delay).await;
        let code = if script.is_some() { code } else { 127 };
        let event = {
            let mut st = s2.lock();
            if let Some(e) = st.execs.get_mut(&(vmid, pid)) {
                e.exited = true;
                e.exitcode = code;
            }
            match (st.vms.get_mut(&vmid), script) {
                (Some(vm), Some(script)) if code == 0 && !vm.joined => {
                    vm.joined = true;
                    Some(VmEvent::Booted {
                        name: vm.name.clone(),
                        user_data: script,
                        memory_bytes: vm.memory_mib() * MIB,
                        cpus: vm.cpus(),
                    })
                }
                _ => None,
            }
        };
        if let Some(e) = event {
            s2.fire(e);
        }
    });
    data(json!({ "pid": pid }))
}

mod tls {
    //! HTTPS for the simulator: a TLS-accepting listener for `axum::serve`.

    use std::net::SocketAddr;
    use std::sync::Arc;
    use std::time::Duration;

    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    use tokio::net::{TcpListener, TcpStream};
    use tokio_rustls::server::TlsStream;
    use tokio_rustls::TlsAcceptor;

    use super::SimTls;

    pub fn acceptor(t: &SimTls) -> std::io::Result<TlsAcceptor> {
        let certs: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(t.cert_chain_pem.as_bytes())
                .collect::<Result<_, _>>()
                .map_err(|e| std::io::Error::other(format!("certificate PEM: {e}")))?;
        let key = PrivateKeyDer::from_pem_slice(t.key_pem.as_bytes())
            .map_err(|e| std::io::Error::other(format!("key PEM: {e}")))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(std::io::Error::other)?
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .map_err(std::io::Error::other)?;
        Ok(TlsAcceptor::from(Arc::new(config)))
    }

    pub struct TlsListener {
        pub tcp: TcpListener,
        pub acceptor: TlsAcceptor,
    }

    impl axum::serve::Listener for TlsListener {
        type Io = TlsStream<TcpStream>;
        type Addr = SocketAddr;

        async fn accept(&mut self) -> (Self::Io, Self::Addr) {
            loop {
                let Ok((stream, addr)) = self.tcp.accept().await else {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                // A client that rejects the certificate aborts the handshake: next.
                if let Ok(Ok(tls)) =
                    tokio::time::timeout(Duration::from_secs(5), self.acceptor.accept(stream)).await
                {
                    return (tls, addr);
                }
            }
        }

        fn local_addr(&self) -> std::io::Result<Self::Addr> {
            self.tcp.local_addr()
        }
    }
}

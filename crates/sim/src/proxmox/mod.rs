//! A simulated Proxmox VE cluster: the API subset nodewright uses, on one in-process axum
//! server on 127.0.0.1 (plain HTTP, or HTTPS with a given certificate).
//!
//! **Every request is checked against the official API schema** (see [`schema`]): an
//! unknown path, a method the path lacks, an unknown parameter, or a value that violates
//! its type, format, pattern, range or enum fails with 400 and is recorded in
//! [`SimProxmox::violations`], so tests can assert that there were none.
//! The simulator's own successful answers are checked against the schema's `returns` too
//! (types of documented fields, required fields) and recorded there when they depart.
//! Started with [`SchemaCheck::IfAvailable`] (as `simulate` does) and without the schema
//! file, it routes by its own [`schema::ROUTES`] and checks nothing; the answers are the
//! same.
//!
//! Behaviour: responses are wrapped in `{"data": ..}`; clone, config, start, stop and
//! destroy return UPIDs (`UPID:node:pid:pstart:starttime:type:id:user:`) of tasks that
//! finish after a delay, with `exitstatus` `OK` or an injected error. A started VM boots
//! after `boot_delay`; then its guest agent answers (when `agent` is enabled).
//!
//! Joining ([`VmEvent::Booted`] to the hook):
//! - VMs cloned from a template with `cloud_init_join: true` run cloud-init (NoCloud) at
//!   their first boot, and join only with what really reached the guest:
//!   - a `cicustom` naming a snippet the simulator knows ([`SimProxmoxOptions::snippets`])
//!     on a VM that still has Proxmox's cloud-init drive: `Booted` with a generated user
//!     data, a k3s agent command line carrying the node name, the ownership labels (decoded
//!     from the VM's `nw-c-`/`nw-g-` tags) and the startup taint, as such a snippet would;
//!   - else a CD-ROM whose ISO image (read as a guest reads it, see [`iso`]) is labelled
//!     `cidata` and holds `user-data` and `meta-data`, the only `cidata` drive: `Booted`
//!     with that `user-data`;
//!   - else nothing joins, and [`SimVm::cloud_init_note`] says why.
//!
//!   A VM that joined once registers again at every later boot (its kubelet is installed).
//! - Otherwise `Booted` fires when a script written with `agent/file-write` is run with
//!   `agent/exec` and exits 0; its `user_data` is that script, whose kubelet then starts
//!   at every later boot too.
//!
//! `VmEvent::Stopped` fires when a running VM is stopped (`status/stop`) or shut down
//! (`status/shutdown`): its kubelet stops posting, and its node goes Unknown after the
//! node lifecycle controller's grace period. A reboot (`status/reboot`, refused unless
//! the VM runs, as Proxmox does) fires `Stopped`, then boots the VM again.
//!
//! Storages hold files per host (local) or once (shared): uploads (multipart, as the
//! schema and the real server take them), the content listing and deletes (`storage`).
//!
//! `VmEvent::Deleted` fires when a VM is destroyed.
//!
//! - [`schema`]: the official API schema and request validation.
//! - `answer`: the simulator's answers checked against the schema's `returns`.
//! - `http`: parsing, authentication and each endpoint's answer.
//! - `reply`: the `{"data": ...}` envelope of answers and failures.
//! - `hosts`: what the hosts report: resources, HA (maintenance) and cluster status.
//! - `clone`: the clone call, and the new VM as Proxmox shows it while the disks copy.
//! - `tasks`: tasks (clone, config, start, stop, destroy), boot and the guest agent.
//! - `volumes`: where a storage's volumes live and how a VM reads one (`storage`
//!   serves the storage endpoints).
//! - `tls`: the HTTPS listener.

mod answer;
mod clone;
mod hosts;
mod http;
pub mod iso;
pub mod multipart;
pub mod perms;
mod reads;
mod reply;
pub mod schema;
mod storage;
mod tasks;
pub(crate) mod tls;
mod volumes;

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use axum::Router;

use self::schema::Schema;
use super::faults::{self, Dialect, Faults};
use super::serve::{self, yaml_str, ServerGuard};
use super::{VmEvent, VmHook};

pub use tasks::cloud_init_join_line;
pub use volumes::SharedFiles;

const MIB: u64 = 1024 * 1024;
const GIB: u64 = 1024 * MIB;

/// A Proxmox host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimHost {
    pub name: String,
    /// Logical CPUs (`maxcpu` of the host).
    pub cores: u32,
    pub maxmem: u64,
    /// Memory used by things other than the simulated VMs.
    pub base_mem: u64,
    pub online: bool,
    /// In HA maintenance (`ha-manager crm-command node-maintenance enable`): its LRM
    /// reports `maintenance mode`; clones onto it still work, as on a real cluster.
    pub maintenance: bool,
}

impl SimHost {
    /// An online host with `cores` CPUs and `memory` bytes, 2 GiB of it used by the host.
    pub fn new(name: &str, cores: u32, memory: u64) -> SimHost {
        SimHost {
            name: name.into(),
            cores,
            maxmem: memory,
            base_mem: 2 * GIB,
            online: true,
            maintenance: false,
        }
    }
}

/// A storage; a non-shared one exists separately on every host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimStorage {
    pub name: String,
    pub shared: bool,
    /// Content types it accepts, as Proxmox lists them (`images,rootdir`, `iso,snippets`).
    pub content: String,
}

impl SimStorage {
    pub fn new(name: &str, shared: bool, content: &str) -> SimStorage {
        SimStorage {
            name: name.into(),
            shared,
            content: content.into(),
        }
    }
    pub fn accepts(&self, content: &str) -> bool {
        self.content.split(',').any(|c| c.trim() == content)
    }
}

/// A file on a storage (an uploaded ISO image).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimVolume {
    pub bytes: Vec<u8>,
    /// Unix seconds.
    pub ctime: u64,
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
    /// The template's image runs cloud-init at first boot and joins with the user data it
    /// finds (see the module docs).
    pub cloud_init_join: bool,
}

/// Serve HTTPS with this certificate chain and key (PEM).
#[derive(Clone)]
pub struct SimTls {
    pub cert_chain_pem: String,
    pub key_pem: String,
}

/// Whether the simulator may start without the official API schema file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SchemaCheck {
    /// Refuse to start without it, so that every request is checked (tests).
    #[default]
    Required,
    /// Without it, serve anyway with request and answer checking off (`simulate`): the
    /// answers are the same, only nothing is compared with the schema.
    IfAvailable,
}

/// Options of [`SimProxmox::start`].
#[derive(Clone)]
pub struct SimProxmoxOptions {
    /// Whether the API schema must be present (see [`SchemaCheck`]).
    pub schema: SchemaCheck,
    pub hosts: Vec<SimHost>,
    /// The cluster's name (`GET /cluster/status`); `None`: a single host, no cluster.
    pub cluster_name: Option<String>,
    pub storages: Vec<SimStorage>,
    /// Linux bridges on every host (`GET /nodes/{node}/network`).
    pub bridges: Vec<String>,
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
    /// Answer errors as Proxmox VE did before early 2025: the message only in the status
    /// line's reason phrase (`HTTP/1.1 500 QEMU guest agent is not running`), the body
    /// `{"data": null}` (with `errors` when there are any).
    pub status_line_errors: bool,
    /// Injected faults (none by default); half-done clones and destroys too.
    pub faults: Faults,
    /// Snippet volumes (`local:snippets/k3s-join.yaml`) that hold a working join: a VM
    /// whose `cicustom` names one joins from it (see the module docs).
    pub snippets: Vec<String>,
    /// The files of the shared storages, when they are on a share that another simulated
    /// Proxmox cluster mounts too (an NFS export both list under the same storage name,
    /// each with its own VMs, whose ids overlap); `None`: this cluster's alone.
    pub shared_files: Option<SharedFiles>,
    /// The privileges of the token and the user (granted on `/`); `None`: all of them,
    /// as `root@pam` has. A call without the one it needs gets Proxmox's 403 (see
    /// [`perms`]).
    pub privileges: Option<std::collections::BTreeSet<String>>,
    /// The pve-manager version `GET /version` answers (`9.1.3`; `8.4.1` for a PVE 8).
    pub version: String,
    /// Resource pools (`GET /pools` lists them to a caller holding `Pool.Audit`).
    pub pools: Vec<String>,
}

/// The snippet the default simulator knows (see [`SimProxmoxOptions::snippets`]).
pub const SNIPPET: &str = "local:snippets/k3s-join.yaml";

impl Default for SimProxmoxOptions {
    fn default() -> Self {
        let host = |name: &str, maxmem, base_mem| SimHost {
            name: name.into(),
            cores: 32,
            maxmem,
            base_mem,
            online: true,
            maintenance: false,
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
            schema: SchemaCheck::Required,
            hosts: vec![
                host("pve1", 64 * GIB, 8 * GIB),
                host("pve2", 64 * GIB, 16 * GIB),
                host("pve3", 32 * GIB, 4 * GIB),
            ],
            cluster_name: Some("pve-sim".into()),
            storages: vec![
                // As a fresh install: `local` (a directory) takes ISO images and snippets.
                SimStorage::new("local", false, "iso,vztmpl,backup,snippets"),
                SimStorage::new("local-lvm", false, "images,rootdir"),
                SimStorage::new("ceph", true, "images,rootdir"),
            ],
            snippets: vec![SNIPPET.into()],
            bridges: vec!["vmbr0".into(), "vmbr1".into()],
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
            status_line_errors: false,
            faults: Faults::default(),
            shared_files: None,
            privileges: None,
            version: "9.1.3".into(),
            pools: vec!["k8s".into()],
        }
    }
}

/// A VM as the simulator holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct SimVm {
    pub vmid: u32,
    pub node: String,
    /// Empty while a clone has written only its temporary config (no `name`).
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
    /// The user data (or agent join script) it joined with: the kubelet it installed
    /// registers again at every later boot, seed or not.
    pub installed: Option<String>,
    /// Why its cloud-init found nothing to join with at the last boot, if so.
    pub cloud_init_note: Option<String>,
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
    /// Unix seconds when it stopped.
    endtime: Option<u64>,
    pid: u32,
    /// The VM the task acts on (the new VM of a clone, not its template).
    target: u32,
    /// The task log, one entry a line, ending in `TASK OK` or `TASK ERROR: ...`.
    log: Vec<String>,
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
    /// How the next clones progress (a clone with none left takes `clone_delay`).
    clone_paces: Vec<tasks::ClonePace>,
    /// Running clones end OK when a host's task list is next read (see
    /// [`SimProxmox::finish_clones_at_next_task_list`]).
    finish_clones_at_task_list: bool,
    /// What each clone under way makes once its disks are copied, by new VM id.
    clones: HashMap<u32, SimVm>,
    fail_deletes: usize,
    never_ready: Vec<String>,
    vmid_races: usize,
    join_exit_code: i64,
    execs: HashMap<(u32, i64), Exec>,
    counter: u32,
    mac_counter: u32,
    /// Files on storages by (location, volume id): the host for a local storage, `""`
    /// for a shared one.
    volumes: BTreeMap<(String, String), SimVolume>,
}

struct Shared {
    opts: SimProxmoxOptions,
    addr: SocketAddr,
    state: Mutex<St>,
    schema: Arc<Schema>,
    /// Why requests are not checked (the schema file could not be read), if so.
    unchecked: Option<String>,
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

/// The schema to serve with, and why nothing is checked if so: a missing schema is an
/// error when `mode` requires it (naming the file and `PVE_API_SCHEMA`).
fn choose_schema(
    loaded: Result<Arc<Schema>, String>,
    mode: SchemaCheck,
) -> std::io::Result<(Arc<Schema>, Option<String>)> {
    match (loaded, mode) {
        (Ok(s), _) => Ok((s, None)),
        (Err(e), SchemaCheck::Required) => Err(std::io::Error::other(e)),
        (Err(e), SchemaCheck::IfAvailable) => Ok((Arc::new(Schema::routes_only()), Some(e))),
    }
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl SimProxmox {
    /// Starts the simulator on 127.0.0.1 with an ephemeral port. Fails when the API
    /// schema cannot be read (see [`schema::schema_path`]) unless `opts.schema` is
    /// [`SchemaCheck::IfAvailable`].
    pub async fn start(opts: SimProxmoxOptions) -> std::io::Result<SimProxmox> {
        let (schema, unchecked) = choose_schema(Schema::load(), opts.schema)?;
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
                    installed: None,
                    cloud_init_note: None,
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
                clone_paces: Vec::new(),
                finish_clones_at_task_list: false,
                clones: HashMap::new(),
                fail_deletes: 0,
                never_ready: Vec::new(),
                vmid_races: 0,
                join_exit_code: 0,
                execs: HashMap::new(),
                counter: 0x1000,
                mac_counter: 0,
                volumes: BTreeMap::new(),
            }),
            opts,
            addr,
            schema,
            unchecked,
        });
        let app = Router::new()
            .fallback(http::handle)
            .layer(axum::middleware::from_fn_with_state(
                (shared.opts.faults.clone(), Dialect::Proxmox),
                faults::inject,
            ))
            .with_state(shared.clone());
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

    /// Why requests are not checked against the API schema (it could not be read, and
    /// the simulator was started with [`SchemaCheck::IfAvailable`]); `None` when they are.
    pub fn schema_unchecked(&self) -> Option<&str> {
        self.shared.unchecked.as_deref()
    }

    /// Writes a credentials file for API-token authentication.
    /// Over HTTPS it pins the certificate (`fingerprint:`), as for a self-signed host.
    pub fn write_credentials_file(&self, path: &Path) -> std::io::Result<()> {
        let o = &self.shared.opts;
        let pin = o
            .tls
            .as_ref()
            .and_then(SimTls::fingerprint)
            .map(|f| format!("fingerprint: {}\n", yaml_str(&f)))
            .unwrap_or_default();
        std::fs::write(
            path,
            format!(
                "url: {}\ntokenId: {}\ntokenSecret: {}\n{pin}",
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

    /// The next `n` clones copy slowly: one log line (`transferred ...`) every `every`,
    /// `lines` of them, then they end OK; a deadline that follows the log keeps them.
    pub fn slow_next_clones(&self, n: usize, lines: u32, every: Duration) {
        let mut st = self.shared.lock();
        for _ in 0..n {
            st.clone_paces.push(tasks::ClonePace::Slow { lines, every });
        }
    }

    /// The next `n` clones hang after their first log line and run until stopped
    /// (`DELETE /nodes/{node}/tasks/{upid}`), as a clone stuck on its storage does.
    pub fn stick_next_clones(&self, n: usize) {
        let mut st = self.shared.lock();
        for _ in 0..n {
            st.clone_paces.push(tasks::ClonePace::Stuck);
        }
    }

    /// Every clone still running ends OK just before the next `GET /nodes/{node}/tasks`
    /// is answered: a clone that ends between a client's VM listing and its task-list
    /// read, which a busy client meets at random.
    pub fn finish_clones_at_next_task_list(&self) {
        self.shared.lock().finish_clones_at_task_list = true;
    }

    /// Log lines of every task of `kind` so far, oldest task first.
    pub fn task_logs(&self, kind: &str) -> Vec<Vec<String>> {
        let st = self.shared.lock();
        let mut t: Vec<&Task> = st.tasks.values().filter(|t| t.kind == kind).collect();
        t.sort_by_key(|t| t.pid);
        t.into_iter().map(|t| t.log.clone()).collect()
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

    /// The files on `storage` as seen from `node`: (volume id, bytes).
    pub fn volumes(&self, node: &str, storage: &str) -> Vec<(String, Vec<u8>)> {
        let mut st = self.shared.lock();
        let loc = volumes::location(&self.shared.opts, storage, node);
        let files = volumes::files(&self.shared.opts, &mut st, &loc);
        files
            .iter()
            .filter(|((l, v), _)| *l == loc && v.starts_with(&format!("{storage}:")))
            .map(|((_, v), vol)| (v.clone(), vol.bytes.clone()))
            .collect()
    }

    /// Every file on every storage: (location, volume id), location `""` when shared.
    pub fn all_volumes(&self) -> Vec<(String, String)> {
        let mut st = self.shared.lock();
        let mut all: Vec<(String, String)> = st.volumes.keys().cloned().collect();
        if self.shared.opts.shared_files.is_some() {
            all.extend(
                volumes::files(&self.shared.opts, &mut st, "")
                    .keys()
                    .cloned(),
            );
        }
        all
    }

    /// Puts a file on `storage` directly (as someone's upload), created at `ctime`.
    pub fn put_volume(&self, node: &str, storage: &str, file: &str, bytes: Vec<u8>, ctime: u64) {
        let loc = volumes::location(&self.shared.opts, storage, node);
        volumes::files(&self.shared.opts, &mut self.shared.lock(), &loc).insert(
            (loc.clone(), format!("{storage}:iso/{file}")),
            SimVolume { bytes, ctime },
        );
    }

    /// Sets one configuration value of VM `vmid` directly (e.g. the `description` a
    /// person wrote); does nothing when there is no such VM.
    pub fn set_config(&self, vmid: u32, key: &str, value: &str) {
        if let Some(vm) = self.shared.lock().vms.get_mut(&vmid) {
            vm.config.insert(key.to_string(), value.to_string());
        }
    }

    /// Removes one configuration value of VM `vmid` directly (e.g. to move a template's
    /// cloud-init drive); does nothing when there is no such VM.
    pub fn unset_config(&self, vmid: u32, key: &str) {
        if let Some(vm) = self.shared.lock().vms.get_mut(&vmid) {
            vm.config.remove(key);
        }
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
                installed: None,
                cloud_init_note: None,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Tests start the simulator with the default mode: without the schema it refuses to
    /// start, so checking can never be silently off in a test.
    #[test]
    fn a_missing_schema_fails_loudly_unless_the_simulator_may_run_unchecked() {
        assert_eq!(SimProxmoxOptions::default().schema, SchemaCheck::Required);
        let missing = || Err("cannot read the Proxmox API schema /x (set PVE_API_SCHEMA)".into());
        let err = choose_schema(missing(), SchemaCheck::Required)
            .err()
            .expect("refused");
        assert!(err.to_string().contains("PVE_API_SCHEMA"), "{err}");
        let (schema, why) = choose_schema(missing(), SchemaCheck::IfAvailable).expect("serves");
        assert!(!schema.is_checked());
        assert!(why.is_some_and(|w| w.contains("/x")));
    }
}

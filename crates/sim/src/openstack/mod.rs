//! A simulated OpenStack: Keystone v3, Nova, Glance and Neutron on one in-process
//! axum server on 127.0.0.1, matching the real APIs' request and response shapes.
//!
//! Paths: Keystone under `/identity/v3`, Nova under `/compute/v2.1`, Glance under
//! `/image` and Neutron under `/network`, all listed in the token's catalog.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use axum::routing::{get, post};
use axum::Router;

use super::faults::{self, Dialect, Faults, HalfDone};
use super::serve::{self, yaml_str, ServerGuard};
use super::{VmEvent, VmHook};

mod actions;
mod catalog;
mod discovery;
mod http;
mod keystone;
mod lists;
mod neutron;
mod servers;
mod tags;

use actions::*;
use catalog::*;
use discovery::*;
use http::*;
use keystone::*;
use lists::*;
use neutron::*;
use servers::*;
use tags::*;

/// A flavor: `ram` in MiB as Nova reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimFlavor {
    pub id: String,
    pub name: String,
    pub ram_mib: u64,
    pub vcpus: u32,
    pub disk_gb: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimImage {
    pub id: String,
    pub name: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimNetwork {
    pub id: String,
    pub name: String,
    /// Subnet ids. Real Nova refuses to boot on a network without a subnet.
    pub subnets: Vec<String>,
}

/// A server group of the project (`GET /os-server-groups`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimServerGroup {
    pub id: String,
    pub name: String,
    /// `anti-affinity`, `affinity`, `soft-anti-affinity` or `soft-affinity`.
    pub policy: String,
}

/// A Neutron security group of the project.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimSecurityGroup {
    pub id: String,
    pub name: String,
}

/// An application credential of the simulated user, scoped to the project.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimAppCredential {
    pub id: String,
    pub name: String,
    pub secret: String,
}

/// What an injected create failure looks like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreateFailure {
    /// `403 forbidden` "Quota exceeded for instances ...".
    Quota,
    /// `500 computeFault`.
    ServerError,
    /// Accepted (202), then the server goes to ERROR with fault "No valid host was found."
    NoValidHost,
    /// Accepted (202), then the server goes to ERROR with a 413 fault "Quota exceeded for
    /// instances ...": real Nova's quota recheck after scheduling, which catches creates
    /// that raced past the API's quota check (e.g. several at once).
    QuotaOnRecheck,
}

/// Options of [`SimOpenStack::start`].
#[derive(Clone)]
pub struct SimOpenStackOptions {
    /// How long a server stays BUILD before it goes ACTIVE.
    pub boot_delay: Duration,
    /// How long a deleted server shows `task_state: deleting` before it disappears.
    pub delete_delay: Duration,
    pub flavors: Vec<SimFlavor>,
    /// Extra specs by flavor id (`GET /flavors/{id}/os-extra_specs`); none by default.
    pub flavor_extra_specs: BTreeMap<String, BTreeMap<String, String>>,
    pub images: Vec<SimImage>,
    pub networks: Vec<SimNetwork>,
    /// Server groups of the project; a create naming another one in its `group`
    /// scheduler hint is refused with 400, as real Nova does.
    pub server_groups: Vec<SimServerGroup>,
    /// Key pairs of the user, by name; a create naming another is refused with 400.
    pub key_pairs: Vec<String>,
    /// Security groups of the project; a create naming another is refused with 400.
    pub security_groups: Vec<SimSecurityGroup>,
    /// Available zones; a create asking for another is refused with 400.
    pub availability_zones: Vec<String>,
    /// Told when a server boots (goes ACTIVE) and when it is deleted.
    pub hook: Option<VmHook>,
    pub username: String,
    pub password: String,
    /// Domain of the user and the project (by name; the id is its lowercase form).
    pub domain: String,
    /// Project name.
    pub project: String,
    pub project_id: String,
    pub region: String,
    pub app_credentials: Vec<SimAppCredential>,
    /// Lifetime of issued tokens.
    pub token_lifetime: Duration,
    /// Nova's max page size for `GET /servers/detail` (`servers_links` beyond it).
    pub page_size: usize,
    /// Instance quota of the project.
    pub max_instances: Option<usize>,
    /// Injected faults (none by default); half-done creates and deletes too.
    pub faults: Faults,
}

impl Default for SimOpenStackOptions {
    fn default() -> Self {
        let flavor = |id: &str, name: &str, ram_mib, vcpus, disk_gb| SimFlavor {
            id: id.into(),
            name: name.into(),
            ram_mib,
            vcpus,
            disk_gb,
        };
        SimOpenStackOptions {
            boot_delay: Duration::from_millis(200),
            // Real Nova (fake driver) keeps listing a deleted server, task_state
            // "deleting", for about 300 ms after the 204.
            delete_delay: Duration::from_millis(300),
            flavors: vec![
                flavor("2", "m1.small", 2048, 1, 20),
                flavor("3", "m1.medium", 4096, 2, 40),
                flavor("4", "m1.large", 8192, 4, 80),
            ],
            flavor_extra_specs: BTreeMap::new(),
            images: vec![
                SimImage {
                    id: "5b0e4a8c-7f3d-4e61-9d3a-2c1f0b9e8a01".into(),
                    name: "fedora-coreos".into(),
                },
                SimImage {
                    id: "9c2d7e1f-3a4b-4c5d-8e6f-7a8b9c0d1e02".into(),
                    name: "ubuntu-24.04".into(),
                },
            ],
            networks: vec![SimNetwork {
                id: "e3f1c2d4-5b6a-4789-9abc-def012345603".into(),
                name: "private".into(),
                subnets: vec!["7a0c5b1e-2d3f-4e5a-8b6c-9d0e1f2a3b04".into()],
            }],
            server_groups: vec![
                SimServerGroup {
                    id: "3f9e2c1a-8b7d-4c6e-9f05-1a2b3c4d5e06".into(),
                    name: "k8s-workers".into(),
                    policy: "anti-affinity".into(),
                },
                SimServerGroup {
                    id: "c0d1e2f3-a4b5-4c6d-8e7f-809112233407".into(),
                    name: "k8s-spread".into(),
                    policy: "soft-anti-affinity".into(),
                },
            ],
            key_pairs: vec!["ops".into()],
            security_groups: vec![
                SimSecurityGroup {
                    id: "5e1f0c2a-6b3d-4e7f-8a9b-0c1d2e3f4a08".into(),
                    name: "default".into(),
                },
                SimSecurityGroup {
                    id: "8d2e1f3a-7c4b-4d5e-9f6a-1b2c3d4e5f09".into(),
                    name: "k8s-nodes".into(),
                },
            ],
            availability_zones: vec!["nova".into(), "az-1".into(), "az-2".into(), "az-3".into()],
            hook: None,
            username: "nodewright".into(),
            password: "sim-password".into(),
            domain: "Default".into(),
            project: "demo".into(),
            project_id: "0f1e2d3c4b5a69788796a5b4c3d2e1f0".into(),
            region: "RegionOne".into(),
            app_credentials: vec![SimAppCredential {
                id: "a1b2c3d4e5f60718293a4b5c6d7e8f90".into(),
                name: "nodewright-app".into(),
                secret: "sim-app-secret".into(),
            }],
            token_lifetime: Duration::from_secs(3600),
            page_size: 1000,
            max_instances: None,
            faults: Faults::default(),
        }
    }
}

/// A server as the simulator holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct SimServer {
    pub id: String,
    pub name: String,
    /// Nova status: BUILD, ACTIVE, SHUTOFF, ERROR.
    pub status: String,
    pub task_state: Option<String>,
    pub flavor_id: String,
    pub image_id: String,
    /// Network ids; empty for `"networks": "none"`.
    pub networks: Vec<String>,
    pub metadata: BTreeMap<String, String>,
    /// Base64-decoded user data.
    pub user_data: Option<String>,
    pub key_name: Option<String>,
    pub security_groups: Vec<String>,
    pub availability_zone: Option<String>,
    /// Server group id from the `os:scheduler_hints` of the create.
    pub server_group: Option<String>,
    /// Tags given on create (microversion ≥2.52).
    pub tags: Vec<String>,
    pub fault: Option<String>,
    pub created: SystemTime,
}

/// One request the simulator received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimCall {
    pub method: String,
    pub path: String,
    pub query: Option<String>,
    /// Value of `OpenStack-API-Version` (or `X-OpenStack-Nova-API-Version`).
    pub microversion: Option<String>,
}

struct State_ {
    servers: Vec<SimServer>,
    tokens: HashMap<String, SystemTime>,
    tokens_issued: usize,
    calls: Vec<SimCall>,
    fail_creates: Vec<CreateFailure>,
    fail_deletes: usize,
    never_boot: Vec<String>,
    /// Servers that go to ERROR instead of ACTIVE, with their fault message.
    late_faults: HashMap<String, String>,
    /// Servers whose cell is unreachable: Nova knows only what its API database keeps
    /// (id, project, creation time), see [`SimOpenStack::set_cell_down`].
    down_cell: std::collections::HashSet<String>,
    counter: u64,
    token_lifetime: Duration,
}

struct Shared {
    opts: SimOpenStackOptions,
    addr: SocketAddr,
    state: Mutex<State_>,
    /// Seconds the cloud's clock is ahead of the wall clock ([`SimOpenStack::advance_clock`]).
    clock_ahead: std::sync::atomic::AtomicU64,
}

impl Shared {
    /// The cloud's clock: the wall clock, moved ahead by [`SimOpenStack::advance_clock`].
    fn now(&self) -> SystemTime {
        let ahead = self.clock_ahead.load(std::sync::atomic::Ordering::Relaxed);
        SystemTime::now() + std::time::Duration::from_secs(ahead)
    }

    fn lock(&self) -> MutexGuard<'_, State_> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn base(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn fire(&self, event: VmEvent) {
        if let Some(hook) = &self.opts.hook {
            hook(event);
        }
    }
}

/// Handle to a running simulated OpenStack; clones share it. The server stops when
/// the last handle is dropped.
#[derive(Clone)]
pub struct SimOpenStack {
    shared: Arc<Shared>,
    _guard: Arc<ServerGuard>,
}

fn pseudo_uuid(counter: u64) -> String {
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos() as u64;
    let mix = nanos ^ counter.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        (mix >> 32) as u32,
        (mix >> 16) as u16,
        counter & 0xfff,
        (mix >> 4) & 0xfff,
        counter & 0xffff_ffff_ffff
    )
}

fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

impl SimOpenStack {
    /// Starts the simulator on 127.0.0.1 with an ephemeral port.
    pub async fn start(opts: SimOpenStackOptions) -> std::io::Result<SimOpenStack> {
        let (listener, addr) = serve::bind_local().await?;
        let shared = Arc::new(Shared {
            clock_ahead: std::sync::atomic::AtomicU64::new(0),
            state: Mutex::new(State_ {
                servers: Vec::new(),
                tokens: HashMap::new(),
                tokens_issued: 0,
                calls: Vec::new(),
                fail_creates: Vec::new(),
                fail_deletes: 0,
                never_boot: Vec::new(),
                late_faults: HashMap::new(),
                down_cell: Default::default(),
                counter: 0,
                token_lifetime: opts.token_lifetime,
            }),
            opts,
            addr,
        });
        let app = router(shared.clone());
        Ok(SimOpenStack {
            shared,
            _guard: serve::spawn(listener, app, "simulated OpenStack"),
        })
    }

    /// Keystone URL, `http://127.0.0.1:PORT/identity/v3`.
    pub fn auth_url(&self) -> String {
        format!("{}/identity/v3", self.shared.base())
    }

    pub fn options(&self) -> &SimOpenStackOptions {
        &self.shared.opts
    }

    /// Writes an `OS_*` credentials file for password authentication, in the form
    /// users have (`OS_TENANT_ID`, `OS_REGION`, `OS_IDENTITY_API_VERSION: 3`).
    pub fn write_credentials_file(&self, path: &Path) -> std::io::Result<()> {
        let o = &self.shared.opts;
        let text = format!(
            "OS_AUTH_URL: {}\nOS_IDENTITY_API_VERSION: 3\nOS_USERNAME: {}\nOS_PASSWORD: {}\nOS_USER_DOMAIN_NAME: {}\nOS_TENANT_ID: {}\nOS_TENANT_NAME: {}\nOS_REGION: {}\n",
            yaml_str(&self.auth_url()),
            yaml_str(&o.username),
            yaml_str(&o.password),
            yaml_str(&o.domain),
            yaml_str(&o.project_id),
            yaml_str(&o.project),
            yaml_str(&o.region),
        );
        std::fs::write(path, text)
    }

    /// Writes an `OS_*` credentials file using the first application credential.
    pub fn write_app_credentials_file(&self, path: &Path) -> std::io::Result<()> {
        let o = &self.shared.opts;
        let Some(app) = o.app_credentials.first() else {
            return Err(std::io::Error::other(
                "the simulator has no application credential",
            ));
        };
        let text = format!(
            "OS_AUTH_TYPE: v3applicationcredential\nOS_AUTH_URL: {}\nOS_IDENTITY_API_VERSION: 3\nOS_APPLICATION_CREDENTIAL_ID: {}\nOS_APPLICATION_CREDENTIAL_SECRET: {}\nOS_REGION_NAME: {}\nOS_INTERFACE: public\n",
            yaml_str(&self.auth_url()),
            yaml_str(&app.id),
            yaml_str(&app.secret),
            yaml_str(&o.region),
        );
        std::fs::write(path, text)
    }

    /// Moves the cloud's clock `by` ahead (whole seconds) of the wall clock: what it
    /// stamps (server creation, token expiry) and checks against. Boot and task delays
    /// keep real time.
    pub fn advance_clock(&self, by: std::time::Duration) {
        self.shared
            .clock_ahead
            .fetch_add(by.as_secs(), std::sync::atomic::Ordering::Relaxed);
    }

    /// All servers, oldest first.
    pub fn servers(&self) -> Vec<SimServer> {
        self.shared.lock().servers.clone()
    }

    /// Every request received so far, in order.
    pub fn calls(&self) -> Vec<SimCall> {
        self.shared.lock().calls.clone()
    }

    /// How many tokens Keystone has issued.
    pub fn tokens_issued(&self) -> usize {
        self.shared.lock().tokens_issued
    }

    /// Revokes every issued token (the next API call gets 401).
    pub fn revoke_tokens(&self) {
        self.shared.lock().tokens.clear();
    }

    /// Changes the lifetime of tokens issued from now on.
    pub fn set_token_lifetime(&self, lifetime: Duration) {
        self.shared.lock().token_lifetime = lifetime;
    }

    /// The next `n` creates fail as `kind`.
    pub fn fail_next_creates(&self, n: usize, kind: CreateFailure) {
        let mut st = self.shared.lock();
        st.fail_creates.extend(std::iter::repeat_n(kind, n));
    }

    /// The next `n` deletes fail with 500.
    pub fn fail_next_deletes(&self, n: usize) {
        self.shared.lock().fail_deletes += n;
    }

    /// Servers whose name starts with `name_prefix` stay BUILD forever (`""`: all).
    pub fn never_boot(&self, name_prefix: impl Into<String>) {
        self.shared.lock().never_boot.push(name_prefix.into());
    }

    /// Sets (`Some`) or removes (`None`) a metadata key of server `id`, as a person with
    /// `openstack server set --property` (or `unset`) would.
    pub fn set_metadata(&self, id: &str, key: &str, value: Option<&str>) {
        let mut st = self.shared.lock();
        if let Some(s) = st.servers.iter_mut().find(|s| s.id == id) {
            match value {
                Some(v) => {
                    s.metadata.insert(key.to_string(), v.to_string());
                }
                None => {
                    s.metadata.remove(key);
                }
            }
        }
    }

    /// Puts server `id` in a cell that cannot be reached (`down`) or back. As real Nova
    /// (microversion ≥2.69) lists such a server as a partial record: `id`, `status`
    /// `UNKNOWN`, `tenant_id`, `created` and `links` in `GET /servers/detail`, no name,
    /// metadata or tags; `GET /servers/{id}` adds `user_id`, `image`, `flavor`, the zone
    /// and power state 0. Below 2.69 the list leaves it out (Nova's default,
    /// `list_records_by_skipping_down_cells`), and showing it is a 503.
    pub fn set_cell_down(&self, id: &str, down: bool) {
        let mut st = self.shared.lock();
        if down {
            st.down_cell.insert(id.to_string());
        } else {
            st.down_cell.remove(id);
        }
    }

    /// Replaces the tags of server `id` (`openstack server set --tag`).
    pub fn set_tags(&self, id: &str, tags: &[&str]) {
        let mut st = self.shared.lock();
        if let Some(s) = st.servers.iter_mut().find(|s| s.id == id) {
            s.tags = tags.iter().map(|t| t.to_string()).collect();
        }
    }

    /// Adds a server directly, e.g. one of another cluster or untagged.
    pub fn insert_server(&self, name: &str, metadata: BTreeMap<String, String>) -> String {
        let o = &self.shared.opts;
        let mut st = self.shared.lock();
        st.counter += 1;
        let id = pseudo_uuid(st.counter);
        st.servers.push(SimServer {
            id: id.clone(),
            name: name.into(),
            status: "ACTIVE".into(),
            task_state: None,
            flavor_id: o.flavors.first().map(|f| f.id.clone()).unwrap_or_default(),
            image_id: o.images.first().map(|i| i.id.clone()).unwrap_or_default(),
            networks: Vec::new(),
            metadata,
            user_data: None,
            key_name: None,
            security_groups: Vec::new(),
            availability_zone: None,
            server_group: None,
            tags: Vec::new(),
            fault: None,
            created: self.shared.now(),
        });
        id
    }
}

// ---------------------------------------------------------------------------
// HTTP

fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/identity", get(keystone_root))
        .route("/identity/", get(keystone_root))
        .route("/identity/v3", get(keystone_version))
        .route("/identity/v3/", get(keystone_version))
        .route("/compute", get(nova_root))
        .route("/compute/", get(nova_root))
        .route("/compute/v2.1", get(nova_version))
        .route("/compute/v2.1/", get(nova_version))
        .route("/image", get(glance_root))
        .route("/image/", get(glance_root))
        .route("/network", get(neutron_root))
        .route("/network/", get(neutron_root))
        .route("/identity/v3/auth/tokens", post(issue_token))
        .route("/compute/v2.1/flavors", get(list_flavors_brief))
        .route("/compute/v2.1/flavors/detail", get(list_flavors))
        .route(
            "/compute/v2.1/flavors/{id}/os-extra_specs",
            get(flavor_extra_specs),
        )
        .route("/compute/v2.1/flavors/{id}", get(show_flavor))
        .route("/compute/v2.1/os-server-groups", get(list_server_groups))
        .route(
            "/compute/v2.1/os-server-groups/{id}",
            get(show_server_group),
        )
        .route("/compute/v2.1/os-keypairs/{name}", get(show_key_pair))
        .route(
            "/compute/v2.1/os-availability-zone",
            get(list_availability_zones),
        )
        .route(
            "/compute/v2.1/servers",
            get(list_servers_brief).post(create_server),
        )
        .route("/compute/v2.1/servers/detail", get(list_servers))
        .route(
            "/compute/v2.1/servers/{id}",
            get(show_server).delete(delete_server),
        )
        .route("/compute/v2.1/servers/{id}/action", post(server_action))
        .route(
            "/compute/v2.1/servers/{id}/tags",
            get(list_tags).put(replace_tags).delete(delete_tags),
        )
        .route(
            "/compute/v2.1/servers/{id}/tags/{tag}",
            get(check_tag).put(add_tag).delete(delete_tag),
        )
        .route("/compute/v2.1/servers/{id}/metadata", post(update_metadata))
        .route(
            "/compute/v2.1/servers/{id}/metadata/{key}",
            axum::routing::delete(delete_metadata_item),
        )
        .route("/image/v2/images", get(list_images))
        .route("/image/v2/images/{id}", get(show_image))
        .route("/network/v2.0/networks", get(list_networks))
        .route("/network/v2.0/networks/{id}", get(show_network))
        .route("/network/v2.0/security-groups", get(list_security_groups))
        .route("/network/v2.0/subnets", get(list_subnets))
        .route("/network/v2.0/subnets/{id}", get(show_subnet))
        .route("/network/v2.0/ports", get(list_ports))
        .route("/network/v2.0/ports/{id}", get(show_port))
        .layer(axum::middleware::from_fn_with_state(
            shared.clone(),
            record_call,
        ))
        .layer(axum::middleware::from_fn_with_state(
            (shared.opts.faults.clone(), Dialect::Nova),
            faults::inject,
        ))
        .with_state(shared)
}

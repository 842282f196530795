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

use axum::body::Bytes;
use axum::extract::{Path as UrlPath, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine as _;
use serde_json::{json, Map, Value};

use super::faults::{self, Dialect, Faults, HalfDone};
use super::serve::{self, yaml_str, ServerGuard};
use super::{VmEvent, VmHook};

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
    pub images: Vec<SimImage>,
    pub networks: Vec<SimNetwork>,
    /// Server groups of the project; a create naming another one in its `group`
    /// scheduler hint is refused with 400, as real Nova does.
    pub server_groups: Vec<SimServerGroup>,
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
    /// Nova status: BUILD, ACTIVE, ERROR.
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
    counter: u64,
    token_lifetime: Duration,
}

struct Shared {
    opts: SimOpenStackOptions,
    addr: SocketAddr,
    state: Mutex<State_>,
}

impl Shared {
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
            state: Mutex::new(State_ {
                servers: Vec::new(),
                tokens: HashMap::new(),
                tokens_issued: 0,
                calls: Vec::new(),
                fail_creates: Vec::new(),
                fail_deletes: 0,
                never_boot: Vec::new(),
                late_faults: HashMap::new(),
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
            created: SystemTime::now(),
        });
        id
    }
}

// ---------------------------------------------------------------------------
// HTTP

fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/identity/v3/auth/tokens", post(issue_token))
        .route("/compute/v2.1/flavors/detail", get(list_flavors))
        .route("/compute/v2.1/flavors/{id}", get(show_flavor))
        .route("/compute/v2.1/os-server-groups", get(list_server_groups))
        .route("/compute/v2.1/servers", post(create_server))
        .route("/compute/v2.1/servers/detail", get(list_servers))
        .route(
            "/compute/v2.1/servers/{id}",
            get(show_server).delete(delete_server),
        )
        .route("/image/v2/images", get(list_images))
        .route("/image/v2/images/{id}", get(show_image))
        .route("/network/v2.0/networks", get(list_networks))
        .route("/network/v2.0/networks/{id}", get(show_network))
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

/// Logs every request; for Nova also negotiates the microversion like the real API
/// (406 outside 2.1..=2.96, the chosen version echoed in the response headers).
async fn record_call(State(shared): State<Arc<Shared>>, req: Request, next: Next) -> Response {
    let call = call_of(&req);
    let is_nova = call.path.starts_with("/compute/");
    shared.lock().calls.push(call);
    if !is_nova {
        return next.run(req).await;
    }
    let requested = req
        .headers()
        .get("openstack-api-version")
        .or_else(|| req.headers().get("x-openstack-nova-api-version"))
        .is_some();
    let mv = microversion(req.headers());
    if requested && !(MIN_MICROVERSION..=MAX_MICROVERSION).contains(&mv) {
        return (
            StatusCode::NOT_ACCEPTABLE,
            Json(json!({ "computeFault": { "code": 406, "message": format!(
                "Version {}.{} is not supported by the API. Minimum is {}.{} and maximum is {}.{}.",
                mv.0, mv.1, MIN_MICROVERSION.0, MIN_MICROVERSION.1, MAX_MICROVERSION.0, MAX_MICROVERSION.1
            ) } })),
        )
            .into_response();
    }
    let mut resp = next.run(req).await;
    let h = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&format!("compute {}.{}", mv.0, mv.1)) {
        h.insert("OpenStack-API-Version", v);
    }
    if let Ok(v) = HeaderValue::from_str(&format!("{}.{}", mv.0, mv.1)) {
        h.insert("X-OpenStack-Nova-API-Version", v);
    }
    h.insert(
        "Vary",
        HeaderValue::from_static("OpenStack-API-Version, X-OpenStack-Nova-API-Version"),
    );
    resp
}

const MIN_MICROVERSION: (u32, u32) = (2, 1);
const MAX_MICROVERSION: (u32, u32) = (2, 96);

fn call_of(req: &Request) -> SimCall {
    let header = |name: &str| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    SimCall {
        method: req.method().to_string(),
        path: req.uri().path().to_string(),
        query: req.uri().query().map(str::to_string),
        microversion: header("openstack-api-version")
            .or_else(|| header("x-openstack-nova-api-version")),
    }
}

fn nova_error(status: StatusCode, kind: &str, message: &str) -> Response {
    (
        status,
        Json(json!({ kind: { "code": status.as_u16(), "message": message } })),
    )
        .into_response()
}

fn unauthorized() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        [("WWW-Authenticate", "Keystone uri=\"/identity\"")],
        Json(json!({ "error": {
            "code": 401,
            "title": "Unauthorized",
            "message": "The request you have made requires authentication.",
        } })),
    )
        .into_response()
}

/// Checks `X-Auth-Token`: `Some` is the 401 response to send.
fn unauthorized_unless_token(shared: &Shared, headers: &HeaderMap) -> Option<Response> {
    let valid = headers
        .get("x-auth-token")
        .and_then(|v| v.to_str().ok())
        .and_then(|token| shared.lock().tokens.get(token).copied())
        .is_some_and(|exp| exp > SystemTime::now());
    if valid {
        None
    } else {
        Some(unauthorized())
    }
}

/// The requested compute microversion, as (major, minor); 2.1 when absent.
fn microversion(headers: &HeaderMap) -> (u32, u32) {
    let raw = headers
        .get("openstack-api-version")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().strip_prefix("compute").map(str::trim))
        .or_else(|| {
            headers
                .get("x-openstack-nova-api-version")
                .and_then(|v| v.to_str().ok())
        });
    match raw.map(str::trim) {
        None => MIN_MICROVERSION,
        Some("latest") => MAX_MICROVERSION,
        Some(v) => v
            .split_once('.')
            .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)))
            // Unparseable: outside the supported range, so rejected with 406.
            .unwrap_or((0, 0)),
    }
}

fn domain_matches(want: &str, given: &Value) -> bool {
    if let Some(id) = given.get("id").and_then(Value::as_str) {
        return id == want.to_ascii_lowercase();
    }
    given.get("name").and_then(Value::as_str) == Some(want)
}

async fn issue_token(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    let o = &shared.opts;
    let bad = |m: &str| {
        (
            StatusCode::BAD_REQUEST,
            Json(json!({ "error": { "code": 400, "title": "Bad Request", "message": m } })),
        )
            .into_response()
    };
    let denied = || {
        (
            StatusCode::UNAUTHORIZED,
            Json(json!({ "error": {
                "code": 401,
                "title": "Unauthorized",
                "message": "The request you have made requires authentication.",
            } })),
        )
            .into_response()
    };
    let Ok(v) = serde_json::from_slice::<Value>(&body) else {
        return bad("Expecting to find auth in request body.");
    };
    let identity = &v["auth"]["identity"];
    let Some(methods) = identity["methods"].as_array() else {
        return bad("Expecting to find identity.methods in auth.");
    };
    let method = methods.first().and_then(Value::as_str).unwrap_or("");
    let user_ok = |user: &Value| {
        user["name"].as_str() == Some(o.username.as_str())
            && domain_matches(&o.domain, &user["domain"])
    };
    let (ok, scoped, method_name) = match method {
        "password" => {
            let user = &identity["password"]["user"];
            let ok = user_ok(user) && user["password"].as_str() == Some(o.password.as_str());
            let project = &v["auth"]["scope"]["project"];
            let scoped = if project.is_null() {
                false
            } else if let Some(id) = project["id"].as_str() {
                if id != o.project_id {
                    return denied();
                }
                true
            } else if project["name"].as_str() == Some(o.project.as_str())
                && domain_matches(&o.domain, &project["domain"])
            {
                true
            } else {
                return denied();
            };
            (ok, scoped, "password")
        }
        "application_credential" => {
            let ac = &identity["application_credential"];
            let secret = ac["secret"].as_str();
            let ok = o.app_credentials.iter().any(|a| {
                let who = match ac["id"].as_str() {
                    Some(id) => id == a.id,
                    None => ac["name"].as_str() == Some(a.name.as_str()) && user_ok(&ac["user"]),
                };
                who && secret == Some(a.secret.as_str())
            });
            (ok, true, "application_credential")
        }
        _ => return bad("Unsupported authentication method."),
    };
    if !ok {
        return denied();
    }
    let now = SystemTime::now();
    let (token, expires) = {
        let mut st = shared.lock();
        st.counter += 1;
        st.tokens_issued += 1;
        let token = format!("gAAAAAsim{}", pseudo_uuid(st.counter).replace('-', ""));
        let expires = now + st.token_lifetime;
        st.tokens.insert(token.clone(), expires);
        (token, expires)
    };
    let base = shared.base();
    let endpoints = |path: &str| {
        json!([
            { "id": pseudo_uuid(1), "interface": "public", "region": o.region, "region_id": o.region, "url": format!("{base}{path}") },
            { "id": pseudo_uuid(2), "interface": "internal", "region": o.region, "region_id": o.region, "url": format!("{base}{path}") },
        ])
    };
    let mut tok = json!({
        "methods": [method_name],
        "user": { "id": "0123456789abcdef0123456789abcdef", "name": o.username,
                  "domain": { "id": o.domain.to_ascii_lowercase(), "name": o.domain },
                  "password_expires_at": null },
        "audit_ids": ["sim"],
        "expires_at": humantime::format_rfc3339_micros(expires).to_string(),
        "issued_at": humantime::format_rfc3339_micros(now).to_string(),
    });
    if scoped {
        tok["project"] = json!({ "id": o.project_id, "name": o.project,
            "domain": { "id": o.domain.to_ascii_lowercase(), "name": o.domain } });
        tok["roles"] = json!([{ "id": "r1", "name": "member" }]);
        tok["catalog"] = json!([
            { "type": "identity", "name": "keystone", "id": "s0", "endpoints": endpoints("/identity") },
            { "type": "compute", "name": "nova", "id": "s1", "endpoints": endpoints("/compute/v2.1") },
            { "type": "image", "name": "glance", "id": "s2", "endpoints": endpoints("/image") },
            { "type": "network", "name": "neutron", "id": "s3", "endpoints": endpoints("/network") },
        ]);
    }
    let mut resp = (StatusCode::CREATED, Json(json!({ "token": tok }))).into_response();
    if let Ok(v) = HeaderValue::from_str(&token) {
        resp.headers_mut().insert("X-Subject-Token", v);
    }
    resp
}

fn flavor_json(shared: &Shared, f: &SimFlavor) -> Value {
    let href = format!("{}/compute/v2.1/flavors/{}", shared.base(), f.id);
    json!({
        "id": f.id, "name": f.name, "ram": f.ram_mib, "vcpus": f.vcpus, "disk": f.disk_gb,
        "OS-FLV-EXT-DATA:ephemeral": 0, "OS-FLV-DISABLED:disabled": false, "swap": 0,
        "rxtx_factor": 1.0, "os-flavor-access:is_public": true, "description": null,
        "extra_specs": {},
        "links": [{ "rel": "self", "href": href }],
    })
}

async fn list_flavors(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    if let Some(r) = unauthorized_unless_token(&shared, &headers) {
        return r;
    }
    let flavors: Vec<Value> = shared
        .opts
        .flavors
        .iter()
        .map(|f| flavor_json(&shared, f))
        .collect();
    Json(json!({ "flavors": flavors })).into_response()
}

async fn show_flavor(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    UrlPath(id): UrlPath<String>,
) -> Response {
    if let Some(r) = unauthorized_unless_token(&shared, &headers) {
        return r;
    }
    match shared.opts.flavors.iter().find(|f| f.id == id) {
        Some(f) => Json(json!({ "flavor": flavor_json(&shared, f) })).into_response(),
        None => nova_error(
            StatusCode::NOT_FOUND,
            "itemNotFound",
            &format!("Flavor {id} could not be found."),
        ),
    }
}

fn server_json(shared: &Shared, s: &SimServer, mv: (u32, u32)) -> Value {
    let o = &shared.opts;
    let base = shared.base();
    let flavor = o.flavors.iter().find(|f| f.id == s.flavor_id);
    let flavor_v = if mv >= (2, 47) {
        match flavor {
            Some(f) => json!({ "original_name": f.name, "ram": f.ram_mib, "vcpus": f.vcpus,
                "disk": f.disk_gb, "ephemeral": 0, "swap": 0, "extra_specs": {} }),
            None => json!({}),
        }
    } else {
        json!({ "id": s.flavor_id, "links": [{ "rel": "bookmark",
            "href": format!("{base}/compute/flavors/{}", s.flavor_id) }] })
    };
    let vm_state = match s.status.as_str() {
        "BUILD" => "building",
        "ERROR" => "error",
        _ => "active",
    };
    let addresses: Map<String, Value> = s
        .networks
        .iter()
        .enumerate()
        .filter_map(|(i, nid)| {
            let net = o.networks.iter().find(|n| &n.id == nid)?;
            Some((
                net.name.clone(),
                json!([{ "version": 4, "addr": format!("10.0.0.{}", 10 + i), "OS-EXT-IPS:type": "fixed" }]),
            ))
        })
        .collect();
    let mut v = json!({
        "id": s.id,
        "name": s.name,
        "status": s.status,
        "tenant_id": o.project_id,
        "user_id": "0123456789abcdef0123456789abcdef",
        "metadata": s.metadata,
        "created": rfc3339(s.created),
        "updated": rfc3339(s.created),
        "hostId": "",
        "flavor": flavor_v,
        "image": { "id": s.image_id, "links": [{ "rel": "bookmark",
            "href": format!("{base}/compute/images/{}", s.image_id) }] },
        "addresses": addresses,
        "key_name": s.key_name,
        "security_groups": s.security_groups.iter().map(|n| json!({ "name": n })).collect::<Vec<_>>(),
        "OS-EXT-STS:task_state": s.task_state,
        "OS-EXT-STS:vm_state": vm_state,
        "OS-EXT-STS:power_state": if s.status == "ACTIVE" { 1 } else { 0 },
        // Real Nova shows "" until the server is scheduled (and for one never scheduled).
        "OS-EXT-AZ:availability_zone": s.availability_zone.clone().unwrap_or_else(|| {
            if s.status == "ACTIVE" { "nova".into() } else { String::new() }
        }),
        "OS-DCF:diskConfig": "MANUAL",
        "accessIPv4": "",
        "accessIPv6": "",
        "progress": 0,
        "tags": s.tags,
        "locked": false,
        "description": null,
        "links": [{ "rel": "self", "href": format!("{base}/compute/v2.1/servers/{}", s.id) }],
    });
    if let Some(f) = &s.fault {
        v["fault"] = json!({ "code": fault_code(f), "message": f, "created": rfc3339(s.created) });
    }
    v
}

async fn list_servers(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    if let Some(r) = unauthorized_unless_token(&shared, &headers) {
        return r;
    }
    let mv = microversion(&headers);
    let limit = match q.get("limit").map(|l| l.parse::<usize>()) {
        None => shared.opts.page_size,
        Some(Ok(l)) => l.min(shared.opts.page_size),
        Some(Err(_)) => {
            return nova_error(
                StatusCode::BAD_REQUEST,
                "badRequest",
                "limit must be an integer",
            )
        }
    };
    let st = shared.lock();
    // Nova lists newest first.
    let mut all: Vec<&SimServer> = st.servers.iter().rev().collect();
    if let Some(name) = q.get("name") {
        all.retain(|s| s.name.contains(name.as_str()));
    }
    let start = match q.get("marker") {
        None => 0,
        Some(m) => match all.iter().position(|s| &s.id == m) {
            Some(p) => p + 1,
            None => {
                return nova_error(
                    StatusCode::BAD_REQUEST,
                    "badRequest",
                    &format!("marker [{m}] not found"),
                )
            }
        },
    };
    let page: Vec<&SimServer> = all.iter().skip(start).take(limit).copied().collect();
    let servers: Vec<Value> = page
        .iter()
        .map(|s| {
            let mut v = server_json(&shared, s, mv);
            // A server no host was found for stays in cell0, and real Nova's detail
            // list leaves out the fault of cell0 servers: only GET /servers/{id} has it.
            if s.fault.as_deref() == Some(NO_VALID_HOST) {
                if let Some(o) = v.as_object_mut() {
                    o.remove("fault");
                }
            }
            v
        })
        .collect();
    let mut body = json!({ "servers": servers });
    if limit > 0 && page.len() == limit && start + limit < all.len() {
        if let Some(last) = page.last() {
            body["servers_links"] = json!([{ "rel": "next", "href": format!(
                "{}/compute/v2.1/servers/detail?limit={limit}&marker={}", shared.base(), last.id) }]);
        }
    }
    Json(body).into_response()
}

async fn show_server(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    UrlPath(id): UrlPath<String>,
) -> Response {
    if let Some(r) = unauthorized_unless_token(&shared, &headers) {
        return r;
    }
    let mv = microversion(&headers);
    let st = shared.lock();
    match st.servers.iter().find(|s| s.id == id) {
        Some(s) => {
            let mut v = server_json(&shared, s, mv);
            // Only the single-server view has it (microversion ≥2.71).
            if mv >= (2, 71) {
                v["server_groups"] = json!(s.server_group.iter().collect::<Vec<_>>());
            }
            Json(json!({ "server": v })).into_response()
        }
        None => nova_error(
            StatusCode::NOT_FOUND,
            "itemNotFound",
            &format!("Instance {id} could not be found."),
        ),
    }
}

async fn create_server(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Some(r) = unauthorized_unless_token(&shared, &headers) {
        return r;
    }
    let bad = |m: &str| nova_error(StatusCode::BAD_REQUEST, "badRequest", m);
    let o = &shared.opts;
    let Ok(v) = serde_json::from_slice::<Value>(&body) else {
        return bad("Malformed request body");
    };
    let s = &v["server"];
    if !s.is_object() {
        return bad("Invalid input for field/attribute server.");
    }
    let Some(name) = s["name"].as_str().filter(|n| !n.is_empty()) else {
        return bad("Invalid input for field/attribute name.");
    };
    let Some(flavor_ref) = s["flavorRef"].as_str() else {
        return bad("Invalid input for field/attribute flavorRef.");
    };
    let Some(flavor) = o.flavors.iter().find(|f| f.id == flavor_ref) else {
        return bad(&format!("Flavor {flavor_ref} could not be found."));
    };
    let Some(image_ref) = s["imageRef"].as_str() else {
        return bad("Block Device Mapping is Invalid: imageRef is required.");
    };
    if !o.images.iter().any(|i| i.id == image_ref) {
        return bad(&format!("Image {image_ref} could not be found."));
    }
    let networks = match &s["networks"] {
        Value::String(x) if x == "none" || x == "auto" => Vec::new(),
        Value::Array(list) => {
            let mut ids = Vec::new();
            for n in list {
                let Some(uuid) = n["uuid"].as_str() else {
                    return bad("Invalid input for field/attribute networks.");
                };
                let Some(net) = o.networks.iter().find(|x| x.id == uuid) else {
                    return bad(&format!("Network {uuid} could not be found."));
                };
                if net.subnets.is_empty() {
                    return bad(&format!(
                        "Network {uuid} requires a subnet in order to boot instances on."
                    ));
                }
                ids.push(uuid.to_string());
            }
            ids
        }
        Value::Null if microversion(&headers) < (2, 37) => Vec::new(),
        _ => return bad("Invalid input for field/attribute networks."),
    };
    let user_data = match s["user_data"].as_str() {
        None => None,
        Some(b64) => match base64::engine::general_purpose::STANDARD.decode(b64) {
            Ok(bytes) => Some(String::from_utf8_lossy(&bytes).into_owned()),
            Err(_) => return bad("User data needs to be valid base 64."),
        },
    };
    let mut metadata = BTreeMap::new();
    if let Some(m) = s["metadata"].as_object() {
        for (k, val) in m {
            let Some(val) = val.as_str() else {
                return bad("Invalid input for field/attribute metadata.");
            };
            metadata.insert(k.clone(), val.to_string());
        }
    }
    let server_group = match &v["os:scheduler_hints"] {
        Value::Null => None,
        Value::Object(hints) => match hints.get("group") {
            None => None,
            Some(Value::String(g)) if looks_like_uuid(g) => {
                if !o.server_groups.iter().any(|x| x.id == *g) {
                    return bad(&format!("Instance group {g} could not be found."));
                }
                Some(g.clone())
            }
            Some(g) => {
                return bad(&format!(
                    "Invalid input for field/attribute group. Value: {g}. {g} is not a 'uuid'"
                ))
            }
        },
        _ => return bad("Invalid input for field/attribute os:scheduler_hints."),
    };
    let tags: Vec<String> = match &s["tags"] {
        Value::Null => Vec::new(),
        _ if microversion(&headers) < (2, 52) => {
            return bad("Invalid input for field/attribute server. Value: {...}. Additional properties are not allowed ('tags' was unexpected)")
        }
        Value::Array(list) if list.len() <= 50 => {
            let mut out = Vec::new();
            for t in list {
                match t.as_str() {
                    Some(t) if t.chars().count() <= 60 && !t.contains(['/', ',']) => {
                        out.push(t.to_string())
                    }
                    _ => {
                        return bad(&format!(
                            "Invalid input for field/attribute tags. Value: {t}. does not match '^[^,/]*$' or is longer than 60"
                        ))
                    }
                }
            }
            out
        }
        _ => return bad("Invalid input for field/attribute tags."),
    };
    let security_groups: Vec<String> = match s["security_groups"].as_array() {
        Some(list) => list
            .iter()
            .filter_map(|g| g["name"].as_str().map(str::to_string))
            .collect(),
        None => vec!["default".into()],
    };

    let mut st = shared.lock();
    let mut late_fault = None;
    if !st.fail_creates.is_empty() {
        match st.fail_creates.remove(0) {
            CreateFailure::Quota => {
                return nova_error(
                    StatusCode::FORBIDDEN,
                    "forbidden",
                    "Quota exceeded for instances: Requested 1, but already used 10 of 10 instances",
                )
            }
            CreateFailure::ServerError => {
                return nova_error(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "computeFault",
                    "Unexpected API Error. Please report this at http://bugs.launchpad.net/nova/ and attach the Nova API log if possible.",
                )
            }
            CreateFailure::NoValidHost => late_fault = Some(NO_VALID_HOST.to_string()),
            CreateFailure::QuotaOnRecheck => {
                let used = st.servers.len();
                late_fault = Some(format!(
                    "Quota exceeded for instances: Requested 1, but already used {used} of {used} instances"
                ))
            }
        }
    }
    if let Some(max) = o.max_instances {
        if st.servers.len() >= max {
            return nova_error(
                StatusCode::FORBIDDEN,
                "forbidden",
                &format!(
                    "Quota exceeded for instances: Requested 1, but already used {} of {max} instances",
                    st.servers.len()
                ),
            );
        }
    }
    st.counter += 1;
    let id = pseudo_uuid(st.counter);
    if let Some(fault) = late_fault {
        st.late_faults.insert(id.clone(), fault);
    }
    st.servers.push(SimServer {
        id: id.clone(),
        name: name.to_string(),
        status: "BUILD".into(),
        task_state: Some("scheduling".into()),
        flavor_id: flavor.id.clone(),
        image_id: image_ref.to_string(),
        networks,
        metadata,
        user_data,
        key_name: s["key_name"].as_str().map(str::to_string),
        security_groups: security_groups.clone(),
        availability_zone: s["availability_zone"].as_str().map(str::to_string),
        server_group,
        tags,
        fault: None,
        created: SystemTime::now(),
    });
    drop(st);

    let delay = o.boot_delay;
    let booter = shared.clone();
    let boot_id = id.clone();
    tokio::spawn(async move {
        tokio::time::sleep(delay).await;
        finish_boot(&booter, &boot_id);
    });
    if o.faults.half_done(HalfDone::CreateFailsButServerAppears) {
        return nova_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "computeFault",
            "Unexpected API Error. Please report this at http://bugs.launchpad.net/nova/ and attach the Nova API log if possible.",
        );
    }

    let href = format!("{}/compute/v2.1/servers/{id}", shared.base());
    let mut resp = (
        StatusCode::ACCEPTED,
        Json(json!({ "server": {
            "id": id,
            "links": [{ "rel": "self", "href": href }],
            "OS-DCF:diskConfig": "MANUAL",
            "security_groups": security_groups.iter().map(|n| json!({ "name": n })).collect::<Vec<_>>(),
            "adminPass": "simAdminPass1",
        } })),
    )
        .into_response();
    if let Ok(v) = HeaderValue::from_str(&href) {
        resp.headers_mut().insert("Location", v);
    }
    resp
}

/// Real Nova's fault message, trailing space included.
const NO_VALID_HOST: &str = "No valid host was found. ";

/// Code of a server fault as real Nova reports it: 413 for the quota recheck, else 500.
fn fault_code(message: &str) -> u16 {
    if message.starts_with("Quota exceeded") {
        413
    } else {
        500
    }
}

fn finish_boot(shared: &Shared, id: &str) {
    let event = {
        let mut st = shared.lock();
        let late_fault = st.late_faults.remove(id);
        let never: Vec<String> = st.never_boot.clone();
        let Some(s) = st.servers.iter_mut().find(|s| s.id == id) else {
            return;
        };
        if s.status != "BUILD" || s.task_state.as_deref() == Some("deleting") {
            return;
        }
        if let Some(fault) = late_fault {
            s.status = "ERROR".into();
            s.task_state = None;
            s.fault = Some(fault);
            return;
        }
        if never.iter().any(|p| s.name.starts_with(p.as_str())) {
            s.task_state = Some("spawning".into());
            return;
        }
        s.status = "ACTIVE".into();
        s.task_state = None;
        let flavor = shared.opts.flavors.iter().find(|f| f.id == s.flavor_id);
        VmEvent::Booted {
            name: s.name.clone(),
            user_data: s.user_data.clone().unwrap_or_default(),
            memory_bytes: flavor.map(|f| f.ram_mib * 1024 * 1024).unwrap_or(0),
            cpus: flavor.map(|f| f.vcpus).unwrap_or(0),
        }
    };
    shared.fire(event);
}

fn remove_server(shared: &Shared, id: &str) {
    let name = {
        let mut st = shared.lock();
        let Some(pos) = st.servers.iter().position(|s| s.id == id) else {
            return;
        };
        st.servers.remove(pos).name
    };
    shared.fire(VmEvent::Deleted { name });
}

async fn delete_server(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    UrlPath(id): UrlPath<String>,
) -> Response {
    if let Some(r) = unauthorized_unless_token(&shared, &headers) {
        return r;
    }
    {
        let mut st = shared.lock();
        if !st.servers.iter().any(|s| s.id == id) {
            return nova_error(
                StatusCode::NOT_FOUND,
                "itemNotFound",
                &format!("Instance {id} could not be found."),
            );
        }
        if st.fail_deletes > 0 {
            st.fail_deletes -= 1;
            return nova_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "computeFault",
                "Unexpected API Error. Please report this at http://bugs.launchpad.net/nova/ and attach the Nova API log if possible.",
            );
        }
        // Accepted, then lost (a compute host that never acts on it): the server stays
        // as it was, with no task in progress.
        if shared.opts.faults.half_done(HalfDone::DeleteNeverHappens) {
            return StatusCode::NO_CONTENT.into_response();
        }
        if let Some(s) = st.servers.iter_mut().find(|s| s.id == id) {
            s.task_state = Some("deleting".into());
        }
    }
    let delay = shared.opts.delete_delay;
    if delay.is_zero() {
        remove_server(&shared, &id);
    } else {
        let s2 = shared.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            remove_server(&s2, &id);
        });
    }
    StatusCode::NO_CONTENT.into_response()
}

fn looks_like_uuid(s: &str) -> bool {
    let hex: Vec<char> = s.chars().filter(|c| *c != '-').collect();
    hex.len() == 32 && hex.iter().all(char::is_ascii_hexdigit)
}

async fn list_server_groups(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    if let Some(r) = unauthorized_unless_token(&shared, &headers) {
        return r;
    }
    let mv = microversion(&headers);
    let st = shared.lock();
    let groups: Vec<Value> = shared
        .opts
        .server_groups
        .iter()
        .map(|g| {
            let members: Vec<&str> = st
                .servers
                .iter()
                .filter(|s| s.server_group.as_deref() == Some(g.id.as_str()))
                .map(|s| s.id.as_str())
                .collect();
            let mut v = json!({ "id": g.id, "name": g.name, "members": members });
            if mv >= (2, 64) {
                v["policy"] = json!(g.policy);
                v["rules"] = json!({});
                v["project_id"] = json!(shared.opts.project_id);
                v["user_id"] = json!("0123456789abcdef0123456789abcdef");
            } else {
                v["policies"] = json!([g.policy]);
                v["metadata"] = json!({});
            }
            v
        })
        .collect();
    Json(json!({ "server_groups": groups })).into_response()
}

fn image_json(i: &SimImage) -> Value {
    json!({
        "id": i.id, "name": i.name, "status": "active", "visibility": "public",
        "protected": false, "os_hidden": false, "disk_format": "qcow2", "container_format": "bare",
        "min_ram": 0, "min_disk": 0, "size": 1073741824u64, "tags": [],
        "created_at": "2024-01-01T00:00:00Z", "updated_at": "2024-01-01T00:00:00Z",
        "self": format!("/v2/images/{}", i.id), "file": format!("/v2/images/{}/file", i.id),
        "schema": "/v2/schemas/image",
    })
}

async fn list_images(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    if let Some(r) = unauthorized_unless_token(&shared, &headers) {
        return r;
    }
    let images: Vec<Value> = shared
        .opts
        .images
        .iter()
        .filter(|i| q.get("name").is_none_or(|n| *n == i.name))
        .filter(|i| q.get("id").is_none_or(|n| *n == i.id))
        .map(image_json)
        .collect();
    Json(json!({ "images": images, "first": "/v2/images", "schema": "/v2/schemas/images" }))
        .into_response()
}

async fn show_image(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    UrlPath(id): UrlPath<String>,
) -> Response {
    if let Some(r) = unauthorized_unless_token(&shared, &headers) {
        return r;
    }
    match shared.opts.images.iter().find(|i| i.id == id) {
        Some(i) => Json(image_json(i)).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            // Real Glance answers 404 with webob's HTML error page.
            [("Content-Type", "text/html; charset=UTF-8")],
            format!(
                "<html>\n <head>\n  <title>404 Not Found</title>\n </head>\n <body>\n  <h1>404 Not Found</h1>\n  No image found with ID {id}<br /><br />\n\n\n\n </body>\n</html>"
            ),
        )
            .into_response(),
    }
}

fn network_json(shared: &Shared, n: &SimNetwork) -> Value {
    json!({
        "id": n.id, "name": n.name, "status": "ACTIVE", "admin_state_up": true,
        "shared": false, "subnets": n.subnets, "mtu": 1450, "router:external": false,
        "tenant_id": shared.opts.project_id, "project_id": shared.opts.project_id,
        "availability_zones": ["nova"], "tags": [],
    })
}

async fn list_networks(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    if let Some(r) = unauthorized_unless_token(&shared, &headers) {
        return r;
    }
    let networks: Vec<Value> = shared
        .opts
        .networks
        .iter()
        .filter(|n| q.get("name").is_none_or(|x| *x == n.name))
        .filter(|n| q.get("id").is_none_or(|x| *x == n.id))
        .map(|n| network_json(&shared, n))
        .collect();
    Json(json!({ "networks": networks })).into_response()
}

async fn show_network(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    UrlPath(id): UrlPath<String>,
) -> Response {
    if let Some(r) = unauthorized_unless_token(&shared, &headers) {
        return r;
    }
    match shared.opts.networks.iter().find(|n| n.id == id) {
        Some(n) => Json(json!({ "network": network_json(&shared, n) })).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            Json(json!({ "NeutronError": {
                "type": "NetworkNotFound",
                "message": format!("Network {id} could not be found."),
                "detail": "",
            } })),
        )
            .into_response(),
    }
}

//! The environment `tests/openstack-real/setup.sh` leaves behind and the test-side
//! helpers of the real-OpenStack tier (`use nodewright_testkit::real_os;` in each test
//! file of the tier).

use std::collections::{BTreeMap, HashMap};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use base64::Engine as _;
use nodewright_core::cloud::openstack::{
    OpenStackCredentials, OpenStackProvider, OpenStackSettings, ProviderOptions,
};
use nodewright_core::cloud::{
    CloudProvider, CreateRequest, CLUSTER_TAG, GROUP_TAG, SETTINGS_HASH_TAG,
};
use nodewright_core::model::{Server, ServerStatus};
use serde_json::{json, Value};

pub const ENV: &str = "NODEWRIGHT_REAL_OPENSTACK";
pub const DEFAULT_BASE: &str = "/tmp/nodewright-os";
pub const GI: u64 = 1 << 30;
/// Real Nova with the fake driver goes ACTIVE in a few seconds; leave room for a busy CI.
pub const BOOT_TIMEOUT: Duration = Duration::from_secs(90);

// ---------------------------------------------------------------------------
// The environment setup.sh left behind

/// What setup.sh wrote under its base directory.
pub struct RealOs {
    pub password: PathBuf,
    pub appcred: PathBuf,
    pub quota: PathBuf,
    pub admin: PathBuf,
    /// `resources.env`: flavor, image, network and project ids.
    pub ids: HashMap<String, String>,
}

impl RealOs {
    pub fn id(&self, key: &str) -> String {
        self.ids
            .get(key)
            .cloned()
            .unwrap_or_else(|| panic!("resources.env has no {key}"))
    }
}

/// The real OpenStack, or `None` after a loud skip message. Panics when it was asked
/// for (the variable is set) but is not usable.
pub fn real_os(test: &str) -> Option<RealOs> {
    let (base, asked) = match std::env::var_os(ENV) {
        Some(b) if !b.is_empty() => (PathBuf::from(b), true),
        _ => (PathBuf::from(DEFAULT_BASE), false),
    };
    let files = [
        "nodewright-password.yaml",
        "nodewright-appcred.yaml",
        "nodewright-quota.yaml",
        "admin.yaml",
        "resources.env",
    ];
    let missing: Vec<String> = files
        .iter()
        .map(|f| base.join(f))
        .filter(|p| !p.is_file())
        .map(|p| p.display().to_string())
        .collect();
    if !missing.is_empty() {
        let why = if asked {
            format!(
                "{ENV}={} but {} missing",
                base.display(),
                missing.join(", ")
            )
        } else {
            format!(
                "{ENV} is not set and {} has no credential files",
                base.display()
            )
        };
        assert!(
            !asked,
            "{test}: real OpenStack requested but not usable: {why}"
        );
        // Straight to the stderr descriptor: libtest captures eprintln! of passing tests.
        let _ = writeln!(
            std::io::stderr(),
            "\n!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n\
             SKIPPED: real OpenStack not available: {why}; \
             run tests/openstack-real/setup.sh ({test})\n\
             !!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n"
        );
        return None;
    }
    let env_text = std::fs::read_to_string(base.join("resources.env")).expect("resources.env");
    let ids = env_text
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    Some(RealOs {
        password: base.join("nodewright-password.yaml"),
        appcred: base.join("nodewright-appcred.yaml"),
        quota: base.join("nodewright-quota.yaml"),
        admin: base.join("admin.yaml"),
        ids,
    })
}

/// The real OpenStack, or a return from the test after [`real_os`](crate::real_os::real_os)'s
/// skip message.
#[macro_export]
macro_rules! real_os_or_skip {
    ($test:expr) => {
        match $crate::real_os::real_os($test) {
            Some(os) => os,
            None => return,
        }
    };
}
pub use crate::real_os_or_skip;

/// A cluster name no other test (or earlier run) uses; short enough for node names.
pub fn unique_cluster(tag: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .subsec_nanos();
    format!("rt-{tag}-{:05x}", (nanos ^ std::process::id()) & 0xfffff)
}

pub fn settings(flavor: &str, image: &str, network: Option<&str>) -> OpenStackSettings {
    OpenStackSettings {
        flavor: flavor.into(),
        image: image.into(),
        network: network.map(str::to_string),
        key_name: None,
        security_groups: Vec::new(),
        availability_zone: None,
        server_group: None,
    }
}

pub fn provider(creds: &Path, s: OpenStackSettings) -> OpenStackProvider {
    let creds = OpenStackCredentials::from_file(creds).expect("credentials file loads");
    OpenStackProvider::with_options(
        creds,
        BTreeMap::from([("workers".to_string(), s)]),
        ProviderOptions {
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(60),
            ..ProviderOptions::default()
        },
    )
    .expect("provider builds")
}

/// A group settings hash as the config computes it (12 hex digits), stamped on every VM
/// these tests create.
pub const HASH: &str = "0a1b2c3d4e5f";

pub fn request(name: &str, cluster: &str, user_data: &str) -> CreateRequest {
    CreateRequest {
        name: name.into(),
        cluster: cluster.into(),
        group: "workers".into(),
        user_data: user_data.into(),
        size: None,
        settings_hash: HASH.into(),
        zone: None,
    }
}

// ---------------------------------------------------------------------------
// Test-side admin access (plain REST: what the provider does not do)

/// An admin session for what tests need beyond the provider: every project's servers
/// with their user data, deletes for cleanup, quotas.
#[derive(Clone)]
pub struct Admin {
    pub http: reqwest::Client,
    pub token: String,
    pub compute: String,
}

/// A server as the admin sees it.
#[derive(Debug, Clone)]
pub struct AdminServer {
    pub id: String,
    pub name: String,
    pub status: String,
    pub metadata: BTreeMap<String, String>,
    pub user_data: Option<String>,
    pub ram_mib: u64,
    pub vcpus: u32,
    pub fault: String,
    pub fault_code: Option<u64>,
    pub tags: Vec<String>,
}

pub fn admin_server(v: &Value) -> AdminServer {
    let user_data = v["OS-EXT-SRV-ATTR:user_data"]
        .as_str()
        .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
        .map(|b| String::from_utf8_lossy(&b).into_owned());
    AdminServer {
        id: v["id"].as_str().unwrap_or_default().into(),
        name: v["name"].as_str().unwrap_or_default().into(),
        status: v["status"].as_str().unwrap_or_default().into(),
        metadata: serde_json::from_value(v["metadata"].clone()).unwrap_or_default(),
        user_data,
        ram_mib: v["flavor"]["ram"].as_u64().unwrap_or(0),
        vcpus: v["flavor"]["vcpus"].as_u64().unwrap_or(0) as u32,
        fault: v["fault"]["message"].as_str().unwrap_or_default().into(),
        fault_code: v["fault"]["code"].as_u64(),
        tags: serde_json::from_value(v["tags"].clone()).unwrap_or_default(),
    }
}

impl Admin {
    pub async fn login(os: &RealOs) -> Admin {
        Admin::login_with(&os.admin).await
    }

    /// A session of whoever `creds` (an `OS_*` password file) names, scoped to its
    /// project: e.g. the test user, for what belongs to its project (server groups).
    pub async fn login_with(creds: &Path) -> Admin {
        let text = std::fs::read_to_string(creds).expect("credentials file");
        let kv: BTreeMap<String, String> =
            serde_yaml::from_str(&text).expect("credentials file is YAML");
        // reqwest is built without a default TLS provider (as nodewright is).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .expect("client");
        let auth_url = kv["OS_AUTH_URL"].trim_end_matches('/').to_string();
        let body = json!({ "auth": {
            "identity": { "methods": ["password"], "password": { "user": {
                "name": kv["OS_USERNAME"], "domain": { "name": kv["OS_USER_DOMAIN_NAME"] },
                "password": kv["OS_PASSWORD"] } } },
            "scope": { "project": { "name": kv["OS_PROJECT_NAME"], "domain": { "name": "Default" } } },
        } });
        let resp = http
            .post(format!("{auth_url}/auth/tokens"))
            .json(&body)
            .send()
            .await
            .expect("Keystone answers");
        assert!(resp.status().is_success(), "admin login: {}", resp.status());
        let token = resp.headers()["x-subject-token"]
            .to_str()
            .expect("token header")
            .to_string();
        let v: Value = resp.json().await.expect("token body");
        let compute = v["token"]["catalog"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|s| s["type"] == "compute")
            .flat_map(|s| s["endpoints"].as_array().cloned().unwrap_or_default())
            .find(|e| e["interface"] == "public")
            .and_then(|e| {
                e["url"]
                    .as_str()
                    .map(|u| u.trim_end_matches('/').to_string())
            })
            .expect("compute endpoint in the admin catalog");
        Admin {
            http,
            token,
            compute,
        }
    }

    pub fn nova(&self, rb: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        rb.header("X-Auth-Token", &self.token)
            .header("OpenStack-API-Version", "compute 2.79")
    }

    /// Every server of every project tagged with `cluster` (user data included).
    pub async fn servers(&self, cluster: &str) -> Vec<AdminServer> {
        let resp = self
            .nova(
                self.http
                    .get(format!("{}/servers/detail?all_tenants=1", self.compute)),
            )
            .send()
            .await
            .expect("Nova answers");
        assert!(resp.status().is_success(), "admin list: {}", resp.status());
        let v: Value = resp.json().await.expect("server list");
        v["servers"]
            .as_array()
            .into_iter()
            .flatten()
            .map(admin_server)
            .filter(|s| s.metadata.get(CLUSTER_TAG).map(String::as_str) == Some(cluster))
            .collect()
    }

    /// `GET /servers/{id}`: unlike the detail list, it always carries the fault.
    pub async fn server(&self, id: &str) -> AdminServer {
        let resp = self
            .nova(self.http.get(format!("{}/servers/{id}", self.compute)))
            .send()
            .await
            .expect("Nova answers");
        assert!(resp.status().is_success(), "admin show: {}", resp.status());
        let v: Value = resp.json().await.expect("server");
        admin_server(&v["server"])
    }

    /// Whether the server is gone: `GET /servers/{id}` answers 404, or (admins may still
    /// read a deleted instance for a moment) shows it as `DELETED`.
    pub async fn server_gone(&self, id: &str) -> bool {
        let resp = self
            .nova(self.http.get(format!("{}/servers/{id}", self.compute)))
            .send()
            .await
            .expect("Nova answers");
        match resp.status().as_u16() {
            404 => true,
            200 => {
                let v: Value = resp.json().await.expect("server");
                v["server"]["status"] == "DELETED"
            }
            other => panic!("unexpected status {other} for server {id}"),
        }
    }

    pub async fn delete(&self, id: &str) {
        let _ = self
            .nova(self.http.delete(format!("{}/servers/{id}", self.compute)))
            .send()
            .await;
    }

    /// Deletes every server of `cluster` and waits until Nova lists none.
    pub async fn delete_cluster(&self, cluster: &str) -> usize {
        let start = Instant::now();
        let mut deleted = 0;
        loop {
            let left = self.servers(cluster).await;
            if left.is_empty() || start.elapsed() > BOOT_TIMEOUT {
                return deleted;
            }
            for s in &left {
                self.delete(&s.id).await;
                deleted += 1;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// `POST /os-server-groups` in the session's project; returns the group id.
    pub async fn create_server_group(&self, name: &str, policy: &str) -> String {
        let resp = self
            .nova(self.http.post(format!("{}/os-server-groups", self.compute)))
            .json(&json!({ "server_group": { "name": name, "policy": policy } }))
            .send()
            .await
            .expect("Nova answers");
        let status = resp.status();
        let v: Value = resp.json().await.unwrap_or_default();
        assert!(status.is_success(), "create server group: {status} {v}");
        v["server_group"]["id"]
            .as_str()
            .expect("server group id")
            .to_string()
    }

    pub async fn delete_server_group(&self, id: &str) {
        let _ = self
            .nova(
                self.http
                    .delete(format!("{}/os-server-groups/{id}", self.compute)),
            )
            .send()
            .await;
    }

    /// `GET /servers/{id}` as JSON (the session must see the server's project).
    pub async fn server_json(&self, id: &str) -> Value {
        let resp = self
            .nova(self.http.get(format!("{}/servers/{id}", self.compute)))
            .send()
            .await
            .expect("Nova answers");
        assert!(resp.status().is_success(), "show: {}", resp.status());
        resp.json().await.expect("server")
    }

    pub async fn set_instance_quota(&self, project: &str, instances: i64) {
        let resp = self
            .nova(
                self.http
                    .put(format!("{}/os-quota-sets/{project}", self.compute)),
            )
            .json(&json!({ "quota_set": { "instances": instances } }))
            .send()
            .await
            .expect("Nova answers");
        assert!(resp.status().is_success(), "set quota: {}", resp.status());
    }

    /// Back to the defaults (Nova's `DELETE /os-quota-sets/{project}`).
    pub async fn reset_quota(&self, project: &str) {
        let _ = self
            .nova(
                self.http
                    .delete(format!("{}/os-quota-sets/{project}", self.compute)),
            )
            .send()
            .await;
    }
}

/// Runs an async cleanup from `Drop`, on a runtime of its own (the test's may be gone
/// or busy panicking).
pub fn run_blocking_cleanup<F>(f: F)
where
    F: FnOnce() -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> + Send + 'static,
{
    let _ = std::thread::spawn(move || {
        if let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            rt.block_on(f());
        }
    })
    .join();
}

/// Deletes every server of its cluster, in every project, when dropped.
pub struct ClusterGuard {
    pub admin: Admin,
    pub cluster: String,
}

impl Drop for ClusterGuard {
    fn drop(&mut self) {
        let (admin, cluster) = (self.admin.clone(), self.cluster.clone());
        run_blocking_cleanup(move || {
            Box::pin(async move {
                let n = admin.delete_cluster(&cluster).await;
                if n > 0 {
                    eprintln!("cleanup: deleted {n} leftover server(s) of cluster {cluster}");
                }
            })
        });
    }
}

/// Deletes a server group when dropped (after the servers: declare it first).
pub struct ServerGroupGuard {
    pub session: Admin,
    pub id: String,
}

impl Drop for ServerGroupGuard {
    fn drop(&mut self) {
        let (session, id) = (self.session.clone(), self.id.clone());
        run_blocking_cleanup(move || {
            Box::pin(async move { session.delete_server_group(&id).await })
        });
    }
}

/// Resets a project's quota to the defaults when dropped.
pub struct QuotaGuard {
    pub admin: Admin,
    pub project: String,
}

impl Drop for QuotaGuard {
    fn drop(&mut self) {
        let (admin, project) = (self.admin.clone(), self.project.clone());
        run_blocking_cleanup(move || Box::pin(async move { admin.reset_quota(&project).await }));
    }
}

pub async fn wait_for_status(
    p: &OpenStackProvider,
    cluster: &str,
    id: &str,
    want: ServerStatus,
) -> Server {
    let start = Instant::now();
    loop {
        let servers = p.list_servers(cluster).await.expect("list_servers");
        let me = servers.iter().find(|s| s.id == id).cloned();
        match me {
            Some(s) if s.status == want => return s,
            Some(s) if s.status == ServerStatus::Error => panic!("server went to ERROR: {s:?}"),
            other => assert!(
                start.elapsed() < BOOT_TIMEOUT,
                "server {id} not {want:?} after {BOOT_TIMEOUT:?}: {other:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

pub async fn wait_gone(p: &OpenStackProvider, cluster: &str, id: &str) {
    let start = Instant::now();
    while p
        .list_servers(cluster)
        .await
        .expect("list_servers")
        .iter()
        .any(|s| s.id == id)
    {
        assert!(
            start.elapsed() < BOOT_TIMEOUT,
            "server {id} still listed after {BOOT_TIMEOUT:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Creates one server, waits for ACTIVE, checks what the admin sees, deletes it and
/// waits until it is gone.
pub async fn full_lifecycle(os: &RealOs, p: &OpenStackProvider, cluster: &str, ram_mib: u64) {
    let admin = Admin::login(os).await;
    let _guard = ClusterGuard {
        admin: admin.clone(),
        cluster: cluster.into(),
    };
    let name = format!("{cluster}-workers-a1b2c");
    let user_data = format!("#cloud-config\nhostname: {name}\n# ünïcode survives\n");
    let created = p
        .create_server(&request(&name, cluster, &user_data))
        .await
        .expect("create_server");
    assert_eq!(created.name, name);
    assert_eq!(created.cluster.as_deref(), Some(cluster));
    assert_eq!(created.memory_bytes, Some(ram_mib << 20));

    // Listed for its cluster, with ownership read back from the metadata, and not for another.
    let listed = p.list_servers(cluster).await.expect("list_servers");
    let me = listed
        .iter()
        .find(|s| s.id == created.id)
        .unwrap_or_else(|| panic!("new server not listed: {listed:?}"));
    assert_eq!(me.group.as_deref(), Some("workers"));
    assert_eq!(me.provider, "openstack");
    assert!(
        matches!(me.status, ServerStatus::Building | ServerStatus::Active),
        "{me:?}"
    );
    let age = SystemTime::now()
        .duration_since(me.created)
        .unwrap_or_default();
    assert!(
        age < Duration::from_secs(300),
        "created time read back: {age:?} ago"
    );
    let other = p
        .list_servers(&format!("{cluster}-other"))
        .await
        .expect("list_servers");
    assert!(other.iter().all(|s| s.id != created.id));

    let active = wait_for_status(p, cluster, &created.id, ServerStatus::Active).await;
    assert_eq!(active.memory_bytes, Some(ram_mib << 20));

    // What Nova stored: user data byte for byte, both ownership keys.
    let seen = admin.servers(cluster).await;
    let stored = seen
        .iter()
        .find(|s| s.id == created.id)
        .expect("admin sees it");
    assert_eq!(stored.user_data.as_deref(), Some(user_data.as_str()));
    assert_eq!(
        stored.metadata.get(GROUP_TAG).map(String::as_str),
        Some("workers")
    );

    // Ownership also in tags (microversion 2.79 ≥ 2.52); the metadata stays the truth.
    assert_eq!(
        stored.tags,
        vec![
            format!("{CLUSTER_TAG}={cluster}"),
            format!("{GROUP_TAG}=workers"),
            format!("{SETTINGS_HASH_TAG}={HASH}")
        ],
        "tags on the real server"
    );
    assert_eq!(
        stored.metadata.get(SETTINGS_HASH_TAG).map(String::as_str),
        Some(HASH)
    );

    // delete_server returns once Nova no longer has the server.
    p.delete_server(cluster, &created.id)
        .await
        .expect("delete_server");
    assert!(
        admin.server_gone(&created.id).await,
        "server still there after delete_server"
    );
    assert!(p
        .list_servers(cluster)
        .await
        .expect("list_servers")
        .iter()
        .all(|s| s.id != created.id));
    // Deleting what is already gone is success.
    p.delete_server(cluster, &created.id)
        .await
        .expect("second delete is a no-op");
}

//! The real-OpenStack tier: the OpenStack provider, and one scale-up/scale-down cycle of
//! the loop, against a real Keystone + Nova (fake virt driver) + Placement + Glance +
//! Neutron started on 127.0.0.1 by `tests/openstack-real/setup.sh`.
//!
//! Runs when `NODEWRIGHT_REAL_OPENSTACK` names the base directory setup.sh wrote (or the
//! files exist at its default, /tmp/nodewright-os); otherwise every test says loudly on
//! stderr that it was skipped, and passes. When the variable is set but the stack is not
//! usable, the tests fail: CI sets it after running setup.sh.
//!
//! Every test uses its own cluster name, so tests run in parallel without seeing each
//! other's servers, and a guard deletes every server of that cluster however the test
//! ends.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use base64::Engine as _;
use common::{ready, running};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, Patch, PatchParams};
use nodewright::cloud::build::build_clouds_with;
use nodewright::cloud::openstack::{
    OpenStackCredentials, OpenStackProvider, OpenStackSettings, ProviderOptions,
};
use nodewright::cloud::{
    CloudError, CloudProvider, CreateRequest, Server, ServerStatus, CLUSTER_TAG, GROUP_TAG,
    SETTINGS_HASH_TAG,
};
use nodewright::cluster::KubeCluster;
use nodewright::config::{Config, ProviderKind};
use nodewright::plan::Action;
use nodewright::reconcile::Reconciler;
use nodewright::sim::cluster::{SimCluster, SimClusterOptions, SimNodeSpec, SimPodTemplate};
use nodewright::sim::env::SHIPPED_TEMPLATES;
use nodewright::sim::{VmEvent, VmHook};
use serde_json::{json, Value};

const ENV: &str = "NODEWRIGHT_REAL_OPENSTACK";
const DEFAULT_BASE: &str = "/tmp/nodewright-os";
const GI: u64 = 1 << 30;
/// Real Nova with the fake driver goes ACTIVE in a few seconds; leave room for a busy CI.
const BOOT_TIMEOUT: Duration = Duration::from_secs(90);

// ---------------------------------------------------------------------------
// The environment setup.sh left behind

/// What setup.sh wrote under its base directory.
struct RealOs {
    password: PathBuf,
    appcred: PathBuf,
    quota: PathBuf,
    admin: PathBuf,
    /// `resources.env`: flavor, image, network and project ids.
    ids: HashMap<String, String>,
}

impl RealOs {
    fn id(&self, key: &str) -> String {
        self.ids
            .get(key)
            .cloned()
            .unwrap_or_else(|| panic!("resources.env has no {key}"))
    }
}

/// The real OpenStack, or `None` after a loud skip message. Panics when it was asked
/// for (the variable is set) but is not usable.
fn real_os(test: &str) -> Option<RealOs> {
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

macro_rules! real_os_or_skip {
    ($test:expr) => {
        match real_os($test) {
            Some(os) => os,
            None => return,
        }
    };
}

/// A cluster name no other test (or earlier run) uses; short enough for node names.
fn unique_cluster(tag: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .subsec_nanos();
    format!("rt-{tag}-{:05x}", (nanos ^ std::process::id()) & 0xfffff)
}

fn settings(flavor: &str, image: &str, network: Option<&str>) -> OpenStackSettings {
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

fn provider(creds: &Path, s: OpenStackSettings) -> OpenStackProvider {
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
const HASH: &str = "0a1b2c3d4e5f";

fn request(name: &str, cluster: &str, user_data: &str) -> CreateRequest {
    CreateRequest {
        name: name.into(),
        cluster: cluster.into(),
        group: "workers".into(),
        user_data: user_data.into(),
        settings_hash: HASH.into(),
        zone: None,
    }
}

// ---------------------------------------------------------------------------
// Test-side admin access (plain REST: what the provider does not do)

/// An admin session for what tests need beyond the provider: every project's servers
/// with their user data, deletes for cleanup, quotas.
#[derive(Clone)]
struct Admin {
    http: reqwest::Client,
    token: String,
    compute: String,
}

/// A server as the admin sees it.
#[derive(Debug, Clone)]
struct AdminServer {
    id: String,
    name: String,
    status: String,
    metadata: BTreeMap<String, String>,
    user_data: Option<String>,
    ram_mib: u64,
    vcpus: u32,
    fault: String,
    fault_code: Option<u64>,
    tags: Vec<String>,
}

fn admin_server(v: &Value) -> AdminServer {
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
    async fn login(os: &RealOs) -> Admin {
        Admin::login_with(&os.admin).await
    }

    /// A session of whoever `creds` (an `OS_*` password file) names, scoped to its
    /// project: e.g. the test user, for what belongs to its project (server groups).
    async fn login_with(creds: &Path) -> Admin {
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

    fn nova(&self, rb: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        rb.header("X-Auth-Token", &self.token)
            .header("OpenStack-API-Version", "compute 2.79")
    }

    /// Every server of every project tagged with `cluster` (user data included).
    async fn servers(&self, cluster: &str) -> Vec<AdminServer> {
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
    async fn server(&self, id: &str) -> AdminServer {
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
    async fn server_gone(&self, id: &str) -> bool {
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

    async fn delete(&self, id: &str) {
        let _ = self
            .nova(self.http.delete(format!("{}/servers/{id}", self.compute)))
            .send()
            .await;
    }

    /// Deletes every server of `cluster` and waits until Nova lists none.
    async fn delete_cluster(&self, cluster: &str) -> usize {
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
    async fn create_server_group(&self, name: &str, policy: &str) -> String {
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

    async fn delete_server_group(&self, id: &str) {
        let _ = self
            .nova(
                self.http
                    .delete(format!("{}/os-server-groups/{id}", self.compute)),
            )
            .send()
            .await;
    }

    /// `GET /servers/{id}` as JSON (the session must see the server's project).
    async fn server_json(&self, id: &str) -> Value {
        let resp = self
            .nova(self.http.get(format!("{}/servers/{id}", self.compute)))
            .send()
            .await
            .expect("Nova answers");
        assert!(resp.status().is_success(), "show: {}", resp.status());
        resp.json().await.expect("server")
    }

    async fn set_instance_quota(&self, project: &str, instances: i64) {
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
    async fn reset_quota(&self, project: &str) {
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
fn run_blocking_cleanup<F>(f: F)
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
struct ClusterGuard {
    admin: Admin,
    cluster: String,
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
struct ServerGroupGuard {
    session: Admin,
    id: String,
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
struct QuotaGuard {
    admin: Admin,
    project: String,
}

impl Drop for QuotaGuard {
    fn drop(&mut self) {
        let (admin, project) = (self.admin.clone(), self.project.clone());
        run_blocking_cleanup(move || Box::pin(async move { admin.reset_quota(&project).await }));
    }
}

async fn wait_for_status(
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

async fn wait_gone(p: &OpenStackProvider, cluster: &str, id: &str) {
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
async fn full_lifecycle(os: &RealOs, p: &OpenStackProvider, cluster: &str, ram_mib: u64) {
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

// ---------------------------------------------------------------------------
// Provider tests

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_server_group_by_name_and_id_and_tags() {
    let os = real_os_or_skip!("real_server_group_by_name_and_id_and_tags");
    let admin = Admin::login(&os).await;
    let user = Admin::login_with(&os.password).await;
    let cluster = unique_cluster("sg");
    let group_name = format!("{cluster}-spread");
    let group_id = user
        .create_server_group(&group_name, "soft-anti-affinity")
        .await;
    // Dropped in reverse order: servers first, then the group.
    let _group = ServerGroupGuard {
        session: user.clone(),
        id: group_id.clone(),
    };
    let _servers = ClusterGuard {
        admin: admin.clone(),
        cluster: cluster.clone(),
    };

    // A missing group is named by check, before any create.
    let mut s = settings("m1.small", "nodewright-test-image", Some("nodewright-net"));
    s.server_group = Some(format!("{cluster}-nope"));
    let err = provider(&os.password, s)
        .verify()
        .await
        .expect_err("missing server group");
    assert!(
        matches!(&err, CloudError::NotFound { what, name, .. } if what == "server group" && name == &format!("{cluster}-nope")),
        "{err:?}"
    );

    for (i, wanted) in [group_name.clone(), group_id.clone()].iter().enumerate() {
        let mut s = settings("m1.small", "nodewright-test-image", Some("nodewright-net"));
        s.server_group = Some(wanted.clone());
        let p = provider(&os.password, s);
        p.verify().await.expect("verify with a server group");
        let name = format!("{cluster}-workers-g{i}");
        let created = p
            .create_server(&request(&name, &cluster, "#!/bin/sh\n"))
            .await
            .expect("create_server in a server group");
        wait_for_status(&p, &cluster, &created.id, ServerStatus::Active).await;
        // Nova put it in the group (server_groups: microversion ≥2.71) ...
        let v = user.server_json(&created.id).await;
        assert_eq!(
            v["server"]["server_groups"],
            json!([group_id]),
            "server group of {name} (asked for {wanted})"
        );
        // ... and kept the ownership tags.
        let stored = admin.server(&created.id).await;
        assert_eq!(
            stored.tags,
            vec![
                format!("{CLUSTER_TAG}={cluster}"),
                format!("{GROUP_TAG}=workers"),
                format!("{SETTINGS_HASH_TAG}={HASH}")
            ]
        );
        p.delete_server(&cluster, &created.id)
            .await
            .expect("delete_server");
        assert!(
            admin.server_gone(&created.id).await,
            "server still there after delete_server"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_password_auth_verifies_and_lists() {
    let os = real_os_or_skip!("real_password_auth_verifies_and_lists");
    let p = provider(
        &os.password,
        settings("m1.small", "nodewright-test-image", Some("nodewright-net")),
    );
    p.verify().await.expect("verify with password credentials");
    let cluster = unique_cluster("pw");
    assert!(p.list_servers(&cluster).await.expect("list").is_empty());
    assert_eq!(
        p.group_shape("workers").await.expect("group_shape").memory,
        Some(2 * GI)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_application_credential_auth_creates_and_deletes() {
    let os = real_os_or_skip!("real_application_credential_auth_creates_and_deletes");
    let p = provider(
        &os.appcred,
        settings("m1.small", "nodewright-test-image", None),
    );
    p.verify()
        .await
        .expect("verify with an application credential");
    let cluster = unique_cluster("ac");
    full_lifecycle(&os, &p, &cluster, 2048).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_server_lifecycle_by_names_with_network() {
    let os = real_os_or_skip!("real_server_lifecycle_by_names_with_network");
    let p = provider(
        &os.password,
        settings("m1.small", "nodewright-test-image", Some("nodewright-net")),
    );
    let cluster = unique_cluster("nm");
    full_lifecycle(&os, &p, &cluster, 2048).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_server_lifecycle_by_ids() {
    let os = real_os_or_skip!("real_server_lifecycle_by_ids");
    let p = provider(
        &os.password,
        settings(
            &os.id("FLAVOR_LARGE_ID"),
            &os.id("IMAGE_ID"),
            Some(&os.id("NETWORK_ID")),
        ),
    );
    p.verify().await.expect("verify by ids");
    assert_eq!(
        p.group_shape("workers").await.expect("group_shape").memory,
        Some(8 * GI)
    );
    let cluster = unique_cluster("id");
    full_lifecycle(&os, &p, &cluster, 8192).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_missing_flavor_is_named_in_the_error() {
    let os = real_os_or_skip!("real_missing_flavor_is_named_in_the_error");
    let p = provider(
        &os.password,
        settings("m1.humongous", "nodewright-test-image", None),
    );
    let cluster = unique_cluster("mf");
    let admin = Admin::login(&os).await;
    let _guard = ClusterGuard {
        admin,
        cluster: cluster.clone(),
    };
    let err = p
        .create_server(&request(
            &format!("{cluster}-workers-x"),
            &cluster,
            "#!/bin/sh\n",
        ))
        .await
        .expect_err("a missing flavor fails the create");
    assert!(
        matches!(&err, CloudError::NotFound { what, name, .. } if what == "flavor" && name == "m1.humongous"),
        "{err:?}"
    );
    assert!(err.to_string().contains("m1.humongous"), "{err}");
    let err = p.verify().await.expect_err("verify fails");
    assert!(err.to_string().contains("flavor 'm1.humongous'"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_verify_names_a_missing_image_and_network() {
    let os = real_os_or_skip!("real_verify_names_a_missing_image_and_network");
    let p = provider(
        &os.password,
        settings("m1.small", "no-such-image", Some("nodewright-net")),
    );
    let err = p.verify().await.expect_err("verify fails");
    assert!(
        matches!(&err, CloudError::NotFound { what, name, .. } if what == "image" && name == "no-such-image"),
        "{err:?}"
    );
    assert!(err.to_string().contains("no-such-image"), "{err}");
    // An image id that does not exist (Glance answers 404 in plain text).
    let p = provider(
        &os.password,
        settings(
            "m1.small",
            "00000000-0000-4000-8000-000000000000",
            Some("nodewright-net"),
        ),
    );
    let err = p.verify().await.expect_err("verify fails");
    assert!(
        matches!(&err, CloudError::NotFound { what, .. } if what == "image"),
        "{err:?}"
    );
    let p = provider(
        &os.password,
        settings("m1.small", "nodewright-test-image", Some("no-such-net")),
    );
    let err = p.verify().await.expect_err("verify fails");
    assert!(
        matches!(&err, CloudError::NotFound { what, name, .. } if what == "network" && name == "no-such-net"),
        "{err:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_quota_exceeded_is_a_quota_error() {
    let os = real_os_or_skip!("real_quota_exceeded_is_a_quota_error");
    let admin = Admin::login(&os).await;
    let project = os.id("QUOTA_PROJECT_ID");
    let cluster = unique_cluster("qt");
    // Dropped in reverse order: servers go first, then the quota is reset.
    let _quota = QuotaGuard {
        admin: admin.clone(),
        project: project.clone(),
    };
    let _servers = ClusterGuard {
        admin: admin.clone(),
        cluster: cluster.clone(),
    };
    admin.set_instance_quota(&project, 1).await;
    let p = provider(
        &os.quota,
        settings("m1.small", "nodewright-test-image", None),
    );
    let first = p
        .create_server(&request(
            &format!("{cluster}-workers-00001"),
            &cluster,
            "#!/bin/sh\n",
        ))
        .await
        .expect("the first server fits the quota");
    // Nova counts a server against the quota once it is in a cell: until then a second
    // create is accepted and fails later (ERROR, "Quota exceeded" fault, on the recheck).
    wait_for_status(&p, &cluster, &first.id, ServerStatus::Active).await;
    let err = p
        .create_server(&request(
            &format!("{cluster}-workers-00002"),
            &cluster,
            "#!/bin/sh\n",
        ))
        .await
        .expect_err("the second server is over the quota");
    assert!(matches!(err, CloudError::Quota { .. }), "{err:?}");
    assert!(err.to_string().contains("instances"), "{err}");
    p.delete_server(&cluster, &first.id).await.expect("delete");
    wait_gone(&p, &cluster, &first.id).await;

    // Creates at the same moment race past the API's check: Nova accepts them and its
    // recheck after scheduling puts the extra ones in ERROR with a 413 fault. Either
    // way, no more than the quota ever becomes ACTIVE.
    let requests: Vec<CreateRequest> = (3..6)
        .map(|i| {
            request(
                &format!("{cluster}-workers-0000{i}"),
                &cluster,
                "#!/bin/sh\n",
            )
        })
        .collect();
    let results = futures::future::join_all(requests.iter().map(|r| p.create_server(r))).await;
    let accepted: Vec<Server> = results
        .into_iter()
        .filter_map(|r| match r {
            Ok(s) => Some(s),
            Err(CloudError::Quota { .. }) => None,
            Err(e) => panic!("a create over the quota failed otherwise: {e:?}"),
        })
        .collect();
    assert!(!accepted.is_empty(), "one of them fits");
    let start = Instant::now();
    let settled = loop {
        let listed = p.list_servers(&cluster).await.expect("list");
        let mine: Vec<&Server> = listed
            .iter()
            .filter(|s| accepted.iter().any(|a| a.id == s.id))
            .collect();
        if mine.len() == accepted.len()
            && mine
                .iter()
                .all(|s| matches!(s.status, ServerStatus::Active | ServerStatus::Error))
        {
            break listed;
        }
        assert!(start.elapsed() < BOOT_TIMEOUT, "not settled: {listed:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let active = settled
        .iter()
        .filter(|s| s.status == ServerStatus::Active)
        .count();
    assert!(active <= 1, "over the quota: {settled:?}");
    for listed in admin.servers(&cluster).await {
        let s = admin.server(&listed.id).await;
        if s.status == "ERROR" {
            assert_eq!(s.fault_code, Some(413), "{s:?}");
            assert!(s.fault.starts_with("Quota exceeded for instances"), "{s:?}");
        }
    }
    eprintln!(
        "concurrent creates over a quota of 1: {} accepted, {active} ACTIVE, {} ERROR",
        accepted.len(),
        accepted.len() - active
    );
    admin.delete_cluster(&cluster).await;
    admin.reset_quota(&project).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_no_valid_host_shows_as_error_status() {
    let os = real_os_or_skip!("real_no_valid_host_shows_as_error_status");
    let admin = Admin::login(&os).await;
    let cluster = unique_cluster("nv");
    let _guard = ClusterGuard {
        admin: admin.clone(),
        cluster: cluster.clone(),
    };
    // m1.toobig wants more memory than the fake hypervisor has: accepted, then ERROR.
    let p = provider(
        &os.password,
        settings("m1.toobig", "nodewright-test-image", None),
    );
    let s = p
        .create_server(&request(
            &format!("{cluster}-workers-big01"),
            &cluster,
            "#!/bin/sh\n",
        ))
        .await
        .expect("Nova accepts it");
    let failed = wait_for_status(&p, &cluster, &s.id, ServerStatus::Error).await;
    assert_eq!(failed.name, s.name);
    // Never scheduled, so in cell0: the detail list has no fault, GET has it, with the
    // text the simulator uses for CreateFailure::NoValidHost.
    let listed = admin.servers(&cluster).await;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].fault, "", "{listed:?}");
    let shown = admin.server(&s.id).await;
    assert_eq!(shown.fault, "No valid host was found. ", "{shown:?}");
    assert_eq!(shown.fault_code, Some(500));
    p.delete_server(&cluster, &s.id).await.expect("delete");
    wait_gone(&p, &cluster, &s.id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_wrong_password_or_secret_is_an_auth_error() {
    let os = real_os_or_skip!("real_wrong_password_or_secret_is_an_auth_error");
    let dir = tempfile::tempdir().expect("tempdir");
    for (file, key) in [
        (&os.password, "OS_PASSWORD"),
        (&os.appcred, "OS_APPLICATION_CREDENTIAL_SECRET"),
    ] {
        let text = std::fs::read_to_string(file).expect("credentials file");
        let bad: String = text
            .lines()
            .map(|l| {
                if l.starts_with(&format!("{key}:")) {
                    format!("{key}: \"not-the-secret\"\n")
                } else {
                    format!("{l}\n")
                }
            })
            .collect();
        let path = dir.path().join("bad.yaml");
        std::fs::write(&path, bad).expect("write");
        let p = provider(&path, settings("m1.small", "nodewright-test-image", None));
        let err = p.verify().await.expect_err("wrong credentials are refused");
        assert!(matches!(err, CloudError::Auth { .. }), "{key}: {err:?}");
        assert!(err.to_string().contains("401"), "{err}");
    }
}

// ---------------------------------------------------------------------------
// The loop: simulated cluster, real Nova

/// Feeds the simulated cluster's kubelet from the real Nova: a server of the cluster
/// that goes ACTIVE boots a node with the user data Nova holds; one that disappears
/// is reported deleted. Stops when dropped.
struct NovaKubeletBridge {
    task: tokio::task::JoinHandle<()>,
    log: Arc<Mutex<Vec<String>>>,
}

impl NovaKubeletBridge {
    fn start(admin: Admin, cluster: String, hook: VmHook) -> NovaKubeletBridge {
        let log: Arc<Mutex<Vec<String>>> = Arc::default();
        let events = log.clone();
        let task = tokio::spawn(async move {
            let mut booted: BTreeMap<String, String> = BTreeMap::new(); // id -> name
            loop {
                let servers = admin.servers(&cluster).await;
                for s in &servers {
                    if s.status == "ACTIVE" && !booted.contains_key(&s.id) {
                        booted.insert(s.id.clone(), s.name.clone());
                        events.lock().unwrap().push(format!("booted {}", s.name));
                        hook(VmEvent::Booted {
                            name: s.name.clone(),
                            user_data: s.user_data.clone().unwrap_or_default(),
                            memory_bytes: s.ram_mib << 20,
                            cpus: s.vcpus,
                        });
                    }
                }
                let gone: Vec<String> = booted
                    .keys()
                    .filter(|id| !servers.iter().any(|s| &s.id == *id))
                    .cloned()
                    .collect();
                for id in gone {
                    if let Some(name) = booted.remove(&id) {
                        events.lock().unwrap().push(format!("deleted {name}"));
                        hook(VmEvent::Deleted { name });
                    }
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        });
        NovaKubeletBridge { task, log }
    }

    fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
}

impl Drop for NovaKubeletBridge {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn drive(
    rec: &Reconciler,
    what: &str,
    timeout: Duration,
    mut done: impl FnMut() -> bool,
) -> Vec<Action> {
    let start = Instant::now();
    let mut actions = Vec::new();
    loop {
        match rec.cycle(SystemTime::now()).await {
            Ok(report) if report.decision.action != Action::None => {
                actions.push(report.decision.action.clone())
            }
            Ok(_) => {}
            Err(e) => panic!("{what}: cycle failed against the real OpenStack: {e}"),
        }
        if done() {
            return actions;
        }
        assert!(
            start.elapsed() < timeout,
            "{what}: not done after {timeout:?}; actions: {actions:#?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_loop_scales_up_and_down_against_real_nova() {
    let os = real_os_or_skip!("real_loop_scales_up_and_down_against_real_nova");
    let admin = Admin::login(&os).await;
    let cluster_name = unique_cluster("lp");
    let _guard = ClusterGuard {
        admin: admin.clone(),
        cluster: cluster_name.clone(),
    };

    let cluster = SimCluster::start(SimClusterOptions {
        node_ready_delay: Duration::from_millis(300),
        pod_start_delay: Duration::from_millis(200),
        ..SimClusterOptions::default()
    })
    .await
    .expect("simulated cluster starts");
    cluster
        .add_node(
            SimNodeSpec::new("control-plane", 4 * GI)
                .label("node-role.kubernetes.io/control-plane", "true")
                .taint("node-role.kubernetes.io/control-plane", None, "NoSchedule"),
        )
        .expect("control-plane node");
    let bridge = NovaKubeletBridge::start(admin.clone(), cluster_name.clone(), cluster.vm_hook());

    let dir = tempfile::tempdir().expect("tempdir");
    let templates = dir.path().join("templates");
    std::fs::create_dir_all(&templates).expect("templates dir");
    for (name, text) in SHIPPED_TEMPLATES {
        std::fs::write(templates.join(name), text).expect("template");
    }
    let config_path = dir.path().join("autoscaler.yaml");
    std::fs::write(
        &config_path,
        format!(
            r#"clusterName: {cluster_name}
templatesDir: {templates}
freeMemoryTarget: 0 B
provisionTimeout: 5m
scanInterval: 1s
imagePuller: {{enabled: false}}
nodeGroups:
  - name: workers
    provider: openstack
    minSize: 0
    maxSize: 2
    openstack: {{flavor: m1.large, image: nodewright-test-image, network: nodewright-net}}
    userData:
      template: k3s-agent.cloud-init.yaml.j2
      variables: {{k3s_url: "https://192.0.2.1:6443", k3s_token: "real-tier-token"}}
"#,
            templates = templates.display()
        ),
    )
    .expect("config written");
    let config = Config::load(&config_path).expect("config loads");
    let creds = os.password.clone();
    let clouds = build_clouds_with(&config, |kind| {
        (kind == ProviderKind::Openstack).then(|| creds.clone())
    })
    .expect("clouds build");
    let rec = Reconciler {
        config: Arc::new(config),
        cluster: Arc::new(KubeCluster::new(
            cluster.kube_client().await.expect("kube client"),
        )),
        clouds,
        dry_run: false,
    };

    // Scale up: two 3 GiB pods fit on no node (the control plane is tainted).
    cluster
        .add_replicaset(
            "default",
            "web",
            2,
            SimPodTemplate::new("nginx:1.25", 3 * GI),
        )
        .expect("replicaset");
    let web_running = || {
        let pods: Vec<Pod> = cluster
            .pods()
            .into_iter()
            .filter(|p| {
                p.metadata
                    .name
                    .as_deref()
                    .is_some_and(|n| n.starts_with("web"))
            })
            .collect();
        pods.len() == 2 && pods.iter().all(running)
    };
    let up = drive(&rec, "scale-up", Duration::from_secs(180), web_running).await;
    assert!(
        up.contains(&Action::ScaleUp {
            group: "workers".into(),
            count: 1
        }),
        "{up:?}"
    );
    let servers = admin.servers(&cluster_name).await;
    assert_eq!(servers.len(), 1, "one VM in the real Nova: {servers:?}");
    let vm = servers[0].clone();
    assert_eq!(vm.status, "ACTIVE");
    assert_eq!(vm.ram_mib, 8192);
    let user_data = vm.user_data.clone().unwrap_or_default();
    assert!(user_data.starts_with("#cloud-config"), "{user_data}");
    assert!(user_data.contains("nodewright.io/startup=true:NoSchedule"));
    let node = cluster.node(&vm.name).expect("the VM joined as a node");
    assert!(ready(&node));
    assert!(up.contains(&Action::RemoveStartupTaint {
        nodes: vec![vm.name.clone()]
    }));
    for p in cluster.pods().into_iter().filter(|p| {
        p.metadata
            .name
            .as_deref()
            .is_some_and(|n| n.starts_with("web"))
    }) {
        assert_eq!(p.spec.and_then(|s| s.node_name), Some(vm.name.clone()));
    }

    // Scale down: the pods go and nodewright's cordon is on the node (as a process that
    // died after cordoning leaves it); nodewright deletes the Node, then the VM.
    cluster
        .scale_replicaset("default", "web", 0)
        .expect("scale to 0");
    let nodes: Api<Node> = Api::all(cluster.kube_client().await.expect("client"));
    nodes
        .patch(
            &vm.name,
            &PatchParams::default(),
            &Patch::Merge(common::cordon_patch(true)),
        )
        .await
        .expect("cordon");
    let vm_gone = Arc::new(Mutex::new(false));
    let down = {
        let (admin, cluster_name, flag) = (admin.clone(), cluster_name.clone(), vm_gone.clone());
        let watcher = tokio::spawn(async move {
            loop {
                if admin.servers(&cluster_name).await.is_empty() {
                    *flag.lock().unwrap() = true;
                    return;
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        });
        let actions = drive(&rec, "scale-down", Duration::from_secs(180), || {
            cluster.node(&vm.name).is_none() && *vm_gone.lock().unwrap()
        })
        .await;
        watcher.abort();
        actions
    };
    assert!(
        down.iter()
            .any(|a| matches!(a, Action::DeleteNodes { nodes } if nodes.iter().any(|t| t.node == vm.name))),
        "{down:?}"
    );
    assert!(
        admin.server_gone(&vm.id).await,
        "server still there after delete_server"
    );
    assert_eq!(
        admin.servers(&cluster_name).await.len(),
        0,
        "no VM left in the real Nova"
    );
    // The bridge saw the boot, then (on its next poll) the deletion.
    let start = Instant::now();
    while bridge.log().len() < 2 && start.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let seen = bridge.log();
    assert_eq!(
        seen,
        vec![
            format!("booted {}", vm.name),
            format!("deleted {}", vm.name)
        ],
        "{seen:?}"
    );
    cluster.shutdown();
}

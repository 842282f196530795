//! [`OpenStackProvider`]: the [`CloudProvider`] over Keystone, Nova, Glance and Neutron.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex as StdMutex;
use std::time::{Duration, Instant, SystemTime};

use async_trait::async_trait;
use base64::Engine as _;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use tokio::sync::Mutex;

use super::auth::{authenticate, Session};
use super::credentials::OpenStackCredentials;
use super::http::{api_error, build_client, transport};
use super::nova::{
    next_query, ownership_tags, CreatedEnvelope, Flavor, FlavorList, NovaServer, ServerEnvelope,
    ServerGroupList, ServerList, COMPUTE_MICROVERSION, MAX_USER_DATA_BASE64,
};
use super::{OpenStackSettings, PROVIDER};
use crate::cloud::http::seg;

mod poll;
mod refs;
mod resolve;
mod warm;
use crate::cloud::http::RetryAfterGate;
use crate::cloud::{
    check_owned, CloudError, CloudProvider, CreateRequest, CLUSTER_TAG, GROUP_TAG,
    SETTINGS_HASH_TAG,
};
use crate::model::{GroupShape, Server, ServerStatus, SizeShape, SIZE_TAG};
use poll::Look;

/// Tunables of [`OpenStackProvider`]; the defaults suit real clouds.
#[derive(Debug, Clone)]
pub struct ProviderOptions {
    /// TCP + TLS connect timeout of every request.
    pub connect_timeout: Duration,
    /// Whole-request timeout of every request.
    pub request_timeout: Duration,
    /// How long a flavor/image/network/server group name→id resolution is reused.
    pub resolve_ttl: Duration,
    /// How long `delete_server` waits, after Nova accepted the delete, for the server
    /// to be gone (`GET /servers/{id}` 404 or status DELETED) before it gives up.
    pub delete_timeout: Duration,
    /// First pause between those checks; it doubles up to [`MAX_DELETE_POLL`].
    pub delete_poll_interval: Duration,
}

/// Longest pause between two checks of a deleted server.
pub const MAX_DELETE_POLL: Duration = Duration::from_secs(5);

impl Default for ProviderOptions {
    fn default() -> Self {
        ProviderOptions {
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(60),
            resolve_ttl: Duration::from_secs(300),
            delete_timeout: Duration::from_secs(120),
            delete_poll_interval: Duration::from_millis(250),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    Flavor,
    Image,
    Network,
    ServerGroup,
    KeyPair,
    SecurityGroup,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Flavor => "flavor",
            Kind::Image => "image",
            Kind::Network => "network",
            Kind::ServerGroup => "server group",
            Kind::KeyPair => "key pair",
            Kind::SecurityGroup => "security group",
        }
    }
}

#[derive(Debug, Clone)]
enum Resolved {
    Flavor(Flavor),
    Id(String),
}

/// OpenStack as a [`CloudProvider`]: one project, one or more node groups.
pub struct OpenStackProvider {
    creds: OpenStackCredentials,
    groups: BTreeMap<String, OpenStackSettings>,
    http: reqwest::Client,
    options: ProviderOptions,
    session: Mutex<Option<Session>>,
    resolved: StdMutex<HashMap<(Kind, String), (Resolved, Instant)>>,
    /// Keystone's and Nova's last Retry-After.
    retry_after: RetryAfterGate,
}

impl std::fmt::Debug for OpenStackProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenStackProvider")
            .field("auth_url", &self.creds.auth_url)
            .field("groups", &self.groups.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

fn not_found(kind: Kind, name: &str) -> CloudError {
    CloudError::NotFound {
        provider: PROVIDER.into(),
        what: kind.as_str().into(),
        name: name.into(),
        detail: String::new(),
    }
}

fn other(message: String) -> CloudError {
    CloudError::Other {
        provider: PROVIDER.into(),
        message,
    }
}

fn looks_like_uuid(s: &str) -> bool {
    let hex: String = s.chars().filter(|c| *c != '-').collect();
    hex.len() == 32 && hex.chars().all(|c| c.is_ascii_hexdigit())
}

/// Versioned base URL of a catalog endpoint (`…/v2`, `…/v2.0`).
fn versioned(base: &str, version: &str) -> String {
    let base = base.trim_end_matches('/');
    if base.ends_with(&format!("/{version}")) {
        base.to_string()
    } else {
        format!("{base}/{version}")
    }
}

async fn read_json<T: DeserializeOwned>(
    call: &str,
    resp: reqwest::Response,
) -> Result<T, CloudError> {
    let bytes = crate::cloud::http::read_body(PROVIDER, call, resp).await?;
    serde_json::from_slice(&bytes)
        .map_err(|e| other(format!("{call}: unexpected response body: {e}")))
}

async fn ensure_success(
    call: &str,
    resp: reqwest::Response,
) -> Result<reqwest::Response, CloudError> {
    let status = resp.status();
    if status.is_success() {
        return Ok(resp);
    }
    let body = crate::cloud::http::read_text(PROVIDER, call, resp)
        .await
        .unwrap_or_else(|e| e.to_string());
    Err(api_error(call, status.as_u16(), &body))
}

impl OpenStackProvider {
    /// Builds the provider; no request is made until first use (see [`Self::check`]).
    pub fn new(
        credentials: OpenStackCredentials,
        groups: BTreeMap<String, OpenStackSettings>,
    ) -> Result<Self, CloudError> {
        Self::with_options(credentials, groups, ProviderOptions::default())
    }

    pub fn with_options(
        credentials: OpenStackCredentials,
        groups: BTreeMap<String, OpenStackSettings>,
        options: ProviderOptions,
    ) -> Result<Self, CloudError> {
        let http = build_client(
            &credentials,
            options.connect_timeout,
            options.request_timeout,
        )?;
        Ok(OpenStackProvider {
            creds: credentials,
            groups,
            http,
            options,
            session: Mutex::new(None),
            resolved: StdMutex::new(HashMap::new()),
            retry_after: RetryAfterGate::default(),
        })
    }

    /// Verifies the credentials and that every flavor, image, network and server group the node
    /// groups refer to exists; the error names the first missing one. One line per group.
    pub async fn check(&self) -> Result<Vec<String>, CloudError> {
        self.session().await?;
        let mut lines = vec!["credentials ok".to_string()];
        for (group, settings) in &self.groups {
            let named = |e: CloudError| {
                tracing::error!(group = %group, error = %e, "OpenStack node group settings refer to something that cannot be used");
                e
            };
            for f in settings.flavor.all() {
                self.flavor(f).await.map_err(named)?;
            }
            self.image_id(&settings.image).await.map_err(named)?;
            if let Some(net) = &settings.network {
                self.network_id(net).await.map_err(named)?;
            }
            let mut found = format!(
                "group {group}: flavor {}, image {}",
                settings.flavor, settings.image
            );
            if let Some(net) = &settings.network {
                found.push_str(&format!(", network {net}"));
            }
            if let Some(sg) = &settings.server_group {
                self.server_group_id(sg).await.map_err(named)?;
                found.push_str(&format!(", server group {sg}"));
            }
            if let Some(key) = &settings.key_name {
                self.check_key_pair(key).await.map_err(named)?;
                found.push_str(&format!(", key pair {key}"));
            }
            if !settings.security_groups.is_empty() {
                self.check_security_groups(&settings.security_groups)
                    .await
                    .map_err(named)?;
                found.push_str(&format!(
                    ", security groups {}",
                    settings.security_groups.join(", ")
                ));
            }
            if let Some(zone) = &settings.availability_zone {
                self.check_availability_zone(zone).await.map_err(named)?;
                found.push_str(&format!(", availability zone {zone}"));
            }
            lines.push(format!("{found} exist"));
        }
        Ok(lines)
    }

    /// Drops cached flavor/image/network resolutions (e.g. at the start of a cycle).
    pub fn forget_resolutions(&self) {
        self.resolved
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    async fn session(&self) -> Result<Session, CloudError> {
        let mut guard = self.session.lock().await;
        if let Some(s) = guard.as_ref() {
            if !s.needs_renewal(SystemTime::now()) {
                return Ok(s.clone());
            }
            tracing::debug!("renewing OpenStack token before it expires");
        }
        let fresh = authenticate(&self.http, &self.creds, &self.retry_after).await?;
        *guard = Some(fresh.clone());
        Ok(fresh)
    }

    async fn invalidate(&self, token: &str) {
        let mut guard = self.session.lock().await;
        if guard.as_ref().is_some_and(|s| s.token == token) {
            *guard = None;
        }
    }

    /// Sends a request built against the current session; on 401 re-authenticates
    /// once and retries. A GET is tried again after a transient failure (see
    /// [`crate::cloud::http::READ_RETRIES`]). Returns any other response as is.
    async fn send<F>(&self, call: &str, build: F) -> Result<reqwest::Response, CloudError>
    where
        F: Fn(&Session) -> Result<reqwest::RequestBuilder, CloudError>,
    {
        use crate::cloud::http::{read_retry_pause, READ_RETRIES};
        let mut retried = false;
        let mut attempt = 0;
        loop {
            let session = self.session().await?;
            self.retry_after.wait(PROVIDER).await;
            let req = build(&session)?
                .header("X-Auth-Token", &session.token)
                .header("Accept", "application/json")
                .build()
                .map_err(|e| transport(call, &e))?;
            let read = req.method() == reqwest::Method::GET;
            let sent = self.http.execute(req).await;
            let again = read
                && attempt < READ_RETRIES
                && match &sent {
                    Ok(r) => r.status().as_u16() == 429 || r.status().is_server_error(),
                    Err(_) => true,
                };
            if again {
                attempt += 1;
                if let Ok(r) = &sent {
                    self.retry_after.note(r.status().as_u16(), r.headers());
                }
                tracing::debug!(call, attempt, "OpenStack read failed; trying again");
                tokio::time::sleep(read_retry_pause(attempt)).await;
                continue;
            }
            let resp = sent.map_err(|e| transport(call, &e))?;
            self.retry_after
                .note(resp.status().as_u16(), resp.headers());
            if resp.status() != reqwest::StatusCode::UNAUTHORIZED {
                return Ok(resp);
            }
            self.invalidate(&session.token).await;
            if retried {
                let body = crate::cloud::http::read_text(PROVIDER, call, resp)
                    .await
                    .unwrap_or_else(|e| e.to_string());
                return Err(CloudError::Auth {
                    provider: PROVIDER.into(),
                    message: format!(
                        "{call}: rejected with HTTP 401 after re-authenticating: {}",
                        super::http::error_message(&body)
                    ),
                });
            }
            tracing::debug!(call, "OpenStack returned 401, re-authenticating once");
            retried = true;
        }
    }

    fn nova(&self, rb: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        rb.header(
            "OpenStack-API-Version",
            format!("compute {COMPUTE_MICROVERSION}"),
        )
        .header("X-OpenStack-Nova-API-Version", COMPUTE_MICROVERSION)
    }

    fn cached(&self, kind: Kind, name: &str) -> Option<Resolved> {
        let map = self.resolved.lock().unwrap_or_else(|e| e.into_inner());
        map.get(&(kind, name.to_string()))
            .filter(|(_, at)| at.elapsed() < self.options.resolve_ttl)
            .map(|(r, _)| r.clone())
    }

    fn remember(&self, kind: Kind, name: &str, r: Resolved) {
        self.resolved
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert((kind, name.to_string()), (r, Instant::now()));
    }

    /// After an accepted delete: polls `GET /servers/{id}` until Nova answers 404 or
    /// shows the server DELETED, with a short first pause that doubles up to
    /// [`MAX_DELETE_POLL`], for at most [`ProviderOptions::delete_timeout`].
    async fn wait_deleted(&self, id: &str) -> Result<(), CloudError> {
        let judge = |server: Option<&NovaServer>| {
            match server {
            None => Look::Done,
            Some(s) if s.status.eq_ignore_ascii_case("DELETED") => Look::Done,
            // Nova marks the server `deleting` before it answers 204; without that task
            // the delete was lost (or undone) and waiting longer cannot help: the next
            // cycle deletes it again.
            Some(s) if s.task_state.as_deref() != Some("deleting") => Look::Failed(format!(
                "the delete of server '{}' ({id}) was accepted but Nova is not deleting it (status {}, no task in progress); it is deleted again next cycle",
                s.name, s.status
            )),
            Some(_) => Look::Waiting,
        }
        };
        let deadline = self.options.delete_timeout;
        let late = ("still exists", "its delete was accepted");
        self.poll_server(id, deadline, judge, late).await
    }

    fn settings(&self, group: &str) -> Result<&OpenStackSettings, CloudError> {
        self.groups
            .get(group)
            .ok_or_else(|| other(format!("no OpenStack settings for node group '{group}'")))
    }

    /// Creates a server of `req.group`; `warm`: marked for the warm pool, on its one
    /// boot to join before it is parked (see [`warm`]).
    pub(super) async fn create(
        &self,
        req: &CreateRequest,
        warm: bool,
    ) -> Result<Server, CloudError> {
        let settings = self.settings(&req.group)?;
        // The flavor the plan chose among the group's, else its first.
        let wanted = match &req.size {
            Some(f) if settings.flavor.all().contains(f) => f.as_str(),
            Some(f) => {
                return Err(other(format!(
                    "flavor {f} is not one of group {}'s ({})",
                    req.group, settings.flavor
                )))
            }
            None => settings.flavor.first(),
        };
        let flavor = self.flavor(wanted).await?;
        let image = self.image_id(&settings.image).await?;
        let networks = match &settings.network {
            Some(n) => json!([{ "uuid": self.network_id(n).await? }]),
            None => json!("none"),
        };
        let user_data = base64::engine::general_purpose::STANDARD.encode(req.user_data.as_bytes());
        if user_data.len() > MAX_USER_DATA_BASE64 {
            return Err(other(format!(
                "user data for '{}' is {} bytes base64-encoded; Nova accepts at most {MAX_USER_DATA_BASE64}",
                req.name,
                user_data.len()
            )));
        }
        let mut server = serde_json::Map::new();
        server.insert("name".into(), json!(req.name));
        server.insert("flavorRef".into(), json!(flavor.id));
        server.insert("imageRef".into(), json!(image));
        server.insert("networks".into(), networks);
        server.insert("user_data".into(), json!(user_data));
        let mut metadata = json!({ CLUSTER_TAG: req.cluster, GROUP_TAG: req.group });
        if !req.settings_hash.is_empty() {
            metadata[SETTINGS_HASH_TAG] = json!(req.settings_hash);
        }
        if let Some(size) = &req.size {
            metadata[SIZE_TAG] = json!(size);
        }
        if warm {
            metadata[warm::WARM_KEY] = json!(warm::WARM_FILLING);
        }
        server.insert("metadata".into(), metadata);
        if let Some(k) = &settings.key_name {
            server.insert("key_name".into(), json!(k));
        }
        if !settings.security_groups.is_empty() {
            let sgs: Vec<Value> = settings
                .security_groups
                .iter()
                .map(|n| json!({ "name": n }))
                .collect();
            server.insert("security_groups".into(), Value::Array(sgs));
        }
        if let Some(az) = &settings.availability_zone {
            server.insert("availability_zone".into(), json!(az));
        }
        let tags = ownership_tags(&req.cluster, &req.group, &req.settings_hash);
        if !tags.is_empty() {
            server.insert("tags".into(), json!(tags));
        }
        let mut body = json!({ "server": server });
        if let Some(sg) = &settings.server_group {
            // A top-level key beside "server", not inside it.
            body["os:scheduler_hints"] = json!({ "group": self.server_group_id(sg).await? });
        }
        let call = "POST /servers";
        let resp = self
            .send(call, |s| {
                Ok(self.nova(self.http.post(format!("{}/servers", s.compute)).json(&body)))
            })
            .await?;
        let resp = match ensure_success(call, resp).await {
            Ok(r) => r,
            Err(e) => {
                // A stale name→id resolution may be the cause; resolve afresh next time.
                if matches!(
                    e,
                    CloudError::Api {
                        status: 400..=499,
                        ..
                    }
                ) {
                    self.forget_resolutions();
                }
                return Err(e);
            }
        };
        let created: CreatedEnvelope = read_json(call, resp).await?;
        tracing::info!(server = %req.name, id = %created.server.id, group = %req.group, "OpenStack server requested");
        Ok(Server {
            id: created.server.id,
            name: req.name.clone(),
            cluster: Some(req.cluster.clone()),
            group: Some(req.group.clone()),
            status: ServerStatus::Building,
            created: SystemTime::now(),
            memory_bytes: Some(flavor.ram.saturating_mul(1024 * 1024)),
            provider: PROVIDER.into(),
            settings_hash: Some(req.settings_hash.clone()).filter(|h| !h.is_empty()),
            size: req.size.clone(),
            fault: None,
            warm,
            filling: warm,
            joined: None,
            restarted: None,
            fenced: None,
            removing_since: None,
        })
    }
}

#[async_trait]
impl CloudProvider for OpenStackProvider {
    fn name(&self) -> &str {
        PROVIDER
    }

    async fn list_servers(&self, cluster: &str) -> Result<Vec<Server>, CloudError> {
        let call = "GET /servers/detail";
        let mut out = Vec::new();
        let mut query: Option<String> = None;
        for _ in 0..10_000 {
            let q = query.clone();
            let resp = self
                .send(call, |s| {
                    let mut url = format!("{}/servers/detail", s.compute);
                    if let Some(q) = &q {
                        url = format!("{url}?{q}");
                    }
                    Ok(self.nova(self.http.get(url)))
                })
                .await?;
            let page: ServerList = read_json(call, ensure_success(call, resp).await?).await?;
            let done = page.servers.is_empty();
            // Servers of a Nova cell that cannot be reached come back as partial records
            // (status UNKNOWN, no name or metadata): whether they are ours is unknown, so
            // the whole listing is: without them a group would look smaller than it is
            // and grow past maxSize.
            let partial: Vec<&str> = page
                .servers
                .iter()
                .filter(|s| s.status == "UNKNOWN" && s.metadata.is_empty())
                .map(|s| s.id.as_str())
                .collect();
            if !partial.is_empty() {
                return Err(CloudError::Other {
                    provider: PROVIDER.into(),
                    message: format!(
                        "{call}: Nova listed {} server(s) only partly, status UNKNOWN without name or metadata ({}): a cell is down, so the listing is incomplete; this provider's groups stay frozen until the cell is back",
                        partial.len(),
                        partial.join(", ")
                    ),
                });
            }
            for s in page
                .servers
                .iter()
                .filter(|s| s.metadata.get(CLUSTER_TAG).map(String::as_str) == Some(cluster))
            {
                let mut server = s.to_server();
                if server.status == ServerStatus::Error {
                    if server.fault.is_none() {
                        // A listing leaves out the fault of a server that never got a host
                        // (cell0); the server itself still has it.
                        match self.get_server(cluster, &s.id).await {
                            Ok(Some(one)) => server.fault = one.fault,
                            Ok(None) => {}
                            Err(e) => {
                                tracing::debug!(server = %s.name, error = %e, "could not read the fault of a server in ERROR")
                            }
                        }
                    }
                    if let Some(f) = &server.fault {
                        tracing::warn!(server = %s.name, id = %s.id, fault = %f, "OpenStack server is in ERROR");
                    }
                }
                out.push(server);
            }
            query = next_query(&page.servers_links);
            if query.is_none() || done {
                break;
            }
        }
        Ok(out)
    }

    async fn create_server(&self, req: &CreateRequest) -> Result<Server, CloudError> {
        self.create(req, false).await
    }

    async fn create_warm(&self, req: &CreateRequest) -> Result<Server, CloudError> {
        self.create(req, true).await
    }

    async fn start_warm(
        &self,
        cluster: &str,
        id: &str,
        render: &crate::cloud::RenderJoin<'_>,
    ) -> Result<(), CloudError> {
        self.start_parked(cluster, id, render).await
    }

    async fn park(&self, cluster: &str, id: &str) -> Result<(), CloudError> {
        self.park_server(cluster, id).await
    }

    /// Server metadata [`crate::cloud::JOINED_TAG`] = Unix seconds, merged into the
    /// server's metadata after it is read back and found `cluster`'s.
    async fn mark_joined(
        &self,
        cluster: &str,
        id: &str,
        at: Option<SystemTime>,
    ) -> Result<(), CloudError> {
        self.mark_server_joined(cluster, id, at).await
    }

    async fn mark_removing(&self, cluster: &str, id: &str) -> Result<(), CloudError> {
        self.mark_server_removing(cluster, id).await
    }

    async fn restart(&self, cluster: &str, id: &str, at: SystemTime) -> Result<(), CloudError> {
        self.restart_server(cluster, id, at).await
    }

    async fn fence(&self, cluster: &str, id: &str, at: SystemTime) -> Result<(), CloudError> {
        self.fence_server(cluster, id, at).await
    }

    async fn group_shape(&self, group: &str) -> Result<GroupShape, CloudError> {
        let settings = self.settings(group)?;
        let mut sizes = Vec::new();
        for name in settings.flavor.all() {
            let flavor = self.flavor(name).await?;
            sizes.push(SizeShape {
                // As the config names it: what a scale-up asks for by name.
                name: name.clone(),
                cpu_milli: (flavor.vcpus > 0).then(|| u64::from(flavor.vcpus) * 1000),
                memory: Some(flavor.ram.saturating_mul(1024 * 1024)),
            });
        }
        let flavor = self.flavor(settings.flavor.first()).await?;
        if sizes.len() < 2 {
            sizes.clear();
        }
        Ok(GroupShape {
            cpu_milli: (flavor.vcpus > 0).then(|| u64::from(flavor.vcpus) * 1000),
            memory: Some(flavor.ram.saturating_mul(1024 * 1024)),
            instance_type: Some(flavor.name.clone()),
            zone: settings.availability_zone.clone(),
            region: self.creds.region.clone(),
            hosts: None,
            sizes,
        })
    }

    async fn verify(&self) -> Result<Vec<String>, CloudError> {
        self.check().await
    }

    async fn get_server(&self, _cluster: &str, id: &str) -> Result<Option<Server>, CloudError> {
        let call = "GET /servers/{id}";
        let resp = self
            .send(call, |s| {
                Ok(self.nova(self.http.get(format!("{}/servers/{}", s.compute, seg(id)))))
            })
            .await?;
        if resp.status() == reqwest::StatusCode::NOT_FOUND {
            return Ok(None);
        }
        let server = read_json::<ServerEnvelope>(call, ensure_success(call, resp).await?)
            .await?
            .server;
        if server.status.eq_ignore_ascii_case("DELETED") {
            return Ok(None);
        }
        if server.status == "UNKNOWN" && server.metadata.is_empty() {
            return Err(CloudError::Other {
                provider: PROVIDER.into(),
                message: format!(
                    "{call}: Nova shows server {id} only partly (status UNKNOWN, no metadata): its cell is down; nothing is decided on it until the cell is back"
                ),
            });
        }
        Ok(Some(server.to_server()))
    }

    /// Reads the server back (`GET /servers/{id}`: metadata and tags) and deletes it only
    /// when it is `cluster`'s.
    async fn delete_server(&self, cluster: &str, id: &str) -> Result<(), CloudError> {
        let Some(server) = self.get_server(cluster, id).await? else {
            tracing::debug!(id, "server already gone");
            return Ok(());
        };
        check_owned(PROVIDER, &server, cluster)?;
        let call = "DELETE /servers/{id}";
        let resp = self
            .send(call, |s| {
                Ok(self.nova(
                    self.http
                        .delete(format!("{}/servers/{}", s.compute, seg(id))),
                ))
            })
            .await?;
        if resp.status() == reqwest::StatusCode::NOT_FOUND {
            tracing::debug!(id, "server already gone");
            return Ok(());
        }
        ensure_success(call, resp).await?;
        self.wait_deleted(id).await
    }
}

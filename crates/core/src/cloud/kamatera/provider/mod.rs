//! [`KamateraProvider`]: the [`CloudProvider`] over the cloudcli REST API.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use async_trait::async_trait;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

use super::api::{
    error_message, is_auth_message, is_quota_message, yes_no, CommandIds, CreateServerBody,
    ServerEntry, TagRow,
};
use super::credentials::KamateraCredentials;
use super::settings::KamateraSize;
use super::{
    cluster_tag, group_tag, hash_tag, is_time_tag_suffix, parse_fenced_tag, parse_hash_tag,
    parse_joined_tag, parse_removing_tag, parse_restarted_tag, parse_started_tag, parse_time_tag,
    time_tag, warm_tag, KamateraSettings, UserDataField, DEFAULT_TAG_PREFIX, PROVIDER,
};
use crate::cloud::registry::Settings as _;
use crate::cloud::{http, refused, CloudError, CloudProvider, CreateRequest};
use crate::model::{GroupShape, Server, ServerStatus};

mod derive;
mod warm;
pub use derive::generate_password;
pub(super) use derive::status_of;
use derive::*;

/// Tunables of [`KamateraProvider`]; the defaults suit the real API.
#[derive(Debug, Clone)]
pub struct ProviderOptions {
    /// TCP + TLS connect timeout of every request.
    pub connect_timeout: Duration,
    /// Whole-request timeout of every request.
    pub request_timeout: Duration,
    /// First pause before polling a queued command; doubled after each poll...
    pub poll_initial: Duration,
    /// ...up to this.
    pub poll_max: Duration,
    /// Deadline of commands not tied to a group (power, terminate); groups have their own
    /// `commandTimeout` for creates.
    pub command_timeout: Duration,
    /// How long a server's tags are reused by listings before they are read again: a
    /// person may change them (take a server out of the pool, or away from nodewright).
    /// Every call that changes a server reads its tags afresh whatever this says.
    pub tag_ttl: Duration,
}

impl Default for ProviderOptions {
    fn default() -> Self {
        ProviderOptions {
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(120),
            poll_initial: Duration::from_millis(250),
            poll_max: Duration::from_secs(10),
            command_timeout: Duration::from_secs(30 * 60),
            tag_ttl: Duration::from_secs(10 * 60),
        }
    }
}

/// Kamatera as a [`CloudProvider`]: one account (API key), one or more node groups.
pub struct KamateraProvider {
    creds: KamateraCredentials,
    pub(super) groups: BTreeMap<String, KamateraSettings>,
    http: reqwest::Client,
    pub(super) options: ProviderOptions,
    /// Tags by server id and when they were read (see [`ProviderOptions::tag_ttl`]).
    tags: Mutex<HashMap<String, (Vec<String>, Instant)>>,
    /// Last resort for the creation time of a server without a creation-time tag
    /// (`<tagPrefix>-t<unix seconds>`, set on every create since that tag exists): when
    /// this process first listed it. The API has no creation date anywhere (not in
    /// `GET /service/servers`, not in `POST /service/server/info`), so for such servers
    /// alone a restart restarts the clock (`provisionTimeout`, age). Servers with the tag
    /// never use this.
    first_seen: Mutex<HashMap<String, SystemTime>>,
    /// The API's last Retry-After.
    retry_after: http::RetryAfterGate,
}

impl std::fmt::Debug for KamateraProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KamateraProvider")
            .field("url", &self.creds.url)
            .field("groups", &self.groups.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

pub(super) fn other(message: String) -> CloudError {
    CloudError::Other {
        provider: PROVIDER.into(),
        message,
    }
}

/// A transport-level failure (connect, TLS, timeout, body read).
fn transport(call: &str, e: &reqwest::Error) -> CloudError {
    http::transport(PROVIDER, call, e)
}

/// Maps a non-success response to a [`CloudError`] carrying the API's message.
pub fn api_error(call: &str, status: u16, body: &str) -> CloudError {
    let message = error_message(body);
    let refusal = if status == 401 || status == 403 || is_auth_message(&message) {
        http::Refusal::Auth
    } else if is_quota_message(&message) {
        http::Refusal::Quota
    } else {
        http::Refusal::Other
    };
    http::api_error(PROVIDER, call, status, message, refusal)
}

impl KamateraProvider {
    /// Builds the provider; no request is made until first use.
    pub fn new(
        credentials: KamateraCredentials,
        groups: BTreeMap<String, KamateraSettings>,
    ) -> Result<Self, CloudError> {
        Self::with_options(credentials, groups, ProviderOptions::default())
    }

    pub fn with_options(
        credentials: KamateraCredentials,
        groups: BTreeMap<String, KamateraSettings>,
        options: ProviderOptions,
    ) -> Result<Self, CloudError> {
        let http = http::build(
            http::client_builder(options.connect_timeout, options.request_timeout),
            PROVIDER,
        )?;
        Ok(KamateraProvider {
            creds: credentials,
            groups,
            http,
            options,
            tags: Mutex::new(HashMap::new()),
            first_seen: Mutex::new(HashMap::new()),
            retry_after: http::RetryAfterGate::default(),
        })
    }

    fn settings(&self, group: &str) -> Result<&KamateraSettings, CloudError> {
        self.groups
            .get(group)
            .ok_or_else(|| other(format!("no Kamatera settings for node group '{group}'")))
    }

    /// Distinct tag prefixes of the groups (the default when there is none).
    fn prefixes(&self) -> BTreeSet<&str> {
        let mut p: BTreeSet<&str> = self
            .groups
            .values()
            .map(|s| s.tag_prefix.as_str())
            .collect();
        if p.is_empty() {
            p.insert(DEFAULT_TAG_PREFIX);
        }
        p
    }

    /// Sends one request with the API key headers; any non-2xx becomes an error with
    /// the API's message. Bodies are never logged (they may hold passwords). Reads (GETs
    /// and the read-only `info` and `tags` POSTs) are tried again after a transient
    /// failure (see [`http::READ_RETRIES`]).
    pub(super) async fn send<T: DeserializeOwned>(
        &self,
        call: &str,
        method: reqwest::Method,
        path: &str,
        query: Option<&[(&str, &str)]>,
        body: Option<&Value>,
    ) -> Result<T, CloudError> {
        let read = method == reqwest::Method::GET
            || matches!(path, "/service/server/info" | "/server/tags");
        let mut attempt = 0;
        loop {
            match self
                .send_once(call, method.clone(), path, query, body)
                .await
            {
                Err(e) if read && attempt < http::READ_RETRIES && http::transient(&e) => {
                    attempt += 1;
                    tracing::debug!(call, error = %e, attempt, "Kamatera read failed; trying again");
                    tokio::time::sleep(http::read_retry_pause(attempt)).await;
                }
                r => return r,
            }
        }
    }

    async fn send_once<T: DeserializeOwned>(
        &self,
        call: &str,
        method: reqwest::Method,
        path: &str,
        query: Option<&[(&str, &str)]>,
        body: Option<&Value>,
    ) -> Result<T, CloudError> {
        let url = format!("{}{path}", self.creds.url);
        let mut rb = self
            .http
            .request(method, url)
            .header("AuthClientId", &self.creds.client_id)
            .header("AuthSecret", &self.creds.secret)
            .header("Accept", "application/json");
        if let Some(q) = query {
            rb = rb.query(q);
        }
        if let Some(b) = body {
            rb = rb.json(b);
        }
        self.retry_after.wait(PROVIDER).await;
        let resp = rb.send().await.map_err(|e| transport(call, &e))?;
        self.retry_after
            .note(resp.status().as_u16(), resp.headers());
        let status = resp.status();
        let bytes = http::read_body(PROVIDER, call, resp).await?;
        if !status.is_success() {
            return Err(api_error(
                call,
                status.as_u16(),
                &String::from_utf8_lossy(&bytes),
            ));
        }
        serde_json::from_slice(&bytes).map_err(|e| {
            other(format!(
                "{call}: unexpected response ({e}): {}",
                error_message(&String::from_utf8_lossy(&bytes))
            ))
        })
    }

    pub(super) async fn post<T: DeserializeOwned>(
        &self,
        call: &str,
        path: &str,
        body: &Value,
    ) -> Result<T, CloudError> {
        self.send(call, reqwest::Method::POST, path, None, Some(body))
            .await
    }

    /// `GET /service/servers`: every server of the account.
    pub async fn list_all(&self) -> Result<Vec<ServerEntry>, CloudError> {
        self.send(
            "GET /service/servers",
            reqwest::Method::GET,
            "/service/servers",
            None,
            None,
        )
        .await
    }

    /// Tags of a server (`POST /server/tags`), cached per server id for
    /// [`ProviderOptions::tag_ttl`]. The rows are read in the current shape
    /// `{"id", "tagName"}` and the older `{"tag name"}` (see [`TagRow`]).
    pub async fn server_tags(&self, id: &str) -> Result<Vec<String>, CloudError> {
        if let Some((t, _)) = self
            .lock_tags()
            .get(id)
            .filter(|(_, at)| at.elapsed() < self.options.tag_ttl)
        {
            return Ok(t.clone());
        }
        let rows: Vec<TagRow> = self
            .post("POST /server/tags", "/server/tags", &json!({ "id": id }))
            .await?;
        let tags: Vec<String> = rows.into_iter().map(TagRow::into_name).collect();
        self.lock_tags()
            .insert(id.to_string(), (tags.clone(), Instant::now()));
        Ok(tags)
    }

    /// Adds a tag to a server (`POST /server/tags` with `add`).
    pub async fn add_tag(&self, id: &str, tag: &str) -> Result<(), CloudError> {
        let _: Value = self
            .post(
                "POST /server/tags (add)",
                "/server/tags",
                &json!({ "id": id, "add": tag }),
            )
            .await?;
        self.lock_tags().remove(id);
        Ok(())
    }

    /// Tags of a server read now, not from the cache (which is refreshed with them).
    pub async fn fresh_tags(&self, id: &str) -> Result<Vec<String>, CloudError> {
        self.lock_tags().remove(id);
        self.server_tags(id).await
    }

    /// The tag prefix under which server `entry` (with `tags`) is `cluster`'s, or why it
    /// is not: its name must start with `<cluster>-` and one of its tags must be
    /// `<tagPrefix>-<cluster>` for a tag prefix of this provider's groups.
    fn owner_prefix(
        &self,
        entry: &ServerEntry,
        tags: &[String],
        cluster: &str,
    ) -> Result<&str, String> {
        if !entry.name.starts_with(&format!("{cluster}-")) {
            return Err(format!(
                "its name does not start with '{cluster}-', as the names of cluster '{cluster}' do"
            ));
        }
        let prefixes = self.prefixes();
        prefixes
            .iter()
            .copied()
            .find(|p| tags.iter().any(|t| *t == cluster_tag(p, cluster)))
            .ok_or_else(|| {
                let wanted: Vec<String> =
                    prefixes.iter().map(|p| cluster_tag(p, cluster)).collect();
                let have = if tags.is_empty() {
                    "none".to_string()
                } else {
                    tags.join(", ")
                };
                format!("it has no tag {} (its tags: {have})", wanted.join(" or "))
            })
    }

    /// `entry` as a [`Server`] of `cluster`, tagged under `prefix`.
    fn to_server(
        &self,
        entry: &ServerEntry,
        tags: &[String],
        prefix: &str,
        cluster: &str,
    ) -> Server {
        let group = group_of(&entry.name, tags, prefix, cluster, &self.groups);
        let created = match created_from_tags(tags, prefix) {
            Some(t) => t,
            None => *self.lock_seen().entry(entry.id.clone()).or_insert_with(|| {
                tracing::warn!(server = %entry.name, id = %entry.id, "Kamatera server has no creation-time tag `{prefix}-t<unix seconds>`; counting its age from now, and again after a restart");
                SystemTime::now()
            }),
        };
        // Started out of a warm pool: its clock counts from that start.
        let started = tags
            .iter()
            .filter_map(|t| parse_started_tag(prefix, t))
            .max();
        let created = started.map_or(created, |s| s.max(created));
        let filling = tags.contains(&warm_tag(prefix, true));
        let warm = filling || tags.contains(&warm_tag(prefix, false));
        let joined = tags
            .iter()
            .filter_map(|t| parse_joined_tag(prefix, t))
            .max();
        let restarted = tags
            .iter()
            .filter_map(|t| parse_restarted_tag(prefix, t))
            .max();
        let fenced = tags
            .iter()
            .filter_map(|t| parse_fenced_tag(prefix, t))
            .max();
        let removing: Vec<Option<SystemTime>> = tags
            .iter()
            .filter_map(|t| parse_removing_tag(prefix, t))
            .collect();
        let memory_bytes = group
            .as_deref()
            .and_then(|g| self.groups.get(g))
            .and_then(|g| g.size_named(None))
            .map(|s| s.ram.bytes());
        Server {
            id: entry.id.clone(),
            name: entry.name.clone(),
            cluster: Some(cluster.to_string()),
            group,
            status: if !removing.is_empty() {
                ServerStatus::Removing
            } else {
                status_of(entry.power.as_deref())
            },
            created,
            memory_bytes,
            provider: PROVIDER.into(),
            size: None,
            settings_hash: only_one(tags.iter().filter_map(|t| parse_hash_tag(prefix, t))),
            fault: None,
            warm,
            filling,
            joined,
            restarted,
            fenced,
            removing_since: removing.into_iter().flatten().max(),
        }
    }

    fn lock_tags(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Vec<String>, Instant)>> {
        self.tags.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_seen(&self) -> std::sync::MutexGuard<'_, HashMap<String, SystemTime>> {
        self.first_seen.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn forget(&self, id: &str) {
        self.lock_tags().remove(id);
        self.lock_seen().remove(id);
    }

    fn create_body(
        &self,
        req: &CreateRequest,
        settings: &KamateraSettings,
        password: String,
        created: SystemTime,
        warm: bool,
        size: &KamateraSize,
    ) -> CreateServerBody {
        let mut tags = vec![
            cluster_tag(&settings.tag_prefix, &req.cluster),
            group_tag(&settings.tag_prefix, &req.group),
            time_tag(&settings.tag_prefix, created),
        ];
        tags.extend(warm.then(|| warm_tag(&settings.tag_prefix, true)));
        tags.extend(hash_tag(&settings.tag_prefix, &req.settings_hash));
        tags.extend(settings.extra_tags.iter().cloned());
        let (script, userdata) = match settings.user_data_field {
            UserDataField::Script => (req.user_data.clone(), String::new()),
            UserDataField::Userdata => (String::new(), req.user_data.clone()),
        };
        CreateServerBody {
            name: req.name.clone(),
            password_validate: password.clone(),
            password,
            ssh_key: settings.ssh_key.clone().unwrap_or_default(),
            datacenter: settings.datacenter.clone(),
            image: settings.image.clone(),
            cpu: size.cpu.clone(),
            ram: size.ram.0.to_string(),
            disk: settings.disks.join(" "),
            dailybackup: yes_no(settings.daily_backup),
            managed: yes_no(settings.managed),
            network: settings.networks.join(" "),
            quantity: 1,
            billingcycle: settings.billing_cycle.as_str(),
            monthlypackage: settings.monthly_package.clone().unwrap_or_default(),
            poweronaftercreate: "yes",
            script_file: script,
            userdata_file: userdata,
            tag: tags.join(" "),
        }
    }

    /// After a failed create, removes what it may have left (best effort).
    async fn clean_up_failed_create(&self, name: &str, cluster_tag: &str) {
        let Ok(servers) = self.list_all().await else {
            return;
        };
        for s in servers.iter().filter(|s| s.name == name) {
            let ours = self
                .server_tags(&s.id)
                .await
                .is_ok_and(|t| t.iter().any(|t| t == cluster_tag));
            if !ours {
                continue;
            }
            match self.terminate(&s.id).await {
                Ok(()) => {
                    tracing::info!(server = name, id = %s.id, "removed the server a failed create left behind")
                }
                Err(e) => {
                    tracing::warn!(server = name, id = %s.id, error = %e, "could not remove the server a failed create left behind; it is retried as a failed VM")
                }
            }
        }
    }

    /// Creates a server of `req.group`; `warm`: tagged for the warm pool, on its one boot
    /// to join before it is parked (see `warm.rs`).
    async fn create(&self, req: &CreateRequest, warm: bool) -> Result<Server, CloudError> {
        let settings = self.settings(&req.group)?;
        // The size the plan chose among the group's, else its first.
        let size = settings.size_named(req.size.as_deref()).ok_or_else(|| {
            other(format!(
                "size {} is not one of group {}'s",
                req.size.as_deref().unwrap_or_default(),
                req.group
            ))
        })?;
        if !valid_server_name(&req.name) {
            return Err(other(format!(
                "server name '{}' is not valid on Kamatera: expected at least 4 of a-z A-Z 0-9 ( ) _ -",
                req.name
            )));
        }
        // Whole seconds: what the creation-time tag holds, so every process (this one
        // included, on its next listing) reads back exactly this time.
        let created = whole_seconds(SystemTime::now());
        let body = self.create_body(req, settings, generate_password()?, created, warm, &size);
        let value = serde_json::to_value(&body)
            .map_err(|e| other(format!("cannot encode the create request: {e}")))?;
        drop(body);
        let ids: CommandIds = self
            .post("POST /service/server", "/service/server", &value)
            .await?;
        drop(value);
        tracing::info!(server = %req.name, group = %req.group, commands = ?ids.0.iter().map(|c| c.0.as_str()).collect::<Vec<_>>(), "Kamatera server requested");
        let own_tag = cluster_tag(&settings.tag_prefix, &req.cluster);
        let what = format!("create server {}", req.name);
        if let Err(e) = self
            .wait_all(&what, &ids, settings.command_timeout, Some(&req.name))
            .await
        {
            if !matches!(e, CloudError::Other { ref message, .. } if message.contains("did not finish"))
            {
                self.clean_up_failed_create(&req.name, &own_tag).await;
            }
            return Err(e);
        }
        let servers = self.list_all().await?;
        let mut found: Option<ServerEntry> = None;
        for s in servers.into_iter().filter(|s| s.name == req.name) {
            let tags = self.server_tags(&s.id).await?;
            if found.is_none() || tags.contains(&own_tag) {
                found = Some(s);
            }
        }
        let entry = found.ok_or_else(|| {
            other(format!(
                "{what}: the command completed but no server of that name is listed"
            ))
        })?;
        // Ownership and age must be readable back: add any tag the create did not set.
        let have = self.server_tags(&entry.id).await?;
        let stamp = (created_from_tags(&have, &settings.tag_prefix).is_none())
            .then(|| time_tag(&settings.tag_prefix, created));
        for tag in [own_tag.clone(), group_tag(&settings.tag_prefix, &req.group)]
            .into_iter()
            .chain(stamp)
            .chain(hash_tag(&settings.tag_prefix, &req.settings_hash))
            .chain(warm.then(|| warm_tag(&settings.tag_prefix, true)))
        {
            if !have.contains(&tag) {
                tracing::warn!(server = %req.name, tag = %tag, "tag missing after create; adding it");
                self.add_tag(&entry.id, &tag).await?;
            }
        }
        let mut status = status_of(entry.power.as_deref());
        if status == ServerStatus::Stopped {
            tracing::info!(server = %req.name, "server is powered off after create; powering it on");
            self.power_on(&entry.id).await?;
            status = ServerStatus::Active;
        }
        tracing::info!(server = %req.name, id = %entry.id, "Kamatera server created");
        Ok(Server {
            id: entry.id,
            name: req.name.clone(),
            cluster: Some(req.cluster.clone()),
            group: Some(req.group.clone()),
            status,
            created,
            memory_bytes: Some(size.ram.bytes()),
            provider: PROVIDER.into(),
            size: req.size.clone(),
            settings_hash: hash_tag(&settings.tag_prefix, &req.settings_hash)
                .map(|_| req.settings_hash.clone()),
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
impl CloudProvider for KamateraProvider {
    fn name(&self) -> &str {
        PROVIDER
    }

    async fn list_servers(&self, cluster: &str) -> Result<Vec<Server>, CloudError> {
        let all = self.list_all().await?;
        let listed: BTreeSet<&str> = all.iter().map(|s| s.id.as_str()).collect();
        self.lock_tags()
            .retain(|id, _| listed.contains(id.as_str()));
        self.lock_seen()
            .retain(|id, _| listed.contains(id.as_str()));
        let name_lead = format!("{cluster}-");
        let mut out = Vec::new();
        // Only servers named like ours have their tags read (one call each, then cached
        // for `tag_ttl`); the tags decide.
        for s in all.iter().filter(|s| s.name.starts_with(&name_lead)) {
            let tags = self.server_tags(&s.id).await?;
            if let Ok(prefix) = self.owner_prefix(s, &tags, cluster) {
                out.push(self.to_server(s, &tags, prefix, cluster));
            }
        }
        Ok(out)
    }

    /// Lists the account's servers and reads the tags of server `id` afresh (not from the
    /// cache: a person may have changed them).
    async fn get_server(&self, cluster: &str, id: &str) -> Result<Option<Server>, CloudError> {
        let Some(entry) = self.list_all().await?.into_iter().find(|s| s.id == id) else {
            return Ok(None);
        };
        let tags = self.fresh_tags(id).await?;
        Ok(Some(match self.owner_prefix(&entry, &tags, cluster) {
            Ok(prefix) => self.to_server(&entry, &tags, prefix, cluster),
            Err(_) => Server {
                id: entry.id.clone(),
                name: entry.name.clone(),
                cluster: None,
                group: None,
                status: status_of(entry.power.as_deref()),
                created: SystemTime::UNIX_EPOCH,
                memory_bytes: None,
                provider: PROVIDER.into(),
                size: None,
                settings_hash: None,
                fault: None,
                warm: false,
                filling: false,
                joined: None,
                restarted: None,
                fenced: None,
                removing_since: None,
            },
        }))
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

    /// Terminates server `id` only when it is `cluster`'s by its name and its tags, both
    /// read back just before (the tags afresh), as [`CloudProvider::list_servers`] decides.
    async fn delete_server(&self, cluster: &str, id: &str) -> Result<(), CloudError> {
        let Some(entry) = self.list_all().await?.into_iter().find(|s| s.id == id) else {
            tracing::debug!(id, "Kamatera server already gone");
            self.forget(id);
            return Ok(());
        };
        let tags = self.fresh_tags(id).await?;
        if let Err(reason) = self.owner_prefix(&entry, &tags, cluster) {
            return Err(refused(PROVIDER, &entry.name, id, reason));
        }
        self.terminate(id).await
    }

    async fn group_shape(&self, group: &str) -> Result<GroupShape, CloudError> {
        let s = self.settings(group)?;
        // What the settings say is what a server gets: no call needed.
        Ok(s.offline_shape())
    }

    /// Checks the API key, and each group's datacenter, image and CPU through the API.
    async fn verify(&self) -> Result<Vec<String>, CloudError> {
        self.check().await
    }
}

#[cfg(test)]
mod tests;

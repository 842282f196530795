//! Nova (compute) shapes and their mapping onto [`Server`].

use std::collections::BTreeMap;
use std::time::SystemTime;

use serde::Deserialize;

use super::time::parse_timestamp;
use super::PROVIDER;
use crate::cloud::{CLUSTER_TAG, GROUP_TAG, JOINED_TAG, REMOVING_TAG, SETTINGS_HASH_TAG};
use crate::model::{Server, ServerStatus};

/// Server metadata key of the warm mark: [`WARM_FILLING`] or [`WARM_PARKED`]; read back
/// every cycle, so a fresh process knows the pool.
pub const WARM_KEY: &str = "nodewright-warm";
/// Made for the pool, on its one boot to join (user data runs only then).
pub const WARM_FILLING: &str = "filling";
/// Stopped in the pool, ready to be started.
pub const WARM_PARKED: &str = "parked";
/// Server metadata key: Unix seconds of its last start out of the warm pool. Its
/// provisioning clock (and age) counts from then, not from Nova's `created`.
pub const STARTED_KEY: &str = "nodewright-started";

/// The compute microversion requested on every Nova call: embedded flavor details
/// (≥2.47) and no image/network proxies (≥2.36) are relied upon.
pub const COMPUTE_MICROVERSION: &str = "2.79";

/// Nova's limit on the base64-encoded `user_data` field.
pub const MAX_USER_DATA_BASE64: usize = 65535;

#[derive(Debug, Clone, Deserialize)]
pub struct Link {
    #[serde(default)]
    pub href: String,
    #[serde(default)]
    pub rel: String,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Flavor {
    pub id: String,
    pub name: String,
    /// MiB.
    #[serde(default)]
    pub ram: u64,
    #[serde(default)]
    pub vcpus: u32,
}

#[derive(Debug, Deserialize)]
pub struct FlavorList {
    #[serde(default)]
    pub flavors: Vec<Flavor>,
    #[serde(default)]
    pub flavors_links: Vec<Link>,
}

/// The flavor embedded in a server (microversion ≥2.47).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct EmbeddedFlavor {
    #[serde(default)]
    pub ram: Option<u64>,
    #[serde(default)]
    pub vcpus: Option<u32>,
    #[serde(default)]
    pub original_name: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct NovaServer {
    pub id: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub status: String,
    #[serde(default, rename = "OS-EXT-STS:task_state")]
    pub task_state: Option<String>,
    #[serde(default)]
    pub created: Option<String>,
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
    #[serde(default)]
    pub flavor: Option<EmbeddedFlavor>,
    /// Why a server is in ERROR ("No valid host was found. ...", or a 413 "Quota
    /// exceeded ..." when creates raced past the API's quota check and Nova's recheck
    /// after scheduling failed them).
    #[serde(default)]
    pub fault: Option<Fault>,
    /// Server tags (microversion ≥2.26); nodewright's are `<key>=<value>`.
    #[serde(default)]
    pub tags: Vec<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct Fault {
    #[serde(default)]
    pub code: Option<u16>,
    #[serde(default)]
    pub message: String,
}

#[derive(Debug, Deserialize)]
pub struct ServerList {
    #[serde(default)]
    pub servers: Vec<NovaServer>,
    #[serde(default)]
    pub servers_links: Vec<Link>,
}

#[derive(Debug, Deserialize)]
pub struct ServerEnvelope {
    pub server: NovaServer,
}

#[derive(Debug, Deserialize)]
pub struct CreatedServer {
    pub id: String,
}

#[derive(Debug, Deserialize)]
pub struct CreatedEnvelope {
    pub server: CreatedServer,
}

/// A server group as `GET /os-server-groups` lists it (only what is used).
#[derive(Debug, Clone, Deserialize)]
pub struct ServerGroup {
    pub id: String,
    #[serde(default)]
    pub name: String,
}

#[derive(Debug, Deserialize)]
pub struct ServerGroupList {
    #[serde(default)]
    pub server_groups: Vec<ServerGroup>,
}

/// Nova's rules for one server tag (API schema, microversion ≥2.26): at most this
/// many characters, and neither `/` nor `,`.
pub const MAX_TAG_LENGTH: usize = 60;
/// Nova's limit on the number of tags of one server.
pub const MAX_TAGS: usize = 50;
/// Tags may be given in `POST /servers` from this microversion on.
pub const TAGS_ON_CREATE_MICROVERSION: (u32, u32) = (2, 52);

/// Whether Nova accepts `tag` as a server tag.
pub fn valid_tag(tag: &str) -> bool {
    !tag.is_empty() && tag.chars().count() <= MAX_TAG_LENGTH && !tag.contains(['/', ','])
}

/// Parses a `major.minor` microversion.
pub fn parse_microversion(v: &str) -> Option<(u32, u32)> {
    let (a, b) = v.trim().split_once('.')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// Ownership tags of a new server and its settings hash (empty: none), `<key>=<value>`
/// (Nova allows `=`), leaving out any that Nova would refuse (too long, `/` or `,` in a
/// name), and none at all when [`COMPUTE_MICROVERSION`] predates tags on create.
///
/// Tags are extra visibility only (`openstack server list --tags ...`, dashboards):
/// the metadata keys stay the source of truth for listing, because every server
/// nodewright ever created carries them (older ones have no tags), they hold any
/// cluster and group name without Nova's 60-character, no-`/`-or-`,` tag limits,
/// and a key/value pair cannot be misread the way a flat tag string can.
pub fn ownership_tags(cluster: &str, group: &str, settings_hash: &str) -> Vec<String> {
    let supported = parse_microversion(COMPUTE_MICROVERSION)
        .is_some_and(|mv| mv >= TAGS_ON_CREATE_MICROVERSION);
    if !supported {
        return Vec::new();
    }
    [
        (CLUSTER_TAG, cluster),
        (GROUP_TAG, group),
        (SETTINGS_HASH_TAG, settings_hash),
    ]
    .iter()
    .filter(|(_, v)| !v.is_empty())
    .map(|(k, v)| format!("{k}={v}"))
        .filter(|t| {
            let ok = valid_tag(t);
            if !ok {
                tracing::debug!(tag = %t, "not a valid Nova server tag; left out (metadata still says it)");
            }
        ok
    })
    .take(MAX_TAGS)
    .collect()
}

/// Maps Nova's `status` (and `OS-EXT-STS:task_state`) onto [`ServerStatus`].
pub fn map_status(status: &str, task_state: Option<&str>) -> ServerStatus {
    if matches!(task_state, Some("deleting")) {
        return ServerStatus::Deleting;
    }
    match status.to_ascii_uppercase().as_str() {
        "BUILD" | "REBUILD" => ServerStatus::Building,
        "ACTIVE" | "REBOOT" | "HARD_REBOOT" | "PASSWORD" | "RESIZE" | "VERIFY_RESIZE"
        | "REVERT_RESIZE" | "MIGRATING" => ServerStatus::Active,
        "ERROR" => ServerStatus::Error,
        "DELETED" | "SOFT_DELETED" => ServerStatus::Deleting,
        "SHUTOFF" | "STOPPED" | "PAUSED" | "SUSPENDED" | "SHELVED" | "SHELVED_OFFLOADED"
        | "RESCUE" => ServerStatus::Stopped,
        _ => ServerStatus::Unknown,
    }
}

impl NovaServer {
    /// The metadata value of ownership key `key`, unless a server tag `<key>=<value>`
    /// names another value: metadata and tags that disagree make the server nobody's.
    pub fn ownership(&self, key: &str) -> Option<String> {
        let meta = self.metadata.get(key)?;
        let lead = format!("{key}=");
        match self
            .tags
            .iter()
            .filter_map(|t| t.strip_prefix(&lead))
            .find(|v| *v != meta)
        {
            None => Some(meta.clone()),
            Some(tag) => {
                tracing::warn!(server = %self.name, id = %self.id, key, metadata = %meta, tag, "server metadata and tags disagree on ownership; treating it as nobody's");
                None
            }
        }
    }

    /// The settings hash the server was made with: its metadata, else its tag.
    pub fn settings_hash(&self) -> Option<String> {
        let lead = format!("{SETTINGS_HASH_TAG}=");
        self.metadata
            .get(SETTINGS_HASH_TAG)
            .cloned()
            .or_else(|| {
                self.tags
                    .iter()
                    .find_map(|t| t.strip_prefix(&lead).map(str::to_string))
            })
            .filter(|h| !h.is_empty())
    }

    /// Converts to the provider-neutral shape; `created` falls back to the epoch
    /// when Nova's timestamp is missing or unreadable (logged).
    pub fn to_server(&self) -> Server {
        let created = match self.created.as_deref().map(|c| (c, parse_timestamp(c))) {
            Some((_, Some(t))) => t,
            Some((raw, None)) => {
                tracing::warn!(server = %self.id, created = %raw, "cannot parse server creation time");
                SystemTime::UNIX_EPOCH
            }
            None => SystemTime::UNIX_EPOCH,
        };
        let started = self
            .metadata
            .get(STARTED_KEY)
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(|secs| SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(secs));
        let created = started.map_or(created, |s| s.max(created));
        let secs_of = |key: &str| {
            self.metadata
                .get(key)
                .and_then(|v| v.trim().parse::<u64>().ok())
                .and_then(|secs| {
                    SystemTime::UNIX_EPOCH.checked_add(std::time::Duration::from_secs(secs))
                })
        };
        let joined = secs_of(JOINED_TAG);
        let restarted = secs_of(crate::cloud::RESTARTED_TAG);
        let fenced = secs_of(crate::cloud::FENCED_TAG);
        // Unix seconds; an unreadable value is a mark with no time.
        let removing_since = secs_of(REMOVING_TAG);
        let mark = self.metadata.get(WARM_KEY).map(String::as_str);
        Server {
            id: self.id.clone(),
            name: self.name.clone(),
            cluster: self.ownership(CLUSTER_TAG),
            group: self.ownership(GROUP_TAG),
            status: match map_status(&self.status, self.task_state.as_deref()) {
                // Marked before its removal; Nova deleting it says more.
                ServerStatus::Deleting => ServerStatus::Deleting,
                _ if self.metadata.contains_key(REMOVING_TAG) => ServerStatus::Removing,
                s => s,
            },
            created,
            memory_bytes: self
                .flavor
                .as_ref()
                .and_then(|f| f.ram)
                .map(|mib| mib.saturating_mul(1024 * 1024)),
            provider: PROVIDER.into(),
            settings_hash: self.settings_hash(),
            size: self
                .metadata
                .get(crate::model::SIZE_TAG)
                .filter(|s| !s.is_empty())
                .cloned(),
            fault: self
                .fault
                .as_ref()
                .map(|f| f.message.trim().to_string())
                .filter(|m| !m.is_empty()),
            warm: matches!(mark, Some(WARM_FILLING | WARM_PARKED)),
            filling: mark == Some(WARM_FILLING),
            joined,
            restarted,
            fenced,
            removing_since,
        }
    }
}

/// The query string of a `rel="next"` link, applied by the caller to its own endpoint
/// (Nova's link prefix is often an internal host name).
pub fn next_query(links: &[Link]) -> Option<String> {
    let next = links.iter().find(|l| l.rel == "next")?;
    let url = reqwest::Url::parse(&next.href).ok()?;
    url.query().map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses() {
        assert_eq!(map_status("BUILD", None), ServerStatus::Building);
        assert_eq!(map_status("ACTIVE", None), ServerStatus::Active);
        assert_eq!(
            map_status("ACTIVE", Some("deleting")),
            ServerStatus::Deleting
        );
        assert_eq!(map_status("ERROR", None), ServerStatus::Error);
        assert_eq!(map_status("SOFT_DELETED", None), ServerStatus::Deleting);
        assert_eq!(map_status("SHUTOFF", None), ServerStatus::Stopped);
        assert_eq!(map_status("WHATEVER", None), ServerStatus::Unknown);
    }

    #[test]
    fn tags_follow_nova_rules() {
        assert_eq!(
            ownership_tags("prod", "workers", "0a1b2c3d4e5f"),
            vec![
                "nodewright-cluster=prod".to_string(),
                "nodewright-group=workers".to_string(),
                "nodewright-settings-hash=0a1b2c3d4e5f".to_string()
            ]
        );
        assert!(valid_tag("a=b c"));
        assert!(!valid_tag("a/b"));
        assert!(!valid_tag("a,b"));
        assert!(!valid_tag(""));
        assert!(valid_tag(&"x".repeat(MAX_TAG_LENGTH)));
        assert!(!valid_tag(&"x".repeat(MAX_TAG_LENGTH + 1)));
        // Too long for a tag: left out, the other one stays.
        let long = "g".repeat(50);
        assert_eq!(
            ownership_tags("prod", &long, ""),
            vec!["nodewright-cluster=prod".to_string()]
        );
        assert_eq!(parse_microversion("2.79"), Some((2, 79)));
        assert_eq!(parse_microversion("x"), None);
    }

    #[test]
    fn metadata_and_tags_that_disagree_make_a_server_nobodys() {
        let server = |meta: &str, tags: &[&str]| NovaServer {
            id: "id".into(),
            name: "c-workers-x".into(),
            status: "ACTIVE".into(),
            task_state: None,
            created: None,
            metadata: BTreeMap::from([
                (CLUSTER_TAG.to_string(), meta.to_string()),
                (GROUP_TAG.to_string(), "workers".to_string()),
            ]),
            flavor: None,
            fault: None,
            tags: tags.iter().map(|t| t.to_string()).collect(),
        };
        let agree = server("c", &["nodewright-cluster=c", "other"]);
        assert_eq!(agree.to_server().cluster.as_deref(), Some("c"));
        assert_eq!(agree.to_server().group.as_deref(), Some("workers"));
        // No tags (older servers, or names too long for a tag): metadata decides.
        assert_eq!(server("c", &[]).to_server().cluster.as_deref(), Some("c"));
        let disagree = server("c", &["nodewright-cluster=b"]).to_server();
        assert_eq!(disagree.cluster, None);
        assert_eq!(disagree.group.as_deref(), Some("workers"));
    }

    #[test]
    fn next_link_query() {
        let links = vec![Link {
            href: "http://nova-internal:8774/v2.1/servers/detail?limit=2&marker=abc".into(),
            rel: "next".into(),
        }];
        assert_eq!(next_query(&links).as_deref(), Some("limit=2&marker=abc"));
        assert_eq!(next_query(&[]), None);
    }
}

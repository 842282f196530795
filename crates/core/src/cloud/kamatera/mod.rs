//! Kamatera: the cloudcli REST API (`https://cloudcli.cloudwm.com`), ownership in server tags.
//!
//! - [`credentials`]: the YAML credentials file (`url`, `clientId`, `secret`).
//! - [`api`]: wire shapes (command ids as strings or integers, queue entries, tags).
//! - [`settings`]: the `kamatera:` block of a node group (serde, validation, shape, hash).
//! - [`provider`]: [`KamateraProvider`], the [`crate::cloud::CloudProvider`].
//! - `commands`: waiting for queued commands; power and terminate.
//! - `catalog`: what `nodewright check` verifies (datacenters, images, CPU types).
//!
//! A server belongs to cluster `C` when it carries the tag `<tagPrefix>-C`; its group `G`
//! is the other tag `<tagPrefix>-G` (see [`cluster_tag`], [`group_tag`]). The API reports no
//! creation time, so nodewright records it as a third tag `<tagPrefix>-t<unix seconds>`
//! (see [`time_tag`], [`parse_time_tag`]): a restarted process reads it back. The group
//! settings a server was made from are a fourth tag, `<tagPrefix>_h<hash>` ([`hash_tag`]).

pub mod api;
mod catalog;
mod commands;
pub mod credentials;
pub mod provider;
pub mod settings;

use std::time::{Duration, SystemTime};

pub use credentials::{KamateraCredentials, DEFAULT_URL};
pub use provider::{KamateraProvider, ProviderOptions};
pub use settings::{
    parse_cpu, parse_ram, validate_settings, BillingCycle, KamateraSettings, RamMb, UserDataField,
};

/// Provider name used in errors, logs and [`crate::model::Server::provider`].
pub const PROVIDER: &str = "kamatera";

/// Default prefix of the ownership tags.
pub const DEFAULT_TAG_PREFIX: &str = "nodewright";

/// Longest server tag nodewright creates. Kamatera does not document its tag limit; the
/// official cluster autoscaler caps cluster and group names at 15 characters "due to the
/// limitation of Kamatera server tags" behind its 8-character `k8scang-` prefix, so 23
/// characters is the longest tag known to be accepted.
pub const MAX_TAG_LEN: usize = 23;

/// Digits of the seconds in the creation-time tag: Unix time has 10 digits from 2001 until
/// 2286, so a tag prefix that fits with 10 digits keeps fitting.
pub const TIME_TAG_DIGITS: usize = 10;

/// Digits of the settings hash in its tag: the 48-bit hash in base 36, so the tag is as
/// long as the creation-time tag and fits wherever that one does.
pub const HASH_TAG_DIGITS: usize = 10;

/// Kamatera accepts at most 4 disks and 4 networks per server.
pub const MAX_DISKS: usize = 4;
pub const MAX_NETWORKS: usize = 4;

/// The tag marking servers of `cluster`.
pub fn cluster_tag(prefix: &str, cluster: &str) -> String {
    format!("{prefix}-{cluster}")
}

/// The tag marking servers of `group`.
pub fn group_tag(prefix: &str, group: &str) -> String {
    format!("{prefix}-{group}")
}

/// The tag recording when a server was created: `<prefix>-t<unix seconds>`, e.g.
/// `nodewright-t1718000000` (sub-second precision is dropped).
pub fn time_tag(prefix: &str, created: SystemTime) -> String {
    let secs = created
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    format!("{prefix}-t{secs}")
}

/// The warm-pool mark: `<prefix>_wfill` on a server made for its group's warm pool and on
/// its one boot to join, `<prefix>_wpark` on one powered off in the pool. The `_` keeps
/// them apart from the `<prefix>-<group>` tags.
pub fn warm_tag(prefix: &str, filling: bool) -> String {
    format!("{prefix}_{}", if filling { "wfill" } else { "wpark" })
}

/// `<prefix>_rm`: nodewright began removing the server ([`crate::cloud::REMOVING_TAG`]),
/// as older releases marked it, with no time; read, never written now.
pub fn removing_tag(prefix: &str) -> String {
    format!("{prefix}_rm")
}

/// `<prefix>_r<unix seconds>`: when nodewright began removing the server
/// ([`crate::cloud::REMOVING_TAG`]); as long as the start tag, so it fits wherever that does.
pub fn removing_tag_at(prefix: &str, at: SystemTime) -> String {
    format!("{prefix}_r{}", crate::model::unix_secs(at))
}

/// A removing mark of `prefix`: `Some(Some(time))` for [`removing_tag_at`]'s, `Some(None)`
/// for an older release's [`removing_tag`], `None` for any other tag.
pub fn parse_removing_tag(prefix: &str, tag: &str) -> Option<Option<SystemTime>> {
    let rest = tag.strip_prefix(prefix)?.strip_prefix("_r")?;
    if rest == "m" {
        return Some(None);
    }
    if rest.is_empty() || !rest.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(SystemTime::UNIX_EPOCH.checked_add(Duration::from_secs(rest.parse().ok()?)))
}

/// `<prefix>_s<unix seconds>`: when a server was last started out of the warm pool; its
/// age and `provisionTimeout` count from then.
pub fn started_tag(prefix: &str, at: SystemTime) -> String {
    let secs = at
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    format!("{prefix}_s{secs}")
}

/// The time in a tag written by [`started_tag`] with `prefix`.
pub fn parse_started_tag(prefix: &str, tag: &str) -> Option<SystemTime> {
    let digits = tag.strip_prefix(prefix)?.strip_prefix("_s")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    SystemTime::UNIX_EPOCH.checked_add(Duration::from_secs(digits.parse().ok()?))
}

/// `<prefix>_j<unix seconds>`: when the server's node was recorded Ready (see
/// [`crate::cloud::JOINED_TAG`]); as long as the start tag, so it fits wherever that does.
pub fn joined_tag(prefix: &str, at: SystemTime) -> String {
    format!("{prefix}_j{}", crate::model::unix_secs(at))
}

/// The time in a tag written by [`joined_tag`] with `prefix`.
pub fn parse_joined_tag(prefix: &str, tag: &str) -> Option<SystemTime> {
    let digits = tag.strip_prefix(prefix)?.strip_prefix("_j")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    SystemTime::UNIX_EPOCH.checked_add(Duration::from_secs(digits.parse().ok()?))
}

/// `<prefix>_b<unix seconds>`: when nodewright restarted the server because its Node was
/// gone (see [`crate::cloud::RESTARTED_TAG`]); as long as the start tag.
pub fn restarted_tag(prefix: &str, at: SystemTime) -> String {
    format!("{prefix}_b{}", crate::model::unix_secs(at))
}

/// The time in a tag written by [`restarted_tag`] with `prefix`.
pub fn parse_restarted_tag(prefix: &str, tag: &str) -> Option<SystemTime> {
    let digits = tag.strip_prefix(prefix)?.strip_prefix("_b")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    SystemTime::UNIX_EPOCH.checked_add(Duration::from_secs(digits.parse().ok()?))
}

/// `<prefix>_f<unix seconds>`: when nodewright stopped the server because its node was
/// NotReady holding data only it can reach (see [`crate::cloud::FENCED_TAG`]); as long as
/// the start tag.
pub fn fenced_tag(prefix: &str, at: SystemTime) -> String {
    format!("{prefix}_f{}", crate::model::unix_secs(at))
}

/// The time in a tag written by [`fenced_tag`] with `prefix`.
pub fn parse_fenced_tag(prefix: &str, tag: &str) -> Option<SystemTime> {
    let digits = tag.strip_prefix(prefix)?.strip_prefix("_f")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    SystemTime::UNIX_EPOCH.checked_add(Duration::from_secs(digits.parse().ok()?))
}

/// `t` followed by decimal digits only: the part of a time tag after `<prefix>-`. A cluster
/// or group named like this would be mistaken for a creation time.
pub fn is_time_tag_suffix(rest: &str) -> bool {
    rest.strip_prefix('t')
        .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
}

/// The creation time in a tag written by [`time_tag`] with `prefix`; `None` for any other
/// tag (including a number too large to be a time).
pub fn parse_time_tag(prefix: &str, tag: &str) -> Option<SystemTime> {
    let rest = tag.strip_prefix(prefix)?.strip_prefix('-')?;
    if !is_time_tag_suffix(rest) {
        return None;
    }
    let secs: u64 = rest[1..].parse().ok()?;
    SystemTime::UNIX_EPOCH.checked_add(Duration::from_secs(secs))
}

/// The tag carrying a settings hash (12 hex digits, as the config's `NodeGroupConfig`
/// computes it): `<prefix>_h` and the hash in [`HASH_TAG_DIGITS`] base-36 digits. Kamatera
/// tags are too short for the hex form behind a long prefix; `_` keeps it apart from the
/// cluster and group tags (`<prefix>-<name>`), whose names are DNS labels without `_`.
/// `None` for a hash not of that form (nothing is written).
pub fn hash_tag(prefix: &str, settings_hash: &str) -> Option<String> {
    if settings_hash.len() != 12 {
        return None;
    }
    let mut n = u64::from_str_radix(settings_hash, 16).ok()?;
    let mut digits = [b'0'; HASH_TAG_DIGITS];
    for d in digits.iter_mut().rev() {
        *d = char::from_digit((n % 36) as u32, 36)? as u8;
        n /= 36;
    }
    Some(format!("{prefix}_h{}", String::from_utf8_lossy(&digits)))
}

/// The settings hash (12 lowercase hex digits) in a tag written by [`hash_tag`] with
/// `prefix`; `None` for any other tag.
pub fn parse_hash_tag(prefix: &str, tag: &str) -> Option<String> {
    let rest = tag.strip_prefix(prefix)?.strip_prefix("_h")?;
    if rest.len() != HASH_TAG_DIGITS || !rest.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return None;
    }
    let n = u64::from_str_radix(&rest.to_ascii_lowercase(), 36).ok()?;
    (n < 1 << 48).then(|| format!("{n:012x}"))
}

/// A character Kamatera takes in a tag.
pub(crate) fn is_tag_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-' || c == '_'
}

/// Builds the provider for `groups` from the credentials file at `path` (the registry's
/// `build`).
pub(crate) fn build(
    path: &std::path::Path,
    groups: std::collections::BTreeMap<String, KamateraSettings>,
    _options: &crate::cloud::BuildOptions,
) -> Result<std::sync::Arc<dyn crate::cloud::CloudProvider>, crate::cloud::BuildError> {
    let creds = KamateraCredentials::from_file(path)
        .map_err(|e| crate::cloud::BuildError::Credentials(e.to_string()))?;
    Ok(std::sync::Arc::new(KamateraProvider::new(creds, groups)?))
}

/// Reads the credentials file without the network (the registry's `read_credentials`).
pub(crate) fn read_credentials(path: &std::path::Path) -> Result<(), String> {
    KamateraCredentials::from_file(path)
        .map(drop)
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(yaml: &str) -> KamateraSettings {
        crate::yaml::from_str(yaml).expect("settings parse")
    }

    const BASE: &str =
        "datacenter: EU\nimage: ubuntu_server_24.04_64-bit\ncpu: 2B\nram: 4096 MiB\n";

    #[test]
    fn defaults_and_ram_forms() {
        let s = settings(BASE);
        assert_eq!(s.ram, RamMb(4096));
        assert_eq!(s.disks, vec!["size=20"]);
        assert_eq!(s.networks, vec!["name=wan,ip=auto"]);
        assert_eq!(s.tag_prefix, "nodewright");
        assert_eq!(s.billing_cycle, BillingCycle::Hourly);
        assert_eq!(s.cpu_count(), Some(2));
        assert!(validate_settings("prod", "workers", &s).is_empty());
        let s = settings(&BASE.replace("ram: 4096 MiB", "ram: 4 GiB"));
        assert_eq!(s.ram, RamMb(4096));
        let s = settings(&BASE.replace("ram: 4096 MiB", "ram: \"2048Mi\""));
        assert_eq!(s.ram.bytes(), 2048 * 1024 * 1024);
        for bad in ["ram: 1.5 KiB", "ram: 4096", "ram: \"2048\"", "ram: 4GB"] {
            assert!(
                crate::yaml::from_str::<KamateraSettings>(&BASE.replace("ram: 4096 MiB", bad))
                    .is_err(),
                "{bad}"
            );
        }
        assert!(crate::yaml::from_str::<KamateraSettings>(&format!("{BASE}flavor: x\n")).is_err());
    }

    #[test]
    fn cpu_specs() {
        assert_eq!(parse_cpu("2B"), Some((2, 'B')));
        assert_eq!(parse_cpu("16t"), Some((16, 'T')));
        assert_eq!(parse_cpu("B"), None);
        assert_eq!(parse_cpu("0A"), None);
        assert_eq!(parse_cpu("2"), None);
        assert_eq!(parse_cpu("2 B"), None);
    }

    #[test]
    fn tag_limits() {
        let s = settings(BASE);
        // nodewright- (11) + 12 = 23: fits; 13 does not.
        assert!(validate_settings("abcdefghijkl", "workers", &s).is_empty());
        let p = validate_settings("abcdefghijklm", "workers", &s);
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(
            p[0].contains("nodewright-abcdefghijklm") && p[0].contains("at most 12"),
            "{}",
            p[0]
        );
        let p = validate_settings("prod", "a-very-long-group", &s);
        assert!(p[0].starts_with("group name `a-very-long-group`"), "{p:?}");
        let short = settings(&format!("{BASE}tagPrefix: nw\n"));
        assert!(validate_settings("abcdefghijklm", "a-very-long-group", &short).is_empty());
        let p = validate_settings("same", "same", &s);
        assert!(p.iter().any(|m| m.contains("equals clusterName")), "{p:?}");
        let bad = settings(&format!("{BASE}tagPrefix: \"no space\"\n"));
        assert!(validate_settings("a", "b", &bad)[0].starts_with("tagPrefix"));
    }

    #[test]
    fn warm_and_started_tags() {
        assert_eq!(warm_tag("nodewright", true), "nodewright_wfill");
        assert_eq!(warm_tag("nodewright", false), "nodewright_wpark");
        // Never read as a group or creation-time tag.
        assert_eq!(parse_time_tag("nodewright", "nodewright_wfill"), None);
        let t = SystemTime::UNIX_EPOCH + Duration::from_millis(1_718_000_000_900);
        let tag = started_tag("nodewright", t);
        assert_eq!(tag, "nodewright_s1718000000");
        assert!(tag.len() <= MAX_TAG_LEN);
        assert_eq!(
            parse_started_tag("nodewright", &tag),
            Some(SystemTime::UNIX_EPOCH + Duration::from_secs(1_718_000_000))
        );
        for other in ["nodewright_s", "nodewright_s12x", "nodewright-s1", "nw_s1"] {
            assert_eq!(parse_started_tag("nodewright", other), None, "{other}");
        }
    }

    #[test]
    fn time_tags() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_millis(1_718_000_000_900);
        let tag = removing_tag_at("nodewright", t);
        assert_eq!(tag, "nodewright_r1718000000");
        assert!(tag.len() <= MAX_TAG_LEN);
        // The restart mark is another tag: neither is ever read as the other.
        let restarted = restarted_tag("nodewright", t);
        assert_eq!(restarted, "nodewright_b1718000000");
        assert_eq!(parse_removing_tag("nodewright", &restarted), None);
        assert_eq!(parse_restarted_tag("nodewright", &tag), None);
        assert_eq!(
            parse_removing_tag("nodewright", &tag),
            Some(Some(
                SystemTime::UNIX_EPOCH + Duration::from_secs(1_718_000_000)
            ))
        );
        // An older release's mark: removing, no time; other tags are no mark.
        assert_eq!(
            parse_removing_tag("nodewright", "nodewright_rm"),
            Some(None)
        );
        for other in [
            "nodewright_r",
            "nodewright_rx1",
            "nodewright-r1",
            "nodewright_s1",
        ] {
            assert_eq!(parse_removing_tag("nodewright", other), None, "{other}");
        }
        let tag = time_tag("nodewright", t);
        assert_eq!(tag, "nodewright-t1718000000");
        assert!(tag.len() <= MAX_TAG_LEN);
        assert_eq!(
            parse_time_tag("nodewright", &tag),
            Some(SystemTime::UNIX_EPOCH + Duration::from_secs(1_718_000_000))
        );
        assert_eq!(parse_time_tag("nw", &tag), None);
        assert_eq!(parse_time_tag("nodewright", "nodewright-workers"), None);
        assert_eq!(parse_time_tag("nodewright", "nodewright-t"), None);
        assert_eq!(parse_time_tag("nodewright", "nodewright-t12x"), None);
        assert_eq!(parse_time_tag("nodewright", "nodewright-t-5"), None);
        assert_eq!(
            parse_time_tag("nodewright", "nodewright-t99999999999999999999999"),
            None
        );
        assert!(is_time_tag_suffix("t0") && !is_time_tag_suffix("tools"));
    }

    #[test]
    fn settings_hash_tags_fit_kamatera_and_read_back() {
        let longest = "abcdefghijk";
        for hash in ["000000000000", "0a1b2c3d4e5f", "ffffffffffff"] {
            let tag = hash_tag(longest, hash).expect("a 12-digit hex hash has a tag");
            assert!(tag.len() <= MAX_TAG_LEN, "{tag}");
            assert!(tag.chars().all(is_tag_char), "{tag}");
            assert_eq!(parse_hash_tag(longest, &tag).as_deref(), Some(hash));
        }
        assert_eq!(
            hash_tag("nodewright", "0a1b2c3d4e5f").as_deref(),
            Some("nodewright_h03xsp8a733")
        );
        assert_eq!(hash_tag("nw", "not-hex-at-all"), None);
        assert_eq!(hash_tag("nw", "abc"), None);
        // Not a hash tag: other prefixes, cluster and group tags, out-of-range values.
        assert_eq!(parse_hash_tag("nw", "nw-h03xsp8a733"), None);
        assert_eq!(parse_hash_tag("nw", "nodewright_h03xsp8a733"), None);
        assert_eq!(parse_hash_tag("nw", "nw_hzzzzzzzzzz"), None);
        assert_eq!(parse_hash_tag("nw", "nw_h03xsp8a73"), None);
        let s = settings(&format!("{BASE}extraTags: [nodewright_hxyz]\n"));
        assert_eq!(validate_settings("c", "w", &s).len(), 1);
    }

    #[test]
    fn tag_prefix_must_leave_room_for_the_time_tag() {
        // 11 characters + `-t` + 10 digits = 23: fits; 12 does not.
        let s = settings(&format!("{BASE}tagPrefix: abcdefghijk\n"));
        assert!(validate_settings("c", "w", &s).is_empty());
        let s = settings(&format!("{BASE}tagPrefix: abcdefghijkl\n"));
        let p = validate_settings("c", "w", &s);
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(p[0].starts_with("tagPrefix: `abcdefghijkl` (12 characters)"));
        assert!(
            p[0].contains("kamatera.tagPrefix may have at most 11"),
            "{}",
            p[0]
        );
        assert!(p[0].contains("at most 23"), "{}", p[0]);
        // Names that would read as a creation time are refused.
        let s = settings(BASE);
        let p = validate_settings("prod", "t42", &s);
        assert!(
            p.iter().any(|m| m.contains("group name `t42` looks like")),
            "{p:?}"
        );
        assert!(validate_settings("prod", "t42x", &s).is_empty());
    }

    #[test]
    fn items_and_fields() {
        let s = settings(&format!(
            "{}disks: [\"size=50\", \"size=100 \", \"foo=1\"]\nnetworks: [\"ip=auto\"]\nmonthlyPackage: t5000\n",
            BASE.replace("cpu: 2B", "cpu: \"2\"")
        ));
        let p = validate_settings("a", "b", &s);
        let joined = p.join("\n");
        assert!(joined.contains("disks[1]"), "{joined}");
        assert!(joined.contains("disks[2]"), "{joined}");
        assert!(
            joined.contains("networks[0]: `ip=auto` has no `name=`"),
            "{joined}"
        );
        assert!(joined.contains("monthlyPackage"), "{joined}");
        assert!(joined.contains("cpu: `2`"), "{joined}");
        let five = settings(&format!(
            "{BASE}networks: [name=wan,name=wan,name=wan,name=wan,name=wan]\n"
        ));
        assert!(validate_settings("a", "b", &five)
            .iter()
            .any(|m| m.contains("at most 4")));
    }
}

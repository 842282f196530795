//! Ownership in Proxmox tags. Tags must match `[a-z0-9_][a-z0-9_\-+.]*` (case-insensitive,
//! per the API schema), so values are encoded: lowercase letters, digits, `-` and `.` pass;
//! everything else (including `_` and upper case) becomes `_xx` (hex of the byte).
//!
//! - `nw-c-<cluster>`: [`crate::cloud::CLUSTER_TAG`]
//! - `nw-g-<group>`: [`crate::cloud::GROUP_TAG`]
//! - `nw-t-<unix seconds>`: creation time
//! - `nw-h-<hash>`: [`crate::cloud::SETTINGS_HASH_TAG`], the group settings it was made from
//! - `nw-warm`: parked in its group's warm pool ([`crate::model::Server::warm`])
//! - `nw-j-<unix seconds>`: when its node was recorded Ready ([`crate::cloud::JOINED_TAG`])
//! - `nw-i-<vmid>`: the VM id it was made as. Proxmox copies tags (and the description)
//!   into a clone, so a person's copy of a node VM carries every other mark; the id tells
//!   the copy (another VM id) from the VM nodewright made. Only VMs made before this mark
//!   existed lack it (see [`Ownership::copy_of`]).
//! - `nw-removing-<unix seconds>`: when nodewright began removing it
//!   ([`crate::cloud::REMOVING_TAG`]); older releases wrote `nw-removing`, read as a mark
//!   with no time (see [`crate::model::Server::removing_since`])
//! - `nw-r-<unix seconds>`: when nodewright restarted it because its Node was gone
//!   ([`crate::cloud::RESTARTED_TAG`])
//! - `nw-f-<unix seconds>`: when nodewright stopped it because its node was NotReady
//!   holding data only it can reach ([`crate::cloud::FENCED_TAG`])
//! - `nw-joining`: started in a group that joins through the guest agent, its join script
//!   not seen to run yet: written before the start, taken off once the script ran, so a
//!   process that did not start it runs the script (see
//!   [`crate::model::ServerStatus::JoinPending`])

use std::time::{Duration, SystemTime};

pub const CLUSTER_PREFIX: &str = "nw-c-";
pub const GROUP_PREFIX: &str = "nw-g-";
pub const CREATED_PREFIX: &str = "nw-t-";
pub const HASH_PREFIX: &str = "nw-h-";
pub const WARM_TAG: &str = "nw-warm";
pub const JOINED_PREFIX: &str = "nw-j-";
pub const REMOVING_TAG: &str = "nw-removing";
/// The removing mark with its time: `nw-removing-<unix seconds>`.
pub const REMOVING_TIMED_PREFIX: &str = "nw-removing-";
pub const VMID_PREFIX: &str = "nw-i-";
pub const JOINING_TAG: &str = "nw-joining";
pub const RESTARTED_PREFIX: &str = "nw-r-";
pub const FENCED_PREFIX: &str = "nw-f-";
/// Every tag prefix nodewright writes: a VM carrying any of them was configured by
/// nodewright once (a half-made VM carries none, see `halfmade`).
pub const ALL_PREFIXES: &[&str] = &[
    CLUSTER_PREFIX,
    GROUP_PREFIX,
    CREATED_PREFIX,
    HASH_PREFIX,
    JOINED_PREFIX,
    VMID_PREFIX,
    WARM_TAG,
    REMOVING_TAG,
    JOINING_TAG,
    RESTARTED_PREFIX,
    FENCED_PREFIX,
];

/// Whether `tags` hold any tag nodewright writes (of any cluster).
pub fn any_ours(tags: &str) -> bool {
    split(tags).iter().any(|t| {
        let lower = t.to_ascii_lowercase();
        ALL_PREFIXES.iter().any(|p| lower.starts_with(p))
    })
}

pub fn encode(value: &str) -> String {
    let mut out = String::new();
    for b in value.bytes() {
        if b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.' {
            out.push(b as char);
        } else {
            out.push_str(&format!("_{b:02x}"));
        }
    }
    out
}

pub fn decode(tag: &str) -> Option<String> {
    let bytes = tag.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'_' {
            let hex = tag.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i].to_ascii_lowercase());
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Splits a `tags` value (`;`, `,` or space separated).
pub fn split(tags: &str) -> Vec<&str> {
    tags.split([';', ',', ' '])
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .collect()
}

/// Ownership read back from a VM's tags.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ownership {
    pub cluster: Option<String>,
    pub group: Option<String>,
    pub created: Option<SystemTime>,
    pub settings_hash: Option<String>,
    /// Carries [`WARM_TAG`].
    pub warm: bool,
    /// The latest [`JOINED_PREFIX`] time.
    pub joined: Option<SystemTime>,
    /// Carries [`REMOVING_TAG`], with or without a time.
    pub removing: bool,
    /// The latest time a removing mark carries (`nw-removing-<unix seconds>`).
    pub removing_since: Option<SystemTime>,
    /// Carries [`JOINING_TAG`].
    pub joining: bool,
    /// The latest [`RESTARTED_PREFIX`] time.
    pub restarted: Option<SystemTime>,
    /// The latest [`FENCED_PREFIX`] time.
    pub fenced: Option<SystemTime>,
    /// The VM id it was made as ([`VMID_PREFIX`], or `vmid=` in the description); two
    /// different ones are `Some(0)`, which no VM has.
    pub vmid: Option<u32>,
    /// The identity of the cluster that made it (`uid=` in the description, see
    /// [`with_identity`]).
    pub identity: Option<String>,
    /// Its description says the clone call made it and nothing configured it since
    /// (`stage=cloned`, which the config call rewrites to `stage=configured`): the only
    /// proof that a VM without tags is half-made (see [`description_configured`]).
    pub never_configured: bool,
}

impl Ownership {
    /// The VM id of the VM this one (VM `vmid`) was copied from, when its marks were made
    /// for another VM: a person cloned a VM of ours, and Proxmox copied its tags and
    /// description. `None` for the VM made, and for VMs made before the id was recorded.
    pub fn copy_of(&self, vmid: u32) -> Option<u32> {
        self.vmid.filter(|id| *id != vmid)
    }
}

/// Ownership as the tags say it. Two different cluster (or group) tags on one VM make
/// that field `None`: a VM that names two owners is nobody's.
pub fn ownership(tags: &str) -> Ownership {
    let mut o = Ownership::default();
    let (mut clusters, mut groups, mut hashes) = (Vec::new(), Vec::new(), Vec::new());
    let mut ids = Vec::new();
    for t in split(tags) {
        let lower = t.to_ascii_lowercase();
        if lower == WARM_TAG {
            o.warm = true;
        } else if lower == REMOVING_TAG {
            o.removing = true;
        } else if let Some(v) = lower.strip_prefix(REMOVING_TIMED_PREFIX) {
            o.removing = true;
            let at = v
                .parse::<u64>()
                .ok()
                .and_then(|s| SystemTime::UNIX_EPOCH.checked_add(Duration::from_secs(s)));
            o.removing_since = o.removing_since.max(at);
        } else if lower == JOINING_TAG {
            o.joining = true;
        } else if let Some(v) = lower.strip_prefix(CLUSTER_PREFIX) {
            clusters.push(decode(v));
        } else if let Some(v) = lower.strip_prefix(GROUP_PREFIX) {
            groups.push(decode(v));
        } else if let Some(v) = lower.strip_prefix(HASH_PREFIX) {
            hashes.push(decode(v));
        } else if let Some(v) = lower.strip_prefix(CREATED_PREFIX) {
            o.created = v
                .parse::<u64>()
                .ok()
                .map(|s| SystemTime::UNIX_EPOCH + Duration::from_secs(s));
        } else if let Some(v) = lower.strip_prefix(VMID_PREFIX) {
            ids.push(v.parse::<u32>().ok().map(|id| id.to_string()));
        } else if let Some(v) = lower.strip_prefix(JOINED_PREFIX) {
            o.joined = o.joined.max(secs(v));
        } else if let Some(v) = lower.strip_prefix(RESTARTED_PREFIX) {
            o.restarted = o.restarted.max(secs(v));
        } else if let Some(v) = lower.strip_prefix(FENCED_PREFIX) {
            o.fenced = o.fenced.max(secs(v));
        }
    }
    o.cluster = only_one(clusters);
    o.group = only_one(groups);
    o.settings_hash = only_one(hashes);
    // Unreadable or several different ids: made for no VM id (0), so a copy of any.
    o.vmid = match only_one(ids.clone()) {
        Some(id) => id.parse().ok(),
        None if !ids.is_empty() => Some(0),
        None => None,
    };
    o
}

/// Unix seconds as written in a tag, as a time.
fn secs(v: &str) -> Option<SystemTime> {
    v.parse::<u64>()
        .ok()
        .and_then(|s| SystemTime::UNIX_EPOCH.checked_add(Duration::from_secs(s)))
}

/// The value when all are the same readable one.
fn only_one(values: Vec<Option<String>>) -> Option<String> {
    let first = values.first()?.clone()?;
    values
        .iter()
        .all(|v| v.as_deref() == Some(first.as_str()))
        .then_some(first)
}

/// The cluster names a VM's tags give, as written (decoded where possible), for messages.
pub fn cluster_tags(tags: &str) -> Vec<String> {
    split(tags)
        .iter()
        .filter_map(|t| {
            let lower = t.to_ascii_lowercase();
            let v = lower.strip_prefix(CLUSTER_PREFIX)?;
            Some(decode(v).unwrap_or_else(|| v.to_string()))
        })
        .collect()
}

/// What the first line of a new VM's description starts with. The clone call cannot set
/// tags but can set a description, so the marks written there make a VM recognisable as
/// ours from the moment it exists (see [`description_for_new_vm`]).
pub const DESCRIPTION_MARK: &str = "nodewright:";

/// What the clone call records of a new VM, so that a process that did not clone it can
/// configure it as the one that did would have (see `provider::finish`).
pub struct NewVmMarks<'a> {
    pub cluster: &'a str,
    pub group: &'a str,
    /// The group's settings hash (empty: none).
    pub settings_hash: &'a str,
    /// Made for the warm pool.
    pub warm: bool,
    pub created: SystemTime,
    /// The VM id cloned into: a copy of the VM carries another one.
    pub vmid: u32,
}

/// The description set in the clone call: `nodewright: cluster=<c> group=<g>
/// created=<unix seconds> vmid=<id>`, then `hash=<h>` and `warm=1` when they apply (values
/// encoded as in tags), then `stage=cloned`, then a line for people.
pub fn description_for_new_vm(m: &NewVmMarks<'_>) -> String {
    described(m, false)
}

/// The description the config call writes: as [`description_for_new_vm`], with
/// `stage=configured`. A VM whose tags a person cleared then still shows it was
/// configured (so it may have run, and have data): it is never taken for half-made.
pub fn description_configured(m: &NewVmMarks<'_>) -> String {
    described(m, true)
}

fn described(m: &NewVmMarks<'_>, configured: bool) -> String {
    let secs = m
        .created
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let mut first = format!(
        "{DESCRIPTION_MARK} cluster={} group={} created={secs} vmid={}",
        encode(m.cluster),
        encode(m.group),
        m.vmid
    );
    if !m.settings_hash.is_empty() {
        first.push_str(&format!(" hash={}", encode(m.settings_hash)));
    }
    if m.warm {
        first.push_str(" warm=1");
    }
    if configured {
        format!("{first} stage=configured\nCreated and configured by nodewright.")
    } else {
        format!(
            "{first} stage=cloned\nCreated by nodewright; its ownership tags are set when it is configured."
        )
    }
}

/// `description` (as [`description_for_new_vm`] writes it) with the identity of the
/// cluster making the VM (its kube-system namespace's UID, which also names the VM's
/// cloud-init seed) added to its first line as `uid=<identity>`: a person reading the VM
/// in Proxmox sees which of two clusters of the same name made it.
pub fn with_identity(description: &str, identity: &str) -> String {
    let (first, rest) = description
        .split_once('\n')
        .map_or((description, None), |(f, r)| (f, Some(r)));
    let first = format!("{first} uid={}", encode(identity));
    match rest {
        Some(r) => format!("{first}\n{r}"),
        None => first,
    }
}

/// Ownership as the first line of a description written by [`description_for_new_vm`]
/// says it; nothing for any other description.
pub fn ownership_from_description(description: &str) -> Ownership {
    let mut o = Ownership::default();
    let Some(rest) = description
        .lines()
        .next()
        .and_then(|l| l.trim().strip_prefix(DESCRIPTION_MARK))
    else {
        return o;
    };
    for kv in rest.split_whitespace() {
        match kv.split_once('=') {
            Some(("cluster", v)) => o.cluster = decode(v),
            Some(("group", v)) => o.group = decode(v),
            Some(("hash", v)) => o.settings_hash = decode(v),
            Some(("warm", "1")) => o.warm = true,
            Some(("stage", v)) => o.never_configured = v == "cloned",
            Some(("vmid", v)) => o.vmid = Some(v.parse().unwrap_or(0)),
            Some(("uid", v)) => o.identity = decode(v),
            Some(("created", v)) => {
                o.created = v
                    .parse::<u64>()
                    .ok()
                    .map(|s| SystemTime::UNIX_EPOCH + Duration::from_secs(s));
            }
            _ => {}
        }
    }
    o
}

/// `tags` with the warm mark set or taken off and, when `created` is given, the creation
/// time replaced (a VM taken from the pool starts its provisioning clock anew); every
/// other tag is kept as it is.
pub fn rewrite(tags: &str, warm: bool, created: Option<SystemTime>) -> String {
    let mut out: Vec<String> = split(tags)
        .into_iter()
        .filter(|t| {
            let lower = t.to_ascii_lowercase();
            lower != WARM_TAG && !(created.is_some() && lower.starts_with(CREATED_PREFIX))
        })
        .map(str::to_string)
        .collect();
    if let Some(t) = created {
        let secs = t
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        out.push(format!("{CREATED_PREFIX}{secs}"));
    }
    if warm {
        out.push(WARM_TAG.to_string());
    }
    out.join(";")
}

/// `tags` with the joined mark set to `at` (any earlier one replaced), or none with
/// `None`; every other tag is kept as it is.
pub fn with_joined(tags: &str, at: Option<SystemTime>) -> String {
    let mut out: Vec<String> = split(tags)
        .into_iter()
        .filter(|t| !t.to_ascii_lowercase().starts_with(JOINED_PREFIX))
        .map(str::to_string)
        .collect();
    if let Some(at) = at {
        out.push(format!("{JOINED_PREFIX}{}", crate::model::unix_secs(at)));
    }
    out.join(";")
}

/// `tags` with the restart mark [`RESTARTED_PREFIX`] at `at` (its only one), or none
/// with `None`; every other tag is kept.
pub fn with_restarted(tags: &str, at: Option<SystemTime>) -> String {
    with_timed(tags, RESTARTED_PREFIX, at)
}

/// `tags` with the fence mark [`FENCED_PREFIX`] at `at` (its only one), or none with
/// `None`; every other tag is kept.
pub fn with_fenced(tags: &str, at: Option<SystemTime>) -> String {
    with_timed(tags, FENCED_PREFIX, at)
}

/// `tags` with one `<prefix><unix seconds>` mark at `at`, or none with `None`.
fn with_timed(tags: &str, prefix: &str, at: Option<SystemTime>) -> String {
    let mut out: Vec<String> = split(tags)
        .into_iter()
        .filter(|t| !t.to_ascii_lowercase().starts_with(prefix))
        .map(str::to_string)
        .collect();
    if let Some(at) = at {
        out.push(format!("{prefix}{}", crate::model::unix_secs(at)));
    }
    out.join(";")
}

/// `tags` with the removing mark at `at` (`nw-removing-<unix seconds>`, once; any
/// earlier removing mark, timed or not, replaced).
pub fn with_removing(tags: &str, at: SystemTime) -> String {
    let mut out: Vec<String> = split(tags)
        .into_iter()
        .filter(|t| !is_removing(t))
        .map(str::to_string)
        .collect();
    out.push(format!(
        "{REMOVING_TIMED_PREFIX}{}",
        crate::model::unix_secs(at)
    ));
    out.join(";")
}

/// `tags` without any removing mark; every other tag is kept.
pub fn without_removing(tags: &str) -> String {
    split(tags)
        .into_iter()
        .filter(|t| !is_removing(t))
        .collect::<Vec<_>>()
        .join(";")
}

/// A removing mark: [`REMOVING_TAG`] as older releases wrote it, or with a time.
fn is_removing(tag: &str) -> bool {
    let lower = tag.to_ascii_lowercase();
    lower == REMOVING_TAG || lower.starts_with(REMOVING_TIMED_PREFIX)
}

/// `tags` with [`JOINING_TAG`] set (once) or taken off; every other tag is kept.
pub fn with_joining(tags: &str, joining: bool) -> String {
    let mut out: Vec<&str> = split(tags)
        .into_iter()
        .filter(|t| !t.eq_ignore_ascii_case(JOINING_TAG))
        .collect();
    if joining {
        out.push(JOINING_TAG);
    }
    out.join(";")
}

/// `tags` with the VM id mark [`VMID_PREFIX`] of `vmid` added when it has none (a VM
/// made before the mark existed gets it at its next tag write); one it has is kept.
pub fn with_vmid(tags: &str, vmid: u32) -> String {
    if ownership(tags).vmid.is_some() {
        return tags.to_string();
    }
    let mut out: Vec<String> = split(tags).into_iter().map(str::to_string).collect();
    out.push(format!("{VMID_PREFIX}{vmid}"));
    out.join(";")
}

/// The `tags` value for new VM `vmid`; an empty `settings_hash` writes no hash tag.
pub fn for_new_vm(
    cluster: &str,
    group: &str,
    settings_hash: &str,
    created: SystemTime,
    vmid: u32,
) -> String {
    let secs = created
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let mut tags = format!(
        "{CLUSTER_PREFIX}{};{GROUP_PREFIX}{};{CREATED_PREFIX}{secs};{VMID_PREFIX}{vmid}",
        encode(cluster),
        encode(group)
    );
    if !settings_hash.is_empty() {
        tags.push_str(&format!(";{HASH_PREFIX}{}", encode(settings_hash)));
    }
    tags
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_joined_mark_is_written_once_and_read_back() {
        let t = "nw-c-prod;nw-g-workers;nw-t-42;nw-warm";
        assert_eq!(ownership(t).joined, None);
        let once = with_joined(t, Some(SystemTime::UNIX_EPOCH + Duration::from_secs(100)));
        let twice = with_joined(
            &once,
            Some(SystemTime::UNIX_EPOCH + Duration::from_secs(200)),
        );
        assert_eq!(with_joined(&twice, None), t);
        assert_eq!(twice, "nw-c-prod;nw-g-workers;nw-t-42;nw-warm;nw-j-200");
        let o = ownership(&twice);
        assert_eq!(
            o.joined,
            Some(SystemTime::UNIX_EPOCH + Duration::from_secs(200))
        );
        assert_eq!(o.cluster.as_deref(), Some("prod"));
        // Garbage after the prefix is no mark.
        assert_eq!(ownership("nw-c-prod;nw-j-soon").joined, None);
    }

    #[test]
    fn the_removing_mark_carries_its_time_and_an_older_releases_mark_reads_as_one_without() {
        let t = "nw-c-prod;nw-g-workers;nw-t-42";
        let old = format!("{t};nw-removing");
        let o = ownership(&old);
        assert!(o.removing);
        assert_eq!(o.removing_since, None);
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let timed = with_removing(&old, at);
        assert_eq!(
            timed,
            "nw-c-prod;nw-g-workers;nw-t-42;nw-removing-1700000000"
        );
        let o = ownership(&timed);
        assert!(o.removing);
        assert_eq!(o.removing_since, Some(at));
        // Marked again later: one mark, the later time.
        let again = with_removing(&timed, at + Duration::from_secs(60));
        assert_eq!(
            again,
            "nw-c-prod;nw-g-workers;nw-t-42;nw-removing-1700000060"
        );
        assert_eq!(without_removing(&again), t);
        assert_eq!(without_removing(&old), t);
        assert!(any_ours("nw-removing-1700000060"));
        let pattern = regex::Regex::new(r"^[a-z0-9_][a-z0-9_\-+.]*$").expect("regex");
        assert!(split(&again).iter().all(|tag| pattern.is_match(tag)));
    }

    #[test]
    fn the_joining_mark_is_set_once_and_taken_off() {
        let t = "nw-c-prod;nw-g-agents;nw-t-42;nw-j-40";
        assert!(!ownership(t).joining);
        let on = with_joining(&with_joining(t, true), true);
        assert_eq!(on, "nw-c-prod;nw-g-agents;nw-t-42;nw-j-40;nw-joining");
        let o = ownership(&on);
        // Not read as a joined mark (`nw-j-`), nor the joined mark as it.
        assert!(o.joining);
        assert_eq!(
            o.joined,
            Some(SystemTime::UNIX_EPOCH + Duration::from_secs(40))
        );
        assert_eq!(with_joining(&on, false), t);
        assert!(any_ours("nw-joining") && !ownership("nw-joined").joining);
    }

    #[test]
    fn the_warm_mark_is_set_and_taken_off_and_the_clock_restamped() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(42);
        let t = for_new_vm("prod", "workers", "0a1b2c3d4e5f", t0, 7);
        assert!(!ownership(&t).warm);
        let parked = rewrite(&t, true, None);
        assert_eq!(
            parked,
            "nw-c-prod;nw-g-workers;nw-t-42;nw-i-7;nw-h-0a1b2c3d4e5f;nw-warm"
        );
        let o = ownership(&parked);
        assert!(o.warm);
        assert_eq!(o.created, Some(t0));
        let started = rewrite(&parked, false, Some(t0 + Duration::from_secs(58)));
        assert_eq!(
            started,
            "nw-c-prod;nw-g-workers;nw-i-7;nw-h-0a1b2c3d4e5f;nw-t-100"
        );
        let o = ownership(&started);
        assert!(!o.warm);
        assert_eq!(o.settings_hash.as_deref(), Some("0a1b2c3d4e5f"));
    }

    #[test]
    fn round_trip() {
        for v in ["prod", "my-cluster.1", "Weird_Name/x", "ü"] {
            assert_eq!(decode(&encode(v)).as_deref(), Some(v));
        }
        let t = for_new_vm(
            "prod",
            "workers",
            "0a1b2c3d4e5f",
            SystemTime::UNIX_EPOCH + Duration::from_secs(42),
            105,
        );
        assert_eq!(
            t,
            "nw-c-prod;nw-g-workers;nw-t-42;nw-i-105;nw-h-0a1b2c3d4e5f"
        );
        let o = ownership(&t);
        assert_eq!(o.cluster.as_deref(), Some("prod"));
        assert_eq!(o.group.as_deref(), Some("workers"));
        assert_eq!(
            o.created,
            Some(SystemTime::UNIX_EPOCH + Duration::from_secs(42))
        );
        assert_eq!(o.settings_hash.as_deref(), Some("0a1b2c3d4e5f"));
        // Every tag matches Proxmox's pattern `[a-z0-9_][a-z0-9_\-+.]*`.
        let pattern = regex::Regex::new(r"^[a-z0-9_][a-z0-9_\-+.]*$").expect("regex");
        for tag in split(&t) {
            assert!(pattern.is_match(tag), "{tag}");
        }
        // A VM made before the hash was stamped has none; two hashes are no hash.
        assert_eq!(ownership("nw-c-prod;nw-g-workers").settings_hash, None);
        assert_eq!(ownership("nw-h-aa;nw-h-bb").settings_hash, None);
    }

    #[test]
    fn description_marks_round_trip() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let marks = NewVmMarks {
            cluster: "prod",
            group: "big_workers",
            settings_hash: "",
            warm: false,
            created: t,
            vmid: 123,
        };
        let d = description_for_new_vm(&marks);
        assert!(
            d.starts_with(
                "nodewright: cluster=prod group=big_5fworkers created=1700000000 vmid=123 stage=cloned\n"
            ),
            "{d}"
        );
        let o = ownership_from_description(&d);
        assert_eq!(o.cluster.as_deref(), Some("prod"));
        assert_eq!(o.group.as_deref(), Some("big_workers"));
        assert_eq!(o.created, Some(t));
        assert_eq!(
            (o.vmid, o.copy_of(123), o.copy_of(124)),
            (Some(123), None, Some(123))
        );
        assert_eq!((o.settings_hash, o.warm), (None, false));
        // Cloned, not configured yet; the config call's description says it was.
        assert!(o.never_configured);
        let configured = ownership_from_description(&description_configured(&marks));
        assert!(!configured.never_configured);
        assert_eq!(configured.cluster.as_deref(), Some("prod"));
        // The settings hash and the warm mark, for whoever finishes the clone.
        let d = description_for_new_vm(&NewVmMarks {
            settings_hash: "c786192ec36e",
            warm: true,
            ..marks
        });
        let o = ownership_from_description(&d);
        assert_eq!(o.settings_hash.as_deref(), Some("c786192ec36e"));
        assert!(o.warm);
        assert_eq!(o.group.as_deref(), Some("big_workers"));
        // The identity of the cluster that made it, when it was known.
        let uid = "6f1c2a3b-9d4e-4f00-8a1b-2c3d4e5f6a7b";
        let with = with_identity(&d, uid);
        assert!(
            with.lines()
                .next()
                .is_some_and(|l| l.ends_with(&format!(" warm=1 stage=cloned uid={uid}"))),
            "{with}"
        );
        assert_eq!(with.lines().nth(1), d.lines().nth(1));
        let o = ownership_from_description(&with);
        assert_eq!(o.identity.as_deref(), Some(uid));
        assert_eq!(o.group.as_deref(), Some("big_workers"));
        assert_eq!(ownership_from_description(&d).identity, None);
        // Anything else says nothing, even with the words further down.
        for other in ["", "my VM", "notes\nnodewright: cluster=prod group=g"] {
            assert_eq!(ownership_from_description(other), Ownership::default());
        }
    }

    #[test]
    fn a_persons_copy_of_a_node_vm_is_told_from_the_vm_made_by_its_id_mark() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(42);
        let made = for_new_vm("prod", "workers", "", t0, 105);
        // Proxmox copies the tags into the clone (VM 130).
        let o = ownership(&made);
        assert_eq!((o.copy_of(105), o.copy_of(130)), (None, Some(105)));
        // Made before the mark: no id, judged by the tags alone; stamped on a tag write.
        let old = "nw-c-prod;nw-g-workers;nw-t-42";
        assert_eq!(ownership(old).copy_of(130), None);
        let stamped = with_vmid(old, 105);
        assert_eq!(stamped, "nw-c-prod;nw-g-workers;nw-t-42;nw-i-105");
        assert_eq!(
            with_vmid(&stamped, 130),
            stamped,
            "an id mark is never replaced"
        );
        // Two ids, or garbage, name no VM: a copy of whatever VM reads them.
        assert_eq!(ownership("nw-c-prod;nw-i-1;nw-i-2").copy_of(1), Some(0));
        assert_eq!(ownership("nw-c-prod;nw-i-x").copy_of(1), Some(0));
        assert!(any_ours("nw-g-workers;mine") && !any_ours("mine;other"));
    }

    #[test]
    fn a_vm_tagged_for_two_clusters_is_nobodys() {
        let o = ownership("nw-c-prod;nw-g-workers;nw-c-other");
        assert_eq!(o.cluster, None);
        assert_eq!(o.group.as_deref(), Some("workers"));
        assert_eq!(
            cluster_tags("nw-c-prod;nw-g-workers;nw-c-other"),
            ["prod", "other"]
        );
        // The same cluster twice is still that cluster.
        assert_eq!(
            ownership("nw-c-prod;NW-C-prod").cluster.as_deref(),
            Some("prod")
        );
        assert_eq!(ownership("nw-g-a;nw-g-b").group, None);
    }
}

//! What a server's name, tags and power state say: valid names, passwords, its group,
//! creation time and status.

use super::*;

/// Characters Kamatera accepts in server names.
pub(super) fn valid_server_name(name: &str) -> bool {
    name.len() >= 4
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '(' | ')' | '_' | '-'))
}

/// A fresh root password: 16 letters and digits from the OS random source, with at
/// least one lower-case letter, one capital and one digit (the API's rule: 10-20
/// characters of `a-zA-Z0-9!@#$^&*()~`, one of each class). Never logged.
pub fn generate_password() -> Result<String, CloudError> {
    const CHARSET: &[u8] = b"abcdefghijkmnopqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789";
    let rng = rustls::crypto::ring::default_provider().secure_random;
    let limit = (256 / CHARSET.len() * CHARSET.len()) as u8;
    for _ in 0..64 {
        let mut out = String::with_capacity(16);
        while out.len() < 16 {
            let mut buf = [0u8; 32];
            rng.fill(&mut buf)
                .map_err(|_| other("the OS random source failed".into()))?;
            for b in buf {
                if b < limit && out.len() < 16 {
                    out.push(CHARSET[(b as usize) % CHARSET.len()] as char);
                }
            }
        }
        let classes = [
            out.chars().any(|c| c.is_ascii_lowercase()),
            out.chars().any(|c| c.is_ascii_uppercase()),
            out.chars().any(|c| c.is_ascii_digit()),
        ];
        if classes.iter().all(|c| *c) {
            return Ok(out);
        }
    }
    Err(other("could not generate a server password".into()))
}

/// When a server was created, from its creation-time tags with `prefix` (the earliest,
/// should there be several).
pub(super) fn created_from_tags(tags: &[String], prefix: &str) -> Option<SystemTime> {
    tags.iter().filter_map(|t| parse_time_tag(prefix, t)).min()
}

/// `t` rounded down to a whole second, as the creation-time tag holds it.
pub(super) fn whole_seconds(t: SystemTime) -> SystemTime {
    let secs = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
}

/// Which group a server of `cluster` belongs to, from its tags (`<prefix>-<group>`; the
/// creation-time tag `<prefix>-t<digits>` is not a group).
pub(super) fn group_of(
    name: &str,
    tags: &[String],
    prefix: &str,
    cluster: &str,
    known: &BTreeMap<String, KamateraSettings>,
) -> Option<String> {
    let own = cluster_tag(prefix, cluster);
    let lead = format!("{prefix}-");
    let candidates: Vec<&str> = tags
        .iter()
        .filter(|t| **t != own)
        .filter_map(|t| t.strip_prefix(&lead))
        .filter(|g| !g.is_empty() && !is_time_tag_suffix(g))
        .collect();
    let named = |g: &str| name.starts_with(&format!("{cluster}-{g}-"));
    candidates
        .iter()
        .find(|g| known.contains_key(**g) && named(g))
        .or_else(|| candidates.iter().find(|g| known.contains_key(**g)))
        .or_else(|| candidates.iter().find(|g| named(g)))
        .or(match candidates.as_slice() {
            [one] => Some(one),
            _ => None,
        })
        .map(|g| g.to_string())
}

/// The value when every item is the same one: two different settings hashes on one
/// server say nothing.
pub(super) fn only_one(mut values: impl Iterator<Item = String>) -> Option<String> {
    let first = values.next()?;
    values.all(|v| v == first).then_some(first)
}

pub(in crate::cloud::kamatera) fn status_of(power: Option<&str>) -> ServerStatus {
    match power.map(|p| p.trim().to_ascii_lowercase()).as_deref() {
        Some("on") => ServerStatus::Active,
        Some("off") => ServerStatus::Stopped,
        _ => ServerStatus::Unknown,
    }
}

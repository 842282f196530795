//! Butane → Ignition translation, written for nodewright (no external binary).
//!
//! Accepts Butane configs of variant `fcos`, versions 1.0.0 to 1.5.0, and always emits
//! Ignition spec [`IGNITION_VERSION`] (3.3.0) JSON. Supported sections:
//!
//! * `ignition`: `config` (`merge`, `replace`), `timeouts`, `security.tls`, `proxy`
//! * `storage`: `files`, `directories`, `links`
//! * `systemd.units` (with `dropins`)
//! * `passwd`: `users`, `groups`
//! * `kernel_arguments` (Butane fcos 1.4.0 and newer)
//!
//! Butane's disk sections (`disks`, `raid`, `filesystems`, `luks`, `trees`, `boot_device`)
//! and the `*_local` fields (which need a files directory next to the config) are
//! rejected with an explanation. Any other unknown field is an error, so typos such as
//! `ssh_authorised_keys` cannot silently drop configuration.
//!
//! `mode` may be written the Butane way as an octal YAML literal (`0644`, `0o644`) or as
//! a decimal number (`420`); Ignition receives the decimal value.

use std::collections::BTreeSet;
use std::fmt;

use base64::Engine;
use serde::de::{self, Deserializer, IgnoredAny, Visitor};
use serde::{Deserialize, Serialize};

/// The Ignition spec version nodewright emits.
pub const IGNITION_VERSION: &str = "3.3.0";
/// The only Butane variant nodewright translates.
pub const SUPPORTED_VARIANT: &str = "fcos";
/// Butane `fcos` spec versions nodewright translates.
pub const SUPPORTED_VERSIONS: &[&str] = &["1.0.0", "1.1.0", "1.2.0", "1.3.0", "1.4.0", "1.5.0"];

/// Why a Butane document could not be translated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ButaneError {
    /// Not YAML, or does not match the Butane schema (including unknown fields).
    #[error("{message}")]
    Yaml {
        message: String,
        /// 1-based line in the Butane document, when known.
        line: Option<usize>,
    },
    #[error(
        "the Butane config has no `variant`; add `variant: fcos` and `version: 1.4.0` \
         at the top"
    )]
    MissingVariant,
    #[error(
        "the Butane config has no `version`; add e.g. `version: 1.4.0` (supported: {})",
        SUPPORTED_VERSIONS.join(", ")
    )]
    MissingVersion,
    #[error(
        "unsupported Butane variant `{0}`: nodewright translates only `variant: fcos` \
         (Fedora CoreOS); change the variant or use a cloud-init template instead"
    )]
    UnsupportedVariant(String),
    #[error(
        "unsupported Butane version `{0}` for variant fcos: nodewright supports \
         {supported}; set e.g. `version: 1.4.0`",
        supported = SUPPORTED_VERSIONS.join(", ")
    )]
    UnsupportedVersion(String),
    #[error(
        "`{field}` needs Butane fcos version {min} or newer, but the config declares \
         {declared}; raise `version:`"
    )]
    NeedsNewerVersion {
        field: String,
        min: &'static str,
        declared: String,
    },
    #[error("`{field}` is not supported by nodewright's Butane translator: {hint}")]
    Unsupported { field: String, hint: &'static str },
    #[error("`{field}`: {message}")]
    Invalid { field: String, message: String },
}

impl ButaneError {
    /// 1-based line in the Butane document, when known.
    pub fn line(&self) -> Option<usize> {
        match self {
            ButaneError::Yaml { line, .. } => *line,
            _ => None,
        }
    }
}

// ---------------------------------------------------------------------------------
// Butane input (typed; snake_case like Butane itself)
// ---------------------------------------------------------------------------------

/// Only the fields needed to decide whether we can read the rest.
#[derive(Deserialize)]
struct Header {
    #[serde(default)]
    variant: Option<serde_json::Value>,
    #[serde(default)]
    version: Option<serde_json::Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Butane {
    #[allow(dead_code)]
    variant: String,
    #[allow(dead_code)]
    version: String,
    #[serde(default)]
    ignition: Option<BIgnition>,
    #[serde(default)]
    storage: Option<BStorage>,
    #[serde(default)]
    systemd: Option<BSystemd>,
    #[serde(default)]
    passwd: Option<BPasswd>,
    #[serde(default)]
    kernel_arguments: Option<BKernelArguments>,
    #[serde(default)]
    boot_device: Option<IgnoredAny>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct BIgnition {
    #[serde(default)]
    config: Option<BIgnitionConfig>,
    #[serde(default)]
    timeouts: Option<BTimeouts>,
    #[serde(default)]
    security: Option<BSecurity>,
    #[serde(default)]
    proxy: Option<BProxy>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct BIgnitionConfig {
    #[serde(default)]
    merge: Vec<BResource>,
    #[serde(default)]
    replace: Option<BResource>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct BTimeouts {
    #[serde(default)]
    http_response_headers: Option<u32>,
    #[serde(default)]
    http_total: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct BSecurity {
    #[serde(default)]
    tls: Option<BTls>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct BTls {
    #[serde(default)]
    certificate_authorities: Vec<BResource>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct BProxy {
    #[serde(default)]
    http_proxy: Option<String>,
    #[serde(default)]
    https_proxy: Option<String>,
    #[serde(default)]
    no_proxy: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct BResource {
    #[serde(default)]
    source: Option<String>,
    #[serde(default)]
    inline: Option<String>,
    #[serde(default)]
    local: Option<IgnoredAny>,
    #[serde(default)]
    compression: Option<String>,
    #[serde(default)]
    http_headers: Vec<BHttpHeader>,
    #[serde(default)]
    verification: Option<BVerification>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BHttpHeader {
    name: String,
    #[serde(default)]
    value: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct BVerification {
    #[serde(default)]
    hash: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct BStorage {
    #[serde(default)]
    files: Vec<BFile>,
    #[serde(default)]
    directories: Vec<BDirectory>,
    #[serde(default)]
    links: Vec<BLink>,
    #[serde(default)]
    disks: Option<IgnoredAny>,
    #[serde(default)]
    raid: Option<IgnoredAny>,
    #[serde(default)]
    filesystems: Option<IgnoredAny>,
    #[serde(default)]
    luks: Option<IgnoredAny>,
    #[serde(default)]
    trees: Option<IgnoredAny>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct BNodeUser {
    #[serde(default)]
    id: Option<i64>,
    #[serde(default)]
    name: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BFile {
    path: String,
    #[serde(default)]
    overwrite: Option<bool>,
    #[serde(default)]
    contents: Option<BResource>,
    #[serde(default)]
    append: Vec<BResource>,
    #[serde(default, deserialize_with = "de_mode")]
    mode: Option<u32>,
    #[serde(default)]
    user: Option<BNodeUser>,
    #[serde(default)]
    group: Option<BNodeUser>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BDirectory {
    path: String,
    #[serde(default)]
    overwrite: Option<bool>,
    #[serde(default, deserialize_with = "de_mode")]
    mode: Option<u32>,
    #[serde(default)]
    user: Option<BNodeUser>,
    #[serde(default)]
    group: Option<BNodeUser>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BLink {
    path: String,
    #[serde(default)]
    overwrite: Option<bool>,
    #[serde(default)]
    user: Option<BNodeUser>,
    #[serde(default)]
    group: Option<BNodeUser>,
    #[serde(default)]
    target: Option<String>,
    #[serde(default)]
    hard: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct BSystemd {
    #[serde(default)]
    units: Vec<BUnit>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BUnit {
    name: String,
    #[serde(default)]
    enabled: Option<bool>,
    #[serde(default)]
    mask: Option<bool>,
    #[serde(default)]
    contents: Option<String>,
    #[serde(default)]
    contents_local: Option<IgnoredAny>,
    #[serde(default)]
    dropins: Vec<BDropin>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BDropin {
    name: String,
    #[serde(default)]
    contents: Option<String>,
    #[serde(default)]
    contents_local: Option<IgnoredAny>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct BPasswd {
    #[serde(default)]
    users: Vec<BUser>,
    #[serde(default)]
    groups: Vec<BGroup>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BUser {
    name: String,
    #[serde(default)]
    password_hash: Option<String>,
    #[serde(default)]
    ssh_authorized_keys: Vec<String>,
    #[serde(default)]
    ssh_authorized_keys_local: Option<IgnoredAny>,
    #[serde(default)]
    uid: Option<i64>,
    #[serde(default)]
    gecos: Option<String>,
    #[serde(default)]
    home_dir: Option<String>,
    #[serde(default)]
    no_create_home: Option<bool>,
    #[serde(default)]
    primary_group: Option<String>,
    #[serde(default)]
    groups: Vec<String>,
    #[serde(default)]
    no_user_group: Option<bool>,
    #[serde(default)]
    no_log_init: Option<bool>,
    #[serde(default)]
    shell: Option<String>,
    #[serde(default)]
    should_exist: Option<bool>,
    #[serde(default)]
    system: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BGroup {
    name: String,
    #[serde(default)]
    gid: Option<i64>,
    #[serde(default)]
    password_hash: Option<String>,
    #[serde(default)]
    should_exist: Option<bool>,
    #[serde(default)]
    system: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct BKernelArguments {
    #[serde(default)]
    should_exist: Vec<String>,
    #[serde(default)]
    should_not_exist: Vec<String>,
}

/// Accepts `mode` as YAML gives it: an integer (decimal, or `0o644`), or the string a
/// YAML 1.2 parser produces for the YAML 1.1 octal literal `0644`.
fn de_mode<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    struct ModeVisitor;

    impl<'de> Visitor<'de> for ModeVisitor {
        type Value = Option<u32>;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a file mode such as 0644 (octal) or 420 (decimal)")
        }

        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_some<D2: Deserializer<'de>>(self, d: D2) -> Result<Self::Value, D2::Error> {
            d.deserialize_any(ModeVisitor)
        }

        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
            u32::try_from(v)
                .map(Some)
                .map_err(|_| E::custom(format!("mode {v} is too large")))
        }

        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
            u64::try_from(v)
                .map_err(|_| E::custom(format!("mode {v} is negative")))
                .and_then(|v| self.visit_u64(v))
        }

        fn visit_str<E: de::Error>(self, s: &str) -> Result<Self::Value, E> {
            let digits = s
                .strip_prefix("0o")
                .or_else(|| s.strip_prefix('0').filter(|rest| !rest.is_empty()));
            match digits {
                Some(d) if d.bytes().all(|b| (b'0'..=b'7').contains(&b)) => {
                    u32::from_str_radix(d, 8)
                        .map(Some)
                        .map_err(|_| E::custom(format!("mode {s:?} is not a valid octal number")))
                }
                _ => Err(E::custom(format!(
                    "mode {s:?} is not a number; write it unquoted, e.g. `mode: 0644`"
                ))),
            }
        }
    }

    d.deserialize_any(ModeVisitor)
}

// ---------------------------------------------------------------------------------
// Ignition 3.3.0 output (typed; camelCase like Ignition; empty fields omitted)
// ---------------------------------------------------------------------------------

fn is_false_or_none(v: &Option<bool>) -> bool {
    v.is_none()
}

/// An Ignition spec 3.3.0 config.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct IgnitionConfig {
    pub ignition: IgnitionMeta,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel_arguments: Option<KernelArguments>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub passwd: Option<Passwd>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub storage: Option<Storage>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub systemd: Option<Systemd>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct IgnitionMeta {
    pub version: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config: Option<IgnitionConfigRefs>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proxy: Option<Proxy>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub security: Option<Security>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeouts: Option<Timeouts>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct IgnitionConfigRefs {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub merge: Vec<Resource>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replace: Option<Resource>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Proxy {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_proxy: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub https_proxy: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub no_proxy: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Security {
    pub tls: Tls,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Tls {
    pub certificate_authorities: Vec<Resource>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Timeouts {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_response_headers: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_total: Option<u32>,
}

/// A fetchable resource: file contents, an appended fragment, a merged config or a CA.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Resource {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compression: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub http_headers: Vec<HttpHeader>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verification: Option<Verification>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpHeader {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Verification {
    pub hash: String,
}

/// File/directory/link owner, by numeric id or by name.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeOwner {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Storage {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub directories: Vec<Directory>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<File>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub links: Vec<Link>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct File {
    pub path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overwrite: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<NodeOwner>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<NodeOwner>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub append: Vec<Resource>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub contents: Option<Resource>,
    /// Decimal, as Ignition expects (Butane's `0644` becomes 420).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Directory {
    pub path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overwrite: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<NodeOwner>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<NodeOwner>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Link {
    pub path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overwrite: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<NodeOwner>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<NodeOwner>,
    pub target: String,
    #[serde(skip_serializing_if = "is_false_or_none")]
    pub hard: Option<bool>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Systemd {
    pub units: Vec<Unit>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Unit {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mask: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub contents: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub dropins: Vec<Dropin>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Dropin {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub contents: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Passwd {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<Group>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub users: Vec<User>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct User {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gecos: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub home_dir: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_create_home: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_log_init: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_user_group: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub password_hash: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub primary_group: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shell: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub should_exist: Option<bool>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ssh_authorized_keys: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uid: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Group {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gid: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub password_hash: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub should_exist: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system: Option<bool>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KernelArguments {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub should_exist: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub should_not_exist: Vec<String>,
}

// ---------------------------------------------------------------------------------
// Translation
// ---------------------------------------------------------------------------------

/// Translates a Butane YAML document into Ignition 3.3.0 JSON (compact).
pub fn to_ignition_json(butane_yaml: &str) -> Result<String, ButaneError> {
    let config = translate(butane_yaml)?;
    serde_json::to_string(&config).map_err(|e| ButaneError::Invalid {
        field: "(output)".into(),
        message: format!("cannot serialise the Ignition config: {e}"),
    })
}

/// Translates a Butane YAML document into a typed Ignition 3.3.0 config.
pub fn translate(butane_yaml: &str) -> Result<IgnitionConfig, ButaneError> {
    let header: Header = parse(butane_yaml)?;
    let minor = check_header(&header)?;
    let butane: Butane = parse(butane_yaml)?;
    Translator {
        minor,
        declared: SUPPORTED_VERSIONS
            .get(minor)
            .copied()
            .unwrap_or_default()
            .to_string(),
    }
    .config(butane)
}

fn parse<T: serde::de::DeserializeOwned>(yaml: &str) -> Result<T, ButaneError> {
    super::parse_yaml(yaml).map_err(|e| ButaneError::Yaml {
        message: e.message,
        line: e.line,
    })
}

/// Returns the index of the version in [`SUPPORTED_VERSIONS`] (= its minor number).
fn check_header(h: &Header) -> Result<usize, ButaneError> {
    fn as_text(v: &serde_json::Value) -> String {
        match v {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        }
    }
    let variant = h.variant.as_ref().ok_or(ButaneError::MissingVariant)?;
    let variant = as_text(variant);
    if variant != SUPPORTED_VARIANT {
        return Err(ButaneError::UnsupportedVariant(variant));
    }
    let version = as_text(h.version.as_ref().ok_or(ButaneError::MissingVersion)?);
    SUPPORTED_VERSIONS
        .iter()
        .position(|v| *v == version)
        .ok_or(ButaneError::UnsupportedVersion(version))
}

struct Translator {
    /// Minor version of the declared Butane fcos spec (1.<minor>.0).
    minor: usize,
    declared: String,
}

fn invalid(field: impl Into<String>, message: impl Into<String>) -> ButaneError {
    ButaneError::Invalid {
        field: field.into(),
        message: message.into(),
    }
}

fn unsupported(field: impl Into<String>, hint: &'static str) -> ButaneError {
    ButaneError::Unsupported {
        field: field.into(),
        hint,
    }
}

const LOCAL_HINT: &str = "it reads files next to the Butane config, which nodewright does \
     not have; put the content inline (a minijinja `{% include %}` works)";
const STORAGE_HINT: &str = "nodewright only writes files, directories and links; \
     partition and format disks in the image instead";

const UNIT_SUFFIXES: &[&str] = &[
    ".service",
    ".socket",
    ".device",
    ".mount",
    ".automount",
    ".swap",
    ".target",
    ".path",
    ".timer",
    ".slice",
    ".scope",
];

impl Translator {
    fn require(&self, field: &str, min_minor: usize) -> Result<(), ButaneError> {
        if self.minor < min_minor {
            return Err(ButaneError::NeedsNewerVersion {
                field: field.to_string(),
                min: SUPPORTED_VERSIONS
                    .get(min_minor)
                    .copied()
                    .unwrap_or("a newer version"),
                declared: self.declared.clone(),
            });
        }
        Ok(())
    }

    fn config(&self, b: Butane) -> Result<IgnitionConfig, ButaneError> {
        if b.boot_device.is_some() {
            return Err(unsupported("boot_device", STORAGE_HINT));
        }
        let kernel_arguments = match b.kernel_arguments {
            Some(k) => {
                self.require("kernel_arguments", 4)?;
                for (i, arg) in k.should_exist.iter().enumerate() {
                    if k.should_not_exist.contains(arg) {
                        return Err(invalid(
                            format!("kernel_arguments.should_exist[{i}]"),
                            format!("{arg:?} is also listed in should_not_exist"),
                        ));
                    }
                }
                (!k.should_exist.is_empty() || !k.should_not_exist.is_empty()).then_some(
                    KernelArguments {
                        should_exist: k.should_exist,
                        should_not_exist: k.should_not_exist,
                    },
                )
            }
            None => None,
        };
        Ok(IgnitionConfig {
            ignition: self.meta(b.ignition.unwrap_or_default())?,
            kernel_arguments,
            passwd: self.passwd(b.passwd.unwrap_or_default())?,
            storage: self.storage(b.storage.unwrap_or_default())?,
            systemd: self.systemd(b.systemd.unwrap_or_default())?,
        })
    }

    fn meta(&self, b: BIgnition) -> Result<IgnitionMeta, ButaneError> {
        let config = match b.config {
            Some(c) => {
                let merge = c
                    .merge
                    .into_iter()
                    .enumerate()
                    .map(|(i, r)| self.resource(&format!("ignition.config.merge[{i}]"), r))
                    .collect::<Result<Vec<_>, _>>()?;
                let replace = c
                    .replace
                    .map(|r| self.resource("ignition.config.replace", r))
                    .transpose()?;
                (!merge.is_empty() || replace.is_some())
                    .then_some(IgnitionConfigRefs { merge, replace })
            }
            None => None,
        };
        let proxy = match b.proxy {
            Some(p) => {
                self.require("ignition.proxy", 1)?;
                Some(Proxy {
                    http_proxy: p.http_proxy,
                    https_proxy: p.https_proxy,
                    no_proxy: p.no_proxy,
                })
            }
            None => None,
        };
        let security = match b.security.and_then(|s| s.tls) {
            Some(tls) if !tls.certificate_authorities.is_empty() => {
                let cas = tls
                    .certificate_authorities
                    .into_iter()
                    .enumerate()
                    .map(|(i, r)| {
                        self.resource(
                            &format!("ignition.security.tls.certificate_authorities[{i}]"),
                            r,
                        )
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                Some(Security {
                    tls: Tls {
                        certificate_authorities: cas,
                    },
                })
            }
            _ => None,
        };
        let timeouts = b
            .timeouts
            .filter(|t| t.http_response_headers.is_some() || t.http_total.is_some())
            .map(|t| Timeouts {
                http_response_headers: t.http_response_headers,
                http_total: t.http_total,
            });
        Ok(IgnitionMeta {
            version: IGNITION_VERSION.to_string(),
            config,
            proxy,
            security,
            timeouts,
        })
    }

    fn resource(&self, field: &str, r: BResource) -> Result<Resource, ButaneError> {
        if r.local.is_some() {
            return Err(unsupported(format!("{field}.local"), LOCAL_HINT));
        }
        let source = match (r.source, r.inline) {
            (Some(_), Some(_)) => {
                return Err(invalid(field, "set either `source` or `inline`, not both"))
            }
            (Some(src), None) => {
                self.check_source(field, &src)?;
                Some(src)
            }
            (None, Some(inline)) => {
                if r.compression.is_some() {
                    return Err(invalid(
                        format!("{field}.compression"),
                        "`compression` describes a fetched `source`; remove it for `inline` \
                         contents",
                    ));
                }
                Some(data_url(inline.as_bytes()))
            }
            (None, None) => None,
        };
        if let Some(c) = r.compression.as_deref() {
            if !c.is_empty() && c != "gzip" {
                return Err(invalid(
                    format!("{field}.compression"),
                    format!("unknown compression {c:?}; Ignition supports only \"gzip\""),
                ));
            }
        }
        if !r.http_headers.is_empty() {
            self.require(&format!("{field}.http_headers"), 1)?;
            let is_http = source
                .as_deref()
                .is_some_and(|s| s.starts_with("http://") || s.starts_with("https://"));
            if !is_http {
                return Err(invalid(
                    format!("{field}.http_headers"),
                    "HTTP headers need an http:// or https:// `source`",
                ));
            }
        }
        let verification = match r.verification.and_then(|v| v.hash) {
            Some(hash) => {
                let ok = match hash.split_once('-') {
                    Some(("sha512", hex)) => hex.len() == 128,
                    Some(("sha256", hex)) => {
                        self.require(&format!("{field}.verification.hash"), 1)?;
                        hex.len() == 64
                    }
                    _ => false,
                };
                if !ok || !hash.split_once('-').is_some_and(|(_, h)| is_hex(h)) {
                    return Err(invalid(
                        format!("{field}.verification.hash"),
                        format!(
                            "{hash:?} is not of the form sha512-<128 hex digits> or \
                             sha256-<64 hex digits>"
                        ),
                    ));
                }
                Some(Verification { hash })
            }
            None => None,
        };
        Ok(Resource {
            compression: r.compression.filter(|c| !c.is_empty()),
            http_headers: r
                .http_headers
                .into_iter()
                .map(|h| HttpHeader {
                    name: h.name,
                    value: h.value,
                })
                .collect(),
            source,
            verification,
        })
    }

    fn check_source(&self, field: &str, src: &str) -> Result<(), ButaneError> {
        let scheme = src.split_once(':').map(|(s, _)| s).unwrap_or_default();
        match scheme {
            "http" | "https" | "tftp" | "s3" | "data" => Ok(()),
            "gs" => self.require(&format!("{field}.source (gs://)"), 2),
            _ => Err(invalid(
                format!("{field}.source"),
                format!("{src:?} has no supported URL scheme (http, https, tftp, s3, gs, data)"),
            )),
        }
    }

    fn storage(&self, b: BStorage) -> Result<Option<Storage>, ButaneError> {
        for (name, present) in [
            ("storage.disks", b.disks.is_some()),
            ("storage.raid", b.raid.is_some()),
            ("storage.filesystems", b.filesystems.is_some()),
            ("storage.luks", b.luks.is_some()),
            ("storage.trees", b.trees.is_some()),
        ] {
            if present {
                let hint = if name == "storage.trees" {
                    LOCAL_HINT
                } else {
                    STORAGE_HINT
                };
                return Err(unsupported(name, hint));
            }
        }
        let mut seen = BTreeSet::new();
        let mut check_path = |field: String, path: &str| -> Result<(), ButaneError> {
            if !path.starts_with('/') {
                return Err(invalid(
                    format!("{field}.path"),
                    format!("{path:?} must be an absolute path"),
                ));
            }
            let normalized = path.trim_end_matches('/');
            if !seen.insert(normalized.to_string()) {
                return Err(invalid(
                    format!("{field}.path"),
                    format!("{path:?} is configured more than once"),
                ));
            }
            Ok(())
        };

        let mut files = Vec::with_capacity(b.files.len());
        for (i, f) in b.files.into_iter().enumerate() {
            let field = format!("storage.files[{i}]");
            check_path(field.clone(), &f.path)?;
            check_mode(&field, f.mode)?;
            let contents = f
                .contents
                .map(|r| self.resource(&format!("{field}.contents"), r))
                .transpose()?;
            let append = f
                .append
                .into_iter()
                .enumerate()
                .map(|(j, r)| self.resource(&format!("{field}.append[{j}]"), r))
                .collect::<Result<Vec<_>, _>>()?;
            files.push(File {
                user: owner(&format!("{field}.user"), f.user)?,
                group: owner(&format!("{field}.group"), f.group)?,
                path: f.path,
                overwrite: f.overwrite,
                append,
                contents,
                mode: f.mode,
            });
        }

        let mut directories = Vec::with_capacity(b.directories.len());
        for (i, d) in b.directories.into_iter().enumerate() {
            let field = format!("storage.directories[{i}]");
            check_path(field.clone(), &d.path)?;
            check_mode(&field, d.mode)?;
            directories.push(Directory {
                user: owner(&format!("{field}.user"), d.user)?,
                group: owner(&format!("{field}.group"), d.group)?,
                path: d.path,
                overwrite: d.overwrite,
                mode: d.mode,
            });
        }

        let mut links = Vec::with_capacity(b.links.len());
        for (i, l) in b.links.into_iter().enumerate() {
            let field = format!("storage.links[{i}]");
            check_path(field.clone(), &l.path)?;
            let target = match l.target {
                Some(t) if !t.is_empty() => t,
                _ => {
                    return Err(invalid(
                        format!("{field}.target"),
                        "a link needs a `target`",
                    ))
                }
            };
            links.push(Link {
                user: owner(&format!("{field}.user"), l.user)?,
                group: owner(&format!("{field}.group"), l.group)?,
                path: l.path,
                overwrite: l.overwrite,
                target,
                hard: l.hard.filter(|h| *h),
            });
        }

        let storage = Storage {
            directories,
            files,
            links,
        };
        Ok((storage != Storage::default()).then_some(storage))
    }

    fn systemd(&self, b: BSystemd) -> Result<Option<Systemd>, ButaneError> {
        let mut names = BTreeSet::new();
        let mut units = Vec::with_capacity(b.units.len());
        for (i, u) in b.units.into_iter().enumerate() {
            let field = format!("systemd.units[{i}]");
            if u.contents_local.is_some() {
                return Err(unsupported(format!("{field}.contents_local"), LOCAL_HINT));
            }
            if !UNIT_SUFFIXES.iter().any(|s| u.name.ends_with(s)) || u.name.contains('/') {
                return Err(invalid(
                    format!("{field}.name"),
                    format!(
                        "{:?} is not a systemd unit name (it must end in one of {})",
                        u.name,
                        UNIT_SUFFIXES.join(", ")
                    ),
                ));
            }
            if !names.insert(u.name.clone()) {
                return Err(invalid(
                    format!("{field}.name"),
                    format!("unit {:?} is configured more than once", u.name),
                ));
            }
            if let Some(contents) = &u.contents {
                check_unit_contents(&format!("{field}.contents"), contents)?;
            }
            let mut dropin_names = BTreeSet::new();
            let mut dropins = Vec::with_capacity(u.dropins.len());
            for (j, d) in u.dropins.into_iter().enumerate() {
                let dfield = format!("{field}.dropins[{j}]");
                if d.contents_local.is_some() {
                    return Err(unsupported(format!("{dfield}.contents_local"), LOCAL_HINT));
                }
                if !d.name.ends_with(".conf") || d.name.contains('/') {
                    return Err(invalid(
                        format!("{dfield}.name"),
                        format!("{:?} must be a file name ending in .conf", d.name),
                    ));
                }
                if !dropin_names.insert(d.name.clone()) {
                    return Err(invalid(
                        format!("{dfield}.name"),
                        format!("drop-in {:?} is configured more than once", d.name),
                    ));
                }
                if let Some(contents) = &d.contents {
                    check_unit_contents(&format!("{dfield}.contents"), contents)?;
                }
                dropins.push(Dropin {
                    name: d.name,
                    contents: d.contents,
                });
            }
            units.push(Unit {
                name: u.name,
                enabled: u.enabled,
                mask: u.mask,
                contents: u.contents,
                dropins,
            });
        }
        Ok((!units.is_empty()).then_some(Systemd { units }))
    }

    fn passwd(&self, b: BPasswd) -> Result<Option<Passwd>, ButaneError> {
        let mut names = BTreeSet::new();
        let mut users = Vec::with_capacity(b.users.len());
        for (i, u) in b.users.into_iter().enumerate() {
            let field = format!("passwd.users[{i}]");
            if u.ssh_authorized_keys_local.is_some() {
                return Err(unsupported(
                    format!("{field}.ssh_authorized_keys_local"),
                    LOCAL_HINT,
                ));
            }
            if u.name.is_empty() {
                return Err(invalid(format!("{field}.name"), "a user needs a name"));
            }
            if !names.insert(u.name.clone()) {
                return Err(invalid(
                    format!("{field}.name"),
                    format!("user {:?} is configured more than once", u.name),
                ));
            }
            if u.should_exist.is_some() {
                self.require(&format!("{field}.should_exist"), 2)?;
            }
            users.push(User {
                name: u.name,
                gecos: u.gecos,
                groups: u.groups,
                home_dir: u.home_dir,
                no_create_home: u.no_create_home,
                no_log_init: u.no_log_init,
                no_user_group: u.no_user_group,
                password_hash: u.password_hash,
                primary_group: u.primary_group,
                shell: u.shell,
                should_exist: u.should_exist,
                ssh_authorized_keys: u.ssh_authorized_keys,
                system: u.system,
                uid: u.uid,
            });
        }
        let mut names = BTreeSet::new();
        let mut groups = Vec::with_capacity(b.groups.len());
        for (i, g) in b.groups.into_iter().enumerate() {
            let field = format!("passwd.groups[{i}]");
            if g.name.is_empty() {
                return Err(invalid(format!("{field}.name"), "a group needs a name"));
            }
            if !names.insert(g.name.clone()) {
                return Err(invalid(
                    format!("{field}.name"),
                    format!("group {:?} is configured more than once", g.name),
                ));
            }
            if g.should_exist.is_some() {
                self.require(&format!("{field}.should_exist"), 2)?;
            }
            groups.push(Group {
                name: g.name,
                gid: g.gid,
                password_hash: g.password_hash,
                should_exist: g.should_exist,
                system: g.system,
            });
        }
        let passwd = Passwd { groups, users };
        Ok((passwd != Passwd::default()).then_some(passwd))
    }
}

fn is_hex(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit())
}

fn check_mode(field: &str, mode: Option<u32>) -> Result<(), ButaneError> {
    match mode {
        Some(m) if m > 0o777 => Err(invalid(
            format!("{field}.mode"),
            format!(
                "{m:#o} has setuid/setgid/sticky bits, which Ignition 3.3 does not \
                 support; use permission bits only (e.g. 0755)"
            ),
        )),
        _ => Ok(()),
    }
}

fn owner(field: &str, o: Option<BNodeUser>) -> Result<Option<NodeOwner>, ButaneError> {
    match o {
        None => Ok(None),
        Some(BNodeUser {
            id: None,
            name: None,
        }) => Ok(None),
        Some(BNodeUser {
            id: Some(_),
            name: Some(_),
        }) => Err(invalid(field, "set either `id` or `name`, not both")),
        Some(BNodeUser { id, name }) => Ok(Some(NodeOwner { id, name })),
    }
}

/// A light syntax check of systemd unit text: every non-blank, non-comment line is a
/// `[Section]` header or a `Key=Value` assignment inside a section (continuation
/// lines after a trailing backslash are allowed).
fn check_unit_contents(field: &str, contents: &str) -> Result<(), ButaneError> {
    let mut in_section = false;
    let mut continued = false;
    for (n, line) in contents.lines().enumerate() {
        let t = line.trim();
        let was_continued = continued;
        continued = t.ends_with('\\');
        if was_continued || t.is_empty() || t.starts_with('#') || t.starts_with(';') {
            continue;
        }
        if t.starts_with('[') {
            if !t.ends_with(']') {
                return Err(invalid(
                    field,
                    format!("line {}: unterminated section header {t:?}", n + 1),
                ));
            }
            in_section = true;
        } else if !t.contains('=') {
            return Err(invalid(
                field,
                format!(
                    "line {}: {t:?} is neither `[Section]` nor `Key=Value`",
                    n + 1
                ),
            ));
        } else if !in_section {
            return Err(invalid(
                field,
                format!("line {}: {t:?} comes before any `[Section]` header", n + 1),
            ));
        }
    }
    Ok(())
}

/// Encodes bytes as an RFC 2397 `data:` URL, percent-encoded or base64, whichever is
/// shorter.
pub fn data_url(data: &[u8]) -> String {
    let percent_len: usize = data
        .iter()
        .map(|b| if is_url_safe(*b) { 1 } else { 3 })
        .sum();
    let base64_len = data.len().div_ceil(3) * 4 + ";base64".len();
    if base64_len < percent_len {
        format!(
            "data:;base64,{}",
            base64::engine::general_purpose::STANDARD.encode(data)
        )
    } else {
        let mut out = String::with_capacity("data:,".len() + percent_len);
        out.push_str("data:,");
        for b in data {
            if is_url_safe(*b) {
                out.push(char::from(*b));
            } else {
                out.push_str(&format!("%{b:02X}"));
            }
        }
        out
    }
}

fn is_url_safe(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b'/')
}

/// Decodes a `data:` URL as produced by [`data_url`] (or any base64/percent-encoded
/// data URL). Returns `None` if it is not a well-formed data URL.
pub fn decode_data_url(url: &str) -> Option<Vec<u8>> {
    let rest = url.strip_prefix("data:")?;
    let (meta, payload) = rest.split_once(',')?;
    if meta.ends_with(";base64") {
        return base64::engine::general_purpose::STANDARD
            .decode(payload)
            .ok();
    }
    let bytes = payload.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = payload.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ign(yaml: &str) -> serde_json::Value {
        match to_ignition_json(yaml) {
            Ok(s) => serde_json::from_str(&s).unwrap_or_else(|e| panic!("bad JSON {e}: {s}")),
            Err(e) => panic!("translation failed: {e}"),
        }
    }

    fn err(yaml: &str) -> ButaneError {
        match translate(yaml) {
            Ok(c) => panic!("expected an error, got {c:?}"),
            Err(e) => e,
        }
    }

    #[test]
    fn minimal_config() {
        assert_eq!(
            ign("variant: fcos\nversion: 1.4.0\n"),
            json!({"ignition": {"version": "3.3.0"}})
        );
    }

    #[test]
    fn all_supported_versions_are_accepted() {
        for v in SUPPORTED_VERSIONS {
            let out = ign(&format!("variant: fcos\nversion: {v}\n"));
            assert_eq!(out["ignition"]["version"], "3.3.0");
        }
    }

    #[test]
    fn files_with_octal_mode_owner_and_inline_contents() {
        let out = ign(r#"
variant: fcos
version: 1.4.0
storage:
  files:
    - path: /etc/hostname
      mode: 0644
      overwrite: true
      user: {name: core}
      group: {id: 0}
      contents:
        inline: "node-1\n"
    - path: /opt/run.sh
      mode: 0o755
      contents:
        source: https://example.com/run.sh.gz
        compression: gzip
        verification:
          hash: sha256-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
        http_headers:
          - name: Authorization
            value: Bearer x
      append:
        - inline: "echo done\n"
    - path: /etc/decimal
      mode: 420
"#);
        let files = &out["storage"]["files"];
        assert_eq!(files[0]["path"], "/etc/hostname");
        assert_eq!(files[0]["mode"], 420);
        assert_eq!(files[0]["overwrite"], true);
        assert_eq!(files[0]["user"], json!({"name": "core"}));
        assert_eq!(files[0]["group"], json!({"id": 0}));
        let src = files[0]["contents"]["source"].as_str().unwrap_or_default();
        assert_eq!(decode_data_url(src).as_deref(), Some(&b"node-1\n"[..]));
        assert_eq!(files[1]["mode"], 493);
        assert_eq!(files[1]["contents"]["compression"], "gzip");
        assert_eq!(
            files[1]["contents"]["httpHeaders"],
            json!([{"name": "Authorization", "value": "Bearer x"}])
        );
        assert!(files[1]["contents"]["verification"]["hash"]
            .as_str()
            .is_some_and(|h| h.starts_with("sha256-")));
        let append = files[1]["append"][0]["source"].as_str().unwrap_or_default();
        assert_eq!(
            decode_data_url(append).as_deref(),
            Some(&b"echo done\n"[..])
        );
        assert_eq!(files[2]["mode"], 420);
        assert!(files[2].get("contents").is_none());
    }

    #[test]
    fn directories_links_units_users_groups_kargs() {
        let out = ign(r#"
variant: fcos
version: 1.4.0
storage:
  directories:
    - path: /var/lib/app
      mode: 0750
      user: {id: 1000}
  links:
    - path: /etc/localtime
      target: ../usr/share/zoneinfo/UTC
    - path: /usr/local/bin/k
      target: /usr/local/bin/k3s
      hard: true
systemd:
  units:
    - name: app.service
      enabled: true
      contents: |
        [Unit]
        Description=App
        [Service]
        ExecStart=/bin/true \
          --flag
        [Install]
        WantedBy=multi-user.target
    - name: zincati.service
      mask: true
    - name: docker.service
      dropins:
        - name: 10-env.conf
          contents: "[Service]\nEnvironment=A=B\n"
passwd:
  users:
    - name: core
      ssh_authorized_keys: [ "ssh-ed25519 AAAA test" ]
      groups: [wheel, sudo]
      password_hash: "$y$abc"
      uid: 1001
      home_dir: /home/core
      shell: /bin/bash
      should_exist: true
  groups:
    - name: app
      gid: 2000
      system: true
kernel_arguments:
  should_exist: [mitigations=auto]
  should_not_exist: [quiet]
"#);
        assert_eq!(
            out["storage"]["directories"],
            json!([{"path": "/var/lib/app", "mode": 488, "user": {"id": 1000}}])
        );
        assert_eq!(
            out["storage"]["links"],
            json!([
                {"path": "/etc/localtime", "target": "../usr/share/zoneinfo/UTC"},
                {"path": "/usr/local/bin/k", "target": "/usr/local/bin/k3s", "hard": true}
            ])
        );
        let units = &out["systemd"]["units"];
        assert_eq!(units[0]["name"], "app.service");
        assert_eq!(units[0]["enabled"], true);
        assert!(units[0]["contents"]
            .as_str()
            .is_some_and(|c| c.contains("WantedBy=multi-user.target")));
        assert_eq!(units[1], json!({"name": "zincati.service", "mask": true}));
        assert_eq!(
            units[2]["dropins"],
            json!([{"name": "10-env.conf", "contents": "[Service]\nEnvironment=A=B\n"}])
        );
        assert_eq!(
            out["passwd"]["users"][0],
            json!({
                "name": "core",
                "sshAuthorizedKeys": ["ssh-ed25519 AAAA test"],
                "groups": ["wheel", "sudo"],
                "passwordHash": "$y$abc",
                "uid": 1001,
                "homeDir": "/home/core",
                "shell": "/bin/bash",
                "shouldExist": true
            })
        );
        assert_eq!(
            out["passwd"]["groups"],
            json!([{"name": "app", "gid": 2000, "system": true}])
        );
        assert_eq!(
            out["kernelArguments"],
            json!({"shouldExist": ["mitigations=auto"], "shouldNotExist": ["quiet"]})
        );
    }

    #[test]
    fn ignition_section() {
        let out = ign(r#"
variant: fcos
version: 1.1.0
ignition:
  config:
    merge:
      - source: https://example.com/extra.ign
  timeouts:
    http_total: 30
  security:
    tls:
      certificate_authorities:
        - inline: "-----BEGIN CERTIFICATE-----\n"
  proxy:
    https_proxy: http://proxy:3128
    no_proxy: [localhost]
"#);
        let meta = &out["ignition"];
        assert_eq!(meta["version"], "3.3.0");
        assert_eq!(
            meta["config"],
            json!({"merge": [{"source": "https://example.com/extra.ign"}]})
        );
        assert_eq!(meta["timeouts"], json!({"httpTotal": 30}));
        assert_eq!(
            meta["proxy"],
            json!({"httpsProxy": "http://proxy:3128", "noProxy": ["localhost"]})
        );
        assert!(
            meta["security"]["tls"]["certificateAuthorities"][0]["source"]
                .as_str()
                .is_some_and(|s| s.starts_with("data:"))
        );
    }

    #[test]
    fn unsupported_variant_and_version() {
        let e = err("variant: flatcar\nversion: 1.0.0\n");
        assert_eq!(e, ButaneError::UnsupportedVariant("flatcar".into()));
        assert!(e.to_string().contains("variant: fcos"), "{e}");

        let e = err("variant: fcos\nversion: 1.6.0\n");
        assert_eq!(e, ButaneError::UnsupportedVersion("1.6.0".into()));
        assert!(e.to_string().contains("1.0.0, 1.1.0"), "{e}");

        assert_eq!(err("version: 1.4.0\n"), ButaneError::MissingVariant);
        assert_eq!(err("variant: fcos\n"), ButaneError::MissingVersion);
        // A float-looking version is reported as written.
        assert_eq!(
            err("variant: fcos\nversion: 1.4\n"),
            ButaneError::UnsupportedVersion("1.4".into())
        );
    }

    #[test]
    fn unknown_field_is_an_error_with_line() {
        let e = err(
            "variant: fcos\nversion: 1.4.0\nstorage:\n  files:\n    - path: /a\n      mod: 0644\n",
        );
        let msg = e.to_string();
        assert!(msg.contains("unknown field `mod`"), "{msg}");
        assert!(msg.contains("mode"), "should list expected fields: {msg}");
        assert_eq!(e.line(), Some(6), "{msg}");

        let e = err("variant: fcos\nversion: 1.4.0\npasswd:\n  users:\n    - name: core\n      ssh_authorised_keys: []\n");
        assert!(e.to_string().contains("ssh_authorised_keys"), "{e}");
    }

    #[test]
    fn features_gated_by_version() {
        let e = err("variant: fcos\nversion: 1.3.0\nkernel_arguments:\n  should_exist: [a]\n");
        assert!(
            matches!(&e, ButaneError::NeedsNewerVersion { min: "1.4.0", .. }),
            "{e}"
        );
        let e = err("variant: fcos\nversion: 1.1.0\npasswd:\n  users:\n    - name: a\n      should_exist: false\n");
        assert!(
            matches!(&e, ButaneError::NeedsNewerVersion { min: "1.2.0", .. }),
            "{e}"
        );
    }

    #[test]
    fn invalid_values_are_explained() {
        let base = "variant: fcos\nversion: 1.4.0\n";
        let cases = [
            ("storage:\n  files:\n    - path: etc/x\n", "absolute"),
            ("storage:\n  files:\n    - path: /x\n    - path: /x\n", "more than once"),
            ("storage:\n  files:\n    - path: /x\n      mode: 04755\n", "setuid"),
            ("storage:\n  files:\n    - path: /x\n      mode: \"rw\"\n", "not a number"),
            (
                "storage:\n  files:\n    - path: /x\n      contents:\n        inline: a\n        source: https://x\n",
                "not both",
            ),
            (
                "storage:\n  files:\n    - path: /x\n      contents:\n        local: x\n",
                "not supported",
            ),
            (
                "storage:\n  files:\n    - path: /x\n      contents:\n        source: ftp://x\n",
                "scheme",
            ),
            ("storage:\n  disks: []\n", "storage.disks"),
            ("storage:\n  links:\n    - path: /x\n", "target"),
            ("systemd:\n  units:\n    - name: app\n", "unit name"),
            (
                "systemd:\n  units:\n    - name: a.service\n      dropins:\n        - name: x\n",
                ".conf",
            ),
            (
                "systemd:\n  units:\n    - name: a.service\n      contents: \"ExecStart=/bin/true\"\n",
                "before any",
            ),
            ("passwd:\n  users:\n    - name: a\n    - name: a\n", "more than once"),
        ];
        for (body, needle) in cases {
            let e = err(&format!("{base}{body}"));
            assert!(e.to_string().contains(needle), "{body}: {e}");
        }
    }

    #[test]
    fn data_url_round_trip() {
        for data in [
            &b""[..],
            b"plain-text/path.ext",
            b"line 1\nline 2 with spaces & symbols %#?\n",
            &[0u8, 255, 10, 13, 37][..],
        ] {
            let url = data_url(data);
            assert!(url.starts_with("data:"), "{url}");
            assert_eq!(decode_data_url(&url).as_deref(), Some(data), "{url}");
        }
        assert_eq!(data_url(b"abc"), "data:,abc");
        assert!(data_url(b"a b c d e f g h\n").contains(";base64,"));
    }
}

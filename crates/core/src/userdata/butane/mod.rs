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

use base64::Engine;

mod ignition;
mod input;
mod translate;

#[cfg(test)]
mod tests;

pub use ignition::*;
use input::{Butane, Header};
use translate::Translator;

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

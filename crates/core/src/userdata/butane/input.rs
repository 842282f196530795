//! The Butane input, typed; snake_case like Butane itself. Unknown fields are errors,
//! so a typo cannot silently drop configuration.

use std::fmt;

use serde::de::{self, Deserializer, IgnoredAny, Visitor};
use serde::Deserialize;

/// Only the fields needed to decide whether we can read the rest.
#[derive(Deserialize)]
pub(super) struct Header {
    #[serde(default)]
    pub(super) variant: Option<serde_json::Value>,
    #[serde(default)]
    pub(super) version: Option<serde_json::Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Butane {
    #[allow(dead_code)]
    pub(super) variant: String,
    #[allow(dead_code)]
    pub(super) version: String,
    #[serde(default)]
    pub(super) ignition: Option<BIgnition>,
    #[serde(default)]
    pub(super) storage: Option<BStorage>,
    #[serde(default)]
    pub(super) systemd: Option<BSystemd>,
    #[serde(default)]
    pub(super) passwd: Option<BPasswd>,
    #[serde(default)]
    pub(super) kernel_arguments: Option<BKernelArguments>,
    #[serde(default)]
    pub(super) boot_device: Option<IgnoredAny>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct BIgnition {
    #[serde(default)]
    pub(super) config: Option<BIgnitionConfig>,
    #[serde(default)]
    pub(super) timeouts: Option<BTimeouts>,
    #[serde(default)]
    pub(super) security: Option<BSecurity>,
    #[serde(default)]
    pub(super) proxy: Option<BProxy>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct BIgnitionConfig {
    #[serde(default)]
    pub(super) merge: Vec<BResource>,
    #[serde(default)]
    pub(super) replace: Option<BResource>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct BTimeouts {
    #[serde(default)]
    pub(super) http_response_headers: Option<u32>,
    #[serde(default)]
    pub(super) http_total: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct BSecurity {
    #[serde(default)]
    pub(super) tls: Option<BTls>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct BTls {
    #[serde(default)]
    pub(super) certificate_authorities: Vec<BResource>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct BProxy {
    #[serde(default)]
    pub(super) http_proxy: Option<String>,
    #[serde(default)]
    pub(super) https_proxy: Option<String>,
    #[serde(default)]
    pub(super) no_proxy: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct BResource {
    #[serde(default)]
    pub(super) source: Option<String>,
    #[serde(default)]
    pub(super) inline: Option<String>,
    #[serde(default)]
    pub(super) local: Option<IgnoredAny>,
    #[serde(default)]
    pub(super) compression: Option<String>,
    #[serde(default)]
    pub(super) http_headers: Vec<BHttpHeader>,
    #[serde(default)]
    pub(super) verification: Option<BVerification>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct BHttpHeader {
    pub(super) name: String,
    #[serde(default)]
    pub(super) value: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct BVerification {
    #[serde(default)]
    pub(super) hash: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct BStorage {
    #[serde(default)]
    pub(super) files: Vec<BFile>,
    #[serde(default)]
    pub(super) directories: Vec<BDirectory>,
    #[serde(default)]
    pub(super) links: Vec<BLink>,
    #[serde(default)]
    pub(super) disks: Option<IgnoredAny>,
    #[serde(default)]
    pub(super) raid: Option<IgnoredAny>,
    #[serde(default)]
    pub(super) filesystems: Option<IgnoredAny>,
    #[serde(default)]
    pub(super) luks: Option<IgnoredAny>,
    #[serde(default)]
    pub(super) trees: Option<IgnoredAny>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct BNodeUser {
    #[serde(default)]
    pub(super) id: Option<i64>,
    #[serde(default)]
    pub(super) name: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct BFile {
    pub(super) path: String,
    #[serde(default)]
    pub(super) overwrite: Option<bool>,
    #[serde(default)]
    pub(super) contents: Option<BResource>,
    #[serde(default)]
    pub(super) append: Vec<BResource>,
    #[serde(default, deserialize_with = "de_mode")]
    pub(super) mode: Option<u32>,
    #[serde(default)]
    pub(super) user: Option<BNodeUser>,
    #[serde(default)]
    pub(super) group: Option<BNodeUser>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct BDirectory {
    pub(super) path: String,
    #[serde(default)]
    pub(super) overwrite: Option<bool>,
    #[serde(default, deserialize_with = "de_mode")]
    pub(super) mode: Option<u32>,
    #[serde(default)]
    pub(super) user: Option<BNodeUser>,
    #[serde(default)]
    pub(super) group: Option<BNodeUser>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct BLink {
    pub(super) path: String,
    #[serde(default)]
    pub(super) overwrite: Option<bool>,
    #[serde(default)]
    pub(super) user: Option<BNodeUser>,
    #[serde(default)]
    pub(super) group: Option<BNodeUser>,
    #[serde(default)]
    pub(super) target: Option<String>,
    #[serde(default)]
    pub(super) hard: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct BSystemd {
    #[serde(default)]
    pub(super) units: Vec<BUnit>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct BUnit {
    pub(super) name: String,
    #[serde(default)]
    pub(super) enabled: Option<bool>,
    #[serde(default)]
    pub(super) mask: Option<bool>,
    #[serde(default)]
    pub(super) contents: Option<String>,
    #[serde(default)]
    pub(super) contents_local: Option<IgnoredAny>,
    #[serde(default)]
    pub(super) dropins: Vec<BDropin>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct BDropin {
    pub(super) name: String,
    #[serde(default)]
    pub(super) contents: Option<String>,
    #[serde(default)]
    pub(super) contents_local: Option<IgnoredAny>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct BPasswd {
    #[serde(default)]
    pub(super) users: Vec<BUser>,
    #[serde(default)]
    pub(super) groups: Vec<BGroup>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct BUser {
    pub(super) name: String,
    #[serde(default)]
    pub(super) password_hash: Option<String>,
    #[serde(default)]
    pub(super) ssh_authorized_keys: Vec<String>,
    #[serde(default)]
    pub(super) ssh_authorized_keys_local: Option<IgnoredAny>,
    #[serde(default)]
    pub(super) uid: Option<i64>,
    #[serde(default)]
    pub(super) gecos: Option<String>,
    #[serde(default)]
    pub(super) home_dir: Option<String>,
    #[serde(default)]
    pub(super) no_create_home: Option<bool>,
    #[serde(default)]
    pub(super) primary_group: Option<String>,
    #[serde(default)]
    pub(super) groups: Vec<String>,
    #[serde(default)]
    pub(super) no_user_group: Option<bool>,
    #[serde(default)]
    pub(super) no_log_init: Option<bool>,
    #[serde(default)]
    pub(super) shell: Option<String>,
    #[serde(default)]
    pub(super) should_exist: Option<bool>,
    #[serde(default)]
    pub(super) system: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct BGroup {
    pub(super) name: String,
    #[serde(default)]
    pub(super) gid: Option<i64>,
    #[serde(default)]
    pub(super) password_hash: Option<String>,
    #[serde(default)]
    pub(super) should_exist: Option<bool>,
    #[serde(default)]
    pub(super) system: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct BKernelArguments {
    #[serde(default)]
    pub(super) should_exist: Vec<String>,
    #[serde(default)]
    pub(super) should_not_exist: Vec<String>,
}

/// Accepts `mode` as YAML gives it: an integer (decimal, or `0o644`), or the string a
/// YAML 1.2 parser produces for the YAML 1.1 octal literal `0644`.
pub(super) fn de_mode<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
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

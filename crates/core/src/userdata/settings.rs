//! The `userData` key of a node group: which template, its variables, and the output
//! format (given, or inferred from the template's file name). Apart from rendering, so
//! config reads it without the template engine.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use serde::Deserialize;

/// How a group's user data is produced (the `userData` key of a node group).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UserDataConfig {
    /// Template file name, relative to the templates directory.
    pub template: String,
    /// Output format; inferred from the template's file name when absent.
    #[serde(default)]
    pub format: Option<UserDataFormat>,
    /// Free-form variables passed to the template.
    #[serde(default)]
    pub variables: BTreeMap<String, serde_json::Value>,
    /// Variables read from files at render time (trailing newline trimmed), so secrets such
    /// as join tokens can come from a mounted Secret instead of the config.
    #[serde(default)]
    pub variable_files: BTreeMap<String, PathBuf>,
    /// kubeadm clusters: nodewright mints a bootstrap token for each VM it makes, good for
    /// `provisionTimeout`, and gives the template `bootstrap_token`, `api_server_endpoint`
    /// and `ca_cert_hash` (from `kube-public/cluster-info`); the token is deleted once the
    /// node joined or its VM is gone. No token pasted into the config expires under it.
    #[serde(default)]
    pub bootstrap_token: bool,
}

impl UserDataConfig {
    /// The explicit format, or the one inferred from the template name.
    pub fn effective_format(&self) -> UserDataFormat {
        self.format.unwrap_or_else(|| infer_format(&self.template))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum UserDataFormat {
    /// `#cloud-config` YAML (or any cloud-init user data), passed through.
    CloudInit,
    /// Butane (Fedora CoreOS) YAML, translated to Ignition 3.3 JSON.
    Butane,
    /// A shell script (e.g. a join script run through a guest agent).
    Script,
}

impl fmt::Display for UserDataFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            UserDataFormat::CloudInit => "cloud-init",
            UserDataFormat::Butane => "butane",
            UserDataFormat::Script => "script",
        })
    }
}

/// Infers the output format from a template file name.
///
/// The file name (without directories) is split at dots; the first part is the stem and
/// is ignored. If any later part is `butane` or `bu`, the format is Butane; else if any
/// is `sh`, it is Script; otherwise CloudInit. So `k3s.butane.yaml.j2`, `fcos.bu` →
/// Butane; `join.sh.j2` → Script; `k3s.cloud-init.yaml.j2`, `user-data` → CloudInit.
pub fn infer_format(template: &str) -> UserDataFormat {
    let file = template.rsplit('/').next().unwrap_or(template);
    let parts: Vec<&str> = file.split('.').skip(1).collect();
    if parts
        .iter()
        .any(|p| p.eq_ignore_ascii_case("butane") || p.eq_ignore_ascii_case("bu"))
    {
        UserDataFormat::Butane
    } else if parts.iter().any(|p| p.eq_ignore_ascii_case("sh")) {
        UserDataFormat::Script
    } else {
        UserDataFormat::CloudInit
    }
}

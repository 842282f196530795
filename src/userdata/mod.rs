//! User data rendering: minijinja templates from `templates/`, with Butane translated
//! to Ignition by nodewright itself.

use std::collections::BTreeMap;

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

//! OpenStack: Keystone v3 + Nova (+ Glance and Neutron for name lookups).

use serde::Deserialize;

/// Per-node-group OpenStack settings (the `openstack` key of a node group).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OpenStackSettings {
    /// Flavor name or id.
    pub flavor: String,
    /// Image name or id.
    pub image: String,
    /// Network name or id; none means Nova's `"networks": "none"`.
    #[serde(default)]
    pub network: Option<String>,
    #[serde(default)]
    pub key_name: Option<String>,
    #[serde(default)]
    pub security_groups: Vec<String>,
    #[serde(default)]
    pub availability_zone: Option<String>,
}

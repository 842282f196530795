//! The `openstack:` block of a node group: its serde shape, its validation, the shape of a
//! server it implies and what of it goes into the settings hash (see
//! [`crate::cloud::registry`]). Nothing here talks to OpenStack.

use serde::Deserialize;
use serde_json::Value;

use crate::cloud::registry::{GroupContext, Settings};
use crate::model::GroupShape;

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
    /// Server group name or id (Nova `os-server-groups`), passed on create as the
    /// `group` scheduler hint, e.g. an `anti-affinity` group to spread the nodes.
    #[serde(default)]
    pub server_group: Option<String>,
}

/// Nova's classic flavors, for the shape of a group whose flavor the settings alone name
/// (the what-if world; the real provider asks Nova).
pub const KNOWN_FLAVORS: &[(&str, u64, u64)] = &[
    ("m1.tiny", 1, 512),
    ("m1.small", 1, 2048),
    ("m1.medium", 2, 4096),
    ("m1.large", 4, 8192),
    ("m1.xlarge", 8, 16384),
];

impl Settings for OpenStackSettings {
    fn validate(&self, _group: &GroupContext<'_>) -> Vec<(String, String)> {
        let mut p = Vec::new();
        for (field, value) in [("flavor", &self.flavor), ("image", &self.image)] {
            if value.trim().is_empty() {
                p.push((
                    format!("openstack.{field}"),
                    "empty; expected a name or id".to_string(),
                ));
            }
        }
        p
    }

    fn hash_fields(&self) -> Vec<(&'static str, Value)> {
        let mut m = vec![
            ("openstack.flavor", Value::from(self.flavor.clone())),
            ("openstack.image", Value::from(self.image.clone())),
        ];
        if let Some(n) = &self.network {
            m.push(("openstack.network", Value::from(n.clone())));
        }
        if let Some(k) = &self.key_name {
            m.push(("openstack.keyName", Value::from(k.clone())));
        }
        if !self.security_groups.is_empty() {
            m.push((
                "openstack.securityGroups",
                Value::from(self.security_groups.clone()),
            ));
        }
        m
    }

    fn offline_shape(&self) -> GroupShape {
        let mut shape = GroupShape::default();
        if let Some((_, cpus, mib)) = KNOWN_FLAVORS.iter().find(|f| f.0 == self.flavor) {
            shape.cpu_milli = Some(cpus * 1000);
            shape.memory = Some(mib << 20);
        }
        shape.instance_type = Some(self.flavor.clone());
        shape.zone = self.availability_zone.clone();
        shape
    }

    fn unknown_shape(&self) -> String {
        format!(
            "flavor {} is not one of {}",
            self.flavor,
            KNOWN_FLAVORS
                .iter()
                .map(|f| f.0)
                .collect::<Vec<_>>()
                .join(", ")
        )
    }
}

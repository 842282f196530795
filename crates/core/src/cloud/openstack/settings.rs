//! The `openstack:` block of a node group: its serde shape, its validation, the shape of a
//! server it implies and what of it goes into the settings hash (see
//! [`crate::cloud::registry`]). Nothing here talks to OpenStack.

use serde::Deserialize;
use serde_json::Value;

use crate::cloud::registry::{GroupContext, ProviderSettings, Settings};
use crate::model::{GroupShape, Names, SizeShape};

/// Per-node-group OpenStack settings (the `openstack` key of a node group).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OpenStackSettings {
    /// Flavor name or id, or a list of them: each scale-up takes the one that wastes
    /// least for its pods (the first where nothing chose, e.g. `minSize`).
    pub flavor: Names,
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
        if self.flavor.all().is_empty() {
            p.push((
                "openstack.flavor".to_string(),
                "an empty list; expected a flavor name or id, or a list of them such as `[m1.small, m1.large]`".to_string(),
            ));
        }
        for dup in self.flavor.duplicates() {
            p.push((
                "openstack.flavor".to_string(),
                format!("lists `{dup}` twice; expected each flavor once"),
            ));
        }
        let flavors = self.flavor.all().iter().map(|f| ("flavor", f));
        for (field, value) in flavors.chain([("image", &self.image)]) {
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
            // One flavor hashes as the plain name it always did (see `sizes`).
            ("openstack.flavor", flavor_value(&self.flavor)),
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
        let known = |name: &str| {
            let mut s = SizeShape {
                name: name.to_string(),
                ..SizeShape::default()
            };
            if let Some((_, cpus, mib)) = KNOWN_FLAVORS.iter().find(|f| f.0 == name) {
                s.cpu_milli = Some(cpus * 1000);
                s.memory = Some(mib << 20);
            }
            s
        };
        let first = known(self.flavor.first());
        GroupShape {
            cpu_milli: first.cpu_milli,
            memory: first.memory,
            instance_type: Some(first.name),
            zone: self.availability_zone.clone(),
            sizes: if self.flavor.several() {
                self.flavor.all().iter().map(|f| known(f)).collect()
            } else {
                Vec::new()
            },
            ..GroupShape::default()
        }
    }

    fn sizes(&self) -> Vec<String> {
        self.flavor.all().to_vec()
    }

    fn with_size(&self, size: &str) -> Option<ProviderSettings> {
        if !self.flavor.all().iter().any(|f| f == size) {
            return None;
        }
        let mut one = self.clone();
        one.flavor = Names::one(size);
        Some(ProviderSettings::Openstack(one))
    }

    fn unknown_shape(&self) -> String {
        format!(
            "flavor {} is not one of {}",
            self.flavor.first(),
            KNOWN_FLAVORS
                .iter()
                .map(|f| f.0)
                .collect::<Vec<_>>()
                .join(", ")
        )
    }
}

/// `openstack.flavor` as hashed: one flavor as its name (as before lists were allowed), a
/// list as a list (the settings hash of a group of several flavors is never stamped: each
/// VM carries the hash of its own flavor, see `NodeGroupConfig::size_hashes`).
fn flavor_value(f: &Names) -> Value {
    match f.all() {
        [one] => Value::from(one.clone()),
        many => Value::from(many.to_vec()),
    }
}

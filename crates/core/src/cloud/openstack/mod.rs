//! OpenStack: Keystone v3 + Nova (+ Glance and Neutron for name lookups).
//!
//! - [`credentials`]: the `OS_*` YAML credentials file.
//! - [`auth`]: Keystone v3 tokens and the service catalog.
//! - [`nova`]: Nova shapes and status mapping.
//! - [`provider`]: [`OpenStackProvider`], the [`crate::cloud::CloudProvider`].

pub mod auth;
pub mod credentials;
mod http;
pub mod nova;
pub mod provider;
mod time;

use serde::Deserialize;

pub use credentials::{
    AuthMethod, CredentialsError, DomainRef, Interface, OpenStackCredentials, ProjectScope,
};
pub use provider::{OpenStackProvider, ProviderOptions};

/// Provider name used in errors, logs and [`crate::model::Server::provider`].
pub const PROVIDER: &str = "openstack";

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

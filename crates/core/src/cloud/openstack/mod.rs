//! OpenStack: Keystone v3 + Nova (+ Glance and Neutron for name lookups).
//!
//! - [`credentials`]: the `OS_*` YAML credentials file.
//! - [`auth`]: Keystone v3 tokens and the service catalog.
//! - [`nova`]: Nova shapes and status mapping.
//! - [`settings`]: the `openstack:` block of a node group (serde, validation, shape, hash).
//! - [`provider`]: [`OpenStackProvider`], the [`crate::cloud::CloudProvider`].

pub mod auth;
pub mod credentials;
mod http;
pub mod nova;
pub mod provider;
pub mod settings;
mod time;

pub use credentials::{
    AuthMethod, CredentialsError, DomainRef, Interface, OpenStackCredentials, ProjectScope,
};
pub use provider::{OpenStackProvider, ProviderOptions};
pub use settings::OpenStackSettings;

/// Provider name used in errors, logs and [`crate::model::Server::provider`].
pub const PROVIDER: &str = "openstack";

/// Builds the provider for `groups` from the credentials file at `path` (the registry's
/// `build`).
pub(crate) fn build(
    path: &std::path::Path,
    groups: std::collections::BTreeMap<String, OpenStackSettings>,
    _options: &crate::cloud::BuildOptions,
) -> Result<std::sync::Arc<dyn crate::cloud::CloudProvider>, crate::cloud::BuildError> {
    let creds = OpenStackCredentials::from_file(path)
        .map_err(|e| crate::cloud::BuildError::Credentials(e.to_string()))?;
    Ok(std::sync::Arc::new(OpenStackProvider::new(creds, groups)?))
}

/// Reads the credentials file without the network (the registry's `read_credentials`).
pub(crate) fn read_credentials(path: &std::path::Path) -> Result<(), String> {
    OpenStackCredentials::from_file(path)
        .map(drop)
        .map_err(|e| e.to_string())
}

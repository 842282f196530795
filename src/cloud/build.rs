//! Builds the providers a config needs from the credential files the environment names.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::openstack::{OpenStackCredentials, OpenStackProvider};
use super::CloudProvider;
use crate::act::Clouds;
use crate::config::{Config, ProviderKind, ENV_OPENSTACK_CREDENTIALS};

#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("node group(s) {groups} use provider {provider}, but {env} is not set; expected the path of the credentials file")]
    MissingEnv {
        provider: &'static str,
        groups: String,
        env: &'static str,
    },
    #[error("{0}")]
    Credentials(String),
    #[error(transparent)]
    Cloud(#[from] super::CloudError),
}

/// One provider per account, shared by the groups that use it; credential files come
/// from the environment.
pub fn build_clouds(config: &Config) -> Result<Clouds, BuildError> {
    let openstack = std::env::var_os(ENV_OPENSTACK_CREDENTIALS).map(PathBuf::from);
    build_clouds_with(config, openstack.as_deref())
}

/// As [`build_clouds`], with the credential file paths given.
pub fn build_clouds_with(
    config: &Config,
    openstack_credentials: Option<&Path>,
) -> Result<Clouds, BuildError> {
    let mut clouds = Clouds::new();
    let openstack_groups: BTreeMap<String, _> = config
        .node_groups
        .iter()
        .filter(|g| g.provider == ProviderKind::Openstack)
        .filter_map(|g| g.openstack.clone().map(|s| (g.name.clone(), s)))
        .collect();
    if !openstack_groups.is_empty() {
        let path = openstack_credentials.ok_or_else(|| BuildError::MissingEnv {
                provider: "openstack",
                groups: openstack_groups.keys().cloned().collect::<Vec<_>>().join(", "),
                env: ENV_OPENSTACK_CREDENTIALS,
            })?;
        let creds = OpenStackCredentials::from_file(path)
            .map_err(|e| BuildError::Credentials(e.to_string()))?;
        let names: Vec<String> = openstack_groups.keys().cloned().collect();
        let provider: Arc<dyn CloudProvider> =
            Arc::new(OpenStackProvider::new(creds, openstack_groups)?);
        for name in names {
            clouds.add_group(&name, provider.clone());
        }
    }
    Ok(clouds)
}

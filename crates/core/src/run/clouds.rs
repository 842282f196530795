//! The providers a config needs, built from the credential files the environment names:
//! one provider per account, shared by the groups that use it. It walks the config and
//! hands each provider's row (`crate::cloud::build`) only its groups' settings and the
//! plain options it takes.

use std::path::PathBuf;

use crate::cloud::build::build_provider;
use crate::cloud::in_use::Clouds;
use crate::cloud::registry::ProviderBlocks;
use crate::cloud::{BuildError, BuildOptions};
use crate::config::{Config, ProviderKind};

/// One provider per account, shared by the groups that use it; credential files come
/// from the environment variables [`ProviderKind::credentials_env`] names.
pub fn build_clouds(config: &Config) -> Result<Clouds, BuildError> {
    build_clouds_with(config, credentials_from_env)
}

/// As [`build_clouds`], for a process that only reads (`plan`, `run --dry-run`): reading a
/// cloud then never changes it (see the Proxmox provider's `read_only`).
pub fn build_clouds_read_only(config: &Config) -> Result<Clouds, BuildError> {
    build(config, credentials_from_env, true)
}

/// Environment variable lookup of the credentials files, as `run` does it.
pub fn credentials_from_env(kind: ProviderKind) -> Option<PathBuf> {
    std::env::var_os(kind.credentials_env()).map(PathBuf::from)
}

/// As [`build_clouds`], with the credential file of each provider given by `credentials`.
pub fn build_clouds_with(
    config: &Config,
    credentials: impl Fn(ProviderKind) -> Option<PathBuf>,
) -> Result<Clouds, BuildError> {
    build(config, credentials, false)
}

/// What every provider's client is built with: the task-aware provisioning deadline
/// (`provisionTimeout` unless the task's log grew within the last
/// `provisionProgressWindow`, at most `provisionTimeoutMax`).
pub fn build_options(config: &Config, read_only: bool) -> BuildOptions {
    BuildOptions {
        provision_timeout: config.provision_timeout,
        provision_deadline_max: config.provision_deadline_max(),
        provision_stall: config.provision_stall(),
        read_only,
        identity: Default::default(),
    }
}

fn build(
    config: &Config,
    credentials: impl Fn(ProviderKind) -> Option<PathBuf>,
    read_only: bool,
) -> Result<Clouds, BuildError> {
    let mut clouds = Clouds::new();
    // The providers learn the cluster's identity when the loop has read it.
    let options = BuildOptions {
        identity: clouds.identity().clone(),
        ..build_options(config, read_only)
    };
    for &kind in ProviderKind::ALL {
        let groups: Vec<(&str, &ProviderBlocks)> = config
            .node_groups
            .iter()
            .filter(|g| g.provider == kind)
            .map(|g| (g.name.as_str(), &g.settings))
            .collect();
        if groups.is_empty() {
            continue;
        }
        let path = credentials(kind).ok_or_else(|| BuildError::MissingEnv {
            provider: kind.as_str(),
            groups: groups
                .iter()
                .map(|(name, _)| *name)
                .collect::<Vec<_>>()
                .join(", "),
            env: kind.credentials_env(),
        })?;
        let provider = build_provider(kind, &path, &groups, &options)?;
        for (name, _) in groups {
            clouds.add_group(name, provider.clone());
        }
    }
    Ok(clouds)
}

/// Reads each credentials file the config's providers need, without the network (what
/// `check --offline` can tell of them): a line per provider, or a problem naming the
/// file and the key. A provider whose variable is unset is reported, not refused: the
/// file may only exist where nodewright runs.
pub fn check_credentials(
    config: &Config,
    credentials: impl Fn(ProviderKind) -> Option<PathBuf>,
) -> Vec<Result<String, String>> {
    let mut out = Vec::new();
    for &kind in ProviderKind::ALL {
        if !config.node_groups.iter().any(|g| g.provider == kind) {
            continue;
        }
        let Some(path) = credentials(kind) else {
            out.push(Ok(format!(
                "{}: {} not set; credentials not checked",
                kind.as_str(),
                kind.credentials_env()
            )));
            continue;
        };
        let read = (kind.row().read_credentials)(&path);
        out.push(
            read.map(|()| format!("{}: credentials {} read", kind.as_str(), path.display()))
                .map_err(|e| format!("{} ({}): {e}", kind.credentials_env(), kind.as_str())),
        );
    }
    out
}

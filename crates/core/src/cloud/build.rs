//! Builds the providers a config needs from the credential files the environment names,
//! each through its row of [`super::registry`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::in_use::Clouds;
use super::proxmox::TaskDeadline;
use super::registry::{with_provider_rows, Block};
use super::CloudProvider;
use crate::config::{Config, NodeGroupConfig, ProviderKind};

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
/// from the environment variables [`ProviderKind::credentials_env`] names.
pub fn build_clouds(config: &Config) -> Result<Clouds, BuildError> {
    build_clouds_with(config, from_env)
}

/// As [`build_clouds`], for a process that only reads (`plan`, `run --dry-run`): reading a
/// cloud then never changes it (see the Proxmox provider's `read_only`).
pub fn build_clouds_read_only(config: &Config) -> Result<Clouds, BuildError> {
    build(config, from_env, true)
}

fn from_env(kind: ProviderKind) -> Option<PathBuf> {
    std::env::var_os(kind.credentials_env()).map(PathBuf::from)
}

/// As [`build_clouds`], with the credential file of each provider given by `credentials`.
pub fn build_clouds_with(
    config: &Config,
    credentials: impl Fn(ProviderKind) -> Option<PathBuf>,
) -> Result<Clouds, BuildError> {
    build(config, credentials, false)
}

/// The settings of `groups` (one provider's) by group name.
fn settings_of<T: Block + Clone>(groups: &[&NodeGroupConfig]) -> BTreeMap<String, T> {
    groups
        .iter()
        .filter_map(|g| g.settings.of::<T>().map(|s| (g.name.clone(), s.clone())))
        .collect()
}

/// The client half of the provider table (see [`super::registry`]): each row's
/// `build` from its folder, given its groups' settings.
macro_rules! client_builders {
    ($(
        $kind:ident = $name:literal {
            folder: $module:ident,
            settings: $settings:ident,
            $($rest:tt)*
        }
    )*) => {
        /// Builds the client of provider `kind` for `groups` (its groups, blocks validated)
        /// from the credentials file at `path`; `read_only` for a process that only reads.
        fn build_one(
            kind: ProviderKind,
            config: &Config,
            path: &Path,
            groups: &[&NodeGroupConfig],
            read_only: bool,
        ) -> Result<Arc<dyn CloudProvider>, BuildError> {
            match kind {
                $( ProviderKind::$kind => super::$module::build(
                    config,
                    path,
                    settings_of::<super::$module::settings::$settings>(groups),
                    read_only,
                ), )*
            }
        }
    };
}

with_provider_rows!(client_builders);

fn build(
    config: &Config,
    credentials: impl Fn(ProviderKind) -> Option<PathBuf>,
    read_only: bool,
) -> Result<Clouds, BuildError> {
    let mut clouds = Clouds::new();
    for &kind in ProviderKind::ALL {
        let groups: Vec<&NodeGroupConfig> = config
            .node_groups
            .iter()
            .filter(|g| g.provider == kind)
            .collect();
        if groups.is_empty() {
            continue;
        }
        let path = credentials(kind).ok_or_else(|| BuildError::MissingEnv {
            provider: kind.as_str(),
            groups: groups
                .iter()
                .map(|g| g.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            env: kind.credentials_env(),
        })?;
        let provider = build_one(kind, config, &path, &groups, read_only)?;
        for g in groups {
            clouds.add_group(&g.name, provider.clone());
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

/// Environment variable lookup of the credentials files, as `run` does it.
pub fn credentials_from_env(kind: ProviderKind) -> Option<PathBuf> {
    from_env(kind)
}

/// The clone's task-aware deadline: `provisionTimeout` unless its log grew within the
/// last `provisionProgressWindow`, at most `provisionTimeoutMax`.
pub fn clone_deadline(config: &Config) -> TaskDeadline {
    TaskDeadline {
        nominal: config.provision_timeout,
        max: config.provision_deadline_max(),
        stall: config.provision_stall(),
    }
}

//! The client half of the provider table (see [`super::registry`]): builds one
//! provider's client from its credentials file and its groups' settings, through its
//! row. Which providers a config needs, and where their credentials are, is the loop's
//! to say (`crate::run::clouds`), so this module reads no config.

use std::path::Path;
use std::sync::Arc;

use super::registry::{with_provider_rows, Block, ProviderBlocks, ProviderKind};
use super::{BuildError, BuildOptions, CloudProvider};

/// The settings of type `T` of each group (name, settings blocks) that has them.
fn settings_of<T: Block + Clone>(
    groups: &[(&str, &ProviderBlocks)],
) -> std::collections::BTreeMap<String, T> {
    groups
        .iter()
        .filter_map(|(name, blocks)| blocks.of::<T>().map(|s| (name.to_string(), s.clone())))
        .collect()
}

/// Each row's `build`, from its folder, given its groups' settings.
macro_rules! client_builders {
    ($(
        $kind:ident = $name:literal {
            folder: $module:ident,
            settings: $settings:ident,
            $($rest:tt)*
        }
    )*) => {
        /// Builds the client of provider `kind` for `groups` (its groups by name, their
        /// blocks validated) from the credentials file at `path`.
        pub fn build_provider(
            kind: ProviderKind,
            path: &Path,
            groups: &[(&str, &ProviderBlocks)],
            options: &BuildOptions,
        ) -> Result<Arc<dyn CloudProvider>, BuildError> {
            match kind {
                $( ProviderKind::$kind => super::$module::build(
                    path,
                    settings_of::<super::$module::settings::$settings>(groups),
                    options,
                ), )*
            }
        }
    };
}

with_provider_rows!(client_builders);

//! The providers, one row each. A provider is its folder under `cloud/` (its settings
//! module, client, [`super::CloudProvider`] impl; its simulator under `crates/sim`) and one row
//! of the `providers!` table below: config reads the row to parse, validate and hash a
//! group's `<name>:` block, `cloud::build` (the client half, from the same rows) and
//! `nodewright check` to build the client from its credentials file, the what-if world for the shape its settings imply, and
//! `tests/docs.rs` holds README's configuration table to it. See
//! `docs/adding-a-provider.md`.

use std::fmt;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::model::GroupShape;

/// What a group's block tells validation about the group around it.
#[derive(Debug, Clone, Copy)]
pub struct GroupContext<'a> {
    pub cluster: &'a str,
    pub group: &'a str,
    pub max_size: u32,
}

/// What a provider's settings module implements for its `<name>:` block of a node group.
pub trait Settings: fmt::Debug + Send + Sync {
    /// Problems as (path under the group, such as `proxmox.cores`; what is wrong and what
    /// is expected). Empty: fine.
    fn validate(&self, group: &GroupContext<'_>) -> Vec<(String, String)>;
    /// The fields that make a VM, in a fixed order, keyed with the provider's name
    /// (`proxmox.cores`), each left out at its default (see the config's `hash` module).
    fn hash_fields(&self) -> Vec<(&'static str, serde_json::Value)>;
    /// CPU, memory, instance type and zone of one new VM as far as the settings alone tell
    /// (no cloud asked): the what-if world's shape.
    fn offline_shape(&self) -> GroupShape;
    /// Why [`Self::offline_shape`] has no CPU or memory, for the what-if world's error.
    fn unknown_shape(&self) -> String;
    /// The setting that makes the VM run the rendered user data as a shell script, if set.
    fn runs_user_data_as_script(&self) -> Option<&'static str> {
        None
    }
    /// The sizes a scale-up may choose among, by name, the default first (see
    /// [`crate::model::sizes`]); empty or one: the group has one size.
    fn sizes(&self) -> Vec<String> {
        Vec::new()
    }
    /// These settings with only size `size`, as a group of that one size would have
    /// written them (what a VM of that size is made from, and hashed as); `None` when
    /// `size` is not one of [`Self::sizes`].
    fn with_size(&self, _size: &str) -> Option<ProviderSettings> {
        None
    }
}

/// One registered provider: what config, `cloud::build`, `check` and the docs read.
pub struct Provider {
    pub kind: ProviderKind,
    /// `provider:` value, settings block key, [`crate::cloud::Server::provider`].
    pub name: &'static str,
    /// The environment variable naming its credentials file.
    pub credentials_env: &'static str,
    /// Its line of README's environment table: what the credentials file holds.
    pub credentials_docs: &'static str,
    /// Its line of README's configuration table: what its `<name>:` block holds.
    pub settings_docs: &'static str,
    /// Whether it keeps warm pools (stop, start and the warm mark).
    pub warm_pools: bool,
    /// Reads the credentials file without the network (`check --offline`).
    pub read_credentials: fn(&Path) -> Result<(), String>,
}

/// A settings type of the table, got back out of [`ProviderSettings`].
pub trait Block: Settings + Sized {
    fn of(s: &ProviderSettings) -> Option<&Self>;
    fn of_mut(s: &mut ProviderSettings) -> Option<&mut Self>;
}

/// The settings half of the table. Each row: variant, name, settings type and folder,
/// credentials variable, README lines, warm pools.
macro_rules! providers {
    ($(
        $kind:ident = $name:literal {
            folder: $module:ident,
            settings: $settings:ident,
            credentials_env: $env:literal,
            credentials_docs: $env_docs:literal,
            settings_docs: $docs:literal,
            warm_pools: $warm:literal $(,)?
        }
    )*) => {
        /// Which cloud a node group lives on.
        #[derive(
            Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, Serialize,
        )]
        pub enum ProviderKind {
            $( #[serde(rename = $name)] $kind, )*
        }

        /// Every provider, in table order.
        pub static PROVIDERS: &[Provider] = &[$(
            Provider {
                kind: ProviderKind::$kind,
                name: $name,
                credentials_env: $env,
                credentials_docs: $env_docs,
                settings_docs: $docs,
                warm_pools: $warm,
                read_credentials: super::$module::read_credentials,
            },
        )*];

        impl ProviderKind {
            /// Every provider, in table order.
            pub const ALL: &'static [ProviderKind] = &[$(ProviderKind::$kind),*];
        }

        /// One group's provider block, of any provider.
        #[derive(Debug, Clone, PartialEq)]
        pub enum ProviderSettings {
            $( $kind(super::$module::settings::$settings), )*
        }

        impl ProviderSettings {
            pub fn kind(&self) -> ProviderKind {
                match self {
                    $( ProviderSettings::$kind(_) => ProviderKind::$kind, )*
                }
            }

            /// What every provider's settings implement.
            pub fn as_settings(&self) -> &dyn Settings {
                match self {
                    $( ProviderSettings::$kind(s) => s, )*
                }
            }

            /// Reads the block of `kind` as the next value of `map`.
            pub(crate) fn next_value<'de, A: serde::de::MapAccess<'de>>(
                kind: ProviderKind,
                map: &mut A,
            ) -> Result<ProviderSettings, A::Error> {
                match kind {
                    $( ProviderKind::$kind => map.next_value().map(ProviderSettings::$kind), )*
                }
            }
        }

        $(
            impl Block for super::$module::settings::$settings {
                fn of(s: &ProviderSettings) -> Option<&Self> {
                    #[allow(unreachable_patterns)]
                    match s {
                        ProviderSettings::$kind(x) => Some(x),
                        _ => None,
                    }
                }
                fn of_mut(s: &mut ProviderSettings) -> Option<&mut Self> {
                    #[allow(unreachable_patterns)]
                    match s {
                        ProviderSettings::$kind(x) => Some(x),
                        _ => None,
                    }
                }
            }
        )*
    };
}

/// The rows, once: `with_provider_rows!(m)` hands them to macro `m`. The settings half is
/// made here (config reads it); the client half, which takes the config, in
/// [`super::build`], so this table imports no config and config no client.
macro_rules! with_provider_rows {
    ($then:ident) => {
        $then! {
            Openstack = "openstack" {
                folder: openstack,
                settings: OpenStackSettings,
                credentials_env: "OPENSTACK_CREDENTIALS_FILE",
                credentials_docs: "OpenStack credentials YAML (`OS_AUTH_URL`, `OS_USERNAME`, `OS_PASSWORD`, `OS_USER_DOMAIN_NAME`, `OS_TENANT_ID`/`OS_TENANT_NAME` or `OS_PROJECT_*`, `OS_REGION`; or `OS_APPLICATION_CREDENTIAL_ID`/`_SECRET`)",
                settings_docs: "`flavor` (name or id, or a list a scale-up picks the least wasting of), `image` (name or id), `network`, `keyName`, `securityGroups`, `availabilityZone`, `serverGroup` (name or id; scheduler hint)",
                warm_pools: true,
            }
            Proxmox = "proxmox" {
                folder: proxmox,
                settings: ProxmoxSettings,
                credentials_env: "PROXMOX_CREDENTIALS_FILE",
                credentials_docs: "Proxmox VE credentials YAML (API token or user/password, CA file or certificate fingerprint)",
                settings_docs: "template VM (id, name or `{tag: ...}`, one copy per host), hosts, clone mode, cores, memory, cloud-init and IP pool, join mode and how the user data gets there (a seed ISO, `seedStorage`, or your `cicustom` snippets): see [docs/proxmox.md](docs/proxmox.md)",
                warm_pools: true,
            }
            Kamatera = "kamatera" {
                folder: kamatera,
                settings: KamateraSettings,
                credentials_env: "KAMATERA_CREDENTIALS_FILE",
                credentials_docs: "Kamatera credentials YAML (`clientId`, `secret`)",
                settings_docs: "datacenter, image, cpu, ram, disks, networks, billing, tags: see [docs/kamatera.md](docs/kamatera.md)",
                warm_pools: true,
            }
        }
    };
}
pub(crate) use with_provider_rows;

with_provider_rows!(providers);

impl ProviderKind {
    /// This provider's row.
    pub fn row(self) -> &'static Provider {
        // `ALL` and `PROVIDERS` come from the same rows in the same order.
        &PROVIDERS[self as usize]
    }

    /// The provider named `name` (a `provider:` value or a block key).
    pub fn from_name(name: &str) -> Option<ProviderKind> {
        PROVIDERS.iter().find(|p| p.name == name).map(|p| p.kind)
    }

    pub fn as_str(self) -> &'static str {
        self.row().name
    }

    /// The environment variable naming this provider's credentials file.
    pub fn credentials_env(self) -> &'static str {
        self.row().credentials_env
    }
}

/// The provider blocks a group was written with (`openstack:`, `proxmox:`, ...), in table
/// order, at most one per provider: validation leaves exactly the one of its `provider`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ProviderBlocks(Vec<ProviderSettings>);

impl ProviderBlocks {
    /// Adds `block`; `false` (and nothing added) when one of its provider is there already.
    pub fn insert(&mut self, block: ProviderSettings) -> bool {
        let kind = block.kind();
        match self.0.binary_search_by_key(&kind, ProviderSettings::kind) {
            Ok(_) => false,
            Err(at) => {
                self.0.insert(at, block);
                true
            }
        }
    }

    /// The block of `kind`, if written.
    pub fn get(&self, kind: ProviderKind) -> Option<&ProviderSettings> {
        self.0.iter().find(|b| b.kind() == kind)
    }

    /// The block of settings type `T`, if written.
    pub fn of<T: Block>(&self) -> Option<&T> {
        self.0.iter().find_map(T::of)
    }

    /// The block of settings type `T`, if written, to change.
    pub fn of_mut<T: Block>(&mut self) -> Option<&mut T> {
        self.0.iter_mut().find_map(T::of_mut)
    }

    /// These blocks with `block` in place of the one of its provider.
    pub fn replaced(&self, block: ProviderSettings) -> ProviderBlocks {
        let mut out = self.clone();
        out.0.retain(|b| b.kind() != block.kind());
        out.insert(block);
        out
    }

    /// Every block written, in table order.
    pub fn iter(&self) -> impl Iterator<Item = &ProviderSettings> {
        self.0.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A row's name is its folder's provider name, the one servers and errors carry.
    #[test]
    fn rows_and_kinds_agree() {
        for (i, p) in PROVIDERS.iter().enumerate() {
            assert_eq!(p.kind as usize, i, "{}", p.name);
            assert_eq!(ProviderKind::ALL[i], p.kind);
            assert_eq!(ProviderKind::from_name(p.name), Some(p.kind));
        }
        assert_eq!(
            ProviderKind::Openstack.as_str(),
            crate::cloud::openstack::PROVIDER
        );
        assert_eq!(
            ProviderKind::Proxmox.as_str(),
            crate::cloud::proxmox::PROVIDER
        );
        assert_eq!(
            ProviderKind::Kamatera.as_str(),
            crate::cloud::kamatera::PROVIDER
        );
    }
}

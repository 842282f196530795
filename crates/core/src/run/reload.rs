//! A config reload in `run`: the new config takes over, the loop's memory (backoffs, last
//! listings, learned allocatables, disruption times) stays, and each provider whose
//! inputs did not change is kept as it is, with its work in flight (a guest-agent join
//! running, a clone followed). Only a provider whose groups, their settings, its
//! credentials file or the build options changed is built again: building it anew
//! forgets what it was doing, and the VM it was joining would be joined twice.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use super::clouds::build_options;
use super::Reconciler;
use crate::act::Clouds;
use crate::cloud::registry::ProviderSettings;
use crate::cloud::BuildOptions;
use crate::config::{Config, ProviderKind};

/// What one provider is built from. The credentials file is kept as its path and the
/// SHA-256 of its bytes, never the secrets themselves.
#[derive(Clone, PartialEq)]
struct Inputs {
    groups: Vec<(String, Option<ProviderSettings>)>,
    credentials: Option<(PathBuf, Option<Vec<u8>>)>,
    options: Knobs,
}

/// The plain settings of [`BuildOptions`]: the cluster's identity is left out, as it is
/// learnt from the cluster (the same after a reload), not from the config.
#[derive(Clone, PartialEq)]
struct Knobs {
    provision_timeout: std::time::Duration,
    provision_deadline_max: std::time::Duration,
    provision_stall: std::time::Duration,
    read_only: bool,
}

impl From<BuildOptions> for Knobs {
    fn from(o: BuildOptions) -> Self {
        Knobs {
            provision_timeout: o.provision_timeout,
            provision_deadline_max: o.provision_deadline_max,
            provision_stall: o.provision_stall,
            read_only: o.read_only,
        }
    }
}

/// What each provider of a config is built from, by provider.
#[derive(Clone, Default, PartialEq)]
pub struct ProviderInputs(BTreeMap<ProviderKind, Inputs>);

impl ProviderInputs {
    /// What each provider of `config` is built from now, its credentials file (named by
    /// `credentials`) read as it is now; `read_only` as the providers are built.
    pub fn of(
        config: &Config,
        credentials: impl Fn(ProviderKind) -> Option<PathBuf>,
        read_only: bool,
    ) -> ProviderInputs {
        let options = Knobs::from(build_options(config, read_only));
        let mut out = BTreeMap::new();
        for &kind in ProviderKind::ALL {
            let groups: Vec<(String, Option<ProviderSettings>)> = config
                .node_groups
                .iter()
                .filter(|g| g.provider == kind)
                .map(|g| (g.name.clone(), g.settings.get(kind).cloned()))
                .collect();
            if groups.is_empty() {
                continue;
            }
            let credentials = credentials(kind).map(|path| {
                let digest = std::fs::read(&path).ok().map(|bytes| {
                    ring::digest::digest(&ring::digest::SHA256, &bytes)
                        .as_ref()
                        .to_vec()
                });
                (path, digest)
            });
            out.insert(
                kind,
                Inputs {
                    groups,
                    credentials,
                    options: options.clone(),
                },
            );
        }
        ProviderInputs(out)
    }
}

impl Reconciler {
    /// Puts `new` in force after a reload. The loop's memory stays, but for the create
    /// backoff of a group whose settings hash changed or that is gone (what failed may be
    /// what was fixed). Each provider whose inputs in `now` are those in `built` stays,
    /// with its work in flight; the others are built by `build`, handed a copy of `new`
    /// with only their groups. On success `built` becomes `now` and the providers built
    /// again are returned; on failure nothing changes.
    pub fn reload<E>(
        &mut self,
        new: Config,
        built: &mut ProviderInputs,
        now: ProviderInputs,
        build: impl FnOnce(&Config) -> Result<Clouds, E>,
    ) -> Result<Vec<ProviderKind>, E> {
        let kept: BTreeSet<ProviderKind> = now
            .0
            .iter()
            .filter(|(kind, inputs)| built.0.get(*kind) == Some(*inputs))
            .filter(|(_, inputs)| {
                inputs
                    .groups
                    .iter()
                    .all(|(g, _)| self.clouds.for_group(g).is_ok())
            })
            .map(|(kind, _)| *kind)
            .collect();
        let rebuilt: Vec<ProviderKind> = now
            .0
            .keys()
            .filter(|k| !kept.contains(k))
            .copied()
            .collect();
        let mut to_build = new.clone();
        to_build.node_groups.retain(|g| !kept.contains(&g.provider));
        let mut clouds = if to_build.node_groups.is_empty() {
            Clouds::new()
        } else {
            build(&to_build)?
        };
        for g in new
            .node_groups
            .iter()
            .filter(|g| kept.contains(&g.provider))
        {
            if let Ok(p) = self.clouds.for_group(&g.name) {
                clouds.add_group(&g.name, p.clone());
            }
        }
        let clouds = clouds.with_observe_deadline(self.clouds.observe_deadline());
        for old in &self.config.node_groups {
            let same = new
                .node_groups
                .iter()
                .any(|g| g.name == old.name && g.settings_hash == old.settings_hash);
            if !same {
                self.memory.forget_group(&old.name);
            }
        }
        self.clouds = clouds;
        self.config = std::sync::Arc::new(new);
        *built = now;
        Ok(rebuilt)
    }
}

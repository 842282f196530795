//! The seed of a `join: cloudInit` VM (see [`crate::cloud::proxmox::seed`]) through its
//! life: uploaded and attached before the VM starts, removed once its node joined (or the
//! VM is destroyed), and seeds left behind by a process gone swept. Whether a VM carries
//! a seed is read back from its config every time; nothing is remembered.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant, SystemTime};

use serde::Deserialize;
use serde_json::Value;

use super::ProxmoxProvider;
use crate::cloud::proxmox::allocate::{list_vms, vm_config, vm_path, VmResource};
use crate::cloud::proxmox::client::{params, Upload};
use crate::cloud::proxmox::hosts::Listing;
use crate::cloud::proxmox::seed::{
    self, attached, attached_seeds, cloudinit_drive, drive_value, free_slot, Maker,
};
use crate::cloud::proxmox::tags::ownership;
use crate::cloud::proxmox::{other, seg, JoinMode, ProxmoxSettings};
use crate::cloud::CloudError;
use crate::model::{Stray, StrayKind};

/// How a VM's user data reaches its guest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// A seed ISO uploaded by nodewright.
    Seed,
    /// The user's snippets: the group's `cicustom`, or the template's own.
    Cicustom(String),
    /// The join script, through the QEMU guest agent.
    GuestAgent,
}

/// How the user data of a VM of a group with `settings` is delivered, given the VM's (or
/// its template's) config.
pub fn delivery(settings: &ProxmoxSettings, config: &BTreeMap<String, String>) -> Delivery {
    if settings.join == JoinMode::GuestAgent {
        return Delivery::GuestAgent;
    }
    match settings.cicustom.as_ref().or(config.get("cicustom")) {
        Some(c) => Delivery::Cicustom(c.clone()),
        None => Delivery::Seed,
    }
}

#[derive(Deserialize)]
struct StorageEntry {
    storage: String,
    #[serde(default)]
    content: String,
    #[serde(default)]
    shared: Option<Value>,
    #[serde(default)]
    active: Option<Value>,
}

fn flag(v: &Option<Value>) -> Option<bool> {
    v.as_ref().map(|v| match v {
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_u64() != Some(0),
        Value::String(s) => s != "0",
        _ => false,
    })
}

#[derive(Deserialize)]
struct ContentEntry {
    volid: String,
    #[serde(default)]
    ctime: Option<u64>,
}

/// The storages of `node` that accept ISO images (`GET /nodes/{node}/storage?content=iso`),
/// as listed: (name, shared). Inactive ones are left out.
pub(crate) async fn iso_storages(
    api: &crate::cloud::proxmox::client::Api,
    node: &str,
) -> Result<Vec<(String, bool)>, CloudError> {
    let call = format!("/nodes/{}/storage", seg(node));
    let data = api
        .get(
            &call,
            &params([("content", "iso".into()), ("enabled", "1".into())]),
        )
        .await?;
    let list: Vec<StorageEntry> = serde_json::from_value(data)
        .map_err(|e| other(format!("GET {call}: unexpected answer: {e}")))?;
    Ok(list
        .into_iter()
        .filter(|s| s.content.split(',').any(|c| c.trim() == "iso"))
        .filter(|s| flag(&s.active) != Some(false))
        .map(|s| {
            let shared = flag(&s.shared) == Some(true);
            (s.storage, shared)
        })
        .collect())
}

/// The storage a seed for a VM on `node` goes to: the group's `seedStorage` when it
/// accepts ISO images there, else the first that does.
pub(crate) async fn seed_storage(
    api: &crate::cloud::proxmox::client::Api,
    node: &str,
    settings: &ProxmoxSettings,
) -> Result<String, CloudError> {
    let storages = iso_storages(api, node).await?;
    match &settings.seed_storage {
        Some(want) if storages.iter().any(|(s, _)| s == want) => Ok(want.clone()),
        Some(want) => Err(other(format!(
            "proxmox.seedStorage: storage '{want}' on host {node} is not active, does not accept ISO images (content `iso`), or is hidden from the token (it may lack Datastore.Audit on /storage/{want}); enable `ISO image` content on it or name another ({})",
            list_or_none(&storages)
        ))),
        None => storages.into_iter().next().map(|(s, _)| s).ok_or_else(|| {
            other(format!(
                "no ISO storage visible on host {node} for the cloud-init seed (content `iso`): enable `ISO image` content on one, set proxmox.seedStorage, or use proxmox.cicustom with your own snippet; the list shows only storages the token may see, so it may lack Datastore.Audit on /storage/<storage>"
            ))
        }),
    }
}

fn list_or_none(storages: &[(String, bool)]) -> String {
    if storages.is_empty() {
        "none on that host does".into()
    } else {
        let names: Vec<&str> = storages.iter().map(|(s, _)| s.as_str()).collect();
        format!("these do: {}", names.join(", "))
    }
}

/// The storage of a volume id (`local:iso/x.iso` → `local`).
fn storage_of(volume: &str) -> &str {
    volume.split(':').next().unwrap_or(volume)
}

/// A seed volume attached to a VM of this cluster, read before the VM is destroyed.
#[derive(Debug, Clone)]
pub(super) struct SeedVolume {
    volume: String,
    maker: Maker,
}

impl ProxmoxProvider {
    /// Uploads VM `vmid`'s seed and attaches it (removing Proxmox's own cloud-init drive,
    /// also labelled `cidata`), before the VM starts. Does nothing unless the VM's user
    /// data goes by seed (see [`delivery`]). The user data is never logged.
    pub(super) async fn attach_seed(
        &self,
        node: &str,
        vmid: u32,
        cluster: &str,
        name: &str,
        settings: &ProxmoxSettings,
        user_data: &str,
    ) -> Result<(), CloudError> {
        let api = &self.inner.api;
        let config = vm_config(api, node, vmid).await?;
        if delivery(settings, &config) != Delivery::Seed {
            return Ok(());
        }
        let identity = self.identity().ok_or_else(|| {
            other(format!(
                "VM {vmid}: the cloud-init seed is named with the cluster's identity (the kube-system namespace's UID), which could not be read yet; grant get on namespaces/kube-system (deploy/kustomize/base/rbac.yaml), or use proxmox.cicustom"
            ))
        })?;
        let storage = seed_storage(api, node, settings).await?;
        let files = seed::seed_files(name, vmid, user_data, &settings.ssh_keys, &config);
        let bytes = seed::build_iso(&files).map_err(other)?;
        let file = seed::file_name(cluster, identity, vmid);
        let call = format!("/nodes/{}/storage/{}/upload", seg(node), seg(&storage));
        let data = api
            .upload(
                &call,
                &params([("content", "iso".into())]),
                &Upload {
                    file_name: file.clone(),
                    bytes,
                },
            )
            .await?;
        self.await_upid(&format!("POST {call}"), &data).await?;
        let volume = seed::volume_id(&storage, &file);
        let result = self.attach(node, vmid, cluster, &config, &volume).await;
        if result.is_err() {
            // Not attached: nothing would find it but the sweep, ten minutes on.
            let made = SeedVolume {
                volume,
                maker: Maker::This,
            };
            self.forget_seed(node, Some(made)).await;
        }
        result
    }

    /// The cluster's identity, once the loop has read it.
    fn identity(&self) -> Option<&str> {
        self.inner.options.identity.get()
    }

    /// The config call attaching `volume` in place of Proxmox's cloud-init drive.
    async fn attach(
        &self,
        node: &str,
        vmid: u32,
        cluster: &str,
        config: &BTreeMap<String, String>,
        volume: &str,
    ) -> Result<(), CloudError> {
        let api = &self.inner.api;
        let slot = match attached(config, cluster, self.identity(), vmid) {
            Some(a) => a.slot,
            None => free_slot(config)
                .ok_or_else(|| {
                    other(format!(
                        "VM {vmid} has no free IDE or SATA slot for the cloud-init seed CD-ROM"
                    ))
                })?
                .to_string(),
        };
        let mut p = params([(slot.as_str(), drive_value(volume))]);
        if let Some(ci) = cloudinit_drive(config) {
            p.push(("delete".into(), ci));
        }
        let call = format!("{}/config", vm_path(node, vmid));
        let data = api.post(&call, &p).await?;
        self.await_upid(&format!("POST {call}"), &data).await?;
        tracing::info!(vmid, host = %node, %volume, %slot, "cloud-init seed uploaded and attached");
        Ok(())
    }

    /// Ejects VM `vmid`'s seed (if attached) and deletes its volume (one named as before
    /// identities only where it is ours, see [`seed::legacy_is_ours`]); true when there
    /// was one. `config` is the VM's, read just before.
    pub(super) async fn remove_seed(
        &self,
        node: &str,
        vmid: u32,
        cluster: &str,
        config: &BTreeMap<String, String>,
    ) -> Result<bool, CloudError> {
        let Some(seed) = attached(config, cluster, self.identity(), vmid) else {
            return Ok(false);
        };
        let call = format!("{}/config", vm_path(node, vmid));
        let data = self
            .inner
            .api
            .post(&call, &params([(seed.slot.as_str(), seed::EJECTED.into())]))
            .await?;
        self.await_upid(&format!("POST {call}"), &data).await?;
        let volume = SeedVolume {
            volume: seed.volume,
            maker: seed.name.maker,
        };
        self.delete_seed_volume(node, &volume).await?;
        Ok(true)
    }

    /// Deletes a seed volume of this cluster; one named as before identities is left,
    /// and reported, on a storage other Proxmox clusters may share (see
    /// [`seed::legacy_is_ours`]).
    async fn delete_seed_volume(&self, node: &str, seed: &SeedVolume) -> Result<bool, CloudError> {
        if seed.maker == Maker::Unnamed {
            let storage = storage_of(&seed.volume);
            let shared = iso_storages(&self.inner.api, node)
                .await?
                .into_iter()
                .find(|(s, _)| s == storage)
                .is_none_or(|(_, shared)| shared);
            if !seed::legacy_is_ours(shared) {
                self.report_unnamed(&seed.volume);
                return Ok(false);
            }
        }
        self.delete_volume(node, &seed.volume).await.map(|()| true)
    }

    /// A seed named as before identities on a shared storage: never removed here.
    fn report_unnamed(&self, volume: &str) {
        let note = format!(
            "the cloud-init seed {volume} is named as before nodewright named seeds with the cluster's identity, on a shared storage: another cluster of the same name may have written it, so it is left; delete it by hand once no VM of a cluster of that name is starting from it (it may hold a join token)"
        );
        tracing::warn!("proxmox: {note}");
        self.inner
            .found
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(note);
    }

    /// `DELETE /nodes/{node}/storage/{storage}/content/{volume}`; gone already is fine.
    pub(super) async fn delete_volume(&self, node: &str, volume: &str) -> Result<(), CloudError> {
        let call = format!(
            "/nodes/{}/storage/{}/content/{}",
            seg(node),
            seg(storage_of(volume)),
            seg(volume)
        );
        match self.inner.api.delete(&call, &[]).await {
            Ok(data) => self.await_upid(&format!("DELETE {call}"), &data).await,
            Err(CloudError::Api { message, .. })
                if message.contains("does not exist") || message.contains("No such file") =>
            {
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// The seed volume of this cluster attached to VM `vmid`, read from its config now
    /// (`None` when it has none or cannot be read).
    pub(super) async fn seed_volume(
        &self,
        node: &str,
        vmid: u32,
        cluster: &str,
    ) -> Option<SeedVolume> {
        let config = vm_config(&self.inner.api, node, vmid).await.ok()?;
        attached(&config, cluster, self.identity(), vmid).map(|a| SeedVolume {
            volume: a.volume,
            maker: a.name.maker,
        })
    }

    /// Deletes a destroyed VM's seed volume (read before the destroy); a failure is only
    /// logged: the sweep removes it later.
    pub(super) async fn forget_seed(&self, node: &str, seed: Option<SeedVolume>) {
        let Some(seed) = seed else { return };
        let volume = &seed.volume;
        match self.delete_seed_volume(node, &seed).await {
            Ok(true) => tracing::info!(%volume, "cloud-init seed of a destroyed VM removed"),
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(%volume, error = %e, "could not remove the cloud-init seed of a destroyed VM; the sweep removes it later")
            }
        }
    }

    /// The nodes `names` joined: their VMs' seeds (join token inside) are removed.
    pub(super) async fn seeds_joined(
        &self,
        cluster: &str,
        names: &[String],
    ) -> Result<(), CloudError> {
        let api = &self.inner.api;
        let vms = list_vms(api).await?;
        let mut first_error = None;
        for vm in vms.iter().filter(|v| {
            !v.template
                && v.name.as_ref().is_some_and(|n| names.contains(n))
                && ownership(v.tags()).cluster.as_deref() == Some(cluster)
        }) {
            let result = match vm_config(api, &vm.node, vm.vmid).await {
                Ok(config) => self.remove_seed(&vm.node, vm.vmid, cluster, &config).await,
                Err(e) => Err(e),
            };
            match result {
                Ok(true) => {
                    tracing::info!(vmid = vm.vmid, host = %vm.node, "node joined; its cloud-init seed was removed")
                }
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(vmid = vm.vmid, error = %e, "could not remove the cloud-init seed of a joined node; it is removed with its VM");
                    // A refusal (a privilege missing) stays until someone grants it:
                    // say so in the next plan's reasons too, not only in the log.
                    if matches!(e, CloudError::Api { status: 403, .. }) {
                        self.inner
                            .found
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .push(format!(
                                "the cloud-init seed of VM {} (join token inside) stays until the VM is destroyed: {e}",
                                vm.vmid
                            ));
                    }
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// A person's copies of this cluster's VMs (`strays` copied, see
    /// [`crate::cloud::proxmox::tags::Ownership::copy_of`]) carry the seed of the VM they
    /// were copied from while it was still joining: started, a copy would boot with that
    /// VM's user data and join as its node. The seed is ejected from the copy (never
    /// deleted: the VM copied may still need it) and the copy reported; nothing else of
    /// it is changed. Read-only, it is only reported.
    pub(super) async fn detach_copied_seeds(
        &self,
        cluster: &str,
        vms: &[VmResource],
        strays: &[Stray],
    ) {
        let api = &self.inner.api;
        for stray in strays
            .iter()
            .filter(|s| matches!(s.kind, StrayKind::Copied { .. }))
        {
            let Some(vm) = vms
                .iter()
                .find(|v| !v.template && v.vmid.to_string() == stray.id)
            else {
                continue;
            };
            // Still being copied: its config is not written yet; the next cycle.
            if vm.lock.is_some() {
                continue;
            }
            let config = match vm_config(api, &vm.node, vm.vmid).await {
                Ok(c) => c,
                Err(e) => {
                    tracing::debug!(vmid = vm.vmid, error = %e, "could not read a copied VM's config for a seed");
                    continue;
                }
            };
            let seeds = attached_seeds(&config, cluster, self.identity());
            for seed in seeds.into_iter().filter(|a| a.name.vmid != vm.vmid) {
                let (copy, name, of, volume) = (vm.vmid, &stray.name, seed.name.vmid, &seed.volume);
                let note = if self.inner.options.read_only {
                    format!("VM {copy} ('{name}') is a copy of VM {of} and carries its cloud-init seed {volume} (VM {of}'s user data, join token inside): started, it would boot as VM {of}'s node; `nodewright run` ejects it")
                } else {
                    let call = format!("{}/config", vm_path(&vm.node, copy));
                    let ejected = match api
                        .post(&call, &params([(seed.slot.as_str(), seed::EJECTED.into())]))
                        .await
                    {
                        Ok(data) => self.await_upid(&format!("POST {call}"), &data).await,
                        Err(e) => Err(e),
                    };
                    match ejected {
                        Ok(()) => format!("VM {copy} ('{name}') is a copy of VM {of}: the cloud-init seed it carried ({volume}: VM {of}'s user data, join token inside) was ejected from it, so that it cannot boot as VM {of}'s node; the copy is otherwise left as it is"),
                        Err(e) => format!("VM {copy} ('{name}') is a copy of VM {of} and carries its cloud-init seed {volume}: started, it would boot as VM {of}'s node; ejecting it failed: {e}"),
                    }
                };
                tracing::warn!("proxmox: {note}");
                self.inner
                    .found
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(note);
            }
        }
    }

    /// Removes seeds of `cluster` left behind: older than the grace period, and whose VM
    /// is gone, is another cluster's, or no longer has them attached (a process stopped
    /// between ejecting and deleting, or during a create), and seeds still attached to a
    /// VM whose node joined after the seed was uploaded (the joined mark: the removal at
    /// the join failed, and the join token must not stay readable). Only seeds named with
    /// this cluster's identity, or named as before identities on a storage that is not
    /// shared (see [`seed::legacy_is_ours`]; on a shared one they are reported); never
    /// another cluster's of the same name. At most once per `seed_sweep_every`; never
    /// when read-only or before the identity is known.
    pub(super) async fn sweep_seeds(&self, cluster: &str, listing: &Listing) {
        let o = &self.inner.options;
        if o.read_only || self.identity().is_none() {
            return;
        }
        {
            let mut last = self
                .inner
                .last_sweep
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            if last.is_some_and(|t| t.elapsed() < o.seed_sweep_every) {
                return;
            }
            *last = Some(Instant::now());
        }
        if let Err(e) = self.sweep(cluster, listing).await {
            tracing::warn!(error = %e, "sweeping cloud-init seeds left behind failed; trying again later");
        }
    }

    async fn sweep(&self, cluster: &str, listing: &Listing) -> Result<(), CloudError> {
        let api = &self.inner.api;
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        let grace = self.inner.options.seed_grace;
        let mut shared_seen = BTreeSet::new();
        for host in listing.nodes.iter().filter(|n| n.status == "online") {
            for (storage, shared) in iso_storages(api, &host.node).await? {
                if shared && !shared_seen.insert(storage.clone()) {
                    continue;
                }
                let call = format!(
                    "/nodes/{}/storage/{}/content",
                    seg(&host.node),
                    seg(&storage)
                );
                let data = api.get(&call, &params([("content", "iso".into())])).await?;
                let items: Vec<ContentEntry> = serde_json::from_value(data)
                    .map_err(|e| other(format!("GET {call}: unexpected answer: {e}")))?;
                for item in items {
                    let Some(name) = seed::read_name(cluster, self.identity(), &item.volid) else {
                        continue;
                    };
                    // Another cluster's of the same name: never touched. One named as
                    // before identities on a shared storage is reported, not removed (see
                    // `delete_seed_volume`).
                    if name.maker == Maker::Other {
                        continue;
                    }
                    let vmid = name.vmid;
                    let age = item
                        .ctime
                        .map(|c| now.saturating_sub(Duration::from_secs(c)))
                        .unwrap_or_default();
                    if age < grace {
                        continue;
                    }
                    let vm = listing
                        .vms
                        .iter()
                        .find(|v| v.vmid == vmid && !v.template)
                        .filter(|v| ownership(v.tags()).cluster.as_deref() == Some(cluster));
                    let in_use = match vm {
                        Some(v) => self
                            .seed_volume(&v.node, v.vmid, cluster)
                            .await
                            .is_some_and(|s| s.volume == item.volid),
                        None => false,
                    };
                    if in_use {
                        // Its node joined after this seed was made: it served its purpose.
                        // (A warm VM started again has a newer seed than its old mark.)
                        let uploaded = item.ctime.and_then(|c| {
                            SystemTime::UNIX_EPOCH.checked_add(Duration::from_secs(c))
                        });
                        let joined = vm.and_then(|v| ownership(v.tags()).joined);
                        let after = joined.zip(uploaded).filter(|(j, u)| j >= u);
                        if let (Some(v), Some((j, _))) = (vm, after) {
                            let removed = match vm_config(api, &v.node, v.vmid).await {
                                Ok(config) => {
                                    self.remove_seed(&v.node, v.vmid, cluster, &config).await
                                }
                                Err(e) => Err(e),
                            };
                            match removed {
                                Ok(_) => {
                                    tracing::info!(volume = %item.volid, vmid, joined = ?j, "removed the cloud-init seed of a joined node, left by a failed removal at its join")
                                }
                                Err(e) => {
                                    tracing::warn!(volume = %item.volid, error = %e, "could not remove the cloud-init seed of a joined node; trying again at the next sweep")
                                }
                            }
                        }
                        continue;
                    }
                    let left = SeedVolume {
                        volume: item.volid.clone(),
                        maker: name.maker,
                    };
                    match self.delete_seed_volume(&host.node, &left).await {
                        Ok(false) => {}
                        Ok(true) => {
                            tracing::info!(volume = %item.volid, vmid, "removed a cloud-init seed left behind")
                        }
                        Err(e) => {
                            tracing::warn!(volume = %item.volid, error = %e, "could not remove a cloud-init seed left behind")
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delivery_follows_cicustom_of_group_or_template() {
        let s: ProxmoxSettings = crate::yaml::from_str("template: 1\n").expect("parses");
        let none = BTreeMap::new();
        assert_eq!(delivery(&s, &none), Delivery::Seed);
        let tpl: BTreeMap<String, String> = [(
            "cicustom".to_string(),
            "vendor=local:snippets/k3s.yaml".to_string(),
        )]
        .into();
        assert_eq!(
            delivery(&s, &tpl),
            Delivery::Cicustom("vendor=local:snippets/k3s.yaml".into())
        );
        let s: ProxmoxSettings =
            crate::yaml::from_str("template: 1\ncicustom: user=local:snippets/j.yaml\n")
                .expect("parses");
        assert_eq!(
            delivery(&s, &none),
            Delivery::Cicustom("user=local:snippets/j.yaml".into())
        );
        let s: ProxmoxSettings =
            crate::yaml::from_str("template: 1\njoin: guestAgent\n").expect("parses");
        assert_eq!(delivery(&s, &none), Delivery::GuestAgent);
    }
}

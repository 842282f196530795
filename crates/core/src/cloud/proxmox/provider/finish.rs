//! After the clone: the config call (ownership tags, size, cloud-init) and the start, for a
//! VM this process cloned, and for one whose clone a process gone left to finish (found
//! half-made by its name and description once the clone is done).

use std::net::Ipv4Addr;
use std::time::SystemTime;

use super::{with_bridge, ProxmoxProvider};
use crate::cloud::proxmox::allocate::{list_vms, vm_config, vm_path, VmResource};
use crate::cloud::proxmox::client::{params, Params};
use crate::cloud::proxmox::halfmade::half_made;
use crate::cloud::proxmox::ippool::Pool;
use crate::cloud::proxmox::tags;
use crate::cloud::proxmox::{other, pve_urlencode, JoinMode, ProxmoxSettings};
use crate::cloud::CloudError;

/// A cloned VM to configure and (unless `warm`) start.
pub(super) struct NewVm<'a> {
    pub cluster: &'a str,
    pub group: &'a str,
    pub name: &'a str,
    pub settings: &'a ProxmoxSettings,
    /// Empty when unknown (a clone made before the description recorded it): no `nw-h-`
    /// tag, so no drift.
    pub settings_hash: &'a str,
    pub node: &'a str,
    pub vmid: u32,
    /// The template's `net0`, used when the clone's own cannot be read.
    pub template_net0: Option<&'a str>,
    pub template: u32,
    pub address: Option<(&'a Pool, Ipv4Addr)>,
    pub created: SystemTime,
    pub warm: bool,
    /// The rendered user data, for the seed of a VM started now (`None`: a warm VM, whose
    /// seed is attached when it is started, or a clone finished for a process gone).
    pub user_data: Option<&'a str>,
}

impl ProxmoxProvider {
    /// The config call, then the start (unless warm). A VM whose configuration or start
    /// fails is destroyed: nothing half-configured is left behind.
    pub(super) async fn configure_new(&self, n: &NewVm<'_>) -> Result<(), CloudError> {
        let result = self.configure_and_start(n).await;
        if let Err(e) = &result {
            tracing::warn!(vm = %n.name, vmid = n.vmid, error = %e, "configuring or starting the new VM failed; destroying it");
            let seed = self.seed_volume(n.node, n.vmid, n.cluster).await;
            if let Err(e2) = self.destroy(n.node, n.vmid, true).await {
                if let Err(e3) = self.destroy(n.node, n.vmid, false).await {
                    tracing::warn!(vmid = n.vmid, error = %e2, again = %e3, "could not destroy the half-created VM; it will be cleaned up by its tags once it fails to join");
                }
            }
            self.forget_seed(n.node, seed).await;
        }
        result
    }

    async fn configure_and_start(&self, n: &NewVm<'_>) -> Result<(), CloudError> {
        let api = &self.inner.api;
        let settings = n.settings;
        let tag_value = tags::for_new_vm(n.cluster, n.group, n.settings_hash, n.created, n.vmid);
        let tag_value = tags::rewrite(&tag_value, n.warm, None);
        // Before the start: a process killed before the script ran leaves the mark, and
        // the next one runs the script (see `joining`).
        let joining = settings.join == JoinMode::GuestAgent && !n.warm;
        let mut p: Params = params([("tags", tags::with_joining(&tag_value, joining))]);
        // In the same call as the tags: a VM whose tags a person clears later still shows
        // it was configured, and is never taken for half-made (see `halfmade`).
        // The cluster's identity stays on it too, as the clone call wrote it.
        let description = tags::description_configured(&tags::NewVmMarks {
            cluster: n.cluster,
            group: n.group,
            settings_hash: n.settings_hash,
            warm: n.warm,
            created: n.created,
            vmid: n.vmid,
        });
        let description = match self.inner.options.identity.get() {
            Some(uid) => tags::with_identity(&description, uid),
            None => description,
        };
        p.push(("description".into(), description));
        if let Some(c) = settings.cores {
            p.push(("cores".into(), c.to_string()));
        }
        if let Some(m) = settings.memory.map(|m| m.as_u64() / (1024 * 1024)) {
            p.push(("memory".into(), m.to_string()));
        }
        if let Some(u) = &settings.ciuser {
            p.push(("ciuser".into(), u.clone()));
        }
        if !settings.ssh_keys.is_empty() {
            p.push((
                "sshkeys".into(),
                pve_urlencode(&settings.ssh_keys.join("\n")),
            ));
        }
        match &n.address {
            Some((pool, addr)) => {
                p.push(("ipconfig0".into(), pool.ipconfig(*addr)));
                if let Some(ns) = pool.nameserver() {
                    p.push(("nameserver".into(), ns));
                }
            }
            None => p.push(("ipconfig0".into(), "ip=dhcp".into())),
        }
        if let Some(bridge) = &settings.bridge {
            // The clone has its own MAC: read it back rather than the template's.
            let own = vm_config(api, n.node, n.vmid).await?;
            let net0 = own
                .get("net0")
                .map(String::as_str)
                .or(n.template_net0)
                .ok_or_else(|| {
                    other(format!(
                        "template {} has no net0 to set bridge {bridge} on",
                        n.template
                    ))
                })?;
            p.push(("net0".into(), with_bridge(net0, bridge)));
        }
        if settings.join == JoinMode::GuestAgent {
            p.push(("agent".into(), "1".into()));
        }
        if let Some(c) = &settings.cicustom {
            p.push(("cicustom".into(), c.clone()));
        }
        let call = format!("{}/config", vm_path(n.node, n.vmid));
        let data = api.post(&call, &p).await?;
        self.await_upid(&format!("POST {call}"), &data).await?;
        if n.warm {
            return Ok(());
        }
        if let Some(user_data) = n.user_data {
            self.attach_seed(n.node, n.vmid, n.cluster, n.name, settings, user_data)
                .await?;
        }
        let call = format!("{}/status/start", vm_path(n.node, n.vmid));
        let data = api.post(&call, &[]).await?;
        self.await_upid(&format!("POST {call}"), &data).await
    }

    /// Whether a half-made VM of `group` can be finished here: its group is configured in
    /// this process and joins through the user's own `cicustom` snippets (a seed or a
    /// guest-agent join needs the user data of a scale-up this process never saw), it is
    /// stopped, and its clone is not one this process saw fail.
    pub(super) fn can_finish(&self, v: &VmResource, group: &str) -> bool {
        v.lock.is_none()
            && v.status == "stopped"
            && !self
                .inner
                .failed_clones
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .contains(&v.vmid)
            && self
                .inner
                .groups
                .get(group)
                .is_some_and(|s| s.join == JoinMode::CloudInit && s.cicustom.is_some())
    }

    /// Finishes in the background a VM whose clone a process gone left half-made (named
    /// and described for `cluster`, no tags, unlocked): configures and starts it as that
    /// process would have. It counts as building meanwhile (`creating`). Under the create
    /// lock, the VM is read again and finished only while it is still half-made and
    /// unlocked: the process that cloned it, if alive, configures it itself.
    pub(super) fn spawn_finish(&self, v: &VmResource, cluster: &str, group: &str) {
        let vmid = v.vmid;
        {
            let mut creating = self
                .inner
                .creating
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            if !creating.insert(vmid) {
                return;
            }
        }
        let this = self.clone();
        let cluster = cluster.to_string();
        let group = group.to_string();
        let handle = tokio::spawn(async move {
            if let Err(e) = this.finish_left(vmid, &cluster, &group).await {
                tracing::warn!(vmid, error = %e, "could not finish a clone an earlier process left; it stays half-made and is removed");
            }
            this.inner
                .creating
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&vmid);
        });
        let mut tasks = self.inner.tasks.lock().unwrap_or_else(|e| e.into_inner());
        tasks.retain(|h| !h.is_finished());
        tasks.push(handle);
    }

    async fn finish_left(&self, vmid: u32, cluster: &str, group: &str) -> Result<(), CloudError> {
        let _guard = self.inner.create_lock.lock().await;
        let api = &self.inner.api;
        let vms = list_vms(api).await?;
        let Some(v) = vms.iter().find(|v| v.vmid == vmid && !v.template) else {
            return Ok(());
        };
        let Some(marks) = half_made(api, v, cluster).await? else {
            return Ok(());
        };
        if marks.group.as_deref() != Some(group) || !self.can_finish(v, group) {
            return Ok(());
        }
        let settings = self.settings(group)?;
        let address = match self.inner.pools.get(group) {
            Some(pool) => {
                let used = self.addresses_in_use(&vms).await?;
                let addr = pool.allocate(&used).ok_or_else(|| {
                    other(format!(
                        "static IP pool of group {group} is exhausted ({} addresses in use)",
                        used.len()
                    ))
                })?;
                Some((pool, addr))
            }
            None => None,
        };
        let name = v.name.clone().unwrap_or_default();
        tracing::info!(vm = %name, vmid, host = %v.node, "finishing a clone an earlier process left");
        self.configure_new(&NewVm {
            cluster,
            group,
            name: &name,
            settings,
            // As the clone call recorded them in the description (none before they were).
            settings_hash: marks.settings_hash.as_deref().unwrap_or_default(),
            node: &v.node,
            vmid,
            template_net0: None,
            template: 0,
            address,
            created: SystemTime::now(),
            warm: marks.warm,
            user_data: None,
        })
        .await?;
        if marks.warm {
            tracing::info!(vm = %name, vmid, host = %v.node, "Proxmox VM finished for the warm pool, left stopped");
        } else {
            tracing::info!(vm = %name, vmid, host = %v.node, "Proxmox VM started");
        }
        Ok(())
    }
}

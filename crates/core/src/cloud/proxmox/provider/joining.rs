//! The joining mark on Proxmox: the tag `nw-joining`, written (with the other tags) before a
//! VM of a `join: guestAgent` group is started and taken off once its join script was sent,
//! so a process killed in between leaves a VM the next process recognises
//! ([`ServerStatus::JoinPending`](crate::model::ServerStatus::JoinPending)) and joins by
//! running the script again, instead of waiting out `provisionTimeout`.

use super::ProxmoxProvider;
use crate::cloud::proxmox::agent::MAX_SCRIPT_LEN;
use crate::cloud::proxmox::allocate::list_vms;
use crate::cloud::proxmox::tags::{self, ownership};
use crate::cloud::proxmox::{other, JoinMode};
use crate::cloud::{CloudError, RenderJoin};

impl ProxmoxProvider {
    /// Takes the joining mark off VM `vmid` (read back now), if it carries it. A failure is
    /// only logged: the mark left makes the next process run the script again (safe, see
    /// the docs), or, once the node registered, take the mark off.
    pub(super) async fn joining_done(&self, vmid: u32) {
        if let Err(e) = self.take_joining_off(vmid).await {
            tracing::warn!(vmid, error = %e, "could not take the joining mark off; a later process runs the join script again or, once the node registered, takes it off");
        }
    }

    async fn take_joining_off(&self, vmid: u32) -> Result<(), CloudError> {
        let vms = list_vms(&self.inner.api).await?;
        let Some(vm) = vms.into_iter().find(|v| v.vmid == vmid && !v.template) else {
            return Ok(());
        };
        let marks = ownership(vm.tags());
        // A VM a person took over meanwhile (its cluster tag removed) or copied is left
        // as it is, even its joining mark.
        if !marks.joining || marks.cluster.is_none() || marks.copy_of(vmid).is_some() {
            return Ok(());
        }
        self.set_tags(&vm, tags::with_joining(vm.tags(), false))
            .await
    }

    /// See [`crate::cloud::CloudProvider::finish_join`].
    pub(super) async fn finish_vm_join(
        &self,
        cluster: &str,
        id: &str,
        render: Option<&RenderJoin<'_>>,
    ) -> Result<(), CloudError> {
        let vm = self.owned_vm(cluster, id, false).await?;
        let marks = ownership(vm.tags());
        if !marks.joining {
            return Ok(());
        }
        let name = vm.name.clone().unwrap_or_else(|| format!("VM {}", vm.vmid));
        let Some(render) = render else {
            self.set_tags(&vm, tags::with_joining(vm.tags(), false))
                .await?;
            tracing::info!(vm = %name, vmid = vm.vmid, "node registered; joining mark taken off");
            return Ok(());
        };
        if self.join_state(id).is_some() {
            // This process runs (or ran) its join: the mark goes when it is done.
            return Ok(());
        }
        if vm.status != "running" || vm.lock.is_some() {
            return Err(other(format!(
                "VM {name} ({}) is {}{}: its join script cannot run",
                vm.vmid,
                vm.status,
                vm.lock
                    .as_deref()
                    .map(|l| format!(" and locked ({l})"))
                    .unwrap_or_default()
            )));
        }
        let group = marks.group.unwrap_or_default();
        let settings = self.settings(&group)?;
        if settings.join != JoinMode::GuestAgent {
            // The group no longer joins through the agent: nothing here runs a script.
            self.set_tags(&vm, tags::with_joining(vm.tags(), false))
                .await?;
            tracing::warn!(vm = %name, vmid = vm.vmid, group = %group, "group no longer joins through the guest agent; joining mark taken off, the VM is judged by provisionTimeout");
            return Ok(());
        }
        // Its zone is the host it runs on, as the scale-up that made it rendered it.
        let req = render(Some(&vm.node))
            .map_err(|e| other(format!("VM {name}: join script not rendered: {e}")))?;
        let len = req.user_data.chars().count();
        if len > MAX_SCRIPT_LEN {
            return Err(other(format!(
                "join script for {name} is {len} characters; agent/file-write accepts at most {MAX_SCRIPT_LEN}"
            )));
        }
        tracing::info!(vm = %name, vmid = vm.vmid, host = %vm.node, "running the join script a process gone did not run");
        self.spawn_join(vm.node.clone(), vm.vmid, &req, settings);
        Ok(())
    }
}

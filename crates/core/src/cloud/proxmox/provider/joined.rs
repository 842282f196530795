//! The joined mark on Proxmox: the tag `nw-j-<unix seconds>`, written once a VM's node is
//! Ready, so a later process knows the VM ran as a node (see [`crate::cloud::JOINED_TAG`]);
//! and the removing mark `nw-removing-<unix seconds>`, written before its removal (see
//! [`crate::cloud::REMOVING_TAG`]); and the restart of a VM whose Node is gone, with its
//! mark `nw-r-<unix seconds>` (see [`crate::cloud::RESTARTED_TAG`]); and the stop of a
//! VM whose node is NotReady holding data only it can reach, with its mark
//! `nw-f-<unix seconds>` (see [`crate::cloud::FENCED_TAG`]).

use std::time::SystemTime;

use super::ProxmoxProvider;
use crate::cloud::proxmox::tags::{self, ownership};
use crate::cloud::CloudError;

impl ProxmoxProvider {
    /// Reads VM `id` back (refused unless it is `cluster`'s) and writes its tags with the
    /// joined mark at `at` (none with `None`), and with a time, without the removing and
    /// restart marks (a node let in again is no longer being removed, nor lost), in one
    /// write; a VM already so is left as it is.
    pub(super) async fn mark_vm_joined(
        &self,
        cluster: &str,
        id: &str,
        at: Option<SystemTime>,
    ) -> Result<(), CloudError> {
        let vm = self.owned_vm(cluster, id, false).await?;
        let mut value = tags::with_joined(vm.tags(), at);
        if at.is_some() {
            value = tags::with_restarted(&tags::without_removing(&value), None);
        }
        let (before, after) = (ownership(vm.tags()), ownership(&value));
        if before.joined == after.joined
            && before.removing == after.removing
            && before.restarted == after.restarted
        {
            return Ok(());
        }
        self.set_tags(&vm, value).await?;
        tracing::info!(vmid = vm.vmid, host = %vm.node, joined = at.is_some(), "Proxmox VM joined mark written");
        Ok(())
    }
}

impl ProxmoxProvider {
    /// Reads VM `id` back (refused unless it is `cluster`'s) and writes the removing mark
    /// with the time now into its tags (an earlier mark replaced: the removal beginning
    /// now is the one in flight).
    pub(super) async fn mark_vm_removing(&self, cluster: &str, id: &str) -> Result<(), CloudError> {
        let vm = self.owned_vm(cluster, id, false).await?;
        self.set_tags(&vm, tags::with_removing(vm.tags(), SystemTime::now()))
            .await?;
        tracing::info!(vmid = vm.vmid, host = %vm.node, "Proxmox VM marked as being removed");
        Ok(())
    }
}

impl ProxmoxProvider {
    /// Reads VM `id` back (refused unless it is `cluster`'s and running), writes the
    /// restart mark at `at` into its tags, then asks Proxmox to reboot it
    /// (`status/reboot`: a shutdown, then a start, so its kubelet starts and registers);
    /// the task is not waited on (a guest may take long to shut down). A reboot Proxmox
    /// refuses takes the mark off again, so a later cycle may try once more.
    pub(super) async fn restart_vm(
        &self,
        cluster: &str,
        id: &str,
        at: SystemTime,
    ) -> Result<(), CloudError> {
        self.mark_then(cluster, id, at, tags::with_restarted, "reboot")
            .await
    }

    /// Reads VM `id` back (refused unless it is `cluster`'s and running), writes the fence
    /// mark at `at` into its tags, then stops it hard (`status/stop`: its guest does not
    /// answer a shutdown). A stop Proxmox refuses takes the mark off again.
    pub(super) async fn fence_vm(
        &self,
        cluster: &str,
        id: &str,
        at: SystemTime,
    ) -> Result<(), CloudError> {
        self.mark_then(cluster, id, at, tags::with_fenced, "stop")
            .await
    }

    /// The power call `status/<call>` on running VM `id` of `cluster`, its mark (written by
    /// `mark`) recorded first and taken off again when the call fails.
    async fn mark_then(
        &self,
        cluster: &str,
        id: &str,
        at: SystemTime,
        mark: fn(&str, Option<SystemTime>) -> String,
        call: &str,
    ) -> Result<(), CloudError> {
        let vm = self.owned_vm(cluster, id, false).await?;
        if vm.status != "running" {
            let name = vm.name.clone().unwrap_or_else(|| format!("VM {}", vm.vmid));
            let reason = format!(
                "it is {}, not running: starting it is left to a person",
                vm.status
            );
            return Err(crate::cloud::refused(super::PROVIDER, &name, id, reason));
        }
        let marked = mark(vm.tags(), Some(at));
        self.set_tags(&vm, marked.clone()).await?;
        let path = format!("{}/status/{call}", super::vm_path(&vm.node, vm.vmid));
        if let Err(e) = self.inner.api.post(&path, &[]).await {
            let mut unmarked = vm.clone();
            unmarked.tags = Some(marked);
            let _ = self.set_tags(&unmarked, mark(unmarked.tags(), None)).await;
            return Err(e);
        }
        tracing::info!(vmid = vm.vmid, host = %vm.node, call, "Proxmox VM power call made");
        Ok(())
    }
}

//! The joined mark on Proxmox: the tag `nw-j-<unix seconds>`, written once a VM's node is
//! Ready, so a later process knows the VM ran as a node (see [`crate::cloud::JOINED_TAG`]);
//! and the removing mark `nw-removing-<unix seconds>`, written before its removal (see
//! [`crate::cloud::REMOVING_TAG`]).

use std::time::SystemTime;

use super::ProxmoxProvider;
use crate::cloud::proxmox::tags::{self, ownership};
use crate::cloud::CloudError;

impl ProxmoxProvider {
    /// Reads VM `id` back (refused unless it is `cluster`'s) and writes its tags with the
    /// joined mark at `at` (none with `None`), and with a time, without the removing mark
    /// (a node let in again is no longer being removed), in one write; a VM already so is
    /// left as it is.
    pub(super) async fn mark_vm_joined(
        &self,
        cluster: &str,
        id: &str,
        at: Option<SystemTime>,
    ) -> Result<(), CloudError> {
        let vm = self.owned_vm(cluster, id, false).await?;
        let mut value = tags::with_joined(vm.tags(), at);
        if at.is_some() {
            value = tags::without_removing(&value);
        }
        let (before, after) = (ownership(vm.tags()), ownership(&value));
        if before.joined == after.joined && before.removing == after.removing {
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

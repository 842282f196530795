//! A VM whose creation stopped between the clone and the config call (the process was
//! killed; on real Proxmox a full clone takes minutes, so the window is wide). It has no
//! ownership tags yet, only the name and the description the clone call set; both must
//! name this cluster and group for it to count as ours, so the next cycle finds it and
//! finishes it (configures and starts it, see `provider/finish.rs`) or, when it cannot,
//! removes it.

use std::collections::HashSet;
use std::sync::Mutex as StdMutex;

use super::allocate::{vm_config, VmResource};
use super::client::Api;
use super::tags::{ownership_from_description, Ownership};
use crate::cloud::CloudError;

/// A VM gone between the listing and a read of its config.
pub fn is_gone(e: &CloudError) -> bool {
    matches!(e, CloudError::Api { status: 500, message, .. } if message.contains("does not exist"))
}

/// The ownership a half-made VM of `cluster` has in its description, when `v` is one: not
/// a template, no nodewright tag of any cluster, named `<cluster>-<group>-...` and
/// described (first line) for the same cluster and group. The config is read only for
/// untagged VMs named like ours; a VM gone meanwhile is none.
pub async fn half_made(
    api: &Api,
    v: &VmResource,
    cluster: &str,
) -> Result<Option<Ownership>, CloudError> {
    if v.template || v.is_nodewright() {
        return Ok(None);
    }
    let Some(name) = v.name.as_deref() else {
        return Ok(None);
    };
    if !name.starts_with(&format!("{cluster}-")) {
        return Ok(None);
    }
    let config = match vm_config(api, &v.node, v.vmid).await {
        Ok(c) => c,
        Err(e) if is_gone(&e) => return Ok(None),
        Err(e) => return Err(e),
    };
    let o = ownership_from_description(config.get("description").map_or("", String::as_str));
    let named = |g: &str| name.starts_with(&format!("{cluster}-{g}-"));
    let ours = o.cluster.as_deref() == Some(cluster) && o.group.as_deref().is_some_and(named);
    Ok(ours.then_some(o))
}

/// Marks a VM as being configured by this process for as long as it lives.
pub(super) struct Creating<'a> {
    set: &'a StdMutex<HashSet<u32>>,
    vmid: u32,
}

impl<'a> Creating<'a> {
    pub(super) fn start(set: &'a StdMutex<HashSet<u32>>, vmid: u32) -> Self {
        set.lock().unwrap_or_else(|e| e.into_inner()).insert(vmid);
        Creating { set, vmid }
    }
}

impl Drop for Creating<'_> {
    fn drop(&mut self) {
        self.set
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.vmid);
    }
}

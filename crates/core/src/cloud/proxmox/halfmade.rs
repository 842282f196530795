//! A VM whose creation stopped between the clone and the config call (the process was
//! killed; on real Proxmox a full clone takes minutes, so the window is wide). It has no
//! ownership tags yet, only the name and the description the clone call set; both must
//! name this cluster and group for it to count as ours, so the next cycle finds it and
//! finishes it (configures and starts it, see `provider/finish.rs`) or, when it cannot,
//! removes it.
//!
//! A half-made VM was never configured, so it carries none of the tags nodewright writes,
//! its description still says `stage=cloned` (the config call rewrites it), and it was
//! never started. A VM named and described like ours that carries some of the tags, runs,
//! or whose description says it was configured (or, written by an older release, says
//! neither) lost its cluster tag to a person: it is disowned, reported and never touched
//! (it may run a node and its pods, or hold its data while stopped). One whose description records another VM id is a
//! person's copy of one of ours, reported the same way.

use std::collections::HashSet;
use std::sync::Mutex as StdMutex;

use super::allocate::{vm_config, VmResource};
use super::client::Api;
use super::tags::{any_ours, ownership_from_description, Ownership};
use crate::cloud::CloudError;

/// A VM gone between the listing and a read of its config.
pub fn is_gone(e: &CloudError) -> bool {
    matches!(e, CloudError::Api { status: 500, message, .. } if message.contains("does not exist"))
}

/// What the name and description of a VM without this cluster's tag say of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Untagged {
    /// Not named and described for this cluster (or tagged for some cluster).
    Other,
    /// Cloned for this cluster and never configured: finished or removed.
    HalfMade(Ownership),
    /// Configured once (it carries other nodewright tags, or runs) and lost its cluster
    /// tag: a person took it over. Reported, never touched.
    Disowned(Ownership),
    /// A copy of VM `of`: its description (copied by Proxmox) was written for that VM
    /// id. Reported, never touched.
    Copy { marks: Ownership, of: u32 },
}

/// The ownership a half-made VM of `cluster` has in its description, when `v` is one
/// (see [`untagged`]).
pub async fn half_made(
    api: &Api,
    v: &VmResource,
    cluster: &str,
) -> Result<Option<Ownership>, CloudError> {
    Ok(match untagged(api, v, cluster).await? {
        Untagged::HalfMade(o) => Some(o),
        _ => None,
    })
}

/// Judges a VM without a cluster tag: not a template, no nodewright cluster tag of any
/// cluster, named `<cluster>-<group>-...` and described (first line) for the same cluster
/// and group; then half-made, disowned or a copy as its tags, power state and recorded
/// VM id say. The config is read only for untagged VMs named like ours; a VM gone
/// meanwhile is [`Untagged::Other`].
pub async fn untagged(api: &Api, v: &VmResource, cluster: &str) -> Result<Untagged, CloudError> {
    if v.template || v.is_nodewright() {
        return Ok(Untagged::Other);
    }
    let Some(name) = v.name.as_deref() else {
        return Ok(Untagged::Other);
    };
    if !name.starts_with(&format!("{cluster}-")) {
        return Ok(Untagged::Other);
    }
    let config = match vm_config(api, &v.node, v.vmid).await {
        Ok(c) => c,
        Err(e) if is_gone(&e) => return Ok(Untagged::Other),
        Err(e) => return Err(e),
    };
    let o = ownership_from_description(config.get("description").map_or("", String::as_str));
    Ok(judge(v, name, cluster, o))
}

/// [`untagged`] once the description is read.
fn judge(v: &VmResource, name: &str, cluster: &str, o: Ownership) -> Untagged {
    let named = |g: &str| name.starts_with(&format!("{cluster}-{g}-"));
    let ours = o.cluster.as_deref() == Some(cluster) && o.group.as_deref().is_some_and(named);
    if !ours {
        return Untagged::Other;
    }
    if let Some(of) = o.copy_of(v.vmid) {
        return Untagged::Copy { marks: o, of };
    }
    // The config call writes every tag, and `stage=configured` in the description, at
    // once, before the first start: only a stopped VM without tags whose description
    // still says `stage=cloned` provably never was configured or booted. Any other (a
    // person cleared the tags of a stopped node VM; a VM an older release cloned, whose
    // description says neither) may have run and hold data: reported, never touched.
    if any_ours(v.tags()) || v.status == "running" || !o.never_configured {
        return Untagged::Disowned(o);
    }
    Untagged::HalfMade(o)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cloud::proxmox::tags::{description_for_new_vm, NewVmMarks};
    use std::time::SystemTime;

    fn vm(vmid: u32, tags: &str, status: &str) -> VmResource {
        serde_json::from_value(serde_json::json!({
            "type": "qemu", "vmid": vmid, "node": "pve1", "name": "prod-workers-abc",
            "status": status, "tags": tags,
        }))
        .expect("vm")
    }

    fn described(vmid: u32) -> Ownership {
        ownership_from_description(&description_for_new_vm(&NewVmMarks {
            cluster: "prod",
            group: "workers",
            settings_hash: "",
            warm: false,
            created: SystemTime::now(),
            vmid,
        }))
    }

    #[test]
    fn a_running_node_vm_whose_cluster_tag_was_removed_is_disowned_not_half_made() {
        let judged = |v: &VmResource| judge(v, "prod-workers-abc", "prod", described(105));
        // A person removed `nw-c-prod` only: the other tags remain.
        let v = vm(105, "nw-g-workers;nw-t-42;nw-j-50", "running");
        assert!(matches!(judged(&v), Untagged::Disowned(_)));
        // Every tag removed, still running: never started half-made, so configured once.
        assert!(matches!(
            judged(&vm(105, "", "running")),
            Untagged::Disowned(_)
        ));
        // Stopped with leftover tags: configured once too.
        assert!(matches!(
            judged(&vm(105, "nw-i-105", "stopped")),
            Untagged::Disowned(_)
        ));
        // Only a stopped VM carrying none of our tags is half-made.
        assert!(matches!(
            judged(&vm(105, "", "stopped")),
            Untagged::HalfMade(_)
        ));
        assert!(matches!(
            judged(&vm(105, "mine", "stopped")),
            Untagged::HalfMade(_)
        ));
        // Issue 29, item 4: stopped and without tags, but its description says the
        // config call reached it (a person cleared the tags), or says neither (an older
        // release's): it may have run, so it is disowned.
        let marks = NewVmMarks {
            cluster: "prod",
            group: "workers",
            settings_hash: "",
            warm: false,
            created: SystemTime::now(),
            vmid: 105,
        };
        let configured = ownership_from_description(
            &crate::cloud::proxmox::tags::description_configured(&marks),
        );
        let v = vm(105, "", "stopped");
        assert!(matches!(
            judge(&v, "prod-workers-abc", "prod", configured),
            Untagged::Disowned(_)
        ));
        let older = ownership_from_description(
            "nodewright: cluster=prod group=workers created=1700000000 vmid=105",
        );
        assert!(matches!(
            judge(&v, "prod-workers-abc", "prod", older),
            Untagged::Disowned(_)
        ));
    }

    #[test]
    fn a_copy_of_a_half_made_vm_is_reported_as_a_copy() {
        let v = vm(130, "", "stopped");
        assert_eq!(
            judge(&v, "prod-workers-abc", "prod", described(105)),
            Untagged::Copy {
                marks: described(105),
                of: 105
            }
        );
        // Another cluster's description says nothing.
        assert_eq!(
            judge(&v, "prod-workers-abc", "staging", described(105)),
            Untagged::Other
        );
    }
}

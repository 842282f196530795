//! Reading VMs back as [`Server`]s: ownership from the tags (or a half-made VM's
//! description), state from the lock, the power state and this process's joins.

use std::time::SystemTime;

use super::{meta_ctime, JoinState, ProxmoxProvider};
use crate::cloud::proxmox::allocate::{vm_config, VmResource};
use crate::cloud::proxmox::halfmade::half_made;
use crate::cloud::proxmox::tags::{ownership, Ownership};
use crate::cloud::proxmox::PROVIDER;
use crate::cloud::{CloudError, Server, ServerStatus};

impl ProxmoxProvider {
    /// VM `v` as a [`Server`] with ownership `o` (from its tags, or the description of a
    /// `half_made` VM).
    pub(super) async fn vm_server(&self, v: &VmResource, o: Ownership, half_made: bool) -> Server {
        let created = match o.created {
            // Still copying: its provisioning clock starts when the clone is done, and
            // the clone's own deadline is its task's (see `judge_clones`), not the
            // planner's `provisionTimeout` from the clone's start.
            _ if half_made && v.lock.as_deref() == Some("clone") => SystemTime::now(),
            Some(t) => t,
            None => match vm_config(&self.inner.api, &v.node, v.vmid)
                .await
                .ok()
                .and_then(|c| meta_ctime(&c))
            {
                Some(t) => t,
                None => {
                    tracing::warn!(
                        vmid = v.vmid,
                        "no creation time in tags or config meta; treating it as new"
                    );
                    SystemTime::now()
                }
            },
        };
        let join = self
            .inner
            .joins
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&v.vmid)
            .cloned();
        let in_creation = self
            .inner
            .creating
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&v.vmid);
        let status = match (v.lock.as_deref(), v.status.as_str(), join) {
            // Cloned, unlocked, untagged and nobody here configuring it: left half-made.
            (None, _, _) if half_made && !in_creation => ServerStatus::Incomplete,
            (_, _, _) if half_made => ServerStatus::Building,
            (_, _, Some(JoinState::Failed(_))) => ServerStatus::Error,
            (Some("destroyed"), _, _) => ServerStatus::Deleting,
            (Some(_), _, _) => ServerStatus::Building,
            (None, "running", Some(JoinState::Running)) => ServerStatus::Building,
            (None, "running", _) => ServerStatus::Active,
            (None, "stopped", _) => ServerStatus::Stopped,
            _ => ServerStatus::Unknown,
        };
        Server {
            id: v.vmid.to_string(),
            name: v.name.clone().unwrap_or_else(|| format!("VM {}", v.vmid)),
            cluster: o.cluster,
            group: o.group,
            status,
            created,
            memory_bytes: v.maxmem,
            provider: PROVIDER.into(),
            warm: o.warm,
            filling: false,
            settings_hash: o.settings_hash,
            fault: None,
        }
    }

    /// The VMs of `vms` that are `cluster`'s, as servers.
    pub(super) async fn servers_in(
        &self,
        vms: &[VmResource],
        cluster: &str,
    ) -> Result<Vec<Server>, CloudError> {
        let mut out = Vec::new();
        for v in vms.iter().filter(|v| !v.template) {
            let o = ownership(v.tags());
            if o.cluster.as_deref() == Some(cluster) {
                out.push(self.vm_server(v, o, false).await);
            } else if let Some(o) = half_made(&self.inner.api, v, cluster).await? {
                out.push(self.vm_server(v, o, true).await);
            }
        }
        Ok(out)
    }
}

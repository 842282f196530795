//! Warm pools on Proxmox: a warm VM is cloned and configured but never started, and
//! carries the `nw-warm` tag, so a fresh process reads the pool back from the tags.

use std::time::SystemTime;

use super::{vmid_of, ProxmoxProvider};
use crate::cloud::proxmox::allocate::{list_vms, vm_path, VmResource};
use crate::cloud::proxmox::client::params;
use crate::cloud::proxmox::tags::{self, ownership};
use crate::cloud::proxmox::{JoinMode, ProxmoxSettings, PROVIDER};
use crate::cloud::{refused, CloudError, CreateRequest, RenderJoin};

impl ProxmoxProvider {
    /// VM `id` as listed now, refused unless its tags name `cluster` (and, with `warm`,
    /// unless it carries the warm mark).
    pub(super) async fn owned_vm(
        &self,
        cluster: &str,
        id: &str,
        warm: bool,
    ) -> Result<VmResource, CloudError> {
        let vmid = vmid_of(id)?;
        let vms = list_vms(&self.inner.api).await?;
        let Some(vm) = vms.into_iter().find(|v| v.vmid == vmid && !v.template) else {
            return Err(CloudError::NotFound {
                provider: PROVIDER.into(),
                what: "VM".into(),
                name: id.into(),
                detail: String::new(),
            });
        };
        let name = vm.name.clone().unwrap_or_else(|| format!("VM {vmid}"));
        let o = ownership(vm.tags());
        if o.cluster.as_deref() != Some(cluster) {
            let reason = format!("its tags do not name cluster '{cluster}'");
            return Err(refused(PROVIDER, &name, id, reason));
        }
        if let Some(of) = o.copy_of(vmid) {
            let reason = format!("its tags were made for VM {of}: it is a copy of that VM");
            return Err(refused(PROVIDER, &name, id, reason));
        }
        if warm && !o.warm {
            let reason = format!("it is not in the warm pool (no {} tag)", tags::WARM_TAG);
            return Err(refused(PROVIDER, &name, id, reason));
        }
        Ok(vm)
    }

    /// Writes `value` as the VM's tags, awaiting the config task.
    pub(super) async fn set_tags(&self, vm: &VmResource, value: String) -> Result<(), CloudError> {
        let call = format!("{}/config", vm_path(&vm.node, vm.vmid));
        let data = self
            .inner
            .api
            .post(&call, &params([("tags", tags::with_vmid(&value, vm.vmid))]))
            .await?;
        self.await_upid(&format!("POST {call}"), &data).await
    }

    /// Out of the pool, then started ([`crate::cloud::warm`]).
    pub(super) async fn start_parked(
        &self,
        cluster: &str,
        id: &str,
        render: &RenderJoin<'_>,
    ) -> Result<(), CloudError> {
        crate::cloud::warm::start(self, cluster, id, render).await
    }

    /// Shut down (forced after a minute), then marked warm: a crash in between leaves a
    /// stopped, unmarked VM with no node, which `provisionTimeout` removes.
    pub(super) async fn park_vm(&self, cluster: &str, id: &str) -> Result<(), CloudError> {
        let vm = self.owned_vm(cluster, id, false).await?;
        if vm.status == "running" {
            let call = format!("{}/status/shutdown", vm_path(&vm.node, vm.vmid));
            let p = params([("forceStop", "1".into()), ("timeout", "60".into())]);
            let data = self.inner.api.post(&call, &p).await?;
            self.await_upid(&format!("POST {call}"), &data).await?;
        }
        let parked = tags::rewrite(vm.tags(), true, None);
        self.set_tags(&vm, tags::with_joining(&parked, false))
            .await?;
        self.inner
            .joins
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&vm.vmid);
        tracing::info!(vmid = vm.vmid, host = %vm.node, "Proxmox VM stopped and parked in the warm pool");
        Ok(())
    }
}

#[async_trait::async_trait]
impl crate::cloud::warm::WarmStart for ProxmoxProvider {
    const PROVIDER: &'static str = PROVIDER;
    /// The VM and its group's settings.
    type Parked = (VmResource, ProxmoxSettings);

    async fn parked(&self, cluster: &str, id: &str) -> Result<Self::Parked, CloudError> {
        let vm = self.owned_vm(cluster, id, true).await?;
        // A VM of a group this process has no settings for is left as it is.
        let group = ownership(vm.tags()).group.unwrap_or_default();
        let settings = self.settings(&group)?.clone();
        Ok((vm, settings))
    }

    /// Its host, as a clone onto that host is rendered (every Proxmox group places by
    /// host), and as [`crate::cloud::CloudProvider::finish_join`] renders it.
    fn zone(&self, (vm, _): &Self::Parked) -> Option<String> {
        Some(vm.node.clone())
    }

    async fn unpark(
        &self,
        (vm, settings): &Self::Parked,
        _id: &str,
        now: SystemTime,
    ) -> Result<(), CloudError> {
        let started = tags::rewrite(vm.tags(), false, Some(now));
        let joining = settings.join == JoinMode::GuestAgent;
        self.set_tags(vm, tags::with_joining(&started, joining))
            .await
    }

    async fn before_boot(
        &self,
        (vm, settings): &Self::Parked,
        cluster: &str,
        req: &CreateRequest,
    ) -> Result<(), CloudError> {
        self.attach_seed(
            &vm.node,
            vm.vmid,
            cluster,
            &req.name,
            settings,
            &req.user_data,
        )
        .await
    }

    async fn power_on(&self, (vm, _): &Self::Parked, _id: &str) -> Result<(), CloudError> {
        let call = format!("{}/status/start", vm_path(&vm.node, vm.vmid));
        let data = self.inner.api.post(&call, &[]).await?;
        self.await_upid(&format!("POST {call}"), &data).await
    }

    fn started(&self, (vm, settings): &Self::Parked, _id: &str, req: &CreateRequest) {
        tracing::info!(vm = %req.name, vmid = vm.vmid, host = %vm.node, "warm Proxmox VM started");
        if settings.join == JoinMode::GuestAgent {
            self.spawn_join(vm.node.clone(), vm.vmid, req, settings);
        }
    }
}

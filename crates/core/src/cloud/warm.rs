//! Starting a VM out of its group's warm pool, in the one order every provider keeps: read
//! back and refused unless it is the cluster's and parked; its user data rendered for the
//! zone it is in; out of the pool (its start time stamped, its park mark removed); what its
//! boot needs; powered on. Out of the pool before powered on: a crash in between leaves a
//! stopped VM of ours with no Node, which `provisionTimeout` removes, never a warm VM that
//! runs. Rendered before anything changes: user data that does not render leaves the VM
//! parked.

use std::time::SystemTime;

use async_trait::async_trait;

use super::{CloudError, CreateRequest, RenderJoin};

/// The steps of [`start`], in a provider's own terms.
#[async_trait]
pub(crate) trait WarmStart: Sync {
    /// The provider's name, for the error of a render that failed.
    const PROVIDER: &'static str;
    /// The VM as read back, with what the later steps need of it.
    type Parked: Send + Sync;
    /// Reads VM `id` back; refused unless it is `cluster`'s and parked in the pool.
    async fn parked(&self, cluster: &str, id: &str) -> Result<Self::Parked, CloudError>;
    /// The zone its user data is rendered for: exactly what a create of it where it is
    /// would have been given (Proxmox: its host; `None`: the group's shape decides).
    fn zone(&self, vm: &Self::Parked) -> Option<String>;
    /// Takes it out of the pool: its start time `now` stamped, its park mark removed.
    async fn unpark(&self, vm: &Self::Parked, id: &str, now: SystemTime) -> Result<(), CloudError>;
    /// What its boot needs before the power-on (Proxmox: the seed with the user data).
    async fn before_boot(
        &self,
        _vm: &Self::Parked,
        _cluster: &str,
        _req: &CreateRequest,
    ) -> Result<(), CloudError> {
        Ok(())
    }
    /// Powers it on.
    async fn power_on(&self, vm: &Self::Parked, id: &str) -> Result<(), CloudError>;
    /// Started: logged, and what follows the start (Proxmox: the guest-agent join).
    fn started(&self, vm: &Self::Parked, id: &str, req: &CreateRequest);
}

/// Starts warm VM `id` of `cluster` with the request `render` gives for its zone
/// ([`super::CloudProvider::start_warm`]).
pub(crate) async fn start<W: WarmStart>(
    w: &W,
    cluster: &str,
    id: &str,
    render: &RenderJoin<'_>,
) -> Result<(), CloudError> {
    let vm = w.parked(cluster, id).await?;
    let zone = w.zone(&vm);
    let req = render(zone.as_deref()).map_err(|e| CloudError::Other {
        provider: W::PROVIDER.to_string(),
        message: format!("warm VM {id} not started: {e}"),
    })?;
    w.unpark(&vm, id, SystemTime::now()).await?;
    w.before_boot(&vm, cluster, &req).await?;
    w.power_on(&vm, id).await?;
    w.started(&vm, id, &req);
    Ok(())
}

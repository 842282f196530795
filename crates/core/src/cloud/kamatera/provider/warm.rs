//! Warm pools on Kamatera. Whether a server's initialization script runs at its first
//! power-on when it was created powered off is not documented, so a pool server is made
//! as OpenStack's are: created (and booted) with the tag `<prefix>_wfill`, it joins once
//! under the startup taint; once its Node is Ready the planner parks it: powered off,
//! tagged `<prefix>_wpark` (the fill tag removed), then its Node is deleted. A scale-up
//! stamps `<prefix>_s<unix seconds>`, removes the park tag and powers it on; its kubelet
//! registers the Node again.

use super::super::{
    fenced_tag, joined_tag, parse_joined_tag, parse_removing_tag, parse_restarted_tag,
    removing_tag_at, restarted_tag, started_tag, warm_tag,
};
use super::*;

impl KamateraProvider {
    /// Server `id` as listed now with its tags read afresh, refused unless it is
    /// `cluster`'s: the entry, its tags and the tag prefix it is ours under.
    async fn owned_now(
        &self,
        cluster: &str,
        id: &str,
    ) -> Result<(ServerEntry, Vec<String>, String), CloudError> {
        let Some(entry) = self.list_all().await?.into_iter().find(|s| s.id == id) else {
            return Err(CloudError::NotFound {
                provider: PROVIDER.into(),
                what: "server".into(),
                name: id.into(),
                detail: String::new(),
            });
        };
        let tags = self.fresh_tags(id).await?;
        let prefix = match self.owner_prefix(&entry, &tags, cluster) {
            Ok(p) => p.to_string(),
            Err(reason) => return Err(refused(PROVIDER, &entry.name, id, reason)),
        };
        Ok((entry, tags, prefix))
    }

    /// Removes a tag from a server (`POST /server/tags` with `remove`).
    async fn remove_tag(&self, id: &str, tag: &str) -> Result<(), CloudError> {
        let _: Value = self
            .post(
                "POST /server/tags (remove)",
                "/server/tags",
                &json!({ "id": id, "remove": tag }),
            )
            .await?;
        self.lock_tags().remove(id);
        Ok(())
    }

    /// Out of the pool, then powered on ([`crate::cloud::warm`]).
    pub(super) async fn start_parked(
        &self,
        cluster: &str,
        id: &str,
        render: &crate::cloud::RenderJoin<'_>,
    ) -> Result<(), CloudError> {
        crate::cloud::warm::start(self, cluster, id, render).await
    }

    /// Tags the server `<prefix>_j<unix seconds>` (the new mark first, then any older one
    /// removed, so a crash in between leaves a mark); one already at that second is left.
    /// With a time, its removing mark `<prefix>_rm` goes too.
    pub(super) async fn mark_server_joined(
        &self,
        cluster: &str,
        id: &str,
        at: Option<SystemTime>,
    ) -> Result<(), CloudError> {
        let (entry, tags, prefix) = self.owned_now(cluster, id).await?;
        let mark = at.map(|at| joined_tag(&prefix, at)).unwrap_or_default();
        if !mark.is_empty() && !tags.contains(&mark) {
            self.add_tag(id, &mark).await?;
        }
        for old in tags
            .iter()
            .filter(|t| **t != mark && parse_joined_tag(&prefix, t).is_some())
        {
            self.remove_tag(id, old).await?;
        }
        tracing::info!(server = %entry.name, id, joined = at.is_some(), "Kamatera joined mark written");
        // A node let in again is no longer being removed (the joined mark is written
        // first, so a crash in between leaves it marked).
        if at.is_some() {
            let removing: Vec<&String> = tags
                .iter()
                .filter(|t| parse_removing_tag(&prefix, t).is_some())
                .collect();
            for mark in &removing {
                self.remove_tag(id, mark).await?;
            }
            if !removing.is_empty() {
                tracing::info!(server = %entry.name, id, "Kamatera server let in again: its removing mark is taken off");
            }
        }
        // Its node is back: a restart for a lost Node is over.
        if at.is_some() {
            for old in tags
                .iter()
                .filter(|t| parse_restarted_tag(&prefix, t).is_some())
            {
                self.remove_tag(id, old).await?;
            }
        }
        Ok(())
    }

    /// Restarts a server whose Node is gone (see
    /// [`crate::cloud::CloudProvider::restart`]): read back (refused unless `cluster`'s
    /// and powered on), tagged `<prefix>_b<unix seconds>`, then rebooted (the command
    /// awaited). A reboot that fails takes the mark off.
    pub(super) async fn restart_server(
        &self,
        cluster: &str,
        id: &str,
        at: SystemTime,
    ) -> Result<(), CloudError> {
        self.mark_then(cluster, id, restarted_tag, at, Power::Reboot)
            .await
    }

    /// Stops a server whose node is NotReady holding data only it can reach (see
    /// [`crate::cloud::CloudProvider::fence`]): read back (refused unless `cluster`'s and
    /// powered on), tagged `<prefix>_f<unix seconds>`, then powered off by force (its
    /// guest does not answer); a power-off the service refuses takes the tag off again.
    pub(super) async fn fence_server(
        &self,
        cluster: &str,
        id: &str,
        at: SystemTime,
    ) -> Result<(), CloudError> {
        self.mark_then(cluster, id, fenced_tag, at, Power::ForceOff)
            .await
    }

    /// The power command `power` on powered-on server `id` of `cluster`, its mark (`mark`
    /// of the server's tag prefix and `at`) added first and taken off again when the
    /// command fails.
    async fn mark_then(
        &self,
        cluster: &str,
        id: &str,
        mark: fn(&str, SystemTime) -> String,
        at: SystemTime,
        power: Power,
    ) -> Result<(), CloudError> {
        let (entry, _, prefix) = self.owned_now(cluster, id).await?;
        if status_of(entry.power.as_deref()) != ServerStatus::Active {
            let reason = "it is not powered on: powering it on is left to a person".to_string();
            return Err(refused(PROVIDER, &entry.name, id, reason));
        }
        let mark = mark(&prefix, at);
        self.add_tag(id, &mark).await?;
        let done = match power {
            Power::Reboot => self.reboot(id).await,
            Power::ForceOff => self.power_off(id, true).await,
        };
        if let Err(e) = done {
            let _ = self.remove_tag(id, &mark).await;
            return Err(e);
        }
        tracing::info!(server = %entry.name, id, ?power, "Kamatera server power command done");
        Ok(())
    }

    /// Tags the server `<prefix>_b<unix seconds now>` (see
    /// [`crate::cloud::CloudProvider::mark_removing`]), then takes any earlier removing
    /// mark off (the new one first, so a crash in between leaves it marked).
    pub(super) async fn mark_server_removing(
        &self,
        cluster: &str,
        id: &str,
    ) -> Result<(), CloudError> {
        let (entry, tags, prefix) = self.owned_now(cluster, id).await?;
        let mark = removing_tag_at(&prefix, SystemTime::now());
        if !tags.contains(&mark) {
            self.add_tag(id, &mark).await?;
            tracing::info!(server = %entry.name, id, "Kamatera server marked as being removed");
        }
        for old in tags
            .iter()
            .filter(|t| **t != mark && parse_removing_tag(&prefix, t).is_some())
        {
            self.remove_tag(id, old).await?;
        }
        Ok(())
    }

    /// Powered off (gracefully; the command is awaited), then tagged parked: a crash in
    /// between leaves a powered-off server, parked again next cycle while it still
    /// carries a warm tag, else removed by `provisionTimeout`.
    pub(super) async fn park_server(&self, cluster: &str, id: &str) -> Result<(), CloudError> {
        let (entry, tags, prefix) = self.owned_now(cluster, id).await?;
        if status_of(entry.power.as_deref()) != ServerStatus::Stopped {
            self.power_off(id, false).await?;
        }
        self.add_tag(id, &warm_tag(&prefix, false)).await?;
        let filling = warm_tag(&prefix, true);
        if tags.contains(&filling) {
            self.remove_tag(id, &filling).await?;
        }
        tracing::info!(server = %entry.name, id, "Kamatera server powered off and parked in the warm pool");
        Ok(())
    }
}

/// A parked server as read back: the tag prefix it is ours under.
pub(crate) struct Parked {
    prefix: String,
}

#[async_trait]
impl crate::cloud::warm::WarmStart for KamateraProvider {
    const PROVIDER: &'static str = PROVIDER;
    type Parked = Parked;

    async fn parked(&self, cluster: &str, id: &str) -> Result<Parked, CloudError> {
        let (entry, tags, prefix) = self.owned_now(cluster, id).await?;
        let parked = warm_tag(&prefix, false);
        if !tags.contains(&parked) || tags.contains(&warm_tag(&prefix, true)) {
            let reason = format!("it is not parked in the warm pool (no tag {parked})");
            return Err(refused(PROVIDER, &entry.name, id, reason));
        }
        Ok(Parked { prefix })
    }

    /// None, as a create is given (no hosts): the group's shape names the zone (its
    /// datacenter).
    fn zone(&self, _vm: &Self::Parked) -> Option<String> {
        None
    }

    async fn unpark(&self, vm: &Parked, id: &str, now: SystemTime) -> Result<(), CloudError> {
        self.add_tag(id, &started_tag(&vm.prefix, whole_seconds(now)))
            .await?;
        self.remove_tag(id, &warm_tag(&vm.prefix, false)).await
    }

    async fn power_on(&self, _vm: &Parked, id: &str) -> Result<(), CloudError> {
        KamateraProvider::power_on(self, id).await
    }

    fn started(&self, _vm: &Parked, id: &str, req: &CreateRequest) {
        tracing::info!(server = %req.name, id, "warm Kamatera server powered on");
    }
}

/// A power command taken on a server nodewright marks first.
#[derive(Debug, Clone, Copy)]
enum Power {
    /// Its Node is gone: a restart registers it again.
    Reboot,
    /// Its node is NotReady holding data only it can reach: stopped, not asked.
    ForceOff,
}

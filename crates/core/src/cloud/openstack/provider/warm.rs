//! Warm pools on OpenStack. Nova boots a server when it creates it and its user data
//! runs only on that first boot, so a pool server cannot be made stopped: it is created
//! with the warm mark [`WARM_FILLING`] in its metadata, joins once (its Node carries the
//! startup taint, so no pod lands), and once its Node is Ready the planner parks it:
//! `os-stop`, wait for SHUTOFF, mark [`WARM_PARKED`], then its Node is deleted. A
//! scale-up takes it out of the pool and `os-start`s it; its kubelet registers the Node
//! again with its configured labels and the startup taint.
//!
//! Stopped, not shelved: a SHUTOFF server keeps its place on its compute host, so
//! `os-start` is quick and cannot fail for want of a host, while `unshelve` of a
//! shelved-offloaded server schedules it anew (and may find no valid host) and, for an
//! image-backed server, boots it from the snapshot taken at shelve. A pool that frees
//! hypervisor capacity would be slower than creating afresh.

use super::*;
pub(super) use crate::cloud::openstack::nova::{STARTED_KEY, WARM_FILLING, WARM_KEY, WARM_PARKED};
use crate::cloud::refused;

/// How long parking a server waits, after Nova accepted `os-stop`, for it to be SHUTOFF:
/// Nova shuts the guest down gracefully for up to its `shutdown_timeout` (60 s by
/// default), then powers it off.
const STOP_TIMEOUT: Duration = Duration::from_secs(180);

impl OpenStackProvider {
    /// Server `id` read back now, refused unless its metadata names `cluster` (and, with
    /// `parked`, unless it is parked in the warm pool).
    async fn owned(&self, cluster: &str, id: &str, parked: bool) -> Result<Server, CloudError> {
        let Some(server) = self.get_server(cluster, id).await? else {
            return Err(CloudError::NotFound {
                provider: PROVIDER.into(),
                what: "server".into(),
                name: id.into(),
                detail: String::new(),
            });
        };
        check_owned(PROVIDER, &server, cluster)?;
        let in_pool = server.warm && !server.filling;
        if parked && !in_pool {
            let reason =
                format!("it is not parked in the warm pool (no {WARM_KEY}={WARM_PARKED} metadata)");
            return Err(refused(PROVIDER, &server.name, id, reason));
        }
        Ok(server)
    }

    /// `POST /servers/{id}/action` with `{action: null}` (`os-stop`, `os-start`).
    async fn server_action(&self, id: &str, action: &str) -> Result<(), CloudError> {
        let call = format!("POST /servers/{{id}}/action ({action})");
        let body = json!({ action: null });
        let resp = self
            .send(&call, |s| {
                Ok(self.nova(
                    self.http
                        .post(format!("{}/servers/{}/action", s.compute, seg(id)))
                        .json(&body),
                ))
            })
            .await?;
        ensure_success(&call, resp).await.map(|_| ())
    }

    /// Merges `metadata` into the server's (`POST /servers/{id}/metadata`).
    async fn set_metadata(&self, id: &str, metadata: Value) -> Result<(), CloudError> {
        let call = "POST /servers/{id}/metadata";
        let body = json!({ "metadata": metadata });
        let resp = self
            .send(call, |s| {
                Ok(self.nova(
                    self.http
                        .post(format!("{}/servers/{}/metadata", s.compute, seg(id)))
                        .json(&body),
                ))
            })
            .await?;
        ensure_success(call, resp).await.map(|_| ())
    }

    /// Removes metadata `key` (`DELETE /servers/{id}/metadata/{key}`); one already gone
    /// (404) is success.
    async fn delete_metadata(&self, id: &str, key: &str) -> Result<(), CloudError> {
        let call = "DELETE /servers/{id}/metadata/{key}";
        let resp = self
            .send(call, |s| {
                Ok(self.nova(self.http.delete(format!(
                    "{}/servers/{}/metadata/{}",
                    s.compute,
                    seg(id),
                    seg(key)
                ))))
            })
            .await?;
        if resp.status() == reqwest::StatusCode::NOT_FOUND {
            return Ok(());
        }
        ensure_success(call, resp).await.map(|_| ())
    }

    /// Out of the pool, then started ([`crate::cloud::warm`]).
    pub(super) async fn start_parked(
        &self,
        cluster: &str,
        id: &str,
        render: &crate::cloud::RenderJoin<'_>,
    ) -> Result<(), CloudError> {
        crate::cloud::warm::start(self, cluster, id, render).await
    }

    /// Records that the server's node was Ready at `at` (see
    /// [`crate::cloud::CloudProvider::mark_joined`]); kept next to the warm marks, which
    /// are written the same way. A node let in again is no longer being removed: its
    /// removing mark goes (the joined mark first, so a crash in between leaves it marked).
    pub(super) async fn mark_server_joined(
        &self,
        cluster: &str,
        id: &str,
        at: Option<SystemTime>,
    ) -> Result<(), CloudError> {
        let server = self.owned(cluster, id, false).await?;
        let Some(at) = at else {
            if server.joined.is_some() {
                self.delete_metadata(id, crate::cloud::JOINED_TAG).await?;
            }
            return Ok(());
        };
        let secs = crate::model::unix_secs(at);
        if server.joined.map(crate::model::unix_secs) != Some(secs) {
            self.set_metadata(id, json!({ crate::cloud::JOINED_TAG: secs.to_string() }))
                .await?;
            tracing::info!(server = %server.name, id, "OpenStack server marked as joined");
        }
        if server.status == ServerStatus::Removing {
            self.delete_metadata(id, crate::cloud::REMOVING_TAG).await?;
            tracing::info!(server = %server.name, id, "OpenStack server let in again: its removing mark is taken off");
        }
        if server.restarted.is_some() {
            self.delete_metadata(id, crate::cloud::RESTARTED_TAG)
                .await?;
            tracing::info!(server = %server.name, id, "OpenStack server's node is back: its restart mark is taken off");
        }
        Ok(())
    }

    /// Restarts a server whose Node is gone (see
    /// [`crate::cloud::CloudProvider::restart`]): read back (refused unless `cluster`'s
    /// and ACTIVE), marked [`crate::cloud::RESTARTED_TAG`] = Unix seconds, then a soft
    /// reboot (`{"reboot": {"type": "SOFT"}}`: the guest restarts, and Nova makes it
    /// hard if the guest does not answer). A reboot Nova refuses takes the mark off.
    pub(super) async fn restart_server(
        &self,
        cluster: &str,
        id: &str,
        at: SystemTime,
    ) -> Result<(), CloudError> {
        let body = json!({ "reboot": { "type": "SOFT" } });
        self.mark_then(cluster, id, at, crate::cloud::RESTARTED_TAG, "reboot", body)
            .await
    }

    /// Stops a server whose node is NotReady holding data only it can reach (see
    /// [`crate::cloud::CloudProvider::fence`]): read back (refused unless `cluster`'s and
    /// ACTIVE), marked [`crate::cloud::FENCED_TAG`] = Unix seconds, then `os-stop` (Nova
    /// powers it off, hard once the guest does not answer). A stop Nova refuses takes the
    /// mark off.
    pub(super) async fn fence_server(
        &self,
        cluster: &str,
        id: &str,
        at: SystemTime,
    ) -> Result<(), CloudError> {
        let body = json!({ "os-stop": null });
        self.mark_then(cluster, id, at, crate::cloud::FENCED_TAG, "os-stop", body)
            .await
    }

    /// The server action `body` (named `what`) on ACTIVE server `id` of `cluster`, with
    /// metadata `key` = Unix seconds of `at` written first and deleted again when Nova
    /// refuses the action.
    async fn mark_then(
        &self,
        cluster: &str,
        id: &str,
        at: SystemTime,
        key: &str,
        what: &str,
        body: serde_json::Value,
    ) -> Result<(), CloudError> {
        let server = self.owned(cluster, id, false).await?;
        if server.status != ServerStatus::Active {
            let reason = format!(
                "it is {:?}, not ACTIVE: starting it is left to a person",
                server.status
            );
            return Err(refused(PROVIDER, &server.name, id, reason));
        }
        let secs = crate::model::unix_secs(at);
        self.set_metadata(id, json!({ key: secs.to_string() }))
            .await?;
        let call = format!("POST /servers/{{id}}/action ({what})");
        let sent = self
            .send(&call, |s| {
                Ok(self.nova(
                    self.http
                        .post(format!("{}/servers/{}/action", s.compute, seg(id)))
                        .json(&body),
                ))
            })
            .await;
        let done = match sent {
            Ok(resp) => ensure_success(&call, resp).await.map(|_| ()),
            Err(e) => Err(e),
        };
        if let Err(e) = done {
            let _ = self.delete_metadata(id, key).await;
            return Err(e);
        }
        tracing::info!(server = %server.name, id, what, "OpenStack server action taken");
        Ok(())
    }

    /// Marks the server as being removed (see
    /// [`crate::cloud::CloudProvider::mark_removing`]): metadata
    /// [`crate::cloud::REMOVING_TAG`] = Unix seconds now (an earlier mark's time
    /// replaced), after it is read back and found `cluster`'s.
    pub(super) async fn mark_server_removing(
        &self,
        cluster: &str,
        id: &str,
    ) -> Result<(), CloudError> {
        let server = self.owned(cluster, id, false).await?;
        let secs = crate::model::unix_secs(SystemTime::now());
        self.set_metadata(id, json!({ crate::cloud::REMOVING_TAG: secs.to_string() }))
            .await?;
        tracing::info!(server = %server.name, id, "OpenStack server marked as being removed");
        Ok(())
    }

    /// `os-stop` (unless already SHUTOFF), SHUTOFF awaited, then marked parked: a crash
    /// in between leaves a stopped server, parked again by the next cycle if still
    /// marked warm, else removed by `provisionTimeout` like any server with no Node.
    pub(super) async fn park_server(&self, cluster: &str, id: &str) -> Result<(), CloudError> {
        let server = self.owned(cluster, id, false).await?;
        match server.status {
            ServerStatus::Stopped => {}
            ServerStatus::Active => self.server_action(id, "os-stop").await?,
            other_status => {
                return Err(other(format!(
                    "server '{}' ({id}) cannot be stopped into the warm pool while it is {other_status:?}",
                    server.name
                )))
            }
        }
        self.wait_stopped(id).await?;
        self.set_metadata(id, json!({ WARM_KEY: WARM_PARKED }))
            .await?;
        tracing::info!(server = %server.name, id, "OpenStack server stopped and parked in the warm pool");
        Ok(())
    }

    /// Polls `GET /servers/{id}` until Nova shows it SHUTOFF with no task in progress,
    /// for at most [`STOP_TIMEOUT`].
    async fn wait_stopped(&self, id: &str) -> Result<(), CloudError> {
        let judge = |server: Option<&NovaServer>| match server {
            None => Look::Failed(format!("server {id} went away while it was being stopped")),
            Some(s) if s.status.eq_ignore_ascii_case("SHUTOFF") && s.task_state.is_none() => {
                Look::Done
            }
            Some(_) => Look::Waiting,
        };
        let late = ("is not SHUTOFF", "os-stop");
        self.poll_server(id, STOP_TIMEOUT, judge, late).await
    }
}

#[async_trait]
impl crate::cloud::warm::WarmStart for OpenStackProvider {
    const PROVIDER: &'static str = PROVIDER;
    type Parked = Server;

    async fn parked(&self, cluster: &str, id: &str) -> Result<Server, CloudError> {
        self.owned(cluster, id, true).await
    }

    /// None, as a create is given (no hosts): the group's shape names the zone (its
    /// `availabilityZone`, if set).
    fn zone(&self, _vm: &Self::Parked) -> Option<String> {
        None
    }

    async fn unpark(&self, _vm: &Server, id: &str, now: SystemTime) -> Result<(), CloudError> {
        let now = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        self.set_metadata(id, json!({ STARTED_KEY: now.to_string() }))
            .await?;
        self.delete_metadata(id, WARM_KEY).await
    }

    async fn power_on(&self, _vm: &Server, id: &str) -> Result<(), CloudError> {
        self.server_action(id, "os-start").await
    }

    fn started(&self, server: &Server, id: &str, req: &CreateRequest) {
        tracing::info!(server = %req.name, id, name = %server.name, "warm OpenStack server started");
    }
}

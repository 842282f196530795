//! Queued commands: waiting for them, power and terminate (a terminate counts as done
//! when the server list no longer has the server).

use std::time::{Duration, Instant};

use serde_json::json;

use super::api::{
    is_missing_server_error, is_quota_message, CommandId, CommandIds, CommandState, QueueEntry,
    QueueResponse,
};
use super::provider::{other, status_of, KamateraProvider};
use super::PROVIDER;
use crate::cloud::CloudError;
use crate::model::ServerStatus;

impl KamateraProvider {
    /// Polls `GET /service/queue?id=` until the command is `complete` (Ok) or `error`
    /// (Err with its log), or `timeout` passes. When the queue has no entry for the
    /// command and `server_name` is given, a server of that name that is powered on
    /// counts as done (the queue does not always report finished commands).
    pub async fn wait_command(
        &self,
        what: &str,
        id: &CommandId,
        timeout: Duration,
        server_name: Option<&str>,
    ) -> Result<QueueEntry, CloudError> {
        let started = Instant::now();
        let mut delay = self.options.poll_initial;
        let mut last = String::from("pending");
        let mut empty_answers = 0u32;
        loop {
            let remaining = timeout.saturating_sub(started.elapsed());
            if remaining.is_zero() {
                return Err(other(format!(
                    "{what}: command {id} did not finish within {} (last status: {last})",
                    humantime::format_duration(timeout)
                )));
            }
            tokio::time::sleep(delay.min(remaining)).await;
            delay = (delay * 2).min(self.options.poll_max);
            let answer: Result<QueueResponse, CloudError> = self
                .send(
                    "GET /service/queue",
                    reqwest::Method::GET,
                    "/service/queue",
                    Some(&[("id", id.0.as_str())]),
                    None,
                )
                .await;
            let entry = match answer {
                Ok(r) => r.entry(id),
                Err(e @ CloudError::Auth { .. }) => return Err(e),
                Err(e) => {
                    tracing::warn!(command = %id, error = %e, "polling the Kamatera queue failed; retrying");
                    last = format!("poll failed: {e}");
                    continue;
                }
            };
            match entry.as_ref().map(QueueEntry::state) {
                Some(CommandState::Complete) => {
                    tracing::debug!(command = %id, what, "Kamatera command complete");
                    return entry.ok_or_else(|| other("unreachable".into()));
                }
                Some(CommandState::Failed { log }) => {
                    let message = format!("{what}: command {id} failed: {log}");
                    return Err(if is_quota_message(&log) {
                        CloudError::Quota {
                            provider: PROVIDER.into(),
                            message,
                        }
                    } else {
                        other(message)
                    });
                }
                Some(CommandState::Running(s)) => last = s,
                None => {
                    empty_answers += 1;
                    last = "not in the queue".into();
                    if let (Some(name), true) = (server_name, empty_answers >= 3) {
                        let servers = self.list_all().await?;
                        if servers.iter().any(|s| {
                            s.name == name && status_of(s.power.as_deref()) == ServerStatus::Active
                        }) {
                            tracing::debug!(command = %id, server = name, "queue has no entry; the server is up");
                            return Ok(QueueEntry {
                                id: Some(id.clone()),
                                status: Some("complete".into()),
                                log: None,
                                description: None,
                                server: Some(name.to_string()),
                            });
                        }
                    }
                }
            }
        }
    }

    pub(super) async fn wait_all(
        &self,
        what: &str,
        ids: &CommandIds,
        timeout: Duration,
        server_name: Option<&str>,
    ) -> Result<(), CloudError> {
        for id in &ids.0 {
            self.wait_command(what, id, timeout, server_name).await?;
        }
        Ok(())
    }

    /// Powers a server on and waits for the command.
    pub async fn power_on(&self, id: &str) -> Result<(), CloudError> {
        let ids: CommandIds = self
            .post(
                "POST /service/server/poweron",
                "/service/server/poweron",
                &json!({ "id": id }),
            )
            .await?;
        self.wait_all(
            &format!("power on {id}"),
            &ids,
            self.options.command_timeout,
            None,
        )
        .await
    }

    /// Reboots a powered-on server and waits for the command.
    pub async fn reboot(&self, id: &str) -> Result<(), CloudError> {
        let ids: CommandIds = self
            .post(
                "POST /service/server/reboot",
                "/service/server/reboot",
                &json!({ "id": id }),
            )
            .await?;
        self.wait_all(
            &format!("reboot {id}"),
            &ids,
            self.options.command_timeout,
            None,
        )
        .await
    }

    /// Powers a server off (`force` skips the graceful shutdown) and waits for the command.
    pub async fn power_off(&self, id: &str, force: bool) -> Result<(), CloudError> {
        let ids: CommandIds = self
            .post(
                "POST /service/server/poweroff",
                "/service/server/poweroff",
                &json!({ "id": id, "force": force }),
            )
            .await?;
        self.wait_all(
            &format!("power off {id}"),
            &ids,
            self.options.command_timeout,
            None,
        )
        .await
    }

    /// Terminates a server (forced, even if powered on) and waits for the command.
    /// A server that no longer exists is success.
    ///
    /// "No longer exists" is decided by the account's server list, not by the error text:
    /// the service passes an id on to the console unchecked, and what the console answers
    /// for an unknown id is not public (see [`is_missing_server_error`] for the answers
    /// that are recognised, which only change what is logged). So when the terminate call
    /// or its command fails for any reason but authentication, `GET /service/servers` is
    /// read: a server not listed is gone (success); a listed one, or a list that cannot be
    /// read, keeps the original error (the next cycle retries).
    pub async fn terminate(&self, id: &str) -> Result<(), CloudError> {
        let e = match self.terminate_and_wait(id).await {
            Ok(()) => {
                self.forget(id);
                return Ok(());
            }
            Err(e @ CloudError::Auth { .. }) => return Err(e),
            Err(e) => e,
        };
        let said_missing = matches!(&e, CloudError::Api { status, message, .. } if is_missing_server_error(*status, message));
        match self.list_all().await {
            Ok(servers) if !servers.iter().any(|s| s.id == id) => {
                if said_missing {
                    tracing::debug!(id, answer = %e, "Kamatera server already gone");
                } else {
                    tracing::info!(id, answer = %e, "the terminate failed, but the Kamatera server is no longer listed: counted as deleted");
                }
                self.forget(id);
                Ok(())
            }
            Ok(_) => Err(e),
            Err(list_error) => {
                tracing::warn!(id, error = %list_error, "cannot list Kamatera servers to check whether a server that failed to terminate is gone");
                Err(e)
            }
        }
    }

    /// `POST /service/server/terminate` (forced) and the wait for its command.
    async fn terminate_and_wait(&self, id: &str) -> Result<(), CloudError> {
        let ids: CommandIds = self
            .post(
                "POST /service/server/terminate",
                "/service/server/terminate",
                &json!({ "id": id, "force": true }),
            )
            .await?;
        self.wait_all(
            &format!("terminate {id}"),
            &ids,
            self.options.command_timeout,
            None,
        )
        .await
    }
}

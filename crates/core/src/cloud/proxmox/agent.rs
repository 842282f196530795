//! Joining through the QEMU guest agent: wait for `agent/ping`, `agent/file-write` the
//! rendered script, `agent/exec` it (command as an array), poll `agent/exec-status`.
//!
//! Only a known failure fails the join ([`JoinError::Failed`]: the agent never answered,
//! the script could not be written, or it exited non-zero); a call whose outcome is
//! unknown (the exec call itself failing or dropped, its status unreadable until the
//! deadline, the script still running) is [`JoinError::Unknown`]: the script may have
//! run, the node may join, so the VM is never destroyed for it; `provisionTimeout`
//! judges it as any VM that has not joined.

use std::time::{Duration, Instant};

use super::allocate::vm_path;
use super::client::{params, Api};
use super::other;
use crate::cloud::CloudError;

/// `agent/file-write` accepts at most this many characters of content.
pub const MAX_SCRIPT_LEN: usize = 61440;

/// Timings of a guest-agent join.
#[derive(Debug, Clone)]
pub struct JoinTimings {
    /// How long to wait for the agent to answer after the VM started.
    pub agent_timeout: Duration,
    /// How long the script may run.
    pub exec_timeout: Duration,
    pub poll: Duration,
}

fn excerpt(s: &str) -> String {
    let t = s.trim();
    let tail: String = t
        .chars()
        .rev()
        .take(400)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    if tail.len() < t.len() {
        format!("...{tail}")
    } else {
        tail
    }
}

/// How a guest-agent join did not finish.
#[derive(Debug)]
pub enum JoinError {
    /// The script did not run, or ran and failed: the VM will not join.
    Failed(CloudError),
    /// Whether the script ran, or how it ended, is not known.
    Unknown(CloudError),
}

/// Tries of `agent/file-write`: writing the same file again is harmless.
const FILE_WRITE_TRIES: usize = 3;

/// Runs `script` in VM `vmid` on `node` as `/bin/sh <path>`; errors unless it exits 0,
/// telling a known failure from an unknown outcome.
pub async fn run_join_script(
    api: &Api,
    node: &str,
    vmid: u32,
    script: &str,
    path: &str,
    t: &JoinTimings,
) -> Result<(), JoinError> {
    let base = vm_path(node, vmid);
    let deadline = Instant::now() + t.agent_timeout;
    loop {
        match api.post(&format!("{base}/agent/ping"), &[]).await {
            Ok(_) => break,
            Err(e) => {
                if Instant::now() >= deadline {
                    return Err(JoinError::Failed(other(format!(
                        "VM {vmid}: the QEMU guest agent did not answer within {} (is qemu-guest-agent installed and enabled in the template?): {e}",
                        humantime::format_duration(t.agent_timeout)
                    ))));
                }
                tracing::debug!(vmid, error = %e, "guest agent not answering yet");
            }
        }
        tokio::time::sleep(t.poll).await;
    }
    let mut written = Err(other("not tried"));
    for _ in 0..FILE_WRITE_TRIES {
        written = api
            .post(
                &format!("{base}/agent/file-write"),
                &params([("file", path.to_string()), ("content", script.to_string())]),
            )
            .await;
        if written.is_ok() {
            break;
        }
        tokio::time::sleep(t.poll).await;
    }
    written.map_err(JoinError::Failed)?;
    // Not repeated: an exec whose answer was lost may have started the script.
    let started = api
        .post(
            &format!("{base}/agent/exec"),
            &params([
                ("command", "/bin/sh".to_string()),
                ("command", path.to_string()),
            ]),
        )
        .await
        .map_err(JoinError::Unknown)?;
    let pid = started["pid"].as_i64().ok_or_else(|| {
        JoinError::Unknown(other(format!(
            "VM {vmid}: agent/exec returned no pid: {started}"
        )))
    })?;
    let deadline = Instant::now() + t.exec_timeout;
    let mut last_error: Option<CloudError>;
    loop {
        let status = api
            .get(
                &format!("{base}/agent/exec-status"),
                &params([("pid", pid.to_string())]),
            )
            .await;
        match status {
            Ok(st) => {
                last_error = None;
                let exited =
                    st["exited"].as_bool().unwrap_or(false) || st["exited"].as_i64() == Some(1);
                if exited {
                    let code = st["exitcode"].as_i64();
                    if code == Some(0) {
                        tracing::info!(vmid, "join script finished");
                        return Ok(());
                    }
                    let how = match (code, st["signal"].as_i64()) {
                        (Some(c), _) => format!("exit code {c}"),
                        (None, Some(s)) => format!("signal {s}"),
                        _ => "an unknown status".to_string(),
                    };
                    return Err(JoinError::Failed(other(format!(
                        "VM {vmid}: join script {path} failed with {how}; stderr: {}",
                        excerpt(st["err-data"].as_str().unwrap_or(""))
                    ))));
                }
            }
            // Read again until the deadline: one lost answer says nothing of the script.
            Err(e) => {
                tracing::debug!(vmid, error = %e, "join script status not readable; asking again");
                last_error = Some(e);
            }
        }
        if Instant::now() >= deadline {
            let why = match last_error {
                Some(e) => format!("its status could not be read: {e}"),
                None => "it is still running".to_string(),
            };
            return Err(JoinError::Unknown(other(format!(
                "VM {vmid}: join script {path} not seen to finish within {}: {why}",
                humantime::format_duration(t.exec_timeout)
            ))));
        }
        tokio::time::sleep(t.poll).await;
    }
}

//! Proxmox tasks: UPIDs and awaiting them with a deadline.

use std::time::{Duration, Instant};

use serde_json::Value;

use super::client::Api;
use super::{other, seg};
use crate::cloud::CloudError;

/// The parts of a UPID (`UPID:node:pid:pstart:starttime:type:id:user:`) the client needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upid {
    pub raw: String,
    pub node: String,
    pub kind: String,
    pub id: String,
}

impl Upid {
    pub fn parse(s: &str) -> Option<Upid> {
        let parts: Vec<&str> = s.split(':').collect();
        if parts.len() < 9 || parts[0] != "UPID" || parts[1].is_empty() {
            return None;
        }
        Some(Upid {
            raw: s.to_string(),
            node: parts[1].to_string(),
            kind: parts[5].to_string(),
            id: parts[6].to_string(),
        })
    }
}

impl std::fmt::Display for Upid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "task {} of {} on {} ({})",
            self.kind, self.id, self.node, self.raw
        )
    }
}

/// Reads a UPID from an API response (`data` is the UPID string).
pub fn upid_of(call: &str, data: &Value) -> Result<Upid, CloudError> {
    data.as_str()
        .and_then(Upid::parse)
        .ok_or_else(|| other(format!("{call}: expected a task UPID, got {data}")))
}

/// Polls the task until it stops; its `exitstatus` must be `OK` (or `WARNINGS: n`).
pub async fn wait_task(
    api: &Api,
    upid: &Upid,
    timeout: Duration,
    poll: Duration,
) -> Result<(), CloudError> {
    let deadline = Instant::now() + timeout;
    let path = format!("/nodes/{}/tasks/{}/status", seg(&upid.node), seg(&upid.raw));
    let mut pause = poll.min(Duration::from_millis(100));
    loop {
        let status = api.get(&path, &[]).await?;
        if status["status"].as_str() == Some("stopped") {
            let exit = status["exitstatus"].as_str().unwrap_or("(no exit status)");
            if exit == "OK" {
                return Ok(());
            }
            if exit.starts_with("WARNINGS") {
                tracing::warn!(task = %upid, exitstatus = exit, "Proxmox task finished with warnings");
                return Ok(());
            }
            return Err(other(format!("{upid} failed: exit status '{exit}'")));
        }
        if Instant::now() >= deadline {
            return Err(other(format!(
                "{upid} still running after {}",
                humantime::format_duration(timeout)
            )));
        }
        // Short tasks finish fast: start polling quickly, back off to `poll`.
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(poll);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_upids() {
        let u = Upid::parse("UPID:pve1:0000ABCD:0012F00D:6650A1B2:qmclone:9000:nw@pve!auto:")
            .expect("valid");
        assert_eq!(u.node, "pve1");
        assert_eq!(u.kind, "qmclone");
        assert_eq!(u.id, "9000");
        assert!(Upid::parse("UPID:x").is_none());
        assert!(Upid::parse("nope:pve1:1:2:3:a:b:c:").is_none());
    }
}

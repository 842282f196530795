//! Proxmox tasks: UPIDs and awaiting them with a deadline.

use std::collections::HashSet;
use std::sync::Mutex as StdMutex;
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

/// How long a task may run. A task is given up at `nominal` unless its log grew within
/// the last `stall`, and never runs past `max`: a clone that keeps copying is waited
/// for, a stuck one is not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskDeadline {
    pub nominal: Duration,
    pub max: Duration,
    pub stall: Duration,
}

impl TaskDeadline {
    /// A plain timeout: no extension for progress.
    pub fn fixed(timeout: Duration) -> Self {
        TaskDeadline {
            nominal: timeout,
            max: timeout,
            stall: timeout,
        }
    }

    /// Whether a task running for `elapsed`, whose log last grew `since_progress` ago
    /// (or, with no growth yet, `elapsed` ago), is to be given up now.
    pub fn expired(&self, elapsed: Duration, since_progress: Duration) -> bool {
        elapsed >= self.max || (elapsed >= self.nominal && since_progress >= self.stall)
    }

    /// Only a deadline that can extend needs the log read on every poll.
    fn follows_progress(&self) -> bool {
        self.max > self.nominal
    }

    /// Why a task running for `elapsed` was given up, for its error.
    pub(super) fn why_given_up(&self, elapsed: Duration) -> String {
        if elapsed >= self.max {
            format!(
                "still running after {}, its hard maximum",
                humantime::format_duration(self.max)
            )
        } else if self.follows_progress() {
            format!(
                "still running after {} with no progress in its log for {}",
                humantime::format_duration(self.nominal),
                humantime::format_duration(self.stall)
            )
        } else {
            format!(
                "still running after {}",
                humantime::format_duration(self.nominal)
            )
        }
    }
}

/// Stops a task given up (`DELETE .../tasks/{upid}`); a failure is only logged, as the
/// task's own deadline error says more.
pub(super) async fn stop_task(api: &Api, upid: &Upid) {
    let stop = format!("/nodes/{}/tasks/{}", seg(&upid.node), seg(&upid.raw));
    if let Err(e) = api.delete(&stop, &[]).await {
        tracing::warn!(task = %upid, error = %e, "could not stop a task given up");
    }
}

/// UPIDs this process is following right now; a look at the hosts' task lists leaves
/// them to the call that follows them.
#[derive(Default)]
pub struct Following(StdMutex<HashSet<String>>);

impl Following {
    pub(super) fn contains(&self, upid: &str) -> bool {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(upid)
    }

    /// Marks `upid` as followed until the guard is dropped.
    pub(super) fn hold(&self, upid: &Upid) -> FollowGuard<'_> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(upid.raw.clone());
        FollowGuard {
            set: self,
            upid: upid.raw.clone(),
        }
    }
}

pub(super) struct FollowGuard<'a> {
    set: &'a Following,
    upid: String,
}

impl Drop for FollowGuard<'_> {
    fn drop(&mut self) {
        self.set
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.upid);
    }
}

/// A running task as the host's task list shows it.
#[derive(Debug, Clone)]
pub(super) struct ListedTask {
    pub upid: Upid,
    /// Unix seconds, the host's clock.
    pub starttime: u64,
}

/// The clone tasks running on `node` started by `user`
/// (`GET /nodes/{node}/tasks?typefilter=qmclone&source=active&userfilter=...`). Proxmox
/// matches `userfilter` as a substring, so the user is compared again here.
pub(super) async fn running_clones(
    api: &Api,
    node: &str,
    user: &str,
) -> Result<Vec<ListedTask>, CloudError> {
    let path = format!("/nodes/{}/tasks", seg(node));
    let data = api
        .get(
            &path,
            &[
                ("typefilter".to_string(), "qmclone".to_string()),
                ("source".to_string(), "active".to_string()),
                ("userfilter".to_string(), user.to_string()),
                ("limit".to_string(), "500".to_string()),
            ],
        )
        .await?;
    Ok(data
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .filter(|t| t.get("endtime").is_none_or(Value::is_null))
        .filter_map(|t| {
            let upid = Upid::parse(t["upid"].as_str()?)?;
            let user_of = t["user"].as_str()?;
            (upid.kind == "qmclone" && user_of == user).then(|| ListedTask {
                starttime: t["starttime"].as_u64().unwrap_or(0),
                upid,
            })
        })
        .collect())
}

/// Lines of a task's log kept for an error message.
const LOG_TAIL: usize = 5;

/// What has been read of a task's log so far.
#[derive(Default)]
pub(super) struct LogSeen {
    lines: usize,
    tail: Vec<String>,
}

impl LogSeen {
    /// Reads the lines after those seen; true when there were any (the task progressed).
    pub(super) async fn read_more(&mut self, api: &Api, upid: &Upid) -> Result<bool, CloudError> {
        let path = format!("/nodes/{}/tasks/{}/log", seg(&upid.node), seg(&upid.raw));
        let mut grew = false;
        // Bounded: a task log read 500 lines a call, at most 20 calls a poll.
        for _ in 0..20 {
            let data = api
                .get(
                    &path,
                    &[
                        ("start".to_string(), self.lines.to_string()),
                        ("limit".to_string(), "500".to_string()),
                    ],
                )
                .await?;
            let got = self.take(&data);
            grew |= got > 0;
            if got < 500 {
                break;
            }
        }
        Ok(grew)
    }

    /// Takes the lines of one log answer (`[{n, t}]`, `n` counting from 1) that are new;
    /// Proxmox's placeholder for an empty log (`n` 1, "no content") is not a line.
    fn take(&mut self, data: &Value) -> usize {
        let mut got = 0;
        for line in data.as_array().map(Vec::as_slice).unwrap_or_default() {
            let n = line["n"].as_u64().unwrap_or(0) as usize;
            let text = line["t"].as_str().unwrap_or_default();
            if n <= self.lines || (n == 1 && text == "no content") {
                continue;
            }
            self.lines = n;
            got += 1;
            self.tail.push(text.to_string());
            if self.tail.len() > LOG_TAIL {
                self.tail.remove(0);
            }
        }
        got
    }

    /// The last lines, for an error message; `TASK ERROR: ...` repeats the exit status.
    pub(super) fn tail_text(&self) -> String {
        let lines: Vec<&str> = self
            .tail
            .iter()
            .map(String::as_str)
            .filter(|l| !l.starts_with("TASK ERROR:") && !l.trim().is_empty())
            .collect();
        if lines.is_empty() {
            String::new()
        } else {
            format!("; last log lines: {}", lines.join(" | "))
        }
    }
}

/// Polls the task until it stops; its `exitstatus` must be `OK` (or `WARNINGS: n`).
pub async fn wait_task(
    api: &Api,
    upid: &Upid,
    timeout: Duration,
    poll: Duration,
) -> Result<(), CloudError> {
    follow_task(api, upid, TaskDeadline::fixed(timeout), poll).await
}

/// Polls the task until it stops, its deadline following its log (see [`TaskDeadline`]).
/// A failed task's error carries its exit status and the last lines of its log; a task
/// given up is stopped (`DELETE .../tasks/{upid}`), so a clone cannot finish unseen.
pub async fn follow_task(
    api: &Api,
    upid: &Upid,
    deadline: TaskDeadline,
    poll: Duration,
) -> Result<(), CloudError> {
    let started = Instant::now();
    let mut progressed = started;
    let mut log = LogSeen::default();
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
            // The log is best effort: the exit status alone still says what failed.
            if let Err(e) = log.read_more(api, upid).await {
                tracing::debug!(task = %upid, error = %e, "could not read the log of a failed task");
            }
            return Err(other(format!(
                "{upid} failed: exit status '{exit}'{}",
                log.tail_text()
            )));
        }
        if deadline.follows_progress() && log.read_more(api, upid).await? {
            progressed = Instant::now();
        }
        let elapsed = started.elapsed();
        if deadline.expired(elapsed, progressed.elapsed()) {
            let why = deadline.why_given_up(elapsed);
            stop_task(api, upid).await;
            return Err(other(format!(
                "{upid} {why}; stopped it{}",
                log.tail_text()
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

    #[test]
    fn a_task_is_given_up_at_nominal_unless_its_log_grew_and_never_past_max() {
        let m = Duration::from_secs(60);
        let d = TaskDeadline {
            nominal: 10 * m,
            max: 30 * m,
            stall: 2 * m,
        };
        // (elapsed, since the log last grew, given up)
        let cases = [
            (9 * m, 9 * m, false),
            (10 * m, 10 * m, true),
            (10 * m, m, false),
            (20 * m, m, false),
            (20 * m, 2 * m, true),
            (30 * m, Duration::ZERO, true),
        ];
        for (elapsed, since, want) in cases {
            assert_eq!(d.expired(elapsed, since), want, "{elapsed:?} {since:?}");
        }
        let f = TaskDeadline::fixed(10 * m);
        assert!(!f.follows_progress());
        assert!(!f.expired(9 * m, Duration::ZERO));
        assert!(f.expired(10 * m, Duration::ZERO));
    }

    #[test]
    fn log_lines_are_counted_once_and_the_empty_placeholder_is_none() {
        let mut seen = LogSeen::default();
        assert_eq!(
            seen.take(&serde_json::json!([{"n": 1, "t": "no content"}])),
            0
        );
        let first = serde_json::json!([{"n": 1, "t": "create full clone"}, {"n": 2, "t": "transferred 1 of 8"}]);
        assert_eq!(seen.take(&first), 2);
        assert_eq!(seen.take(&first), 0);
        let more: Vec<_> = (3..=9)
            .map(|n| serde_json::json!({"n": n, "t": format!("line {n}")}))
            .chain([serde_json::json!({"n": 10, "t": "TASK ERROR: storage full"})])
            .collect();
        assert_eq!(seen.take(&Value::Array(more)), 8);
        assert_eq!(
            seen.tail_text(),
            "; last log lines: line 6 | line 7 | line 8 | line 9"
        );
    }
}

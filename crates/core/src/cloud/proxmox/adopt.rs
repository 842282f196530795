//! Clones another process started and no longer follows (it was killed; another replica
//! carries on). The loop keeps no state, so they are found again through the hosts' task
//! lists and judged by the same task-aware deadline as a clone followed from its start:
//! one that keeps logging runs on past `provisionTimeout` (up to `provisionTimeoutMax`),
//! a stuck one is stopped. The UPID, the start time and the log all come back from
//! Proxmox; only how long the log has not grown is measured here, from the moment this
//! process first reads it (Proxmox does not time log lines), so after a restart a stuck
//! clone is stopped at most one progress window later than it would have been.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Mutex as StdMutex;
use std::time::{Duration, Instant, SystemTime};

use super::allocate::VmResource;
use super::client::Api;
use super::seg;
use super::tasks::{running_clones, stop_task, Following, ListedTask, LogSeen, TaskDeadline};
use crate::cloud::CloudError;

/// A clone of someone gone, as far as this process has read it.
struct Watched {
    task: ListedTask,
    log: LogSeen,
    progressed: Instant,
}

/// The clones this process judges without having started them, by UPID.
#[derive(Default)]
pub(super) struct Adopted(StdMutex<HashMap<String, Watched>>);

impl Adopted {
    fn take(&self, upid: &str) -> Option<Watched> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(upid)
    }

    fn put(&self, w: Watched) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(w.task.upid.raw.clone(), w);
    }

    /// Those watched that are not in `running` any more.
    fn ended(&self, running: &HashSet<String>) -> Vec<Watched> {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let gone: Vec<String> = map
            .keys()
            .filter(|k| !running.contains(*k))
            .cloned()
            .collect();
        gone.into_iter().filter_map(|k| map.remove(&k)).collect()
    }
}

/// What judging the clones of processes gone found.
#[derive(Default)]
pub(super) struct Judged {
    /// Stopped or failed clones, with the task's words, for the plan and an Event.
    pub found: Vec<String>,
    /// Those still running (not stopped now): each is a VM in provisioning (see
    /// `ProxmoxProvider::clones_in_flight`).
    pub running: Vec<ListedTask>,
}

/// Looks at the clone tasks running under this process's Proxmox user that nothing here
/// follows, and stops those past their deadline. A host whose task list cannot be read
/// fails the whole listing: its clones would otherwise count for nothing. Costs no call
/// unless some VM is locked for a clone; then one task-list read per host that holds
/// such a VM that can be ours.
///
/// The same Proxmox user may clone for other purposes (a person with the same token, a
/// script): a task counts only when it can be tied to a VM of `cluster`. Its source is a
/// template one of `templates` (the templates this process's groups clone), and on its
/// host a VM locked for a clone shows our naming (`<cluster>-...`) or no name yet (a
/// clone copying its first disk shows none, see `clones_in_flight`): at most as many
/// tasks of a host are judged as it holds such VMs, oldest first. A person's clone
/// named otherwise, of another template, or on a host with none of our clones is never
/// stopped.
#[allow(clippy::too_many_arguments)]
pub(super) async fn judge_clones(
    api: &Api,
    following: &Following,
    adopted: &Adopted,
    deadline: TaskDeadline,
    vms: &[VmResource],
    templates: &HashSet<u32>,
    cluster: &str,
    read_only: bool,
) -> Result<Judged, CloudError> {
    let mut found = Vec::new();
    let mut still = Vec::new();
    let cloning = vms.iter().any(|v| v.lock.as_deref() == Some("clone"));
    let mut running = HashSet::new();
    if cloning {
        // A clone's task runs on the template's host; the new VM may be listed on either.
        let hosts: BTreeSet<&str> = vms
            .iter()
            .filter(|v| v.template || v.lock.as_deref() == Some("clone"))
            .map(|v| v.node.as_str())
            .collect();
        let me = api.identity().to_string();
        for host in hosts {
            let ours_here = vms
                .iter()
                .filter(|v| ours_cloning(v, host, cluster))
                .count();
            if ours_here == 0 {
                continue;
            }
            // Unread, a clone of ours would count for nothing and be made again: the
            // listing fails instead, and the provider keeps its last known VMs.
            let mut tasks = running_clones(api, host, &me).await.map_err(|e| {
                CloudError::Other {
                    provider: super::PROVIDER.into(),
                    message: format!("host {host} holds a VM locked for a clone, and its task list, which says whether the clone is nodewright's, could not be read: {e}"),
                }
            })?;
            tasks.retain(|t| {
                t.upid
                    .id
                    .parse::<u32>()
                    .is_ok_and(|id| templates.contains(&id))
                    && !following.contains(&t.upid.raw)
            });
            tasks.sort_by_key(|t| (t.starttime, t.upid.raw.clone()));
            for t in tasks.into_iter().take(ours_here) {
                running.insert(t.upid.raw.clone());
                match judge_one(api, adopted, deadline, t.clone(), read_only).await {
                    Some(said) => found.push(said),
                    None => still.push(t),
                }
            }
        }
    }
    for w in adopted.ended(&running) {
        found.extend(report_end(api, &w).await);
    }
    Ok(Judged {
        found,
        running: still,
    })
}

/// Whether `v` is a VM on `host` locked for a clone that can be ours: nameless (its first
/// disk is still copying) or named like the VMs of `cluster`.
fn ours_cloning(v: &VmResource, host: &str, cluster: &str) -> bool {
    !v.template
        && v.node == host
        && v.lock.as_deref() == Some("clone")
        && v.name.as_deref().is_none_or(|n| {
            n.is_empty() || n == format!("VM {}", v.vmid) || n.starts_with(&format!("{cluster}-"))
        })
}

/// Reads the log of one clone and stops it when its deadline has passed (saying so);
/// `read_only`, only logs that it would.
async fn judge_one(
    api: &Api,
    adopted: &Adopted,
    deadline: TaskDeadline,
    task: ListedTask,
    read_only: bool,
) -> Option<String> {
    let now = Instant::now();
    let mut w = adopted.take(&task.upid.raw).unwrap_or_else(|| {
        tracing::info!(task = %task.upid, "following a clone another process started");
        Watched {
            task,
            log: LogSeen::default(),
            // Seen for the first time: it counts as progress now.
            progressed: now,
        }
    });
    match w.log.read_more(api, &w.task.upid).await {
        Ok(true) => w.progressed = now,
        Ok(false) => {}
        Err(e) => {
            tracing::debug!(task = %w.task.upid, error = %e, "could not read the clone's log")
        }
    }
    let started = SystemTime::UNIX_EPOCH + Duration::from_secs(w.task.starttime);
    let elapsed = SystemTime::now()
        .duration_since(started)
        .unwrap_or_default();
    if deadline.expired(elapsed, w.progressed.elapsed()) && read_only {
        let why = deadline.why_given_up(elapsed);
        tracing::info!(task = %w.task.upid, "clone started by an earlier process {why}; read-only, so not stopped");
    } else if deadline.expired(elapsed, w.progressed.elapsed()) {
        let why = deadline.why_given_up(elapsed);
        stop_task(api, &w.task.upid).await;
        let said = format!(
            "clone {} (started by an earlier process) {why}; stopped it{}",
            w.task.upid,
            w.log.tail_text()
        );
        tracing::warn!("proxmox: {said}");
        return Some(said);
    }
    adopted.put(w);
    None
}

/// A clone watched here that is no longer running: a failure is told with its exit
/// status and the last lines of its log.
async fn report_end(api: &Api, w: &Watched) -> Option<String> {
    let upid = &w.task.upid;
    let path = format!("/nodes/{}/tasks/{}/status", seg(&upid.node), seg(&upid.raw));
    let exit = match api.get(&path, &[]).await {
        Ok(s) => s["exitstatus"].as_str().unwrap_or_default().to_string(),
        Err(e) => {
            tracing::debug!(task = %upid, error = %e, "could not read how a clone ended");
            return None;
        }
    };
    if exit == "OK" || exit.is_empty() || exit.starts_with("WARNINGS") {
        tracing::info!(task = %upid, "a clone another process started has finished");
        return None;
    }
    let mut log = LogSeen::default();
    if let Err(e) = log.read_more(api, upid).await {
        tracing::debug!(task = %upid, error = %e, "could not read the log of a failed clone");
    }
    let said = format!(
        "clone {upid} (started by an earlier process) failed: exit status '{exit}'{}",
        log.tail_text()
    );
    tracing::warn!("proxmox: {said}");
    Some(said)
}

//! Tasks and what they do when they end: clone, config, start, stop, destroy; the
//! guest's boot and its agent's `exec`.

use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::json;

use super::reply::{data, fail};
use super::{now_secs, Exec, Shared, Task, MIB};
use crate::cloud::proxmox::tags;
use crate::faults::HalfDone;
use crate::VmEvent;

/// `GET /nodes/{node}/tasks`: the node's tasks, newest first, as Proxmox filters them:
/// `typefilter` and `vmid` (the UPID's id) exactly, `userfilter` as a case-insensitive
/// substring, `source` active (running), archive (ended, the default) or all, `errors`
/// only those that failed, `since`/`until` on the start time, then `start` and `limit`
/// (default 50). A running task has no `endtime` and the status `RUNNING`; an ended one
/// its exit status.
pub(super) fn list(
    shared: &Arc<Shared>,
    node: &str,
    get: &dyn Fn(&str) -> Option<String>,
) -> Response {
    let num = |k: &str| get(k).and_then(|v| v.parse::<u64>().ok());
    let flag = |k: &str| get(k).is_some_and(|v| v == "1" || v == "true");
    let source = get("source").unwrap_or_else(|| "archive".into());
    let user = get("userfilter").map(|u| u.to_lowercase());
    finish_clones_if_asked(shared);
    let st = shared.lock();
    let mut tasks: Vec<&Task> = st
        .tasks
        .values()
        .filter(|t| t.node == node)
        .filter(|t| match source.as_str() {
            "active" => t.running,
            "all" => true,
            _ => !t.running,
        })
        .filter(|t| get("typefilter").is_none_or(|k| t.kind == k))
        .filter(|t| get("vmid").is_none_or(|id| t.id == id))
        .filter(|t| {
            user.as_ref()
                .is_none_or(|u| t.user.to_lowercase().contains(u))
        })
        .filter(|t| !flag("errors") || t.exitstatus.as_deref().is_some_and(|e| e != "OK"))
        .filter(|t| num("since").is_none_or(|s| t.starttime >= s))
        .filter(|t| num("until").is_none_or(|u| t.starttime <= u))
        .collect();
    tasks.sort_by_key(|t| std::cmp::Reverse((t.starttime, t.pid)));
    let start = num("start").unwrap_or(0) as usize;
    let limit = num("limit").unwrap_or(50) as usize;
    let out: Vec<serde_json::Value> = tasks
        .into_iter()
        .skip(start)
        .take(limit)
        .map(|t| {
            let mut v = json!({
                "upid": t.upid, "node": t.node, "pid": t.pid, "pstart": 1234567,
                "starttime": t.starttime, "type": t.kind, "id": t.id, "user": t.user,
            });
            match (&t.exitstatus, t.endtime) {
                (Some(e), Some(end)) => {
                    v["status"] = json!(e);
                    v["endtime"] = json!(end);
                }
                _ => v["status"] = json!("RUNNING"),
            }
            v
        })
        .collect();
    data(serde_json::Value::Array(out))
}

/// Ends every running clone OK, once, when a test asked for it (see
/// `SimProxmox::finish_clones_at_next_task_list`).
fn finish_clones_if_asked(shared: &Arc<Shared>) {
    let running: Vec<(String, u32)> = {
        let mut st = shared.lock();
        if !std::mem::take(&mut st.finish_clones_at_task_list) {
            return;
        }
        st.tasks
            .values()
            .filter(|t| t.running && t.kind == "qmclone")
            .map(|t| (t.upid.clone(), t.target))
            .collect()
    };
    for (upid, target) in running {
        finish_task(shared, &upid, "qmclone", target, None, false);
    }
}

/// How a clone task progresses when the test asks for more than a fixed delay.
#[derive(Debug, Clone, Copy)]
pub(super) enum ClonePace {
    /// `lines` progress lines, one every `every`, then OK.
    Slow { lines: u32, every: Duration },
    /// One line, then nothing until the task is stopped.
    Stuck,
}

/// The first log line of a task of `kind`, as Proxmox writes it.
fn first_line(kind: &str, target: u32) -> String {
    match kind {
        // Proxmox names the source volume: the template's disk.
        "qmclone" => format!("create full clone of drive scsi0 (local-lvm:base-{target}-disk-0)"),
        "qmstart" => format!("starting VM {target}"),
        "qmstop" => format!("stopping VM {target}"),
        "qmshutdown" => format!("shutting down VM {target}"),
        "qmreboot" => format!("rebooting VM {target}"),
        "qmdestroy" => format!("destroying VM {target}"),
        _ => format!("update VM {target}"),
    }
}

/// Appends a line to a running task's log; false once the task has ended (stopped).
fn log_line(shared: &Arc<Shared>, upid: &str, line: String) -> bool {
    let mut st = shared.lock();
    match st.tasks.get_mut(upid) {
        Some(t) if t.running => {
            t.log.push(line);
            true
        }
        _ => false,
    }
}

/// `DELETE /nodes/{node}/tasks/{upid}`: a running task is killed and ends with
/// `interrupted by signal`; a clone so ended leaves nothing behind.
pub(super) fn stop_task(shared: &Arc<Shared>, upid: &str) {
    let (kind, target) = {
        let st = shared.lock();
        match st.tasks.get(upid) {
            Some(t) if t.running => (t.kind.clone(), t.target),
            _ => return,
        }
    };
    finish_task(
        shared,
        upid,
        &kind,
        target,
        Some("interrupted by signal".into()),
        false,
    );
}

/// Starts a task; `vmid` names it in the UPID, `target` is the VM its effect applies to
/// (they differ for a clone: the template vs. the new VM).
pub(super) fn new_task(
    shared: &Arc<Shared>,
    node: &str,
    kind: &str,
    vmid: u32,
    target: u32,
    user: &str,
    delay: Duration,
) -> String {
    let mut keep_vm = false;
    let (upid, fail_with, pace) = {
        let mut st = shared.lock();
        st.counter += 1;
        let pid = st.counter;
        let starttime = now_secs();
        let upid = format!(
            "UPID:{node}:{pid:08X}:{:08X}:{starttime:08X}:{kind}:{vmid}:{user}:",
            0x12D687 + pid
        );
        let mut fail_with = st
            .fail_tasks
            .iter()
            .position(|(k, _)| k == kind)
            .map(|i| st.fail_tasks.remove(i).1);
        let pace = if kind == "qmclone" && !st.clone_paces.is_empty() {
            Some(st.clone_paces.remove(0))
        } else {
            None
        };
        // As Proxmox's destroy: a VM locked (by a clone still copying, a backup...) is
        // not destroyed; the task fails.
        if kind == "qmdestroy" && fail_with.is_none() {
            if let Some(lock) = st.vms.get(&target).and_then(|v| v.lock.clone()) {
                fail_with = Some(format!("VM is locked ({lock})"));
            }
        }
        let faults = &shared.opts.faults;
        if fail_with.is_none() {
            if kind == "qmclone" && faults.half_done(HalfDone::CloneFailsAfterVmExists) {
                keep_vm = true;
                fail_with = Some(format!(
                    "clone failed: copy failed: command 'qemu-img convert' failed: exit code 1 (VM {target} left behind)"
                ));
            } else if kind == "qmdestroy" && faults.half_done(HalfDone::DeleteNeverHappens) {
                fail_with = Some(format!(
                    "can't lock file '/var/lock/qemu-server/lock-{target}.conf' - got timeout"
                ));
            }
        }
        st.tasks.insert(
            upid.clone(),
            Task {
                node: node.to_string(),
                running: true,
                exitstatus: None,
                upid: upid.clone(),
                kind: kind.to_string(),
                id: vmid.to_string(),
                user: user.to_string(),
                starttime,
                endtime: None,
                pid,
                target,
                log: vec![first_line(
                    kind,
                    if kind == "qmclone" { vmid } else { target },
                )],
            },
        );
        (upid, fail_with, pace)
    };
    let s2 = shared.clone();
    let u2 = upid.clone();
    let kind = kind.to_string();
    tokio::spawn(async move {
        match pace {
            None => tokio::time::sleep(delay).await,
            Some(ClonePace::Slow { lines, every }) => {
                let total = u64::from(lines.max(1));
                for i in 1..=u64::from(lines) {
                    tokio::time::sleep(every).await;
                    let pct = i as f64 * 100.0 / total as f64;
                    let line = format!("transferred {i}.0 GiB of {total}.0 GiB ({pct:.2}%)");
                    if !log_line(&s2, &u2, line) {
                        return;
                    }
                }
            }
            // Runs until someone stops it.
            Some(ClonePace::Stuck) => return,
        }
        finish_task(&s2, &u2, &kind, target, fail_with, keep_vm);
    });
    upid
}

/// Applies a task's effect when it ends.
/// `keep_vm`: a failed clone leaves its VM behind (unlocked), as a half-done fault.
fn finish_task(
    shared: &Arc<Shared>,
    upid: &str,
    kind: &str,
    vmid: u32,
    fail_with: Option<String>,
    keep_vm: bool,
) {
    let mut events = Vec::new();
    let mut boot = None;
    {
        let mut st = shared.lock();
        // Ended already (stopped meanwhile): its effect must not apply twice.
        if !st.tasks.get(upid).is_some_and(|t| t.running) {
            return;
        }
        let exit = match (kind, &fail_with) {
            ("qmclone", Some(e)) if keep_vm => {
                // Left behind as if its config was written in full, unlocked.
                if let Some(vm) = st.clones.remove(&vmid) {
                    st.vms.insert(vmid, vm);
                }
                e.clone()
            }
            ("qmclone", Some(e)) => {
                // A failed (or stopped) clone leaves nothing behind: Proxmox unlinks
                // the config file.
                st.vms.remove(&vmid);
                st.clones.remove(&vmid);
                e.clone()
            }
            (_, Some(e)) => e.clone(),
            ("qmclone", None) => {
                // The lock goes, then the config file moves to the target host.
                if let Some(vm) = st.clones.remove(&vmid) {
                    st.vms.insert(vmid, vm);
                }
                "OK".into()
            }
            ("qmstart", None) => {
                if let Some(vm) = st.vms.get_mut(&vmid) {
                    vm.status = "running".into();
                    boot = Some(vmid);
                }
                "OK".into()
            }
            ("qmstop" | "qmshutdown", None) => {
                if let Some(vm) = st.vms.get_mut(&vmid) {
                    // The guest goes down, and its kubelet with it.
                    if vm.status == "running" {
                        events.push(VmEvent::Stopped {
                            name: vm.name.clone(),
                        });
                    }
                    vm.status = "stopped".into();
                    vm.booted = false;
                    // Its kubelet registers again when it next boots.
                    vm.joined = false;
                }
                "OK".into()
            }
            ("qmreboot", None) => {
                if let Some(vm) = st.vms.get_mut(&vmid) {
                    // The guest shuts down (its kubelet with it) and boots again: a
                    // kubelet it installed starts and registers, once, at that start.
                    if vm.status == "running" {
                        events.push(VmEvent::Stopped {
                            name: vm.name.clone(),
                        });
                        vm.booted = false;
                        vm.joined = false;
                        boot = Some(vmid);
                    }
                }
                "OK".into()
            }
            ("qmdestroy", None) => {
                if let Some(vm) = st.vms.remove(&vmid) {
                    events.push(VmEvent::Deleted { name: vm.name });
                }
                "OK".into()
            }
            _ => "OK".into(),
        };
        if let Some(t) = st.tasks.get_mut(upid) {
            t.running = false;
            t.endtime = Some(now_secs());
            t.log.push(if exit == "OK" {
                "TASK OK".to_string()
            } else {
                format!("TASK ERROR: {exit}")
            });
            t.exitstatus = Some(exit);
        }
    }
    for e in events {
        shared.fire(e);
    }
    if let Some(id) = boot {
        let s2 = shared.clone();
        let delay = shared.opts.boot_delay;
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            finish_boot(&s2, id);
        });
    }
}

/// The generated user data of a template that joins by itself (see the module docs).
pub fn cloud_init_join_line(name: &str, tags_value: &str) -> String {
    let o = tags::ownership(tags_value);
    format!(
        "#!/bin/sh\n# simulated: the template's own cloud-init join\nk3s agent --node-name={name} --node-label={}={} --node-label={}={} --node-taint={}=true:NoSchedule\n",
        nodewright_core::model::LABEL_CLUSTER,
        o.cluster.unwrap_or_default(),
        nodewright_core::model::LABEL_GROUP,
        o.group.unwrap_or_default(),
        nodewright_core::model::STARTUP_TAINT_KEY,
    )
}

fn finish_boot(shared: &Arc<Shared>, vmid: u32) {
    let event = {
        let mut st = shared.lock();
        let never = st.never_ready.clone();
        let Some(vm) = st.vms.get_mut(&vmid) else {
            return;
        };
        if vm.status != "running" || never.iter().any(|p| vm.name.starts_with(p.as_str())) {
            return;
        }
        vm.booted = true;
        // A guest whose kubelet was installed (by cloud-init, or by a join script run
        // through the agent) starts it at every boot; otherwise only cloud-init joins.
        if vm.joined || (!vm.cloud_init_join && vm.installed.is_none()) {
            return;
        }
        let vm = vm.clone();
        let found = match &vm.installed {
            Some(u) => Ok(u.clone()),
            None => cloud_init_user_data(shared, &st, &vm),
        };
        let Some(vm) = st.vms.get_mut(&vmid) else {
            return;
        };
        match found {
            Ok(user_data) => {
                vm.joined = true;
                vm.cloud_init_note = None;
                vm.installed = Some(user_data.clone());
                VmEvent::Booted {
                    name: vm.name.clone(),
                    user_data,
                    memory_bytes: vm.memory_mib() * MIB,
                    cpus: vm.cpus(),
                }
            }
            Err(note) => {
                vm.cloud_init_note = Some(note);
                return;
            }
        }
    };
    shared.fire(event);
}

/// What cloud-init in the guest of `vm` finds at its first boot, as NoCloud looks: a
/// `cicustom` snippet the simulator knows (through Proxmox's own cloud-init drive), else
/// a CD-ROM labelled `cidata` with a `user-data` file. `Err` says why nothing joins.
fn cloud_init_user_data(
    shared: &Shared,
    st: &super::St,
    vm: &super::SimVm,
) -> Result<String, String> {
    let drives: Vec<&str> = vm
        .config
        .iter()
        .filter(|(k, _)| {
            let base = k.trim_end_matches(|c: char| c.is_ascii_digit());
            matches!(base, "ide" | "sata" | "scsi" | "virtio") && base.len() < k.len()
        })
        .filter_map(|(_, v)| v.split(',').next())
        .collect();
    let proxmox_drive = drives.iter().any(|d| d.ends_with("-cloudinit"));
    if let Some(c) = vm.config.get("cicustom") {
        let known = c.split(',').any(|part| {
            part.split_once('=').is_some_and(|(k, v)| {
                matches!(k, "user" | "vendor") && shared.opts.snippets.iter().any(|s| s == v)
            })
        });
        return match (known, proxmox_drive) {
            (true, true) => Ok(cloud_init_join_line(&vm.name, vm.tags())),
            (false, _) => Err(format!("cicustom `{c}` names no snippet that joins")),
            (true, false) => {
                Err("cicustom is set but the VM has no cloud-init drive to carry it".into())
            }
        };
    }
    let mut seeds = Vec::new();
    for d in drives.iter().filter(|d| d.contains(":iso/")) {
        let Some(bytes) = super::volumes::read(shared, st, &vm.node, d) else {
            continue;
        };
        if let Ok(img) = super::iso::read(&bytes) {
            if img.label.eq_ignore_ascii_case(seed_label()) {
                seeds.push((d.to_string(), img));
            }
        }
    }
    if proxmox_drive && !seeds.is_empty() {
        return Err("two cidata drives (Proxmox's cloud-init drive and a seed): which one cloud-init reads is left to chance".into());
    }
    match seeds.as_slice() {
        [] if proxmox_drive => {
            Err("only Proxmox's own cloud-init drive (no user data to join with)".into())
        }
        [] => Err("no cidata seed attached: cloud-init found no user data".into()),
        [(_, img)] => match (img.files.get("user-data"), img.files.get("meta-data")) {
            (Some(u), Some(_)) => Ok(String::from_utf8_lossy(u).into_owned()),
            _ => Err(
                "the cidata seed has no user-data and meta-data files (as named on a Linux mount)"
                    .into(),
            ),
        },
        _ => Err("several cidata seeds attached".into()),
    }
}

fn seed_label() -> &'static str {
    nodewright_core::cloud::proxmox::seed::LABEL
}

pub(super) fn agent_exec(shared: &Arc<Shared>, vmid: u32, command: Vec<String>) -> Response {
    let (pid, script, code, delay) = {
        let mut st = shared.lock();
        let code = st.join_exit_code;
        st.counter += 1;
        let pid = i64::from(st.counter);
        let Some(vm) = st.vms.get(&vmid) else {
            return fail(StatusCode::INTERNAL_SERVER_ERROR, "gone");
        };
        if !(vm.agent_enabled() && vm.booted && vm.status == "running") {
            return fail(
                StatusCode::INTERNAL_SERVER_ERROR,
                "QEMU guest agent is not running",
            );
        }
        let script = match command.as_slice() {
            [sh, path] if sh.ends_with("sh") => vm.files.get(path).cloned(),
            _ => None,
        };
        st.execs.insert(
            (vmid, pid),
            Exec {
                exited: false,
                exitcode: 0,
            },
        );
        (pid, script, code, shared.opts.exec_delay)
    };
    let s2 = shared.clone();
    tokio::spawn(async move {
        tokio::time::sleep(delay).await;
        let code = if script.is_some() { code } else { 127 };
        let event = {
            let mut st = s2.lock();
            if let Some(e) = st.execs.get_mut(&(vmid, pid)) {
                e.exited = true;
                e.exitcode = code;
            }
            match (st.vms.get_mut(&vmid), script) {
                (Some(vm), Some(script)) if code == 0 && !vm.joined => {
                    vm.joined = true;
                    vm.installed = Some(script.clone());
                    Some(VmEvent::Booted {
                        name: vm.name.clone(),
                        user_data: script,
                        memory_bytes: vm.memory_mib() * MIB,
                        cpus: vm.cpus(),
                    })
                }
                _ => None,
            }
        };
        if let Some(e) = event {
            s2.fire(e);
        }
    });
    data(json!({ "pid": pid }))
}

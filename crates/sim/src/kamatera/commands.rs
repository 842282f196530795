//! Commands: create (with the service's validation), terminate, power and reboot, queued
//! and carried out in the background.

use std::sync::Arc;
use std::time::SystemTime;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Map, Value};

use super::calls::{error, not_object, parse_object, select, text};
use super::catalog::{check_size, find_image};
use super::{server_id, CreateFailure, Shared, SimCommand, SimServer, State_};
use crate::cloud::kamatera::MAX_TAG_LEN;
use crate::faults::HalfDone;
use crate::VmEvent;

const CREATE_FIELDS: &[&str] = &[
    "name",
    "password",
    "passwordValidate",
    "ssh-key",
    "datacenter",
    "image",
    "cpu",
    "ram",
    "disk",
    "dailybackup",
    "managed",
    "network",
    "quantity",
    "billingcycle",
    "monthlypackage",
    "poweronaftercreate",
    "script-file",
    "userdata-file",
    "tag",
];

/// A tag the simulator accepts: 1 to [`MAX_TAG_LEN`] letters, digits, `-` or `_`.
pub(super) fn valid_tag(t: &str) -> bool {
    (1..=MAX_TAG_LEN).contains(&t.len())
        && t.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

fn valid_password(p: &str) -> bool {
    (10..=20).contains(&p.len())
        && p.chars().any(|c| c.is_ascii_lowercase())
        && p.chars().any(|c| c.is_ascii_uppercase())
        && p.chars().any(|c| c.is_ascii_digit())
        && p.chars()
            .all(|c| c.is_ascii_alphanumeric() || "!@#$^&*()~".contains(c))
}

/// Splits a space-joined list of `k=v,k=v` items, checking keys; at most 4 items.
fn items(value: &str, keys: &[&str], required: &str) -> Result<Vec<String>, String> {
    let list: Vec<String> = value.split(' ').map(str::to_string).collect();
    if list.len() > 4 || list.iter().any(|i| i.is_empty()) {
        return Err(format!("invalid flag value ({value})"));
    }
    for item in &list {
        let mut has_required = false;
        for kv in item.split(',') {
            match kv.split_once('=') {
                Some((k, v)) if keys.contains(&k) && !v.is_empty() => {
                    has_required |= k == required;
                }
                _ => return Err(format!("invalid flag value ({item})")),
            }
        }
        if !has_required {
            return Err(format!("invalid flag value ({item}): missing {required}"));
        }
    }
    Ok(list)
}

fn yes_no(m: &Map<String, Value>, key: &str, default: bool) -> Result<bool, String> {
    match text(m, key).as_deref() {
        None | Some("") => Ok(default),
        Some("yes") => Ok(true),
        Some("no") => Ok(false),
        Some(other) => Err(format!("Invalid argument ({key}={other})")),
    }
}

fn cpu_count(cpu: &str) -> Option<u32> {
    let kind = cpu.chars().last()?;
    if !matches!(kind, 'A' | 'B' | 'T' | 'D') {
        return None;
    }
    cpu[..cpu.len() - 1].parse().ok().filter(|n| *n > 0)
}

/// Answers command ids as the real API does: a list of integers.
fn command_ids_json(cmd: &SimCommand) -> Value {
    json!([cmd.id])
}

/// Queues a command and runs it in the background: `step` pending, `step` running, then
/// its effect. Returns the command.
fn enqueue(
    shared: &Arc<Shared>,
    st: &mut State_,
    kind: &str,
    server: &SimServer,
    fails: Option<String>,
) -> SimCommand {
    st.counter += 1;
    st.commands_issued += 1;
    let id = st.counter;
    let cmd = SimCommand {
        id,
        kind: kind.into(),
        server_id: server.id.clone(),
        server_name: server.name.clone(),
        status: "pending".into(),
        log: String::new(),
        completed: None,
    };
    st.commands.push(cmd.clone());
    let shared = shared.clone();
    let step = shared.opts.step;
    tokio::spawn(async move {
        tokio::time::sleep(step).await;
        set_status(&shared, id, "running", "");
        tokio::time::sleep(step).await;
        finish(&shared, id, fails);
    });
    cmd
}

fn set_status(shared: &Shared, id: u64, status: &str, log: &str) {
    let mut st = shared.lock();
    if let Some(c) = st.commands.iter_mut().find(|c| c.id == id) {
        c.status = status.into();
        if !log.is_empty() {
            c.log = log.into();
        }
    }
}

/// The log of a completed create as the real service writes it: the settings line by
/// line, starting with `Name: <name>` (the line clients read the created name from).
fn create_log(s: &SimServer, powered_on: bool) -> String {
    let mut log = format!(
        "Name: {}\nDatacenter: {}\nImage: {}\nCPU: {}\nRAM: {} MB\nDisks: {}\nNetworks: {}\nCreating server... done",
        s.name,
        s.datacenter,
        s.image,
        s.cpu,
        s.ram_mb,
        s.disks.join(" "),
        s.networks.join(" ")
    );
    if powered_on {
        log.push_str("\nPowering on... done");
    }
    log
}

/// Applies a command's effect and marks it complete (or error with `fails` as log).
fn finish(shared: &Shared, id: u64, fails: Option<String>) {
    let event = {
        let mut st = shared.lock();
        let Some(cmd) = st.commands.iter().find(|c| c.id == id).cloned() else {
            return;
        };
        let pos = st.servers.iter().position(|s| s.id == cmd.server_id);
        let mut event = None;
        // A reboot's kubelet stops before it starts again.
        let mut restarted = None;
        let mut log = format!("{} {}: done", cmd.kind, cmd.server_name);
        if let Some(reason) = fails {
            if cmd.kind.starts_with("create") {
                if let Some(p) = pos {
                    st.servers.remove(p);
                }
            }
            if let Some(c) = st.commands.iter_mut().find(|c| c.id == id) {
                c.status = "error".into();
                c.log = reason;
                c.completed = Some(SystemTime::now());
            }
            return;
        }
        match (cmd.kind.as_str(), pos) {
            ("create", Some(p)) => {
                let never = st.never_boot.clone();
                let s = &mut st.servers[p];
                s.power = "on".into();
                log = create_log(s, true);
                if !never.iter().any(|n| s.name.starts_with(n.as_str())) {
                    s.booted = true;
                    let user_data = if s.script.is_empty() {
                        s.userdata.clone()
                    } else {
                        s.script.clone()
                    };
                    event = Some(VmEvent::Booted {
                        name: s.name.clone(),
                        user_data,
                        memory_bytes: s.ram_mb.saturating_mul(1024 * 1024),
                        cpus: cpu_count(&s.cpu).unwrap_or(1),
                    });
                }
            }
            ("terminate", Some(p)) => {
                let s = st.servers.remove(p);
                log = format!("Server {} terminated", s.name);
                event = Some(VmEvent::Deleted { name: s.name });
            }
            ("create-off", Some(p)) => log = create_log(&st.servers[p], false),
            ("poweron", Some(p)) => {
                let s = &mut st.servers[p];
                s.power = "on".into();
                // Its kubelet, installed at the first boot, starts and registers again.
                if s.booted {
                    event = Some(VmEvent::Booted {
                        name: s.name.clone(),
                        user_data: if s.script.is_empty() {
                            s.userdata.clone()
                        } else {
                            s.script.clone()
                        },
                        memory_bytes: s.ram_mb.saturating_mul(1024 * 1024),
                        cpus: cpu_count(&s.cpu).unwrap_or(1),
                    });
                }
            }
            ("poweroff", Some(p)) => {
                st.servers[p].power = "off".into();
                event = Some(VmEvent::Stopped {
                    name: st.servers[p].name.clone(),
                });
            }
            ("reboot", Some(p)) => {
                let s = &mut st.servers[p];
                s.power = "on".into();
                s.reboots += 1;
                // The guest goes down and comes back: its kubelet stops, then starts
                // and registers (once, at its start), if the first boot installed it.
                if s.booted {
                    restarted = Some(VmEvent::Stopped {
                        name: s.name.clone(),
                    });
                    event = Some(VmEvent::Booted {
                        name: s.name.clone(),
                        user_data: if s.script.is_empty() {
                            s.userdata.clone()
                        } else {
                            s.script.clone()
                        },
                        memory_bytes: s.ram_mb.saturating_mul(1024 * 1024),
                        cpus: cpu_count(&s.cpu).unwrap_or(1),
                    });
                }
            }
            _ => {}
        }
        if let Some(c) = st.commands.iter_mut().find(|c| c.id == id) {
            c.status = "complete".into();
            c.log = log;
            c.completed = Some(SystemTime::now());
        }
        [restarted, event]
    };
    for e in event.into_iter().flatten() {
        shared.fire(e);
    }
}

pub(super) async fn create_server(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    let Some(m) = parse_object(&body) else {
        return not_object();
    };
    let bad = |msg: String| error(StatusCode::BAD_REQUEST, &msg);
    if let Some(k) = m.keys().find(|k| !CREATE_FIELDS.contains(&k.as_str())) {
        return bad(format!("unknown field ({k})"));
    }
    let get = |k: &str| text(&m, k).unwrap_or_default();
    let name = get("name");
    if name.len() < 4
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "()_-".contains(c))
    {
        return bad(format!("invalid flag value (name={name})"));
    }
    // `__generate__` (what Libcloud sends by default): the service makes one and answers
    // it with the command ids.
    let generated = get("password") == "__generate__" && get("passwordValidate") == "__generate__";
    let password = if generated {
        match nodewright_core::cloud::kamatera::provider::generate_password() {
            Ok(p) => p,
            Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
        }
    } else {
        get("password")
    };
    // An SSH key alone is enough (what Libcloud sends for `NodeAuthSSHKey`): no
    // password, and the server is reached with the key.
    let key_only = !generated && password.is_empty() && !get("ssh-key").trim().is_empty();
    if !generated && !key_only && !valid_password(&password) {
        return bad("Invalid password: must be 10-20 characters of a-z, A-Z, 0-9, !@#$^&*()~ with at least 1 capital letter, 1 small letter and 1 digit".into());
    }
    if !generated && !key_only && get("passwordValidate") != password {
        return bad("Password validation does not match".into());
    }
    let datacenter = get("datacenter");
    if !shared.opts.datacenters.contains(&datacenter) {
        return bad(format!("Invalid datacenter: {datacenter}"));
    }
    let image = get("image");
    if image.is_empty() {
        return bad("missing required flag (image)".into());
    }
    if let Err(e) = find_image(&datacenter, &image) {
        return bad(e);
    }
    let cpu = get("cpu");
    let Ok(ram_mb) = get("ram").parse::<u64>() else {
        return bad(format!("invalid flag value (ram={})", get("ram")));
    };
    if let Err(e) = check_size(&cpu, ram_mb) {
        return bad(e);
    }
    let disks = match items(&get("disk"), &["id", "size"], "size") {
        Ok(d) => d,
        Err(e) => return bad(format!("{e} (disk)")),
    };
    let networks = match items(&get("network"), &["id", "name", "ip"], "name") {
        Ok(n) => n,
        Err(e) => return bad(format!("{e} (network)")),
    };
    let billing = match get("billingcycle").as_str() {
        "" | "hourly" => "hourly",
        "monthly" => "monthly",
        other => return bad(format!("Invalid argument (billingcycle={other})")),
    };
    let (backup, managed, power_on) = match (
        yes_no(&m, "dailybackup", false),
        yes_no(&m, "managed", false),
        yes_no(&m, "poweronaftercreate", true),
    ) {
        (Ok(a), Ok(b), Ok(c)) => (a, b, c),
        (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => return bad(e),
    };
    if !matches!(get("quantity").as_str(), "" | "1") {
        return bad("the simulator creates one server per request (quantity=1)".into());
    }
    let tags: Vec<String> = get("tag")
        .split(' ')
        .filter(|t| !t.is_empty())
        .map(str::to_string)
        .collect();
    if let Some(t) = tags.iter().find(|t| !valid_tag(t)) {
        return bad(format!("Invalid tag name ({t})"));
    }

    let mut st = shared.lock();
    let mut fails = None;
    if !st.fail_creates.is_empty() {
        match st.fail_creates.remove(0) {
            CreateFailure::Refused => {
                return error(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "Insufficient balance: your account credit limit does not allow creating more servers",
                )
            }
            CreateFailure::CommandError => {
                fails = Some(format!(
                    "Create server {name} failed: no available resources in datacenter {datacenter}"
                ))
            }
        }
    }
    if let Some(max) = shared.opts.max_servers {
        if st.servers.len() >= max {
            return error(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("Insufficient balance: server limit of {max} reached for this account"),
            );
        }
    }
    st.counter += 1;
    let server = SimServer {
        id: server_id(st.counter),
        name,
        datacenter,
        image,
        power: "off".into(),
        tags,
        cpu,
        ram_mb,
        disks,
        networks,
        billing_cycle: billing.into(),
        daily_backup: backup,
        managed,
        script: get("script-file"),
        userdata: get("userdata-file"),
        ssh_key: get("ssh-key"),
        password,
        created: SystemTime::now(),
        reboots: 0,
        booted: false,
    };
    st.servers.push(server.clone());
    let kind = if power_on { "create" } else { "create-off" };
    let cmd = enqueue(&shared, &mut st, kind, &server, fails);
    if shared
        .opts
        .faults
        .half_done(HalfDone::CreateFailsButServerAppears)
    {
        return error(StatusCode::INTERNAL_SERVER_ERROR, "Internal Server Error");
    }
    if generated {
        let ids = command_ids_json(&cmd);
        return Json(json!({ "commandIds": ids, "password": server.password })).into_response();
    }
    Json(command_ids_json(&cmd)).into_response()
}

pub(super) async fn terminate(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    let Some(m) = parse_object(&body) else {
        return not_object();
    };
    let force = matches!(m.get("force"), Some(Value::Bool(true)))
        || matches!(text(&m, "force").as_deref(), Some("true" | "1" | "yes"));
    let mut st = shared.lock();
    let found = match select(&st, &m) {
        Ok(found) => found,
        Err(refused) => return refused.answer(&shared),
    };
    if st.fail_deletes > 0 {
        st.fail_deletes -= 1;
        return error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "Internal error while terminating the server, please try again",
        );
    }
    let targets: Vec<SimServer> = found.iter().map(|i| st.servers[*i].clone()).collect();
    if !force && targets.iter().any(|s| s.power == "on") {
        return error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "Server is powered on: power it off first or terminate with force",
        );
    }
    let ids: Vec<Value> = targets
        .iter()
        .map(|s| {
            // Accepted, then it never happens: the command ends in error.
            let lost = shared.opts.faults.half_done(HalfDone::DeleteNeverHappens);
            let fails = lost.then(|| {
                format!(
                    "Terminate server {} failed: server is locked by another operation",
                    s.name
                )
            });
            let cmd = enqueue(&shared, &mut st, "terminate", s, fails);
            command_ids_json(&cmd)[0].clone()
        })
        .collect();
    Json(Value::Array(ids)).into_response()
}

async fn power(shared: Arc<Shared>, body: Bytes, kind: &str) -> Response {
    let Some(m) = parse_object(&body) else {
        return not_object();
    };
    let mut st = shared.lock();
    let found = match select(&st, &m) {
        Ok(found) => found,
        Err(refused) => return refused.answer(&shared),
    };
    let targets: Vec<SimServer> = found.iter().map(|i| st.servers[*i].clone()).collect();
    let ids: Vec<Value> = targets
        .iter()
        .map(|s| {
            let cmd = enqueue(&shared, &mut st, kind, s, None);
            command_ids_json(&cmd)[0].clone()
        })
        .collect();
    Json(Value::Array(ids)).into_response()
}

pub(super) async fn power_on(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    power(shared, body, "poweron").await
}

pub(super) async fn power_off(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    power(shared, body, "poweroff").await
}

/// `POST /service/server/reboot`: a server that is off cannot be rebooted.
pub(super) async fn reboot(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    let off = parse_object(&body).is_some_and(|m| {
        let st = shared.lock();
        select(&st, &m).is_ok_and(|found| found.iter().any(|i| st.servers[*i].power != "on"))
    });
    if off {
        return error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "Server is powered off: power it on instead of rebooting",
        );
    }
    power(shared, body, "reboot").await
}

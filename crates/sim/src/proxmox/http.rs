//! The simulator's HTTP side: parsing, schema validation, authentication and the
//! answer of every endpoint.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::clone::clone;
use super::hosts::{cluster_status, ha_status, resources};
use super::perms::{self, Privs};
use super::reads;
use super::reply::{data, fail};
use super::schema::{self, percent_decode};
use super::storage;
use super::tasks::{agent_exec, list as list_tasks, new_task, stop_task};
use super::volumes;
use super::{next_free, now_secs, Shared, SimAuth, SimCall, Ticket};

fn parse_form(s: &str) -> Vec<(String, String)> {
    s.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (
                percent_decode(&k.replace('+', " ")),
                percent_decode(&v.replace('+', " ")),
            )
        })
        .collect()
}

fn parse_json_body(body: &[u8]) -> Vec<(String, String)> {
    let Ok(Value::Object(m)) = serde_json::from_slice::<Value>(body) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (k, v) in m {
        match v {
            Value::Array(items) => {
                for i in items {
                    out.push((k.clone(), scalar(&i)));
                }
            }
            other => out.push((k, scalar(&other))),
        }
    }
    out
}

fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Bool(b) => u8::from(*b).to_string(),
        other => other.to_string(),
    }
}

fn cookie_ticket(headers: &HeaderMap) -> Option<String> {
    let cookie = headers.get("cookie")?.to_str().ok()?;
    cookie.split(';').find_map(|c| {
        let (k, v) = c.trim().split_once('=')?;
        (k == "PVEAuthCookie").then(|| percent_decode(v))
    })
}

pub(super) async fn handle(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let full = uri.path().to_string();
    let Some(path) = full.strip_prefix("/api2/json") else {
        shared
            .lock()
            .violations
            .push(format!("{method} {full}: not under /api2/json"));
        return fail(StatusCode::NOT_FOUND, "not under /api2/json");
    };
    let path = if path.is_empty() { "/" } else { path }.to_string();
    let is_json = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|c| c.starts_with("application/json"));
    let multipart = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .and_then(super::multipart::boundary);
    // An upload's file: the part `filename`, whose own file name is the parameter.
    let mut file = None;
    let params = match (&method, multipart) {
        (&Method::GET | &Method::DELETE, _) => parse_form(uri.query().unwrap_or("")),
        (_, Some(boundary)) => match super::multipart::parse(&boundary, &body) {
            Ok(parts) => {
                let mut out = Vec::new();
                for p in parts {
                    match p.filename {
                        Some(f) => {
                            out.push((p.name, f));
                            file = Some(p.data);
                        }
                        None => out.push((p.name, String::from_utf8_lossy(&p.data).into_owned())),
                    }
                }
                out
            }
            Err(e) => {
                shared
                    .lock()
                    .violations
                    .push(format!("{method} {path}: {e}"));
                return fail(
                    StatusCode::BAD_REQUEST,
                    &format!("multipart parse error: {e}"),
                );
            }
        },
        _ if is_json => parse_json_body(&body),
        _ => parse_form(&String::from_utf8_lossy(&body)),
    };
    let schema = shared.schema.clone();
    let (matched, errors) = schema.validate(method.as_str(), &path, &params);

    // Authentication.
    let auth_header = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let csrf = headers
        .get("csrfpreventiontoken")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let ticket = cookie_ticket(&headers);
    let auth = match (&auth_header, &ticket) {
        (Some(h), _) => SimAuth::Token(h.clone()),
        (None, Some(_)) => SimAuth::Ticket { csrf: csrf.clone() },
        _ => SimAuth::None,
    };
    let endpoint = matched.as_ref().map(|m| m.template.clone());
    let response = respond(
        &shared,
        &method,
        &path,
        matched,
        errors,
        &params,
        &auth_header,
        ticket,
        csrf,
        file,
    )
    .await;
    let response = match &endpoint {
        Some(t) if response.status().is_success() => {
            check_answer(&shared, &schema, method.as_str(), t, response).await
        }
        _ => response,
    };
    let response = if shared.opts.status_line_errors {
        message_to_status_line(response).await
    } else {
        response
    };
    shared.lock().calls.push(SimCall {
        method: method.to_string(),
        path,
        endpoint,
        params,
        auth,
        status: response.status().as_u16(),
    });
    response
}

/// Records every way a successful answer departs from the schema's `returns`.
async fn check_answer(
    shared: &Shared,
    schema: &schema::Schema,
    method: &str,
    template: &str,
    response: Response,
) -> Response {
    let (parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, 16 << 20).await else {
        return (parts.status, "unreadable body").into_response();
    };
    if let Ok(v) = serde_json::from_slice::<Value>(&bytes) {
        let errors = super::answer::check_answer(schema, method, template, &v["data"]);
        shared.lock().violations.extend(errors);
    }
    Response::from_parts(parts, axum::body::Body::from(bytes))
}

/// An error answer the way older servers gave it: the body's `message` moves to the
/// status line's reason phrase (one line of visible ASCII, as a status line allows).
async fn message_to_status_line(response: Response) -> Response {
    if response.status().is_success() {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, 1 << 20).await else {
        return (parts.status, "unreadable error body").into_response();
    };
    let mut v: Value = serde_json::from_slice(&bytes).unwrap_or_else(|_| json!({}));
    let message = v
        .as_object_mut()
        .and_then(|m| m.remove("message"))
        .and_then(|m| m.as_str().map(str::to_string))
        .unwrap_or_default();
    let phrase: String = message
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
        .filter(|c| c.is_ascii_graphic() || *c == ' ')
        .collect();
    if let Ok(reason) = hyper::ext::ReasonPhrase::try_from(phrase) {
        parts.extensions.insert(reason);
    }
    if !v.is_object() {
        v = json!({});
    }
    if v.get("data").is_none() {
        v["data"] = Value::Null;
    }
    let mut out = Json(v).into_response();
    *out.status_mut() = parts.status;
    out.extensions_mut().extend(parts.extensions);
    out
}

#[allow(clippy::too_many_arguments)]
async fn respond(
    shared: &Arc<Shared>,
    method: &Method,
    path: &str,
    matched: Option<schema::Matched>,
    errors: Vec<String>,
    params: &[(String, String)],
    auth_header: &Option<String>,
    ticket: Option<String>,
    csrf: Option<String>,
    file: Option<Vec<u8>>,
) -> Response {
    if !errors.is_empty() {
        let mut st = shared.lock();
        for e in &errors {
            st.violations.push(format!("{method} {path}: {e}"));
        }
        let map: serde_json::Map<String, Value> = errors
            .iter()
            .enumerate()
            .map(|(i, e)| (format!("violation{i}"), Value::String(e.clone())))
            .collect();
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({ "data": null, "errors": map, "message": "Parameter verification failed.\n" })),
        )
            .into_response();
    }
    let Some(m) = matched else {
        return fail(StatusCode::NOT_IMPLEMENTED, "not implemented");
    };
    let o = &shared.opts;
    let get = |k: &str| -> Option<String> {
        m.vars
            .get(k)
            .cloned()
            .or_else(|| params.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()))
    };
    let is_write = *method != Method::GET;

    if m.template == "/access/ticket" && *method == Method::POST {
        let (u, p) = (
            get("username").unwrap_or_default(),
            get("password").unwrap_or_default(),
        );
        if u != o.username || p != o.password {
            return fail(StatusCode::UNAUTHORIZED, "authentication failure");
        }
        let mut st = shared.lock();
        st.counter += 1;
        st.tickets_issued += 1;
        let t = format!("PVE:{u}:{:08X}::c2ltdWxhdGVk{}", now_secs(), st.counter);
        let c = format!("{:08X}:simcsrf{}", now_secs(), st.counter);
        st.tickets.insert(
            t.clone(),
            Ticket {
                csrf: c.clone(),
                expires: SystemTime::now() + o.ticket_lifetime,
            },
        );
        return data(json!({ "ticket": t, "CSRFPreventionToken": c, "username": u }));
    }

    // Everything else needs authentication.
    let user = match (auth_header, ticket) {
        (Some(h), _) => {
            if *h != format!("PVEAPIToken={}={}", o.token_id, o.token_secret) {
                return fail(StatusCode::UNAUTHORIZED, "authentication failure");
            }
            o.token_id.clone()
        }
        (None, Some(t)) => {
            let st = shared.lock();
            let Some(tk) = st
                .tickets
                .get(&t)
                .filter(|tk| tk.expires > SystemTime::now())
            else {
                return fail(StatusCode::UNAUTHORIZED, "authentication failure");
            };
            if is_write && csrf.as_deref() != Some(tk.csrf.as_str()) {
                return fail(
                    StatusCode::UNAUTHORIZED,
                    "Permission denied - invalid csrf token",
                );
            }
            o.username.clone()
        }
        (None, None) => return fail(StatusCode::UNAUTHORIZED, "No ticket"),
    };

    // Authorization, before anything about the objects named (as Proxmox does).
    let privs = Privs(o.privileges.as_ref());
    if let Some(refused) = perms::check(method.as_str(), &m.template, privs, &get) {
        return refused;
    }

    if let Some(node) = m.vars.get("node") {
        if !o.hosts.iter().any(|h| &h.name == node) {
            return fail(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("hostname lookup '{node}' failed - failed to get address info for: {node}: Name or service not known"),
            );
        }
    }
    let vmid: Option<u32> = m.vars.get("vmid").and_then(|v| v.parse().ok());
    let node = m.vars.get("node").cloned().unwrap_or_default();
    // A VM path must name the host the VM is on.
    if let Some(id) = vmid {
        let st = shared.lock();
        if st.vms.get(&id).is_none_or(|v| v.node != node) {
            return fail(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("Configuration file 'nodes/{node}/qemu-server/{id}.conf' does not exist"),
            );
        }
    }
    let vmid = vmid.unwrap_or(0);

    match (method.as_str(), m.template.as_str()) {
        ("GET", "/version") => data(reads::version(&o.version)),
        ("GET", "/pools") => data(reads::pools(&o.pools, privs)),
        ("GET", "/nodes") => data(reads::nodes(shared, privs)),
        ("GET", "/nodes/{node}/qemu") => data(reads::qemu_list(shared, &node, privs)),
        ("GET", "/nodes/{node}/qemu/{vmid}") => data(reads::qemu_index()),
        ("GET", "/nodes/{node}/qemu/{vmid}/status/current") => {
            data(reads::qemu_status(shared, vmid))
        }
        ("GET", "/cluster/resources") => data(perms::filter_resources(
            privs,
            resources(shared, get("type").as_deref()),
        )),
        ("GET", "/cluster/ha/status/current") => data(ha_status(shared)),
        ("GET", "/cluster/status") => data(cluster_status(shared)),
        ("GET", "/cluster/nextid") => {
            let st = shared.lock();
            match get("vmid").and_then(|v| v.parse::<u32>().ok()) {
                Some(id) if st.vms.contains_key(&id) => (
                    StatusCode::BAD_REQUEST,
                    Json(json!({ "data": null, "errors": { "vmid": format!("VM {id} already exists") }, "message": "Parameter verification failed.\n" })),
                )
                    .into_response(),
                Some(id) => data(json!(id.to_string())),
                None => data(json!(next_free(&st, 100).to_string())),
            }
        }
        ("GET", "/nodes/{node}/storage") if !perms::can_see(privs, "storage") => data(json!([])),
        ("GET", "/nodes/{node}/storage") => storage::list(o, &get),
        ("POST", "/nodes/{node}/storage/{storage}/upload") => storage::upload(
            shared,
            &node,
            &get("storage").unwrap_or_default(),
            &get,
            file,
            &user,
        ),
        ("GET", "/nodes/{node}/storage/{storage}/content") => {
            storage::content(shared, &node, &get("storage").unwrap_or_default(), &get)
        }
        ("DELETE", "/nodes/{node}/storage/{storage}/content/{volume}") => {
            let storage = get("storage").unwrap_or_default();
            if let Some(refused) = perms::volume_delete(privs, &storage) {
                return refused;
            }
            storage::delete(
                shared,
                &node,
                &storage,
                &get("volume").unwrap_or_default(),
                &user,
            )
        }
        ("GET", "/nodes/{node}/network") => {
            let kind = get("type").unwrap_or_default();
            let bridges = matches!(
                kind.as_str(),
                "" | "bridge" | "any_bridge" | "any_local_bridge"
            );
            let list: Vec<Value> = o
                .bridges
                .iter()
                .filter(|_| bridges)
                .map(|b| {
                    json!({
                        "iface": b, "type": "bridge", "active": 1, "autostart": 1,
                        "method": "manual", "families": ["inet"], "bridge_ports": "eno1",
                        "bridge_stp": "off", "bridge_fd": "0", "priority": 3,
                    })
                })
                .collect();
            data(Value::Array(list))
        }
        ("GET", "/nodes/{node}/tasks") => list_tasks(shared, &node, &get),
        ("GET", "/nodes/{node}/tasks/{upid}/status") => {
            let upid = get("upid").unwrap_or_default();
            let st = shared.lock();
            match st.tasks.get(&upid) {
                // Another user's task needs Sys.Audit on its host.
                Some(t) if t.node == node && t.user != user && !privs.has("Sys.Audit") => {
                    perms::denied(&format!("/nodes/{node}, Sys.Audit"))
                }
                Some(t) if t.node == node => {
                    let mut v = json!({
                        "upid": t.upid, "node": t.node, "pid": t.pid, "pstart": 1234567,
                        "starttime": t.starttime, "type": t.kind, "id": t.id, "user": t.user,
                        "status": if t.running { "running" } else { "stopped" },
                    });
                    if let Some(e) = &t.exitstatus {
                        v["exitstatus"] = json!(e);
                    }
                    data(v)
                }
                _ => fail(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    &format!("no such task '{upid}'"),
                ),
            }
        }
        ("GET", "/nodes/{node}/tasks/{upid}/log") => {
            let upid = get("upid").unwrap_or_default();
            let start: usize = get("start").and_then(|v| v.parse().ok()).unwrap_or(0);
            // As Proxmox: `limit` 0 or absent reads 50 lines.
            let limit: usize = match get("limit").and_then(|v| v.parse().ok()) {
                Some(0) | None => 50,
                Some(n) => n,
            };
            let st = shared.lock();
            match st.tasks.get(&upid) {
                Some(t) if t.node == node => {
                    let lines: Vec<Value> = if t.log.is_empty() {
                        vec![json!({ "n": 1, "t": "no content" })]
                    } else {
                        t.log
                            .iter()
                            .enumerate()
                            .skip(start)
                            .take(limit)
                            .map(|(i, l)| json!({ "n": i + 1, "t": l }))
                            .collect()
                    };
                    data(Value::Array(lines))
                }
                _ => fail(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    &format!("no such task '{upid}'"),
                ),
            }
        }
        ("DELETE", "/nodes/{node}/tasks/{upid}") => {
            let upid = get("upid").unwrap_or_default();
            let known = shared
                .lock()
                .tasks
                .get(&upid)
                .is_some_and(|t| t.node == node);
            if !known {
                return fail(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    &format!("no such task '{upid}'"),
                );
            }
            stop_task(shared, &upid);
            data(Value::Null)
        }
        ("GET", "/nodes/{node}/qemu/{vmid}/config") => {
            let st = shared.lock();
            let Some(vm) = st.vms.get(&vmid) else {
                return fail(StatusCode::INTERNAL_SERVER_ERROR, "gone");
            };
            let mut cfg = serde_json::Map::new();
            for (k, v) in &vm.config {
                cfg.insert(k.clone(), config_value(k, v));
            }
            if let Some(l) = &vm.lock {
                cfg.insert("lock".into(), json!(l));
            }
            cfg.insert("digest".into(), json!(config_digest(vm)));
            data(Value::Object(cfg))
        }
        ("POST", "/nodes/{node}/qemu/{vmid}/clone") => {
            // The disks go to `storage`, or to the template's own storage.
            let storage = get("storage").or_else(|| {
                let st = shared.lock();
                st.vms.get(&vmid).and_then(|t| {
                    t.config
                        .iter()
                        .filter(|(k, _)| {
                            (k.starts_with("scsi") && *k != "scsihw") || k.starts_with("ide")
                        })
                        .filter(|(_, v)| !v.contains("media=cdrom"))
                        .find_map(|(_, v)| v.split(':').next().map(str::to_string))
                })
            });
            if let Some(refused) = storage.and_then(|s| perms::clone_extra(privs, &s)) {
                return refused;
            }
            clone(shared, &node, vmid, &get, &user)
        }
        ("POST", "/nodes/{node}/qemu/{vmid}/config")
        | ("PUT", "/nodes/{node}/qemu/{vmid}/config") => {
            {
                let mut st = shared.lock();
                let Some(vm) = st.vms.get(&vmid) else {
                    return fail(StatusCode::INTERNAL_SERVER_ERROR, "gone");
                };
                if let Some(refused) = perms::config_privileges(privs, vmid, params, &vm.config) {
                    return refused;
                }
                // As Proxmox: a `digest` that is not the current config's means someone
                // else wrote it since it was read.
                if get("digest").is_some_and(|d| d != config_digest(vm)) {
                    return fail(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "detected modified configuration - file changed by other user? Try again.",
                    );
                }
                if let Some(l) = &vm.lock {
                    return fail(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        &format!("VM is locked ({l})"),
                    );
                }
                let vm_node = vm.node.clone();
                // As Proxmox: a drive may only name an ISO image that exists, and an
                // option may not be set and deleted in one call.
                let deleted: Vec<&str> = params
                    .iter()
                    .filter(|(k, _)| k == "delete")
                    .flat_map(|(_, v)| v.split([',', ';', ' ']))
                    .collect();
                for (k, v) in params {
                    if deleted.contains(&k.as_str()) {
                        return fail(
                            StatusCode::BAD_REQUEST,
                            &format!("you can't use '-{k}' and '-delete {k}' at the same time"),
                        );
                    }
                    let volume = v.split(',').next().unwrap_or_default();
                    if volume.contains(":iso/")
                        && volumes::read(shared, &st, &vm_node, volume).is_none()
                    {
                        return fail(
                            StatusCode::INTERNAL_SERVER_ERROR,
                            &format!("volume '{volume}' does not exist"),
                        );
                    }
                }
                let Some(vm) = st.vms.get_mut(&vmid) else {
                    return fail(StatusCode::INTERNAL_SERVER_ERROR, "gone");
                };
                for (k, v) in params {
                    match k.as_str() {
                        "delete" => {
                            for d in v.split([',', ';', ' ']) {
                                vm.config.remove(d);
                            }
                        }
                        "digest" | "skiplock" | "force" => {}
                        "sshkeys" => {
                            vm.config.insert(k.clone(), v.clone());
                        }
                        "name" => {
                            vm.name = v.clone();
                            vm.config.insert(k.clone(), v.clone());
                        }
                        _ => {
                            vm.config.insert(k.clone(), v.clone());
                        }
                    }
                }
            }
            if *method == Method::PUT {
                data(Value::Null)
            } else {
                data(json!(new_task(
                    shared,
                    &node,
                    "qmconfig",
                    vmid,
                    vmid,
                    &user,
                    Duration::ZERO
                )))
            }
        }
        ("POST", "/nodes/{node}/qemu/{vmid}/status/start") => {
            {
                let st = shared.lock();
                if st.vms.get(&vmid).is_some_and(|v| v.template) {
                    return fail(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "you can't start a vm if it's a template",
                    );
                }
            }
            data(json!(new_task(
                shared,
                &node,
                "qmstart",
                vmid,
                vmid,
                &user,
                o.task_delay
            )))
        }
        ("POST", "/nodes/{node}/qemu/{vmid}/status/shutdown") => data(json!(new_task(
            shared,
            &node,
            "qmshutdown",
            vmid,
            vmid,
            &user,
            o.task_delay
        ))),
        ("POST", "/nodes/{node}/qemu/{vmid}/status/reboot") => {
            // Proxmox reboots only a running VM (a shutdown, then a start, in one task).
            let running = shared
                .lock()
                .vms
                .get(&vmid)
                .is_some_and(|v| v.status == "running");
            if !running {
                return fail(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    &format!("VM {vmid} not running"),
                );
            }
            data(json!(new_task(
                shared,
                &node,
                "qmreboot",
                vmid,
                vmid,
                &user,
                o.task_delay
            )))
        }
        ("POST", "/nodes/{node}/qemu/{vmid}/status/stop") => data(json!(new_task(
            shared,
            &node,
            "qmstop",
            vmid,
            vmid,
            &user,
            o.task_delay
        ))),
        ("DELETE", "/nodes/{node}/qemu/{vmid}") => {
            {
                let mut st = shared.lock();
                if st.fail_deletes > 0 {
                    st.fail_deletes -= 1;
                    return fail(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        &format!("VM {vmid} is locked (backup)"),
                    );
                }
                if let Some(vm) = st.vms.get(&vmid) {
                    if vm.status == "running" {
                        return fail(
                            StatusCode::INTERNAL_SERVER_ERROR,
                            &format!("VM {vmid} is running - destroy failed"),
                        );
                    }
                    if vm.template {
                        return fail(
                            StatusCode::INTERNAL_SERVER_ERROR,
                            "refusing to destroy a template in the simulator",
                        );
                    }
                }
            }
            data(json!(new_task(
                shared,
                &node,
                "qmdestroy",
                vmid,
                vmid,
                &user,
                o.task_delay
            )))
        }
        ("POST", "/nodes/{node}/qemu/{vmid}/agent/ping") => {
            let st = shared.lock();
            match st.vms.get(&vmid) {
                Some(vm) if !vm.agent_enabled() => fail(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "No QEMU guest agent configured",
                ),
                Some(vm) if vm.status == "running" && vm.booted => data(json!({ "result": {} })),
                _ => fail(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "QEMU guest agent is not running",
                ),
            }
        }
        ("POST", "/nodes/{node}/qemu/{vmid}/agent/file-write") => {
            let mut st = shared.lock();
            match st.vms.get_mut(&vmid) {
                Some(vm) if vm.agent_enabled() && vm.booted && vm.status == "running" => {
                    vm.files.insert(
                        get("file").unwrap_or_default(),
                        get("content").unwrap_or_default(),
                    );
                    data(Value::Null)
                }
                _ => fail(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "QEMU guest agent is not running",
                ),
            }
        }
        ("POST", "/nodes/{node}/qemu/{vmid}/agent/exec") => {
            let command: Vec<String> = params
                .iter()
                .filter(|(k, _)| k == "command")
                .map(|(_, v)| v.clone())
                .collect();
            agent_exec(shared, vmid, command)
        }
        ("GET", "/nodes/{node}/qemu/{vmid}/agent/exec-status") => {
            let pid: i64 = get("pid").and_then(|p| p.parse().ok()).unwrap_or(-1);
            let st = shared.lock();
            match st.execs.get(&(vmid, pid)) {
                Some(e) if e.exited => {
                    let mut v = json!({ "exited": 1, "exitcode": e.exitcode });
                    if e.exitcode != 0 {
                        v["err-data"] = json!(
                            "simulated join failure: kubelet could not reach the API server\n"
                        );
                    }
                    data(v)
                }
                Some(_) => data(json!({ "exited": 0 })),
                None => fail(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    &format!("Agent error: PID {pid} does not exist"),
                ),
            }
        }
        _ => {
            shared.lock().violations.push(format!(
                "{method} {path}: valid per the schema, but the simulator does not implement {}",
                m.template
            ));
            fail(
                StatusCode::NOT_IMPLEMENTED,
                &format!(
                    "Method '{method} {}' not implemented by the simulator",
                    m.template
                ),
            )
        }
    }
}

/// Config keys the schema returns as integers (booleans are 0/1 too) and as numbers;
/// every other value is a string.
const CONFIG_INTEGERS: &[&str] = &[
    "acpi",
    "allow-ksm",
    "autostart",
    "balloon",
    "ciupgrade",
    "cores",
    "cpuunits",
    "freeze",
    "keephugepages",
    "kvm",
    "localtime",
    "migrate_speed",
    "numa",
    "onboot",
    "protection",
    "reboot",
    "shares",
    "smp",
    "snaptime",
    "sockets",
    "tablet",
    "tdf",
    "template",
    "vcpus",
];
const CONFIG_NUMBERS: &[&str] = &["cpulimit", "migrate_downtime"];

/// A config value typed as the schema's `returns` types it.
fn config_value(key: &str, v: &str) -> Value {
    if CONFIG_INTEGERS.contains(&key) {
        if let Ok(n) = v.parse::<i64>() {
            return json!(n);
        }
    }
    if CONFIG_NUMBERS.contains(&key) {
        if let Ok(n) = v.parse::<f64>() {
            return json!(n);
        }
    }
    json!(v)
}

/// The config's `digest`: SHA-1 of its text, as Proxmox computes it over the config
/// file, so it changes with every write that changes the config.
pub(super) fn config_digest(vm: &super::SimVm) -> String {
    let mut text = String::new();
    for (k, v) in &vm.config {
        text.push_str(k);
        text.push_str(": ");
        text.push_str(v);
        text.push('\n');
    }
    let d = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, text.as_bytes());
    d.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

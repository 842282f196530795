//! Nova servers: the server view, list, show, create (with its boot) and delete.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::SystemTime;

use axum::body::Bytes;
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::Engine as _;
use serde_json::{json, Map, Value};

use super::*;

pub(super) fn server_json(shared: &Shared, s: &SimServer, mv: (u32, u32)) -> Value {
    let o = &shared.opts;
    let base = shared.base();
    let flavor = o.flavors.iter().find(|f| f.id == s.flavor_id);
    let flavor_v = if mv >= (2, 47) {
        match flavor {
            Some(f) => json!({ "original_name": f.name, "ram": f.ram_mib, "vcpus": f.vcpus,
                "disk": f.disk_gb, "ephemeral": 0, "swap": 0,
                "extra_specs": o.flavor_extra_specs.get(&f.id).cloned().unwrap_or_default() }),
            None => json!({}),
        }
    } else {
        json!({ "id": s.flavor_id, "links": [{ "rel": "bookmark",
            "href": format!("{base}/compute/flavors/{}", s.flavor_id) }] })
    };
    let vm_state = match s.status.as_str() {
        "BUILD" => "building",
        "ERROR" => "error",
        "SHUTOFF" => "stopped",
        _ => "active",
    };
    let addresses: Map<String, Value> = s
        .networks
        .iter()
        .enumerate()
        .filter_map(|(i, nid)| {
            let net = o.networks.iter().find(|n| &n.id == nid)?;
            Some((
                net.name.clone(),
                json!([{ "version": 4, "addr": format!("10.0.0.{}", 10 + i), "OS-EXT-IPS:type": "fixed" }]),
            ))
        })
        .collect();
    let mut v = json!({
        "id": s.id,
        "name": s.name,
        "status": s.status,
        "tenant_id": o.project_id,
        "user_id": "0123456789abcdef0123456789abcdef",
        "metadata": s.metadata,
        "created": rfc3339(s.created),
        "updated": rfc3339(s.created),
        "hostId": "",
        "flavor": flavor_v,
        "image": { "id": s.image_id, "links": [{ "rel": "bookmark",
            "href": format!("{base}/compute/images/{}", s.image_id) }] },
        "addresses": addresses,
        "key_name": s.key_name,
        "security_groups": s.security_groups.iter().map(|n| json!({ "name": n })).collect::<Vec<_>>(),
        "OS-EXT-STS:task_state": s.task_state,
        "OS-EXT-STS:vm_state": vm_state,
        // 1 RUNNING, 4 SHUTDOWN, 0 NOSTATE.
        "OS-EXT-STS:power_state": match s.status.as_str() { "ACTIVE" => 1, "SHUTOFF" => 4, _ => 0 },
        // Real Nova shows "" until the server is scheduled (and for one never scheduled).
        "OS-EXT-AZ:availability_zone": s.availability_zone.clone().unwrap_or_else(|| {
            if s.status == "ACTIVE" { "nova".into() } else { String::new() }
        }),
        "OS-DCF:diskConfig": "MANUAL",
        "OS-SRV-USG:launched_at": if s.status == "BUILD" || s.status == "ERROR" { Value::Null } else {
            json!(humantime::format_rfc3339_micros(s.created).to_string().trim_end_matches('Z'))
        },
        "OS-SRV-USG:terminated_at": null,
        "config_drive": "",
        "os-extended-volumes:volumes_attached": [],
        "accessIPv4": "",
        "accessIPv6": "",
        "progress": 0,
        "links": [
            { "rel": "self", "href": format!("{base}/compute/v2.1/servers/{}", s.id) },
            { "rel": "bookmark", "href": format!("{base}/compute/servers/{}", s.id) },
        ],
    });
    if let Some(f) = &s.fault {
        v["fault"] = json!({ "code": fault_code(f), "message": f, "created": rfc3339(s.created) });
    }
    // The fields later microversions added, as real Nova shows them.
    for (since, key, value) in [
        ((2, 9), "locked", json!(false)),
        ((2, 19), "description", Value::Null),
        ((2, 26), "tags", json!(s.tags)),
        ((2, 63), "trusted_image_certificates", Value::Null),
        ((2, 73), "locked_reason", Value::Null),
        (
            (2, 90),
            "OS-EXT-SRV-ATTR:hostname",
            json!(s.name.to_ascii_lowercase()),
        ),
    ] {
        if mv >= since {
            v[key] = value;
        }
    }
    // Security groups come from the ports: a server on no network shows none.
    if s.networks.is_empty() {
        if let Some(o) = v.as_object_mut() {
            o.remove("security_groups");
        }
    }
    v
}

/// A server of an unreachable cell as Nova (≥2.69) shows it: what the API database
/// keeps, status `UNKNOWN`. `detail` adds `tenant_id` and `created` (list detail);
/// `show` adds what `GET /servers/{id}` has besides.
fn partial_json(shared: &Shared, s: &SimServer, show: bool) -> Value {
    let o = &shared.opts;
    let base = shared.base();
    let mut v = json!({
        "id": s.id,
        "status": "UNKNOWN",
        "tenant_id": o.project_id,
        "created": rfc3339(s.created),
        "links": [{ "rel": "self", "href": format!("{base}/compute/v2.1/servers/{}", s.id) }],
    });
    if show {
        let flavor = o.flavors.iter().find(|f| f.id == s.flavor_id);
        v["user_id"] = json!("0123456789abcdef0123456789abcdef");
        v["image"] = json!({ "id": s.image_id });
        v["flavor"] = match flavor {
            Some(f) => json!({ "original_name": f.name, "ram": f.ram_mib, "vcpus": f.vcpus,
                "disk": f.disk_gb, "ephemeral": 0, "swap": 0, "extra_specs": {} }),
            None => json!({}),
        };
        v["OS-EXT-AZ:availability_zone"] = json!(s
            .availability_zone
            .clone()
            .unwrap_or_else(|| "UNKNOWN".into()));
        v["OS-EXT-STS:power_state"] = json!(0);
    }
    v
}

pub(super) async fn list_servers(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    if let Some(r) = unauthorized_unless_token(&shared, &headers) {
        return r;
    }
    let mv = microversion(&headers);
    let limit = match q.get("limit").map(|l| l.parse::<usize>()) {
        None => shared.opts.page_size,
        Some(Ok(l)) => l.min(shared.opts.page_size),
        Some(Err(_)) => {
            return nova_error(
                StatusCode::BAD_REQUEST,
                "badRequest",
                "limit must be an integer",
            )
        }
    };
    let st = shared.lock();
    // Nova lists newest first.
    let mut all: Vec<&SimServer> = st.servers.iter().rev().collect();
    // A down cell's servers: left out below 2.69, and whenever a filter other than the
    // project's is given (Nova cannot test them against it).
    if mv < (2, 69) || q.keys().any(|k| !matches!(k.as_str(), "marker" | "limit")) {
        all.retain(|s| !st.down_cell.contains(&s.id));
    }
    if let Err(r) = super::lists::filter_servers(&mut all, &q, mv) {
        return *r;
    }
    let start = match q.get("marker") {
        None => 0,
        Some(m) => match all.iter().position(|s| &s.id == m) {
            Some(p) => p + 1,
            None => {
                return nova_error(
                    StatusCode::BAD_REQUEST,
                    "badRequest",
                    &format!("marker [{m}] not found"),
                )
            }
        },
    };
    let page: Vec<&SimServer> = all.iter().skip(start).take(limit).copied().collect();
    let servers: Vec<Value> = page
        .iter()
        .map(|s| {
            if st.down_cell.contains(&s.id) {
                return partial_json(&shared, s, false);
            }
            let mut v = server_json(&shared, s, mv);
            // A server no host was found for stays in cell0, and real Nova's detail
            // list leaves out the fault of cell0 servers: only GET /servers/{id} has it.
            if s.fault.as_deref() == Some(NO_VALID_HOST) {
                if let Some(o) = v.as_object_mut() {
                    o.remove("fault");
                }
            }
            v
        })
        .collect();
    let mut body = json!({ "servers": servers });
    if limit > 0 && page.len() == limit && start + limit < all.len() {
        if let Some(last) = page.last() {
            body["servers_links"] = json!([{ "rel": "next", "href": format!(
                "{}/compute/v2.1/servers/detail?limit={limit}&marker={}", shared.base(), last.id) }]);
        }
    }
    Json(body).into_response()
}

pub(super) async fn show_server(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    UrlPath(id): UrlPath<String>,
) -> Response {
    if let Some(r) = unauthorized_unless_token(&shared, &headers) {
        return r;
    }
    let mv = microversion(&headers);
    let st = shared.lock();
    match st.servers.iter().find(|s| s.id == id) {
        Some(s) if st.down_cell.contains(&s.id) => {
            if mv < (2, 69) {
                return nova_error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "serviceUnavailable",
                    "the cell of this server cannot be reached",
                );
            }
            Json(json!({ "server": partial_json(&shared, s, true) })).into_response()
        }
        Some(s) => {
            let mut v = server_json(&shared, s, mv);
            // Only the single-server view has it (microversion ≥2.71).
            if mv >= (2, 71) {
                v["server_groups"] = json!(s.server_group.iter().collect::<Vec<_>>());
            }
            Json(json!({ "server": v })).into_response()
        }
        None => nova_error(
            StatusCode::NOT_FOUND,
            "itemNotFound",
            &format!("Instance {id} could not be found."),
        ),
    }
}

pub(super) async fn create_server(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Some(r) = unauthorized_unless_token(&shared, &headers) {
        return r;
    }
    let bad = |m: &str| nova_error(StatusCode::BAD_REQUEST, "badRequest", m);
    let o = &shared.opts;
    let Ok(v) = serde_json::from_slice::<Value>(&body) else {
        return bad("Malformed request body");
    };
    let s = &v["server"];
    if !s.is_object() {
        return bad("Invalid input for field/attribute server.");
    }
    let Some(name) = s["name"].as_str() else {
        return bad("Invalid input for field/attribute name.");
    };
    if name.is_empty() {
        return bad("Invalid input for field/attribute name. Value: . '' is too short");
    }
    if let Some(why) = invalid_name(name) {
        return bad(&why);
    }
    let Some(flavor_ref) = s["flavorRef"].as_str() else {
        return bad("Invalid input for field/attribute flavorRef.");
    };
    let Some(flavor) = o.flavors.iter().find(|f| f.id == flavor_ref) else {
        return bad(&format!("Flavor {flavor_ref} could not be found."));
    };
    let Some(image_ref) = s["imageRef"].as_str() else {
        return bad("Block Device Mapping is Invalid: imageRef is required.");
    };
    if !o.images.iter().any(|i| i.id == image_ref) {
        return bad(&format!("Image {image_ref} could not be found."));
    }
    let networks = match &s["networks"] {
        Value::String(x) if x == "none" || x == "auto" => Vec::new(),
        Value::Array(list) => {
            let mut ids = Vec::new();
            for n in list {
                let Some(uuid) = n["uuid"].as_str() else {
                    return bad("Invalid input for field/attribute networks.");
                };
                let Some(net) = o.networks.iter().find(|x| x.id == uuid) else {
                    return bad(&format!("Network {uuid} could not be found."));
                };
                if net.subnets.is_empty() {
                    return bad(&format!(
                        "Network {uuid} requires a subnet in order to boot instances on."
                    ));
                }
                ids.push(uuid.to_string());
            }
            ids
        }
        Value::Null if microversion(&headers) < (2, 37) => Vec::new(),
        _ => return bad("Invalid input for field/attribute networks."),
    };
    let user_data = match s["user_data"].as_str() {
        None => None,
        Some(b64) => match base64::engine::general_purpose::STANDARD.decode(b64) {
            Ok(bytes) => Some(String::from_utf8_lossy(&bytes).into_owned()),
            Err(_) => return bad("User data needs to be valid base 64."),
        },
    };
    let metadata = match metadata_of(&s["metadata"]) {
        Ok(m) => m,
        Err(r) => return *r,
    };
    let server_group = match &v["os:scheduler_hints"] {
        Value::Null => None,
        Value::Object(hints) => match hints.get("group") {
            None => None,
            Some(Value::String(g)) if looks_like_uuid(g) => {
                if !o.server_groups.iter().any(|x| x.id == *g) {
                    return bad(&format!("Instance group {g} could not be found."));
                }
                Some(g.clone())
            }
            Some(g) => {
                return bad(&format!(
                    "Invalid input for field/attribute group. Value: {g}. {g} is not a 'uuid'"
                ))
            }
        },
        _ => return bad("Invalid input for field/attribute os:scheduler_hints."),
    };
    let tags: Vec<String> = match &s["tags"] {
        Value::Null => Vec::new(),
        _ if microversion(&headers) < (2, 52) => {
            return bad("Invalid input for field/attribute server. Value: {...}. Additional properties are not allowed ('tags' was unexpected)")
        }
        Value::Array(list) if list.len() <= 50 => {
            let mut out = Vec::new();
            for t in list {
                match t.as_str() {
                    Some(t) if t.chars().count() <= 60 && !t.contains(['/', ',']) => {
                        out.push(t.to_string())
                    }
                    _ => {
                        return bad(&format!(
                            "Invalid input for field/attribute tags. Value: {t}. does not match '^[^,/]*$' or is longer than 60"
                        ))
                    }
                }
            }
            out
        }
        _ => return bad("Invalid input for field/attribute tags."),
    };
    let security_groups: Vec<String> = match s["security_groups"].as_array() {
        Some(list) => list
            .iter()
            .filter_map(|g| g["name"].as_str().map(str::to_string))
            .collect(),
        None => vec!["default".into()],
    };
    // What real Nova checks before accepting a create: the key pair, the security
    // groups (by name or id, in Neutron) and the availability zone.
    if let Some(key) = s["key_name"].as_str() {
        if !o.key_pairs.iter().any(|k| k == key) {
            return bad("Invalid key_name provided.");
        }
    }
    for g in &security_groups {
        if !o.security_groups.iter().any(|x| x.name == *g || x.id == *g) {
            return bad(&format!("Security group {g} not found."));
        }
    }
    if let Some(zone) = s["availability_zone"].as_str() {
        if !o.availability_zones.iter().any(|z| z == zone) {
            return bad("The requested availability zone is not available");
        }
    }

    let mut st = shared.lock();
    let mut late_fault = None;
    if !st.fail_creates.is_empty() {
        match st.fail_creates.remove(0) {
            CreateFailure::Quota => {
                return nova_error(
                    StatusCode::FORBIDDEN,
                    "forbidden",
                    "Quota exceeded for instances: Requested 1, but already used 10 of 10 instances",
                )
            }
            CreateFailure::ServerError => {
                return nova_error(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "computeFault",
                    "Unexpected API Error. Please report this at http://bugs.launchpad.net/nova/ and attach the Nova API log if possible.",
                )
            }
            CreateFailure::NoValidHost => late_fault = Some(NO_VALID_HOST.to_string()),
            CreateFailure::QuotaOnRecheck => {
                let used = st.servers.len();
                late_fault = Some(format!(
                    "Quota exceeded for instances: Requested 1, but already used {used} of {used} instances"
                ))
            }
        }
    }
    if let Some(max) = o.max_instances {
        if st.servers.len() >= max {
            return nova_error(
                StatusCode::FORBIDDEN,
                "forbidden",
                &format!(
                    "Quota exceeded for instances: Requested 1, but already used {} of {max} instances",
                    st.servers.len()
                ),
            );
        }
    }
    st.counter += 1;
    let id = pseudo_uuid(st.counter);
    if let Some(fault) = late_fault {
        st.late_faults.insert(id.clone(), fault);
    }
    st.servers.push(SimServer {
        id: id.clone(),
        name: name.to_string(),
        status: "BUILD".into(),
        task_state: Some("scheduling".into()),
        flavor_id: flavor.id.clone(),
        image_id: image_ref.to_string(),
        networks,
        metadata,
        user_data,
        key_name: s["key_name"].as_str().map(str::to_string),
        security_groups: security_groups.clone(),
        availability_zone: s["availability_zone"].as_str().map(str::to_string),
        server_group,
        tags,
        fault: None,
        created: shared.now(),
    });
    drop(st);

    let delay = o.boot_delay;
    let booter = shared.clone();
    let boot_id = id.clone();
    tokio::spawn(async move {
        tokio::time::sleep(delay).await;
        finish_boot(&booter, &boot_id);
    });
    if o.faults.half_done(HalfDone::CreateFailsButServerAppears) {
        return nova_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "computeFault",
            "Unexpected API Error. Please report this at http://bugs.launchpad.net/nova/ and attach the Nova API log if possible.",
        );
    }

    let href = format!("{}/compute/v2.1/servers/{id}", shared.base());
    let mut resp = (
        StatusCode::ACCEPTED,
        Json(json!({ "server": {
            "id": id,
            "links": [{ "rel": "self", "href": href }],
            "OS-DCF:diskConfig": "MANUAL",
            "security_groups": security_groups.iter().map(|n| json!({ "name": n })).collect::<Vec<_>>(),
            "adminPass": "simAdminPass1",
        } })),
    )
        .into_response();
    if let Ok(v) = HeaderValue::from_str(&href) {
        resp.headers_mut().insert("Location", v);
    }
    resp
}

/// Real Nova's fault message, trailing space included.
pub(super) const NO_VALID_HOST: &str = "No valid host was found. ";

/// Code of a server fault as real Nova reports it: 413 for the quota recheck, else 500.
pub(super) fn fault_code(message: &str) -> u16 {
    if message.starts_with("Quota exceeded") {
        413
    } else {
        500
    }
}

pub(super) fn finish_boot(shared: &Shared, id: &str) {
    let event = {
        let mut st = shared.lock();
        let late_fault = st.late_faults.remove(id);
        let never: Vec<String> = st.never_boot.clone();
        let Some(s) = st.servers.iter_mut().find(|s| s.id == id) else {
            return;
        };
        if s.status != "BUILD" || s.task_state.as_deref() == Some("deleting") {
            return;
        }
        if let Some(fault) = late_fault {
            s.status = "ERROR".into();
            s.task_state = None;
            s.fault = Some(fault);
            return;
        }
        if never.iter().any(|p| s.name.starts_with(p.as_str())) {
            s.task_state = Some("spawning".into());
            return;
        }
        s.status = "ACTIVE".into();
        s.task_state = None;
        booted(shared, s)
    };
    shared.fire(event);
}

/// The event of server `s` booting (at create, or started again): its user data and the
/// size of its flavor, for the simulated kubelet.
pub(super) fn booted(shared: &Shared, s: &SimServer) -> VmEvent {
    let flavor = shared.opts.flavors.iter().find(|f| f.id == s.flavor_id);
    VmEvent::Booted {
        name: s.name.clone(),
        user_data: s.user_data.clone().unwrap_or_default(),
        memory_bytes: flavor.map(|f| f.ram_mib * 1024 * 1024).unwrap_or(0),
        cpus: flavor.map(|f| f.vcpus).unwrap_or(0),
    }
}

pub(super) fn remove_server(shared: &Shared, id: &str) {
    let name = {
        let mut st = shared.lock();
        let Some(pos) = st.servers.iter().position(|s| s.id == id) else {
            return;
        };
        st.servers.remove(pos).name
    };
    shared.fire(VmEvent::Deleted { name });
}

pub(super) async fn delete_server(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    UrlPath(id): UrlPath<String>,
) -> Response {
    if let Some(r) = unauthorized_unless_token(&shared, &headers) {
        return r;
    }
    {
        let mut st = shared.lock();
        if !st.servers.iter().any(|s| s.id == id) {
            return nova_error(
                StatusCode::NOT_FOUND,
                "itemNotFound",
                &format!("Instance {id} could not be found."),
            );
        }
        if st.fail_deletes > 0 {
            st.fail_deletes -= 1;
            return nova_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "computeFault",
                "Unexpected API Error. Please report this at http://bugs.launchpad.net/nova/ and attach the Nova API log if possible.",
            );
        }
        // Accepted, then lost (a compute host that never acts on it): the server stays
        // as it was, with no task in progress.
        if shared.opts.faults.half_done(HalfDone::DeleteNeverHappens) {
            return StatusCode::NO_CONTENT.into_response();
        }
        if let Some(s) = st.servers.iter_mut().find(|s| s.id == id) {
            s.task_state = Some("deleting".into());
        }
    }
    let delay = shared.opts.delete_delay;
    if delay.is_zero() {
        remove_server(&shared, &id);
    } else {
        let s2 = shared.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            remove_server(&s2, &id);
        });
    }
    StatusCode::NO_CONTENT.into_response()
}

pub(super) fn looks_like_uuid(s: &str) -> bool {
    let hex: Vec<char> = s.chars().filter(|c| *c != '-').collect();
    hex.len() == 32 && hex.iter().all(char::is_ascii_hexdigit)
}

/// Nova's limit of metadata items a server may have (the `metadata_items` quota).
pub(super) const MAX_METADATA_ITEMS: usize = 128;

/// Why Nova's schema refuses `name` (1 to 255 characters, printable, no whitespace at
/// either end), or `None`; the messages are real Nova's.
pub(super) fn invalid_name(name: &str) -> Option<String> {
    if name.chars().count() > 255 {
        return Some(format!(
            "Invalid input for field/attribute name. Value: {name}. '{name}' is too long"
        ));
    }
    let edge_space = name.starts_with(char::is_whitespace) || name.ends_with(char::is_whitespace);
    if edge_space || name.chars().any(char::is_control) {
        return Some("An invalid 'name' value was provided. The name must be: printable characters. Can not start or end with whitespace.".into());
    }
    None
}

/// The `metadata` of a create as Nova checks it: keys of 1 to 255 characters from
/// `[a-zA-Z0-9-_:. ]`, string values up to 255 (400 from its schema), at most
/// [`MAX_METADATA_ITEMS`] items (403 from its quota check). Real Nova's messages.
pub(super) fn metadata_of(v: &Value) -> Result<BTreeMap<String, String>, Box<Response>> {
    let bad = |m: &str| Box::new(nova_error(StatusCode::BAD_REQUEST, "badRequest", m));
    let m = match v {
        Value::Null => return Ok(BTreeMap::new()),
        Value::Object(m) => m,
        other => {
            return Err(bad(&format!(
                "Invalid input for field/attribute metadata. Value: {}. {} is not of type 'object'",
                py_str(other),
                py_repr(other)
            )))
        }
    };
    let key_ok = |k: &str| {
        (1..=255).contains(&k.chars().count())
            && k.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_:. ".contains(c))
    };
    let mut out = BTreeMap::new();
    for (k, val) in m {
        if !key_ok(k) {
            return Err(bad(&format!(
                "Invalid input for field/attribute metadata. Value: {}. '{k}' does not match any of the regexes: '^[a-zA-Z0-9-_:. ]{{1,255}}$'",
                py_repr(v)
            )));
        }
        let Some(text) = val.as_str() else {
            return Err(bad(&format!(
                "Invalid input for field/attribute {k}. Value: {}. {} is not of type 'string'",
                py_str(val),
                py_repr(val)
            )));
        };
        if text.chars().count() > 255 {
            return Err(bad(&format!(
                "Invalid input for field/attribute {k}. Value: {text}. '{text}' is too long"
            )));
        }
        out.insert(k.clone(), text.to_string());
    }
    if out.len() > MAX_METADATA_ITEMS {
        return Err(Box::new(nova_error(
            StatusCode::FORBIDDEN,
            "forbidden",
            &format!("Maximum number of metadata items exceeds {MAX_METADATA_ITEMS}"),
        )));
    }
    Ok(out)
}

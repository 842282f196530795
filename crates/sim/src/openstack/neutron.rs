//! Neutron subnets and ports, read-only: the subnets of the configured networks and
//! one port for each network a server was booted on, as a client looking up a
//! server's addresses or a network's subnets sees them.

use std::sync::Arc;

use axum::extract::{Path as UrlPath, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::*;

fn neutron_not_found(kind: &str, id: &str) -> Response {
    (
        StatusCode::NOT_FOUND,
        Json(json!({ "NeutronError": {
            "type": format!("{kind}NotFound"),
            "message": format!("{kind} {id} could not be found."),
            "detail": "",
        } })),
    )
        .into_response()
}

/// Whether every `key` given in the query (repeatable, as Neutron allows) admits `value`.
fn wanted(q: &[(String, String)], key: &str, value: &str) -> bool {
    let given: Vec<&str> = q
        .iter()
        .filter(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
        .collect();
    given.is_empty() || given.contains(&value)
}

/// Subnet `i` of network `n`: 10.0.i.0/24.
fn subnet_json(shared: &Shared, n: &SimNetwork, i: usize, id: &str) -> Value {
    let p = &shared.opts.project_id;
    json!({
        "id": id, "name": format!("{}-subnet-{i}", n.name), "network_id": n.id,
        "ip_version": 4, "cidr": format!("10.0.{i}.0/24"), "gateway_ip": format!("10.0.{i}.1"),
        "enable_dhcp": true, "dns_nameservers": [], "host_routes": [],
        "allocation_pools": [{ "start": format!("10.0.{i}.2"), "end": format!("10.0.{i}.254") }],
        "ipv6_address_mode": null, "ipv6_ra_mode": null, "subnetpool_id": null,
        "description": "", "tags": [], "revision_number": 0, "service_types": [],
        "tenant_id": p, "project_id": p,
        "created_at": "2024-01-01T00:00:00Z", "updated_at": "2024-01-01T00:00:00Z",
    })
}

fn all_subnets(shared: &Shared) -> Vec<(String, Value)> {
    shared
        .opts
        .networks
        .iter()
        .flat_map(|n| {
            n.subnets
                .iter()
                .enumerate()
                .map(|(i, id)| (id.clone(), subnet_json(shared, n, i, id)))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// `GET /v2.0/subnets`, filtered by `id`, `name` or `network_id`.
pub(super) async fn list_subnets(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Query(q): Query<Vec<(String, String)>>,
) -> Response {
    if let Some(r) = unauthorized_unless_token(&shared, &headers) {
        return r;
    }
    let subnets: Vec<Value> = all_subnets(&shared)
        .into_iter()
        .map(|(_, v)| v)
        .filter(|v| {
            ["id", "name", "network_id"]
                .iter()
                .all(|k| wanted(&q, k, v[*k].as_str().unwrap_or("")))
        })
        .collect();
    Json(json!({ "subnets": subnets })).into_response()
}

/// `GET /v2.0/subnets/{id}`.
pub(super) async fn show_subnet(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    UrlPath(id): UrlPath<String>,
) -> Response {
    if let Some(r) = unauthorized_unless_token(&shared, &headers) {
        return r;
    }
    match all_subnets(&shared).into_iter().find(|(sid, _)| *sid == id) {
        Some((_, v)) => Json(json!({ "subnet": v })).into_response(),
        None => neutron_not_found("Subnet", &id),
    }
}

/// The ports of the servers: one per network a server is on, its id derived from the
/// server's so it stays the same between calls.
fn all_ports(shared: &Shared) -> Vec<Value> {
    let p = &shared.opts.project_id;
    let st = shared.lock();
    let mut out = Vec::new();
    for s in &st.servers {
        for (i, nid) in s.networks.iter().enumerate() {
            let Some(net) = shared.opts.networks.iter().find(|n| &n.id == nid) else {
                continue;
            };
            let tail = s.id.get(8..).unwrap_or("");
            let id = format!("{:08x}{tail}", 0xb0a7_0000u32 + i as u32);
            let fixed: Vec<Value> = net
                .subnets
                .first()
                .map(|sub| json!({ "subnet_id": sub, "ip_address": format!("10.0.0.{}", 10 + i) }))
                .into_iter()
                .collect();
            out.push(json!({
                "id": id, "name": "", "network_id": nid, "device_id": s.id,
                "device_owner": "compute:nova", "status": if s.status == "ACTIVE" { "ACTIVE" } else { "DOWN" },
                "admin_state_up": true, "mac_address": format!("fa:16:3e:00:{:02x}:{:02x}", i, s.id.len()),
                "fixed_ips": fixed, "allowed_address_pairs": [], "extra_dhcp_opts": [],
                "security_groups": [], "port_security_enabled": true, "description": "",
                "binding:vnic_type": "normal", "tags": [], "revision_number": 1,
                "tenant_id": p, "project_id": p,
                "created_at": rfc3339(s.created), "updated_at": rfc3339(s.created),
            }));
        }
    }
    out
}

/// `GET /v2.0/ports`, filtered by `id`, `device_id`, `network_id` or `device_owner`.
pub(super) async fn list_ports(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Query(q): Query<Vec<(String, String)>>,
) -> Response {
    if let Some(r) = unauthorized_unless_token(&shared, &headers) {
        return r;
    }
    let ports: Vec<Value> = all_ports(&shared)
        .into_iter()
        .filter(|v| {
            ["id", "device_id", "network_id", "device_owner"]
                .iter()
                .all(|k| wanted(&q, k, v[*k].as_str().unwrap_or("")))
        })
        .collect();
    Json(json!({ "ports": ports })).into_response()
}

/// `GET /v2.0/ports/{id}`.
pub(super) async fn show_port(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    UrlPath(id): UrlPath<String>,
) -> Response {
    if let Some(r) = unauthorized_unless_token(&shared, &headers) {
        return r;
    }
    match all_ports(&shared)
        .into_iter()
        .find(|p| p["id"] == id.as_str())
    {
        Some(v) => Json(json!({ "port": v })).into_response(),
        None => neutron_not_found("Port", &id),
    }
}

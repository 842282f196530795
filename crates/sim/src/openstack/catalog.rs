//! What servers are made of: flavors, server groups, Glance images, Neutron networks.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Path as UrlPath, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::*;

/// A flavor as Nova shows it: `description` from microversion 2.55, `extra_specs` from
/// 2.61; `swap` is `""` when there is none before 2.75 and `0` from it, as Nova answers.
pub(super) fn flavor_json(shared: &Shared, f: &SimFlavor, mv: (u32, u32)) -> Value {
    let base = shared.base();
    let mut v = json!({
        "id": f.id, "name": f.name, "ram": f.ram_mib, "vcpus": f.vcpus, "disk": f.disk_gb,
        "OS-FLV-EXT-DATA:ephemeral": 0, "OS-FLV-DISABLED:disabled": false, "swap": "",
        "rxtx_factor": 1.0, "os-flavor-access:is_public": true,
        "links": [
            { "rel": "self", "href": format!("{base}/compute/v2.1/flavors/{}", f.id) },
            { "rel": "bookmark", "href": format!("{base}/compute/flavors/{}", f.id) },
        ],
    });
    if mv >= (2, 55) {
        v["description"] = Value::Null;
    }
    if mv >= (2, 75) {
        v["swap"] = json!(0);
    }
    if mv >= (2, 61) {
        v["extra_specs"] = json!(shared
            .opts
            .flavor_extra_specs
            .get(&f.id)
            .cloned()
            .unwrap_or_default());
    }
    v
}

pub(super) async fn list_flavors(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
) -> Response {
    if let Some(r) = unauthorized_unless_token(&shared, &headers) {
        return r;
    }
    let mv = microversion(&headers);
    let flavors: Vec<Value> = shared
        .opts
        .flavors
        .iter()
        .map(|f| flavor_json(&shared, f, mv))
        .collect();
    Json(json!({ "flavors": flavors })).into_response()
}

pub(super) async fn show_flavor(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    UrlPath(id): UrlPath<String>,
) -> Response {
    if let Some(r) = unauthorized_unless_token(&shared, &headers) {
        return r;
    }
    match shared.opts.flavors.iter().find(|f| f.id == id) {
        Some(f) => Json(json!({ "flavor": flavor_json(&shared, f, microversion(&headers)) }))
            .into_response(),
        None => nova_error(
            StatusCode::NOT_FOUND,
            "itemNotFound",
            &format!("Flavor {id} could not be found."),
        ),
    }
}

pub(super) async fn list_server_groups(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
) -> Response {
    if let Some(r) = unauthorized_unless_token(&shared, &headers) {
        return r;
    }
    let mv = microversion(&headers);
    let st = shared.lock();
    let groups: Vec<Value> = shared
        .opts
        .server_groups
        .iter()
        .map(|g| {
            let members: Vec<&str> = st
                .servers
                .iter()
                .filter(|s| s.server_group.as_deref() == Some(g.id.as_str()))
                .map(|s| s.id.as_str())
                .collect();
            let mut v = json!({ "id": g.id, "name": g.name, "members": members });
            if mv >= (2, 64) {
                v["policy"] = json!(g.policy);
                v["rules"] = json!({});
                v["project_id"] = json!(shared.opts.project_id);
                v["user_id"] = json!("0123456789abcdef0123456789abcdef");
            } else {
                v["policies"] = json!([g.policy]);
                v["metadata"] = json!({});
            }
            v
        })
        .collect();
    Json(json!({ "server_groups": groups })).into_response()
}

/// `GET /os-server-groups/{id}`: 404 as real Nova answers for an unknown id.
pub(super) async fn show_server_group(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    UrlPath(id): UrlPath<String>,
) -> Response {
    if let Some(r) = unauthorized_unless_token(&shared, &headers) {
        return r;
    }
    let Some(g) = shared.opts.server_groups.iter().find(|g| g.id == id) else {
        return nova_error(
            StatusCode::NOT_FOUND,
            "itemNotFound",
            &format!("Instance group {id} could not be found."),
        );
    };
    let st = shared.lock();
    let members: Vec<&str> = st
        .servers
        .iter()
        .filter(|s| s.server_group.as_deref() == Some(g.id.as_str()))
        .map(|s| s.id.as_str())
        .collect();
    let mut v = json!({ "id": g.id, "name": g.name, "members": members });
    if microversion(&headers) >= (2, 64) {
        v["policy"] = json!(g.policy);
        v["rules"] = json!({});
    } else {
        v["policies"] = json!([g.policy]);
        v["metadata"] = json!({});
    }
    Json(json!({ "server_group": v })).into_response()
}

/// `GET /os-keypairs/{name}`: the user's key pair, or 404 as real Nova answers.
pub(super) async fn show_key_pair(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    UrlPath(name): UrlPath<String>,
) -> Response {
    if let Some(r) = unauthorized_unless_token(&shared, &headers) {
        return r;
    }
    let user_id = "0123456789abcdef0123456789abcdef";
    if !shared.opts.key_pairs.contains(&name) {
        return nova_error(
            StatusCode::NOT_FOUND,
            "itemNotFound",
            &format!("Keypair {name} not found for user {user_id}"),
        );
    }
    Json(json!({ "keypair": {
        "name": name, "user_id": user_id, "type": "ssh", "id": 1, "deleted": false,
        "created_at": "2024-01-01T00:00:00.000000", "updated_at": null, "deleted_at": null,
        "fingerprint": "9b:2a:4c:61:e3:7f:10:88:5d:af:02:3b:c6:91:7e:44",
        "public_key": format!("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAISimulatedKeyOnly {name}"),
    } }))
    .into_response()
}

/// `GET /os-availability-zone`: the zones a create may ask for.
pub(super) async fn list_availability_zones(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
) -> Response {
    if let Some(r) = unauthorized_unless_token(&shared, &headers) {
        return r;
    }
    let zones: Vec<Value> = shared
        .opts
        .availability_zones
        .iter()
        .map(|z| json!({ "zoneName": z, "zoneState": { "available": true }, "hosts": null }))
        .collect();
    Json(json!({ "availabilityZoneInfo": zones })).into_response()
}

/// `GET /v2.0/security-groups` (Neutron), filtered by `name` or `id` as Neutron does.
pub(super) async fn list_security_groups(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Query(q): Query<Vec<(String, String)>>,
) -> Response {
    if let Some(r) = unauthorized_unless_token(&shared, &headers) {
        return r;
    }
    let wanted = |key: &str, value: &str| {
        let given: Vec<&str> = q
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .collect();
        given.is_empty() || given.contains(&value)
    };
    let groups: Vec<Value> = shared
        .opts
        .security_groups
        .iter()
        .filter(|g| wanted("name", &g.name) && wanted("id", &g.id))
        .map(|g| {
            json!({
                "id": g.id, "name": g.name, "description": "", "stateful": true,
                "tenant_id": shared.opts.project_id, "project_id": shared.opts.project_id,
                "security_group_rules": [], "tags": [], "revision_number": 1,
                "created_at": "2024-01-01T00:00:00Z", "updated_at": "2024-01-01T00:00:00Z",
            })
        })
        .collect();
    Json(json!({ "security_groups": groups })).into_response()
}

pub(super) fn image_json(i: &SimImage) -> Value {
    json!({
        "id": i.id, "name": i.name, "status": "active", "visibility": "public",
        "protected": false, "os_hidden": false, "disk_format": "qcow2", "container_format": "bare",
        "min_ram": 0, "min_disk": 0, "size": 1073741824u64, "tags": [],
        "created_at": "2024-01-01T00:00:00Z", "updated_at": "2024-01-01T00:00:00Z",
        "self": format!("/v2/images/{}", i.id), "file": format!("/v2/images/{}/file", i.id),
        "schema": "/v2/schemas/image",
    })
}

pub(super) async fn list_images(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    if let Some(r) = unauthorized_unless_token(&shared, &headers) {
        return r;
    }
    let images: Vec<Value> = shared
        .opts
        .images
        .iter()
        .filter(|i| q.get("name").is_none_or(|n| *n == i.name))
        .filter(|i| q.get("id").is_none_or(|n| *n == i.id))
        .map(image_json)
        .collect();
    Json(json!({ "images": images, "first": "/v2/images", "schema": "/v2/schemas/images" }))
        .into_response()
}

pub(super) async fn show_image(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    UrlPath(id): UrlPath<String>,
) -> Response {
    if let Some(r) = unauthorized_unless_token(&shared, &headers) {
        return r;
    }
    match shared.opts.images.iter().find(|i| i.id == id) {
        Some(i) => Json(image_json(i)).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            // Real Glance answers 404 with webob's HTML error page.
            [("Content-Type", "text/html; charset=UTF-8")],
            format!(
                "<html>\n <head>\n  <title>404 Not Found</title>\n </head>\n <body>\n  <h1>404 Not Found</h1>\n  No image found with ID {id}<br /><br />\n\n\n\n </body>\n</html>"
            ),
        )
            .into_response(),
    }
}

pub(super) fn network_json(shared: &Shared, n: &SimNetwork) -> Value {
    json!({
        "id": n.id, "name": n.name, "status": "ACTIVE", "admin_state_up": true,
        "shared": false, "subnets": n.subnets, "mtu": 1450, "router:external": false,
        "tenant_id": shared.opts.project_id, "project_id": shared.opts.project_id,
        "availability_zones": ["nova"], "tags": [],
    })
}

pub(super) async fn list_networks(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    if let Some(r) = unauthorized_unless_token(&shared, &headers) {
        return r;
    }
    let networks: Vec<Value> = shared
        .opts
        .networks
        .iter()
        .filter(|n| q.get("name").is_none_or(|x| *x == n.name))
        .filter(|n| q.get("id").is_none_or(|x| *x == n.id))
        .map(|n| network_json(&shared, n))
        .collect();
    Json(json!({ "networks": networks })).into_response()
}

pub(super) async fn show_network(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    UrlPath(id): UrlPath<String>,
) -> Response {
    if let Some(r) = unauthorized_unless_token(&shared, &headers) {
        return r;
    }
    match shared.opts.networks.iter().find(|n| n.id == id) {
        Some(n) => Json(json!({ "network": network_json(&shared, n) })).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            Json(json!({ "NeutronError": {
                "type": "NetworkNotFound",
                "message": format!("Network {id} could not be found."),
                "detail": "",
            } })),
        )
            .into_response(),
    }
}

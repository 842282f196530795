//! Version discovery documents at each service's root and versioned root, as the real
//! services answer them without a token: keystoneauth (the `openstack` CLI,
//! openstacksdk) reads them to find the API version behind each catalog URL and fails
//! without them.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::http::{MAX_MICROVERSION, MIN_MICROVERSION};
use super::*;

fn keystone_v3(base: &str) -> Value {
    json!({
        "id": "v3.14",
        "status": "stable",
        "updated": "2020-04-07T00:00:00Z",
        "links": [{ "rel": "self", "href": format!("{base}/identity/v3/") }],
        "media-types": [{ "base": "application/json",
                          "type": "application/vnd.openstack.identity-v3+json" }],
    })
}

/// `GET /identity/`: 300 Multiple Choices listing v3, as Keystone answers.
pub(super) async fn keystone_root(State(shared): State<Arc<Shared>>) -> Response {
    let v = keystone_v3(&shared.base());
    (
        StatusCode::MULTIPLE_CHOICES,
        Json(json!({ "versions": { "values": [v] } })),
    )
        .into_response()
}

/// `GET /identity/v3`: the v3 version document.
pub(super) async fn keystone_version(State(shared): State<Arc<Shared>>) -> Response {
    Json(json!({ "version": keystone_v3(&shared.base()) })).into_response()
}

fn nova_v21(base: &str) -> Value {
    json!({
        "id": "v2.1",
        "status": "CURRENT",
        "version": format!("{}.{}", MAX_MICROVERSION.0, MAX_MICROVERSION.1),
        "min_version": format!("{}.{}", MIN_MICROVERSION.0, MIN_MICROVERSION.1),
        "updated": "2013-07-23T11:33:21Z",
        "links": [{ "rel": "self", "href": format!("{base}/compute/v2.1/") }],
    })
}

/// `GET /compute/`: Nova's version list (200, the legacy v2.0 and the current v2.1).
pub(super) async fn nova_root(State(shared): State<Arc<Shared>>) -> Response {
    let base = shared.base();
    Json(json!({ "versions": [
        { "id": "v2.0", "status": "SUPPORTED", "version": "", "min_version": "",
          "updated": "2011-01-21T11:33:21Z",
          "links": [{ "rel": "self", "href": format!("{base}/compute/v2/") }] },
        nova_v21(&base),
    ] }))
    .into_response()
}

/// `GET /compute/v2.1`: the v2.1 version document with the microversion range.
pub(super) async fn nova_version(State(shared): State<Arc<Shared>>) -> Response {
    let base = shared.base();
    let mut v = nova_v21(&base);
    v["links"] = json!([
        { "rel": "self", "href": format!("{base}/compute/v2.1/") },
        { "rel": "describedby", "type": "text/html", "href": "http://docs.openstack.org/" },
    ]);
    v["media-types"] = json!([{ "base": "application/json",
        "type": "application/vnd.openstack.compute+json;version=2.1" }]);
    Json(json!({ "version": v })).into_response()
}

/// `GET /image/`: Glance answers 300 with its versions, newest first.
pub(super) async fn glance_root(State(shared): State<Arc<Shared>>) -> Response {
    let href = format!("{}/image/v2/", shared.base());
    let versions: Vec<Value> = [
        "v2.15", "v2.9", "v2.7", "v2.6", "v2.5", "v2.4", "v2.3", "v2.2", "v2.1", "v2.0",
    ]
    .iter()
    .enumerate()
    .map(|(i, id)| {
        json!({ "id": id, "status": if i == 0 { "CURRENT" } else { "SUPPORTED" },
                    "links": [{ "rel": "self", "href": href }] })
    })
    .collect();
    (
        StatusCode::MULTIPLE_CHOICES,
        Json(json!({ "versions": versions })),
    )
        .into_response()
}

/// `GET /network/`: Neutron's one version.
pub(super) async fn neutron_root(State(shared): State<Arc<Shared>>) -> Response {
    let href = format!("{}/network/v2.0/", shared.base());
    Json(json!({ "versions": [
        { "id": "v2.0", "status": "CURRENT", "links": [{ "rel": "self", "href": href }] },
    ] }))
    .into_response()
}

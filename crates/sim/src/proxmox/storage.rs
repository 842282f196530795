//! Storages and their content: `GET /nodes/{node}/storage`, uploads
//! (`POST .../storage/{storage}/upload`, multipart, as the real server takes them), the
//! content listing and deleting a volume. A local storage holds its files per host.

use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use super::reply::{data, fail};
use super::tasks::new_task;
use super::volumes::{files, location, plugin};
use super::{now_secs, Shared, SimProxmoxOptions, SimVolume};

fn flag(v: Option<String>) -> bool {
    v.is_some_and(|v| v == "1" || v == "true")
}

/// `GET /nodes/{node}/storage`: `content` (every listed type), `enabled`, `storage`.
pub(super) fn list(o: &SimProxmoxOptions, get: &dyn Fn(&str) -> Option<String>) -> Response {
    let want: Vec<String> = get("content")
        .map(|c| c.split(',').map(|t| t.trim().to_string()).collect())
        .unwrap_or_default();
    let only = get("storage");
    let _enabled = flag(get("enabled"));
    let list: Vec<Value> = o
        .storages
        .iter()
        .filter(|s| want.iter().all(|t| s.accepts(t)))
        .filter(|s| only.as_ref().is_none_or(|n| *n == s.name))
        .map(|s| {
            json!({
                "storage": s.name, "type": plugin(s),
                "shared": u8::from(s.shared), "active": 1, "enabled": 1,
                "content": s.content, "total": 1u64 << 40, "used": 1u64 << 38, "avail": 3u64 << 38,
            })
        })
        .collect();
    data(Value::Array(list))
}

/// The name Proxmox stores an upload under: every character outside `[-a-zA-Z0-9_.]`
/// becomes `_`.
fn normalize(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn param_error(field: &str, message: &str) -> Response {
    (
        StatusCode::BAD_REQUEST,
        axum::Json(json!({ "data": null, "errors": { field: message }, "message": "Parameter verification failed.\n" })),
    )
        .into_response()
}

/// `POST /nodes/{node}/storage/{storage}/upload`: the file arrives as the multipart part
/// `filename`; the storage must accept the content type and an ISO must end in `.iso` or
/// `.img`. An existing file is overwritten. Answers the UPID of an `imgcopy` task.
pub(super) fn upload(
    shared: &Arc<Shared>,
    node: &str,
    storage: &str,
    get: &dyn Fn(&str) -> Option<String>,
    file: Option<Vec<u8>>,
    user: &str,
) -> Response {
    let o = &shared.opts;
    let Some(s) = o.storages.iter().find(|s| s.name == storage) else {
        return fail(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("storage '{storage}' does not exist"),
        );
    };
    let Some(bytes) = file else {
        return param_error(
            "filename",
            "no file uploaded: send multipart/form-data with the file as the part `filename`",
        );
    };
    let content = get("content").unwrap_or_default();
    let name = normalize(&get("filename").unwrap_or_default());
    if content == "iso" && !(name.ends_with(".iso") || name.ends_with(".img")) {
        return param_error("filename", "wrong file extension");
    }
    if !s.accepts(&content) {
        return fail(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("storage '{storage}' does not support '{content}' content"),
        );
    }
    let loc = location(o, storage, node);
    // As Proxmox does: a file of that name already there is overwritten.
    files(o, &mut shared.lock(), &loc).insert(
        (loc.clone(), format!("{storage}:{content}/{name}")),
        SimVolume {
            bytes,
            ctime: now_secs(),
        },
    );
    data(json!(new_task(
        shared,
        node,
        "imgcopy",
        0,
        0,
        user,
        o.task_delay
    )))
}

/// `GET /nodes/{node}/storage/{storage}/content`, optionally of one `content` type. As
/// Proxmox lists a directory's ISO images: only files ending in `.iso` or `.img`, with
/// `format: iso`, and none when asked for one VM's volumes (`vmid`: an ISO has no owner).
pub(super) fn content(
    shared: &Arc<Shared>,
    node: &str,
    storage: &str,
    get: &dyn Fn(&str) -> Option<String>,
) -> Response {
    let o = &shared.opts;
    if !o.storages.iter().any(|s| s.name == storage) {
        return fail(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("storage '{storage}' does not exist"),
        );
    }
    let loc = location(o, storage, node);
    let kind = get("content");
    let of_vm = get("vmid").is_some();
    let prefix = format!("{storage}:");
    let mut st = shared.lock();
    let list: Vec<Value> = files(o, &mut st, &loc)
        .iter()
        .filter(|((l, v), _)| *l == loc && v.starts_with(&prefix))
        .filter_map(|((_, v), vol)| {
            let c = v[prefix.len()..].split('/').next()?.to_string();
            if kind.as_ref().is_some_and(|k| *k != c) {
                return None;
            }
            let image = v.ends_with(".iso") || v.ends_with(".img");
            if c == "iso" && (of_vm || !image) {
                return None;
            }
            Some(json!({
                "volid": v, "content": c, "format": if c == "iso" { "iso" } else { "raw" },
                "size": vol.bytes.len(), "ctime": vol.ctime,
            }))
        })
        .collect();
    data(Value::Array(list))
}

/// `DELETE /nodes/{node}/storage/{storage}/content/{volume}`: answers the UPID of an
/// `imgdel` task; a volume that is not there fails.
pub(super) fn delete(
    shared: &Arc<Shared>,
    node: &str,
    storage: &str,
    volume: &str,
    user: &str,
) -> Response {
    let o = &shared.opts;
    let loc = location(o, storage, node);
    // The path's storage and the volume's own must agree.
    let volid = if volume.contains(':') {
        volume.to_string()
    } else {
        format!("{storage}:{volume}")
    };
    if !volid.starts_with(&format!("{storage}:"))
        || files(o, &mut shared.lock(), &loc)
            .remove(&(loc.clone(), volid.clone()))
            .is_none()
    {
        return fail(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("volume '{volid}' does not exist"),
        );
    }
    data(json!(new_task(
        shared,
        node,
        "imgdel",
        0,
        0,
        user,
        o.task_delay
    )))
}

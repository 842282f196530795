//! How objects go on the wire: full objects, `PartialObjectMetadata` or kubectl's
//! Table, chosen from the `Accept` header. Lists of full objects are written from each
//! object's cached encoding instead of building one large JSON value.

use std::sync::Arc;

use axum::http::{header, HeaderMap};
use serde_json::{json, Value};

use super::resources::ResourceDef;
use super::store::Stored;
use super::table::{self, IncludeObject};

/// How the client wants objects rendered (from `Accept`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Render {
    Full,
    Table(IncludeObject),
    Metadata,
}

pub fn render_mode(headers: &HeaderMap, include: Option<&str>) -> Render {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    for alt in accept.split(',') {
        let params: Vec<&str> = alt.split(';').map(str::trim).collect();
        let json = params
            .first()
            .is_some_and(|m| *m == "application/json" || *m == "*/*");
        if !json {
            continue;
        }
        let has = |p: &str| params.contains(&p);
        if has("as=Table") && has("g=meta.k8s.io") {
            return Render::Table(IncludeObject::parse(include));
        }
        if (has("as=PartialObjectMetadataList") || has("as=PartialObjectMetadata"))
            && has("g=meta.k8s.io")
        {
            return Render::Metadata;
        }
        return Render::Full;
    }
    Render::Full
}

pub fn partial(obj: &Value) -> Value {
    json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
           "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({}))})
}

/// One object as `render` asks, as a JSON value.
pub fn object(res: &ResourceDef, obj: &Value, render: Render) -> Value {
    match render {
        Render::Full => obj.clone(),
        Render::Metadata => partial(obj),
        Render::Table(inc) => table::table(res, &[obj], json!({}), inc),
    }
}

/// A list response body.
pub fn list_json(
    res: &ResourceDef,
    items: &[Arc<Stored>],
    list_meta: Value,
    render: Render,
) -> Vec<u8> {
    match render {
        Render::Full => {
            let size: usize = items.iter().map(|i| i.item_json().len() + 1).sum();
            let mut out = Vec::with_capacity(size + 256);
            out.extend_from_slice(b"{\"apiVersion\":");
            let _ = serde_json::to_writer(&mut out, &res.api_version());
            out.extend_from_slice(b",\"items\":[");
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(item.item_json());
            }
            out.extend_from_slice(b"],\"kind\":");
            let _ = serde_json::to_writer(&mut out, &res.list_kind());
            out.extend_from_slice(b",\"metadata\":");
            let _ = serde_json::to_writer(&mut out, &list_meta);
            out.push(b'}');
            out
        }
        Render::Metadata => {
            let items: Vec<Value> = items.iter().map(|o| partial(o)).collect();
            serde_json::to_vec(&json!({"kind": "PartialObjectMetadataList",
                "apiVersion": "meta.k8s.io/v1", "metadata": list_meta, "items": items}))
            .unwrap_or_default()
        }
        Render::Table(inc) => {
            let objs: Vec<&Value> = items.iter().map(|o| o.value()).collect();
            serde_json::to_vec(&table::table(res, &objs, list_meta, inc)).unwrap_or_default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::resources::PODS;

    #[test]
    fn lists_from_cached_encodings_are_valid_json() {
        let a = Stored::new(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a"}}));
        let b = Stored::new(json!({"apiVersion": "v1", "kind": "Pod"}));
        let body = list_json(
            &PODS,
            &[a.clone(), b],
            json!({"resourceVersion": "7"}),
            Render::Full,
        );
        let v: Value = serde_json::from_slice(&body).unwrap_or_default();
        assert_eq!(v["kind"], "PodList");
        assert_eq!(v["items"][0], json!({"metadata": {"name": "a"}}));
        assert_eq!(v["items"][1], json!({}));
        assert_eq!(v["metadata"]["resourceVersion"], "7");
        let full: Value = serde_json::from_slice(&a.full_json()).unwrap_or_default();
        assert_eq!(full, *a.value());
    }
}

//! The OpenAPI v3 documents kubectl fetches before `apply`/`create` (`/openapi/v3` and
//! `/openapi/v3/<group-version>`), made from the served resources.
//!
//! What kubectl reads there: whether the PATCH operation of the kind (found by its
//! `x-kubernetes-group-version-kind`) takes the `fieldValidation` query parameter. It
//! does, so kubectl sends `fieldValidation=Strict` and leaves unknown fields to the
//! server, which refuses them as the real one does (see `validation`). The schemas are
//! minimal (an object per kind, without the kind extension), so kubectl computes
//! client-side apply patches from its built-in types, as it does for these kinds
//! anyway; `kubectl explain` has nothing to show.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::OnceLock;

use serde_json::{json, Map, Value};

use super::resources::{ResourceDef, ALL, GROUPS};

/// `api/v1`, `apis/apps/v1`, ...
fn served_group_versions() -> Vec<(String, &'static str, &'static str)> {
    let mut out = vec![("api/v1".to_string(), "", "v1")];
    for (g, v) in GROUPS {
        out.push((format!("apis/{g}/{v}"), g, v));
    }
    out
}

/// The schema name of a kind, as the real server names it (`io.k8s.api.apps.v1.Deployment`).
fn schema_name(group: &str, version: &str, kind: &str) -> String {
    let package = match group {
        "" => "core",
        g => g.split('.').next().unwrap_or(g),
    };
    format!("io.k8s.api.{package}.{version}.{kind}")
}

fn schema_ref(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

fn query_param(name: &str, kind: &str, description: &str) -> Value {
    json!({"name": name, "in": "query", "description": description,
           "schema": {"type": kind, "uniqueItems": true}})
}

fn path_param(name: &str) -> Value {
    json!({"name": name, "in": "path", "required": true, "description": format!("{name} of the object"),
           "schema": {"type": "string", "uniqueItems": true}})
}

fn write_params(patch: bool) -> Vec<Value> {
    let mut p = vec![
        query_param("dryRun", "string", "When present, indicates that modifications should not be persisted."),
        query_param("fieldManager", "string", "A name associated with the actor or entity that is making these changes."),
        query_param("fieldValidation", "string", "How the server handles objects in the request containing unknown or duplicate fields: Ignore, Warn (the default) or Strict."),
    ];
    if patch {
        p.push(query_param(
            "force",
            "boolean",
            "Force is going to \"force\" Apply requests.",
        ));
    }
    p
}

fn list_params() -> Vec<Value> {
    [
        ("allowWatchBookmarks", "boolean"),
        ("continue", "string"),
        ("fieldSelector", "string"),
        ("labelSelector", "string"),
        ("limit", "integer"),
        ("resourceVersion", "string"),
        ("resourceVersionMatch", "string"),
        ("sendInitialEvents", "boolean"),
        ("timeoutSeconds", "integer"),
        ("watch", "boolean"),
    ]
    .iter()
    .map(|(n, t)| query_param(n, t, ""))
    .collect()
}

fn json_body(schema: &Value) -> Value {
    json!({"content": {"application/json": {"schema": schema}}, "required": true})
}

fn ok(schema: &Value) -> Value {
    json!({"200": {"description": "OK", "content": {"application/json": {"schema": schema}}},
           "401": {"description": "Unauthorized"}})
}

/// One operation; `gvk` is the kind it reads or writes.
fn op(action: &str, id: String, gvk: &Value, params: Vec<Value>, response: &Value) -> Value {
    json!({"operationId": id, "x-kubernetes-action": action, "x-kubernetes-group-version-kind": gvk,
           "parameters": params, "responses": ok(response)})
}

/// The paths of one resource (collection, object and subresources).
fn resource_paths(r: &ResourceDef, paths: &mut Map<String, Value>) {
    let prefix = match r.group {
        "" => format!("/api/{}", r.version),
        g => format!("/apis/{g}/{}", r.version),
    };
    let scope = if r.namespaced {
        format!("{prefix}/namespaces/{{namespace}}/{}", r.plural)
    } else {
        format!("{prefix}/{}", r.plural)
    };
    let gvk = json!({"group": r.group, "version": r.version, "kind": r.kind});
    let kind = schema_ref(&schema_name(r.group, r.version, r.kind));
    let list = schema_ref(&schema_name(r.group, r.version, &r.list_kind()));
    let status = schema_ref("io.k8s.apimachinery.pkg.apis.meta.v1.Status");
    let ns_param: Vec<Value> = if r.namespaced {
        vec![path_param("namespace")]
    } else {
        Vec::new()
    };
    let id = |verb: &str, suffix: &str| format!("{verb}{}{suffix}", r.kind);
    let mut collection = json!({
        "parameters": ns_param,
        "get": op("list", id("list", ""), &gvk, list_params(), &list),
        "delete": op("deletecollection", id("deleteCollection", ""), &gvk, list_params(), &status),
    });
    let mut post = op("post", id("create", ""), &gvk, write_params(false), &kind);
    post["requestBody"] = json_body(&kind);
    collection["post"] = post;
    paths.insert(scope.clone(), collection);

    let mut subs: Vec<(String, &str, Value)> = vec![(String::new(), "", kind.clone())];
    if r.status_subresource {
        subs.push(("/status".into(), "Status", kind.clone()));
    }
    if r.scale_subresource {
        subs.push((
            "/scale".into(),
            "Scale",
            schema_ref("io.k8s.api.autoscaling.v1.Scale"),
        ));
    }
    for (path, suffix, body) in subs {
        let mut params = ns_param.clone();
        params.push(path_param("name"));
        let mut item = json!({
            "parameters": params,
            "get": op("get", id("read", suffix), &gvk, Vec::new(), &body),
        });
        let mut put = op(
            "put",
            id("replace", suffix),
            &gvk,
            write_params(false),
            &body,
        );
        put["requestBody"] = json_body(&body);
        item["put"] = put;
        let mut patch = op(
            "patch",
            id("patch", suffix),
            &gvk,
            write_params(true),
            &body,
        );
        let patch_schema = json!({"schema": {"type": "object"}});
        patch["requestBody"] = json!({"required": true, "content": {
            "application/apply-patch+yaml": patch_schema,
            "application/json-patch+json": patch_schema,
            "application/merge-patch+json": patch_schema,
            "application/strategic-merge-patch+json": patch_schema}});
        item["patch"] = patch;
        if path.is_empty() {
            item["delete"] = op("delete", id("delete", ""), &gvk, Vec::new(), &status);
        }
        paths.insert(format!("{scope}/{{name}}{path}"), item);
    }
}

fn object_schema(description: String) -> Value {
    json!({"type": "object", "description": description})
}

fn build_group_version(group: &str, version: &str) -> Value {
    let mut paths = Map::new();
    let mut schemas = Map::new();
    for r in ALL
        .iter()
        .filter(|r| r.group == group && r.version == version)
    {
        resource_paths(r, &mut paths);
        schemas.insert(
            schema_name(r.group, r.version, r.kind),
            object_schema(format!("{} as served by this API server.", r.kind)),
        );
        schemas.insert(
            schema_name(r.group, r.version, &r.list_kind()),
            object_schema(format!("A list of {}.", r.plural)),
        );
        if r.scale_subresource {
            schemas.insert(
                "io.k8s.api.autoscaling.v1.Scale".into(),
                object_schema("Scale represents a scaling request for a resource.".into()),
            );
        }
    }
    schemas.insert(
        "io.k8s.apimachinery.pkg.apis.meta.v1.Status".into(),
        object_schema("Status is a return value for calls that don't return other objects.".into()),
    );
    json!({"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "unversioned"},
           "paths": paths, "components": {"schemas": schemas}})
}

/// Every group version's document, with the hash clients cache it by.
fn documents() -> &'static Vec<(String, String, Value)> {
    static DOCS: OnceLock<Vec<(String, String, Value)>> = OnceLock::new();
    DOCS.get_or_init(|| {
        served_group_versions()
            .into_iter()
            .map(|(path, g, v)| {
                let doc = build_group_version(g, v);
                let mut h = DefaultHasher::new();
                doc.to_string().hash(&mut h);
                (path, format!("{:016X}", h.finish()), doc)
            })
            .collect()
    })
}

/// `/openapi/v3`: where each group version's document is.
pub fn index() -> Value {
    let paths: Map<String, Value> = documents()
        .iter()
        .map(|(path, hash, _)| {
            let url = format!("/openapi/v3/{path}?hash={hash}");
            (path.clone(), json!({"serverRelativeURL": url}))
        })
        .collect();
    json!({"paths": paths})
}

/// `/openapi/v3/<path>`, e.g. `apis/apps/v1`.
pub fn group_version(path: &str) -> Option<Value> {
    documents()
        .iter()
        .find(|(p, _, _)| p == path.trim_matches('/'))
        .map(|(_, _, doc)| doc.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patch_operations_take_field_validation() {
        let doc = group_version("apis/apps/v1").unwrap_or_default();
        let patch =
            &doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["patch"];
        assert_eq!(
            patch["x-kubernetes-group-version-kind"]["kind"],
            "Deployment"
        );
        let params = patch["parameters"].as_array().cloned().unwrap_or_default();
        assert!(params.iter().any(|p| p["name"] == "fieldValidation"));
        assert!(patch["requestBody"]["content"]
            .get("application/strategic-merge-patch+json")
            .is_some());
        assert!(doc["paths"]
            .get("/apis/apps/v1/namespaces/{namespace}/deployments/{name}/scale")
            .is_some());
        let index = index();
        let url = index["paths"]["api/v1"]["serverRelativeURL"]
            .as_str()
            .unwrap_or_default();
        assert!(url.starts_with("/openapi/v3/api/v1?hash="));
        assert!(group_version("apis/nope/v1").is_none());
    }
}

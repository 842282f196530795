//! HTTP front: routes requests to resources, applies the verbs against the store, and
//! records every call. Everything answers JSON, failures as `Status` objects.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use axum::Router;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::eviction;
use super::meta;
use super::objects;
use super::patch;
use super::resources::{self, ResourceDef, NAMESPACES, PODS};
use super::selectors::{FieldSelector, LabelSelector};
use super::status::{json_response, ApiError};
use super::store::{ChangeKind, Txn};
use super::table::{self, IncludeObject};
use super::{discovery, Inner};

/// One request as RBAC would see it. Non-resource requests (discovery, /version) have
/// an empty `resource` and their URL in `path`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiCall {
    pub verb: String,
    pub group: String,
    pub version: String,
    pub resource: String,
    pub subresource: Option<String>,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub path: String,
}

type Shared = Arc<Inner>;

pub fn router(state: Shared) -> Router {
    Router::new()
        .route("/version", get(version))
        .route("/api", get(core_versions))
        .route("/apis", get(group_list))
        .route("/healthz", get(healthy))
        .route("/readyz", get(healthy))
        .route("/livez", get(healthy))
        .route("/api/{*rest}", any(resource_request))
        .route("/apis/{*rest}", any(resource_request))
        .fallback(not_found)
        .with_state(state)
}

fn record_non_resource(state: &Inner, uri: &Uri) {
    state.record(ApiCall {
        verb: "get".into(),
        group: String::new(),
        version: String::new(),
        resource: String::new(),
        subresource: None,
        namespace: None,
        name: None,
        path: uri.path().to_string(),
    });
}

async fn version(State(state): State<Shared>, uri: Uri) -> Response {
    record_non_resource(&state, &uri);
    json_response(
        StatusCode::OK,
        &discovery::version(&state.opts.server_version),
    )
}

async fn core_versions(State(state): State<Shared>, uri: Uri) -> Response {
    record_non_resource(&state, &uri);
    json_response(
        StatusCode::OK,
        &discovery::core_versions(&state.addr.to_string()),
    )
}

async fn group_list(State(state): State<Shared>, uri: Uri) -> Response {
    record_non_resource(&state, &uri);
    json_response(StatusCode::OK, &discovery::group_list())
}

async fn healthy() -> &'static str {
    "ok"
}

/// Anything else, including `/openapi/v2` and `/openapi/v3`: kubectl copes with 404
/// there for the commands it needs (no client-side validation is involved).
async fn not_found(State(state): State<Shared>, uri: Uri) -> Response {
    record_non_resource(&state, &uri);
    ApiError::page_not_found(uri.path()).into_response()
}

/// Where a resource request points.
#[derive(Debug)]
struct Target {
    res: &'static ResourceDef,
    ns: Option<String>,
    name: Option<String>,
    sub: Option<String>,
}

enum Routed {
    Discovery(Value),
    Resource(Target),
}

fn route(path: &str) -> Result<Routed, ApiError> {
    let missing = || ApiError::page_not_found(path);
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest) = match segs.as_slice() {
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g] => {
            return discovery::group(g)
                .map(Routed::Discovery)
                .ok_or_else(missing)
        }
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return Err(missing()),
    };
    if rest.is_empty() {
        return discovery::resource_list(group, version)
            .map(Routed::Discovery)
            .ok_or_else(missing);
    }
    let namespaced = match rest {
        ["namespaces", ns, plural, tail @ ..] if tail.len() <= 2 => {
            resources::find(group, version, plural)
                .filter(|r| r.namespaced)
                .map(|r| (r, Some(*ns), tail))
        }
        _ => None,
    };
    let (res, ns, tail) = match namespaced {
        Some(t) => t,
        None => {
            let res = resources::find(group, version, rest[0]).ok_or_else(missing)?;
            (res, None, &rest[1..])
        }
    };
    if tail.len() > 2 || (res.namespaced && ns.is_none() && !tail.is_empty()) {
        return Err(missing());
    }
    let sub = tail.get(1).map(|s| s.to_string());
    match sub.as_deref() {
        None => {}
        Some("status") if res.status_subresource => {}
        Some("eviction") if std::ptr::eq(res, &PODS) => {}
        Some(_) => return Err(missing()),
    }
    Ok(Routed::Resource(Target {
        res,
        ns: ns.map(str::to_string),
        name: tail.first().map(|s| s.to_string()),
        sub,
    }))
}

/// How the client wants objects rendered (from `Accept`).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Render {
    Full,
    Table(IncludeObject),
    Metadata,
}

fn render_mode(headers: &HeaderMap, include: Option<&str>) -> Render {
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

fn partial(obj: &Value) -> Value {
    json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
           "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({}))})
}

struct Request<'a> {
    state: &'a Shared,
    target: Target,
    query: std::collections::BTreeMap<String, String>,
    headers: HeaderMap,
    body: Bytes,
}

impl Request<'_> {
    fn q(&self, k: &str) -> Option<&str> {
        self.query.get(k).map(String::as_str)
    }

    fn flag(&self, k: &str) -> bool {
        matches!(self.q(k), Some("true" | "1"))
    }

    fn name(&self) -> &str {
        self.target.name.as_deref().unwrap_or_default()
    }

    fn ns(&self) -> &str {
        self.target.ns.as_deref().unwrap_or_default()
    }

    fn render(&self) -> Render {
        render_mode(&self.headers, self.q("includeObject"))
    }

    fn selectors(&self) -> Result<(LabelSelector, FieldSelector), ApiError> {
        let l = LabelSelector::parse(self.q("labelSelector").unwrap_or_default())
            .map_err(|e| ApiError::bad_request(format!("unable to parse labelSelector: {e}")))?;
        let f = FieldSelector::parse(self.q("fieldSelector").unwrap_or_default())
            .map_err(|e| ApiError::bad_request(format!("unable to parse fieldSelector: {e}")))?;
        Ok((l, f))
    }

    fn body_json(&self) -> Result<Value, ApiError> {
        let v: Value = serde_json::from_slice(&self.body).map_err(|e| {
            ApiError::bad_request(format!("couldn't decode the request body as JSON: {e}"))
        })?;
        if !v.is_object() {
            return Err(ApiError::bad_request(
                "the request body must be a JSON object",
            ));
        }
        Ok(v)
    }
}

fn verb_of(method: &Method, t: &Target, watch: bool) -> Result<&'static str, ApiError> {
    Ok(
        match (method.as_str(), t.name.is_some(), t.sub.as_deref()) {
            ("GET", true, Some("eviction")) => {
                return Err(ApiError::method_not_allowed("eviction"))
            }
            ("GET", true, _) => "get",
            ("GET", false, _) if watch => "watch",
            ("GET", false, _) => "list",
            ("POST", true, Some("eviction")) => "create",
            ("POST", false, _) => "create",
            ("PUT", true, _) => "update",
            ("PATCH", true, _) => "patch",
            ("DELETE", true, None) => "delete",
            ("DELETE", false, _) => "deletecollection",
            _ => return Err(ApiError::method_not_allowed(method.as_str())),
        },
    )
}

async fn resource_request(
    State(state): State<Shared>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let routed = match route(uri.path()) {
        Ok(r) => r,
        Err(e) => {
            record_non_resource(&state, &uri);
            return e.into_response();
        }
    };
    let target = match routed {
        Routed::Discovery(doc) => {
            record_non_resource(&state, &uri);
            return json_response(StatusCode::OK, &doc);
        }
        Routed::Resource(t) => t,
    };
    let query = meta::parse_query(uri.query());
    let watch = matches!(query.get("watch").map(String::as_str), Some("true" | "1"));
    let verb = match verb_of(&method, &target, watch) {
        Ok(v) => v,
        Err(e) => return e.into_response(),
    };
    state.record(ApiCall {
        verb: verb.into(),
        group: target.res.group.into(),
        version: target.res.version.into(),
        resource: target.res.plural.into(),
        subresource: target.sub.clone(),
        namespace: target.ns.clone(),
        name: target.name.clone(),
        path: uri.path().to_string(),
    });
    let req = Request {
        state: &state,
        target,
        query,
        headers,
        body,
    };
    let result = match verb {
        "get" => get_one(&req),
        "list" => list(&req),
        "watch" => return watch_stream(&req),
        "create" if req.target.sub.as_deref() == Some("eviction") => {
            let mut txn = state.store.lock();
            eviction::evict(&mut txn, req.ns(), req.name(), &req.body)
                .map(|s| (StatusCode::CREATED, s))
        }
        "create" => create(&req),
        "update" => update(&req),
        "patch" => patch_one(&req),
        "delete" => delete(&req),
        "deletecollection" => delete_collection(&req),
        _ => Err(ApiError::method_not_allowed(verb)),
    };
    match result {
        Ok((code, body)) => json_response(code, &body),
        Err(e) => e.into_response(),
    }
}

type Answer = Result<(StatusCode, Value), ApiError>;

fn get_one(req: &Request<'_>) -> Answer {
    let txn = req.state.store.lock();
    let res = req.target.res;
    let obj = txn
        .get(res, req.ns(), req.name())
        .ok_or_else(|| ApiError::not_found(res, req.name()))?;
    let body = match req.render() {
        Render::Full => obj.clone(),
        Render::Metadata => partial(obj),
        Render::Table(inc) => table::table(
            res,
            &[obj],
            json!({"resourceVersion": txn.current_rv().to_string()}),
            inc,
        ),
    };
    Ok((StatusCode::OK, body))
}

fn matching<'t>(txn: &'t Txn<'_>, req: &Request<'_>) -> Result<Vec<&'t Value>, ApiError> {
    let (labels, fields) = req.selectors()?;
    Ok(txn
        .list(req.target.res, req.target.ns.as_deref())
        .into_iter()
        .filter(|o| labels.matches(&meta::labels(o)) && fields.matches(o))
        .collect())
}

fn strip_type(obj: &Value) -> Value {
    let mut o = obj.clone();
    if let Some(m) = o.as_object_mut() {
        m.remove("apiVersion");
        m.remove("kind");
    }
    o
}

fn list(req: &Request<'_>) -> Answer {
    let txn = req.state.store.lock();
    let res = req.target.res;
    let all = matching(&txn, req)?;
    let offset: usize = match req.q("continue").filter(|c| !c.is_empty()) {
        Some(c) => c
            .parse()
            .map_err(|_| ApiError::bad_request("invalid continue token"))?,
        None => 0,
    };
    let limit: usize = req
        .q("limit")
        .and_then(|l| l.parse().ok())
        .filter(|l| *l > 0)
        .unwrap_or(usize::MAX);
    let page: Vec<&Value> = all.iter().skip(offset).take(limit).copied().collect();
    let mut list_meta = json!({"resourceVersion": txn.current_rv().to_string()});
    let next = offset.saturating_add(page.len());
    if next < all.len() {
        list_meta["continue"] = json!(next.to_string());
        list_meta["remainingItemCount"] = json!(all.len() - next);
    }
    let body = match req.render() {
        Render::Table(inc) => table::table(res, &page, list_meta, inc),
        Render::Metadata => {
            json!({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1",
            "metadata": list_meta, "items": page.iter().map(|o| partial(o)).collect::<Vec<_>>()})
        }
        Render::Full => {
            json!({"kind": res.list_kind(), "apiVersion": res.api_version(), "metadata": list_meta,
            "items": page.iter().map(|o| strip_type(o)).collect::<Vec<_>>()})
        }
    };
    Ok((StatusCode::OK, body))
}

/// Checks kind/apiVersion and namespace of a body against the URL.
fn check_body(req: &Request<'_>, obj: &mut Value) -> Result<(), ApiError> {
    let res = req.target.res;
    if let Some(kind) = obj.get("kind").and_then(Value::as_str) {
        if kind != res.kind {
            return Err(ApiError::bad_request(format!(
                "the body's kind {kind:?} does not match {}",
                res.kind
            )));
        }
    }
    if let Some(av) = obj.get("apiVersion").and_then(Value::as_str) {
        if av != res.api_version() {
            return Err(ApiError::bad_request(format!(
                "the body's apiVersion {av:?} does not match {}",
                res.api_version()
            )));
        }
    }
    if res.namespaced {
        let body_ns = meta::namespace(obj).to_string();
        if !body_ns.is_empty() && body_ns != req.ns() {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        meta::obj_mut(obj, "metadata").insert("namespace".into(), req.ns().into());
    }
    Ok(())
}

fn normalize(res: &ResourceDef, obj: Value) -> Result<Value, ApiError> {
    let name = meta::name(&obj).to_string();
    (res.normalize)(obj).map_err(|e| ApiError::invalid(res, &name, &e))
}

fn create(req: &Request<'_>) -> Answer {
    let res = req.target.res;
    let mut obj = req.body_json()?;
    check_body(req, &mut obj)?;
    let md = meta::obj_mut(&mut obj, "metadata");
    for server_owned in [
        "uid",
        "resourceVersion",
        "creationTimestamp",
        "deletionTimestamp",
        "generation",
    ] {
        md.remove(server_owned);
    }
    if std::ptr::eq(res, &PODS) {
        objects::default_pod(&mut obj);
        let status = meta::obj_mut(&mut obj, "status");
        status.retain(|k, _| k == "phase" || k == "qosClass");
        status.insert("phase".into(), json!("Pending"));
    }
    let obj = normalize(res, obj)?;
    let mut txn = req.state.store.lock();
    if res.namespaced && txn.get(&NAMESPACES, "", req.ns()).is_none() {
        return Err(ApiError::not_found(&NAMESPACES, req.ns()));
    }
    if req.q("dryRun").is_some() {
        return Ok((StatusCode::CREATED, obj));
    }
    Ok((StatusCode::CREATED, txn.create(res, obj)?))
}

/// Keeps what a write through `sub` (or the main resource) may not change.
fn confine(res: &ResourceDef, sub: Option<&str>, current: &Value, mut new: Value) -> Value {
    match sub {
        Some("status") => {
            let mut out = current.clone();
            match new.get_mut("status").map(Value::take) {
                Some(s) => out["status"] = s,
                None => {
                    if let Some(m) = out.as_object_mut() {
                        m.remove("status");
                    }
                }
            }
            if let Some(rv) = meta::path(&new, &["metadata", "resourceVersion"]) {
                out["metadata"]["resourceVersion"] = rv.clone();
            }
            out
        }
        _ => {
            if res.status_subresource {
                match current.get("status") {
                    Some(s) => new["status"] = s.clone(),
                    None => {
                        if let Some(m) = new.as_object_mut() {
                            m.remove("status");
                        }
                    }
                }
            }
            new
        }
    }
}

fn update(req: &Request<'_>) -> Answer {
    let res = req.target.res;
    let mut obj = req.body_json()?;
    check_body(req, &mut obj)?;
    if meta::name(&obj) != req.name() {
        return Err(ApiError::bad_request(
            "the name of the object does not match the name on the URL",
        ));
    }
    let mut txn = req.state.store.lock();
    let current = txn
        .get(res, req.ns(), req.name())
        .cloned()
        .ok_or_else(|| ApiError::not_found(res, req.name()))?;
    let new = normalize(res, confine(res, req.target.sub.as_deref(), &current, obj))?;
    Ok((StatusCode::OK, txn.update(res, new)?))
}

fn content_type(headers: &HeaderMap) -> String {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .unwrap_or_default()
        .trim()
        .to_string()
}

fn patch_one(req: &Request<'_>) -> Answer {
    let res = req.target.res;
    let ct = content_type(&req.headers);
    let patch_doc: Value = match ct.as_str() {
        "application/apply-patch+yaml" => serde_yaml::from_slice(&req.body)
            .map_err(|e| ApiError::bad_request(format!("couldn't decode the apply patch: {e}")))?,
        "application/merge-patch+json"
        | "application/strategic-merge-patch+json"
        | "application/json-patch+json" => serde_json::from_slice(&req.body).map_err(|e| {
            ApiError::bad_request(format!("couldn't decode the patch as JSON: {e}"))
        })?,
        other => return Err(ApiError::unsupported_media_type(other)),
    };
    let mut txn = req.state.store.lock();
    let Some(current) = txn.get(res, req.ns(), req.name()).cloned() else {
        if ct == "application/apply-patch+yaml" && req.target.sub.is_none() {
            // Server-side apply creates missing objects; field ownership is not modelled.
            let mut obj = patch_doc;
            check_body(req, &mut obj)?;
            if std::ptr::eq(res, &PODS) {
                objects::default_pod(&mut obj);
            }
            let obj = normalize(res, obj)?;
            return Ok((StatusCode::CREATED, txn.create(res, obj)?));
        }
        return Err(ApiError::not_found(res, req.name()));
    };
    let mut patched = current.clone();
    match ct.as_str() {
        "application/merge-patch+json" => patch::merge(&mut patched, &patch_doc),
        "application/json-patch+json" => patch::json_patch(&mut patched, &patch_doc)
            .map_err(|e| ApiError::new(422, "Invalid", e))?,
        _ => {
            if !patch_doc.is_object() {
                return Err(ApiError::bad_request(
                    "a strategic merge or apply patch must be a JSON object",
                ));
            }
            patch::strategic(&mut patched, &patch_doc)
        }
    }
    if !patched.is_object() {
        return Err(ApiError::bad_request("the patch did not produce an object"));
    }
    // Identity comes from the stored object, whatever the patch said.
    for field in ["name", "namespace", "uid", "creationTimestamp"] {
        match current["metadata"].get(field) {
            Some(v) => meta::obj_mut(&mut patched, "metadata").insert(field.into(), v.clone()),
            None => meta::obj_mut(&mut patched, "metadata").remove(field),
        };
    }
    let new = normalize(
        res,
        confine(res, req.target.sub.as_deref(), &current, patched),
    )?;
    Ok((StatusCode::OK, txn.update(res, new)?))
}

fn check_preconditions(req: &Request<'_>, current: &Value) -> Result<(), ApiError> {
    if req.body.iter().all(u8::is_ascii_whitespace) {
        return Ok(());
    }
    let opts: Value = serde_json::from_slice(&req.body)
        .map_err(|e| ApiError::bad_request(format!("couldn't decode DeleteOptions: {e}")))?;
    let res = req.target.res;
    for (field, label) in [("uid", "UID"), ("resourceVersion", "ResourceVersion")] {
        if let Some(want) = meta::path_str(&opts, &["preconditions", field]) {
            let have = meta::path_str(current, &["metadata", field]).unwrap_or_default();
            if want != have {
                return Err(ApiError::conflict_msg(
                    res,
                    req.name(),
                    &format!("Precondition failed: {label} in precondition: {want}, {label} in object meta: {have}"),
                ));
            }
        }
    }
    Ok(())
}

fn delete(req: &Request<'_>) -> Answer {
    let res = req.target.res;
    let mut txn = req.state.store.lock();
    let current = txn
        .get(res, req.ns(), req.name())
        .cloned()
        .ok_or_else(|| ApiError::not_found(res, req.name()))?;
    check_preconditions(req, &current)?;
    if req.q("dryRun").is_some() {
        return Ok((StatusCode::OK, current));
    }
    if std::ptr::eq(res, &NAMESPACES) {
        for r in resources::ALL.iter().filter(|r| r.namespaced) {
            for obj in txn.list_owned(r, Some(req.name())) {
                let _ = txn.delete(r, req.name(), meta::name(&obj));
            }
        }
    }
    Ok((StatusCode::OK, txn.delete(res, req.ns(), req.name())?))
}

fn delete_collection(req: &Request<'_>) -> Answer {
    let res = req.target.res;
    if std::ptr::eq(res, &NAMESPACES) {
        return Err(ApiError::method_not_allowed("deletecollection"));
    }
    let mut txn = req.state.store.lock();
    let doomed: Vec<(String, String)> = matching(&txn, req)?
        .into_iter()
        .map(|o| (meta::namespace(o).to_string(), meta::name(o).to_string()))
        .collect();
    let mut items = Vec::new();
    for (ns, name) in doomed {
        if let Ok(o) = txn.delete(res, &ns, &name) {
            items.push(strip_type(&o));
        }
    }
    let rv = txn.current_rv().to_string();
    Ok((
        StatusCode::OK,
        json!({"kind": res.list_kind(), "apiVersion": res.api_version(),
        "metadata": {"resourceVersion": rv}, "items": items}),
    ))
}

/// One watch line.
fn event_line(kind: &str, object: Value) -> Bytes {
    let mut line = serde_json::to_vec(&json!({"type": kind, "object": object})).unwrap_or_default();
    line.push(b'\n');
    Bytes::from(line)
}

fn bookmark(res: &ResourceDef, rv: u64, initial_end: bool) -> Bytes {
    let mut md = json!({"resourceVersion": rv.to_string()});
    if initial_end {
        md["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    event_line(
        "BOOKMARK",
        json!({"kind": res.kind, "apiVersion": res.api_version(), "metadata": md}),
    )
}

/// Streams newline-delimited watch events from the requested resourceVersion.
/// Unset or "0" starts with synthetic ADDED events for the current state; a version
/// older than the kept history gets an ERROR event carrying a 410 Expired Status.
fn watch_stream(req: &Request<'_>) -> Response {
    let res = req.target.res;
    let (labels, fields) = match req.selectors() {
        Ok(s) => s,
        Err(e) => return e.into_response(),
    };
    let rv_param = req.q("resourceVersion").filter(|r| !r.is_empty());
    let from: Option<u64> = match rv_param {
        None => None,
        Some(r) => match r.parse::<u64>() {
            Ok(0) => None,
            Ok(n) => Some(n),
            Err(_) => {
                return ApiError::bad_request(format!("invalid resource version {r:?}"))
                    .into_response()
            }
        },
    };
    let send_initial = match req.q("sendInitialEvents") {
        Some(v) => v == "true",
        None => from.is_none(),
    };
    let bookmarks = req.flag("allowWatchBookmarks");
    let timeout = req
        .q("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .map(Duration::from_secs);
    let render = req.render();
    let ns = req.target.ns.clone();
    let present = move |o: &Value| -> Value {
        match render {
            Render::Full => o.clone(),
            Render::Metadata => partial(o),
            Render::Table(inc) => table::table(res, &[o], json!({}), inc),
        }
    };
    let (tx, rx) = mpsc::channel::<Bytes>(256);
    let mut initial = Vec::new();
    let start_rv = {
        let txn = req.state.store.lock();
        let current = txn.current_rv();
        if send_initial {
            for o in txn.list(res, ns.as_deref()) {
                if labels.matches(&meta::labels(o)) && fields.matches(o) {
                    initial.push(event_line("ADDED", present(o)));
                }
            }
            if req.q("sendInitialEvents") == Some("true") && bookmarks {
                initial.push(bookmark(res, current, true));
            }
            current
        } else {
            let start = from.unwrap_or(current);
            if let Err(oldest) = txn.changes_after(start) {
                let _ = tx.try_send(event_line(
                    "ERROR",
                    ApiError::expired(start, oldest).to_status(),
                ));
                drop(tx);
                return stream_response(rx);
            }
            start
        }
    };
    let state = req.state.clone();
    tokio::spawn(async move {
        for line in initial {
            if tx.send(line).await.is_err() {
                return;
            }
        }
        let mut changed = state.store.subscribe();
        let mut shutdown = state.shutdown.clone();
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut last = start_rv;
        loop {
            changed.borrow_and_update();
            let (changes, current) = {
                let txn = state.store.lock();
                (txn.changes_after(last), txn.current_rv())
            };
            let changes = match changes {
                Ok(c) => c,
                Err(oldest) => {
                    let _ = tx
                        .send(event_line(
                            "ERROR",
                            ApiError::expired(last, oldest).to_status(),
                        ))
                        .await;
                    return;
                }
            };
            for c in changes {
                if c.res != res.id || ns.as_deref().is_some_and(|n| res.namespaced && n != c.ns) {
                    continue;
                }
                let hit = |o: &Value| labels.matches(&meta::labels(o)) && fields.matches(o);
                let kind = match c.kind {
                    ChangeKind::Modified => {
                        match (c.previous.as_ref().is_some_and(hit), hit(&c.object)) {
                            (true, true) => Some("MODIFIED"),
                            (false, true) => Some("ADDED"),
                            (true, false) => Some("DELETED"),
                            (false, false) => None,
                        }
                    }
                    k => hit(&c.object).then_some(k.as_str()),
                };
                if let Some(kind) = kind {
                    if tx.send(event_line(kind, present(&c.object))).await.is_err() {
                        return;
                    }
                }
            }
            last = current;
            let idle = tokio::time::sleep(state.opts.bookmark_interval);
            tokio::select! {
                r = changed.changed() => if r.is_err() { return },
                _ = super::stopped(&mut shutdown) => return,
                _ = async { match deadline { Some(d) => tokio::time::sleep_until(d).await, None => std::future::pending().await } } => return,
                _ = idle, if bookmarks => {
                    if tx.send(bookmark(res, last, false)).await.is_err() { return }
                }
                _ = tx.closed() => return,
            }
        }
    });
    stream_response(rx)
}

fn stream_response(rx: mpsc::Receiver<Bytes>) -> Response {
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<Bytes, std::convert::Infallible>(b), rx))
    });
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        Body::from_stream(stream),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    type Parts = (String, Option<String>, Option<String>, Option<String>);

    fn target(path: &str) -> Option<Parts> {
        match route(path) {
            Ok(Routed::Resource(t)) => Some((t.res.id.to_string(), t.ns, t.name, t.sub)),
            _ => None,
        }
    }

    #[test]
    fn routing() {
        assert_eq!(
            target("/api/v1/nodes"),
            Some(("nodes".into(), None, None, None))
        );
        assert_eq!(
            target("/api/v1/nodes/n1/status"),
            Some((
                "nodes".into(),
                None,
                Some("n1".into()),
                Some("status".into())
            ))
        );
        assert_eq!(
            target("/api/v1/namespaces/default"),
            Some(("namespaces".into(), None, Some("default".into()), None))
        );
        assert_eq!(
            target("/api/v1/namespaces/d/pods/p/eviction"),
            Some((
                "pods".into(),
                Some("d".into()),
                Some("p".into()),
                Some("eviction".into())
            ))
        );
        assert_eq!(
            target("/apis/policy/v1/poddisruptionbudgets").map(|t| t.0),
            Some("poddisruptionbudgets.policy".into())
        );
        assert!(target("/api/v1/pods/p").is_none());
        assert!(target("/api/v1/namespaces/d/pods/p/log").is_none());
        assert!(target("/api/v1/nodes/n/eviction").is_none());
        assert!(matches!(route("/api/v1"), Ok(Routed::Discovery(_))));
        assert!(matches!(route("/apis/apps"), Ok(Routed::Discovery(_))));
        assert!(route("/apis/nope/v1").is_err());
    }
}

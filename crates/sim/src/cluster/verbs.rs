//! The read and write verbs on single objects (get, create, update, patch, delete) and
//! deletecollection, with the `status` and `scale` subresources and server-side field
//! validation.

use axum::http::{header, HeaderMap, StatusCode};
use serde_json::{json, Value};

use super::admission;
use super::graceful;
use super::media;
use super::meta;
use super::nodelifecycle;
use super::objects;
use super::patch;
use super::podsecurity;
use super::query::ListOptions;
use super::render::{self, Render};
use super::request::{Answer, Request};
use super::resources::{self, ResourceDef, NAMESPACES, PODS};
use super::scale;
use super::ssa;
use super::status::ApiError;
use super::storage;
use super::store::Txn;
use super::table;
use super::validation::{self, FieldValidation, Origin};

/// `dryRun=All`: the write is checked and answered as real, and nothing is stored. The
/// real server knows no other value.
pub fn dry_run(req: &Request<'_>) -> Result<bool, ApiError> {
    match req.q("dryRun") {
        None => Ok(false),
        Some("All") => Ok(true),
        Some(other) => Err(ApiError::new(
            422,
            "Invalid",
            format!("dryRun: Unsupported value: {other:?}: supported values: \"All\""),
        )),
    }
}

pub fn get_one(req: &Request<'_>) -> Answer {
    let txn = req.state.store.lock();
    let res = req.target.res;
    let obj = txn
        .get(res, req.ns(), req.name())
        .ok_or_else(|| ApiError::not_found(res, req.name()))?;
    if req.target.sub.as_deref() == Some("scale") {
        return Ok((StatusCode::OK, scale::of(obj)));
    }
    let body = match req.render() {
        Render::Table(inc) => {
            let list_meta = json!({"resourceVersion": txn.current_rv().to_string()});
            table::table(res, &[obj], list_meta, inc)
        }
        other => render::object(res, obj, other),
    };
    Ok((StatusCode::OK, body))
}

fn strip_type(obj: &Value) -> Value {
    let mut o = obj.clone();
    if let Some(m) = o.as_object_mut() {
        m.remove("apiVersion");
        m.remove("kind");
    }
    o
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

/// Decodes into the resource's type (which validates it) and applies the request's
/// `fieldValidation` to the fields the type does not have.
fn typed(
    req: &Request<'_>,
    res: &ResourceDef,
    obj: Value,
    origin: Origin<'_>,
) -> Result<Value, ApiError> {
    let mode = FieldValidation::from_query(&req.query)?;
    let name = meta::name(&obj).to_string();
    let input = (mode != FieldValidation::Ignore).then(|| obj.clone());
    let known = (res.normalize)(obj).map_err(|e| ApiError::invalid(res, &name, &e))?;
    admission::check(res, &known)?;
    if let Some(input) = input {
        let unknown = validation::unknown_fields(&input, &known);
        for w in validation::check(mode, res, origin, &unknown)? {
            req.warn(w);
        }
    }
    Ok(known)
}

fn body_json(req: &Request<'_>) -> Result<Value, ApiError> {
    media::decode_body(&req.headers, &req.body)
}

pub fn create(req: &Request<'_>) -> Answer {
    let res = req.target.res;
    let mut obj = body_json(req)?;
    check_body(req, &mut obj)?;
    let md = meta::obj_mut(&mut obj, "metadata");
    for server_owned in [
        "uid",
        "resourceVersion",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
    ] {
        md.remove(server_owned);
    }
    if std::ptr::eq(res, &PODS) {
        objects::default_pod(&mut obj);
        nodelifecycle::default_tolerations(&mut obj);
        let status = meta::obj_mut(&mut obj, "status");
        status.retain(|k, _| k == "phase" || k == "qosClass");
        status.insert("phase".into(), json!("Pending"));
    }
    let mut obj = typed(req, res, obj, Origin::Body)?;
    let mut txn = req.state.store.lock();
    if res.namespaced && txn.get(&NAMESPACES, "", req.ns()).is_none() {
        return Err(ApiError::not_found(&NAMESPACES, req.ns()));
    }
    if std::ptr::eq(res, &resources::PERSISTENTVOLUMECLAIMS) {
        storage::admit_claim(&txn, &mut obj);
    }
    if std::ptr::eq(res, &PODS) {
        if let Some(ns) = txn.get(&NAMESPACES, "", req.ns()) {
            podsecurity::admit(ns, &obj)?;
        }
    }
    if dry_run(req)? {
        return Ok((StatusCode::CREATED, dry_create(&mut txn, res, obj)?));
    }
    Ok((StatusCode::CREATED, txn.create(res, obj)?))
}

/// What a create would store, storing nothing: the name (also from generateName) must
/// be free; the uid and creationTimestamp are filled in, the resourceVersion is not.
fn dry_create(txn: &mut Txn<'_>, res: &ResourceDef, mut obj: Value) -> Result<Value, ApiError> {
    let mut name = meta::name(&obj).to_string();
    if name.is_empty() {
        let prefix = meta::path_str(&obj, &["metadata", "generateName"]).unwrap_or_default();
        if prefix.is_empty() {
            return Err(ApiError::invalid(
                res,
                "",
                "metadata.name: Required value: name or generateName is required",
            ));
        }
        name = format!("{prefix}{}", txn.new_suffix());
    }
    if txn.get(res, meta::namespace(&obj), &name).is_some() {
        return Err(ApiError::already_exists(res, &name));
    }
    let uid = txn.new_uid();
    let md = meta::obj_mut(&mut obj, "metadata");
    md.insert("name".into(), name.into());
    md.insert("uid".into(), uid.into());
    md.insert("creationTimestamp".into(), meta::now_rfc3339().into());
    if res.has_generation {
        md.insert("generation".into(), 1.into());
    }
    Ok(obj)
}

/// Stores an update, or under `dryRun=All` answers what it would store.
fn store_update(req: &Request<'_>, txn: &mut Txn<'_>, new: Value) -> Result<Value, ApiError> {
    if dry_run(req)? {
        txn.dry_update(req.target.res, new)
    } else {
        txn.update(req.target.res, new)
    }
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

pub fn update(req: &Request<'_>) -> Answer {
    let res = req.target.res;
    if req.target.sub.as_deref() == Some("scale") {
        let replicas = scale::replicas(&body_json(req)?)?;
        return set_replicas(req, replicas);
    }
    let mut obj = body_json(req)?;
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
    let new = typed(
        req,
        res,
        confine(res, req.target.sub.as_deref(), &current, obj),
        Origin::Body,
    )?;
    Ok((StatusCode::OK, store_update(req, &mut txn, new)?))
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

pub fn patch_one(req: &Request<'_>) -> Answer {
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
    if req.target.sub.as_deref() == Some("scale") {
        let mut scaled = {
            let txn = req.state.store.lock();
            let obj = txn
                .get(res, req.ns(), req.name())
                .ok_or_else(|| ApiError::not_found(res, req.name()))?;
            scale::of(obj)
        };
        apply_patch(&ct, &mut scaled, &patch_doc)?;
        return set_replicas(req, scale::replicas(&scaled)?);
    }
    let apply = ct == "application/apply-patch+yaml";
    let manager = match req.q("fieldManager") {
        Some(m) if !m.is_empty() => m.to_string(),
        _ if apply => {
            return Err(ApiError::bad_request(
                "fieldManager is required for apply requests",
            ))
        }
        _ => String::new(),
    };
    let mut txn = req.state.store.lock();
    let owners = |live: Option<&Value>| {
        ssa::apply(
            live,
            &patch_doc,
            &manager,
            req.query.flag("force"),
            &res.api_version(),
            res.kind,
            req.name(),
        )
    };
    let Some(current) = txn.get(res, req.ns(), req.name()).cloned() else {
        if apply && req.target.sub.is_none() {
            // Server-side apply creates missing objects.
            let managed = owners(None)?;
            let mut obj = patch_doc.clone();
            check_body(req, &mut obj)?;
            meta::obj_mut(&mut obj, "metadata").insert("managedFields".into(), managed);
            if std::ptr::eq(res, &PODS) {
                objects::default_pod(&mut obj);
                nodelifecycle::default_tolerations(&mut obj);
            }
            let origin = Origin::Apply {
                ns: req.ns(),
                name: req.name(),
            };
            let obj = typed(req, res, obj, origin)?;
            if dry_run(req)? {
                return Ok((StatusCode::CREATED, dry_create(&mut txn, res, obj)?));
            }
            return Ok((StatusCode::CREATED, txn.create(res, obj)?));
        }
        return Err(ApiError::not_found(res, req.name()));
    };
    let managed = if apply && req.target.sub.is_none() {
        Some(owners(Some(&current))?)
    } else {
        None
    };
    let mut patched = current.clone();
    apply_patch(&ct, &mut patched, &patch_doc)?;
    if !patched.is_object() {
        return Err(ApiError::bad_request("the patch did not produce an object"));
    }
    if let Some(m) = managed {
        meta::obj_mut(&mut patched, "metadata").insert("managedFields".into(), m);
    }
    // Identity comes from the stored object, whatever the patch said.
    for field in ["name", "namespace", "uid", "creationTimestamp"] {
        match current["metadata"].get(field) {
            Some(v) => meta::obj_mut(&mut patched, "metadata").insert(field.into(), v.clone()),
            None => meta::obj_mut(&mut patched, "metadata").remove(field),
        };
    }
    let origin = if ct == "application/apply-patch+yaml" {
        Origin::Apply {
            ns: req.ns(),
            name: req.name(),
        }
    } else {
        Origin::Patch(&req.body)
    };
    let new = typed(
        req,
        res,
        confine(res, req.target.sub.as_deref(), &current, patched),
        origin,
    )?;
    Ok((StatusCode::OK, store_update(req, &mut txn, new)?))
}

fn apply_patch(ct: &str, target: &mut Value, patch_doc: &Value) -> Result<(), ApiError> {
    match ct {
        "application/merge-patch+json" => patch::merge(target, patch_doc),
        "application/json-patch+json" => {
            patch::json_patch(target, patch_doc).map_err(|e| ApiError::new(422, "Invalid", e))?
        }
        _ => {
            if !patch_doc.is_object() {
                return Err(ApiError::bad_request(
                    "a strategic merge or apply patch must be a JSON object",
                ));
            }
            patch::strategic(target, patch_doc)
        }
    }
    Ok(())
}

/// A write through the `scale` subresource: only `spec.replicas` changes.
fn set_replicas(req: &Request<'_>, replicas: i64) -> Answer {
    let res = req.target.res;
    let mut txn = req.state.store.lock();
    let mut obj = txn
        .get(res, req.ns(), req.name())
        .cloned()
        .ok_or_else(|| ApiError::not_found(res, req.name()))?;
    obj["spec"]["replicas"] = json!(replicas);
    let updated = store_update(req, &mut txn, obj)?;
    Ok((StatusCode::OK, scale::of(&updated)))
}

/// `dryRun: ["All"]` in a DeleteOptions body (how client-go sends it on deletes and
/// evictions), checked as the query parameter is.
pub fn delete_options_dry_run(body: &[u8]) -> Result<bool, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(false);
    }
    let opts: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("couldn't decode DeleteOptions: {e}")))?;
    let dry = opts
        .get("dryRun")
        .or_else(|| opts.pointer("/deleteOptions/dryRun"));
    match dry.and_then(Value::as_array) {
        None => Ok(false),
        Some(v) if v.is_empty() => Ok(false),
        Some(v) => match v.iter().find(|x| x.as_str() != Some("All")) {
            None => Ok(true),
            Some(other) => Err(ApiError::new(
                422,
                "Invalid",
                format!("dryRun: Unsupported value: {other}: supported values: \"All\""),
            )),
        },
    }
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

pub fn delete(req: &Request<'_>) -> Answer {
    let res = req.target.res;
    let mut txn = req.state.store.lock();
    let current = txn
        .get(res, req.ns(), req.name())
        .cloned()
        .ok_or_else(|| ApiError::not_found(res, req.name()))?;
    check_preconditions(req, &current)?;
    let grace = graceful::requested_grace(&req.query, &req.body)?;
    if dry_run(req)? || delete_options_dry_run(&req.body)? {
        return Ok((StatusCode::OK, current));
    }
    if std::ptr::eq(res, &NAMESPACES) {
        for r in resources::ALL.iter().filter(|r| r.namespaced) {
            for obj in txn.list_owned(r, Some(req.name())) {
                let _ = txn.delete(r, req.name(), meta::name(&obj));
            }
        }
    }
    Ok((
        StatusCode::OK,
        graceful::delete(&mut txn, res, req.ns(), req.name(), grace)?,
    ))
}

pub fn delete_collection(req: &Request<'_>) -> Answer {
    let res = req.target.res;
    if std::ptr::eq(res, &NAMESPACES) {
        return Err(ApiError::method_not_allowed("deletecollection"));
    }
    let dry = dry_run(req)? || delete_options_dry_run(&req.body)?;
    let grace = graceful::requested_grace(&req.query, &req.body)?;
    let mut txn = req.state.store.lock();
    let opts = ListOptions::parse(&req.query, false)?;
    let doomed: Vec<(String, String)> = txn
        .list(res, req.target.ns.as_deref())
        .into_iter()
        .filter(|o| opts.labels.matches(&meta::labels(o)) && opts.fields.matches(o))
        .map(|o| (meta::namespace(o).to_string(), meta::name(o).to_string()))
        .collect();
    let mut items = Vec::new();
    for (ns, name) in doomed {
        if dry {
            if let Some(o) = txn.get(res, &ns, &name) {
                items.push(strip_type(o));
            }
        } else if let Ok(o) = graceful::delete(&mut txn, res, &ns, &name, grace) {
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

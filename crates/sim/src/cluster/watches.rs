//! Watch streams with the real resourceVersion semantics:
//!
//! - `resourceVersion` unset or "0": synthetic ADDED events for the current state, then
//!   changes (unless `sendInitialEvents=false`);
//! - a number: the changes after it, or one ERROR event with a 410 Expired `Status`
//!   when they were forgotten (HTTP 200, as the real watch cache answers), also when a
//!   slow watcher falls behind the kept history;
//! - `sendInitialEvents=true` (with `resourceVersionMatch=NotOlderThan`, a streaming
//!   list): the current state as ADDED events, then, with `allowWatchBookmarks`, a
//!   BOOKMARK annotated `k8s.io/initial-events-end: "true"` at that state's version;
//! - idle BOOKMARKs every `bookmark_interval` when allowed; `timeoutSeconds` ends it.
//!
//! Objects are encoded once (their cached encoding) however many watchers send them.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::list::too_large;
use super::meta;
use super::query::ListOptions;
use super::render::{self, Render};
use super::request::Request;
use super::resources::ResourceDef;
use super::status::ApiError;
use super::store::{ChangeKind, Stored};

/// One watch line with an already encoded object.
fn event_bytes(kind: &str, object: &[u8]) -> Bytes {
    let mut line = Vec::with_capacity(object.len() + 32);
    line.extend_from_slice(b"{\"type\":\"");
    line.extend_from_slice(kind.as_bytes());
    line.extend_from_slice(b"\",\"object\":");
    line.extend_from_slice(object);
    line.extend_from_slice(b"}\n");
    Bytes::from(line)
}

fn event_value(kind: &str, object: &Value) -> Bytes {
    event_bytes(kind, &serde_json::to_vec(object).unwrap_or_default())
}

/// ADDED/MODIFIED/DELETED of a stored object, rendered as the client asked.
fn event(res: &ResourceDef, kind: &str, obj: &Stored, render: Render) -> Bytes {
    match render {
        Render::Full => event_bytes(kind, &obj.full_json()),
        other => event_value(kind, &render::object(res, obj, other)),
    }
}

fn bookmark(res: &ResourceDef, rv: u64, initial_end: bool) -> Bytes {
    let mut md = json!({"resourceVersion": rv.to_string()});
    if initial_end {
        md["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    event_value(
        "BOOKMARK",
        &json!({"kind": res.kind, "apiVersion": res.api_version(), "metadata": md}),
    )
}

fn expired(rv: u64, oldest: u64) -> Bytes {
    event_value("ERROR", &ApiError::expired(rv, oldest).to_status())
}

/// Where the stream starts.
enum Start {
    /// The current state as ADDED events, then changes after `rv`.
    Initial { objects: Vec<Arc<Stored>>, rv: u64 },
    /// Changes after `rv`.
    After(u64),
    /// The version is forgotten: one ERROR event.
    Expired(u64, u64),
}

pub fn watch(req: &Request<'_>) -> Result<Response, ApiError> {
    let opts = ListOptions::parse(&req.query, true)?;
    let res = req.target.res;
    let from = opts.rv_number()?;
    let send_initial = opts.send_initial_events.unwrap_or(from.is_none());
    let initial_end = opts.send_initial_events == Some(true) && opts.bookmarks;
    let render = req.render();
    let ns = req.target.ns.clone();
    let start = {
        let txn = req.state.store.lock();
        let current = txn.current_rv();
        match from {
            Some(n) if n > current => return Err(too_large(n, current)),
            _ if send_initial => Start::Initial {
                objects: txn.list_stored(res, ns.as_deref()),
                rv: current,
            },
            Some(n) if n < txn.oldest_rv_of(res) => Start::Expired(n, txn.oldest_rv_of(res) + 1),
            n => Start::After(n.unwrap_or(current)),
        }
    };
    let hit = move |o: &Value| opts.labels.matches(&meta::labels(o)) && opts.fields.matches(o);
    let (tx, rx) = mpsc::channel::<Bytes>(256);
    let state = req.state.clone();
    tokio::spawn(async move {
        let mut last = match start {
            Start::Expired(rv, oldest) => {
                let _ = tx.send(expired(rv, oldest)).await;
                return;
            }
            Start::After(rv) => rv,
            Start::Initial { objects, rv } => {
                for o in objects.iter().filter(|o| hit(o)) {
                    if tx.send(event(res, "ADDED", o, render)).await.is_err() {
                        return;
                    }
                }
                if initial_end && tx.send(bookmark(res, rv, true)).await.is_err() {
                    return;
                }
                rv
            }
        };
        let mut changed = state.store.subscribe();
        let mut shutdown = state.shutdown.clone();
        let deadline = opts.timeout.map(|t| Instant::now() + t);
        loop {
            changed.borrow_and_update();
            let (changes, current) = {
                let txn = state.store.lock();
                (txn.changes_of_after(res, last), txn.current_rv())
            };
            let changes = match changes {
                Ok(c) => c,
                Err(oldest) => {
                    let _ = tx.send(expired(last, oldest)).await;
                    return;
                }
            };
            for c in changes {
                if c.res != res.id || ns.as_deref().is_some_and(|n| res.namespaced && n != c.ns) {
                    continue;
                }
                let kind = match c.kind {
                    ChangeKind::Modified => {
                        match (
                            c.previous.as_deref().is_some_and(|p| hit(p)),
                            hit(&c.object),
                        ) {
                            (true, true) => Some("MODIFIED"),
                            (false, true) => Some("ADDED"),
                            (true, false) => Some("DELETED"),
                            (false, false) => None,
                        }
                    }
                    k => hit(&c.object).then_some(k.as_str()),
                };
                if let Some(kind) = kind {
                    if tx.send(event(res, kind, &c.object, render)).await.is_err() {
                        return;
                    }
                }
            }
            last = current;
            let idle = tokio::time::sleep(state.opts.bookmark_interval);
            let until_deadline = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                r = changed.changed() => if r.is_err() { return },
                _ = super::stopped(&mut shutdown) => return,
                _ = until_deadline => return,
                _ = idle, if opts.bookmarks => {
                    if tx.send(bookmark(res, last, false)).await.is_err() { return }
                }
                _ = tx.closed() => return,
            }
        }
    });
    Ok(stream_response(rx))
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

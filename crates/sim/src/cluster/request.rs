//! What a request to the simulated API server is, as every handler sees it: the call as
//! RBAC judges and the log records it ([`ApiCall`]), the resource request being served
//! ([`Request`]), a handler's [`Answer`], and the handle on the cluster's state
//! ([`Shared`]). A leaf below `server` (which dispatches) and the handlers (`verbs`,
//! `list`, `watches`, `authn`, `rbac`), so they need not import the dispatcher.

use std::cell::RefCell;
use std::sync::Arc;

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use serde_json::Value;

use super::query::Query;
use super::render::{render_mode, Render};
use super::routing::Target;
use super::status::ApiError;
use super::Inner;

/// One request as RBAC would see it. Non-resource requests (discovery, /version,
/// /openapi) have an empty `resource` and their URL in `path`.
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

/// The cluster's state, as the router hands it to every handler.
pub type Shared = Arc<Inner>;

/// What a handler answers: the status code and body, or the error as a `Status`.
pub type Answer = Result<(StatusCode, Value), ApiError>;

/// A resource request being served.
pub struct Request<'a> {
    pub state: &'a Shared,
    pub target: Target,
    pub query: Query,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// Sent back as `Warning: 299 - "..."` headers.
    pub warnings: RefCell<Vec<String>>,
}

impl Request<'_> {
    pub fn q(&self, k: &str) -> Option<&str> {
        self.query.get(k)
    }

    pub fn name(&self) -> &str {
        self.target.name.as_deref().unwrap_or_default()
    }

    pub fn ns(&self) -> &str {
        self.target.ns.as_deref().unwrap_or_default()
    }

    pub fn render(&self) -> Render {
        render_mode(&self.headers, self.q("includeObject"))
    }

    pub fn warn(&self, message: String) {
        self.warnings.borrow_mut().push(message);
    }
}

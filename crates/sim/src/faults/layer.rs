//! The faults as an axum middleware, each answer in the server's own error format, and
//! a listener whose connections a handler can drop (a timeout as the client sees it: the
//! request was sent and no answer ever comes back).

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::extract::connect_info::Connected;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::serve::{IncomingStream, Listener};
use axum::Json;
use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::{Fault, Faults, HalfDone};

/// Whose error format a fault answers in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// A `Status` object (`reason`, `code`, `details.retryAfterSeconds`).
    Kubernetes,
    /// Nova's `{"computeFault": ...}` / `{"overLimit": ...}`.
    Nova,
    /// `{"data": null, "message": ...}`.
    Proxmox,
    /// `{"message": ...}`.
    Kamatera,
}

/// Drops the connection it was handed out for: every read and write fails from then on.
#[derive(Clone, Debug, Default)]
pub struct ConnKill(Arc<AtomicBool>);

impl ConnKill {
    pub fn kill(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    fn killed(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// A connection that fails once its [`ConnKill`] is used.
pub struct KillableIo<T> {
    io: T,
    kill: ConnKill,
}

fn aborted() -> io::Error {
    io::Error::new(
        io::ErrorKind::ConnectionAborted,
        "connection dropped (injected timeout)",
    )
}

impl<T: AsyncRead + Unpin> AsyncRead for KillableIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.kill.killed() {
            return Poll::Ready(Err(aborted()));
        }
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for KillableIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.kill.killed() {
            return Poll::Ready(Err(aborted()));
        }
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.kill.killed() {
            return Poll::Ready(Err(aborted()));
        }
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// Wraps a listener so each connection carries a [`ConnKill`], which handlers find in
/// `ConnectInfo<ConnKill>` (serve with `into_make_service_with_connect_info::<ConnKill>`).
pub struct KillableListener<L>(pub L);

impl<L: Listener> Listener for KillableListener<L> {
    type Io = KillableIo<L::Io>;
    type Addr = L::Addr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let (io, addr) = self.0.accept().await;
        (
            KillableIo {
                io,
                kill: ConnKill::default(),
            },
            addr,
        )
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.0.local_addr()
    }
}

impl<L: Listener> Connected<IncomingStream<'_, KillableListener<L>>> for ConnKill {
    fn connect_info(stream: IncomingStream<'_, KillableListener<L>>) -> Self {
        stream.io().kill.clone()
    }
}

/// The middleware: `State` is the server's injector and error format.
pub(crate) async fn inject(
    State((faults, dialect)): State<(Faults, Dialect)>,
    req: Request,
    next: Next,
) -> Response {
    let path = req.uri().path().to_string();
    let endpoint = format!("{} {path}", req.method());
    let fault = faults.pick(&endpoint);
    if fault.is_none()
        && dialect == Dialect::Kubernetes
        && req.method() == Method::PATCH
        && is_node_path(&path)
        && faults.half_done(HalfDone::NodePatchConflict)
    {
        let name = path.rsplit('/').next().unwrap_or_default();
        return conflict(name);
    }
    let Some(fault) = fault else {
        return next.run(req).await;
    };
    let spec = faults
        .spec()
        .cloned()
        .unwrap_or_else(|| super::FaultSpec::rate(0.0));
    match fault {
        Fault::Slow => {
            tokio::time::sleep(spec.slow).await;
            next.run(req).await
        }
        Fault::Drip => drip(next.run(req).await, spec.drip).await,
        Fault::ServerError { unavailable } => error(dialect, unavailable),
        Fault::TooManyRequests => {
            let secs = spec.retry_after.as_secs().max(1);
            let mut resp = too_many(dialect, secs);
            if let Ok(v) = HeaderValue::from_str(&secs.to_string()) {
                resp.headers_mut().insert("Retry-After", v);
            }
            faults.sent_429(&endpoint);
            resp
        }
        Fault::Timeout { done } => {
            let kill = req
                .extensions()
                .get::<ConnectInfo<ConnKill>>()
                .map(|c| c.0.clone());
            if done {
                drop(next.run(req).await);
            }
            tokio::time::sleep(spec.hold).await;
            match kill {
                Some(k) => k.kill(),
                None => tracing::debug!("fault layer without ConnKill: answering 504"),
            }
            // Never written when the connection is dropped.
            StatusCode::GATEWAY_TIMEOUT.into_response()
        }
    }
}

/// `resp` with its body sent a byte at a time, `every` apart.
async fn drip(resp: Response, every: std::time::Duration) -> Response {
    let (parts, body) = resp.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    let drops = futures::stream::unfold(0usize, move |i| {
        let bytes = bytes.clone();
        async move {
            if i >= bytes.len() {
                return None;
            }
            if i > 0 {
                tokio::time::sleep(every).await;
            }
            Some((Ok::<_, io::Error>(bytes.slice(i..i + 1)), i + 1))
        }
    });
    Response::from_parts(parts, axum::body::Body::from_stream(drops))
}

/// `/api/v1/nodes/NAME` (not a subresource).
fn is_node_path(path: &str) -> bool {
    path.strip_prefix("/api/v1/nodes/")
        .is_some_and(|rest| !rest.is_empty() && !rest.contains('/'))
}

fn status(code: StatusCode, reason: &str, message: &str, details: Option<Value>) -> Response {
    let mut body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code.as_u16(),
    });
    if let Some(d) = details {
        body["details"] = d;
    }
    (code, Json(body)).into_response()
}

/// The API server's answer to a write whose resourceVersion is stale.
fn conflict(name: &str) -> Response {
    status(
        StatusCode::CONFLICT,
        "Conflict",
        &format!("Operation cannot be fulfilled on nodes \"{name}\": the object has been modified; please apply your changes to the latest version and try again"),
        Some(json!({"name": name, "kind": "nodes"})),
    )
}

fn error(dialect: Dialect, unavailable: bool) -> Response {
    let code = if unavailable {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::INTERNAL_SERVER_ERROR
    };
    match dialect {
        Dialect::Kubernetes if unavailable => status(
            code,
            "ServiceUnavailable",
            "the server is currently unable to handle the request",
            None,
        ),
        Dialect::Kubernetes => status(
            code,
            "InternalError",
            "Internal error occurred: etcdserver: request timed out",
            None,
        ),
        Dialect::Nova => (
            code,
            Json(json!({"computeFault": {"code": code.as_u16(), "message": if unavailable {
                "Service Unavailable"
            } else {
                "Unexpected API Error. Please report this at http://bugs.launchpad.net/nova/ and attach the Nova API log if possible."
            }}})),
        )
            .into_response(),
        Dialect::Proxmox => (
            code,
            Json(json!({"data": null, "message": if unavailable {
                "service unavailable\n"
            } else {
                "got timeout\n"
            }})),
        )
            .into_response(),
        Dialect::Kamatera => (
            code,
            Json(json!({"message": if unavailable {
                "Service temporarily unavailable"
            } else {
                "Internal Server Error"
            }})),
        )
            .into_response(),
    }
}

fn too_many(dialect: Dialect, secs: u64) -> Response {
    let code = StatusCode::TOO_MANY_REQUESTS;
    match dialect {
        Dialect::Kubernetes => status(
            code,
            "TooManyRequests",
            "Too many requests, please try again later.",
            Some(json!({"retryAfterSeconds": secs})),
        ),
        Dialect::Nova => (
            code,
            Json(json!({"overLimit": {"code": 429, "message": "Over limit", "retryAfter": secs.to_string()}})),
        )
            .into_response(),
        Dialect::Proxmox => (
            code,
            Json(json!({"data": null, "message": "too many requests\n"})),
        )
            .into_response(),
        Dialect::Kamatera => (
            code,
            Json(json!({"message": "Too many requests, please retry later"})),
        )
            .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_node_objects_get_the_patch_conflict() {
        assert!(is_node_path("/api/v1/nodes/w-1"));
        assert!(!is_node_path("/api/v1/nodes/w-1/status"));
        assert!(!is_node_path("/api/v1/nodes/"));
        assert!(!is_node_path("/api/v1/namespaces/default/pods/p"));
    }
}

//! Scaffolding shared by the simulated clouds: a listener on 127.0.0.1, the server task
//! that stops with the last handle, and the YAML quoting of generated credentials files.

use std::fmt::Debug;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use tokio::net::TcpListener;
use tokio::task::AbortHandle;

use crate::faults::{ConnKill, KillableListener};

/// Aborts the server task when dropped. Simulator handles hold it in an `Arc`, so the
/// server stops when the last clone of a handle is dropped.
pub(crate) struct ServerGuard(AbortHandle);

impl Drop for ServerGuard {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Binds 127.0.0.1 on an ephemeral port.
pub(crate) async fn bind_local() -> std::io::Result<(TcpListener, SocketAddr)> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    Ok((listener, addr))
}

/// Serves `app` on `listener` in a task of its own; `what` (e.g. "simulated Kamatera")
/// names the server in the error logged if it stops. Connections can be dropped by an
/// injected timeout (see [`crate::faults`]).
pub(crate) fn spawn<L>(listener: L, app: Router, what: &'static str) -> Arc<ServerGuard>
where
    L: axum::serve::Listener,
    L::Addr: Debug,
{
    let task = tokio::spawn(async move {
        let make = app.into_make_service_with_connect_info::<ConnKill>();
        if let Err(e) = axum::serve(KillableListener(listener), make).await {
            tracing::error!(error = %e, "{what} stopped");
        }
    });
    Arc::new(ServerGuard(task.abort_handle()))
}

/// `s` as a double-quoted YAML scalar (a JSON string is one).
pub(crate) fn yaml_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

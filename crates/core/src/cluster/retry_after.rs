//! A layer on the Kubernetes client: honours the API server's `Retry-After` (a 429 or
//! 503 holds back every later call until the time asked for; the failed call itself is
//! retried by the loop, as the client does not retry on its own) and counts failed calls
//! in `nodewright_api_errors{api="kubernetes"}`.
//!
//! Eviction answers are left out: their 429 means a PodDisruptionBudget refused, not an
//! overloaded server, and the drain paces itself.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use tower_layer::Layer;
use tower_service::Service;

use crate::pacing::RetryAfterGate;
use crate::telemetry::metrics::{api_error, ErrorKind};

const API: &str = "kubernetes";

/// One gate for the whole client (the API server rate-limits per client).
#[derive(Clone, Default)]
pub struct RetryAfterLayer {
    gate: Arc<RetryAfterGate>,
}

impl<S> Layer<S> for RetryAfterLayer {
    type Service = RetryAfterService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RetryAfterService {
            inner,
            gate: self.gate.clone(),
        }
    }
}

pub struct RetryAfterService<S> {
    inner: S,
    gate: Arc<RetryAfterGate>,
}

impl<S, ReqB, B> Service<Request<ReqB>> for RetryAfterService<S>
where
    S: Service<Request<ReqB>, Response = Response<B>>,
    S::Future: Send + 'static,
    S::Error: 'static,
    B: 'static,
{
    type Response = Response<B>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<B>, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        let eviction = req.uri().path().ends_with("/eviction");
        // The inner future is lazy: nothing is sent before it is polled, after the wait.
        let sent = self.inner.call(req);
        let gate = self.gate.clone();
        Box::pin(async move {
            gate.wait(API).await;
            let result = sent.await;
            match &result {
                Ok(resp) if !eviction => {
                    let status = resp.status().as_u16();
                    if let Some(d) = gate.note(status, resp.headers()) {
                        tracing::info!(status, retry_after = ?d, "the Kubernetes API asked to retry later; holding calls back");
                    }
                    if let Some(kind) = ErrorKind::of_status(status).filter(|k| {
                        matches!(
                            k,
                            ErrorKind::ServerError | ErrorKind::RateLimited | ErrorKind::Conflict
                        )
                    }) {
                        api_error(API, kind);
                    }
                }
                Ok(_) => {}
                Err(_) => api_error(API, ErrorKind::Transport),
            }
            result
        })
    }
}

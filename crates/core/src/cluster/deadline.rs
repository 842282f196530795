//! A layer on the Kubernetes client: every call that is not a watch has a deadline on
//! its whole answer, headers and body. The client's own read timeout restarts with each
//! byte, so an API server (or a proxy) that drips its answer would otherwise hold the
//! loop for as long as it drips; with the deadline the call fails, the cycle fails and
//! the next one starts. Watches stream by design and are bounded by their own
//! `timeoutSeconds` and the read timeout instead.

use std::error::Error as StdError;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response, Uri};
use http_body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};
use tower_layer::Layer;
use tower_service::Service;

type BoxError = Box<dyn StdError + Send + Sync>;

/// How long one Kubernetes API call may take, answer body included, unless the caller
/// sets its own ([`DeadlineLayer::new`]).
pub const DEFAULT_CALL_DEADLINE: Duration = Duration::from_secs(30);

/// The error a call past its deadline ends with; it names the call and the deadline.
#[derive(Debug, thiserror::Error)]
#[error("{method} {path}: no complete answer within {deadline:?} (the API server or a proxy in front of it is hung or drips its answer)")]
pub struct DeadlineExceeded {
    pub method: String,
    pub path: String,
    pub deadline: Duration,
}

#[derive(Clone, Debug)]
pub struct DeadlineLayer {
    deadline: Duration,
}

impl DeadlineLayer {
    pub fn new(deadline: Duration) -> DeadlineLayer {
        DeadlineLayer { deadline }
    }
}

impl Default for DeadlineLayer {
    fn default() -> Self {
        DeadlineLayer::new(DEFAULT_CALL_DEADLINE)
    }
}

impl<S> Layer<S> for DeadlineLayer {
    type Service = DeadlineService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        DeadlineService {
            inner,
            deadline: self.deadline,
        }
    }
}

pub struct DeadlineService<S> {
    inner: S,
    deadline: Duration,
}

/// A watch (`watch=true`/`watch=1`, as kube-rs and other clients spell it) streams by
/// design.
fn is_watch(uri: &Uri) -> bool {
    uri.query().is_some_and(|q| {
        q.split('&')
            .any(|kv| matches!(kv, "watch=true" | "watch=1" | "watch"))
    })
}

impl<S, ReqB, B> Service<Request<ReqB>> for DeadlineService<S>
where
    S: Service<Request<ReqB>, Response = Response<B>>,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: Body + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Response = Response<DeadlineBody<B>>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        let watch = is_watch(req.uri());
        let exceeded = DeadlineExceeded {
            method: req.method().to_string(),
            path: req.uri().path().to_string(),
            deadline: self.deadline,
        };
        let until = Instant::now() + self.deadline;
        let sent = self.inner.call(req);
        Box::pin(async move {
            if watch {
                let resp = sent.await.map_err(Into::into)?;
                return Ok(resp.map(|b| DeadlineBody::new(b, None)));
            }
            match tokio::time::timeout_at(until, sent).await {
                Ok(resp) => {
                    let resp = resp.map_err(Into::into)?;
                    Ok(resp.map(|b| DeadlineBody::new(b, Some((until, exceeded)))))
                }
                Err(_) => Err(Box::new(exceeded) as BoxError),
            }
        })
    }
}

/// An answer body that fails once the call's deadline has passed.
pub struct DeadlineBody<B> {
    inner: Pin<Box<B>>,
    deadline: Option<(Pin<Box<Sleep>>, Option<DeadlineExceeded>)>,
}

impl<B> DeadlineBody<B> {
    fn new(inner: B, deadline: Option<(Instant, DeadlineExceeded)>) -> Self {
        DeadlineBody {
            inner: Box::pin(inner),
            deadline: deadline
                .map(|(until, e)| (Box::pin(tokio::time::sleep_until(until)), Some(e))),
        }
    }
}

impl<B> Body for DeadlineBody<B>
where
    B: Body,
    B::Error: Into<BoxError>,
{
    type Data = B::Data;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        if let Some((sleep, exceeded)) = &mut this.deadline {
            if sleep.as_mut().poll(cx).is_ready() {
                return match exceeded.take() {
                    Some(e) => Poll::Ready(Some(Err(Box::new(e)))),
                    None => Poll::Ready(None),
                };
            }
        }
        this.inner.as_mut().poll_frame(cx).map_err(Into::into)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watches_are_recognised_as_kube_rs_and_kubectl_send_them() {
        let u = |s: &str| s.parse::<Uri>().expect("uri");
        assert!(is_watch(&u(
            "/api/v1/pods?watch=true&resourceVersion=5&timeoutSeconds=290"
        )));
        assert!(is_watch(&u(
            "/api/v1/nodes?allowWatchBookmarks=true&watch=1"
        )));
        assert!(!is_watch(&u("/api/v1/nodes?limit=500")));
        assert!(!is_watch(&u("/api/v1/nodes/watch-me")));
        assert!(!is_watch(&u("/api/v1/nodes?watch=false")));
    }
}

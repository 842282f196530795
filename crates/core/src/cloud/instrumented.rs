//! Wraps any provider to record call latency and errors in the metrics.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;

use super::{CloudError, CloudProvider, CreateRequest, GroupShape, Observed, Server};
use crate::telemetry::metrics::{api_error, ErrorKind, Metrics};

/// The kind of a provider error, for `nodewright_api_errors`.
pub fn error_kind(e: &CloudError) -> ErrorKind {
    match e {
        CloudError::Api { status, .. } => ErrorKind::of_status(*status).unwrap_or(ErrorKind::Other),
        CloudError::Transport { message, .. } if message.starts_with("timed out") => {
            ErrorKind::Timeout
        }
        CloudError::Transport { .. } => ErrorKind::Transport,
        CloudError::Auth { .. } => ErrorKind::Auth,
        CloudError::Quota { .. }
        | CloudError::NotFound { .. }
        | CloudError::Other { .. }
        | CloudError::Refused { .. } => ErrorKind::Other,
    }
}

pub struct Instrumented {
    inner: Arc<dyn CloudProvider>,
    metrics: Arc<Metrics>,
}

impl Instrumented {
    pub fn wrap(inner: Arc<dyn CloudProvider>, metrics: Arc<Metrics>) -> Arc<dyn CloudProvider> {
        Arc::new(Instrumented { inner, metrics })
    }

    fn record<T>(&self, call: &str, started: Instant, r: &Result<T, CloudError>) {
        self.metrics
            .cloud_call(self.inner.name(), call, started.elapsed(), r.is_ok());
        if let Err(e) = r {
            api_error(self.inner.name(), error_kind(e));
        }
    }
}

#[async_trait]
impl CloudProvider for Instrumented {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn list_servers(&self, cluster: &str) -> Result<Vec<Server>, CloudError> {
        let t = Instant::now();
        let r = self.inner.list_servers(cluster).await;
        self.record("list_servers", t, &r);
        r
    }

    async fn create_server(&self, req: &CreateRequest) -> Result<Server, CloudError> {
        let t = Instant::now();
        let r = self.inner.create_server(req).await;
        self.record("create_server", t, &r);
        r
    }

    async fn get_server(&self, cluster: &str, id: &str) -> Result<Option<Server>, CloudError> {
        let t = Instant::now();
        let r = self.inner.get_server(cluster, id).await;
        self.record("get_server", t, &r);
        r
    }

    async fn delete_server(&self, cluster: &str, id: &str) -> Result<(), CloudError> {
        let t = Instant::now();
        let r = self.inner.delete_server(cluster, id).await;
        self.record("delete_server", t, &r);
        r
    }

    async fn group_shape(&self, group: &str) -> Result<GroupShape, CloudError> {
        let t = Instant::now();
        let r = self.inner.group_shape(group).await;
        self.record("group_shape", t, &r);
        r
    }

    async fn observe(&self, cluster: &str, groups: &[String]) -> Result<Observed, CloudError> {
        let t = Instant::now();
        let r = self.inner.observe(cluster, groups).await;
        self.record("observe", t, &r);
        r
    }

    async fn verify(&self) -> Result<Vec<String>, CloudError> {
        let t = Instant::now();
        let r = self.inner.verify().await;
        self.record("verify", t, &r);
        r
    }
}

//! Wraps any provider to record call latency and errors in the metrics.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;

use super::{CloudError, CloudProvider, CreateRequest, Observed};
use crate::model::{GroupShape, Server};
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

    async fn create_warm(&self, req: &CreateRequest) -> Result<Server, CloudError> {
        let t = Instant::now();
        let r = self.inner.create_warm(req).await;
        self.record("create_warm", t, &r);
        r
    }

    async fn start_warm(
        &self,
        cluster: &str,
        id: &str,
        render: &crate::cloud::RenderJoin<'_>,
    ) -> Result<(), CloudError> {
        let t = Instant::now();
        let r = self.inner.start_warm(cluster, id, render).await;
        self.record("start_warm", t, &r);
        r
    }

    async fn finish_join(
        &self,
        cluster: &str,
        id: &str,
        render: Option<&crate::cloud::RenderJoin<'_>>,
    ) -> Result<(), CloudError> {
        let t = Instant::now();
        let r = self.inner.finish_join(cluster, id, render).await;
        self.record("finish_join", t, &r);
        r
    }

    async fn park(&self, cluster: &str, id: &str) -> Result<(), CloudError> {
        let t = Instant::now();
        let r = self.inner.park(cluster, id).await;
        self.record("park", t, &r);
        r
    }

    async fn mark_joined(
        &self,
        cluster: &str,
        id: &str,
        at: Option<std::time::SystemTime>,
    ) -> Result<(), CloudError> {
        let t = Instant::now();
        let r = self.inner.mark_joined(cluster, id, at).await;
        self.record("mark_joined", t, &r);
        r
    }

    async fn restart(
        &self,
        cluster: &str,
        id: &str,
        at: std::time::SystemTime,
    ) -> Result<(), CloudError> {
        let t = Instant::now();
        let r = self.inner.restart(cluster, id, at).await;
        self.record("restart", t, &r);
        r
    }

    async fn fence(
        &self,
        cluster: &str,
        id: &str,
        at: std::time::SystemTime,
    ) -> Result<(), CloudError> {
        let t = Instant::now();
        let r = self.inner.fence(cluster, id, at).await;
        self.record("fence", t, &r);
        r
    }

    async fn mark_removing(&self, cluster: &str, id: &str) -> Result<(), CloudError> {
        let t = Instant::now();
        let r = self.inner.mark_removing(cluster, id).await;
        self.record("mark_removing", t, &r);
        r
    }

    async fn nodes_joined(&self, cluster: &str, names: &[String]) -> Result<(), CloudError> {
        let t = Instant::now();
        let r = self.inner.nodes_joined(cluster, names).await;
        self.record("nodes_joined", t, &r);
        r
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::model::ServerStatus;

    /// Records the warm-pool calls it gets; everything else is unused.
    #[derive(Default)]
    struct Pooled {
        calls: Mutex<Vec<String>>,
    }

    #[async_trait]
    impl CloudProvider for Pooled {
        fn name(&self) -> &str {
            "pooled"
        }
        async fn list_servers(&self, _: &str) -> Result<Vec<Server>, CloudError> {
            Ok(Vec::new())
        }
        async fn create_server(&self, _: &CreateRequest) -> Result<Server, CloudError> {
            unreachable!("not called")
        }
        async fn get_server(&self, _: &str, _: &str) -> Result<Option<Server>, CloudError> {
            Ok(None)
        }
        async fn delete_server(&self, _: &str, _: &str) -> Result<(), CloudError> {
            Ok(())
        }
        async fn create_warm(&self, req: &CreateRequest) -> Result<Server, CloudError> {
            self.calls
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(format!("create_warm {}", req.name));
            Ok(Server {
                id: "1".into(),
                name: req.name.clone(),
                cluster: Some(req.cluster.clone()),
                group: Some(req.group.clone()),
                status: ServerStatus::Stopped,
                created: std::time::SystemTime::UNIX_EPOCH,
                memory_bytes: None,
                provider: "pooled".into(),
                size: None,
                settings_hash: None,
                fault: None,
                warm: true,
                filling: false,
                joined: None,
                restarted: None,
                fenced: None,
                removing_since: None,
            })
        }
        async fn start_warm(
            &self,
            _: &str,
            id: &str,
            _: &crate::cloud::RenderJoin<'_>,
        ) -> Result<(), CloudError> {
            self.calls
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(format!("start_warm {id}"));
            Ok(())
        }
        async fn park(&self, _: &str, id: &str) -> Result<(), CloudError> {
            self.calls
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(format!("park {id}"));
            Ok(())
        }
        async fn mark_joined(
            &self,
            _: &str,
            id: &str,
            _: Option<std::time::SystemTime>,
        ) -> Result<(), CloudError> {
            self.calls
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(format!("mark_joined {id}"));
            Ok(())
        }
        async fn mark_removing(&self, _: &str, id: &str) -> Result<(), CloudError> {
            self.calls
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(format!("mark_removing {id}"));
            Ok(())
        }
    }

    /// Regression: the metrics wrapper `run` puts around every provider once answered the
    /// warm-pool calls with the trait's "not supported" defaults instead of passing them on.
    #[tokio::test]
    async fn instrumented_forwards_warm_pool_calls() {
        let inner = Arc::new(Pooled::default());
        let wrapped = Instrumented::wrap(inner.clone(), Arc::new(Metrics::new()));
        let req = CreateRequest {
            name: "c-g-aaaaa".into(),
            cluster: "c".into(),
            group: "g".into(),
            user_data: String::new(),
            size: None,
            settings_hash: String::new(),
            zone: None,
        };
        assert!(wrapped.create_warm(&req).await.expect("forwarded").warm);
        wrapped
            .start_warm("c", "1", &|_: Option<&str>| Ok::<_, String>(req.clone()))
            .await
            .expect("forwarded");
        wrapped.park("c", "1").await.expect("forwarded");
        wrapped
            .mark_joined("c", "1", Some(std::time::SystemTime::UNIX_EPOCH))
            .await
            .expect("forwarded");
        wrapped.mark_removing("c", "1").await.expect("forwarded");
        let calls = inner
            .calls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        assert_eq!(
            calls,
            [
                "create_warm c-g-aaaaa",
                "start_warm 1",
                "park 1",
                "mark_joined 1",
                "mark_removing 1"
            ]
        );
    }
}

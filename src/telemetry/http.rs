//! `/metrics`, `/healthz` and `/readyz` on one small axum server.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

use super::metrics::Metrics;

/// Liveness: the loop that should be running (the cycle loop when leading, the election
/// loop otherwise) has made progress within `stuck_after`.
pub struct Health {
    stuck_after: Duration,
    last_cycle: Mutex<Instant>,
    last_election: Mutex<Instant>,
    leading: AtomicBool,
    ready: AtomicBool,
}

fn touch(m: &Mutex<Instant>) {
    *m.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
}

fn age(m: &Mutex<Instant>) -> Duration {
    m.lock().unwrap_or_else(|p| p.into_inner()).elapsed()
}

impl Health {
    pub fn new(stuck_after: Duration) -> Arc<Health> {
        Arc::new(Health {
            stuck_after,
            last_cycle: Mutex::new(Instant::now()),
            last_election: Mutex::new(Instant::now()),
            leading: AtomicBool::new(false),
            ready: AtomicBool::new(false),
        })
    }

    pub fn cycle_completed(&self) {
        touch(&self.last_cycle);
        self.ready.store(true, Ordering::Relaxed);
    }

    pub fn election_attempted(&self) {
        touch(&self.last_election);
    }

    /// Marks the start of leading: the cycle clock starts now.
    pub fn set_leading(&self, leading: bool) {
        if leading && !self.leading.load(Ordering::Relaxed) {
            touch(&self.last_cycle);
        }
        self.leading.store(leading, Ordering::Relaxed);
    }

    pub fn set_ready(&self) {
        self.ready.store(true, Ordering::Relaxed);
    }

    /// `Err` with the reason when the relevant loop is stuck.
    pub fn check(&self) -> Result<(), String> {
        let (what, since) = if self.leading.load(Ordering::Relaxed) {
            ("reconcile loop", age(&self.last_cycle))
        } else {
            ("leader election loop", age(&self.last_election))
        };
        if since > self.stuck_after {
            Err(format!(
                "{what} made no progress for {}s (limit {}s)",
                since.as_secs(),
                self.stuck_after.as_secs()
            ))
        } else {
            Ok(())
        }
    }
}

#[derive(Clone)]
struct AppState {
    metrics: Arc<Metrics>,
    health: Arc<Health>,
}

async fn metrics(State(s): State<AppState>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        s.metrics.encode(),
    )
}

async fn healthz(State(s): State<AppState>) -> impl IntoResponse {
    match s.health.check() {
        Ok(()) => (StatusCode::OK, "ok".to_string()),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, why),
    }
}

async fn readyz(State(s): State<AppState>) -> impl IntoResponse {
    if s.health.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ready")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "starting")
    }
}

/// Binds `addr` and serves until the process ends; returns the bound address.
pub async fn serve(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
) -> std::io::Result<SocketAddr> {
    let app = Router::new()
        .route("/metrics", get(self::metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(AppState { metrics, health });
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "metrics server stopped");
        }
    });
    Ok(bound)
}

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
    /// While an action runs: when it started and how much longer than `stuck_after` it
    /// may take.
    acting: Mutex<Option<(Instant, Duration)>>,
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
            acting: Mutex::new(None),
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

    /// An action with this allowance started (`Some`), or ended (`None`).
    pub fn acting(&self, allowance: Option<Duration>) {
        *self.acting.lock().unwrap_or_else(|p| p.into_inner()) =
            allowance.map(|a| (Instant::now(), a));
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
        let acting = *self.acting.lock().unwrap_or_else(|p| p.into_inner());
        let limit = match acting {
            Some((started, allowance)) if self.leading.load(Ordering::Relaxed) => {
                // Time before the action counts against stuck_after as usual.
                let before = since.saturating_sub(started.elapsed());
                if before <= self.stuck_after && started.elapsed() <= allowance + self.stuck_after {
                    return Ok(());
                }
                self.stuck_after
            }
            _ => self.stuck_after,
        };
        if since > limit {
            Err(format!(
                "{what} made no progress for {}s (limit {}s)",
                since.as_secs(),
                limit.as_secs()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_action_within_its_allowance_is_not_stuck_but_idle_time_is() {
        let h = Health::new(Duration::from_millis(50));
        h.set_leading(true);
        assert!(h.check().is_ok());
        h.acting(Some(Duration::from_secs(60)));
        std::thread::sleep(Duration::from_millis(120));
        assert!(
            h.check().is_ok(),
            "a VM create may take longer than stuck_after"
        );
        h.acting(None);
        let err = h.check().expect_err("no cycle completed for too long");
        assert!(err.contains("reconcile loop"), "{err}");
        h.cycle_completed();
        assert!(h.check().is_ok());
    }

    #[test]
    fn an_action_past_its_allowance_is_stuck() {
        let h = Health::new(Duration::from_millis(30));
        h.set_leading(true);
        h.acting(Some(Duration::from_millis(30)));
        std::thread::sleep(Duration::from_millis(100));
        assert!(h.check().is_err());
    }

    #[test]
    fn a_standby_is_judged_by_its_election_loop() {
        let h = Health::new(Duration::from_millis(50));
        std::thread::sleep(Duration::from_millis(80));
        assert!(h.check().expect_err("stale").contains("leader election"));
        h.election_attempted();
        assert!(h.check().is_ok());
    }
}

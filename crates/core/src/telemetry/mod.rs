//! Logging setup. Human-readable by default, JSON for log pipelines.

pub mod http;
pub mod metrics;

use tracing_subscriber::filter::{filter_fn, FilterExt};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Human,
    Json,
}

/// The Kubernetes client's own trace layer logs every 5xx answer and dropped connection at
/// ERROR ("failed with status 500"), though the loop retries them: the call that failed is
/// logged by nodewright at WARN with what it was for, and ERROR is kept for what a person
/// must act on. These lines are dropped.
pub fn is_client_retry_noise(meta: &tracing::Metadata<'_>) -> bool {
    *meta.level() == tracing::Level::ERROR && meta.target().starts_with("kube_client::client")
}

/// Installs the global subscriber; `RUST_LOG` overrides `default_level`.
pub fn init_logging(format: LogFormat, default_level: &str) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(default_level))
        .and(filter_fn(|meta| !is_client_retry_noise(meta)));
    let layer = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    // A second init (tests) is harmless: keep the first subscriber.
    let _ = match format {
        LogFormat::Human => tracing_subscriber::registry()
            .with(layer.with_filter(filter))
            .try_init(),
        LogFormat::Json => tracing_subscriber::registry()
            .with(layer.json().with_filter(filter))
            .try_init(),
    };
}

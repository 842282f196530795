//! Batching of wake-ups, as Karpenter batches pending pods: a cycle starts once no new
//! wake-up came for `idle`, and at the latest `max` after the first, so a burst of pods
//! arriving over a few seconds is planned in one go rather than one cycle per pod.

use std::time::Duration;

use tokio::sync::watch;
use tokio::time::{sleep_until, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Batching {
    pub idle: Duration,
    pub max: Duration,
}

impl Batching {
    pub fn of(config: &crate::config::Config) -> Batching {
        Batching {
            idle: config.batch_idle_duration,
            max: config.batch_max_duration,
        }
    }
}

/// Waits for a wake-up not yet seen on `rx`, then for the batch to close. Never returns
/// when there is no receiver (no caches) or the caches are gone.
pub async fn next_batch(rx: Option<&mut watch::Receiver<u64>>, b: Batching) {
    let Some(rx) = rx else {
        return std::future::pending().await;
    };
    if rx.changed().await.is_err() {
        return std::future::pending().await;
    }
    let end = Instant::now() + b.max;
    loop {
        let quiet = (Instant::now() + b.idle).min(end);
        tokio::select! {
            r = rx.changed() => {
                if r.is_err() {
                    sleep_until(quiet).await;
                    return;
                }
                if Instant::now() >= end {
                    return;
                }
            }
            _ = sleep_until(quiet) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const B: Batching = Batching {
        idle: Duration::from_secs(1),
        max: Duration::from_secs(10),
    };

    /// Sends a wake-up at each offset (from the start) and returns when the batch closed.
    async fn closes_after(offsets_ms: &[u64]) -> Duration {
        let (tx, mut rx) = watch::channel(0u64);
        let start = Instant::now();
        let offsets = offsets_ms.to_vec();
        tokio::spawn(async move {
            for o in offsets {
                sleep_until(start + Duration::from_millis(o)).await;
                tx.send_modify(|n| *n += 1);
            }
            std::future::pending::<()>().await;
        });
        next_batch(Some(&mut rx), B).await;
        start.elapsed()
    }

    #[tokio::test(start_paused = true)]
    async fn one_wake_up_closes_after_idle() {
        let t = closes_after(&[200]).await;
        assert_eq!(t, Duration::from_millis(1200));
    }

    #[tokio::test(start_paused = true)]
    async fn a_steady_trickle_closes_at_max() {
        let offsets: Vec<u64> = (0..40).map(|i| 100 + i * 500).collect();
        let t = closes_after(&offsets).await;
        assert_eq!(t, Duration::from_millis(10_100));
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_closes_idle_after_its_last_wake_up() {
        let t = closes_after(&[0, 300, 600, 900]).await;
        assert_eq!(t, Duration::from_millis(1900));
    }

    #[tokio::test(start_paused = true)]
    async fn a_wake_up_before_the_wait_counts() {
        let (tx, mut rx) = watch::channel(0u64);
        tx.send_modify(|n| *n += 1);
        let start = Instant::now();
        next_batch(Some(&mut rx), B).await;
        assert_eq!(start.elapsed(), Duration::from_secs(1));
        // Seen now: the next wait needs a new one.
        let waited = tokio::time::timeout(Duration::from_secs(60), next_batch(Some(&mut rx), B));
        assert!(waited.await.is_err());
    }
}

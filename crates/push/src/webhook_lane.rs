//! The webhook lane's loop: [`Rounds`] in [`crate::rounds::Lane::Webhooks`] behind the WebSocket
//! lane, woken after each WebSocket round that moved and at least every fallback period; it wakes
//! the dispatcher after each round that queued deliveries. Failures back off; a lane that
//! completes no round within the stall limit ends, and the leader hands over (exit 75). A stop
//! lets the round in flight finish within the round deadline.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use pmw_core::{ServiceError, UnixMs};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::round_loop::stalled;
use crate::rounds::{RoundError, Rounds};
use crate::Health;

/// How the lane runs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timing {
    /// Run a round at least this often without a wake-up.
    pub fallback: Duration,
    /// End (and hand over) when no round completed for this long.
    pub stall: Duration,
    /// How long a round in flight may finish after a stop.
    pub deadline: Duration,
}

/// A running webhook lane.
pub(crate) struct WebhookLane {
    wake: Arc<Notify>,
    stop: CancellationToken,
    task: Option<JoinHandle<Result<(), ServiceError>>>,
    result: Option<Result<(), String>>,
}

impl WebhookLane {
    pub fn spawn(
        rounds: Rounds,
        dispatcher: Arc<Notify>,
        health: Arc<Health>,
        timing: Timing,
    ) -> WebhookLane {
        let wake = Arc::new(Notify::new());
        let stop = CancellationToken::new();
        let task = tokio::spawn(run(
            rounds,
            wake.clone(),
            dispatcher,
            health,
            timing,
            stop.clone(),
        ));
        WebhookLane {
            wake,
            stop,
            task: Some(task),
            result: None,
        }
    }

    /// The WebSocket lane moved: look now.
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// Wait until the lane ends and say why (cancel-safe; may be called again).
    pub async fn wait(&mut self) -> Result<(), String> {
        if let Some(task) = self.task.as_mut() {
            let r = match task.await {
                Ok(r) => r.map_err(|e| e.to_string()),
                Err(e) => Err(format!("webhook lane task: {e}")),
            };
            self.task = None;
            self.result = Some(r);
        }
        self.result.clone().unwrap_or(Ok(()))
    }

    /// Stop: the round in flight finishes (bounded by the round deadline), no new one starts.
    pub async fn stop(mut self) -> Result<(), String> {
        self.stop.cancel();
        self.wait().await
    }
}

impl Drop for WebhookLane {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn run(
    mut rounds: Rounds,
    wake: Arc<Notify>,
    dispatcher: Arc<Notify>,
    health: Arc<Health>,
    t: Timing,
    stop: CancellationToken,
) -> Result<(), ServiceError> {
    let mut progress = Instant::now();
    let mut backoff = Duration::from_millis(100);
    let mut run_now = true;
    tracing::info!(cursor = %rounds.position, "webhook lane started");
    loop {
        if !run_now {
            tokio::select! {
                biased;
                _ = stop.cancelled() => return Ok(()),
                _ = wake.notified() => {}
                _ = tokio::time::sleep(t.fallback) => {}
            }
        }
        let outcome = {
            let span =
                tracing::info_span!("webhook_round", epoch = rounds.epoch, from = %rounds.position);
            let mut round = std::pin::pin!(rounds.round().instrument(span));
            tokio::select! {
                r = &mut round => r,
                _ = stop.cancelled() => match tokio::time::timeout(t.deadline, &mut round).await {
                    Ok(r) => r,
                    Err(_) => {
                        tracing::warn!("webhook lane round still running at the deadline; stopping");
                        return Ok(());
                    }
                },
                // A round that hangs (a lock, a stuck connection) is no progress either.
                _ = tokio::time::sleep_until(progress + t.stall) => {
                    return Err(stalled("webhook", t.stall, "a webhook round is still running"));
                }
            }
        };
        match outcome {
            Ok(o) => {
                progress = Instant::now();
                backoff = Duration::from_millis(100);
                health
                    .webhooks_skipped
                    .fetch_add(o.webhooks_skipped, Ordering::Relaxed);
                health
                    .webhook_block
                    .store(rounds.cursor.block as i64, Ordering::Relaxed);
                health
                    .webhook_round_ms
                    .store(UnixMs::now().0, Ordering::Relaxed);
                if o.webhooks > 0 || o.retracted > 0 {
                    dispatcher.notify_one();
                }
                if o.trades + o.retracted > 0 {
                    tracing::debug!(trades = o.trades, retracted = o.retracted, webhooks = o.webhooks, cursor = %rounds.cursor, "webhook round");
                }
                if stop.is_cancelled() {
                    return Ok(());
                }
                run_now = o.more;
            }
            Err(RoundError::Fenced) => {
                tracing::error!(
                    epoch = rounds.epoch,
                    "webhook lane deposed: a newer leader bumped the epoch"
                );
                return Err(ServiceError::transient("push epoch superseded"));
            }
            Err(e) => {
                health.errors.fetch_add(1, Ordering::Relaxed);
                *health.last_error.lock().expect("health lock") = Some(format!("webhooks: {e}"));
                if progress.elapsed() >= t.stall {
                    return Err(stalled("webhook", t.stall, &e.to_string()));
                }
                tracing::warn!(error = %e, retry_in_ms = backoff.as_millis() as u64, "webhook round failed");
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = stop.cancelled() => return Ok(()),
                }
                backoff = (backoff * 2).min(Duration::from_secs(5));
                run_now = true;
            }
        }
    }
}

//! The lanes behind the WebSocket lane, in one task: the webhook lane ([`Rounds`] in
//! [`Lane::Webhooks`]), woken after each WebSocket round that moved and at least every fallback
//! period, and the finality lane ([`Lane::Final`], see [`crate::finals`]), run after every wake
//! and after webhook rounds that moved, bounded by where the other two stand. Both wake the
//! dispatcher after rounds that queued deliveries. Failures back off; a task that completes no
//! round within the stall limit ends, and the leader hands over (exit 75). A stop lets the round
//! in flight finish within the round deadline.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use pmw_core::{ServiceError, UnixMs};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::round_loop::stalled;
use crate::rounds::{Lane, RoundError, RoundOutcome, Rounds};
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
    hooks_due: Arc<AtomicBool>,
    stop: CancellationToken,
    task: Option<JoinHandle<Result<(), ServiceError>>>,
    result: Option<Result<(), String>>,
}

impl WebhookLane {
    pub fn spawn(
        rounds: Rounds,
        finals: Option<Rounds>,
        dispatcher: Arc<Notify>,
        health: Arc<Health>,
        timing: Timing,
    ) -> WebhookLane {
        let wake = Arc::new(Notify::new());
        let hooks_due = Arc::new(AtomicBool::new(false));
        let stop = CancellationToken::new();
        let task = tokio::spawn(run(
            rounds,
            finals,
            (wake.clone(), hooks_due.clone()),
            dispatcher,
            health,
            timing,
            stop.clone(),
        ));
        WebhookLane {
            wake,
            hooks_due,
            stop,
            task: Some(task),
            result: None,
        }
    }

    /// The WebSocket lane moved: look now.
    pub fn wake(&self) {
        self.hooks_due.store(true, Ordering::Relaxed);
        self.wake.notify_one();
    }

    /// A WebSocket round completed (the finalized watermark may have moved): run the finality
    /// lane only.
    pub fn wake_finals(&self) {
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

/// Run one lane's round, bounded by the stall limit (a hung round is no progress either) and,
/// after a stop, by the round deadline (`Ok(None)`: stop now).
async fn one_round(
    rounds: &mut Rounds,
    name: &'static str,
    progress: Instant,
    t: &Timing,
    stop: &CancellationToken,
) -> Result<Option<Result<RoundOutcome, RoundError>>, ServiceError> {
    let span = match rounds.lane {
        Lane::Final => {
            tracing::info_span!("final_round", epoch = rounds.epoch, from = %rounds.position)
        }
        _ => tracing::info_span!("webhook_round", epoch = rounds.epoch, from = %rounds.position),
    };
    let mut round = std::pin::pin!(rounds.round().instrument(span));
    tokio::select! {
        r = &mut round => Ok(Some(r)),
        _ = stop.cancelled() => match tokio::time::timeout(t.deadline, &mut round).await {
            Ok(r) => Ok(Some(r)),
            Err(_) => {
                tracing::warn!(lane = name, "round still running at the deadline; stopping");
                Ok(None)
            }
        },
        _ = tokio::time::sleep_until(progress + t.stall) => {
            Err(stalled(name, t.stall, "a round is still running"))
        }
    }
}

async fn run(
    mut rounds: Rounds,
    mut finals: Option<Rounds>,
    (wake, hooks_due): (Arc<Notify>, Arc<AtomicBool>),
    dispatcher: Arc<Notify>,
    health: Arc<Health>,
    t: Timing,
    stop: CancellationToken,
) -> Result<(), ServiceError> {
    let mut progress = Instant::now();
    let mut backoff = Duration::from_millis(100);
    let (mut hooks_now, mut finals_now) = (true, finals.is_some());
    tracing::info!(cursor = %rounds.position, finals = ?finals.as_ref().map(|f| f.position.to_string()), "webhook lane started");
    loop {
        if !hooks_now && !finals_now {
            tokio::select! {
                biased;
                _ = stop.cancelled() => return Ok(()),
                _ = wake.notified() => {}
                _ = tokio::time::sleep(t.fallback) => hooks_due.store(true, Ordering::Relaxed),
            }
            finals_now = finals.is_some();
        }
        hooks_now |= hooks_due.swap(false, Ordering::Relaxed);
        let mut failed = None;
        if hooks_now {
            let Some(outcome) = one_round(&mut rounds, "webhook", progress, &t, &stop).await?
            else {
                return Ok(());
            };
            match outcome {
                Ok(o) => {
                    progress = Instant::now();
                    health
                        .webhooks_skipped
                        .fetch_add(o.webhooks_skipped, Ordering::Relaxed);
                    health
                        .webhook_block
                        .store(rounds.cursor.block as i64, Ordering::Relaxed);
                    health
                        .webhook_round_ms
                        .store(UnixMs::now().0, Ordering::Relaxed);
                    // Handed-over trades need no scan; retracts (and anything queued unclaimed) do.
                    if o.webhooks > o.handed || o.retracted > 0 {
                        dispatcher.notify_one();
                    }
                    if o.trades + o.retracted > 0 {
                        tracing::debug!(trades = o.trades, retracted = o.retracted, webhooks = o.webhooks, handed = o.handed, cursor = %rounds.cursor, "webhook round");
                        finals_now = finals.is_some();
                    }
                    hooks_now = o.more;
                }
                Err(e) => failed = Some(("webhooks", e)),
            }
        }
        if let (Some(f), true, None) = (finals.as_mut(), finals_now, &failed) {
            // Behind both other lanes: what every session was dispatched and what the webhook
            // lane has queued.
            f.bound = Some(rounds.hub.dispatched().cursor.min(rounds.cursor));
            let Some(outcome) = one_round(f, "final", progress, &t, &stop).await? else {
                return Ok(());
            };
            match outcome {
                Ok(o) => {
                    progress = Instant::now();
                    health
                        .final_block
                        .store(f.cursor.block as i64, Ordering::Relaxed);
                    health
                        .final_round_ms
                        .store(UnixMs::now().0, Ordering::Relaxed);
                    if o.webhooks > 0 {
                        dispatcher.notify_one();
                    }
                    if o.trades + o.retracted > 0 {
                        tracing::debug!(finals = o.trades, retracted = o.retracted, frames = o.frames, webhooks = o.webhooks, cursor = %f.cursor, "final round");
                    }
                    finals_now = o.more;
                }
                Err(e) => failed = Some(("finals", e)),
            }
        }
        if stop.is_cancelled() {
            return Ok(());
        }
        match failed {
            None => backoff = Duration::from_millis(100),
            Some((_, RoundError::Fenced)) => {
                tracing::error!(
                    epoch = rounds.epoch,
                    "webhook lane deposed: a newer leader bumped the epoch"
                );
                return Err(ServiceError::transient("push epoch superseded"));
            }
            Some((lane, e)) => {
                health.errors.fetch_add(1, Ordering::Relaxed);
                *health.last_error.lock().expect("health lock") = Some(format!("{lane}: {e}"));
                if progress.elapsed() >= t.stall {
                    return Err(stalled(lane, t.stall, &e.to_string()));
                }
                tracing::warn!(lane, error = %e, retry_in_ms = backoff.as_millis() as u64, "round failed");
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = stop.cancelled() => return Ok(()),
                }
                backoff = (backoff * 2).min(Duration::from_secs(5));
                if lane == "webhooks" {
                    hooks_now = true;
                } else {
                    finals_now = true;
                }
            }
        }
    }
}

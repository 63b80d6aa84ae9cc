//! The tasks that run the lanes beside the WebSocket lane, one each, so neither waits on the
//! other: the webhook lane ([`HookLane`]), woken by each block's NOTIFY as the WebSocket round
//! starts, after each WebSocket round that moved, and at least every fallback period; and the
//! finality lane ([`FinalLane`]), woken after every WebSocket round and whenever the webhook
//! lane moves, bounded by where the other two stand. In edge mode the finality lane stores its
//! rounds on the broker first: a broker outage holds the `final`s, never the webhooks. Both
//! wake the dispatcher after rounds that queued deliveries. Failures back off; a task that
//! completes no round within the stall limit ends, and the leader hands over (exit 75). A stop
//! lets the rounds in flight finish within the round deadline.

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use pmw_core::backoff::{Backoff, Policy};
use pmw_core::{Cursor, ServiceError, UnixMs};
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::lanes::{FinalLane, HookLane};
use crate::round::{stalled, RoundError, RoundOutcome};
use crate::Health;

/// How the lanes run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timing {
    /// Run a round at least this often without a wake-up.
    pub fallback: Duration,
    /// End (and hand over) when no round completed for this long.
    pub stall: Duration,
    /// How long a round in flight may finish after a stop.
    pub deadline: Duration,
}

/// The running tasks of the webhook and finality lanes.
pub(crate) struct HooksAndFinals {
    hooks: Arc<Notify>,
    finals: Arc<Notify>,
    stop: CancellationToken,
    tasks: Vec<(&'static str, JoinHandle<Result<(), ServiceError>>)>,
    result: Option<Result<(), String>>,
}

impl HooksAndFinals {
    pub fn spawn(
        hooks: HookLane,
        finals: Option<FinalLane>,
        dispatcher: Arc<Notify>,
        health: Arc<Health>,
        timing: Timing,
    ) -> HooksAndFinals {
        let (wake_hooks, wake_finals) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
        let stop = CancellationToken::new();
        let (moved, hooks_at) = watch::channel(hooks.at.cursor());
        let pace = |lane| Pace {
            lane,
            dispatcher: dispatcher.clone(),
            health: health.clone(),
            t: timing,
            stop: stop.clone(),
            progress: Instant::now(),
            backoff: Backoff::new(Policy::STORE),
        };
        tracing::info!(cursor = %hooks.at.position, finals = ?finals.as_ref().map(|f| f.at.position.to_string()), "webhook lane started");
        let mut tasks = vec![(
            "webhook",
            tokio::spawn(run_hooks(
                hooks,
                moved,
                wake_hooks.clone(),
                pace("webhooks"),
            )),
        )];
        if let Some(f) = finals {
            let run = run_finals(f, hooks_at, wake_finals.clone(), pace("finals"));
            tasks.push(("final", tokio::spawn(run)));
        }
        HooksAndFinals {
            hooks: wake_hooks,
            finals: wake_finals,
            stop,
            tasks,
            result: None,
        }
    }

    /// The WebSocket lane moved, or a block came while it was held up: look now.
    pub fn wake(&self) {
        self.hooks.notify_one();
        self.finals.notify_one();
    }

    /// A block came: the webhook lane looks now, beside the WebSocket round (the finality lane,
    /// which stays behind both, is woken when that round completes).
    pub fn wake_hooks(&self) {
        self.hooks.notify_one();
    }

    /// A WebSocket round completed (the finalized watermark may have moved): run the finality
    /// lane only.
    pub fn wake_finals(&self) {
        self.finals.notify_one();
    }

    /// Wait until a lane ends and say why; after [`HooksAndFinals::begin_stop`], until both
    /// have (cancel-safe; may be called again).
    pub async fn wait(&mut self) -> Result<(), String> {
        while !self.tasks.is_empty() {
            let ends = self.tasks.iter_mut().map(|(_, t)| t);
            let (r, i, _) = futures::future::select_all(ends).await;
            let (name, _) = self.tasks.remove(i);
            let r = match r {
                Ok(r) => r.map_err(|e| e.to_string()),
                Err(e) => Err(format!("{name} lane task: {e}")),
            };
            if self.result.as_ref().is_none_or(Result::is_ok) {
                self.result = Some(r.clone());
            }
            if r.is_err() || !self.stop.is_cancelled() {
                break;
            }
        }
        self.result.clone().unwrap_or(Ok(()))
    }

    /// Begin stopping without waiting ([`HooksAndFinals::wait`] says when they ended).
    pub fn begin_stop(&self) {
        self.stop.cancel();
    }

    /// Stop: the rounds in flight finish (bounded by the round deadline), no new one starts.
    pub async fn stop(mut self) -> Result<(), String> {
        self.stop.cancel();
        let r = self.wait().await;
        // A lane that failed ended the wait early: the other one still finishes its round.
        while !self.tasks.is_empty() {
            let _ = self.wait().await;
        }
        r
    }
}

impl Drop for HooksAndFinals {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// How a bounded round ended.
enum Ran {
    Done(RoundOutcome),
    Failed(RoundError),
    /// Stopped, and the round in flight did not finish within the deadline: stop now.
    Stop,
}

/// What a lane task does after a round ([`Pace::round`]).
enum After {
    /// The round completed (the clock is reset): record it.
    Done(RoundOutcome),
    /// It failed and the backoff passed: run again at once.
    Retry,
    /// Stopped: end the task.
    Stop,
}

/// One lane task's clock and what it reports to.
struct Pace {
    lane: &'static str,
    dispatcher: Arc<Notify>,
    health: Arc<Health>,
    t: Timing,
    stop: CancellationToken,
    progress: Instant,
    backoff: Backoff,
}

impl Pace {
    /// Run one round, bounded by the stall limit (a hung round is no progress either) and,
    /// after a stop, by the round deadline.
    async fn bounded(
        &self,
        round: impl Future<Output = Result<RoundOutcome, RoundError>>,
    ) -> Result<Ran, ServiceError> {
        let mut round = std::pin::pin!(round);
        let of = |r: Result<RoundOutcome, RoundError>| match r {
            Ok(o) => Ran::Done(o),
            Err(e) => Ran::Failed(e),
        };
        tokio::select! {
            r = &mut round => Ok(of(r)),
            _ = self.stop.cancelled() => match tokio::time::timeout(self.t.deadline, &mut round).await {
                Ok(r) => Ok(of(r)),
                Err(_) => {
                    tracing::warn!(lane = self.lane, "round still running at the deadline; stopping");
                    Ok(Ran::Stop)
                }
            },
            _ = tokio::time::sleep_until(self.progress + self.t.stall) => {
                Err(stalled(self.lane, self.t.stall, "a round is still running"))
            }
        }
    }

    /// Sleep until woken, the fallback period, or a stop (`false`).
    async fn idle(&self, wake: &Notify, moved: Option<&mut watch::Receiver<Cursor>>) -> bool {
        // The webhook lane's task gone (its sender dropped): only the other wake-ups are left.
        let moved = async {
            match moved {
                Some(m) => {
                    if m.changed().await.is_err() {
                        std::future::pending::<()>().await
                    }
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            _ = self.stop.cancelled() => false,
            _ = wake.notified() => true,
            _ = moved => true,
            _ = tokio::time::sleep(self.t.fallback) => true,
        }
    }

    /// Run one round of the lane at `epoch`, bounded ([`Pace::bounded`]); a completed one resets
    /// the clock, a failed one is backed off ([`Pace::failed`]).
    async fn round(
        &mut self,
        epoch: i64,
        round: impl Future<Output = Result<RoundOutcome, RoundError>>,
    ) -> Result<After, ServiceError> {
        Ok(match self.bounded(round).await? {
            Ran::Done(o) => {
                self.progress = Instant::now();
                self.backoff.reset();
                After::Done(o)
            }
            Ran::Failed(e) => match self.failed(epoch, e).await? {
                true => After::Retry,
                false => After::Stop,
            },
            Ran::Stop => After::Stop,
        })
    }

    /// A failed round: hand over when fenced or stalled, else back off (`false`: stopped
    /// meanwhile).
    async fn failed(&mut self, epoch: i64, e: RoundError) -> Result<bool, ServiceError> {
        if let RoundError::Fenced = e {
            tracing::error!(
                epoch,
                lane = self.lane,
                "lane deposed: a newer leader bumped the epoch"
            );
            return Err(ServiceError::transient("push epoch superseded"));
        }
        self.health.errors.fetch_add(1, Ordering::Relaxed);
        *self.health.last_error.lock().expect("health lock") = Some(format!("{}: {e}", self.lane));
        if self.progress.elapsed() >= self.t.stall {
            return Err(stalled(self.lane, self.t.stall, &e.to_string()));
        }
        let wait = self.backoff.next_wait();
        tracing::warn!(lane = self.lane, error = %e, retry_in_ms = wait.as_millis() as u64, "round failed");
        tokio::select! {
            _ = tokio::time::sleep(wait) => Ok(true),
            _ = self.stop.cancelled() => Ok(false),
        }
    }
}

/// The webhook lane's task; tells the finality lane where it stands (`moved`).
async fn run_hooks(
    mut hooks: HookLane,
    moved: watch::Sender<Cursor>,
    wake: Arc<Notify>,
    mut pace: Pace,
) -> Result<(), ServiceError> {
    let mut now = true;
    loop {
        if !now && !pace.idle(&wake, None).await {
            return Ok(());
        }
        let span =
            tracing::info_span!("webhook_round", epoch = hooks.epoch(), from = %hooks.at.position);
        now = match pace
            .round(hooks.epoch(), hooks.round().instrument(span))
            .await?
        {
            After::Done(o) => {
                let h = &pace.health;
                h.webhooks_skipped
                    .fetch_add(o.webhooks_skipped, Ordering::Relaxed);
                h.webhook_block
                    .store(hooks.at.cursor().block as i64, Ordering::Relaxed);
                h.webhook_round_ms.store(UnixMs::now().0, Ordering::Relaxed);
                // Handed-over trades need no scan; retracts (and anything queued unclaimed) do.
                if o.webhooks > o.handed || o.retracted > 0 {
                    pace.dispatcher.notify_one();
                }
                if o.trades + o.retracted > 0 {
                    tracing::debug!(trades = o.trades, retracted = o.retracted, webhooks = o.webhooks, handed = o.handed, cursor = %hooks.at.cursor(), "webhook round");
                }
                let at = hooks.at.cursor();
                moved.send_if_modified(|c| std::mem::replace(c, at) != at);
                o.more
            }
            After::Retry => true,
            After::Stop => return Ok(()),
        };
        if pace.stop.is_cancelled() {
            return Ok(());
        }
    }
}

/// The finality lane's task: behind what every session was dispatched and what the webhook
/// lane (at `hooks_at`) has queued.
async fn run_finals(
    mut finals: FinalLane,
    mut hooks_at: watch::Receiver<Cursor>,
    wake: Arc<Notify>,
    mut pace: Pace,
) -> Result<(), ServiceError> {
    let mut now = true;
    loop {
        if !now && !pace.idle(&wake, Some(&mut hooks_at)).await {
            return Ok(());
        }
        let bound = finals.bound(*hooks_at.borrow_and_update());
        let span =
            tracing::info_span!("final_round", epoch = finals.epoch(), from = %finals.at.position);
        now = match pace
            .round(finals.epoch(), finals.round(bound).instrument(span))
            .await?
        {
            After::Done(o) => {
                let h = &pace.health;
                h.final_block
                    .store(finals.at.cursor().block as i64, Ordering::Relaxed);
                h.final_round_ms.store(UnixMs::now().0, Ordering::Relaxed);
                if o.webhooks > 0 {
                    pace.dispatcher.notify_one();
                }
                if o.trades + o.retracted > 0 {
                    tracing::debug!(finals = o.trades, retracted = o.retracted, frames = o.frames, webhooks = o.webhooks, cursor = %finals.at.cursor(), "final round");
                }
                o.more
            }
            After::Retry => true,
            After::Stop => return Ok(()),
        };
        if pace.stop.is_cancelled() {
            return Ok(());
        }
    }
}

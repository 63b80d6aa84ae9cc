//! The task that runs the lanes behind the WebSocket lane: the webhook lane ([`HookLane`]), woken
//! after each WebSocket round that moved and at least every fallback period, and the finality
//! lane ([`FinalLane`]), run after every wake and after webhook rounds that moved, bounded by
//! where the other two stand. Both wake the
//! dispatcher after rounds that queued deliveries. Failures back off; a task that completes no
//! round within the stall limit ends, and the leader hands over (exit 75). A stop lets the round
//! in flight finish within the round deadline.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use pmw_core::backoff::{Backoff, Policy};
use pmw_core::{ServiceError, UnixMs};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::lanes::{FinalLane, HookLane};
use crate::round::{stalled, RoundError, RoundOutcome};
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

/// The running task of the webhook and finality lanes.
pub(crate) struct HooksAndFinals {
    wake: Arc<Notify>,
    hooks_due: Arc<AtomicBool>,
    stop: CancellationToken,
    task: Option<JoinHandle<Result<(), ServiceError>>>,
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
        let wake = Arc::new(Notify::new());
        let hooks_due = Arc::new(AtomicBool::new(false));
        let stop = CancellationToken::new();
        let task = tokio::spawn(run(
            hooks,
            finals,
            (wake.clone(), hooks_due.clone()),
            dispatcher,
            health,
            timing,
            stop.clone(),
        ));
        HooksAndFinals {
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

    /// Begin stopping without waiting ([`HooksAndFinals::wait`] says when it ended).
    pub fn begin_stop(&self) {
        self.stop.cancel();
    }

    /// Stop: the round in flight finishes (bounded by the round deadline), no new one starts.
    pub async fn stop(mut self) -> Result<(), String> {
        self.stop.cancel();
        self.wait().await
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
    Failed(&'static str, RoundError),
    /// Stopped, and the round in flight did not finish within the deadline: stop now.
    Stop,
}

impl Ran {
    fn of(lane: &'static str, r: Result<RoundOutcome, RoundError>) -> Ran {
        match r {
            Ok(o) => Ran::Done(o),
            Err(e) => Ran::Failed(lane, e),
        }
    }
}

/// Run one lane's round, bounded by the stall limit (a hung round is no progress either) and,
/// after a stop, by the round deadline.
async fn bounded(
    round: impl Future<Output = Result<RoundOutcome, RoundError>>,
    (name, lane): (&'static str, &'static str),
    progress: Instant,
    t: &Timing,
    stop: &CancellationToken,
) -> Result<Ran, ServiceError> {
    let mut round = std::pin::pin!(round);
    tokio::select! {
        r = &mut round => Ok(Ran::of(lane, r)),
        _ = stop.cancelled() => match tokio::time::timeout(t.deadline, &mut round).await {
            Ok(r) => Ok(Ran::of(lane, r)),
            Err(_) => {
                tracing::warn!(lane = name, "round still running at the deadline; stopping");
                Ok(Ran::Stop)
            }
        },
        _ = tokio::time::sleep_until(progress + t.stall) => {
            Err(stalled(name, t.stall, "a round is still running"))
        }
    }
}

/// What a step of the task decided.
enum Step {
    /// Go on (with the failure of a lane's round, if it failed).
    Next(Option<(&'static str, RoundError)>),
    /// Stopped: end the task.
    Stop,
}

impl Step {
    /// The step after a round that did not complete.
    fn after(ran: Ran) -> Step {
        match ran {
            Ran::Failed(lane, e) => Step::Next(Some((lane, e))),
            Ran::Done(_) => Step::Next(None),
            Ran::Stop => Step::Stop,
        }
    }
}

/// The task's state between rounds.
struct Runner {
    hooks: HookLane,
    finals: Option<FinalLane>,
    dispatcher: Arc<Notify>,
    health: Arc<Health>,
    t: Timing,
    stop: CancellationToken,
    progress: Instant,
    backoff: Backoff,
    hooks_now: bool,
    finals_now: bool,
}

async fn run(
    hooks: HookLane,
    finals: Option<FinalLane>,
    (wake, hooks_due): (Arc<Notify>, Arc<AtomicBool>),
    dispatcher: Arc<Notify>,
    health: Arc<Health>,
    t: Timing,
    stop: CancellationToken,
) -> Result<(), ServiceError> {
    tracing::info!(cursor = %hooks.at.position, finals = ?finals.as_ref().map(|f| f.at.position.to_string()), "webhook lane started");
    let finals_now = finals.is_some();
    let mut r = Runner {
        hooks,
        finals,
        dispatcher,
        health,
        t,
        stop,
        progress: Instant::now(),
        backoff: Backoff::new(Policy::STORE),
        hooks_now: true,
        finals_now,
    };
    loop {
        if !r.hooks_now && !r.finals_now {
            tokio::select! {
                biased;
                _ = r.stop.cancelled() => return Ok(()),
                _ = wake.notified() => {}
                _ = tokio::time::sleep(r.t.fallback) => hooks_due.store(true, Ordering::Relaxed),
            }
            r.finals_now = r.finals.is_some();
        }
        r.hooks_now |= hooks_due.swap(false, Ordering::Relaxed);
        let mut failed = None;
        if r.hooks_now {
            match r.hooks_round().await? {
                Step::Stop => return Ok(()),
                Step::Next(f) => failed = f,
            }
        }
        if r.finals_now && failed.is_none() && r.finals.is_some() {
            match r.finals_round().await? {
                Step::Stop => return Ok(()),
                Step::Next(f) => failed = f,
            }
        }
        if r.stop.is_cancelled() {
            return Ok(());
        }
        if let Step::Stop = r.after(failed).await? {
            return Ok(());
        }
    }
}

impl Runner {
    async fn hooks_round(&mut self) -> Result<Step, ServiceError> {
        let span = tracing::info_span!("webhook_round", epoch = self.hooks.epoch(), from = %self.hooks.at.position);
        let round = self.hooks.round().instrument(span);
        let names = ("webhook", "webhooks");
        let o = match bounded(round, names, self.progress, &self.t, &self.stop).await? {
            Ran::Done(o) => o,
            ended => return Ok(Step::after(ended)),
        };
        self.progress = Instant::now();
        let h = &self.health;
        h.webhooks_skipped
            .fetch_add(o.webhooks_skipped, Ordering::Relaxed);
        h.webhook_block
            .store(self.hooks.at.cursor().block as i64, Ordering::Relaxed);
        h.webhook_round_ms.store(UnixMs::now().0, Ordering::Relaxed);
        // Handed-over trades need no scan; retracts (and anything queued unclaimed) do.
        if o.webhooks > o.handed || o.retracted > 0 {
            self.dispatcher.notify_one();
        }
        if o.trades + o.retracted > 0 {
            tracing::debug!(trades = o.trades, retracted = o.retracted, webhooks = o.webhooks, handed = o.handed, cursor = %self.hooks.at.cursor(), "webhook round");
            self.finals_now = self.finals.is_some();
        }
        self.hooks_now = o.more;
        Ok(Step::Next(None))
    }

    /// Behind both other lanes: what every session was dispatched and what the webhook lane
    /// has queued.
    async fn finals_round(&mut self) -> Result<Step, ServiceError> {
        let Some(f) = self.finals.as_mut() else {
            return Ok(Step::Next(None));
        };
        let bound = f.bound(self.hooks.at.cursor());
        let span = tracing::info_span!("final_round", epoch = f.epoch(), from = %f.at.position);
        let round = f.round(bound).instrument(span);
        let names = ("final", "finals");
        let o = match bounded(round, names, self.progress, &self.t, &self.stop).await? {
            Ran::Done(o) => o,
            ended => return Ok(Step::after(ended)),
        };
        self.progress = Instant::now();
        let h = &self.health;
        h.final_block
            .store(f.at.cursor().block as i64, Ordering::Relaxed);
        h.final_round_ms.store(UnixMs::now().0, Ordering::Relaxed);
        if o.webhooks > 0 {
            self.dispatcher.notify_one();
        }
        if o.trades + o.retracted > 0 {
            tracing::debug!(finals = o.trades, retracted = o.retracted, frames = o.frames, webhooks = o.webhooks, cursor = %f.at.cursor(), "final round");
        }
        self.finals_now = o.more;
        Ok(Step::Next(None))
    }

    /// After the rounds: reset the backoff, or hand over when fenced or stalled, or back off and
    /// retry the lane that failed.
    async fn after(
        &mut self,
        failed: Option<(&'static str, RoundError)>,
    ) -> Result<Step, ServiceError> {
        let (lane, e) = match failed {
            None => {
                self.backoff.reset();
                return Ok(Step::Next(None));
            }
            Some((_, RoundError::Fenced)) => {
                tracing::error!(
                    epoch = self.hooks.epoch(),
                    "webhook lane deposed: a newer leader bumped the epoch"
                );
                return Err(ServiceError::transient("push epoch superseded"));
            }
            Some(failed) => failed,
        };
        self.health.errors.fetch_add(1, Ordering::Relaxed);
        *self.health.last_error.lock().expect("health lock") = Some(format!("{lane}: {e}"));
        if self.progress.elapsed() >= self.t.stall {
            return Err(stalled(lane, self.t.stall, &e.to_string()));
        }
        let wait = self.backoff.next_wait();
        tracing::warn!(lane, error = %e, retry_in_ms = wait.as_millis() as u64, "round failed");
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = self.stop.cancelled() => return Ok(Step::Stop),
        }
        if lane == "webhooks" {
            self.hooks_now = true;
        } else {
            self.finals_now = true;
        }
        Ok(Step::Next(None))
    }
}

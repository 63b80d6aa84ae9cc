//! The leader's round loop: wake on a NOTIFY (or after the fallback period), run rounds, back off
//! on errors, hand over (exit 75) when no round completes for the stall limit, and stop within
//! the round deadline on shutdown in every state (idle, catching up, failing, mid-round).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use pmw_core::backoff::{Backoff, Policy};
use pmw_core::heartbeat::Heartbeat;
use pmw_core::pg::{self, Session};
use pmw_core::{CoreConfig, ServiceError, UnixMs};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use pmw_core::channels;

use crate::hooks_and_finals::HooksAndFinals;
use crate::lanes::WsLane;
use crate::round::{stalled, RoundError, RoundOutcome};
use crate::{webhook, Health, PushConfig};
use pmw_session::hub::Hub;

/// Subscription-only wake-ups refresh the index at most this often (a churning account cannot
/// make the leader reload continuously; revocation still applies well within a second).
const INDEX_EVERY: Duration = Duration::from_millis(200);

/// What the loop does after a round.
enum Next {
    /// Go on; `true`: run the next round at once (more is waiting, or a retry).
    Run(bool),
    Stop(Stopped),
}

/// What woke the loop.
enum Wake {
    Round,
    Index,
    Beat,
}

/// How the loop ended without an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stopped {
    /// Shutdown, with no round in flight: release the lock.
    Graceful,
    /// Shutdown, and the round in flight outlived the deadline: exit with the lock held.
    DeadlinePassed,
}

pub(crate) struct RoundLoop<'a> {
    pub cfg: &'a CoreConfig,
    pub push: &'a PushConfig,
    pub shutdown: &'a CancellationToken,
    /// Cancelled when the lock session is gone.
    pub lost: CancellationToken,
    /// `None` in the benchmark's polling baseline.
    pub listen: Option<Session>,
    pub ws: WsLane,
    pub hub: Hub,
    pub health: Arc<Health>,
    pub heartbeat: &'a Heartbeat,
    pub dispatcher: &'a mut webhook::Dispatcher,
    /// The webhook and finality lanes, behind this loop's rounds.
    pub behind: &'a mut HooksAndFinals,
    /// When the lost listen session may be reopened next, and the backoff after that.
    pub relisten_at: Instant,
    pub relisten_wait: Backoff,
    /// The last index refresh, and the next one scheduled (debounced).
    pub index_at: Option<Instant>,
    pub index_due: Option<Instant>,
}

/// The loop's clock: when it last made progress, and how it backs off and beats.
struct Pace {
    /// Rounds run at least this often without a wake-up.
    fallback: Duration,
    /// How long the round in flight may finish after a stop.
    deadline: Duration,
    /// Hand over when no round completed for this long.
    stall: Duration,
    /// Taking the lead counts as progress: a leader that never completes a round hands over.
    progress: Instant,
    backoff: Backoff,
    last_beat: i64,
    /// A block came while a round ran: run another at once.
    block_waiting: bool,
}

/// How often the feed's rounds run while a graceful stop drains the webhooks (besides every
/// block NOTIFY).
const DRAIN_POLL: Duration = Duration::from_millis(100);
/// The heartbeat is the standby's lease: beat this often even when idle.
const BEAT_EVERY_MS: i64 = 1_000;

impl RoundLoop<'_> {
    pub(crate) async fn run(mut self) -> Result<Stopped, ServiceError> {
        let push = self.push;
        let mut pace = Pace {
            fallback: PushConfig::ms(crate::baseline::poll_ms().unwrap_or(push.push_fallback_ms)),
            deadline: PushConfig::ms(push.push_round_deadline_ms),
            stall: PushConfig::ms(push.stall_exit_ms()),
            progress: Instant::now(),
            backoff: Backoff::new(Policy::STORE),
            last_beat: 0,
            block_waiting: false,
        };
        let mut run_now = true; // catch up from the cursor at once
        loop {
            if self.shutdown.is_cancelled() {
                return self.drain(&mut pace).await;
            }
            if !run_now && !self.idle(&mut pace).await? {
                return self.drain(&mut pace).await;
            }
            run_now = match self.round(&mut pace).await? {
                Next::Run(again) => again,
                Next::Stop(Stopped::Graceful) => return self.drain(&mut pace).await,
                Next::Stop(stopped) => return Ok(stopped),
            };
            self.beat_if_due(&mut pace).await;
        }
    }

    /// A graceful stop keeps the WebSocket feed going while the webhook lane finishes its round
    /// and then the dispatcher its attempts in flight (a slow receiver holds one up to its
    /// timeout; they finish so the successor does not send them again). Only then does the
    /// loop end: the lock is released and the sockets close with 1012. A deploy used to stop
    /// the feed at the signal and wait for the receivers: 1.5–1.9 s without a frame (checker
    /// seed 24459). Bounded by the round deadline.
    async fn drain(&mut self, pace: &mut Pace) -> Result<Stopped, ServiceError> {
        let until = Instant::now() + pace.deadline;
        let started = Instant::now();
        self.behind.begin_stop();
        let (mut lane_done, mut again) = (false, false);
        loop {
            if !again {
                let done = tokio::select! {
                    r = self.behind.wait(), if !lane_done => {
                        if let Err(e) = r { tracing::warn!(error = %e, "webhook lane ended with an error"); }
                        lane_done = true;
                        self.dispatcher.begin_stop();
                        false
                    }
                    r = self.dispatcher.wait(), if lane_done => {
                        if let Err(e) = r { tracing::warn!(error = %e, "webhook dispatcher ended with an error"); }
                        true
                    }
                    _ = async { match self.listen.as_mut() { Some(s) => { s.notifications.recv().await; } None => std::future::pending().await } } => false,
                    _ = tokio::time::sleep(DRAIN_POLL) => false,
                    _ = tokio::time::sleep_until(until) => {
                        tracing::warn!(deadline_ms = pace.deadline.as_millis() as u64, "webhooks still in flight at the round deadline; handing over anyway");
                        true
                    }
                    _ = self.lost.cancelled() => return Err(ServiceError::transient("push lock session lost")),
                };
                if done {
                    tracing::info!(
                        drained_ms = started.elapsed().as_millis() as u64,
                        "webhooks drained; handing over"
                    );
                    return Ok(Stopped::Graceful);
                }
            }
            again = match self.round(pace).await? {
                Next::Run(more) => more,
                Next::Stop(Stopped::DeadlinePassed) => return Ok(Stopped::DeadlinePassed),
                // A failed round during the stop: the next tick tries again.
                Next::Stop(Stopped::Graceful) => false,
            };
            self.beat_if_due(pace).await;
        }
    }

    /// Wait for the next round (a block, the fallback period), refreshing the index on
    /// subscription changes and beating meanwhile. `false`: shutdown came.
    async fn idle(&mut self, pace: &mut Pace) -> Result<bool, ServiceError> {
        let fallback_at = Instant::now() + pace.fallback;
        loop {
            let wake = self.wait(fallback_at, pace.progress + pace.stall).await?;
            match wake {
                // Only subscriptions changed: refresh the index (revocations, unsubscribes)
                // without a ClickHouse round; at most every INDEX_EVERY.
                Wake::Index => self.refresh_index().await,
                Wake::Round | Wake::Beat => {}
            }
            self.beat_if_due(pace).await;
            if self.shutdown.is_cancelled() {
                return Ok(false);
            }
            if let Wake::Round = wake {
                return Ok(true);
            }
        }
    }

    /// One WebSocket round, bounded by the stall limit, the lock session and (after shutdown)
    /// the round deadline; then what its outcome means for the loop.
    async fn round(&mut self, pace: &mut Pace) -> Result<Next, ServiceError> {
        let started = Instant::now();
        let epoch = self.ws.epoch();
        let outcome = {
            // Every log line of the round (errors with their SQLSTATE, reorgs, short blocks)
            // carries the epoch and the cursor it started from.
            let span = tracing::info_span!("round", epoch, from = %self.ws.at.position);
            let mut round = std::pin::pin!(self.ws.round().instrument(span));
            let mut listening = self.listen.is_some();
            loop {
                tokio::select! {
                    r = &mut round => break r,
                    _ = self.shutdown.cancelled() => match tokio::time::timeout(pace.deadline, &mut round).await {
                        Ok(r) => break r,
                        Err(_) => {
                            tracing::error!(deadline_ms = pace.deadline.as_millis() as u64, "round deadline passed on shutdown; exiting with the lock held");
                            return Ok(Next::Stop(Stopped::DeadlinePassed));
                        }
                    },
                    _ = self.lost.cancelled() => return Err(ServiceError::transient("push lock session lost")),
                    _ = tokio::time::sleep_until(pace.progress + pace.stall) => return Err(stalled("push", pace.stall, "a round is still running")),
                    // A block while the round is held up (a broker outage in edge mode): the
                    // webhook lane reads on its own, and this loop runs again after the round.
                    n = async { match self.listen.as_mut() { Some(s) => s.notifications.recv().await, None => std::future::pending().await } }, if listening => {
                        match n {
                            // Gone: the next wait finds the session lost.
                            None => listening = false,
                            Some(n) if n.channel() == channels::SUBSCRIPTIONS => self.index_due = Some(Instant::now()),
                            Some(_) => {
                                self.behind.wake();
                                pace.block_waiting = true;
                            }
                        }
                    }
                }
            }
        };
        crate::telemetry::round(outcome.is_ok(), started.elapsed());
        let block_waiting = std::mem::take(&mut pace.block_waiting);
        match outcome {
            Ok(o) => Ok(Next::Run(self.completed(pace, o).await || block_waiting)),
            Err(RoundError::Fenced) => {
                tracing::error!(epoch, "deposed: a newer leader bumped the epoch");
                Err(ServiceError::transient("push epoch superseded"))
            }
            Err(e) => self.failed(pace, e).await,
        }
    }

    /// A completed round: record it, wake the lanes behind; `true` when more is waiting.
    async fn completed(&mut self, pace: &mut Pace, o: RoundOutcome) -> bool {
        pace.progress = Instant::now();
        pace.backoff.reset();
        let h = &self.health;
        h.rounds.fetch_add(1, Ordering::Relaxed);
        h.last_round_ms.store(UnixMs::now().0, Ordering::Relaxed);
        h.webhooks_skipped
            .fetch_add(o.webhooks_skipped, Ordering::Relaxed);
        if o.trades + o.retracted == 0 {
            self.behind.wake_finals();
        } else {
            self.behind.wake();
            tracing::debug!(trades = o.trades, retracted = o.retracted, frames = o.frames, webhooks = o.webhooks, cursor = %self.ws.at.cursor(), "round");
        }
        if o.more {
            // A catch-up runs round after round: let the session writers, the webhook lane and
            // the dispatcher run in between.
            tokio::task::yield_now().await;
        }
        o.more
    }

    /// A failed round: surfaced in health and logs, retried after a backoff, handed over when
    /// no round completed for the stall limit.
    async fn failed(&mut self, pace: &mut Pace, e: RoundError) -> Result<Next, ServiceError> {
        self.health.errors.fetch_add(1, Ordering::Relaxed);
        *self.health.last_error.lock().expect("health lock") = Some(e.to_string());
        if pace.progress.elapsed() >= pace.stall {
            return Err(stalled("push", pace.stall, &e.to_string()));
        }
        let wait = pace.backoff.next_wait();
        tracing::warn!(error = %e, retry_in_ms = wait.as_millis() as u64, failures = pace.backoff.failures(), "push round failed");
        // The webhook lane reads on its own: it need not wait for this lane's retry.
        self.behind.wake();
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = self.shutdown.cancelled() => return Ok(Next::Stop(Stopped::Graceful)),
            _ = self.lost.cancelled() => return Err(ServiceError::transient("push lock session lost")),
        }
        Ok(Next::Run(true))
    }

    async fn beat_if_due(&self, pace: &mut Pace) {
        let now = UnixMs::now().0;
        if now - pace.last_beat >= BEAT_EVERY_MS {
            pace.last_beat = now;
            self.beat().await;
        }
    }

    /// Sleep until a NOTIFY, the fallback period or the stall limit; watch the lock session, the
    /// listen session and the webhook dispatcher meanwhile. A lost listen session is dropped
    /// (rounds then run every fallback period) and reconnected between rounds, with backoff.
    async fn wait(
        &mut self,
        fallback_at: Instant,
        stall_at: Instant,
    ) -> Result<Wake, ServiceError> {
        if self.listen.is_none() && crate::baseline::poll_ms().is_none() {
            self.relisten().await;
        }
        let listen_lost = self.listen.as_ref().map(Session::lost);
        let index_due = self.index_due;
        let wake = tokio::select! {
            biased;
            _ = self.shutdown.cancelled() => Wake::Round,
            _ = self.lost.cancelled() => return Err(ServiceError::transient("push lock session lost")),
            r = self.dispatcher.wait() => {
                let why = match r { Ok(()) => "stopped".to_string(), Err(e) => e.to_string() };
                return Err(ServiceError::transient(format!("webhook dispatcher ended while leading: {why}")));
            }
            r = self.behind.wait() => {
                let why = r.err().unwrap_or_else(|| "stopped".to_string());
                return Err(ServiceError::transient(format!("webhook lane ended while leading: {why}")));
            }
            _ = async { match &listen_lost { Some(t) => t.cancelled().await, None => std::future::pending().await } } => {
                tracing::warn!("block listener lost; polling every fallback period until it is back");
                self.listen = None;
                self.relisten_at = Instant::now();
                Wake::Round
            }
            // A block: run a round (it also reloads the index when the version it reads beside
            // the watermark moved). Only subscription changes: refresh the index. Coalesce
            // whatever else is queued.
            n = async { match self.listen.as_mut() { Some(s) => s.notifications.recv().await, None => std::future::pending().await } } => {
                let mut block = n.is_none_or(|n| n.channel() != channels::SUBSCRIPTIONS);
                if let Some(s) = self.listen.as_mut() {
                    while let Ok(n) = s.notifications.try_recv() {
                        block |= n.channel() != channels::SUBSCRIPTIONS;
                    }
                }
                if !block {
                    Wake::Index
                } else {
                    // The webhook lane reads the block now, beside this round, instead of
                    // after its fan-out (its own reads and statements; it never waited for it).
                    self.behind.wake_hooks();
                    Wake::Round
                }
            }
            _ = async { match index_due { Some(t) => tokio::time::sleep_until(t).await, None => std::future::pending().await } } => Wake::Index,
            _ = tokio::time::sleep_until(fallback_at) => Wake::Round,
            // The heartbeat is the standby's lease: beat every second even when idle.
            _ = tokio::time::sleep(Duration::from_secs(1)) => Wake::Beat,
            _ = tokio::time::sleep_until(stall_at) => Wake::Round,
        };
        Ok(wake)
    }

    /// Refresh the subscription index now, or schedule it when the last refresh was less than
    /// INDEX_EVERY ago. A failure is logged; the next round reloads anyway.
    async fn refresh_index(&mut self) {
        let now = Instant::now();
        if let Some(last) = self.index_at.filter(|t| now < *t + INDEX_EVERY) {
            self.index_due = Some(last + INDEX_EVERY);
            return;
        }
        self.index_due = None;
        self.index_at = Some(now);
        match self.ws.refresh_index().await {
            Ok(0) => {}
            Ok(closed) => tracing::info!(closed, "sessions closed by revocation"),
            Err(e) => tracing::warn!(error = %e, "subscription index refresh failed"),
        }
    }

    /// One attempt to reopen the listen session, when its backoff allows.
    async fn relisten(&mut self) {
        if Instant::now() < self.relisten_at {
            return;
        }
        match listen_session(self.cfg).await {
            Ok(s) => {
                tracing::info!("block listener reconnected");
                self.listen = Some(s);
                self.relisten_wait.reset();
            }
            Err(e) => {
                let wait = self.relisten_wait.next_wait();
                tracing::warn!(error = %e, retry_in_ms = wait.as_millis() as u64, "block listener reconnect failed");
                self.relisten_at = Instant::now() + wait;
            }
        }
    }

    async fn beat(&self) {
        let h = &self.health;
        let state = serde_json::json!({
            "role": "leader", "epoch": self.ws.epoch(), "cursor": self.ws.at.cursor().to_string(),
            "last_round_ms": h.last_round_ms.load(Ordering::Relaxed), "rounds": h.rounds.load(Ordering::Relaxed),
            "errors": h.errors.load(Ordering::Relaxed), "sessions": self.hub.sessions(),
            "webhook_block": h.webhook_block.load(Ordering::Relaxed),
            "final_block": h.final_block.load(Ordering::Relaxed),
            "listener": if self.listen.is_some() { "listen" } else { "poll" },
        });
        let hooks = self.dispatcher.snapshot();
        crate::telemetry::leader_state(&crate::telemetry::LeaderCounts {
            epoch: h.epoch.load(Ordering::Relaxed),
            frames_queued: self.hub.stats.frames_queued.load(Ordering::Relaxed),
            slow_closed: self.hub.stats.slow_closed.load(Ordering::Relaxed),
            sessions: self.hub.sessions(),
            webhooks_delivered: hooks.delivered,
            webhooks_failed: hooks.failed_attempts,
            webhooks_gave_up: hooks.failed_final,
            webhook_backlog: hooks.backlog,
            webhooks_due: hooks.due,
        });
        if let Err(e) = self.heartbeat.beat(&state).await {
            tracing::warn!(error = %e, "heartbeat failed");
        }
    }
}

pub(crate) async fn listen_session(cfg: &CoreConfig) -> Result<Session, ServiceError> {
    pg::listening(
        cfg,
        "pmw-push:listen",
        &[channels::BLOCKS, channels::SUBSCRIPTIONS],
    )
    .await
    .map_err(|e| ServiceError::transient(format!("cannot LISTEN on the listen session: {e}")))
}

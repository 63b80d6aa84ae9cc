//! The dispatcher: scans (on [`Dispatcher::wake`], after each busy queue ends, and at least
//! every `poll_interval` or when the next retry falls due), claiming in one statement the due
//! deliveries of every endpoint whose queue is not running, and runs one queue task per endpoint
//! that got some. It stops on shutdown (letting attempts in flight finish),
//! and on a fence: once its epoch is no longer current it aborts every queue and reports
//! [`WebhookError::Fenced`].

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use pmw_core::ch::ChClient;
use pmw_core::pg::PgPool;
use pmw_core::UnixMs;
use tokio::sync::{mpsc, Notify};
use tokio::task::{JoinError, JoinHandle};
use tokio::time::Instant;
use tokio_postgres::GenericClient;
use tokio_util::sync::CancellationToken;

use super::client::GuardedClient;
use super::config::WebhookConfig;
use super::context::Ctx;
use super::error::WebhookError;
use super::handoff::Handoff;
use super::queue::{claim_limit, Ran};
use super::running::{Origin, Running};
use super::stats::{StatsSnapshot, WebhookStats};
use super::store::{self, Claim, Claimed};
use crate::fence::Fence;
use pmw_session::recorder::Recorder;

/// The backlog counts (health, metrics) are taken at most this often: they read every pending
/// row, the scan does not.
const COUNT_EVERY: Duration = Duration::from_secs(1);

/// A queue that worked through deliveries triggers a scan at most this much later.
const RESCAN_AFTER_QUEUE: Duration = Duration::from_millis(20);

/// How long the ClickHouse writer may take to flush when the dispatcher ends.
const FLUSH_WITHIN: Duration = Duration::from_secs(10);

/// A running delivery engine for one epoch.
pub struct Dispatcher {
    wake: Arc<Notify>,
    handoff: Handoff,
    stats: Arc<WebhookStats>,
    stop: CancellationToken,
    task: Option<JoinHandle<Result<(), WebhookError>>>,
    result: Option<Result<(), WebhookError>>,
}

impl Dispatcher {
    /// Start delivering for `epoch`. Stops when `shutdown` (or [`Dispatcher::stop`]) fires, or
    /// when the epoch is fenced; [`Dispatcher::wait`] tells which.
    pub fn spawn(
        pool: PgPool,
        ch: ChClient,
        epoch: i64,
        config: WebhookConfig,
        shutdown: CancellationToken,
    ) -> Dispatcher {
        let recorder = Recorder::spawn(ch, shutdown.clone());
        Dispatcher::start(pool, recorder, true, epoch, config, shutdown)
    }

    /// Like [`Dispatcher::spawn`], writing its facts through the leader's `recorder` (which the
    /// leader closes, not the dispatcher).
    pub fn spawn_shared(
        pool: PgPool,
        recorder: Recorder,
        epoch: i64,
        config: WebhookConfig,
        shutdown: CancellationToken,
    ) -> Dispatcher {
        Dispatcher::start(pool, recorder, false, epoch, config, shutdown)
    }

    /// `owns_recorder`: the dispatcher closes `recorder` when it stops.
    fn start(
        pool: PgPool,
        recorder: Recorder,
        owns_recorder: bool,
        epoch: i64,
        cfg: WebhookConfig,
        shutdown: CancellationToken,
    ) -> Dispatcher {
        let wake = Arc::new(Notify::new());
        let stats = Arc::new(WebhookStats::default());
        let stop = shutdown.child_token();
        let (handoff, handed) = mpsc::unbounded_channel();
        let task = tokio::spawn(run(Launch {
            pool,
            recorder,
            owns_recorder,
            epoch,
            cfg,
            stop: stop.clone(),
            wake: wake.clone(),
            handed,
            stats: stats.clone(),
        }));
        Dispatcher {
            wake,
            handoff: Handoff(handoff),
            stats,
            stop,
            task: Some(task),
            result: None,
        }
    }

    /// New deliveries were committed: look now rather than at the next poll.
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// What [`Dispatcher::wake`] notifies, for a task that queues deliveries.
    pub fn waker(&self) -> Arc<Notify> {
        self.wake.clone()
    }

    /// Where the webhook lane hands its claimed trade deliveries (see [`Handoff`]).
    pub fn handoff(&self) -> Handoff {
        self.handoff.clone()
    }

    /// The live counters (cheap to clone and keep).
    pub fn stats(&self) -> Arc<WebhookStats> {
        self.stats.clone()
    }

    pub fn snapshot(&self) -> StatsSnapshot {
        self.stats.snapshot()
    }

    pub fn is_finished(&self) -> bool {
        self.result.is_some() || self.task.as_ref().is_some_and(JoinHandle::is_finished)
    }

    /// Wait until the dispatcher ends and return why (cancel-safe; may be called again).
    pub async fn wait(&mut self) -> Result<(), WebhookError> {
        if let Some(task) = self.task.as_mut() {
            let r = match task.await {
                Ok(r) => r,
                Err(e) => Err(WebhookError::Task(e.to_string())),
            };
            self.task = None;
            self.result = Some(r);
        }
        self.result.clone().unwrap_or(Ok(()))
    }

    /// Begin stopping without waiting ([`Dispatcher::wait`] says when it ended).
    pub fn begin_stop(&self) {
        self.stop.cancel();
    }

    /// Stop: no new claims, attempts in flight finish (bounded by the timeout), facts flushed.
    pub async fn stop(mut self) -> Result<(), WebhookError> {
        self.stop.cancel();
        self.wait().await
    }
}

impl Drop for Dispatcher {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// What the dispatcher's task starts with.
struct Launch {
    pool: PgPool,
    recorder: Recorder,
    /// The recorder is the dispatcher's own: closed when it stops.
    owns_recorder: bool,
    epoch: i64,
    cfg: WebhookConfig,
    stop: CancellationToken,
    /// Notified when new deliveries were committed.
    wake: Arc<Notify>,
    /// The webhook lane's claimed trade deliveries (the hand-off).
    handed: mpsc::UnboundedReceiver<Vec<Claimed>>,
    stats: Arc<WebhookStats>,
}

async fn run(launch: Launch) -> Result<(), WebhookError> {
    let Launch {
        pool,
        recorder,
        owns_recorder,
        epoch,
        cfg,
        stop,
        wake,
        mut handed,
        stats,
    } = launch;
    // As many idle connections per endpoint as attempts may run at once: with fewer, every burst
    // past the pool closed the surplus and the next one connected again (half the attempts of a
    // busy endpoint paid a TCP connect, on https a TLS handshake; issue 46's profile).
    let client = match GuardedClient::with_pool(
        cfg.timeout,
        cfg.allow_private_destinations,
        cfg.max_in_flight_per_endpoint,
    ) {
        Ok(c) => c,
        Err(e) => {
            stats.set_error(&e);
            stats.stopped.store(true, Relaxed);
            return Err(WebhookError::Client(e.to_string()));
        }
    };
    let ctx = Arc::new(Ctx {
        results: super::results::Results::spawn(
            pool.clone(),
            Fence {
                slot: cfg.slot,
                epoch,
            },
        ),
        pool,
        client,
        facts: recorder.clone(),
        stats: stats.clone(),
        cfg,
        epoch,
        wakes: AtomicU64::new(0),
        held: Default::default(),
    });
    tracing::info!(slot = ctx.cfg.slot, epoch, "webhook dispatcher started");
    let result = coordinate(&ctx, &stop, &wake, &mut handed).await;
    match &result {
        Err(e @ WebhookError::Fenced { .. }) => {
            stats.fenced.store(true, Relaxed);
            stats.set_error(e);
            tracing::warn!(
                slot = ctx.cfg.slot,
                epoch,
                "webhook dispatcher fenced, stopped"
            );
        }
        Err(e) => {
            stats.set_error(e);
            tracing::error!(epoch, error = %e, "webhook dispatcher failed");
        }
        Ok(()) => tracing::info!(epoch, "webhook dispatcher stopped"),
    }
    drop(ctx);
    if owns_recorder {
        recorder.close(FLUSH_WITHIN).await;
    }
    stats.stopped.store(true, Relaxed);
    result
}

/// Scan, hand what was claimed or handed over to the queues, and react to their ends, until
/// stopped or fenced.
async fn coordinate(
    ctx: &Arc<Ctx>,
    stop: &CancellationToken,
    wake: &Notify,
    handoff: &mut mpsc::UnboundedReceiver<Vec<Claimed>>,
) -> Result<(), WebhookError> {
    let mut s = Scans::new(ctx.clone());
    let fenced = loop {
        tokio::select! {
            biased;
            _ = stop.cancelled() => break None,
            Some(done) = s.running.tasks.join_next() => {
                match s.queue_ended(done) {
                    Ok(()) => continue,
                    Err(e) => break Some(e),
                }
            }
            Some(rows) = handoff.recv() => {
                s.handed(rows);
                continue;
            }
            _ = wake.notified() => {
                ctx.wakes.fetch_add(1, Relaxed);
            }
            _ = tokio::time::sleep_until(s.next_scan) => {}
        }
        if let Err(e) = s.scan().await {
            break Some(e);
        }
    };
    s.end(fenced).await
}

/// The dispatcher's queues and when it scans and counts next.
struct Scans {
    ctx: Arc<Ctx>,
    running: Running,
    next_scan: Instant,
    next_count: Instant,
}

impl Scans {
    fn new(ctx: Arc<Ctx>) -> Scans {
        Scans {
            ctx,
            running: Running::new(),
            next_scan: Instant::now(),
            next_count: Instant::now(),
        }
    }

    fn publish_active(&self) {
        let n = self.running.len() as u64;
        self.ctx.stats.active_endpoints.store(n, Relaxed);
    }

    /// The webhook lane's hand-off, to the running queues or new ones.
    fn handed(&mut self, rows: Vec<Claimed>) {
        let seen = self.ctx.wakes.load(Relaxed);
        self.running.hand(&self.ctx, rows, seen, Origin::Handoff);
        self.publish_active();
    }

    /// A queue ended: a fence stops the dispatcher; a queue that left work (or saw work queued
    /// since its last claim) brings the next scan forward; what was handed over for its
    /// endpoint meanwhile starts its successor.
    fn queue_ended(
        &mut self,
        done: Result<(i64, Result<Ran, WebhookError>), JoinError>,
    ) -> Result<(), WebhookError> {
        let (endpoint, r) = match done {
            Ok(v) => v,
            Err(e) => {
                // Queues catch their own panics; only an abort lands here.
                tracing::error!(error = %e, "webhook queue task lost");
                return Ok(());
            }
        };
        match r {
            Err(e @ WebhookError::Fenced { .. }) => return Err(e),
            Err(e) => {
                self.ctx.stats.set_error(&e);
                tracing::warn!(endpoint, error = %e, "webhook queue ended with error");
            }
            // Scans coalesced: many queues ending together cost one scan.
            Ok(ran) if ran.rescan => {
                self.next_scan = self.next_scan.min(Instant::now() + RESCAN_AFTER_QUEUE)
            }
            Ok(_) => {}
        }
        self.running.ended(&self.ctx, endpoint);
        self.publish_active();
        Ok(())
    }

    /// One scan: the backlog counts when due, then one claim for every endpoint without a
    /// running queue, each of which gets one. Only a fence is an error; a failed scan is
    /// retried at the next poll.
    async fn scan(&mut self) -> Result<(), WebhookError> {
        let ctx = self.ctx.clone();
        let now = UnixMs::now().as_i64();
        // Read before the claim: a wake after it makes the new queues claim again.
        let seen = ctx.wakes.load(Relaxed);
        let mut wait = ctx.cfg.poll_interval;
        match self.claim(now).await {
            Err(e @ WebhookError::Fenced { .. }) => return Err(e),
            Ok(c) => {
                ctx.stats.last_scan_ms.store(now, Relaxed);
                self.running.hand(&ctx, c.rows, seen, Origin::Scan);
                self.publish_active();
                wait = next_wait(wait, c.next_due_ms, now);
            }
            Err(e) => {
                ctx.stats.set_error(&e);
                tracing::warn!(error = %e, "webhook scan failed");
            }
        }
        self.next_scan = Instant::now() + wait;
        Ok(())
    }

    /// The claim statement of a scan (after the backlog counts, when due).
    async fn claim(&mut self, now: i64) -> Result<store::Claims, WebhookError> {
        let ctx = &self.ctx;
        let c = ctx.pool.get().await?;
        if Instant::now() >= self.next_count {
            self.next_count = Instant::now() + COUNT_EVERY;
            count_backlog(ctx, &**c, now).await;
        }
        let busy = self.running.endpoints();
        store::claim(
            &**c,
            ctx.fence(),
            Claim::AllBut(&busy),
            now,
            ctx.stale_before(now),
            claim_limit(&ctx.cfg) as i64,
        )
        .await
    }

    /// Stop the queues: on a fence at once (attempts in flight could not record their results
    /// anyway), otherwise letting attempts in flight finish.
    async fn end(mut self, fenced: Option<WebhookError>) -> Result<(), WebhookError> {
        let (ctx, running) = (&self.ctx, &mut self.running);
        running.clear();
        if let Some(e) = fenced {
            running.tasks.abort_all();
            while running.tasks.join_next().await.is_some() {}
            ctx.stats.active_endpoints.store(0, Relaxed);
            return Err(e);
        }
        running.stop();
        while let Some(done) = running.tasks.join_next().await {
            if let Ok((endpoint, Err(e))) = done {
                if matches!(e, WebhookError::Fenced { .. }) {
                    return Err(e);
                }
                tracing::warn!(endpoint, error = %e, "webhook queue ended with error");
            }
        }
        ctx.stats.active_endpoints.store(0, Relaxed);
        Ok(())
    }
}

/// The backlog counts for health and metrics (best effort).
async fn count_backlog(ctx: &Ctx, c: &impl GenericClient, now: i64) {
    match store::backlog(c, now).await {
        Ok((backlog, due)) => {
            ctx.stats.backlog.store(backlog.max(0) as u64, Relaxed);
            ctx.stats.due.store(due.max(0) as u64, Relaxed);
        }
        Err(e) => tracing::warn!(error = %e, "webhook backlog count failed"),
    }
}

/// How long until the next scan: the poll interval, or less when the next delivery not due
/// yet falls due sooner (at least 1 ms).
fn next_wait(poll: Duration, next_due_ms: Option<i64>, now: i64) -> Duration {
    match next_due_ms {
        Some(due) => poll.min(Duration::from_millis((due - now).max(1) as u64)),
        None => poll,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn webhook_dispatch_scans_at_the_poll_or_when_the_next_retry_falls_due() {
        let poll = Duration::from_secs(1);
        assert_eq!(next_wait(poll, None, 5_000), poll);
        assert_eq!(
            next_wait(poll, Some(5_250), 5_000),
            Duration::from_millis(250)
        );
        assert_eq!(next_wait(poll, Some(9_000), 5_000), poll);
        // Already due (or overdue): the next millisecond, never zero or negative.
        assert_eq!(
            next_wait(poll, Some(5_000), 5_000),
            Duration::from_millis(1)
        );
        assert_eq!(
            next_wait(poll, Some(4_000), 5_000),
            Duration::from_millis(1)
        );
    }
}

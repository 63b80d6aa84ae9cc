//! One endpoint's queue: attempt the deliveries the dispatcher claimed or was handed for it,
//! claim more in cursor order while more may be due (a few ahead of the free slots), keep at
//! most `max_in_flight_per_endpoint` attempts in flight, write each result back (successes in
//! shared batches, see [`super::results`]). Endpoints run in separate tasks, so a slow or
//! failing endpoint never delays another.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

use pmw_core::UnixMs;
use tokio::sync::mpsc;
use tokio::task::{JoinError, JoinSet};
use tokio_util::sync::CancellationToken;

use super::attempt::{attempt, Attempted};
use super::chat;
use super::config::WebhookConfig;
use super::context::Ctx;
use super::error::WebhookError;
use super::store::{self, Claim, Claimed};

/// What a queue starts with: the deliveries claimed for it, the wake count read before they
/// were claimed, and whether more may be due (its scan's claim was full).
pub(crate) struct First {
    pub rows: Vec<Claimed>,
    pub seen: u64,
    pub more: bool,
}

/// Run one endpoint's queue, starting from [`First`], taking what the dispatcher hands over while it runs, until
/// nothing of it is left to attempt (or `stop`). It claims more itself only when its last
/// claim was full (more may be due) or new deliveries were queued since (the dispatcher's wake
/// count moved); otherwise the dispatcher's next scan takes what becomes due. Returns whether
/// the dispatcher should scan after it ([`Ran`]). A fenced claim or update aborts the attempts
/// in flight.
pub(crate) async fn run_endpoint(
    ctx: Arc<Ctx>,
    endpoint_id: i64,
    first: First,
    feed: Feed,
    stop: CancellationToken,
) -> Result<Ran, WebhookError> {
    let mut q = Queue::new(ctx, endpoint_id, first, feed);
    loop {
        q.take_handed();
        q.claim_if_due().await?;
        q.start_attempts();
        if q.inflight.is_empty() {
            if q.last_arrivals() {
                continue;
            }
            return q.end().await;
        }
        q.feed.held.store(q.ahead.len() + q.inflight.len(), Relaxed);
        tokio::select! {
            Some(rows) = q.feed.rx.recv(), if !q.stopping => q.ahead.extend(rows),
            Some(done) = q.inflight.join_next() => q.attempted(done)?,
            _ = stop.cancelled(), if !q.stopping => q.stopping = true,
        }
    }
}

/// A running queue's state.
struct Queue {
    ctx: Arc<Ctx>,
    endpoint_id: i64,
    /// Attempts in flight at most.
    max: usize,
    /// Each attempt says whether it disabled the endpoint and whether it settled its delivery.
    inflight: JoinSet<Result<Attempted, WebhookError>>,
    /// Claimed (or handed) in cursor order ahead of the free slots.
    ahead: VecDeque<Claimed>,
    feed: Feed,
    /// The wake count at this queue's last claim.
    seen: u64,
    /// The wake count it started with: anything queued during its life may wait behind a
    /// delivery it made (a retract or a final waits for its trade).
    started: u64,
    /// Its last claim was full: more may be due.
    more: bool,
    /// It left work in Postgres whose due time the dispatcher has not seen.
    left: bool,
    /// No more claims or attempts: stopping, disabled, or a claim failed.
    stopping: bool,
    /// What it ends with (an error that stopped it, other than a fence).
    result: Result<(), WebhookError>,
}

impl Queue {
    fn new(ctx: Arc<Ctx>, endpoint_id: i64, first: First, feed: Feed) -> Queue {
        Queue {
            max: ctx.cfg.max_in_flight_per_endpoint.max(1),
            more: first.more,
            ctx,
            endpoint_id,
            inflight: JoinSet::new(),
            ahead: first.rows.into(),
            feed,
            seen: first.seen,
            started: first.seen,
            left: false,
            stopping: false,
            result: Ok(()),
        }
    }

    /// Take what the dispatcher handed over meanwhile.
    fn take_handed(&mut self) {
        while let Ok(rows) = self.feed.rx.try_recv() {
            self.ahead.extend(rows);
        }
    }

    /// With a free slot and nothing ahead, claim more when more may be due (the last claim was
    /// full, or deliveries were queued since). A fence ends the queue; another error stops it.
    async fn claim_if_due(&mut self) -> Result<(), WebhookError> {
        if self.stopping || self.inflight.len() >= self.max || !self.ahead.is_empty() {
            return Ok(());
        }
        let wakes = self.ctx.wakes.load(Relaxed);
        if !self.more && wakes == self.seen {
            return Ok(());
        }
        self.seen = wakes;
        let limit = (self.max * CLAIM_AHEAD - self.inflight.len()) as i64;
        match self.claim(limit).await {
            Ok(rows) => {
                self.more = rows.len() as i64 >= limit;
                self.ahead.extend(rows);
            }
            Err(e @ WebhookError::Fenced { .. }) => return Err(e),
            Err(e) => {
                self.stopping = true;
                self.result = Err(e);
            }
        }
        Ok(())
    }

    /// Claim up to `limit` due deliveries of this endpoint.
    async fn claim(&self, limit: i64) -> Result<Vec<Claimed>, WebhookError> {
        let now = UnixMs::now().as_i64();
        let c = self.ctx.pool.get().await?;
        let claims = store::claim(
            &**c,
            self.ctx.fence(),
            Claim::One(self.endpoint_id),
            now,
            self.ctx.stale_before(now),
            limit,
        )
        .await?;
        Ok(claims.rows)
    }

    /// Fill the free slots from what is ahead. A chat endpoint sends one message at a time,
    /// carrying everything ahead (up to a digest's size): see [`chat`].
    fn start_attempts(&mut self) {
        while !self.stopping && self.inflight.len() < self.max {
            let Some(row) = self.ahead.pop_front() else {
                break;
            };
            if row.endpoint.chat.is_some() {
                if self.inflight.is_empty() {
                    let rows = chat::batch(row, &mut self.ahead);
                    self.inflight.spawn(chat::attempt(self.ctx.clone(), rows));
                } else {
                    self.ahead.push_front(row);
                }
                break;
            }
            self.inflight.spawn(attempt(self.ctx.clone(), row));
        }
    }

    /// Nothing in flight: take nothing more by hand-off (the dispatcher keeps what it could
    /// not send for this endpoint's next queue), but attempt what already arrived. Whether
    /// something did.
    fn last_arrivals(&mut self) -> bool {
        if self.stopping {
            return false;
        }
        self.feed.rx.close();
        self.take_handed();
        !self.ahead.is_empty()
    }

    /// Release what was not attempted and say whether the dispatcher should scan.
    async fn end(self) -> Result<Ran, WebhookError> {
        let left = self.left || !self.ahead.is_empty();
        release(&self.ctx, self.ahead).await;
        let rescan = left || self.ctx.wakes.load(Relaxed) != self.started;
        self.result.map(|()| Ran { rescan })
    }

    /// An attempt ended. A fence ends the queue; a result not recorded leaves work for a scan.
    fn attempted(
        &mut self,
        done: Result<Result<Attempted, WebhookError>, JoinError>,
    ) -> Result<(), WebhookError> {
        match done {
            Ok(Ok(a)) => {
                self.left |= !a.settled;
                // Its pending deliveries expired with it: nothing claimed ahead goes out.
                self.stopping |= a.disabled;
            }
            Ok(Err(e @ WebhookError::Fenced { .. })) => return Err(e),
            Ok(Err(e)) => {
                self.left = true;
                tracing::warn!(endpoint = self.endpoint_id, error = %e, "webhook result not recorded");
                self.ctx.stats.set_error(&e);
            }
            Err(e) => {
                self.ctx
                    .stats
                    .set_error(format!("webhook attempt task: {e}"));
                self.result = Err(WebhookError::Task(e.to_string()));
                self.stopping = true;
            }
        }
        Ok(())
    }
}

/// What a queue did, for the dispatcher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ran {
    /// Whether it may have left due work the dispatcher has not seen: a retry scheduled, a
    /// result not recorded, claims released, or anything queued while it ran (a retract or a
    /// final becomes claimable once its trade is delivered). A queue that delivered everything
    /// it took, with nothing queued meanwhile, costs no scan after it.
    pub rescan: bool,
}

/// Deliveries one claim takes per endpoint at most: a few per attempt slot.
pub(crate) fn claim_limit(cfg: &WebhookConfig) -> usize {
    cfg.max_in_flight_per_endpoint.max(1) * CLAIM_AHEAD
}

/// Claims taken per attempt slot at most (see `run_endpoint`): a busy endpoint (hundreds of
/// deliveries a second) costs one claim statement per few dozen deliveries. What a stopping
/// queue did not attempt is released at once.
const CLAIM_AHEAD: usize = 16;

/// What the dispatcher hands a running queue: the webhook lane's claimed trade deliveries for
/// its endpoint, and how many deliveries the queue holds (ahead plus in flight), which the
/// dispatcher reads to stop handing over past [`super::handoff::MAX_AHEAD`].
pub(crate) struct Feed {
    pub rx: mpsc::UnboundedReceiver<Vec<Claimed>>,
    pub held: Arc<AtomicUsize>,
}

/// Give back claims not attempted (the queue is stopping): due again at once for any dispatcher
/// of this epoch, instead of after the claim TTL. Best effort: a claim left is taken again after
/// the TTL, or at once by a successor's epoch.
pub(crate) async fn release(ctx: &Ctx, ahead: VecDeque<Claimed>) {
    if ahead.is_empty() {
        return;
    }
    let ids: Vec<String> = ahead.into_iter().map(|c| c.delivery.id).collect();
    let released = match ctx.pool.get().await {
        Ok(c) => c
            .execute(include_str!("sql/release_claims.sql"), &[&ids, &ctx.epoch])
            .await
            .map_err(|e| pmw_core::pg::describe(&e)),
        Err(e) => Err(e.to_string()),
    };
    if let Err(e) = released {
        tracing::warn!(claims = ids.len(), error = %e, "claims not released; taken again after the claim ttl");
    }
}

//! The pending lane (issue 43, docs/SETTLEMENT.md): the pending tier's `pending`s and `void`s to
//! the hub's sessions that opted in (`events=trade,pending`), apart from the trade rounds. It
//! LISTENs on `pmw_pending` (a trigger of migration 0023 NOTIFYs when pmw-live's recorder appends
//! events) on a session of its own, with a fallback poll, and reads `pending_events` after an
//! in-memory id (the newest appended 30 s before the leader started: what a predecessor may
//! not have sent goes out again, and a session is sent the fills still open when it connects).
//! It takes no ledger position, claims nothing and never waits for a round, and rounds never
//! wait for it. A `pending` whose fill
//! already ended is passed over here, and a session's writer drops one whose `trade` or `void`
//! it already sent (`pmw_session::ws`), so a `pending` never follows its end. In edge mode each
//! batch is also stored on the bus as `pending` parts (signed like rounds, through the
//! leadership's one publisher) for the edges to dispatch; a part the broker did not store is
//! logged and not retried (a session resuming is sent the fills still open).

use std::time::Duration;

use pmw_core::backoff::{Backoff, Policy};
use pmw_core::channels;
use pmw_core::message::Kind;
use pmw_core::pg::{self, PgPool};
use pmw_core::CoreConfig;
use pmw_session::bus::round::{PendingEntry, Round, ROWS_PER_PART};
use pmw_session::hub::Hub;
use pmw_session::pending::{events_after, newest_event, PendingRow};
use tokio_util::sync::CancellationToken;

use crate::names::Names;
use crate::pending_hooks::PendingHooks;
use crate::publish::SharedPublisher;
use crate::telemetry;

/// Events read per statement.
const BATCH: i64 = 500;
/// Read even without a notification this often (a lost NOTIFY only delays).
const FALLBACK: Duration = Duration::from_secs(1);
/// A new leader starts this far back: what its predecessor may not have sent (a failover) goes
/// out again; sessions, the broker and webhook ids drop what they already had.
const STARTS_BACK_MS: i64 = 30_000;

/// What a leader's pending lane runs with.
pub(crate) struct Setup {
    pub cfg: CoreConfig,
    pub pool: PgPool,
    pub hub: Hub,
    /// Edge mode: the leadership's publisher.
    pub publisher: Option<SharedPublisher>,
    /// Webhook deliveries to the endpoints opted in.
    pub hooks: PendingHooks,
}

/// The lane of a leader: runs until `stop`.
pub(crate) fn spawn(setup: Setup, stop: CancellationToken) -> tokio::task::JoinHandle<()> {
    let lane = PendingLane {
        setup,
        names: Names::default(),
        after: None,
    };
    tokio::spawn(lane.run(stop))
}

struct PendingLane {
    setup: Setup,
    names: Names,
    /// The last event id read (`None` until the first read sets it to the newest).
    after: Option<i64>,
}

impl PendingLane {
    /// LISTEN, then follow; a lost session or a failed read starts again after a backoff.
    async fn run(mut self, stop: CancellationToken) {
        let mut wait = Backoff::new(Policy::STORE);
        while !stop.is_cancelled() {
            let listening =
                pg::listening(&self.setup.cfg, "pmw-push:pending", &[channels::PENDING]);
            let failed = match listening.await {
                Ok(listen) => match self.follow(listen, &stop, &mut wait).await {
                    Ok(()) => return,
                    Err(e) => e,
                },
                Err(e) => e.to_string(),
            };
            let pause = wait.next_wait();
            metrics::counter!(telemetry::PENDING_LANE_FAILURES).increment(1);
            tracing::warn!(error = %failed, retry_in_ms = pause.as_millis() as u64, "pending lane failed");
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(pause) => {}
            }
        }
    }

    /// Deliver what is new, then wait for a notification (or the fallback period), until `stop`
    /// (`Ok`) or a failure (`Err`).
    async fn follow(
        &mut self,
        mut listen: pg::Session,
        stop: &CancellationToken,
        wait: &mut Backoff,
    ) -> Result<(), String> {
        let lost = listen.lost();
        loop {
            self.deliver().await?;
            wait.reset();
            tokio::select! {
                _ = stop.cancelled() => return Ok(()),
                _ = lost.cancelled() => return Err("pending listen session lost".into()),
                _ = listen.notifications.recv() => {
                    while listen.notifications.try_recv().is_ok() {}
                }
                _ = tokio::time::sleep(FALLBACK) => {}
            }
        }
    }

    /// Read the events after the lane's id and queue them to the sessions, batch by batch.
    async fn deliver(&mut self) -> Result<(), String> {
        let c = self.setup.pool.get().await.map_err(|e| e.to_string())?;
        let describe = |e: tokio_postgres::Error| pg::describe(&e);
        let mut after = match self.after {
            Some(after) => after,
            None => {
                let back = pmw_core::UnixMs::now().0 - STARTS_BACK_MS;
                let start = newest_event(&**c, back).await.map_err(describe)?;
                *self.after.insert(start)
            }
        };
        loop {
            let rows = events_after(&**c, after, BATCH).await.map_err(describe)?;
            let Some(last) = rows.last() else {
                return Ok(());
            };
            after = last.event_id;
            let read = rows.len() as i64;
            let rows: Vec<_> = rows.into_iter().filter(|r| r.deliverable()).collect();
            let tokens = rows.iter().map(|r| r.token_id.as_str());
            self.names.refresh(&c, tokens).await.map_err(describe)?;
            let items: Vec<_> = rows
                .iter()
                .map(|r| r.item(self.names.get(&r.token_id)))
                .collect();
            self.publish(&rows).await;
            let frames = self.setup.hub.dispatch_pending(&items);
            record(&rows);
            // A failure here reads the batch again: sessions and the broker drop what they had.
            self.setup.hooks.deliver(&c, &rows, &items).await?;
            self.after = Some(after);
            tracing::debug!(
                events = items.len(),
                frames,
                after,
                "pending lane delivered"
            );
            if read < BATCH {
                return Ok(()); // a short batch: nothing more is waiting
            }
        }
    }

    /// Edge mode: store `rows` on the bus in `pending` parts (a failure is logged, not retried).
    async fn publish(&self, rows: &[PendingRow]) {
        let Some(p) = &self.setup.publisher else {
            return;
        };
        for chunk in rows.chunks(ROWS_PER_PART) {
            let entries = chunk
                .iter()
                .map(|r| PendingEntry {
                    row: r.clone(),
                    market: self.names.get(&r.token_id).cloned(),
                })
                .collect();
            if let Err(e) = p
                .lock()
                .await
                .publish(Round::of_pending(entries, None))
                .await
            {
                metrics::counter!(telemetry::PENDING_BUS_FAILURES).increment(1);
                tracing::warn!(error = %e, "pending part not stored on the bus");
            }
        }
    }
}

/// Count the events queued, and each `pending`'s wait from its first sighting in a pool.
fn record(rows: &[PendingRow]) {
    let now = pmw_core::UnixMs::now().0;
    for r in rows {
        metrics::counter!(telemetry::PENDING_EVENTS, "kind" => r.kind.as_str()).increment(1);
        // A fill re-sent after a failover (the lane starts back) is not a first push.
        if r.kind == Kind::Pending && r.event_id > 0 {
            let secs = (now - r.first_seen_ms).max(0) as f64 / 1000.0;
            metrics::histogram!(telemetry::PENDING_SEEN_TO_QUEUED).record(secs);
        }
    }
}

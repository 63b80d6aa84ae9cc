//! The finality lane: `final` events for trades at or below the finalized watermark, never ahead
//! of the WebSocket lane's dispatched position nor of the webhook lane's cursor (the bound its
//! round is given), so a trade's `final` never precedes its `trade`. Queues the `final` webhook
//! deliveries in the transaction that moves `final_cursor` (fenced by the epoch), then feeds the
//! hub's `final` stream (in edge mode, stores the round on the bus first, after the WebSocket
//! rounds its bound covers). Sessions and endpoints that also get trades receive a small
//! [`FinalNotice`]; `final`-only ones the full body with `finalized: true`.

use std::sync::Arc;

use pmw_core::Cursor;
use pmw_session::bus::round::{Round, Stream as BusStream};
use pmw_session::items::final_items;

use super::queue::{log_cancelled, move_and_queue};
use super::{now_ms, Fence, Lane, LaneSetup, LaneStart};
use crate::ledger::{Batch, LaneCursor, Ledger, Source};
use crate::matcher::Matcher;
use crate::publish::SharedPublisher;
use crate::round::{RoundError, RoundOutcome};
use crate::webhook;
use pmw_session::hub::{Hub, Item, Stream};
use pmw_session::recorder::Recorder;
use pmw_session::subs::{Index, Subscriptions};

pub struct FinalLane {
    ledger: Ledger,
    pub at: LaneCursor,
    fence: Fence,
    matcher: Matcher,
    hub: Hub,
    facts: Recorder,
    /// Edge mode: where each round is stored before the cursor moves.
    publisher: Option<SharedPublisher>,
}

impl FinalLane {
    /// Catch-up spans are not bounded here: the lane trails the finalized watermark closely.
    pub fn new(
        setup: &LaneSetup,
        from: LaneStart,
        hub: Hub,
        publisher: Option<SharedPublisher>,
    ) -> FinalLane {
        let unbounded = LaneSetup {
            span: u64::MAX / 2,
            ..setup.clone()
        };
        let (ledger, at) = unbounded.start(Source::Finals, from);
        FinalLane {
            ledger,
            at,
            fence: setup.fence,
            matcher: Matcher::new(Subscriptions::default(), false),
            hub,
            facts: setup.facts.clone(),
            publisher,
        }
    }

    pub fn epoch(&self) -> i64 {
        self.fence.epoch
    }

    /// Where the lane may read up to: what every session was dispatched and what the webhook
    /// lane (at `hooks`) has queued.
    pub fn bound(&self, hooks: Cursor) -> Cursor {
        self.hub.dispatched().cursor.min(hooks)
    }

    /// One round up to `bound` (see [`super::round`]).
    pub async fn round(&mut self, bound: Cursor) -> Result<RoundOutcome, RoundError> {
        super::round(self, Some(bound)).await
    }

    /// The batch as the hub's `final` stream items and as `final` webhook deliveries.
    fn items(&self, idx: &Index, batch: &Batch) -> (Vec<Arc<Item>>, Vec<webhook::NewDelivery>) {
        let now = now_ms();
        let ledger = &self.ledger;
        let items = final_items(
            batch
                .retracts
                .iter()
                .map(|r| (r, ledger.market(&r.token_id))),
            batch.rows.iter().map(|r| (r, ledger.market(&r.token_id))),
        );
        let rows = batch.retracts.iter().chain(&batch.rows);
        let mut deliveries = Vec::new();
        for (item, row) in items.iter().zip(rows) {
            // The same filters decide as for its trade (same row, same market).
            if idx.follows(&row.maker, &row.token_id) {
                deliveries.extend(webhook::finals_of(idx, row, item, now));
            }
        }
        (items, deliveries)
    }

    /// The batch as the bus carries it (edge mode).
    fn bus_round(&self, batch: &Batch) -> Round {
        Round::of_rows(
            BusStream::Final,
            super::span(batch),
            None,
            &batch.retracts,
            &batch.rows,
            |token| self.ledger.market(token).cloned(),
        )
        .confirming(|r| batch.pending_of(r))
    }
}

impl Lane for FinalLane {
    fn reader(&mut self) -> (&mut Ledger, &LaneCursor, &mut Matcher) {
        (&mut self.ledger, &self.at, &mut self.matcher)
    }

    async fn deliver(
        &mut self,
        mut client: deadpool_postgres::Object,
        idx: &Index,
        batch: Batch,
    ) -> Result<RoundOutcome, RoundError> {
        let (items, deliveries) = self.items(idx, &batch);
        if let Some(p) = &self.publisher {
            p.lock().await.publish(self.bus_round(&batch)).await?;
        }
        let enqueued = move_and_queue(
            &mut client,
            self.fence,
            include_str!("sql/finals_cursor.sql"),
            &batch,
            &deliveries,
            false,
        )
        .await?;
        log_cancelled(&self.facts, idx, &enqueued.cancelled);
        if batch.rewound {
            self.hub.rewind(batch.from, Stream::Final);
        }
        let frames = self
            .hub
            .dispatch_stream(&items, batch.through, Stream::Final);
        self.at.moved(&batch);
        Ok(RoundOutcome {
            trades: batch.rows.len(),
            retracted: batch.retracts.len(),
            frames,
            webhooks: enqueued.inserted,
            webhooks_skipped: enqueued.skipped,
            more: batch.more,
            ..RoundOutcome::default()
        })
    }
}

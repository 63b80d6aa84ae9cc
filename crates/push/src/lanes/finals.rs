//! The finality lane: `final` events for trades at or below the finalized watermark, never ahead
//! of the WebSocket lane's dispatched position nor of the webhook lane's cursor (the bound its
//! round is given), so a trade's `final` never precedes its `trade`. Queues the `final` webhook
//! deliveries in the transaction that moves `final_cursor` (fenced by the epoch), then feeds the
//! hub's `final` stream. Sessions and endpoints that also get trades receive a small
//! [`FinalNotice`]; `final`-only ones the full body with `finalized: true`.

use std::sync::Arc;

use pmw_core::message::{FinalNotice, Kind, TradeMessage};
use pmw_core::Cursor;

use super::queue::{log_cancelled, move_and_queue};
use super::{now_ms, Fence, Lane, LaneSetup};
use crate::hub::{Hub, Item, Stream};
use crate::ledger::{Batch, LaneCursor, Ledger, Matcher, Source};
use crate::recorder::Recorder;
use crate::round::{RoundError, RoundOutcome};
use crate::subs::{Index, Subscriptions};
use crate::webhook;

pub struct FinalLane {
    ledger: Ledger,
    pub at: LaneCursor,
    fence: Fence,
    matcher: Matcher,
    hub: Hub,
    facts: Recorder,
}

impl FinalLane {
    /// Catch-up spans are not bounded here: the lane trails the finalized watermark closely.
    pub fn new(setup: &LaneSetup, from: (pmw_core::Position, i64), hub: Hub) -> FinalLane {
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
        let retracts = batch.retracts.iter().map(|r| (Kind::Retract, r));
        let finals = batch.rows.iter().map(|r| (Kind::Final, r));
        let mut items = Vec::with_capacity(batch.rows.len() + batch.retracts.len());
        let mut deliveries = Vec::new();
        for (kind, row) in retracts.chain(finals) {
            let market = self.ledger.market(&row.token_id);
            let full = TradeMessage::from_row(row, market)
                .finalized(kind == Kind::Final)
                .to_json();
            let brief = (kind == Kind::Final).then(|| FinalNotice::from_row(row).to_json());
            // The same filters decide as for its trade (same row, same market).
            let item = Item::of_row(kind, row, market, full, brief);
            if let Some(accounts) = idx.accounts_by_wallet.get(&row.maker) {
                deliveries.extend(webhook::finals_of(
                    idx,
                    Some(accounts),
                    kind,
                    row,
                    &item.facts,
                    (&item.body, item.brief.as_deref().unwrap_or(&item.body)),
                    now,
                ));
            }
            items.push(Arc::new(item));
        }
        (items, deliveries)
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
        let enqueued = move_and_queue(
            &mut client,
            (self.fence, include_str!("sql/finals_cursor.sql")),
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

//! The webhook lane: one delivery per enabled endpoint of every account following the maker
//! whose filters let the message through ([`pmw_session::subs::Index::endpoints_for`]), queued in the
//! transaction that moves `webhook_cursor` (fenced by the epoch). Trade deliveries go in claimed
//! by the epoch and are handed to the dispatcher in memory after the commit.

use std::time::Instant;

use pmw_core::filter::Facts;
use pmw_core::message::{Kind, TradeMessage};

use super::queue::{log_cancelled, move_and_queue};
use super::{now_ms, Fence, Lane, LaneSetup, LaneStart};
use crate::ledger::{Batch, LaneCursor, Ledger, Source};
use crate::matcher::Matcher;
use crate::round::{RoundError, RoundOutcome};
use crate::webhook;
use pmw_session::recorder::Recorder;
use pmw_session::subs::{Index, Subscriptions};

pub struct HookLane {
    ledger: Ledger,
    pub at: LaneCursor,
    fence: Fence,
    matcher: Matcher,
    facts: Recorder,
    /// Where claimed trade deliveries go after the commit (`None`: queued unclaimed, found by
    /// the dispatcher's scans).
    handoff: Option<webhook::Handoff>,
}

impl HookLane {
    pub fn new(setup: &LaneSetup, from: LaneStart, handoff: Option<webhook::Handoff>) -> HookLane {
        let (ledger, at) = setup.start(Source::Webhooks, from);
        HookLane {
            ledger,
            at,
            fence: setup.fence,
            // Its index starts empty: loaded on the first round whatever the version.
            matcher: Matcher::new(Subscriptions::default(), false),
            facts: setup.facts.clone(),
            handoff,
        }
    }

    pub fn epoch(&self) -> i64 {
        self.fence.epoch
    }

    /// One round (see [`super::round`]).
    pub async fn round(&mut self) -> Result<RoundOutcome, RoundError> {
        super::round(self, None).await
    }

    /// The batch's deliveries: its retractions, then its trades, for every matching endpoint.
    fn deliveries(&self, idx: &Index, batch: &Batch) -> Vec<webhook::NewDelivery> {
        let now = now_ms();
        let retracts = batch.retracts.iter().map(|r| (Kind::Retract, r));
        let trades = batch.rows.iter().map(|r| (Kind::Trade, r));
        let mut out = Vec::new();
        for (kind, row) in retracts.chain(trades) {
            // A retract is owed to whoever got its trade, followers now or not.
            if !idx.follows(&row.maker, &row.token_id) && kind != Kind::Retract {
                continue;
            }
            let market = self.ledger.market(&row.token_id);
            let body = TradeMessage::from_row(row, market)
                .confirming(batch.pending_of(row))
                .to_json();
            let facts = Facts::of_row(row, market);
            out.extend(webhook::deliveries_of(idx, kind, row, &facts, &body, now));
        }
        out
    }
}

impl Lane for HookLane {
    fn reader(&mut self) -> (&mut Ledger, &LaneCursor, &mut Matcher) {
        (&mut self.ledger, &self.at, &mut self.matcher)
    }

    async fn deliver(
        &mut self,
        mut client: deadpool_postgres::Object,
        idx: &Index,
        batch: Batch,
    ) -> Result<RoundOutcome, RoundError> {
        let deliveries = self.deliveries(idx, &batch);
        let enqueued = move_and_queue(
            &mut client,
            self.fence,
            include_str!("sql/hooks_cursor.sql"),
            &batch,
            &deliveries,
            self.handoff.is_some(),
        )
        .await?;
        let queued_at = Instant::now();
        log_cancelled(&self.facts, idx, &enqueued.cancelled);
        let handed = enqueued.handed.len() as u64;
        if let Some(h) = &self.handoff {
            h.send(&deliveries, enqueued.handed);
        }
        let newest = batch.newest_live_detect_ms();
        crate::telemetry::hook_round_stages(&batch.stages, queued_at, Instant::now(), newest);
        self.at.moved(&batch);
        Ok(RoundOutcome {
            trades: batch.rows.len(),
            retracted: batch.retracts.len(),
            webhooks: enqueued.inserted,
            handed,
            webhooks_skipped: enqueued.skipped,
            more: batch.more,
            ..RoundOutcome::default()
        })
    }
}

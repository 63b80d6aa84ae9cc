//! The WebSocket lane: a trade belongs to every session whose own wallet set has its maker (the
//! owner of the fill). Claim the range and move `push_cursor` (one fenced statement), then fan
//! out. Every trade becomes an item, followed or not: which sessions follow a wallet is decided
//! only under the hub's shard locks, as each shard's dispatched position moves (a session that
//! registers meanwhile must get either the frame or the replay). In edge mode the round is
//! stored on the bus first ([`crate::publish`]): the cursor never passes what edges may lack.

use std::sync::Arc;
use std::time::Instant;

use pmw_session::bus::round::{Round, Stream as BusStream};
use pmw_session::items::round_items;

use super::{now_ms, Fence, Lane, LaneSetup, LaneStart};
use crate::ledger::{Batch, LaneCursor, Ledger, Reading, Source, Stages};
use crate::matcher::Matcher;
use crate::publish::SharedPublisher;
use crate::round::{RoundError, RoundOutcome};
use pmw_session::hub::{Hub, Item, Stream};
use pmw_session::subs::{Index, Subscriptions};

pub struct WsLane {
    ledger: Ledger,
    pub at: LaneCursor,
    fence: Fence,
    matcher: Matcher,
    hub: Hub,
    /// Sessions the last index reload closed (revoked keys, disabled accounts).
    closed_by_last_apply: usize,
    /// Edge mode: where each round is stored before the cursor moves.
    publisher: Option<SharedPublisher>,
    /// The watermark the round read (what edges' heartbeats report as the head).
    watermark: Option<u64>,
}

impl WsLane {
    /// `subs` holds the index loaded before the leader bound its port.
    pub fn new(
        setup: &LaneSetup,
        from: LaneStart,
        subs: Subscriptions,
        hub: Hub,
        publisher: Option<SharedPublisher>,
    ) -> WsLane {
        let (ledger, at) = setup.start(Source::Ws, from);
        WsLane {
            ledger,
            at,
            fence: setup.fence,
            matcher: Matcher::new(subs, true),
            hub,
            closed_by_last_apply: 0,
            publisher,
            watermark: None,
        }
    }

    pub fn epoch(&self) -> i64 {
        self.fence.epoch
    }

    /// One round (see [`super::round`]). In edge mode the stream is claimed first, at the
    /// leadership's first round, trades or not: it is also what creates the stream the edges
    /// wait for (their identity may not create it).
    pub async fn round(&mut self) -> Result<RoundOutcome, RoundError> {
        if let Some(p) = &self.publisher {
            p.lock().await.claim().await?;
        }
        super::round(self, None).await
    }

    /// Bring the index up to the current `subs_version` (no ClickHouse read): what a change
    /// notification does between rounds. Returns the sessions closed by revocation.
    pub async fn refresh_index(&mut self) -> Result<usize, RoundError> {
        let refreshed = async {
            let version: i64 = self
                .ledger
                .pool
                .get()
                .await?
                .query_one("SELECT seq FROM subs_version WHERE id = 1", &[])
                .await?
                .get(0);
            let before = self.matcher.version().await;
            let (idx, reloaded) = self.matcher.index(&self.ledger.pool, version).await?;
            if reloaded {
                self.closed_by_last_apply = self.hub.apply(&idx);
            }
            self.hub.viewed();
            Ok(if idx.version != before {
                self.closed_by_last_apply
            } else {
                0
            })
        }
        .await;
        if refreshed.is_err() {
            self.matcher.failed();
        }
        refreshed
    }

    /// The batch as hub items: its retractions, then its trades, each rendered once.
    fn items(&self, batch: &Batch) -> Vec<Arc<Item>> {
        let ledger = &self.ledger;
        round_items(
            batch
                .retracts
                .iter()
                .map(|r| (r, ledger.market(&r.token_id))),
            batch.rows.iter().map(|r| (r, ledger.market(&r.token_id))),
            |r| batch.pending_of(r),
        )
    }

    /// Claim the batch's range and move `push_cursor` in one statement fenced by the epoch.
    async fn claim(
        &self,
        client: &deadpool_postgres::Object,
        batch: &Batch,
    ) -> Result<i64, RoundError> {
        let (from, through) = (batch.from.cursor, batch.through.cursor);
        let sql = client
            .prepare_cached(include_str!("sql/ws_claim.sql"))
            .await?;
        let claim = client
            .query_opt(
                &sql,
                &[
                    &self.fence.slot,
                    &self.fence.epoch,
                    &(from.block as i64),
                    &(from.log_index as i32),
                    &(through.block as i64),
                    &(through.log_index as i32),
                    &((batch.rows.len() + batch.retracts.len()) as i32),
                    &now_ms(),
                    &batch.reorg_id,
                ],
            )
            .await?;
        claim.map(|r| r.get(0)).ok_or(RoundError::Fenced)
    }
}

/// The batch as the bus carries it: each row with its market, and the round's watermark.
fn bus_round(ledger: &Ledger, watermark: Option<u64>, batch: &Batch) -> Round {
    Round::of_rows(
        BusStream::Ledger,
        super::span(batch),
        watermark,
        &batch.retracts,
        &batch.rows,
        |token| ledger.market(token).cloned(),
    )
    .confirming(|r| batch.pending_of(r))
}

impl Lane for WsLane {
    fn reader(&mut self) -> (&mut Ledger, &LaneCursor, &mut Matcher) {
        (&mut self.ledger, &self.at, &mut self.matcher)
    }

    /// A reloaded index goes to the hub's sessions; the watermark is the heartbeats' head.
    fn seen(&mut self, read: &Reading) {
        if read.reloaded {
            self.closed_by_last_apply = self.hub.apply(&read.index);
        }
        // The round read the current `subs_version`: the sessions' view is confirmed.
        self.hub.viewed();
        self.watermark = read.watermark;
        if let Some(wm) = read.watermark {
            self.hub.set_head(wm);
        }
    }

    async fn deliver(
        &mut self,
        client: deadpool_postgres::Object,
        _index: &Index,
        batch: Batch,
    ) -> Result<RoundOutcome, RoundError> {
        let items = self.items(&batch);
        let mut published = None;
        if let Some(p) = &self.publisher {
            let round = bus_round(&self.ledger, self.watermark, &batch);
            p.lock().await.publish(round).await?;
            published = Some(Instant::now());
        }
        let claim = self.claim(&client, &batch).await?;
        let stages = Stages {
            claimed: Instant::now(),
            ..batch.stages
        };
        if batch.rewound {
            self.hub.rewind(batch.from, Stream::Ledger);
        }
        let frames = self.hub.dispatch(&items, batch.through);
        let newest = batch.newest_live_detect_ms();
        crate::telemetry::ws_round_stages(&stages, published, Instant::now(), newest);
        let done = client
            .prepare_cached(include_str!("sql/ws_claim_done.sql"))
            .await?;
        client
            .execute(
                &done,
                &[&claim, &self.fence.epoch, &now_ms(), &self.fence.slot],
            )
            .await?;
        self.at.moved(&batch);
        Ok(RoundOutcome {
            trades: batch.rows.len(),
            retracted: batch.retracts.len(),
            frames,
            more: batch.more,
            ..RoundOutcome::default()
        })
    }
}

//! One push round: read trades after the cursor up to the ingest watermark (handling reorgs
//! first), match them to subscribers, move the cursor in one fenced statement, then deliver.
//!
//! Two lanes run rounds over the same ledger, each with its own cursor, fenced by the same
//! epoch: the WebSocket lane ([`Lane::Ws`]: `push_cursor`, a `ws_claims` row, fan-out to the
//! hub's sessions) and the webhook lane ([`Lane::Webhooks`]: `webhook_cursor`, the round's
//! `webhook_deliveries` queued in the same transaction). WebSocket frames never wait for
//! webhook work, and the WebSocket round's transaction is O(1) in endpoints and accounts. A third
//! lane ([`Lane::Final`]: `final_cursor`, see [`crate::finals`]) sends `final` events behind the
//! finalized watermark and behind both other lanes.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use pmw_core::ch::ChClient;
use pmw_core::ch::{trades, TradeRow};
use pmw_core::filter::Facts;
use pmw_core::message::{Kind, Market, TradeMessage};
use pmw_core::pg::PgPool;
use pmw_core::types::cursor::MAX_LOG_INDEX;
use pmw_core::{pg, Cursor, Position, UnixMs};

use crate::catchup;
use crate::hub::{Hub, Item, Stream};
use crate::recorder::{DeliveryLogRow, Fact, Recorder};
use crate::subs::{Index, Subscriptions};
use crate::webhook;

#[derive(Debug, thiserror::Error)]
pub enum RoundError {
    #[error("this leader's epoch was superseded: write fenced off")]
    Fenced,
    #[error("postgres: {}", pmw_core::pg::describe(.0))]
    Postgres(#[from] tokio_postgres::Error),
    #[error("{0}")]
    Pg(#[from] pmw_core::pg::PgError),
    #[error("postgres pool: {0}")]
    Pool(#[from] deadpool_postgres::PoolError),
    #[error("clickhouse: {0}")]
    ClickHouse(#[from] clickhouse::error::Error),
    #[error("webhooks: {0}")]
    Webhook(String),
}

/// Which deliveries a [`Rounds`] makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// Frames to the hub's WebSocket sessions; `push_cursor`.
    Ws,
    /// Webhook deliveries queued for the dispatcher; `webhook_cursor`.
    Webhooks,
    /// `final` events (sessions and endpoints that asked for them); `final_cursor`.
    Final,
}

/// What a round did.
#[derive(Debug, Default, Clone, Copy)]
pub struct RoundOutcome {
    pub trades: usize,
    pub retracted: usize,
    pub frames: usize,
    pub webhooks: u64,
    /// Of `webhooks`, those handed to the dispatcher claimed (no scan needed for them).
    pub handed: u64,
    /// Deliveries not enqueued because their endpoint was deleted or disabled meanwhile.
    pub webhooks_skipped: u64,
    /// The round read a full batch: more is waiting.
    pub more: bool,
}

pub struct Rounds {
    pub lane: Lane,
    /// The statement a round starts with (the webhook lane's carries its own marker and shape,
    /// so `pmwctl diag` counts WebSocket rounds only: `pg_stat_statements` merges statements by
    /// structure, not by comment).
    state_sql: String,
    pub pool: PgPool,
    pub ch: ChClient,
    pub slot: i16,
    pub epoch: i64,
    pub cursor: Cursor,
    /// `cursor` with its block's hash (what sessions report as their resume point).
    pub position: Position,
    /// The highest cursor this lane moved to. A rewind sends the retractions up to it, not only
    /// up to `cursor`: a rewind round that read the ledger after a retraction (an audit's) but
    /// before its `reorgs` row moved `cursor` below a trade delivered earlier. Sessions and
    /// endpoints drop a retract of a trade they never got.
    held: Cursor,
    pub reorg_id: i64,
    /// Trades read per round: at most half a session queue, so a session that keeps up is never
    /// closed as slow because a catch-up round is larger than its queue.
    pub limit: u64,
    /// Blocks a catch-up round reads at most (see [`crate::catchup`]).
    pub span: u64,
    pub subs: Subscriptions,
    pub hub: Hub,
    /// Where cancelled webhook deliveries are logged (`delivery_log`, outcome `cancelled`).
    pub facts: Recorder,
    /// The finality lane reads no further than this (where the other lanes stand).
    pub bound: Option<Cursor>,
    /// The webhook lane's trade deliveries go in claimed by the epoch and are handed to the
    /// dispatcher here after the commit (`None`: queued unclaimed, found by its scans).
    pub handoff: Option<webhook::Handoff>,
    pub(crate) names: Names,
    /// Reload the subscription index before the next round (set after a failed round).
    reload: bool,
    /// Sessions the last index reload closed (revoked keys, disabled accounts).
    closed_by_last_apply: usize,
}

impl Rounds {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        pool: PgPool,
        ch: ChClient,
        slot: i16,
        epoch: i64,
        position: Position,
        reorg_id: i64,
        limit: u64,
        subs: Subscriptions,
        hub: Hub,
        facts: Recorder,
    ) -> Rounds {
        Rounds {
            lane: Lane::Ws,
            state_sql: include_str!("sql/round_state.sql").to_string(),
            pool,
            ch,
            slot,
            epoch,
            cursor: position.cursor,
            position,
            held: position.cursor,
            reorg_id,
            limit,
            span: u64::MAX / 2,
            subs,
            hub,
            facts,
            bound: None,
            handoff: None,
            names: Names::default(),
            reload: false,
            closed_by_last_apply: 0,
        }
    }

    /// The same rounds in the webhook lane (its own cursor and subscription index; no hub).
    pub fn for_webhooks(mut self) -> Rounds {
        self.lane = Lane::Webhooks;
        self.state_sql = format!(
            "{}, 'webhooks'::text AS lane",
            include_str!("sql/round_state.sql")
                .trim_end()
                .replace("pmw:push_round", "pmw:webhook_round")
        );
        // Its index starts empty: load it on the first round whatever the version.
        self.reload = true;
        self
    }

    /// The same rounds in the finality lane: `final` events up to the finalized watermark and
    /// [`Rounds::bound`], for sessions (the hub's `final` stream) and endpoints that want them.
    pub fn for_finals(mut self) -> Rounds {
        self.lane = Lane::Final;
        self.state_sql = format!(
            "{}, 'final'::text AS lane, 0::int AS pad",
            include_str!("sql/round_state.sql")
                .trim_end()
                .replace("pmw:push_round", "pmw:final_round")
                .replace(
                    "FROM ingest_cursor WHERE id = 1",
                    "FROM finalized_cursor WHERE id = 1"
                )
        );
        self.reload = true;
        self
    }

    /// The index to match this round with: reloaded (and, in the WebSocket lane, given to the
    /// hub's sessions) when its version is not the one read with the watermark, or after a
    /// failed round.
    async fn index(&mut self, version: i64) -> Result<Arc<Index>, RoundError> {
        let idx = self.subs.current().await;
        if idx.version == version && !self.reload {
            return Ok(idx);
        }
        let idx = self.subs.reload(&self.pool).await?;
        if self.lane == Lane::Ws {
            self.closed_by_last_apply = self.hub.apply(&idx);
        }
        self.reload = false;
        Ok(idx)
    }

    /// Bring the index up to the current `subs_version` (no ClickHouse read): what a change
    /// notification does between rounds. Returns the sessions closed by revocation.
    pub async fn refresh_index(&mut self) -> Result<usize, RoundError> {
        let version: i64 = self
            .pool
            .get()
            .await?
            .query_one("SELECT seq FROM subs_version WHERE id = 1", &[])
            .await?
            .get(0);
        let before = self.subs.current().await.version;
        let idx = self.index(version).await;
        match idx {
            Ok(idx) if idx.version != before => Ok(self.closed_by_last_apply),
            Ok(_) => Ok(0),
            Err(e) => {
                self.reload = true;
                Err(e)
            }
        }
    }

    /// One round. Any error leaves the cursor where it was and makes the next round reload the
    /// subscription index (a stale index must never fail rounds forever).
    pub async fn round(&mut self) -> Result<RoundOutcome, RoundError> {
        let outcome = self.round_inner().await;
        if outcome.is_err() {
            self.reload = true;
        }
        outcome
    }

    async fn round_inner(&mut self) -> Result<RoundOutcome, RoundError> {
        let started = std::time::Instant::now();
        let client = self.pool.get().await?;
        // The statements every round runs are prepared once per pooled connection: one round
        // trip each instead of two (prepare, then execute).
        let stmt = client.prepare_cached(self.state_sql.as_str()).await?;
        let state = client.query_one(&stmt, &[&self.reorg_id]).await?;
        // The index first: revocations and unsubscribes apply even before the first block.
        let state_at = std::time::Instant::now();
        let idx = self.index(state.get(1)).await?;
        let Some(mut wm) = state.get::<_, Option<i64>>(0).map(|b| b as u64) else {
            return Ok(RoundOutcome::default());
        };
        if let Some(b) = self.bound {
            wm = wm.min(b.block);
        }
        if self.lane == Lane::Ws {
            self.hub.set_head(wm);
        }

        // Reorgs first: retract what was delivered from orphaned blocks, rewind to the ancestor.
        let mut from = self.position;
        let reorg_id = state.get::<_, Option<i64>>(2).unwrap_or(self.reorg_id);
        if let Some(ancestor) = state.get::<_, Option<i64>>(3).map(|a| a as u64) {
            if ancestor < from.cursor.block {
                let at = Cursor {
                    block: ancestor,
                    log_index: MAX_LOG_INDEX,
                };
                from = Position::maybe(at, state.get::<_, Option<String>>(4).as_deref());
            }
        }
        let rewound = from.cursor < self.cursor;
        let from_pos = from;
        let from = from.cursor;
        let mut retracts = Vec::new();
        if from < self.cursor {
            let held = self.held.max(self.cursor);
            retracts = trades::retracted_between(&self.ch, from.block, held.block)
                .await?
                .into_iter()
                .filter(|t| t.cursor() <= held)
                .collect();
        }
        // The cursor moves only to the last row actually read (a short or empty answer from
        // ClickHouse then delays delivery and never skips a trade), or, on a bounded catch-up
        // span, past blocks proven complete by their recorded trade counts.
        let span = catchup::span(&client, from.block, wm, self.span).await?;
        let upto = span.as_ref().map_or(wm, |s| s.upto);
        let mut rows = trades::trades_after(&self.ch, from, upto, self.limit).await?;
        let read_at = std::time::Instant::now();
        let mut full = rows.len() as u64 >= self.limit;
        if let Some(b) = self.bound {
            let read = rows.len();
            rows.retain(|r| r.cursor() <= b);
            full &= rows.len() == read;
        }
        let last_row = rows.last().map(|r| Position::of(r.cursor(), &r.block_hash));
        let through_pos = match &span {
            None => last_row.unwrap_or(from_pos),
            Some(s) => {
                let checked = catchup::check(s, from, &rows, full);
                if let Some((block, read, recorded)) = checked.short {
                    tracing::warn!(block, read, recorded, "clickhouse returned fewer trades than stored for a block; not moving past it");
                }
                rows.truncate(checked.keep);
                checked.through.unwrap_or(from_pos)
            }
        };
        let more = full || span.is_some();
        let through = through_pos.cursor;
        if through <= from && retracts.is_empty() && reorg_id == self.reorg_id {
            return Ok(RoundOutcome::default());
        }
        self.names
            .refresh(&client, rows.iter().chain(&retracts))
            .await?;

        let read = Read {
            from,
            from_pos,
            through_pos,
            rewound,
            reorg_id,
            trades: rows.len(),
            more,
            stages: Stages {
                started,
                state: state_at,
                read: read_at,
                claimed: read_at,
            },
        };
        match self.lane {
            Lane::Ws => self.deliver_ws(client, &retracts, &rows, read).await,
            Lane::Webhooks => {
                self.deliver_webhooks(client, &idx, &retracts, &rows, read)
                    .await
            }
            Lane::Final => {
                self.deliver_finals(client, &idx, &retracts, &rows, read)
                    .await
            }
        }
    }

    /// The WebSocket lane: a trade belongs to every session whose own wallet set has its maker
    /// (the owner of the fill). Claim the range and move `push_cursor` (one fenced statement),
    /// then fan out. Every trade becomes an item, followed or not: which sessions follow a wallet
    /// is decided only under the hub's shard locks, as each shard's dispatched position moves
    /// (a session that registers meanwhile must get either the frame or the replay).
    async fn deliver_ws(
        &mut self,
        client: deadpool_postgres::Object,
        retracts: &[TradeRow],
        rows: &[TradeRow],
        read: Read,
    ) -> Result<RoundOutcome, RoundError> {
        let mut items = Vec::new();
        for (kind, row) in retracts
            .iter()
            .map(|r| (Kind::Retract, r))
            .chain(rows.iter().map(|r| (Kind::Trade, r)))
        {
            let market = self.names.get(&row.token_id);
            let body = TradeMessage::from_row(row, market).to_json();
            items.push(Arc::new(Item::of_row(kind, row, market, body, None)));
        }
        let now = UnixMs::now().0;
        let (from, through) = (read.from, read.through_pos.cursor);
        let claim_sql = client
            .prepare_cached(include_str!("sql/claim_round.sql"))
            .await?;
        let claim: Option<i64> = client
            .query_opt(
                &claim_sql,
                &[
                    &self.slot,
                    &self.epoch,
                    &(from.block as i64),
                    &(from.log_index as i32),
                    &(through.block as i64),
                    &(through.log_index as i32),
                    &((read.trades + retracts.len()) as i32),
                    &now,
                    &read.reorg_id,
                ],
            )
            .await?
            .map(|r| r.get(0));
        let Some(claim) = claim else {
            return Err(RoundError::Fenced);
        };
        let stages = Stages {
            claimed: std::time::Instant::now(),
            ..read.stages
        };
        if read.rewound {
            self.hub.rewind(read.from_pos, Stream::Ledger);
        }
        let frames = self.hub.dispatch(&items, read.through_pos);
        crate::telemetry::ws_round_stages(
            &stages,
            std::time::Instant::now(),
            rows.iter()
                .filter(|r| r.backfilled == 0)
                .map(|r| r.t_detect_ms)
                .max(),
        );
        let done_sql = client
            .prepare_cached(include_str!("sql/claim_done.sql"))
            .await?;
        client
            .execute(
                &done_sql,
                &[&claim, &self.epoch, &UnixMs::now().0, &self.slot],
            )
            .await?;
        self.moved(read);
        Ok(RoundOutcome {
            trades: read.trades,
            retracted: retracts.len(),
            frames,
            more: read.more,
            ..RoundOutcome::default()
        })
    }

    /// The webhook lane: one delivery per enabled endpoint of every account following the
    /// maker whose filters let the message through ([`Index::endpoints_for`]), queued in the transaction that moves `webhook_cursor` (fenced by the epoch).
    async fn deliver_webhooks(
        &mut self,
        mut client: deadpool_postgres::Object,
        idx: &Index,
        retracts: &[TradeRow],
        rows: &[TradeRow],
        read: Read,
    ) -> Result<RoundOutcome, RoundError> {
        let now = UnixMs::now().0;
        let mut deliveries = Vec::new();
        for (kind, row) in retracts
            .iter()
            .map(|r| (Kind::Retract, r))
            .chain(rows.iter().map(|r| (Kind::Trade, r)))
        {
            let Some(accounts) = idx.accounts_by_wallet.get(&row.maker) else {
                continue;
            };
            let market = self.names.get(&row.token_id);
            let body = TradeMessage::from_row(row, market).to_json();
            let facts = Facts::of_row(row, market);
            deliveries.extend(webhook::deliveries_of(
                idx,
                Some(accounts),
                kind,
                row,
                &facts,
                &body,
                now,
            ));
        }
        let enqueued = self
            .move_and_queue(
                &mut client,
                include_str!("sql/webhook_round.sql"),
                read,
                &deliveries,
                now,
            )
            .await?;
        self.log_cancelled(idx, &enqueued.cancelled);
        let handed = enqueued.handed.len() as u64;
        if let Some(h) = &self.handoff {
            h.send(&deliveries, enqueued.handed);
        }
        self.moved(read);
        Ok(RoundOutcome {
            trades: read.trades,
            retracted: retracts.len(),
            webhooks: enqueued.inserted,
            handed,
            webhooks_skipped: enqueued.skipped,
            more: read.more,
            ..RoundOutcome::default()
        })
    }

    /// A queueing lane's commit: move its cursor to what `read` read (`cursor_sql`, fenced by the
    /// epoch in the same statement) and queue `deliveries` in the same transaction. Endpoints
    /// deleted or disabled meanwhile are skipped (counted), never an error.
    pub(crate) async fn move_and_queue(
        &self,
        client: &mut deadpool_postgres::Object,
        cursor_sql: &str,
        read: Read,
        deliveries: &[webhook::NewDelivery],
        now: i64,
    ) -> Result<webhook::Enqueued, RoundError> {
        let through = read.through_pos.cursor;
        let tx = client.transaction().await?;
        let moved = tx
            .query_opt(
                cursor_sql,
                &[
                    &self.slot,
                    &self.epoch,
                    &(through.block as i64),
                    &(through.log_index as i32),
                    &read.reorg_id,
                    &now,
                ],
            )
            .await?;
        if moved.is_none() {
            return Err(RoundError::Fenced);
        }
        let claim = self.handoff.is_some();
        let enqueued =
            match webhook::enqueue_in_slot(&tx, (self.slot, self.epoch), claim, deliveries).await {
                Ok(n) => n,
                Err(webhook::WebhookError::Fenced { .. }) => return Err(RoundError::Fenced),
                Err(e) => return Err(RoundError::Webhook(e.to_string())),
            };
        tx.commit().await?;
        if enqueued.skipped > 0 {
            tracing::debug!(
                skipped = enqueued.skipped,
                "webhook deliveries skipped: endpoint deleted or disabled"
            );
        }
        Ok(enqueued)
    }

    pub(crate) fn moved(&mut self, read: Read) {
        self.cursor = read.through_pos.cursor;
        self.held = self.held.max(self.cursor);
        self.position = read.through_pos;
        self.reorg_id = read.reorg_id;
    }
}

/// What a round read, for the lane that delivers it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Read {
    pub from: Cursor,
    pub from_pos: Position,
    pub through_pos: Position,
    pub rewound: bool,
    pub reorg_id: i64,
    pub trades: usize,
    pub more: bool,
    pub stages: Stages,
}

/// When a round's parts ended (for [`crate::telemetry::ws_round_stages`]).
#[derive(Debug, Clone, Copy)]
pub struct Stages {
    pub started: std::time::Instant,
    pub state: std::time::Instant,
    pub read: std::time::Instant,
    pub claimed: std::time::Instant,
}

impl Rounds {
    /// One `delivery_log` row (outcome `cancelled`, attempt 0) per trade delivery a retract
    /// cancelled before any attempt.
    pub(crate) fn log_cancelled(
        &self,
        idx: &Index,
        cancelled: &[pmw_core::pg::deliveries::Cancelled],
    ) {
        let now = UnixMs::now().0;
        for c in cancelled {
            let account = idx
                .endpoints_by_account
                .iter()
                .find(|(_, eps)| eps.contains(&c.endpoint_id))
                .map_or(0, |(a, _)| *a);
            tracing::info!(id = %c.id, endpoint = c.endpoint_id, "webhook trade cancelled by its retract before delivery");
            self.facts.record(Fact::Attempt(DeliveryLogRow {
                delivery_id: c.id.clone(),
                endpoint_id: c.endpoint_id as u64,
                account_id: account as u64,
                attempt: 0,
                kind: "trade".into(),
                block_number: c.cursor.block,
                log_index: c.cursor.log_index,
                t_attempt_ms: now,
                duration_ms: 0,
                status_code: 0,
                outcome: "cancelled".into(),
                error: "retracted before delivery".into(),
            }));
        }
    }
}

/// Market names from the background resolver's cache; misses are looked up again at most every
/// 10 s and never waited for.
#[derive(Default)]
pub(crate) struct Names {
    known: HashMap<String, Market>,
    missing: HashMap<String, std::time::Instant>,
}

impl Names {
    pub(crate) fn get(&self, token: &str) -> Option<&Market> {
        self.known.get(token)
    }

    async fn refresh<'a>(
        &mut self,
        client: &deadpool_postgres::Object,
        rows: impl Iterator<Item = &'a TradeRow>,
    ) -> Result<(), tokio_postgres::Error> {
        let retry = Duration::from_secs(10);
        let mut ask: Vec<String> = rows
            .map(|r| r.token_id.clone())
            .filter(|t| {
                !self.known.contains_key(t)
                    && self.missing.get(t).is_none_or(|at| at.elapsed() > retry)
            })
            .collect();
        ask.sort();
        ask.dedup();
        if ask.is_empty() {
            return Ok(());
        }
        let tokens: Vec<&str> = ask.iter().map(String::as_str).collect();
        for (token, market) in pg::market_names(&***client, &tokens).await? {
            self.missing.remove(&token);
            self.known.insert(token, market);
        }
        let now = std::time::Instant::now();
        for t in ask {
            if !self.known.contains_key(&t) {
                self.missing.insert(t, now);
            }
        }
        Ok(())
    }
}

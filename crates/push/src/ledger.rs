//! The ledger read every lane's round starts with: one Postgres statement returns the state (the
//! lane's watermark, the subscription version, the reorgs after the lane's last one, the hot
//! ledger's floor) and, from the hot ledger, the retractions a rewind owes and the trades after
//! the lane's cursor (bounded), with their market names. ClickHouse is read only when the lane
//! starts below the hot ledger's floor (history older than its window, through the one ledger
//! of `pmw_core::pg::ledger`). It knows nothing of sessions or endpoints: a [`Batch`] is what a
//! lane then delivers.

use std::sync::Arc;
use std::time::Instant;

use pmw_core::ch::{ChClient, TradeRow};
use pmw_core::message::Market;
use pmw_core::pg::ledger::{self as one, LedgerError};
use pmw_core::pg::PgPool;
use pmw_core::types::cursor::MAX_LOG_INDEX;
use pmw_core::{Cursor, Position};
use tokio_postgres::types::Json;

use crate::catchup;
use crate::matcher::Matcher;
use crate::names::Names;
use crate::round::RoundError;
pub use crate::telemetry::Stages;
use pmw_session::subs::Index;

/// Which lane reads, and so which watermark bounds it and which statement starts its round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The WebSocket lane: up to the ingest watermark.
    Ws,
    /// The webhook lane: up to the ingest watermark (its own statement, counted apart).
    Webhooks,
    /// The finality lane: up to the finalized watermark.
    Finals,
}

impl Source {
    /// The lane's round statement: `sql/state.sql` with its marker, watermark table and extra
    /// column filled in (the webhook lane's `lane` column keeps its rounds apart in
    /// pg_stat_statements), and the ledger's columns.
    fn state_sql(self) -> String {
        let (round, watermark, lane) = match self {
            Source::Ws => ("push_round", "ingest_cursor", ""),
            Source::Webhooks => (
                "webhook_round",
                "ingest_cursor",
                ", 'webhooks'::text AS lane",
            ),
            Source::Finals => ("final_round", "finalized_cursor", ""),
        };
        include_str!("sql/state.sql")
            .replace("{round}", round)
            .replace("{watermark}", watermark)
            .replace("{lane}", lane)
            .replace("{COLUMNS}", TradeRow::COLUMNS)
    }
}

/// Where a lane stands in the ledger.
#[derive(Debug, Clone, Copy)]
pub struct LaneCursor {
    /// The last position delivered (the lane's cursor with its block's hash).
    pub position: Position,
    /// The highest cursor this lane ever moved to. A rewind sends the retractions up to it, not
    /// only up to `position`: a rewind round that read the ledger after a retraction (an
    /// audit's) but before its `reorgs` row moved the cursor below a trade delivered earlier.
    /// Sessions and endpoints drop a retract of a trade they never got.
    pub held: Cursor,
    /// The newest `reorgs` row this lane has handled.
    pub reorg_id: i64,
    /// Every visible hot-ledger row with a seq up to this, at or below `held`, was delivered by
    /// this lane: a rewind reads none of them again (0: not known, e.g. after a start).
    pub seen_seq: i64,
}

impl LaneCursor {
    pub fn new(position: Position, reorg_id: i64) -> LaneCursor {
        LaneCursor {
            position,
            held: position.cursor,
            reorg_id,
            seen_seq: 0,
        }
    }

    pub fn cursor(&self) -> Cursor {
        self.position.cursor
    }

    /// The lane delivered `batch` and moved its cursor there. Reaching its highest cursor again,
    /// it has delivered every row of the batch's snapshot up to there.
    pub fn moved(&mut self, batch: &Batch) {
        self.position = batch.through;
        if batch.through.cursor >= self.held {
            self.seen_seq = batch.head_seq;
        }
        self.held = self.held.max(batch.through.cursor);
        self.reorg_id = batch.reorg_id;
    }
}

/// What a round read, for the lane that delivers it.
#[derive(Debug)]
pub struct Batch {
    /// Where delivery starts: the lane's position, or the common ancestor after a reorg.
    pub from: Position,
    /// Where the lane's cursor moves once the batch is delivered.
    pub through: Position,
    /// A reorg moved `from` below the lane's position.
    pub rewound: bool,
    pub reorg_id: i64,
    /// Trades of orphaned blocks the lane may have delivered, up to its highest cursor.
    pub retracts: Vec<TradeRow>,
    /// Trades after `from`, in ledger order, through `through`.
    pub rows: Vec<TradeRow>,
    /// The pending fill each hot-ledger row confirmed (`ledger.pending_id`), by identity.
    pub pending: Confirmed,
    /// The read was cut (by the batch limit or a catch-up span): more is waiting.
    pub more: bool,
    /// The last hot-ledger seq committed in the round's snapshot.
    pub head_seq: i64,
    pub stages: Stages,
}

/// The pending fill a row confirmed, by its identity (cursor and block hash): rows read from
/// ClickHouse (below the floor) name none.
pub type Confirmed = std::collections::HashMap<(Cursor, String), i64>;

/// A hot-ledger row as the round's statement renders it: the trade and its `pending_id`.
#[derive(serde::Deserialize)]
struct HotRow {
    #[serde(flatten)]
    row: TradeRow,
    #[serde(default)]
    pending_id: Option<i64>,
}

impl Batch {
    /// The pending fill `row` confirmed, if any.
    pub fn pending_of(&self, row: &TradeRow) -> Option<i64> {
        if self.pending.is_empty() {
            return None;
        }
        let key = (row.cursor(), row.block_hash.clone());
        self.pending.get(&key).copied()
    }

    /// When the newest live (not backfilled) trade's block was detected: what the rounds'
    /// stage lines measure from.
    pub fn newest_live_detect_ms(&self) -> Option<i64> {
        TradeRow::newest_live_detect_ms(&self.rows)
    }
}

/// A round's read: the connection it used (the lane's commit goes on it), the index to match
/// with, and the batch (`None`: nothing to deliver, or not read yet).
pub struct Reading {
    pub client: deadpool_postgres::Object,
    pub index: Arc<Index>,
    /// The index was reloaded this round (the WebSocket lane gives it to the hub's sessions).
    pub reloaded: bool,
    /// The lane's watermark (`None` before the first block).
    pub watermark: Option<u64>,
    /// Filled by [`Ledger::read_batch`].
    pub batch: Option<Batch>,
    state: State,
    /// When the round started and when its state statement answered (`read` and `claimed`
    /// stand at the state's answer until the batch is read).
    times: Stages,
}

/// The state a round starts from and the hot ledger's rows it read (one statement, one
/// snapshot).
#[derive(Debug, Clone)]
pub struct State {
    pub watermark: Option<u64>,
    pub version: i64,
    /// The newest `reorgs` row after the lane's, and the lowest common ancestor among them
    /// (block, hash).
    pub reorg_id: Option<i64>,
    pub ancestor: Option<(u64, Option<String>)>,
    /// The lowest block the hot ledger holds (below it: ClickHouse).
    pub floor: u64,
    /// The hot ledger's trades after the delivery start, ledger order, at most the limit.
    pub trades: Vec<TradeRow>,
    /// The retractions a rewind owes (empty unless the start moved below the cursor).
    pub retracts: Vec<TradeRow>,
    /// The pending fills `trades` and `retracts` confirmed.
    pub pending: Confirmed,
    /// The last hot-ledger seq committed in this snapshot.
    pub head_seq: i64,
    /// The hash of the lane's held cursor's block (`None`: not recorded).
    pub held_hash: Option<String>,
}

/// Where a lane may read up to: its bound's block (none: unbounded).
fn bound_block(bound: Option<Cursor>) -> i64 {
    bound.map_or(i64::MAX, |b| b.block.min(i64::MAX as u64) as i64)
}

/// One lane's reader of the ledger.
pub struct Ledger {
    pub pool: PgPool,
    ch: ChClient,
    /// The round's one statement (the lane's, with the ledger's columns filled in).
    sql: String,
    /// Trades read per round: at most half a session queue, so a session that keeps up is never
    /// closed as slow because a catch-up round is larger than its queue.
    limit: u64,
    /// Blocks a catch-up round reads at most (see [`crate::catchup`]).
    span: u64,
    names: Names,
}

impl Ledger {
    pub fn new(pool: PgPool, ch: ChClient, source: Source, limit: u64, span: u64) -> Ledger {
        Ledger {
            pool,
            ch,
            sql: source.state_sql(),
            limit,
            span,
            names: Names::default(),
        }
    }

    /// The market of a token read in this lane's last batch (from the name cache).
    pub fn market(&self, token: &str) -> Option<&Market> {
        self.names.get(token)
    }

    /// A round's read from `at`, never past `bound`: [`Ledger::begin`], then
    /// [`Ledger::read_batch`].
    pub async fn read(
        &mut self,
        at: &LaneCursor,
        matcher: &mut Matcher,
        bound: Option<Cursor>,
    ) -> Result<Reading, RoundError> {
        let mut r = self.begin(at, matcher, bound).await?;
        self.read_batch(&mut r, at, bound).await?;
        Ok(r)
    }

    /// A round's start: the state and the hot ledger's rows (one statement), then the index
    /// (revocations and unsubscribes apply even before the first block).
    pub async fn begin(
        &mut self,
        at: &LaneCursor,
        matcher: &mut Matcher,
        bound: Option<Cursor>,
    ) -> Result<Reading, RoundError> {
        let started = Instant::now();
        let client = self.pool.get().await?;
        let state = self.state(&client, at, bound).await?;
        let state_at = Instant::now();
        let (index, reloaded) = matcher.index(&self.pool, state.version).await?;
        Ok(Reading {
            client,
            index,
            reloaded,
            watermark: state.watermark,
            batch: None,
            state,
            times: Stages {
                started,
                state: state_at,
                read: state_at,
                claimed: state_at,
            },
        })
    }

    /// The batch after `at` (up to the watermark and `bound`) into `r.batch`: the rows the
    /// round's statement read, or, for a lane starting below the hot ledger's floor, the one
    /// ledger's (ClickHouse there).
    pub async fn read_batch(
        &mut self,
        r: &mut Reading,
        at: &LaneCursor,
        bound: Option<Cursor>,
    ) -> Result<(), RoundError> {
        let Some(wm) = r.state.watermark else {
            return Ok(());
        };
        let upto = bound.map_or(wm, |b| wm.min(b.block));
        let from = rewind_to(at.position, r.state.ancestor.as_ref());
        let seam = one::Seam {
            floor: r.state.floor,
            projected_seq: 0,
        };
        r.batch = if seam.below().is_some_and(|b| from.cursor < b) {
            self.batch(&r.client, &r.state, at, upto, bound, r.times)
                .await?
        } else {
            self.hot_batch(&mut r.state, at, bound, r.times)
        };
        if let Some(b) = &r.batch {
            self.names
                .refresh(
                    &r.client,
                    b.rows
                        .iter()
                        .chain(&b.retracts)
                        .map(|r| r.token_id.as_str()),
                )
                .await?;
        }
        Ok(())
    }

    /// The round's statement of this lane (prepared once per pooled connection): the state and
    /// the hot ledger's rows after `at` (or after the new reorgs' ancestor), never past `bound`'s
    /// block.
    pub async fn state(
        &self,
        c: &deadpool_postgres::Object,
        at: &LaneCursor,
        bound: Option<Cursor>,
    ) -> Result<State, RoundError> {
        let stmt = c.prepare_cached(&self.sql).await?;
        let cursor = at.cursor();
        let held = at.held.max(cursor);
        let row = c
            .query_one(
                &stmt,
                &[
                    &at.reorg_id,
                    &(cursor.block as i64),
                    &(cursor.log_index as i32),
                    &(self.limit.min(i64::MAX as u64) as i64),
                    &(held.block as i64),
                    &(held.log_index as i32),
                    &bound_block(bound),
                    &at.seen_seq,
                ],
            )
            .await?;
        let mut pending = Confirmed::new();
        let mut rows = |i: usize| -> Vec<TradeRow> {
            let hot = row
                .get::<_, Option<Json<Vec<HotRow>>>>(i)
                .map_or_else(Vec::new, |j| j.0);
            hot.into_iter()
                .map(|h| {
                    if let Some(id) = h.pending_id {
                        pending.insert((h.row.cursor(), h.row.block_hash.clone()), id);
                    }
                    h.row
                })
                .collect()
        };
        let (trades, retracts) = (rows(6), rows(7));
        Ok(State {
            watermark: row.get::<_, Option<i64>>(0).map(|b| b as u64),
            version: row.get(1),
            reorg_id: row.get(2),
            ancestor: row
                .get::<_, Option<i64>>(3)
                .map(|a| (a as u64, row.get::<_, Option<String>>(4))),
            floor: row.get::<_, Option<i64>>(5).unwrap_or(0) as u64,
            trades,
            retracts,
            pending,
            head_seq: row.get::<_, Option<i64>>(8).unwrap_or(0),
            held_hash: row.get(9),
        })
    }

    /// The batch of the rows the round's statement read from the hot ledger (complete up to
    /// the watermark: committed with it), or `None` when there is nothing to deliver. The cursor
    /// moves to the last row read.
    fn hot_batch(
        &self,
        state: &mut State,
        at: &LaneCursor,
        bound: Option<Cursor>,
        times: Stages,
    ) -> Option<Batch> {
        let reorg_id = state.reorg_id.unwrap_or(at.reorg_id);
        let from = rewind_to(at.position, state.ancestor.as_ref());
        let mut rows = std::mem::take(&mut state.trades);
        let retracts = std::mem::take(&mut state.retracts);
        let pending = std::mem::take(&mut state.pending);
        let mut full = rows.len() as u64 >= self.limit;
        if let Some(b) = bound {
            let read = rows.len();
            rows.retain(|r| r.cursor() <= b);
            full &= rows.len() == read;
        }
        let mut through = rows
            .last()
            .map_or(from, |r| Position::of(r.cursor(), &r.block_hash));
        // Rows the lane delivered before were left out: when nothing was cut, everything up to
        // its held cursor is delivered, so the cursor moves there (not back to the ancestor).
        let held = at.held.max(at.cursor());
        let readable =
            state.watermark.is_some_and(|w| held.block <= w) && bound.is_none_or(|b| held <= b);
        if !full && readable && held > through.cursor && at.seen_seq > 0 {
            through = Position::maybe(held, state.held_hash.as_deref());
        }
        if through.cursor <= from.cursor && retracts.is_empty() && reorg_id == at.reorg_id {
            return None;
        }
        Some(Batch {
            from,
            through,
            rewound: from.cursor < at.cursor(),
            reorg_id,
            retracts,
            rows,
            pending,
            more: full,
            head_seq: state.head_seq,
            stages: times,
        })
    }

    /// The retractions and trades after `at` up to block `upto` (and cursor `bound`) through
    /// the one ledger (ClickHouse below the hot ledger's floor), or `None` when there is nothing
    /// to deliver. The cursor moves only to the last row actually read (a short or empty answer
    /// from ClickHouse then delays delivery and never skips a trade), or, on a bounded catch-up
    /// span, past blocks proven complete by their recorded trade counts.
    async fn batch(
        &mut self,
        client: &deadpool_postgres::Object,
        state: &State,
        at: &LaneCursor,
        upto: u64,
        bound: Option<Cursor>,
        times: Stages,
    ) -> Result<Option<Batch>, RoundError> {
        let reorg_id = state.reorg_id.unwrap_or(at.reorg_id);
        let from = rewind_to(at.position, state.ancestor.as_ref());
        let retracts = if from.cursor < at.cursor() {
            let held = at.held.max(at.cursor());
            one::retractions_between(&***client, &self.ch, from.cursor.block, held.block)
                .await
                .map_err(store_error)?
                .into_iter()
                .filter(|t| t.cursor() <= held)
                .collect()
        } else {
            Vec::new()
        };
        let span = catchup::span(client, from.cursor.block, upto, self.span).await?;
        let upto = span.as_ref().map_or(upto, |s| s.upto);
        let mut rows = one::trades_after(&***client, &self.ch, from.cursor, upto, self.limit)
            .await
            .map_err(store_error)?;
        let read_at = Instant::now();
        let mut full = rows.len() as u64 >= self.limit;
        if let Some(b) = bound {
            let read = rows.len();
            rows.retain(|r| r.cursor() <= b);
            full &= rows.len() == read;
        }
        let through = match &span {
            None => rows
                .last()
                .map_or(from, |r| Position::of(r.cursor(), &r.block_hash)),
            Some(s) => {
                let checked = catchup::check(s, from.cursor, &rows, full);
                if let Some((block, read, recorded)) = checked.short {
                    tracing::warn!(block, read, recorded, "clickhouse returned fewer trades than stored for a block; not moving past it");
                }
                rows.truncate(checked.keep);
                checked.through.unwrap_or(from)
            }
        };
        if through.cursor <= from.cursor && retracts.is_empty() && reorg_id == at.reorg_id {
            return Ok(None);
        }
        Ok(Some(Batch {
            from,
            through,
            rewound: from.cursor < at.cursor(),
            reorg_id,
            retracts,
            rows,
            pending: Confirmed::new(),
            more: full || span.is_some(),
            head_seq: state.head_seq,
            stages: Stages {
                read: read_at,
                claimed: read_at,
                ..times
            },
        }))
    }
}

fn store_error(e: LedgerError) -> RoundError {
    match e {
        LedgerError::Postgres(e) => e.into(),
        LedgerError::ClickHouse(e) => e.into(),
    }
}

/// Where delivery starts: `at`, or the common ancestor of the reorgs read when it is below it.
fn rewind_to(at: Position, ancestor: Option<&(u64, Option<String>)>) -> Position {
    match ancestor {
        Some((block, hash)) if *block < at.cursor.block => Position::maybe(
            Cursor {
                block: *block,
                log_index: MAX_LOG_INDEX,
            },
            hash.as_deref(),
        ),
        _ => at,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pos(block: u64, log_index: u32) -> Position {
        Position::maybe(Cursor { block, log_index }, None)
    }

    #[test]
    fn each_lane_has_its_own_round_statement_and_the_websocket_one_carries_diags_marker() {
        let ws = Source::Ws.state_sql();
        assert!(ws.contains("/* pmw:push_round */") && ws.contains("FROM ingest_cursor"));
        let hooks = Source::Webhooks.state_sql();
        assert!(hooks.contains("/* pmw:webhook_round */") && hooks.contains("AS lane"));
        let finals = Source::Finals.state_sql();
        assert!(
            finals.contains("/* pmw:final_round */") && finals.contains("FROM finalized_cursor")
        );
        for sql in [ws, hooks, finals] {
            assert!(!sql.contains('{'), "every placeholder is filled: {sql}");
        }
    }

    #[test]
    fn a_reorg_below_the_lane_rewinds_to_the_end_of_the_ancestor_block() {
        let at = pos(120, 3);
        let ancestor = (117, Some(format!("0x{}", "ab".repeat(32))));
        let from = rewind_to(at, Some(&ancestor));
        assert_eq!(from.cursor.block, 117);
        assert_eq!(from.cursor.log_index, MAX_LOG_INDEX);
        assert!(
            from.hash.is_some(),
            "the ancestor's hash is the resume point's"
        );
    }

    #[test]
    fn a_reorg_at_or_above_the_lane_does_not_move_it() {
        let at = pos(120, 3);
        assert_eq!(rewind_to(at, Some(&(120, None))).cursor, at.cursor);
        assert_eq!(rewind_to(at, Some(&(125, None))).cursor, at.cursor);
        assert_eq!(rewind_to(at, None).cursor, at.cursor);
    }
}

//! The ingest step: advance the watermark block by block toward the newest head, strictly in
//! order; fill gaps by number; detect reorgs by parent hash and `unwind` to the common ancestor.
//! A block's trades and latency row are in ClickHouse before its watermark moves in Postgres.

use std::collections::BTreeMap;

use pmw_core::ch::ChClient;
use pmw_core::ch::{trades, IngestLatencyRow, TradeRow};
use pmw_core::lock::{fence_sql, keys};
use pmw_core::pg::PgPool;
use pmw_core::trade::exchange::ORDER_FILLED_TOPICS;
use pmw_core::trade::{self, Allowlist};
use pmw_core::types::Address;
use pmw_core::UnixMs;

use crate::chain::{hex32, Chain, ChainError, Head, SeenHead};
use crate::latency_writer::LatencyRows;
use crate::names::Names;
use crate::notifier::{BlockNotifier, CHANNEL};

/// Why a step could not complete. All but `Fenced` and `ReorgTooDeep` are retried.
#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    #[error("chain: {0}")]
    Chain(#[from] ChainError),
    #[error("clickhouse: {0}")]
    ClickHouse(#[from] clickhouse::error::Error),
    #[error("postgres: {}", pmw_core::pg::describe(.0))]
    Postgres(#[from] tokio_postgres::Error),
    #[error("postgres pool: {0}")]
    Pool(#[from] pmw_core::pg::PgError),
    #[error("the live writer lock is no longer held by this process")]
    Fenced,
    #[error("reorg deeper than {0} blocks: no common ancestor found")]
    ReorgTooDeep(u64),
    #[error("the chain reorganised below the finalized watermark {finalized} (common ancestor {ancestor}): refused")]
    BelowFinalized { ancestor: u64, finalized: u64 },
}

impl From<deadpool_postgres::PoolError> for IngestError {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        IngestError::Pool(e.into())
    }
}

/// The block the watermark points at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockRef {
    pub number: u64,
    pub hash: [u8; 32],
}

/// Counters for heartbeats and tests.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct IngestStats {
    pub blocks: u64,
    pub backfilled_blocks: u64,
    pub trades: u64,
    pub undecodable_logs: u64,
    pub reorgs: u64,
    pub retracted: u64,
    /// Reorgs refused because they reached below the finalized watermark.
    pub finality_violations: u64,
}

/// Blocks kept in `chain_blocks` (with their trade counts, which push's bounded catch-up
/// reads): about a day of Polygon.
const KEEP_BLOCKS: u64 = 50_000;

/// Recent heads seen live, by number, so gap blocks that did arrive keep their detect time.
const BOOK_SIZE: usize = 512;

pub struct Ingester {
    pub chain: Chain,
    pub pg: PgPool,
    pub ch: ChClient,
    pub allow: Allowlist,
    pub notifier: BlockNotifier,
    pub latency: LatencyRows,
    pub names: Names,
    pub lock_pid: i32,
    pub max_reorg_depth: u64,
    pub cursor: Option<BlockRef>,
    /// The highest head number seen (readiness compares the watermark with it).
    pub head: u64,
    pub stats: IngestStats,
    book: BTreeMap<u64, SeenHead>,
    addresses: Vec<Address>,
    advance_sql: String,
    commit_sql: String,
    /// ClickHouse may hold rows above the watermark that were never committed (at start: a
    /// predecessor may have died between its two writes; later: a failed ingest). They are
    /// retracted before the watermark moves again ([`trades::retract_above`]).
    uncommitted: bool,
    /// Versions written from now on are above this (retractions must never tie a re-insert).
    version_floor: u64,
}

impl Ingester {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        chain: Chain,
        pg: PgPool,
        ch: ChClient,
        allow: Allowlist,
        notifier: BlockNotifier,
        latency: LatencyRows,
        names: Names,
        lock_pid: i32,
        max_reorg_depth: u64,
    ) -> Ingester {
        let addresses = allow.addresses().collect();
        let advance_sql =
            include_str!("sql/advance_cursor.sql").replace("{fence}", &fence_sql(keys::LIVE, "$4"));
        let commit_sql =
            include_str!("sql/commit_block.sql").replace("{fence}", &fence_sql(keys::LIVE, "$4"));
        Ingester {
            chain,
            pg,
            ch,
            allow,
            notifier,
            latency,
            names,
            lock_pid,
            max_reorg_depth,
            cursor: None,
            head: 0,
            stats: IngestStats::default(),
            book: BTreeMap::new(),
            addresses,
            advance_sql,
            commit_sql,
            uncommitted: true,
            version_floor: 0,
        }
    }

    /// The version of rows written now: the clock, but always above the last retraction.
    fn next_version(&mut self) -> u64 {
        let v = (UnixMs::now().0 as u64).max(self.version_floor + 1);
        self.version_floor = v;
        v
    }

    /// Retract what a failed or interrupted ingest left above the watermark (see
    /// `uncommitted`), before anything moves the watermark over it.
    async fn retract_uncommitted(&mut self) -> Result<(), IngestError> {
        if !self.uncommitted {
            return Ok(());
        }
        let watermark = self.cursor.map_or(0, |c| c.number);
        let version = self.next_version();
        let (rows, top) = trades::retract_above(&self.ch, watermark, version).await?;
        self.version_floor = self.version_floor.max(top);
        if !rows.is_empty() {
            tracing::warn!(
                watermark,
                retracted = rows.len(),
                "uncommitted trades above the watermark retracted"
            );
            self.stats.retracted += rows.len() as u64;
        }
        self.uncommitted = false;
        Ok(())
    }

    /// Load the watermark from Postgres.
    pub async fn load_cursor(&mut self) -> Result<Option<BlockRef>, IngestError> {
        let client = self.pg.get().await?;
        let row = client
            .query_opt(
                "SELECT block_number, block_hash FROM ingest_cursor WHERE id = 1",
                &[],
            )
            .await?;
        self.cursor = row.map(|r| BlockRef {
            number: r.get::<_, i64>(0) as u64,
            hash: parse_hash(&r.get::<_, String>(1)),
        });
        Ok(self.cursor)
    }

    /// Remember a head seen live. The earliest arrival of a given header wins (the WebSocket and the poll may both see it).
    pub fn saw(&mut self, seen: SeenHead) {
        self.head = self.head.max(seen.head.number);
        let lead_ms = seen.t_detect_ms.0 - seen.head.timestamp as i64 * 1000;
        crate::telemetry::head_seen(self.head, lead_ms);
        match self.book.get(&seen.head.number) {
            Some(prev)
                if prev.head.hash == seen.head.hash && prev.t_detect_ms <= seen.t_detect_ms => {}
            _ => {
                self.book.insert(seen.head.number, seen);
            }
        }
        while self.book.len() > BOOK_SIZE {
            self.book.pop_first();
        }
    }

    /// Bring the watermark up to `target` (a head seen live), in order.
    pub async fn advance(&mut self, target: &Head) -> Result<(), IngestError> {
        self.retract_uncommitted().await?;
        let Some(mut cursor) = self.cursor else {
            // First run without a start block: begin at the first head.
            let seen = self.seen_or_fetched(target.number).await?;
            if let Some((head, t, backfilled)) = seen {
                self.ingest_block(&head, t, backfilled).await?;
            }
            return Ok(());
        };
        if target.number <= cursor.number {
            // An old head, or a reorg to an equal or shorter branch: is our tip still canonical?
            // A node that does not have the block (a lagging one behind a load balancer) proves
            // nothing: only another hash at the same height starts a walk-back.
            match self.chain.block(cursor.number).await? {
                Some(h) if h.hash == cursor.hash => return Ok(()),
                None => return Ok(()),
                Some(_) => {
                    self.unwind().await?;
                    cursor = self.cursor.expect("unwind leaves a cursor");
                }
            }
        }
        while cursor.number < target.number {
            let next = cursor.number + 1;
            let Some((head, t_detect, backfilled)) = self.seen_or_fetched(next).await? else {
                break; // the canonical chain is not there yet
            };
            let (head, t_detect, backfilled) = if head.parent_hash == cursor.hash {
                (head, t_detect, backfilled)
            } else {
                // The seen head may be from a side branch: ask for the canonical block.
                match self.chain.block(next).await? {
                    Some(c) if c.parent_hash == cursor.hash => (c, UnixMs::now(), true),
                    Some(_) => {
                        self.unwind().await?;
                        cursor = self.cursor.expect("unwind leaves a cursor");
                        continue;
                    }
                    None => break,
                }
            };
            self.ingest_block(&head, t_detect, backfilled).await?;
            cursor = self.cursor.expect("ingest sets the cursor");
        }
        Ok(())
    }

    /// The head at `number`: as seen live (not backfilled), else fetched now (backfilled).
    async fn seen_or_fetched(
        &self,
        number: u64,
    ) -> Result<Option<(Head, UnixMs, bool)>, IngestError> {
        if let Some(seen) = self.book.get(&number) {
            return Ok(Some((seen.head.clone(), seen.t_detect_ms, false)));
        }
        Ok(self
            .chain
            .block(number)
            .await?
            .map(|h| (h, UnixMs::now(), true)))
    }

    /// Fetch, decode, store one block, then move the watermark to it and notify. Logs inside
    /// carry the span's `block` and `backfilled`.
    #[tracing::instrument(name = "ingest", skip_all, fields(block = head.number, backfilled))]
    pub async fn ingest_block(
        &mut self,
        head: &Head,
        t_detect: UnixMs,
        backfilled: bool,
    ) -> Result<(), IngestError> {
        let logs = self
            .chain
            .logs(&head.hash, &self.addresses, &ORDER_FILLED_TOPICS)
            .await?;
        let t_logs = UnixMs::now();
        let block_time_ms = head.timestamp as i64 * 1000;
        let version = self.next_version();
        let mut rows = Vec::with_capacity(logs.len());
        for log in &logs {
            if log.block_hash != head.hash {
                tracing::warn!(
                    block = head.number,
                    log_index = log.log_index,
                    "log from another block hash ignored"
                );
                continue;
            }
            match trade::decode(log, &self.allow) {
                Ok(Some(fill)) => rows.push(TradeRow::from_fill(
                    &fill,
                    block_time_ms,
                    t_detect.0,
                    backfilled,
                    version,
                )),
                Ok(None) => {}
                Err(e) => {
                    self.stats.undecodable_logs += 1;
                    tracing::warn!(block = head.number, log_index = log.log_index, emitter = %log.address, error = %e, "undecodable log");
                }
            }
        }
        // Until the watermark commits, these rows are uncommitted: a failure from here on leaves
        // them for `retract_uncommitted`.
        self.uncommitted = true;
        trades::insert_trades(&self.ch, &rows)
            .await
            .inspect_err(|_| crate::telemetry::ch_insert_failed("trades"))?;
        crate::failpoint::hit("after_trades_insert", head.number);
        let t_stored = UnixMs::now();
        // One statement records the block, moves the watermark (fenced) and, for a block seen
        // live, wakes push in the same commit. Backfilled blocks wake push through the
        // coalescing notifier instead: a catch-up of a thousand blocks is one wake-up, not a
        // thousand.
        let client = self.pg.get().await?;
        let commit = client.prepare_cached(&self.commit_sql).await?;
        let channel = if backfilled { "" } else { CHANNEL };
        let moved = client
            .query_opt(
                &commit,
                &[
                    &(head.number as i64),
                    &head.hash_hex(),
                    &t_stored.0,
                    &self.lock_pid,
                    &head.parent_hex(),
                    &block_time_ms,
                    &t_detect.0,
                    &backfilled,
                    &(rows.len() as i32),
                    &channel,
                ],
            )
            .await?;
        drop(client);
        if moved.is_none() {
            return Err(IngestError::Fenced);
        }
        let t_committed = UnixMs::now();
        self.uncommitted = false;
        self.cursor = Some(BlockRef {
            number: head.number,
            hash: head.hash,
        });
        if backfilled {
            self.notifier.notify(head.number);
        } else {
            self.notifier.woke_inline();
        }
        self.names.seen(rows.iter().map(|r| r.token_id.clone()));
        // The latency row is written after the watermark moves, by the latency writer: it is a
        // measurement, not a fact readers wait for, and its INSERT would otherwise delay every
        // push (or compete with push's read of this block).
        self.latency.send(IngestLatencyRow {
            block_number: head.number,
            block_hash: head.hash_hex(),
            t_detect_ms: t_detect.0,
            t_logs_ms: t_logs.0,
            t_stored_ms: t_stored.0,
            head_lead_ms: t_detect.0 - block_time_ms,
            trade_count: rows.len() as u32,
            backfilled: u8::from(backfilled),
        });
        crate::telemetry::block_ingested(
            head.number,
            backfilled,
            rows.len(),
            (t_detect, t_logs, t_stored),
        );
        self.stats.blocks += 1;
        self.stats.backfilled_blocks += u64::from(backfilled);
        self.stats.trades += rows.len() as u64;
        tracing::debug!(
            block = head.number,
            trades = rows.len(),
            backfilled,
            detect_to_stored_ms = t_stored.0 - t_detect.0,
            detect_to_committed_ms = t_committed.0 - t_detect.0,
            detect_to_logs_ms = t_logs.0 - t_detect.0,
            "block ingested"
        );
        Ok(())
    }

    /// Walk back from the watermark to the newest block whose stored hash is canonical, retract
    /// the trades of every orphaned block above it, and move the watermark back to it.
    #[tracing::instrument(name = "unwind", skip_all, fields(cursor = self.cursor.map(|c| c.number)))]
    pub async fn unwind(&mut self) -> Result<(), IngestError> {
        let tip = self.cursor.expect("unwind needs a cursor");
        let stored = self
            .stored_hashes(tip.number.saturating_sub(self.max_reorg_depth))
            .await?;
        let mut ancestor = None;
        for (&number, hash) in stored.iter().rev() {
            // A block the node does not have proves nothing (a lagging node): try again later
            // rather than walk past a block that may well be canonical.
            let c = self
                .chain
                .block(number)
                .await?
                .ok_or(IngestError::Chain(ChainError::Rpc(format!(
                    "block {number} not available while looking for the common ancestor"
                ))))?;
            if c.hash == *hash {
                ancestor = Some(BlockRef {
                    number,
                    hash: *hash,
                });
                break;
            }
        }
        let ancestor = ancestor.ok_or(IngestError::ReorgTooDeep(self.max_reorg_depth))?;
        // A finalized trade is never retracted: a chain that disagrees with a finalized block is
        // an alarm (a broken node, or worse), logged and counted; ingest waits for it to agree.
        let finalized = crate::finality::watermark(&self.pg).await?;
        if ancestor.number < finalized {
            metrics::counter!(crate::telemetry::FINALITY_VIOLATIONS).increment(1);
            self.stats.finality_violations += 1;
            return Err(IngestError::BelowFinalized {
                ancestor: ancestor.number,
                finalized,
            });
        }
        let version = self.next_version();
        let mut retracted = 0;
        for (&number, hash) in stored.range(ancestor.number + 1..) {
            retracted += trades::retract_block(&self.ch, number, &hex32(hash), version)
                .await?
                .len();
        }
        let depth = tip.number - ancestor.number;
        let mut client = self.pg.get().await?;
        let tx = client.transaction().await?;
        tx.execute(include_str!("sql/unwind.sql"), &[&(ancestor.number as i64)])
            .await?;
        tx.execute(
            include_str!("sql/record_reorg.sql"),
            &[
                &(ancestor.number as i64),
                &(tip.number as i64),
                &hex32(&tip.hash),
                &(depth as i32),
                &UnixMs::now().0,
            ],
        )
        .await?;
        let moved = tx
            .execute(
                &self.advance_sql,
                &[
                    &(ancestor.number as i64),
                    &hex32(&ancestor.hash),
                    &UnixMs::now().0,
                    &self.lock_pid,
                ],
            )
            .await?;
        if moved != 1 {
            return Err(IngestError::Fenced);
        }
        tx.commit().await?;
        self.book.retain(|&n, _| n <= ancestor.number);
        self.cursor = Some(ancestor);
        self.notifier.notify(ancestor.number);
        crate::telemetry::reorged(ancestor.number);
        self.stats.reorgs += 1;
        self.stats.retracted += retracted as u64;
        tracing::warn!(
            ancestor = ancestor.number,
            old_tip = tip.number,
            depth,
            retracted,
            "reorg unwound"
        );
        Ok(())
    }

    /// Stored canonical hashes from `from` up to the watermark.
    async fn stored_hashes(&self, from: u64) -> Result<BTreeMap<u64, [u8; 32]>, IngestError> {
        let client = self.pg.get().await?;
        let rows = client
            .query(
                "SELECT block_number, block_hash FROM chain_blocks WHERE block_number >= $1 ORDER BY block_number",
                &[&(from as i64)],
            )
            .await?;
        Ok(rows
            .iter()
            .map(|r| {
                (
                    r.get::<_, i64>(0) as u64,
                    parse_hash(&r.get::<_, String>(1)),
                )
            })
            .collect())
    }

    /// Keep `chain_blocks` to [`KEEP_BLOCKS`] (at least the reorg window plus margin).
    pub async fn prune(&self) -> Result<u64, IngestError> {
        let Some(c) = self.cursor else { return Ok(0) };
        let keep = (self.max_reorg_depth * 4 + 64).max(KEEP_BLOCKS);
        let keep_from = c.number.saturating_sub(keep) as i64;
        let client = self.pg.get().await?;
        Ok(client
            .execute(
                "DELETE FROM chain_blocks WHERE block_number < $1",
                &[&keep_from],
            )
            .await?)
    }
}

fn parse_hash(s: &str) -> [u8; 32] {
    let mut out = [0u8; 32];
    let _ = hex::decode_to_slice(s.trim_start_matches("0x"), &mut out);
    out
}

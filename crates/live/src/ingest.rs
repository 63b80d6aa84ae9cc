//! The ingest step: advance the watermark block by block toward the newest head, strictly in
//! order; fill gaps by number; detect reorgs by parent hash and `unwind` to the common ancestor.
//! A block's trades go into the Postgres hot ledger in the statement that moves its watermark;
//! ClickHouse is filled from the ledger by the projector, off this path.

use std::collections::BTreeMap;

use pmw_core::ch::ChClient;
use pmw_core::ch::{IngestLatencyRow, TradeRow};
use pmw_core::lock::{fence_sql, keys, own_fence_sql, LockSession};
use pmw_core::pg::emitters::Source;
use pmw_core::pg::PgPool;
use pmw_core::trade::exchange::WATCHED_TOPICS;
use pmw_core::trade::{self, Allowlist, RawLog};
use pmw_core::UnixMs;

use crate::chain::{Chain, ChainError, Head, SeenHead};
use crate::error::IngestError;
use crate::latency_writer::LatencyRows;
use crate::names::Names;
use crate::notifier::{BlockNotifier, CHANNEL};
use crate::telemetry::Times;
use crate::version::VersionFloor;

pub mod ledger;
mod unwind;

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

/// What an [`Ingester`] works with.
pub struct IngestParts {
    pub chain: Chain,
    pub pg: PgPool,
    pub ch: ChClient,
    pub allow: Allowlist,
    pub notifier: BlockNotifier,
    pub latency: LatencyRows,
    pub names: Names,
    /// The live lock's own session: a block's commit runs there, fenced by an index probe
    /// instead of a read of the server's lock table ([`own_fence_sql`]).
    pub lock: LockSession,
    pub max_reorg_depth: u64,
    /// Where unlisted emitters' sightings go (after the commit).
    pub emitters: crate::emitters::Sink,
}

pub struct Ingester {
    pub parts: IngestParts,
    pub cursor: Option<BlockRef>,
    /// The highest head number seen (readiness compares the watermark with it).
    pub head: u64,
    pub stats: IngestStats,
    book: BTreeMap<u64, SeenHead>,
    advance_sql: String,
    commit_sql: String,
    /// `commit_sql` prepared on the lock session (once: the session is this leader term's).
    commit: Option<tokio_postgres::Statement>,
    /// Versions written from now on are above this (retractions must never tie a re-insert).
    versions: VersionFloor,
    /// The hot ledger's partitions this writer made sure of.
    partitions: ledger::Partitions,
}

/// How the rows of one block are stamped.
#[derive(Debug, Clone, Copy)]
struct Stamp {
    block_time_ms: i64,
    t_detect_ms: i64,
    backfilled: bool,
    version: u64,
}

/// The trade rows of `head`'s logs (a log of another block hash is skipped) and how many logs
/// could not be decoded.
fn decode_rows(
    logs: &[RawLog],
    head: &Head,
    allow: &Allowlist,
    stamp: Stamp,
) -> (Vec<TradeRow>, u64) {
    let mut rows = Vec::with_capacity(logs.len());
    let mut undecodable = 0;
    for log in logs {
        if log.block_hash != head.hash {
            tracing::warn!(
                block = head.number,
                log_index = log.log_index,
                "log from another block hash ignored"
            );
            continue;
        }
        match trade::decode(log, allow) {
            Ok(Some(fill)) => rows.push(TradeRow::from_fill(
                &fill,
                stamp.block_time_ms,
                stamp.t_detect_ms,
                stamp.backfilled,
                stamp.version,
            )),
            Ok(None) => {}
            Err(e) => {
                undecodable += 1;
                tracing::warn!(block = head.number, log_index = log.log_index, emitter = %log.address, error = %e, "undecodable log");
            }
        }
    }
    (rows, undecodable)
}

/// The highest head of `book` above `cursor` (every head when there is no cursor yet).
fn owed_head(book: &BTreeMap<u64, SeenHead>, cursor: Option<BlockRef>) -> Option<Head> {
    let (number, seen) = book.last_key_value()?;
    (cursor.is_none_or(|c| *number > c.number)).then(|| seen.head.clone())
}

impl Ingester {
    pub fn new(parts: IngestParts) -> Ingester {
        let advance_sql =
            include_str!("sql/advance_cursor.sql").replace("{fence}", &fence_sql(keys::LIVE, "$4"));
        let commit_sql = include_str!("sql/commit_block.sql")
            .replace("{fence}", &own_fence_sql(keys::LIVE, "$4"))
            .replace(
                "{ledger_insert}",
                &pmw_core::pg::ledger::insert_sql_paired(
                    "$11",
                    "$3",
                    "(SELECT p.pending_id FROM paired p WHERE p.n = t.n)",
                ),
            );
        Ingester {
            parts,
            cursor: None,
            head: 0,
            stats: IngestStats::default(),
            book: BTreeMap::new(),
            advance_sql,
            commit_sql,
            commit: None,
            versions: VersionFloor::default(),
            partitions: ledger::Partitions::default(),
        }
    }

    /// Load the watermark from Postgres.
    pub async fn load_cursor(&mut self) -> Result<Option<BlockRef>, IngestError> {
        let client = self.parts.pg.get().await?;
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

    /// The highest head seen live above the watermark, if any: still to be ingested.
    pub fn owed_head(&self) -> Option<Head> {
        owed_head(&self.book, self.cursor)
    }

    /// Bring the watermark up to `target` (a head seen live), in order.
    pub async fn advance(&mut self, target: &Head) -> Result<(), IngestError> {
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
            match self.parts.chain.block(cursor.number).await? {
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
                match self.parts.chain.block(next).await? {
                    Some(c) if c.parent_hash == cursor.hash => (c, UnixMs::now(), true),
                    Some(_) => {
                        self.unwind().await?;
                        cursor = self.cursor.expect("unwind leaves a cursor");
                        continue;
                    }
                    None => break,
                }
            };
            if let Err(e) = self.ingest_block(&head, t_detect, backfilled).await {
                if let IngestError::Chain(ChainError::NoQuorum { .. }) = e {
                    // Too few providers agree on this header: if a quorum agrees on another
                    // at its height (a lone provider announced its own), take that one;
                    // otherwise wait for a quorum (the step is retried).
                    match self.parts.chain.block(next).await? {
                        Some(c) if c.hash != head.hash => {
                            self.book.remove(&next);
                            continue;
                        }
                        _ => return Err(e),
                    }
                }
                if !backfilled && matches!(e, IngestError::Chain(_)) {
                    // A head seen live whose block cannot be fetched may have been reorged
                    // away while it waited (a store outage, an RPC cut): forget it, so the
                    // retry asks the chain for the canonical block at that height instead of
                    // failing on the orphan forever (checker seed 11745: 20 s on "unknown
                    // block" until a restart). A node that only lags answers the same later.
                    self.book.remove(&next);
                }
                return Err(e);
            }
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
            .parts
            .chain
            .block(number)
            .await?
            .map(|h| (h, UnixMs::now(), true)))
    }

    /// Check that a quorum of providers agrees on the block, fetch its logs from one that does,
    /// decode, store, then move the watermark to it and notify. Logs inside
    /// carry the span's `block` and `backfilled`. The one `eth_getLogs` asks for every fill and
    /// match topic from any address (under the same quorum): the allowlisted exchanges' fills
    /// are decoded; other emitters' logs are only sightings, handed over after the commit.
    #[tracing::instrument(name = "ingest", skip_all, fields(block = head.number, backfilled))]
    pub async fn ingest_block(
        &mut self,
        head: &Head,
        t_detect: UnixMs,
        backfilled: bool,
    ) -> Result<(), IngestError> {
        // No lone provider makes a block: its header and logs only on a quorum's word.
        let started = std::time::Instant::now();
        let among = self.parts.chain.agreeing(head).await?;
        let agreed_us = started.elapsed().as_micros() as u64;
        let logs = self
            .parts
            .chain
            .logs_from(head.number, &head.hash, &among, &[], &WATCHED_TOPICS)
            .await?;
        let (logs, sightings) = crate::emitters::split(logs, &self.parts.allow);
        let t_logs = UnixMs::now();
        tracing::debug!(
            agree_us = agreed_us,
            logs_us = started.elapsed().as_micros() as u64 - agreed_us,
            "block logs fetched"
        );
        let stamp = Stamp {
            block_time_ms: head.timestamp as i64 * 1000,
            t_detect_ms: t_detect.0,
            backfilled,
            version: self.versions.next_now(),
        };
        let (rows, undecodable) = decode_rows(&logs, head, &self.parts.allow, stamp);
        self.stats.undecodable_logs += undecodable;
        crate::failpoint::hit("before_commit", head.number);
        if !self.commit_block(head, stamp, &rows, UnixMs::now()).await? {
            return Err(IngestError::Fenced);
        }
        // Stored means committed to Postgres (the trades with the watermark).
        let t_stored = UnixMs::now();
        let times = Times {
            detect: t_detect,
            logs: t_logs,
            stored: t_stored,
        };
        self.committed(head, &rows, stamp, times);
        self.parts.emitters.saw(Source::Ingest, sightings);
        Ok(())
    }

    /// One statement records the block, appends its trades to the hot ledger, moves the
    /// watermark (fenced) and, for a block seen live, wakes push in the same commit. Backfilled
    /// blocks wake push through the coalescing notifier instead: a catch-up of a thousand blocks
    /// is one wake-up, not a thousand. It runs on the live lock's own session ([`LockSession`]).
    /// `false` when fenced (or the lock is gone).
    async fn commit_block(
        &mut self,
        head: &Head,
        stamp: Stamp,
        rows: &[TradeRow],
        t_stored: UnixMs,
    ) -> Result<bool, IngestError> {
        let Some(session) = self.parts.lock.get() else {
            return Ok(false);
        };
        let client = &session.client;
        self.partitions.ensure(client, head.number).await?;
        let commit = match &self.commit {
            Some(statement) => statement.clone(),
            None => {
                let statement = client.prepare(&self.commit_sql).await?;
                self.commit.insert(statement).clone()
            }
        };
        let started = std::time::Instant::now();
        let channel = if stamp.backfilled { "" } else { CHANNEL };
        let moved = client
            .query_opt(
                &commit,
                &[
                    &(head.number as i64),
                    &head.hash_hex(),
                    &t_stored.0,
                    &self.parts.lock.epoch(),
                    &head.parent_hex(),
                    &stamp.block_time_ms,
                    &stamp.t_detect_ms,
                    &stamp.backfilled,
                    &(rows.len() as i32),
                    &channel,
                    &tokio_postgres::types::Json(rows),
                ],
            )
            .await?;
        tracing::debug!(
            block = head.number,
            query_us = started.elapsed().as_micros() as u64,
            "block committed"
        );
        let Some(moved) = moved else { return Ok(false) };
        let (paired, mismatched): (i64, i64) = (moved.get("paired"), moved.get("mismatched"));
        if paired > 0 {
            crate::telemetry::pending_confirmed(paired as u64, mismatched as u64);
        }
        Ok(true)
    }

    /// After the watermark moved to `head`: the cursor, push's wake-up, names to resolve, the
    /// latency row, metrics and counters.
    fn committed(&mut self, head: &Head, rows: &[TradeRow], stamp: Stamp, t: Times) {
        let t_committed = UnixMs::now();
        let backfilled = stamp.backfilled;
        self.cursor = Some(BlockRef {
            number: head.number,
            hash: head.hash,
        });
        if backfilled {
            self.parts.notifier.notify(head.number);
        } else {
            self.parts.notifier.woke_inline();
        }
        self.parts
            .names
            .seen(rows.iter().map(|r| r.token_id.clone()));
        // The latency row is written after the watermark moves, by the latency writer: it is a
        // measurement, not a fact readers wait for, and its INSERT would otherwise delay every
        // push (or compete with push's read of this block).
        self.parts.latency.send(IngestLatencyRow {
            block_number: head.number,
            block_hash: head.hash_hex(),
            t_detect_ms: t.detect.0,
            t_logs_ms: t.logs.0,
            t_stored_ms: t.stored.0,
            head_lead_ms: t.detect.0 - stamp.block_time_ms,
            trade_count: rows.len() as u32,
            backfilled: u8::from(backfilled),
        });
        crate::telemetry::block_ingested(head.number, backfilled, rows.len(), t);
        self.stats.blocks += 1;
        self.stats.backfilled_blocks += u64::from(backfilled);
        self.stats.trades += rows.len() as u64;
        tracing::debug!(
            block = head.number,
            trades = rows.len(),
            backfilled,
            detect_to_stored_ms = t.stored.0 - t.detect.0,
            detect_to_committed_ms = t_committed.0 - t.detect.0,
            detect_to_logs_ms = t.logs.0 - t.detect.0,
            "block ingested"
        );
    }

    /// Keep `chain_blocks` to [`KEEP_BLOCKS`] (at least the reorg window plus margin).
    pub async fn prune(&self) -> Result<u64, IngestError> {
        let Some(c) = self.cursor else { return Ok(0) };
        let keep = (self.parts.max_reorg_depth * 4 + 64).max(KEEP_BLOCKS);
        let keep_from = c.number.saturating_sub(keep) as i64;
        let client = self.parts.pg.get().await?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use pmw_core::trade::exchange::ORDER_FILLED_TOPICS;
    use pmw_core::types::Address;

    const HASH: [u8; 32] = [7; 32];

    fn head() -> Head {
        Head {
            number: 100,
            hash: HASH,
            parent_hash: [6; 32],
            timestamp: 1_700_000_000,
        }
    }

    fn log(address: Address, block_hash: [u8; 32], topic: [u8; 32]) -> RawLog {
        RawLog {
            address,
            topics: vec![topic],
            data: vec![],
            block_number: 100,
            block_hash,
            tx_hash: [1; 32],
            log_index: 3,
        }
    }

    fn stamp() -> Stamp {
        Stamp {
            block_time_ms: 1_700_000_000_000,
            t_detect_ms: 1_700_000_000_500,
            backfilled: false,
            version: 9,
        }
    }

    #[test]
    fn a_log_of_another_block_hash_is_skipped_not_counted_undecodable() {
        let allow = Allowlist::polymarket();
        let exchange = allow.addresses().next().unwrap();
        let logs = [log(exchange, [8; 32], [0; 32])];
        let (rows, undecodable) = decode_rows(&logs, &head(), &allow, stamp());
        assert!(rows.is_empty());
        assert_eq!(undecodable, 0);
    }

    #[test]
    fn a_log_from_an_unknown_emitter_is_counted_undecodable() {
        let allow = Allowlist::polymarket();
        let logs = [
            log(Address([0xee; 20]), HASH, ORDER_FILLED_TOPICS[0]),
            log(Address([0xef; 20]), HASH, ORDER_FILLED_TOPICS[1]),
        ];
        let (rows, undecodable) = decode_rows(&logs, &head(), &allow, stamp());
        assert!(rows.is_empty());
        assert_eq!(undecodable, 2);
    }

    #[test]
    fn an_exchange_log_that_is_not_a_fill_yields_nothing() {
        let allow = Allowlist::polymarket();
        let exchange = allow.addresses().next().unwrap();
        let logs = [log(exchange, HASH, [0x11; 32])];
        let (rows, undecodable) = decode_rows(&logs, &head(), &allow, stamp());
        assert!(rows.is_empty());
        assert_eq!(undecodable, 0);
    }

    #[test]
    fn a_head_seen_before_a_lower_one_is_still_owed() {
        let at = |number: u64| SeenHead {
            head: Head {
                number,
                hash: [number as u8; 32],
                parent_hash: [number as u8 - 1; 32],
                timestamp: 1_700_000_000 + number,
            },
            t_detect_ms: UnixMs(1_700_000_000_000),
        };
        let cursor = |number: u64| {
            Some(BlockRef {
                number,
                hash: [number as u8; 32],
            })
        };
        // 113 arrived (by a poll) before 112 (by a slow subscription): 112 was the target.
        let book: BTreeMap<u64, SeenHead> = [(113, at(113)), (112, at(112))].into();
        assert_eq!(owed_head(&book, cursor(112)).map(|h| h.number), Some(113));
        assert_eq!(owed_head(&book, cursor(113)), None);
        assert_eq!(owed_head(&book, cursor(120)), None);
        assert_eq!(owed_head(&book, None).map(|h| h.number), Some(113));
        assert_eq!(owed_head(&BTreeMap::new(), cursor(1)), None);
    }
}

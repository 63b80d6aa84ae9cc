//! The hot ledger's reads, and the one ledger readers see: blocks from the seam's floor on are
//! read from the Postgres hot ledger (committed with the watermark, the newest blocks), blocks
//! below it from ClickHouse (the projector filled them before the floor rose past them). Every
//! read keeps per identity `(block_number, log_index, block_hash)` the newest version, drops
//! retracted ones and, in the hot ledger, keeps only rows whose block hash is the committed one:
//! in Postgres that rule is the views `ledger_latest` and `ledger_visible` (migration 0017),
//! which every hot-ledger read selects from.

use std::sync::OnceLock;

use tokio_postgres::types::{Json, ToSql};
use tokio_postgres::{GenericClient, Row};

use crate::ch::{trades, ChClient, TradeRow};
use crate::types::cursor::MAX_LOG_INDEX;
use crate::{Cursor, UnixMs};

mod followed;
pub use followed::{followed_trades_between, token_trades_between, Whose};

/// Blocks per hot-ledger partition (about 5.5 h of Polygon; the retention window keeps several).
pub const PARTITION_BLOCKS: u64 = 10_000;

/// A hot-ledger partition: the blocks `[lo, hi)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Partition {
    pub lo: u64,
    pub hi: u64,
}

/// The partition that holds `block`.
pub fn partition_of(block: u64) -> Partition {
    let lo = block - block % PARTITION_BLOCKS;
    Partition {
        lo,
        hi: lo + PARTITION_BLOCKS,
    }
}

/// The marker of the seam read in `pg_stat_statements`.
pub const SEAM_MARKER: &str = "pmw:ledger_seam";

/// Why a read of the one ledger failed.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error("postgres: {}", crate::pg::describe(.0))]
    Postgres(#[from] tokio_postgres::Error),
    #[error("clickhouse: {0}")]
    ClickHouse(#[from] clickhouse::error::Error),
}

/// Where the hot ledger starts and how far the projector got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seam {
    /// The lowest block the hot ledger holds: blocks below it are read from ClickHouse.
    pub floor: u64,
    /// The projector's `stored_cursor`: every ledger row up to this seq is in ClickHouse.
    pub projected_seq: i64,
}

impl Seam {
    /// The last cursor below the floor (`None`: nothing is below it).
    pub fn below(&self) -> Option<Cursor> {
        self.floor.checked_sub(1).map(|block| Cursor {
            block,
            log_index: MAX_LOG_INDEX,
        })
    }
}

fn sql(cell: &'static OnceLock<String>, text: &str) -> &'static str {
    cell.get_or_init(|| {
        text.replace("{COLUMNS}", TradeRow::COLUMNS)
            .replace("{ledger_insert}", &insert_sql("$1", "$3"))
    })
}

/// The insert of trade rows into the hot ledger (`sql/ledger_insert.sql`, the one place its
/// columns are written) for a statement with an `alloc` CTE giving the seq base: the rows are
/// the JSON array in parameter `rows`, committed at parameter `now` (ms), with no pending fill.
pub fn insert_sql(rows: &str, now: &str) -> String {
    insert_sql_paired(rows, now, "NULL::bigint")
}

/// [`insert_sql`] whose `pending_id` is the SQL expression `pending` (of the row's position
/// `t.n` in `rows`): live's block commit, which pairs trades with pending fills.
pub fn insert_sql_paired(rows: &str, now: &str, pending: &str) -> String {
    include_str!("sql/ledger_insert.sql")
        .replace("{rows}", rows)
        .replace("{now}", now)
        .replace("{pending}", pending)
}

macro_rules! statement {
    ($name:ident, $file:literal) => {
        fn $name() -> &'static str {
            static CELL: OnceLock<String> = OnceLock::new();
            sql(&CELL, include_str!($file))
        }
    };
}
statement!(visible_after_sql, "sql/ledger_visible_after.sql");
statement!(append_sql, "sql/ledger_append.sql");
statement!(latest_between_sql, "sql/ledger_latest_between.sql");
statement!(retracted_between_sql, "sql/ledger_retracted_between.sql");
statement!(wallet_between_sql, "sql/ledger_wallet_between.sql");

/// The rows a ledger read returns, as [`TradeRow`]s.
async fn trades_of(
    c: &impl GenericClient,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Vec<TradeRow>, tokio_postgres::Error> {
    Ok(c.query(sql, params).await?.iter().map(trade_row).collect())
}

/// A ledger row as a [`TradeRow`] (the columns of [`TradeRow::COLUMNS`], in order).
pub fn trade_row(r: &Row) -> TradeRow {
    TradeRow {
        block_number: r.get::<_, i64>(0) as u64,
        log_index: r.get::<_, i32>(1) as u32,
        block_hash: r.get(2),
        tx_hash: r.get(3),
        block_time_ms: r.get(4),
        exchange: r.get(5),
        exchange_version: r.get::<_, i16>(6) as u8,
        order_hash: r.get(7),
        maker: r.get(8),
        taker: r.get(9),
        side: r.get::<_, i16>(10) as u8,
        token_id: r.get(11),
        shares: r.get(12),
        collateral: r.get(13),
        price: r.get(14),
        fee: r.get(15),
        fee_asset: r.get(16),
        t_detect_ms: r.get(17),
        backfilled: r.get::<_, i16>(18) as u8,
        retracted: r.get::<_, i16>(19) as u8,
        version: r.get::<_, i64>(20) as u64,
        audit: r.get::<_, i16>(21) as u8,
    }
}

/// Create and attach partition `p` unless it exists; true when it was created.
pub async fn ensure_partition(
    c: &impl GenericClient,
    p: Partition,
) -> Result<bool, tokio_postgres::Error> {
    Ok(c.query_one(
        include_str!("sql/ledger_partition.sql"),
        &[&(p.lo as i64), &(p.hi as i64)],
    )
    .await?
    .get(0))
}

/// Append `rows` as they are (their versions and retracted flags), seqs in commit order; the
/// caller's transaction decides what commits with them. Their partitions must exist.
pub async fn append(
    c: &impl GenericClient,
    rows: &[TradeRow],
    now: UnixMs,
) -> Result<u64, tokio_postgres::Error> {
    if rows.is_empty() {
        return Ok(0);
    }
    c.execute(append_sql(), &[&Json(rows), &(rows.len() as i64), &now.0])
        .await
}

/// How far ClickHouse is behind the hot ledger (the projector's lag).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Projection {
    /// stored_cursor: every row up to this seq is in ClickHouse.
    pub projected_seq: i64,
    /// The last seq allocated.
    pub head_seq: i64,
    /// The hot ledger's floor.
    pub floor_block: u64,
    /// Commit time of the oldest row not yet in ClickHouse (`None`: caught up).
    pub oldest_unprojected_ms: Option<i64>,
    /// When the projector last moved its cursor.
    pub updated_ms: i64,
}

impl Projection {
    /// Rows not yet in ClickHouse.
    pub fn lag_rows(&self) -> i64 {
        (self.head_seq - self.projected_seq).max(0)
    }

    /// How long the oldest row not yet in ClickHouse has waited at `now` (0: caught up).
    pub fn lag_ms(&self, now: i64) -> i64 {
        self.oldest_unprojected_ms.map_or(0, |t| (now - t).max(0))
    }
}

/// The projector's lag (one tiny row and one index probe).
pub async fn projection(c: &impl GenericClient) -> Result<Projection, tokio_postgres::Error> {
    let r = c
        .query_one(include_str!("sql/ledger_projection.sql"), &[])
        .await?;
    Ok(Projection {
        projected_seq: r.get(0),
        head_seq: r.get(1),
        floor_block: r.get::<_, i64>(2) as u64,
        oldest_unprojected_ms: r.get(3),
        updated_ms: r.get(4),
    })
}

/// Visible hot-ledger trades after `after` up to block `watermark`: what push has still to
/// deliver (`pmwctl status`).
pub async fn waiting(
    c: &impl GenericClient,
    after: Cursor,
    watermark: u64,
) -> Result<u64, tokio_postgres::Error> {
    let n: i64 = c
        .query_one(
            include_str!("sql/ledger_waiting.sql"),
            &[
                &(after.block as i64),
                &(after.log_index as i32),
                &(watermark.min(i64::MAX as u64) as i64),
            ],
        )
        .await?
        .get(0);
    Ok(n as u64)
}

/// The seam (one tiny row).
pub async fn seam(c: &impl GenericClient) -> Result<Seam, tokio_postgres::Error> {
    let r = c
        .query_one(include_str!("sql/ledger_seam.sql"), &[])
        .await?;
    Ok(Seam {
        floor: r.get::<_, i64>(0) as u64,
        projected_seq: r.get(1),
    })
}

/// Visible hot-ledger trades after `after` up to block `upto`, ledger order, at most `limit`.
pub async fn visible_after(
    c: &impl GenericClient,
    after: Cursor,
    upto: u64,
    limit: u64,
) -> Result<Vec<TradeRow>, tokio_postgres::Error> {
    let upto = upto.min(i64::MAX as u64) as i64;
    let limit = limit.min(i64::MAX as u64) as i64;
    trades_of(
        c,
        visible_after_sql(),
        &[
            &(after.block as i64),
            &(after.log_index as i32),
            &upto,
            &limit,
        ],
    )
    .await
}

/// The newest version of every hot-ledger identity in blocks `from..=to`, retracted or not.
pub async fn latest_between(
    c: &impl GenericClient,
    from: u64,
    to: u64,
) -> Result<Vec<TradeRow>, tokio_postgres::Error> {
    trades_of(c, latest_between_sql(), &[&(from as i64), &(to as i64)]).await
}

/// Hot-ledger trades whose newest version is a retraction, in blocks `(after, through]`.
pub async fn retracted_between(
    c: &impl GenericClient,
    after_block: u64,
    through_block: u64,
) -> Result<Vec<TradeRow>, tokio_postgres::Error> {
    trades_of(
        c,
        retracted_between_sql(),
        &[&(after_block as i64), &(through_block as i64)],
    )
    .await
}

/// Visible hot-ledger trades of `wallets` (their own fills) in `(after, through]`.
pub async fn wallet_between(
    c: &impl GenericClient,
    wallets: &[String],
    after: Cursor,
    through: Cursor,
    limit: u64,
) -> Result<Vec<TradeRow>, tokio_postgres::Error> {
    if wallets.is_empty() || through <= after {
        return Ok(Vec::new());
    }
    let limit = limit.min(i64::MAX as u64) as i64;
    trades_of(
        c,
        wallet_between_sql(),
        &[
            &wallets,
            &(after.block as i64),
            &(after.log_index as i32),
            &(through.block as i64),
            &(through.log_index as i32),
            &limit,
        ],
    )
    .await
}

/// When the hot ledger's trade at `cursor` (block hash starting with `hash_prefix`, hex without
/// `0x`) was ingested: its newest not-retracted version (ms), `None` if never held.
pub async fn ingested_ms(
    c: &impl GenericClient,
    cursor: Cursor,
    hash_prefix: &str,
) -> Result<Option<i64>, tokio_postgres::Error> {
    let r = c
        .query_one(
            include_str!("sql/ledger_ingested.sql"),
            &[
                &(cursor.block as i64),
                &(cursor.log_index as i32),
                &format!("0x{hash_prefix}"),
            ],
        )
        .await?;
    Ok(r.get(0))
}

/// The one ledger: when the trade at `cursor` (block hash starting with `hash_prefix`) was
/// ingested, from the hot ledger at or above its floor, from ClickHouse below it.
pub async fn ingested(
    c: &impl GenericClient,
    ch: &ChClient,
    cursor: Cursor,
    hash_prefix: &str,
) -> Result<Option<i64>, LedgerError> {
    if cursor.block >= seam(c).await?.floor {
        return Ok(ingested_ms(c, cursor, hash_prefix).await?);
    }
    Ok(trades::ingested_ms(ch, cursor, hash_prefix).await?)
}

/// The one ledger: visible trades after `after` up to block `upto`, at most `limit`, from
/// ClickHouse below the seam's floor and from the hot ledger from it on.
pub async fn trades_after(
    c: &impl GenericClient,
    ch: &ChClient,
    after: Cursor,
    upto: u64,
    limit: u64,
) -> Result<Vec<TradeRow>, LedgerError> {
    let seam = seam(c).await?;
    let mut out = Vec::new();
    let mut from = after;
    if let Some(below) = seam.below().filter(|b| after < *b) {
        let top = below.block.min(upto);
        out = trades::trades_after(ch, after, top, limit).await?;
        if out.len() as u64 >= limit || upto <= below.block {
            return Ok(out);
        }
        from = below;
    }
    let rest = limit - out.len() as u64;
    out.extend(visible_after(c, from, upto, rest).await?);
    Ok(out)
}

/// The one ledger: visible trades of `wallets` in `(after, through]`, at most `limit`.
pub async fn wallet_trades_between(
    c: &impl GenericClient,
    ch: &ChClient,
    wallets: &[String],
    after: Cursor,
    through: Cursor,
    limit: u64,
) -> Result<Vec<TradeRow>, LedgerError> {
    let seam = seam(c).await?;
    let mut out = Vec::new();
    let mut from = after;
    if let Some(below) = seam.below().filter(|b| after < *b) {
        let top = below.min(through);
        out = trades::wallet_trades_between(ch, wallets, after, top, limit).await?;
        if out.len() as u64 >= limit || through <= below {
            return Ok(out);
        }
        from = below;
    }
    let rest = limit - out.len() as u64;
    out.extend(wallet_between(c, wallets, from, through, rest).await?);
    Ok(out)
}

/// The one ledger: trades whose newest version is a retraction in blocks `(after, through]`.
pub async fn retractions_between(
    c: &impl GenericClient,
    ch: &ChClient,
    after_block: u64,
    through_block: u64,
) -> Result<Vec<TradeRow>, LedgerError> {
    let seam = seam(c).await?;
    let mut out = Vec::new();
    let mut from = after_block;
    if seam.floor > 0 && after_block < seam.floor - 1 {
        let top = (seam.floor - 1).min(through_block);
        out = trades::retracted_between(ch, after_block, top).await?;
        from = top;
    }
    if through_block > from {
        out.extend(retracted_between(c, from, through_block).await?);
    }
    Ok(out)
}

/// The one ledger: the newest version of every identity in blocks `from..=to`.
pub async fn latest_versions_between(
    c: &impl GenericClient,
    ch: &ChClient,
    from: u64,
    to: u64,
) -> Result<Vec<TradeRow>, LedgerError> {
    let seam = seam(c).await?;
    let mut out = Vec::new();
    let mut lo = from;
    if from < seam.floor {
        let top = (seam.floor - 1).min(to);
        out = trades::latest_between(ch, from, top).await?;
        lo = top + 1;
    }
    if lo <= to {
        out.extend(latest_between(c, lo, to).await?);
    }
    Ok(out)
}

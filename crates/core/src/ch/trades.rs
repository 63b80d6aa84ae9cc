//! Trade rows in ClickHouse: the write path (`trades` and the per-wallet copy, keyed by the fill's
//! maker) and de-duplicated reads by cursor. Rows are re-inserted after a crash and retracted by a
//! newer version after a reorg, so every read keeps only the latest version of each identity
//! `(block_number, log_index, block_hash)` and then drops retracted ones.

use serde::{Deserialize, Serialize};

use super::latency::insert_all;
use super::statements as sql;
use crate::ch::ChClient;
use crate::trade::{format_units6, Fill, Side};
use crate::types::Cursor;

/// Declares a struct carrying a fill's fields: the one declaration of them (names, types, order
/// and documentation) for the stored row ([`TradeRow`]), its per-wallet copy ([`WalletTradeRow`])
/// and the message's `trade` ([`crate::message::Trade`]). Each gives its own attributes, the
/// fields that come before the fill's, the type and documentation of `side` (stored as 0/1, sent
/// as `BUY`/`SELL`) and, with `stored`, the ledger's fields after them. The order is the JSON
/// field order and ClickHouse's column order; a conversion between them names every field, so a
/// field added here fails to compile until each conversion carries it.
macro_rules! fill_struct {
    (@define $(#[$attr:meta])* pub struct $name:ident { $($lead:tt)* }
     $(#[$side_attr:meta])* side: $side:ty, { $($tail:tt)* }) => {
        $(#[$attr])*
        pub struct $name {
            $($lead)*
            pub block_number: u64,
            pub log_index: u32,
            pub block_hash: String,
            pub tx_hash: String,
            pub block_time_ms: i64,
            pub exchange: String,
            pub exchange_version: u8,
            pub order_hash: String,
            pub maker: String,
            pub taker: String,
            $(#[$side_attr])*
            pub side: $side,
            pub token_id: String,
            pub shares: String,
            pub collateral: String,
            pub price: String,
            pub fee: String,
            /// `collateral` or `shares` (V1 BUY pays its fee in outcome shares).
            pub fee_asset: String,
            $($tail)*
        }
    };
    ($(#[$attr:meta])* pub struct $name:ident { $($lead:tt)* }
     $(#[$side_attr:meta])* side: $side:ty, stored) => {
        $crate::ch::trades::fill_struct! {
            @define $(#[$attr])* pub struct $name { $($lead)* } $(#[$side_attr])* side: $side, {
                pub t_detect_ms: i64,
                pub backfilled: u8,
                pub retracted: u8,
                pub version: u64,
                /// 1 when pmw-live's completeness audit found the fill missing and stored it (then
                /// `backfilled` is 1 too and `t_detect_ms` is the audit's time).
                pub audit: u8,
            }
        }
    };
    ($(#[$attr:meta])* pub struct $name:ident { $($lead:tt)* }
     $(#[$side_attr:meta])* side: $side:ty $(,)?) => {
        $crate::ch::trades::fill_struct! {
            @define $(#[$attr])* pub struct $name { $($lead)* } $(#[$side_attr])* side: $side, {}
        }
    };
}
pub(crate) use fill_struct;

fill_struct! {
    /// One decoded `OrderFilled`, as stored. Amounts are exact decimal strings (6 decimals
    /// applied).
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, clickhouse::Row)]
    pub struct TradeRow {}
    /// 0 = BUY, 1 = SELL, from the maker's (the fill owner's) point of view.
    side: u8,
    stored
}

fill_struct! {
    /// The per-wallet copy: the same row keyed by `wallet` (= `maker`, the owner of the fill).
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, clickhouse::Row)]
    pub struct WalletTradeRow {
        pub wallet: String,
    }
    /// 0 = BUY, 1 = SELL, as in [`TradeRow`].
    side: u8,
    stored
}

impl TradeRow {
    /// The row's columns, in field order: what every read of trades (the hot ledger's in
    /// Postgres, ClickHouse's) selects, and what [`crate::pg::ledger::trade_row`] maps by
    /// position. Tested against the fields and the tables' columns.
    pub const COLUMNS: &'static str = "block_number, log_index, block_hash, tx_hash, \
        block_time_ms, exchange, exchange_version, order_hash, maker, taker, side, token_id, \
        shares, collateral, price, fee, fee_asset, t_detect_ms, backfilled, retracted, version, \
        audit";

    /// When the newest live (not backfilled) row's block was detected: what the stage lines of
    /// a round (push's) or a round part (an edge's) measure from.
    pub fn newest_live_detect_ms<'a>(rows: impl IntoIterator<Item = &'a TradeRow>) -> Option<i64> {
        rows.into_iter()
            .filter(|r| r.backfilled == 0)
            .map(|r| r.t_detect_ms)
            .max()
    }

    /// The stored form of a decoded fill. `version` orders re-inserts and retractions.
    pub fn from_fill(
        fill: &Fill,
        block_time_ms: i64,
        t_detect_ms: i64,
        backfilled: bool,
        version: u64,
    ) -> TradeRow {
        TradeRow {
            block_number: fill.block_number,
            log_index: fill.log_index,
            block_hash: format!("0x{}", hex::encode(fill.block_hash)),
            tx_hash: format!("0x{}", hex::encode(fill.tx_hash)),
            block_time_ms,
            exchange: fill.exchange.to_lower_hex(),
            exchange_version: fill.version.number(),
            order_hash: format!("0x{}", hex::encode(fill.order_hash)),
            maker: fill.maker.to_lower_hex(),
            taker: fill.taker.to_lower_hex(),
            side: match fill.side {
                Side::Buy => 0,
                Side::Sell => 1,
            },
            token_id: fill.token_id.to_string(),
            shares: format_units6(fill.shares),
            collateral: format_units6(fill.collateral),
            price: fill.price().text,
            fee: format_units6(fill.fee),
            fee_asset: fill.fee_asset.as_str().to_string(),
            t_detect_ms,
            backfilled: u8::from(backfilled),
            retracted: 0,
            version,
            audit: 0,
        }
    }

    pub fn cursor(&self) -> Cursor {
        Cursor {
            block: self.block_number,
            log_index: self.log_index,
        }
    }

    /// The per-wallet copy of this row: owned by its maker, never its taker.
    pub fn for_wallet(&self) -> WalletTradeRow {
        let t = self.clone();
        WalletTradeRow {
            wallet: t.maker.clone(),
            block_number: t.block_number,
            log_index: t.log_index,
            block_hash: t.block_hash,
            tx_hash: t.tx_hash,
            block_time_ms: t.block_time_ms,
            exchange: t.exchange,
            exchange_version: t.exchange_version,
            order_hash: t.order_hash,
            maker: t.maker,
            taker: t.taker,
            side: t.side,
            token_id: t.token_id,
            shares: t.shares,
            collateral: t.collateral,
            price: t.price,
            fee: t.fee,
            fee_asset: t.fee_asset,
            t_detect_ms: t.t_detect_ms,
            backfilled: t.backfilled,
            retracted: t.retracted,
            version: t.version,
            audit: t.audit,
        }
    }
}

/// Insert trades into `trades` and their per-wallet copies into `trades_by_wallet`.
pub async fn insert_trades(
    ch: &ChClient,
    rows: &[TradeRow],
) -> Result<(), clickhouse::error::Error> {
    insert_all(ch, "trades", rows).await?;
    let by_wallet: Vec<WalletTradeRow> = rows.iter().map(TradeRow::for_wallet).collect();
    insert_all(ch, "trades_by_wallet", &by_wallet).await
}

/// Visible trades after `after`, up to and including block `up_to` (the ingest watermark), in
/// ledger order, at most `limit`.
///
/// First the raw versions, de-duplicated here ([`super::visible::latest_visible`]): on a table
/// with fresh parts (every block adds one) ClickHouse's `LIMIT 1 BY` pipeline costs more than
/// reading the rows. When the versions reach their bound (a large catch-up), the complete
/// positions among them answer if they hold `limit` visible trades, else the de-duplicating
/// statement does, so the result is the same either way.
pub async fn trades_after(
    ch: &ChClient,
    after: Cursor,
    up_to: u64,
    limit: u64,
) -> Result<Vec<TradeRow>, clickhouse::error::Error> {
    let bound = limit.saturating_mul(2).saturating_add(64);
    let mut versions: Vec<TradeRow> = ch
        .query(&sql::VERSIONS_AFTER.replace("{COLUMNS}", TradeRow::COLUMNS))
        .bind(after.block)
        .bind(up_to)
        .bind(after.block)
        .bind(after.log_index)
        .bind(bound)
        .fetch_all()
        .await?;
    if (versions.len() as u64) < bound {
        return Ok(super::visible::latest_visible(versions, limit));
    }
    // Cut by the bound: every position before the last one read is complete.
    if let Some(last) = versions.last().map(|r| (r.block_number, r.log_index)) {
        versions.retain(|r| (r.block_number, r.log_index) < last);
    }
    let visible = super::visible::latest_visible(versions, limit);
    if visible.len() as u64 >= limit {
        return Ok(visible);
    }
    deduplicated_after(ch, after, up_to, limit).await
}

/// [`trades_after`] with ClickHouse de-duplicating (any size).
pub async fn deduplicated_after(
    ch: &ChClient,
    after: Cursor,
    up_to: u64,
    limit: u64,
) -> Result<Vec<TradeRow>, clickhouse::error::Error> {
    let sql = sql::TRADES_AFTER.replace("{COLUMNS}", TradeRow::COLUMNS);
    ch.query(&sql)
        .bind(after.block)
        .bind(up_to)
        .bind(after.block)
        .bind(after.log_index)
        .bind(limit)
        .fetch_all()
        .await
}

/// The visible trades of one block (number and hash), in log order.
pub async fn trades_of_block(
    ch: &ChClient,
    block_number: u64,
    block_hash: &str,
) -> Result<Vec<TradeRow>, clickhouse::error::Error> {
    let sql = sql::TRADES_OF_BLOCK.replace("{COLUMNS}", TradeRow::COLUMNS);
    ch.query(&sql)
        .bind(block_number)
        .bind(block_hash)
        .fetch_all()
        .await
}

/// Retract the visible trades of an orphaned block: re-insert them with `retracted = 1` and a
/// newer `version`. Idempotent. Returns the retracted rows (as they were before retraction).
pub async fn retract_block(
    ch: &ChClient,
    block_number: u64,
    block_hash: &str,
    version: u64,
) -> Result<Vec<TradeRow>, clickhouse::error::Error> {
    let visible = trades_of_block(ch, block_number, block_hash).await?;
    let retractions: Vec<TradeRow> = visible
        .iter()
        .cloned()
        .map(|mut r| {
            r.retracted = 1;
            r.version = version.max(r.version + 1);
            r
        })
        .collect();
    insert_trades(ch, &retractions).await?;
    Ok(visible)
}

/// Retract every visible trade above block `watermark`: rows a writer stored and never committed
/// (it died, lost its lock or failed between the ClickHouse insert and the Postgres commit).
/// Readers never look above the watermark, so these were never seen; retracting them before the
/// watermark passes them again keeps an orphaned block's rows from ever becoming visible. The
/// retraction's `version` is at least `version`; returns the highest version written (or
/// `version` when there was nothing).
pub async fn retract_above(
    ch: &ChClient,
    watermark: u64,
    version: u64,
) -> Result<(Vec<TradeRow>, u64), clickhouse::error::Error> {
    let sql = sql::VISIBLE_ABOVE.replace("{COLUMNS}", TradeRow::COLUMNS);
    let visible: Vec<TradeRow> = ch.query(&sql).bind(watermark).fetch_all().await?;
    let mut top = version;
    let retractions: Vec<TradeRow> = visible
        .iter()
        .cloned()
        .map(|mut r| {
            r.retracted = 1;
            r.version = version.max(r.version + 1);
            top = top.max(r.version);
            r
        })
        .collect();
    insert_trades(ch, &retractions).await?;
    Ok((visible, top))
}

/// The latest version of every trade identity in blocks `from..=to`, retracted or not, in
/// ledger order: what the completeness audit compares with the chain.
pub async fn latest_between(
    ch: &ChClient,
    from: u64,
    to: u64,
) -> Result<Vec<TradeRow>, clickhouse::error::Error> {
    let sql = sql::LATEST_BETWEEN.replace("{COLUMNS}", TradeRow::COLUMNS);
    ch.query(&sql).bind(from).bind(to).fetch_all().await
}

/// Trades whose latest version is a retraction, in blocks `(after_block, through_block]`.
pub async fn retracted_between(
    ch: &ChClient,
    after_block: u64,
    through_block: u64,
) -> Result<Vec<TradeRow>, clickhouse::error::Error> {
    let sql = sql::RETRACTED_BETWEEN.replace("{COLUMNS}", TradeRow::COLUMNS);
    ch.query(&sql)
        .bind(after_block)
        .bind(through_block)
        .fetch_all()
        .await
}

/// Visible trades of `wallets` (their own fills) in `(after, through]`, ledger order, at most
/// `limit`: the per-wallet table read for resumes and keyset backfill.
pub async fn wallet_trades_between(
    ch: &ChClient,
    wallets: &[String],
    after: Cursor,
    through: Cursor,
    limit: u64,
) -> Result<Vec<TradeRow>, clickhouse::error::Error> {
    let list = Inlined {
        sql: sql::WALLET_TRADES_BETWEEN,
        items: wallets,
        valid: |w| crate::Address::is_lower_hex(w),
        what: "lowercase wallet address",
    };
    list.between(ch, after, through, limit).await
}

/// Visible trades of outcome `tokens` (followed markets, any wallet's fills) in `(after,
/// through]`, ledger order, at most `limit`.
pub async fn token_trades_between(
    ch: &ChClient,
    tokens: &[String],
    after: Cursor,
    through: Cursor,
    limit: u64,
) -> Result<Vec<TradeRow>, clickhouse::error::Error> {
    let list = Inlined {
        sql: sql::TOKEN_TRADES_BETWEEN,
        items: tokens,
        valid: |t| !t.is_empty() && t.len() <= 78 && t.bytes().all(|b| b.is_ascii_digit()),
        what: "decimal token id",
    };
    list.between(ch, after, through, limit).await
}

/// A statement whose `{list}` is inlined (ClickHouse 18.16 binds no arrays): every item must
/// pass `valid`, so nothing but a wallet address or a token id ever reaches the SQL text.
struct Inlined<'a> {
    sql: &'static str,
    items: &'a [String],
    valid: fn(&str) -> bool,
    what: &'static str,
}

impl Inlined<'_> {
    async fn between(
        &self,
        ch: &ChClient,
        after: Cursor,
        through: Cursor,
        limit: u64,
    ) -> Result<Vec<TradeRow>, clickhouse::error::Error> {
        if self.items.is_empty() || through <= after {
            return Ok(Vec::new());
        }
        if let Some(bad) = self.items.iter().find(|i| !(self.valid)(i)) {
            return Err(clickhouse::error::Error::Custom(format!(
                "not a {}: {bad:?}",
                self.what
            )));
        }
        let list = self
            .items
            .iter()
            .map(|i| format!("'{i}'"))
            .collect::<Vec<_>>()
            .join(",");
        let sql = self
            .sql
            .replace("{COLUMNS}", TradeRow::COLUMNS)
            .replace("{list}", &list);
        ch.query(&sql)
            .bind(after.block)
            .bind(through.block)
            .bind(after.block)
            .bind(after.log_index)
            .bind(through.block)
            .bind(through.log_index)
            .bind(limit)
            .fetch_all()
            .await
    }
}

/// When the trade at `cursor` in the block whose hash starts with `hash_prefix` (hex, no `0x`)
/// was ingested: the newest version of its not-retracted row, in ms. `None` if never stored.
pub async fn ingested_ms(
    ch: &ChClient,
    cursor: Cursor,
    hash_prefix: &str,
) -> Result<Option<i64>, clickhouse::error::Error> {
    let v: u64 = ch
        .query(sql::INGESTED_VERSION)
        .bind(cursor.block)
        .bind(cursor.log_index)
        .bind(format!("0x{hash_prefix}"))
        .fetch_one()
        .await?;
    Ok((v > 0).then_some(v as i64))
}

/// Trades stored after `after` up to block `watermark`: what push has still to deliver
/// (`pmwctl status`). Each trade counts once (its newest version), retracted ones not at all.
pub async fn waiting(
    ch: &ChClient,
    after: Cursor,
    watermark: u64,
) -> Result<u64, clickhouse::error::Error> {
    ch.query(sql::TRADES_WAITING)
        .bind(after.block)
        .bind(watermark)
        .bind(after.block)
        .bind(after.log_index)
        .fetch_one()
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_columns_every_read_selects_are_the_rows_fields_in_order() {
        use clickhouse::Row;
        assert_eq!(TradeRow::COLUMNS, TradeRow::COLUMN_NAMES.join(", "));
    }
}

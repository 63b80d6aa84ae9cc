//! Postgres reads around the trade ledger that the backfill and replay share: the wallets an
//! account follows, cached market names, the ingest and finalized watermarks; and the bound of
//! one backfill page's ClickHouse scan ([`scan_through`]), below the hot ledger's floor only.

use std::collections::HashMap;

use pmw_core::ch::TradeRow;
use pmw_core::message::Market;
use pmw_core::{pg, Address, Cursor};

use crate::error::ApiError;

/// Market names cached in Postgres for the rows' tokens (resolved ones only).
pub async fn markets(
    c: &super::txn::Client,
    rows: &[TradeRow],
) -> Result<HashMap<String, Market>, ApiError> {
    Ok(pg::market_names_of(&***c, rows).await?)
}

/// The ingest watermark as the last cursor a reader may see.
pub async fn watermark(c: &super::txn::Client) -> Result<Option<Cursor>, ApiError> {
    Ok(pg::watermark(&***c).await?.map(pg::watermark_cursor))
}

/// The finalized watermark (the highest ingested block the chain calls finalized), if any.
pub async fn finalized(c: &super::txn::Client) -> Result<Option<u64>, ApiError> {
    Ok(c.query_opt(include_str!("sql/finalized.sql"), &[])
        .await?
        .map(|r| r.get::<_, i64>(0) as u64))
}

/// The lowercase wallets the account follows.
pub async fn followed(c: &super::txn::Client, account_id: i64) -> Result<Vec<String>, ApiError> {
    Ok(c.query(include_str!("sql/followed.sql"), &[&account_id])
        .await?
        .iter()
        .map(|r| format!("0x{}", hex::encode(r.get::<_, &[u8]>(0))))
        .collect())
}

/// Most blocks one `GET /v1/trades` page scans, counted from the first block after its cursor
/// holding a trade of its wallets (about 2.3 days of Polygon): a busy wallet's history is read
/// a span at a time, never whole, on the ClickHouse push reads from.
pub const MAX_BLOCK_SPAN: u64 = 100_000;
/// The log index of a span's end cursor: after every trade of its last block.
const END_OF_BLOCK: u32 = 999_999;

/// Where a page after `after` stops scanning: `through`, or the end of [`MAX_BLOCK_SPAN`] blocks
/// from the first block holding a trade of `whose` wallets when that comes first (from `after`
/// when it follows markets too: any block may hold one of their fills). `None` when nothing is
/// followed or no trade of the wallets lies in the range. Wallets are lowercase `0x…` addresses.
pub async fn scan_through(
    c: &super::txn::Client,
    ch: &pmw_core::ch::ChClient,
    whose: pg::ledger::Whose<'_>,
    after: Cursor,
    through: Cursor,
) -> Result<Option<Cursor>, ApiError> {
    let wallets = whose.wallets;
    if (wallets.is_empty() && whose.tokens.is_empty()) || through <= after {
        return Ok(None);
    }
    // From the hot ledger's floor on, the page reads Postgres (bounded by its limit): no scan.
    let seam = pg::ledger::seam(&***c).await?;
    if seam.below().is_none_or(|b| after >= b) {
        return Ok(Some(through));
    }
    if !whose.tokens.is_empty() {
        return Ok(span_end(after.block, through));
    }
    if let Some(bad) = wallets.iter().find(|w| !Address::is_lower_hex(w)) {
        return Err(ApiError::unprocessable(
            "invalid_address",
            format!("{bad:?}"),
        ));
    }
    let list = wallets
        .iter()
        .map(|w| format!("'{w}'"))
        .collect::<Vec<_>>()
        .join(",");
    let first: u64 = ch
        .query(&include_str!("sql/wallets_first_block.sql").replace("{list}", &list))
        .bind(after.block)
        .bind(through.block)
        .fetch_one()
        .await?;
    Ok(span_end(first.max(after.block), through))
}

/// The end of the span starting at block `first`, or `through` when nearer (pure).
fn span_end(first: u64, through: Cursor) -> Option<Cursor> {
    if first > through.block {
        return None;
    }
    let end = first.saturating_add(MAX_BLOCK_SPAN - 1);
    Some(if end < through.block {
        Cursor {
            block: end,
            log_index: END_OF_BLOCK,
        }
    } else {
        through
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scan_spans_at_most_max_block_span_blocks() {
        let through = Cursor {
            block: 1_000_000,
            log_index: 3,
        };
        assert_eq!(
            span_end(10, through),
            Some(Cursor {
                block: 10 + MAX_BLOCK_SPAN - 1,
                log_index: END_OF_BLOCK
            })
        );
        assert_eq!(span_end(through.block - 5, through), Some(through));
        assert_eq!(span_end(through.block + 1, through), None);
    }
}

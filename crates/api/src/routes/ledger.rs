//! Postgres reads around the trade ledger that the backfill and replay share: the wallets an
//! account follows, cached market names, the ingest and finalized watermarks.

use std::collections::HashMap;

use pmw_core::ch::TradeRow;
use pmw_core::message::Market;
use pmw_core::{pg, Cursor};

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

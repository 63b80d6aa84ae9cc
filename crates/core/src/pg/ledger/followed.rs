//! The one ledger's reads for a subscriber that follows markets besides wallets: the visible
//! trades of its wallets (their own fills) and of its markets' outcome tokens (any wallet's),
//! merged in ledger order, each identity once (a fill of a followed wallet in a followed market
//! is one row).

use tokio_postgres::GenericClient;

use super::{seam, sql, trades_of, wallet_trades_between, LedgerError};
use crate::ch::{trades, ChClient, TradeRow};
use crate::Cursor;

/// What a subscriber follows, as the ledger is read for it.
#[derive(Debug, Clone, Copy)]
pub struct Whose<'a> {
    /// Lowercase `0x…` wallets.
    pub wallets: &'a [String],
    /// Decimal outcome token ids of the followed markets.
    pub tokens: &'a [String],
}

fn token_between_sql() -> &'static str {
    static CELL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    sql(&CELL, include_str!("../sql/ledger_token_between.sql"))
}

/// The one ledger: visible trades of `whose` in `(after, through]`, ledger order, at most
/// `limit`.
pub async fn followed_trades_between(
    c: &impl GenericClient,
    ch: &ChClient,
    whose: Whose<'_>,
    after: Cursor,
    through: Cursor,
    limit: u64,
) -> Result<Vec<TradeRow>, LedgerError> {
    let by_wallet = wallet_trades_between(c, ch, whose.wallets, after, through, limit).await?;
    if whose.tokens.is_empty() {
        return Ok(by_wallet);
    }
    let by_token = token_trades_between(c, ch, whose.tokens, after, through, limit).await?;
    Ok(merge(by_wallet, by_token, limit))
}

/// The one ledger: visible trades of outcome `tokens` (any wallet's) in `(after, through]`.
pub async fn token_trades_between(
    c: &impl GenericClient,
    ch: &ChClient,
    tokens: &[String],
    after: Cursor,
    through: Cursor,
    limit: u64,
) -> Result<Vec<TradeRow>, LedgerError> {
    let seam = seam(c).await?;
    let mut out = Vec::new();
    let mut from = after;
    if let Some(below) = seam.below().filter(|b| after < *b) {
        let top = below.min(through);
        out = trades::token_trades_between(ch, tokens, after, top, limit).await?;
        if out.len() as u64 >= limit || through <= below {
            return Ok(out);
        }
        from = below;
    }
    let rest = limit - out.len() as u64;
    if tokens.is_empty() || through <= from {
        return Ok(out);
    }
    let rest = rest.min(i64::MAX as u64) as i64;
    out.extend(
        trades_of(
            c,
            token_between_sql(),
            &[
                &tokens,
                &(from.block as i64),
                &(from.log_index as i32),
                &(through.block as i64),
                &(through.log_index as i32),
                &rest,
            ],
        )
        .await?,
    );
    Ok(out)
}

/// Two ledger-ordered lists as one, each identity once, at most `limit` rows.
fn merge(a: Vec<TradeRow>, b: Vec<TradeRow>, limit: u64) -> Vec<TradeRow> {
    let key = |r: &TradeRow| (r.cursor(), r.block_hash.clone());
    let mut out: Vec<TradeRow> = a.into_iter().chain(b).collect();
    out.sort_by_key(key);
    out.dedup_by_key(|r| key(r));
    out.truncate(limit.min(usize::MAX as u64) as usize);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(block: u64, maker: &str) -> TradeRow {
        TradeRow {
            block_number: block,
            log_index: 0,
            block_hash: format!("0x{block:064x}"),
            tx_hash: "0xbb".into(),
            block_time_ms: 0,
            exchange: "0xcc".into(),
            exchange_version: 2,
            order_hash: "0xdd".into(),
            maker: maker.into(),
            taker: "0x22".into(),
            side: 0,
            token_id: "99".into(),
            shares: "2".into(),
            collateral: "1".into(),
            price: "0.5".into(),
            fee: "0".into(),
            fee_asset: "collateral".into(),
            t_detect_ms: 0,
            backfilled: 0,
            retracted: 0,
            version: 1,
            audit: 0,
        }
    }

    #[test]
    fn a_fill_of_a_followed_wallet_in_a_followed_market_is_read_once_in_ledger_order() {
        let wallets = vec![row(1, "0xa"), row(3, "0xa")];
        let tokens = vec![row(2, "0xb"), row(3, "0xa"), row(4, "0xc")];
        let merged = merge(wallets, tokens, 10);
        let blocks: Vec<u64> = merged.iter().map(|r| r.block_number).collect();
        assert_eq!(blocks, vec![1, 2, 3, 4]);
        assert_eq!(merge(merged, Vec::new(), 2).len(), 2);
    }
}

//! `GET /v1/trades`: keyset pagination over the per-wallet trades in ClickHouse, by cursor
//! `(block, log_index)`, never by offset, and never past the ingest watermark (so a page never
//! skips a trade that becomes visible later). Trades have the shape of the pushed `trade`
//! messages (without `type` and `t_push_ms`).

use std::collections::HashMap;

use axum::extract::State;
use axum::Json;
use pmw_core::store::{trades, TradeRow};
use pmw_core::types::cursor::MAX_LOG_INDEX;
use pmw_core::Cursor;
use pmw_push::payload::Market;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::subscriptions::parse_wallet;
use crate::auth::Auth;
use crate::error::{ApiError, ErrorBody};
use crate::extract::ApiQuery;
use crate::AppState;

/// Default page size.
pub const DEFAULT_LIMIT: u32 = 100;
/// Largest page size.
pub const MAX_LIMIT: u32 = 1_000;

/// The fill itself. Amounts are exact decimal strings (6 decimals applied).
#[derive(Debug, Clone, Serialize, ToSchema, PartialEq)]
pub struct TradeFill {
    /// The wallet that owns the fill (its maker).
    pub wallet: String,
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
    /// `BUY` or `SELL`, from the wallet's point of view.
    pub side: String,
    pub token_id: String,
    pub shares: String,
    pub collateral: String,
    pub price: String,
    pub fee: String,
    pub fee_asset: String,
}

/// Market metadata, when resolved.
#[derive(Debug, Clone, Serialize, ToSchema, PartialEq)]
pub struct MarketOut {
    pub question: Option<String>,
    pub outcome: Option<String>,
    pub slug: Option<String>,
    pub condition_id: Option<String>,
}

/// One trade, shaped like the pushed `trade` message.
#[derive(Debug, Clone, Serialize, ToSchema, PartialEq)]
pub struct TradeOut {
    #[schema(example = "000081234567-000042")]
    pub cursor: String,
    pub t_detect_ms: i64,
    pub backfilled: bool,
    pub trade: TradeFill,
    pub market: Option<MarketOut>,
}

impl TradeOut {
    pub fn from_row(row: &TradeRow, market: Option<&Market>) -> TradeOut {
        TradeOut {
            cursor: row.cursor().to_string(),
            t_detect_ms: row.t_detect_ms,
            backfilled: row.backfilled == 1,
            trade: TradeFill {
                wallet: row.maker.clone(),
                block_number: row.block_number,
                log_index: row.log_index,
                block_hash: row.block_hash.clone(),
                tx_hash: row.tx_hash.clone(),
                block_time_ms: row.block_time_ms,
                exchange: row.exchange.clone(),
                exchange_version: row.exchange_version,
                order_hash: row.order_hash.clone(),
                maker: row.maker.clone(),
                taker: row.taker.clone(),
                side: if row.side == 0 { "BUY" } else { "SELL" }.into(),
                token_id: row.token_id.clone(),
                shares: row.shares.clone(),
                collateral: row.collateral.clone(),
                price: row.price.clone(),
                fee: row.fee.clone(),
                fee_asset: row.fee_asset.clone(),
            },
            market: market.map(|m| MarketOut {
                question: m.question.clone(),
                outcome: m.outcome.clone(),
                slug: m.slug.clone(),
                condition_id: m.condition_id.clone(),
            }),
        }
    }
}

/// A page of trades.
#[derive(Debug, Serialize, ToSchema)]
pub struct TradePage {
    pub trades: Vec<TradeOut>,
    /// Pass as `after` for the next page (the last trade's cursor, or `after` when empty).
    pub next: String,
    /// More trades are available now beyond this page.
    pub more: bool,
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct TradeQuery {
    /// One wallet; default: every wallet the account follows.
    pub wallet: Option<String>,
    /// Trades strictly after this cursor (`BBBBBBBBBBBB-LLLLLL`); default: from the start.
    pub after: Option<String>,
    /// Page size, 1..=1000 (default 100).
    pub limit: Option<u32>,
}

/// Parse a cursor: 400 when it is not one.
pub fn parse_cursor(s: &str) -> Result<Cursor, ApiError> {
    s.parse::<Cursor>()
        .map_err(|e| ApiError::bad_request("invalid_cursor", format!("{s:?}: {e}")))
}

/// Check a page size: 422 outside `1..=max`.
pub fn check_limit(limit: Option<u32>, default: u32, max: u32) -> Result<u32, ApiError> {
    match limit.unwrap_or(default) {
        n if (1..=max).contains(&n) => Ok(n),
        n => Err(ApiError::unprocessable(
            "invalid_limit",
            format!("limit must be between 1 and {max}, got {n}"),
        )),
    }
}

/// Market names cached in Postgres for `tokens` (resolved ones only).
pub async fn markets(
    c: &super::Client,
    rows: &[TradeRow],
) -> Result<HashMap<String, Market>, ApiError> {
    let mut tokens: Vec<&str> = rows.iter().map(|r| r.token_id.as_str()).collect();
    tokens.sort_unstable();
    tokens.dedup();
    if tokens.is_empty() {
        return Ok(HashMap::new());
    }
    let found = c
        .query(
            "SELECT token_id, question, outcome, slug, condition_id FROM market_names \
             WHERE token_id = ANY($1) AND status = 'resolved'",
            &[&tokens],
        )
        .await?;
    Ok(found
        .iter()
        .map(|r| {
            (
                r.get(0),
                Market {
                    question: r.get(1),
                    outcome: r.get(2),
                    slug: r.get(3),
                    condition_id: r.get(4),
                },
            )
        })
        .collect())
}

/// The ingest watermark as the last cursor a reader may see.
pub async fn watermark(c: &super::Client) -> Result<Option<Cursor>, ApiError> {
    Ok(
        c.query_opt("SELECT block_number FROM ingest_cursor WHERE id = 1", &[])
            .await?
            .map(|r| Cursor {
                block: r.get::<_, i64>(0) as u64,
                log_index: MAX_LOG_INDEX,
            }),
    )
}

/// The lowercase wallets the account follows.
pub async fn followed(c: &super::Client, account_id: i64) -> Result<Vec<String>, ApiError> {
    Ok(c.query(
        "SELECT wallet FROM subscriptions WHERE account_id = $1",
        &[&account_id],
    )
    .await?
    .iter()
    .map(|r| format!("0x{}", hex::encode(r.get::<_, &[u8]>(0))))
    .collect())
}

/// Trades of one wallet (or of every followed wallet) after a cursor, in ledger order.
#[utoipa::path(get, path = "/v1/trades", tag = "trades", security(("api_key" = [])),
    params(TradeQuery),
    responses((status = 200, body = TradePage), (status = 400, body = ErrorBody, description = "invalid cursor or query"),
        (status = 422, body = ErrorBody, description = "invalid wallet or limit")))]
pub async fn list(
    State(st): State<AppState>,
    who: Auth,
    ApiQuery(q): ApiQuery<TradeQuery>,
) -> Result<Json<TradePage>, ApiError> {
    let after = match &q.after {
        Some(s) => parse_cursor(s)?,
        None => Cursor::ORIGIN,
    };
    let limit = check_limit(q.limit, DEFAULT_LIMIT, MAX_LIMIT)?;
    let c = st.pg.get().await?;
    let wallets = match &q.wallet {
        Some(w) => vec![parse_wallet(w)?.to_lower_hex()],
        None => followed(&c, who.account_id).await?,
    };
    let Some(through) = watermark(&c).await? else {
        return Ok(Json(TradePage {
            trades: vec![],
            next: after.to_string(),
            more: false,
        }));
    };
    let mut rows =
        trades::wallet_trades_between(&st.ch, &wallets, after, through, u64::from(limit) + 1)
            .await?;
    let more = rows.len() > limit as usize;
    rows.truncate(limit as usize);
    let names = markets(&c, &rows).await?;
    let next = rows.last().map_or(after, TradeRow::cursor).to_string();
    Ok(Json(TradePage {
        trades: rows
            .iter()
            .map(|r| TradeOut::from_row(r, names.get(&r.token_id)))
            .collect(),
        next,
        more,
    }))
}

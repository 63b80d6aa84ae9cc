//! `GET /v1/trades`: keyset pagination over the one ledger's per-wallet trades (the Postgres hot
//! ledger, ClickHouse below its floor: `pmw_core::pg::ledger`), by cursor
//! `(block, log_index)`, never by offset, and never past the ingest watermark (so a page never
//! skips a trade that becomes visible later). Trades have the shape of the pushed `trade`
//! messages (without `type` and `t_push_ms`). By default a page holds what the WebSocket sends:
//! each followed wallet's subscription filter applies, and without `wallet` the followed markets'
//! fills passing their filters are listed too, each trade once (after the page is read, so a
//! page can hold fewer than `limit` trades while `more` is true); `unfiltered=true` lists every
//! trade of them.
//! One page scans at most [`super::ledger::MAX_BLOCK_SPAN`] blocks from the first block after its cursor that
//! holds a trade of its wallets: a page that reached that bound has `more` true and `next` at
//! the bound's end, where the next page continues (the keyset contract is unchanged).

use axum::extract::State;
use axum::Json;
use pmw_core::ch::TradeRow;
use std::collections::HashMap;

use pmw_core::filter::{self, Facts, Filter};
use pmw_core::message::TradeMessage;
use pmw_core::pg::ledger as one;
use pmw_core::{pg, Cursor};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::ledger::{finalized, followed, markets, scan_through, watermark};
use super::params::{check_limit, parse_cursor, parse_wallet};
use crate::auth::Auth;
use crate::error::{ApiError, ErrorBody};
use crate::extract::ApiQuery;
use crate::AppState;

/// Default page size.
pub const DEFAULT_LIMIT: u32 = 100;
/// Largest page size.
pub const MAX_LIMIT: u32 = 1_000;

/// A page of trades.
#[derive(Debug, Serialize, ToSchema)]
pub struct TradePage {
    pub trades: Vec<TradeMessage>,
    /// Pass as `after` for the next page (the cursor of the last trade read, returned or
    /// filtered out; the end of the scanned span when the page stopped at the scan bound;
    /// `after` when none was read).
    pub next: String,
    /// More trades may be available now beyond this page (the page was full, or stopped at the
    /// scan bound of 100000 blocks).
    pub more: bool,
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct TradeQuery {
    /// One wallet; default: every wallet the account follows. Mixed case must carry a valid
    /// EIP-55 checksum.
    #[param(pattern = r"^0x[0-9a-fA-F]{40}$")]
    pub wallet: Option<String>,
    /// Trades strictly after this cursor (`BBBBBBBBBBBB-LLLLLL`); default: from the start.
    #[param(pattern = r"^[0-9]{12}-[0-9]{6}$")]
    pub after: Option<String>,
    /// Trades read for this page, 1..=1000 (default 100); filtered out ones are not returned.
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<u32>,
    /// Only finalized trades (at or below the chain's `finalized` block): pages never reach
    /// past the finalized watermark, and what they hold can no longer be reorganised away.
    pub final_only: Option<bool>,
    /// `true`: every trade of the wallets, ignoring the subscriptions' filters (default
    /// `false`: what push sends over the WebSocket).
    pub unfiltered: Option<bool>,
}

/// The account's followed markets (token → filters) and their tokens, sorted.
async fn followed_markets(
    c: &super::txn::Client,
    account: i64,
) -> Result<(HashMap<String, Vec<Filter>>, Vec<String>), ApiError> {
    let filters = super::markets::store::filters_of(&***c, account).await?;
    let mut tokens: Vec<String> = filters.keys().cloned().collect();
    tokens.sort();
    Ok((filters, tokens))
}

/// Trades of one wallet (or of every followed wallet) after a cursor, in ledger order; each says
/// whether its block is finalized, and `final_only` keeps to those.
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
    // Without `wallet`: the followed markets' fills too, as push sends them.
    let (market_filters, tokens) = match &q.wallet {
        Some(_) => Default::default(),
        None => followed_markets(&c, who.account_id).await?,
    };
    let whose = one::Whose {
        wallets: &wallets,
        tokens: &tokens,
    };
    let finalized = finalized(&c).await?;
    let through = match watermark(&c).await? {
        Some(w) if q.final_only == Some(true) => finalized.map(|f| w.min(pg::watermark_cursor(f))),
        w => w,
    };
    let empty = || {
        Json(TradePage {
            trades: vec![],
            next: after.to_string(),
            more: false,
        })
    };
    let Some(through) = through else {
        return Ok(empty());
    };
    let Some(bound) = scan_through(&c, &st.ch, whose, after, through).await? else {
        return Ok(empty());
    };
    let mut rows =
        one::followed_trades_between(&**c, &st.ch, whose, after, bound, u64::from(limit) + 1)
            .await?;
    let full = rows.len() > limit as usize;
    rows.truncate(limit as usize);
    let more = full || bound < through;
    let next = match rows.last() {
        Some(r) if full => r.cursor(),
        _ if bound < through => bound,
        last => last.map_or(after, TradeRow::cursor),
    }
    .to_string();
    let names = markets(&c, &rows).await?;
    let unfiltered = q.unfiltered == Some(true);
    let filters = match unfiltered {
        true => Default::default(),
        false => super::filters::of_account(&c, who.account_id).await?,
    };
    Ok(Json(TradePage {
        trades: rows
            .iter()
            .filter(|r| {
                let facts = Facts::of_row(r, names.get(&r.token_id));
                // Through a followed wallet or a followed market (each row once).
                (wallets.contains(&r.maker) && filter::passes(filters.get(&r.maker), &facts))
                    || market_filters
                        .get(&r.token_id)
                        .is_some_and(|fs| unfiltered || fs.iter().any(|f| f.matches(&facts)))
            })
            .map(|r| {
                TradeMessage::from_row(r, names.get(&r.token_id))
                    .finalized(finalized.is_some_and(|f| r.block_number <= f))
            })
            .collect(),
        next,
        more,
    }))
}

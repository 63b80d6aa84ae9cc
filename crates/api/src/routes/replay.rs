//! Replay: enqueue the account's trades after a cursor for one endpoint again, as
//! `webhook_deliveries` rows in the push engine's shape (same `webhook-id` as the original
//! message, so receivers that already have it can drop the duplicate). A replay sends what push
//! would: trades that pass their wallet's subscription filter and the endpoint's, as the events
//! the endpoint receives. Which deliveries a page of trades makes is the pure [`Queue::items`].

use std::collections::HashMap;

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use pmw_core::ch::TradeRow;
use pmw_core::filter::{self, Facts, Filter};
use pmw_core::message::{stamp, FinalNotice, Kind, Market, TradeMessage};
use pmw_core::pg::deliveries::{self, NewDelivery, Writer};
use pmw_core::pg::ledger as one;
use pmw_core::webhook::webhook_id;
use pmw_core::{Cursor, UnixMs};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::endpoint::{owned, Endpoint, EventType};
use super::ledger::{followed, markets};
use super::params::{check_limit, parse_cursor};
use super::txn::Client;
use crate::auth::Auth;
use crate::error::{ApiError, ErrorBody};
use crate::extract::{ApiJson, ApiPath};
use crate::AppState;

/// Default and largest replay.
pub const REPLAY_DEFAULT_LIMIT: u32 = 1_000;
pub const REPLAY_MAX_LIMIT: u32 = 10_000;
/// Replays one account may start per clock hour (each re-queues up to [`REPLAY_MAX_LIMIT`]
/// trades): past it, 429 with `Retry-After` until the next hour.
pub const REPLAYS_PER_HOUR: i32 = 30;
const HOUR_MS: i64 = 3_600_000;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Replay {
    /// Replay trades strictly after this cursor.
    #[schema(example = "000081234567-000042", pattern = r"^[0-9]{12}-[0-9]{6}$")]
    pub after: String,
    /// At most this many trades, 1..=10000 (default 1000).
    #[schema(minimum = 1, maximum = 10000)]
    pub limit: Option<u32>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ReplayOutcome {
    /// Deliveries queued (new, or finished ones queued again).
    pub enqueued: u64,
    /// Trades found for the account's wallets and markets in the range that pass the filters (the
    /// subscription's and the endpoint's), i.e. replayed.
    pub trades: usize,
    /// Call again with `after = next` for the rest when `more`.
    pub next: String,
    pub more: bool,
}

fn disabled() -> ApiError {
    ApiError::conflict(
        "endpoint_disabled",
        "the endpoint is disabled; enable it before replaying",
    )
}

/// Up to what push's webhook lane has queued, and (for `final`s) its finality lane: later
/// trades reach the endpoint through them.
async fn bounds(c: &Client) -> Result<(Cursor, Cursor), ApiError> {
    Ok(c.query_opt(include_str!("sql/replay_bounds.sql"), &[])
        .await?
        .map(|r| {
            let at = |b: usize| Cursor {
                block: r.get::<_, Option<i64>>(b).unwrap_or(0) as u64,
                log_index: r.get::<_, Option<i32>>(b + 1).unwrap_or(0) as u32,
            };
            (at(0), at(2))
        })
        .unwrap_or((Cursor::ORIGIN, Cursor::ORIGIN)))
}

/// Charge the account one replay of this hour's [`REPLAYS_PER_HOUR`], atomically (one upsert).
async fn charge(c: &Client, account_id: i64, now: i64) -> Result<(), ApiError> {
    let hour = now - now.rem_euclid(HOUR_MS);
    let charged = c
        .query_opt(
            include_str!("sql/replay_charge.sql"),
            &[&account_id, &hour, &REPLAYS_PER_HOUR],
        )
        .await?;
    match charged {
        Some(_) => Ok(()),
        None => Err(ApiError {
            message: format!(
                "an account starts at most {REPLAYS_PER_HOUR} replays an hour; retry after the Retry-After delay"
            ),
            ..ApiError::rate_limited(((hour + HOUR_MS - now) as u64).div_ceil(1_000))
        }),
    }
}

/// What a replay queues for one endpoint, as push would queue it.
struct Queue<'a> {
    endpoint_id: i64,
    /// The endpoint receives `trade`s.
    trades: bool,
    /// The endpoint receives `final`s.
    finals: bool,
    /// Trades at or below this cursor are finalized (the finality lane's position).
    finals_through: Cursor,
    /// The endpoint's own filter.
    own: Option<Filter>,
    /// The account's wallets (lowercase `0x…`) and their subscription filters.
    wallets: &'a [String],
    filters: &'a HashMap<String, Filter>,
    /// The account's followed markets: token id → the filters of the subscriptions naming it.
    markets: &'a HashMap<String, Vec<Filter>>,
    /// Market names of the rows' tokens.
    names: &'a HashMap<String, Market>,
    now: i64,
}

impl Queue<'_> {
    /// The deliveries of `rows`: those passing both filters, as a `trade` and, once finalized,
    /// a `final` (small beside a `trade`, else the full body, as the finality lane sends it).
    fn items(&self, rows: &[TradeRow]) -> Vec<NewDelivery> {
        let mut items = Vec::with_capacity(rows.len());
        for r in rows {
            let market = self.names.get(&r.token_id);
            let facts = Facts::of_row(r, market);
            // Through a followed wallet or a followed market, once (as push decides).
            let by_wallet = self.wallets.contains(&r.maker)
                && filter::passes(self.filters.get(&r.maker), &facts);
            let by_market = self
                .markets
                .get(&r.token_id)
                .is_some_and(|fs| fs.iter().any(|f| f.matches(&facts)));
            if !((by_wallet || by_market) && filter::passes(self.own.as_ref(), &facts)) {
                continue;
            }
            let finalized = r.cursor() <= self.finals_through;
            let message = TradeMessage::from_row(r, market).finalized(finalized);
            if self.trades {
                items.push(self.delivery(r, Kind::Trade, message.to_json()));
            }
            if self.finals && finalized {
                let body = if self.trades {
                    FinalNotice::from_row(r).to_json()
                } else {
                    message.to_json()
                };
                items.push(self.delivery(r, Kind::Final, body));
            }
        }
        items
    }

    fn delivery(&self, r: &TradeRow, kind: Kind, body: String) -> NewDelivery {
        NewDelivery {
            id: webhook_id(r.cursor(), &r.block_hash, self.endpoint_id, kind),
            endpoint_id: self.endpoint_id,
            kind,
            cursor: r.cursor(),
            payload: stamp(kind, &body, self.now),
            t_detect_ms: r.t_detect_ms,
        }
    }
}

/// Insert `items`, checking the endpoint is still enabled under a share lock: a disable (which
/// expires pending deliveries) either committed before (409) or waits for this insert and then
/// expires it. How many were queued.
async fn enqueue(c: &mut Client, id: i64, items: &[NewDelivery]) -> Result<u64, ApiError> {
    let tx = c.transaction().await?;
    let still_enabled = tx
        .query_opt(include_str!("sql/endpoint_enabled_share.sql"), &[&id])
        .await?
        .ok_or_else(|| ApiError::not_found(format!("no webhook endpoint {id}")))?
        .get::<_, bool>(0);
    if !still_enabled {
        return Err(disabled());
    }
    let enqueued = deliveries::enqueue(&tx, Writer::Replay, items)
        .await
        .map_err(|e| ApiError::unavailable("postgres", e))?
        .inserted;
    tx.commit().await?;
    Ok(enqueued)
}

/// The endpoint's filter as stored (an unreadable one narrows nothing, as in push).
fn own_filter(endpoint: &Endpoint) -> Option<Filter> {
    endpoint
        .filter
        .as_ref()
        .and_then(|s| Filter::parse(s).ok().flatten())
}

/// Queue the account's trades after `after` (up to what push has already processed) for this
/// endpoint again, filtered as push filters them (`limit` bounds the trades read, filtered out
/// ones included), as the events it receives say: `trade`s, and `final`s of the finalized ones.
/// Already pending messages stay as they are. An account starts at most 30 replays per clock
/// hour (429 with `Retry-After` past it).
#[utoipa::path(post, path = "/v1/webhooks/{id}/replay", tag = "webhooks", security(("api_key" = [])),
    params(("id" = i64, Path)), request_body = Replay,
    responses((status = 202, body = ReplayOutcome), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "endpoint disabled"), (status = 422, body = ErrorBody),
        (status = 429, body = ErrorBody, description = "the account's replays of this hour are spent")))]
pub async fn replay(
    State(st): State<AppState>,
    who: Auth,
    ApiPath(id): ApiPath<i64>,
    ApiJson(body): ApiJson<Replay>,
) -> Result<(StatusCode, Json<ReplayOutcome>), ApiError> {
    let after = parse_cursor(&body.after)?;
    let limit = check_limit(body.limit, REPLAY_DEFAULT_LIMIT, REPLAY_MAX_LIMIT)?;
    let mut c = st.pg.get().await?;
    let endpoint = owned(&c, who.account_id, id).await?;
    if !endpoint.enabled {
        return Err(disabled());
    }
    charge(&c, who.account_id, UnixMs::now().0).await?;
    let wallets = followed(&c, who.account_id).await?;
    let (through, finals_through) = bounds(&c).await?;
    let market_filters = super::markets::store::filters_of(&**c, who.account_id).await?;
    let mut tokens: Vec<String> = market_filters.keys().cloned().collect();
    tokens.sort();
    let whose = one::Whose {
        wallets: &wallets,
        tokens: &tokens,
    };
    let mut rows =
        one::followed_trades_between(&**c, &st.ch, whose, after, through, u64::from(limit) + 1)
            .await?;
    let more = rows.len() > limit as usize;
    rows.truncate(limit as usize);
    let next = rows.last().map_or(after, TradeRow::cursor).to_string();
    let queue = Queue {
        endpoint_id: id,
        trades: endpoint.events.contains(&EventType::Trade),
        finals: endpoint.events.contains(&EventType::Final),
        finals_through,
        own: own_filter(&endpoint),
        wallets: &wallets,
        filters: &super::filters::of_account(&c, who.account_id).await?,
        markets: &market_filters,
        names: &markets(&c, &rows).await?,
        now: UnixMs::now().0,
    };
    let items = queue.items(&rows);
    let enqueued = enqueue(&mut c, id, &items).await?;
    tracing::info!(account = who.account_id, endpoint = id, after = %after, read = rows.len(), trades = items.len(), enqueued, "replay queued");
    Ok((
        StatusCode::ACCEPTED,
        Json(ReplayOutcome {
            enqueued,
            trades: items.len(),
            next,
            more,
        }),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pmw_core::filter::FilterSpec;

    fn row(block: u64, side: u8) -> TradeRow {
        TradeRow {
            maker: "0x11".into(),
            side,
            token_id: "99".into(),
            shares: "2".into(),
            collateral: "1.04".into(),
            price: "0.52".into(),
            t_detect_ms: 5,
            ..pmw_testkit::rows::trade(block, 1, "0xab")
        }
    }

    /// The followed wallet of every test row.
    static WALLETS: std::sync::LazyLock<Vec<String>> =
        std::sync::LazyLock::new(|| vec!["0x11".to_string()]);
    static NO_MARKETS: std::sync::LazyLock<HashMap<String, Vec<Filter>>> =
        std::sync::LazyLock::new(HashMap::new);

    fn queue<'a>(
        trades: bool,
        finals: bool,
        filters: &'a HashMap<String, Filter>,
        names: &'a HashMap<String, Market>,
    ) -> Queue<'a> {
        Queue {
            endpoint_id: 7,
            trades,
            finals,
            finals_through: Cursor {
                block: 10,
                log_index: 1,
            },
            own: None,
            wallets: &WALLETS,
            filters,
            markets: &NO_MARKETS,
            names,
            now: 1_000,
        }
    }

    fn kinds(items: &[NewDelivery]) -> Vec<(u64, Kind)> {
        items.iter().map(|d| (d.cursor.block, d.kind)).collect()
    }

    #[test]
    fn trades_and_the_finals_of_finalized_ones() {
        let (f, n) = (HashMap::new(), HashMap::new());
        let rows = [row(10, 0), row(11, 0)];
        let items = queue(true, true, &f, &n).items(&rows);
        assert_eq!(
            kinds(&items),
            [(10, Kind::Trade), (10, Kind::Final), (11, Kind::Trade)]
        );
        assert!(items
            .iter()
            .all(|d| d.endpoint_id == 7 && d.t_detect_ms == 5));
        assert_ne!(items[0].id, items[1].id, "a final has its own webhook-id");
        // Beside a trade, a final is the small notice; alone it carries the trade.
        assert!(
            !items[1].payload.contains("\"price\""),
            "{}",
            items[1].payload
        );
        let alone = queue(false, true, &f, &n).items(&rows);
        assert_eq!(kinds(&alone), [(10, Kind::Final)]);
        assert!(
            alone[0].payload.contains("\"price\""),
            "{}",
            alone[0].payload
        );
    }

    #[test]
    fn both_filters_apply() {
        let sells: FilterSpec =
            serde_json::from_value(serde_json::json!({"side": "SELL"})).unwrap();
        let sells = Filter::parse(&sells).unwrap().unwrap();
        let n = HashMap::new();
        let rows = [row(11, 0), row(12, 1)];
        let by_wallet = HashMap::from([("0x11".to_string(), sells.clone())]);
        let items = queue(true, false, &by_wallet, &n).items(&rows);
        assert_eq!(kinds(&items), [(12, Kind::Trade)]);
        let none = HashMap::new();
        let mut own = queue(true, false, &none, &n);
        own.own = Some(sells);
        assert_eq!(kinds(&own.items(&rows)), [(12, Kind::Trade)]);
    }
}

//! The delivery log of an endpoint (every attempt, from ClickHouse `delivery_log`, newest first,
//! keyset-paginated) and replay: enqueue the account's trades after a cursor for one endpoint
//! again, as `webhook_deliveries` rows in the push engine's shape (same `webhook-id` as the
//! original message, so receivers that already have it can drop the duplicate). A replay sends
//! what push would: trades that pass their wallet's subscription filter and the endpoint's.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use pmw_core::ch::{delivery_log, trades, TradeRow};
use pmw_core::filter::{self, Facts, Filter};
use pmw_core::message::{stamp, FinalNotice, Kind, TradeMessage};
use pmw_core::pg::deliveries::{self, NewDelivery, Writer};
use pmw_core::webhook::webhook_id;
use pmw_core::{Cursor, UnixMs};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::endpoint::{owned, EventType};
use super::ledger::{followed, markets};
use super::params::{check_limit, parse_cursor};
use crate::auth::Auth;
use crate::error::{ApiError, ErrorBody};
use crate::extract::{ApiJson, ApiPath, ApiQuery};
use crate::AppState;

/// Default and largest page of the delivery log.
pub const LOG_DEFAULT_LIMIT: u32 = 100;
pub const LOG_MAX_LIMIT: u32 = 1_000;
/// Default and largest replay.
pub const REPLAY_DEFAULT_LIMIT: u32 = 1_000;
pub const REPLAY_MAX_LIMIT: u32 = 10_000;

/// One attempt.
#[derive(Debug, Serialize, Deserialize, ToSchema, clickhouse::Row)]
pub struct Attempt {
    /// The message's `webhook-id` (stable across retries).
    pub delivery_id: String,
    /// 1 for the first attempt.
    pub attempt: u32,
    /// `trade` or `retract`.
    pub kind: String,
    pub block_number: u64,
    pub log_index: u32,
    pub t_attempt_ms: i64,
    pub duration_ms: i64,
    /// HTTP status, 0 when no response arrived.
    pub status_code: u16,
    /// `delivered`, `retry`, `failed`, `gone`, …
    pub outcome: String,
    pub error: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct AttemptPage {
    pub attempts: Vec<Attempt>,
    /// Pass as `cursor` for the next (older) page; absent on the last page.
    pub next: Option<String>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct LogQuery {
    /// From a previous page's `next`.
    #[param(pattern = r"^[0-9]{1,15}\.[0-9]{1,9}\.[A-Za-z0-9_-]{1,200}$")]
    pub cursor: Option<String>,
    /// Page size, 1..=1000 (default 100).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<u32>,
}

/// `<t_attempt_ms>.<attempt>.<delivery_id>`: the position after which older attempts follow.
fn parse_log_cursor(s: &str) -> Result<(i64, u32, String), ApiError> {
    let bad = || {
        ApiError::bad_request(
            "invalid_cursor",
            format!("{s:?} is not a delivery log cursor"),
        )
    };
    let (t, rest) = s.split_once('.').ok_or_else(bad)?;
    let (a, id) = rest.split_once('.').ok_or_else(bad)?;
    let digits =
        |x: &str, max: usize| (1..=max).contains(&x.len()) && x.bytes().all(|b| b.is_ascii_digit());
    let id_ok = (1..=200).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if !digits(t, 15) || !digits(a, 9) || !id_ok {
        return Err(bad());
    }
    Ok((
        t.parse().map_err(|_| bad())?,
        a.parse().map_err(|_| bad())?,
        id.to_string(),
    ))
}

/// Attempts of one endpoint, newest first.
#[utoipa::path(get, path = "/v1/webhooks/{id}/deliveries", tag = "webhooks", security(("api_key" = [])),
    params(("id" = i64, Path), LogQuery),
    responses((status = 200, body = AttemptPage), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 422, body = ErrorBody)))]
pub async fn log(
    State(st): State<AppState>,
    who: Auth,
    ApiPath(id): ApiPath<i64>,
    ApiQuery(q): ApiQuery<LogQuery>,
) -> Result<Json<AttemptPage>, ApiError> {
    let limit = check_limit(q.limit, LOG_DEFAULT_LIMIT, LOG_MAX_LIMIT)?;
    let below = match &q.cursor {
        Some(s) => {
            let (t, attempt, did) = parse_log_cursor(s)?;
            Some((t, did, attempt))
        }
        None => None,
    };
    let c = st.pg.get().await?;
    owned(&c, who.account_id, id).await?;
    // Newest first by (t_attempt_ms, delivery_id, attempt); the first page starts above all.
    let mut rows: Vec<Attempt> =
        delivery_log::page(&st.ch, id as u64, &below, u64::from(limit) + 1).await?;
    let more = rows.len() > limit as usize;
    rows.truncate(limit as usize);
    let next = more
        .then(|| {
            rows.last()
                .map(|r| format!("{}.{}.{}", r.t_attempt_ms, r.attempt, r.delivery_id))
        })
        .flatten();
    Ok(Json(AttemptPage {
        attempts: rows,
        next,
    }))
}

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
    /// Trades found for the account's wallets in the range that pass the filters (the
    /// subscription's and the endpoint's), i.e. replayed.
    pub trades: usize,
    /// Call again with `after = next` for the rest when `more`.
    pub next: String,
    pub more: bool,
}

/// Queue the account's trades after `after` (up to what push has already processed) for this
/// endpoint again, filtered as push filters them (`limit` bounds the trades read, filtered out
/// ones included), as the events it receives say: `trade`s, and `final`s of the finalized ones.
/// Already pending messages stay as they are.
#[utoipa::path(post, path = "/v1/webhooks/{id}/replay", tag = "webhooks", security(("api_key" = [])),
    params(("id" = i64, Path)), request_body = Replay,
    responses((status = 202, body = ReplayOutcome), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "endpoint disabled"), (status = 422, body = ErrorBody)))]
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
        return Err(ApiError::conflict(
            "endpoint_disabled",
            "the endpoint is disabled; enable it before replaying",
        ));
    }
    let wallets = followed(&c, who.account_id).await?;
    // Up to what push's webhook lane has queued (and, for `final`s, its finality lane): later
    // trades reach the endpoint through them.
    let (through, finals_through) = c
        .query_opt(include_str!("sql/replay_bounds.sql"), &[])
        .await?
        .map(|r| {
            let at = |b: usize| Cursor {
                block: r.get::<_, Option<i64>>(b).unwrap_or(0) as u64,
                log_index: r.get::<_, Option<i32>>(b + 1).unwrap_or(0) as u32,
            };
            (at(0), at(2))
        })
        .unwrap_or((Cursor::ORIGIN, Cursor::ORIGIN));
    let events = &endpoint.events;
    let (trades_too, finals) = (
        events.contains(&EventType::Trade),
        events.contains(&EventType::Final),
    );
    let mut rows =
        trades::wallet_trades_between(&st.ch, &wallets, after, through, u64::from(limit) + 1)
            .await?;
    let more = rows.len() > limit as usize;
    rows.truncate(limit as usize);
    let next = rows.last().map_or(after, TradeRow::cursor).to_string();
    let names = markets(&c, &rows).await?;
    let filters = super::filters::of_account(&c, who.account_id).await?;
    let own = endpoint
        .filter
        .as_ref()
        .and_then(|s| Filter::parse(s).ok().flatten());
    let now = UnixMs::now().0;
    let mut items = Vec::with_capacity(rows.len());
    for r in &rows {
        let market = names.get(&r.token_id);
        let facts = Facts::of_row(r, market);
        if !(filter::passes(filters.get(&r.maker), &facts) && filter::passes(own.as_ref(), &facts))
        {
            continue;
        }
        let finalized = r.cursor() <= finals_through;
        let message = TradeMessage::from_row(r, market).finalized(finalized);
        let mut queue = |kind: Kind, body: String| {
            items.push(NewDelivery {
                id: webhook_id(r.cursor(), &r.block_hash, id, kind),
                endpoint_id: id,
                kind,
                cursor: r.cursor(),
                payload: stamp(kind, &body, now),
                t_detect_ms: r.t_detect_ms,
            })
        };
        if trades_too {
            queue(Kind::Trade, message.to_json());
        }
        if finals && finalized {
            // As the finality lane sends it: small beside trades, else the full body.
            let body = if trades_too {
                FinalNotice::from_row(r).to_json()
            } else {
                message.to_json()
            };
            queue(Kind::Final, body);
        }
    }
    let tx = c.transaction().await?;
    // Checked again under a share lock: a disable (which expires pending deliveries) either
    // committed before (409) or waits for this insert and then expires it.
    let still_enabled = tx
        .query_opt(
            "SELECT enabled FROM webhook_endpoints WHERE id = $1 FOR SHARE",
            &[&id],
        )
        .await?
        .ok_or_else(|| ApiError::not_found(format!("no webhook endpoint {id}")))?
        .get::<_, bool>(0);
    if !still_enabled {
        return Err(ApiError::conflict(
            "endpoint_disabled",
            "the endpoint is disabled; enable it before replaying",
        ));
    }
    let enqueued = deliveries::enqueue(&tx, Writer::Replay, &items)
        .await
        .map_err(|e| ApiError::unavailable("postgres", e))?
        .inserted;
    tx.commit().await?;
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

//! Followed markets (`/v1/markets`): an account follows markets besides wallets and receives
//! every fill in them that its filter lets through, whatever the wallet. A subscription names a
//! condition id, an outcome token id or an event slug; it is resolved into outcome token ids
//! when created or changed ([`resolve`]) and stored with them, so push matches fills by token
//! without a lookup. Plan limits: a cap on distinct followed markets (`max_markets`, 403
//! `plan_limit`) and a floor on `filter.min_collateral` (`market_min_collateral`, 422
//! `min_collateral_floor`). Every change notifies push in the same transaction.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use pmw_core::filter::{format_micro, Filter, FilterSpec};
use pmw_core::plans::Plan;
use pmw_core::UnixMs;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

pub mod resolve;
pub(super) mod store;

use crate::auth::Auth;
use crate::error::{ApiError, ErrorBody};
use crate::extract::{ApiJson, ApiPath};
use crate::AppState;
pub use resolve::MarketsApi;
use resolve::{MarketRef, Resolved};

/// One followed market (or event).
#[derive(Debug, Serialize, ToSchema)]
pub struct MarketSubscription {
    /// `condition`, `token` or `event`: what `market` is.
    #[schema(example = "event")]
    pub kind: String,
    /// As named, canonical: a lowercase condition id, a decimal token id or an event slug.
    #[schema(example = "pmw-demo-cup")]
    pub market: String,
    pub label: String,
    /// The condition ids it resolved to when created or last changed.
    pub conditions: Vec<String>,
    /// The outcome token ids push matches fills on (all of a market's outcomes; only the
    /// named one for a token id).
    pub tokens: Vec<String>,
    /// What push sends of these markets: `side`, `min_shares`, `min_collateral` (no `markets`).
    pub filter: Option<FilterSpec>,
    pub created_ms: i64,
    pub updated_ms: i64,
}

/// The caller's market subscriptions and the plan's limits.
#[derive(Debug, Serialize, ToSchema)]
pub struct MarketList {
    pub markets: Vec<MarketSubscription>,
    /// Distinct markets (condition ids) the plan lets the account follow.
    pub limit: u32,
    /// The least `filter.min_collateral` a market subscription may have (USDC).
    #[schema(example = "100")]
    pub min_collateral_floor: String,
}

/// Follow a market: exactly one of `market` (a condition id or a token id) and `event` (an
/// event slug).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AddMarket {
    /// `0x` + 64 hex digits (a condition id: every outcome) or a decimal token id (that
    /// outcome only).
    #[serde(default)]
    #[schema(example = "0x5f65177b394277fd294cd75650044e32ba009a95022d88a0c1d565897d72f8f1")]
    pub market: Option<String>,
    /// An event slug: every market of the event.
    #[serde(default)]
    #[schema(example = "pmw-demo-cup")]
    pub event: Option<String>,
    #[serde(default)]
    #[schema(max_length = 200)]
    pub label: String,
    /// `side`, `min_shares`, `min_collateral` (at least the plan's floor); no `markets`.
    #[serde(default)]
    #[schema(example = json!({"min_collateral": "1000"}))]
    pub filter: Option<FilterSpec>,
}

/// Change a followed market: only the fields present change. Its tokens are resolved again.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateMarket {
    #[serde(default)]
    #[schema(max_length = 200)]
    pub label: Option<String>,
    /// The new filter (`null` or `{}` removes it, allowed only on a plan without a floor).
    #[serde(default, deserialize_with = "super::filters::present")]
    #[schema(value_type = Option<FilterSpec>, example = json!({"side": "BUY", "min_collateral": "5000"}))]
    pub filter: Option<Option<FilterSpec>>,
}

#[utoipa::path(get, path = "/v1/markets", tag = "markets", security(("api_key" = [])),
    responses((status = 200, body = MarketList), (status = 401, body = ErrorBody)))]
pub async fn list(State(st): State<AppState>, who: Auth) -> Result<Json<MarketList>, ApiError> {
    let c = st.pg.get().await?;
    let rows = store::list(&**c, who.account_id).await?;
    let (_, plan) = st.cfg.plan(&who.plan);
    Ok(Json(MarketList {
        markets: rows.iter().map(store::from_row).collect(),
        limit: plan.max_markets,
        min_collateral_floor: format_micro(plan.market_floor()),
    }))
}

/// Follow a market or an event: 201 when new, 200 when already followed (nothing changes).
#[utoipa::path(post, path = "/v1/markets", tag = "markets", security(("api_key" = [])),
    request_body = AddMarket,
    responses((status = 201, body = MarketSubscription), (status = 200, body = MarketSubscription, description = "already followed"),
        (status = 403, body = ErrorBody, description = "plan limit: too many markets"),
        (status = 422, body = ErrorBody, description = "invalid market or filter, a filter below the plan's min_collateral floor, or a market the markets API does not know"),
        (status = 503, body = ErrorBody, description = "the markets API did not answer")))]
pub async fn add(
    State(st): State<AppState>,
    who: Auth,
    ApiJson(body): ApiJson<AddMarket>,
) -> Result<(StatusCode, Json<MarketSubscription>), ApiError> {
    let m = match (&body.market, &body.event) {
        (Some(m), None) if !m.starts_with("0x") && !m.bytes().all(|b| b.is_ascii_digit()) => {
            return Err(invalid_market(
                "market must be a condition id or a token id; name an event with \"event\"",
            ));
        }
        (Some(m), None) => MarketRef::parse(m)?,
        (None, Some(e)) => match MarketRef::parse(e)? {
            ev @ MarketRef::Event(_) => ev,
            _ => return Err(invalid_market("event must be an event slug")),
        },
        _ => return Err(invalid_market("give exactly one of market and event")),
    };
    super::subscriptions::check_label(&body.label)?;
    let (_, plan) = st.cfg.plan(&who.plan);
    let filter = market_filter(plan, body.filter.as_ref())?;
    {
        let c = st.pg.get().await?;
        if let Some(r) = store::one(&**c, who.account_id, &m).await? {
            return Ok((StatusCode::OK, Json(store::from_row(&r))));
        }
    }
    let resolved = st.markets.resolve(&m).await?;
    let row = write(
        &st,
        &who,
        &m,
        plan,
        (&body.label, &resolved, filter.as_ref()),
    )
    .await?;
    tracing::info!(
        account = who.account_id,
        market = m.name(),
        tokens = resolved.tokens.len(),
        "market followed"
    );
    Ok((StatusCode::CREATED, Json(row)))
}

/// Change a followed market's label or filter; its tokens are resolved again.
#[utoipa::path(patch, path = "/v1/markets/{market}", tag = "markets", security(("api_key" = [])),
    params(("market" = String, Path, description = "a condition id, a token id or an event slug")),
    request_body = UpdateMarket,
    responses((status = 200, body = MarketSubscription), (status = 404, body = ErrorBody, description = "not followed"),
        (status = 403, body = ErrorBody), (status = 422, body = ErrorBody), (status = 503, body = ErrorBody)))]
pub async fn update(
    State(st): State<AppState>,
    who: Auth,
    ApiPath(market): ApiPath<String>,
    ApiJson(body): ApiJson<UpdateMarket>,
) -> Result<Json<MarketSubscription>, ApiError> {
    let m = MarketRef::parse(&market)?;
    if let Some(label) = &body.label {
        super::subscriptions::check_label(label)?;
    }
    let (_, plan) = st.cfg.plan(&who.plan);
    let current = {
        let c = st.pg.get().await?;
        let r = store::one(&**c, who.account_id, &m).await?;
        r.map(|r| store::from_row(&r))
            .ok_or_else(|| not_followed(&m))?
    };
    let spec = match &body.filter {
        Some(f) => f.clone(),
        None => current.filter.clone(),
    };
    let filter = market_filter(plan, spec.as_ref())?;
    let label = body.label.unwrap_or(current.label);
    let resolved = st.markets.resolve(&m).await?;
    let row = write(&st, &who, &m, plan, (&label, &resolved, filter.as_ref())).await?;
    tracing::info!(
        account = who.account_id,
        market = m.name(),
        "market subscription changed"
    );
    Ok(Json(row))
}

/// Stop following a market.
#[utoipa::path(delete, path = "/v1/markets/{market}", tag = "markets", security(("api_key" = [])),
    params(("market" = String, Path, description = "a condition id, a token id or an event slug")),
    responses((status = 204), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn remove(
    State(st): State<AppState>,
    who: Auth,
    ApiPath(market): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    let m = MarketRef::parse(&market)?;
    let mut c = st.pg.get().await?;
    let tx = c.transaction().await?;
    if store::remove(&*tx, who.account_id, &m).await? == 0 {
        return Err(not_followed(&m));
    }
    super::txn::notify_changes(&tx).await?;
    tx.commit().await?;
    tracing::info!(
        account = who.account_id,
        market = m.name(),
        "market unfollowed"
    );
    Ok(StatusCode::NO_CONTENT)
}

/// Write the subscription (label, resolved markets, filter) under the account lock, within the
/// plan's market cap, and notify push.
async fn write(
    st: &AppState,
    who: &Auth,
    m: &MarketRef,
    plan: &Plan,
    (label, resolved, filter): (&str, &Resolved, Option<&Filter>),
) -> Result<MarketSubscription, ApiError> {
    let mut c = st.pg.get().await?;
    let tx = c.transaction().await?;
    super::txn::lock_account(&tx, who.account_id).await?;
    let mut followed = store::other_conditions(&*tx, who.account_id, m).await?;
    followed.extend(resolved.conditions.iter().cloned());
    followed.sort();
    followed.dedup();
    let max = plan.max_markets;
    if followed.len() > max as usize {
        return Err(ApiError::plan_limit(format!(
            "the plan allows {max} markets and this would follow {} ({} of them from {:?}); remove one or upgrade",
            followed.len(),
            resolved.conditions.len(),
            m.name()
        )));
    }
    let stored = super::filters::stored(filter);
    let w = store::Write {
        label,
        resolved,
        filter: stored.as_deref(),
        now_ms: UnixMs::now().0,
    };
    let row = store::upsert(&*tx, who.account_id, m, w).await?;
    super::txn::notify_changes(&tx).await?;
    tx.commit().await?;
    Ok(store::from_row(&row))
}

/// A market subscription's filter: valid, without `markets` (the subscription names them), and
/// with `min_collateral` at least the plan's floor.
fn market_filter(plan: &Plan, spec: Option<&FilterSpec>) -> Result<Option<Filter>, ApiError> {
    if spec.is_some_and(|s| s.markets.is_some()) {
        return Err(ApiError::unprocessable(
            "invalid_filter",
            "a market subscription's filter takes side, min_shares and min_collateral; the markets are the subscription's own",
        ));
    }
    let filter = super::filters::parse(spec)?;
    let floor = plan.market_floor();
    let have = filter.as_ref().and_then(|f| f.min_collateral).unwrap_or(0);
    if have < floor {
        return Err(ApiError::unprocessable(
            "min_collateral_floor",
            format!(
                "the plan's market subscriptions need filter.min_collateral of at least {} (USDC), got {}: a busy market without a floor is a firehose",
                format_micro(floor),
                format_micro(have)
            ),
        ));
    }
    Ok(filter)
}

fn invalid_market(message: &str) -> ApiError {
    ApiError::unprocessable("invalid_market", message)
}

fn not_followed(m: &MarketRef) -> ApiError {
    ApiError::not_found(format!(
        "{} {} is not followed by this account",
        m.kind(),
        m.name()
    ))
}

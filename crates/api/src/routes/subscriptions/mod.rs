//! Followed wallets: add (idempotent, EIP-55 checked when mixed case, plan-limited), list,
//! change (label, filter), remove. Every change notifies the push leader in the same
//! transaction (and bumps `subs_version` by trigger). Bulk changes are [`bulk`]; the row shape,
//! the label rule and the statements both use are [`model`] and [`store`].

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use pmw_core::filter::FilterSpec;
use pmw_core::UnixMs;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

pub(super) mod bulk;
mod model;
mod store;

use super::params::parse_wallet;
use crate::auth::Auth;
use crate::error::{ApiError, ErrorBody};
use crate::extract::{ApiJson, ApiPath};
use crate::AppState;
pub(super) use model::check_label;
pub use model::{AddSubscription, Subscription};

/// The caller's subscriptions and the plan's limit.
#[derive(Debug, Serialize, ToSchema)]
pub struct SubscriptionList {
    pub subscriptions: Vec<Subscription>,
    pub limit: u32,
}

/// Change a followed wallet: only the fields present change (`{}` changes nothing).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateSubscription {
    /// At most 200 characters, no control characters (absent or `null`: unchanged).
    #[serde(default)]
    #[schema(max_length = 200, pattern = r"^[^\u0000-\u001f\u007f-\u009f]*$")]
    pub label: Option<String>,
    /// The new filter; `null` or `{}` removes it (every trade again). Applies to trades pushed
    /// after the change.
    #[serde(default, deserialize_with = "super::filters::present")]
    #[schema(value_type = Option<FilterSpec>, example = json!({"side": "SELL", "min_shares": "100"}))]
    pub filter: Option<Option<FilterSpec>>,
}

#[utoipa::path(get, path = "/v1/subscriptions", tag = "subscriptions", security(("api_key" = [])),
    responses((status = 200, body = SubscriptionList), (status = 401, body = ErrorBody)))]
pub async fn list(
    State(st): State<AppState>,
    who: Auth,
) -> Result<Json<SubscriptionList>, ApiError> {
    let c = st.pg.get().await?;
    let rows = store::list(&**c, who.account_id).await?;
    Ok(Json(SubscriptionList {
        subscriptions: rows.iter().map(store::from_row).collect(),
        limit: st.cfg.plan(&who.plan).1.max_wallets,
    }))
}

/// Follow a wallet: 201 when new, 200 when it was already followed (nothing changes).
#[utoipa::path(post, path = "/v1/subscriptions", tag = "subscriptions", security(("api_key" = [])),
    request_body = AddSubscription,
    responses((status = 201, body = Subscription), (status = 200, body = Subscription, description = "already followed"),
        (status = 400, body = ErrorBody), (status = 403, body = ErrorBody, description = "plan limit"),
        (status = 413, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn add(
    State(st): State<AppState>,
    who: Auth,
    ApiJson(body): ApiJson<AddSubscription>,
) -> Result<(StatusCode, Json<Subscription>), ApiError> {
    let wallet = parse_wallet(&body.wallet)?;
    check_label(&body.label)?;
    let filter = super::filters::parse(body.filter.as_ref())?;
    let max = st.cfg.plan(&who.plan).1.max_wallets;
    let mut c = st.pg.get().await?;
    let tx = c.transaction().await?;
    super::txn::lock_account(&tx, who.account_id).await?;
    if let Some(r) = store::one(&*tx, who.account_id, &wallet).await? {
        return Ok((StatusCode::OK, Json(store::from_row(&r))));
    }
    let count = store::count(&*tx, who.account_id).await?;
    if count >= i64::from(max) {
        return Err(ApiError::plan_limit(format!(
            "the plan allows {max} wallets and {count} are followed; remove one or upgrade"
        )));
    }
    let now = UnixMs::now().0;
    store::insert(
        &*tx,
        who.account_id,
        &wallet,
        &body.label,
        now,
        filter.as_ref(),
    )
    .await?;
    super::txn::notify_changes(&tx).await?;
    tx.commit().await?;
    tracing::info!(account = who.account_id, wallet = %wallet, "subscribed");
    Ok((
        StatusCode::CREATED,
        Json(Subscription {
            wallet: wallet.to_lower_hex(),
            label: body.label,
            created_ms: now,
            filter: filter.map(|f| f.spec()),
        }),
    ))
}

/// Change a followed wallet's label or filter (only the fields sent change).
#[utoipa::path(patch, path = "/v1/subscriptions/{wallet}", tag = "subscriptions", security(("api_key" = [])),
    params(("wallet" = String, Path, description = "the wallet address (mixed case: EIP-55)", pattern = r"^0x[0-9a-fA-F]{40}$")),
    request_body = UpdateSubscription,
    responses((status = 200, body = Subscription), (status = 404, body = ErrorBody, description = "not followed"),
        (status = 422, body = ErrorBody, description = "invalid wallet, label or filter")))]
pub async fn update(
    State(st): State<AppState>,
    who: Auth,
    ApiPath(wallet): ApiPath<String>,
    ApiJson(body): ApiJson<UpdateSubscription>,
) -> Result<Json<Subscription>, ApiError> {
    let wallet = parse_wallet(&wallet)?;
    let label = body.label;
    if let Some(label) = &label {
        check_label(label)?;
    }
    let filter = super::filters::change(body.filter.as_ref())?;
    let mut c = st.pg.get().await?;
    let tx = c.transaction().await?;
    let row = store::update(
        &*tx,
        who.account_id,
        &wallet,
        label.as_deref(),
        filter.as_ref().map(|f| f.as_deref()),
    )
    .await?
    .ok_or_else(|| {
        ApiError::not_found(format!(
            "{} is not followed by this account",
            wallet.to_lower_hex()
        ))
    })?;
    super::txn::notify_changes(&tx).await?;
    tx.commit().await?;
    tracing::info!(account = who.account_id, wallet = %wallet, filter = filter.is_some(), "subscription changed");
    Ok(Json(store::from_row(&row)))
}

/// Stop following a wallet.
#[utoipa::path(delete, path = "/v1/subscriptions/{wallet}", tag = "subscriptions", security(("api_key" = [])),
    params(("wallet" = String, Path, description = "the wallet address (mixed case: EIP-55)", pattern = r"^0x[0-9a-fA-F]{40}$")),
    responses((status = 204), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn remove(
    State(st): State<AppState>,
    who: Auth,
    ApiPath(wallet): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    let wallet = parse_wallet(&wallet)?;
    let mut c = st.pg.get().await?;
    let tx = c.transaction().await?;
    let n = store::remove(&*tx, who.account_id, &[&wallet]).await?;
    if n == 0 {
        return Err(ApiError::not_found(format!(
            "{} is not followed by this account",
            wallet.to_lower_hex()
        )));
    }
    super::txn::notify_changes(&tx).await?;
    tx.commit().await?;
    tracing::info!(account = who.account_id, wallet = %wallet, "unsubscribed");
    Ok(StatusCode::NO_CONTENT)
}

//! Followed wallets: add (idempotent, EIP-55 checked when mixed case, plan-limited), list,
//! change (label, filter), remove. Every change notifies the push leader in the same
//! transaction (and bumps `subs_version` by trigger).

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use pmw_core::filter::FilterSpec;
use pmw_core::{Address, UnixMs};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::auth::Auth;
use crate::error::{ApiError, ErrorBody};
use crate::extract::{ApiJson, ApiPath};
use crate::AppState;
use pmw_core::pg::accounts::MAX_LABEL_CHARS;

/// Parse a wallet address: 422 with the reason when it is not one.
pub fn parse_wallet(s: &str) -> Result<Address, ApiError> {
    s.parse::<Address>()
        .map_err(|e| ApiError::unprocessable("invalid_address", format!("{s:?}: {e}")))
}

/// One followed wallet.
#[derive(Debug, Serialize, ToSchema)]
pub struct Subscription {
    /// Lowercase `0x…` hex.
    #[schema(example = "0x1111111111111111111111111111111111111111")]
    pub wallet: String,
    pub label: String,
    pub created_ms: i64,
    /// What push sends of this wallet (WebSocket and webhooks); `null`: every trade.
    pub filter: Option<FilterSpec>,
}

/// The caller's subscriptions and the plan's limit.
#[derive(Debug, Serialize, ToSchema)]
pub struct SubscriptionList {
    pub subscriptions: Vec<Subscription>,
    pub limit: u32,
}

/// Follow a wallet.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AddSubscription {
    /// `0x` + 40 hex digits; mixed case must carry a valid EIP-55 checksum.
    #[schema(
        example = "0x1111111111111111111111111111111111111111",
        pattern = r"^0x[0-9a-fA-F]{40}$"
    )]
    pub wallet: String,
    /// At most 200 characters, no control characters.
    #[serde(default)]
    #[schema(max_length = 200, pattern = r"^[^\u0000-\u001f\u007f-\u009f]*$")]
    pub label: String,
    /// Narrow what push sends of this wallet (absent, `null` or `{}`: every trade). Ignored
    /// when the wallet is already followed: change it with `PATCH /v1/subscriptions/{wallet}`.
    #[serde(default)]
    pub filter: Option<FilterSpec>,
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

/// 422 unless a label is at most 200 characters without control characters.
fn check_label(label: &str) -> Result<(), ApiError> {
    if label.chars().count() > MAX_LABEL_CHARS || label.chars().any(char::is_control) {
        return Err(ApiError::unprocessable(
            "invalid_label",
            format!(
                "label must be at most {MAX_LABEL_CHARS} characters without control characters"
            ),
        ));
    }
    Ok(())
}

/// A `subscriptions` row read as `wallet, label, created_ms, filter::text`.
pub fn from_row(r: &tokio_postgres::Row) -> Subscription {
    Subscription {
        wallet: format!("0x{}", hex::encode(r.get::<_, &[u8]>(0))),
        label: r.get(1),
        created_ms: r.get(2),
        filter: super::filters::shown(r.get(3)),
    }
}

#[utoipa::path(get, path = "/v1/subscriptions", tag = "subscriptions", security(("api_key" = [])),
    responses((status = 200, body = SubscriptionList), (status = 401, body = ErrorBody)))]
pub async fn list(
    State(st): State<AppState>,
    who: Auth,
) -> Result<Json<SubscriptionList>, ApiError> {
    let c = st.pg.get().await?;
    let rows = c
        .query(
            include_str!("sql/list_subscriptions.sql"),
            &[&who.account_id],
        )
        .await?;
    Ok(Json(SubscriptionList {
        subscriptions: rows.iter().map(from_row).collect(),
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
    super::lock_account(&tx, who.account_id).await?;
    let bytes = wallet.as_bytes().as_slice();
    if let Some(r) = tx
        .query_opt(
            "SELECT wallet, label, created_ms, filter::text FROM subscriptions WHERE account_id = $1 AND wallet = $2",
            &[&who.account_id, &bytes],
        )
        .await?
    {
        return Ok((StatusCode::OK, Json(from_row(&r))));
    }
    let count: i64 = tx
        .query_one(
            "SELECT count(*) FROM subscriptions WHERE account_id = $1",
            &[&who.account_id],
        )
        .await?
        .get(0);
    if count >= i64::from(max) {
        return Err(ApiError::plan_limit(format!(
            "the plan allows {max} wallets and {count} are followed; remove one or upgrade"
        )));
    }
    let now = UnixMs::now().0;
    let stored = super::filters::stored(filter.as_ref());
    tx.execute(
        "INSERT INTO subscriptions (account_id, wallet, label, created_ms, filter) VALUES ($1, $2, $3, $4, $5::text::jsonb)",
        &[&who.account_id, &bytes, &body.label, &now, &stored],
    )
    .await?;
    super::notify_changes(&tx).await?;
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
    let stored = filter.as_ref().and_then(|f| f.as_deref());
    let mut c = st.pg.get().await?;
    let tx = c.transaction().await?;
    let row = tx
        .query_opt(
            "UPDATE subscriptions SET label = coalesce($3, label), \
             filter = CASE WHEN $4 THEN $5::text::jsonb ELSE filter END \
             WHERE account_id = $1 AND wallet = $2 RETURNING wallet, label, created_ms, filter::text",
            &[
                &who.account_id,
                &wallet.as_bytes().as_slice(),
                &label,
                &filter.is_some(),
                &stored,
            ],
        )
        .await?
        .ok_or_else(|| {
            ApiError::not_found(format!(
                "{} is not followed by this account",
                wallet.to_lower_hex()
            ))
        })?;
    super::notify_changes(&tx).await?;
    tx.commit().await?;
    tracing::info!(account = who.account_id, wallet = %wallet, filter = filter.is_some(), "subscription changed");
    Ok(Json(from_row(&row)))
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
    let n = tx
        .execute(
            "DELETE FROM subscriptions WHERE account_id = $1 AND wallet = $2",
            &[&who.account_id, &wallet.as_bytes().as_slice()],
        )
        .await?;
    if n == 0 {
        return Err(ApiError::not_found(format!(
            "{} is not followed by this account",
            wallet.to_lower_hex()
        )));
    }
    super::notify_changes(&tx).await?;
    tx.commit().await?;
    tracing::info!(account = who.account_id, wallet = %wallet, "unsubscribed");
    Ok(StatusCode::NO_CONTENT)
}

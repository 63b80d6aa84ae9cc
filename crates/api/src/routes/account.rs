//! `/v1/me`, the caller's API keys (`/v1/keys`) and browser WebSocket tickets
//! (`/v1/ws-ticket`).

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use pmw_core::auth::{self, TICKET_PREFIX};
use pmw_core::UnixMs;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::auth::Auth;
use crate::error::{ApiError, ErrorBody};
use crate::extract::{ApiPath, OptionalJson};
use crate::AppState;
use pmw_core::pg::accounts::{self, Account, AccountError, KeyInfo, NewKey};

impl From<AccountError> for ApiError {
    fn from(e: AccountError) -> ApiError {
        match e {
            AccountError::Db(e) => e.into(),
            AccountError::NoAccount(_) => ApiError::not_found(e.to_string()),
            AccountError::NoKey(_) => ApiError::not_found(e.to_string()),
            AccountError::Invalid(m) => ApiError::unprocessable("invalid_request", m),
        }
    }
}

/// A plan's limits.
#[derive(Debug, Serialize, ToSchema)]
pub struct PlanOut {
    pub name: String,
    pub max_wallets: u32,
    pub max_webhook_endpoints: u32,
    pub max_ws_sessions: u32,
    /// Markets the account may follow (`/v1/markets`).
    pub max_markets: u32,
    /// The least `filter.min_collateral` a market subscription may have (USDC).
    #[schema(example = "100")]
    pub market_min_collateral: String,
}

/// What the account uses now.
#[derive(Debug, Serialize, ToSchema)]
pub struct Usage {
    pub wallets: i64,
    /// Distinct markets followed (what `max_markets` counts).
    pub markets: i64,
    pub webhook_endpoints: i64,
    pub active_keys: i64,
}

/// The caller: account, plan limits, usage, and the key used for this request.
#[derive(Debug, Serialize, ToSchema)]
pub struct Me {
    pub account: Account,
    pub plan: PlanOut,
    pub usage: Usage,
    pub key_prefix: String,
}

#[utoipa::path(get, path = "/v1/me", tag = "account", security(("api_key" = [])),
    responses((status = 200, body = Me), (status = 401, body = ErrorBody), (status = 429, body = ErrorBody)))]
pub async fn me(State(st): State<AppState>, who: Auth) -> Result<Json<Me>, ApiError> {
    let c = st.pg.get().await?;
    let r = c
        .query_one(include_str!("sql/account_me.sql"), &[&who.account_id])
        .await?;
    let (plan_name, plan) = st.cfg.plan(&who.plan);
    Ok(Json(Me {
        account: Account::from_row(&r),
        plan: PlanOut {
            name: plan_name.to_string(),
            max_wallets: plan.max_wallets,
            max_webhook_endpoints: plan.max_webhook_endpoints,
            max_ws_sessions: plan.max_ws_sessions,
            max_markets: plan.max_markets,
            market_min_collateral: plan.market_min_collateral.clone(),
        },
        usage: Usage {
            wallets: r.get(6),
            markets: r.get(9),
            webhook_endpoints: r.get(7),
            active_keys: r.get(8),
        },
        key_prefix: who.key_prefix,
    }))
}

/// The account's keys (prefixes only).
#[derive(Debug, Serialize, ToSchema)]
pub struct KeyList {
    pub keys: Vec<KeyInfo>,
}

#[utoipa::path(get, path = "/v1/keys", tag = "account", security(("api_key" = [])),
    responses((status = 200, body = KeyList), (status = 401, body = ErrorBody)))]
pub async fn list_keys(State(st): State<AppState>, who: Auth) -> Result<Json<KeyList>, ApiError> {
    let c = st.pg.get().await?;
    Ok(Json(KeyList {
        keys: accounts::list_keys(&**c, who.account_id).await?,
    }))
}

/// A new key's label.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateKey {
    /// At most 200 characters, no control characters.
    #[serde(default)]
    #[schema(max_length = 200, pattern = r"^[^\u0000-\u001f\u007f-\u009f]*$")]
    pub label: String,
}

/// Create another key for the caller's account. The key is in this response only.
#[utoipa::path(post, path = "/v1/keys", tag = "account", security(("api_key" = [])),
    request_body(content = Option<CreateKey>, description = "optional"),
    responses((status = 201, body = NewKey), (status = 401, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn create_key(
    State(st): State<AppState>,
    who: Auth,
    OptionalJson(body): OptionalJson<CreateKey>,
) -> Result<(StatusCode, Json<NewKey>), ApiError> {
    let mut c = st.pg.get().await?;
    let key = accounts::create_key(&mut **c, who.account_id, &body.label).await?;
    tracing::info!(account = who.account_id, prefix = %key.prefix, "key created");
    Ok((StatusCode::CREATED, Json(key)))
}

/// Revoke one of the caller's keys by prefix (the key in use may revoke itself).
#[utoipa::path(delete, path = "/v1/keys/{prefix}", tag = "account", security(("api_key" = [])),
    params(("prefix" = String, Path, description = "the key's 12-character prefix")),
    responses((status = 204), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn revoke_key(
    State(st): State<AppState>,
    who: Auth,
    ApiPath(prefix): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    // Prefixes are short printable text: anything else names no key (and a NUL byte would be
    // refused by Postgres as text).
    if prefix.len() > 64 || prefix.chars().any(char::is_control) {
        return Err(ApiError::not_found(format!("no key {prefix:?}")));
    }
    let c = st.pg.get().await?;
    accounts::revoke_key(&**c, &prefix, Some(who.account_id)).await?;
    tracing::info!(account = who.account_id, %prefix, "key revoked");
    Ok(StatusCode::NO_CONTENT)
}

/// A one-time WebSocket ticket for browsers: connect to `/v1/ws?ticket=…` before `expires_ms`.
/// Its `Debug` shows neither the ticket nor the path holding it.
#[derive(Serialize, ToSchema)]
pub struct Ticket {
    /// Absent from an `Idempotency-Key` replay (never stored), as is `ws_path`.
    #[schema(example = "pmwt_…", required = false)]
    pub ticket: String,
    pub expires_ms: i64,
    /// Path and query to open the WebSocket with.
    #[schema(required = false)]
    pub ws_path: String,
}

impl std::fmt::Debug for Ticket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ticket")
            .field("ticket", &pmw_core::redact::HIDDEN)
            .field("expires_ms", &self.expires_ms)
            .field("ws_path", &pmw_core::redact::HIDDEN)
            .finish()
    }
}

/// Issue a short-lived, single-use ticket (stored hashed). Outstanding tickets are limited by the
/// plan's `max_ws_sessions`.
#[utoipa::path(post, path = "/v1/ws-ticket", tag = "account", security(("api_key" = [])),
    responses((status = 201, body = Ticket), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody)))]
pub async fn ws_ticket(
    State(st): State<AppState>,
    who: Auth,
) -> Result<(StatusCode, Json<Ticket>), ApiError> {
    let (_, plan) = st.cfg.plan(&who.plan);
    let now = UnixMs::now().0;
    let expires_ms = now + st.cfg.api_ws_ticket_ttl_secs as i64 * 1_000;
    let mut c = st.pg.get().await?;
    let tx = c.transaction().await?;
    super::txn::lock_account(&tx, who.account_id).await?;
    // Spent and expired tickets are useless: drop this account's.
    tx.execute(
        include_str!("sql/tickets_purge.sql"),
        &[&who.account_id, &now],
    )
    .await?;
    let outstanding: i64 = tx
        .query_one(include_str!("sql/tickets_count.sql"), &[&who.account_id])
        .await?
        .get(0);
    if outstanding >= i64::from(plan.max_ws_sessions) {
        return Err(ApiError::plan_limit(format!(
            "the plan allows {} WebSocket sessions; {outstanding} tickets are still unused",
            plan.max_ws_sessions
        )));
    }
    let (ticket, _) = auth::generate(TICKET_PREFIX);
    tx.execute(
        include_str!("sql/ticket_insert.sql"),
        &[
            &auth::hash_secret(&ticket).as_slice(),
            &who.account_id,
            &who.key_id,
            &expires_ms,
        ],
    )
    .await?;
    tx.commit().await?;
    Ok((
        StatusCode::CREATED,
        Json(Ticket {
            ws_path: format!("/v1/ws?ticket={ticket}"),
            ticket,
            expires_ms,
        }),
    ))
}

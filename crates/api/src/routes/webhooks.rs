//! Webhook endpoints: create (URL checked against SSRF rules, plan-limited), list, get,
//! enable/disable, rotate the signing secret with an overlap window, delete. Secrets are
//! Standard Webhooks `whsec_…` from `pmw_core::webhook::sign`, shown on create and rotate only,
//! stored sealed with the operator key (`pmw_core::sealed`).
//! An endpoint may carry a filter (`pmw_core::filter`), applied on top of its account's
//! subscription filters.
//! Every change notifies the push leader in the same transaction.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use pmw_core::filter::FilterSpec;
use pmw_core::pg::deliveries::expire_pending;
use pmw_core::webhook::Secret;
use pmw_core::UnixMs;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::chat_dest::{self, EndpointKind};
use super::endpoint::{event_names, owned, Endpoint, EventType, COLUMNS};
use super::endpoint_health::{self, EndpointHealth};
use crate::auth::Auth;
use crate::error::{ApiError, ErrorBody};
use crate::extract::{ApiJson, ApiPath, OptionalJson};
use crate::AppState;

/// Default overlap of a rotated secret: the previous one keeps signing this long.
pub const DEFAULT_OVERLAP_SECS: u64 = 24 * 3600;
/// Longest overlap.
pub const MAX_OVERLAP_SECS: u64 = 7 * 24 * 3600;

/// An endpoint with its signing secret: only in the create and rotate responses (its `Debug`
/// never shows the secret).
#[derive(Serialize, ToSchema)]
pub struct EndpointWithSecret {
    #[serde(flatten)]
    pub endpoint: Endpoint,
    /// `whsec_…`: verify `webhook-signature` with it (Standard Webhooks). Absent from an
    /// `Idempotency-Key` replay (never stored) and for chat endpoints (nothing is signed).
    #[schema(required = false)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
}

impl std::fmt::Debug for EndpointWithSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EndpointWithSecret")
            .field("endpoint", &self.endpoint)
            .field("secret", &pmw_core::redact::HIDDEN)
            .finish()
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct EndpointList {
    pub endpoints: Vec<Endpoint>,
    pub limit: u32,
}

/// A new endpoint. Its `Debug` shows the URL's host only, never the bot token.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateEndpoint {
    /// `webhook` (signed JSON, the default), `discord`, `slack` or `telegram`.
    #[serde(default)]
    pub kind: Option<EndpointKind>,
    /// `http` or `https`; must reach a public address. For `discord`, the channel webhook's
    /// URL (path `/api/webhooks/<id>/<token>`); for `slack`, the incoming webhook's
    /// (`/services/T…/B…/…`); none for `telegram`. A chat URL's path is its secret: sealed at
    /// rest, shown afterwards as `scheme://host` only.
    #[schema(example = "https://example.com/hooks/pmw")]
    #[serde(default)]
    pub url: Option<String>,
    /// `telegram`: the bot's token from @BotFather (`<bot id>:<secret>`). Sealed at rest, never
    /// shown again.
    #[serde(default)]
    pub bot_token: Option<String>,
    /// `telegram`: the chat to post to (a number such as `-1001234567890`, or `@channel`).
    #[serde(default)]
    pub chat_id: Option<String>,
    /// Narrow what this endpoint gets (absent, `null` or `{}`: every trade of the followed
    /// wallets that passes their own filters).
    #[serde(default)]
    pub filter: Option<FilterSpec>,
    /// What it receives (default `["trade"]`).
    #[schema(example = json!(["trade", "final"]), min_items = 1)]
    pub events: Option<Vec<EventType>>,
}

impl std::fmt::Debug for CreateEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CreateEndpoint")
            .field("kind", &self.kind)
            .field("url", &self.url.as_deref().map(pmw_core::redact::Url))
            .field(
                "bot_token",
                &self.bot_token.as_ref().map(|_| pmw_core::redact::HIDDEN),
            )
            .field("chat_id", &self.chat_id)
            .field("filter", &self.filter)
            .field("events", &self.events)
            .finish()
    }
}

/// Change an endpoint: only the fields present change (`{}` changes nothing). Its `Debug` never
/// shows a chat destination's URL path or bot token.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateEndpoint {
    /// A chat endpoint's new webhook URL (`discord`, `slack`).
    #[serde(default)]
    pub url: Option<String>,
    /// A `telegram` endpoint's new bot token.
    #[serde(default)]
    pub bot_token: Option<String>,
    /// A `telegram` endpoint's new chat id.
    #[serde(default)]
    pub chat_id: Option<String>,
    /// Enable or disable (absent or `null`: unchanged).
    #[serde(default)]
    pub enabled: Option<bool>,
    /// The new filter; `null` or `{}` removes it. Applies to messages queued after the change
    /// (deliveries already queued are sent as they are).
    #[serde(default, deserialize_with = "super::filters::present")]
    #[schema(value_type = Option<FilterSpec>, example = json!({"side": "BUY", "min_collateral": "1000"}))]
    pub filter: Option<Option<FilterSpec>>,
    /// What it receives from now on: `trade`, `final`, or both (absent or `null`: unchanged).
    #[serde(default)]
    #[schema(min_items = 1)]
    pub events: Option<Vec<EventType>>,
}

impl std::fmt::Debug for UpdateEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpdateEndpoint")
            .field("url", &self.url.as_deref().map(pmw_core::redact::Url))
            .field(
                "bot_token",
                &self.bot_token.as_ref().map(|_| pmw_core::redact::HIDDEN),
            )
            .field("chat_id", &self.chat_id)
            .field("enabled", &self.enabled)
            .field("filter", &self.filter)
            .field("events", &self.events)
            .finish()
    }
}

#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RotateSecret {
    /// How long the previous secret keeps signing (default 86400, at most 604800).
    #[schema(minimum = 0, maximum = 604800)]
    pub overlap_secs: Option<u64>,
}

#[utoipa::path(get, path = "/v1/webhooks", tag = "webhooks", security(("api_key" = [])),
    responses((status = 200, body = EndpointList), (status = 401, body = ErrorBody)))]
pub async fn list(State(st): State<AppState>, who: Auth) -> Result<Json<EndpointList>, ApiError> {
    let c = st.pg.get().await?;
    let rows = c
        .query(
            &format!(include_str!("sql/list_endpoints.sql"), COLUMNS = COLUMNS),
            &[&who.account_id],
        )
        .await?;
    Ok(Json(EndpointList {
        endpoints: rows.iter().map(Endpoint::from_row).collect(),
        limit: st.cfg.plan(&who.plan).1.max_webhook_endpoints,
    }))
}

/// Create an endpoint. Its secret is in this response only (and again on rotation).
#[utoipa::path(post, path = "/v1/webhooks", tag = "webhooks", security(("api_key" = [])),
    request_body = CreateEndpoint,
    responses((status = 201, body = EndpointWithSecret), (status = 400, body = ErrorBody),
        (status = 403, body = ErrorBody, description = "plan limit"),
        (status = 422, body = ErrorBody, description = "URL refused (scheme, private address, …)")))]
pub async fn create(
    State(st): State<AppState>,
    who: Auth,
    ApiJson(body): ApiJson<CreateEndpoint>,
) -> Result<(StatusCode, Json<EndpointWithSecret>), ApiError> {
    let kind = body.kind.unwrap_or_default();
    let dest = chat_dest::new_dest(
        kind,
        body.url.as_deref(),
        body.bot_token.as_deref(),
        body.chat_id.as_deref(),
        st.cfg.api_allow_private_webhooks,
    )?;
    let asked = body.events.as_deref().unwrap_or(&[EventType::Trade]);
    chat_dest::check_events(kind, asked)?;
    let events = event_names(asked)?;
    let filter = super::filters::parse(body.filter.as_ref())?;
    let max = st.cfg.plan(&who.plan).1.max_webhook_endpoints;
    let now = UnixMs::now().0;
    let mut c = st.pg.get().await?;
    let tx = c.transaction().await?;
    super::txn::lock_account(&tx, who.account_id).await?;
    let count: i64 = tx
        .query_one(include_str!("sql/count_endpoints.sql"), &[&who.account_id])
        .await?
        .get(0);
    if count >= i64::from(max) {
        return Err(ApiError::plan_limit(format!(
            "the plan allows {max} webhook endpoints and {count} exist; delete one or upgrade"
        )));
    }
    let id: i64 = tx
        .query_one(include_str!("sql/next_endpoint_id.sql"), &[])
        .await?
        .get(0);
    let row = tx
        .query_one(
            &format!(include_str!("sql/create_endpoint.sql"), COLUMNS = COLUMNS),
            &[
                &who.account_id,
                &dest.url,
                &pmw_core::sealed::seal(&dest.secret, id),
                &now,
                &events,
                &super::filters::stored(filter.as_ref()),
                &id,
                &kind.as_str(),
            ],
        )
        .await?;
    super::txn::notify_changes(&tx).await?;
    tx.commit().await?;
    let endpoint = Endpoint::from_row(&row);
    tracing::info!(
        account = who.account_id,
        endpoint = endpoint.id,
        kind = kind.as_str(),
        "webhook endpoint created"
    );
    let secret = dest.shown_secret;
    Ok((
        StatusCode::CREATED,
        Json(EndpointWithSecret { endpoint, secret }),
    ))
}

/// An endpoint with its delivery health.
#[derive(Debug, Serialize, ToSchema)]
pub struct EndpointDetail {
    #[serde(flatten)]
    pub endpoint: Endpoint,
    pub health: EndpointHealth,
}

/// One endpoint, with its recent success rate, last error and retry backlog.
#[utoipa::path(get, path = "/v1/webhooks/{id}", tag = "webhooks", security(("api_key" = [])),
    params(("id" = i64, Path)),
    responses((status = 200, body = EndpointDetail), (status = 404, body = ErrorBody)))]
pub async fn get_one(
    State(st): State<AppState>,
    who: Auth,
    ApiPath(id): ApiPath<i64>,
) -> Result<Json<EndpointDetail>, ApiError> {
    let c = st.pg.get().await?;
    let endpoint = owned(&c, who.account_id, id).await?;
    let health = endpoint_health::health(&st, &c, id).await?;
    Ok(Json(EndpointDetail { endpoint, health }))
}

/// Enable or disable an endpoint (re-enabling clears the disabled reason), or change its filter
/// or the events it receives (from the next round on; deliveries already queued are sent).
/// Disabling expires the endpoint's pending deliveries in the same transaction (`failed`,
/// `last_error` `endpoint disabled: …`): re-enabling delivers trades from then on, never a
/// backlog at once.
#[utoipa::path(patch, path = "/v1/webhooks/{id}", tag = "webhooks", security(("api_key" = [])),
    params(("id" = i64, Path)), request_body = UpdateEndpoint,
    responses((status = 200, body = Endpoint), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn update(
    State(st): State<AppState>,
    who: Auth,
    ApiPath(id): ApiPath<i64>,
    ApiJson(body): ApiJson<UpdateEndpoint>,
) -> Result<Json<Endpoint>, ApiError> {
    let enabled = body.enabled;
    let events = body.events.as_deref().map(event_names).transpose()?;
    let filter = super::filters::change(body.filter.as_ref())?;
    let stored = filter.as_ref().and_then(|f| f.as_deref());
    let now = UnixMs::now().0;
    let mut c = st.pg.get().await?;
    let tx = c.transaction().await?;
    // The row lock comes first (as in the dispatcher when it disables), then the deliveries.
    let locked = tx
        .query_opt(
            include_str!("sql/lock_endpoint.sql"),
            &[&id, &who.account_id],
        )
        .await?
        .ok_or_else(|| ApiError::not_found(format!("no webhook endpoint {id}")))?;
    let was: bool = locked.get(0);
    let kind = EndpointKind::stored(locked.get(1));
    if let Some(asked) = body.events.as_deref() {
        chat_dest::check_events(kind, asked)?;
    }
    if body.url.is_some() || body.bot_token.is_some() || body.chat_id.is_some() {
        let current = pmw_core::chat::ChatTarget::from_stored(locked.get(2), id).ok_or_else(|| {
            ApiError::unprocessable(
                "invalid_destination",
                "url, bot_token and chat_id change only on chat endpoints (create a new webhook endpoint for a new url)",
            )
        })?;
        let dest = chat_dest::changed_dest(
            &current,
            body.url.as_deref(),
            body.bot_token.as_deref(),
            body.chat_id.as_deref(),
            st.cfg.api_allow_private_webhooks,
        )?;
        tx.execute(
            include_str!("sql/set_destination.sql"),
            &[&id, &dest.url, &pmw_core::sealed::seal(&dest.secret, id)],
        )
        .await?;
    }
    let row = tx
        .query_one(
            &format!(include_str!("sql/update_endpoint.sql"), COLUMNS = COLUMNS),
            &[&id, &enabled, &now, &filter.is_some(), &stored, &events],
        )
        .await?;
    let mut expired = 0;
    if let Some(enabled) = enabled.filter(|e| !(was && *e)) {
        // Disabling: its pending deliveries expire. Re-enabling: whatever is still pending was
        // queued while it was disabled (a round that raced the disable) and expires too.
        let reason = match (was, enabled) {
            (true, false) => "disabled by the account",
            _ => "queued while disabled",
        };
        expired = expire_pending(&*tx, id, reason, now)
            .await
            .map_err(|e| ApiError::unavailable("postgres", e))?;
    }
    super::txn::notify_changes(&tx).await?;
    tx.commit().await?;
    tracing::info!(
        account = who.account_id,
        endpoint = id,
        enabled = ?enabled,
        filter = filter.is_some(),
        events = ?events,
        expired,
        "webhook endpoint updated"
    );
    Ok(Json(Endpoint::from_row(&row)))
}

/// Delete an endpoint and its pending deliveries.
#[utoipa::path(delete, path = "/v1/webhooks/{id}", tag = "webhooks", security(("api_key" = [])),
    params(("id" = i64, Path)),
    responses((status = 204), (status = 404, body = ErrorBody)))]
pub async fn delete(
    State(st): State<AppState>,
    who: Auth,
    ApiPath(id): ApiPath<i64>,
) -> Result<StatusCode, ApiError> {
    let mut c = st.pg.get().await?;
    let tx = c.transaction().await?;
    let n = tx
        .execute(
            include_str!("sql/delete_endpoint.sql"),
            &[&id, &who.account_id],
        )
        .await?;
    if n == 0 {
        return Err(ApiError::not_found(format!("no webhook endpoint {id}")));
    }
    super::txn::notify_changes(&tx).await?;
    tx.commit().await?;
    tracing::info!(
        account = who.account_id,
        endpoint = id,
        "webhook endpoint deleted"
    );
    Ok(StatusCode::NO_CONTENT)
}

/// Rotate the signing secret. The previous secret keeps signing (a second signature in
/// `webhook-signature`) until `previous_expires_ms`, so receivers can switch without a gap.
#[utoipa::path(post, path = "/v1/webhooks/{id}/rotate-secret", tag = "webhooks", security(("api_key" = [])),
    params(("id" = i64, Path)), request_body(content = Option<RotateSecret>, description = "optional"),
    responses((status = 200, body = EndpointWithSecret), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn rotate_secret(
    State(st): State<AppState>,
    who: Auth,
    ApiPath(id): ApiPath<i64>,
    OptionalJson(body): OptionalJson<RotateSecret>,
) -> Result<Json<EndpointWithSecret>, ApiError> {
    let overlap = body.overlap_secs.unwrap_or(DEFAULT_OVERLAP_SECS);
    if overlap > MAX_OVERLAP_SECS {
        return Err(ApiError::unprocessable(
            "invalid_overlap",
            format!("overlap_secs must be at most {MAX_OVERLAP_SECS}"),
        ));
    }
    let now = UnixMs::now().0;
    let expires = (overlap > 0).then(|| now + overlap as i64 * 1_000);
    let secret = Secret::generate().expose();
    let mut c = st.pg.get().await?;
    if owned(&c, who.account_id, id).await?.kind != EndpointKind::Webhook {
        return Err(ApiError::unprocessable(
            "chat_endpoint",
            "chat endpoints sign nothing: change their url or bot_token with PATCH instead",
        ));
    }
    let tx = c.transaction().await?;
    let row = tx
        .query_opt(
            &format!(include_str!("sql/rotate_secret.sql"), COLUMNS = COLUMNS),
            &[
                &id,
                &who.account_id,
                &pmw_core::sealed::seal(&secret, id),
                &expires,
                &now,
            ],
        )
        .await?
        .ok_or_else(|| ApiError::not_found(format!("no webhook endpoint {id}")))?;
    super::txn::notify_changes(&tx).await?;
    tx.commit().await?;
    tracing::info!(
        account = who.account_id,
        endpoint = id,
        overlap_secs = overlap,
        "webhook secret rotated"
    );
    Ok(Json(EndpointWithSecret {
        endpoint: Endpoint::from_row(&row),
        secret: Some(secret),
    }))
}

//! Endpoint testing: `POST /v1/webhooks/{id}/test` sends one signed `test` event
//! (Standard Webhooks, the endpoint's current and still-valid previous secret) through the API's
//! SSRF-guarded client and returns the attempt's result; it is limited per account
//! (`PMW_API_WEBHOOK_TEST_PER_MIN`). An endpoint's delivery health is
//! [`super::endpoint_health`].

use std::time::Instant;

use axum::extract::State;
use axum::Json;
use pmw_core::webhook::sign::{sign_headers, Signing};
use pmw_core::UnixMs;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::auth::Auth;
use crate::error::{ApiError, ErrorBody};
use crate::extract::ApiPath;
use crate::AppState;

/// The body of a `test` event.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct TestEvent {
    /// Always `test`.
    #[schema(example = "test")]
    pub r#type: String,
    /// The endpoint tested.
    pub endpoint_id: i64,
    /// When it was sent (ms since the epoch).
    pub sent_ms: i64,
    pub message: String,
}

/// What the test attempt got.
#[derive(Debug, Serialize, ToSchema)]
pub struct WebhookTestResult {
    /// The `webhook-id` it was sent with.
    pub webhook_id: String,
    /// Whether the endpoint answered 2xx.
    pub delivered: bool,
    /// The HTTP status, absent when no response arrived.
    pub status_code: Option<u16>,
    pub duration_ms: i64,
    /// Why it was not delivered (transport error, refused destination, or the start of a
    /// non-2xx body).
    pub error: Option<String>,
}

/// Send a signed `test` event to the endpoint now (also when it is disabled) and return what
/// happened. Not retried, not in the delivery log.
#[utoipa::path(post, path = "/v1/webhooks/{id}/test", tag = "webhooks", security(("api_key" = [])),
    params(("id" = i64, Path)),
    responses((status = 200, body = WebhookTestResult, description = "the attempt was made (see `delivered`)"),
        (status = 404, body = ErrorBody),
        (status = 429, body = ErrorBody, description = "more than PMW_API_WEBHOOK_TEST_PER_MIN tests this minute")))]
pub async fn test(
    State(st): State<AppState>,
    who: Auth,
    ApiPath(id): ApiPath<i64>,
) -> Result<Json<WebhookTestResult>, ApiError> {
    let c = st.pg.get().await?;
    let row = c
        .query_opt(
            include_str!("sql/endpoint_secrets.sql"),
            &[&id, &who.account_id],
        )
        .await?
        .ok_or_else(|| ApiError::not_found(format!("no webhook endpoint {id}")))?;
    drop(c);
    st.test_limiter
        .check_key(&who.account_id)
        .map_err(crate::auth::limited)?;
    let url: String = row.get(0);
    if row.get::<_, String>(4) != "webhook" {
        return Err(ApiError::unprocessable(
            "chat_endpoint",
            "test events are signed JSON: send a trade to see a chat endpoint's messages",
        ));
    }
    let now = UnixMs::now().0;
    let signing = Signing::parse(id, &row.get::<_, String>(1), row.get(2), row.get(3));
    let secrets = signing.at(now).map_err(|e| {
        let e = e.cause();
        ApiError::unavailable("postgres", format!("stored secret of endpoint {id}: {e}"))
    })?;
    let event = TestEvent {
        r#type: "test".into(),
        endpoint_id: id,
        sent_ms: now,
        message: "a test event from pmw: your endpoint receives and verifies pmw webhooks".into(),
    };
    let body = serde_json::to_vec(&event).map_err(|e| ApiError::unavailable("encoder", e))?;
    let webhook_id = format!("msg_test_{id}_{}", hex::encode(now.to_be_bytes()));
    let headers = sign_headers(&secrets, &webhook_id, now / 1_000, &body);
    let start = Instant::now();
    let outcome = st.hooks.post(&url, &headers, body).await;
    let duration_ms = start.elapsed().as_millis() as i64;
    let delivered = outcome.error.is_none();
    tracing::info!(
        account = who.account_id,
        endpoint = id,
        delivered,
        status = outcome.status,
        "webhook test sent"
    );
    Ok(Json(WebhookTestResult {
        webhook_id,
        delivered,
        status_code: outcome.status,
        duration_ms,
        error: outcome.error,
    }))
}

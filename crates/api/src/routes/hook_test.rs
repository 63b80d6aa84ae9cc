//! Endpoint testing and health: `POST /v1/webhooks/{id}/test` sends one signed `test` event
//! (Standard Webhooks, the endpoint's current and still-valid previous secret) through the API's
//! SSRF-guarded client and returns the attempt's result; it is limited per account
//! (`PMW_API_WEBHOOK_TEST_PER_MIN`). [`health`] is the `health` of `GET /v1/webhooks/{id}`:
//! the success rate of the last 24 h of attempts and the last failure (ClickHouse
//! `delivery_log`), and the retry backlog (Postgres `webhook_deliveries`, `webhook_failing`).

use std::time::Instant;

use axum::extract::State;
use axum::Json;
use governor::clock::{Clock, DefaultClock};
use pmw_core::ch::delivery_log;
use pmw_core::webhook::sign::{sign_headers, SecretError};
use pmw_core::webhook::Secret;
use pmw_core::UnixMs;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::auth::Auth;
use crate::error::{ApiError, ErrorBody};
use crate::extract::ApiPath;
use crate::AppState;

/// The window of the success rate.
pub const HEALTH_WINDOW_MS: i64 = 24 * 3600 * 1_000;

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

/// The last failed attempt.
#[derive(Debug, Serialize, Deserialize, ToSchema, clickhouse::Row)]
pub struct EndpointLastError {
    pub t_attempt_ms: i64,
    /// 0 when no response arrived.
    pub status_code: u16,
    /// `retry`, `failed`, `gone`, …
    pub outcome: String,
    pub error: String,
}

/// Recent delivery health of an endpoint.
#[derive(Debug, Serialize, ToSchema)]
pub struct EndpointHealth {
    /// The window of `attempts` and `success_rate` (24 h).
    pub window_ms: i64,
    /// Delivery attempts in the window.
    pub attempts: u64,
    /// Of those, delivered (2xx).
    pub delivered: u64,
    /// `delivered / attempts`, absent without attempts.
    pub success_rate: Option<f64>,
    /// The newest attempt that did not deliver (within the delivery log's retention).
    pub last_error: Option<EndpointLastError>,
    /// Deliveries waiting (first attempt or retry).
    pub pending: i64,
    /// Of those, already attempted at least once: the retry backlog.
    pub retrying: i64,
    /// Creation time of the oldest pending delivery.
    pub oldest_pending_ms: Option<i64>,
    /// Since when every attempt has failed (the endpoint is disabled after the configured
    /// period); absent while it delivers.
    pub failing_since_ms: Option<i64>,
}

/// The health of endpoint `id` (already checked to belong to the caller).
pub async fn health(
    st: &AppState,
    c: &crate::routes::Client,
    id: i64,
) -> Result<EndpointHealth, ApiError> {
    let now = UnixMs::now().0;
    let r = c
        .query_one(include_str!("sql/endpoint_health.sql"), &[&id])
        .await?;
    let counts = delivery_log::health_counts(&st.ch, id as u64, now - HEALTH_WINDOW_MS).await?;
    let last_error: Option<EndpointLastError> = delivery_log::last_error(&st.ch, id as u64).await?;
    Ok(EndpointHealth {
        window_ms: HEALTH_WINDOW_MS,
        attempts: counts.attempts,
        delivered: counts.delivered,
        success_rate: (counts.attempts > 0)
            .then(|| counts.delivered as f64 / counts.attempts as f64),
        last_error,
        pending: r.get(0),
        retrying: r.get(1),
        oldest_pending_ms: r.get(2),
        failing_since_ms: r.get(3),
    })
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
            "SELECT url, secret, previous_secret, previous_expires_ms FROM webhook_endpoints \
             WHERE id = $1 AND account_id = $2",
            &[&id, &who.account_id],
        )
        .await?
        .ok_or_else(|| ApiError::not_found(format!("no webhook endpoint {id}")))?;
    drop(c);
    if let Err(not_until) = st.test_limiter.check_key(&who.account_id) {
        let wait = not_until.wait_time_from(DefaultClock::default().now());
        return Err(ApiError::rate_limited(wait.as_secs_f64().ceil() as u64));
    }
    let url: String = row.get(0);
    let now = UnixMs::now().0;
    let bad_secret = |e: SecretError| {
        ApiError::unavailable("postgres", format!("stored secret of endpoint {id}: {e}"))
    };
    let current = Secret::parse(&row.get::<_, String>(1)).map_err(bad_secret)?;
    let previous = match (
        row.get::<_, Option<String>>(2),
        row.get::<_, Option<i64>>(3),
    ) {
        (Some(p), Some(until)) if until > now => Some(Secret::parse(&p).map_err(bad_secret)?),
        _ => None,
    };
    let mut secrets = vec![&current];
    secrets.extend(previous.as_ref());
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

//! An endpoint's delivery health, the `health` of `GET /v1/webhooks/{id}`: the success rate of
//! the last 24 h of attempts and the last failure (ClickHouse `delivery_log`), and the retry
//! backlog (Postgres `webhook_deliveries`, `webhook_failing`).

use pmw_core::ch::delivery_log;
use pmw_core::UnixMs;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::error::ApiError;
use crate::AppState;

/// The window of the success rate.
pub const HEALTH_WINDOW_MS: i64 = 24 * 3600 * 1_000;

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
    c: &crate::routes::txn::Client,
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

//! `/v1/ready`: 200 when the whole push path works now, 503 with every reason otherwise.
//! Gating checks: Postgres and ClickHouse reachable; pmw-live ingesting (a fresh writer
//! heartbeat, its watermark within `PMW_API_READY_INGEST_MAX_LAG_BLOCKS` of the newest head it
//! saw); the push leader completing rounds; no webhook delivery due and unclaimed for longer than
//! `PMW_API_READY_WEBHOOK_DUE_MAX_AGE_MS` (the dispatcher runs); the recent detect→push median
//! (WebSocket deliveries, or webhook ones when there are none). Reported in `warnings` without
//! flipping readiness: no push standby, a stale pmw-stats, services on different builds.

mod check;
mod ingest;
mod latency;
pub mod metrics;
mod probe;
mod push;
mod services;
mod webhooks;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use pmw_core::UnixMs;

use crate::AppState;
pub use check::{Check, Checks, Readiness};

/// A pmw-stats heartbeat older than this is reported (stats beats every few seconds).
const STATS_MAX_AGE_MS: i64 = 60_000;

/// 200 when the push path works now; 503 with the reasons otherwise. A missing push standby is
/// reported in `checks.push_standby` and `warnings` but does not make it 503.
#[utoipa::path(get, path = "/v1/ready", tag = "ops",
    responses((status = 200, body = Readiness), (status = 503, body = Readiness)))]
pub async fn ready(State(st): State<AppState>) -> Response {
    let r = evaluate(&st).await;
    let status = if r.ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    if let Some(e) = &r.error {
        tracing::info!(reason = %e.message, "not ready");
    }
    (status, Json(r)).into_response()
}

/// Every check, now: the verdict `/v1/ready` answers and `/metrics` exports
/// ([`metrics`]).
pub async fn evaluate(st: &AppState) -> Readiness {
    let now = UnixMs::now().0;
    let ((postgres, push), (clickhouse, latency), push_standby, ingest, webhooks, stats, revisions) = tokio::join!(
        push::postgres_and_push(st, now),
        latency::clickhouse_and_latency(st, now),
        push::push_standby(st, now),
        ingest::ingest(st, now),
        webhooks::webhooks(st, now),
        services::stats(st, now, STATS_MAX_AGE_MS),
        services::revisions(st, now, STATS_MAX_AGE_MS),
    );
    let checks = Checks {
        postgres,
        clickhouse,
        ingest,
        push,
        webhooks,
        latency,
        push_standby,
        stats,
        revisions,
    };
    Readiness::of(checks)
}

//! Operations: `/v1/ready` (503 with a reason when Postgres or ClickHouse is unreachable, when
//! push has not completed a round recently, or when the recent detect→push median is too high;
//! a missing push standby is reported as a warning, not a 503), `/v1/health` (the process
//! answers), `/v1/openapi.json` and `/metrics`.

use std::future::Future;
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use pmw_core::store::Window;
use pmw_core::UnixMs;
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use crate::error::{ErrorBody, ErrorDetail};
use crate::AppState;

/// Each readiness probe of a store gives up after this long.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// One readiness check.
#[derive(Debug, Serialize, ToSchema)]
pub struct Check {
    pub ok: bool,
    /// Why not, when not ok.
    pub reason: Option<String>,
    /// Measurements behind the verdict.
    #[schema(value_type = Object)]
    pub detail: Value,
}

impl Check {
    fn pass(detail: Value) -> Check {
        Check {
            ok: true,
            reason: None,
            detail,
        }
    }
    fn fail(reason: String, detail: Value) -> Check {
        Check {
            ok: false,
            reason: Some(reason),
            detail,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Checks {
    pub postgres: Check,
    pub clickhouse: Check,
    pub push: Check,
    pub latency: Check,
    /// A push standby waits on the lock (a fresh `standby` heartbeat). Failing it does not make
    /// the service unready: the leader serves, but it is a single point of failure.
    pub push_standby: Check,
}

/// The readiness verdict. When not ready, `error` carries the reasons (503).
#[derive(Debug, Serialize, ToSchema)]
pub struct Readiness {
    pub ready: bool,
    pub checks: Checks,
    /// Reasons of the failed checks that do not flip readiness (a missing push standby); empty
    /// when there are none.
    pub warnings: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorDetail>,
}

async fn bounded<T, E: std::fmt::Display>(
    f: impl Future<Output = Result<T, E>>,
) -> Result<T, String> {
    match tokio::time::timeout(PROBE_TIMEOUT, f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {} ms", PROBE_TIMEOUT.as_millis())),
    }
}

/// Postgres reachable, and the push leader's heartbeat (fresh `beat_ms`, recent `last_round_ms`).
async fn postgres_and_push(st: &AppState, now: i64) -> (Check, Check) {
    let max_age = st.cfg.api_ready_round_max_age_ms as i64;
    let row = bounded(async {
        let c = st.pg.get().await.map_err(|e| e.to_string())?;
        c.query_opt(include_str!("sql/push_leader_beat.sql"), &[])
            .await
            .map_err(|e| e.to_string())
    })
    .await;
    let row = match row {
        Ok(r) => r,
        Err(e) => {
            let pg = Check::fail(format!("postgres unreachable: {e}"), Value::Null);
            let push = Check::fail(
                "push state unknown: postgres unreachable".into(),
                Value::Null,
            );
            return (pg, push);
        }
    };
    let pg = Check::pass(Value::Null);
    let Some(row) = row else {
        return (
            pg,
            Check::fail("no push leader heartbeat".into(), Value::Null),
        );
    };
    let instance: String = row.get(0);
    let beat_age = now - row.get::<_, i64>(1);
    let round_age = row
        .get::<_, Option<i64>>(2)
        .filter(|t| *t > 0)
        .map(|t| now - t);
    let detail = serde_json::json!({
        "instance": instance, "beat_age_ms": beat_age, "last_round_age_ms": round_age, "max_age_ms": max_age,
    });
    let push = if beat_age > max_age {
        Check::fail(
            format!("push leader {instance} last beat {beat_age} ms ago (limit {max_age} ms)"),
            detail,
        )
    } else {
        match round_age {
            None => Check::fail(format!("push leader {instance} has not completed a round"), detail),
            Some(age) if age > max_age => Check::fail(
                format!("push leader {instance} completed its last round {age} ms ago (limit {max_age} ms)"),
                detail,
            ),
            Some(_) => Check::pass(detail),
        }
    };
    (pg, push)
}

/// At least one push standby with a heartbeat fresher than the round max age (a standby beats
/// every second while it waits on the lock). Never gating: see [`Checks::push_standby`].
async fn push_standby(st: &AppState, now: i64) -> Check {
    let max_age = st.cfg.api_ready_round_max_age_ms as i64;
    let rows = bounded(async {
        let c = st.pg.get().await.map_err(|e| e.to_string())?;
        c.query(include_str!("sql/push_standbys.sql"), &[])
            .await
            .map_err(|e| e.to_string())
    })
    .await;
    let rows = match rows {
        Ok(r) => r,
        Err(e) => {
            return Check::fail(
                format!("push standby unknown: postgres unreachable: {e}"),
                Value::Null,
            )
        }
    };
    let ages: Vec<(String, i64)> = rows
        .iter()
        .map(|r| (r.get::<_, String>(0), now - r.get::<_, i64>(1)))
        .collect();
    let fresh: Vec<&str> = ages
        .iter()
        .filter(|(_, age)| *age <= max_age)
        .map(|(i, _)| i.as_str())
        .collect();
    let detail = serde_json::json!({
        "standbys": fresh.len(), "instances": fresh, "max_age_ms": max_age,
        "stale": ages.iter().filter(|(_, a)| *a > max_age)
            .map(|(i, a)| serde_json::json!({"instance": i, "beat_age_ms": a})).collect::<Vec<_>>(),
    });
    if fresh.is_empty() {
        let why = match ages.iter().map(|(_, a)| *a).min() {
            Some(age) => format!("last standby beat {age} ms ago (limit {max_age} ms)"),
            None => "no standby heartbeat".into(),
        };
        Check::fail(
            format!("no push standby: {why}; the push leader is a single point of failure"),
            detail,
        )
    } else {
        Check::pass(detail)
    }
}

/// ClickHouse reachable, and the median detect→push of live WebSocket deliveries over the
/// window (per-row differences; both window bounds applied).
async fn clickhouse_and_latency(st: &AppState, now: i64) -> (Check, Check) {
    let w = Window::ending_at(
        UnixMs(now),
        Duration::from_millis(st.cfg.api_ready_latency_window_ms),
    );
    let max = st.cfg.api_ready_latency_max_ms as i64;
    let r = bounded(pmw_core::store::latency::recent_ws(&st.ch, w)).await;
    match r {
        Err(e) => (
            Check::fail(format!("clickhouse unreachable: {e}"), Value::Null),
            Check::fail(
                "latency unknown: clickhouse unreachable".into(),
                Value::Null,
            ),
        ),
        Ok((samples, median)) => {
            let detail = serde_json::json!({
                "samples": samples, "median_ms": (samples > 0).then_some(median),
                "max_ms": max, "window_ms": st.cfg.api_ready_latency_window_ms,
            });
            let lat = if samples > 0 && median > max {
                Check::fail(
                    format!("detect→push median {median} ms over the window exceeds {max} ms"),
                    detail,
                )
            } else {
                Check::pass(detail)
            };
            (Check::pass(Value::Null), lat)
        }
    }
}

/// 200 when the push path works now; 503 with the reasons otherwise. A missing push standby is
/// reported in `checks.push_standby` and `warnings` but does not make it 503.
#[utoipa::path(get, path = "/v1/ready", tag = "ops",
    responses((status = 200, body = Readiness), (status = 503, body = Readiness)))]
pub async fn ready(State(st): State<AppState>) -> Response {
    let now = UnixMs::now().0;
    let ((postgres, push), (clickhouse, latency), push_standby) = tokio::join!(
        postgres_and_push(&st, now),
        clickhouse_and_latency(&st, now),
        push_standby(&st, now)
    );
    let checks = Checks {
        postgres,
        clickhouse,
        push,
        latency,
        push_standby,
    };
    let warnings: Vec<String> = checks.push_standby.reason.iter().cloned().collect();
    let reasons: Vec<&str> = [
        &checks.postgres,
        &checks.clickhouse,
        &checks.push,
        &checks.latency,
    ]
    .iter()
    .filter_map(|c| c.reason.as_deref())
    .collect();
    if reasons.is_empty() {
        return (
            StatusCode::OK,
            Json(Readiness {
                ready: true,
                checks,
                warnings,
                error: None,
            }),
        )
            .into_response();
    }
    let message = reasons.join("; ");
    tracing::info!(reason = %message, "not ready");
    let error = Some(ErrorDetail {
        code: "not_ready".into(),
        message,
    });
    (
        StatusCode::SERVICE_UNAVAILABLE,
        Json(Readiness {
            ready: false,
            checks,
            warnings,
            error,
        }),
    )
        .into_response()
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    #[schema(example = "ok")]
    pub status: String,
    pub service: String,
    pub version: String,
}

/// The process is up and serving (no dependency checked; see `/v1/ready`).
#[utoipa::path(get, path = "/v1/health", tag = "ops", responses((status = 200, body = Health)))]
pub async fn health() -> Json<Health> {
    Json(Health {
        status: "ok".into(),
        service: crate::SERVICE.into(),
        version: env!("CARGO_PKG_VERSION").into(),
    })
}

/// This document.
#[utoipa::path(get, path = "/v1/openapi.json", tag = "ops",
    responses((status = 200, description = "the OpenAPI 3.1 document", content_type = "application/json")))]
pub async fn openapi_json() -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        super::openapi_json(),
    )
        .into_response()
}

/// Prometheus text exposition (`pmw_api_http_requests_total`, …).
#[utoipa::path(get, path = "/metrics", tag = "ops",
    responses((status = 200, description = "Prometheus text format", content_type = "text/plain"),
        (status = 500, body = ErrorBody)))]
pub async fn metrics() -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        pmw_core::metrics::render(),
    )
        .into_response()
}

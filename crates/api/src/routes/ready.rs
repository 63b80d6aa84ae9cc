//! `/v1/ready`: 200 when the whole push path works now, 503 with every reason otherwise.
//! Gating checks: Postgres and ClickHouse reachable; pmw-live ingesting (a fresh writer
//! heartbeat, its watermark within `PMW_API_READY_INGEST_MAX_LAG_BLOCKS` of the newest head it
//! saw); the push leader completing rounds; no webhook delivery due and unclaimed for longer than
//! `PMW_API_READY_WEBHOOK_DUE_MAX_AGE_MS` (the dispatcher runs); the recent detect→push median
//! (WebSocket deliveries, or webhook ones when there are none). Reported in `warnings` without
//! flipping readiness: no push standby, a stale pmw-stats, services on different builds.

use std::future::Future;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use pmw_core::ch::Window;
use pmw_core::UnixMs;
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use crate::error::ErrorDetail;
use crate::AppState;

/// A pmw-stats heartbeat older than this is reported (stats beats every few seconds).
const STATS_MAX_AGE_MS: i64 = 60_000;

/// Each readiness probe of a store gives up after this long.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// One readiness check.
#[derive(Debug, Serialize, ToSchema)]
pub struct Check {
    pub ok: bool,
    /// Why not, when not ok.
    pub reason: Option<String>,
    /// Measurements behind the verdict (`null` when there are none, e.g. a store unreachable).
    #[schema(schema_with = detail_schema)]
    pub detail: Value,
}

/// `Check.detail`: an object of measurements, a list (`revisions`), or `null`.
fn detail_schema() -> utoipa::openapi::Object {
    use utoipa::openapi::schema::{SchemaType, Type};
    utoipa::openapi::ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([
            Type::Object,
            Type::Array,
            Type::Null,
        ]))
        .description(Some(
            "Measurements behind the verdict: an object, a list (`revisions`), or `null` when \
             there are none (e.g. a store unreachable).",
        ))
        .build()
}

impl Check {
    pub(super) fn pass(detail: Value) -> Check {
        Check {
            ok: true,
            reason: None,
            detail,
        }
    }
    pub(super) fn fail(reason: String, detail: Value) -> Check {
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
    /// pmw-live holds the writer lock, beats, and keeps up with the chain head.
    pub ingest: Check,
    pub push: Check,
    /// The webhook dispatcher claims what is due.
    pub webhooks: Check,
    pub latency: Check,
    /// A push standby waits on the lock (a fresh `standby` heartbeat). Failing it does not make
    /// the service unready: the leader serves, but it is a single point of failure.
    pub push_standby: Check,
    /// pmw-stats beats (the dashboard's writer). Never gating.
    pub stats: Check,
    /// Every live instance runs the same build revision (`detail` lists them). Never gating.
    pub revisions: Check,
}

/// The readiness verdict. When not ready, `error` carries the reasons (503).
#[derive(Debug, Serialize, ToSchema)]
pub struct Readiness {
    pub ready: bool,
    pub checks: Checks,
    /// Reasons of the failed checks that do not flip readiness (a missing push standby, a stale
    /// pmw-stats); empty when there are none.
    pub warnings: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorDetail>,
}

pub(super) async fn bounded<T, E: std::fmt::Display>(
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
/// window, or of webhook deliveries when there is no WebSocket sample (per-row differences;
/// both window bounds applied).
async fn clickhouse_and_latency(st: &AppState, now: i64) -> (Check, Check) {
    let w = Window::ending_at(
        UnixMs(now),
        Duration::from_millis(st.cfg.api_ready_latency_window_ms),
    );
    let max = st.cfg.api_ready_latency_max_ms as i64;
    let median = |channel: &'static str| bounded(pmw_core::ch::latency::recent(&st.ch, channel, w));
    let mut channel = "ws";
    let mut r = median(channel).await;
    if matches!(r, Ok((0, _))) {
        channel = "webhook";
        r = median(channel).await;
    }
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
                "channel": channel, "samples": samples, "median_ms": (samples > 0).then_some(median),
                "max_ms": max, "window_ms": st.cfg.api_ready_latency_window_ms,
            });
            let lat = if samples > 0 && median > max {
                Check::fail(
                    format!("detect→push median ({channel}) {median} ms over the window exceeds {max} ms"),
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
/// ([`super::ready_metrics`]).
pub async fn evaluate(st: &AppState) -> Readiness {
    let now = UnixMs::now().0;
    let ((postgres, push), (clickhouse, latency), push_standby, ingest, webhooks, stats, revisions) = tokio::join!(
        postgres_and_push(st, now),
        clickhouse_and_latency(st, now),
        push_standby(st, now),
        super::ready_more::ingest(st, now),
        super::ready_more::webhooks(st, now),
        super::ready_more::stats(st, now, STATS_MAX_AGE_MS),
        super::ready_more::revisions(st, now, STATS_MAX_AGE_MS),
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
    let warnings: Vec<String> = [&checks.push_standby, &checks.stats, &checks.revisions]
        .iter()
        .filter_map(|c| c.reason.clone())
        .collect();
    let reasons: Vec<&str> = [
        &checks.postgres,
        &checks.clickhouse,
        &checks.ingest,
        &checks.push,
        &checks.webhooks,
        &checks.latency,
    ]
    .iter()
    .filter_map(|c| c.reason.as_deref())
    .collect();
    if reasons.is_empty() {
        return Readiness {
            ready: true,
            checks,
            warnings,
            error: None,
        };
    }
    let error = Some(ErrorDetail {
        code: "not_ready".into(),
        message: reasons.join("; "),
    });
    Readiness {
        ready: false,
        checks,
        warnings,
        error,
    }
}

//! The readiness checks beyond the push leader and the stores: ingest (pmw-live), the webhook
//! dispatcher, and pmw-stats (see [`super::ready`]).

use serde_json::{json, Value};

use super::ready::{bounded, Check};
use crate::AppState;

/// One row of a Postgres probe, or why there is none.
async fn probe(
    st: &AppState,
    sql: &str,
    params: &[i64],
) -> Result<Option<tokio_postgres::Row>, String> {
    bounded(async {
        let c = st.pg.get().await.map_err(|e| e.to_string())?;
        let p: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = params
            .iter()
            .map(|v| v as &(dyn tokio_postgres::types::ToSql + Sync))
            .collect();
        c.query_opt(sql, &p).await.map_err(|e| e.to_string())
    })
    .await
}

/// pmw-live holds the writer lock and ingests: its heartbeat is fresher than the round max age
/// and its watermark within the lag bound of the newest head it saw.
pub async fn ingest(st: &AppState, now: i64) -> Check {
    let max_age = st.cfg.api_ready_round_max_age_ms as i64;
    let max_lag = st.cfg.api_ready_ingest_max_lag_blocks as i64;
    let row = match probe(st, include_str!("sql/live_beat.sql"), &[]).await {
        Ok(r) => r,
        Err(e) => return Check::fail(format!("ingest state unknown: {e}"), Value::Null),
    };
    let Some(row) = row else {
        return Check::fail(
            "no pmw-live writer heartbeat: ingest is not running".into(),
            Value::Null,
        );
    };
    let instance: String = row.get(0);
    let age = now - row.get::<_, i64>(1);
    let watermark: Option<i64> = row.get(2);
    let head: Option<i64> = row.get(3);
    let lag = match (head, watermark) {
        (Some(h), Some(w)) => Some((h - w).max(0)),
        _ => None,
    };
    let detail = json!({
        "instance": instance, "beat_age_ms": age, "max_age_ms": max_age,
        "watermark": watermark, "head": head, "lag_blocks": lag, "max_lag_blocks": max_lag,
    });
    if age > max_age {
        return Check::fail(
            format!("pmw-live {instance} last beat {age} ms ago (limit {max_age} ms)"),
            detail,
        );
    }
    match lag {
        Some(l) if l > max_lag => Check::fail(
            format!("ingest trails the chain head by {l} blocks (limit {max_lag})"),
            detail,
        ),
        _ => Check::pass(detail),
    }
}

/// No webhook delivery has been due and unclaimed for longer than the bound: a dispatcher runs.
pub async fn webhooks(st: &AppState, now: i64) -> Check {
    let max_age = st.cfg.api_ready_webhook_due_max_age_ms as i64;
    let row = probe(
        st,
        include_str!("sql/webhook_overdue.sql"),
        &[now - max_age, now - max_age],
    )
    .await;
    let row = match row {
        Ok(Some(r)) => r,
        Ok(None) => return Check::pass(Value::Null),
        Err(e) => return Check::fail(format!("webhook state unknown: {e}"), Value::Null),
    };
    let overdue: i64 = row.get(0);
    let oldest: Option<i64> = row.get(1);
    let detail = json!({
        "overdue": overdue, "oldest_due_age_ms": oldest.map(|t| now - t), "max_age_ms": max_age,
    });
    if overdue > 0 {
        let age = oldest.map_or(0, |t| now - t);
        Check::fail(
            format!("{overdue} webhook deliveries due for over {max_age} ms and not attempted (oldest {age} ms): is the webhook dispatcher running?"),
            detail,
        )
    } else {
        Check::pass(detail)
    }
}

/// pmw-stats beats. Reported, never gating.
pub async fn stats(st: &AppState, now: i64, max_age: i64) -> Check {
    match probe(st, include_str!("sql/stats_beat.sql"), &[]).await {
        Err(e) => Check::fail(format!("stats state unknown: {e}"), Value::Null),
        Ok(None) => Check::fail(
            "no pmw-stats heartbeat: the dashboard is not updated".into(),
            Value::Null,
        ),
        Ok(Some(r)) => {
            let instance: String = r.get(0);
            let age = now - r.get::<_, i64>(1);
            let detail = json!({"instance": instance, "beat_age_ms": age, "max_age_ms": max_age});
            if age > max_age {
                Check::fail(
                    format!("pmw-stats {instance} last beat {age} ms ago: the dashboard is stale"),
                    detail,
                )
            } else {
                Check::pass(detail)
            }
        }
    }
}

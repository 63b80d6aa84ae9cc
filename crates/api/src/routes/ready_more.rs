//! The readiness checks beyond the push leader and the stores: ingest (pmw-live), the webhook
//! dispatcher, pmw-stats and the builds the services run (see [`super::ready`]).

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
    // The lane that queues deliveries: behind the push cursor and unmoved for the same bound.
    let lane = match probe(st, include_str!("sql/webhook_lane.sql"), &[]).await {
        Ok(r) => r,
        Err(e) => return Check::fail(format!("webhook lane state unknown: {e}"), Value::Null),
    };
    let stuck = lane.as_ref().and_then(|r| {
        let behind: bool = r.get(0);
        let age = now - r.get::<_, i64>(1);
        (behind && age > max_age).then(|| (age, r.get::<_, i64>(2), r.get::<_, i64>(3)))
    });
    let detail = json!({
        "overdue": overdue, "oldest_due_age_ms": oldest.map(|t| now - t), "max_age_ms": max_age,
        "lane_behind_since_ms": stuck.map(|(age, ..)| age),
    });
    if let Some((age, lane_block, push_block)) = stuck {
        return Check::fail(
            format!("the webhook lane is at block {lane_block}, behind the push cursor at block {push_block}, and has not moved for {age} ms: push is not queueing webhooks"),
            detail,
        );
    }
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

/// Every live instance runs the same build revision (a service left on an older build after a
/// deploy shows here). Reported, never gating.
pub async fn revisions(st: &AppState, now: i64, fresh_ms: i64) -> Check {
    let rows = bounded(async {
        let c = st.pg.get().await.map_err(|e| e.to_string())?;
        c.query(include_str!("sql/revisions.sql"), &[&(now - fresh_ms)])
            .await
            .map_err(|e| e.to_string())
    })
    .await;
    let rows = match rows {
        Ok(r) => r,
        Err(e) => return Check::fail(format!("revisions unknown: {e}"), Value::Null),
    };
    let running: Vec<(String, String, String)> = rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    let mut distinct: Vec<&str> = running.iter().map(|(_, _, rev)| rev.as_str()).collect();
    distinct.sort_unstable();
    distinct.dedup();
    let detail = json!(running
        .iter()
        .map(|(s, i, r)| json!({"service": s, "instance": i, "revision": r}))
        .collect::<Vec<_>>());
    if distinct.len() > 1 {
        let who: Vec<String> = running
            .iter()
            .map(|(s, i, r)| format!("{s}/{i}@{r}"))
            .collect();
        Check::fail(
            format!("services run different builds: {}", who.join(", ")),
            detail,
        )
    } else {
        Check::pass(detail)
    }
}

//! The ingest probe: pmw-live holds the writer lock, beats, and keeps up with the chain head.

use serde_json::{json, Value};

use super::probe::probe;
use super::Check;
use crate::AppState;

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

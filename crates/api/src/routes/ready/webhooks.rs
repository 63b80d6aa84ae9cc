//! The webhook probe: deliveries due are claimed (a dispatcher runs) and the lane that queues
//! them keeps up with the push cursor.

use serde_json::{json, Value};

use super::probe::probe;
use super::Check;
use crate::AppState;

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

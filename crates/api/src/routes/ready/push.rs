//! The push leader's probes: Postgres reachable and the leader completing rounds (gating), a
//! standby waiting on the lock (reported only).

use serde_json::Value;

use super::probe::{probe, rows};
use super::Check;
use crate::AppState;

/// Postgres reachable, and the push leader's heartbeat (fresh `beat_ms`, recent `last_round_ms`).
pub async fn postgres_and_push(st: &AppState, now: i64) -> (Check, Check) {
    let max_age = st.cfg.api_ready_round_max_age_ms as i64;
    let row = match probe(st, include_str!("sql/push_leader_beat.sql"), &[]).await {
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
/// every second while it waits on the lock). Never gating: see [`super::Checks::push_standby`].
pub async fn push_standby(st: &AppState, now: i64) -> Check {
    let max_age = st.cfg.api_ready_round_max_age_ms as i64;
    let rows = match rows(st, include_str!("sql/push_standbys.sql"), &[]).await {
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

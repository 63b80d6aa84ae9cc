//! The services' own reports, never gating: pmw-stats beats, and every live instance runs the
//! same build.

use serde_json::{json, Value};

use super::probe::{probe, rows};
use super::Check;
use crate::AppState;

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
    let rows = match rows(st, include_str!("sql/revisions.sql"), &[now - fresh_ms]).await {
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
